/*
 * nodename_test.c
 *    Unit tests of src/shared/nodename.c: which child names are participants,
 *    sequence numbers as ZooKeeper prints them, wrap-aware order, names
 *    that look like nodes, and zklock's session-carrying prefix.
 *
 *    Built and run by test/t/005_unit.pl; prints TAP.
 *    No server needed: a wrap of a parent's 32-bit sequence counter cannot
 *    be produced live in reasonable time, so it is tested here on crafted
 *    names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/nodename.h"

static int	tests = 0;
static int	failures = 0;

static void
ok(int cond, const char *what)
{
	tests++;
	if (!cond)
		failures++;
	printf("%s %d - %s\n", cond ? "ok" : "not ok", tests, what);
}

#define UUID "2f1c8a3e-5b7d-4c2a-9e1f-0a1b2c3d4e5f"
#define KHEX "0123456789abcdef0123456789abcdef"

static int
parses_as(const char *name, ZkForm form, int32_t seq)
{
	ZkNodeName n;

	return zk_parse_node(name, &n) && n.form == form && n.seq == seq;
}

static int
not_a_node(const char *name)
{
	ZkNodeName n;

	return !zk_parse_node(name, &n);
}

/* Sort names (all participants) and compare with the expected order. */
static int
sorts_as(const char **names, int n, const char **expected)
{
	ZkNodeRef	refs[16];

	for (int i = 0; i < n; i++)
	{
		refs[i].name = names[i];
		if (!zk_parse_node(names[i], &refs[i].parsed))
			return 0;
	}
	zk_sort_nodes(refs, n);
	for (int i = 0; i < n; i++)
		if (strcmp(refs[i].name, expected[i]) != 0)
		{
			printf("# position %d: got %s, expected %s\n", i, refs[i].name,
				   expected[i]);
			return 0;
		}
	return 1;
}

int
main(void)
{
	/* the exact forms */
	ok(parses_as("_c_" UUID "-lock-0000000042", ZK_FORM_LOCK, 42),
	   "Curator mutex node");
	ok(parses_as("_c_" UUID "-__WRIT__0000000007", ZK_FORM_WRITE, 7),
	   "Curator write-lock node");
	ok(parses_as("_c_" UUID "-__READ__0000000008", ZK_FORM_READ, 8),
	   "Curator read-lock node");
	ok(parses_as("_c_" UUID "-lease-0000000001", ZK_FORM_LEASE, 1),
	   "Curator semaphore lease");
	ok(parses_as("_c_" UUID "-latch-0000000000", ZK_FORM_LATCH, 0),
	   "Curator LeaderLatch node");
	ok(parses_as(KHEX "__lock__0000000003", ZK_FORM_KAZOO_LOCK, 3),
	   "Kazoo Lock node");
	ok(parses_as(KHEX "__rlock__0000000004", ZK_FORM_KAZOO_READ, 4),
	   "Kazoo ReadLock node");

	/* sequence numbers as "%010d" prints them */
	ok(parses_as("_c_" UUID "-lock-2147483647", ZK_FORM_LOCK, 2147483647),
	   "largest sequence number");
	ok(parses_as("_c_" UUID "-lock--2147483648", ZK_FORM_LOCK, INT32_MIN),
	   "sequence after the wrap: -2147483648 (eleven characters)");
	ok(parses_as("_c_" UUID "-lock--000000001", ZK_FORM_LOCK, -1),
	   "sequence -1 is printed -000000001");
	ok(parses_as("_c_" UUID "-lock--999999999", ZK_FORM_LOCK, -999999999),
	   "sequence -999999999");
	ok(parses_as("_c_" UUID "-lock--1000000000", ZK_FORM_LOCK, -1000000000),
	   "sequence -1000000000");
	ok(not_a_node("_c_" UUID "-lock-2147483648"), "beyond int32 is not a sequence");
	ok(not_a_node("_c_" UUID "-lock--0000000001"), "-1 padded to eleven is not ZooKeeper's");
	ok(not_a_node("_c_" UUID "-lock--000000000"), "negative zero is not a sequence");
	ok(not_a_node("_c_" UUID "-lock-000000001"), "nine digits are not a sequence");
	ok(not_a_node("_c_" UUID "-lock-00000000012"), "eleven digits are not a sequence");

	/* near misses and foreign children */
	ok(not_a_node("x0000000000"), "a lock parent named x0000000000 is no node");
	ok(not_a_node("lock-0000000001"), "an unprotected name is no node");
	ok(not_a_node("_c_" "2F1C8A3E-5B7D-4C2A-9E1F-0A1B2C3D4E5F" "-lock-0000000001"),
	   "an uppercase UUID is not Curator's");
	ok(not_a_node("_c_" UUID "lock-0000000001"), "missing separator");
	ok(not_a_node("_c_" UUID "-mutex-0000000001"), "unknown base name");
	ok(not_a_node("_c_" UUID "-lock-"), "no sequence");
	ok(not_a_node("leases"), "the semaphore's leases child");
	ok(not_a_node("locks"), "the semaphore's locks child");
	ok(not_a_node("0123456789abcdef0123456789abcde__lock__0000000003"),
	   "Kazoo name with 31 hex digits");
	ok(not_a_node(KHEX "__lock__000000003"), "Kazoo name with a short sequence");
	ok(not_a_node(UUID), "a double-barrier member is no lock node");

	/* order: plain */
	{
		const char *in[] = {"_c_" UUID "-lock-0000000010", KHEX "__lock__0000000002",
		"_c_" UUID "-__READ__0000000005"};
		const char *want[] = {KHEX "__lock__0000000002",
		"_c_" UUID "-__READ__0000000005", "_c_" UUID "-lock-0000000010"};

		ok(sorts_as(in, 3, want), "nodes of all forms ordered by sequence");
	}

	/* order across the wrap of the parent's counter */
	{
		const char *in[] = {
			"_c_" UUID "-lock--2147483647",
			"_c_" UUID "-lock--2147480000",
			"_c_" UUID "-lock-2147483646",
			"_c_" UUID "-lock--2147483648",
			"_c_" UUID "-lock-2147483647",
			"_c_" UUID "-lock-2147000000",
		};
		const char *want[] = {
			"_c_" UUID "-lock-2147000000",
			"_c_" UUID "-lock-2147483646",
			"_c_" UUID "-lock-2147483647",
			"_c_" UUID "-lock--2147483648",
			"_c_" UUID "-lock--2147483647",
			"_c_" UUID "-lock--2147480000",
		};

		ok(sorts_as(in, 6, want),
		   "the holder before the wrap stays first; later nodes follow it");
	}
	{
		const char *in[] = {"_c_" UUID "-lock--000000001", "_c_" UUID "-lock-0000000001",
		"_c_" UUID "-lock--000000002"};
		const char *want[] = {"_c_" UUID "-lock--000000002", "_c_" UUID "-lock--000000001",
		"_c_" UUID "-lock-0000000001"};

		ok(sorts_as(in, 3, want), "and across zero, where the counter passes -1");
	}
	{
		const char *in[] = {"_c_" UUID "-lock--1000000000", "_c_" UUID "-lock--999999999"};
		const char *want[] = {"_c_" UUID "-lock--1000000000", "_c_" UUID "-lock--999999999"};

		ok(sorts_as(in, 2, want), "eleven-character and ten-character negatives in order");
	}
	ok(zk_seq_cmp(2147483647, INT32_MIN) < 0, "2147483647 comes before -2147483648");
	ok(zk_seq_cmp(INT32_MIN, 2147483647) > 0, "and not the other way round");
	ok(zk_seq_cmp(-1, 0) < 0, "-1 comes before 0");
	ok(zk_seq_cmp(5, 5) == 0, "equal sequences compare equal");
	ok(zk_seq_cmp(0, 1) < 0 && zk_seq_cmp(1, 0) > 0, "small numbers in plain order");

	/* names that could be taken for nodes (refused as lock names) */
	ok(zk_looks_like_node("a-lock-0000000001", strlen("a-lock-0000000001")),
	   "anything ending in lock-<seq> looks like a node");
	ok(zk_looks_like_node("job__lock__0000000001", strlen("job__lock__0000000001")),
	   "anything ending in __lock__<seq> looks like a Kazoo node");
	ok(zk_looks_like_node("x__READ__-000000001", strlen("x__READ__-000000001")),
	   "a wrapped sequence counts too");
	ok(zk_looks_like_node(UUID, strlen(UUID)), "a bare UUID looks like a double-barrier member");
	ok(!zk_looks_like_node("x0000000000", strlen("x0000000000")),
	   "digits without a base name do not");
	ok(!zk_looks_like_node("nightly-report", strlen("nightly-report")), "an ordinary name does not");
	ok(!zk_looks_like_node("lock-", 5), "a base name alone does not");

	/* zklock's prefix carries its session */
	{
		char		prefix[64];
		char		name[128];
		uint8_t		rnd[8] = {0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04};
		ZkNodeName	n;

		zk_make_prefix(prefix, sizeof(prefix), rnd, 0x1000abcd12345678ULL);
		ok(strlen(prefix) == ZK_PROTECTED_PREFIX_LEN, "prefix has Curator's length");
		snprintf(name, sizeof(name), "%slock-0000000001", prefix);
		ok(zk_parse_node(name, &n) && n.form == ZK_FORM_LOCK &&
		   n.session == 0x1000abcd12345678ULL,
		   "the session id is read back from a node name");
		ok(prefix[3 + 14] == '4' && strchr("89ab", prefix[3 + 19]) != NULL,
		   "the UUID has the version and variant digits of a random UUID");
		zk_make_prefix(prefix, sizeof(prefix), rnd, 0xfedcba9876543210ULL);
		snprintf(name, sizeof(name), "%slock-0000000001", prefix);
		ok(zk_parse_node(name, &n) && n.session == 0xfedcba9876543210ULL,
		   "every digit of the session id survives");
	}

	printf("1..%d\n", tests);
	return failures ? 1 : 0;
}

/*-------------------------------------------------------------------------
 *
 * nodename.c
 *	  The names of the nodes recipes create under a parent, and their order.
 *
 * This file owns two facts every recipe relies on:
 *
 *	- which children of a parent are participants, and of what: only names
 *	  of the exact forms Curator, Kazoo and zklock create count (a protected
 *	  "_c_<uuid>-" prefix, or Kazoo's 32 hex digits, then the recipe's base
 *	  name, then ZooKeeper's sequence number).  A foreign child, or a lock
 *	  parent that merely looks like a node, can never hold or block a lock.
 *
 *	- their order.  ZooKeeper numbers the children of a parent with the
 *	  parent's child version, a signed 32-bit counter printed with "%010d":
 *	  after 2,147,483,647 comes -2147483648 (printed "-2147483648"; -1 is
 *	  "-000000001").  Ordering the text, as Curator and Kazoo do, would put
 *	  every node created after the wrap before the holder.  We order by
 *	  serial-number arithmetic instead (RFC 1982): a is before b when
 *	  (int32) (b - a) > 0.  That is a total order as long as all live
 *	  children of a parent lie within 2^31 numbers of each other, i.e. as
 *	  long as no participant outlives 2^31 later creations and deletions
 *	  under its parent.
 *
 * zklock's own protected prefix carries its ZooKeeper session id in the
 * last 16 hex digits of the UUID, so that the worker can recognise its own
 * session's nodes in a listing (see worker/engine/instance.c).  Curator
 * only requires the UUID to parse, which it does.
 *
 * Plain C: test/unit/nodename_test.c tests it without a server.
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/nodename.h"

/* Node base names, as Curator and Kazoo spell them. */
static const char *const form_bases[ZK_NUM_FORMS] = {
	[ZK_FORM_NONE] = NULL,
	[ZK_FORM_LOCK] = "lock-",
	[ZK_FORM_WRITE] = "__WRIT__",
	[ZK_FORM_READ] = "__READ__",
	[ZK_FORM_LEASE] = "lease-",
	[ZK_FORM_LATCH] = "latch-",
	[ZK_FORM_KAZOO_LOCK] = "__lock__",
	[ZK_FORM_KAZOO_READ] = "__rlock__",
};

#define KAZOO_HEX_LEN 32

const char *
zk_form_base(ZkForm form)
{
	return form_bases[form];
}

static bool
is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static bool
is_digits(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/*
 * Parse a sequence number as ZooKeeper prints it ("%010d" of an int32):
 * ten digits, or a minus sign and nine digits (-1 .. -999999999), or a
 * minus sign and ten digits (-1000000000 .. -2147483648).
 */
static bool
parse_seq(const char *s, size_t len, int32_t *out)
{
	int64_t		v = 0;
	bool		neg = false;

	if (len == 11 || len == 10)
	{
		if (s[0] == '-')
		{
			neg = true;
			s++;
			len--;
		}
		else if (len == 11)
			return false;
	}
	else
		return false;
	if (!is_digits(s, len))
		return false;
	for (size_t i = 0; i < len; i++)
		v = v * 10 + (s[i] - '0');
	if (neg)
	{
		/* "%010d" pads -1 to "-000000001", never to eleven characters */
		if ((len == 9 && v == 0) || (len == 10 && v < 1000000000) ||
			v > (int64_t) 2147483648)
			return false;
		v = -v;
	}
	else if (v > 2147483647)
		return false;
	*out = (int32_t) v;
	return true;
}

/* Is s[0..len) a UUID in canonical lowercase form (8-4-4-4-12 hex)? */
bool
zk_is_uuid(const char *s, size_t len)
{
	if (len != ZK_UUID_LEN)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		if (i == 8 || i == 13 || i == 18 || i == 23)
		{
			if (s[i] != '-')
				return false;
		}
		else if (!is_hex(s[i]))
			return false;
	}
	return true;
}

/*
 * The session id zklock embeds in its UUIDs (see zk_make_prefix): the
 * digit after the version digit, the three after the variant digit and
 * the last twelve.
 */
static uint64_t
embedded_session(const char *uuid)
{
	static const int digits[] = {15, 20, 21, 22, 24, 25, 26, 27, 28, 29, 30,
	31, 32, 33, 34, 35};
	uint64_t	v = 0;

	for (int i = 0; i < 16; i++)
	{
		char		c = uuid[digits[i]];

		v = (v << 4) | (uint64_t) (c <= '9' ? c - '0' : c - 'a' + 10);
	}
	return v;
}

/*
 * Does name, from position start on, consist of the base of form followed
 * by a sequence number?
 */
static bool
match_base_seq(const char *name, size_t len, size_t start, ZkForm form,
			   int32_t *seq)
{
	const char *base = form_bases[form];
	size_t		blen = strlen(base);

	return len > start + blen &&
		memcmp(name + start, base, blen) == 0 &&
		parse_seq(name + start + blen, len - start - blen, seq);
}

/*
 * Classify a child name.  Returns true and fills *out when it is a
 * participant node of one of the forms of nodename.h.
 */
bool
zk_parse_node(const char *name, ZkNodeName *out)
{
	size_t		len = strlen(name);

	memset(out, 0, sizeof(*out));

	/* Curator's (and zklock's) protected names: _c_<uuid>-<base><seq> */
	if (len > ZK_PROTECTED_PREFIX_LEN && memcmp(name, "_c_", 3) == 0 &&
		name[ZK_PROTECTED_PREFIX_LEN - 1] == '-' &&
		zk_is_uuid(name + 3, ZK_UUID_LEN))
	{
		for (ZkForm f = ZK_FORM_LOCK; f <= ZK_FORM_LATCH; f++)
			if (match_base_seq(name, len, ZK_PROTECTED_PREFIX_LEN, f, &out->seq))
			{
				out->form = f;
				out->session = embedded_session(name + 3);
				return true;
			}
		return false;
	}

	/* Kazoo's: <uuid4().hex><base><seq> */
	if (len > KAZOO_HEX_LEN)
	{
		for (size_t i = 0; i < KAZOO_HEX_LEN; i++)
			if (!is_hex(name[i]))
				return false;
		for (ZkForm f = ZK_FORM_KAZOO_LOCK; f <= ZK_FORM_KAZOO_READ; f++)
			if (match_base_seq(name, len, KAZOO_HEX_LEN, f, &out->seq))
			{
				out->form = f;
				return true;
			}
	}
	return false;
}

/*
 * Could a name segment be taken for a node of some recipe, by zklock,
 * Curator or Kazoo?  True for anything that ends in a base name and a
 * sequence number (whatever precedes it: Curator and Kazoo match loosely)
 * and for bare UUIDs (the members of Curator's double barrier).
 */
bool
zk_looks_like_node(const char *segment, size_t len)
{
	int32_t		seq;

	if (zk_is_uuid(segment, len))
		return true;
	for (ZkForm f = ZK_FORM_LOCK; f < ZK_NUM_FORMS; f++)
	{
		size_t		blen = strlen(form_bases[f]);

		/* the sequence is the last 10 or 11 characters */
		for (size_t slen = 10; slen <= 11; slen++)
			if (len >= blen + slen &&
				match_base_seq(segment, len, len - slen - blen, f, &seq))
				return true;
	}
	return false;
}

/*
 * Serial-number comparison of two sequence numbers: negative when a comes
 * before b, positive when after, 0 when equal.
 */
int
zk_seq_cmp(int32_t a, int32_t b)
{
	int32_t		d = (int32_t) ((uint32_t) b - (uint32_t) a);

	if (d == INT32_MIN)			/* exactly 2^31 apart: undefined; be stable */
		return a < b ? -1 : 1;
	return d > 0 ? -1 : (d < 0 ? 1 : 0);
}

static int
node_ref_cmp(const void *a, const void *b)
{
	const ZkNodeRef *x = a;
	const ZkNodeRef *y = b;

	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	return strcmp(x->name, y->name);
}

/*
 * Sort participant nodes into recipe order, in place.  The earliest node
 * is found first; the others are ordered by their distance from it, which
 * is the serial order within a 2^31 window and a transitive order always
 * (qsort needs one).  Ties, impossible within one parent, by name.
 */
void
zk_sort_nodes(ZkNodeRef *nodes, int n)
{
	int			first = 0;

	if (n <= 0)
		return;
	for (int i = 1; i < n; i++)
		if (zk_seq_cmp(nodes[i].parsed.seq, nodes[first].parsed.seq) < 0)
			first = i;
	for (int i = 0; i < n; i++)
		nodes[i].order = (uint32_t) nodes[i].parsed.seq -
			(uint32_t) nodes[first].parsed.seq;
	qsort(nodes, n, sizeof(ZkNodeRef), node_ref_cmp);
}

/*
 * Write zklock's protected prefix "_c_<uuid>-" into buf.  The UUID has the
 * shape of a random (version 4, RFC 4122 variant) UUID, as Curator's: 58
 * random bits and, in the other 64, the session id: its first hex digit
 * after the version digit "4", the next three after the variant digit,
 * the last twelve at the end.
 */
void
zk_make_prefix(char *buf, size_t size, const uint8_t random[8],
			   uint64_t session)
{
	snprintf(buf, size,
			 "_c_%02x%02x%02x%02x-%02x%02x-4%01x%02x-%01x%03x-%012llx-",
			 random[0], random[1], random[2], random[3],
			 random[4], random[5],
			 (unsigned int) (session >> 60), random[6],
			 0x8 | (random[7] & 0x3),
			 (unsigned int) ((session >> 48) & 0xfff),
			 (unsigned long long) (session & 0xffffffffffffULL));
}

/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  The zklock.* settings: their variables and their definitions.
 *
 * Both sides read the variables (declared in zklock.h); _PG_init (zklock.c)
 * calls zk_define_settings() to define them.  Only zklock.connect_timeout
 * is defined when the library is loaded other than through
 * shared_preload_libraries; every other setting only then.  The check
 * hooks of zklock.root and zklock.leader_groups apply the name rules of
 * naming.c; zklock.acl_identities is parsed here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/varlena.h"

#include "shared/pg_compat.h"
#include "shared/zklock.h"

char	   *zklock_hosts = NULL;
char	   *zklock_root = NULL;
char	   *zklock_auth_file = NULL;
char	   *zklock_acl_identities = NULL;
int			zklock_session_timeout = 10000;
int			zklock_connect_timeout = 5000;
int			zklock_max_locks = 1024;
bool		zklock_local_handoff = true;
int			zklock_handoff_limit = 16;
int			zklock_handoff_time = 50;
int			zklock_retain_time = 0;
int			zklock_write_batch = 64;
char	   *zklock_leader_groups = NULL;
int			zklock_claim_retention = 7 * 24 * 3600;
bool		zklock_session_locks = true;
char	   *zklock_allowed_names = NULL;
bool		zklock_trace_hops = false;

/* Length of a digest identity's hash: base64 of a SHA-1. */
#define DIGEST_HASH_LEN		28

static const ZkAclIdentities *acl_identities = NULL;

/* zklock.acl_identities, parsed; NULL when empty. */
const ZkAclIdentities *
zk_acl_identities(void)
{
	return acl_identities;
}

/* Is s the hash of a digest identity (base64 of 20 bytes)? */
static bool
is_digest_hash(const char *s)
{
	if (strlen(s) != DIGEST_HASH_LEN || s[DIGEST_HASH_LEN - 1] != '=')
		return false;
	for (int i = 0; i < DIGEST_HASH_LEN - 1; i++)
		if (!isalnum((unsigned char) s[i]) && s[i] != '+' && s[i] != '/')
			return false;
	return true;
}

/*
 * Check one identity of zklock.acl_identities, setting the error detail and
 * hint when it is not one.
 */
static bool
check_identity(const char *item)
{
	const char *colon;

	if (strncmp(item, "x509:", 5) == 0)
	{
		if (strchr(item + 5, '=') == NULL)
		{
			GUC_check_errdetail("\"%s\" is not an X.509 distinguished name such as \"CN=db1,O=Example\".",
								item + 5);
			return false;
		}
		return true;
	}
	if (strncmp(item, "digest:", 7) == 0)
	{
		colon = strchr(item + 7, ':');
		if (colon == NULL || colon == item + 7 || !is_digest_hash(colon + 1))
		{
			GUC_check_errdetail("A digest identity is \"digest:user:hash\", the hash being the base64 of the SHA-1 of \"user:password\", not the password.");
			GUC_check_errhint("Compute the hash with: printf %%s 'user:password' | openssl dgst -binary -sha1 | openssl base64");
			return false;
		}
		return true;
	}
	GUC_check_errdetail("The identity \"%s\" is neither \"x509:DN\" nor \"digest:user:hash\".",
						item);
	GUC_check_errhint("Separate the identities with commas and put each x509 identity in double quotes, since its DN contains commas: '\"x509:CN=db1,O=Example\", \"x509:CN=db2,O=Example\"'.");
	return false;
}

/*
 * Check hook of zklock.acl_identities: a comma-separated list of
 * identities, each "x509:DN" (in double quotes, as a DN contains commas)
 * or "digest:user:hash".  The parsed list (ZkAclIdentities followed by its
 * strings, in one malloc'd block) becomes the extra.
 */
static bool
check_acl_identities(char **newval, void **extra, GucSource source)
{
	char	   *raw = pstrdup(*newval);
	List	   *items;
	ListCell   *lc;
	Size		size;
	ZkAclIdentities *result;
	char	   *strings;
	int			i = 0;

	if (!SplitGUCList(raw, ',', &items))
	{
		GUC_check_errdetail("The list has unbalanced double quotes.");
		pfree(raw);
		return false;
	}
	size = offsetof(ZkAclIdentities, ids) + sizeof(ZkAclIdentity) * list_length(items);
	foreach(lc, items)
	{
		const char *item = lfirst(lc);

		if (!check_identity(item))
		{
			list_free(items);
			pfree(raw);
			return false;
		}
		size += strlen(item) + 2;
	}

	result = ZkGucMalloc(size);
	if (result == NULL)
	{
		list_free(items);
		pfree(raw);
		return false;
	}
	result->count = list_length(items);
	strings = (char *) &result->ids[result->count];
	foreach(lc, items)
	{
		const char *item = lfirst(lc);
		const char *colon = strchr(item, ':');
		int			schemelen = colon - item;

		memcpy(strings, item, schemelen);
		strings[schemelen] = '\0';
		result->ids[i].scheme = strings;
		strings += schemelen + 1;
		strcpy(strings, colon + 1);
		result->ids[i].id = strings;
		strings += strlen(colon + 1) + 1;
		i++;
	}
	list_free(items);
	pfree(raw);
	*extra = result;
	return true;
}

static void
assign_acl_identities(const char *newval, void *extra)
{
	const ZkAclIdentities *ids = extra;

	acl_identities = ids != NULL && ids->count > 0 ? ids : NULL;
}

/* Define the zklock.* settings (from _PG_init). */
void
zk_define_settings(void)
{
	DefineCustomIntVariable("zklock.connect_timeout",
							"How long a request waits for a usable ZooKeeper session before failing.",
							NULL,
							&zklock_connect_timeout,
							5000, 1, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomStringVariable("zklock.hosts",
							   "ZooKeeper connect string (host:port pairs, comma separated).",
							   "Takes effect for the next session the worker opens.",
							   &zklock_hosts,
							   "127.0.0.1:2181",
							   PGC_SIGHUP,
							   0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("zklock.root",
							   "ZooKeeper path under which zklock keeps its locks.",
							   "A lock named N is the znode <root>/N.",
							   &zklock_root,
							   "/zklock",
							   PGC_POSTMASTER,
							   0,
							   zk_check_root, NULL, NULL);
	DefineCustomStringVariable("zklock.auth_file",
							   "File holding the worker's ZooKeeper digest credentials (user:password).",
							   "When set, zklock's nodes can be changed by this identity only; everyone may read them. "
							   "The file must be owned by the server's user with permissions 0600 or less; "
							   "a relative path is relative to the data directory.",
							   &zklock_auth_file,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("zklock.acl_identities",
							   "ZooKeeper identities given all rights on the nodes zklock creates (the fleet).",
							   "A comma-separated list of \"x509:DN\" (in double quotes) and \"digest:user:hash\" identities: "
							   "every instance of the fleet and every Curator or Kazoo peer.  When set (or zklock.auth_file is), "
							   "the worker's own identities get all rights too and everyone else only READ.",
							   &zklock_acl_identities,
							   "",
							   PGC_SIGHUP,
							   GUC_LIST_INPUT | GUC_SUPERUSER_ONLY,
							   check_acl_identities, assign_acl_identities, NULL);
	DefineCustomIntVariable("zklock.session_timeout",
							"ZooKeeper session timeout requested by the worker.",
							"The server clamps it to 2 to 20 times its tickTime.",
							&zklock_session_timeout,
							10000, 1000, 600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("zklock.max_locks",
							"Number of locks and pending requests the instance can have at once.",
							"Each backend's holding or wait of one lock takes one.",
							&zklock_max_locks,
							1024, 16, ZK_MAX_LOCKS_LIMIT,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("zklock.local_handoff",
							 "Hands a lock on between the instance's backends without going back to ZooKeeper.",
							 "Takes effect for locks the instance starts to wait for or hold after the change.",
							 &zklock_local_handoff,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("zklock.handoff_limit",
							"Local hand-offs of a lock while a client elsewhere waits for it.",
							"After that many grants within the instance while another instance or client waits, the instance gives the lock back to ZooKeeper.",
							&zklock_handoff_limit,
							16, 0, 1000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("zklock.handoff_time",
							"How long a lock is handed on within the instance while a client elsewhere waits for it.",
							NULL,
							&zklock_handoff_time,
							50, 0, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("zklock.retain_time",
							"How long the instance keeps a released lock's node in case one of its backends asks again.",
							"While it is kept, a release has returned but clients elsewhere still find the lock taken (it is given up at once when one of them queues for it).  0, the default, deletes the node before the release returns.",
							&zklock_retain_time,
							0, 0, 10000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("zklock.write_batch",
							"Most creates and deletes of lock nodes the worker sends to ZooKeeper in one multi transaction.",
							"The acquires and releases of all backends that reach the worker together share one ZooKeeper transaction.  1 sends each on its own.",
							&zklock_write_batch,
							64, 1, 1000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
	DefineCustomStringVariable("zklock.leader_groups",
							   "Leader groups the instance takes part in (comma-separated names).",
							   "The worker joins a Curator LeaderLatch election on <zklock.root>/<group> for each; zk_is_leader(group) says whether the instance leads.",
							   &zklock_leader_groups,
							   "",
							   PGC_SIGHUP,
							   GUC_LIST_INPUT,
							   zk_check_groups, NULL, NULL);
	DefineCustomIntVariable("zklock.claim_retention",
							"How long final job claims are kept in ZooKeeper.",
							"The worker deletes final claims whose slot and creation are both older, under the jobs this instance has claimed since its worker started; 0 keeps them forever.",
							&zklock_claim_retention,
							7 * 24 * 3600, 0, INT_MAX / 1000,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("zklock.session_locks",
							 "Allows session-scope acquisitions (zk_lock_acquire, zk_lock_try, ...).",
							 "Turn it off where a connection pooler in transaction mode shares server sessions between clients: "
							 "a session-scope holding outlives its transaction and would pass to the next client.  "
							 "The *_xact functions are not affected.",
							 &zklock_session_locks,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomStringVariable("zklock.allowed_names",
							   "Names the role may use in zklock's functions (comma-separated patterns; * matches any characters).",
							   "Set per role or database with ALTER ROLE ... SET; a name outside every pattern is refused before anything is sent to ZooKeeper.  Superusers may use every name.",
							   &zklock_allowed_names,
							   "*",
							   PGC_SUSET,
							   GUC_LIST_INPUT,
							   zk_check_patterns, NULL, NULL);
	DefineCustomBoolVariable("zklock.trace_hops",
							 "Logs where the time of each request and release of the session went, step by step.",
							 "One LOG line per hop with the microseconds between its steps (see docs/benchmark.md); for benchmarks, not for production.",
							 &zklock_trace_hops,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	MarkGUCPrefixReserved("zklock");
}

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
 * naming.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"

#include "shared/zklock.h"

char	   *zklock_hosts = NULL;
char	   *zklock_root = NULL;
char	   *zklock_auth_file = NULL;
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

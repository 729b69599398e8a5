/*-------------------------------------------------------------------------
 *
 * zklock.c
 *	  Module entry point: settings, shared-memory hooks, the worker.
 *
 * This file owns what happens when the library is loaded: the zklock.*
 * settings, the shared-memory hooks (sizing happens in shmem_request_hook,
 * where MaxBackends is known) and the registration of the background
 * worker.  zklock only works when preloaded through
 * shared_preload_libraries; loaded any other way, every function refuses
 * with SQLSTATE 55000 and says how to fix it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/guc.h"

#include "holdings.h"
#include "protocol.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

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
char	   *zklock_leader_groups = NULL;
int			zklock_claim_retention = 7 * 24 * 3600;
bool		zklock_session_locks = true;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static ProcessUtility_hook_type prev_process_utility_hook = NULL;

static void
zklock_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	zk_shmem_request();
}

static void
zklock_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	zk_shmem_startup();
}

/*
 * DISCARD ALL releases every session-scope zklock holding, as it releases
 * advisory locks, so that a connection pooler never hands a zklock lock
 * (or a double barrier membership) to its next client.
 */
static void
zklock_process_utility(PlannedStmt *pstmt, const char *queryString,
					   bool readOnlyTree, ProcessUtilityContext context,
					   ParamListInfo params, QueryEnvironment *queryEnv,
					   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;

	if (prev_process_utility_hook)
		prev_process_utility_hook(pstmt, queryString, readOnlyTree, context,
								  params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
	if (IsA(stmt, DiscardStmt) && ((DiscardStmt *) stmt)->target == DISCARD_ALL)
	{
		(void) zk_hold_release_all();
		zk_hold_barrier_drop_all();
	}
}

/*
 * Raise an ERROR unless the library was preloaded (and so has its shared
 * memory and its worker).
 */
void
zk_check_preloaded(void)
{
	if (zk_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock must be loaded via shared_preload_libraries"),
				 errhint("Add zklock to shared_preload_libraries in postgresql.conf and restart the server.")));
}

const char *
zk_kind_name(ZkKind kind)
{
	switch (kind)
	{
		case ZK_KIND_LOCK:
			return "lock";
		case ZK_KIND_READ:
			return "read lock";
		case ZK_KIND_WRITE:
			return "write lock";
		case ZK_KIND_SEMAPHORE:
			return "semaphore";
		case ZK_KIND_SEMAPHORE_ENTRY:
			return "semaphore entry lock";
		case ZK_KIND_JOB_CLAIM:
			return "job claim";
		case ZK_KIND_BARRIER_SET:
		case ZK_KIND_BARRIER_REMOVE:
		case ZK_KIND_BARRIER_WAIT:
			return "barrier";
		case ZK_KIND_DOUBLE_BARRIER:
			return "double barrier";
		case ZK_KIND_REVOKE:
			return "revocation";
		case ZK_KIND_LIST:
			return "listing";
		default:
			break;
	}
	return "?";
}

/* What a request of this kind does, for "could not %s": a verb phrase. */
const char *
zk_kind_verb(ZkKind kind)
{
	switch (kind)
	{
		case ZK_KIND_LOCK:
			return "acquire lock";
		case ZK_KIND_READ:
			return "acquire read lock";
		case ZK_KIND_WRITE:
			return "acquire write lock";
		case ZK_KIND_SEMAPHORE:
			return "acquire a lease of semaphore";
		case ZK_KIND_SEMAPHORE_ENTRY:
			return "enter semaphore";
		case ZK_KIND_JOB_CLAIM:
			return "claim job";
		case ZK_KIND_BARRIER_SET:
			return "set barrier";
		case ZK_KIND_BARRIER_REMOVE:
			return "remove barrier";
		case ZK_KIND_BARRIER_WAIT:
			return "wait on barrier";
		case ZK_KIND_DOUBLE_BARRIER:
			return "enter double barrier";
		case ZK_KIND_REVOKE:
			return "revoke lock";
		case ZK_KIND_LIST:
			return "list";
		default:
			break;
	}
	return "carry out a request for";
}

void
_PG_init(void)
{
	BackgroundWorker worker;

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
	MarkGUCPrefixReserved("zklock");

	prev_process_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = zklock_process_utility;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = zklock_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = zklock_shmem_startup;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = 1;
	strcpy(worker.bgw_library_name, "zklock");
	strcpy(worker.bgw_function_name, "zk_worker_main");
	strcpy(worker.bgw_name, "zklock worker");
	strcpy(worker.bgw_type, "zklock worker");
	RegisterBackgroundWorker(&worker);
}

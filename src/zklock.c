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
char	   *zklock_auth = NULL;
int			zklock_session_timeout = 10000;
int			zklock_connect_timeout = 5000;
int			zklock_max_locks = 1024;
bool		zklock_local_handoff = true;
int			zklock_handoff_limit = 16;
int			zklock_handoff_time = 50;
int			zklock_retain_time = 0;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static emit_log_hook_type prev_emit_log_hook = NULL;
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
 * On reload PostgreSQL logs every changed setting with its new value; for
 * zklock.auth that value is a password.  Keep the line, drop the value.
 */
static void
zklock_emit_log(ErrorData *edata)
{
	if (edata->message_id != NULL &&
		strcmp(edata->message_id, "parameter \"%s\" changed to \"%s\"") == 0 &&
		edata->message != NULL && strstr(edata->message, "\"zklock.auth\"") != NULL)
		edata->message = pstrdup("parameter \"zklock.auth\" changed");
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

/*
 * DISCARD ALL releases every session-scope zklock holding, as it releases
 * advisory locks, so that a connection pooler never hands a zklock lock
 * to its next client.
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
		(void) zk_hold_release_all();
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
	DefineCustomStringVariable("zklock.auth",
							   "ZooKeeper digest credentials (user:password) of the worker.",
							   "When set, zklock's nodes can be changed by this identity only; everyone may read them.",
							   &zklock_auth,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
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
							"It gives the node up at once when a client elsewhere queues for the lock; 0 gives it up at release.",
							&zklock_retain_time,
							0, 0, 10000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	MarkGUCPrefixReserved("zklock");

	prev_process_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = zklock_process_utility;
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = zklock_emit_log;

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

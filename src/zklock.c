/*-------------------------------------------------------------------------
 *
 * zklock.c
 *	  Module entry point: settings, shared-memory hooks, the worker.
 *
 * This file owns what happens when the library is loaded, and only that:
 * it wires the parts together and nothing calls back into it.  _PG_init
 * defines the zklock.* settings (shared/settings.c), installs the
 * shared-memory hooks (sizing happens in shmem_request_hook, where
 * MaxBackends is known; shared/protocol.c) and the process utility hook
 * (DISCARD ALL, backend/holdings.c), and registers the background worker
 * (worker/worker.c).  zklock only works when preloaded through
 * shared_preload_libraries; loaded any other way, every function refuses
 * with SQLSTATE 55000 and says how to fix it (backend/args.c).
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

#include "backend/holdings.h"
#include "shared/protocol.h"
#include "shared/zklock.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

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

void
_PG_init(void)
{
	BackgroundWorker worker;

	zk_define_settings();
	if (!process_shared_preload_libraries_in_progress)
		return;

	zk_holdings_register_callbacks();

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

/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The zklock background worker: one per instance, owner of the
 *	  ZooKeeper session.
 *
 * This file owns the worker process: its signals, its wait loop and the
 * hand-off of queued requests to the engine.  One iteration of the loop:
 * wait on the latch, the ZooKeeper socket and the client's timeout (in
 * zk_session_wait, which also lets the client run its completions and
 * watchers), handle interrupts and configuration reloads, then advance
 * every entry backends have queued.
 *
 * The worker needs no database connection, so it starts with the
 * postmaster and runs on a hot standby too.  On exit it closes its session,
 * so ZooKeeper deletes all of its nodes at once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "protocol.h"
#include "worker.h"

/* on_shmem_exit callback: leave no session and no dangling latch behind. */
static void
worker_exit(int code, Datum arg)
{
	zk_session_stop();
	zk_set_session_state(ZKS_CONNECTING, 0, 0, NULL);
	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	zk_shared->worker_latch = NULL;
	zk_shared->worker_pid = 0;
	LWLockRelease(zk_shared->lock);
}

void
zk_worker_main(Datum arg)
{
	int			batch_size;
	int		   *batch;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	zk_engine_init();
	batch_size = zk_shared->num_entries;
	batch = MemoryContextAlloc(TopMemoryContext, sizeof(int) * batch_size);

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	zk_shared->worker_latch = MyLatch;
	zk_shared->worker_pid = MyProcPid;
	LWLockRelease(zk_shared->lock);
	on_shmem_exit(worker_exit, (Datum) 0);

	/*
	 * Entries left by a previous incarnation of the worker belong to a
	 * session we do not have: treat them as lost.
	 */
	zk_engine_session_lost("the zklock worker restarted");

	ereport(LOG,
			(errmsg("zklock worker started for ZooKeeper at \"%s\", root \"%s\"",
					zklock_hosts, zklock_root)));
	zk_session_start();

	for (;;)
	{
		int			n;

		zk_session_wait();
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			zk_session_reload();
		}

		n = zk_take_queue(batch, batch_size);
		for (int i = 0; i < n; i++)
			zk_engine_advance(batch[i]);
	}
}

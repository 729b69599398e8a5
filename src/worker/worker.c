/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The zklock background worker: one per instance, owner of the
 *	  ZooKeeper session.
 *
 * This file owns the worker process: its signals, its wait loop and the
 * hand-off of queued requests to the engine.  One iteration of the loop:
 * wait on the latch, the ZooKeeper socket and the client's timeout (in
 * zk_session_wait, which also lets the client read every reply already
 * waiting and run their completions and watchers), handle interrupts and
 * configuration reloads, then run one turn of the engine (zk_engine_run)
 * on the entries backends have queued and the replies.  What the engine
 * sends in a turn leaves together when the turn ends (zk_session_cork);
 * what the socket cannot take at once the client keeps, and the next wait
 * includes the socket becoming writable, so it is flushed as soon as it
 * can be.
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

#include "shared/protocol.h"
#include "worker/engine/engine.h"
#include "worker/session.h"
#include "worker/worker.h"

/* Tell the engine what happened to the session. */
static void
session_events(int events, const char *why)
{
	if (events & ZK_EVENT_LOST)
		zk_engine_session_lost(why);
	if (events & ZK_EVENT_CONNECTED)
		zk_engine_connected();
}

/* on_shmem_exit callback: leave no session and no dangling latch behind. */
static void
worker_exit(int code, Datum arg)
{
	int64		sid = zk_session_id();

	/* no backend vouches for a node of this session from now on */
	zk_set_session_state(ZKS_CONNECTING, 0, 0, NULL);
	/* an ERROR may have left the socket corked: the close must go out now */
	zk_session_cork(false);
	zk_defer_wakes(false);
	zk_engine_exit();
	if (zk_session_stop())
		ereport(LOG,
				(errmsg("zklock worker closed ZooKeeper session 0x%llx",
						(unsigned long long) sid),
				 errdetail("ZooKeeper deletes the session's ephemeral nodes (its locks, leases and latches) with it.")));
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
	zk_register_wait_events();

	/* takes over (as lost) what a previous incarnation left */
	zk_engine_init();
	zk_session_disconnected_hook = zk_engine_drop_watches;
	batch_size = zk_shared->num_entries;
	batch = MemoryContextAlloc(TopMemoryContext, sizeof(int) * batch_size);

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	zk_shared->worker_latch = MyLatch;
	zk_shared->worker_pid = MyProcPid;
	LWLockRelease(zk_shared->lock);
	on_shmem_exit(worker_exit, (Datum) 0);

	ereport(LOG,
			(errmsg("zklock worker %s started for ZooKeeper at \"%s\", root \"%s\"",
					ZKLOCK_VERSION, zklock_hosts, zklock_root)));
	zk_session_start();

	/* whatever a turn allocates goes when the turn ends */
	MemoryContextSwitchTo(zk_turn_context);
	for (;;)
	{
		int			n;
		int			events;
		const char *why;

		events = zk_session_wait(zk_engine_timeout(), &why);
		ResetLatch(MyLatch);
		session_events(events, why);
		CHECK_FOR_INTERRUPTS();

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			events = zk_session_reload(&why);
			session_events(events, why);
			zk_engine_reload();
		}

		/*
		 * What the engine sends in this turn leaves together: it corks the
		 * socket when it hands the turn's first call to the client
		 * (engine/calls.c), and the turn ends with the uncork (session.c).
		 */
		n = zk_take_queue(batch, batch_size);
		zk_defer_wakes(true);
		zk_engine_run(batch, n);
		zk_session_cork(false);
		if (unlikely(zk_hop_tracing))
			zk_engine_hop_sent(batch, n);
		/* the backends answered in the turn run once it is over (reply.c) */
		zk_defer_wakes(false);
		MemoryContextReset(zk_turn_context);
	}
}

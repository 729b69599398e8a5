/*-------------------------------------------------------------------------
 *
 * wait_events.c
 *	  What a zklock process shows in pg_stat_activity while it waits.
 *
 * On PostgreSQL 17 and later each wait has a name of its own under
 * wait_event_type 'Extension' (WaitEventExtensionNew): ZklockLock,
 * ZklockReadLock, ZklockWriteLock, ZklockSemaphore, ZklockBarrier,
 * ZklockDoubleBarrier, ZklockJobClaim, ZklockRevoke,
 * ZklockList, ZklockSharedCount for a request of that kind, ZklockRelease
 * for a release waiting for its nodes to be deleted, and ZklockWorkerMain
 * for the worker's loop.  PostgreSQL 15 and 16 show every one of them as
 * wait_event 'Extension'.
 *
 * A process registers the names once, before its first wait
 * (zk_register_wait_events, which may raise an ERROR); zk_wait_event()
 * only looks them up and never fails, so transaction callbacks may wait
 * with it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/wait_event.h"

#include "shared/zklock.h"

#if PG_VERSION_NUM >= 170000
static const char *const wait_event_names[ZK_NUM_WAIT_EVENTS] = {
	[ZK_WAIT_LOCK] = "ZklockLock",
	[ZK_WAIT_READ] = "ZklockReadLock",
	[ZK_WAIT_WRITE] = "ZklockWriteLock",
	[ZK_WAIT_SEMAPHORE] = "ZklockSemaphore",
	[ZK_WAIT_BARRIER] = "ZklockBarrier",
	[ZK_WAIT_DOUBLE_BARRIER] = "ZklockDoubleBarrier",
	[ZK_WAIT_JOB_CLAIM] = "ZklockJobClaim",
	[ZK_WAIT_REVOKE] = "ZklockRevoke",
	[ZK_WAIT_LIST] = "ZklockList",
	[ZK_WAIT_SHARED_COUNT] = "ZklockSharedCount",
	[ZK_WAIT_RELEASE] = "ZklockRelease",
	[ZK_WAIT_WORKER] = "ZklockWorkerMain",
};
#endif

/* this process's wait_event_info per event; 0 until registered */
static uint32 wait_event_info[ZK_NUM_WAIT_EVENTS];

/*
 * Register zklock's wait events in this process, once (PostgreSQL 17 and
 * later; nothing to do before).  Needs shared memory; may raise an ERROR.
 */
void
zk_register_wait_events(void)
{
#if PG_VERSION_NUM >= 170000
	if (wait_event_info[0] != 0)
		return;
	for (int i = ZK_NUM_WAIT_EVENTS - 1; i >= 0; i--)
		wait_event_info[i] = WaitEventExtensionNew(wait_event_names[i]);
#endif
}

/* The wait_event_info of a wait: its own name once registered. */
uint32
zk_wait_event(ZkWaitEvent which)
{
	Assert(which >= 0 && which < ZK_NUM_WAIT_EVENTS);
	return wait_event_info[which] != 0 ? wait_event_info[which] :
		PG_WAIT_EXTENSION;
}

/* The wait of a backend waiting for a request of this kind. */
ZkWaitEvent
zk_kind_wait_event(ZkKind kind)
{
#define PG_ZK_KIND(symbol, name, label, suffix, wait, driver, failed) \
	[symbol] = wait,

	static const ZkWaitEvent waits[ZK_NUM_KINDS] = {
#include "shared/kindlist.h"
	};

#undef PG_ZK_KIND

	Assert(kind >= 0 && kind < ZK_NUM_KINDS);
	return waits[kind];
}

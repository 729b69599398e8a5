/*-------------------------------------------------------------------------
 *
 * protocol.c
 *	  The shared-memory request protocol between backends and the worker.
 *
 * This file owns the pool of ZkEntry structs in shared memory and every
 * transition of an entry that crosses a process boundary:
 *
 *	backend: zk_request()  takes a free entry, fills it in, queues it
 *			 zk_wait()	   sleeps on its latch until the worker decided, the
 *						   caller's deadline passed or an interrupt came
 *			 zk_give_up()  hands the entry back (release, cancel, exit)
 *	worker:  zk_take_queue(), zk_set_outcome(), zk_free_entry()
 *
 * The rule that keeps ZooKeeper clean: once a backend has given an entry up
 * it never looks at it again, and only the worker frees it, after its znode
 * is gone.  So whatever ends a wait, no node is left behind and no given-up
 * entry can turn into a holder.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "protocol.h"

ZkShared   *zk_shared = NULL;

static bool exit_hook_registered = false;

static Size
zk_shmem_size(void)
{
	return add_size(offsetof(ZkShared, entries),
					mul_size(zklock_max_locks, sizeof(ZkEntry)));
}

/* shmem_request_hook part: reserve our memory and our LWLock. */
void
zk_shmem_request(void)
{
	RequestAddinShmemSpace(zk_shmem_size());
	RequestNamedLWLockTranche("zklock", 1);
}

/* shmem_startup_hook part: create or attach to our shared state. */
void
zk_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	zk_shared = ShmemInitStruct("zklock", zk_shmem_size(), &found);
	if (!found)
	{
		memset(zk_shared, 0, zk_shmem_size());
		zk_shared->lock = &(GetNamedLWLockTranche("zklock"))->lock;
		zk_shared->session_state = ZKS_CONNECTING;
		pg_atomic_init_u64(&zk_shared->confirmed_at, 0);
		pg_atomic_init_u64(&zk_shared->n_requests, 0);
		pg_atomic_init_u64(&zk_shared->n_grants, 0);
		pg_atomic_init_u64(&zk_shared->n_timeouts, 0);
		pg_atomic_init_u64(&zk_shared->n_reconnects, 0);
		pg_atomic_init_u64(&zk_shared->n_session_losses, 0);
		dlist_init(&zk_shared->free_entries);
		ConditionVariableInit(&zk_shared->entry_freed);
		dlist_init(&zk_shared->queue);
		zk_shared->num_entries = zklock_max_locks;
		for (int i = 0; i < zklock_max_locks; i++)
			dlist_push_tail(&zk_shared->free_entries,
							&zk_shared->entries[i].link);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Wake the worker, if there is one. */
void
zk_wake_worker(void)
{
	Latch	   *latch = zk_shared->worker_latch;

	if (latch)
		SetLatch(latch);
}

/* Put an entry on the worker's queue; caller holds the lock exclusively. */
static void
zk_queue_locked(ZkEntry *e)
{
	if (!e->queued)
	{
		dlist_push_tail(&zk_shared->queue, &e->link);
		e->queued = true;
	}
}

/*
 * Hand an entry to the worker for clean-up; caller holds the lock
 * exclusively.
 */
static void
zk_release_locked(ZkEntry *e)
{
	e->released = true;
	zk_queue_locked(e);
}

/*
 * before_shmem_exit callback: give up every entry this backend still owns,
 * whatever state its request or holding is in.  Runs on normal exit, FATAL
 * and pg_terminate_backend, also in the middle of a wait.
 */
static void
zk_backend_exit(int code, Datum arg)
{
	bool		any = false;

	if (zk_shared == NULL)
		return;
	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < zk_shared->num_entries; i++)
	{
		ZkEntry    *e = ZK_ENTRY(i);

		if (e->state != ZKE_FREE && !e->released && e->owner_pid == MyProcPid)
		{
			zk_release_locked(e);
			any = true;
		}
	}
	LWLockRelease(zk_shared->lock);
	if (any)
		zk_wake_worker();
}

/*
 * Ask the worker for a kind of lock on a name.  Returns the entry's id and,
 * in *generation, its generation, which the caller passes to every later
 * call about it.  Raises an ERROR naming zklock.max_locks when the pool is
 * exhausted.
 */
int
zk_request(ZkKind kind, const char *name, bool nowait, int32 max_leases,
		   const char *skip_node, uint32 *generation)
{
	ZkEntry    *e;
	TimestampTz now = GetCurrentTimestamp();

	if (!exit_hook_registered)
	{
		before_shmem_exit(zk_backend_exit, (Datum) 0);
		exit_hook_registered = true;
	}

	/*
	 * When the pool is exhausted only because entries given up a moment ago
	 * still wait for their node's deletion, wait for those (no longer than
	 * zklock.connect_timeout); otherwise the limit is reached.
	 */
	for (;;)
	{
		bool		releasing = false;

		LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
		if (!dlist_is_empty(&zk_shared->free_entries))
			break;
		for (int i = 0; i < zk_shared->num_entries && !releasing; i++)
			releasing = ZK_ENTRY(i)->released;
		LWLockRelease(zk_shared->lock);

		if (!releasing ||
			TimestampDifferenceExceeds(now, GetCurrentTimestamp(),
									   zklock_connect_timeout))
		{
			ConditionVariableCancelSleep();
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("too many zklock locks and requests in this instance"),
					 errhint("Increase zklock.max_locks (currently %d).",
							 zklock_max_locks)));
		}
		(void) ConditionVariableTimedSleep(&zk_shared->entry_freed, 100,
										   PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	e = dlist_container(ZkEntry, link,
						dlist_pop_head_node(&zk_shared->free_entries));
	e->generation++;
	e->state = ZKE_PENDING;
	e->released = false;
	e->owner_procno = MyProc->pgprocno;
	e->owner_pid = MyProcPid;
	e->database = MyDatabaseId;
	e->kind = kind;
	e->nowait = nowait;
	e->max_leases = max_leases;
	strlcpy(e->skip_node, skip_node ? skip_node : "", sizeof(e->skip_node));
	e->requested_at = now;
	e->connect_timeout = zklock_connect_timeout;
	e->connect_deadline = TimestampTzPlusMilliseconds(now, zklock_connect_timeout);
	strlcpy(e->name, name, sizeof(e->name));
	e->token = 0;
	e->granted_at = 0;
	e->sqlerrcode = 0;
	e->errmsg[0] = '\0';
	e->node[0] = '\0';
	e->waiting_on[0] = '\0';
	e->session_count = 0;
	e->xact_count = 0;
	*generation = e->generation;
	zk_queue_locked(e);
	LWLockRelease(zk_shared->lock);

	pg_atomic_fetch_add_u64(&zk_shared->n_requests, 1);
	zk_wake_worker();
	return e - zk_shared->entries;
}

/*
 * Hand an entry back to the worker: the caller no longer holds or wants it.
 * Never throws (it is called from abort callbacks and exit hooks) and never
 * waits; the worker deletes the node and frees the entry.
 */
void
zk_give_up(int id, uint32 generation)
{
	ZkEntry    *e = ZK_ENTRY(id);

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	if (e->generation == generation && e->state != ZKE_FREE && !e->released)
		zk_release_locked(e);
	LWLockRelease(zk_shared->lock);
	zk_wake_worker();
}

/*
 * Give up a still-pending request atomically with respect to the worker's
 * grant: returns the state it had, which is HELD if the grant came first
 * (the caller then owns the holding).
 */
static ZkEntryState
zk_cancel(ZkEntry *e)
{
	ZkEntryState state;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	state = e->state;
	if (state != ZKE_HELD)
		zk_release_locked(e);
	LWLockRelease(zk_shared->lock);
	zk_wake_worker();
	return state;
}

static long
zk_ms_until(TimestampTz now, TimestampTz t)
{
	return t <= now ? 0 : (long) ((t - now + 999) / 1000);
}

/*
 * Wait for the outcome of a request, like a core lock wait: on the latch,
 * shown as wait_event_type 'Extension', with lock_timeout, statement_timeout
 * and cancel working as they do for core locks.
 *
 * Returns ZKE_HELD when granted (the caller owns the entry), otherwise the
 * entry has been given up already: ZKE_WOULD_BLOCK for a no-wait request that
 * found the lock taken, ZKE_PENDING when the deadline (0: none) passed.
 * Errors reported by the worker, the connect timeout and interrupts are
 * raised as ERRORs, after giving the entry up.
 */
ZkEntryState
zk_wait(int id, uint32 generation, TimestampTz deadline)
{
	ZkEntry    *e = ZK_ENTRY(id);
	ZkEntryState result = ZKE_PENDING;

	Assert(e->generation == generation);
	if (LockTimeout > 0)
		enable_timeout_after(LOCK_TIMEOUT, LockTimeout);

	PG_TRY();
	{
		for (;;)
		{
			ZkEntryState state;
			bool		connecting;
			TimestampTz connect_deadline;
			TimestampTz now;
			long		wait_ms = 1000;

			LWLockAcquire(zk_shared->lock, LW_SHARED);
			state = e->state;
			connecting = e->node[0] == '\0' &&
				zk_shared->session_state != ZKS_CONNECTED;
			connect_deadline = e->connect_deadline;
			LWLockRelease(zk_shared->lock);

			if (state == ZKE_HELD)
			{
				result = state;
				break;
			}
			if (state == ZKE_WOULD_BLOCK)
			{
				zk_give_up(id, generation);
				result = state;
				break;
			}
			if (state == ZKE_FAILED)
			{
				/* copy it all: once given up, the entry may be reused */
				int			code = e->sqlerrcode;
				char		msg[ZK_ERRMSG_MAX];
				char		name[ZK_NAME_MAX + 1];

				strlcpy(msg, e->errmsg, sizeof(msg));
				strlcpy(name, e->name, sizeof(name));
				zk_give_up(id, generation);
				ereport(ERROR,
						(errcode(code),
						 errmsg("could not acquire zklock lock \"%s\": %s",
								name, msg)));
			}

			now = GetCurrentTimestamp();
			if (deadline != 0)
			{
				if (now >= deadline)
				{
					result = zk_cancel(e);
					if (result != ZKE_HELD)
						pg_atomic_fetch_add_u64(&zk_shared->n_timeouts, 1);
					break;
				}
				wait_ms = Min(wait_ms, zk_ms_until(now, deadline));
			}
			if (connecting)
			{
				if (now >= connect_deadline)
				{
					zk_give_up(id, generation);
					ereport(ERROR,
							(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
							 errmsg("could not reach ZooKeeper at \"%s\"",
									zklock_hosts),
							 errdetail("The zklock worker had no ZooKeeper session within zklock.connect_timeout (%d ms).",
									   zklock_connect_timeout)));
				}
				wait_ms = Min(wait_ms, zk_ms_until(now, connect_deadline));
			}

			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Max(wait_ms, 1), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		if (LockTimeout > 0)
			disable_timeout(LOCK_TIMEOUT, false);
		zk_give_up(id, generation);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (LockTimeout > 0)
		disable_timeout(LOCK_TIMEOUT, false);
	return result;
}

/*
 * Can holdings be trusted now?  Only while the worker has confirmed its
 * session within the last half of the session timeout (see session.c): a
 * paused, hung or cut-off worker stops vouching for its locks long before
 * ZooKeeper could expire them and grant them to someone else.
 */
bool
zk_session_trusted(void)
{
	TimestampTz confirmed = (TimestampTz) pg_atomic_read_u64(&zk_shared->confirmed_at);
	int			timeout;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	timeout = zk_shared->session_timeout;
	LWLockRelease(zk_shared->lock);

	return timeout > 0 &&
		!TimestampDifferenceExceeds(confirmed, GetCurrentTimestamp(),
									timeout / 2);
}

/*
 * The current state of an entry this backend owns, and its fencing token.
 */
ZkEntryState
zk_entry_state(int id, uint32 generation, int64 *token)
{
	ZkEntry    *e = ZK_ENTRY(id);
	ZkEntryState state;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	state = e->generation == generation ? e->state : ZKE_LOST;
	if (token)
		*token = e->token;
	LWLockRelease(zk_shared->lock);
	return state;
}

/* Copy the node name of an entry this backend holds (ZK_NODE_MAX bytes). */
void
zk_entry_node(int id, char *node)
{
	LWLockAcquire(zk_shared->lock, LW_SHARED);
	strlcpy(node, ZK_ENTRY(id)->node, ZK_NODE_MAX);
	LWLockRelease(zk_shared->lock);
}

/* Publish how often the owner holds an entry, for the zk_locks view. */
void
zk_entry_set_counts(int id, uint32 generation, int session_count,
					int xact_count)
{
	ZkEntry    *e = ZK_ENTRY(id);

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	if (e->generation == generation)
	{
		e->session_count = session_count;
		e->xact_count = xact_count;
	}
	LWLockRelease(zk_shared->lock);
}

/* ---- worker side ---- */

/*
 * Take up to max ids off the worker queue.  Returns how many.
 */
int
zk_take_queue(int *ids, int max)
{
	int			n = 0;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	while (n < max && !dlist_is_empty(&zk_shared->queue))
	{
		ZkEntry    *e = dlist_container(ZkEntry, link,
										dlist_pop_head_node(&zk_shared->queue));

		e->queued = false;
		ids[n++] = e - zk_shared->entries;
	}
	LWLockRelease(zk_shared->lock);
	return n;
}

/*
 * Record the outcome of a request (or the loss of a holding) and wake its
 * backend.  The message, if any, goes to the backend's error report.
 */
void
zk_set_outcome(int id, ZkEntryState state, int sqlerrcode, const char *fmt,...)
{
	ZkEntry    *e = ZK_ENTRY(id);
	int			procno;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	e->state = state;
	e->sqlerrcode = sqlerrcode;
	if (fmt)
	{
		va_list		ap;

		va_start(ap, fmt);
		vsnprintf(e->errmsg, sizeof(e->errmsg), fmt, ap);
		va_end(ap);
	}
	if (state == ZKE_HELD)
	{
		e->granted_at = GetCurrentTimestamp();
		e->waiting_on[0] = '\0';
		pg_atomic_fetch_add_u64(&zk_shared->n_grants, 1);
	}
	procno = e->released ? -1 : e->owner_procno;
	LWLockRelease(zk_shared->lock);

	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/* Return an entry to the free list. */
void
zk_free_entry(int id)
{
	ZkEntry    *e = ZK_ENTRY(id);

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	if (e->queued)
		dlist_delete(&e->link);
	e->queued = false;
	e->state = ZKE_FREE;
	e->released = false;
	e->owner_pid = 0;
	dlist_push_head(&zk_shared->free_entries, &e->link);
	LWLockRelease(zk_shared->lock);
	ConditionVariableBroadcast(&zk_shared->entry_freed);
}

/* Publish the session state; wakes every waiting backend. */
void
zk_set_session_state(ZkSessionState state, int64 session_id, int timeout,
					 const char *server)
{
	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	strlcpy(zk_shared->server, server ? server : "", sizeof(zk_shared->server));
	zk_shared->session_state = state;
	zk_shared->session_id = session_id;
	zk_shared->session_timeout = timeout;
	LWLockRelease(zk_shared->lock);
}

/* Record the last error the worker met, for zk_status(). */
void
zk_set_last_error(const char *fmt,...)
{
	va_list		ap;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	va_start(ap, fmt);
	vsnprintf(zk_shared->last_error, sizeof(zk_shared->last_error), fmt, ap);
	va_end(ap);
	LWLockRelease(zk_shared->lock);
}

/* Record which node an entry waits for ("" for none), for zk_locks. */
void
zk_set_waiting_on(int id, const char *node)
{
	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	strlcpy(ZK_ENTRY(id)->waiting_on, node, ZK_NODE_MAX);
	LWLockRelease(zk_shared->lock);
}

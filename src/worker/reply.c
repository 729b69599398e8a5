/*-------------------------------------------------------------------------
 *
 * reply.c
 *	  The worker's side of the shared-memory request protocol
 *	  (shared/protocol.h): taking the queued entries, writing outcomes,
 *	  grants, results, listings and the session's state into them, waking
 *	  their backends, and freeing the entries backends gave up.
 *
 * The backend's side is in backend/request.c and backend/wait.c, the
 * rules both sides follow and the format of a listing's rows in
 * shared/protocol.c.  Every function here takes the shared lock only for
 * the moment it writes, and never throws while holding it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/dsm.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "shared/protocol.h"

/*
 * Traced hops (zklock.trace_hops, see ZkHopStep): while the worker has
 * taken traced entries that are still in use (traced[], by entry), it
 * stamps the times of every turn (zk_hop_turn: two or three readings of the
 * monotonic clock a turn); otherwise, nothing.
 */
bool		zk_hop_tracing = false;
ZkHopTurn	zk_hop_turn;
static bool *traced = NULL;
static int	ntraced = 0;

/*
 * A traced entry's outcome, its latch about to be set: the replies read in
 * this turn decided it if it was taken before them, unless it is a grant
 * without ZooKeeper (local: a hand-off on the instance's node).  Lock held.
 */
static void
zk_hop_decided(ZkEntry *e, bool local)
{
	if (likely(!e->trace))
		return;
	if (!local && e->hop[ZK_HOP_TAKEN] != 0 &&
		zk_hop_turn.read > e->hop[ZK_HOP_TAKEN])
		e->hop[ZK_HOP_READ] = zk_hop_turn.read;
	e->hop[ZK_HOP_LATCH_SET] = zk_mono_now();
}

/*
 * The calls of the traced entries ids[0..n-1] were handed to the client in
 * this turn and pushed out of the socket (at "written"): stamp the ones
 * not decided yet (engine.c picks them: zk_engine_hop_sent).
 */
void
zk_hop_sent(const int *ids, int n, int64 written)
{
	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
	{
		ZkEntry    *e = ZK_ENTRY(ids[i]);

		if (e->trace && e->hop[ZK_HOP_TAKEN] != 0 &&
			e->hop[ZK_HOP_LATCH_SET] == 0 && e->hop[ZK_HOP_HANDED] == 0)
		{
			e->hop[ZK_HOP_HANDED] = zk_hop_turn.handed;
			e->hop[ZK_HOP_WRITTEN] = written;
		}
	}
	LWLockRelease(zk_shared->lock);
}

/* Take up to max ids off the worker queue.  Returns how many. */
int
zk_take_queue(int *ids, int max)
{
	int			n = 0;
	TimestampTz now = 0;

	if (traced == NULL)
		traced = MemoryContextAllocZero(TopMemoryContext,
										sizeof(bool) * zk_shared->num_entries);
	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	while (n < max && !dlist_is_empty(&zk_shared->queue))
	{
		ZkEntry    *e = dlist_container(ZkEntry, link,
										dlist_pop_head_node(&zk_shared->queue));

		e->queued = false;
		if (e->taken_at == 0 && e->state == ZKE_PENDING)
		{
			if (now == 0)
				now = GetCurrentTimestamp();
			e->taken_at = now;
		}
		if (unlikely(e->trace) && e->hop[ZK_HOP_TAKEN] == 0)
		{
			if (!traced[e - zk_shared->entries])
			{
				traced[e - zk_shared->entries] = true;
				ntraced++;
			}
			/* not tracing when it woke: the wake is counted in "taken" */
			e->hop[ZK_HOP_WORKER_WOKE] = zk_hop_tracing ? zk_hop_turn.woke : 0;
			zk_hop_tracing = true;
			e->hop[ZK_HOP_TAKEN] = zk_mono_now();
		}
		ids[n++] = e - zk_shared->entries;
	}
	LWLockRelease(zk_shared->lock);
	return n;
}

/* Wake the owner of an entry unless it gave the entry up; lock held. */
static int
zk_owner_locked(ZkEntry *e)
{
	return e->released ? -1 : e->owner_procno;
}

/*
 * The backends to wake when the worker's turn ends (zk_defer_wakes), in
 * TopMemoryContext: room for two wakes per entry (an answer and the entry's
 * end); a wake that finds no room is done at once.
 */
typedef struct ZkWake
{
	int			procno;
	int			id;				/* the entry answered, for zk_hop_woken */
} ZkWake;

static ZkWake *deferred = NULL;
static int	ndeferred = 0;
static int	max_deferred = 0;
static bool deferring = false;

/* Wake the owner procno of entry e (none if procno < 0); lock not held. */
static void
zk_wake(int procno, ZkEntry *e)
{
	if (procno < 0)
		return;
	if (deferring && ndeferred < max_deferred)
	{
		deferred[ndeferred].procno = procno;
		deferred[ndeferred].id = e - zk_shared->entries;
		ndeferred++;
	}
	else
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/*
 * Traced hops woken at the end of a turn: their latch is set now (an entry
 * decided in the turn has a latch time; one freed and taken again since
 * is woken in this pass too, or not decided yet).
 */
static void
zk_hop_woken(void)
{
	ZkMono		now = zk_mono_now();

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < ndeferred; i++)
	{
		ZkEntry    *e = ZK_ENTRY(deferred[i].id);

		if (e->trace && e->hop[ZK_HOP_LATCH_SET] != 0)
			e->hop[ZK_HOP_LATCH_SET] = now;
	}
	LWLockRelease(zk_shared->lock);
}

/*
 * Wake the backends answered in a turn together when it ends (on), after
 * its calls have left (off: wake them now).  Setting a backend's latch
 * lets the scheduler run it at once, which on a machine with fewer cores
 * than busy processes it often does, in the middle of the worker's turn:
 * every other answer of the turn, and the requests the turn sends, then
 * waited for it.  Waking them all at the end of the turn costs the first
 * the rest of the turn, microseconds.  Only the worker loop defers; a
 * backend's state is written before, so a later wake changes nothing but
 * when it looks.
 */
void
zk_defer_wakes(bool on)
{
	if (on && deferred == NULL)
	{
		max_deferred = 2 * zk_shared->num_entries;
		deferred = MemoryContextAlloc(TopMemoryContext,
									  sizeof(ZkWake) * max_deferred);
	}
	if (!on && ndeferred > 0)
	{
		if (unlikely(zk_hop_tracing))
			zk_hop_woken();
		for (int i = 0; i < ndeferred; i++)
			SetLatch(&ProcGlobal->allProcs[deferred[i].procno].procLatch);
		ndeferred = 0;
	}
	/* the turn is over: trace on only while a traced entry is in use */
	if (!on && ntraced == 0)
		zk_hop_tracing = false;
	deferring = on;
}

/*
 * Record the outcome of a request (or the loss of a holding) and wake its
 * backend.  The message, if any, becomes the DETAIL of the backend's error.
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
	if (state != ZKE_PENDING)
	{
		e->waiting_on[0] = '\0';
		zk_hop_decided(e, false);
	}
	procno = zk_owner_locked(e);
	LWLockRelease(zk_shared->lock);
	zk_wake(procno, e);
}

/*
 * Grant an entry: its fencing token, the session and node it holds by;
 * local if the node held the lock already (a hand-off, no ZooKeeper call).
 */
void
zk_set_grant(int id, int64 token, int64 session_id, const char *node,
			 bool local)
{
	ZkEntry    *e = ZK_ENTRY(id);
	int			procno;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	e->state = ZKE_HELD;
	e->token = token;
	e->session_id = session_id;
	e->granted_at = GetCurrentTimestamp();
	strlcpy(e->node, node, sizeof(e->node));
	e->waiting_on[0] = '\0';
	zk_hop_decided(e, local);
	procno = zk_owner_locked(e);
	LWLockRelease(zk_shared->lock);
	pg_atomic_fetch_add_u64(&zk_shared->n_grants, 1);
	zk_wake(procno, e);
}

/* Finish a one-shot request with its answer. */
void
zk_set_result(int id, int64 result)
{
	ZkEntry    *e = ZK_ENTRY(id);
	int			procno;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	e->state = ZKE_DONE;
	e->result = result;
	zk_hop_decided(e, false);
	procno = zk_owner_locked(e);
	LWLockRelease(zk_shared->lock);
	zk_wake(procno, e);
}

/*
 * Finish a listing request: its rows go into a DSM segment the backend
 * attaches to (and unpins); the entry becomes DONE with the row count.
 * Worker only (it may ERROR if no DSM segment can be made: the caller runs
 * outside ZooKeeper callbacks).
 */
void
zk_set_rows(int id, StringInfo rows)
{
	ZkEntry    *e = ZK_ENTRY(id);
	dsm_handle	handle;
	int32		n;
	int			procno;

	if (!zk_rows_store(rows, &handle, &n))
	{
		zk_set_outcome(id, ZKE_FAILED, ERRCODE_OUT_OF_MEMORY,
					   "No dynamic shared memory segment was available for the answer.");
		return;
	}

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	if (e->released && handle != 0)
	{
		LWLockRelease(zk_shared->lock);
		dsm_unpin_segment(handle);
		return;
	}
	e->rows = handle;
	e->result = n;
	e->state = ZKE_DONE;
	zk_hop_decided(e, false);
	procno = zk_owner_locked(e);
	LWLockRelease(zk_shared->lock);
	zk_wake(procno, e);
}

/* Finish an ask of the owner on a held entry. */
void
zk_set_ask_outcome(int id, ZkAskState state, int sqlerrcode, const char *fmt,...)
{
	ZkEntry    *e = ZK_ENTRY(id);
	int			procno;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	e->ask_state = state;
	e->sqlerrcode = sqlerrcode;
	if (fmt)
	{
		va_list		ap;

		va_start(ap, fmt);
		vsnprintf(e->errmsg, sizeof(e->errmsg), fmt, ap);
		va_end(ap);
	}
	procno = zk_owner_locked(e);
	LWLockRelease(zk_shared->lock);
	zk_wake(procno, e);
}

/*
 * Record the node of a request and the node it waits for ("" for none).
 * Called for requests that wait (for another node, a local holder, a
 * barrier); the first call for a request counts it in n_waits.
 */
void
zk_set_node(int id, const char *node, const char *waiting_on)
{
	ZkEntry    *e = ZK_ENTRY(id);
	bool		first_wait;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	strlcpy(e->node, node ? node : "", ZK_NODE_MAX);
	strlcpy(e->waiting_on, waiting_on ? waiting_on : "", ZK_NODE_MAX);
	first_wait = e->state == ZKE_PENDING && !e->waited;
	e->waited = true;
	LWLockRelease(zk_shared->lock);
	if (first_wait)
		pg_atomic_fetch_add_u64(&zk_shared->n_waits, 1);
}

/*
 * Note that someone asked the holder of an entry to let go, and interrupt
 * (SIGINT) its owner if it asked for that (ZKR_REVOCABLE) and still holds
 * it.  Returns the pid interrupted, else 0.
 */
int
zk_set_revoke_requested(int id)
{
	ZkEntry    *e = ZK_ENTRY(id);
	int			pid = 0;
	int			kill_errno = 0;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	e->revoke_requested = true;
	if ((e->flags & ZKR_REVOCABLE) && !e->released && e->state == ZKE_HELD)
	{
		/*
		 * Signalled under the lock, so that the owner cannot have released
		 * the entry (and started something else) in between.
		 */
		pid = e->owner_pid;
		if (kill(pid, SIGINT) != 0)
			kill_errno = errno;
	}
	LWLockRelease(zk_shared->lock);
	if (kill_errno != 0)
	{
		errno = kill_errno;
		elog(DEBUG1, "could not signal process %d: %m", pid);
	}
	return pid;
}

/*
 * Return an entry to the free list (any listing it held is dropped), and
 * wake the backend that gave it up: it may wait for this
 * (zk_await_released).
 */
void
zk_free_entry(int id)
{
	ZkEntry    *e = ZK_ENTRY(id);
	dsm_handle	rows;
	int			procno;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	procno = e->released ? e->owner_procno : -1;
	if (procno >= 0)
		zk_hop_decided(e, false);	/* the release's hop (the entry keeps it) */
	if (unlikely(traced != NULL && traced[id]))
	{
		traced[id] = false;
		ntraced--;
	}
	if (e->queued)
		dlist_delete(&e->link);
	e->queued = false;
	e->state = ZKE_FREE;
	e->released = false;
	e->owner_pid = 0;
	rows = e->rows;
	e->rows = 0;
	dlist_delete(&e->used_link);
	dlist_push_head(&zk_shared->free_entries, &e->link);
	LWLockRelease(zk_shared->lock);
	if (rows != 0)
		dsm_unpin_segment(rows);
	zk_wake(procno, e);
	ConditionVariableBroadcast(&zk_shared->entry_freed);
}

/* Publish the session state. */
void
zk_set_session_state(ZkSessionState state, int64 session_id, int timeout,
					 const char *server)
{
	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	strlcpy(zk_shared->server, server ? server : "", sizeof(zk_shared->server));
	if (session_id != zk_shared->session_id)
		zk_shared->confirmed_at = 0;
	zk_shared->session_state = state;
	zk_shared->session_id = session_id;
	zk_shared->session_timeout = timeout;
	LWLockRelease(zk_shared->lock);
}

/*
 * Publish that the session was confirmed alive at "at", a reading of the
 * monotonic clock (see worker/session.c).
 */
void
zk_set_confirmed(int64 session_id, ZkMono at)
{
	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	if (session_id == zk_shared->session_id && at > zk_shared->confirmed_at)
		zk_shared->confirmed_at = at;
	LWLockRelease(zk_shared->lock);
}

/*
 * Publish that the worker does not connect because zklock.auth_file names
 * the unusable file "file" (NULL: it no longer keeps it from connecting),
 * for the 08001 of backends (backend/wait.c).
 */
void
zk_set_auth_blocked(const char *file)
{
	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	strlcpy(zk_shared->auth_blocked, file ? file : "",
			sizeof(zk_shared->auth_blocked));
	LWLockRelease(zk_shared->lock);
}

/*
 * Record whether connections keep being closed right after they are made
 * (see zk_client_log in client_log.c), for the hint of backends' 08001.
 */
void
zk_set_closed_on_connect(bool closed)
{
	if (zk_shared->closed_on_connect != closed)
	{
		LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
		zk_shared->closed_on_connect = closed;
		LWLockRelease(zk_shared->lock);
	}
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
	zk_shared->last_error_at = zk_shared->last_error[0] ?
		GetCurrentTimestamp() : 0;
	LWLockRelease(zk_shared->lock);
}

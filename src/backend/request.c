/*-------------------------------------------------------------------------
 *
 * request.c
 *	  A backend's side of the shared-memory request protocol
 *	  (shared/protocol.c): taking an entry for a request, giving entries
 *	  up and waiting until the worker is done with them, the rule of what
 *	  the backend holds, and its small reads and writes of an entry it
 *	  holds.  The waits for an outcome are in wait.c.
 *
 * A backend gives up every entry it still owns when it exits
 * (zk_backend_exit), whatever state its request or holding is in.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "backend/request.h"
#include "shared/pg_compat.h"
#include "shared/protocol.h"

static bool exit_hook_registered = false;

/*
 * Entries this backend gave up and the worker has not freed yet, for
 * zk_await_released(); in TopMemoryContext, room for the whole pool.
 */
typedef struct ZkGivenUp
{
	int			id;
	uint32		generation;
} ZkGivenUp;

static ZkGivenUp *given_up = NULL;
static int	ngiven_up = 0;

/*
 * zklock.trace_hops: when this backend's wait last returned, and the last
 * traced release it has not logged yet.
 */
ZkMono		zk_hop_woke = 0;
static ZkGivenUp hop_release = {-1, 0};

/* A traced hop of entry e starts: it is queued now.  Lock held. */
static void
zk_hop_start(ZkEntry *e)
{
	memset(e->hop, 0, sizeof(e->hop));
	e->hop[ZK_HOP_QUEUED] = zk_mono_now();
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
void
zk_queue_locked(ZkEntry *e)
{
	if (!e->queued)
	{
		dlist_push_tail(&zk_shared->queue, &e->link);
		e->queued = true;
	}
}

/*
 * Forget the given-up entries the worker has freed; caller holds the lock.
 * Returns how many are left.
 */
static int
zk_prune_given_up_locked(void)
{
	int			n = 0;

	for (int i = 0; i < ngiven_up; i++)
	{
		ZkEntry    *e = ZK_ENTRY(given_up[i].id);

		if (e->generation == given_up[i].generation && e->state != ZKE_FREE)
			given_up[n++] = given_up[i];
	}
	ngiven_up = n;
	return n;
}

/*
 * Hand an entry to the worker for clean-up; caller holds the lock
 * exclusively.  The entry is remembered for zk_await_released(), unless
 * it is the answer of a one-shot request (listing, barrier): the worker
 * detached it from its part when it answered and frees it when it takes
 * it, so there is nothing to wait for but a turn of the worker.
 */
void
zk_release_locked(ZkEntry *e)
{
	e->released = true;
	if (unlikely(e->trace))
	{
		zk_hop_start(e);
		hop_release.id = e - zk_shared->entries;
		hop_release.generation = e->generation;
	}
	zk_queue_locked(e);
	if (e->state == ZKE_DONE)
		return;					/* a one-shot answer: freed at once, no node */
	if (given_up != NULL && ngiven_up == zk_shared->num_entries)
		(void) zk_prune_given_up_locked();	/* full of entries nobody awaited */
	if (given_up != NULL && ngiven_up < zk_shared->num_entries)
	{
		given_up[ngiven_up].id = e - zk_shared->entries;
		given_up[ngiven_up].generation = e->generation;
		ngiven_up++;
	}
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
 * Ask the worker for something (see ZkRequest).  Returns the entry's id
 * and, in *generation, its generation, which the caller passes to every
 * later call about it.  Raises an ERROR naming zklock.max_locks when the
 * pool is exhausted.
 */
int
zk_request(const ZkRequest *req, uint32 *generation)
{
	ZkEntry    *e;
	TimestampTz now = GetCurrentTimestamp();

	if (!exit_hook_registered)
	{
		zk_register_wait_events();
		given_up = MemoryContextAlloc(TopMemoryContext,
									  sizeof(ZkGivenUp) * zk_shared->num_entries);
		before_shmem_exit(zk_backend_exit, (Datum) 0);
		exit_hook_registered = true;
	}

	/*
	 * When the pool is exhausted only because entries given up a moment ago
	 * still wait for the worker, wait for those (no longer than
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
					 errmsg("too many zklock requests in this instance"),
					 errdetail("All %d entries of zklock.max_locks are in use by holdings and waiting requests.",
							   zklock_max_locks),
					 errhint("Increase zklock.max_locks.")));
		}
		(void) ConditionVariableTimedSleep(&zk_shared->entry_freed, 100,
										   PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	e = dlist_container(ZkEntry, link,
						dlist_pop_head_node(&zk_shared->free_entries));
	dlist_push_tail(&zk_shared->used_entries, &e->used_link);
	e->generation++;
	e->state = ZKE_PENDING;
	e->released = false;
	e->owner_procno = ZkMyProcNumber;
	e->owner_pid = MyProcPid;
	e->database = MyDatabaseId;
	e->kind = req->kind;
	e->flags = req->flags;
	e->arg = req->arg;
	e->targ = req->targ;
	e->expect_session = req->expect_session;
	e->requested_at = now;
	e->taken_at = 0;
	e->connect_timeout = zklock_connect_timeout;
	e->connect_deadline = TimestampTzPlusMilliseconds(now, zklock_connect_timeout);
	strlcpy(e->app, application_name ? application_name : "", sizeof(e->app));
	strlcpy(e->name, req->name, sizeof(e->name));
	strlcpy(e->count, req->count ? req->count : "", sizeof(e->count));
	e->ask = ZK_ASK_NONE;
	e->ask_state = ZK_ASK_IDLE;
	e->token = 0;
	e->session_id = 0;
	e->granted_at = 0;
	e->result = 0;
	e->rows = 0;
	e->revoke_requested = false;
	e->waited = false;
	e->sqlerrcode = 0;
	e->errmsg[0] = '\0';
	e->node[0] = '\0';
	e->waiting_on[0] = '\0';
	e->session_count = 0;
	e->xact_count = 0;
	e->trace = zklock_trace_hops;
	if (unlikely(e->trace))
		zk_hop_start(e);
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
 * waits: zk_await_released() waits for the worker to be done with it.
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
 * Is this session the worker's current one, confirmed recently enough to
 * vouch for its nodes?  Only while the worker has confirmed it through the
 * ZooKeeper leader within the last half of the session timeout (see
 * session.c): a paused, hung or cut-off worker stops vouching for its
 * nodes long before ZooKeeper could expire them and grant them to someone
 * else, and a node of any earlier session never counts.  The half timeout
 * is measured on the monotonic clock, as the worker measured confirmed_at:
 * a wall clock stepped back cannot stretch it.  Caller holds the lock.
 */
bool
zk_trusted_locked(int64 session_id)
{
	return session_id != 0 &&
		session_id == zk_shared->session_id &&
		zk_shared->session_timeout > 0 &&
		zk_shared->confirmed_at != 0 &&
		zk_mono_now() - zk_shared->confirmed_at <
		(int64) (zk_shared->session_timeout / 2) * 1000;
}

bool
zk_trusted_session(int64 session_id)
{
	bool		trusted;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	trusted = zk_trusted_locked(session_id);
	LWLockRelease(zk_shared->lock);
	return trusted;
}

/*
 * Is it worth waiting for the worker to delete nodes of its session?  Only
 * while a worker runs and its session can be vouched for, by the same rule
 * as a holding (zk_trusted_locked: confirmed within half the session
 * timeout).  Past that the session may be gone or about to go, and its
 * nodes with it; a release then waits no longer, as zk_lock_held() no
 * longer vouches for a holding.  Caller holds the lock.
 */
static bool
zk_release_may_complete_locked(void)
{
	return zk_shared->worker_latch != NULL &&
		zk_shared->session_state != ZKS_LOST &&
		zk_trusted_locked(zk_shared->session_id);
}

/*
 * zklock.trace_hops: log the steps of the hop of entry id that ends now
 * (what: "request" or "release"), one LOG line of the microseconds from
 * each step to the next ("-" for a step it did not go through, such as
 * ZooKeeper for a local hand-off, or a worker already awake), in the order
 * of ZkHopStep.  bench/run sums them up (docs/benchmark.md).
 */
void
zk_hop_log(int id, uint32 generation, const char *what)
{
	ZkEntry    *e = ZK_ENTRY(id);
	int64		hop[ZK_HOP_STEPS];
	bool		ours;
	ZkMono		now = zk_mono_now();
	ZkMono		prev;
	StringInfoData buf;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	ours = e->generation == generation && e->trace;
	memcpy(hop, e->hop, sizeof(hop));
	LWLockRelease(zk_shared->lock);
	if (!ours || hop[ZK_HOP_LATCH_SET] == 0)
		return;					/* the entry serves another request now */
	hop[ZK_HOP_BACKEND_WOKE] =
		zk_hop_woke >= hop[ZK_HOP_LATCH_SET] ? zk_hop_woke : now;
	hop[ZK_HOP_RETURNED] = now;

	initStringInfo(&buf);
	prev = hop[ZK_HOP_QUEUED];
	for (int step = ZK_HOP_QUEUED + 1; step < ZK_HOP_STEPS; step++)
	{
		if (hop[step] == 0 || hop[step] < prev)
			appendStringInfoString(&buf, " -");
		else
		{
			appendStringInfo(&buf, " %lld", (long long) (hop[step] - prev));
			prev = hop[step];
		}
	}
	ereport(LOG,
			(errmsg_internal("zklock hop %s:%s", what, buf.data),
			 errhidestmt(true), errhidecontext(true)));
	pfree(buf.data);
}

/*
 * Wait until the worker is done with every entry this backend gave up:
 * their nodes are deleted in ZooKeeper, or serve another request of the
 * instance that the lock passed to.  So when a release, a failed no-wait
 * attempt or a timed-out wait returns, every client can take the lock
 * unless someone else holds or waits for it.
 *
 * The wait ends early when the worker cannot finish (see
 * zk_release_may_complete_locked): the nodes then go with the session.  With
 * interruptible, cancel and statement_timeout end it as an ERROR (the
 * entries stay given up; nothing waits for them again); transaction
 * callbacks pass false and never throw here.  A backend on its way out
 * (pg_terminate_backend, shutdown; exit hooks and the abort they cause)
 * does not wait at all: nobody waits for its answer.
 */
void
zk_await_released(bool interruptible)
{
	while (ngiven_up > 0)
	{
		int			n;
		bool		may_complete;

		if (ProcDiePending || proc_exit_inprogress)
			break;
		LWLockAcquire(zk_shared->lock, LW_SHARED);
		n = zk_prune_given_up_locked();
		may_complete = zk_release_may_complete_locked();
		LWLockRelease(zk_shared->lock);
		if (n == 0 || !may_complete)
			break;

		/*
		 * Without a postmaster the worker and its session go too: stop
		 * waiting.  Not exiting here, which inside the commit callback would
		 * try to abort a committed transaction (a PANIC); the backend exits
		 * at its next wait.
		 */
		if (WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_POSTMASTER_DEATH,
					  100, zk_wait_event(ZK_WAIT_RELEASE)) & WL_POSTMASTER_DEATH)
			break;
		if (unlikely(zklock_trace_hops))
			zk_hop_woke = zk_mono_now();
		ResetLatch(MyLatch);
		if (interruptible)
		{
			/* an ERROR here leaves nothing for a later wait */
			ngiven_up = 0;
			CHECK_FOR_INTERRUPTS();
			ngiven_up = n;
		}
	}
	ngiven_up = 0;
	if (unlikely(hop_release.id >= 0))
	{
		zk_hop_log(hop_release.id, hop_release.generation, "release");
		hop_release.id = -1;
	}
}

/*
 * Does the caller hold this entry now?  ZKE_HELD only when it is granted,
 * in the worker's current session, confirmed recently (see above);
 * ZKE_LOST when the worker said it is lost (its session is gone) or it is
 * no longer the caller's; ZKE_PENDING when it is granted but cannot be
 * vouched for now (no current session, or not confirmed lately): it may
 * turn out held or lost.  *token, when given, gets the fencing token.
 */
ZkEntryState
zk_entry_check(int id, uint32 generation, int64 *token)
{
	ZkEntry    *e = ZK_ENTRY(id);
	ZkEntryState state = ZKE_LOST;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	if (e->generation == generation && e->state == ZKE_HELD && !e->released)
		state = zk_trusted_locked(e->session_id) ? ZKE_HELD : ZKE_PENDING;
	if (token)
		*token = e->token;
	LWLockRelease(zk_shared->lock);
	return state;
}

/* The ZooKeeper session an entry was granted in (0 if none). */
int64
zk_entry_session(int id, uint32 generation)
{
	ZkEntry    *e = ZK_ENTRY(id);
	int64		session;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	session = e->generation == generation ? e->session_id : 0;
	LWLockRelease(zk_shared->lock);
	return session;
}

bool
zk_entry_valid(int id, uint32 generation, int64 *token)
{
	return zk_entry_check(id, generation, token) == ZKE_HELD;
}

/*
 * The transaction a job claim is made final for, written before
 * ZK_ASK_FINALIZE (the worker reads it when it takes the ask).
 */
void
zk_set_claim_xact(int id, uint32 generation, const ZkClaimXact *xact)
{
	ZkEntry    *e = ZK_ENTRY(id);

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	if (e->generation == generation)
		e->claim_xact = *xact;
	LWLockRelease(zk_shared->lock);
}

/*
 * Give an entry up with a last ask, which the worker carries out before it
 * frees the entry (a job claim of a transaction that aborted: reopen it if
 * it was made final).  Like zk_give_up, never throws and never waits: for
 * abort callbacks and exit hooks.
 */
void
zk_give_up_asking(int id, uint32 generation, ZkAsk ask)
{
	ZkEntry    *e = ZK_ENTRY(id);

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	if (e->generation == generation && e->state != ZKE_FREE && !e->released)
	{
		e->ask = ask;
		e->ask_state = ZK_ASK_PENDING;
		zk_release_locked(e);
	}
	LWLockRelease(zk_shared->lock);
	zk_wake_worker();
}

/*
 * Ask for a one-shot request and wait for it until the deadline (0: none).
 * Returns its state as zk_wait() does; once it is ZKE_DONE, its answer is in
 * *result (unless result is NULL: a wait done at its deadline may be given
 * up already) and the entry is given back.  Any other state leaves the
 * entry given up: ZKE_LOST (its session was lost first) for the caller to
 * say what that leaves unknown; ZKE_WOULD_BLOCK or ZKE_PENDING, not
 * done by the deadline or without waiting.  A failure raises the worker's
 * ERROR (zk_wait).
 */
ZkEntryState
zk_request_wait(const ZkRequest *req, TimestampTz deadline, int64 *result)
{
	uint32		generation;
	int			id = zk_request(req, &generation);
	ZkEntryState state = zk_wait(id, generation, deadline);

	if (state == ZKE_DONE)
	{
		if (result != NULL)
			*result = zk_entry_result(id, generation);
		zk_give_up(id, generation);
	}
	return state;
}

/* The answer of a one-shot request that is DONE. */
int64
zk_entry_result(int id, uint32 generation)
{
	ZkEntry    *e = ZK_ENTRY(id);
	int64		result;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	Assert(e->generation == generation);
	result = e->result;
	LWLockRelease(zk_shared->lock);
	return result;
}

/*
 * Publish how often the owner holds an entry, for the zk_locks view, and
 * whether letting go of its revocable acquisitions would release it (the
 * worker then signals the owner when a revocation is requested).
 */
void
zk_entry_publish(int id, uint32 generation, int session_count, int xact_count,
				 bool revocable)
{
	ZkEntry    *e = ZK_ENTRY(id);

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	if (e->generation == generation)
	{
		e->session_count = session_count;
		e->xact_count = xact_count;
		if (revocable)
			e->flags |= ZKR_REVOCABLE;
		else
			e->flags &= ~ZKR_REVOCABLE;
	}
	LWLockRelease(zk_shared->lock);
}

/* Has someone asked the holder of this entry to let go? */
bool
zk_entry_revoke_requested(int id, uint32 generation)
{
	ZkEntry    *e = ZK_ENTRY(id);
	bool		requested;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	requested = e->generation == generation && e->revoke_requested;
	LWLockRelease(zk_shared->lock);
	return requested;
}

/*
 * Ask the worker for a listing of what of name (ZK_LIST_*) and wait for
 * it: returns how many rows, with *rows in the caller's memory context;
 * none when the listing failed or was given up.
 */
int
zk_list(const char *name, int what, ZkRow **rows)
{
	ZkRequest	req = {0};
	uint32		generation;
	int			id;
	int			n = 0;

	*rows = NULL;
	req.kind = ZK_KIND_LIST;
	req.name = name;
	req.arg = what;
	id = zk_request(&req, &generation);
	if (zk_wait(id, generation, 0) == ZKE_DONE)
	{
		n = zk_read_rows(id, generation, rows);
		zk_give_up(id, generation);
	}
	return n;
}

/*
 * Take the rows of a DONE listing request: returns how many, with *rows
 * allocated in the caller's memory context.  The DSM segment the worker
 * made is released.
 */
int
zk_read_rows(int id, uint32 generation, ZkRow **rows)
{
	ZkEntry    *e = ZK_ENTRY(id);
	dsm_handle	handle;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	Assert(e->generation == generation);
	handle = e->rows;
	e->rows = 0;
	LWLockRelease(zk_shared->lock);
	return zk_rows_load(handle, rows);
}

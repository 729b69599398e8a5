/*-------------------------------------------------------------------------
 *
 * protocol.c
 *	  The shared-memory request protocol between backends and the worker.
 *
 * This file owns the pool of ZkEntry structs in shared memory and every
 * transition of an entry that crosses a process boundary:
 *
 *	backend: zk_request()	takes a free entry, fills it in, queues it
 *			 zk_wait()		sleeps on its latch until the worker decided, the
 *							caller's deadline passed or an interrupt came
 *			 zk_ask()		asks more of a held entry, and waits for it
 *			 zk_ask_wait()	the same for an ask that waits for others (leave
 *							a double barrier), like a lock wait
 *			 zk_give_up()	hands the entry back (release, cancel, exit)
 *			 zk_await_released()	waits until the worker is done with
 *							the entries given up: a release returns once
 *							everyone else can take what it released
 *	worker:  zk_take_queue(), zk_set_outcome(), zk_set_grant(), ...,
 *			 zk_free_entry(): worker/reply.c
 *
 * It also owns the one rule for "this backend holds it": the entry is
 * HELD, and the ZooKeeper session its node belongs to is the worker's
 * current session, confirmed within the last half session timeout
 * (zk_entry_valid).  Re-entrant grants, the *_held and *_token functions and
 * the COMMIT check all ask this, so none of them can vouch for a node of a
 * session that is gone or that nobody has confirmed lately.
 *
 * The rule that keeps ZooKeeper clean: once a backend has given an entry up
 * it never uses it again, and the worker deals with whatever the entry
 * left in ZooKeeper.  So whatever ends a wait, no node is left behind and no
 * given-up entry can turn into a holder.  The worker frees the entry only
 * once its node is deleted (or serves another request of the instance, the
 * lock having passed to it), and the backend waits for that before its
 * release returns (zk_await_released): a release is visible to every
 * client of ZooKeeper when it returns, as Curator's is.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "shared/pg_compat.h"
#include "shared/protocol.h"

/*
 * zklock.max_locks is capped so that every allocation scaling with it stays
 * below MaxAllocSize: zk_locks copies the entries in use, each smaller than
 * an entry (backend/monitor.c); the worker's per-entry arrays are much
 * smaller too.
 */
StaticAssertDecl((Size) ZK_MAX_LOCKS_LIMIT * sizeof(ZkEntry) <= MaxAllocSize,
				 "zklock.max_locks entries must fit in one allocation");

ZkShared   *zk_shared = NULL;

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
static ZkMono hop_woke = 0;
static ZkGivenUp hop_release = {-1, 0};

/* A traced hop of entry e starts: it is queued now.  Lock held. */
static void
zk_hop_start(ZkEntry *e)
{
	memset(e->hop, 0, sizeof(e->hop));
	e->hop[ZK_HOP_QUEUED] = zk_mono_now();
}

static void zk_sleep(long wait_ms, ZkKind kind);

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
		pg_atomic_init_u64(&zk_shared->n_requests, 0);
		pg_atomic_init_u64(&zk_shared->n_grants, 0);
		pg_atomic_init_u64(&zk_shared->n_local_grants, 0);
		pg_atomic_init_u64(&zk_shared->n_timeouts, 0);
		pg_atomic_init_u64(&zk_shared->n_reconnects, 0);
		pg_atomic_init_u64(&zk_shared->n_session_losses, 0);
		pg_atomic_init_u64(&zk_shared->n_orphans, 0);
		pg_atomic_init_u64(&zk_shared->n_waits, 0);
		pg_atomic_init_u64(&zk_shared->n_cancels, 0);
		pg_atomic_init_u64(&zk_shared->n_zk_requests, 0);
		pg_atomic_init_u64(&zk_shared->n_zk_multis, 0);
		pg_atomic_init_u64(&zk_shared->n_zk_multi_writes, 0);
		pg_atomic_init_u64(&zk_shared->n_zk_multis_refused, 0);
		pg_atomic_init_u64(&zk_shared->stats_reset,
						   (uint64) GetCurrentTimestamp());
		pg_atomic_init_u32(&zk_shared->n_nodes, 0);
		pg_atomic_init_u32(&zk_shared->n_watches, 0);
		dlist_init(&zk_shared->free_entries);
		dlist_init(&zk_shared->used_entries);
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
static void
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
static bool
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
static void
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
	hop[ZK_HOP_BACKEND_WOKE] = hop_woke >= hop[ZK_HOP_LATCH_SET] ? hop_woke : now;
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
			hop_woke = zk_mono_now();
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
 * In a PG_CATCH of a wait: count the wait in zk_stats.cancels when the
 * ERROR is a cancel, statement_timeout or lock_timeout.
 */
static void
count_if_cancel(void)
{
	int			code = geterrcode();

	if (code == ERRCODE_QUERY_CANCELED || code == ERRCODE_LOCK_NOT_AVAILABLE)
		pg_atomic_fetch_add_u64(&zk_shared->n_cancels, 1);
}

/* Count, in zk_stats.timeouts, a call that returns false: its time is up. */
void
zk_count_timeout(void)
{
	pg_atomic_fetch_add_u64(&zk_shared->n_timeouts, 1);
}

/*
 * Wait, until the deadline (0: none), for a granted entry whose session is
 * not confirmed lately to be confirmed, or lost.  Returns the last
 * zk_entry_check() answer (PENDING: the deadline passed first, counted as
 * a timeout); the entry stays the caller's either way.
 */
ZkEntryState
zk_wait_confirmed(int id, uint32 generation, TimestampTz deadline)
{
	ZkEntryState state;

	PG_TRY();
	{
		for (;;)
		{
			TimestampTz now = GetCurrentTimestamp();

			state = zk_entry_check(id, generation, NULL);
			if (state != ZKE_PENDING || (deadline != 0 && now >= deadline))
				break;
			zk_sleep(deadline ? Min(100, (deadline - now + 999) / 1000) : 100,
					 ZK_ENTRY(id)->kind);
		}
	}
	PG_CATCH();
	{
		count_if_cancel();
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (state == ZKE_PENDING)
		zk_count_timeout();
	return state;
}

/*
 * Give up a request that is still waiting, atomically with respect to the
 * worker's decision: returns HELD if a valid grant came first (the caller
 * then owns the holding), else the entry is given up and its last state
 * returned.
 */
static ZkEntryState
zk_cancel(ZkEntry *e)
{
	ZkEntryState state;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	state = e->state;
	if (state == ZKE_HELD && !zk_trusted_locked(e->session_id))
		state = ZKE_PENDING;	/* an unconfirmed grant is no grant */
	if (state != ZKE_HELD)
		zk_release_locked(e);
	LWLockRelease(zk_shared->lock);
	zk_wake_worker();
	return state;
}

/*
 * Where the time of a grant went, for DEBUG2 (see README, "What one acquire
 * costs"): from the request to the worker taking it (the backend's SetLatch
 * and the worker's wake-up), from there to the grant (ZooKeeper's round
 * trips and the worker's work; nothing of ZooKeeper for a local hand-off),
 * and from the grant to this backend running again (the worker's SetLatch
 * and our wake-up).
 */
static void
zk_log_phases(ZkEntry *e)
{
	TimestampTz requested_at;
	TimestampTz taken_at;
	TimestampTz granted_at;
	int64		token;
	TimestampTz now;

	if (!message_level_is_interesting(DEBUG2))
		return;
	now = GetCurrentTimestamp();
	LWLockAcquire(zk_shared->lock, LW_SHARED);
	requested_at = e->requested_at;
	taken_at = e->taken_at;
	granted_at = e->granted_at;
	token = e->token;
	LWLockRelease(zk_shared->lock);
	if (taken_at == 0 || granted_at < taken_at)
		return;					/* granted on an earlier request's node */
	ereport(DEBUG2,
			(errmsg_internal("zklock phases of a grant of \"%s\": to worker %ld us, worker and ZooKeeper %ld us, back %ld us, %s",
							 e->name,
							 (long) (taken_at - requested_at),
							 (long) (granted_at - taken_at),
							 (long) (now - granted_at),
							 (token & 1023) != 0 ? "local" : "node")));
}

static long
zk_ms_until(TimestampTz now, TimestampTz t)
{
	return t <= now ? 0 : (long) ((t - now + 999) / 1000);
}

/* ERROR with the worker's reason for FAILED; the entry is given up first. */
static void
zk_raise_failure(ZkEntry *e, int id, uint32 generation)
{
	int			code = e->sqlerrcode;
	char		msg[ZK_ERRMSG_MAX];
	char		name[ZK_NAME_MAX + 1];
	ZkKind		kind = e->kind;

	/* copy it all: once given up, the entry may be reused */
	strlcpy(msg, e->errmsg, sizeof(msg));
	strlcpy(name, e->name, sizeof(name));
	zk_give_up(id, generation);
	ereport(ERROR,
			(errcode(code),
			 errmsg(zk_kind_failed(kind), name),
			 errdetail_internal("%s", msg)));
}

/*
 * The error of a request that could not be answered because ZooKeeper
 * could not be asked: no usable session within zklock.connect_timeout
 * (connecting), or, at the request's own deadline, none, or no answer
 * that showed another holder.  The detail says what was tried for how
 * long and the worker's last error (a sentence, with its time); the hint
 * how to look further.
 */
static void
zk_raise_unreachable(int id, uint32 generation, TimestampTz requested_at,
					 bool connecting)
{
	char		last[ZK_ERRMSG_MAX];
	char		auth_blocked[ZK_ERRMSG_MAX];
	TimestampTz last_at;
	ZkSessionState state;
	bool		closed_on_connect;
	size_t		len;
	long		waited_ms;
	StringInfoData detail;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	strlcpy(last, zk_shared->last_error, sizeof(last));
	strlcpy(auth_blocked, zk_shared->auth_blocked, sizeof(auth_blocked));
	last_at = zk_shared->last_error_at;
	state = zk_shared->session_state;
	closed_on_connect = zk_shared->closed_on_connect;
	LWLockRelease(zk_shared->lock);
	zk_give_up(id, generation);
	waited_ms = (long) ((GetCurrentTimestamp() - requested_at) / 1000);

	/*
	 * The worker may not even try: while zklock.auth_file is unusable it
	 * does not connect.  Then say so, rather than send the user to
	 * ZooKeeper.
	 */
	if (state == ZKS_CONNECTED)
		auth_blocked[0] = '\0';

	initStringInfo(&detail);
	if (auth_blocked[0])
		appendStringInfo(&detail,
						 "The zklock worker does not connect while zklock.auth_file names a file it cannot use (without the credentials its nodes would be open to every client); this call waited %ld ms.",
						 waited_ms);
	else if (connecting || state != ZKS_CONNECTED)
		appendStringInfo(&detail,
						 "The zklock worker had no usable ZooKeeper session in the %ld ms this call waited (zklock.connect_timeout is %d ms); it keeps trying every host of zklock.hosts.",
						 waited_ms, zklock_connect_timeout);
	else
		appendStringInfo(&detail,
						 "ZooKeeper did not answer the zklock worker in the %ld ms this call waited: nobody was seen holding or waiting for it.",
						 waited_ms);
	/* the sentence below ends with its own period */
	len = strlen(last);
	while (len > 0 && (last[len - 1] == '.' || last[len - 1] == ' ' ||
					   last[len - 1] == '\n'))
		last[--len] = '\0';
	if (last[0])
		appendStringInfo(&detail, " Its last error, at %s, was: %s.",
						 timestamptz_to_str(last_at), last);
	if (auth_blocked[0])
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("zklock is not connecting to ZooKeeper: the credentials file \"%s\" of zklock.auth_file cannot be used",
						auth_blocked),
				 errdetail_internal("%s", detail.data),
				 errhint("Fix the file (a regular file owned by the server's user, mode 0600, holding \"user:password\") or zklock.auth_file, then reload the configuration; see SELECT last_error FROM zk_status() and the server log.")));
	ereport(ERROR,
			(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("could not reach ZooKeeper at \"%s\"", zklock_hosts),
			 errdetail_internal("%s", detail.data),
			 closed_on_connect && state != ZKS_CONNECTED ?
			 errhint("Every connection was closed right after it was made: if zklock.hosts names a TLS tunnel (stunnel), the tunnel could not reach ZooKeeper or its TLS handshake failed, and its log says why.") :
			 errhint("Check that ZooKeeper is running and reachable from this host (\"zkCli.sh -server HOST:PORT ls /\"), and see SELECT * FROM zk_status() and the zklock worker's messages in the server log.")));
}

/*
 * Sleep on the latch until woken or until wait_ms (at most a second) has
 * passed, like a core lock wait: shown as wait_event_type 'Extension' with
 * the wait event of the request's kind (wait_events.c), with
 * statement_timeout, lock_timeout and cancel arriving as ERRORs.
 */
static void
zk_sleep(long wait_ms, ZkKind kind)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Max(Min(wait_ms, 1000), 1),
					 zk_wait_event(zk_kind_wait_event(kind)));
	if (unlikely(zklock_trace_hops))
		hop_woke = zk_mono_now();
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * The deadline of a wait of timeout_ms milliseconds from now, for
 * zk_wait(): 0 (none) when timeout_ms is 0 (not waiting: ZKR_NOWAIT) or
 * negative (ZK_WAIT_FOREVER).
 */
TimestampTz
zk_deadline(int64 timeout_ms)
{
	if (timeout_ms <= 0)
		return 0;
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
}

/*
 * Wait for the outcome of a request until the deadline (0: none).
 *
 * Returns
 *	ZKE_HELD		granted, in a confirmed session: the caller owns it
 *	ZKE_DONE		a one-shot request finished (see zk_entry_result)
 *	ZKE_WOULD_BLOCK	a no-wait request found it taken (entry given up)
 *	ZKE_PENDING		the deadline passed (entry given up)
 *	ZKE_LOST		the session was lost and the request was not started
 *					again (ZKR_NO_RESTART, ZKR_AT_MOST_ONCE; entry given up)
 * A failure reported by the worker, a missing ZooKeeper session after
 * zklock.connect_timeout and interrupts are raised as ERRORs, after giving
 * the entry up.  A grant whose session is not confirmed is waited on until
 * it is, or is lost.
 */
ZkEntryState
zk_wait(int id, uint32 generation, TimestampTz deadline)
{
	ZkEntry    *e = ZK_ENTRY(id);
	ZkEntryState result = ZKE_PENDING;
	TimestampTz requested_at = e->requested_at; /* ours: it cannot change */

	Assert(e->generation == generation);
	if (LockTimeout > 0)
		enable_timeout_after(LOCK_TIMEOUT, LockTimeout);

	PG_TRY();
	{
		for (;;)
		{
			ZkEntryState state;
			bool		trusted;
			bool		usable;
			bool		seen_other;
			bool		connecting;
			TimestampTz connect_deadline;
			TimestampTz now;
			long		wait_ms = 1000;

			LWLockAcquire(zk_shared->lock, LW_SHARED);
			state = e->state;
			trusted = zk_trusted_locked(e->session_id);
			usable = zk_shared->session_state == ZKS_CONNECTED;

			/*
			 * A request that neither has a node in ZooKeeper's queue nor
			 * anything else to wait on yet needs a session soon.
			 */
			connecting = !usable && state == ZKE_PENDING &&
				e->node[0] == '\0' && e->waiting_on[0] == '\0';
			seen_other = e->waited;
			connect_deadline = e->connect_deadline;
			LWLockRelease(zk_shared->lock);

			if ((state == ZKE_HELD && trusted) || state == ZKE_DONE)
			{
				result = state;
				if (state == ZKE_HELD)
					zk_log_phases(e);
				break;
			}
			if (state == ZKE_WOULD_BLOCK || state == ZKE_LOST)
			{
				zk_give_up(id, generation);
				result = state;
				break;
			}
			if (state == ZKE_FAILED)
				zk_raise_failure(e, id, generation);

			now = GetCurrentTimestamp();
			/*
			 * The time is up.  "Not granted" (false) only if someone else
			 * was seen holding or ahead in the queue, and ZooKeeper can be
			 * asked now.  Without a usable session nobody knows: 08001,
			 * never false.  With one but no answer seen yet, the first
			 * answer is waited for (timeout_ms bounds the wait for other
			 * holders, not for ZooKeeper), up to the connect deadline.
			 */
			if (deadline != 0 && now >= deadline &&
				(seen_other || !usable || now >= connect_deadline))
			{
				result = zk_cancel(e);
				if (result == ZKE_FAILED)
					zk_raise_failure(e, id, generation);
				if (result != ZKE_HELD && result != ZKE_DONE)
				{
					if (!seen_other || !usable)
						zk_raise_unreachable(id, generation, requested_at,
											 false);
					result = ZKE_PENDING;
					zk_count_timeout();
				}
				break;
			}
			if (deadline != 0 && now < deadline)
				wait_ms = Min(wait_ms, zk_ms_until(now, deadline));
			else if (deadline != 0)
				wait_ms = Min(wait_ms, 10); /* its first answer: a poll, as
											 * the worker wakes us only for
											 * an outcome */
			if (connecting)
			{
				if (now >= connect_deadline)
					zk_raise_unreachable(id, generation, requested_at, true);
				wait_ms = Min(wait_ms, zk_ms_until(now, connect_deadline));
			}
			zk_sleep(wait_ms, e->kind);
		}
	}
	PG_CATCH();
	{
		count_if_cancel();
		if (LockTimeout > 0)
			disable_timeout(LOCK_TIMEOUT, false);
		zk_give_up(id, generation);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (LockTimeout > 0)
		disable_timeout(LOCK_TIMEOUT, false);
	/* given up: answer once its node is gone (lock_timeout is not for that) */
	if (result == ZKE_WOULD_BLOCK || result == ZKE_LOST || result == ZKE_PENDING)
		zk_await_released(true);
	else if (unlikely(e->trace))
		zk_hop_log(id, generation, "request");
	return result;
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
 * Ask the worker for something more on an entry the caller holds, and wait
 * for its answer until the deadline (0: none).  Returns DONE or
 * WOULD_BLOCK as the worker answered, or PENDING when the deadline passed
 * first; a failure the worker reports is raised as an ERROR.  The entry
 * stays the caller's either way.
 */
static ZkAskState
zk_ask_loop(int id, uint32 generation, ZkAsk ask, TimestampTz deadline)
{
	ZkEntry    *e = ZK_ENTRY(id);

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	Assert(e->generation == generation && !e->released);
	e->ask = ask;
	e->ask_state = ZK_ASK_PENDING;
	e->sqlerrcode = 0;
	e->errmsg[0] = '\0';
	zk_queue_locked(e);
	LWLockRelease(zk_shared->lock);
	zk_wake_worker();

	for (;;)
	{
		ZkAskState state;
		int			code;
		char		msg[ZK_ERRMSG_MAX];
		TimestampTz now;

		LWLockAcquire(zk_shared->lock, LW_SHARED);
		state = e->ask_state;
		code = e->sqlerrcode;
		strlcpy(msg, e->errmsg, sizeof(msg));
		LWLockRelease(zk_shared->lock);

		if (state == ZK_ASK_DONE || state == ZK_ASK_WOULD_BLOCK)
			return state;
		if (state == ZK_ASK_FAILED)
		{
			if (ask == ZK_ASK_FINALIZE)
				ereport(ERROR,
						(errcode(code),
						 errmsg("zklock could not finalize job claim \"%s\"",
								e->name),
						 errdetail_internal("%s", msg)));
			ereport(ERROR,
					(errcode(code),
					 errmsg("zklock could not leave the double barrier \"%s\"",
							e->name),
					 errdetail_internal("%s", msg)));
		}
		now = GetCurrentTimestamp();
		if (deadline != 0 && now >= deadline)
			return ZK_ASK_PENDING;
		zk_sleep(deadline ? zk_ms_until(now, deadline) : 1000, e->kind);
	}
}

/*
 * Ask the worker for something more on an entry the caller holds, and wait
 * until it is done or the deadline (0: none) passes.  A failure or the
 * deadline raise an ERROR; the entry stays the caller's either way (it
 * gives it up as usual).
 */
void
zk_ask(int id, uint32 generation, ZkAsk ask, TimestampTz deadline)
{
	if (zk_ask_loop(id, generation, ask, deadline) == ZK_ASK_PENDING)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("zklock timed out waiting for ZooKeeper")));
}

/*
 * Ask something of a held entry that waits for others (leave a double
 * barrier) and wait for it like a lock wait: cancel, statement_timeout and
 * lock_timeout end it with their ERRORs.  Returns DONE, WOULD_BLOCK (a
 * no-wait ask), or PENDING when the deadline (0: none) passed first; the
 * entry stays the caller's in every case, errors included.  Counted in
 * zk_stats like a lock wait.
 */
ZkAskState
zk_ask_wait(int id, uint32 generation, ZkAsk ask, TimestampTz deadline)
{
	ZkAskState	state;

	if (LockTimeout > 0)
		enable_timeout_after(LOCK_TIMEOUT, LockTimeout);
	PG_TRY();
	{
		state = zk_ask_loop(id, generation, ask, deadline);
	}
	PG_CATCH();
	{
		count_if_cancel();
		if (LockTimeout > 0)
			disable_timeout(LOCK_TIMEOUT, false);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (LockTimeout > 0)
		disable_timeout(LOCK_TIMEOUT, false);
	if (state == ZK_ASK_PENDING)
		zk_count_timeout();
	return state;
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
 * Ask for a one-shot request and wait for it without a deadline: true,
 * with its answer in *result and the entry given back, once it is done;
 * false when it is not (its session was lost first), for the caller to say
 * what that leaves unknown.  A failure raises the worker's ERROR (zk_wait).
 */
bool
zk_request_done(const ZkRequest *req, int64 *result)
{
	uint32		generation;
	int			id = zk_request(req, &generation);

	if (zk_wait(id, generation, 0) != ZKE_DONE)
		return false;
	*result = zk_entry_result(id, generation);
	zk_give_up(id, generation);
	return true;
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
	dsm_segment *seg;
	char	   *p;
	int			n;

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	Assert(e->generation == generation);
	handle = e->rows;
	e->rows = 0;
	LWLockRelease(zk_shared->lock);

	*rows = NULL;
	if (handle == 0)
		return 0;
	seg = dsm_attach(handle);
	dsm_unpin_segment(handle);
	if (seg == NULL)
		return 0;

	/* layout: int32 count, then per row int32 ncols and per column a flag
	 * byte (0: NULL) and a NUL-terminated string */
	p = dsm_segment_address(seg);
	memcpy(&n, p, sizeof(int32));
	p += sizeof(int32);
	*rows = palloc0(sizeof(ZkRow) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		ZkRow	   *r = &(*rows)[i];

		memcpy(&r->ncols, p, sizeof(int32));
		p += sizeof(int32);
		for (int c = 0; c < r->ncols; c++)
		{
			bool		isnull = (*p++ == 0);

			if (isnull)
				r->cols[c] = NULL;
			else
			{
				r->cols[c] = pstrdup(p);
				p += strlen(p) + 1;
			}
		}
	}
	dsm_detach(seg);
	return n;
}

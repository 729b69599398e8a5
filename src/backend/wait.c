/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  A backend's waits for the worker (shared/protocol.c): for the outcome
 *	  of a request (zk_wait), for a grant's session to be confirmed
 *	  (zk_wait_confirmed) and for the answer to an ask on a held entry
 *	  (zk_ask, zk_ask_wait), and the errors a wait ends with.
 *
 * Every wait sleeps on the backend's latch like a core lock wait: shown as
 * wait_event_type 'Extension' with the wait event of the request's kind,
 * with statement_timeout, lock_timeout and cancel arriving as ERRORs, and
 * whatever ends it, the entry is given up unless the caller owns it
 * (request.c): no node is left behind.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "backend/request.h"
#include "shared/pg_compat.h"
#include "shared/protocol.h"

static void zk_sleep(long wait_ms, ZkKind kind);

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
		zk_hop_woke = zk_mono_now();
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

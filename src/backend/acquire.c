/*-------------------------------------------------------------------------
 *
 * acquire.c
 *	  How a backend acquires what it then holds (holdings.c): re-entrant
 *	  grants on a node it holds, one node asked of the worker, semaphore
 *	  leases, multi-locks.
 *
 * Recipes made of several nodes are composed here, from the engine's
 * single-node requests: semaphore leases are taken under its entry mutex
 * (Curator's InterProcessSemaphoreV2; several leases of one call all under
 * one hold of it, all or none), a multi-lock takes its locks in
 * name order and gives them back on failure (InterProcessMultiLock).
 * The parts after the first are asked with ZKR_NO_RESTART: if the session
 * is lost while they wait, the whole composite starts over (a semaphore,
 * through its entry mutex again) or fails (a multi-lock), rather than one
 * part being granted again in a new session beside parts that were lost.
 *
 * One name is one resource: a backend holding the exclusive lock or the
 * write lock of a name is granted any lock of that name on that node (as
 * Curator grants a write holder its read lock), once the node's session is
 * confirmed, as a re-entrant grant is (confirm_holding): a node of its own
 * asked for instead would queue behind the one it holds.  One holding only
 * the read lock cannot take an exclusive one (that would wait for itself).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "backend/args.h"
#include "backend/holdings_internal.h"
#include "shared/protocol.h"

/*
 * Ask the worker for one node and wait for it until the deadline (0: none);
 * flags and expect_session (a later part of a composite: the session of
 * the earlier parts) as in ZkRequest.  Returns the outcome as zk_wait(): ZKE_HELD when
 * granted (then *id and *generation name it), else the request is gone.
 */
ZkEntryState
take_node(ZkKind kind, const char *name, int flags, int64 expect_session,
		  TimestampTz deadline, int32 arg, int *id, uint32 *generation)
{
	ZkRequest	req;

	memset(&req, 0, sizeof(req));
	req.kind = kind;
	req.name = name;
	req.flags = flags;
	req.arg = arg;
	req.expect_session = expect_session;
	*id = zk_request(&req, generation);
	return zk_wait(*id, *generation, deadline);
}

/*
 * Check a holding before granting on it, as check_holding does; but while
 * its session is not confirmed lately, wait until the deadline (0: none)
 * for the confirmation or the loss.  Returns the holding, all of it held in
 * a confirmed session, or NULL when it is gone (lost in session scope:
 * dropped with a WARNING) or, with *timed_out set, when the deadline came
 * first.  A holding lost in this transaction is an error.
 */
static ZkHolding *
confirm_holding(ZkHolding *h, TimestampTz deadline, bool *timed_out)
{
	bool		ok;

	*timed_out = false;
	h = hold_check(h, &ok, NULL);
	if (h != NULL && !ok)
	{
		/* lost in this transaction, or not confirmed lately */
		ZkAcq	   *a = &h->acqs[h->nacqs - 1];
		TimestampTz limit = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														zklock_connect_timeout);

		/* waiting for ZooKeeper, not for a holder: connect_timeout at most */
		if (deadline == 0 || deadline > limit)
			deadline = limit;
		if (zk_wait_confirmed(a->id, a->generation, deadline) == ZKE_PENDING)
		{
			*timed_out = true;
			return NULL;
		}
		h = hold_check(h, &ok, NULL);
		if (h != NULL && !ok)
			hold_lost_in_xact_error(h);
	}
	return h;
}

/*
 * A holding of this session could not be confirmed in time: the worker
 * could not ask ZooKeeper, so neither true nor false is the answer.
 */
static void
unconfirmed_error(ZkKind kind, const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("could not reach ZooKeeper at \"%s\"", zklock_hosts),
			 errdetail("This session holds zklock %s \"%s\", but the zklock worker could not confirm its ZooKeeper session in time.",
					   zk_kind_name(kind), name),
			 errhint("See SELECT * FROM zk_status() and the zklock worker's messages in the server log; zk_lock_held() tells whether the holding is still vouched for.")));
}

/* The session of the newest acquisition of (kind, name), or 0. */
static int64
held_session(ZkKind kind, const char *name)
{
	ZkHolding  *h = hold_lookup(kind, name);

	if (h == NULL)
		return 0;
	return zk_entry_session(h->acqs[h->nacqs - 1].id,
							h->acqs[h->nacqs - 1].generation);
}

/*
 * A semaphore is sized one way by all the leases a session holds: by
 * max_leases, or by one shared count (each lease's entry names it).
 * Mixing them would make the session's own leases count against two
 * limits.
 */
static void
check_sizing(ZkHolding *h, const char *name, const char *count)
{
	const char *held = ZK_ENTRY(h->acqs[0].id)->count;

	if (strcmp(held, count ? count : "") == 0)
		return;
	if (count == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock semaphore \"%s\" is sized by a shared count in this session", name),
				 errdetail("This session holds leases of it sized by shared count \"%s\", and this call gives max_leases.",
						   held),
				 errhint("Size every acquisition of a semaphore the same way; release its leases first to change.")));
	if (held[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock semaphore \"%s\" is sized by max_leases in this session", name),
				 errdetail("This session holds leases of it taken with max_leases, and this call sizes it by shared count \"%s\".",
						   count),
				 errhint("Size every acquisition of a semaphore the same way; release its leases first to change.")));
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("zklock semaphore \"%s\" is sized by another shared count in this session", name),
			 errdetail("This session holds leases of it sized by shared count \"%s\", and this call sizes it by shared count \"%s\".",
					   held, count),
			 errhint("Size every acquisition of a semaphore the same way; release its leases first to change.")));
}

/*
 * Take qty leases of a semaphore, all or none: its entry mutex, then, under
 * it, the qty lease nodes at once, and wait until all of them hold (see
 * worker/recipes/semaphore.c for why that is exactly "the leases number at
 * most max_leases").  On any other outcome every lease node is given up; the
 * entry mutex is given up in any case.  When the session is lost while the
 * leases wait, the whole protocol starts over within the deadline.  ids
 * and gens get the qty granted entries.  count: the shared count whose
 * value the leases take as max_leases, or NULL.
 */
static ZkEntryState
take_leases(const char *name, const char *count, int flags,
			TimestampTz deadline, int32 max_leases, int32 qty, int *ids,
			uint32 *gens)
{
	for (;;)
	{
		int			mid;
		uint32		mgen;
		volatile int nreq = 0;
		ZkEntryState state;

		state = take_node(ZK_KIND_SEMAPHORE_ENTRY, name, flags, 0, deadline, 0,
						  &mid, &mgen);
		if (state != ZKE_HELD)
			return state;
		PG_TRY();
		{
			ZkRequest	req;

			memset(&req, 0, sizeof(req));
			req.kind = ZK_KIND_SEMAPHORE;
			req.name = name;
			req.count = count;
			req.flags = flags | ZKR_NO_RESTART;
			req.arg = max_leases;
			req.expect_session = zk_entry_session(mid, mgen);
			/* every lease node is asked for before any is waited on */
			for (; nreq < qty; nreq++)
				ids[nreq] = zk_request(&req, &gens[nreq]);
			for (int k = 0; k < qty && state == ZKE_HELD; k++)
				state = zk_wait(ids[k], gens[k], deadline);
		}
		PG_CATCH();
		{
			for (int k = 0; k < nreq; k++)
				zk_give_up(ids[k], gens[k]);
			zk_give_up(mid, mgen);
			PG_RE_THROW();
		}
		PG_END_TRY();
		zk_give_up(mid, mgen);
		if (state == ZKE_HELD)
		{
			/*
			 * The entry mutex goes before the leases are the caller's: an
			 * ERROR (cancel) while waiting for that fails the call, and then
			 * no lease is kept.
			 */
			PG_TRY();
			{
				zk_await_released(true);
			}
			PG_CATCH();
			{
				for (int k = 0; k < qty; k++)
					zk_give_up(ids[k], gens[k]);
				PG_RE_THROW();
			}
			PG_END_TRY();
			return state;
		}
		/* not all granted: none is kept */
		for (int k = 0; k < qty; k++)
			zk_give_up(ids[k], gens[k]);
		if (state != ZKE_LOST)
			return state;
		/* the session went while the leases waited, and so did the time */
		if (deadline != 0 && GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("could not reach ZooKeeper at \"%s\"", zklock_hosts),
					 errdetail("The zklock worker lost its ZooKeeper session while semaphore \"%s\" was being acquired, and the time ran out before a new one could take the leases.",
							   name),
					 errhint("See SELECT * FROM zk_status() and the zklock worker's messages in the server log.")));
	}
}

/*
 * Acquire (kind, name) in session or transaction scope.  timeout_ms 0 does
 * not wait, ZK_WAIT_FOREVER waits without limit.  Returns false when not
 * granted in time.  arg is max_leases for semaphores (the value of count,
 * read just before, for one sized by that shared count), qty the number of
 * leases (1 for every other kind).  A later part of a multi-lock adds
 * ZKR_NO_RESTART to flags and the session of the earlier parts as
 * expect_session.
 */
static bool
hold_acquire(ZkKind kind, const char *name, const char *count, bool xact,
			 int64 timeout_ms, int32 arg, int32 qty, int flags,
			 int64 expect_session)
{
	static const ZkKind exclusive_kinds[] = {ZK_KIND_LOCK, ZK_KIND_WRITE};
	bool		revocable = (flags & ZKR_REVOCABLE) != 0;
	ZkHolding  *h = hold_lookup(kind, name);
	TimestampTz deadline = 0;
	ZkEntryState state;
	bool		timed_out;
	int			id;
	uint32		gen;
	int		   *ids = &id;
	uint32	   *gens = &gen;

	deadline = zk_deadline(timeout_ms);
	if (timeout_ms == 0)
		flags |= ZKR_NOWAIT;

	if (h != NULL)
	{
		h = confirm_holding(h, deadline, &timed_out);
		if (timed_out)
			unconfirmed_error(kind, name);
	}
	if (h != NULL && hold_is_lock_kind(kind))
	{
		ZkAcq	   *a = &h->acqs[0];

		hold_record1(kind, name, a->id, a->generation, xact, revocable);
		return true;
	}

	/*
	 * One name, one resource: our exclusive or write lock covers it.  Its
	 * node is ours even while its session waits for a confirmation, and a
	 * node of our own asked for now would queue behind it: wait for the
	 * confirmation as above.
	 */
	for (int k = 0; hold_is_lock_kind(kind) && k < lengthof(exclusive_kinds); k++)
	{
		ZkHolding  *ex = hold_lookup(exclusive_kinds[k], name);

		if (ex != NULL)
		{
			ex = confirm_holding(ex, deadline, &timed_out);
			if (timed_out)
				unconfirmed_error(exclusive_kinds[k], name);
		}
		if (ex != NULL)
		{
			id = ex->acqs[ex->nacqs - 1].id;
			gen = ex->acqs[ex->nacqs - 1].generation;
			hold_record1(kind, name, id, gen, xact, revocable);
			return true;
		}
	}
	if (kind != ZK_KIND_READ && hold_is_lock_kind(kind) &&
		hold_lookup(ZK_KIND_READ, name) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot upgrade zklock read lock \"%s\" to an exclusive lock",
						name),
				 errdetail("Waiting for an exclusive lock while holding the read lock would wait forever."),
				 errhint("Release the read lock first.")));

	if (kind == ZK_KIND_SEMAPHORE && h != NULL)
		check_sizing(h, name, count);
	if (kind == ZK_KIND_SEMAPHORE && count != NULL)
	{
		/* someone may raise the count: only our own leases cannot wait */
		if (h != NULL && h->nacqs + qty > arg)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg_plural("zklock semaphore \"%s\" cannot grant %d more lease to this session",
								   "zklock semaphore \"%s\" cannot grant %d more leases to this session",
								   qty, name, qty),
					 errdetail("Its size, shared count \"%s\", is %d, and this session holds %d of its leases; waiting for %d more would wait for its own leases unless the count is raised.",
							   count, arg, h->nacqs, qty),
					 errhint("A semaphore, like Curator's InterProcessSemaphoreV2, is not re-entrant: release a lease first, or raise the count.")));
	}
	else if (kind == ZK_KIND_SEMAPHORE && (h ? h->nacqs : 0) + qty > arg)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg_plural("zklock semaphore \"%s\" cannot grant %d more lease to this session",
							   "zklock semaphore \"%s\" cannot grant %d more leases to this session",
							   qty, name, qty),
				 errdetail("max_leases is %d and this session holds %d of them; waiting for %d more would wait for its own leases forever.",
						   arg, h ? h->nacqs : 0, qty),
				 errhint("A semaphore, like Curator's InterProcessSemaphoreMutex, is not re-entrant: release a lease first.")));

	if (kind == ZK_KIND_SEMAPHORE)
	{
		if (qty > 1)
		{
			ids = palloc(sizeof(int) * qty);
			gens = palloc(sizeof(uint32) * qty);
		}
		state = take_leases(name, count, flags, deadline, arg, qty, ids,
							gens);
	}
	else
		state = take_node(kind, name, flags, expect_session, deadline, arg,
						  &id, &gen);

	if (state == ZKE_LOST)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("zklock lost its ZooKeeper session while acquiring %s \"%s\"",
						zk_kind_name(kind), name),
				 errdetail("Locks taken before it in the same call may have been held by another client since."),
				 errhint("Retry the call.")));
	if (state != ZKE_HELD)
		return false;
	hold_record(kind, name, ids, gens, kind == ZK_KIND_SEMAPHORE ? qty : 1, xact,
		   revocable);
	return true;
}

/*
 * Acquire (kind, name); revocable: let go when someone asks the holders to
 * (see let_go_revoked).
 */
bool
zk_hold_acquire(ZkKind kind, const char *name, bool xact, int64 timeout_ms,
				int32 max_leases, bool revocable)
{
	bool		ok;

	if (!xact)
		zk_check_session_scope(zk_kind_name(kind), name,
							   zk_xact_variant(kind));
	ok = hold_acquire(kind, name, NULL, xact, timeout_ms, max_leases, 1,
					  revocable ? ZKR_REVOCABLE : 0, 0);
	zk_await_released(true);	/* what a failed attempt gave up */
	return ok;
}

/*
 * Acquire qty leases of a semaphore in one call, all or none.  Its size is
 * max_leases (1 <= qty <= max_leases, checked by the caller), or with count
 * set the value of that shared count, read first: a count that is not
 * there or not a count fails before anything is asked of the semaphore.
 * One release gives them all back.  instead: the transaction-scope
 * function to name when session scope is refused.
 */
bool
zk_hold_acquire_leases(const char *name, const char *count, bool xact,
					   int64 timeout_ms, int32 max_leases, int32 qty,
					   const char *instead)
{
	bool		ok;

	Assert(qty >= 1 && (count != NULL || qty <= max_leases));
	if (!xact)
		zk_check_session_scope("semaphore", name, instead);
	if (count != NULL)
	{
		/* read first, within the call's time */
		TimestampTz deadline = zk_deadline(timeout_ms);

		max_leases = zk_shared_count_value(count, deadline);
		if (deadline != 0)
			timeout_ms = Max(1, (deadline - GetCurrentTimestamp()) / 1000);
	}
	ok = hold_acquire(ZK_KIND_SEMAPHORE, name, count, xact, timeout_ms,
					  max_leases, qty, 0, 0);
	zk_await_released(true);	/* what a failed attempt gave up */
	return ok;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * Acquire the exclusive locks of all names, or none: in name order (so two
 * sessions asking for overlapping sets cannot deadlock), within one overall
 * timeout; on failure or error the ones taken are released in reverse
 * order.  Duplicate names count once.  Sorts names in place.
 */
bool
zk_hold_acquire_all(char **names, int n, bool xact, int64 timeout_ms)
{
	TimestampTz deadline = 0;
	volatile int taken = 0;
	int64		session = 0;
	bool		ok = true;
	int			u = 0;

	if (!xact)
		zk_check_session_scope("lock", names[0], "zk_lock_acquire_all_xact()");

	/* name order, duplicates once */
	qsort(names, n, sizeof(char *), name_cmp);
	for (int i = 0; i < n; i++)
		if (u == 0 || strcmp(names[i], names[u - 1]) != 0)
			names[u++] = names[i];

	deadline = zk_deadline(timeout_ms);
	PG_TRY();
	{
		while (taken < u)
		{
			int64		left = timeout_ms;

			if (deadline != 0)
				left = Max(1, (deadline - GetCurrentTimestamp()) / 1000);
			if (!hold_acquire(ZK_KIND_LOCK, names[taken], NULL, xact, left, 0, 1,
							  taken > 0 ? ZKR_NO_RESTART : 0, session))
			{
				ok = false;
				break;
			}
			if (taken++ == 0)
				session = held_session(ZK_KIND_LOCK, names[0]);
		}
		/* every part must be held, in this session, now */
		for (int i = 0; ok && i < u; i++)
			if (!zk_hold_is_held(ZK_KIND_LOCK, names[i], NULL))
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("zklock lock \"%s\" was lost while acquiring several locks",
								names[i]),
						 errdetail("Its ZooKeeper session ended or could not be confirmed in time."),
						 errhint("Retry the call.")));
	}
	PG_CATCH();
	{
		/* give back what this call took, newest first; never throws */
		while (taken-- > 0)
			zk_hold_release_last(ZK_KIND_LOCK, names[taken]);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (!ok)
		while (taken-- > 0)
			zk_hold_release_last(ZK_KIND_LOCK, names[taken]);
	zk_await_released(true);
	return ok;
}

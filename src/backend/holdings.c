/*-------------------------------------------------------------------------
 *
 * holdings.c
 *	  A backend's own bookkeeping of what it holds.
 *
 * ZooKeeper sees one node per holder; re-entrancy and scopes are ours to
 * keep, as Curator keeps them beside its node.  This file owns a hash
 * table, in the backend's private memory, of (kind, name) -> holding, and
 * a holding is the list of its acquisitions, each naming:
 *
 *	- the shared entry (id and generation) of its node: re-entrant kinds
 *	  (locks, read and write locks) share one node among all acquisitions,
 *	  a semaphore has one node (lease) per lease: one acquisition per
 *	  lease, and the leases one call took (zk_semaphore_acquire_leases)
 *	  carry the same call number, so that one release returns them all;
 *	- its scope: session (subid 0) or the SubTransactionId that took it, so
 *	  that ROLLBACK TO SAVEPOINT releases what was taken inside the
 *	  savepoint and the end of the transaction releases the rest.
 *
 * When no acquisition refers to a node any more it is handed back to the
 * worker, which deletes it; the call that released it (or COMMIT, or
 * ROLLBACK) returns once that is done (zk_await_released).  The
 * transaction callbacks refuse PREPARE TRANSACTION while transaction-scope
 * holdings exist and refuse COMMIT when one of them was lost.
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
 * Double barrier memberships (zk_hold_barrier_enter/leave) are kept apart
 * from both, in double_barrier.c.
 *
 * What "held" means is request.c's rule (zk_entry_check): the grant
 * belongs to the worker's current ZooKeeper session, confirmed lately.
 * Every re-entrant grant, *_held and *_token answer and the COMMIT check
 * asks it; a holding whose session is gone is lost for every kind and
 * scope.
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

#include "access/xact.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "replication/message.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "backend/args.h"
#include "backend/holdings.h"
#include "shared/pg_compat.h"
#include "shared/protocol.h"

typedef struct ZkHoldingKey
{
	ZkKind		kind;
	char		name[ZK_NAME_MAX + 1];
} ZkHoldingKey;

typedef struct ZkAcq
{
	int			id;				/* shared entry of the node */
	uint32		generation;
	SubTransactionId subid;		/* InvalidSubTransactionId: session scope */
	bool		revocable;		/* let go when revoked (see let_go_revoked) */
	uint32		call;			/* the acquiring call: the leases of one
								 * multi-lease acquire share it */
} ZkAcq;

typedef struct ZkHolding
{
	ZkHoldingKey key;			/* hash key: must be first */
	int			nacqs;
	int			maxacqs;
	ZkAcq	   *acqs;			/* in TopMemoryContext */
} ZkHolding;

#define SESSION_SCOPE InvalidSubTransactionId

static HTAB *holdings = NULL;

/* numbers the acquiring calls (ZkAcq.call) */
static uint32 last_call = 0;

/*
 * Job claims of this transaction (zk_hold_claim), in TopMemoryContext:
 * always transaction scope, made final at PRE_COMMIT, given up at the end
 * of the transaction or of the subtransaction that took them.  Given up by
 * an abort (or by an exit in the middle of the transaction), a claim that
 * was made final is reopened by the worker: COMMIT can still fail after
 * PRE_COMMIT (a serialization failure found at commit, another extension's
 * pre-commit callback).
 */
typedef struct ZkClaim
{
	int			id;
	uint32		generation;
	SubTransactionId subid;
	TimestampTz slot;
	char	   *job;
} ZkClaim;

static List *claims = NIL;
static bool claims_exit_registered = false;
static bool claims_finalized = false;	/* this transaction's COMMIT made
										 * them final: no more claims */

static void zk_xact_callback(XactEvent event, void *arg);
static void release_claims(SubTransactionId from, bool aborted);
static void zk_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								SubTransactionId parentSubid, void *arg);

static bool
is_lock_kind(ZkKind kind)
{
	return kind == ZK_KIND_LOCK || kind == ZK_KIND_READ ||
		kind == ZK_KIND_WRITE;
}

static void
holdings_init(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(ZkHoldingKey);
	ctl.entrysize = sizeof(ZkHolding);
	ctl.hcxt = TopMemoryContext;
	holdings = hash_create("zklock holdings", 16, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/*
 * Register the transaction callbacks, once, while the library is preloaded
 * (_PG_init in the postmaster): PostgreSQL calls the callbacks newest
 * first, so zklock's PRE_COMMIT work (a job claim made final) runs after
 * that of every extension loaded later, such as postgres_fdw's remote
 * commits.  Nothing lets it run after those of a library preloaded before
 * zklock, nor after the rest of COMMIT: a claim's fate is read from the
 * commit log all the same (worker/recipes/claim.c).  Both callbacks do
 * nothing in a process that never held anything.
 */
void
zk_holdings_register_callbacks(void)
{
	RegisterXactCallback(zk_xact_callback, NULL);
	RegisterSubXactCallback(zk_subxact_callback, NULL);
}

static void
make_key(ZkHoldingKey *key, ZkKind kind, const char *name)
{
	memset(key, 0, sizeof(*key));
	key->kind = kind;
	strlcpy(key->name, name, sizeof(key->name));
}

static ZkHolding *
lookup(ZkKind kind, const char *name)
{
	ZkHoldingKey key;

	if (holdings == NULL)
		holdings_init();
	make_key(&key, kind, name);
	return hash_search(holdings, &key, HASH_FIND, NULL);
}

/*
 * Publish the scope counts of one node, over every holding that uses it,
 * for zk_locks; and whether it is revocable: only when every acquisition
 * that uses it is, since only then does letting go of the revocable ones
 * (let_go_revoked) give the node up, which is what signalling the session
 * is for.
 */
static void
publish_counts(int id, uint32 generation)
{
	HASH_SEQ_STATUS status;
	ZkHolding  *h;
	int			nsession = 0;
	int			nxact = 0;
	bool		revocable = true;

	hash_seq_init(&status, holdings);
	while ((h = hash_seq_search(&status)) != NULL)
		for (int i = 0; i < h->nacqs; i++)
			if (h->acqs[i].id == id && h->acqs[i].generation == generation)
			{
				if (h->acqs[i].subid == SESSION_SCOPE)
					nsession++;
				else
					nxact++;
				revocable &= h->acqs[i].revocable;
			}
	zk_entry_publish(id, generation, nsession, nxact,
					 revocable && nsession + nxact > 0);
}

/* Does any acquisition of any holding use this node? */
static bool
node_in_use(int id, uint32 generation)
{
	HASH_SEQ_STATUS status;
	ZkHolding  *h;

	hash_seq_init(&status, holdings);
	while ((h = hash_seq_search(&status)) != NULL)
		for (int j = 0; j < h->nacqs; j++)
			if (h->acqs[j].id == id && h->acqs[j].generation == generation)
			{
				hash_seq_term(&status);
				return true;
			}
	return false;
}

/*
 * Remove acquisition i; hand its node back to the worker unless another
 * acquisition still uses it.  The holding goes when it has none left: then
 * returns true, and h must not be used any more.  Never throws: it runs in
 * abort callbacks.
 */
static bool
remove_acq(ZkHolding *h, int i)
{
	ZkAcq		a = h->acqs[i];

	h->nacqs--;
	memmove(&h->acqs[i], &h->acqs[i + 1], sizeof(ZkAcq) * (h->nacqs - i));
	if (node_in_use(a.id, a.generation))
		publish_counts(a.id, a.generation);
	else
		zk_give_up(a.id, a.generation);
	if (h->nacqs > 0)
		return false;
	pfree(h->acqs);
	hash_search(holdings, &h->key, HASH_REMOVE, NULL);
	return true;
}

/*
 * Remove acquisition i and every other acquisition of the call that made it
 * (the leases of a multi-lease acquire go together).  Returns true when the
 * holding is gone, as remove_acq.  Never throws.
 */
static bool
remove_call(ZkHolding *h, int i)
{
	uint32		call = h->acqs[i].call;

	for (int j = h->nacqs - 1; j >= 0; j--)
		if (h->acqs[j].call == call && remove_acq(h, j))
			return true;
	return false;
}

/* Index of the newest session-scope acquisition, or -1. */
static int
last_session_acq(ZkHolding *h)
{
	for (int i = h->nacqs - 1; i >= 0; i--)
		if (h->acqs[i].subid == SESSION_SCOPE)
			return i;
	return -1;
}

static void
lost_in_xact_error(ZkHolding *h)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("zklock %s \"%s\" held by this transaction was lost",
					zk_kind_name(h->key.kind), h->key.name),
			 errdetail("Its ZooKeeper session ended or could not be confirmed in time, so another client may hold it."),
			 errhint("Roll back and retry the transaction.")));
}

/*
 * Session-scope holdings found lost and dropped (each acquisition once), so
 * that the releases still to come for them say so instead of "you don't
 * own", as pg_advisory_unlock would for a lock never held; the release
 * of every holding forgets them.  A list of "kind:name" strings in
 * TopMemoryContext, at most MAX_LOST long (the oldest go first).
 */
#define MAX_LOST	64
static List *lost = NIL;

static char *
lost_key(ZkKind kind, const char *name)
{
	return psprintf("%d:%s", (int) kind, name);
}

static void
note_lost(ZkKind kind, const char *name)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	if (list_length(lost) >= MAX_LOST)
	{
		pfree(linitial(lost));
		lost = list_delete_first(lost);
	}
	lost = lappend(lost, lost_key(kind, name));
	MemoryContextSwitchTo(old);
}

/* Forget one lost acquisition of (kind, name); false if there is none. */
static bool
forget_lost(ZkKind kind, const char *name)
{
	char	   *key = lost_key(kind, name);
	ListCell   *lc;
	bool		found = false;

	foreach(lc, lost)
	{
		if (strcmp(lfirst(lc), key) == 0)
		{
			pfree(lfirst(lc));
			lost = foreach_delete_current(lost, lc);
			found = true;
			break;
		}
	}
	pfree(key);
	return found;
}

/*
 * Check the holding's nodes.  Session-scope acquisitions of a lost node are
 * reported with a WARNING and dropped; transaction-scope ones stay, so that
 * the transaction cannot commit.  Returns the holding if it still exists
 * and all its nodes are held in a confirmed session (then *token gets the
 * newest node's token), else NULL when it is gone, or the holding with
 * *all_held false (lost in transaction scope, or not confirmed lately).
 */
static ZkHolding *
check_holding(ZkHolding *h, bool *all_held, int64 *token)
{
	bool		warned = false;

	*all_held = true;
	for (int i = h->nacqs - 1; i >= 0; i--)
	{
		ZkEntryState state = zk_entry_check(h->acqs[i].id,
											h->acqs[i].generation, NULL);

		if (state == ZKE_HELD)
			continue;
		*all_held = false;
		if (state == ZKE_PENDING || h->acqs[i].subid != SESSION_SCOPE)
			continue;			/* unconfirmed for now; or fails COMMIT */
		if (!warned)
			ereport(WARNING,
					(errcode(ERRCODE_WARNING),
					 errmsg("zklock %s \"%s\" was lost", zk_kind_name(h->key.kind),
							h->key.name),
					 errdetail("Its ZooKeeper session ended, so another client may have held it since.")));
		warned = true;
		note_lost(h->key.kind, h->key.name);
		if (remove_acq(h, i))
			return NULL;
	}
	if (token)
		(void) zk_entry_check(h->acqs[h->nacqs - 1].id,
							  h->acqs[h->nacqs - 1].generation, token);
	return h;
}

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
 * Record the acquisition of n granted nodes by one call (one node, or the
 * leases of a multi-lease acquire), all or none: on failure every node is
 * given up.
 */
static void
record(ZkKind kind, const char *name, const int *ids, const uint32 *gens,
	   int n, bool xact, bool revocable)
{
	ZkHoldingKey key;
	ZkHolding  *volatile h = NULL;
	volatile bool added = false;

	make_key(&key, kind, name);
	PG_TRY();
	{
		bool		found;
		SubTransactionId subid = xact ? GetCurrentSubTransactionId() :
		SESSION_SCOPE;

		h = hash_search(holdings, &key, HASH_ENTER, &found);
		if (!found)
		{
			h->nacqs = 0;
			h->maxacqs = 0;
			h->acqs = NULL;
			h->acqs = MemoryContextAlloc(TopMemoryContext,
										 sizeof(ZkAcq) * Max(4, n));
			h->maxacqs = Max(4, n);
		}
		if (h->nacqs + n > h->maxacqs)
		{
			int			m = Max(h->maxacqs * 2, h->nacqs + n);

			h->acqs = repalloc(h->acqs, sizeof(ZkAcq) * m);
			h->maxacqs = m;
		}
		/* nothing below allocates */
		last_call++;
		for (int k = 0; k < n; k++)
		{
			ZkAcq	   *a = &h->acqs[h->nacqs++];

			a->id = ids[k];
			a->generation = gens[k];
			a->subid = subid;
			a->call = last_call;
			a->revocable = revocable;
		}
		added = true;
		for (int k = 0; k < n; k++)
			publish_counts(ids[k], gens[k]);
	}
	PG_CATCH();
	{
		if (added)
			(void) remove_call(h, h->nacqs - 1);
		else
		{
			for (int k = 0; k < n; k++)
				zk_give_up(ids[k], gens[k]);
			if (h != NULL && h->nacqs == 0)
			{
				/* a holding just made, with nothing in it */
				if (h->acqs != NULL)
					pfree(h->acqs);
				hash_search(holdings, &key, HASH_REMOVE, NULL);
			}
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* Record the acquisition of one granted node. */
static void
record1(ZkKind kind, const char *name, int id, uint32 generation, bool xact,
		bool revocable)
{
	record(kind, name, &id, &generation, 1, xact, revocable);
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
	h = check_holding(h, &ok, NULL);
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
		h = check_holding(h, &ok, NULL);
		if (h != NULL && !ok)
			lost_in_xact_error(h);
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
	ZkHolding  *h = lookup(kind, name);

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
	ZkHolding  *h = lookup(kind, name);
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
	if (h != NULL && is_lock_kind(kind))
	{
		ZkAcq	   *a = &h->acqs[0];

		record1(kind, name, a->id, a->generation, xact, revocable);
		return true;
	}

	/*
	 * One name, one resource: our exclusive or write lock covers it.  Its
	 * node is ours even while its session waits for a confirmation, and a
	 * node of our own asked for now would queue behind it: wait for the
	 * confirmation as above.
	 */
	for (int k = 0; is_lock_kind(kind) && k < lengthof(exclusive_kinds); k++)
	{
		ZkHolding  *ex = lookup(exclusive_kinds[k], name);

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
			record1(kind, name, id, gen, xact, revocable);
			return true;
		}
	}
	if (kind != ZK_KIND_READ && is_lock_kind(kind) &&
		lookup(ZK_KIND_READ, name) != NULL)
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
	record(kind, name, ids, gens, kind == ZK_KIND_SEMAPHORE ? qty : 1, xact,
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

/*
 * Undo the newest acquisition of (kind, name), whatever its scope: for
 * zk_hold_acquire_all giving back what it took.
 */
void
zk_hold_release_last(ZkKind kind, const char *name)
{
	ZkHolding  *h = lookup(kind, name);

	if (h != NULL)
		(void) remove_call(h, h->nacqs - 1);
}

/*
 * Release the newest session-scope acquisition of (kind, name): for a
 * semaphore, every lease its acquiring call took.  Like
 * pg_advisory_unlock: false and a WARNING when this backend does not hold
 * it in session scope.
 */
bool
zk_hold_release(ZkKind kind, const char *name)
{
	ZkHolding  *h = lookup(kind, name);
	bool		all_held;
	int			i;

	if (h != NULL)
	{
		h = check_holding(h, &all_held, NULL);
		if (h == NULL)
		{
			/* lost: check_holding said so; this release was one of them */
			(void) forget_lost(kind, name);
			return false;
		}
	}
	if (h == NULL && forget_lost(kind, name))
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("zklock %s \"%s\" was lost before this release",
						zk_kind_name(kind), name),
				 errdetail("Its ZooKeeper session ended while this session held it, so another client may have held it since.")));
		return false;
	}
	if (h == NULL || (i = last_session_acq(h)) < 0)
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("you don't own a zklock %s named \"%s\"",
						zk_kind_name(kind), name),
				 h ? errhint("Transaction-scope locks are released when the transaction ends.") : 0));
		return false;
	}
	(void) remove_call(h, i);
	zk_await_released(true);
	return true;
}

/*
 * Release every session-scope acquisition of this backend; returns how
 * many distinct holdings (kind and name) that concerned.
 */
int
zk_hold_release_all(void)
{
	HASH_SEQ_STATUS status;
	ZkHolding  *h;
	int			n = 0;

	if (holdings == NULL)
		return 0;
	hash_seq_init(&status, holdings);
	while ((h = hash_seq_search(&status)) != NULL)
	{
		bool		all_held;
		int			i;
		bool		any = false;

		if (check_holding(h, &all_held, NULL) == NULL)
			continue;
		while ((i = last_session_acq(h)) >= 0)
		{
			any = true;
			if (remove_acq(h, i))
				break;
		}
		if (any)
			n++;
	}
	zk_await_released(true);
	list_free_deep(lost);
	lost = NIL;
	return n;
}

/*
 * Does this backend hold (kind, name) now, with a session the worker has
 * confirmed recently enough?  *token gets the fencing token of its newest
 * node.
 */
bool
zk_hold_is_held(ZkKind kind, const char *name, int64 *token)
{
	ZkHolding  *h = lookup(kind, name);
	bool		all_held;
	int64		t;

	if (h == NULL || check_holding(h, &all_held, &t) == NULL || !all_held)
		return false;
	if (token)
		*token = t;
	return true;
}

/*
 * Has someone asked the holders of name (its exclusive, read or write
 * lock) to let go, while this backend holds it?  False when it holds none
 * of them.
 */
bool
zk_hold_revocation_requested(const char *name)
{
	static const ZkKind kinds[] = {ZK_KIND_LOCK, ZK_KIND_READ, ZK_KIND_WRITE};

	for (int k = 0; k < lengthof(kinds); k++)
	{
		ZkHolding  *h = lookup(kinds[k], name);

		for (int i = 0; h != NULL && i < h->nacqs; i++)
			if (zk_entry_revoke_requested(h->acqs[i].id, h->acqs[i].generation))
				return true;
	}
	return false;
}

/*
 * At the end of a transaction: let go of every revocable acquisition
 * (revocable => true) whose holders were asked to let go, whatever its
 * scope, with a WARNING saying why.  The worker has sent this backend
 * SIGINT when the request came, which cancelled the statement running
 * then; a backend that was idle lets go at the end of its next
 * transaction.  Never throws (it runs in abort callbacks).
 */
static void
let_go_revoked(void)
{
	HASH_SEQ_STATUS status;
	ZkHolding  *h;

	if (holdings == NULL)
		return;
	hash_seq_init(&status, holdings);
	while ((h = hash_seq_search(&status)) != NULL)
	{
		bool		gone = false;
		bool		warned = false;

		for (int i = h->nacqs - 1; i >= 0 && !gone; i--)
		{
			if (!h->acqs[i].revocable ||
				!zk_entry_revoke_requested(h->acqs[i].id, h->acqs[i].generation))
				continue;
			if (!warned)
				ereport(WARNING,
						(errcode(ERRCODE_WARNING),
						 errmsg("zklock %s \"%s\" was revoked; this session let go of it",
								zk_kind_name(h->key.kind), h->key.name),
						 errdetail("Someone asked its holders to let go (zk_lock_revoke or Curator's Revoker), and it was acquired with revocable => true."),
						 errhint("A statement running when the request came was cancelled.")));
			warned = true;
			gone = remove_acq(h, i);
		}
	}
}

/* Release the transaction-scope acquisitions made in subids >= from. */
static void
release_xact(SubTransactionId from)
{
	HASH_SEQ_STATUS status;
	ZkHolding  *h;

	if (holdings == NULL)
		return;
	hash_seq_init(&status, holdings);
	while ((h = hash_seq_search(&status)) != NULL)
	{
		for (int i = h->nacqs - 1; i >= 0; i--)
		{
			if (h->acqs[i].subid == SESSION_SCOPE || h->acqs[i].subid < from)
				continue;
			if (remove_acq(h, i))
				break;
		}
	}
}

/* The first holding with a transaction-scope acquisition, or NULL. */
static ZkHolding *
first_xact_holding(bool only_unsafe)
{
	HASH_SEQ_STATUS status;
	ZkHolding  *h;

	hash_seq_init(&status, holdings);
	while ((h = hash_seq_search(&status)) != NULL)
	{
		for (int i = 0; i < h->nacqs; i++)
		{
			if (h->acqs[i].subid == SESSION_SCOPE)
				continue;
			if (!only_unsafe ||
				!zk_entry_valid(h->acqs[i].id, h->acqs[i].generation, NULL))
			{
				hash_seq_term(&status);
				return h;
			}
		}
	}
	return NULL;
}

/* ---- job claims ---- */

static char *
claim_slot_text(const ZkClaim *c)
{
	return DatumGetCString(DirectFunctionCall1(timestamptz_out,
											   TimestampTzGetDatum(c->slot)));
}

/*
 * before_shmem_exit callback: a backend leaving in the middle of a
 * transaction (FATAL, pg_terminate_backend) never commits it.
 */
static void
claims_exit(int code, Datum arg)
{
	release_claims(TopSubTransactionId, true);
}

/*
 * Claim (job, slot) for this transaction: true when the worker created the
 * claim node (or this transaction holds it already), false when anyone else
 * has finished it, or holds it and timeout_ms (0: at once; ZK_WAIT_FOREVER)
 * passes before that claim ends; when it ends without being made final,
 * the slot is open and this call claims it.
 */
bool
zk_hold_claim(const char *job, TimestampTz slot, int64 timeout_ms)
{
	ZkRequest	req;
	ZkEntryState state;
	ListCell   *lc;
	int			id;
	uint32		gen;

	if (holdings == NULL)
		holdings_init();
	foreach(lc, claims)
	{
		ZkClaim    *c = lfirst(lc);

		if (c->slot == slot && strcmp(c->job, job) == 0)
			return true;		/* ours already; COMMIT checks it */
	}
	if (claims_finalized)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("cannot claim zklock job \"%s\" while the transaction commits",
						job),
				 errdetail("The transaction's claims were made final already.")));

	memset(&req, 0, sizeof(req));
	req.kind = ZK_KIND_JOB_CLAIM;
	req.name = job;
	req.flags = timeout_ms == 0 ? ZKR_NOWAIT : 0;
	req.targ = slot;
	id = zk_request(&req, &gen);
	if (!claims_exit_registered)
	{
		/*
		 * Registered after zk_request's own exit hook, so it runs first:
		 * before that hook gives every entry up without a word, this one
		 * gives the claims of an unfinished transaction up as aborted.
		 */
		before_shmem_exit(claims_exit, (Datum) 0);
		claims_exit_registered = true;
	}
	state = zk_wait(id, gen, zk_deadline(timeout_ms));
	if (state == ZKE_LOST)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("zklock lost its ZooKeeper session while claiming job \"%s\"",
						job),
				 errhint("Retry the call.")));
	if (state != ZKE_HELD)
		return false;

	PG_TRY();
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		ZkClaim    *c = palloc(sizeof(ZkClaim));

		c->id = id;
		c->generation = gen;
		c->subid = GetCurrentSubTransactionId();
		c->slot = slot;
		c->job = pstrdup(job);
		claims = lappend(claims, c);
		MemoryContextSwitchTo(old);
		zk_entry_publish(id, gen, 0, 1, false);
	}
	PG_CATCH();
	{
		zk_give_up(id, gen);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return true;
}

/*
 * Give up the claims taken in subids >= from.  aborted: the transaction did
 * not commit, so the worker reopens those made final.  Never throws, never
 * waits.
 */
static void
release_claims(SubTransactionId from, bool aborted)
{
	ListCell   *lc;

	foreach(lc, claims)
	{
		ZkClaim    *c = lfirst(lc);

		if (c->subid < from)
			continue;
		zk_give_up_asking(c->id, c->generation,
						  aborted ? ZK_ASK_REOPEN : ZK_ASK_COMMITTED);
		claims = foreach_delete_current(claims, lc);
		pfree(c->job);
		pfree(c);
	}
}

static void
claim_lost_error(const ZkClaim *c)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("zklock job claim \"%s\" for slot %s held by this transaction was lost",
					c->job, claim_slot_text(c)),
			 errdetail("Its ZooKeeper session ended or could not be confirmed in time, so another client may claim the slot."),
			 errhint("Roll back and retry the transaction.")));
}

/*
 * What identifies the transaction's outcome in the commit log, for claims
 * made final: its full xid (one is assigned if it had none) and the end of
 * a WAL record of that xid, flushed before the claim is made final.  The
 * flushed record keeps the xid from being handed out again after a crash
 * of this instance, and after a failover the timeline and the position
 * tell the new primary whether this transaction is in its history at all
 * (worker/recipes/claim.c, xact_outcome).  A standby assigns no xid: its
 * claims are final at PRE_COMMIT (at most once).
 */
static void
claims_xact(ZkClaimXact *x)
{
	static const char msg[] = "job claim made final";
	XLogRecPtr	end;

	memset(x, 0, sizeof(*x));
	if (RecoveryInProgress())
		return;
	x->xid = U64FromFullTransactionId(GetTopFullTransactionId());
	end = ZkLogLogicalMessage("zklock", msg, sizeof(msg) - 1);
	XLogFlush(end);
	x->lsn = end;
	x->timeline = GetWALInsertionTimeLine();
	x->has_xid = true;
}

/*
 * PRE_COMMIT: make every claim of the transaction final, one after
 * another.  Any failure fails the COMMIT with 40001, and the abort that
 * follows gives the claims up (the slot is open again).
 */
static void
finalize_claims(void)
{
	ListCell   *lc;
	ZkClaimXact xact;

	if (claims == NIL)
		return;
	claims_finalized = true;
	claims_xact(&xact);
	foreach(lc, claims)
	{
		ZkClaim    *c = lfirst(lc);
		MemoryContext ccxt = CurrentMemoryContext;

		if (!zk_entry_valid(c->id, c->generation, NULL))
			claim_lost_error(c);
		PG_TRY();
		{
			zk_set_claim_xact(c->id, c->generation, &xact);
			zk_ask(c->id, c->generation, ZK_ASK_FINALIZE,
				   TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											   zklock_session_timeout));
		}
		PG_CATCH();
		{
			ErrorData  *ed;

			/* whatever went wrong, the commit fails as for a lost lock */
			MemoryContextSwitchTo(ccxt);
			ed = CopyErrorData();
			FlushErrorState();
			ed->sqlerrcode = ERRCODE_T_R_SERIALIZATION_FAILURE;
			if (ed->hint == NULL)
				ed->hint = pstrdup("The transaction is rolled back and the slot stays open; retry it.");
			ReThrowError(ed);
		}
		PG_END_TRY();
	}
}

static void
zk_xact_callback(XactEvent event, void *arg)
{
	ZkHolding  *h;

	if (holdings == NULL)
		return;					/* nothing was ever held here */
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			/* work done under a lost lock must not commit */
			if ((h = first_xact_holding(true)) != NULL)
				lost_in_xact_error(h);
			/* the last thing that can fail: the claims become final */
			finalize_claims();
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (claims != NIL)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that holds zklock job claims"),
						 errdetail("The claim of job \"%s\" is held by this backend's ZooKeeper session and cannot outlive it.",
								   ((ZkClaim *) linitial(claims))->job)));
			if ((h = first_xact_holding(false)) != NULL)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that holds transaction-scope zklock locks"),
						 errdetail("The %s \"%s\" is held by this backend's ZooKeeper session and cannot outlive it.",
								   zk_kind_name(h->key.kind), h->key.name)));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			let_go_revoked();
			/* FALLTHROUGH */
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			release_xact(TopSubTransactionId);
			release_claims(TopSubTransactionId,
						   event == XACT_EVENT_ABORT ||
						   event == XACT_EVENT_PARALLEL_ABORT);
			claims_finalized = false;
			/* what the transaction held is free when COMMIT returns */
			zk_await_released(false);
			break;
		default:
			break;
	}
}

static void
zk_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	if (holdings == NULL)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		release_xact(mySubid);
		release_claims(mySubid, true);
		zk_await_released(false);
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		ListCell   *lc;

		foreach(lc, claims)
			if (((ZkClaim *) lfirst(lc))->subid == mySubid)
				((ZkClaim *) lfirst(lc))->subid = parentSubid;
	}
	if (event == SUBXACT_EVENT_COMMIT_SUB && holdings != NULL)
	{
		HASH_SEQ_STATUS status;
		ZkHolding  *h;

		/* the parent inherits what the committed subtransaction took */
		hash_seq_init(&status, holdings);
		while ((h = hash_seq_search(&status)) != NULL)
			for (int i = 0; i < h->nacqs; i++)
				if (h->acqs[i].subid == mySubid)
					h->acqs[i].subid = parentSubid;
	}
}

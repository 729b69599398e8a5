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
 * Acquiring (re-entrant grants, semaphore leases, multi-locks) is in
 * acquire.c; job claims, kept apart, in claim.c; double barrier
 * memberships (zk_hold_barrier_enter/leave) in double_barrier.c.
 *
 * What "held" means is request.c's rule (zk_entry_check): the grant
 * belongs to the worker's current ZooKeeper session, confirmed lately.
 * Every re-entrant grant, *_held and *_token answer and the COMMIT check
 * asks it; a holding whose session is gone is lost for every kind and
 * scope.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "backend/args.h"
#include "backend/holdings_internal.h"
#include "shared/pg_compat.h"
#include "shared/protocol.h"

static HTAB *holdings = NULL;

/*
 * How many acquisitions, of every holding, use one node (a node is shared
 * by the lock kinds of one name, see above): kept as acquisitions come and
 * go, as PostgreSQL's LOCALLOCK keeps its count, so that releasing many
 * holdings is linear.  An entry exists while some acquisition uses the node
 * (or, for a moment, while hold_record() adds its first ones).
 */
typedef struct ZkNodeKey
{
	int			id;				/* shared entry of the node */
	uint32		generation;
} ZkNodeKey;

typedef struct ZkNodeUse
{
	ZkNodeKey	key;			/* hash key: must be first */
	int			nsession;		/* session-scope acquisitions using it */
	int			nxact;			/* transaction-scope ones */
	int			nfixed;			/* of either, those not revocable */
} ZkNodeUse;

static HTAB *node_uses = NULL;

/* numbers the acquiring calls (ZkAcq.call) */
static uint32 last_call = 0;

static void zk_xact_callback(XactEvent event, void *arg);
static void zk_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								SubTransactionId parentSubid, void *arg);

bool
hold_is_lock_kind(ZkKind kind)
{
	return kind == ZK_KIND_LOCK || kind == ZK_KIND_READ ||
		kind == ZK_KIND_WRITE;
}

/*
 * Set up this backend's bookkeeping, once: until then the transaction
 * callbacks have nothing to do.  Job claims (claim.c) call it too.
 */
void
zk_holdings_init(void)
{
	HASHCTL		ctl;

	if (holdings != NULL)
		return;
	ctl.keysize = sizeof(ZkNodeKey);
	ctl.entrysize = sizeof(ZkNodeUse);
	ctl.hcxt = TopMemoryContext;
	node_uses = hash_create("zklock holding nodes", 16, &ctl,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	ctl.keysize = sizeof(ZkHoldingKey);
	ctl.entrysize = sizeof(ZkHolding);
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
 * commit log all the same (worker/recipes/claim_settle.c).  Both callbacks do
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

ZkHolding *
hold_lookup(ZkKind kind, const char *name)
{
	ZkHoldingKey key;

	zk_holdings_init();
	make_key(&key, kind, name);
	return hash_search(holdings, &key, HASH_FIND, NULL);
}

/* The count of the acquisitions using a node, or NULL if none does. */
static ZkNodeUse *
node_use(int id, uint32 generation)
{
	ZkNodeKey	key;

	key.id = id;
	key.generation = generation;
	return hash_search(node_uses, &key, HASH_FIND, NULL);
}

/* Count acquisition a in (delta 1) or out (delta -1) of its node's uses. */
static void
count_acq(ZkNodeUse *u, const ZkAcq *a, int delta)
{
	if (a->subid == SESSION_SCOPE)
		u->nsession += delta;
	else
		u->nxact += delta;
	if (!a->revocable)
		u->nfixed += delta;
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
	ZkNodeUse  *u = node_use(id, generation);
	int			nsession = u ? u->nsession : 0;
	int			nxact = u ? u->nxact : 0;

	zk_entry_publish(id, generation, nsession, nxact,
					 u != NULL && u->nfixed == 0 && nsession + nxact > 0);
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

	ZkNodeUse  *u = node_use(a.id, a.generation);

	h->nacqs--;
	memmove(&h->acqs[i], &h->acqs[i + 1], sizeof(ZkAcq) * (h->nacqs - i));
	Assert(u != NULL);
	count_acq(u, &a, -1);
	if (u->nsession + u->nxact > 0)
		publish_counts(a.id, a.generation);
	else
	{
		(void) hash_search(node_uses, &u->key, HASH_REMOVE, NULL);
		zk_give_up(a.id, a.generation);
	}
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

void
hold_lost_in_xact_error(ZkHolding *h)
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
ZkHolding *
hold_check(ZkHolding *h, bool *all_held, int64 *token)
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
 * Record the acquisition of n granted nodes by one call (one node, or the
 * leases of a multi-lease acquire), all or none: on failure every node is
 * given up.
 */
void
hold_record(ZkKind kind, const char *name, const int *ids, const uint32 *gens,
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

		/* the nodes' counts first (on failure those still empty go) */
		for (int k = 0; k < n; k++)
		{
			ZkNodeKey	nkey = {ids[k], gens[k]};
			ZkNodeUse  *u = hash_search(node_uses, &nkey, HASH_ENTER, &found);

			if (!found)
				u->nsession = u->nxact = u->nfixed = 0;
		}
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
			count_acq(node_use(a->id, a->generation), a, 1);
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
			{
				ZkNodeUse  *u = node_use(ids[k], gens[k]);

				/* a count just made, with nothing in it */
				if (u != NULL && u->nsession + u->nxact == 0)
					(void) hash_search(node_uses, &u->key, HASH_REMOVE, NULL);
				zk_give_up(ids[k], gens[k]);
			}
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
void
hold_record1(ZkKind kind, const char *name, int id, uint32 generation, bool xact,
		bool revocable)
{
	hold_record(kind, name, &id, &generation, 1, xact, revocable);
}

/*
 * Undo the newest acquisition of (kind, name), whatever its scope: for
 * zk_hold_acquire_all giving back what it took.
 */
void
zk_hold_release_last(ZkKind kind, const char *name)
{
	ZkHolding  *h = hold_lookup(kind, name);

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
	ZkHolding  *h = hold_lookup(kind, name);
	bool		all_held;
	int			i;

	if (h != NULL)
	{
		h = hold_check(h, &all_held, NULL);
		if (h == NULL)
		{
			/* lost: hold_check said so; this release was one of them */
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

		if (hold_check(h, &all_held, NULL) == NULL)
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
	ZkHolding  *h = hold_lookup(kind, name);
	bool		all_held;
	int64		t;

	if (h == NULL || hold_check(h, &all_held, &t) == NULL || !all_held)
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
		ZkHolding  *h = hold_lookup(kinds[k], name);

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
				hold_lost_in_xact_error(h);
			/* the last thing that can fail: the claims become final */
			zk_claims_finalize();
			break;
		case XACT_EVENT_PRE_PREPARE:
			zk_claims_check_prepare();
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
			zk_claims_release(TopSubTransactionId,
							  event == XACT_EVENT_ABORT ||
							  event == XACT_EVENT_PARALLEL_ABORT);
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
		zk_claims_release(mySubid, true);
		zk_await_released(false);
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		HASH_SEQ_STATUS status;
		ZkHolding  *h;

		/* the parent inherits what the committed subtransaction took */
		zk_claims_subcommit(mySubid, parentSubid);
		hash_seq_init(&status, holdings);
		while ((h = hash_seq_search(&status)) != NULL)
			for (int i = 0; i < h->nacqs; i++)
				if (h->acqs[i].subid == mySubid)
					h->acqs[i].subid = parentSubid;
	}
}

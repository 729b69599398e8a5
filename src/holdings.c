/*-------------------------------------------------------------------------
 *
 * holdings.c
 *	  A backend's own bookkeeping of what it holds.
 *
 * ZooKeeper sees one node per holder; re-entrancy and scopes are ours to
 * keep, as Curator keeps them beside its node.  This file owns a hash
 * table, in the backend's private memory, of (kind, name) -> holding:
 *
 *	- the shared entry (id and generation) of the node;
 *	- the session-scope count (re-entrant, released one level at a time);
 *	- one SubTransactionId per transaction-scope acquisition, so that
 *	  ROLLBACK TO SAVEPOINT releases what was taken inside the savepoint
 *	  and the end of the transaction releases the rest.
 *
 * When both counts drop to zero the entry is handed back to the worker,
 * which deletes the node; the backend does not wait for that.  The
 * transaction callbacks refuse PREPARE TRANSACTION while transaction-scope
 * locks are held and refuse COMMIT when one of them was lost.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "nodes/pg_list.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "holdings.h"
#include "protocol.h"

typedef struct ZkHoldingKey
{
	ZkKind		kind;
	char		name[ZK_NAME_MAX + 1];
} ZkHoldingKey;

typedef struct ZkHolding
{
	ZkHoldingKey key;			/* hash key: must be first */
	int			id;				/* shared entry */
	uint32		generation;
	int64		session_count;
	List	   *xact_subids;	/* one SubTransactionId per xact acquisition */
} ZkHolding;

static HTAB *holdings = NULL;

static void zk_xact_callback(XactEvent event, void *arg);
static void zk_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								SubTransactionId parentSubid, void *arg);

static void
holdings_init(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(ZkHoldingKey);
	ctl.entrysize = sizeof(ZkHolding);
	ctl.hcxt = TopMemoryContext;
	holdings = hash_create("zklock holdings", 16, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
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

/* Hand the node back to the worker and forget the holding. */
static void
drop(ZkHolding *h)
{
	zk_give_up(h->id, h->generation);
	list_free(h->xact_subids);
	hash_search(holdings, &h->key, HASH_REMOVE, NULL);
}

/* Drop the holding if neither scope holds it any more. */
static void
drop_if_unused(ZkHolding *h)
{
	if (h->session_count == 0 && h->xact_subids == NIL)
		drop(h);
}

/*
 * Is the holding still good?  A lost session-scope holding is reported
 * with a WARNING and dropped; a lost transaction-scope one stays, so that
 * the transaction cannot commit.
 */
static bool
still_held(ZkHolding *h, int64 *token)
{
	if (zk_entry_state(h->id, h->generation, token) == ZKE_HELD)
		return true;
	if (h->xact_subids == NIL)
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("zklock %s \"%s\" was lost", zk_kind_name(h->key.kind),
						h->key.name),
				 errdetail("Its ZooKeeper session ended, so another client may have held it since.")));
		drop(h);
	}
	return false;
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
 * Acquire (kind, name) in session or transaction scope.  timeout_ms 0 does
 * not wait, ZK_WAIT_FOREVER waits without limit.  Returns false when not
 * granted in time.
 */
bool
zk_hold_acquire(ZkKind kind, const char *name, bool xact, int64 timeout_ms)
{
	ZkHolding  *h = lookup(kind, name);
	ZkHoldingKey key;
	int			id;
	uint32		generation;
	TimestampTz deadline = 0;

	if (h != NULL && !still_held(h, NULL))
	{
		if (h->xact_subids != NIL)
			lost_in_xact_error(h);
		h = NULL;				/* dropped; ask again */
	}

	if (h == NULL)
	{
		if (timeout_ms > 0)
			deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   timeout_ms);
		id = zk_request(kind, name, timeout_ms == 0, &generation);
		if (zk_wait(id, generation, deadline) != ZKE_HELD)
			return false;

		make_key(&key, kind, name);
		PG_TRY();
		{
			h = hash_search(holdings, &key, HASH_ENTER, NULL);
		}
		PG_CATCH();
		{
			zk_give_up(id, generation);
			PG_RE_THROW();
		}
		PG_END_TRY();
		h->id = id;
		h->generation = generation;
		h->session_count = 0;
		h->xact_subids = NIL;
	}

	if (xact)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		h->xact_subids = lappend_oid(h->xact_subids,
									 GetCurrentSubTransactionId());
		MemoryContextSwitchTo(old);
	}
	else
		h->session_count++;
	return true;
}

/*
 * Release one session-scope level of (kind, name).  Like
 * pg_advisory_unlock: false and a WARNING when this backend does not hold
 * it in session scope.
 */
bool
zk_hold_release(ZkKind kind, const char *name)
{
	ZkHolding  *h = lookup(kind, name);

	if (h == NULL || h->session_count == 0)
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("you don't own a zklock %s named \"%s\"",
						zk_kind_name(kind), name),
				 h ? errhint("Transaction-scope locks are released when the transaction ends.") : 0));
		return false;
	}
	if (!still_held(h, NULL))
		return false;
	h->session_count--;
	drop_if_unused(h);
	return true;
}

/*
 * Release every session-scope holding of this backend; returns how many
 * distinct locks were released.  Transaction-scope holdings stay.
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
		if (h->session_count == 0)
			continue;
		if (still_held(h, NULL))
		{
			n++;
			h->session_count = 0;
			drop_if_unused(h);
		}
	}
	return n;
}

/*
 * Does this backend hold (kind, name) now, with a session the worker has
 * confirmed recently enough?  *token gets its fencing token.
 */
bool
zk_hold_is_held(ZkKind kind, const char *name, int64 *token)
{
	ZkHolding  *h = lookup(kind, name);

	return h != NULL && still_held(h, token) && zk_session_trusted();
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
		ListCell   *lc;

		if (h->xact_subids == NIL)
			continue;
		foreach(lc, h->xact_subids)
		{
			if (lfirst_oid(lc) >= from)
				h->xact_subids = foreach_delete_current(h->xact_subids, lc);
		}
		drop_if_unused(h);
	}
}

static void
zk_xact_callback(XactEvent event, void *arg)
{
	HASH_SEQ_STATUS status;
	ZkHolding  *h;

	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			/* work done under a lost lock must not commit */
			hash_seq_init(&status, holdings);
			while ((h = hash_seq_search(&status)) != NULL)
			{
				if (h->xact_subids != NIL &&
					(zk_entry_state(h->id, h->generation, NULL) != ZKE_HELD ||
					 !zk_session_trusted()))
				{
					hash_seq_term(&status);
					lost_in_xact_error(h);
				}
			}
			break;
		case XACT_EVENT_PRE_PREPARE:
			hash_seq_init(&status, holdings);
			while ((h = hash_seq_search(&status)) != NULL)
			{
				if (h->xact_subids != NIL)
				{
					hash_seq_term(&status);
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot PREPARE a transaction that holds transaction-scope zklock locks"),
							 errdetail("The lock \"%s\" is held by this backend's ZooKeeper session and cannot outlive it.",
									   h->key.name)));
				}
			}
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			release_xact(InvalidSubTransactionId);
			break;
		default:
			break;
	}
}

static void
zk_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		release_xact(mySubid);
	else if (event == SUBXACT_EVENT_COMMIT_SUB && holdings != NULL)
	{
		HASH_SEQ_STATUS status;
		ZkHolding  *h;

		/* the parent inherits what the committed subtransaction took */
		hash_seq_init(&status, holdings);
		while ((h = hash_seq_search(&status)) != NULL)
		{
			ListCell   *lc;

			foreach(lc, h->xact_subids)
			{
				if (lfirst_oid(lc) == mySubid)
					lfirst_oid(lc) = parentSubid;
			}
		}
	}
}

/*-------------------------------------------------------------------------
 *
 * barrier.c
 *	  Drivers of Curator's DistributedBarrier: set (ZK_KIND_BARRIER_SET),
 *	  remove (ZK_KIND_BARRIER_REMOVE) and wait (ZK_KIND_BARRIER_WAIT).
 *
 * The barrier named N is set while the persistent node <zklock.root>/N
 * exists, as in Curator: setBarrier creates it (its missing ancestors as
 * container nodes; "exists" means already set), removeBarrier deletes it
 * (no node: was not set), waitOnBarrier calls exists with a watch until
 * the node is gone.  Each request is a one-shot part of its own: set and
 * remove end with zk_part_done (1: this call did it, 0: nothing to do),
 * wait with 1 once the node is gone, or stays waiting on its watch.
 *
 * One name, one resource.  A lock, read-write lock or semaphore named N
 * keeps its nodes under <root>/N, a container node ZooKeeper deletes some
 * time after its last child went; so does every name below N ("N/x").  A
 * barrier node never has children.  So where <root>/N has or had children
 * (or is an ephemeral node), set, remove and wait refuse with 55000 rather
 * than report a barrier that is not one (Curator's would say "already
 * set", fail to delete, or wait until the lock's container is reaped).
 *
 * A connection lost while a call is in flight: the request starts over
 * once connected (step with r NULL), and each request is applied at most
 * once, whatever others did meanwhile:
 *
 *	- remove deletes only the node it saw (at that node's version, its
 *	  czxid remembered).  After a lost reply it looks again, after a sync:
 *	  that node still there (the delete was not applied, and no longer can
 *	  be: ZooKeeper orders a session's requests across reconnects) is
 *	  deleted again; gone, or replaced by a barrier set since, it answers 1
 *	  (the barrier it saw is gone) and leaves the new one alone.
 *	- set creates the node with a random nonce in its data.  After a lost
 *	  reply it looks, after a sync: our nonce there, 1; another's node, 0;
 *	  no node: our create was either never applied or applied and removed
 *	  since by someone else, which nobody can tell now, so it fails with
 *	  40003 (statement_completion_unknown) rather than set the barrier
 *	  again over a remove that came after it.
 *
 * The SQL side is backend/barrier.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/elog.h"
#include "utils/memutils.h"

#include "worker/engine/engine.h"

/* tags of the drivers' calls */
#define T_SET_CREATE	1
#define T_SET_STAT		2
#define T_REMOVE_STAT	3
#define T_REMOVE_DELETE 4
#define T_WAIT_EXISTS	5
#define T_SET_CHECK		6		/* get after a create's reply was lost */
#define T_SYNC_FIRST	7		/* sync: its answer needs nothing */

/* Give up when the node keeps appearing and disappearing under us. */
#define MAX_TRIES		10

/* the driver's state of a part (ZkPart.ds.barrier) */
typedef struct BarrierState
{
	int			tries;			/* rounds so far */
	char	   *data;			/* setBarrier: the data of our create, while
								 * its outcome may be unknown, or NULL */
} BarrierState;

/*
 * Is the existing node at the barrier's path something other than a
 * barrier?  Then fail the part and say so.  A barrier node never has
 * children: one that has or had some (cversion counts their changes) is
 * the parent of another recipe's nodes, or of names below it.  ZooKeeper
 * shows no client whether a node is a container, so this is how a lock's
 * parent is told from a barrier; an ephemeral node is none either.
 */
static bool
refuse_other(ZkPart *p, const struct Stat *stat)
{
	if (stat->ephemeralOwner != 0)
		zk_part_fail(p, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					 "Its node is an ephemeral node, not a barrier.");
	else if (stat->numChildren > 0 || stat->cversion > 0)
		zk_part_fail(p, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					 "The name is in use by a lock, semaphore or other recipe, or names below it are: its node has or had child nodes.");
	else
		return false;
	return true;
}

/*
 * A call failed: connection losses wait for the reconnection (the part
 * starts over then); anything else fails the part.
 */
static void
call_failed(ZkPart *p, const ZkResult *r, const char *what)
{
	if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
		return;
	zk_part_fail(p, zk_refusal_errcode(r->rc), "ZooKeeper refused to %s: %s.",
				 what, zerror(r->rc));
}

/* Too many rounds: the node keeps changing under us. */
static bool
too_many_tries(ZkPart *p)
{
	if (++p->ds.barrier->tries <= MAX_TRIES)
		return false;
	zk_part_fail(p, ERRCODE_EXTERNAL_ROUTINE_EXCEPTION,
				 "Its node kept appearing and disappearing.");
	return true;
}

/* The data of our create is not needed any more (also: the part goes). */
static void
forget_data(ZkPart *p)
{
	if (p->ds.barrier->data)
		pfree(p->ds.barrier->data);
	p->ds.barrier->data = NULL;
}

/*
 * Create the barrier node.  Its data is zk_node_data() with a random
 * "request" nonce added, kept in the state while the create's outcome may
 * be unknown.
 */
static void
set_create(ZkPart *p)
{
	char		nonce[ZK_NONCE_LEN + 1];
	char	   *base;

	if (!zk_nonce(nonce))
	{
		zk_part_fail(p, ERRCODE_INTERNAL_ERROR, "Could not generate random bytes.");
		return;
	}
	base = zk_node_data(p);
	base[strlen(base) - 1] = '\0';	/* its closing brace */
	forget_data(p);
	p->ds.barrier->data = MemoryContextStrdup(TopMemoryContext,
								   psprintf("%s,\"request\":\"%s\"}", base, nonce));
	pfree(base);
	zk_call_create(p, T_SET_CREATE, p->parent, p->ds.barrier->data, ZOO_PERSISTENT, true);
}

/* Is this the data our create wrote? */
static bool
our_data(ZkPart *p, const ZkResult *r)
{
	return p->ds.barrier->data != NULL && r->data != NULL &&
		r->datalen == (int) strlen(p->ds.barrier->data) &&
		memcmp(r->data, p->ds.barrier->data, r->datalen) == 0;
}

/* setBarrier: create the node; if it exists, check that it is a barrier. */
static void
set_step(ZkPart *p, const ZkResult *r)
{
	if (zk_part_dropping(p))
		return;
	if (r == NULL)
	{
		if (p->ds.barrier->data == NULL)
			set_create(p);
		else
		{
			/* a create went out and its answer was lost: what happened? */
			zk_call_sync(p, T_SYNC_FIRST, p->parent);
			zk_call_get(p, T_SET_CHECK, p->parent, false);
		}
		return;
	}
	switch (r->tag)
	{
		case T_SET_CHECK:
			if (r->rc == ZOK && our_data(p, r))
				zk_part_done(p, 1);
			else if (r->rc == ZOK)
			{
				if (!refuse_other(p, &r->stat))
					zk_part_done(p, 0);
			}
			else if (r->rc == ZNONODE)
				zk_part_fail(p, ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN,
							 "The connection to ZooKeeper was lost before the barrier node's create was answered, and the node is not there now: it was never created, or created and removed since by another client.");
			else
				call_failed(p, r, "look at the barrier node");
			break;
		case T_SET_CREATE:
			if (r->rc == ZOK)
				zk_part_done(p, 1);
			else if (r->rc == ZNODEEXISTS)
			{
				forget_data(p);	/* not created: nothing to look for */
				zk_call_exists(p, T_SET_STAT, p->parent);
			}
			else if (r->rc == ZNONODE)
			{
				/* an ancestor was reaped after we made it: again */
				zk_parents_gone(p->parent);
				if (!too_many_tries(p))
					set_create(p);
			}
			else
			{
				if (!zk_is_connection_loss(r->rc) && r->rc != ZCLOSING)
				{
					forget_data(p);	/* refused: nothing to look for */
				}
				call_failed(p, r, "create the barrier node");
			}
			break;
		case T_SET_STAT:
			if (r->rc == ZOK)
			{
				if (!refuse_other(p, &r->stat))
					zk_part_done(p, 0);
			}
			else if (r->rc == ZNONODE)
			{
				/* removed meanwhile: try to set it again */
				if (!too_many_tries(p))
					set_create(p);
			}
			else
				call_failed(p, r, "look at the barrier node");
			break;
	}
}

/*
 * removeBarrier: delete the node if it is a barrier; only the node seen
 * (p->czxid, set once its delete was sent, may have been deleted by us).
 */
static void
remove_step(ZkPart *p, const ZkResult *r)
{
	if (zk_part_dropping(p))
		return;
	if (r == NULL)
	{
		if (p->czxid != 0)
			zk_call_sync(p, T_SYNC_FIRST, p->parent);
		zk_call_exists(p, T_REMOVE_STAT, p->parent);
		return;
	}
	switch (r->tag)
	{
		case T_REMOVE_STAT:
			if (r->rc == ZNONODE)
				zk_part_done(p, p->czxid != 0 ? 1 : 0);
			else if (r->rc == ZOK && p->czxid != 0 &&
					 r->stat.czxid != p->czxid)
				zk_part_done(p, 1); /* ours went; a new barrier stays */
			else if (r->rc == ZOK)
			{
				if (!refuse_other(p, &r->stat))
				{
					p->czxid = r->stat.czxid;
					zk_call_delete(p, T_REMOVE_DELETE, p->parent,
								   r->stat.version);
				}
			}
			else
				call_failed(p, r, "look at the barrier node");
			break;
		case T_REMOVE_DELETE:
			if (r->rc == ZOK)
				zk_part_done(p, 1);
			else if (r->rc == ZNONODE)
				zk_part_done(p, 0);
			else if (r->rc == ZBADVERSION)
			{
				/* another node of the path since we looked: look again */
				p->czxid = 0;
				if (!too_many_tries(p))
					zk_call_exists(p, T_REMOVE_STAT, p->parent);
			}
			else if (r->rc == ZNOTEMPTY)
				zk_part_fail(p, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
							 "The name came into use by another recipe: its node has child nodes.");
			else
				call_failed(p, r, "delete the barrier node");
			break;
	}
}

/*
 * waitOnBarrier: exists with a watch until the node is gone.  The watch
 * fires on any change of the node; the engine then starts the part over
 * (r NULL), which looks again.
 */
static void
wait_step(ZkPart *p, const ZkResult *r)
{
	if (zk_part_dropping(p))
		return;
	if (r == NULL)
	{
		zk_call_exists_watch(p, T_WAIT_EXISTS, p->parent);
		return;
	}
	if (r->tag != T_WAIT_EXISTS)
		return;
	if (r->rc == ZNONODE)
		zk_part_done(p, 1);
	else if (r->rc == ZOK)
	{
		if (refuse_other(p, &r->stat))
			return;
		/* set: a request that must not wait ends here, others wait on it */
		zk_part_would_block(p);
		zk_part_wait_on(p, zk_node_of(p->parent));
		if (zk_part_entry(p) < 0)
			zk_part_drop(p);
	}
	else
		call_failed(p, r, "look at the barrier node");
}

const ZkDriver zk_barrier_set_driver = {
	.kind = ZK_KIND_BARRIER_SET,
	.form = ZK_FORM_NONE,
	.step = set_step,
	.state_size = sizeof(BarrierState),
	.freed = forget_data,
};

const ZkDriver zk_barrier_remove_driver = {
	.kind = ZK_KIND_BARRIER_REMOVE,
	.form = ZK_FORM_NONE,
	.step = remove_step,
	.state_size = sizeof(BarrierState),
};

const ZkDriver zk_barrier_wait_driver = {
	.kind = ZK_KIND_BARRIER_WAIT,
	.form = ZK_FORM_NONE,
	.step = wait_step,
	.state_size = sizeof(BarrierState),
};

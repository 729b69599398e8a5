/*-------------------------------------------------------------------------
 *
 * part.c
 *	  A part: its entries and their outcomes, its life, and advance().
 *
 * What it owns (src/worker/engine/README has the structures, the states
 * and who may write which field):
 *
 *	- the entries a part serves (ZkOp: holders, waiters, leaving) and their
 *	  outcomes: granted, done, failed, lost, refused; an entry given up is
 *	  freed only once the part's node no longer stands for it
 *	  (settle_leaving): a release returns once everyone else can take the
 *	  lock;
 *	- a part's life: made (new_part), dropped (zk_part_drop), its node
 *	  deleted, its driver's last calls, freed (free_part); an instance part
 *	  that lost its node starts over (restart_instance_part); the open part
 *	  of each cohort (open_entry);
 *	- the state fields drivers may change only through the functions here
 *	  (zk_part_set_phase, zk_part_checked, zk_part_unhold,
 *	  zk_part_last_calls_lost);
 *	- advance(): what a part sends next, including the delete of our node
 *	  and the answers to it, for every driver.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/engine/engine_internal.h"

/* Give up re-creating a reaped parent after this many tries in a row. */
#define MAX_PARENT_TRIES	10

/*
 * The parts, each in a chunk of its size: an allocation set would round
 * each up to the next power of two, nearly twice the size.
 */
static MemoryContext part_context = NULL;

/* The open (accepting) part of each cohort, by kind and name. */
static HTAB *open_parts;
static int	nparts = 0;

/* The parts kept while their driver's busy() says so (settle_busy). */
static dlist_head busy_parts = DLIST_STATIC_INIT(busy_parts);

static void
wait_busy(ZkPart *p)
{
	if (dlist_node_is_detached(&p->busy_link))
		dlist_push_tail(&busy_parts, &p->busy_link);
}

static uint32 open_key_hash(const void *key, Size keysize);
static int	open_key_match(const void *key1, const void *key2, Size keysize);

/* The parts' memory and the open parts (zk_engine_init). */
void
parts_init(void)
{
	part_context = SlabContextCreate(engine_context, "zklock parts",
									 64 * 1024, sizeof(ZkPart));
	open_parts = engine_hash("zklock open parts", sizeof(ZkOpenKey),
							 sizeof(ZkOpen), open_key_hash, open_key_match);
}

/* ---- small helpers ---- */

/* Is a part's name a copy (else the end of its parent's path)? */
static inline bool
name_is_copy(const ZkDriver *d)
{
	return driver_suffix(d)[0] != '\0';
}

bool
has_entries(ZkPart *p)
{
	return !dlist_is_empty(&p->holders) || !dlist_is_empty(&p->waiters);
}

/* The (first) entry a part serves, or -1. */
int
zk_part_entry(ZkPart *p)
{
	dlist_head *h = !dlist_is_empty(&p->holders) ? &p->holders : &p->waiters;

	if (dlist_is_empty(h))
		return -1;
	return dlist_container(ZkOp, link, dlist_head_node(h)) - ops;
}

/* ---- outcomes for entries ---- */

/* A held entry is lost: an ask of its owner that waits fails with it. */
void
fail_ask(int id, const char *why)
{
	ZkAskState	state;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	state = ZK_ENTRY(id)->ask_state;
	LWLockRelease(zk_shared->lock);
	if (state == ZK_ASK_PENDING)
		zk_set_ask_outcome(id, ZK_ASK_FAILED, ERRCODE_T_R_SERIALIZATION_FAILURE,
						   "%s", why);
}

void
detach(int id)
{
	ZkOp	   *op = &ops[id];
	ZkPart	   *p = op->part;

	if (p == NULL)
		return;
	dlist_delete(&op->link);
	if (op->holder)
		p->nholders--;
	op->holder = false;
	op->part = NULL;
}

void
attach(ZkPart *p, int id)
{
	ZkOp	   *op = &ops[id];

	op->part = p;
	op->holder = false;
	op->queued_local = false;
	dlist_push_tail(&p->waiters, &op->link);
}

/* Does the part owe its driver's last calls (dropped()): to make, or answers? */
static bool
last_calls_owed(ZkPart *p)
{
	const ZkDriver *d = p->driver;

	if (d->steps.dropped == NULL)
		return false;
	if (p->life == PART_LAST_CALLS)
		return p->inflight > 0;
	return d->steps.has_last_calls(p);
}

/*
 * Is the part's node still in ZooKeeper on behalf of entries done with it,
 * or is its driver still at work for them (busy, or the last calls of a
 * dropped part: a double barrier's "ready" to delete)?  Not once the node
 * is gone and the last calls are answered (a lost session ends them), nor
 * while the part keeps it for entries it still serves (the lock then has a
 * new holder or waiter) or retains it (zklock.retain_time, whose README
 * text says so).
 */
static bool
node_pending(ZkPart *p)
{
	return p->life != PART_DEAD &&
		((zk_part_dropping(p) && p->phase != NODE_NONE) ||
		 (p->driver->steps.busy && p->driver->steps.busy(p)) ||
		 (zk_part_dropping(p) && last_calls_owed(p)));
}

/*
 * Put an entry done with part p on its leaving list: released ones are
 * freed (and their backend woken, see zk_free_entry) only when the node is
 * no longer pending, so that a release, a failed no-wait attempt or a
 * timed-out wait returns only once everyone else can take the lock.
 */
void
leave(ZkPart *p, ZkOp *op)
{
	op->leaving = p;
	dlist_push_tail(&p->leaving, &op->link);
}

/* Free the entries waiting for the part's node to go, once it has. */
void
settle_leaving(ZkPart *p)
{
	if (node_pending(p))
		return;
	while (!dlist_is_empty(&p->leaving))
	{
		ZkOp	   *op = dlist_container(ZkOp, link,
										 dlist_pop_head_node(&p->leaving));

		op->leaving = NULL;
		if (op->freeing)
		{
			op->freeing = false;
			zk_free_entry(op - ops);
		}
	}
}

void
grant(ZkPart *p, ZkOp *op)
{
	int			id = op - ops;
	int64		token = p->czxid << TOKEN_SHIFT;

	if (!p->driver->seq.shared)
		token |= p->grants;
	if (p->grants > 0)
		pg_atomic_fetch_add_u64(&zk_shared->n_local_grants, 1);
	if (overtakes(p, op))
		p->local_grants++;
	p->grants++;
	dlist_delete(&op->link);
	dlist_push_tail(&p->holders, &op->link);
	op->holder = true;
	p->nholders++;
	zk_set_grant(id, token, p->session_id, p->node, p->grants > 1);
	/* a holder that asked to be revocable wants the watch at once */
	if (ZK_ENTRY(id)->flags & ZKR_REVOCABLE)
		own_watch(p);
}

/* Grant every waiting entry of a part that is not a cohort (or all). */
void
zk_part_grant(ZkPart *p)
{
	if (p->cohort)
	{
		cohort_update(p);
		return;
	}
	while (!dlist_is_empty(&p->waiters) &&
		   (p->driver->seq.shared || p->nholders == 0))
		grant(p, dlist_container(ZkOp, link, dlist_head_node(&p->waiters)));
}

/* Finish a one-shot part: its entry is DONE with result; the part goes. */
void
zk_part_done(ZkPart *p, int64 result)
{
	int			id;

	while ((id = zk_part_entry(p)) >= 0)
	{
		detach(id);
		zk_set_result(id, result);
	}
	zk_part_drop(p);
}

/* Finish a listing part: its rows go to its entry. */
void
zk_part_rows(ZkPart *p, StringInfo rows)
{
	int			id;

	while ((id = zk_part_entry(p)) >= 0)
	{
		detach(id);
		zk_set_rows(id, rows);
	}
	zk_part_drop(p);
}

/*
 * Say that a holder lost what it held with the session.  A job claim made
 * final is not lost: its transaction's commit record settles it, from the
 * index of unsettled claims (recipes/claim_settle.c).
 */
void
report_lost(ZkEntry *e, const char *why)
{
	if (e->kind == ZK_KIND_JOB_CLAIM && e->ask == ZK_ASK_FINALIZE &&
		e->ask_state == ZK_ASK_DONE)
		ereport(LOG,
				(errmsg("zklock job claim \"%s\" of process %d was made final and is settled by its transaction's commit record",
						e->name, e->owner_pid),
				 errdetail_internal("%s", why)));
	else
		ereport(WARNING,
				(errmsg("zklock %s \"%s\" held by process %d was lost",
						zk_kind_name(e->kind), e->name, e->owner_pid),
				 errdetail_internal("%s", why)));
}

/* Fail every entry of a part with an error; the part goes. */
void
zk_part_fail(ZkPart *p, int sqlerrcode, const char *fmt,...)
{
	char		msg[ZK_ERRMSG_MAX];
	va_list		ap;
	int			id;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	while ((id = zk_part_entry(p)) >= 0)
	{
		bool		held = ops[id].holder;

		detach(id);
		leave(p, &ops[id]);		/* its give-up waits for our node to go */
		if (held)
		{
			report_lost(ZK_ENTRY(id), msg);
			zk_set_outcome(id, ZKE_LOST, 0, "%s", msg);
			fail_ask(id, msg);
		}
		else
			zk_set_outcome(id, ZKE_FAILED, sqlerrcode, "%s", msg);
	}
	if (p->group >= 0 && p->driver->reset)
		p->driver->reset(p, msg, true);
	zk_part_drop(p);
}

/* The part's waiting entries (only the no-wait ones, or all) find it taken. */
static void
refuse_waiters(ZkPart *p, bool all)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &p->waiters)
	{
		ZkOp	   *op = dlist_container(ZkOp, link, it.cur);
		int			id = op - ops;

		if (all || (ZK_ENTRY(id)->flags & ZKR_NOWAIT))
		{
			detach(id);
			leave(p, op);
			zk_set_outcome(id, ZKE_WOULD_BLOCK, 0, NULL);
		}
	}
}

/* The part's waiting no-wait entries find it taken. */
void
zk_part_would_block(ZkPart *p)
{
	refuse_waiters(p, false);
}

/* The part's waiting entries find it taken for good: waiting would not help. */
void
zk_part_taken(ZkPart *p)
{
	refuse_waiters(p, true);
}

/* Show which node the part's waiting entries wait for. */
void
zk_part_wait_on(ZkPart *p, const char *node)
{
	dlist_iter	it;

	dlist_foreach(it, &p->waiters)
		zk_set_node(dlist_container(ZkOp, link, it.cur) - ops,
					p->phase == NODE_EXISTS ? p->node : "", node);
}

/* A create of our node succeeded: remember it. */
void
zk_part_node_created(ZkPart *p, const char *path, const struct Stat *stat)
{
	ZkParent   *e;

	strlcpy(p->node, zk_node_of(path), sizeof(p->node));
	p->czxid = stat->czxid;
	p->version = stat->version;
	p->session_id = zk_session();
	zk_part_set_phase(p, NODE_EXISTS);
	p->parent_tries = 0;
	p->parent_error = ZOK;
	e = parent_entry(p->parent, true);
	if (e)
	{
		e->known = true;
		e->used = GetCurrentTimestamp();
	}
}

/* ---- a part's state ---- */

/*
 * Our node's phase changes; zk_stats counts the nodes that exist (or whose
 * delete is out).
 */
void
zk_part_set_phase(ZkPart *p, ZkNodePhase phase)
{
	bool		had = (p->phase == NODE_EXISTS || p->phase == NODE_DELETING);
	bool		has = (phase == NODE_EXISTS || phase == NODE_DELETING);

	if (has && !had)
		pg_atomic_fetch_add_u32(&zk_shared->n_nodes, 1);
	else if (had && !has)
		pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
	p->phase = phase;
}

/* The driver's check (begin) passed. */
void
zk_part_checked(ZkPart *p)
{
	if (p->stage < SEQ_UNDECIDED)
		p->stage = SEQ_UNDECIDED;
}

/* What the driver's check read may have changed: it is made again. */
void
check_again(ZkPart *p)
{
	if (p->stage > SEQ_CHECKING)
		p->stage = SEQ_CHECKING;
}

/* Our node no longer holds, as far as the driver knows: it decides again. */
void
zk_part_unhold(ZkPart *p)
{
	if (p->stage == SEQ_HOLDING)
		p->stage = SEQ_WAITING;
}

/*
 * An answer to one of the driver's last calls was lost with the
 * connection: they are made again once connected (advance).
 */
void
zk_part_last_calls_lost(ZkPart *p)
{
	if (p->life == PART_LAST_CALLS)
		p->life = PART_DROPPING;
}

/* ---- parts ---- */

ZkPart *
new_part(const ZkDriver *d, const char *name)
{
	ZkPart	   *p = MemoryContextAllocZero(part_context, sizeof(ZkPart));
	char		path[ZK_PATH_MAX];

	p->driver = d;
	p->cohort = d->cohort && zklock_local_handoff;
	zk_path(path, sizeof(path), name, driver_suffix(d));
	p->group = -1;
	if (d->state_size > 0)
		p->ds.any = MemoryContextAllocZero(engine_context, d->state_size);
	dlist_init(&p->holders);
	dlist_init(&p->waiters);
	dlist_init(&p->leaving);
	dlist_push_tail(&parts, &p->link);
	parts_at_add(p, path);		/* sets p->parent */
	if (name_is_copy(d))
		p->name = MemoryContextStrdup(engine_context, name);
	else
		p->name = p->parent + strlen(p->parent) - strlen(name);
	nparts++;
	return p;
}

/*
 * A part of the instance itself (group >= 0: the leader latch), serving no
 * entry.  It lives until the driver drops it: on session loss it starts
 * over in the next session (see zk_engine_session_lost), and its driver's
 * reset() hears of it.
 */
ZkPart *
zk_instance_part(const ZkDriver *d, const char *name, int group)
{
	ZkPart	   *p = new_part(d, name);

	p->group = group;
	p->need_eval = true;
	advance(p);
	return p;
}

/*
 * Have a part look again at its parent (list and decide, or its driver's
 * step), as if a watch had fired: another part learned that something
 * changed.
 */
void
zk_part_look_again(ZkPart *p)
{
	if (zk_part_dropping(p))
		return;
	p->need_eval = true;
	advance(p);
}

/*
 * The create of our node found a parent gone (a reaped container, or the
 * parents' creation refused): forget the parents we thought existed and
 * fail the part if they cannot be made, or kept disappearing.  True when
 * the driver may create again.
 */
bool
zk_part_parent_gone(ZkPart *p)
{
	zk_parents_gone(p->parent);
	zk_part_set_phase(p, NODE_NONE);
	if (p->parent_error != ZOK)
		zk_part_fail(p, zk_refusal_errcode(p->parent_error),
					 "ZooKeeper refused to create its parent nodes: %s.",
					 zerror(p->parent_error));
	else if (++p->parent_tries > MAX_PARENT_TRIES)
		zk_part_fail(p, ERRCODE_EXTERNAL_ROUTINE_EXCEPTION,
					 "Its parent node kept disappearing.");
	else
		return true;
	return false;
}

/*
 * Forget our node: it is gone, or is soon (its session ended), and the
 * part's calls in flight no longer count (gen).
 */
void
forget_node(ZkPart *p)
{
	own_watch_release(p);		/* before its node name goes */
	zk_part_set_phase(p, NODE_NONE);
	p->delete_unsure = false;
	p->gen++;
	p->inflight = 0;
}

/* An instance part whose node was forgotten starts over with a fresh one. */
static void
start_again(ZkPart *p, const char *why)
{
	p->stage = SEQ_CREATING;
	p->need_eval = true;
	p->node[0] = '\0';
	if (p->driver->reset)
		p->driver->reset(p, why, false);
}

/*
 * An instance part lost its node (and what it held) while its session
 * lives on: forget the node and start over with a fresh one.
 */
void
restart_instance_part(ZkPart *p, const char *why)
{
	forget_node(p);
	unwatch(p);
	start_again(p, why);
}

/*
 * The session ended: the part's node is gone (or soon is) and so are its
 * watches; its entries were dealt with (zk_engine_session_lost).  An
 * instance part starts over once connected again; any other goes.
 */
void
part_session_ended(ZkPart *p, const char *why)
{
	forget_node(p);
	watches_gone(p);
	if (p->group >= 0 && !zk_part_dropping(p))
		start_again(p, why);
	else
		free_part(p);
}

static uint32
open_key_hash(const void *key, Size keysize)
{
	const ZkOpenKey *k = key;

	return hash_bytes((const unsigned char *) k->name, strlen(k->name)) ^
		(uint32) k->kind;
}

static int
open_key_match(const void *key1, const void *key2, Size keysize)
{
	const ZkOpenKey *k1 = key1;
	const ZkOpenKey *k2 = key2;

	if (k1->kind != k2->kind)
		return 1;
	return strcmp(k1->name, k2->name);
}

/*
 * The open part of a cohort recipe by kind and name.  A new entry (HASH_ENTER)
 * gets its part with open_set() at once: its key points to the part's name.
 */
ZkOpen *
open_entry(ZkKind kind, const char *name, HASHACTION action)
{
	ZkOpenKey	key;

	key.kind = kind;
	key.name = name;
	return hash_search(open_parts, &key, action, NULL);
}

/* The open part of o's kind and name is p. */
void
open_set(ZkOpen *o, ZkPart *p)
{
	o->part = p;
	o->key.name = p->name;		/* the same name, which lives as long as p */
}

/* The part no longer accepts new entries of its cohort. */
void
close_part(ZkPart *p)
{
	ZkOpen	   *o;

	if (p->open == PART_OPEN)
		p->open = PART_CLOSED;
	if (p->cohort &&
		(o = open_entry(p->driver->kind, p->name, HASH_FIND)) != NULL &&
		o->part == p)
		hash_search(open_parts, &o->key, HASH_REMOVE, NULL);
}

/* Free a part once nothing refers to it any more. */
void
free_part(ZkPart *p)
{
	close_part(p);
	unwatch(p);
	side_unwatch(p);
	own_unwatch(p);
	p->life = PART_DEAD;
	settle_leaving(p);
	if (p->calls > 0)
		return;
	zk_part_set_phase(p, NODE_NONE);
	if (p->driver->freed)
		p->driver->freed(p);
	unretain(p);
	own_watch_undue(p);
	own_watch_release(p);
	if (!dlist_node_is_detached(&p->busy_link))
		dlist_delete(&p->busy_link);
	if (!dlist_node_is_detached(&p->resume_link))
		dlist_delete(&p->resume_link);
	if (name_is_copy(p->driver))
		pfree((char *) p->name);
	parts_at_remove(p);
	dlist_delete(&p->link);
	nparts--;
	if (p->driver->state_size > 0)
		pfree(p->ds.any);
	if (p->sarg)
		pfree(p->sarg);
	pfree(p);
}

/*
 * The part is no longer needed: delete our node (retrying across
 * reconnects until it is gone) and free the part.
 */
void
zk_part_drop(ZkPart *p)
{
	close_part(p);
	own_unwatch(p);				/* the delete of our node fires it */
	side_unwatch(p);
	if (p->life == PART_ACTIVE)
		p->life = PART_DROPPING;
	unretain(p);
	/* a watch on our node's parent: the delete of our node fires it */
	unwatch_ex(p, !(p->phase == NODE_EXISTS && !has_entries(p) &&
					p->watch_state == PW_CHILDREN &&
					strcmp(p->watch_path, p->parent) == 0 &&
					zk_connected()));
	advance(p);
}

/* ---- our node's delete ---- */

/* Our node is gone (deleted, or found gone or replaced). */
static void
node_deleted(ZkPart *p)
{
	zk_part_set_phase(p, NODE_NONE);
	p->delete_unsure = false;
}

/*
 * The answers to the delete of our node (advance), of every driver: a
 * sequential node's at any version, a step driver's at the version we know,
 * checked by its czxid after a lost reply (T_DELCHECK).
 */
void
node_delete_result(ZkPart *p, const ZkResult *r)
{
	switch (r->tag)
	{
		case T_DELETE:
			if (r->rc == ZOK || r->rc == ZNONODE)
			{
				node_deleted(p);
				/* the deletion fired our watch on it; the event came first */
				own_watch_forget(p);
			}
			else if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING ||
					 (r->rc == ZBADVERSION && p->driver->form == ZK_FORM_NONE))
			{
				/* sent again after reconnecting (see advance) */
				zk_part_set_phase(p, NODE_EXISTS);
				p->delete_unsure = (p->driver->form == ZK_FORM_NONE);
			}
			else
			{
				/* nothing more we can do; say so, for the DBA */
				ereport(WARNING,
						(errmsg("zklock could not delete node \"%s/%s\": %s",
								p->parent, p->node, zerror(r->rc))));
				node_deleted(p);
			}
			break;
		case T_DELCHECK:
			if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
				zk_part_set_phase(p, NODE_EXISTS);	/* looks again once
													 * connected */
			else if (r->rc == ZOK && r->has_stat && r->stat.czxid == p->czxid)
			{
				/* still ours: delete it at the version it has now */
				zk_part_set_phase(p, NODE_EXISTS);
				p->version = r->stat.version;
				p->delete_unsure = false;
			}
			else
			{
				/* gone, or someone else's node since: ours is gone */
				if (r->rc != ZOK && r->rc != ZNONODE)
					ereport(WARNING,
							(errmsg("zklock could not look at node \"%s/%s\" to delete it: %s",
									p->parent, p->node, zerror(r->rc))));
				node_deleted(p);
			}
			break;
	}
}

/* ---- what a part does next ---- */

/*
 * Send whatever a part needs next.  Does nothing while a call of the part
 * is in flight (its answer advances it again) or while there is no
 * connected session (reconnecting advances every part).
 */
void
advance(ZkPart *p)
{
	const ZkDriver *d = p->driver;

	if (p->life == PART_DEAD)
	{
		free_part(p);
		return;
	}
	settle_leaving(p);

	/*
	 * A node no longer needed is deleted at once, even while other calls of
	 * the part (a listing, a check) are in flight: their answers no longer
	 * matter, and a later request of the instance, or a contender elsewhere,
	 * must not find the node in its way.
	 *
	 * A sequential node's path is ours alone (its protected prefix), so its
	 * delete goes at any version and is simply sent again when its reply is
	 * lost.  A step driver's node has a path others may use once ours is
	 * gone (a job claim's slot): its delete goes at the version we know (a
	 * node of our live session, which nobody else deletes), and after a
	 * lost reply (or a version that does not match) it is sent again only
	 * if the node there now is still the one we created (its czxid, read
	 * after a sync), never to a node someone made since.
	 */
	if (zk_part_dropping(p) && !has_entries(p) && p->phase == NODE_EXISTS &&
		zk_connected())
	{
		char		path[ZK_PATH_MAX];

		snprintf(path, sizeof(path), "%s/%s", p->parent, p->node);
		zk_part_set_phase(p, NODE_DELETING);
		if (p->delete_unsure)
		{
			zk_call_sync(p, T_SYNC, p->parent);
			zk_call_exists(p, T_DELCHECK, path);
		}
		else
			zk_call_delete(p, T_DELETE, path,
						   d->form == ZK_FORM_NONE ? p->version : -1);
		return;
	}
	if (p->inflight > 0)
		return;

	if (zk_part_dropping(p) && !has_entries(p))
	{
		switch (p->phase)
		{
			case NODE_NONE:
				if (d->steps.busy && d->steps.busy(p))
				{
					wait_busy(p);	/* settle_busy() looks again */
					return;
				}
				if (p->life != PART_LAST_CALLS && last_calls_owed(p))
				{
					if (!zk_connected())
						return; /* made once connected (zk_engine_connected) */
					p->life = PART_LAST_CALLS;
					d->steps.dropped(p);
					if (p->inflight > 0)
						return;	/* freed once they are answered */
				}
				free_part(p);
				return;
			case NODE_CREATING:
				/*
				 * A step driver whose create's reply was lost (job claim):
				 * it looks whether the node is there, so that it can go.
				 */
				if (d->form == ZK_FORM_NONE && p->need_eval && zk_connected())
				{
					p->need_eval = false;
					d->step(p, NULL);
				}
				return;
			case NODE_DELETING:
				return;
			case NODE_UNKNOWN:
				if (zk_connected())
				{
					zk_call_sync(p, T_SYNC, p->parent);
					zk_call_list(p, T_LIST, p->parent, false);
				}
				return;
			case NODE_EXISTS:
				return;			/* deleted above once connected */
		}
	}

	if (!zk_connected())
		return;

	if (d->form == ZK_FORM_NONE)
	{
		if (p->need_eval)
		{
			p->need_eval = false;
			d->step(p, NULL);
		}
		return;
	}

	switch (p->phase)
	{
		case NODE_NONE:
			if (has_entries(p) || p->group >= 0)
				seq_create(p);
			break;
		case NODE_UNKNOWN:
			zk_call_sync(p, T_SYNC, p->parent);
			zk_call_list(p, T_LIST, p->parent, false);
			break;
		case NODE_EXISTS:
			own_watch(p);		/* a holder's, if it has none */
			if (p->stage < SEQ_UNDECIDED)
				d->seq.begin(p);	/* the driver's check, again */
			if (p->stage >= SEQ_UNDECIDED && p->need_eval)
				seq_list(p);	/* (a check may need no call) */
			break;
		case NODE_CREATING:
		case NODE_DELETING:
			break;
	}
}

/*
 * Parts kept for their driver's work (busy_parts): once it is done, their
 * given-up entries are freed and the parts go (advance).  Only those parts
 * are looked at.
 */
void
settle_busy(void)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &busy_parts)
	{
		ZkPart	   *p = dlist_container(ZkPart, busy_link, it.cur);

		if (!p->driver->steps.busy(p))
		{
			dlist_delete_thoroughly(&p->busy_link);
			advance(p);
		}
	}
}


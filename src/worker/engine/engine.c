/*-------------------------------------------------------------------------
 *
 * engine.c
 *	  The engine: parts, the entries they serve, and the turn.
 *
 * A backend's request (a shared ZkEntry, see shared/protocol.h) is served
 * by a part (ZkPart, engine.h): one participation of the instance in a
 * recipe, with at most one node of ours.  Every recipe is a driver
 * (worker/recipes/):
 *
 *	- Sequential-node recipes (exclusive lock, read and write lock,
 *	  semaphore lease and entry mutex, leader latch) only say how their node
 *	  is named and, given the ordered participants, whether ours holds and
 *	  which node to watch otherwise.  The engine runs the protocol they
 *	  share (sequential.c).
 *	- Other recipes (barriers, double barrier, shared counts, job claims,
 *	  revocation, listings) drive their part with the engine's calls from step().
 *
 * This file owns the parts and the entries they serve: a request becomes a
 * waiter of a part (a new one, or the open part of its lock, see
 * handoff.c); a part grants, finishes or fails its entries; advance()
 * sends whatever a part needs next; a part no longer needed has its node
 * deleted and goes.  An entry given up is freed only once the part's node
 * no longer stands for it (settle_leaving): a release returns once everyone
 * else can take the lock.  It also owns the turn: zk_engine_run, which the
 * worker loop calls once per wait, lists its steps in the order they run
 * (take requests, take answers, advance the parts whose time has come, the
 * instance's own work, send); and the session's coming and going, and the
 * start, which takes over the entries a previous worker left.
 *
 * The engine's other files (src/worker/engine/) each own one concern;
 * engine_internal.h declares what they share:
 *
 *	part_calls.c	the calls parts make, booked before they go out
 *	calls.c			the I/O: calls sent to ZooKeeper, answers, the watcher
 *	watches.c		the registry of watches by path
 *	sequential.c	the sequential-node protocol of the lock recipes
 *	handoff.c		local hand-off between the instance's backends, retention
 *	reconciler.c	the parents the instance uses, the reconciler, the
 *					session node's create
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

MemoryContext zk_turn_context = NULL;
MemoryContext engine_context = NULL;

/*
 * The parts, each in a chunk of its size: an allocation set would round
 * each up to the next power of two, nearly twice the size.
 */
static MemoryContext part_context = NULL;

ZkOp	   *ops;
dlist_head	parts = DLIST_STATIC_INIT(parts);
static HTAB *open_parts;
static int	nparts = 0;
TimestampTz answered_list_sent_at = 0;	/* of the listing being processed */

/* What calls.c hands back: answered calls, fired watches (zk_calls_init). */
static dlist_head answered = DLIST_STATIC_INIT(answered);
static dlist_head fired = DLIST_STATIC_INIT(fired);

/* the drivers of the kinds (kindlist.h) */
#define PG_ZK_KIND(symbol, name, label, suffix, wait, driver, failed) \
	[symbol] = &driver,

static const ZkDriver *const drivers[ZK_NUM_KINDS] = {
#include "shared/kindlist.h"
};

#undef PG_ZK_KIND

/* Call a hook (init, reload, run, exit) of every driver that has it. */
#define DRIVER_HOOKS(hook) \
	do { \
		for (int k_ = 0; k_ < ZK_NUM_KINDS; k_++) \
			if (drivers[k_]->hook) \
				drivers[k_]->hook(); \
	} while (0)

static void free_part(ZkPart *p);

/* Parts to resume after a reconnect (resume_parts), at most this many a turn. */
#define RESUME_BATCH		256
static dlist_head resuming = DLIST_STATIC_INIT(resuming);
static void resume_parts(void);

/* The parts kept while their driver's busy() says so (busy_wait). */
static dlist_head busy_parts = DLIST_STATIC_INIT(busy_parts);

static void
wait_busy(ZkPart *p)
{
	if (!p->busy_wait)
		dlist_push_tail(&busy_parts, &p->busy_link);
	p->busy_wait = true;
}

/* ---- small helpers ---- */

/*
 * What a driver's parts append to <zklock.root>/<name> for their parent:
 * a kind's driver its kind's suffix (kindlist.h), a driver of parts of its
 * own nothing.
 */
static inline const char *
driver_suffix(const ZkDriver *d)
{
	return drivers[d->kind] == d ? zk_kind_suffix(d->kind) : "";
}

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
static void
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
	if (p->last_calls)
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
	return !p->dead &&
		((p->dropping && p->phase != NODE_NONE) ||
		 (p->driver->steps.busy && p->driver->steps.busy(p)) ||
		 (p->dropping && last_calls_owed(p)));
}

/*
 * Put an entry done with part p on its leaving list: released ones are
 * freed (and their backend woken, see zk_free_entry) only when the node is
 * no longer pending, so that a release, a failed no-wait attempt or a
 * timed-out wait returns only once everyone else can take the lock.
 */
static void
leave(ZkPart *p, ZkOp *op)
{
	op->leaving = p;
	dlist_push_tail(&p->leaving, &op->link);
}

/* Free the entries waiting for the part's node to go, once it has. */
static void
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
zk_part_rows(ZkPart *p)
{
	int			id;

	while ((id = zk_part_entry(p)) >= 0)
	{
		detach(id);
		zk_set_rows(id, p->rows);
	}
	zk_part_drop(p);
}


/*
 * Say that a holder lost what it held with the session.  A job claim made
 * final is not lost: its transaction's commit record settles it, from the
 * index of unsettled claims (recipes/claim.c).
 */
static void
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
	if (p->phase != NODE_EXISTS)
		pg_atomic_fetch_add_u32(&zk_shared->n_nodes, 1);
	p->phase = NODE_EXISTS;
	p->parent_tries = 0;
	p->parent_error = ZOK;
	e = parent_entry(p->parent, true);
	if (e)
	{
		e->known = true;
		e->used = GetCurrentTimestamp();
	}
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
	p->checked = (d->seq.begin == NULL);
	p->group = -1;
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
	if (p->dead || p->dropping)
		return;
	p->need_eval = true;
	advance(p);
}

/*
 * An instance part lost its node (and what it held) while its session
 * lives on: forget the node and start over with a fresh one.
 */
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
	p->phase = NODE_NONE;
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

void
restart_instance_part(ZkPart *p, const char *why)
{
	own_watch_release(p);		/* before its node name goes */
	if (p->phase == NODE_EXISTS || p->phase == NODE_DELETING)
		pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
	p->phase = NODE_NONE;
	p->delete_unsure = false;
	p->gen++;
	p->inflight = 0;
	p->holds = false;
	p->evaluated = false;
	p->need_eval = true;
	p->node[0] = '\0';
	unwatch(p);
	if (p->driver->reset)
		p->driver->reset(p, why, false);
}

/*
 * A hash table of the engine (in engine_context) whose keys are hashed and
 * compared by the functions given: keys that point to strings sized to them.
 */
HTAB *
engine_hash(const char *name, Size keysize, Size entrysize,
			HashValueFunc hash, HashCompareFunc match)
{
	HASHCTL		ctl;

	ctl.keysize = keysize;
	ctl.entrysize = entrysize;
	ctl.hash = hash;
	ctl.match = match;
	ctl.hcxt = engine_context;
	return hash_create(name, 64, &ctl,
					   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
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

	p->closed = true;
	if (p->cohort &&
		(o = open_entry(p->driver->kind, p->name, HASH_FIND)) != NULL &&
		o->part == p)
		hash_search(open_parts, &o->key, HASH_REMOVE, NULL);
}

/* Free a part once nothing refers to it any more. */
static void
free_part(ZkPart *p)
{
	close_part(p);
	unwatch(p);
	side_unwatch(p);
	own_unwatch(p);
	p->dead = true;
	settle_leaving(p);
	if (p->calls > 0)
		return;
	if (p->phase == NODE_EXISTS || p->phase == NODE_DELETING)
		pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
	if (p->driver->freed)
		p->driver->freed(p);
	unretain(p);
	own_watch_undue(p);
	own_watch_release(p);
	if (p->busy_wait)
		dlist_delete(&p->busy_link);
	if (p->resuming)
		dlist_delete(&p->resume_link);
	if (name_is_copy(p->driver))
		pfree((char *) p->name);
	parts_at_remove(p);
	dlist_delete(&p->link);
	nparts--;
	if (p->rows)
	{
		pfree(p->rows->data);
		pfree(p->rows);
	}
	if (p->extra)
		pfree(p->extra);
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
	p->dropping = true;
	unretain(p);
	/* a watch on our node's parent: the delete of our node fires it */
	unwatch_ex(p, !(p->phase == NODE_EXISTS && !has_entries(p) &&
					p->watch_path && p->watch_children &&
					strcmp(p->watch_path, p->parent) == 0 &&
					zk_connected()));
	advance(p);
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

	if (p->dead)
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
	if (p->dropping && !has_entries(p) && p->phase == NODE_EXISTS &&
		zk_connected())
	{
		char		path[ZK_PATH_MAX];

		snprintf(path, sizeof(path), "%s/%s", p->parent, p->node);
		p->phase = NODE_DELETING;
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

	if (p->dropping && !has_entries(p))
	{
		switch (p->phase)
		{
			case NODE_NONE:
				if (d->steps.busy && d->steps.busy(p))
				{
					wait_busy(p);	/* settle_busy() looks again */
					return;
				}
				if (!p->last_calls && last_calls_owed(p))
				{
					if (!zk_connected())
						return; /* made once connected (zk_engine_connected) */
					p->last_calls = true;
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
			if (!p->checked)
				d->seq.begin(p);	/* the driver's check, again */
			if (p->checked && p->need_eval)
				seq_list(p);	/* (a check may need no call) */
			break;
		case NODE_CREATING:
		case NODE_DELETING:
			break;
	}
}

/* ---- requests from backends ---- */

static void
new_request(int id)
{
	ZkEntry    *e = ZK_ENTRY(id);
	const ZkDriver *d = drivers[e->kind];
	ZkPart	   *p = NULL;

	if (d == NULL)
	{
		zk_set_outcome(id, ZKE_FAILED, ERRCODE_FEATURE_NOT_SUPPORTED,
					   "This zklock worker does not know that kind of request.");
		return;
	}
	if (e->expect_session != 0 && e->expect_session != zk_session())
	{
		/* a later part of a composite, whose earlier parts were lost */
		zk_set_outcome(id, ZKE_LOST, 0, "Its ZooKeeper session ended.");
		return;
	}

	if (d->cohort && zklock_local_handoff)
	{
		ZkOpen	   *o = open_entry(d->kind, e->name, HASH_FIND);

		/* an open part is never dropping: zk_part_drop closes it first */
		if (o)
			p = o->part;
		else
		{
			p = new_part(d, e->name);
			o = open_entry(d->kind, e->name, HASH_ENTER);
			open_set(o, p);
		}
		unretain(p);
		attach(p, id);
		if (p->holds || p->evaluated)
			cohort_update(p);
		if (!p->dead)
			need_contention_watch(p);
		advance(p);
		return;
	}

	p = new_part(d, e->name);
	p->arg = e->arg;
	p->targ = e->targ;
	if (e->count[0] != '\0')
		p->extra = MemoryContextStrdup(engine_context, e->count);
	p->need_eval = true;
	attach(p, id);
	advance(p);
}

/*
 * An entry was queued: a new request, one given up, or an ask on a held
 * one.
 */
static void
take_request(int id)
{
	ZkEntry    *e = ZK_ENTRY(id);
	ZkOp	   *op = &ops[id];
	ZkEntryState state;
	bool		released;
	ZkAsk		ask;
	ZkAskState	ask_state;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	state = e->state;
	released = e->released;
	ask = e->ask;
	ask_state = e->ask_state;
	LWLockRelease(zk_shared->lock);

	if (state == ZKE_FREE)
		return;
	if (op->generation != e->generation)
	{
		/* a new request in this entry (the old one's part let go of it) */
		Assert(op->part == NULL && op->leaving == NULL);
		op->generation = e->generation;
		op->part = NULL;
		if (!released && state == ZKE_PENDING)
		{
			new_request(id);
			return;
		}
	}

	if (released)
	{
		ZkPart	   *p = op->part;

		/* the last ask given with the entry (zk_give_up_asking) */
		if ((ask == ZK_ASK_REOPEN || ask == ZK_ASK_COMMITTED) &&
			ask_state == ZK_ASK_PENDING && p && p->driver->steps.ask)
			p->driver->steps.ask(p, id, ask);

		/*
		 * The entry is freed once its part no longer keeps a node for it
		 * (settle_leaving): at once when the lock passes to another entry of
		 * the instance, else when the node's delete is answered.
		 */
		detach(id);
		op->freeing = true;
		if (p != NULL)
		{
			leave(p, op);
			if (p->cohort && p->holds)
				cohort_update(p);
			else if (!has_entries(p) && p->group < 0)
				zk_part_drop(p);
		}
		if (op->leaving)
			settle_leaving(op->leaving);
		else if (op->freeing)
		{
			/* no node kept for it, or its part went meanwhile */
			op->freeing = false;
			zk_free_entry(id);
		}
		return;
	}

	if (ask_state == ZK_ASK_PENDING && op->part && op->part->driver->steps.ask)
		op->part->driver->steps.ask(op->part, id, ask);
	else if (ask_state == ZK_ASK_PENDING)
		zk_set_ask_outcome(id, ZK_ASK_FAILED, ERRCODE_T_R_SERIALIZATION_FAILURE,
						   "Its ZooKeeper session ended.");
}

/* ---- one turn ---- */

/*
 * The registry's side of an answered call (watches.c), before its part
 * hears of it.
 *
 * A watch this call set.  If the part's interest in the path was taken by
 * a watch that fired while this call was out (the fire came first, so the
 * watch this call set is a new one), the part decides from this answer and
 * relies on that new watch: take it on, beside any other part that has
 * registered for the path since.  Otherwise, when no part wants the watch
 * any more, make sure it is removed (the part's unwatch() may have sent the
 * removal already, which the server then applied after this call).  Either
 * way the client holds it now, until it fires or a removal is answered.
 */
static void
watch_answered(ZkCall *c)
{
	ZkPart	   *p = c->part;

	if (c->watched && c->watch_epoch == watch_epoch)
		(void) count_watch_call(c->path, c->r.type == ZKC_LIST, -1);
	if (c->watch_set || c->r.tag == T_UNWATCH)
	{
		ZkWatchKey	key;

		key.path = c->path;
		key.children = c->watch_set ? (c->r.type == ZKC_LIST) :
			(c->mode == ZWATCHTYPE_CHILD);
		if (!c->watch_set)
		{
			/* the answer to a removal */
			if (c->r.rc == ZOK || c->r.rc == ZNOWATCHER)
			{
				watch_left_client(&key);
				if (!key.children)
					own_watch_left_client(key.path);
			}
		}
		else if (c->own)
		{
			if (c->watch_epoch == watch_epoch)
				own_watch_set(p);
		}
		else if (c->side)
		{
			/*
			 * A side watch is not taken on: a part whose interest a fire
			 * took makes its check again (see watches.c)
			 */
			watch_at_client(&key);
			if (!watch_wanted(&key))
				remove_watch(&key);
		}
		else
		{
			watch_at_client(&key);
			if (c->watch_epoch == watch_epoch && c->gen == p->gen &&
				!p->dead && !p->dropping &&
				p->watch_path == NULL && p->watch_fired)
				watch(p, c->path, key.children);
			else if (!watch_wanted(&key))
				remove_watch(&key);
		}
	}
}

/* Take one answered call: the registry's side, then its part's. */
static void
process_call(ZkCall *c)
{
	ZkPart	   *p = c->part;

	watch_answered(c);

	/* p->calls still counts this call: nothing frees p meanwhile */
	if (c->gen == p->gen && !p->dead)
	{
		p->inflight--;
		answered_list_sent_at = c->sent_at;
		if (c->r.rc == ZSYSTEMERROR && c->r.type != ZKC_DELETE &&
			p->phase != NODE_DELETING)
			zk_part_fail(p, ERRCODE_OUT_OF_MEMORY,
						 "The zklock worker ran out of memory.");
		else if (p == reconciler)
			p->driver->step(p, &c->r);
		else if (c->r.tag < 0)
			seq_result(p, &c->r);
		else
			p->driver->step(p, &c->r);
	}
	p->calls--;
	advance(p);
	free_call(c);
}

/* A watch fired: every part that relied on it looks again. */
static void
process_fired(ZkFired *f)
{
	dlist_head	woken;
	dlist_head	side_woken;
	ZkPart	   *owner = f->data ? own_watch_fired(f->path) : NULL;

	dlist_init(&woken);
	dlist_init(&side_woken);
	for (int children = 0; children <= 1; children++)
	{
		ZkWatchKey	key;
		ZkWatch    *w;

		if (!(children ? f->children : f->data))
			continue;
		key.path = f->path;
		key.children = children;
		w = hash_search(watches, &key, HASH_FIND, NULL);
		if (w == NULL)
			continue;
		/* the watch is spent: take its parts, then let them set new ones */
		while (!dlist_is_empty(&w->parts))
			dlist_push_tail(&woken, dlist_pop_head_node(&w->parts));
		while (!dlist_is_empty(&w->side_parts))
			dlist_push_tail(&side_woken, dlist_pop_head_node(&w->side_parts));
		watch_spent(w);
	}

	/*
	 * Our own node changed or went: the driver hears of it (the leader
	 * latch stops claiming and looks again); a holder reads it again, with
	 * a new watch (own_watch, from advance).
	 */
	if (owner && !owner->dead && !owner->dropping)
	{
		if (owner->driver->fired)
		{
			owner->need_eval = true;
			owner->driver->fired(owner);
		}
		advance(owner);
	}
	while (!dlist_is_empty(&woken))
	{
		ZkPart	   *p = dlist_container(ZkPart, watch_link,
										dlist_pop_head_node(&woken));

		pfree(p->watch_path);
		p->watch_path = NULL;
		p->watch_fired = true;
		p->need_eval = true;
		if (p->driver->fired && !p->dead)
			p->driver->fired(p);
		if (p->group >= 0 || p->holds || has_entries(p) || p->dropping)
			advance(p);
	}

	/* what a part's check read changed: it checks again, then decides */
	while (!dlist_is_empty(&side_woken))
	{
		ZkPart	   *p = dlist_container(ZkPart, side_link,
										dlist_pop_head_node(&side_woken));

		pfree(p->side_path);
		p->side_path = NULL;
		p->checked = false;
		p->need_eval = true;
		if (has_entries(p) || p->dropping)
			advance(p);
	}
}

/*
 * Parts kept for their driver's work (busy_wait): once it is done, their
 * given-up entries are freed and the parts go (advance).  Only those parts
 * are looked at.
 */
static void
settle_busy(void)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &busy_parts)
	{
		ZkPart	   *p = dlist_container(ZkPart, busy_link, it.cur);

		if (!p->driver->steps.busy(p))
		{
			p->busy_wait = false;
			dlist_delete(&p->busy_link);
			advance(p);
		}
	}
}

/* Step 1: the entries backends queued since the last turn. */
static void
take_requests(const int *ids, int n)
{
	for (int i = 0; i < n; i++)
		take_request(ids[i]);
}

/*
 * Step 2: what the ZooKeeper client delivered (calls.c): the answered
 * calls, then the fired watches, until none is left.
 */
static void
take_answers(void)
{
	while (!dlist_is_empty(&answered) || !dlist_is_empty(&fired))
	{
		while (!dlist_is_empty(&answered))
			process_call(dlist_container(ZkCall, link,
										 dlist_pop_head_node(&answered)));
		while (!dlist_is_empty(&fired))
			process_fired(dlist_container(ZkFired, link,
										  dlist_pop_head_node(&fired)));
	}
}

/*
 * Step 3: the parts whose time has come, in this order: those resumed
 * after a reconnect (a batch a turn), the retained ones whose time is up
 * (handoff.c), the holders due the data watch on their own node
 * (watches.c), the parts kept while their driver was busy.
 */
static void
advance_due_parts(void)
{
	resume_parts();
	expire_retained();
	set_due_own_watches();
	settle_busy();
}

/* Step 4: the instance's own work: the reconciler, the drivers' hooks. */
static void
instance_work(void)
{
	reconcile();
	DRIVER_HOOKS(run);
}

/*
 * Step 5: send the calls made in this turn (calls.c); the session node is
 * created first when the writes need it to be coalesced.
 */
static void
send_calls(void)
{
	zk_calls_reap_multis();
	if (zk_session_node_due())
		create_session_node();
	if (unlikely(zk_hop_tracing))
		zk_hop_turn.handed = zk_mono_now();
	zk_calls_flush();
}

/*
 * Traced hops (zklock.trace_hops) at the end of a turn: the traced entries
 * taken in it (ids[0..n-1]) and those held over from earlier turns have
 * sent their calls in it, unless their part's calls were held back behind
 * the writes in flight (calls.c): those are held over, so that the time
 * they wait counts as the worker's, not as ZooKeeper's.
 */
void
zk_engine_hop_sent(const int *ids, int n)
{
	static int *held = NULL;	/* entry ids held over */
	static uint32 *held_gen;	/* ... and their ops' generations */
	static int	nheld = 0;
	int			max = 2 * zk_shared->num_entries;
	int		   *sent = palloc(sizeof(int) * (n + nheld));
	int			nsent = 0;
	int			nkept = 0;

	if (held == NULL)
	{
		held = MemoryContextAlloc(TopMemoryContext, sizeof(int) * max);
		held_gen = MemoryContextAlloc(TopMemoryContext, sizeof(uint32) * max);
	}
	for (int i = 0; i < nheld + n; i++)
	{
		int			id = i < nheld ? held[i] : ids[i - nheld];
		ZkOp	   *op = &ops[id];
		ZkPart	   *p = op->part ? op->part : op->leaving;

		if (i < nheld ? op->generation != held_gen[i] : !ZK_ENTRY(id)->trace)
			continue;
		if (p != NULL && zk_calls_held_back(p) && nkept < max)
		{
			held[nkept] = id;
			held_gen[nkept++] = op->generation;
		}
		else
			sent[nsent++] = id;
	}
	nheld = nkept;
	zk_hop_sent(sent, nsent, zk_mono_now());
}

/*
 * One turn of the engine, called by the worker loop after
 * zookeeper_process() returned (which put what the client delivered on
 * the lists of step 2), with the entries backends queued.  Its steps, in
 * the order they run:
 *
 *	1. take_requests		requests become waiters of a part, given-up
 *							entries leave theirs, asks go to the driver
 *	2. take_answers			answered calls (the registry's side, then the
 *							part's driver or sequential.c), then fired
 *							watches (every part that relied on one looks
 *							again)
 *	3. advance_due_parts	resumed after a reconnect, retention over,
 *							own-node watches due, busy drivers done
 *	4. instance_work		the reconciler's round, the drivers' run hooks
 *	5. send_calls			the calls made in steps 1-4 leave together
 *
 * Whatever a step changes in a part advances it at once (advance): its
 * next calls are queued, and the entries leaving it are freed once its
 * node is no longer kept for them (settle_leaving).
 */
void
zk_engine_run(const int *ids, int n)
{
	take_requests(ids, n);
	take_answers();
	advance_due_parts();
	instance_work();
	send_calls();
}

/* Has the ZooKeeper client delivered anything the engine has not acted on? */
bool
zk_engine_pending(void)
{
	return !dlist_is_empty(&answered) || !dlist_is_empty(&fired) ||
		(!dlist_is_empty(&resuming) && zk_connected()) ||
		zk_calls_pending();
}

/* A driver wants a turn by then (0: no wish); see zk_engine_timeout */
static ZkMono wake_at = 0;

/*
 * A driver that will look at something again at a time of its own (a job
 * claim whose transaction still runs) asks for a turn then: the worker
 * otherwise sleeps up to a second when nothing happens.
 */
void
zk_engine_wake_at(ZkMono at)
{
	if (wake_at == 0 || at < wake_at)
		wake_at = at;
}

/*
 * How long the worker may sleep before the engine needs to run (ms).  The
 * reconciler's round and the holders' data watches on their own nodes
 * count only while connected: they cannot be done otherwise, and an
 * overdue one must not make the worker spin through an outage.
 */
long
zk_engine_timeout(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz next = zk_connected() ? next_reconcile : 0;
	TimestampTz retained = retained_until();
	TimestampTz own = zk_connected() ? own_watch_next_due() : 0;

	if (retained != 0 && (next == 0 || retained < next))
		next = retained;
	if (wake_at != 0)
	{
		/* a driver's wish (zk_engine_wake_at), on the monotonic clock */
		ZkMono		mono = zk_mono_now();
		TimestampTz at = now + Max(wake_at - mono, 0);

		if (wake_at <= mono)
			wake_at = 0;
		if (next == 0 || at < next)
			next = at;
	}
	/* one overdue but not set waits for its part's next step */
	if (own > now && (next == 0 || own < next))
		next = own;
	if (zk_engine_pending())
		return 0;
	if (next == 0)
		return 1000;
	return next <= now ? 0 : Min((next - now + 999) / 1000, 1000);
}

/*
 * Resume the parts waiting for it after a reconnect, a batch a turn: the
 * session's probe, sent when the connection was made, is answered ahead of
 * them (and read at the next turn), and one turn does not grow with the
 * number of parts.
 */
static void
resume_parts(void)
{
	for (int n = 0; n < RESUME_BATCH && zk_connected() &&
		 !dlist_is_empty(&resuming); n++)
	{
		ZkPart	   *p = dlist_container(ZkPart, resume_link,
										dlist_pop_head_node(&resuming));

		p->resuming = false;
		advance(p);
	}
}

/*
 * The session is (again) connected: resume every part, those that wait
 * first.  Parts whose node exists look at their parent again, since
 * anything may have changed while we were away, and set again the watches
 * they need (the worker dropped the client's watches when the connection
 * was lost: see watches.c).
 */
void
zk_engine_connected(void)
{
	dlist_iter	it;

	dlist_foreach(it, &parts)
	{
		ZkPart	   *p = dlist_container(ZkPart, link, it.cur);

		if (p == reconciler)
			continue;
		if (p->phase == NODE_EXISTS || p->driver->form == ZK_FORM_NONE)
			p->need_eval = true;
		if (p->resuming)
			continue;
		p->resuming = true;

		/*
		 * First what others wait for or what grants: deletes of parts given
		 * up, waiters, holders with local waiters to hand on to, the
		 * instance's own parts; holders with nothing to do last.
		 */
		if (p->holds && !p->dropping && p->group < 0 &&
			dlist_is_empty(&p->waiters))
			dlist_push_tail(&resuming, &p->resume_link);
		else
			dlist_push_head(&resuming, &p->resume_link);
	}
	next_reconcile = 0;
	resume_parts();
}

/*
 * A waiting request starts over in a new session (or a new worker): its
 * node and what it waited on are gone.  One that was queued (it waited for
 * someone) gets a fresh deadline to connect; one that never was keeps its
 * own, so that a call made without a usable session fails
 * zklock.connect_timeout after it began, whatever happened meanwhile.
 */
static void
start_over(int id)
{
	ZkEntry    *e = ZK_ENTRY(id);

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	e->node[0] = '\0';
	e->waiting_on[0] = '\0';
	if (e->waited)
		e->connect_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  e->connect_timeout);
	LWLockRelease(zk_shared->lock);
	new_request(id);
}

/*
 * The session is gone (expired, abandoned, or it was a previous worker's):
 * every node it created is, or will soon be, deleted by ZooKeeper, and its
 * watches are gone.  Holdings become LOST; requests still waiting start
 * over in the next session with fresh nodes, unless they are part of a
 * composite that must start over as a whole (ZKR_NO_RESTART: LOST) or a
 * change made at most once that already sent a write (ZKR_AT_MOST_ONCE);
 * instance parts (the leader latch) start over.  Nothing is ever granted
 * on the strength of a node of an old session.
 */
void
zk_engine_session_lost(const char *why)
{
	dlist_mutable_iter it;
	List	   *restart = NIL;
	ListCell   *lc;

	zk_calls_session_lost();
	dlist_foreach_modify(it, &parts)
	{
		ZkPart	   *p = dlist_container(ZkPart, link, it.cur);
		int			id;

		if (p == reconciler)
		{
			p->gen++;
			p->inflight = 0;
			continue;
		}
		while ((id = zk_part_entry(p)) >= 0)
		{
			bool		held = ops[id].holder;
			ZkEntry    *e = ZK_ENTRY(id);

			detach(id);
			if (held || e->state == ZKE_HELD)
			{
				report_lost(e, why);
				zk_set_outcome(id, ZKE_LOST, 0, "%s", why);
				fail_ask(id, why);
			}
			else if ((e->flags & ZKR_NO_RESTART) ||
					 ((e->flags & ZKR_AT_MOST_ONCE) && p->wrote))
				zk_set_outcome(id, ZKE_LOST, 0, "%s", why);
			else
				restart = lappend_int(restart, id);
		}
		own_watch_release(p);	/* before an instance part's node name goes */
		if (p->phase == NODE_EXISTS || p->phase == NODE_DELETING)
			pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
		p->phase = NODE_NONE;
		p->delete_unsure = false;
		p->gen++;
		p->inflight = 0;
		if (p->watch_path)
		{
			dlist_delete(&p->watch_link);
			pfree(p->watch_path);
			p->watch_path = NULL;
		}
		if (p->side_path)
		{
			dlist_delete(&p->side_link);
			pfree(p->side_path);
			p->side_path = NULL;
		}
		if (p->group >= 0 && !p->dropping && !p->dead)
		{
			/* an instance part: starts over once connected again */
			p->holds = false;
			p->evaluated = false;
			p->need_eval = true;
			p->node[0] = '\0';
			if (p->driver->reset)
				p->driver->reset(p, why, false);
			continue;
		}
		free_part(p);
	}

	/* the watches died with the session, and the calls setting them */
	forget_watches();

	/* waiting requests start over */
	foreach(lc, restart)
		start_over(lfirst_int(lc));
	list_free(restart);
}

/* Settings were reloaded. */
void
zk_engine_reload(void)
{
	DRIVER_HOOKS(reload);
}

/* The worker is exiting: drivers say goodbye (their parts end with the session). */
void
zk_engine_exit(void)
{
	DRIVER_HOOKS(exit);
}

/*
 * Start: set up the engine's memory, and take over the entries a previous
 * incarnation of the worker left: their session is gone (the previous
 * worker closed it, or its successor ends it, see session.c).
 */
void
zk_engine_init(void)
{
	engine_context = AllocSetContextCreate(TopMemoryContext, "zklock engine",
										   ALLOCSET_DEFAULT_SIZES);
	zk_turn_context = AllocSetContextCreate(TopMemoryContext, "zklock turn",
											ALLOCSET_DEFAULT_SIZES);
	part_context = SlabContextCreate(engine_context, "zklock parts",
									 64 * 1024, sizeof(ZkPart));
	ops = MemoryContextAllocZero(engine_context,
								 sizeof(ZkOp) * zk_shared->num_entries);

	zk_calls_init(&answered, &fired);
	watches_init();
	parents_init();
	open_parts = engine_hash("zklock open parts", sizeof(ZkOpenKey),
							 sizeof(ZkOpen), open_key_hash, open_key_match);

	reconciler = new_part(&reconciler_driver, "");
	DRIVER_HOOKS(init);

	pg_atomic_write_u32(&zk_shared->n_nodes, 0);
	pg_atomic_write_u32(&zk_shared->n_watches, 0);
	for (int id = 0; id < zk_shared->num_entries; id++)
	{
		ZkEntry    *e = ZK_ENTRY(id);

		if (e->state == ZKE_FREE)
			continue;
		ops[id].generation = e->generation;
		if (e->released)
			zk_free_entry(id);
		else if (e->state == ZKE_HELD)
		{
			report_lost(e, "The zklock worker restarted; the ZooKeeper session of the holding ended with its previous run.");
			zk_set_outcome(id, ZKE_LOST, 0, "The zklock worker restarted.");
		}
		else if (e->state == ZKE_PENDING &&
				 !(e->flags & (ZKR_NO_RESTART | ZKR_AT_MOST_ONCE)))
			start_over(id);
		else if (e->state == ZKE_PENDING)
		{
			/* what the previous run sent of a change made once is unknown */
			zk_set_outcome(id, ZKE_LOST, 0, "The zklock worker restarted.");
		}
		if (e->ask_state == ZK_ASK_PENDING)
			zk_set_ask_outcome(id, ZK_ASK_FAILED, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
							   "The zklock worker restarted.");
	}
}

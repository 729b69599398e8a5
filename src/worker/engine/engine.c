/*-------------------------------------------------------------------------
 *
 * engine.c
 *	  The engine's turn, and the session's coming and going.
 *
 * What it owns: zk_engine_run, which the worker loop calls once per wait
 * and whose five steps are listed there in the order they run; the
 * requests backends queued (a new request becomes a waiter of a part, an
 * entry given up leaves it, an ask goes to the driver); the dispatch of
 * answered calls and fired watches to their parts (the registry's side is
 * watches.c's); the session connected again (every part resumes) or lost
 * (holdings are lost, waiting requests start over); the start, which takes
 * over the entries a previous worker left; and the drivers' table.
 *
 * How the engine works, its structures and who may write which field:
 * src/worker/engine/README.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/engine/engine_internal.h"

MemoryContext zk_turn_context = NULL;
MemoryContext engine_context = NULL;

ZkOp	   *ops;
dlist_head	parts = DLIST_STATIC_INIT(parts);
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

/* Parts to resume after a reconnect (resume_parts), at most this many a turn. */
#define RESUME_BATCH		256
static dlist_head resuming = DLIST_STATIC_INIT(resuming);
static void resume_parts(void);

/*
 * What a driver's parts append to <zklock.root>/<name> for their parent:
 * a kind's driver its kind's suffix (kindlist.h), a driver of parts of its
 * own nothing.
 */
const char *
driver_suffix(const ZkDriver *d)
{
	return drivers[d->kind] == d ? zk_kind_suffix(d->kind) : "";
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
		if (p->stage >= SEQ_WAITING)
			cohort_update(p);
		if (p->life != PART_DEAD)
			need_contention_watch(p);
		advance(p);
		return;
	}

	p = new_part(d, e->name);
	p->arg = e->arg;
	p->targ = e->targ;
	if (e->count[0] != '\0')
		p->sarg = MemoryContextStrdup(engine_context, e->count);
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
			if (p->cohort && zk_part_holds(p))
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

/* Take one answered call: the registry's side, then its part's. */
static void
process_call(ZkCall *c)
{
	ZkPart	   *p = c->part;

	watch_answered(c);

	/* p->calls still counts this call: nothing frees p meanwhile */
	if (c->gen == p->gen && p->life != PART_DEAD)
	{
		p->inflight--;
		answered_list_sent_at = c->sent_at;
		if (c->r.rc == ZSYSTEMERROR && c->r.type != ZKC_DELETE &&
			p->phase != NODE_DELETING)
			zk_part_fail(p, ERRCODE_OUT_OF_MEMORY,
						 "The zklock worker ran out of memory.");
		else if (p == reconciler)
			p->driver->step(p, &c->r);
		else if (c->r.tag == T_DELETE || c->r.tag == T_DELCHECK)
			node_delete_result(p, &c->r);
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
	ZkPart	   *owner = watch_fired_parts(f, &woken, &side_woken);

	/*
	 * Our own node changed or went: the driver hears of it (the leader
	 * latch stops claiming and looks again); a holder reads it again, with
	 * a new watch (own_watch, from advance).
	 */
	if (owner && !zk_part_dropping(owner))
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

		watch_taken(p);
		p->need_eval = true;
		if (p->driver->fired && p->life != PART_DEAD)
			p->driver->fired(p);
		if (p->group >= 0 || zk_part_holds(p) || has_entries(p) ||
			zk_part_dropping(p))
			advance(p);
	}

	/* what a part's check read changed: it checks again, then decides */
	while (!dlist_is_empty(&side_woken))
	{
		ZkPart	   *p = dlist_container(ZkPart, side_link,
										dlist_pop_head_node(&side_woken));

		side_watch_taken(p);
		p->need_eval = true;
		if (has_entries(p) || zk_part_dropping(p))
			advance(p);
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

		dlist_node_init(&p->resume_link);
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
		if (!dlist_node_is_detached(&p->resume_link))
			continue;

		/*
		 * First what others wait for or what grants: deletes of parts given
		 * up, waiters, holders with local waiters to hand on to, the
		 * instance's own parts; holders with nothing to do last.
		 */
		if (zk_part_holds(p) && !zk_part_dropping(p) && p->group < 0 &&
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
		part_session_ended(p, why);
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
	ops = MemoryContextAllocZero(engine_context,
								 sizeof(ZkOp) * zk_shared->num_entries);

	zk_calls_init(&answered, &fired);
	watches_init();
	parents_init();
	parts_init();

	reconciler = new_part(&instance_driver, "");
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

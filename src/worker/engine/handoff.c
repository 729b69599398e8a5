/*-------------------------------------------------------------------------
 *
 * handoff.c
 *	  Local hand-off of a lock between the backends of one instance, and
 *	  retention of a released lock's node.
 *
 * Local hand-off (zklock.local_handoff).  All backends of the instance
 * share one part per lock (the drivers with "cohort": the exclusive lock,
 * the write lock, the semaphore's entry mutex): when our node holds, the
 * engine grants it to the instance's waiting requests one after another
 * without going back to ZooKeeper, and may keep a released node for
 * zklock.retain_time in case a backend asks again.  A cohort part that
 * waits, or holds with local requests to serve or retained, watches its
 * parent's children; once a contender of another instance or client waits
 * behind it, the requests of the instance queued before it (before the
 * last listing that showed no contender) are still granted, but at most
 * zklock.handoff_limit later ones, and none after zklock.handoff_time:
 * then the part closes, grants no more, its node goes when its holders are
 * done, and the remaining local requests queue again behind the contender
 * with a fresh node.  Safety is unchanged: the
 * instance holds the lock in ZooKeeper whenever any of its backends does,
 * and the worker alone decides, so local grants exclude each other as
 * ZooKeeper's grants do.  Fencing tokens stay strictly increasing in grant
 * order across the whole ensemble: a grant's token is
 * czxid * 1024 + (grants of that node before it).
 *
 * Retention (zklock.retain_time, 0 by default): a cohort part whose last
 * holder is done, while no contender elsewhere was seen, keeps its node
 * that long; it lets go of it when the time is up, or at once when a
 * contender shows up (expire_retained).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "worker/engine/engine_internal.h"

/* The parts that keep their node without holders (retain_until set). */
static dlist_head retained = DLIST_STATIC_INIT(retained);

/* Keep the part's node without holders until then. */
static void
retain(ZkPart *p, TimestampTz until)
{
	if (p->retain_until == 0)
		dlist_push_tail(&retained, &p->retain_link);
	p->retain_until = until;
}

/* The part no longer keeps its node for retention. */
void
unretain(ZkPart *p)
{
	if (p->retain_until != 0)
		dlist_delete(&p->retain_link);
	p->retain_until = 0;
}

/* When the first retained part's time is up, or 0. */
TimestampTz
retained_until(void)
{
	TimestampTz next = 0;
	dlist_iter	it;

	dlist_foreach(it, &retained)
	{
		ZkPart	   *p = dlist_container(ZkPart, retain_link, it.cur);

		if (next == 0 || p->retain_until < next)
			next = p->retain_until;
	}
	return next;
}

/*
 * Did the request of op come after the part saw a contender elsewhere?
 * Granting it locally then lets it overtake that contender.  (The request
 * time is fixed while the entry is in use.)
 */
bool
overtakes(ZkPart *p, ZkOp *op)
{
	return p->contended_since != 0 &&
		ZK_ENTRY(op - ops)->requested_at >= p->contended_since;
}

/*
 * A holding cohort part needs to see contenders elsewhere only while it
 * has local requests to hand the lock to, or keeps its node for them
 * (retention): then it lists its parent again with a child watch, unless
 * it has one.  Otherwise its node goes at release anyway, and an
 * uncontended acquire costs no watch.
 */
void
need_contention_watch(ZkPart *p)
{
	if (p->watch_path == NULL && zk_part_holds(p) && p->open == PART_OPEN &&
		!zk_part_dropping(p) &&
		(!dlist_is_empty(&p->waiters) || p->retain_until != 0))
	{
		p->need_eval = true;
		advance(p);
	}
}

/*
 * Of a holding part, given a listing of its parent: does a participant
 * after ours (nodes[self]) wait for it?  The contender may have queued at
 * any time since the last listing that showed none was sent (the part may
 * not have watched meanwhile), so that is when it counts as waiting from:
 * local requests made since then overtake it (see handoff_exhausted).
 */
void
note_contenders(ZkPart *p, ZkNodeRef *nodes, int n, int self)
{
	const ZkDriver *d = p->driver;

	if (p->contended_since != 0)
		return;
	for (int i = self + 1; i < n && d->seq.blocks; i++)
		if (d->seq.blocks(d->form, nodes[i].parsed.form))
		{
			p->contended_since = p->clear_at != 0 ? p->clear_at :
				GetCurrentTimestamp();
			p->local_grants = 0;
			return;
		}
	p->clear_at = answered_list_sent_at;
}

/*
 * May the part grant op's request, or has it handed the lock on long
 * enough while someone elsewhere waits for it?  Requests of the instance
 * that were queued before the contender was seen are granted first, as
 * they would be with a node each; later ones may overtake it at most
 * zklock.handoff_limit times, and not after zklock.handoff_time.
 */
static bool
handoff_exhausted(ZkPart *p, ZkOp *op)
{
	return overtakes(p, op) &&
		(p->local_grants >= zklock_handoff_limit ||
		 TimestampDifferenceExceeds(p->contended_since, GetCurrentTimestamp(),
									zklock_handoff_time));
}

/*
 * The part's node waits for another: its waiters that do not know it yet
 * (they came after the part looked) wait on the same node as the others.
 */
static void
queue_behind_part(ZkPart *p)
{
	const char *on = NULL;
	dlist_iter	it;

	dlist_foreach(it, &p->waiters)
	{
		ZkEntry    *e = ZK_ENTRY(dlist_container(ZkOp, link, it.cur) - ops);

		if (e->waiting_on[0])
		{
			on = e->waiting_on;
			break;
		}
	}
	if (on == NULL)
		return;
	dlist_foreach(it, &p->waiters)
	{
		int			id = dlist_container(ZkOp, link, it.cur) - ops;

		if (ZK_ENTRY(id)->waiting_on[0] == '\0' &&
			!(ZK_ENTRY(id)->flags & ZKR_NOWAIT))
			zk_set_node(id, p->node, on);
	}
}

/*
 * Grant what a holding cohort part can grant, in arrival order; close it
 * once it has handed the lock on for long enough; move the requests it can
 * no longer serve to a fresh part; keep or drop it once unused.
 */
void
cohort_update(ZkPart *p)
{
	const ZkDriver *d = p->driver;

	while (!dlist_is_empty(&p->waiters) && zk_part_holds(p) && p->open == PART_OPEN)
	{
		ZkOp	   *op = dlist_container(ZkOp, link, dlist_head_node(&p->waiters));

		if (!d->seq.shared && p->nholders > 0)
			break;
		if ((p->grants > 0 && handoff_exhausted(p, op)) ||
			p->grants >= MAX_NODE_GRANTS || p->open == PART_REVOKED)
		{
			close_part(p);
			break;
		}
		grant(p, op);
	}
	/*
	 * Requests that must not wait find the lock taken: by a holder of this
	 * instance, or by whoever the part's node waits for, as long as the
	 * session can tell that this is still so (during an outage they wait
	 * for the next look, or fail for want of a session: never false on an
	 * old listing).  Requests that wait queue behind what the part waits
	 * for, like the ones before them.
	 */
	if (p->stage >= SEQ_WAITING && (zk_part_holds(p) || zk_connected()))
		zk_part_would_block(p);
	if (p->stage == SEQ_WAITING && zk_connected())
		queue_behind_part(p);

	/*
	 * Waiters the part will grant queue behind its node: show it as what
	 * they wait on (zk_locks: they have no node of their own), and so they
	 * wait through a ZooKeeper outage like a waiter with a node of its own,
	 * instead of failing for want of a session.
	 */
	if (zk_part_holds(p) && p->open == PART_OPEN)
	{
		dlist_iter	it;

		dlist_foreach(it, &p->waiters)
		{
			ZkOp	   *op = dlist_container(ZkOp, link, it.cur);

			if (!op->queued_local)
			{
				zk_set_node(op - ops, "", p->node);
				op->queued_local = true;
			}
		}
	}

	if (p->open != PART_OPEN && !dlist_is_empty(&p->waiters))
	{
		/* queue again behind whoever waits, with a fresh node */
		ZkPart	   *fresh = new_part(d, p->name);
		ZkOpen	   *o = open_entry(d->kind, p->name, HASH_ENTER);

		fresh->cohort = true;	/* whatever zklock.local_handoff says now */
		open_set(o, fresh);
		while (!dlist_is_empty(&p->waiters))
		{
			int			id = dlist_container(ZkOp, link,
											 dlist_head_node(&p->waiters)) - ops;

			detach(id);
			attach(fresh, id);
		}
		advance(fresh);
	}

	if (!has_entries(p))
	{
		if (zk_part_holds(p) && p->open == PART_OPEN && p->contended_since == 0 &&
			zklock_retain_time > 0)
		{
			retain(p, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  zklock_retain_time));
			need_contention_watch(p);
		}
		else
			zk_part_drop(p);
	}
}

/*
 * Parts kept after their last holder: let go of those whose time is up
 * (only the retained parts are looked at).
 */
void
expire_retained(void)
{
	TimestampTz now;
	dlist_mutable_iter it;

	if (dlist_is_empty(&retained))
		return;
	now = GetCurrentTimestamp();
	dlist_foreach_modify(it, &retained)
	{
		ZkPart	   *p = dlist_container(ZkPart, retain_link, it.cur);

		if (!has_entries(p) &&
			(now >= p->retain_until || p->contended_since != 0 ||
			 p->open == PART_REVOKED))
			zk_part_drop(p);
	}
}

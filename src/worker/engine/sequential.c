/*-------------------------------------------------------------------------
 *
 * sequential.c
 *	  The sequential-node protocol the lock recipes share.
 *
 * Sequential-node recipes (exclusive lock, read and write lock, semaphore
 * lease and entry mutex, leader latch) only say how their node is named
 * and, given the ordered participants, whether ours holds and which node to
 * watch otherwise (the driver's form and decide()).  This file runs the
 * protocol they share, as Curator's LockInternals does: create a protected
 * ephemeral-sequential node, list the parent (both sent back to back: a
 * session's requests run in order, so the listing includes the node, one
 * round trip), order the participants (shared/nodename.c), decide, watch
 * the node named (a getData watch, never exists), look again when it
 * fires.  A create whose reply was lost is found again by its protected
 * prefix (after a sync, so the server we ask has seen every write the
 * leader committed).  A holder of a revocable recipe reads its own node
 * with a watch, for Curator's revocation message.
 *
 * advance() (part.c) says when a part creates its node or lists its
 * parent again; seq_result() acts on the answers.  The delete of our node
 * is part.c's, for every driver.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/pg_prng.h"
#include "utils/timestamp.h"

#include "worker/engine/engine_internal.h"

static pg_prng_state prefix_prng;
static bool prefix_prng_seeded = false;

void
seq_create(ZkPart *p)
{
	const ZkDriver *d = p->driver;
	char		path[ZK_PATH_MAX];
	uint8		rnd[8];
	uint64		r;
	ZkParent   *e = parent_entry(p->parent, false);
	char	   *data = zk_node_data(p);

	/*
	 * The prefix only has to be unique: drawn from a generator seeded from
	 * the strong source once, not from the strong source (a system call)
	 * every time.
	 */
	if (!prefix_prng_seeded)
	{
		if (!pg_prng_strong_seed(&prefix_prng))
			elog(ERROR, "could not generate random bytes");
		prefix_prng_seeded = true;
	}
	r = pg_prng_uint64(&prefix_prng);
	memcpy(rnd, &r, sizeof(rnd));
	StaticAssertStmt(sizeof(p->node) > ZK_PROTECTED_PREFIX_LEN, "node");
	own_watch_release(p);		/* before node holds the prefix */
	zk_make_prefix(p->node, sizeof(p->node), rnd, (uint64) zk_session());
	snprintf(path, sizeof(path), "%s/%s%s", p->parent, p->node,
			 zk_form_base(d->form));
	zk_part_set_phase(p, NODE_CREATING);
	p->need_eval = true;
	zk_call_create(p, T_CREATE, path, data,
				   ZOO_EPHEMERAL_SEQUENTIAL, e == NULL || !e->known);
	/* the driver's check follows every create of our node */
	p->stage = (d->seq.begin == NULL) ? SEQ_UNDECIDED : SEQ_CHECKING;
	if (d->seq.begin && d->seq.precheck == NULL)
		d->seq.begin(p);
	zk_call_list(p, T_LIST, p->parent, d->seq.watch_children);
	pfree(data);
}

/*
 * List the parent again, to decide, with a watch on its children where the
 * recipe needs one: while the part waits there, and while a holding cohort
 * part has local requests to hand the lock to or retains its node (see
 * need_contention_watch).  A holder needs none.
 */
void
seq_list(ZkPart *p)
{
	bool		with_watch = !zk_part_holds(p) ?
		(p->driver->seq.watch_children || p->cohort) :
		(p->cohort && p->open == PART_OPEN &&
		 (!dlist_is_empty(&p->waiters) || p->retain_until != 0));

	zk_call_list(p, T_LIST, p->parent, with_watch);
}

/*
 * Participants of a listing, parsed and in recipe order, for the driver's
 * counts(); *nodes allocated in turn memory.  Returns how many.
 */
int
zk_list_participants(const ZkResult *r, bool (*counts) (ZkForm),
					 ZkNodeRef **nodes)
{
	int			n = 0;

	*nodes = palloc(sizeof(ZkNodeRef) * Max(r->nchildren, 1));
	for (int i = 0; i < r->nchildren; i++)
	{
		ZkNodeRef  *ref = &(*nodes)[n];

		if (zk_parse_node(r->children[i], &ref->parsed) &&
			counts(ref->parsed.form))
		{
			ref->name = r->children[i];
			n++;
		}
	}
	zk_sort_nodes(*nodes, n);
	return n;
}

/* A listing of the parent arrived while our node exists: decide. */
static void
seq_evaluate(ZkPart *p, const ZkResult *r)
{
	const ZkDriver *d = p->driver;
	ZkNodeRef  *nodes;
	int			n = zk_list_participants(r, d->seq.counts, &nodes);
	int			self = -1;
	int			w;

	for (int i = 0; i < n; i++)
		if (strcmp(nodes[i].name, p->node) == 0)
			self = i;
	if (self < 0)
	{
		/* our node is gone although our session is not */
		if (p->group >= 0)
		{
			restart_instance_part(p, "Its node was deleted by another ZooKeeper client.");
			return;
		}
		zk_part_set_phase(p, NODE_NONE);
		zk_part_fail(p, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					 "Its node \"%s\" was deleted by another ZooKeeper client.",
					 p->node);
		return;
	}

	if (zk_part_holds(p))
	{
		/* is someone of another instance or client waiting for us? */
		note_contenders(p, nodes, n, self);
		if (p->group < 0)
			cohort_update(p);
		return;
	}

	w = d->seq.decide(p, nodes, n, self);
	p->stage = (w == ZK_HOLDS) ? SEQ_HOLDING : SEQ_WAITING;
	if (w == ZK_HOLDS)
	{
		p->held_since = GetCurrentTimestamp();
		if (p->cohort)
			note_contenders(p, nodes, n, self);
		else
			unwatch(p);
		side_unwatch(p);
		own_watch(p);
		zk_part_grant(p);
		if (p->cohort && p->life != PART_DEAD)
			need_contention_watch(p);
		return;
	}

	zk_part_would_block(p);
	if (!has_entries(p) && p->group < 0)
	{
		zk_part_drop(p);
		return;
	}
	if (w == ZK_WATCH_CHILDREN)
	{
		zk_part_wait_on(p, NULL);
		return;					/* the listing set that watch */
	}
	if (p->cohort)
	{
		/*
		 * Wait for a change of the children, which comes when the node we
		 * wait for goes (one part per lock and instance, so no herd); the
		 * same watch shows contenders once ours holds.  The first listing
		 * has no watch (an uncontended acquire needs none): list again.
		 */
		zk_part_wait_on(p, nodes[w].name);
		if (p->watch_path == NULL)
			p->need_eval = true;
		return;
	}
	{
		char		path[ZK_PATH_MAX];

		snprintf(path, sizeof(path), "%s/%s", p->parent, nodes[w].name);
		zk_part_wait_on(p, nodes[w].name);
		zk_call_get(p, T_PRED, path, true);
	}
}

/*
 * Someone wrote Curator's revocation message into our node (Revoker's
 * attemptRevoke, zk_lock_revoke): the part grants no more (its waiting
 * requests queue again behind a fresh node), and its holders are told.
 * Those that opted in (ZKR_REVOCABLE) are sent SIGINT, which cancels the
 * statement they run; their backend lets go of the holding at the end of
 * the transaction (backend/holdings.c).  Nothing is deleted here:
 * revocation is cooperative.
 */
static void
revoke_requested(ZkPart *p)
{
	dlist_iter	it;

	close_part(p);				/* no more local hand-off: let it go */
	p->open = PART_REVOKED;
	dlist_foreach(it, &p->holders)
	{
		int			id = dlist_container(ZkOp, link, it.cur) - ops;
		int			pid = zk_set_revoke_requested(id);

		if (pid == 0)
		{
			ereport(LOG,
					(errmsg("zklock %s \"%s\" held by process %d was asked to let go",
							zk_kind_name(p->driver->kind), p->name,
							ZK_ENTRY(id)->owner_pid),
					 errdetail("Its node \"%s/%s\" holds the revocation request.",
							   p->parent, p->node)));
			continue;
		}
		ereport(LOG,
				(errmsg("zklock %s \"%s\" held by process %d was revoked; cancelling that process's statement",
						zk_kind_name(p->driver->kind), p->name, pid),
				 errdetail("It was acquired revocable, and its node \"%s/%s\" holds the revocation request.",
						   p->parent, p->node)));
	}
}

/* Results of the engine's own calls about a sequential part. */
void
seq_result(ZkPart *p, const ZkResult *r)
{
	switch (r->tag)
	{
		case T_PARENT:
			if (r->rc == ZOK || r->rc == ZNODEEXISTS)
				parent_known(r->path, true);
			else if (r->rc == ZNONODE)
				zk_parents_gone(r->path);	/* an ancestor went: tried again */
			else if (!zk_is_connection_loss(r->rc) && r->rc != ZCLOSING)
				p->parent_error = r->rc;
			break;
		case T_CREATE:
			if (r->rc == ZOK)
				zk_part_node_created(p, r->path, &r->stat);
			else if (r->rc == ZNONODE)
				(void) zk_part_parent_gone(p);
			else if (zk_is_connection_loss(r->rc))
				zk_part_set_phase(p, NODE_UNKNOWN);
			else if (r->rc != ZCLOSING)
			{
				zk_part_set_phase(p, NODE_NONE);
				zk_part_fail(p, zk_refusal_errcode(r->rc),
							 "ZooKeeper refused to create its node: %s.",
							 zerror(r->rc));
			}
			break;
		case T_LIST:
			if (r->rc == ZOK && p->phase == NODE_UNKNOWN)
			{
				/* after a lost create reply: is our node there? */
				size_t		plen = strlen(p->node);

				zk_part_set_phase(p, NODE_NONE);
				for (int i = 0; i < r->nchildren; i++)
					if (plen > 0 && strncmp(r->children[i], p->node, plen) == 0)
					{
						char		path[ZK_PATH_MAX];

						strlcpy(p->node, r->children[i], sizeof(p->node));
						snprintf(path, sizeof(path), "%s/%s", p->parent, p->node);
						zk_call_exists(p, T_STAT, path);
						zk_part_set_phase(p, NODE_CREATING);	/* until its stat
																 * comes */
						break;
					}
				if (p->phase == NODE_NONE)
				{
					ZkParent   *e = parent_entry(p->parent, true);

					if (e)
						e->suspect = true;	/* the reconciler looks again */
				}
			}
			else if (r->rc == ZOK && p->phase == NODE_EXISTS && p->need_eval)
			{
				p->need_eval = false;
				if (p->stage < SEQ_UNDECIDED && p->driver->seq.precheck &&
					p->inflight == 0)
				{
					/* no begin() in flight: does this listing settle it? */
					if (p->driver->seq.precheck(p, r))
						zk_part_checked(p);
					else
						p->driver->seq.begin(p);
				}
				if (p->stage >= SEQ_UNDECIDED)
					seq_evaluate(p, r);
				else
					p->need_eval = true;	/* after the driver's check */
			}
			else if (r->rc == ZNONODE && p->phase == NODE_UNKNOWN)
				zk_part_set_phase(p, NODE_NONE);	/* parent gone, so our node never was */
			else if (r->rc == ZNONODE && p->phase == NODE_EXISTS)
			{
				/* the parent is gone, so our node went with it */
				ZkResult	none = *r;

				none.nchildren = 0;
				p->need_eval = false;
				seq_evaluate(p, &none);
			}
			break;
		case T_STAT:
			if (r->rc == ZOK && zk_is_ours(&r->stat))
				zk_part_node_created(p, r->path, &r->stat);
			else if (r->rc == ZOK || r->rc == ZNONODE)
				zk_part_set_phase(p, NODE_NONE);	/* not ours after all:
													 * start over */
			else
				zk_part_set_phase(p, NODE_UNKNOWN);
			break;
		case T_PRED:
			/* ZOK: the watch is set; anything else: look again */
			if (r->rc != ZOK)
			{
				unwatch(p);
				p->need_eval = true;
			}
			break;
		case T_OWNDATA:
			if (r->rc == ZOK && r->has_stat)
				p->version = r->stat.version;
			if (r->rc == ZOK && p->open != PART_REVOKED && r->data &&
				r->datalen == strlen(ZK_REVOKE_MESSAGE) &&
				memcmp(r->data, ZK_REVOKE_MESSAGE, r->datalen) == 0)
				revoke_requested(p);
			else if (r->rc != ZOK)
			{
				/* no watch: gone (look again), or set it again later */
				own_unwatch(p);
				if (r->rc == ZNONODE)
					p->need_eval = true;
			}
			break;
	}
}

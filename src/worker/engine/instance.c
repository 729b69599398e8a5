/*-------------------------------------------------------------------------
 *
 * instance.c
 *	  The instance's own part and its calls: the reconciler of orphaned
 *	  nodes, the session node's create, the removal of watches.
 *
 * The instance's own part (reconciler) serves no entry; the engine makes
 * with it the calls that are nobody else's, and its answers come back
 * here (instance_step), never to a driver.
 *
 * The reconciler.  A create whose reply was lost is found again by its
 * protected prefix (after a sync, so the server we ask has seen every
 * write the leader committed).  What could still slip through is a node of
 * our own session that no part claims: every few seconds the parents the
 * instance used lately are listed (parents.c), and a node whose name
 * carries our session id (shared/nodename.c) and that no part claims is
 * deleted once its ephemeralOwner confirms it is ours.  A parent where
 * every part of ours holds is not listed: nothing of ours there waits
 * behind a node nobody claims, and it is listed again once they are done
 * (or when a create's outcome there was unknown).  So an instance that
 * holds many locks and does nothing costs ZooKeeper no listings.
 *
 * The session node ("the clock", see calls.c, which says when it is due
 * and uses it in the multis): its create, and the answer handed back to
 * calls.c (zk_clock_answered).
 *
 * The removal of a watch nobody needs (watches.c decides, remove_watch;
 * its answer is the registry's, watch_answered).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "worker/engine/engine_internal.h"

/* the reconciler: how often, how many parents a round, for how long */
#define RECONCILE_INTERVAL_MS	5000
#define RECONCILE_BATCH			100
#define PARENT_FORGET_MS		60000

ZkPart	   *reconciler;
TimestampTz next_reconcile = 0;
static HASH_SEQ_STATUS reconcile_scan;
static bool reconcile_scanning = false;

/* Does every part of ours under the parent hold (and is there one)? */
static bool
all_hold_at(ZkParent *e)
{
	dlist_iter	it;

	if (dlist_is_empty(&e->parts))
		return false;
	dlist_foreach(it, &e->parts)
	{
		ZkPart	   *p = dlist_container(ZkPart, parent_link, it.cur);

		if (!zk_part_holds(p) || p->phase != NODE_EXISTS ||
			zk_part_dropping(p))
			return false;
	}
	return true;
}

/* ---- the reconciler ---- */

/* Start a round of the reconciler when it is due (see the file header). */
void
reconcile(void)
{
	TimestampTz now = GetCurrentTimestamp();
	ZkParent   *e;
	int			n = 0;

	if (!zk_connected() || now < next_reconcile || reconciler->inflight > 0)
		return;
	if (!reconcile_scanning)
	{
		hash_seq_init(&reconcile_scan, parents);
		reconcile_scanning = true;
	}
	while (n < RECONCILE_BATCH && (e = hash_seq_search(&reconcile_scan)) != NULL)
	{
		if (e->used == 0 && !e->suspect)
			continue;
		if (!e->suspect && dlist_is_empty(&e->parts) &&
			TimestampDifferenceExceeds(e->used, now, PARENT_FORGET_MS))
		{
			/* forgotten (dynahash allows removing the current entry) */
			char	   *path = (char *) e->path;

			hash_search(parents, &path, HASH_REMOVE, NULL);
			pfree(path);
			continue;
		}
		if (!e->suspect && all_hold_at(e))
			continue;			/* looked at once they are done (below) */
		zk_call_list(reconciler, T_RECONCILE, e->path, false);
		n++;
	}
	if (e == NULL)
	{
		reconcile_scanning = false;
		next_reconcile = TimestampTzPlusMilliseconds(now, RECONCILE_INTERVAL_MS);
	}
}

/*
 * Create the session node (calls.c says when: zk_session_node_due), a call
 * of the instance's own, whose answer comes back here (instance_step).
 */
void
create_session_node(void)
{
	char	   *data = zk_node_data(reconciler);

	zk_call_create(reconciler, T_CLOCK, zk_session_node_creating(data), data,
				   ZOO_EPHEMERAL, true);
	pfree(data);
}

/* Is this node claimed by a part, or being looked for by one? */
static bool
node_claimed(const char *parent, const char *node)
{
	ZkParent   *e = parent_entry(parent, false);
	dlist_iter	it;

	if (e == NULL)
		return false;
	dlist_foreach(it, &e->parts)
	{
		ZkPart	   *p = dlist_container(ZkPart, parent_link, it.cur);

		if (p->phase == NODE_NONE || p->node[0] == '\0')
			continue;
		/* a sequential node's create out or lost: node is its prefix */
		if ((p->phase == NODE_CREATING || p->phase == NODE_UNKNOWN) &&
			p->driver->form != ZK_FORM_NONE ?
			strncmp(node, p->node, strlen(p->node)) == 0 :
			strcmp(p->node, node) == 0)
			return true;
	}
	return false;
}

/* The reconciler's answers. */
static void
instance_step(ZkPart *p, const ZkResult *r)
{
	uint64		session = (uint64) zk_session();
	char		path[ZK_PATH_MAX];

	if (r && r->tag == T_CLOCK)
	{
		zk_clock_answered(r);	/* the session node (calls.c) */
		return;
	}
	if (r == NULL || r->rc != ZOK)
		return;
	switch (r->tag)
	{
		case T_RECONCILE:
			{
				ZkParent   *e = parent_entry(r->path, false);

				if (e)
					e->suspect = false;
				for (int i = 0; i < r->nchildren; i++)
				{
					ZkNodeName nn;

					if (zk_parse_node(r->children[i], &nn) &&
						nn.session == session &&
						!node_claimed(r->path, r->children[i]))
					{
						snprintf(path, sizeof(path), "%s/%s", r->path,
								 r->children[i]);
						zk_call_exists(p, T_ORPHAN, path);
					}
				}
				break;
			}
		case T_ORPHAN:
			{
				char		parent[ZK_PATH_MAX];

				strlcpy(parent, r->path, sizeof(parent));
				*strrchr(parent, '/') = '\0';
				if (zk_is_ours(&r->stat) &&
					!node_claimed(parent, zk_node_of(r->path)))
				{
					ereport(LOG,
							(errmsg("zklock is deleting orphaned node \"%s\"",
									r->path),
							 errdetail("The node belongs to the worker's own ZooKeeper session but to no request.")));
					pg_atomic_fetch_add_u64(&zk_shared->n_orphans, 1);
					zk_call_delete(p, T_ORPHAN_DEL, r->path, -1);
				}
				break;
			}
	}
}

const ZkDriver instance_driver = {
	.kind = ZK_KIND_LIST,
	.step = instance_step,
};

/* Remove every watch of the client on key's path, on the server too. */
void
send_unwatch(const ZkWatchKey *key)
{
	ZkCall	   *c = new_call(reconciler, ZKC_DELETE, T_UNWATCH, key->path);

	c->mode = key->children ? ZWATCHTYPE_CHILD : ZWATCHTYPE_DATA;
	queue_call(c);
}

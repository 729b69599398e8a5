/*-------------------------------------------------------------------------
 *
 * reconciler.c
 *	  The parents the instance uses, the reconciler, and the instance's
 *	  session node.
 *
 * Parents: the engine remembers the parents it created or saw (a hint: a
 * create sends no create for a parent known to exist, and a ZNONODE makes
 * it forget them), and when a node of ours was last under each.  Each
 * parent's entry also lists our parts there (parts_at_add), whose parent
 * path is the entry's: what concerns a parent costs what is under it, not
 * what the instance holds elsewhere, and a part keeps no copy of its own.
 *
 * The reconciler.  A create whose reply was lost is found again by its
 * protected prefix (after a sync, so the server we ask has seen every
 * write the leader committed).  What could still slip through is a node of
 * our own session that no part claims: every few seconds the parents the
 * instance used lately are listed, and a node whose name carries our
 * session id (shared/nodename.c) and that no part claims is deleted once
 * its ephemeralOwner confirms it is ours.  A parent where every part of
 * ours holds is not listed: nothing of ours there waits behind a node
 * nobody claims, and it is listed again once they are done (or when a
 * create's outcome there was unknown).  So an instance that holds many
 * locks and does nothing costs ZooKeeper no listings.
 *
 * The reconciler's part also makes the instance's other calls of its own:
 * the create of the session node (create_session_node; calls.c says when,
 * and uses it), and the removals of watches nobody needs (watches.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/timestamp.h"

#include "worker/engine/engine_internal.h"

/* the reconciler: how often, how many parents a round, for how long */
#define RECONCILE_INTERVAL_MS	5000
#define RECONCILE_BATCH			100
#define PARENT_FORGET_MS		60000
#define MAX_PARENTS				10000
#define FORGET_NOW				((TimestampTz) 1)	/* "used" long ago */

HTAB	   *parents;
ZkPart	   *reconciler;
TimestampTz next_reconcile = 0;
static HASH_SEQ_STATUS reconcile_scan;
static bool reconcile_scanning = false;

static uint32
path_ptr_hash(const void *key, Size keysize)
{
	const char *path = *(const char *const *) key;

	return hash_bytes((const unsigned char *) path, strlen(path));
}

static int
path_ptr_match(const void *key1, const void *key2, Size keysize)
{
	return strcmp(*(const char *const *) key1, *(const char *const *) key2);
}

/* The parents, with the parts under each; keys are sized to the path. */
void
parents_init(void)
{
	parents = engine_hash("zklock parents", sizeof(const char *),
						  sizeof(ZkParent), path_ptr_hash, path_ptr_match);
}

/*
 * The parent's entry; with create, made if new (beyond MAX_PARENTS only
 * for a part: force).
 */
static ZkParent *
parent_entry_ex(const char *path, bool create, bool force)
{
	bool		found;
	ZkParent   *e;

	if (create && !force && hash_get_num_entries(parents) >= MAX_PARENTS)
		create = false;
	e = hash_search(parents, &path, create ? HASH_ENTER : HASH_FIND, &found);
	if (e && create && !found)
	{
		e->path = MemoryContextStrdup(engine_context, path);
		e->known = false;
		e->used = 0;
		e->suspect = false;
		dlist_init(&e->parts);
	}
	return e;
}

ZkParent *
parent_entry(const char *path, bool create)
{
	return parent_entry_ex(path, create, false);
}

/* A new part under parent: it takes the entry's path as its own. */
void
parts_at_add(ZkPart *p, const char *parent)
{
	ZkParent   *e = parent_entry_ex(parent, true, true);

	p->parent = e->path;
	dlist_push_tail(&e->parts, &p->parent_link);
}

/* The part goes (its parent path with it, unless the entry has others). */
void
parts_at_remove(ZkPart *p)
{
	ZkParent   *e = parent_entry(p->parent, false);

	dlist_delete(&p->parent_link);

	/*
	 * Our last part there went: the reconciler lists the parent once more
	 * (it skipped it while every part of ours there held), then forgets it
	 * PARENT_FORGET_MS later.  A parent where no node of ours ever was (the
	 * part only listed it, say) has nothing to look at: its next round
	 * forgets it (an entry cannot be removed while a round may be on its
	 * way through the table).
	 */
	if (dlist_is_empty(&e->parts))
		e->used = (e->used > FORGET_NOW) ? GetCurrentTimestamp() : FORGET_NOW;
	p->parent = NULL;
}

/*
 * The sequential-node part whose node (of the current session) is, or was
 * last, at path; or NULL.  Only a node whose name carries our session can
 * be one: others (most of those a waiter watches) are told at once,
 * without a walk of our parts there.
 */
ZkPart *
part_of_node(const char *path)
{
	const char *node = zk_node_of(path);
	char		parent[ZK_PATH_MAX];
	ZkNodeName	nn;
	ZkParent   *e;
	dlist_iter	it;

	if (node == path || node - path > sizeof(parent) ||
		!zk_parse_node(node, &nn) || nn.session != (uint64) zk_session())
		return NULL;
	strlcpy(parent, path, node - path);
	e = parent_entry(parent, false);
	if (e == NULL)
		return NULL;
	dlist_foreach(it, &e->parts)
	{
		ZkPart	   *p = dlist_container(ZkPart, parent_link, it.cur);

		if (strcmp(p->node, node) == 0)
			return p;
	}
	return NULL;
}

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

/* ---- parents: known ones, and the ones the reconciler looks at ---- */

void
parent_known(const char *path, bool known)
{
	ZkParent   *e = parent_entry(path, known);

	if (e)
		e->known = known;
}

/*
 * A create under path failed with ZNONODE: path, or one of its ancestors
 * (a container ZooKeeper reaped), is gone; forget that they exist.
 */
void
zk_parents_gone(const char *path)
{
	char		anc[ZK_PATH_MAX];
	char	   *slash;

	strlcpy(anc, path, sizeof(anc));
	do
	{
		parent_known(anc, false);
		slash = strrchr(anc, '/');
		if (slash)
			*slash = '\0';
	} while (slash && slash != anc);
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
 * of the instance's own, whose answer comes back here (reconciler_step).
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
reconciler_step(ZkPart *p, const ZkResult *r)
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

const ZkDriver reconciler_driver = {
	.kind = ZK_KIND_LIST,
	.step = reconciler_step,
};

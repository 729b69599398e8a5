/*-------------------------------------------------------------------------
 *
 * parents.c
 *	  The parents the instance uses.
 *
 * The engine remembers the parents it created or saw (a hint: a create
 * sends no create for a parent known to exist, and a ZNONODE makes it
 * forget them), and when a node of ours was last under each.  Each
 * parent's entry also lists our parts there (parts_at_add), whose parent
 * path is the entry's: what concerns a parent costs what is under it, not
 * what the instance holds elsewhere, and a part keeps no copy of its own.
 * The reconciler (instance.c) lists the parents used lately and forgets
 * those unused for long.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/timestamp.h"

#include "worker/engine/engine_internal.h"

#define MAX_PARENTS				10000
#define FORGET_NOW				((TimestampTz) 1)	/* "used" long ago */

HTAB	   *parents;
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


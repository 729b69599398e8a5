/*-------------------------------------------------------------------------
 *
 * lock.c
 *	  Drivers of the lock family: Curator's InterProcessMutex, the two
 *	  sides of InterProcessReadWriteLock, and the entry mutex of
 *	  InterProcessSemaphoreV2.
 *
 * They share one parent per name, <zklock.root>/<name> (the entry mutex:
 * <zklock.root>/<name>/locks), and one order: exclusive nodes (mutex,
 * writer, Kazoo's lock) hold when no participant comes before them;
 * shared ones (reader, Kazoo's read lock) when no exclusive one does.  So
 * among zklock's sessions every mix of lock, read and write on one name
 * excludes as one resource, as PostgreSQL's advisory locks do, and zklock
 * waits for Curator's and Kazoo's nodes on the same path too.  Whether
 * they wait for ours depends on their recipe: Curator's mutex counts only
 * "lock-" nodes, its read-write lock only "__READ__" and "__WRIT__" ones,
 * Kazoo's recipes only "__lock__" (and "__rlock__") nodes and their
 * extra_lock_patterns (README, "Kinds across implementations").
 *
 * A name is either a lock or a semaphore, cluster-wide: the lock family
 * looks, with its first create, for semaphore participants under the name
 * (<name>/leases, <name>/locks), and the semaphore's entry mutex for lock
 * participants at <name>; whoever finds the other fails.  Every side
 * creates its node before it looks, so of two that start together at least
 * the later one sees the earlier one (ZooKeeper orders the creates, and
 * each listing is at least as new as its own create).
 *
 * The SQL side is backend/lock.c (zk_lock_*, zk_rwlock_*; the entry mutex
 * is taken for the semaphore functions, composed by backend/holdings.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/elog.h"

#include "worker/engine/engine.h"

/* tags of the kinds check */
#define T_CHECK_A	1
#define T_CHECK_B	2

static bool
is_exclusive(ZkForm form)
{
	return form == ZK_FORM_LOCK || form == ZK_FORM_WRITE ||
		form == ZK_FORM_KAZOO_LOCK;
}

static bool
lock_counts(ZkForm form)
{
	return is_exclusive(form) || form == ZK_FORM_READ ||
		form == ZK_FORM_KAZOO_READ;
}

/* participants of a semaphore: its leases and its entry mutex's nodes */
static bool
semaphore_counts(ZkForm form)
{
	return form == ZK_FORM_LEASE || form == ZK_FORM_LOCK;
}

static bool
entry_counts(ZkForm form)
{
	return form == ZK_FORM_LOCK;
}

/* Exclusive: the first participant holds; the others watch the one before. */
static int
exclusive_decide(ZkPart *p, ZkNodeRef *nodes, int n, int self)
{
	return self == 0 ? ZK_HOLDS : self - 1;
}

/* Shared: holds unless an exclusive node comes first; then watch the
 * nearest one before it. */
static int
shared_decide(ZkPart *p, ZkNodeRef *nodes, int n, int self)
{
	for (int i = self - 1; i >= 0; i--)
		if (is_exclusive(nodes[i].parsed.form))
			return i;
	return ZK_HOLDS;
}

/* The lock family's participants, for revocation and listings. */
bool
zk_lock_family_counts(ZkForm form)
{
	return lock_counts(form);
}

/*
 * Does nodes[i] hold, of the lock family's participants in order?  The
 * rule of exclusive_decide and shared_decide, seen from outside.
 */
bool
zk_lock_family_holds(const ZkNodeRef *nodes, int n, int i)
{
	if (is_exclusive(nodes[i].parsed.form))
		return i == 0;
	for (int j = 0; j < i; j++)
		if (is_exclusive(nodes[j].parsed.form))
			return false;
	return true;
}

/* Does a node of form theirs, after ours, wait for ours? */
static bool
lock_blocks(ZkForm ours, ZkForm theirs)
{
	return is_exclusive(ours) || is_exclusive(theirs);
}

/*
 * The lock family's check: list the semaphore's children of the name.
 */
static void
lock_begin(ZkPart *p)
{
	char		path[ZK_PATH_MAX];

	/*
	 * The entry mutex's nodes first: a lease taken after that listing was
	 * taken under a mutex node it would have shown, so a lease missed by
	 * the second listing cannot have been created before the first.
	 */
	p->ds.checked = 0;
	snprintf(path, sizeof(path), "%s/locks", p->parent);
	zk_call_list(p, T_CHECK_A, path, false);
	snprintf(path, sizeof(path), "%s/leases", p->parent);
	zk_call_list(p, T_CHECK_B, path, false);
}

/*
 * The lock family's check without calls: semaphore participants of the
 * name live under its children "locks" and "leases"; when the listing of
 * the name (taken after our node was created) has neither, there are none,
 * and a semaphore participant that comes later sees our node (its entry
 * mutex lists the name after creating its node).
 */
static bool
lock_precheck(ZkPart *p, const ZkResult *r)
{
	for (int i = 0; i < r->nchildren; i++)
		if (strcmp(r->children[i], "locks") == 0 ||
			strcmp(r->children[i], "leases") == 0)
			return false;
	return true;
}

/* The entry mutex's check: list the lock participants of the name. */
static void
entry_begin(ZkPart *p)
{
	char		path[ZK_PATH_MAX];

	p->ds.checked = 0;
	strlcpy(path, p->parent, sizeof(path));
	*strrchr(path, '/') = '\0'; /* <root>/<name>/locks -> <root>/<name> */
	zk_call_list(p, T_CHECK_A, path, false);
	p->ds.checked++;		/* one listing only */
}

/* Answers of the kinds check. */
static void
check_step(ZkPart *p, const ZkResult *r, bool (*counts) (ZkForm),
		   const char *other)
{
	ZkNodeRef  *nodes;

	if (r == NULL || zk_part_dropping(p))
		return;
	if (r->rc == ZOK && zk_list_participants(r, counts, &nodes) > 0)
	{
		zk_part_fail(p, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					 "The name is in use as a %s.", other);
		return;
	}
	if (r->rc != ZOK && r->rc != ZNONODE)
		return;					/* not checked: begin() runs again */
	if (++p->ds.checked == 2)
		zk_part_checked(p);
}

static void
lock_step(ZkPart *p, const ZkResult *r)
{
	check_step(p, r, semaphore_counts, "semaphore");
}

static void
entry_step(ZkPart *p, const ZkResult *r)
{
	check_step(p, r, lock_counts, "lock");
}

/*
 * The lock family's drivers differ only in kind, node form and sharing.
 * Exclusive kinds hand the lock on within the instance (local hand-off,
 * worker/engine/handoff.c); readers do not: each has its own node, as in
 * Curator, so that a reader arriving after a waiting writer queues behind
 * it.  Every holder watches its node's data for Curator's revocation
 * message (Curator's InterProcessMutex and the two sides of its read-write
 * lock, which are mutexes too, are revocable; see recipes/revoke.c).
 */
#define LOCK_FAMILY_DRIVER(k, f, sh, dec) \
{ \
	.kind = (k), \
	.form = (f), \
	.cohort = !(sh), \
	.step = lock_step, \
	.seq = { \
		.shared = (sh), \
		.counts = lock_counts, \
		.decide = (dec), \
		.revocable = true, \
		.blocks = lock_blocks, \
		.begin = lock_begin, \
		.precheck = lock_precheck, \
	}, \
}

const ZkDriver zk_lock_driver =
LOCK_FAMILY_DRIVER(ZK_KIND_LOCK, ZK_FORM_LOCK, false, exclusive_decide);
const ZkDriver zk_write_driver =
LOCK_FAMILY_DRIVER(ZK_KIND_WRITE, ZK_FORM_WRITE, false, exclusive_decide);
const ZkDriver zk_read_driver =
LOCK_FAMILY_DRIVER(ZK_KIND_READ, ZK_FORM_READ, true, shared_decide);

const ZkDriver zk_semaphore_entry_driver = {
	.kind = ZK_KIND_SEMAPHORE_ENTRY,
	.form = ZK_FORM_LOCK,
	.cohort = true,
	.step = entry_step,
	.seq = {
		.counts = entry_counts,
		.decide = exclusive_decide,
		.blocks = lock_blocks,
		.begin = entry_begin,
	},
};

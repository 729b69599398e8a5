/*-------------------------------------------------------------------------
 *
 * engine.c
 *	  The engine: the instance's nodes in ZooKeeper, the calls that make
 *	  them, the watches that wait on others, and the hand-off of a lock
 *	  between the backends of one instance.
 *
 * A backend's request (a shared ZkEntry, see protocol.h) is served by a
 * part (ZkPart, engine.h): one participation of the instance in a recipe,
 * with at most one node of ours.  Every recipe is a driver (src/recipes/):
 *
 *	- Sequential-node recipes (exclusive lock, read and write lock,
 *	  semaphore lease and entry mutex, leader latch) only say how their node
 *	  is named and, given the ordered participants, whether ours holds and
 *	  which node to watch otherwise.  The engine runs the protocol they
 *	  share, as Curator's LockInternals does: create a protected
 *	  ephemeral-sequential node, list the parent (both sent back to back: a
 *	  session's requests run in order, so the listing includes the node, one
 *	  round trip), order the participants (nodename.c), decide, watch the
 *	  node named (a getData watch, never exists), look again when it fires.
 *	- Other recipes (barriers, double barrier, job claims, revocation,
 *	  listings) drive their part with the engine's calls from step().
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
 * ZooKeeper callbacks never throw and never touch shared memory: they only
 * copy what they got into the worker's turn memory (allocations that
 * return NULL instead of failing) and queue it.  zk_engine_run(), called by
 * the worker loop after zookeeper_process() returned, acts on it.  Every
 * call carries the part's generation, so answers about a part that has
 * started over since (a lost session) are ignored.
 *
 * Watches are kept in a registry by path: one client-side watcher per path
 * (the same function, no context), so repeated waits never pile up
 * watchers; a watch no part needs any more is removed from the server.
 *
 * The reconciler.  A create whose reply was lost is found again by its
 * protected prefix (after a sync, so the server we ask has seen every
 * write the leader committed).  What could still slip through is a node of
 * our own session that no part claims: every few seconds the parents the
 * instance used lately are listed, and a node whose name carries our
 * session id (nodename.c) and that no part claims is deleted once its
 * ephemeralOwner confirms it is ours.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/xlog.h"
#include "common/pg_prng.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "engine.h"
#include "session.h"

/* fencing token = czxid << TOKEN_SHIFT | grants before it on that node */
#define TOKEN_SHIFT			10
#define MAX_NODE_GRANTS		((1 << TOKEN_SHIFT) - 1)

/* Give up re-creating a reaped parent after this many tries in a row. */
#define MAX_PARENT_TRIES	10

/* the reconciler: how often, how many parents a round, for how long */
#define RECONCILE_INTERVAL_MS	5000
#define RECONCILE_BATCH			100
#define PARENT_FORGET_MS		60000
#define MAX_PARENTS				10000

/* engine tags (drivers use positive ones) */
#define T_PARENT	(-1)		/* create of a parent */
#define T_CREATE	(-2)		/* create of our sequential node */
#define T_LIST		(-3)		/* listing of our parent */
#define T_PRED		(-4)		/* getData watch on the node we wait for */
#define T_DELETE	(-5)		/* delete of our node */
#define T_STAT		(-6)		/* exists of our node found by its prefix */
#define T_SYNC		(-7)		/* sync before looking for our prefix */
#define T_OWNDATA	(-8)		/* getData watch on our own node (revocation) */
#define T_RECONCILE (-9)		/* reconciler: listing */
#define T_ORPHAN	(-10)		/* reconciler: exists of a suspect */
#define T_ORPHAN_DEL (-11)		/* reconciler: delete of an orphan */
#define T_UNWATCH	(-12)		/* removal of a watch */

/* The worker's view of one shared entry. */
typedef struct ZkOp
{
	uint32		generation;		/* of the entry this belongs to */
	ZkPart	   *part;			/* serving it, or NULL */
	dlist_node	link;			/* in part's holders or waiters */
	bool		holder;
	bool		queued_local;	/* shown as queued behind its part's node */
} ZkOp;

/* A call sent and not yet processed. */
typedef struct ZkCall
{
	dlist_node	link;			/* on the completed list once answered */
	ZkPart	   *part;
	uint32		gen;			/* the part's generation when sent */
	ZkResult	r;
	char	   *path;			/* what was asked (turn memory not needed) */
	bool		watched;		/* asks the server for a watch */
	bool		watch_set;		/* ... and the server set it */
	bool		own;			/* the data watch on our own node */
	uint32		watch_epoch;	/* watched: watch_epoch when sent */
	TimestampTz sent_at;		/* a listing: when it was sent */
} ZkCall;

/* A watch that fired. */
typedef struct ZkFired
{
	dlist_node	link;
	bool		data;			/* spends the path's data watch */
	bool		children;		/* spends its children watch */
	char		path[FLEXIBLE_ARRAY_MEMBER];
} ZkFired;

/* Registry of watches by path. */
typedef struct ZkWatchKey
{
	bool		children;
	char		path[ZK_PATH_MAX];
} ZkWatchKey;

typedef struct ZkWatch
{
	ZkWatchKey	key;
	dlist_head	parts;			/* parts relying on it (ZkPart.watch_link) */
	dlist_head	owners;			/* parts watching their own node's data
								 * (ZkPart.own_link) */
} ZkWatch;

/* Calls in flight that set a watch, by path (see remove_watch). */
typedef struct ZkWatchCalls
{
	ZkWatchKey	key;
	int			n;
} ZkWatchCalls;

/* Parents: known to exist (a hint), and when we last used them. */
typedef struct ZkParent
{
	char		path[ZK_PATH_MAX];	/* key */
	bool		known;			/* created or seen to exist */
	TimestampTz used;			/* a node of ours was there */
	bool		suspect;		/* a create's outcome there was unknown */
} ZkParent;

/* The open (accepting) part of a cohort recipe, by kind and name. */
typedef struct ZkOpenKey
{
	ZkKind		kind;
	char		name[ZK_NAME_MAX + 1];
} ZkOpenKey;

typedef struct ZkOpen
{
	ZkOpenKey	key;
	ZkPart	   *part;
} ZkOpen;

MemoryContext zk_turn_context = NULL;
static MemoryContext engine_context = NULL;

static ZkOp *ops;
static dlist_head parts = DLIST_STATIC_INIT(parts);
static dlist_head completed = DLIST_STATIC_INIT(completed);
static dlist_head fired = DLIST_STATIC_INIT(fired);
static HTAB *watches;
static HTAB *watch_calls;
static uint32 watch_epoch = 0;	/* bumped when the session's watches die */
static HTAB *parents;
static HTAB *open_parts;
static ZkPart *reconciler;
static TimestampTz next_reconcile = 0;
static HASH_SEQ_STATUS reconcile_scan;
static bool reconcile_scanning = false;
static int	nparts = 0;
static TimestampTz answered_list_sent_at = 0;	/* of the listing being
												 * processed */

static const ZkDriver *const drivers[ZK_NUM_KINDS] = {
	[ZK_KIND_LOCK] = &zk_lock_driver,
	[ZK_KIND_READ] = &zk_read_driver,
	[ZK_KIND_WRITE] = &zk_write_driver,
	[ZK_KIND_SEMAPHORE] = &zk_semaphore_driver,
	[ZK_KIND_SEMAPHORE_ENTRY] = &zk_semaphore_entry_driver,
	[ZK_KIND_LATCH] = &zk_latch_driver,
	[ZK_KIND_JOB_CLAIM] = &zk_claim_driver,
	[ZK_KIND_LIST] = &zk_list_driver,
	[ZK_KIND_BARRIER_SET] = &zk_barrier_set_driver,
	[ZK_KIND_BARRIER_REMOVE] = &zk_barrier_remove_driver,
	[ZK_KIND_BARRIER_WAIT] = &zk_barrier_wait_driver,
	[ZK_KIND_DOUBLE_BARRIER] = &zk_double_barrier_driver,
	[ZK_KIND_REVOKE] = &zk_revoke_driver,
};

/* Call a hook (init, reload, run, exit) of every driver that has it. */
#define DRIVER_HOOKS(hook) \
	do { \
		for (int k_ = 0; k_ < ZK_NUM_KINDS; k_++) \
			if (drivers[k_] && drivers[k_]->hook) \
				drivers[k_]->hook(); \
	} while (0)

static void advance(ZkPart *p);

/*
 * What a kind's driver appends to <root>/<name> for the parent of its
 * node, for views (any process may ask).
 */
const char *
zk_driver_suffix(ZkKind kind)
{
	return drivers[kind] ? drivers[kind]->suffix : "";
}

static void seq_evaluate(ZkPart *p, const ZkResult *r);
static void restart_instance_part(ZkPart *p, const char *why);
static void cohort_update(ZkPart *p);
static void need_contention_watch(ZkPart *p);
static void unwatch(ZkPart *p);
static void unwatch_ex(ZkPart *p, bool tell_server);
static void free_part(ZkPart *p);

/* ---- small helpers ---- */

bool
zk_connected(void)
{
	return zk_session_connected();
}

int64
zk_session(void)
{
	return zk_session_id();
}

bool
zk_is_connection_loss(int rc)
{
	/*
	 * ZRUNTIMEINCONSISTENCY: the client failed the calls it had sent when
	 * a reply on a new connection did not match them (a send that failed
	 * closed the old one without failing them); the server may have done
	 * them.
	 */
	return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT ||
		rc == ZSESSIONMOVED || rc == ZRUNTIMEINCONSISTENCY;
}

/* The SQLSTATE for a request ZooKeeper refused with rc. */
int
zk_refusal_errcode(int rc)
{
	return rc == ZNOAUTH ? ERRCODE_INSUFFICIENT_PRIVILEGE :
		ERRCODE_EXTERNAL_ROUTINE_EXCEPTION;
}

/* Is a node (its Stat) an ephemeral node of our current session? */
bool
zk_is_ours(const struct Stat *stat)
{
	return stat->ephemeralOwner != 0 && stat->ephemeralOwner == zk_session();
}

/* The last component of a path. */
const char *
zk_node_of(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

static bool
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

/* ---- node data: who created a node ---- */

static void
json_string(StringInfo s, const char *v)
{
	appendStringInfoChar(s, '"');
	for (; *v; v++)
	{
		unsigned char c = *v;

		if (c == '"' || c == '\\')
			appendStringInfo(s, "\\%c", c);
		else if (c < 0x20)
			appendStringInfo(s, "\\u%04x", c);
		else
			appendStringInfoChar(s, c);
	}
	appendStringInfoChar(s, '"');
}

/*
 * The data of a node we create: a small JSON object naming the instance
 * (cluster_name, system identifier, host:port), and the backend (pid,
 * application_name) the node was created for, or the worker for the
 * instance's own nodes.  README documents it.
 */
char *
zk_node_data(ZkPart *p)
{
	StringInfoData s;
	static char host[256];		/* asked once: a system call per node */
	int			id = zk_part_entry(p);
	char		sysid[32];

	if (host[0] == '\0')
	{
		if (gethostname(host, sizeof(host)) != 0)
			strcpy(host, "?");
		host[sizeof(host) - 1] = '\0';
	}
	snprintf(sysid, sizeof(sysid), UINT64_FORMAT, GetSystemIdentifier());
	initStringInfo(&s);
	appendStringInfoString(&s, "{\"instance\":");
	json_string(&s, cluster_name && cluster_name[0] ? cluster_name : sysid);
	appendStringInfoString(&s, ",\"system\":");
	json_string(&s, sysid);
	appendStringInfo(&s, ",\"host\":");
	json_string(&s, psprintf("%s:%d", host, PostPortNumber));
	if (id >= 0)
	{
		appendStringInfo(&s, ",\"pid\":%d,\"app\":", ZK_ENTRY(id)->owner_pid);
		json_string(&s, ZK_ENTRY(id)->app);
	}
	else
		appendStringInfo(&s, ",\"pid\":%d,\"app\":\"zklock worker\"", MyProcPid);
	appendStringInfoChar(&s, '}');
	return s.data;
}

/* ---- parents: known ones, and the ones the reconciler looks at ---- */

static ZkParent *
parent_entry(const char *path, bool create)
{
	char		key[ZK_PATH_MAX];
	bool		found;
	ZkParent   *e;

	memset(key, 0, sizeof(key));
	strlcpy(key, path, sizeof(key));
	if (create && hash_get_num_entries(parents) >= MAX_PARENTS)
		return hash_search(parents, key, HASH_FIND, NULL);
	e = hash_search(parents, key, create ? HASH_ENTER : HASH_FIND, &found);
	if (e && create && !found)
	{
		e->known = false;
		e->used = 0;
		e->suspect = false;
	}
	return e;
}

static void
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

/* ---- calls ---- */

static ZkCall *
new_call(ZkPart *p, ZkCallType type, int tag, const char *path)
{
	ZkCall	   *c = MemoryContextAllocZero(engine_context, sizeof(ZkCall));

	c->part = p;
	c->gen = p->gen;
	c->r.type = type;
	c->r.tag = tag;
	c->path = MemoryContextStrdup(engine_context, path);
	c->r.path = c->path;
	return c;
}

/* Note the result of sending a call: counted in flight, or failed now. */
static void
sent(ZkCall *c, int rc)
{
	if (rc == ZOK)
	{
		c->part->inflight++;
		c->part->calls++;
		return;
	}

	/*
	 * Not sent: the handle is closing or unusable (the session code notices
	 * and the engine hears of it), or the request itself is bad.  Either
	 * way the answer is this rc, delivered like any other so that the part
	 * cannot wait for it forever.
	 */
	elog(DEBUG1, "zklock: ZooKeeper call not sent: %s", zerror(rc));
	c->r.rc = rc;
	c->part->inflight++;
	c->part->calls++;
	dlist_push_tail(&completed, &c->link);
}

/* Turn memory that cannot fail: NULL instead of an ERROR (callbacks). */
static void *
turn_alloc(Size size)
{
	return MemoryContextAllocExtended(zk_turn_context, size, MCXT_ALLOC_NO_OOM);
}

static char *
turn_strdup(const char *s)
{
	size_t		len = strlen(s) + 1;
	char	   *copy = turn_alloc(len);

	if (copy)
		memcpy(copy, s, len);
	return copy;
}

/* Completions: copy, queue, never throw. */
static void
done(ZkCall *c, int rc)
{
	if (c->r.rc == ZOK)
		c->r.rc = rc;
	dlist_push_tail(&completed, &c->link);
}

static void
string_stat_done(int rc, const char *value, const struct Stat *stat,
				 const void *data)
{
	ZkCall	   *c = (ZkCall *) data;

	if (rc == ZOK && value)
	{
		c->r.path = turn_strdup(value);
		if (c->r.path == NULL)
			rc = ZSYSTEMERROR;
	}
	if (rc == ZOK && stat)
	{
		c->r.stat = *stat;
		c->r.has_stat = true;
	}
	done(c, rc);
}

static void
string_done(int rc, const char *value, const void *data)
{
	done((ZkCall *) data, rc);
}

static void
strings_done(int rc, const struct String_vector *strings, const void *data)
{
	ZkCall	   *c = (ZkCall *) data;

	c->watch_set = c->watched && rc == ZOK;
	if (rc == ZOK && strings && strings->count > 0)
	{
		c->r.children = turn_alloc(sizeof(char *) * strings->count);
		if (c->r.children == NULL)
			rc = ZSYSTEMERROR;
		for (int i = 0; rc == ZOK && i < strings->count; i++)
			if ((c->r.children[i] = turn_strdup(strings->data[i])) == NULL)
				rc = ZSYSTEMERROR;
		if (rc == ZOK)
			c->r.nchildren = strings->count;
	}
	done(c, rc);
}

static void
data_done(int rc, const char *value, int len, const struct Stat *stat,
		  const void *data)
{
	ZkCall	   *c = (ZkCall *) data;

	c->watch_set = c->watched && rc == ZOK;
	if (rc == ZOK && value && len >= 0)
	{
		char	   *copy = turn_alloc(len + 1);

		if (copy == NULL)
			rc = ZSYSTEMERROR;
		else
		{
			memcpy(copy, value, len);
			copy[len] = '\0';
			c->r.data = copy;
			c->r.datalen = len;
		}
	}
	if (rc == ZOK && stat)
	{
		c->r.stat = *stat;
		c->r.has_stat = true;
	}
	done(c, rc);
}

static void
stat_done(int rc, const struct Stat *stat, const void *data)
{
	ZkCall	   *c = (ZkCall *) data;

	/* exists sets its watch on a node that does not exist too */
	c->watch_set = c->watched && (rc == ZOK || rc == ZNONODE);
	if (rc == ZOK && stat)
	{
		c->r.stat = *stat;
		c->r.has_stat = true;
	}
	done(c, rc);
}

static void
void_done(int rc, const void *data)
{
	done((ZkCall *) data, rc);
}

/* The watcher of every engine watch: note the path, act later. */
static void
engine_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	ZkFired    *f;
	size_t		len;

	if (type != ZOO_CREATED_EVENT && type != ZOO_DELETED_EVENT &&
		type != ZOO_CHANGED_EVENT && type != ZOO_CHILD_EVENT)
		return;
	len = strlen(path);
	f = turn_alloc(offsetof(ZkFired, path) + len + 1);
	if (f == NULL)
		return;					/* the periodic re-listing recovers */
	/* a node's deletion fires both kinds of watch on it */
	f->data = (type != ZOO_CHILD_EVENT);
	f->children = (type == ZOO_CHILD_EVENT || type == ZOO_DELETED_EVENT);
	memcpy(f->path, path, len + 1);
	dlist_push_tail(&fired, &f->link);
}

/* The registry's entry of a watch, made if new. */
static ZkWatch *
watch_entry(const ZkWatchKey *key)
{
	bool		found;
	ZkWatch    *w = hash_search(watches, key, HASH_ENTER, &found);

	if (!found)
	{
		dlist_init(&w->parts);
		dlist_init(&w->owners);
		pg_atomic_fetch_add_u32(&zk_shared->n_watches, 1);
	}
	return w;
}

/* Forget a registry entry no part needs any more; true if it went. */
static bool
watch_unused(const ZkWatchKey *key)
{
	ZkWatch    *w = hash_search(watches, key, HASH_FIND, NULL);

	if (w == NULL || !dlist_is_empty(&w->parts) || !dlist_is_empty(&w->owners))
		return false;
	hash_search(watches, key, HASH_REMOVE, NULL);
	pg_atomic_fetch_sub_u32(&zk_shared->n_watches, 1);
	return true;
}

/*
 * Count a call that sets a watch on path as in flight (delta 1), or as
 * answered (delta -1; only calls of the current watch epoch).  Returns how
 * many such calls are in flight now.
 */
static int
count_watch_call(const char *path, bool children, int delta)
{
	ZkWatchKey	key;
	ZkWatchCalls *wc;
	bool		found;

	memset(&key, 0, sizeof(key));
	key.children = children;
	strlcpy(key.path, path, sizeof(key.path));
	wc = hash_search(watch_calls, &key, delta > 0 ? HASH_ENTER : HASH_FIND,
					 &found);
	if (wc == NULL)
		return 0;
	if (!found)
		wc->n = 0;
	wc->n += delta;
	if (wc->n > 0)
		return wc->n;
	hash_search(watch_calls, &key, HASH_REMOVE, NULL);
	return 0;
}

/* Note a call sent with a watch. */
static void
watch_call_sent(ZkCall *c, bool children)
{
	c->watched = true;
	c->watch_epoch = watch_epoch;
	(void) count_watch_call(c->path, children, 1);
}

/* Register the part's interest in a watch on path (one per part). */
static void
watch(ZkPart *p, const char *path, bool children)
{
	ZkWatchKey	key;
	ZkWatch    *w;

	if (p->watch_path && p->watch_children == children &&
		strcmp(p->watch_path, path) == 0)
		return;
	unwatch(p);
	p->watch_fired = false;
	memset(&key, 0, sizeof(key));
	key.children = children;
	strlcpy(key.path, path, sizeof(key.path));
	w = watch_entry(&key);
	dlist_push_tail(&w->parts, &p->watch_link);
	p->watch_path = MemoryContextStrdup(engine_context, path);
	p->watch_children = children;
}

/*
 * Remove our watch on key's path from the client and the server: all
 * watches of the path, which are ours alone (one watcher per path).  Only
 * that removal reaches the server; removing one watcher of a path only
 * checks the server has the watch and leaves it there until it fires.
 *
 * Not while a call that sets a watch on the path is still out: the server
 * would apply the removal after that call and take away the watch it set,
 * on which its part may rely (a part whose interest a fire took while its
 * listing was out takes on the watch of that listing when it is
 * answered).  The answer of the last such call removes the watch then, if
 * nobody wants it (process_call).
 */
static void
remove_watch(const ZkWatchKey *key)
{
	ZkCall	   *c;

	if (!zk_connected())
		return;
	if (hash_search(watch_calls, key, HASH_FIND, NULL) != NULL)
		return;
	c = new_call(reconciler, ZKC_DELETE, T_UNWATCH, key->path);
	sent(c, zoo_aremove_all_watches(zk_zh, key->path,
									key->children ? ZWATCHTYPE_CHILD : ZWATCHTYPE_DATA,
									0,
	/* the header's type is wrong: it takes the function itself */
									(void_completion_t *) void_done, c));
}

/*
 * The part no longer needs its watch.  When no part does, it is removed
 * from the client and the server, so nothing is left to fire for nobody.
 */
static void
unwatch(ZkPart *p)
{
	unwatch_ex(p, true);
}

/*
 * unwatch(), telling the server only when tell_server: a caller that is
 * about to delete a child of the watched parent lets that delete fire the
 * watch instead of removing it with a request of its own.
 */
static void
unwatch_ex(ZkPart *p, bool tell_server)
{
	ZkWatchKey	key;

	p->watch_fired = false;
	if (p->watch_path == NULL)
		return;
	memset(&key, 0, sizeof(key));
	key.children = p->watch_children;
	strlcpy(key.path, p->watch_path, sizeof(key.path));
	dlist_delete(&p->watch_link);
	pfree(p->watch_path);
	p->watch_path = NULL;
	if (watch_unused(&key) && tell_server)
		remove_watch(&key);
}

/*
 * The data watch on our own node (drivers with "revocable"), beside the
 * part's one watch on what it waits for: Curator's revocation writes
 * "__REVOKE__" into a holder's node, and the node's deletion by someone
 * else shows up here too.  The watch is never removed from the server by
 * request: it goes when it fires, when our node is deleted (which fires
 * it) or with the session.
 */
static void
own_watch(ZkPart *p)
{
	ZkWatchKey	key;
	ZkWatch    *w;
	ZkCall	   *c;

	if (p->own_watch || !p->driver->revocable || !p->holds || p->dead ||
		p->dropping || p->phase != NODE_EXISTS || !zk_connected())
		return;
	memset(&key, 0, sizeof(key));
	snprintf(key.path, sizeof(key.path), "%s/%s", p->parent, p->node);
	w = watch_entry(&key);
	dlist_push_tail(&w->owners, &p->own_link);
	p->own_watch = true;
	c = new_call(p, ZKC_GET, T_OWNDATA, key.path);
	watch_call_sent(c, false);
	c->own = true;
	sent(c, zoo_awget(zk_zh, key.path, engine_watcher, NULL, data_done, c));
}

/* The part no longer relies on the data watch on its own node. */
static void
own_unwatch(ZkPart *p)
{
	ZkWatchKey	key;

	if (!p->own_watch)
		return;
	p->own_watch = false;
	dlist_delete(&p->own_link);
	memset(&key, 0, sizeof(key));
	snprintf(key.path, sizeof(key.path), "%s/%s", p->parent, p->node);
	(void) watch_unused(&key);
}

void
zk_call_create(ZkPart *p, int tag, const char *path, const char *data,
			   int mode, bool parents_too)
{
	ZkCall	   *c;

	if (parents_too)
	{
		/* every missing ancestor, as CONTAINER nodes; FIFO keeps order */
		char		anc[ZK_PATH_MAX];
		char	   *slash;
		int			start = 0;

		strlcpy(anc, path, sizeof(anc));
		*strrchr(anc, '/') = '\0';
		/* find the deepest ancestor known to exist */
		for (;;)
		{
			ZkParent   *e = parent_entry(anc, false);

			if ((e && e->known) || (slash = strrchr(anc, '/')) == anc)
				break;
			*slash = '\0';
		}
		if (!parent_entry(anc, false) || !parent_entry(anc, false)->known)
			start = 0;
		else
			start = strlen(anc);
		strlcpy(anc, path, sizeof(anc));
		for (char *q = strchr(anc + start + 1, '/'); q; q = strchr(q + 1, '/'))
		{
			ZkCall	   *pc;

			*q = '\0';
			pc = new_call(p, ZKC_CREATE, T_PARENT, anc);
			sent(pc, zoo_acreate2(zk_zh, anc, NULL, -1, zk_session_acl(),
								  ZOO_CONTAINER, string_stat_done, pc));
			*q = '/';
		}
	}
	c = new_call(p, ZKC_CREATE, tag, path);
	sent(c, zoo_acreate2(zk_zh, path, data, data ? strlen(data) : -1,
						 zk_session_acl(), mode, string_stat_done, c));
}

void
zk_call_list(ZkPart *p, int tag, const char *path, bool with_watch)
{
	ZkCall	   *c = new_call(p, ZKC_LIST, tag, path);

	c->sent_at = GetCurrentTimestamp();
	if (with_watch)
	{
		watch(p, path, true);
		watch_call_sent(c, true);
		sent(c, zoo_awget_children(zk_zh, path, engine_watcher, NULL,
								   strings_done, c));
	}
	else
		sent(c, zoo_aget_children(zk_zh, path, 0, strings_done, c));
}

void
zk_call_get(ZkPart *p, int tag, const char *path, bool with_watch)
{
	ZkCall	   *c = new_call(p, ZKC_GET, tag, path);

	if (with_watch)
	{
		watch(p, path, false);
		watch_call_sent(c, false);
		sent(c, zoo_awget(zk_zh, path, engine_watcher, NULL, data_done, c));
	}
	else
		sent(c, zoo_aget(zk_zh, path, 0, data_done, c));
}

void
zk_call_exists(ZkPart *p, int tag, const char *path)
{
	ZkCall	   *c = new_call(p, ZKC_EXISTS, tag, path);

	sent(c, zoo_aexists(zk_zh, path, 0, stat_done, c));
}

/*
 * exists with a data watch: it fires when the node is created, changed or
 * deleted (set whether the node exists or not).
 */
void
zk_call_exists_watch(ZkPart *p, int tag, const char *path)
{
	ZkCall	   *c = new_call(p, ZKC_EXISTS, tag, path);

	watch(p, path, false);
	watch_call_sent(c, false);
	sent(c, zoo_awexists(zk_zh, path, engine_watcher, NULL, stat_done, c));
}

void
zk_call_delete(ZkPart *p, int tag, const char *path, int version)
{
	ZkCall	   *c = new_call(p, ZKC_DELETE, tag, path);

	sent(c, zoo_adelete(zk_zh, path, version, void_done, c));
}

/* setData of path (version -1: whatever its version); the answer has the
 * node's new Stat */
void
zk_call_set(ZkPart *p, int tag, const char *path, const char *data,
			int version)
{
	ZkCall	   *c = new_call(p, ZKC_SET, tag, path);

	sent(c, zoo_aset(zk_zh, path, data, data ? strlen(data) : -1, version,
					 stat_done, c));
}

void
zk_call_sync(ZkPart *p, int tag, const char *path)
{
	ZkCall	   *c = new_call(p, ZKC_SYNC, tag, path);

	sent(c, zoo_async(zk_zh, path, string_done, c));
}

/*
 * Turn our ephemeral node at path (of data version "version") into a
 * persistent one with the given data, atomically: a multi of its delete and
 * a create of the same path.  Either both happen or neither.
 */
void
zk_call_finalize(ZkPart *p, int tag, const char *path, int version,
				 const char *data)
{
	ZkCall	   *c = new_call(p, ZKC_MULTI, tag, path);
	zoo_op_t   *mops = MemoryContextAllocZero(engine_context, sizeof(zoo_op_t) * 2);
	zoo_op_result_t *results = MemoryContextAllocZero(engine_context,
													  sizeof(zoo_op_result_t) * 2);
	char	   *dup = MemoryContextStrdup(engine_context, data);

	/* the ops and results must live until the completion: engine memory,
	 * freed with the call */
	zoo_delete_op_init(&mops[0], c->path, version);
	zoo_create_op_init(&mops[1], c->path, dup, strlen(dup), zk_session_acl(),
					   ZOO_PERSISTENT, NULL, 0);
	sent(c, zoo_amulti(zk_zh, 2, mops, results, void_done, c));
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

static void
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

static void
attach(ZkPart *p, int id)
{
	ZkOp	   *op = &ops[id];

	op->part = p;
	op->holder = false;
	op->queued_local = false;
	dlist_push_tail(&p->waiters, &op->link);
}

/*
 * Did the request of op come after the part saw a contender elsewhere?
 * Granting it locally then lets it overtake that contender.  (The request
 * time is fixed while the entry is in use.)
 */
static bool
overtakes(ZkPart *p, ZkOp *op)
{
	return p->contended_since != 0 &&
		ZK_ENTRY(op - ops)->requested_at >= p->contended_since;
}

static void
grant(ZkPart *p, ZkOp *op)
{
	int			id = op - ops;
	int64		token = p->czxid << TOKEN_SHIFT;

	if (!p->driver->shared)
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
	zk_set_grant(id, token, p->session_id, p->node);
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
		   (p->driver->shared || p->nholders == 0))
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
		if (held)
		{
			ereport(WARNING,
					(errmsg("zklock %s \"%s\" held by process %d was lost",
							zk_kind_name(p->driver->kind), p->name,
							ZK_ENTRY(id)->owner_pid),
					 errdetail_internal("%s", msg)));
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

/* The part's waiting no-wait entries find it taken. */
void
zk_part_would_block(ZkPart *p)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &p->waiters)
	{
		ZkOp	   *op = dlist_container(ZkOp, link, it.cur);
		int			id = op - ops;

		if (ZK_ENTRY(id)->flags & ZKR_NOWAIT)
		{
			detach(id);
			zk_set_outcome(id, ZKE_WOULD_BLOCK, 0, NULL);
		}
	}
}

/* Show which node the part's waiting entries wait for. */
void
zk_part_wait_on(ZkPart *p, const char *node)
{
	dlist_iter	it;

	dlist_foreach(it, &p->waiters)
		zk_set_node(dlist_container(ZkOp, link, it.cur) - ops, p->node, node);
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

static ZkPart *
new_part(const ZkDriver *d, const char *name)
{
	ZkPart	   *p = MemoryContextAllocZero(engine_context, sizeof(ZkPart));
	char		path[ZK_PATH_MAX];

	p->driver = d;
	p->cohort = d->cohort && zklock_local_handoff;
	p->name = MemoryContextStrdup(engine_context, name);
	zk_path(path, sizeof(path), name, d->suffix);
	p->parent = MemoryContextStrdup(engine_context, path);
	p->checked = (d->begin == NULL);
	p->group = -1;
	dlist_init(&p->holders);
	dlist_init(&p->waiters);
	dlist_push_tail(&parts, &p->link);
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

static void
restart_instance_part(ZkPart *p, const char *why)
{
	own_unwatch(p);
	if (p->phase == NODE_EXISTS || p->phase == NODE_DELETING)
		pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
	p->phase = NODE_NONE;
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

static ZkOpen *
open_entry(ZkKind kind, const char *name, HASHACTION action)
{
	ZkOpenKey	key;

	memset(&key, 0, sizeof(key));
	key.kind = kind;
	strlcpy(key.name, name, sizeof(key.name));
	return hash_search(open_parts, &key, action, NULL);
}

/* The part no longer accepts new entries of its cohort. */
static void
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
	own_unwatch(p);
	p->dead = true;
	if (p->calls > 0)
		return;
	if (p->phase == NODE_EXISTS || p->phase == NODE_DELETING)
		pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
	dlist_delete(&p->link);
	nparts--;
	if (p->rows)
	{
		pfree(p->rows->data);
		pfree(p->rows);
	}
	if (p->extra)
		pfree(p->extra);
	pfree(p->name);
	pfree(p->parent);
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
	p->dropping = true;
	p->retain_until = 0;
	/* a watch on our node's parent: the delete of our node fires it */
	unwatch_ex(p, !(p->phase == NODE_EXISTS && !has_entries(p) &&
					p->watch_path && p->watch_children &&
					strcmp(p->watch_path, p->parent) == 0 &&
					zk_connected()));
	advance(p);
}

/* ---- the sequential-node protocol ---- */

static pg_prng_state prefix_prng;
static bool prefix_prng_seeded = false;

static void
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
	zk_make_prefix(p->prefix, sizeof(p->prefix), rnd, (uint64) zk_session());
	snprintf(path, sizeof(path), "%s/%s%s", p->parent, p->prefix,
			 zk_form_base(d->form));
	p->phase = NODE_CREATING;
	p->need_eval = true;
	zk_call_create(p, T_CREATE, path, data,
				   ZOO_EPHEMERAL_SEQUENTIAL, e == NULL || !e->known);
	/* the driver's check follows every create of our node */
	p->checked = (d->begin == NULL);
	if (d->begin && d->precheck == NULL)
		d->begin(p);
	zk_call_list(p, T_LIST, p->parent, d->watch_children);
	pfree(data);
}

/* List the parent again, to decide (with a watch where the recipe needs). */
static void
seq_list(ZkPart *p)
{
	bool		with_watch = p->driver->watch_children || p->cohort;

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

/*
 * A holding cohort part needs to see contenders elsewhere only while it
 * has local requests to hand the lock to, or keeps its node for them
 * (retention): then it lists its parent again with a child watch, unless
 * it has one.  Otherwise its node goes at release anyway, and an
 * uncontended acquire costs no watch.
 */
static void
need_contention_watch(ZkPart *p)
{
	if (p->watch_path == NULL && p->holds && !p->closed && !p->dropping &&
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
static void
note_contenders(ZkPart *p, ZkNodeRef *nodes, int n, int self)
{
	const ZkDriver *d = p->driver;

	if (p->contended_since != 0)
		return;
	for (int i = self + 1; i < n && d->blocks; i++)
		if (d->blocks(d->form, nodes[i].parsed.form))
		{
			p->contended_since = p->clear_at != 0 ? p->clear_at :
				GetCurrentTimestamp();
			p->local_grants = 0;
			return;
		}
	p->clear_at = answered_list_sent_at;
}

/* A listing of the parent arrived while our node exists: decide. */
static void
seq_evaluate(ZkPart *p, const ZkResult *r)
{
	const ZkDriver *d = p->driver;
	ZkNodeRef  *nodes;
	int			n = zk_list_participants(r, d->counts, &nodes);
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
		p->phase = NODE_NONE;
		pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
		zk_part_fail(p, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					 "Its node \"%s\" was deleted by another ZooKeeper client.",
					 p->node);
		return;
	}

	if (p->holds)
	{
		/* is someone of another instance or client waiting for us? */
		note_contenders(p, nodes, n, self);
		if (p->group < 0)
			cohort_update(p);
		return;
	}

	w = d->decide(p, nodes, n, self);
	p->evaluated = true;
	if (w == ZK_HOLDS)
	{
		p->holds = true;
		if (p->cohort)
			note_contenders(p, nodes, n, self);
		else
			unwatch(p);
		own_watch(p);
		zk_part_grant(p);
		if (p->cohort && !p->dead)
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
 * the transaction (holdings.c).  Nothing is deleted here: revocation is
 * cooperative.
 */
static void
revoke_requested(ZkPart *p)
{
	dlist_iter	it;

	p->revoke_requested = true;
	close_part(p);				/* no more local hand-off: let it go */
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
static void
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
				p->phase = NODE_UNKNOWN;
			else if (r->rc != ZCLOSING)
			{
				p->phase = NODE_NONE;
				zk_part_fail(p, zk_refusal_errcode(r->rc),
							 "ZooKeeper refused to create its node: %s.",
							 zerror(r->rc));
			}
			break;
		case T_LIST:
			if (r->rc == ZOK && p->phase == NODE_UNKNOWN)
			{
				/* after a lost create reply: is our node there? */
				size_t		plen = strlen(p->prefix);

				p->phase = NODE_NONE;
				for (int i = 0; i < r->nchildren; i++)
					if (strncmp(r->children[i], p->prefix, plen) == 0)
					{
						char		path[ZK_PATH_MAX];

						strlcpy(p->node, r->children[i], sizeof(p->node));
						snprintf(path, sizeof(path), "%s/%s", p->parent, p->node);
						zk_call_exists(p, T_STAT, path);
						p->phase = NODE_CREATING;	/* until its stat comes */
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
				if (!p->checked && p->driver->precheck && p->inflight == 0)
				{
					/* no begin() in flight: does this listing settle it? */
					if (p->driver->precheck(p, r))
						p->checked = true;
					else
						p->driver->begin(p);
				}
				if (p->checked)
					seq_evaluate(p, r);
				else
					p->need_eval = true;	/* after the driver's check */
			}
			else if (r->rc == ZNONODE && p->phase == NODE_UNKNOWN)
				p->phase = NODE_NONE;	/* parent gone, so our node never was */
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
				p->phase = NODE_NONE;	/* not ours after all: start over */
			else
				p->phase = NODE_UNKNOWN;
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
			if (r->rc == ZOK && !p->revoke_requested && r->data &&
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
		case T_DELETE:
			if (r->rc == ZOK || r->rc == ZNONODE)
			{
				pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
				p->phase = NODE_NONE;
			}
			else if (!zk_is_connection_loss(r->rc) && r->rc != ZCLOSING)
			{
				/* nothing more we can do; say so, for the DBA */
				ereport(WARNING,
						(errmsg("zklock could not delete node \"%s/%s\": %s",
								p->parent, p->node, zerror(r->rc))));
				pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
				p->phase = NODE_NONE;
			}
			else
				p->phase = NODE_EXISTS; /* sent again after reconnecting */
			break;
	}
}

/*
 * Send whatever a part needs next.  Does nothing while a call of the part
 * is in flight (its answer advances it again) or while there is no
 * connected session (reconnecting advances every part).
 */
static void
advance(ZkPart *p)
{
	const ZkDriver *d = p->driver;

	if (p->dead)
	{
		free_part(p);
		return;
	}

	/*
	 * A node no longer needed is deleted at once, even while other calls of
	 * the part (a listing, a check) are in flight: their answers no longer
	 * matter, and a later request of the instance, or a contender elsewhere,
	 * must not find the node in its way.
	 */
	if (p->dropping && !has_entries(p) && p->phase == NODE_EXISTS &&
		zk_connected())
	{
		char		path[ZK_PATH_MAX];

		snprintf(path, sizeof(path), "%s/%s", p->parent, p->node);
		p->phase = NODE_DELETING;
		zk_call_delete(p, T_DELETE, path, -1);
		return;
	}
	if (p->inflight > 0)
		return;

	if (p->dropping && !has_entries(p))
	{
		switch (p->phase)
		{
			case NODE_NONE:
				if (d->dropped && !p->last_calls && zk_connected())
				{
					p->last_calls = true;
					d->dropped(p);
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
				d->begin(p);	/* the driver's check, again */
			else if (p->need_eval)
				seq_list(p);
			break;
		case NODE_CREATING:
		case NODE_DELETING:
			break;
	}
}

/* ---- local hand-off ---- */

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
 * Grant what a holding cohort part can grant, in arrival order; close it
 * once it has handed the lock on for long enough; move the requests it can
 * no longer serve to a fresh part; keep or drop it once unused.
 */
static void
cohort_update(ZkPart *p)
{
	const ZkDriver *d = p->driver;

	while (!dlist_is_empty(&p->waiters) && p->holds && !p->closed)
	{
		ZkOp	   *op = dlist_container(ZkOp, link, dlist_head_node(&p->waiters));

		if (!d->shared && p->nholders > 0)
			break;
		if ((p->grants > 0 && handoff_exhausted(p, op)) ||
			p->grants >= MAX_NODE_GRANTS || p->revoke_requested)
		{
			close_part(p);
			break;
		}
		grant(p, op);
	}
	if (p->evaluated)
		zk_part_would_block(p);

	/*
	 * Waiters the part will grant queue behind its node: show it (zk_locks),
	 * and so they wait through a ZooKeeper outage like a waiter with a node
	 * of its own, instead of failing for want of a session.
	 */
	if (p->holds && !p->closed)
	{
		dlist_iter	it;

		dlist_foreach(it, &p->waiters)
		{
			ZkOp	   *op = dlist_container(ZkOp, link, it.cur);

			if (!op->queued_local)
			{
				zk_set_node(op - ops, p->node, p->node);
				op->queued_local = true;
			}
		}
	}

	if (p->closed && !dlist_is_empty(&p->waiters))
	{
		/* queue again behind whoever waits, with a fresh node */
		ZkPart	   *fresh = new_part(d, p->name);
		ZkOpen	   *o = open_entry(d->kind, p->name, HASH_ENTER);

		fresh->cohort = true;	/* whatever zklock.local_handoff says now */
		o->part = fresh;
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
		if (p->holds && !p->closed && p->contended_since == 0 &&
			zklock_retain_time > 0)
		{
			p->retain_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  zklock_retain_time);
			need_contention_watch(p);
		}
		else
			zk_part_drop(p);
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

		if (o)
			p = o->part;
		if (p && p->dropping && (p->phase == NODE_DELETING || p->last_calls))
			p = NULL;			/* too late to keep: its delete, or its last
								 * calls, are sent */
		if (p == NULL)
		{
			p = new_part(d, e->name);
			o = open_entry(d->kind, e->name, HASH_ENTER);
			o->part = p;
		}
		p->dropping = false;
		p->retain_until = 0;
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
	p->need_eval = true;
	attach(p, id);
	advance(p);
}

/*
 * An entry was queued: a new request, one given up, or an ask on a held
 * one.
 */
void
zk_engine_request(int id)
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
		Assert(op->part == NULL);
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
		if (ask == ZK_ASK_REOPEN && ask_state == ZK_ASK_PENDING &&
			p && p->driver->ask)
			p->driver->ask(p, id, ask);
		detach(id);
		zk_free_entry(id);
		if (p == NULL)
			return;
		if (p->cohort && p->holds)
			cohort_update(p);
		else if (!has_entries(p) && p->group < 0)
			zk_part_drop(p);
		return;
	}

	if (ask_state == ZK_ASK_PENDING && op->part && op->part->driver->ask)
		op->part->driver->ask(op->part, id, ask);
	else if (ask_state == ZK_ASK_PENDING)
		zk_set_ask_outcome(id, ZK_ASK_FAILED, ERRCODE_T_R_SERIALIZATION_FAILURE,
						   "Its ZooKeeper session ended.");
}

/* ---- the loop's work ---- */

/* Process one answered call. */
static void
process_call(ZkCall *c)
{
	ZkPart	   *p = c->part;

	/*
	 * A watch this call set.  If the part's interest in the path was taken
	 * by a watch that fired while this call was out (the fire came first,
	 * so the watch this call set is a new one), the part decides from this
	 * answer and relies on that new watch: take it on, beside any other
	 * part that has registered for the path since.  Otherwise, when the
	 * registry no longer has the path, nobody wants the watch: make sure it
	 * is removed (the part's unwatch() may have sent the removal already,
	 * which the server then applied after this call).
	 */
	if (c->watched && c->watch_epoch == watch_epoch)
		(void) count_watch_call(c->path, c->r.type == ZKC_LIST, -1);
	if (c->watch_set && !c->own && c->watch_epoch == watch_epoch)
	{
		ZkWatchKey	key;

		memset(&key, 0, sizeof(key));
		key.children = (c->r.type == ZKC_LIST);
		strlcpy(key.path, c->path, sizeof(key.path));
		if (c->gen == p->gen && !p->dead && !p->dropping &&
			p->watch_path == NULL && p->watch_fired)
			watch(p, c->path, key.children);
		else if (hash_search(watches, &key, HASH_FIND, NULL) == NULL)
			remove_watch(&key);
	}

	/* p->calls still counts this call: nothing frees p meanwhile */
	if (c->gen == p->gen && !p->dead)
	{
		p->inflight--;
		answered_list_sent_at = c->sent_at;
		if (c->r.rc == ZSYSTEMERROR && c->r.type != ZKC_DELETE)
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
	pfree(c->path);
	pfree(c);
}

/* A watch fired: every part that relied on it looks again. */
static void
process_fired(ZkFired *f)
{
	dlist_head	woken;
	dlist_head	owners;

	dlist_init(&woken);
	dlist_init(&owners);
	for (int children = 0; children <= 1; children++)
	{
		ZkWatchKey	key;
		ZkWatch    *w;

		if (!(children ? f->children : f->data))
			continue;
		memset(&key, 0, sizeof(key));
		key.children = children;
		strlcpy(key.path, f->path, sizeof(key.path));
		w = hash_search(watches, &key, HASH_FIND, NULL);
		if (w == NULL)
			continue;
		/* the watch is spent: take its parts, then let them set new ones */
		while (!dlist_is_empty(&w->parts))
			dlist_push_tail(&woken, dlist_pop_head_node(&w->parts));
		while (!dlist_is_empty(&w->owners))
			dlist_push_tail(&owners, dlist_pop_head_node(&w->owners));
		hash_search(watches, &key, HASH_REMOVE, NULL);
		pg_atomic_fetch_sub_u32(&zk_shared->n_watches, 1);
	}

	/*
	 * Our own node changed or went: the driver hears of it (the leader
	 * latch stops claiming and looks again); a holder reads it again, with
	 * a new watch (own_watch, from advance).
	 */
	while (!dlist_is_empty(&owners))
	{
		ZkPart	   *p = dlist_container(ZkPart, own_link,
										dlist_pop_head_node(&owners));

		p->own_watch = false;
		if (p->dead || p->dropping)
			continue;
		if (p->driver->fired)
		{
			p->need_eval = true;
			p->driver->fired(p);
		}
		advance(p);
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
}

/* Parts kept after their last holder: let go of those whose time is up. */
static void
expire_retained(void)
{
	TimestampTz now = GetCurrentTimestamp();
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &parts)
	{
		ZkPart	   *p = dlist_container(ZkPart, link, it.cur);

		if (p->retain_until != 0 && !has_entries(p) &&
			(now >= p->retain_until || p->contended_since != 0 ||
			 p->revoke_requested))
			zk_part_drop(p);
	}
}

/* Start a round of the reconciler when it is due (see the file header). */
static void
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
		if (!e->suspect &&
			TimestampDifferenceExceeds(e->used, now, PARENT_FORGET_MS))
		{
			/* forgotten (dynahash allows removing the current entry) */
			hash_search(parents, e->path, HASH_REMOVE, NULL);
			continue;
		}
		zk_call_list(reconciler, T_RECONCILE, e->path, false);
		n++;
	}
	if (e == NULL)
	{
		reconcile_scanning = false;
		next_reconcile = TimestampTzPlusMilliseconds(now, RECONCILE_INTERVAL_MS);
	}
}

/* Is this node claimed by a part, or being looked for by one? */
static bool
node_claimed(const char *parent, const char *node)
{
	dlist_iter	it;

	dlist_foreach(it, &parts)
	{
		ZkPart	   *p = dlist_container(ZkPart, link, it.cur);

		if (p->phase == NODE_NONE || strcmp(p->parent, parent) != 0)
			continue;
		if (strcmp(p->node, node) == 0 ||
			(p->phase != NODE_EXISTS && p->prefix[0] &&
			 strncmp(node, p->prefix, strlen(p->prefix)) == 0))
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

static const ZkDriver reconciler_driver = {
	.kind = ZK_KIND_LIST,
	.step = reconciler_step,
};

/*
 * Act on everything the ZooKeeper client delivered in this turn (answers,
 * fired watches) and on the engine's timers.  Called by the worker loop
 * after zookeeper_process() returned.
 */
void
zk_engine_run(void)
{
	while (!dlist_is_empty(&completed) || !dlist_is_empty(&fired))
	{
		while (!dlist_is_empty(&completed))
			process_call(dlist_container(ZkCall, link,
										 dlist_pop_head_node(&completed)));
		while (!dlist_is_empty(&fired))
			process_fired(dlist_container(ZkFired, link,
										  dlist_pop_head_node(&fired)));
	}
	expire_retained();
	reconcile();
	DRIVER_HOOKS(run);
}

/* Has the ZooKeeper client delivered anything the engine has not acted on? */
bool
zk_engine_pending(void)
{
	return !dlist_is_empty(&completed) || !dlist_is_empty(&fired);
}

/*
 * How long the worker may sleep before the engine needs to run (ms).  The
 * reconciler's round counts only while connected: it cannot run otherwise,
 * and an overdue one must not make the worker spin through an outage.
 */
long
zk_engine_timeout(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz next = zk_connected() ? next_reconcile : 0;
	dlist_iter	it;

	dlist_foreach(it, &parts)
	{
		ZkPart	   *p = dlist_container(ZkPart, link, it.cur);

		if (p->retain_until != 0 && (next == 0 || p->retain_until < next))
			next = p->retain_until;
	}
	if (!dlist_is_empty(&completed) || !dlist_is_empty(&fired))
		return 0;
	if (next == 0)
		return 1000;
	return next <= now ? 0 : Min((next - now + 999) / 1000, 1000);
}

/*
 * The session is (again) connected: resume every part.  Parts whose node
 * exists look at their parent again, since anything may have changed
 * while we were away; the session's watches survived if it is the same
 * session, and are set again when listing.
 */
void
zk_engine_connected(void)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &parts)
	{
		ZkPart	   *p = dlist_container(ZkPart, link, it.cur);

		if (p == reconciler)
			continue;
		if (p->phase == NODE_EXISTS || p->driver->form == ZK_FORM_NONE)
			p->need_eval = true;
		advance(p);
	}
	next_reconcile = 0;
}

/*
 * The session is gone (expired, abandoned, or it was a previous worker's):
 * every node it created is, or will soon be, deleted by ZooKeeper, and its
 * watches are gone.  Holdings become LOST; requests still waiting start
 * over in the next session with fresh nodes, unless they are part of a
 * composite that must start over as a whole (ZKR_NO_RESTART: LOST);
 * instance parts (the leader latch) start over.  Nothing is ever granted
 * on the strength of a node of an old session.
 */
void
zk_engine_session_lost(const char *why)
{
	dlist_mutable_iter it;
	List	   *restart = NIL;
	ListCell   *lc;
	HASH_SEQ_STATUS hs;
	ZkWatch    *w;

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
				ereport(WARNING,
						(errmsg("zklock %s \"%s\" held by process %d was lost",
								zk_kind_name(e->kind), e->name, e->owner_pid),
						 errdetail_internal("%s", why)));
				zk_set_outcome(id, ZKE_LOST, 0, "%s", why);
				fail_ask(id, why);
			}
			else if (e->flags & ZKR_NO_RESTART)
				zk_set_outcome(id, ZKE_LOST, 0, "%s", why);
			else
				restart = lappend_int(restart, id);
		}
		own_unwatch(p);
		if (p->phase == NODE_EXISTS || p->phase == NODE_DELETING)
			pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
		p->phase = NODE_NONE;
		p->gen++;
		p->inflight = 0;
		if (p->watch_path)
		{
			dlist_delete(&p->watch_link);
			pfree(p->watch_path);
			p->watch_path = NULL;
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
	hash_seq_init(&hs, watches);
	while ((w = hash_seq_search(&hs)) != NULL)
		hash_search(watches, &w->key, HASH_REMOVE, NULL);
	pg_atomic_write_u32(&zk_shared->n_watches, 0);
	{
		ZkWatchCalls *wc;

		hash_seq_init(&hs, watch_calls);
		while ((wc = hash_seq_search(&hs)) != NULL)
			hash_search(watch_calls, &wc->key, HASH_REMOVE, NULL);
	}
	watch_epoch++;

	/* waiting requests start over, with a fresh deadline to connect */
	foreach(lc, restart)
	{
		int			id = lfirst_int(lc);
		ZkEntry    *e = ZK_ENTRY(id);

		LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
		e->node[0] = '\0';
		e->waiting_on[0] = '\0';
		e->connect_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														  e->connect_timeout);
		LWLockRelease(zk_shared->lock);
		new_request(id);
	}
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
	HASHCTL		ctl;

	engine_context = AllocSetContextCreate(TopMemoryContext, "zklock engine",
										   ALLOCSET_DEFAULT_SIZES);
	zk_turn_context = AllocSetContextCreate(TopMemoryContext, "zklock turn",
											ALLOCSET_DEFAULT_SIZES);
	ops = MemoryContextAllocZero(engine_context,
								 sizeof(ZkOp) * zk_shared->num_entries);

	ctl.keysize = sizeof(ZkWatchKey);
	ctl.entrysize = sizeof(ZkWatch);
	ctl.hcxt = engine_context;
	watches = hash_create("zklock watches", 64, &ctl,
						  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	ctl.entrysize = sizeof(ZkWatchCalls);
	watch_calls = hash_create("zklock watch calls", 64, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	ctl.keysize = ZK_PATH_MAX;
	ctl.entrysize = sizeof(ZkParent);
	parents = hash_create("zklock parents", 256, &ctl,
						  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	ctl.keysize = sizeof(ZkOpenKey);
	ctl.entrysize = sizeof(ZkOpen);
	open_parts = hash_create("zklock open parts", 64, &ctl,
							 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

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
			ereport(WARNING,
					(errmsg("zklock %s \"%s\" held by process %d was lost",
							zk_kind_name(e->kind), e->name, e->owner_pid),
					 errdetail("The zklock worker restarted; the ZooKeeper session of the holding ended with its previous run.")));
			zk_set_outcome(id, ZKE_LOST, 0, "The zklock worker restarted.");
		}
		else if (e->state == ZKE_PENDING && !(e->flags & ZKR_NO_RESTART))
			new_request(id);
		else if (e->state == ZKE_PENDING)
			zk_set_outcome(id, ZKE_LOST, 0, "The zklock worker restarted.");
		if (e->ask_state == ZK_ASK_PENDING)
			zk_set_ask_outcome(id, ZK_ASK_FAILED, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
							   "The zklock worker restarted.");
	}
}

/*-------------------------------------------------------------------------
 *
 * recipe.c
 *	  The lock engine and its recipe drivers.
 *
 * One engine runs every recipe, in the spirit of Curator's LockInternals:
 * create an ephemeral-sequential node with a protected name under the
 * lock's parent, list the parent's children, sort them by sequence number
 * and ask the recipe's driver whether our node holds the lock.  If it does
 * not, the driver names the node to watch (a getData watch, never exists),
 * and we look again when that node changes or goes.  A driver is therefore
 * just its node base name, the parent's suffix and its ownership predicate;
 * adding a recipe touches neither the worker loop nor the protocol.
 *
 * The engine keeps a small state machine per shared entry (ZkOp, in the
 * worker's private memory).  zk_engine_advance() looks at the entry and its
 * op and sends whatever is next; every completion records its result and,
 * once nothing of that entry is in flight any more, advances it again.
 * The same function therefore handles a fresh request, a release, a
 * reconnect and a worker restart: whatever was interrupted is resumed from
 * what is known, and a node whose create reply was lost is found again by
 * its protected prefix.
 *
 * Round trips of an uncontended acquire: one (create and getChildren are
 * sent back to back; a session's requests run in order, so the listing
 * includes the new node).  A release is one delete, which the backend does
 * not wait for.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "protocol.h"
#include "worker.h"

/*
 * A recipe driver.  decide() gets the lock nodes of the parent sorted by
 * sequence, the index of ours and the request's max_leases; it returns
 * HOLDS when ours holds the lock, WATCH_CHILDREN to wait for any change of
 * the parent's children, else the index of the node to watch.
 */
typedef struct ZkRecipe
{
	const char *suffix;			/* appended to <root>/<name> for the parent */
	const char *base;			/* node base name, before the sequence */
	bool		watch_children; /* list the parent with a watch */
	int			(*decide) (char **nodes, int n, int self, int32 max_leases);
} ZkRecipe;

#define HOLDS (-1)
#define WATCH_CHILDREN (-2)

/* Curator InterProcessMutex: the first node holds; watch the one before. */
static int
mutex_decide(char **nodes, int n, int self, int32 max_leases)
{
	return self == 0 ? HOLDS : self - 1;
}

/*
 * Curator's read lock: holds unless a writer's node comes first; then
 * watch the first writer.  Readers queue behind a waiting writer.
 */
static int
read_decide(char **nodes, int n, int self, int32 max_leases)
{
	for (int i = 0; i < self; i++)
		if (strstr(nodes[i], "__WRIT__") != NULL)
			return i;
	return HOLDS;
}

/*
 * A lease of Curator's InterProcessSemaphoreV2: taken under the entry
 * mutex, it holds once there are at most max_leases leases.
 */
static int
lease_decide(char **nodes, int n, int self, int32 max_leases)
{
	return n <= max_leases ? HOLDS : WATCH_CHILDREN;
}

static const ZkRecipe recipes[ZK_NUM_KINDS] = {
	[ZK_KIND_LOCK] = {"", "lock-", false, mutex_decide},
	[ZK_KIND_READ] = {"", "__READ__", false, read_decide},
	[ZK_KIND_WRITE] = {"", "__WRIT__", false, mutex_decide},
	[ZK_KIND_SEMAPHORE] = {"/leases", "lease-", true, lease_decide},
	[ZK_KIND_SEMAPHORE_ENTRY] = {"/locks", "lock-", false, mutex_decide},
};

const char *
zk_kind_suffix(ZkKind kind)
{
	return recipes[kind].suffix;
}

typedef enum ZkPhase
{
	OP_START = 0,				/* nothing created (yet, or any more) */
	OP_CREATING,				/* create and listing in flight */
	OP_NEED_PARENTS,			/* create failed: parent missing */
	OP_UNKNOWN,					/* create's reply lost: look for our prefix */
	OP_EXISTS,					/* our node exists */
	OP_GONE						/* our node is gone for good */
} ZkPhase;

/* The worker's private state for one shared entry. */
typedef struct ZkOp
{
	uint32		generation;		/* of the entry this state belongs to */
	ZkPhase		phase;
	int			inflight;		/* calls awaiting their completion */
	bool		need_eval;		/* list children and decide again */
	bool		need_token;		/* our node's czxid is not known yet */
	int			parent_tries;	/* parent re-creations for this request */
	int			parent_error;	/* ZooKeeper's refusal to create a parent */
	uint32		watch_seq;		/* tags the current watch; old ones ignored */
	char		prefix[48];		/* protected prefix "_c_<uuid>-" */
} ZkOp;

static ZkOp *ops;

/* Give up re-creating a reaped parent after this many tries in a row. */
#define MAX_PARENT_TRIES 10

#define ID_DATA(id) ((const void *) (uintptr_t) (id))
#define DATA_ID(data) ((int) (uintptr_t) (data))

void
zk_engine_init(void)
{
	ops = MemoryContextAllocZero(TopMemoryContext,
								 sizeof(ZkOp) * zk_shared->num_entries);
}

/* <root>/<name><suffix>, the parent of the entry's nodes. */
static void
entry_parent(ZkEntry *e, char *buf)
{
	zk_parent_path(buf, ZK_PATH_MAX, e->name, recipes[e->kind].suffix);
}

/* <parent>/<child> */
static void
entry_child(ZkEntry *e, const char *child, char *buf)
{
	int			n;

	entry_parent(e, buf);
	n = strlen(buf);
	snprintf(buf + n, ZK_PATH_MAX - n, "/%s", child);
}

/* Note the result of an asynchronous call that was just issued. */
static void
sent(int id, int rc)
{
	if (rc == ZOK)
		ops[id].inflight++;
	else
		elog(DEBUG1, "zklock: ZooKeeper call not sent: %s", zerror(rc));
}

/* A completion arrived; returns true when the entry should advance. */
static bool
completed(int id, int rc)
{
	ops[id].inflight--;
	/* completions flushed by a closing handle: the session code resets */
	return rc != ZCLOSING && ops[id].inflight == 0;
}

static bool
is_connection_loss(int rc)
{
	return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT ||
		rc == ZSESSIONMOVED;
}

static void
set_node(ZkEntry *e, const char *node, int64 token)
{
	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	strlcpy(e->node, node, sizeof(e->node));
	e->token = token;
	LWLockRelease(zk_shared->lock);
}


/* ---- completions ---- */

static void
parent_done(int rc, const char *value, const void *data)
{
	int			id = DATA_ID(data);

	if (rc != ZOK && rc != ZNODEEXISTS && rc != ZCLOSING &&
		!is_connection_loss(rc))
		ops[id].parent_error = rc;
	if (completed(id, rc))
		zk_engine_advance(id);
}

/* The SQLSTATE for a request ZooKeeper refused with rc. */
static int
refusal_errcode(int rc)
{
	return rc == ZNOAUTH ? ERRCODE_INSUFFICIENT_PRIVILEGE :
		ERRCODE_EXTERNAL_ROUTINE_EXCEPTION;
}

static void
create_done(int rc, const char *path, const struct Stat *stat,
			const void *data)
{
	int			id = DATA_ID(data);
	ZkOp	   *op = &ops[id];
	ZkEntry    *e = ZK_ENTRY(id);

	if (rc == ZOK)
	{
		const char *slash = strrchr(path, '/');

		set_node(e, slash ? slash + 1 : path, stat->czxid);
		op->phase = OP_EXISTS;
		op->need_eval = true;
		op->need_token = false;
		op->parent_tries = 0;
	}
	else if (rc == ZNONODE)
		op->phase = OP_NEED_PARENTS;
	else if (is_connection_loss(rc))
		op->phase = OP_UNKNOWN;
	else if (rc != ZCLOSING)
	{
		op->phase = OP_GONE;
		zk_set_outcome(id, ZKE_FAILED, refusal_errcode(rc),
					   "ZooKeeper refused to create its node: %s", zerror(rc));
	}
	if (completed(id, rc))
		zk_engine_advance(id);
}

static void
delete_done(int rc, const void *data)
{
	int			id = DATA_ID(data);

	if (rc == ZOK || rc == ZNONODE)
		ops[id].phase = OP_GONE;
	else if (rc != ZCLOSING && !is_connection_loss(rc))
	{
		/* nothing more we can do; say so, for the DBA */
		elog(WARNING, "zklock: could not delete node \"%s\" of lock \"%s\": %s",
			 ZK_ENTRY(id)->node, ZK_ENTRY(id)->name, zerror(rc));
		ops[id].phase = OP_GONE;
	}
	/* on connection loss the delete is sent again after reconnecting */
	if (completed(id, rc))
		zk_engine_advance(id);
}

static void
token_done(int rc, const struct Stat *stat, const void *data)
{
	int			id = DATA_ID(data);

	if (rc == ZOK)
	{
		ZkEntry    *e = ZK_ENTRY(id);

		ops[id].need_token = false;
		set_node(e, e->node, stat->czxid);
	}
	else if (rc == ZNONODE)
		ops[id].need_eval = true;	/* the listing will notice */
	if (completed(id, rc))
		zk_engine_advance(id);
}

/* A watch of ours fired (predecessor gone or changed, children changed). */
static void
node_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	uint64		packed = (uint64) (uintptr_t) ctx;
	int			id = (int) (packed & 0xffffffff);
	uint32		seq = (uint32) (packed >> 32);

	if (type == ZOO_SESSION_EVENT || ops[id].watch_seq != seq)
		return;
	ops[id].need_eval = true;
	if (ops[id].inflight == 0)
		zk_engine_advance(id);
}

/* Tag a new watch of the entry; watches with an older tag are ignored. */
static void *
new_watch_ctx(int id)
{
	uint64		ctx;

	ops[id].watch_seq++;
	ctx = ((uint64) ops[id].watch_seq << 32) | (uint32) id;
	return (void *) (uintptr_t) ctx;
}

static void
predecessor_done(int rc, const char *value, int len, const struct Stat *stat,
				 const void *data)
{
	int			id = DATA_ID(data);

	/* ZOK: the watch is set; anything else: look again */
	if (rc != ZOK)
		ops[id].need_eval = true;
	if (completed(id, rc))
		zk_engine_advance(id);
}

static int
child_cmp(const void *a, const void *b)
{
	return zk_compare_children(*(char *const *) a, *(char *const *) b);
}

/*
 * Decide from a listing of the parent whether our node holds the lock,
 * and report or watch accordingly.
 */
static void
evaluate(int id, const struct String_vector *children)
{
	ZkEntry    *e = ZK_ENTRY(id);
	ZkOp	   *op = &ops[id];
	char	  **nodes = palloc(sizeof(char *) * Max(children->count, 1));
	int			n = 0;
	int			self = -1;
	int			w;

	for (int i = 0; i < children->count; i++)
		if (zk_is_lock_node(children->data[i]) &&
			strcmp(children->data[i], e->skip_node) != 0)
			nodes[n++] = children->data[i];
	qsort(nodes, n, sizeof(char *), child_cmp);
	for (int i = 0; i < n; i++)
		if (strcmp(nodes[i], e->node) == 0)
			self = i;

	op->need_eval = false;
	if (self < 0)
	{
		op->phase = OP_GONE;
		zk_set_outcome(id, ZKE_FAILED, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					   "its node \"%s\" was deleted by another client", e->node);
	}
	else if ((w = recipes[e->kind].decide(nodes, n, self, e->max_leases)) == HOLDS)
		zk_set_outcome(id, ZKE_HELD, 0, NULL);
	else if (e->nowait)
		zk_set_outcome(id, ZKE_WOULD_BLOCK, 0, NULL);
	else if (w != WATCH_CHILDREN)	/* the listing itself set that watch */
	{
		char		path[ZK_PATH_MAX];

		entry_child(e, nodes[w], path);
		zk_set_waiting_on(id, nodes[w]);
		sent(id, zoo_awget(zk_zh, path, node_watch, new_watch_ctx(id),
						   predecessor_done, ID_DATA(id)));
	}
	pfree(nodes);
}

/*
 * A listing arrived: either the re-evaluation of a waiting node, or the
 * search for our prefix after a create whose reply was lost.
 */
static void
children_done(int rc, const struct String_vector *children, const void *data)
{
	int			id = DATA_ID(data);
	ZkOp	   *op = &ops[id];
	ZkEntry    *e = ZK_ENTRY(id);

	if (rc == ZOK && op->phase == OP_UNKNOWN)
	{
		size_t		plen = strlen(op->prefix);

		op->phase = OP_START;
		for (int i = 0; i < children->count; i++)
			if (strncmp(children->data[i], op->prefix, plen) == 0)
			{
				set_node(e, children->data[i], 0);
				op->phase = OP_EXISTS;
				op->need_eval = true;
				op->need_token = true;
				break;
			}
	}
	else if (rc == ZOK && op->phase == OP_EXISTS && op->need_eval &&
			 !op->need_token && e->state == ZKE_PENDING && !e->released)
		evaluate(id, children);
	else if (rc == ZNONODE && op->phase == OP_UNKNOWN)
		op->phase = OP_START;	/* parent gone, so our node never was */
	else if (rc == ZNONODE && op->phase == OP_EXISTS)
	{
		/* the parent is gone, so our node went with it */
		struct String_vector none = {0, NULL};

		if (e->state == ZKE_PENDING && !e->released)
			evaluate(id, &none);
		else
			op->phase = OP_GONE;
	}

	if (completed(id, rc))
		zk_engine_advance(id);
}

/* ---- driving an entry ---- */

/* List the parent of the entry's nodes (with a watch, if the recipe wants). */
static void
send_list(int id)
{
	ZkEntry    *e = ZK_ENTRY(id);
	char		path[ZK_PATH_MAX];

	entry_parent(e, path);
	if (recipes[e->kind].watch_children)
		sent(id, zoo_awget_children(zk_zh, path, node_watch, new_watch_ctx(id),
									children_done, ID_DATA(id)));
	else
		sent(id, zoo_aget_children(zk_zh, path, 0, children_done, ID_DATA(id)));
}

/* Send the create of our node, preceded by its parents when missing. */
static void
send_create(int id, bool with_parents)
{
	ZkEntry    *e = ZK_ENTRY(id);
	ZkOp	   *op = &ops[id];
	const ZkRecipe *r = &recipes[e->kind];
	char		path[ZK_PATH_MAX];
	int			len;

	entry_parent(e, path);
	len = strlen(path);
	if (with_parents)
	{
		/* every ancestor below "/", as CONTAINER nodes; FIFO keeps order */
		for (char *p = strchr(path + 1, '/');; p = strchr(p + 1, '/'))
		{
			if (p)
				*p = '\0';
			sent(id, zoo_acreate(zk_zh, path, NULL, -1, zk_session_acl(),
								 ZOO_CONTAINER, parent_done, ID_DATA(id)));
			if (!p)
				break;
			*p = '/';
		}
	}

	/* a fresh protected name for every attempt */
	zk_new_protected_prefix(op->prefix, sizeof(op->prefix));
	snprintf(path + len, sizeof(path) - len, "/%s%s", op->prefix, r->base);
	op->phase = OP_CREATING;
	sent(id, zoo_acreate2(zk_zh, path, NULL, -1, zk_session_acl(),
						  ZOO_EPHEMERAL_SEQUENTIAL, create_done, ID_DATA(id)));
	if (op->inflight == 0)
	{
		op->phase = OP_START;	/* not sent: try again after reconnecting */
		return;
	}
	send_list(id);
}

/*
 * Send whatever an entry needs next, given its shared state and our op.
 * Does nothing while a call of the entry is in flight (its completion
 * advances it again) or while there is no connected session (reconnecting
 * advances every entry).
 */
void
zk_engine_advance(int id)
{
	ZkEntry    *e = ZK_ENTRY(id);
	ZkOp	   *op = &ops[id];
	ZkEntryState state;
	bool		released;

	if (op->generation != e->generation)
	{
		/* a new request in this entry */
		uint32		seq = op->watch_seq;

		memset(op, 0, sizeof(*op));
		op->generation = e->generation;
		op->watch_seq = seq;
	}
	if (op->inflight > 0)
		return;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	state = e->state;
	released = e->released;
	LWLockRelease(zk_shared->lock);

	if (state == ZKE_FREE)
		return;

	if (released)
	{
		switch (op->phase)
		{
			case OP_START:
			case OP_NEED_PARENTS:
			case OP_GONE:
				zk_free_entry(id);
				return;
			case OP_CREATING:
				return;			/* cannot happen with nothing in flight */
			case OP_UNKNOWN:
				if (zk_session_connected())
					send_list(id);
				return;
			case OP_EXISTS:
				if (zk_session_connected())
				{
					char		path[ZK_PATH_MAX];

					entry_child(e, e->node, path);
					sent(id, zoo_adelete(zk_zh, path, -1, delete_done,
										 ID_DATA(id)));
				}
				return;
		}
	}

	if (state != ZKE_PENDING || !zk_session_connected())
		return;

	switch (op->phase)
	{
		case OP_START:
			send_create(id, false);
			break;
		case OP_NEED_PARENTS:
			if (op->parent_error != ZOK)
			{
				op->phase = OP_GONE;
				zk_set_outcome(id, ZKE_FAILED, refusal_errcode(op->parent_error),
							   "ZooKeeper refused to create its parent nodes: %s",
							   zerror(op->parent_error));
			}
			else if (++op->parent_tries > MAX_PARENT_TRIES)
			{
				op->phase = OP_GONE;
				zk_set_outcome(id, ZKE_FAILED, ERRCODE_EXTERNAL_ROUTINE_EXCEPTION,
							   "its parent node kept disappearing");
			}
			else
				send_create(id, true);
			break;
		case OP_UNKNOWN:
			send_list(id);
			break;
		case OP_EXISTS:
			if (op->need_token)
			{
				char		path[ZK_PATH_MAX];

				entry_child(e, e->node, path);
				sent(id, zoo_aexists(zk_zh, path, 0, token_done, ID_DATA(id)));
			}
			if (op->need_eval)
				send_list(id);
			break;
		case OP_CREATING:
		case OP_GONE:
			break;
	}
}

/*
 * The session is (again) connected: resume every entry.  Pending entries
 * list their parent again, since their predecessor may have gone while we
 * were away.
 */
void
zk_engine_connected(void)
{
	for (int id = 0; id < zk_shared->num_entries; id++)
	{
		if (ZK_ENTRY(id)->state == ZKE_FREE)
			continue;
		if (ops[id].phase == OP_EXISTS)
			ops[id].need_eval = true;
		zk_engine_advance(id);
	}
}

/*
 * The session is gone (expired, abandoned, or it was a previous worker's):
 * every node it created is, or will soon be, deleted by ZooKeeper.
 * Holdings become LOST; requests still waiting start over in the next
 * session with fresh nodes; given-up entries are freed.  Nothing is ever
 * granted on the strength of a node of an old session.
 */
void
zk_engine_session_lost(const char *why)
{
	for (int id = 0; id < zk_shared->num_entries; id++)
	{
		ZkEntry    *e = ZK_ENTRY(id);
		ZkOp	   *op = &ops[id];
		ZkEntryState state;

		LWLockAcquire(zk_shared->lock, LW_SHARED);
		state = e->released ? ZKE_FREE : e->state;
		LWLockRelease(zk_shared->lock);

		op->generation = e->generation;
		op->inflight = 0;
		op->need_eval = false;
		op->need_token = false;
		op->watch_seq++;
		if (state == ZKE_PENDING)
		{
			/* start over; the new session gets the usual time to connect */
			op->phase = OP_START;
			LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
			e->node[0] = '\0';
			e->waiting_on[0] = '\0';
			e->token = 0;
			e->connect_deadline =
				TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											e->connect_timeout);
			LWLockRelease(zk_shared->lock);
			continue;
		}
		op->phase = OP_GONE;
		if (state == ZKE_HELD)
		{
			ereport(WARNING,
					(errmsg("zklock lock \"%s\" held by process %d was lost: %s",
							e->name, e->owner_pid, why)));
			zk_set_outcome(id, ZKE_LOST, 0, NULL);
		}
		if (e->state != ZKE_FREE)
			zk_engine_advance(id);		/* frees given-up entries */
	}
}

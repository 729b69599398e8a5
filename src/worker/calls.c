/*-------------------------------------------------------------------------
 *
 * calls.c
 *	  The engine's calls to ZooKeeper, their completions, and the watcher.
 *
 * Every call of a part goes out here (zk_call_create, ..., zk_call_finalize),
 * asynchronously on the worker's session (session.c).  Each carries the
 * part's generation, so answers about a part that has started over since
 * (a lost session) are ignored; the answer goes to the part's driver
 * (step) or, for the engine's own tags, to the engine (process_call in
 * engine.c).
 *
 * ZooKeeper callbacks never throw and never touch shared memory: they only
 * copy what they got into the worker's turn memory (allocations that
 * return NULL instead of failing) and queue it (completed, fired).
 * zk_engine_run(), called by the worker loop after zookeeper_process()
 * returned, acts on it.
 *
 * Also here: small helpers about ZooKeeper's answers (connection loss,
 * refusals, nodes of our session) and the data of the nodes we create
 * (zk_node_data).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "worker/engine_internal.h"
#include "worker/session.h"

dlist_head	completed = DLIST_STATIC_INIT(completed);
dlist_head	fired = DLIST_STATIC_INIT(fired);

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

/* ---- calls ---- */

ZkCall *
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
void
sent(ZkCall *c, int rc)
{
	if (rc == ZOK)
	{
		c->part->inflight++;
		c->part->calls++;
		pg_atomic_fetch_add_u64(&zk_shared->n_zk_requests, 1);
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

void
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

void
void_done(int rc, const void *data)
{
	done((ZkCall *) data, rc);
}

/* The watcher of every engine watch: note the path, act later. */
void
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

/*-------------------------------------------------------------------------
 *
 * part_calls.c
 *	  The calls parts make, as the engine books them before they go out,
 *	  and the data of the nodes they create.
 *
 * A driver, or the engine for a part, makes a call with zk_call_create,
 * ..., zk_call_multi; the answer comes to the driver's step() with the
 * tag, or for the engine's own tags (negative) to the engine (process_call
 * in engine.c).  Before a call goes on the outbox (calls.c), this file does
 * the engine's bookkeeping that the call implies: it counts as in flight
 * for its part (queue_call), a create first creates the parents not known
 * to exist (parent_entry, parents.c), a call that sets a watch registers
 * the part's interest and the call (watches.c), and the creates and
 * deletes of the sequential protocol's nodes are marked as writes that may
 * be coalesced.  What happens to the answer is the engine's too
 * (zk_engine_run); calls.c only sends and hands back.
 *
 * Also here: the data of the nodes we create (zk_node_data), which names
 * the instance and the backend a part serves.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/timestamp.h"

#include "worker/engine/engine_internal.h"

/* ---- node data: who created a node ---- */

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
	escape_json(&s, cluster_name && cluster_name[0] ? cluster_name : sysid);
	appendStringInfoString(&s, ",\"system\":");
	escape_json(&s, sysid);
	appendStringInfo(&s, ",\"host\":");
	escape_json(&s, psprintf("%s:%d", host, PostPortNumber));
	if (id >= 0)
	{
		appendStringInfo(&s, ",\"pid\":%d,\"app\":", ZK_ENTRY(id)->owner_pid);
		escape_json(&s, ZK_ENTRY(id)->app);
	}
	else
		appendStringInfo(&s, ",\"pid\":%d,\"app\":\"zklock worker\"", MyProcPid);
	appendStringInfoChar(&s, '}');
	return s.data;
}

/*
 * A random nonce of ZK_NONCE_LEN hex digits into buf (ZK_NONCE_LEN + 1
 * bytes), for data that tells our node from another of the same path.
 * False if no random bytes could be had.
 */
bool
zk_nonce(char *buf)
{
	uint8		rnd[ZK_NONCE_LEN / 2];

	if (!pg_strong_random(rnd, sizeof(rnd)))
		return false;
	for (int i = 0; i < (int) sizeof(rnd); i++)
		snprintf(buf + 2 * i, 3, "%02x", rnd[i]);
	return true;
}

/* ---- calls ---- */

/*
 * A call is made: it counts as in flight for its part from now on, and
 * goes out when the turn ends (zk_calls_flush).
 */
void
queue_call(ZkCall *c)
{
	c->part->inflight++;
	c->part->calls++;
	outbox_add(c);
}

/* Create every missing ancestor of path, as CONTAINER nodes, in order. */
static void
queue_parents(ZkPart *p, const char *path)
{
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
		pc->mode = ZOO_CONTAINER;
		queue_call(pc);
		*q = '/';
	}
}

void
zk_call_create(ZkPart *p, int tag, const char *path, const char *data,
			   int mode, bool parents_too)
{
	ZkCall	   *c;

	if (parents_too)
		queue_parents(p, path);
	c = new_call(p, ZKC_CREATE, tag, path);
	c->data = data ? MemoryContextStrdup(engine_context, data) : NULL;
	c->mode = mode;

	/*
	 * A driver whose check is sent right behind the create (begin without
	 * precheck) needs that order even if a refused multi sends the create
	 * again later: its creates are not coalesced.
	 */
	c->batch = (tag == T_CREATE && !parents_too &&
				(p->driver->seq.begin == NULL || p->driver->seq.precheck != NULL));
	queue_call(c);
}

/* Queue a call that sets the part's watch on its path. */
static void
queue_watching(ZkCall *c, bool children)
{
	watch(c->part, c->path, children);
	watch_call_sent(c, children);
	queue_call(c);
}

void
zk_call_list(ZkPart *p, int tag, const char *path, bool with_watch)
{
	ZkCall	   *c = new_call(p, ZKC_LIST, tag, path);

	c->sent_at = GetCurrentTimestamp();
	if (with_watch)
		queue_watching(c, true);
	else
		queue_call(c);
}

void
zk_call_get(ZkPart *p, int tag, const char *path, bool with_watch)
{
	ZkCall	   *c = new_call(p, ZKC_GET, tag, path);

	if (with_watch)
		queue_watching(c, false);
	else
		queue_call(c);
}

/*
 * getData with the part's side watch on path (see watches.c): the driver's
 * check reads what it watches.
 */
void
zk_call_get_side(ZkPart *p, int tag, const char *path)
{
	ZkCall	   *c = new_call(p, ZKC_GET, tag, path);

	side_watch(p, path);
	c->side = true;
	watch_call_sent(c, false);
	queue_call(c);
}

void
zk_call_exists(ZkPart *p, int tag, const char *path)
{
	queue_call(new_call(p, ZKC_EXISTS, tag, path));
}

/*
 * exists with a data watch: it fires when the node is created, changed or
 * deleted (set whether the node exists or not).
 */
void
zk_call_exists_watch(ZkPart *p, int tag, const char *path)
{
	queue_watching(new_call(p, ZKC_EXISTS, tag, path), false);
}

void
zk_call_delete(ZkPart *p, int tag, const char *path, int version)
{
	ZkCall	   *c = new_call(p, ZKC_DELETE, tag, path);

	c->version = version;
	c->batch = (tag == T_DELETE);
	queue_call(c);
}

/* setData of path (version -1: whatever its version); the answer has the
 * node's new Stat */
void
zk_call_set(ZkPart *p, int tag, const char *path, const char *data,
			int version)
{
	ZkCall	   *c = new_call(p, ZKC_SET, tag, path);

	c->data = data ? MemoryContextStrdup(engine_context, data) : NULL;
	c->version = version;
	queue_call(c);
}

/*
 * Create and setData with binary data of len bytes (len > 0), which may
 * hold zero bytes: a shared count's 4-byte integer.  Never coalesced.
 */
static char *
copy_bytes(const char *data, int len)
{
	char	   *copy = MemoryContextAlloc(engine_context, len);

	memcpy(copy, data, len);
	return copy;
}

void
zk_call_create_bytes(ZkPart *p, int tag, const char *path, const char *data,
					 int len, int mode, bool parents_too)
{
	ZkCall	   *c;

	Assert(len > 0);
	if (parents_too)
		queue_parents(p, path);
	c = new_call(p, ZKC_CREATE, tag, path);
	c->data = copy_bytes(data, len);
	c->bytes = len;
	c->mode = mode;
	queue_call(c);
}

void
zk_call_set_bytes(ZkPart *p, int tag, const char *path, const char *data,
				  int len, int version)
{
	ZkCall	   *c = new_call(p, ZKC_SET, tag, path);

	Assert(len > 0);
	c->data = copy_bytes(data, len);
	c->bytes = len;
	c->version = version;
	queue_call(c);
}

void
zk_call_sync(ZkPart *p, int tag, const char *path)
{
	queue_call(new_call(p, ZKC_SYNC, tag, path));
}

/*
 * A multi transaction of up to ZK_MULTI_MAX writes, all or none; path
 * names it in the answer (ZkResult.path).  Refused, ZkResult.op says which
 * write ZooKeeper named.
 */
void
zk_call_multi(ZkPart *p, int tag, const char *path, const ZkWrite *writes,
			  int n)
{
	ZkCall	   *c = new_call(p, ZKC_MULTI, tag, path);
	ZkWrite    *w;

	Assert(n >= 1 && n <= ZK_MULTI_MAX);
	w = MemoryContextAllocZero(engine_context, sizeof(ZkWrite) * n);
	for (int i = 0; i < n; i++)
	{
		w[i] = writes[i];
		w[i].path = MemoryContextStrdup(engine_context, writes[i].path);
		if (writes[i].data)
			w[i].data = MemoryContextStrdup(engine_context, writes[i].data);
	}
	c->writes = w;
	c->nwrites = n;
	queue_call(c);
}

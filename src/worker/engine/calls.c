/*-------------------------------------------------------------------------
 *
 * calls.c
 *	  The engine's I/O: its calls to ZooKeeper, sent and answered, and the
 *	  watcher.
 *
 * What it owns: the calls made in a turn and not sent yet (the outbox),
 * their sending when the turn ends (zk_calls_flush), asynchronously on the
 * worker's session (session.c), the creates and deletes of lock nodes of
 * all backends coalesced into multi transactions (see there), with the
 * session node that gives such a multi's creates their czxid; the
 * completions, which hand every answered call back on the list the engine
 * gave (zk_calls_init), and the watcher, which puts every fired watch on
 * the other.  A call of a part that started over since it was made (a lost
 * session) is not sent; its answer is ZCLOSING, as the client gives the
 * calls of a closed handle.
 *
 * What it may call: the ZooKeeper client and session.c, nothing else of
 * the engine (it allocates in the engine's memory contexts).  Of a call it
 * knows the ZkCall; of the part that made it only its generation and its
 * held_in_flush mark, and it marks a part whose write it sent (wrote).
 * What a call means to the engine (the watch it sets, the parents it
 * needs, the part's calls in flight, the answer's effects) is the engine's
 * business, before the call is queued (part_calls.c) and when its answer
 * is taken (zk_engine_run).
 *
 * ZooKeeper callbacks never throw and never touch shared memory: they only
 * copy what they got into the worker's turn memory (allocations that
 * return NULL instead of failing) and queue it.  zk_engine_run(), called by
 * the worker loop after zookeeper_process() returned, acts on it.
 *
 * Also here: small helpers about the session and ZooKeeper's answers
 * (connection loss, refusals, nodes of our session).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "worker/engine/engine_internal.h"
#include "worker/session.h"

/* Where answered calls and fired watches go (zk_calls_init). */
static dlist_head *answered;
static dlist_head *fired;

/* Answered calls go on answered_list, fired watches on fired_list. */
void
zk_calls_init(dlist_head *answered_list, dlist_head *fired_list)
{
	answered = answered_list;
	fired = fired_list;
}

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

/* ---- calls ---- */

/*
 * The calls made in this turn and not sent yet, in the order they were
 * made.  zk_calls_flush() sends them when the turn ends: the writes that
 * may be coalesced (creates and deletes of the sequential protocol's nodes)
 * first, together in multi transactions, then the others in order.
 */
static dlist_head outbox = DLIST_STATIC_INIT(outbox);
static int	noutbox = 0;		/* calls on it */
static int	nheld = 0;			/* of which the last flush held back */

/*
 * Batches of coalescible writes in flight, alone or in a multi: while
 * MAX_WRITES_IN_FLIGHT are, the next ones wait for an answer and go
 * together (see zk_calls_flush).  Calls of a session that ended do not
 * count any more.
 */
#define MAX_WRITES_IN_FLIGHT	4

/*
 * A multi's request stays well below the server's jute.maxbuffer (1 MB by
 * default), beyond which ZooKeeper drops the connection: estimated as each
 * op's path and data and some room for the rest.
 */
#define MAX_MULTI_BYTES		(256 * 1024)
static int	write_batches = 0;
static uint32 write_epoch = 0;
static uint32 flush_count = 0;

/*
 * A multi transaction of several calls' writes.  Its ops and results live
 * until its answer; it is freed at the next flush (spent, see
 * zk_calls_reap_multis).
 */
typedef struct ZkMulti
{
	dlist_node	link;			/* on spent once answered */
	int			n;				/* calls; a setData of the clock follows
								 * when one of them is a create */
	int			rc;
	int			failed;			/* refused: the op ZooKeeper named, or -1 */
	uint32		epoch;			/* write_epoch when sent */
	bool		clock;
	struct Stat clock_stat;
	ZkCall	  **calls;
	zoo_op_t   *ops;
	zoo_op_result_t *results;
} ZkMulti;

static dlist_head spent = DLIST_STATIC_INIT(spent);

static void
free_multi(ZkMulti *m)
{
	pfree(m->calls);
	pfree(m->ops);
	pfree(m->results);
	pfree(m);
}

/*
 * The instance's session node, <zklock.root>/zklock.instances/<session id
 * in hex>: an ephemeral node whose data names the instance (zk_node_data),
 * and the clock of the multis that create nodes.  A create inside a multi
 * is answered without a Stat (the ZooKeeper 3.8 C client has no create2 op
 * for multi), yet the lock family's fencing tokens are made of its nodes'
 * czxid.  So such a multi also sets the data of this node (to what it
 * was): that op's answer has the node's Stat, whose mzxid is the zxid of
 * the whole transaction, the czxid of every node it created.  Creates go
 * in multis only while the node is known to exist in the current session.
 */
#define CLOCK_RETRY_MS		5000

static char clock_path[ZK_PATH_MAX];
static char *clock_data;
static int64 clock_session = 0; /* session it exists in; 0: none known */
static bool clock_creating = false;
static TimestampTz clock_retry_at = 0;

static void
session_node_path(char *buf, int64 session)
{
	snprintf(buf, ZK_PATH_MAX, "%s/%s/%016llx",
			 zklock_root, ZK_INSTANCES_DIR, (unsigned long long) session);
}

/*
 * Is the session node to be made before the calls waiting now go out?
 * When they may be coalesced and the session has none (see above); the
 * engine then creates it (create_session_node) with the path
 * zk_session_node_creating() gives.
 */
bool
zk_session_node_due(void)
{
	return zklock_write_batch > 1 && !dlist_is_empty(&outbox) &&
		clock_session != zk_session() && !clock_creating &&
		zk_connected() && GetCurrentTimestamp() >= clock_retry_at;
}

/* The session node is being created with this data: its path. */
const char *
zk_session_node_creating(const char *data)
{
	session_node_path(clock_path, zk_session());
	if (clock_data)
		pfree(clock_data);
	clock_data = MemoryContextStrdup(engine_context, data);
	clock_creating = true;
	return clock_path;
}

/* The answer to the create of the session node. */
void
zk_clock_answered(const ZkResult *r)
{
	char		path[ZK_PATH_MAX];

	clock_creating = false;
	session_node_path(path, zk_session());
	/* NODEEXISTS: ours, from a create whose answer was lost */
	if ((r->rc == ZOK || r->rc == ZNODEEXISTS) && zk_connected() &&
		strcmp(r->path, path) == 0)
		clock_session = zk_session();
	else
	{
		ereport(zk_is_connection_loss(r->rc) || r->rc == ZCLOSING ? DEBUG1 : LOG,
				(errmsg("zklock could not create its session node \"%s\": %s",
						clock_path, zerror(r->rc)),
				 errdetail("Until it can, the creates of lock nodes are not coalesced.")));
		clock_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													 CLOCK_RETRY_MS);
	}
}

/* A new call of part p; it goes out once on the outbox (outbox_add). */
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
	c->r.op = -1;
	return c;
}

/* Free a call whose answer the engine has taken. */
void
free_call(ZkCall *c)
{
	if (c->data)
		pfree(c->data);
	if (c->created)
		pfree(c->created);
	if (c->mem)
		pfree(c->mem);
	for (int i = 0; i < c->nwrites; i++)
	{
		pfree((char *) c->writes[i].path);
		if (c->writes[i].data)
			pfree((char *) c->writes[i].data);
	}
	if (c->writes)
		pfree(c->writes);
	pfree(c->path);
	pfree(c);
}

/* A call goes out when the turn ends (zk_calls_flush). */
void
outbox_add(ZkCall *c)
{
	dlist_push_tail(&outbox, &c->link);
	noutbox++;
}

/* A batch of writes in flight was answered. */
static void
write_batch_done(uint32 epoch)
{
	if (epoch == write_epoch && write_batches > 0)
		write_batches--;
}

/*
 * The session ended: its calls in flight are gone (answered or not), and
 * the calls still in the outbox must not go out on the next session (a
 * create there would leave a node nobody claims: its protected prefix
 * names the old session).  They are answered ZCLOSING, as the client
 * answers the calls of a closed handle.  The session node went with the
 * session.
 */
void
zk_calls_session_lost(void)
{
	write_batches = 0;
	write_epoch++;
	while (!dlist_is_empty(&outbox))
	{
		ZkCall	   *c = dlist_container(ZkCall, link,
										dlist_pop_head_node(&outbox));

		c->r.rc = ZCLOSING;
		dlist_push_tail(answered, &c->link);
	}
	noutbox = nheld = 0;
	clock_session = 0;
	clock_creating = false;
	clock_retry_at = 0;
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
	if (c->clocked)
		write_batch_done(c->epoch);
	c->clocked = false;
	if (c->r.rc == ZOK)
		c->r.rc = rc;
	dlist_push_tail(answered, &c->link);
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

/*
 * The answer to a driver's multi (zk_call_multi).  Refused, the server
 * names the write that failed (those before it say ZOK, rolled back, those
 * after it ZRUNTIMEINCONSISTENCY); lost, every write has the same error
 * and none is named.
 */
static void
call_multi_done(int rc, const void *data)
{
	ZkCall	   *c = (ZkCall *) data;
	zoo_op_result_t *results = (zoo_op_result_t *) ((zoo_op_t *) c->mem +
													c->nwrites);

	if (rc != ZOK && !zk_is_connection_loss(rc) && rc != ZCLOSING)
		for (int i = 0; i < c->nwrites && c->r.op < 0; i++)
			if (results[i].err != ZOK && results[i].err != ZRUNTIMEINCONSISTENCY)
				c->r.op = i;
	done(c, rc);
}

/*
 * The answer to a multi of several calls' writes.  A multi is all or
 * nothing.  Done: each call is answered as if sent alone (a create with
 * the Stat a create2 would give, its czxid that of the session node's
 * setData in the same transaction: see the session node).  Lost with
 * the connection: each call's outcome is unknown, as a lone call's would
 * be (a create is then found again by its protected prefix).  Refused by
 * ZooKeeper (a parent gone, a node already deleted): nothing was done; the
 * call whose op ZooKeeper names gets that refusal, as it would have alone
 * at that moment, and the others go again when this turn ends: those
 * before it, which ZooKeeper found fine, together; those after it, which
 * it did not look at, alone, so that several failures (parents reaped
 * together) cost one more round trip, not one each.
 */
static void
multi_done(int rc, const void *data)
{
	ZkMulti    *m = (ZkMulti *) data;
	int			failed = -1;

	/*
	 * Refused: the server ran it, and its answer names the op that failed
	 * (those before it say ZOK, rolled back, those after
	 * ZRUNTIMEINCONSISTENCY) with an error of that op.  Anything else (the
	 * connection lost, the client closing: the client then gives every op
	 * that error) leaves the outcome unknown, as for a lone call.
	 */
	if (rc == ZNONODE || rc == ZNODEEXISTS || rc == ZBADVERSION ||
		rc == ZNOAUTH || rc == ZNOTEMPTY || rc == ZNOCHILDRENFOREPHEMERALS ||
		rc == ZINVALIDACL || rc == ZBADARGUMENTS ||
		rc == ZEPHEMERALONLOCALSESSION || rc == ZTHROTTLEDOP)
	{
		for (int i = 0; failed < 0 && i < m->n + (m->clock ? 1 : 0); i++)
			if (m->results[i].err != ZOK &&
				m->results[i].err != ZRUNTIMEINCONSISTENCY)
				failed = i;
	}

	m->rc = rc;
	m->failed = failed;
	write_batch_done(m->epoch);
	for (int i = 0; i < m->n; i++)
	{
		ZkCall	   *c = m->calls[i];
		int			crc = rc;

		if (failed >= 0 && i != failed)
		{
			if (i > failed)
				c->batch = false;
			dlist_push_tail(&outbox, &c->link);
			noutbox++;
			continue;
		}
		if (failed >= 0)
			crc = m->results[i].err;
		if (crc == ZOK && c->r.type == ZKC_CREATE)
		{
			/* the node is new, ours, and as old as the transaction */
			c->r.has_stat = true;
			c->r.stat.czxid = c->r.stat.mzxid = m->clock_stat.mzxid;
			c->r.stat.ctime = c->r.stat.mtime = m->clock_stat.mtime;
			c->r.stat.ephemeralOwner =
				(c->mode & ZOO_EPHEMERAL) ? m->clock_stat.ephemeralOwner : 0;
			if ((c->r.path = turn_strdup(c->created)) == NULL)
				crc = ZSYSTEMERROR;
		}
		done(c, crc);
	}
	dlist_push_tail(&spent, &m->link);
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
	dlist_push_tail(fired, &f->link);
}

static int
datalen(const char *data)
{
	return data ? strlen(data) : -1;
}

/* The length of a call's data: binary data has its own. */
static int
call_datalen(const ZkCall *c)
{
	return c->bytes > 0 ? c->bytes : datalen(c->data);
}

/* Send one call on its own; returns the client's rc. */
static int
send_call(ZkCall *c)
{
	const char *path = c->path;

	switch (c->r.type)
	{
		case ZKC_CREATE:
			return zoo_acreate2(zk_zh, path, c->data, call_datalen(c),
								zk_session_acl(), c->mode, string_stat_done, c);
		case ZKC_LIST:
			c->sent_at = GetCurrentTimestamp();
			if (c->watched)
				return zoo_awget_children(zk_zh, path, engine_watcher, NULL,
										  strings_done, c);
			return zoo_aget_children(zk_zh, path, 0, strings_done, c);
		case ZKC_GET:
			if (c->watched)
				return zoo_awget(zk_zh, path, engine_watcher, NULL, data_done, c);
			return zoo_aget(zk_zh, path, 0, data_done, c);
		case ZKC_EXISTS:
			if (c->watched)
				return zoo_awexists(zk_zh, path, engine_watcher, NULL,
									stat_done, c);
			return zoo_aexists(zk_zh, path, 0, stat_done, c);
		case ZKC_DELETE:
			if (c->r.tag == T_UNWATCH)
				return zoo_aremove_all_watches(zk_zh, path, c->mode, 0,
				/* the header's type is wrong: it takes the function itself */
											   (void_completion_t *) void_done, c);
			return zoo_adelete(zk_zh, path, c->version, void_done, c);
		case ZKC_SET:
			return zoo_aset(zk_zh, path, c->data, call_datalen(c), c->version,
							stat_done, c);
		case ZKC_SYNC:
			return zoo_async(zk_zh, path, string_done, c);
		case ZKC_MULTI:
			{
				/* its ops and results live until the answer */
				zoo_op_t   *mops;
				zoo_op_result_t *results;

				c->mem = MemoryContextAllocZero(engine_context,
												(sizeof(zoo_op_t) +
												 sizeof(zoo_op_result_t)) *
												c->nwrites);
				mops = c->mem;
				results = (zoo_op_result_t *) (mops + c->nwrites);
				for (int i = 0; i < c->nwrites; i++)
				{
					const ZkWrite *w = &c->writes[i];

					if (w->type == ZKC_CREATE)
						zoo_create_op_init(&mops[i], w->path, w->data,
										   datalen((char *) w->data),
										   zk_session_acl(), w->mode, NULL, 0);
					else if (w->type == ZKC_SET)
						zoo_set_op_init(&mops[i], w->path, w->data,
										datalen((char *) w->data), w->version,
										NULL);
					else
						zoo_delete_op_init(&mops[i], w->path, w->version);
				}
				return zoo_amulti(zk_zh, c->nwrites, mops, results,
								  call_multi_done, c);
			}
	}
	return ZBADARGUMENTS;
}

/* Note a request sent, or deliver the client's refusal to send it. */
static void
sent(ZkCall *c, int rc)
{
	if (rc == ZOK)
	{
		pg_atomic_fetch_add_u64(&zk_shared->n_zk_requests, 1);
		if (c->r.type == ZKC_CREATE || c->r.type == ZKC_SET ||
			c->r.type == ZKC_MULTI ||
			(c->r.type == ZKC_DELETE && c->r.tag != T_UNWATCH))
			c->part->wrote = true;
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
	dlist_push_tail(answered, &c->link);
}

/* Send calls[0..n-1] (n >= 2) as one multi transaction. */
static void
send_multi(ZkCall **calls, int n)
{
	ZkMulti    *m = MemoryContextAllocZero(engine_context, sizeof(ZkMulti));
	int			rc;

	m->n = n;
	m->calls = MemoryContextAlloc(engine_context, sizeof(ZkCall *) * n);
	m->ops = MemoryContextAllocZero(engine_context, sizeof(zoo_op_t) * (n + 1));
	m->results = MemoryContextAllocZero(engine_context,
										sizeof(zoo_op_result_t) * (n + 1));
	for (int i = 0; i < n; i++)
	{
		ZkCall	   *c = calls[i];

		m->calls[i] = c;
		if (c->r.type == ZKC_CREATE)
		{
			if (c->created == NULL)
				c->created = MemoryContextAllocZero(engine_context, ZK_PATH_MAX);
			zoo_create_op_init(&m->ops[i], c->path, c->data, datalen(c->data),
							   zk_session_acl(), c->mode, c->created,
							   ZK_PATH_MAX);
			m->clock = true;
		}
		else
			zoo_delete_op_init(&m->ops[i], c->path, c->version);
	}
	if (m->clock)
		zoo_set_op_init(&m->ops[n], clock_path, clock_data, datalen(clock_data),
						-1, &m->clock_stat);
	m->epoch = write_epoch;
	rc = zoo_amulti(zk_zh, n + (m->clock ? 1 : 0), m->ops, m->results,
					multi_done, m);
	if (rc == ZOK)
	{
		elog(DEBUG2, "zklock: sent a multi of %d writes", n);
		pg_atomic_fetch_add_u64(&zk_shared->n_zk_requests, 1);
		pg_atomic_fetch_add_u64(&zk_shared->n_zk_multis, 1);
		pg_atomic_fetch_add_u64(&zk_shared->n_zk_multi_writes, n);
		write_batches++;
		for (int i = 0; i < n; i++)
			calls[i]->part->wrote = true;
		return;
	}
	/* not sent: each call gets the client's refusal, as if sent alone */
	for (int i = 0; i < n; i++)
		sent(calls[i], rc);
	free_multi(m);
}

/*
 * Does batch[0..n-1] create a node in the parent of path?  Nodes created in
 * one multi share their czxid, so the lock family's fencing tokens could
 * not tell them apart: one create per parent and multi (sequential.c).
 */
static bool
creates_in_parent(ZkCall **batch, int n, const char *path)
{
	size_t		len = strrchr(path, '/') - path;

	for (int i = 0; i < n; i++)
		if (batch[i]->r.type == ZKC_CREATE &&
			strncmp(batch[i]->path, path, len + 1) == 0 &&
			strchr(batch[i]->path + len + 1, '/') == NULL)
			return true;
	return false;
}

/*
 * Send one call alone; a coalescible write counts as a batch in flight.  A
 * call of a part that started over since it was made (a lost session) is
 * not sent: its answer would be ignored.
 */
static void
send_alone(ZkCall *c)
{
	int			rc;

	dlist_delete(&c->link);
	noutbox--;
	if (c->gen != c->part->gen)
	{
		c->r.rc = ZCLOSING;
		dlist_push_tail(answered, &c->link);
		return;
	}
	if (c->batch)
	{
		c->clocked = true;
		c->epoch = write_epoch;
	}
	rc = send_call(c);
	if (rc == ZOK && c->clocked)
		write_batches++;
	else
		c->clocked = false;
	sent(c, rc);
}

/*
 * The multis answered since the last flush: say what became of them, and
 * free them.  One refused at the session node's write means the node is
 * gone (or refuses us): creates go alone until it is made again.
 */
void
zk_calls_reap_multis(void)
{
	while (!dlist_is_empty(&spent))
	{
		ZkMulti    *m = dlist_container(ZkMulti, link,
										dlist_pop_head_node(&spent));

		if (m->failed >= 0)
		{
			pg_atomic_fetch_add_u64(&zk_shared->n_zk_multis_refused, 1);
			elog(DEBUG1, "zklock: ZooKeeper refused a multi of %d writes: %s at its write %d; the others go again",
				 m->n, zerror(m->rc), m->failed + 1);
		}
		else if (m->rc != ZOK)
			elog(DEBUG1, "zklock: a multi of %d writes was not done: %s",
				 m->n, zerror(m->rc));
		if (m->failed == m->n)
		{
			/* the session node is gone or refuses us: creates go alone */
			elog(LOG, "zklock could not write its session node \"%s\": %s",
				 clock_path, zerror(m->results[m->n].err));
			clock_session = 0;
			clock_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 CLOCK_RETRY_MS);
		}
		free_multi(m);
	}
}

/*
 * Send the calls made in this turn; called when the turn ends, before the
 * socket is uncorked, so that they leave together (after
 * zk_calls_reap_multis, and the session node's create if due).
 *
 * The creates and deletes of the sequential protocol's nodes (every
 * backend's acquires and releases) are coalesced: while a batch of them is
 * in flight, the next ones wait for its answer, then go together, up to
 * zklock.write_batch of them in one multi transaction: one request, one
 * log entry, one fsync and one proposal to an ensemble's followers instead
 * of one each.  So batches grow with the load by themselves, and a lone
 * write is never delayed.  The calls a part made after a write that waits
 * wait with it (the listing after a create must follow it); the others go
 * at once, in the order they were made.  Taking a create or delete ahead
 * of calls made before it, or after it by other parts, is safe: they are
 * independent requests that the server could have received in either
 * order.
 */
void
zk_calls_flush(void)
{
	ZkCall	  **batch = NULL;
	int			nbatch = 0;
	Size		bytes = 0;
	bool		coalesce = zklock_write_batch > 1;
	dlist_mutable_iter it;

	nheld = 0;
	if (dlist_is_empty(&outbox))
		return;
	flush_count++;
	/* they leave together when the worker's turn ends (worker.c) */
	zk_session_cork(true);

	if (coalesce && write_batches >= MAX_WRITES_IN_FLIGHT && zk_connected())
	{
		/* hold the writes, and what their parts asked after them */
		dlist_foreach_modify(it, &outbox)
		{
			ZkCall	   *c = dlist_container(ZkCall, link, it.cur);

			if (c->batch || c->part->held_in_flush == flush_count)
			{
				c->part->held_in_flush = flush_count;
				nheld++;
			}
			else
				send_alone(c);
		}
		if (nheld > 0)
			elog(DEBUG2, "zklock: %d calls wait for an answer to the writes in flight",
				 nheld);
		return;
	}

	if (coalesce)
	{
		bool		clock = (clock_session != 0 && clock_session == zk_session());

		dlist_foreach_modify(it, &outbox)
		{
			ZkCall	   *c = dlist_container(ZkCall, link, it.cur);

			if (!c->batch || c->gen != c->part->gen ||
				(c->r.type == ZKC_CREATE &&
				 (!clock || creates_in_parent(batch, nbatch, c->path))))
				continue;
			bytes += strlen(c->path) + (c->data ? strlen(c->data) : 0) + 64;
			if (bytes > MAX_MULTI_BYTES)
				break;
			if (batch == NULL)
				batch = palloc(sizeof(ZkCall *) * zklock_write_batch);
			batch[nbatch++] = c;
			if (nbatch == zklock_write_batch)
				break;
		}
		if (nbatch >= 2)
		{
			for (int i = 0; i < nbatch; i++)
			{
				dlist_delete(&batch[i]->link);
				noutbox--;
			}
			send_multi(batch, nbatch);
		}
	}
	while (!dlist_is_empty(&outbox))
		send_alone(dlist_container(ZkCall, link, dlist_head_node(&outbox)));
	if (batch)
		pfree(batch);
}

/*
 * Drop the client's watch on path, on the client only: no request goes to
 * the server (see watches.c).
 */
void
zk_client_drop_watch(const char *path, bool children)
{
	if (zk_zh != NULL)
		(void) zoo_aremove_all_watches(zk_zh, path,
									   children ? ZWATCHTYPE_CHILD :
									   ZWATCHTYPE_DATA, 1, NULL, NULL);
}

/* Did the last flush hold back calls of part p (behind the writes in flight)? */
bool
zk_calls_held_back(const ZkPart *p)
{
	return nheld > 0 && p->held_in_flush == flush_count;
}

/* Are calls waiting that a flush would send now? */
bool
zk_calls_pending(void)
{
	return noutbox > nheld || (nheld > 0 && write_batches < MAX_WRITES_IN_FLIGHT);
}


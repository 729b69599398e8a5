/*-------------------------------------------------------------------------
 *
 * engine_internal.h
 *	  What the engine's files share, and nobody else sees: engine.c,
 *	  part.c, part_calls.c, calls.c, watches.c, sequential.c,
 *	  handoff.c, parents.c, instance.c.
 *
 * The worker loop and the drivers see the engine through engine.h.  The
 * names declared here are the engine's own and short; they are hidden, so
 * that none of them leaves zklock.so (PostgreSQL loads libraries into one
 * namespace of symbols).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_ENGINE_INTERNAL_H
#define ZKLOCK_ENGINE_INTERNAL_H

#include "lib/ilist.h"
#include "utils/hsearch.h"

#include "worker/engine/engine.h"

/*
 * List membership read from the list node (PostgreSQL 16 has these; 15
 * does not): a node is detached when it is on no list.  A part's links are
 * zeroed with it, so detached until pushed.
 */
#if PG_VERSION_NUM < 160000
static inline void
dlist_node_init(dlist_node *node)
{
	node->next = node->prev = NULL;
}

static inline void
dlist_delete_thoroughly(dlist_node *node)
{
	dlist_delete(node);
	dlist_node_init(node);
}

static inline bool
dlist_node_is_detached(const dlist_node *node)
{
	return node->next == NULL;
}
#endif

/* fencing token = czxid << TOKEN_SHIFT | grants before it on that node */
#define TOKEN_SHIFT			10
#define MAX_NODE_GRANTS		((1 << TOKEN_SHIFT) - 1)

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
#define T_CLOCK		(-13)		/* create of the session node (calls.c) */
#define T_DELCHECK	(-14)		/* exists of our node after a delete's
								 * reply was lost (fixed paths) */

/* The worker's view of one shared entry. */
typedef struct ZkOp
{
	uint32		generation;		/* of the entry this belongs to */
	ZkPart	   *part;			/* serving it, or NULL */
	dlist_node	link;			/* in part's holders or waiters */
	bool		holder;
	bool		queued_local;	/* shown as queued behind its part's node */
	ZkPart	   *leaving;		/* on that part's leaving list (link) */
	bool		freeing;		/* released: free the entry once settled */
} ZkOp;

/* A call made and not yet processed. */
typedef struct ZkCall
{
	dlist_node	link;			/* on the outbox until sent (calls.c), on
								 * the answered list once answered */
	ZkPart	   *part;
	uint32		gen;			/* the part's generation when sent */
	ZkResult	r;
	char	   *path;			/* what was asked (turn memory not needed) */
	bool		watched;		/* asks the server for a watch */
	bool		watch_set;		/* ... and the server set it */
	bool		own;			/* the data watch on our own node */
	bool		side;			/* the part's side watch */
	uint32		watch_epoch;	/* watched: watch_epoch when sent */
	TimestampTz sent_at;		/* a listing: when it was sent */

	/* what to send: the turn's calls leave together (zk_calls_flush) */
	char	   *data;			/* CREATE, SET, MULTI: data, or NULL */
	int			bytes;			/* CREATE, SET: the length of binary data
								 * (zk_call_*_bytes); 0: data is a string */
	int			mode;			/* CREATE: flags; T_UNWATCH: watch type */
	int			version;		/* DELETE, SET, MULTI: expected version */
	bool		batch;			/* may share a multi with other writes */
	char	   *created;		/* in a multi, CREATE: the path created */
	bool		clocked;		/* a batch of writes in flight by itself */
	uint32		epoch;			/* ... sent in that write epoch */
	ZkWrite    *writes;			/* MULTI: its writes (zk_call_multi) */
	int			nwrites;
	void	   *mem;			/* MULTI: its ops and results */
} ZkCall;

/* A watch that fired. */
typedef struct ZkFired
{
	dlist_node	link;
	bool		data;			/* spends the path's data watch */
	bool		children;		/* spends its children watch */
	char		path[FLEXIBLE_ARRAY_MEMBER];
} ZkFired;

/*
 * Registry of watches by path.  An entry's key owns a copy of the path,
 * sized to it (watches.c); a key to look one up points at the caller's.
 */
typedef struct ZkWatchKey
{
	const char *path;
	bool		children;
} ZkWatchKey;

typedef struct ZkWatch
{
	ZkWatchKey	key;
	dlist_head	parts;			/* parts relying on it (ZkPart.watch_link) */
	dlist_head	side_parts;		/* parts relying on it as their side watch
								 * (ZkPart.side_link; data watches only) */
	bool		at_client;		/* the client holds it (a call set it, and
								 * it has not fired, been removed or been
								 * dropped since): kept until then, wanted
								 * or not, so that forget_watches() finds
								 * it */
} ZkWatch;

/* Calls in flight that set a watch, by path (see remove_watch). */
typedef struct ZkWatchCalls
{
	ZkWatchKey	key;
	int			n;
} ZkWatchCalls;

/*
 * Parents: known to exist (a hint), when we last used them, and our parts
 * there (an entry stays while it has parts, whose parent path is its key).
 */
typedef struct ZkParent
{
	const char *path;			/* key: a copy of its own (parents.c) */
	bool		known;			/* created or seen to exist */
	TimestampTz used;			/* a node of ours was there */
	bool		suspect;		/* a create's outcome there was unknown */
	dlist_head	parts;			/* ZkPart.parent_link */
} ZkParent;

/* The open (accepting) part of a cohort recipe, by kind and name. */
typedef struct ZkOpenKey
{
	ZkKind		kind;
	const char *name;			/* in an entry: its part's name */
} ZkOpenKey;

typedef struct ZkOpen
{
	ZkOpenKey	key;
	ZkPart	   *part;
} ZkOpen;

#ifdef __GNUC__
#pragma GCC visibility push(hidden)
#endif

/* engine.c: the turn */
extern MemoryContext engine_context;
extern ZkOp *ops;
extern dlist_head parts;
extern TimestampTz answered_list_sent_at;

extern HTAB *engine_hash(const char *name, Size keysize, Size entrysize,
						 HashValueFunc hash, HashCompareFunc match);
extern const char *driver_suffix(const ZkDriver *d);

/* part.c: parts, their entries and outcomes, their life, advancing them */
extern void parts_init(void);
extern bool has_entries(ZkPart *p);
extern void fail_ask(int id, const char *why);
extern void report_lost(ZkEntry *e, const char *why);
extern void leave(ZkPart *p, ZkOp *op);
extern void settle_leaving(ZkPart *p);
extern void free_part(ZkPart *p);
extern void settle_busy(void);
extern void part_session_ended(ZkPart *p, const char *why);
extern void node_delete_result(ZkPart *p, const ZkResult *r);
extern void detach(int id);
extern void attach(ZkPart *p, int id);
extern void grant(ZkPart *p, ZkOp *op);
extern ZkPart *new_part(const ZkDriver *d, const char *name);
extern void forget_node(ZkPart *p);
extern void check_again(ZkPart *p);
extern void restart_instance_part(ZkPart *p, const char *why);
extern ZkOpen *open_entry(ZkKind kind, const char *name, HASHACTION action);
extern void open_set(ZkOpen *o, ZkPart *p);
extern void close_part(ZkPart *p);
extern void advance(ZkPart *p);

/* part_calls.c: the calls parts make, booked by the engine */
extern void queue_call(ZkCall *c);

/* calls.c: the I/O, a leaf: sends calls, hands back answers and fires */
extern void zk_calls_init(dlist_head *answered_list, dlist_head *fired_list);
extern ZkCall *new_call(ZkPart *p, ZkCallType type, int tag, const char *path);
extern void outbox_add(ZkCall *c);
extern void free_call(ZkCall *c);
extern void zk_calls_reap_multis(void);
extern bool zk_session_node_due(void);
extern const char *zk_session_node_creating(const char *data);
extern void zk_clock_answered(const ZkResult *r);
extern void zk_calls_flush(void);
extern void zk_calls_session_lost(void);
extern bool zk_calls_pending(void);
extern bool zk_calls_held_back(const ZkPart *p);
extern void zk_client_drop_watch(const char *path, bool children);

/* watches.c: the registry of watches */
extern HTAB *watches;
extern HTAB *watch_calls;
extern uint32 watch_epoch;

extern void watches_init(void);
extern int	count_watch_call(const char *path, bool children, int delta);
extern void watch_call_sent(ZkCall *c, bool children);
extern void watch(ZkPart *p, const char *path, bool children);
extern void remove_watch(const ZkWatchKey *key);
extern void unwatch(ZkPart *p);
extern void unwatch_ex(ZkPart *p, bool tell_server);
extern void side_watch(ZkPart *p, const char *path);
extern void side_unwatch(ZkPart *p);
extern void own_watch(ZkPart *p);
extern void own_unwatch(ZkPart *p);
extern void own_watch_set(ZkPart *p);
extern ZkPart *own_watch_fired(const char *path);
extern void own_watch_left_client(const char *path);
extern void own_watch_forget(ZkPart *p);
extern void own_watch_release(ZkPart *p);
extern void watch_at_client(const ZkWatchKey *key);
extern void watch_left_client(const ZkWatchKey *key);
extern void watch_spent(ZkWatch *w);
extern bool watch_wanted(const ZkWatchKey *key);
extern void forget_watches(void);
extern void watch_answered(ZkCall *c);
extern ZkPart *watch_fired_parts(ZkFired *f, dlist_head *woken,
								 dlist_head *side_woken);
extern void watch_taken(ZkPart *p);
extern void side_watch_taken(ZkPart *p);
extern void watches_gone(ZkPart *p);
extern void own_watch_undue(ZkPart *p);
extern TimestampTz own_watch_next_due(void);
extern void set_due_own_watches(void);

/* sequential.c: the sequential-node protocol */
extern void seq_create(ZkPart *p);
extern void seq_list(ZkPart *p);
extern void seq_result(ZkPart *p, const ZkResult *r);

/* handoff.c: local hand-off and retention */
extern bool overtakes(ZkPart *p, ZkOp *op);
extern void need_contention_watch(ZkPart *p);
extern void note_contenders(ZkPart *p, ZkNodeRef *nodes, int n, int self);
extern void cohort_update(ZkPart *p);
extern void expire_retained(void);
extern void unretain(ZkPart *p);
extern TimestampTz retained_until(void);

/* parents.c: the parents the instance uses */
extern HTAB *parents;

extern ZkParent *parent_entry(const char *path, bool create);
extern void parents_init(void);
extern void parts_at_add(ZkPart *p, const char *parent);
extern void parts_at_remove(ZkPart *p);
extern void parent_known(const char *path, bool known);
extern ZkPart *part_of_node(const char *path);

/* instance.c: the instance's own part and calls, the reconciler */
extern ZkPart *reconciler;
extern TimestampTz next_reconcile;
extern const ZkDriver instance_driver;

extern void reconcile(void);
extern void create_session_node(void);
extern void send_unwatch(const ZkWatchKey *key);

#ifdef __GNUC__
#pragma GCC visibility pop
#endif

#endif							/* ZKLOCK_ENGINE_INTERNAL_H */

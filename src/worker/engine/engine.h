/*-------------------------------------------------------------------------
 *
 * engine.h
 *	  The engine inside the worker, as the worker loop and the recipe
 *	  drivers (src/worker/recipes/) see it.
 *
 * Only the worker process includes this: it is the only code that talks
 * to ZooKeeper.  The engine is the files of src/worker/engine/, which its
 * README describes (what a driver may touch is listed there); what they
 * share beyond this is in engine_internal.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_ENGINE_H
#define ZKLOCK_ENGINE_H

#include <zookeeper/zookeeper.h>

#include "lib/ilist.h"
#include "lib/stringinfo.h"

#include "shared/nodename.h"
#include "shared/protocol.h"

/* ---- what the worker loop calls ---- */

extern void zk_engine_init(void);
extern void zk_engine_run(const int *ids, int n);
extern void zk_engine_connected(void);
extern void zk_engine_session_lost(const char *why);
extern void zk_engine_drop_watches(void);
extern void zk_engine_reload(void);
extern void zk_engine_exit(void);
extern long zk_engine_timeout(void);
extern bool zk_engine_pending(void);
extern void zk_engine_hop_sent(const int *ids, int n);
extern MemoryContext zk_turn_context;

/* ---- what drivers see ---- */

/* A completed call, copied out of the ZooKeeper client's memory. */
typedef enum ZkCallType
{
	ZKC_CREATE,
	ZKC_LIST,
	ZKC_GET,
	ZKC_EXISTS,
	ZKC_DELETE,
	ZKC_SET,
	ZKC_SYNC,
	ZKC_MULTI
} ZkCallType;

typedef struct ZkResult
{
	ZkCallType	type;
	int			tag;			/* the driver's tag of the call */
	int			rc;				/* ZooKeeper's return code */
	const char *path;			/* CREATE: path created; else the path asked */
	int			nchildren;		/* LIST */
	char	  **children;
	const char *data;			/* GET: NULL when the node has no data */
	int			datalen;
	bool		has_stat;		/* CREATE, GET, EXISTS, SET */
	struct Stat stat;
	int			op;				/* MULTI refused: the write ZooKeeper named
								 * (from 0), or -1 */
} ZkResult;

/* One write of a multi transaction (zk_call_multi). */
typedef struct ZkWrite
{
	ZkCallType	type;			/* ZKC_CREATE, ZKC_DELETE or ZKC_SET */
	const char *path;
	const char *data;			/* CREATE, SET: data, or NULL */
	int			version;		/* DELETE, SET: expected version (-1: any) */
	int			mode;			/* CREATE: ZOO_PERSISTENT, ZOO_EPHEMERAL */
} ZkWrite;

#define ZK_MULTI_MAX	4		/* writes in one zk_call_multi */

/* Where our node is in its life. */
typedef enum ZkNodePhase
{
	NODE_NONE = 0,				/* nothing created (yet, or any more) */
	NODE_CREATING,				/* create in flight */
	NODE_UNKNOWN,				/* create's reply lost: look for our prefix
								 * (or the node found by it) */
	NODE_EXISTS,				/* our node exists */
	NODE_DELETING				/* delete sent */
} ZkNodePhase;

/* Where a part is in its life (README: "A part's states"). */
typedef enum ZkPartLife
{
	PART_ACTIVE = 0,			/* serves its entries, or the instance */
	PART_DROPPING,				/* no longer needed: our node is deleted,
								 * then the part goes */
	PART_LAST_CALLS,			/* dropping, and the driver's dropped() has
								 * made its last calls */
	PART_DEAD					/* to be freed once no call refers to it */
} ZkPartLife;

/*
 * Where a sequential part is in the protocol of sequential.c (README:
 * "A part's states").  Each stage implies the ones before it were
 * passed: a part that holds was checked and has decided.
 */
typedef enum ZkSeqStage
{
	SEQ_CREATING = 0,			/* no node of this round yet */
	SEQ_CHECKING,				/* the driver's check (begin) has not passed */
	SEQ_UNDECIDED,				/* checked; decide() not asked yet */
	SEQ_WAITING,				/* decided: waits for what it watches */
	SEQ_HOLDING					/* our node holds the recipe */
} ZkSeqStage;

/*
 * Whether a part grants more (local hand-off; README: "A part's states").
 * It only moves down the list.
 */
typedef enum ZkPartOpen
{
	PART_OPEN = 0,				/* grants, and a cohort's new entries join */
	PART_CLOSED,				/* grants no more; goes once drained */
	PART_REVOKED				/* closed: our node holds Curator's
								 * revocation message */
} ZkPartOpen;

/* The watch a part relies on (watch_path; see watches.c). */
typedef enum ZkPartWatch
{
	PW_NONE = 0,				/* none */
	PW_DATA,					/* a data watch on watch_path */
	PW_CHILDREN,				/* a children watch on watch_path */
	PW_FIRED					/* none: it fired, and the part set none
								 * since */
} ZkPartWatch;

/*
 * The data watch on a holder's own node (drivers with "revocable"; see
 * watches.c): what the part relies on.
 */
typedef enum ZkOwnWatch
{
	OWN_NONE = 0,				/* none */
	OWN_DUE,					/* wanted later (on the due list) */
	OWN_PENDING,				/* the call that sets it is out */
	OWN_SET						/* the client holds it */
} ZkOwnWatch;

/* the leader's look for a group's leader (leader.c) */
typedef struct ZkLeaderFind
{
	bool		watched;		/* the last listing set a watch */
	int32		n;				/* participants the listing found */
} ZkLeaderFind;

/*
 * A driver's own state of a part (README: "A driver's state").  A driver
 * whose ZkDriver.state_size is not zero has its struct at ds's pointer
 * for that driver: the engine allocates it zeroed with the part and frees
 * it with the part (after the driver's freed(), which frees what the
 * struct points to).  A driver whose state fits in a pointer's room has
 * state_size 0 and keeps it in ds itself: the lock recipes and the leader
 * latch pay no allocation.
 */
typedef union ZkDriverState
{
	void	   *any;			/* the struct the engine allocated */
	struct BarrierState *barrier;	/* barrier.c */
	struct ClaimState *claim;	/* claim.c */
	struct DbState *dbarrier;	/* double_barrier.c */
	struct ZkListState *list;	/* listings: inspect.c, leader.c, claim.c */
	struct RevokeState *revoke; /* revoke.c */
	struct CountState *count;	/* shared_count.c */
	int			checked;		/* lock.c: the kinds check's listings that
								 * passed */
	int32		leases;			/* semaphore.c: the shared count's value */
	ZkLeaderFind observer;		/* leader.c: a group's observer */
} ZkDriverState;

typedef struct ZkPart ZkPart;
typedef struct ZkDriver ZkDriver;

/*
 * One participation of the instance in a recipe: at most one node of ours
 * in ZooKeeper, the entries of backends that wait for or hold what it
 * gives, and the state of the recipe's protocol.  For the lock recipes,
 * all entries of the instance for one lock share one part (local hand-off);
 * for the others a part serves one entry; the leader latch's parts serve
 * the instance itself.
 */
struct ZkPart
{
	/*
	 * The fields are ordered to leave little padding: the instance keeps a
	 * part per lock it holds.
	 */
	dlist_node	link;			/* all parts */
	const ZkDriver *driver;
	const char *name;			/* the recipe's name (lock, group, job): the
								 * end of parent, or a copy when the driver
								 * has a suffix (name_is_copy) */
	const char *parent;			/* path of our node's parent (the key of its
								 * entry among the parents, parents.c) */
	uint32		gen;			/* bumped when the part starts over */
	ZkPartLife	life;			/* zk_part_drop, free_part (part.c) */
	ZkSeqStage	stage;			/* sequential parts (sequential.c) */
	ZkOwnWatch	own;			/* the data watch on our own node (below) */

	/* our node */
	ZkNodePhase phase;
	int32		version;		/* of its data, as last seen */
	int64		czxid;
	int64		session_id;		/* the session it belongs to */
	char		node[ZK_NODE_MAX];	/* its name (last path component); a
									 * sequential node's protected prefix
									 * while its create is out or lost */
	bool		cohort;			/* shared by the instance's entries */
	bool		need_eval;		/* look again (list and decide; a step
								 * driver's step(p, NULL)) */
	bool		delete_unsure;	/* a delete of our node at a path not
								 * unique to us (ZK_FORM_NONE) may have
								 * been applied: look (czxid) before
								 * deleting again */
	bool		wrote;			/* a write of the part was sent: it may
								 * have been applied (calls.c) */
	int			inflight;		/* our calls awaiting completion, this gen */
	uint32		held_in_flush;	/* calls held back by that flush (calls.c) */
	int			calls;			/* all calls referring to this part */
	int			parent_tries;	/* parent re-creations, this request */
	int			parent_error;	/* ZooKeeper's refusal to create a parent */
	dlist_node	busy_link;		/* on the parts kept while their driver's
								 * busy() says so, or detached */
	dlist_node	parent_link;	/* among the parts under its parent */
	dlist_node	resume_link;	/* on the parts to resume after a
								 * reconnect, or detached */

	/* the entries it serves (ZkOp links), holders and waiters in order */
	dlist_head	holders;
	dlist_head	waiters;

	/*
	 * Entries done with the part (released, or a no-wait request that found
	 * the lock taken) while our node is still there for them: a release
	 * returns only once the node is deleted (see settle_leaving).
	 */
	dlist_head	leaving;
	int			nholders;

	/* local hand-off */
	int			grants;			/* grants on this node so far */
	int			local_grants;	/* grants while a remote contender waited */
	bool		own_stale;		/* the client holds a watch on our node
								 * that the part no longer relies on
								 * (below) */
	TimestampTz contended_since;	/* since when a remote contender may
									 * have waited (see note_contenders) */
	TimestampTz clear_at;		/* a listing sent then showed none */
	TimestampTz retain_until;	/* kept without holders until then */
	dlist_node	retain_link;	/* while so: on the retained parts */

	/*
	 * The data watch on our own node while it holds (driver "revocable"):
	 * not in the registry of watches (see watches.c)
	 */
	TimestampTz held_since;		/* when the part's node came to hold */
	dlist_node	own_link;		/* while own is PENDING or SET, or
								 * own_stale: on the own-watch parts */
	dlist_node	own_due_link;	/* while own is DUE: on the due parts */

	/* the watch this part relies on */
	char	   *watch_path;
	dlist_node	watch_link;

	/*
	 * A data watch, beside that one, on a node the driver's check (begin)
	 * reads while the part waits: a semaphore's shared count.  When it
	 * fires the check is made again before the part decides (watches.c).
	 */
	char	   *side_path;
	dlist_node	side_link;
	ZkPartWatch watch_state;	/* watch_path's watch, or none */

	int			group;			/* an instance part's leader group (index in
								 * zk_shared->groups), or -1 */

	/* the request's arguments (engine.c copies them from its entry) */
	int32		arg;			/* max_leases, members, what to list, ... */
	ZkPartOpen	open;			/* local hand-off: whether it grants more
								 * (here for the padding) */
	TimestampTz targ;			/* a job claim's slot, a count's seed */
	char	   *sarg;			/* a lease's shared count, or NULL */

	ZkDriverState ds;			/* the driver's own state (above) */
};

/*
 * What Curator's Revoker.attemptRevoke writes into a holder's node to ask
 * it to let go (LockInternals.REVOKE_MESSAGE), byte for byte.
 */
#define ZK_REVOKE_MESSAGE	"__REVOKE__"

/* decide(): our node holds, or watch the parent's children, or node i */
#define ZK_HOLDS			(-1)
#define ZK_WATCH_CHILDREN	(-2)

/*
 * What the sequential-node protocol (sequential.c, handoff.c) asks of the
 * driver of a sequential-node recipe (the lock family, leases, the leader
 * latch): the engine creates a protected ephemeral-sequential node, lists
 * the parent, orders the participants and asks decide(); watches what it
 * names; looks again when that changes.
 */
typedef struct ZkSequentialOps
{
	bool		shared;			/* several holders of one part at once */
	bool		watch_children; /* decide() may say ZK_WATCH_CHILDREN */
	bool		revocable;		/* holders watch their node (a data watch
								 * beside the part's watch): for
								 * __REVOKE__, and fired() hears when it
								 * changes or goes */
	bool		(*counts) (ZkForm form);	/* which nodes take part */
	int			(*decide) (ZkPart *p, ZkNodeRef *nodes, int n, int self);
	bool		(*blocks) (ZkForm ours, ZkForm theirs);	/* theirs waits for ours */
	void		(*begin) (ZkPart *p);	/* extra calls with the first create */
	/* if set: the listing of the parent after our create tells whether
	 * begin's check is needed at all (false: then begin runs) */
	bool		(*precheck) (ZkPart *p, const ZkResult *r);
} ZkSequentialOps;

/*
 * What the driver of a step recipe (form ZK_FORM_NONE: it drives its part
 * itself with the engine's calls, through step()) does besides.
 */
typedef struct ZkStepOps
{
	/* a backend asks for more on an entry it holds (ZkAsk) */
	void		(*ask) (ZkPart *p, int id, ZkAsk ask);

	/*
	 * The part is being dropped (its entries gone), our node is gone, and
	 * the session is connected: the driver sends its last calls, whose
	 * answers come to step() (zk_part_dropping() true); the part is freed, and
	 * its given-up entries answered, once they are answered.  Runs when
	 * has_last_calls() says there are some (a driver with dropped() has
	 * both); not when the session ends first (the engine then frees the
	 * part at once).  A step() that calls zk_part_last_calls_lost() (an
	 * answer lost with the connection) has them made again once connected.
	 */
	void		(*dropped) (ZkPart *p);
	bool		(*has_last_calls) (ZkPart *p);

	/*
	 * The driver still works in ZooKeeper on behalf of the part's entries
	 * that were given up (a job claim being reopened): while it says so,
	 * their releases wait and a dropped part is kept.  Asked again every
	 * turn; it must turn false by itself (done, or given up).
	 */
	bool		(*busy) (ZkPart *p);
} ZkStepOps;

/*
 * A recipe driver: what every driver has, then the operations of its
 * protocol (seq for sequential-node recipes, steps for step recipes).
 * A kind's driver is named in kindlist.h, which also says where its nodes
 * are (the suffix); a driver of parts of its own (the reconciler, a
 * leader group's observer, the job claims' index) has them under
 * <zklock.root>/<name>.
 */
struct ZkDriver
{
	ZkKind		kind;
	ZkForm		form;			/* form of our node; NONE: step() drives */
	bool		cohort;			/* entries of the instance share one part */
	Size		state_size;		/* of the struct at ZkPart.ds, or 0 */

	/* any recipe: results of the driver's own calls (tag > 0); for step
	 * recipes also (re)starts (r NULL) */
	void		(*step) (ZkPart *p, const ZkResult *r);

	/*
	 * Instance parts (group >= 0): the part lost its node and whatever it
	 * held (its session ended, or its node was deleted by someone else)
	 * and starts over; or, with failed set, it failed and is dropped: the
	 * driver must forget it.
	 */
	void		(*reset) (ZkPart *p, const char *why, bool failed);

	/* A watch the part relied on fired; it looks again next. */
	void		(*fired) (ZkPart *p);

	/* The part is freed: the driver forgets whatever refers to it. */
	void		(*freed) (ZkPart *p);

	/*
	 * Drivers that keep parts of the instance itself (the leader latch):
	 * the engine started, the configuration was reloaded, a turn ended, the
	 * worker is exiting.
	 */
	void		(*init) (void);
	void		(*reload) (void);
	void		(*run) (void);
	void		(*exit) (void);

	ZkSequentialOps seq;		/* form != ZK_FORM_NONE */
	ZkStepOps	steps;			/* form == ZK_FORM_NONE */
};

/* the drivers of the kinds (src/worker/recipes/) */
#define PG_ZK_KIND(symbol, name, label, suffix, wait, driver, failed) \
	extern const ZkDriver driver;
#include "shared/kindlist.h"
#undef PG_ZK_KIND

/* the lock family's order (worker/recipes/lock.c), for revocation and listings */
extern bool zk_lock_family_counts(ZkForm form);
extern bool zk_lock_family_holds(const ZkNodeRef *nodes, int n, int i);

/* job claims (worker/recipes/claim.c, claim_settle.c): listings, retention */
#define ZK_GROUP_CLAIMS		ZK_MAX_GROUPS	/* group of the claims' own part */
extern void zk_claim_list_step(ZkPart *p, const ZkResult *r);

/* a shared count's value as a read found it (worker/recipes/shared_count.c) */
extern bool zk_count_decode(ZkPart *p, const ZkResult *r, int32 seed,
							int32 *value);

/*
 * A listing's state (the list driver's, inspect.c, which hands the leader's
 * and the claims' listings to leader.c and claim.c).
 */
typedef struct ZkListState
{
	int			awaited;		/* answers awaited; -1: one was lost (it
								 * starts over once connected) */
	StringInfoData rows;		/* the rows being built (data NULL: none) */
	ZkLeaderFind find;			/* ZK_LIST_LEADER */
	struct PartNodes *nodes;	/* ZK_LIST_LOCK, ZK_LIST_SEMAPHORE */
} ZkListState;

extern StringInfo zk_list_rows(ZkPart *p);

/* the leader latch's finding of a group's leader, for listings */
extern void zk_leader_list_step(ZkPart *p, const ZkResult *r);

/* a part of the instance itself, serving no entry (the leader latch) */
extern ZkPart *zk_instance_part(const ZkDriver *d, const char *name, int group);

/* calls: the answer comes to the driver's step() with the tag */
extern void zk_call_create(ZkPart *p, int tag, const char *path,
						   const char *data, int mode, bool parents);
extern void zk_call_list(ZkPart *p, int tag, const char *path, bool watch);
extern void zk_call_get(ZkPart *p, int tag, const char *path, bool watch);
extern void zk_call_get_side(ZkPart *p, int tag, const char *path);
extern void zk_call_exists(ZkPart *p, int tag, const char *path);
extern void zk_call_exists_watch(ZkPart *p, int tag, const char *path);
extern void zk_call_delete(ZkPart *p, int tag, const char *path, int version);
extern void zk_call_set(ZkPart *p, int tag, const char *path,
						const char *data, int version);
extern void zk_call_create_bytes(ZkPart *p, int tag, const char *path,
								 const char *data, int len, int mode,
								 bool parents);
extern void zk_call_set_bytes(ZkPart *p, int tag, const char *path,
							  const char *data, int len, int version);
extern void zk_call_sync(ZkPart *p, int tag, const char *path);
extern void zk_call_multi(ZkPart *p, int tag, const char *path,
						  const ZkWrite *writes, int n);

/* outcomes */
extern int	zk_part_entry(ZkPart *p);
extern void zk_part_grant(ZkPart *p);
extern void zk_part_done(ZkPart *p, int64 result);
extern void zk_part_rows(ZkPart *p, StringInfo rows);
extern void zk_part_fail(ZkPart *p, int sqlerrcode, const char *fmt,...)
			pg_attribute_printf(3, 4);
extern void zk_part_would_block(ZkPart *p);
extern void zk_part_taken(ZkPart *p);
extern void zk_part_wait_on(ZkPart *p, const char *node);
extern void zk_part_node_created(ZkPart *p, const char *path,
								 const struct Stat *stat);
extern void zk_part_drop(ZkPart *p);
extern void zk_part_look_again(ZkPart *p);
extern void zk_engine_wake_at(ZkMono at);
extern bool zk_part_parent_gone(ZkPart *p);

/*
 * A part's state as drivers may see and change it (README: "What a driver
 * may touch").
 */
extern void zk_part_set_phase(ZkPart *p, ZkNodePhase phase);
extern void zk_part_checked(ZkPart *p);
extern void zk_part_unhold(ZkPart *p);
extern void zk_part_last_calls_lost(ZkPart *p);

/* Is the part no longer needed (its node to go, then the part)? */
static inline bool
zk_part_dropping(const ZkPart *p)
{
	return p->life != PART_ACTIVE;
}

/* Does the part's node hold the recipe (sequential parts)? */
static inline bool
zk_part_holds(const ZkPart *p)
{
	return p->stage == SEQ_HOLDING;
}

/*
 * Whether the part looks again at its next advance (a step driver's
 * step(p, NULL)): once connected, with none of its calls in flight.
 */
static inline void
zk_part_step_again(ZkPart *p, bool again)
{
	p->need_eval = again;
}

/* helpers */
extern bool zk_connected(void);
extern int64 zk_session(void);
extern char *zk_node_data(ZkPart *p);

#define ZK_NONCE_LEN	16		/* hex digits */
extern bool zk_nonce(char *buf);
extern const char *zk_node_of(const char *path);
extern int	zk_refusal_errcode(int rc);
extern bool zk_is_connection_loss(int rc);
extern bool zk_is_ours(const struct Stat *stat);
extern void zk_parents_gone(const char *path);
extern int	zk_list_participants(const ZkResult *r, bool (*counts) (ZkForm),
								 ZkNodeRef **nodes);

#endif							/* ZKLOCK_ENGINE_H */

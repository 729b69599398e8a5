/*-------------------------------------------------------------------------
 *
 * protocol.h
 *	  The shared-memory request protocol between backends and the worker.
 *
 * Every request of a backend (take a lock, join a barrier, claim a job
 * slot, list a lock's participants, ...) is one ZkEntry in a fixed pool in
 * shared memory (zklock.max_locks of them).  A backend takes a free entry,
 * fills in the request, queues it for the worker and sleeps on its latch;
 * the worker's engine carries it out, writes the outcome into the entry
 * and sets the backend's latch.  A granted entry stays the backend's
 * holding; the backend may "ask" something more of it (make a job claim
 * final, leave a double barrier) the same way.  To give an entry up
 * (release, cancel, timeout, exit) the backend sets "released" and queues
 * it again; from then on it belongs to the worker, which frees it (what
 * remains to be done in ZooKeeper, such as deleting a node, the engine
 * does on its own).
 *
 * The protocol knows nothing about recipes: "kind" selects an engine
 * driver, the rest are parameters and results.
 *
 * All fields are protected by ZkShared->lock, except those the comments
 * mark as fixed while the entry is in use.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_PROTOCOL_H
#define ZKLOCK_PROTOCOL_H

#include <time.h>

#include "lib/ilist.h"
#include "lib/stringinfo.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/dsm.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

#include "shared/zklock.h"

typedef enum ZkEntryState
{
	ZKE_FREE = 0,				/* on the free list */
	ZKE_PENDING,				/* asked for, not decided yet */
	ZKE_HELD,					/* granted: the backend holds it */
	ZKE_DONE,					/* a one-shot request finished: see result */
	ZKE_WOULD_BLOCK,			/* no-wait request found it taken */
	ZKE_FAILED,					/* could not be done: see errcode/errmsg */
	ZKE_LOST					/* its ZooKeeper session is gone (or revoked) */
} ZkEntryState;

/* What a backend can ask of an entry it holds. */
typedef enum ZkAsk
{
	ZK_ASK_NONE = 0,
	ZK_ASK_FINALIZE,			/* job claim: make it final (at COMMIT) */
	ZK_ASK_LEAVE,				/* double barrier: leave it */
	ZK_ASK_LEAVE_NOWAIT,		/* ... WOULD_BLOCK rather than wait */
	ZK_ASK_REOPEN,				/* job claim, given up with the entry
								 * (zk_give_up_asking): its transaction
								 * aborted */
	ZK_ASK_COMMITTED			/* ... its transaction committed */
} ZkAsk;

/*
 * The transaction of a job claim being made final (ZK_ASK_FINALIZE),
 * written by the owner before it asks: what identifies its outcome in the
 * instance's commit log (worker/recipes/claim_settle.c).  No xid on a standby.
 */
typedef struct ZkClaimXact
{
	bool		has_xid;
	uint64		xid;			/* FullTransactionId */
	uint32		timeline;		/* where its WAL was written ... */
	uint64		lsn;			/* ... and flushed to, with the xid */
} ZkClaimXact;

typedef enum ZkAskState
{
	ZK_ASK_IDLE = 0,
	ZK_ASK_PENDING,
	ZK_ASK_DONE,
	ZK_ASK_WOULD_BLOCK,			/* a no-wait ask would have to wait */
	ZK_ASK_FAILED				/* errcode/errmsg say why */
} ZkAskState;

/* flags of a request */
#define ZKR_NOWAIT		0x01	/* answer WOULD_BLOCK instead of waiting */
#define ZKR_NO_RESTART	0x02	/* on session loss while pending: LOST, not
								 * a fresh start (part of a composite) */
#define ZKR_REVOCABLE	0x04	/* revoked: signal the owner (SIGINT); the
								 * owner keeps it current (zk_entry_publish) */
#define ZKR_SETTLE		0x10	/* job claim: settle an unsettled claim by
								 * hand (arg: 1 committed, 0 reopen) */
#define ZKR_AT_MOST_ONCE 0x08	/* on session loss while pending: LOST once
								 * a write of it was sent (it may have been
								 * applied), else a fresh start */

/*
 * The steps of one hop, a request or the release of an entry, timed on the
 * monotonic clock when the requester has zklock.trace_hops on (the
 * setting is read once per request; with it off nothing below is read or
 * written).  The backend logs the differences when the hop returns
 * (backend/request.c); docs/benchmark.md, "Where a hop's time goes".
 */
typedef enum ZkHopStep
{
	ZK_HOP_QUEUED = 0,			/* the backend queued it (then sets the
								 * worker's latch) */
	ZK_HOP_WORKER_WOKE,			/* the worker's wait returned, in the turn
								 * that took it */
	ZK_HOP_TAKEN,				/* the worker took it off the queue */
	ZK_HOP_HANDED,				/* that turn's calls handed to the client */
	ZK_HOP_WRITTEN,				/* ... and pushed out of the socket */
	ZK_HOP_READ,				/* the replies that decided it were read */
	ZK_HOP_LATCH_SET,			/* the worker set the backend's latch */
	ZK_HOP_BACKEND_WOKE,		/* the backend's wait returned */
	ZK_HOP_RETURNED,			/* the backend returns */
	ZK_HOP_STEPS
} ZkHopStep;

typedef struct ZkEntry
{
	dlist_node	link;			/* free list or worker queue */
	dlist_node	used_link;		/* in use: on the used list (zk_locks) */
	bool		queued;			/* on the worker queue */
	ZkEntryState state;
	bool		released;		/* owner gave it up: the worker frees it */
	uint32		generation;		/* bumped at every allocation */

	/* fixed while in use: the request */
	int			owner_procno;	/* ProcGlobal->allProcs index of the requester */
	int			owner_pid;
	Oid			database;
	ZkKind		kind;
	int			flags;			/* ZKR_* (the owner may add ZKR_REVOCABLE) */
	int32		arg;			/* max_leases, members, what to list, ... */
	TimestampTz targ;			/* job claim: the slot */
	int64		expect_session; /* if not 0: LOST unless still this session */
	TimestampTz requested_at;
	TimestampTz taken_at;		/* the worker took the request (written by
								 * the worker) */
	int			connect_timeout;	/* zklock.connect_timeout of the requester */
	TimestampTz connect_deadline;	/* fail if no session by then */
	char		app[NAMEDATALEN];	/* application_name, for node data */
	char		name[ZK_NAME_MAX + 1];
	char		count[ZK_NAME_MAX + 1]; /* a semaphore lease: the shared count
										 * that sizes it, or "" */

	/* the owner's asks on a held entry */
	ZkAsk		ask;
	ZkAskState	ask_state;
	ZkClaimXact claim_xact;		/* with ZK_ASK_FINALIZE */

	/* written by the worker */
	int64		token;			/* fencing token, once granted */
	int64		session_id;		/* ZooKeeper session the grant belongs to */
	TimestampTz granted_at;
	int64		result;			/* one-shot requests: their answer */
	dsm_handle	rows;			/* listings: a DSM segment of rows, or 0 */
	bool		revoke_requested;	/* someone asked the holder to let go */
	bool		waited;			/* counted in n_waits (zk_set_node) */
	int			sqlerrcode;		/* for FAILED */
	char		errmsg[ZK_ERRMSG_MAX];
	char		node[ZK_NODE_MAX];	/* our node, once created */
	char		waiting_on[ZK_NODE_MAX];	/* node we wait for, if any */

	/* written by the owner, for the zk_locks view */
	int			session_count;	/* session-scope acquisitions */
	int			xact_count;		/* transaction-scope acquisitions */

	/* zklock.trace_hops: the current hop's steps (ZkHopStep), 0 if not yet */
	bool		trace;
	int64		hop[ZK_HOP_STEPS];
} ZkEntry;

/*
 * A reading of the monotonic clock (CLOCK_MONOTONIC), in microseconds.
 * Every duration that decides whether a session can be trusted (the time
 * of its last confirmation, the trust window, the worker's own timers) is
 * measured on it: a step of the wall clock (an administrator, NTP after a
 * long cut-off) moves neither it nor the durations, and every process of
 * the machine reads the same clock, so the worker's readings compare with
 * a backend's.  Only meaningful as differences; never shown to users
 * (TimestampTz is, for views and node data).
 */
typedef int64 ZkMono;

static inline ZkMono
zk_mono_now(void)
{
	struct timespec ts;

	(void) clock_gettime(CLOCK_MONOTONIC, &ts);
	return (ZkMono) ts.tv_sec * USECS_PER_SEC + ts.tv_nsec / 1000;
}

#define ZkMonoPlusMs(t, ms)	((t) + (int64) (ms) * 1000)

/* State of the worker's ZooKeeper session, as backends see it. */
typedef enum ZkSessionState
{
	ZKS_CONNECTING = 0,			/* no session yet, or a new one being made */
	ZKS_CONNECTED,
	ZKS_SUSPENDED,				/* disconnected; the session may still live */
	ZKS_LOST					/* expired or given up; a new one follows */
} ZkSessionState;

/* One leader group of zklock.leader_groups, as the worker publishes it. */
typedef struct ZkGroup
{
	bool		in_use;
	bool		leader;			/* this instance leads it ... */
	int64		session_id;		/* ... in this session */
	TimestampTz since;			/* leading since / leader known since */
	char		leader_node[ZK_NODE_MAX];
	char		leader_data[ZK_DATA_SHOWN];	/* who leads, as its node says */
	char		name[ZK_NAME_MAX + 1];
} ZkGroup;

typedef struct ZkShared
{
	LWLock	   *lock;
	Latch	   *worker_latch;	/* NULL while no worker runs */
	pid_t		worker_pid;
	ZkSessionState session_state;
	int64		session_id;
	int			session_timeout;	/* negotiated, in ms; 0 if none */
	ZkMono		confirmed_at;	/* monotonic; see worker/session.c */
	char		server[128];	/* host:port the session is connected to */
	char		last_error[ZK_ERRMSG_MAX];
	TimestampTz last_error_at;	/* when last_error was set */
	/* zklock.auth_file while it keeps the worker from connecting, or "" */
	char		auth_blocked[ZK_ERRMSG_MAX];
	/* connections keep being closed right after they are made (TLS?) */
	bool		closed_on_connect;

	/*
	 * Counters for zk_status() and zk_stats (monitor.c): cumulative since
	 * shared memory was set up or zk_stats_reset(), without a lock.
	 */
	pg_atomic_uint64 stats_reset;	/* TimestampTz of the last reset */
	pg_atomic_uint64 n_requests;
	pg_atomic_uint64 n_grants;
	pg_atomic_uint64 n_local_grants;
	pg_atomic_uint64 n_timeouts;
	pg_atomic_uint64 n_reconnects;
	pg_atomic_uint64 n_session_losses;
	pg_atomic_uint64 n_orphans;
	pg_atomic_uint64 n_waits;	/* requests that had to wait for another */
	pg_atomic_uint64 n_cancels; /* waits ended by cancel or a timeout GUC */
	pg_atomic_uint64 n_zk_requests; /* calls the engine sent to ZooKeeper */
	pg_atomic_uint64 n_zk_multis;	/* multis of coalesced writes sent */
	pg_atomic_uint64 n_zk_multi_writes; /* the writes in them */
	pg_atomic_uint64 n_zk_multis_refused;	/* multis ZooKeeper refused */
	pg_atomic_uint32 n_nodes;	/* znodes of ours the engine tracks */
	pg_atomic_uint32 n_watches;	/* watches it has set */

	ZkGroup		groups[ZK_MAX_GROUPS];

	dlist_head	free_entries;
	dlist_head	used_entries;	/* the others, so that zk_locks reads only
								 * those */
	ConditionVariable entry_freed;	/* signalled when an entry is freed */
	dlist_head	queue;			/* entries the worker must look at */
	int			num_entries;
	ZkEntry		entries[FLEXIBLE_ARRAY_MEMBER];
} ZkShared;

extern ZkShared *zk_shared;

/* shared memory set-up (protocol.c) */
extern void zk_shmem_request(void);
extern void zk_shmem_startup(void);

/* backend side (backend/request.c, backend/wait.c) */
typedef struct ZkRequest
{
	ZkKind		kind;
	const char *name;
	const char *count;			/* a semaphore lease: the shared count that
								 * sizes it, or NULL */
	int			flags;
	int32		arg;
	TimestampTz targ;
	int64		expect_session; /* LOST unless the worker's session is this */
} ZkRequest;

extern int	zk_request(const ZkRequest *req, uint32 *generation);
extern ZkEntryState zk_request_wait(const ZkRequest *req, TimestampTz deadline,
									 int64 *result);
extern TimestampTz zk_deadline(int64 timeout_ms);
extern ZkEntryState zk_wait(int id, uint32 generation, TimestampTz deadline);
extern void zk_ask(int id, uint32 generation, ZkAsk ask, TimestampTz deadline);
extern void zk_set_claim_xact(int id, uint32 generation,
							  const ZkClaimXact *xact);
extern ZkAskState zk_ask_wait(int id, uint32 generation, ZkAsk ask,
							  TimestampTz deadline);
extern void zk_give_up(int id, uint32 generation);
extern void zk_await_released(bool interruptible);
extern void zk_give_up_asking(int id, uint32 generation, ZkAsk ask);
extern bool zk_entry_valid(int id, uint32 generation, int64 *token);
extern int64 zk_entry_session(int id, uint32 generation);
extern ZkEntryState zk_entry_check(int id, uint32 generation, int64 *token);
extern ZkEntryState zk_wait_confirmed(int id, uint32 generation,
									  TimestampTz deadline);
extern void zk_count_timeout(void);
extern int64 zk_entry_result(int id, uint32 generation);
extern void zk_entry_publish(int id, uint32 generation, int session_count,
							 int xact_count, bool revocable);
extern bool zk_entry_revoke_requested(int id, uint32 generation);
extern void zk_wake_worker(void);
extern bool zk_trusted_session(int64 session_id);

/*
 * listings: rows the worker writes (zk_add_row, zk_rows_store, from
 * worker/reply.c) and a backend reads (zk_rows_load, from
 * backend/request.c) in a DSM segment; the format is protocol.c's
 */
typedef struct ZkRow
{
	int			ncols;
	const char *cols[ZK_ROW_MAX_COLS];	/* NULL for SQL NULL */
} ZkRow;

extern void zk_add_row(StringInfo rows, int ncols, const char *const *cols);
extern bool zk_rows_store(StringInfo rows, dsm_handle *handle, int32 *n);
extern int	zk_rows_load(dsm_handle handle, ZkRow **rows);
extern int	zk_read_rows(int id, uint32 generation, ZkRow **rows);
extern int	zk_list(const char *name, int what, ZkRow **rows);

/* worker side (worker/reply.c) */

/*
 * The times of the worker's current turn, for traced hops: its wait
 * returned, the replies read, the calls handed to the client.  Only
 * stamped once the worker has seen a traced request (zk_hop_tracing).
 */
typedef struct ZkHopTurn
{
	int64		woke;
	int64		read;
	int64		handed;
} ZkHopTurn;

extern bool zk_hop_tracing;
extern ZkHopTurn zk_hop_turn;
extern void zk_hop_sent(const int *ids, int n, int64 written);
extern void zk_defer_wakes(bool on);
extern int	zk_take_queue(int *ids, int max);
extern void zk_set_outcome(int id, ZkEntryState state, int sqlerrcode,
						   const char *fmt,...) pg_attribute_printf(4, 5);
extern void zk_set_grant(int id, int64 token, int64 session_id,
						 const char *node, bool local);
extern void zk_set_result(int id, int64 result);
extern void zk_set_rows(int id, StringInfo rows);
extern void zk_set_ask_outcome(int id, ZkAskState state, int sqlerrcode,
							   const char *fmt,...) pg_attribute_printf(4, 5);
extern void zk_set_node(int id, const char *node, const char *waiting_on);
extern int	zk_set_revoke_requested(int id);
extern void zk_free_entry(int id);
extern void zk_set_session_state(ZkSessionState state, int64 session_id,
								 int timeout, const char *server);
extern void zk_set_confirmed(int64 session_id, ZkMono at);
extern void zk_set_last_error(const char *fmt,...) pg_attribute_printf(1, 2);
extern void zk_set_auth_blocked(const char *file);
extern void zk_set_closed_on_connect(bool closed);

#define ZK_ENTRY(id) (&zk_shared->entries[(id)])

#endif							/* ZKLOCK_PROTOCOL_H */

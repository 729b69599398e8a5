/*-------------------------------------------------------------------------
 *
 * protocol.h
 *	  The shared-memory request protocol between backends and the worker.
 *
 * Every participation of a backend in a recipe (one znode: a held lock, a
 * waiter, a release in progress) is one ZkEntry in a fixed pool in shared
 * memory (zklock.max_locks of them).  A backend takes a free entry, fills
 * in the request, queues it for the worker and sleeps on its latch; the
 * worker drives the recipe, writes the outcome into the entry and sets the
 * backend's latch.  To give an entry up (release, cancel, timeout, exit)
 * the backend sets "released" and queues it again; from then on the entry
 * belongs to the worker, which deletes the znode (retrying across
 * reconnects) and returns the entry to the free list.
 *
 * All fields are protected by ZkShared->lock, except those the comments
 * mark as fixed while the entry is in use.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_PROTOCOL_H
#define ZKLOCK_PROTOCOL_H

#include "lib/ilist.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

#include "zklock.h"

typedef enum ZkEntryState
{
	ZKE_FREE = 0,				/* on the free list */
	ZKE_PENDING,				/* asked for, not granted yet */
	ZKE_HELD,					/* granted: the backend holds it */
	ZKE_WOULD_BLOCK,			/* no-wait request found it taken */
	ZKE_FAILED,					/* could not be granted: see errcode/errmsg */
	ZKE_LOST					/* was held, but its session is gone */
} ZkEntryState;

typedef struct ZkEntry
{
	dlist_node	link;			/* free list or worker queue */
	bool		queued;			/* on the worker queue */
	ZkEntryState state;
	bool		released;		/* owner gave it up: the worker cleans up */
	uint32		generation;		/* bumped at every allocation */

	/* fixed while in use: the request */
	int			owner_procno;	/* pgprocno of the requesting backend */
	int			owner_pid;
	Oid			database;
	ZkKind		kind;
	bool		nowait;			/* fail with WOULD_BLOCK instead of waiting */
	int32		max_leases;		/* semaphore: leases allowed at once */
	char		skip_node[ZK_NODE_MAX]; /* a node of ours not to wait for */
	TimestampTz requested_at;
	int			connect_timeout;	/* zklock.connect_timeout of the requester */
	TimestampTz connect_deadline;	/* fail if no session by then */
	char		name[ZK_NAME_MAX + 1];

	/* written by the worker */
	int64		token;			/* czxid of our node, once granted */
	TimestampTz granted_at;
	int			sqlerrcode;		/* for FAILED */
	char		errmsg[ZK_ERRMSG_MAX];
	char		node[ZK_NODE_MAX];	/* our child node, once created */
	char		waiting_on[ZK_NODE_MAX];	/* node we wait for, if any */

	/* written by the owner, for the zk_locks view */
	int			session_count;	/* session-scope acquisitions */
	int			xact_count;		/* transaction-scope acquisitions */
} ZkEntry;

/* State of the worker's ZooKeeper session, as backends see it. */
typedef enum ZkSessionState
{
	ZKS_CONNECTING = 0,			/* no session yet, or a new one being made */
	ZKS_CONNECTED,
	ZKS_SUSPENDED,				/* disconnected; the session may still live */
	ZKS_LOST					/* expired or given up; a new one follows */
} ZkSessionState;

typedef struct ZkShared
{
	LWLock	   *lock;
	Latch	   *worker_latch;	/* NULL while no worker runs */
	pid_t		worker_pid;
	ZkSessionState session_state;
	int64		session_id;
	int			session_timeout;	/* negotiated, in ms; 0 if none */
	pg_atomic_uint64 confirmed_at;	/* see session.c; written by the worker */
	char		server[128];	/* host:port the session is connected to */
	char		last_error[ZK_ERRMSG_MAX];

	/* counters for zk_status() */
	pg_atomic_uint64 n_requests;
	pg_atomic_uint64 n_grants;
	pg_atomic_uint64 n_timeouts;
	pg_atomic_uint64 n_reconnects;
	pg_atomic_uint64 n_session_losses;
	dlist_head	free_entries;
	ConditionVariable entry_freed;	/* signalled when an entry is freed */
	dlist_head	queue;			/* entries the worker must look at */
	int			num_entries;
	ZkEntry		entries[FLEXIBLE_ARRAY_MEMBER];
} ZkShared;

extern ZkShared *zk_shared;

/* shared memory set-up (protocol.c) */
extern void zk_shmem_request(void);
extern void zk_shmem_startup(void);

/* backend side (protocol.c) */
extern int	zk_request(ZkKind kind, const char *name, bool nowait,
					   int32 max_leases, const char *skip_node,
					   uint32 *generation);
extern void zk_entry_node(int id, char *node);
extern void zk_entry_set_counts(int id, uint32 generation, int session_count,
								int xact_count);
extern ZkEntryState zk_wait(int id, uint32 generation, TimestampTz deadline);
extern void zk_give_up(int id, uint32 generation);
extern ZkEntryState zk_entry_state(int id, uint32 generation, int64 *token);
extern void zk_wake_worker(void);
extern bool zk_session_trusted(void);

/* worker side (protocol.c) */
extern int	zk_take_queue(int *ids, int max);
extern void zk_set_outcome(int id, ZkEntryState state, int sqlerrcode,
						   const char *fmt,...) pg_attribute_printf(4, 5);
extern void zk_free_entry(int id);
extern void zk_set_session_state(ZkSessionState state, int64 session_id,
								 int timeout, const char *server);
extern void zk_set_last_error(const char *fmt,...) pg_attribute_printf(1, 2);
extern void zk_set_waiting_on(int id, const char *node);

#define ZK_ENTRY(id) (&zk_shared->entries[(id)])

#endif							/* ZKLOCK_PROTOCOL_H */

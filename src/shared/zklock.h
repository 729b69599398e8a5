/*-------------------------------------------------------------------------
 *
 * zklock.h
 *	  The ground every part of zklock stands on: limits, kinds of request,
 *	  settings, names.
 *
 * zklock lets SQL sessions take part in Apache ZooKeeper recipes (locks,
 * read-write locks, semaphores, barriers, leader election, job claims),
 * byte-compatible with Apache Curator.  It is two programs that meet in
 * shared memory: SQL functions running in backends, and one background
 * worker per instance that owns the ZooKeeper session.  Backends post
 * requests into shared memory and sleep on their latch until the worker
 * reports the outcome.  The directories of src/ say which process runs
 * the code; backend/ and worker/ depend on shared/ only, never on each
 * other, and shared/ on neither:
 *
 *	zklock.c		module entry: settings, hooks, worker registration
 *
 *	shared/			the boundary, used by both sides
 *	  zklock.h		limits, kinds, settings, names (this file)
 *	  settings.c	the zklock.* settings
 *	  kindlist.h	kinds of request: every fact of a kind, in one list
 *	  kinds.c		kinds of request: their names, where their nodes are
 *	  protocol.c	the shared-memory request protocol: the pool of
 *					entries, the rows of a listing
 *	  naming.c		names: what a name may be
 *	  paths.c		znode paths of names, slot names of job claims
 *	  nodename.c	child node names: forms, sequence order (plain C)
 *
 *	backend/		what a backend runs
 *	  args.c		SQL arguments: names, timeouts
 *	  lock.c		SQL side of locks, read-write locks, semaphores, the
 *					multi-lock and revocation
 *	  barrier.c, double_barrier.c, leader.c, claim.c
 *					SQL sides of the other recipes (claim.c: and the
 *					transaction's job claims)
 *	  monitor.c		what a DBA sees: views, status, participants
 *	  holdings.c	a backend's own bookkeeping: scopes, transactions
 *	  acquire.c		acquiring: re-entrancy, composite recipes
 *	  request.c		its side of the request protocol: requests,
 *					give-ups, what "held" means
 *	  wait.c		its waits for the worker
 *
 *	worker/			what the worker runs
 *	  worker.c		the background worker's wait loop
 *	  reply.c		the worker's side of the request protocol: outcomes
 *	  session.c		the ZooKeeper session: connect, confirm, lose, recover
 *	  credentials.c	zklock.auth_file's credentials, the ACL of our nodes
 *	  client_log.c	the ZooKeeper client's log lines
 *	  engine/		the engine: what the worker does with requests
 *	    README		how the engine works: structures, states, who writes what
 *	    engine.c	the turn: requests, answers and fires, session events
 *	    part.c		parts: their entries, outcomes, life, advance()
 *	    part_calls.c	the calls parts make, booked before they go out
 *	    calls.c		the I/O: calls sent to ZooKeeper, answers, the watcher
 *	    watches.c	the registry of watches
 *	    sequential.c	the sequential-node protocol all lock recipes share
 *	    handoff.c	local hand-off between the instance's backends, retention
 *	    parents.c	the parents the instance uses
 *	    instance.c	the instance's own calls: reconciler, session node,
 *					removal of watches
 *	    engine.h	the engine as the worker loop and the drivers see it
 *	    engine_internal.h	what the engine's files share
 *	  recipes/		the drivers: what each recipe names its node and how it
 *					decides (lock.c, semaphore.c, leader.c, barrier.c,
 *					double_barrier.c, claim.c, revoke.c, inspect.c)
 *
 * A recipe is a pair: its SQL side backend/<recipe>.c and its driver
 * worker/recipes/<recipe>.c (lock, barrier, double_barrier, leader,
 * claim).  The drivers of the semaphore and of revocation pair with
 * backend/lock.c; the listings' driver (inspect.c) serves backend/monitor.c,
 * and the listings of backend/leader.c and backend/claim.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_H
#define ZKLOCK_H

#include "datatype/timestamp.h"
#include "utils/guc.h"

/*
 * Upper limit of zklock.max_locks: every allocation that scales with it
 * (the shared entries, the copy zk_locks makes of them) stays far below
 * PostgreSQL's 1 GB allocation limit.
 */
/*
 * The version of this build of the library, "X.Y.Z": the Makefile passes the
 * "version" of META.json, whose X.Y is zklock.control's default_version
 * (test/t/006_versions.pl checks that they and debian/changelog agree).
 */
#ifndef ZKLOCK_VERSION
#error "ZKLOCK_VERSION is not defined: build zklock with its Makefile"
#endif

#define ZK_MAX_LOCKS_LIMIT	100000
/* Longest name accepted, in bytes (documented in README.md). */
#define ZK_NAME_MAX			1024
/* Longest zklock.root accepted, in bytes. */
#define ZK_ROOT_MAX			256
/* Longest child node name we create or remember. */
#define ZK_NODE_MAX			80
/* Longest znode path we ever build. */
#define ZK_PATH_MAX			(ZK_ROOT_MAX + ZK_NAME_MAX + 32 + ZK_NODE_MAX)
/*
 * The first segment no name may have: <zklock.root>/zklock.instances holds
 * the session node of each instance's worker (worker/engine/calls.c).
 */
#define ZK_INSTANCES_DIR	"zklock.instances"
/* Room for an error message reported by the worker. */
#define ZK_ERRMSG_MAX		256
/* How much of a node's data (who created it) shared memory keeps. */
#define ZK_DATA_SHOWN		256
/* Leader groups an instance can take part in (zklock.leader_groups). */
#define ZK_MAX_GROUPS		32
/* Columns of a listing row handed from the worker to a backend. */
#define ZK_ROW_MAX_COLS		8

/* settings (settings.c) */
extern char *zklock_hosts;
extern char *zklock_root;
extern char *zklock_auth_file;
extern char *zklock_acl_identities;
extern int	zklock_session_timeout;
extern int	zklock_connect_timeout;
extern int	zklock_max_locks;
extern bool zklock_local_handoff;
extern int	zklock_handoff_limit;
extern int	zklock_handoff_time;
extern int	zklock_retain_time;
extern int	zklock_write_batch;
extern char *zklock_leader_groups;
extern int	zklock_claim_retention;
extern bool zklock_session_locks;
extern char *zklock_allowed_names;
extern bool zklock_trace_hops;

extern void zk_define_settings(void);

/*
 * zklock.acl_identities, parsed: the ZooKeeper identities (scheme and id)
 * given all rights on every node the worker creates.
 */
typedef struct ZkAclIdentity
{
	const char *scheme;			/* "x509" or "digest" */
	const char *id;
} ZkAclIdentity;

typedef struct ZkAclIdentities
{
	int			count;
	ZkAclIdentity ids[FLEXIBLE_ARRAY_MEMBER];
} ZkAclIdentities;

extern const ZkAclIdentities *zk_acl_identities(void);

/*
 * What a backend can ask for.  Each kind is one driver of the engine
 * (src/worker/recipes/); the protocol carries it without knowing what it
 * means.  Every fact of a kind is in kindlist.h.
 */
#define PG_ZK_KIND(symbol, name, label, suffix, wait, driver, failed) symbol,

typedef enum ZkKind
{
#include "shared/kindlist.h"
	ZK_NUM_KINDS
} ZkKind;

#undef PG_ZK_KIND

/* What a ZK_KIND_LIST request lists (its arg). */
typedef enum ZkListWhat
{
	ZK_LIST_LOCK = 0,			/* nodes of <name>: lock, read, write */
	ZK_LIST_SEMAPHORE,			/* leases and entry mutex of a semaphore */
	ZK_LIST_LEADER,				/* latch nodes of a leader group */
	ZK_LIST_CLAIMS				/* claims of a job */
} ZkListWhat;

/*
 * Where a request's node is: under <zklock.root>/<name><suffix>, the suffix
 * of its kind (kindlist.h, zk_kind_suffix), as in Curator's layout.
 */
#define ZK_SUFFIX_LEASES	"/leases"	/* a semaphore's leases */
#define ZK_SUFFIX_LOCKS		"/locks"	/* a semaphore's entry mutex */
#define ZK_SUFFIX_CLAIMS	"/claims"	/* a job's claims */

/* kinds.c */
extern const char *zk_kind_name(ZkKind kind);
extern const char *zk_kind_failed(ZkKind kind);
extern const char *zk_kind_suffix(ZkKind kind);

/* What a waiting process shows in pg_stat_activity (wait_events.c). */
typedef enum ZkWaitEvent
{
	ZK_WAIT_LOCK = 0,
	ZK_WAIT_READ,
	ZK_WAIT_WRITE,
	ZK_WAIT_SEMAPHORE,
	ZK_WAIT_BARRIER,
	ZK_WAIT_DOUBLE_BARRIER,
	ZK_WAIT_JOB_CLAIM,
	ZK_WAIT_REVOKE,
	ZK_WAIT_LIST,
	ZK_WAIT_SHARED_COUNT,
	ZK_WAIT_RELEASE,			/* a release waiting for its deletes */
	ZK_WAIT_WORKER,				/* the worker's loop */
	ZK_NUM_WAIT_EVENTS
} ZkWaitEvent;

/* wait_events.c */
extern void zk_register_wait_events(void);
extern uint32 zk_wait_event(ZkWaitEvent which);
extern ZkWaitEvent zk_kind_wait_event(ZkKind kind);

/* naming.c */
extern void zk_check_name(const char *name, const char *what);
extern bool zk_check_root(char **newval, void **extra, GucSource source);
extern bool zk_check_groups(char **newval, void **extra, GucSource source);
extern bool zk_check_patterns(char **newval, void **extra, GucSource source);

/* paths.c */
extern int	zk_path(char *buf, size_t size, const char *name, const char *suffix);
extern char *zk_slot_name(TimestampTz slot);
extern bool zk_parse_slot_name(const char *s, TimestampTz *slot);

#endif							/* ZKLOCK_H */

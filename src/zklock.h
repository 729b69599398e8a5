/*-------------------------------------------------------------------------
 *
 * zklock.h
 *	  Declarations shared by every part of zklock.
 *
 * zklock lets SQL sessions take distributed locks held in Apache ZooKeeper.
 * One background worker per instance owns the ZooKeeper session; backends
 * post requests into shared memory and sleep on their latch until the worker
 * reports the outcome.  The files of src/ are the rooms of that house:
 *
 *	zklock.c	module entry: settings, hooks, worker registration
 *	sqlfuncs.c	the SQL-callable functions
 *	holdings.c	backend-local bookkeeping: re-entrancy, scopes, transactions
 *	protocol.c	the shared-memory request protocol between backends and worker
 *	worker.c	the background worker's wait loop
 *	session.c	the ZooKeeper session: connect, states, recovery
 *	recipe.c	the lock engine and its recipe drivers (Curator's recipes)
 *	naming.c	lock names: validation, znode paths, protected node names
 *	monitor.c	what a DBA sees: the zk_locks view and zk_status()
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_H
#define ZKLOCK_H

#include "datatype/timestamp.h"
#include "utils/guc.h"

/* Longest lock name accepted, in bytes (documented in README.md). */
#define ZK_NAME_MAX			1024
/* Longest zklock.root accepted, in bytes. */
#define ZK_ROOT_MAX			256
/* Longest child node name we create or remember ("_c_<uuid>-__WRIT__<seq>"). */
#define ZK_NODE_MAX			64
/* Longest znode path we ever build. */
#define ZK_PATH_MAX			(ZK_ROOT_MAX + ZK_NAME_MAX + 16 + ZK_NODE_MAX)
/* Room for an error message reported by the worker. */
#define ZK_ERRMSG_MAX		256

/* settings (zklock.c) */
extern char *zklock_hosts;
extern char *zklock_root;
extern char *zklock_auth;
extern int	zklock_session_timeout;
extern int	zklock_connect_timeout;
extern int	zklock_max_locks;

/*
 * What a backend can hold.  A kind is what SQL sees; each maps to one recipe
 * driver of the engine (recipe.c).
 */
typedef enum ZkKind
{
	ZK_KIND_LOCK = 0,			/* exclusive lock (Curator InterProcessMutex) */
	ZK_KIND_READ,				/* shared side of InterProcessReadWriteLock */
	ZK_KIND_WRITE,				/* exclusive side of InterProcessReadWriteLock */
	ZK_KIND_SEMAPHORE,			/* a lease of InterProcessSemaphoreV2 */
	ZK_KIND_SEMAPHORE_ENTRY,	/* the semaphore's entry mutex (<name>/locks) */
	ZK_NUM_KINDS
} ZkKind;

extern const char *zk_kind_name(ZkKind kind);

/* recipe.c: the parent of a kind's nodes is <root>/<name><suffix> */
extern const char *zk_kind_suffix(ZkKind kind);

/* naming.c */
extern void zk_check_name(const char *name);
extern bool zk_check_root(char **newval, void **extra, GucSource source);
extern int	zk_parent_path(char *buf, size_t size, const char *name,
						   const char *suffix);
extern void zk_new_protected_prefix(char *buf, size_t size);
extern int	zk_compare_children(const char *a, const char *b);
extern bool zk_is_lock_node(const char *name);

/* zklock.c */
extern void zk_check_preloaded(void);

#endif							/* ZKLOCK_H */

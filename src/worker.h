/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  Interfaces inside the background worker: its loop (worker.c), the
 *	  ZooKeeper session (session.c) and the lock engine (recipe.c).
 *
 * Only the worker process includes this: it is the only code that talks
 * to ZooKeeper.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_WORKER_H
#define ZKLOCK_WORKER_H

#include <zookeeper/zookeeper.h>

/* worker.c */
extern PGDLLEXPORT void zk_worker_main(Datum arg);

/* session.c */
extern zhandle_t *zk_zh;
extern bool zk_session_connected(void);
extern void zk_session_start(void);
extern void zk_session_wait(void);
extern void zk_session_stop(void);
extern void zk_session_reload(void);
extern struct ACL_vector *zk_session_acl(void);

/* recipe.c: the engine, driven by the worker loop and the session */
extern void zk_engine_init(void);
extern void zk_engine_advance(int id);
extern void zk_engine_connected(void);
extern void zk_engine_session_lost(const char *why);

#endif							/* ZKLOCK_WORKER_H */

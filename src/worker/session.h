/*-------------------------------------------------------------------------
 *
 * session.h
 *	  The worker's ZooKeeper session (session.c), as the worker loop and
 *	  the engine see it.
 *
 * Only the worker process includes this.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_SESSION_H
#define ZKLOCK_SESSION_H

#include <zookeeper/zookeeper.h>

/* What happened to the session during one zk_session_wait() (flags). */
#define ZK_EVENT_LOST		0x01	/* the session is gone: see *why */
#define ZK_EVENT_CONNECTED	0x02	/* (re)connected: the engine may send */

extern zhandle_t *zk_zh;

/*
 * Called by zk_session_wait() whenever the client is not connected, before
 * it may connect again (the engine drops the client's watches: see
 * engine/watches.c).
 */
extern void (*zk_session_disconnected_hook) (void);

extern bool zk_session_connected(void);
extern int64 zk_session_id(void);
/* the ACL of the nodes we create (credentials.c) */
extern struct ACL_vector *zk_session_acl(void);

extern void zk_session_start(void);
extern int	zk_session_wait(long timeout_ms, const char **why);
extern int	zk_session_reload(const char **why);
extern bool zk_session_stop(void);
extern void zk_session_cork(bool on);

#endif							/* ZKLOCK_SESSION_H */

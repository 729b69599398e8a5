/*-------------------------------------------------------------------------
 *
 * session_internal.h
 *	  What session.c uses of credentials.c (the worker's credentials) and
 *	  client_log.c (the client's log lines); the ACL of our nodes is
 *	  zk_session_acl (session.h).
 *
 * Only the worker process includes this.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_SESSION_INTERNAL_H
#define ZKLOCK_SESSION_INTERNAL_H

#include <zookeeper/zookeeper.h>

/* credentials.c */
extern bool zk_credentials_load(void);
extern void zk_credentials_present(zhandle_t *zh);
extern void zk_credentials_check_refused(void);
extern const char *zk_credentials_changed(void);

/* client_log.c */
extern void zk_client_log(const char *message);
extern void zk_client_log_connected(void);

#endif							/* ZKLOCK_SESSION_INTERNAL_H */

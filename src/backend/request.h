/*-------------------------------------------------------------------------
 *
 * request.h
 *	  What the backend's side of the request protocol shares between
 *	  request.c and wait.c; the rest of the backend uses shared/protocol.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_REQUEST_H
#define ZKLOCK_REQUEST_H

#include "shared/protocol.h"

/* zklock.trace_hops: when this backend's last wait returned */
extern ZkMono zk_hop_woke;

/* caller holds zk_shared->lock exclusively */
extern void zk_queue_locked(ZkEntry *e);
extern void zk_release_locked(ZkEntry *e);

/* caller holds zk_shared->lock */
extern bool zk_trusted_locked(int64 session_id);

extern void zk_hop_log(int id, uint32 generation, const char *what);

#endif							/* ZKLOCK_REQUEST_H */

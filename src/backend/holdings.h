/*-------------------------------------------------------------------------
 *
 * holdings.h
 *	  A backend's own view of what it holds (holdings.c; double barrier
 *	  memberships: double_barrier.c; job claims: claim.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_HOLDINGS_H
#define ZKLOCK_HOLDINGS_H

#include "shared/protocol.h"
#include "shared/zklock.h"

/* No timeout: wait until granted (or cancelled). */
#define ZK_WAIT_FOREVER (-1)

extern bool zk_hold_acquire(ZkKind kind, const char *name, bool xact,
							int64 timeout_ms, int32 max_leases,
							bool revocable);
extern bool zk_hold_revocation_requested(const char *name);
extern bool zk_hold_acquire_leases(const char *name, const char *count,
								   bool xact, int64 timeout_ms,
								   int32 max_leases, int32 qty,
								   const char *instead);
/* a shared count's value, failing when absent (shared_count.c) */
extern int32 zk_shared_count_value(const char *name, TimestampTz deadline);
extern bool zk_hold_acquire_all(char **names, int n, bool xact,
								int64 timeout_ms);
extern bool zk_hold_release(ZkKind kind, const char *name);
extern void zk_hold_release_last(ZkKind kind, const char *name);
extern int	zk_hold_release_all(void);
extern bool zk_hold_is_held(ZkKind kind, const char *name, int64 *token);
extern void zk_holdings_register_callbacks(void);
extern void zk_holdings_init(void);
/* job claims of the transaction (claim.c) */
extern bool zk_hold_claim(const char *job, TimestampTz slot,
						  int64 timeout_ms);
extern void zk_claims_finalize(void);
extern void zk_claims_check_prepare(void);
extern void zk_claims_release(SubTransactionId from, bool aborted);
extern void zk_claims_subcommit(SubTransactionId mySubid,
								SubTransactionId parentSubid);
/* double barrier memberships (double_barrier.c) */
extern bool zk_hold_barrier_enter(const char *name, int32 members,
								  int64 timeout_ms);
extern bool zk_hold_barrier_leave(const char *name, int64 timeout_ms);
extern void zk_hold_barrier_drop_all(void);

/*
 * One node, asked for and waited for (holdings.c), for double_barrier.c.
 * Hidden: the name does not leave zklock.so.
 */
#ifdef __GNUC__
#pragma GCC visibility push(hidden)
#endif
extern ZkEntryState take_node(ZkKind kind, const char *name, int flags,
							  int64 expect_session, TimestampTz deadline,
							  int32 arg, int *id, uint32 *generation);
#ifdef __GNUC__
#pragma GCC visibility pop
#endif

#endif							/* ZKLOCK_HOLDINGS_H */

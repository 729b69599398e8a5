/*-------------------------------------------------------------------------
 *
 * holdings_internal.h
 *	  A backend's table of holdings (holdings.c) as acquire.c sees it;
 *	  the rest of the backend uses holdings.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_HOLDINGS_INTERNAL_H
#define ZKLOCK_HOLDINGS_INTERNAL_H

#include "backend/holdings.h"

typedef struct ZkHoldingKey
{
	ZkKind		kind;
	char		name[ZK_NAME_MAX + 1];
} ZkHoldingKey;

typedef struct ZkAcq
{
	int			id;				/* shared entry of the node */
	uint32		generation;
	SubTransactionId subid;		/* InvalidSubTransactionId: session scope */
	bool		revocable;		/* let go when revoked (see let_go_revoked) */
	uint32		call;			/* the acquiring call: the leases of one
								 * multi-lease acquire share it */
} ZkAcq;

typedef struct ZkHolding
{
	ZkHoldingKey key;			/* hash key: must be first */
	int			nacqs;
	int			maxacqs;
	ZkAcq	   *acqs;			/* in TopMemoryContext */
} ZkHolding;

#define SESSION_SCOPE InvalidSubTransactionId

/* Hidden: these names do not leave zklock.so. */
#ifdef __GNUC__
#pragma GCC visibility push(hidden)
#endif
extern bool hold_is_lock_kind(ZkKind kind);
extern ZkHolding *hold_lookup(ZkKind kind, const char *name);
extern ZkHolding *hold_check(ZkHolding *h, bool *all_held, int64 *token);
extern void hold_record(ZkKind kind, const char *name, const int *ids,
						const uint32 *gens, int n, bool xact, bool revocable);
extern void hold_record1(ZkKind kind, const char *name, int id,
						 uint32 generation, bool xact, bool revocable);
extern void hold_lost_in_xact_error(ZkHolding *h);
#ifdef __GNUC__
#pragma GCC visibility pop
#endif

#endif							/* ZKLOCK_HOLDINGS_INTERNAL_H */

/*-------------------------------------------------------------------------
 *
 * claim_internal.h
 *	  What the two files of the job claims' driver share: the claim of one
 *	  backend (claim.c) and the settling of claims made final
 *	  (claim_settle.c).
 *
 * Only those two files include this.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_CLAIM_INTERNAL_H
#define ZKLOCK_CLAIM_INTERNAL_H

#include "nodes/pg_list.h"

#include "worker/engine/engine.h"

/* the tags of the calls of both parts (ZkResult.tag) */
typedef enum ClaimTag
{
	T_CLAIM_CREATE = 1,
	T_CLAIM_CHECK,
	T_CLAIM_FINAL,
	T_LIST_LIST,
	T_LIST_GET,
	T_SWEEP_LIST,
	T_SWEEP_GET,
	T_SWEEP_DEL,
	T_SETTLE_GET,				/* the claim's data, to mark it committed */
	T_SETTLE,					/* the multi that settles it */
	T_CLAIM_SYNC,				/* answers need nothing: what follows it */
	T_SETTLE_SYNC,				/* is answered after it */
	T_CLAIM_LOOK,				/* getData with a watch of another's claim */
	T_INDEX_PARENT,				/* the index's folder, for a finalize */
	T_SCAN_LIST,				/* the index of our system identifier */
	T_SCAN_GET,
	T_PENDING_GET,				/* a finalize lost: our pending node? */
	T_PENDING_DEL,
	T_MANUAL_GET,				/* zk_job_claim_settle */
	T_MANUAL,
	T_SWEEP_CLOCK,				/* ZooKeeper's time, for the sweep */
	T_SCAN_SYNC,
	T_INDEX_DIR					/* answer ignored: made, or was there */
} ClaimTag;

#define NONCE_LEN		ZK_NONCE_LEN

/*
 * A claim made final and not settled yet, in TopMemoryContext.  Made by
 * the finalize of a part of ours, or found in the index.
 */
typedef struct UnsettledClaim
{
	char	   *claim;			/* the claim node's path */
	char	   *entry;			/* its index entry's path; NULL: a
								 * standby's claim, committed already */
	char		nonce[NONCE_LEN + 1];
	ZkClaimXact xact;
	char	   *data;			/* its data while committing, or NULL: read
								 * it before marking it committed */
	ZkPart	   *part;			/* the claim part whose release waits */
	ZkAsk		word;			/* what its backend said at the end */
	bool		held;			/* its backend has not given it up yet */
	bool		finalizing;		/* the finalize is on its way */
	bool		pending_too;	/* the finalize's answer was lost: our
								 * pending node may still be there */
	bool		busy;			/* a call about it is on its way */
	ZkMono		not_before;		/* not looked at before (0: at once) */
} UnsettledClaim;

/* claim.c: a claim node's path and data */
extern void claim_path(ZkPart *p, char *buf, size_t size);
extern bool claim_data_field(const char *data, const char *key, char *out,
							 size_t size);
extern bool claim_data_number(const char *data, const char *key, char *out,
							  size_t size);
extern void claim_data_nonce(const char *data, char *nonce);
extern bool claim_data_committing(const char *data);
extern char *claim_data(ZkPart *p, const char *state);
extern char *claim_committed_data(const char *data);

/* claim_settle.c: the index, the jobs claimed, the unsettled claims */
extern void claim_index_dir(char *buf, size_t size, const char *sysid);
extern void claim_own_index_dir(char *buf, size_t size);
extern void claim_note_job(const char *name);
extern UnsettledClaim *claim_unsettled_add(const char *claim, const char *nonce,
										   const ZkClaimXact *xact,
										   const char *data);
extern UnsettledClaim *claim_unsettled_of_part(ZkPart *p);
extern bool claim_unsettled_full(void);

/* claim_settle.c: the hooks of zk_claim_driver */
extern void claim_settle_init(void);
extern void claim_settle_reload(void);
extern void claim_settle_run(void);

#endif							/* ZKLOCK_CLAIM_INTERNAL_H */

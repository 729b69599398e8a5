/*-------------------------------------------------------------------------
 *
 * kinds.c
 *	  What each kind of request is called, and where its node is.
 *
 * A kind (ZkKind, zklock.h) names a recipe's request on both sides: a
 * backend asks for it and words its errors with zk_kind_name() and
 * zk_kind_verb(); the worker runs the kind's driver
 * (src/worker/recipes/) and names the kind in its log.  zk_kind_suffix()
 * is where under <zklock.root>/<name> a request of the kind has its node:
 * the drivers place their nodes there, and zk_locks (backend/monitor.c)
 * shows the node's path.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "shared/zklock.h"

/* What a request of this kind is, for messages: a noun phrase. */
const char *
zk_kind_name(ZkKind kind)
{
	switch (kind)
	{
		case ZK_KIND_LOCK:
			return "lock";
		case ZK_KIND_READ:
			return "read lock";
		case ZK_KIND_WRITE:
			return "write lock";
		case ZK_KIND_SEMAPHORE:
			return "semaphore";
		case ZK_KIND_SEMAPHORE_ENTRY:
			return "semaphore entry lock";
		case ZK_KIND_JOB_CLAIM:
			return "job claim";
		case ZK_KIND_BARRIER_SET:
		case ZK_KIND_BARRIER_REMOVE:
		case ZK_KIND_BARRIER_WAIT:
			return "barrier";
		case ZK_KIND_DOUBLE_BARRIER:
			return "double barrier";
		case ZK_KIND_REVOKE:
			return "revocation";
		case ZK_KIND_LIST:
			return "listing";
		case ZK_KIND_COUNT_READ:
		case ZK_KIND_COUNT_SET:
		case ZK_KIND_COUNT_CAS:
		case ZK_KIND_COUNT_ADD:
			return "shared count";
		default:
			break;
	}
	return "?";
}

/* What a request of this kind does, for "could not %s": a verb phrase. */
const char *
zk_kind_verb(ZkKind kind)
{
	switch (kind)
	{
		case ZK_KIND_LOCK:
			return "acquire lock";
		case ZK_KIND_READ:
			return "acquire read lock";
		case ZK_KIND_WRITE:
			return "acquire write lock";
		case ZK_KIND_SEMAPHORE:
			return "acquire a lease of semaphore";
		case ZK_KIND_SEMAPHORE_ENTRY:
			return "enter semaphore";
		case ZK_KIND_JOB_CLAIM:
			return "claim job";
		case ZK_KIND_BARRIER_SET:
			return "set barrier";
		case ZK_KIND_BARRIER_REMOVE:
			return "remove barrier";
		case ZK_KIND_BARRIER_WAIT:
			return "wait on barrier";
		case ZK_KIND_DOUBLE_BARRIER:
			return "enter double barrier";
		case ZK_KIND_REVOKE:
			return "revoke lock";
		case ZK_KIND_LIST:
			return "list";
		case ZK_KIND_COUNT_READ:
			return "read shared count";
		case ZK_KIND_COUNT_SET:
			return "set shared count";
		case ZK_KIND_COUNT_CAS:
			return "compare and set shared count";
		case ZK_KIND_COUNT_ADD:
			return "add to shared count";
		default:
			break;
	}
	return "carry out a request for";
}

/*
 * What a request of this kind appends to <zklock.root>/<name> for the
 * parent of its node (its driver's suffix).
 */
const char *
zk_kind_suffix(ZkKind kind)
{
	switch (kind)
	{
		case ZK_KIND_SEMAPHORE:
			return ZK_SUFFIX_LEASES;
		case ZK_KIND_SEMAPHORE_ENTRY:
			return ZK_SUFFIX_LOCKS;
		case ZK_KIND_JOB_CLAIM:
			return ZK_SUFFIX_CLAIMS;
		default:
			break;
	}
	return "";
}

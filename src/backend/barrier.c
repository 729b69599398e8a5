/*-------------------------------------------------------------------------
 *
 * barrier.c
 *	  The SQL side of the barrier (Curator's DistributedBarrier):
 *	  zk_barrier_set(), zk_barrier_remove() and zk_barrier_wait().
 *
 * Each call is one request to the worker (worker/recipes/barrier.c), waited
 * for with the machinery of lock waits (zk_wait): cancel, statement_timeout
 * and lock_timeout end a wait as they end a lock wait, and a wait given up
 * leaves no watch behind.  Nothing is held afterwards: a barrier belongs to
 * no session.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "backend/args.h"
#include "shared/protocol.h"

/*
 * Ask the worker, wait until the deadline (0: none).  Returns true and the
 * request's result when it is done; false when it would have to wait (no
 * wait asked) or the deadline passed.  A set or remove whose session is
 * lost after it sent its write (ZKR_AT_MOST_ONCE: it may have been carried
 * out already) raises 40003; one that had sent none starts over in the
 * new session.
 */
static bool
barrier_request(ZkKind kind, const char *name, int flags,
				TimestampTz deadline, int64 *result)
{
	ZkRequest	req = {0};
	ZkEntryState state;

	req.kind = kind;
	req.name = name;
	req.flags = flags;

	/*
	 * A wait is done once the barrier is not set.  Only set and remove read
	 * their result: they have no deadline, so the entry is still ours (a
	 * wait done at its deadline may already be given up).
	 */
	state = zk_request_wait(&req, deadline,
							kind == ZK_KIND_BARRIER_WAIT ? NULL : result);
	if (state == ZKE_LOST)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN),
				 errmsg("zklock lost its ZooKeeper session while changing barrier \"%s\"",
						name),
				 errdetail("The change may or may not have been made."),
				 errhint("Look at the barrier (zk_barrier_wait(name, 0)) before trying again.")));
	if (state != ZKE_DONE)
		return false;			/* WOULD_BLOCK or timed out: given up */
	if (kind == ZK_KIND_BARRIER_WAIT)
		*result = 1;
	return true;
}

PG_FUNCTION_INFO_V1(zk_barrier_set);
Datum
zk_barrier_set(PG_FUNCTION_ARGS)
{
	int64		result = 0;

	(void) barrier_request(ZK_KIND_BARRIER_SET,
						   zk_name_arg(fcinfo, 0, "barrier name"),
						   ZKR_AT_MOST_ONCE, 0, &result);
	PG_RETURN_BOOL(result == 1);
}

PG_FUNCTION_INFO_V1(zk_barrier_remove);
Datum
zk_barrier_remove(PG_FUNCTION_ARGS)
{
	int64		result = 0;

	(void) barrier_request(ZK_KIND_BARRIER_REMOVE,
						   zk_name_arg(fcinfo, 0, "barrier name"),
						   ZKR_AT_MOST_ONCE, 0, &result);
	PG_RETURN_BOOL(result == 1);
}

/*
 * zk_barrier_wait(name, timeout_ms): true once the barrier is not set,
 * false when timeout_ms passed first (NULL: no limit, 0: do not wait).
 */
PG_FUNCTION_INFO_V1(zk_barrier_wait);
Datum
zk_barrier_wait(PG_FUNCTION_ARGS)
{
	char	   *name = zk_name_arg(fcinfo, 0, "barrier name");
	int64		result = 0;
	int64		ms = zk_timeout_arg(fcinfo, 1);

	PG_RETURN_BOOL(barrier_request(ZK_KIND_BARRIER_WAIT, name,
								   ms == 0 ? ZKR_NOWAIT : 0, zk_deadline(ms),
								   &result));
}

/*-------------------------------------------------------------------------
 *
 * double_barriers.c
 *	  The SQL side of the double barrier (Curator's
 *	  DistributedDoubleBarrier): zk_double_barrier_enter() and
 *	  zk_double_barrier_leave().
 *
 * Entering makes this session a member until it leaves (holdings.c keeps
 * the membership, session scope); the worker's side is
 * recipes/double_barrier.c.  Both wait like a lock wait: cancel,
 * statement_timeout and lock_timeout end the wait with their usual
 * errors, and a wait given up, a timeout, or backend exit leaves no
 * member node behind.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#include "backend/args.h"
#include "backend/holdings.h"

/*
 * zk_double_barrier_enter(name, members, timeout_ms): true once at least
 * "members" members have entered (this one included), false when
 * timeout_ms passed first (NULL: no limit, 0: do not wait).
 */
PG_FUNCTION_INFO_V1(zk_double_barrier_enter);
Datum
zk_double_barrier_enter(PG_FUNCTION_ARGS)
{
	char	   *name = zk_name_arg(fcinfo, 0, "double barrier name");
	int64		timeout = zk_timeout_arg(fcinfo, 2);
	int32		members;

	if (PG_ARGISNULL(1) || (members = PG_GETARG_INT32(1)) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("members must be at least 1")));
	PG_RETURN_BOOL(zk_hold_barrier_enter(name, members, timeout));
}

/*
 * zk_double_barrier_leave(name, timeout_ms): true once every member has
 * left, false when timeout_ms passed first (NULL: no limit, 0: do not
 * wait).  This session is no member afterwards either way.
 */
PG_FUNCTION_INFO_V1(zk_double_barrier_leave);
Datum
zk_double_barrier_leave(PG_FUNCTION_ARGS)
{
	char	   *name = zk_name_arg(fcinfo, 0, "double barrier name");
	int64		timeout = zk_timeout_arg(fcinfo, 1);

	PG_RETURN_BOOL(zk_hold_barrier_leave(name, timeout));
}

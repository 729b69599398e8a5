/*-------------------------------------------------------------------------
 *
 * shared_count.c
 *	  The SQL side of the shared count (Curator's SharedCount):
 *	  zk_shared_count(), zk_shared_count_set(), zk_shared_count_try_set()
 *	  and zk_shared_count_add().
 *
 * Each call is one request to the worker (worker/recipes/shared_count.c),
 * waited for with the machinery of lock waits (zk_wait): cancel and
 * statement_timeout end it, and without a session it fails with 08001
 * after zklock.connect_timeout.  Nothing is held afterwards.  The writes
 * are made at most once: one whose outcome cannot be known (its reply
 * lost and the count changed since, or the session lost after it was
 * sent) raises 40003.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"

#include "backend/args.h"
#include "backend/holdings.h"
#include "shared/protocol.h"

/*
 * Ask the worker and wait for the answer; returns the request's result.
 * A write (ZKR_AT_MOST_ONCE) whose session was lost after it went out
 * raises 40003.
 */
static int64
count_request(ZkKind kind, const char *name, int flags, int32 arg,
			  int64 targ)
{
	ZkRequest	req = {0};
	int64		result;

	req.kind = kind;
	req.name = name;
	req.flags = flags;
	req.arg = arg;
	req.targ = targ;
	if (zk_request_wait(&req, 0, &result) != ZKE_DONE)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN),
				 errmsg("zklock lost its ZooKeeper session while changing shared count \"%s\"",
						name),
				 errdetail("The change may or may not have been made."),
				 errhint("Read the count (zk_shared_count) before trying again.")));
	return result;
}

/* The value and the version of a result (worker/recipes/shared_count.c). */
static int32
result_value(int64 result)
{
	return (int32) (uint32) ((uint64) result & 0xFFFFFFFF);
}

static int32
result_version(int64 result)
{
	return (int32) (uint32) ((uint64) result >> 32);
}

/* A non-NULL integer argument. */
static int32
int_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	return PG_GETARG_INT32(argno);
}

/*
 * zk_shared_count(name, seed): the count's value and version, the count
 * created with the seed when absent.
 */
PG_FUNCTION_INFO_V1(zk_shared_count);
Datum
zk_shared_count(PG_FUNCTION_ARGS)
{
	char	   *name = zk_name_arg(fcinfo, 0, "shared count name");
	int32		seed = int_arg(fcinfo, 1, "seed");
	TupleDesc	tupdesc;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	int64		result;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	result = count_request(ZK_KIND_COUNT_READ, name, 0, seed, 0);
	values[0] = Int32GetDatum(result_value(result));
	values[1] = Int32GetDatum(result_version(result));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * The value of a shared count that must be there: the size of a semaphore
 * sized by it (holdings.c), read by the deadline of the acquiring call (0:
 * none) so that it keeps to the outage contract: without an answer, 08001
 * by then (zk_wait).  Nothing is created: an absent count fails with 22023,
 * a node that is not a count with 22P02.
 */
int32
zk_shared_count_value(const char *name, TimestampTz deadline)
{
	ZkRequest	req = {0};
	int64		result;

	req.kind = ZK_KIND_COUNT_READ;
	req.name = name;
	req.targ = 1;				/* not created when absent */
	/* a read starts over in a new session, and is never "not granted" */
	if (zk_request_wait(&req, deadline, &result) != ZKE_DONE)
		elog(ERROR, "zklock read of shared count \"%s\" ended without an answer",
			 name);
	return result_value(result);
}

/* zk_shared_count_set(name, count): set it; returns its new version. */
PG_FUNCTION_INFO_V1(zk_shared_count_set);
Datum
zk_shared_count_set(PG_FUNCTION_ARGS)
{
	char	   *name = zk_name_arg(fcinfo, 0, "shared count name");
	int32		count = int_arg(fcinfo, 1, "count");

	PG_RETURN_INT32(result_version(count_request(ZK_KIND_COUNT_SET, name,
												 ZKR_AT_MOST_ONCE, count, 0)));
}

/*
 * zk_shared_count_try_set(name, version, count): set it if its version is
 * still the one read before; false when it changed meanwhile.
 */
PG_FUNCTION_INFO_V1(zk_shared_count_try_set);
Datum
zk_shared_count_try_set(PG_FUNCTION_ARGS)
{
	char	   *name = zk_name_arg(fcinfo, 0, "shared count name");
	int32		version = int_arg(fcinfo, 1, "version");
	int32		count = int_arg(fcinfo, 2, "count");

	if (version < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("version must not be negative"),
				 errhint("Pass the version zk_shared_count() returned.")));
	PG_RETURN_BOOL(count_request(ZK_KIND_COUNT_CAS, name, ZKR_AT_MOST_ONCE,
								 count, version) == 1);
}

/*
 * zk_shared_count_add(name, delta, seed): add delta to the count (created
 * with the seed when absent); returns the new value.
 */
PG_FUNCTION_INFO_V1(zk_shared_count_add);
Datum
zk_shared_count_add(PG_FUNCTION_ARGS)
{
	char	   *name = zk_name_arg(fcinfo, 0, "shared count name");
	int32		delta = int_arg(fcinfo, 1, "delta");
	int32		seed = int_arg(fcinfo, 2, "seed");

	PG_RETURN_INT32(result_value(count_request(ZK_KIND_COUNT_ADD, name,
											   ZKR_AT_MOST_ONCE, delta,
											   seed)));
}

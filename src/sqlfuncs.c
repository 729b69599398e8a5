/*-------------------------------------------------------------------------
 *
 * sqlfuncs.c
 *	  The SQL-callable functions of zklock.
 *
 * This file owns argument handling: NULLs, timeouts, the conversion of a
 * name to the UTF-8 that ZooKeeper paths are made of, and its validation.
 * Everything else is delegated to holdings.c.  Timeouts: NULL waits without
 * limit (statement_timeout, lock_timeout and cancel still apply), 0 does not
 * wait, a positive value waits at most that many milliseconds.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "holdings.h"

/* The name argument, checked and in UTF-8; raises an ERROR when unusable. */
static char *
name_arg(FunctionCallInfo fcinfo, int argno)
{
	text	   *t;
	char	   *name;

	zk_check_preloaded();
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock lock name must not be null")));
	t = PG_GETARG_TEXT_PP(argno);
	name = pg_server_to_any(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), PG_UTF8);
	if (name == VARDATA_ANY(t))
		name = text_to_cstring(t);
	zk_check_name(name);
	return name;
}

/* The timeout argument: NULL means no limit; negative is an error. */
static int64
timeout_arg(FunctionCallInfo fcinfo, int argno)
{
	int32		ms;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return ZK_WAIT_FOREVER;
	ms = PG_GETARG_INT32(argno);
	if (ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout_ms must not be negative"),
				 errhint("Use NULL to wait without limit, 0 not to wait.")));
	return ms;
}

PG_FUNCTION_INFO_V1(zk_lock_acquire);
Datum
zk_lock_acquire(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);

	PG_RETURN_BOOL(zk_hold_acquire(ZK_KIND_LOCK, name, false,
								   timeout_arg(fcinfo, 1)));
}

PG_FUNCTION_INFO_V1(zk_lock_try);
Datum
zk_lock_try(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);

	PG_RETURN_BOOL(zk_hold_acquire(ZK_KIND_LOCK, name, false, 0));
}

PG_FUNCTION_INFO_V1(zk_lock_acquire_xact);
Datum
zk_lock_acquire_xact(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);

	PG_RETURN_BOOL(zk_hold_acquire(ZK_KIND_LOCK, name, true,
								   timeout_arg(fcinfo, 1)));
}

PG_FUNCTION_INFO_V1(zk_lock_try_xact);
Datum
zk_lock_try_xact(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);

	PG_RETURN_BOOL(zk_hold_acquire(ZK_KIND_LOCK, name, true, 0));
}

PG_FUNCTION_INFO_V1(zk_lock_release);
Datum
zk_lock_release(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);

	PG_RETURN_BOOL(zk_hold_release(ZK_KIND_LOCK, name));
}

PG_FUNCTION_INFO_V1(zk_lock_release_all);
Datum
zk_lock_release_all(PG_FUNCTION_ARGS)
{
	zk_check_preloaded();
	PG_RETURN_INT32(zk_hold_release_all());
}

PG_FUNCTION_INFO_V1(zk_lock_held);
Datum
zk_lock_held(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);

	PG_RETURN_BOOL(zk_hold_is_held(ZK_KIND_LOCK, name, NULL));
}

PG_FUNCTION_INFO_V1(zk_lock_token);
Datum
zk_lock_token(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo, 0);
	int64		token;

	if (!zk_hold_is_held(ZK_KIND_LOCK, name, &token))
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/*-------------------------------------------------------------------------
 *
 * args.c
 *	  The arguments of zklock's SQL functions: names, timeouts, scope.
 *
 * This file owns what every SQL function does before anything else: refuse
 * to run unless the library was preloaded (and so has its shared memory
 * and its worker), take a name argument (not NULL, converted to the UTF-8
 * that ZooKeeper paths are made of, checked against the name rules of
 * shared/naming.c) and a timeout argument (NULL: no limit, 0: do not wait,
 * negative: an error).  Nothing is sent to ZooKeeper for an argument that
 * is refused.  And, with zklock.session_locks off, refuse a session-scope
 * acquisition before anything is looked up or sent.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "backend/args.h"
#include "backend/holdings.h"
#include "shared/protocol.h"
#include "shared/zklock.h"

/*
 * Raise an ERROR unless the library was preloaded (and so has its shared
 * memory and its worker).
 */
void
zk_check_preloaded(void)
{
	if (zk_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock must be loaded via shared_preload_libraries"),
				 errhint("Add zklock to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/* A name given as text: in UTF-8 and checked (class 22 when unusable). */
char *
zk_name_from_text(text *t, const char *what)
{
	char	   *name = pg_server_to_any(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t),
										PG_UTF8);

	if (name == VARDATA_ANY(t))
		name = text_to_cstring(t);
	zk_check_name(name, what);
	return name;
}

/*
 * Argument argno of a SQL function, a timeout in milliseconds: NULL means
 * no limit (ZK_WAIT_FOREVER), 0 not to wait; negative is an error.
 */
int64
zk_timeout_arg(FunctionCallInfo fcinfo, int argno)
{
	int32		ms;

	if (PG_ARGISNULL(argno))
		return ZK_WAIT_FOREVER;
	ms = PG_GETARG_INT32(argno);
	if (ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout_ms must not be negative"),
				 errhint("Use NULL to wait without limit, 0 not to wait.")));
	return ms;
}

/*
 * Argument argno of a SQL function, a name of what: NULL is an error, as
 * is a name zk_check_name() refuses.
 */
char *
zk_name_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	zk_check_preloaded();
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock %s must not be null", what)));
	return zk_name_from_text(PG_GETARG_TEXT_PP(argno), what);
}

/*
 * With zklock.session_locks off, refuse a session-scope acquisition of
 * "what" (a kind's name) "name": behind a connection pooler in transaction
 * mode it would outlive the transaction and pass to the pool's next client.
 * instead: the functions to use instead (NULL: there are none).  Checked
 * before anything is looked up or sent, re-entrant acquisitions included.
 */
void
zk_check_session_scope(const char *what, const char *name, const char *instead)
{
	if (zklock_session_locks)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("cannot acquire session-scope zklock %s \"%s\"", what, name),
			 errdetail("zklock.session_locks is off: a session-scope holding outlives its transaction, and behind a connection pooler in transaction mode it would pass to the next client of the server connection."),
			 instead ?
			 errhint("Use %s, which ends with the transaction, or have zklock.session_locks turned on where sessions are not shared.",
					 instead) :
			 errhint("It has no transaction-scope variant; use it only where sessions are not shared, with zklock.session_locks on.")));
}

/* The transaction-scope functions to use instead of a kind's session ones. */
const char *
zk_xact_variant(ZkKind kind)
{
	switch (kind)
	{
		case ZK_KIND_LOCK:
			return "zk_lock_acquire_xact() or zk_lock_try_xact()";
		case ZK_KIND_READ:
			return "zk_rwlock_read_xact()";
		case ZK_KIND_WRITE:
			return "zk_rwlock_write_xact()";
		case ZK_KIND_SEMAPHORE:
			return "zk_semaphore_acquire_xact()";
		default:
			break;
	}
	return NULL;
}

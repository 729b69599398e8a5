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
 * It also owns the scope of names a role may use (zklock.allowed_names):
 * every function that asks ZooKeeper about a name takes it with
 * zk_name_arg(), which refuses a name outside the scope (42501) before
 * anything is sent.  Releases, the *_held and *_token functions and
 * zk_lock_revocation_requested() look only at the session's own holdings
 * and take their name with zk_own_name_arg(), so a holding stays
 * releasable when the scope narrows; leader groups are the instance's
 * configuration, not the role's, and are not scoped either.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "utils/builtins.h"
#include "utils/varlena.h"

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
 * Does name match pattern, in which '*' stands for any run of characters
 * ('/' included) and everything else for itself?
 */
static bool
zk_name_matches(const char *pattern, const char *name)
{
	const char *star = NULL;	/* the last '*' seen in pattern */
	const char *resume = NULL;	/* where in name that '*' match ends */

	while (*name)
	{
		if (*pattern == '*')
		{
			star = pattern++;
			resume = name;
		}
		else if (*pattern == *name)
		{
			pattern++;
			name++;
		}
		else if (star)
		{
			/* let the last '*' take one more character */
			pattern = star + 1;
			name = ++resume;
		}
		else
			return false;
	}
	while (*pattern == '*')
		pattern++;
	return *pattern == '\0';
}

/*
 * Raise 42501 unless the current role may use the name (in UTF-8) of what:
 * a superuser always may, anyone else when one of the patterns of
 * zklock.allowed_names matches it (its check hook, zk_check_patterns,
 * accepted the list).
 */
void
zk_check_name_allowed(const char *name, const char *what)
{
	char	   *raw;
	List	   *patterns;
	ListCell   *lc;

	if (superuser())
		return;
	raw = pg_server_to_any(zklock_allowed_names, strlen(zklock_allowed_names),
						   PG_UTF8);
	if (raw == zklock_allowed_names)
		raw = pstrdup(raw);
	if (SplitGUCList(raw, ',', &patterns))
		foreach(lc, patterns)
		{
			if (zk_name_matches(lfirst(lc), name))
				return;
		}
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for zklock %s \"%s\"", what, name),
			 errdetail("zklock.allowed_names is \"%s\" for role \"%s\".",
					   zklock_allowed_names, GetUserNameFromId(GetUserId(), false)),
			 errhint("A superuser can allow the name with ALTER ROLE ... SET zklock.allowed_names.")));
}

/*
 * Argument argno of a SQL function, a name of what: NULL is an error, as
 * is a name zk_check_name() refuses.  Not scoped: for the functions that
 * look only at the session's own holdings (see the file header).
 */
char *
zk_own_name_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	zk_check_preloaded();
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock %s must not be null", what)));
	return zk_name_from_text(PG_GETARG_TEXT_PP(argno), what);
}

/*
 * zk_own_name_arg(), for a name the function asks ZooKeeper about: also
 * refused (42501) outside the role's zklock.allowed_names.
 */
char *
zk_name_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	char	   *name = zk_own_name_arg(fcinfo, argno, what);

	zk_check_name_allowed(name, what);
	return name;
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

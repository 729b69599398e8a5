/*-------------------------------------------------------------------------
 *
 * monitor.c
 *	  What a DBA sees: the zk_locks view, zk_status(), the zk_stats view and
 *	  zk_version().
 *
 * They read the shared state of shared/protocol.h: every entry of the
 * instance (held, waiting, lost or being released), the worker's session
 * and the atomic counters.  They copy what they need under the lock (the
 * counters need none) and build rows afterwards, so they never hold up the
 * worker.
 *
 * The participants functions (zk_lock_participants,
 * zk_semaphore_participants) ask the worker to list a lock's nodes across
 * the cluster (a ZK_KIND_LIST request, worker/recipes/inspect.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "common/string.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "backend/args.h"
#include "shared/protocol.h"

/* a kind's label in zk_locks (kindlist.h) */
#define PG_ZK_KIND(symbol, name, label, suffix, wait, driver, failed) \
	[symbol] = label,

static const char *const kind_labels[ZK_NUM_KINDS] = {
#include "shared/kindlist.h"
};

#undef PG_ZK_KIND

/*
 * Columns of zk_locks: 1.0's eleven, and since 1.1 revocation_requested
 * (zk_locks_internal serves both: it fills what the caller's row type has).
 */
#define ZK_LOCKS_COLS 12

/*
 * What zk_locks shows of an entry, copied under the lock: only the entries
 * in use, each with its strings sized to them, so that a call costs what
 * it returns, not zklock.max_locks, and holds the lock only that long.
 * Small on purpose: with fixed-size node names (two of ZK_NODE_MAX) and an
 * array doubled as it filled, 10,000 holdings made about 4 MB of fresh
 * memory per call, each of its pages a page fault, which cost more than
 * the rows (bench/scale).
 */
typedef struct ZkLockCopy
{
	int			owner_pid;
	Oid			database;
	ZkKind		kind;
	ZkEntryState state;
	bool		released;
	bool		revoke_requested;
	int			session_count;
	int			xact_count;
	int64		token;
	TimestampTz granted_at;
	TimestampTz requested_at;
	char	   *name;
	char	   *node;			/* NULL if none */
	char	   *waiting_on;		/* NULL if none */
} ZkLockCopy;

/*
 * The copies' strings, packed one after the other in blocks of 64 kB
 * (pstrdup would give each its own chunk, rounded up to a power of two,
 * with a header).
 */
typedef struct ZkStrings
{
	char	   *next;
	Size		left;
} ZkStrings;

#define ZK_STRINGS_BLOCK	(64 * 1024)

/* A copy of s in the block, or NULL if s is empty and may be. */
static char *
copy_string(ZkStrings *st, const char *s, bool empty_is_null)
{
	Size		len = strlen(s) + 1;
	char	   *copy;

	if (len == 1 && empty_is_null)
		return NULL;
	if (len > st->left)
	{
		st->left = Max(len, ZK_STRINGS_BLOCK);
		st->next = palloc(st->left);
	}
	copy = st->next;
	memcpy(copy, s, len);
	st->next += len;
	st->left -= len;
	return copy;
}

/*
 * The text values every row picks from (made once per call, not once per
 * row): the database's name, the kinds, the scopes, the states.
 */
typedef struct ZkLockLabels
{
	Datum		dbname;			/* 0 if none */
	Datum		kinds[ZK_NUM_KINDS];
	Datum		session;
	Datum		transaction;
	Datum		releasing;
	Datum		held;
	Datum		lost;
	Datum		waiting;
} ZkLockLabels;

static void
make_labels(ZkLockLabels *l)
{
	l->dbname = 0;
	for (int k = 0; k < ZK_NUM_KINDS; k++)
		l->kinds[k] = CStringGetTextDatum(kind_labels[k] ? kind_labels[k] : "?");
	l->session = CStringGetTextDatum("session");
	l->transaction = CStringGetTextDatum("transaction");
	l->releasing = CStringGetTextDatum("releasing");
	l->held = CStringGetTextDatum("held");
	l->lost = CStringGetTextDatum("lost");
	l->waiting = CStringGetTextDatum("waiting");
}

/* One row of zk_locks for a copied entry and one of its scopes (0: none). */
static void
put_lock_row(ReturnSetInfo *rsinfo, ZkLockCopy *e, const ZkLockLabels *l,
			 Datum scope, int count)
{
	Datum		values[ZK_LOCKS_COLS];
	bool		nulls[ZK_LOCKS_COLS] = {0};

	values[0] = Int32GetDatum(e->owner_pid);
	values[1] = l->dbname;
	nulls[1] = l->dbname == 0;
	values[2] = CStringGetTextDatum(e->name);
	values[3] = l->kinds[e->kind];
	values[4] = scope;
	values[6] = Int32GetDatum(count);
	nulls[4] = nulls[6] = scope == 0;
	if (e->released)
		values[5] = l->releasing;
	else if (e->state == ZKE_HELD)
		values[5] = l->held;
	else if (e->state == ZKE_LOST)
		values[5] = l->lost;
	else
		values[5] = l->waiting;
	if (e->state == ZKE_HELD && !e->released && e->token != 0)
		values[7] = Int64GetDatum(e->token);
	else
		nulls[7] = true;
	if (e->node)
	{
		char		path[ZK_PATH_MAX];
		int			len = zk_path(path, sizeof(path), e->name,
								  zk_kind_suffix(e->kind));

		snprintf(path + len, sizeof(path) - len, "/%s", e->node);
		values[8] = CStringGetTextDatum(path);
	}
	else
		nulls[8] = true;
	values[9] = TimestampTzGetDatum(e->state == ZKE_HELD ? e->granted_at :
									e->requested_at);
	if (e->waiting_on && e->state == ZKE_PENDING)
		values[10] = CStringGetTextDatum(e->waiting_on);
	else
		nulls[10] = true;
	values[11] = BoolGetDatum(e->revoke_requested);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

PG_FUNCTION_INFO_V1(zk_locks_internal);
Datum
zk_locks_internal(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ZkLockCopy *copies;
	int			n = 0;
	dlist_iter	it;
	Oid			last_db = InvalidOid;
	ZkLockLabels labels;
	ZkStrings	strings = {0};
	MemoryContext row_context;
	MemoryContext old_context;

	zk_check_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	make_labels(&labels);

	/* room for every entry; only the pages filled are ever touched */
	copies = palloc(sizeof(ZkLockCopy) * zk_shared->num_entries);
	LWLockAcquire(zk_shared->lock, LW_SHARED);
	dlist_foreach(it, &zk_shared->used_entries)
	{
		ZkEntry    *e = dlist_container(ZkEntry, used_link, it.cur);
		ZkLockCopy *c;

		/*
		 * Not: failed entries, one-shot requests (a listing, a revocation,
		 * a barrier wait) answered and given up, and lost holdings given
		 * up (their session is gone), which have nothing left to release
		 * while the worker frees them.
		 */
		if (e->state == ZKE_FREE || e->state == ZKE_WOULD_BLOCK ||
			e->state == ZKE_FAILED ||
			(e->state == ZKE_DONE && e->released && e->node[0] == '\0') ||
			(e->state == ZKE_LOST && e->released))
			continue;
		c = &copies[n++];
		c->owner_pid = e->owner_pid;
		c->database = e->database;
		c->kind = e->kind;
		c->state = e->state;
		c->released = e->released;
		c->revoke_requested = e->revoke_requested;
		c->session_count = e->session_count;
		c->xact_count = e->xact_count;
		c->token = e->token;
		c->granted_at = e->granted_at;
		c->requested_at = e->requested_at;
		c->name = copy_string(&strings, e->name, false);
		c->node = copy_string(&strings, e->node, true);
		c->waiting_on = copy_string(&strings, e->waiting_on, true);
	}
	LWLockRelease(zk_shared->lock);

	/*
	 * A row's text values live until the tuplestore has copied them: made
	 * in a context reset after every row, they take the same memory each
	 * time, instead of fresh pages for every row of a large answer.
	 */
	row_context = AllocSetContextCreate(CurrentMemoryContext, "zk_locks row",
										ALLOCSET_SMALL_SIZES);
	for (int i = 0; i < n; i++)
	{
		ZkLockCopy *e = &copies[i];

		if (e->database != last_db)
		{
			/* one catalog lookup per run of entries of a database */
			char	   *dbname;

			last_db = e->database;
			dbname = OidIsValid(last_db) ? get_database_name(last_db) : NULL;
			labels.dbname = dbname ? CStringGetTextDatum(dbname) : 0;
		}
		old_context = MemoryContextSwitchTo(row_context);
		if (e->session_count > 0)
			put_lock_row(rsinfo, e, &labels, labels.session, e->session_count);
		if (e->xact_count > 0)
			put_lock_row(rsinfo, e, &labels, labels.transaction, e->xact_count);
		if (e->session_count == 0 && e->xact_count == 0)
			put_lock_row(rsinfo, e, &labels, 0, 0);	/* waiting or releasing */
		MemoryContextSwitchTo(old_context);
		MemoryContextReset(row_context);
	}
	MemoryContextDelete(row_context);
	return (Datum) 0;
}

/*
 * zk_version(): the version of the library this backend loaded, "X.Y.Z"
 * (the SQL objects' version is pg_extension.extversion, X.Y, which lags
 * behind until ALTER EXTENSION zklock UPDATE).
 */
PG_FUNCTION_INFO_V1(zk_version);
Datum
zk_version(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(ZKLOCK_VERSION));
}

PG_FUNCTION_INFO_V1(zk_status);
Datum
zk_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[11];
	bool		nulls[11] = {0};
	ZkSessionState state;
	int64		session_id;
	int			timeout;
	pid_t		worker_pid;
	char		server[sizeof(zk_shared->server)];
	char		last_error[sizeof(zk_shared->last_error)];
	static const char *const state_names[] = {
		[ZKS_CONNECTING] = "connecting",
		[ZKS_CONNECTED] = "connected",
		[ZKS_SUSPENDED] = "suspended",
		[ZKS_LOST] = "lost",
	};

	zk_check_preloaded();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	state = zk_shared->session_state;
	session_id = zk_shared->session_id;
	timeout = zk_shared->session_timeout;
	worker_pid = zk_shared->worker_pid;
	strlcpy(server, zk_shared->server, sizeof(server));
	strlcpy(last_error, zk_shared->last_error, sizeof(last_error));
	LWLockRelease(zk_shared->lock);

	values[0] = CStringGetTextDatum(worker_pid ? state_names[state] : "no worker");
	if (session_id != 0)
		values[1] = CStringGetTextDatum(psprintf("0x%llx",
												 (unsigned long long) session_id));
	else
		nulls[1] = true;
	if (server[0])
		values[2] = CStringGetTextDatum(server);
	else
		nulls[2] = true;
	if (timeout > 0)
		values[3] = Int32GetDatum(timeout);
	else
		nulls[3] = true;
	if (last_error[0])
		values[4] = CStringGetTextDatum(last_error);
	else
		nulls[4] = true;
	values[5] = Int64GetDatum((int64) pg_atomic_read_u64(&zk_shared->n_requests));
	values[6] = Int64GetDatum((int64) pg_atomic_read_u64(&zk_shared->n_grants));
	values[7] = Int64GetDatum((int64) pg_atomic_read_u64(&zk_shared->n_timeouts));
	values[8] = Int64GetDatum((int64) pg_atomic_read_u64(&zk_shared->n_reconnects));
	values[9] = Int64GetDatum((int64) pg_atomic_read_u64(&zk_shared->n_session_losses));
	if (worker_pid)
		values[10] = Int32GetDatum(worker_pid);
	else
		nulls[10] = true;

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* ---- cumulative counters ---- */

/*
 * The row of the zk_stats view: reads the atomic counters of ZkShared, no
 * lock (a row may mix counts a few grants apart; each one is exact).  The
 * cumulative counters, the two gauges and when the counters were last
 * reset; 1.3 appended the counters of multis.  The library serves both
 * definitions: a database may still have 1.2 installed.
 */
static Datum
stats_row(FunctionCallInfo fcinfo, bool multis)
{
	TupleDesc	tupdesc;
	Datum		values[16];
	bool		nulls[16] = {0};
	pg_atomic_uint64 *const counters[] = {
		&zk_shared->n_requests,
		&zk_shared->n_grants,
		&zk_shared->n_local_grants,
		&zk_shared->n_waits,
		&zk_shared->n_timeouts,
		&zk_shared->n_cancels,
		&zk_shared->n_session_losses,
		&zk_shared->n_reconnects,
		&zk_shared->n_orphans,
		&zk_shared->n_zk_requests,
	};
	pg_atomic_uint64 *const multi_counters[] = {
		&zk_shared->n_zk_multis,
		&zk_shared->n_zk_multi_writes,
		&zk_shared->n_zk_multis_refused,
	};
	int			ncols = lengthof(counters) + 3 +
		(multis ? lengthof(multi_counters) : 0);
	int			i = 0;

	zk_check_preloaded();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (tupdesc->natts != ncols)
		elog(ERROR, "zk_stats has %d columns instead of %d",
			 tupdesc->natts, ncols);
	StaticAssertStmt(lengthof(counters) + 3 + lengthof(multi_counters) ==
					 lengthof(values), "zk_stats columns");

	for (int k = 0; k < lengthof(counters); k++)
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(counters[k]));
	values[i++] = Int32GetDatum((int32) pg_atomic_read_u32(&zk_shared->n_nodes));
	values[i++] = Int32GetDatum((int32) pg_atomic_read_u32(&zk_shared->n_watches));
	values[i++] = TimestampTzGetDatum((TimestampTz)
									  pg_atomic_read_u64(&zk_shared->stats_reset));
	for (int k = 0; multis && k < lengthof(multi_counters); k++)
		values[i++] = Int64GetDatum((int64) pg_atomic_read_u64(multi_counters[k]));

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* zk_stats_internal() of 1.2 */
PG_FUNCTION_INFO_V1(zk_stats_internal);
Datum
zk_stats_internal(PG_FUNCTION_ARGS)
{
	return stats_row(fcinfo, false);
}

/* zk_stats_internal_1_3() since 1.3: the counters of multis appended */
PG_FUNCTION_INFO_V1(zk_stats_internal_1_3);
Datum
zk_stats_internal_1_3(PG_FUNCTION_ARGS)
{
	return stats_row(fcinfo, true);
}

/*
 * zk_stats_reset(): sets the cumulative counters of zk_stats (and so those
 * of zk_status()) to zero and stats_reset to now.  The gauges (nodes,
 * watches) are the engine's current state and stay.  Counts made while it
 * runs may land before or after the reset.
 */
PG_FUNCTION_INFO_V1(zk_stats_reset);
Datum
zk_stats_reset(PG_FUNCTION_ARGS)
{
	zk_check_preloaded();
	pg_atomic_write_u64(&zk_shared->n_requests, 0);
	pg_atomic_write_u64(&zk_shared->n_grants, 0);
	pg_atomic_write_u64(&zk_shared->n_local_grants, 0);
	pg_atomic_write_u64(&zk_shared->n_waits, 0);
	pg_atomic_write_u64(&zk_shared->n_timeouts, 0);
	pg_atomic_write_u64(&zk_shared->n_cancels, 0);
	pg_atomic_write_u64(&zk_shared->n_session_losses, 0);
	pg_atomic_write_u64(&zk_shared->n_reconnects, 0);
	pg_atomic_write_u64(&zk_shared->n_orphans, 0);
	pg_atomic_write_u64(&zk_shared->n_zk_requests, 0);
	pg_atomic_write_u64(&zk_shared->n_zk_multis, 0);
	pg_atomic_write_u64(&zk_shared->n_zk_multi_writes, 0);
	pg_atomic_write_u64(&zk_shared->n_zk_multis_refused, 0);
	pg_atomic_write_u64(&zk_shared->stats_reset,
						(uint64) GetCurrentTimestamp());
	PG_RETURN_VOID();
}

/* ---- participants across the cluster ---- */

#define PARTICIPANT_COLS 5

/*
 * A node's data as the worker passed it (UTF-8, or \x and hex), in the
 * database's encoding; data that encoding cannot hold is shown in hex too,
 * so that no node's data makes the listing fail.
 */
static Datum
owner_datum(const char *data)
{
	size_t		len = strlen(data);
	StringInfoData s;

	if (GetDatabaseEncoding() == PG_UTF8 || pg_is_ascii(data))
		return CStringGetTextDatum(data);
	initStringInfo(&s);
	appendStringInfoString(&s, "\\x");
	for (size_t i = 0; i < len; i++)
		appendStringInfo(&s, "%02x", (unsigned char) data[i]);
	return CStringGetTextDatum(s.data);
}

/*
 * Rows (node, sequence, kind, holds, owner) of a participants listing;
 * max_leases > 0: the first that many leases hold.
 */
static void
participant_rows(FunctionCallInfo fcinfo, const char *name, ZkListWhat what,
				 int32 max_leases)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ZkRow	   *rows;
	int			n;
	int			leases = 0;

	InitMaterializedSRF(fcinfo, 0);
	n = zk_list(name, what, &rows);
	for (int i = 0; i < n; i++)
	{
		ZkRow	   *row = &rows[i];
		Datum		values[PARTICIPANT_COLS];
		bool		nulls[PARTICIPANT_COLS] = {0};

		if (row->ncols < PARTICIPANT_COLS)
			continue;
		values[0] = CStringGetTextDatum(row->cols[0]);
		values[1] = Int64GetDatum(pg_strtoint64(row->cols[1]));
		values[2] = CStringGetTextDatum(row->cols[2]);
		if (row->cols[3])
			values[3] = BoolGetDatum(row->cols[3][0] == 't');
		else if (strcmp(row->cols[2], "lease") == 0 && max_leases > 0)
			values[3] = BoolGetDatum(++leases <= max_leases);
		else
			nulls[3] = true;
		if (row->cols[4])
			values[4] = owner_datum(row->cols[4]);
		else
			nulls[4] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
}

/*
 * zk_lock_participants(name): every node under <zklock.root>/<name> that
 * takes part in its lock, read-write lock or Kazoo lock, in lock order.
 */
PG_FUNCTION_INFO_V1(zk_lock_participants);
Datum
zk_lock_participants(PG_FUNCTION_ARGS)
{
	participant_rows(fcinfo, zk_name_arg(fcinfo, 0, "lock name"),
					 ZK_LIST_LOCK, 0);
	return (Datum) 0;
}

/*
 * zk_semaphore_participants(name, max_leases): the semaphore's leases in
 * order (the first max_leases hold; NULL: not known), then the nodes of
 * its entry mutex.
 */
PG_FUNCTION_INFO_V1(zk_semaphore_participants);
Datum
zk_semaphore_participants(PG_FUNCTION_ARGS)
{
	char	   *name = zk_name_arg(fcinfo, 0, "semaphore name");
	int32		max_leases = 0;

	if (!PG_ARGISNULL(1) && (max_leases = PG_GETARG_INT32(1)) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_leases must be at least 1")));
	participant_rows(fcinfo, name, ZK_LIST_SEMAPHORE, max_leases);
	return (Datum) 0;
}

/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  The SQL side of job claims: zk_job_claim() and zk_job_claims().
 *
 * A claim of (job, slot) belongs to the calling transaction and becomes
 * final when it commits: this file keeps the transaction's claims, which
 * holdings.c's transaction callbacks make final at PRE_COMMIT and give up
 * at its end.  The worker's side is worker/recipes/claim.c and
 * claim_settle.c.  The slot names the claim's znode by its time in
 * UTC, so every caller that computes the same slot (date_trunc('minute',
 * now()), say) names the same node whatever its TimeZone.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "common/jsonapi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "replication/message.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/xid8.h"

#include "backend/args.h"
#include "backend/holdings.h"
#include "shared/pg_compat.h"
#include "shared/protocol.h"

/*
 * Job claims of this transaction (zk_hold_claim), in TopMemoryContext:
 * always transaction scope, made final at PRE_COMMIT, given up at the end
 * of the transaction or of the subtransaction that took them.  Given up by
 * an abort (or by an exit in the middle of the transaction), a claim that
 * was made final is reopened by the worker: COMMIT can still fail after
 * PRE_COMMIT (a serialization failure found at commit, another extension's
 * pre-commit callback).
 */
typedef struct ZkClaim
{
	int			id;
	uint32		generation;
	SubTransactionId subid;
	TimestampTz slot;
	char	   *job;
} ZkClaim;

static List *claims = NIL;
static bool claims_exit_registered = false;
static bool claims_finalized = false;	/* this transaction's COMMIT made
										 * them final: no more claims */

static char *
claim_slot_text(const ZkClaim *c)
{
	return DatumGetCString(DirectFunctionCall1(timestamptz_out,
											   TimestampTzGetDatum(c->slot)));
}

/*
 * before_shmem_exit callback: a backend leaving in the middle of a
 * transaction (FATAL, pg_terminate_backend) never commits it.
 */
static void
claims_exit(int code, Datum arg)
{
	zk_claims_release(TopSubTransactionId, true);
}

/*
 * Claim (job, slot) for this transaction: true when the worker created the
 * claim node (or this transaction holds it already), false when anyone else
 * has finished it, or holds it and timeout_ms (0: at once; ZK_WAIT_FOREVER)
 * passes before that claim ends; when it ends without being made final,
 * the slot is open and this call claims it.
 */
bool
zk_hold_claim(const char *job, TimestampTz slot, int64 timeout_ms)
{
	ZkRequest	req;
	ZkEntryState state;
	ListCell   *lc;
	int			id;
	uint32		gen;

	zk_holdings_init();
	foreach(lc, claims)
	{
		ZkClaim    *c = lfirst(lc);

		if (c->slot == slot && strcmp(c->job, job) == 0)
			return true;		/* ours already; COMMIT checks it */
	}
	if (claims_finalized)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("cannot claim zklock job \"%s\" while the transaction commits",
						job),
				 errdetail("The transaction's claims were made final already.")));

	memset(&req, 0, sizeof(req));
	req.kind = ZK_KIND_JOB_CLAIM;
	req.name = job;
	req.flags = timeout_ms == 0 ? ZKR_NOWAIT : 0;
	req.targ = slot;
	id = zk_request(&req, &gen);
	if (!claims_exit_registered)
	{
		/*
		 * Registered after zk_request's own exit hook, so it runs first:
		 * before that hook gives every entry up without a word, this one
		 * gives the claims of an unfinished transaction up as aborted.
		 */
		before_shmem_exit(claims_exit, (Datum) 0);
		claims_exit_registered = true;
	}
	state = zk_wait(id, gen, zk_deadline(timeout_ms));
	if (state == ZKE_LOST)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("zklock lost its ZooKeeper session while claiming job \"%s\"",
						job),
				 errhint("Retry the call.")));
	if (state != ZKE_HELD)
		return false;

	PG_TRY();
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		ZkClaim    *c = palloc(sizeof(ZkClaim));

		c->id = id;
		c->generation = gen;
		c->subid = GetCurrentSubTransactionId();
		c->slot = slot;
		c->job = pstrdup(job);
		claims = lappend(claims, c);
		MemoryContextSwitchTo(old);
		zk_entry_publish(id, gen, 0, 1, false);
	}
	PG_CATCH();
	{
		zk_give_up(id, gen);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return true;
}

/*
 * Give up the claims taken in subids >= from (TopSubTransactionId: the
 * transaction ended).  aborted: the transaction did not commit, so the
 * worker reopens those made final.  Never throws, never waits.
 */
void
zk_claims_release(SubTransactionId from, bool aborted)
{
	ListCell   *lc;

	foreach(lc, claims)
	{
		ZkClaim    *c = lfirst(lc);

		if (c->subid < from)
			continue;
		zk_give_up_asking(c->id, c->generation,
						  aborted ? ZK_ASK_REOPEN : ZK_ASK_COMMITTED);
		claims = foreach_delete_current(claims, lc);
		pfree(c->job);
		pfree(c);
	}
	if (from == TopSubTransactionId)
		claims_finalized = false;
}

/* A subtransaction committed: its parent takes its claims over. */
void
zk_claims_subcommit(SubTransactionId mySubid, SubTransactionId parentSubid)
{
	ListCell   *lc;

	foreach(lc, claims)
		if (((ZkClaim *) lfirst(lc))->subid == mySubid)
			((ZkClaim *) lfirst(lc))->subid = parentSubid;
}

/* PRE_PREPARE: a transaction with claims cannot be prepared. */
void
zk_claims_check_prepare(void)
{
	if (claims != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that holds zklock job claims"),
				 errdetail("The claim of job \"%s\" is held by this backend's ZooKeeper session and cannot outlive it.",
						   ((ZkClaim *) linitial(claims))->job)));
}

static void
claim_lost_error(const ZkClaim *c)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("zklock job claim \"%s\" for slot %s held by this transaction was lost",
					c->job, claim_slot_text(c)),
			 errdetail("Its ZooKeeper session ended or could not be confirmed in time, so another client may claim the slot."),
			 errhint("Roll back and retry the transaction.")));
}

/*
 * What identifies the transaction's outcome in the commit log, for claims
 * made final: its full xid (one is assigned if it had none) and the end of
 * a WAL record of that xid, flushed before the claim is made final.  The
 * flushed record keeps the xid from being handed out again after a crash
 * of this instance, and after a failover the timeline and the position
 * tell the new primary whether this transaction is in its history at all
 * (worker/recipes/claim_settle.c, xact_outcome).  A standby assigns no xid: its
 * claims are final at PRE_COMMIT (at most once).
 */
static void
claims_xact(ZkClaimXact *x)
{
	static const char msg[] = "job claim made final";
	XLogRecPtr	end;

	memset(x, 0, sizeof(*x));
	if (RecoveryInProgress())
		return;
	x->xid = U64FromFullTransactionId(GetTopFullTransactionId());
	end = ZkLogLogicalMessage("zklock", msg, sizeof(msg) - 1);
	XLogFlush(end);
	x->lsn = end;
	x->timeline = GetWALInsertionTimeLine();
	x->has_xid = true;
}

/*
 * PRE_COMMIT: make every claim of the transaction final, one after
 * another.  Any failure fails the COMMIT with 40001, and the abort that
 * follows gives the claims up (the slot is open again).
 */
void
zk_claims_finalize(void)
{
	ListCell   *lc;
	ZkClaimXact xact;

	if (claims == NIL)
		return;
	claims_finalized = true;
	claims_xact(&xact);
	foreach(lc, claims)
	{
		ZkClaim    *c = lfirst(lc);
		MemoryContext ccxt = CurrentMemoryContext;

		if (!zk_entry_valid(c->id, c->generation, NULL))
			claim_lost_error(c);
		PG_TRY();
		{
			zk_set_claim_xact(c->id, c->generation, &xact);
			zk_ask(c->id, c->generation, ZK_ASK_FINALIZE,
				   TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											   zklock_session_timeout));
		}
		PG_CATCH();
		{
			ErrorData  *ed;

			/* whatever went wrong, the commit fails as for a lost lock */
			MemoryContextSwitchTo(ccxt);
			ed = CopyErrorData();
			FlushErrorState();
			ed->sqlerrcode = ERRCODE_T_R_SERIALIZATION_FAILURE;
			if (ed->hint == NULL)
				ed->hint = pstrdup("The transaction is rolled back and the slot stays open; retry it.");
			ReThrowError(ed);
		}
		PG_END_TRY();
	}
}

/* Argument i, a job slot: finite and one a node name can name. */
static TimestampTz
slot_arg(FunctionCallInfo fcinfo, int i)
{
	TimestampTz slot;
	TimestampTz back;
	char	   *name;

	if (PG_ARGISNULL(i))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock job slot must not be null")));
	slot = PG_GETARG_TIMESTAMPTZ(i);
	if (TIMESTAMP_NOT_FINITE(slot))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("zklock job slot must be finite")));
	/* the node name must name this slot and no other (years 1-9999) */
	name = zk_slot_name(slot);
	if (name[0] == '-' || !zk_parse_slot_name(name, &back) || back != slot)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("zklock job slot is out of range"),
				 errdetail("A slot must lie within the years 1 to 9999 AD.")));
	return slot;
}

PG_FUNCTION_INFO_V1(zk_job_claim);
Datum
zk_job_claim(PG_FUNCTION_ARGS)
{
	char	   *job = zk_name_arg(fcinfo, 0, "job name");
	TimestampTz slot = slot_arg(fcinfo, 1);

	/* zk_job_claim(job, slot) never waits; 1.4 adds timeout_ms */
	PG_RETURN_BOOL(zk_hold_claim(job, slot,
								 PG_NARGS() > 2 ? zk_timeout_arg(fcinfo, 2) : 0));
}

/*
 * zk_job_claim_settle(job, slot, committed): settle by hand a claim that
 * is committing (made final, its outcome unknown) and that its instance
 * will not settle (it was decommissioned): mark it committed, or reopen
 * the slot.  True when it settled the claim, false when the slot had no
 * unsettled claim.  Superusers only: the caller decides another
 * instance's outcome.
 */
PG_FUNCTION_INFO_V1(zk_job_claim_settle);
Datum
zk_job_claim_settle(PG_FUNCTION_ARGS)
{
	char	   *job = zk_name_arg(fcinfo, 0, "job name");
	TimestampTz slot = slot_arg(fcinfo, 1);
	ZkRequest	req = {0};
	int64		result;

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to settle zklock job claims"),
				 errdetail("Only superusers may settle a claim of another instance.")));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock claim outcome must not be null"),
				 errhint("Pass true if the claim's transaction committed, false to reopen the slot.")));
	req.kind = ZK_KIND_JOB_CLAIM;
	req.name = job;
	req.flags = ZKR_SETTLE | ZKR_AT_MOST_ONCE;
	req.targ = slot;
	req.arg = PG_GETARG_BOOL(2) ? 1 : 0;
	if (zk_request_wait(&req, 0, &result) != ZKE_DONE)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN),
				 errmsg("zklock lost its ZooKeeper session while settling job claim \"%s\"",
						job),
				 errdetail("The claim may or may not have been settled."),
				 errhint("Look at it with zk_job_claims() before trying again.")));
	PG_RETURN_BOOL(result == 1);
}

/* a listing's row, parsed */
typedef struct ClaimRow
{
	TimestampTz slot;
	const ZkRow *row;
} ClaimRow;

static int
claim_row_cmp(const void *a, const void *b)
{
	TimestampTz x = ((const ClaimRow *) a)->slot;
	TimestampTz y = ((const ClaimRow *) b)->slot;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/* What zk_job_claims shows of a claim node's data (zk_node_data's JSON). */
typedef enum ClaimField
{
	CF_INSTANCE,
	CF_PID,
	CF_CLAIMED_AT,
	CF_STATE,
	CF_XID,
	CF_SYSTEM,
	CF_COUNT
} ClaimField;

static const char *const claim_field_names[CF_COUNT] = {
	"instance", "pid", "claimed_at", "state", "xid", "system"
};

/* The parse of a claim's data: its top-level string and number fields. */
typedef struct ClaimData
{
	int			depth;			/* of objects and arrays */
	int			field;			/* the top-level field being read, or -1 */
	char	   *values[CF_COUNT];	/* NULL: not there */
} ClaimData;

static ZK_JSON_ACTION
claim_data_nest(void *state)
{
	ClaimData  *d = state;

	d->depth++;
	d->field = -1;
	ZK_JSON_ACTION_DONE;
}

static ZK_JSON_ACTION
claim_data_unnest(void *state)
{
	((ClaimData *) state)->depth--;
	ZK_JSON_ACTION_DONE;
}

static ZK_JSON_ACTION
claim_data_field(void *state, char *fname, bool isnull)
{
	ClaimData  *d = state;

	d->field = -1;
	for (int f = 0; d->depth == 1 && f < CF_COUNT; f++)
		if (strcmp(fname, claim_field_names[f]) == 0 && d->values[f] == NULL)
			d->field = f;
	ZK_JSON_ACTION_DONE;
}

static ZK_JSON_ACTION
claim_data_scalar(void *state, char *token, JsonTokenType tokentype)
{
	ClaimData  *d = state;

	if (d->depth == 1 && d->field >= 0 &&
		(tokentype == JSON_TOKEN_STRING || tokentype == JSON_TOKEN_NUMBER))
		d->values[d->field] = token;
	d->field = -1;
	ZK_JSON_ACTION_DONE;
}

/*
 * The fields of a claim's data (JSON that zklock wrote, zk_node_data in
 * worker/engine/part_calls.c): the first value of each at its top level,
 * as a string (a number as written); none of data that is not JSON.
 */
static void
claim_data_parse(const char *data, ClaimData *d)
{
	JsonSemAction sem = {0};

	memset(d, 0, sizeof(*d));
	d->field = -1;
	sem.semstate = d;
	sem.object_start = claim_data_nest;
	sem.object_end = claim_data_unnest;
	sem.array_start = claim_data_nest;
	sem.array_end = claim_data_unnest;
	sem.object_field_start = claim_data_field;
	sem.scalar = claim_data_scalar;
	if (pg_parse_json(ZkJsonLex(data), &sem) != JSON_SUCCESS)
		memset(d->values, 0, sizeof(d->values));
}

#define CLAIM_COLS 8

/*
 * zk_job_claims(job): the job's claims in ZooKeeper, oldest slot first:
 * slot, claimed_by (the claiming instance, as its node says), pid,
 * claimed_at, final, and since 1.5 state ('pending', 'committing' or
 * 'committed'), xid and system_identifier (of the claiming transaction,
 * once made final).  Whatever a node's data does not say is NULL.  The
 * columns the caller's definition has are filled (1.4 has five).
 */
PG_FUNCTION_INFO_V1(zk_job_claims);
Datum
zk_job_claims(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *job = zk_name_arg(fcinfo, 0, "job name");
	ZkRow	   *rows;
	int			nrows;
	ClaimRow   *sorted;
	int			n = 0;

	InitMaterializedSRF(fcinfo, 0);
	nrows = zk_list(job, ZK_LIST_CLAIMS, &rows);

	sorted = palloc(sizeof(ClaimRow) * Max(nrows, 1));
	for (int i = 0; i < nrows; i++)
		if (rows[i].ncols == 4 && rows[i].cols[0] &&
			zk_parse_slot_name(rows[i].cols[0], &sorted[n].slot))
			sorted[n++].row = &rows[i];
	qsort(sorted, n, sizeof(ClaimRow), claim_row_cmp);

	for (int i = 0; i < n; i++)
	{
		const ZkRow *row = sorted[i].row;
		const char *data = row->cols[1] ? row->cols[1] : "";
		Datum		values[CLAIM_COLS];
		bool		nulls[CLAIM_COLS] = {0};
		ClaimData	d;
		char	   *by = NULL;
		char	   *pid;
		char	   *at;
		TimestampTz at_ts;

		claim_data_parse(data, &d);
		if (pg_encoding_verifymbstr(PG_UTF8, data, strlen(data)) == strlen(data))
			by = d.values[CF_INSTANCE];
		pid = d.values[CF_PID];
		at = d.values[CF_CLAIMED_AT];

		values[0] = TimestampTzGetDatum(sorted[i].slot);
		if (by)
			values[1] = CStringGetTextDatum(pg_any_to_server(by, strlen(by), PG_UTF8));
		else
			nulls[1] = true;
		if (pid)
			values[2] = Int32GetDatum(atoi(pid));
		else
			nulls[2] = true;
		if (at && zk_parse_slot_name(at, &at_ts))
			values[3] = TimestampTzGetDatum(at_ts);
		else
			nulls[3] = true;
		values[4] = BoolGetDatum(row->cols[3] && row->cols[3][0] == 't');
		{
			char	   *state = d.values[CF_STATE];
			char	   *xid = d.values[CF_XID];
			char	   *system = d.values[CF_SYSTEM];

			/* 1.4 wrote "final" for what is now committed */
			if (state && strcmp(state, "final") == 0)
				state = "committed";
			if (state)
				values[5] = CStringGetTextDatum(state);
			else
				nulls[5] = true;
			if (xid)
				values[6] = FullTransactionIdGetDatum(FullTransactionIdFromU64(strtou64(xid, NULL, 10)));
			else
				nulls[6] = true;
			if (system)
				values[7] = CStringGetTextDatum(system);
			else
				nulls[7] = true;
		}
		Assert(rsinfo->setDesc->natts <= CLAIM_COLS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  The SQL side of job claims: zk_job_claim() and zk_job_claims().
 *
 * A claim of (job, slot) belongs to the calling transaction (holdings.c)
 * and becomes final when it commits; the worker's side is
 * worker/recipes/claim.c.  The slot names the claim's znode by its time in
 * UTC, so every caller that computes the same slot (date_trunc('minute',
 * now()), say) names the same node whatever its TimeZone.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/xid8.h"

#include "backend/args.h"
#include "backend/holdings.h"
#include "shared/protocol.h"

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
	if (!zk_request_done(&req, &result))
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

/*
 * The string value of "key" in JSON data zklock wrote (json_string in
 * worker/engine/calls.c escapes only quotes, backslashes and control
 * characters), or NULL.
 */
static char *
json_field(const char *data, const char *key)
{
	char	   *pat = psprintf("\"%s\":", key);
	const char *s = strstr(data, pat);
	StringInfoData out;

	if (s == NULL)
		return NULL;
	s += strlen(pat);
	initStringInfo(&out);
	if (*s != '"')
	{
		/* a number */
		while (*s == '-' || (*s >= '0' && *s <= '9'))
			appendStringInfoChar(&out, *s++);
		return out.len > 0 ? out.data : NULL;
	}
	for (s++; *s && *s != '"'; s++)
	{
		if (*s == '\\' && s[1])
		{
			s++;
			if (*s == 'u')
			{
				unsigned int c;

				if (sscanf(s + 1, "%4x", &c) == 1 && c < 0x20)
					appendStringInfoChar(&out, (char) c);
				s += Min(strlen(s) - 1, 4);
				continue;
			}
		}
		appendStringInfoChar(&out, *s);
	}
	return out.data;
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
		char	   *by = NULL;
		char	   *pid;
		char	   *at;
		TimestampTz at_ts;

		if (pg_encoding_verifymbstr(PG_UTF8, data, strlen(data)) == strlen(data))
			by = json_field(data, "instance");
		pid = json_field(data, "pid");
		at = json_field(data, "claimed_at");

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
			char	   *state = json_field(data, "state");
			char	   *xid = json_field(data, "xid");
			char	   *system = json_field(data, "system");

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

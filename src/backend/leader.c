/*-------------------------------------------------------------------------
 *
 * leader.c
 *	  The SQL side of instance leadership: zk_is_leader(), the zk_leaders
 *	  view and zk_leader_info().
 *
 * The worker takes part in a leader election per group of
 * zklock.leader_groups and publishes what it knows in zk_shared->groups
 * (worker/recipes/leader.c).  zk_is_leader() only reads that: no
 * ZooKeeper round trip, so it suits a WHERE clause of every cron job.  The
 * instance leads a group *now* only while the worker says so for its
 * current session and that session was confirmed within half its timeout:
 * the rule that makes a lock held (zk_trusted_session, request.c),
 * so a paused or cut-off worker stops claiming leadership well before
 * ZooKeeper could let another participant lead.
 *
 * zk_leader_info() answers for groups the instance does not take part in
 * too, by asking the worker to look (a ZK_LIST_LEADER listing).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "backend/args.h"
#include "shared/protocol.h"

/*
 * A copy of the published state of group "name" (NULL: all of them);
 * returns how many were copied into out (room for ZK_MAX_GROUPS).
 */
static int
copy_groups(const char *name, ZkGroup *out)
{
	int			n = 0;

	LWLockAcquire(zk_shared->lock, LW_SHARED);
	for (int i = 0; i < ZK_MAX_GROUPS; i++)
	{
		ZkGroup    *g = &zk_shared->groups[i];

		if (g->in_use && (name == NULL || strcmp(g->name, name) == 0))
			out[n++] = *g;
	}
	LWLockRelease(zk_shared->lock);
	return n;
}

/* Does the instance lead this (copied) group now? */
static bool
leads(const ZkGroup *g)
{
	return g->leader && zk_trusted_session(g->session_id);
}

PG_FUNCTION_INFO_V1(zk_is_leader);
Datum
zk_is_leader(PG_FUNCTION_ARGS)
{
	ZkGroup		g[ZK_MAX_GROUPS];

	if (copy_groups(zk_own_name_arg(fcinfo, 0, "group name"), g) == 0)
		PG_RETURN_BOOL(false);	/* not a group the instance takes part in */
	PG_RETURN_BOOL(leads(&g[0]));
}

#define LEADER_COLS 5

/*
 * A leader's id as text: the node's data is whatever its creator wrote
 * (UTF-8 from zklock and Curator, cut at ZK_DATA_SHOWN bytes); shown up to
 * where it stops being valid UTF-8, in the database's encoding.
 */
static Datum
id_datum(const char *data)
{
	int			len = pg_encoding_verifymbstr(PG_UTF8, data, strlen(data));
	char	   *copy = pnstrdup(data, len);

	return CStringGetTextDatum(pg_any_to_server(copy, len, PG_UTF8));
}

/*
 * A row (group_name, leader_id, leader_znode, since, is_us) from a
 * published group; from a listing's row instead (node, data,
 * participants) when the instance does not take part in the group.
 */
static void
leader_row(Datum *values, bool *nulls, const char *name, const ZkGroup *g,
		   const ZkRow *row)
{
	const char *node = g ? g->leader_node : (row ? row->cols[0] : NULL);
	const char *data = g ? g->leader_data : (row ? row->cols[1] : NULL);
	char		path[ZK_PATH_MAX];

	memset(nulls, 0, sizeof(bool) * LEADER_COLS);
	values[0] = CStringGetTextDatum(name);
	if (node && node[0])
	{
		int			len = zk_path(path, sizeof(path), name, "");

		snprintf(path + len, sizeof(path) - len, "/%s", node);
		values[1] = id_datum(data ? data : "");
		values[2] = CStringGetTextDatum(path);
	}
	else
		nulls[1] = nulls[2] = true;
	if (g && g->since != 0 && node && node[0])
		values[3] = TimestampTzGetDatum(g->since);
	else
		nulls[3] = true;
	values[4] = BoolGetDatum(g ? leads(g) : false);
}

PG_FUNCTION_INFO_V1(zk_leaders_internal);
Datum
zk_leaders_internal(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ZkGroup		g[ZK_MAX_GROUPS];
	int			n;

	zk_check_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	n = copy_groups(NULL, g);
	for (int i = 0; i < n; i++)
	{
		Datum		values[LEADER_COLS];
		bool		nulls[LEADER_COLS];

		leader_row(values, nulls, g[i].name, &g[i], NULL);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * zk_leader_info(group): who leads it, from any instance.  For a group of
 * zklock.leader_groups, what the worker keeps published; for any other, a
 * look into ZooKeeper (since is then unknown).
 */
PG_FUNCTION_INFO_V1(zk_leader_info);
Datum
zk_leader_info(PG_FUNCTION_ARGS)
{
	char	   *name = zk_own_name_arg(fcinfo, 0, "group name");
	TupleDesc	tupdesc;
	Datum		values[LEADER_COLS];
	bool		nulls[LEADER_COLS];
	ZkGroup		g[ZK_MAX_GROUPS];

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	if (copy_groups(name, g) > 0)
		leader_row(values, nulls, name, &g[0], NULL);
	else
	{
		ZkRow	   *rows;
		int			nrows = zk_list(name, ZK_LIST_LEADER, &rows);

		leader_row(values, nulls, name, NULL, nrows > 0 ? &rows[0] : NULL);
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

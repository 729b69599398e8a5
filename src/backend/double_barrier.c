/*-------------------------------------------------------------------------
 *
 * double_barrier.c
 *	  The SQL side of the double barrier (Curator's
 *	  DistributedDoubleBarrier): zk_double_barrier_enter() and
 *	  zk_double_barrier_leave().
 *
 * Entering makes this session a member until it leaves; the worker's side
 * is worker/recipes/double_barrier.c.  Both wait like a lock wait: cancel,
 * statement_timeout and lock_timeout end the wait with their usual
 * errors, and a wait given up, a timeout, or backend exit leaves no
 * member node behind.
 *
 * This file also keeps the memberships (zk_hold_barrier_enter/leave),
 * apart from the holdings of holdings.c: in a list, session scope, one per
 * barrier name, untouched by transactions and by zk_lock_release_all();
 * leaving, DISCARD ALL or backend exit ends them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "backend/args.h"
#include "backend/holdings.h"
#include "shared/protocol.h"

/*
 * Double barrier memberships of this session, in TopMemoryContext: the
 * entry of our member node, granted once the barrier was entered.
 */
typedef struct ZkMember
{
	int			id;
	uint32		generation;
	char	   *name;
} ZkMember;

static List *memberships = NIL;

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

/* ---- double barrier memberships ---- */

static ZkMember *
find_member(const char *name)
{
	ListCell   *lc;

	foreach(lc, memberships)
	{
		ZkMember   *m = lfirst(lc);

		if (strcmp(m->name, name) == 0)
			return m;
	}
	return NULL;
}

/*
 * End a membership: its entry goes back to the worker, which deletes our
 * member node if it is still there.  Never throws.
 */
static void
forget_member(ZkMember *m)
{
	zk_give_up(m->id, m->generation);
	memberships = list_delete_ptr(memberships, m);
	pfree(m->name);
	pfree(m);
}

/*
 * Enter double barrier name as one of at least "members": true once
 * entered, false when timeout_ms (0: do not wait, ZK_WAIT_FOREVER: no
 * limit) passed first, and then nothing of the attempt is left.  Entering
 * a barrier this session is a member of is an error.
 */
bool
zk_hold_barrier_enter(const char *name, int32 members, int64 timeout_ms)
{
	ZkMember   *m = find_member(name);
	TimestampTz deadline = 0;
	ZkEntryState state;
	int			flags = 0;
	int			id;
	uint32		gen;

	zk_check_session_scope("double barrier membership", name, NULL);
	if (m != NULL)
	{
		if (zk_entry_check(m->id, m->generation, NULL) != ZKE_LOST)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("zklock double barrier \"%s\" is already entered by this session",
							name),
					 errhint("Leave it with zk_double_barrier_leave() before entering it again.")));
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("zklock double barrier \"%s\" was left when its ZooKeeper session ended",
						name),
				 errdetail("Its member node went with the session.")));
		forget_member(m);
	}

	deadline = zk_deadline(timeout_ms);
	if (timeout_ms == 0)
		flags |= ZKR_NOWAIT;
	state = take_node(ZK_KIND_DOUBLE_BARRIER, name, flags, 0, deadline, members,
					  &id, &gen);
	if (state == ZKE_LOST)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("zklock lost its ZooKeeper session while entering double barrier \"%s\"",
						name),
				 errhint("Retry the call.")));
	if (state != ZKE_HELD)
		return false;

	PG_TRY();
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		m = palloc(sizeof(ZkMember));
		m->id = id;
		m->generation = gen;
		m->name = pstrdup(name);
		memberships = lappend(memberships, m);
		MemoryContextSwitchTo(old);
		zk_entry_publish(id, gen, 1, 0, false);
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
 * Leave double barrier name: true once all members have left, false when
 * timeout_ms (0: do not wait, ZK_WAIT_FOREVER: no limit) passed first.
 * Either way, and on any error, the membership ends: our node is gone
 * afterwards.  Leaving a barrier this session is not a member of is an
 * error, and so is leaving one whose membership ended with the ZooKeeper
 * session.
 */
bool
zk_hold_barrier_leave(const char *name, int64 timeout_ms)
{
	ZkMember   *m = find_member(name);
	TimestampTz deadline = 0;
	ZkAskState	state;

	if (m == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock double barrier \"%s\" was not entered by this session",
						name),
				 errhint("Enter it with zk_double_barrier_enter() first.")));
	if (zk_entry_check(m->id, m->generation, NULL) == ZKE_LOST)
	{
		forget_member(m);
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("zklock double barrier \"%s\" was left when its ZooKeeper session ended",
						name),
				 errdetail("Its member node went with the session, so the other members may have gone on without this session.")));
	}

	deadline = zk_deadline(timeout_ms);
	PG_TRY();
	{
		state = zk_ask_wait(m->id, m->generation,
							timeout_ms == 0 ? ZK_ASK_LEAVE_NOWAIT : ZK_ASK_LEAVE,
							deadline);
	}
	PG_CATCH();
	{
		forget_member(m);
		PG_RE_THROW();
	}
	PG_END_TRY();
	forget_member(m);
	zk_await_released(true);
	return state == ZK_ASK_DONE;
}

/*
 * End every membership of this session at once, without the leave
 * protocol: the member nodes are deleted, as at backend exit (DISCARD
 * ALL).  Never throws.
 */
void
zk_hold_barrier_drop_all(void)
{
	while (memberships != NIL)
		forget_member(linitial(memberships));
	zk_await_released(false);
}

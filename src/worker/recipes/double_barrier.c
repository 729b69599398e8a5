/*-------------------------------------------------------------------------
 *
 * double_barrier.c
 *	  Driver of a member of Curator's DistributedDoubleBarrier
 *	  (ZK_KIND_DOUBLE_BARRIER): enter, and leave when its holder asks
 *	  (ZK_ASK_LEAVE).
 *
 * The double barrier named N is the node <zklock.root>/N (a container);
 * each member is an ephemeral child named by a random UUID, and the child
 * "ready" (persistent) says that enough members have entered.  The steps
 * are those of Curator 5.4, call for call, so that SQL sessions and
 * Curator clients can be members of one barrier:
 *
 *	enter:	exists("ready") with a watch, then create our ephemeral node
 *			(missing ancestors as containers).  If "ready" existed: entered.
 *			Otherwise list the children (no watch); if there are at least
 *			"members" of them (every child counts, as in Curator), create
 *			"ready" (NODEEXISTS is fine): entered.  Otherwise wait for the
 *			watch on "ready": when it fires, entered.
 *	leave:	list the children other than "ready", sorted by name; none
 *			left: done.  Only ours left: delete it, done.  Ours is the
 *			lowest: wait (exists with a watch) for the highest to go.
 *			Otherwise wait for the lowest to go, deleting our node (once);
 *			look again whenever the node waited for is gone.  Done: delete
 *			"ready" (NONODE is fine), which resets the barrier for another
 *			round.
 *
 * A leave that ends without completing (its timeout passed, timeout 0
 * found a member it would wait for, or it was cancelled) deletes "ready"
 * (NONODE is fine), as Curator's does when its time is up: with timeout
 * 0 before it answers, otherwise once the holder has given the entry up,
 * as the part's last calls (dropped()), which the given-up entry waits
 * for.
 *
 * Two deliberate differences, both only in when our caller returns, never
 * in what nodes exist: Curator 5.4 returns from leave when, its own node
 * deleted, exactly one other member is left; we wait for that one too, as
 * ZooKeeper's recipe says ("leave returns once all have left").  And an
 * enter that times out, is cancelled, or a leave that does, gives its
 * entry up, so the engine deletes our node (Curator keeps it after an
 * enter timeout, and after a leave timeout when ours is the lowest).
 *
 * One addition, so that "ready" does not outlive every member (which
 * would let the next round's first member through alone): when a
 * membership ends otherwise (DISCARD ALL, backend exit, an error, an
 * enter given up), the part's last calls (dropped(), once the engine has
 * deleted our node, while the session lives) list the barrier's children
 * and delete "ready" if no member node is left.  A membership lost with
 * the ZooKeeper session makes no such calls (as a Curator member's).
 *
 * The part serves one backend's membership: it is granted (the entry
 * HELD) on entering and stays until the backend gives the entry up after
 * leaving, or at exit, when the engine deletes our node if it still
 * exists.  A create whose reply was lost is settled once connected by an
 * exists on our node (ours when its ephemeralOwner is our session).  A
 * lost session loses the membership (the engine makes the entry LOST and
 * fails a leave in progress), or restarts a waiting enter in the next
 * session.
 *
 * The SQL side, with the session's memberships, is backend/double_barrier.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "worker/engine/engine.h"

/* tags of the driver's calls */
#define T_READY			1		/* exists("ready") with a watch */
#define T_CREATE		2		/* create of our node */
#define T_CHECK			3		/* exists of our node after a lost reply */
#define T_COUNT			4		/* listing of the members, to count them */
#define T_MAKE_READY	5		/* create of "ready" */
#define T_LEAVE_LIST	6		/* listing of the members, to leave */
#define T_LEAVE_WATCH	7		/* exists with a watch on the node awaited */
#define T_LEAVE_DEL_OWN 8		/* delete of our node while leaving */
#define T_DEL_READY		9		/* delete of "ready" once all have left */
#define T_GONE_LIST		10		/* listing of the members, our node gone */
#define T_GONE_READY	11		/* delete of "ready" on the way out */
#define T_LEFT_STAT		12		/* exists of "ready" before T_DEL_READY */
#define T_GONE_STAT		13		/* exists of "ready" before T_GONE_READY */
#define T_SYNC_FIRST	14		/* sync: its answer needs nothing */

/* where a member is (DbState.step) */
typedef enum DBarrierStep
{
	DB_START = 0,				/* create our node */
	DB_CREATING,				/* exists("ready") and create sent */
	DB_CHECK,					/* create's reply lost: is our node there? */
	DB_COUNTING,				/* counting the members */
	DB_WAITING,					/* waiting for "ready" */
	DB_IN,						/* entered: granted */
	DB_LEAVING,					/* leaving */
	DB_LEFT,					/* all have left, or the leave gives up:
								 * deleting "ready" */
	DB_OVER,					/* answered */
	DB_GONE						/* dropped: the last calls */
} DBarrierStep;

#define READY_NODE		"ready"
#define UUID_LEN		36

/* the driver's state of a part (ZkPart.ds.dbarrier) */
typedef struct DbState
{
	DBarrierStep step;
	bool		ready_existed;	/* "ready" existed before our create */
	bool		nowait;			/* leave: answer WOULD_BLOCK, do not wait */
	bool		own_deleted;	/* leave: our node's delete was sent */
	bool		finishing;		/* leave: that delete is the last step */
	bool		gave_up;		/* leave: ends without completing */
	bool		had_node;		/* our node was created */
	bool		settled;		/* a leave deleted "ready" and answered */
	bool		gone_ready;		/* dropped: delete "ready" whatever the
								 * members (a leave given up) */
	int64		ready_czxid;	/* the "ready" we delete, once seen */
} DbState;

static inline DbState *
state_of(ZkPart *p)
{
	return p->ds.dbarrier;
}

static void
child_path(ZkPart *p, const char *child, char *buf, size_t size)
{
	snprintf(buf, size, "%s/%s", p->parent, child);
}

/* Forget our node, which is gone. */
static void
own_node_gone(ZkPart *p)
{
	zk_part_set_phase(p, NODE_NONE);
}

/* Our node exists (created, or found after a lost reply). */
static void
own_node_created(ZkPart *p, const ZkResult *r)
{
	zk_part_node_created(p, r->path, &r->stat);
	state_of(p)->had_node = true;
}

/* A refusal of ZooKeeper while entering fails the request. */
static void
enter_failed(ZkPart *p, const ZkResult *r, const char *what)
{
	zk_part_fail(p, zk_refusal_errcode(r->rc), "ZooKeeper refused to %s: %s.",
				 what, zerror(r->rc));
}

/* Answer the holder's leave: fail it. */
static void leave_failed(ZkPart *p, int sqlerrcode,
						 const char *fmt,...) pg_attribute_printf(3, 4);

static void
leave_failed(ZkPart *p, int sqlerrcode, const char *fmt,...)
{
	char		msg[ZK_ERRMSG_MAX];
	va_list		ap;
	int			id = zk_part_entry(p);

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	state_of(p)->step = DB_OVER;
	if (id >= 0)
		zk_set_ask_outcome(id, ZK_ASK_FAILED, sqlerrcode, "%s", msg);
}

/* ---- enter ---- */

/* Our node's name: a random (version 4) UUID, as Curator's. */
static bool
make_uuid(char *buf, size_t size)
{
	uint8		b[16];

	if (!pg_strong_random(b, sizeof(b)))
		return false;
	b[6] = (b[6] & 0x0f) | 0x40;
	b[8] = (b[8] & 0x3f) | 0x80;
	snprintf(buf, size,
			 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
			 b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
	return true;
}

/* exists("ready") with a watch, and create our node right behind it. */
static void
enter_start(ZkPart *p)
{
	DbState    *st = state_of(p);
	char		path[ZK_PATH_MAX];
	char	   *data;

	if (!make_uuid(p->node, sizeof(p->node)))
	{
		zk_part_fail(p, ERRCODE_INTERNAL_ERROR, "Could not generate random bytes.");
		return;
	}
	st->ready_existed = false;
	st->step = DB_CREATING;
	zk_part_set_phase(p, NODE_CREATING);
	child_path(p, READY_NODE, path, sizeof(path));
	zk_call_exists_watch(p, T_READY, path);
	child_path(p, p->node, path, sizeof(path));
	data = zk_node_data(p);
	zk_call_create(p, T_CREATE, path, data, ZOO_EPHEMERAL, true);
	pfree(data);
}

/* Entered: grant the waiting entry. */
static void
enter_done(ZkPart *p)
{
	state_of(p)->step = DB_IN;
	zk_part_grant(p);
}

/* Look again: "ready" (watched), then count the members. */
static void
enter_look(ZkPart *p)
{
	char		path[ZK_PATH_MAX];

	state_of(p)->step = DB_COUNTING;
	child_path(p, READY_NODE, path, sizeof(path));
	zk_call_exists_watch(p, T_READY, path);
	zk_call_list(p, T_COUNT, p->parent, false);
}

/* Not enough members yet: wait for "ready" (a no-wait request ends). */
static void
enter_wait(ZkPart *p)
{
	state_of(p)->step = DB_WAITING;
	zk_part_wait_on(p, READY_NODE);
	zk_part_would_block(p);
	if (zk_part_entry(p) < 0)
		zk_part_drop(p);
}

/* ---- leave ---- */

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *) a, *(const char *const *) b);
}

static void
leave_list(ZkPart *p)
{
	zk_call_list(p, T_LEAVE_LIST, p->parent, false);
}

/*
 * Look at "ready" before deleting it (ready_delete), so that the delete
 * goes to the node seen, at its version.  Once a delete may have been sent
 * (ready_czxid known), after a sync: a delete whose answer was lost may
 * have been applied, and a "ready" of the next round since is not ours to
 * delete.
 */
static void
ready_look(ZkPart *p, int tag)
{
	char		path[ZK_PATH_MAX];

	if (state_of(p)->ready_czxid != 0)
		zk_call_sync(p, T_SYNC_FIRST, p->parent);
	child_path(p, READY_NODE, path, sizeof(path));
	zk_call_exists(p, tag, path);
}

/*
 * ready_look's answer: delete that "ready" (the delete's answer comes with
 * tag) if it is there and the one we meant.  False if there is nothing to
 * delete.
 */
static bool
ready_delete(ZkPart *p, const ZkResult *r, int tag)
{
	DbState    *st = state_of(p);

	if (r->rc == ZOK && r->has_stat &&
		(st->ready_czxid == 0 || r->stat.czxid == st->ready_czxid))
	{
		st->ready_czxid = r->stat.czxid;
		zk_call_delete(p, tag, r->path, r->stat.version);
		return true;
	}
	if (r->rc != ZOK && r->rc != ZNONODE)
		ereport(LOG,
				(errmsg("zklock could not look at node \"%s\": %s",
						r->path, zerror(r->rc))));
	return false;
}

/*
 * All have left, or the leave gives up (gave_up): delete "ready", then
 * answer.
 */
static void
leave_finish(ZkPart *p)
{
	state_of(p)->step = DB_LEFT;
	ready_look(p, T_LEFT_STAT);
}

/* The leave's end: "ready" deleted or found gone. */
static void
leave_settled(ZkPart *p)
{
	DbState    *st = state_of(p);
	int			id = zk_part_entry(p);

	st->step = DB_OVER;
	st->settled = true;
	if (id >= 0)
		zk_set_ask_outcome(id, st->gave_up ? ZK_ASK_WOULD_BLOCK : ZK_ASK_DONE,
						   0, NULL);
}

static void
delete_own(ZkPart *p)
{
	char		path[ZK_PATH_MAX];

	state_of(p)->own_deleted = true;
	zk_part_set_phase(p, NODE_DELETING);
	child_path(p, p->node, path, sizeof(path));
	zk_call_delete(p, T_LEAVE_DEL_OWN, path, -1);
}

/* A listing of the members arrived while leaving: the next move. */
static void
leave_decide(ZkPart *p, const ZkResult *r)
{
	DbState    *st = state_of(p);
	const char **names = palloc(sizeof(char *) * Max(r->nchildren, 1));
	int			n = 0;
	int			self = -1;
	char		path[ZK_PATH_MAX];

	for (int i = 0; i < r->nchildren; i++)
		if (strcmp(r->children[i], READY_NODE) != 0)
			names[n++] = r->children[i];
	qsort(names, n, sizeof(char *), name_cmp);
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], p->node) == 0)
			self = i;

	if (self >= 0)
		st->own_deleted = false;	/* there still, whatever we sent */
	else if (st->own_deleted || n == 0)
	{
		if (p->phase == NODE_EXISTS)
			own_node_gone(p);	/* a delete whose reply was lost did it */
	}
	else
	{
		own_node_gone(p);
		leave_failed(p, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
					 "Its node \"%s\" was deleted by another ZooKeeper client.",
					 p->node);
		return;
	}

	if (n == 0)
		leave_finish(p);
	else if (n == 1 && self == 0)
	{
		st->finishing = true;
		delete_own(p);
	}
	else if (self == 0)
	{
		/* the lowest waits for the highest */
		child_path(p, names[n - 1], path, sizeof(path));
		zk_call_exists_watch(p, T_LEAVE_WATCH, path);
	}
	else
	{
		/* the others wait for the lowest, their own node deleted */
		child_path(p, names[0], path, sizeof(path));
		zk_call_exists_watch(p, T_LEAVE_WATCH, path);
		if (self > 0)
			delete_own(p);
	}
}

/* The holder asks to leave. */
static void
dbarrier_ask(ZkPart *p, int id, ZkAsk ask)
{
	DbState    *st = state_of(p);

	if (ask != ZK_ASK_LEAVE && ask != ZK_ASK_LEAVE_NOWAIT)
	{
		zk_set_ask_outcome(id, ZK_ASK_FAILED, ERRCODE_FEATURE_NOT_SUPPORTED,
						   "A double barrier member cannot do that.");
		return;
	}
	if (st->step != DB_IN || p->phase != NODE_EXISTS)
	{
		zk_set_ask_outcome(id, ZK_ASK_FAILED, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
						   "The member is not in the barrier.");
		return;
	}
	st->nowait = (ask == ZK_ASK_LEAVE_NOWAIT);
	st->own_deleted = false;
	st->finishing = false;
	st->gave_up = false;
	st->step = DB_LEAVING;
	if (zk_connected() && p->inflight == 0)
	{
		zk_part_step_again(p, false);
		leave_list(p);
	}
	else
		zk_part_step_again(p, true);	/* once connected, or the calls are answered */
}

/* ---- the driver ---- */

static void
dbarrier_restart(ZkPart *p)
{
	char		path[ZK_PATH_MAX];

	switch (state_of(p)->step)
	{
		case DB_START:
			if (!zk_part_dropping(p))
				enter_start(p);
			break;
		case DB_CHECK:
			/* after a sync: a follower may not have our create yet */
			zk_call_sync(p, T_SYNC_FIRST, p->parent);
			child_path(p, p->node, path, sizeof(path));
			zk_call_exists(p, T_CHECK, path);
			break;
		case DB_COUNTING:
		case DB_WAITING:
			if (zk_part_dropping(p))
				break;
			if (p->watch_state == PW_FIRED)
				enter_done(p);	/* the watch on "ready": it was created */
			else
				enter_look(p);
			break;
		case DB_LEAVING:
			if (!zk_part_dropping(p))
				leave_list(p);
			break;
		case DB_LEFT:
			if (!zk_part_dropping(p))
				leave_finish(p);
			break;
		default:
			break;
	}
}

static void
dbarrier_step(ZkPart *p, const ZkResult *r)
{
	DbState    *st = state_of(p);
	bool		lost = (r != NULL &&
						(zk_is_connection_loss(r->rc) || r->rc == ZCLOSING));
	char		path[ZK_PATH_MAX];

	if (r == NULL)
	{
		dbarrier_restart(p);
		return;
	}

	switch (r->tag)
	{
		case T_READY:
			if (r->rc == ZOK)
			{
				if (st->step == DB_CREATING)
					st->ready_existed = true;
				else if ((st->step == DB_COUNTING || st->step == DB_WAITING) &&
						 !zk_part_dropping(p))
					enter_done(p);
			}
			else if (r->rc != ZNONODE && !lost)
				enter_failed(p, r, "look at the barrier's ready node");
			break;

		case T_CREATE:
			if (r->rc == ZOK)
			{
				own_node_created(p, r);
				if (zk_part_dropping(p))
					break;		/* the engine deletes it */
				if (st->ready_existed)
					enter_done(p);
				else
				{
					st->step = DB_COUNTING;
					zk_call_list(p, T_COUNT, p->parent, false);
				}
			}
			else if (r->rc == ZNONODE)
			{
				/* an ancestor was reaped after we made it: again */
				st->step = DB_START;
				if (zk_part_parent_gone(p))
					zk_part_step_again(p, true);
			}
			else if (lost)
			{
				/* created or not: look once connected */
				st->step = DB_CHECK;
				zk_part_step_again(p, true);
			}
			else
			{
				zk_part_set_phase(p, NODE_NONE);
				enter_failed(p, r, "create the member node");
			}
			break;

		case T_CHECK:
			if (r->rc == ZOK && r->has_stat && zk_is_ours(&r->stat))
			{
				own_node_created(p, r);
				if (!zk_part_dropping(p))
					enter_look(p);
			}
			else if (r->rc == ZOK)
			{
				zk_part_set_phase(p, NODE_NONE);
				zk_part_fail(p, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
							 "Another client has a node of the member's name.");
			}
			else if (r->rc == ZNONODE)
			{
				/* our create never happened */
				zk_part_set_phase(p, NODE_NONE);
				st->step = DB_START;
				if (!zk_part_dropping(p))
					zk_part_step_again(p, true);
			}
			else if (lost)
				zk_part_step_again(p, true);	/* again once connected */
			else
				enter_failed(p, r, "look at the member node");
			break;

		case T_COUNT:
			if (st->step != DB_COUNTING || zk_part_dropping(p))
				break;
			if (r->rc == ZOK)
			{
				if (p->watch_state == PW_FIRED)
					enter_done(p);	/* "ready" appeared meanwhile */
				else if (r->nchildren >= p->arg)
				{
					char	   *data = zk_node_data(p);

					child_path(p, READY_NODE, path, sizeof(path));
					zk_call_create(p, T_MAKE_READY, path, data,
								   ZOO_PERSISTENT, false);
					pfree(data);
				}
				else
					enter_wait(p);
			}
			else if (r->rc == ZNONODE)
			{
				own_node_gone(p);
				zk_part_fail(p, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
							 "Its node \"%s\" was deleted by another ZooKeeper client.",
							 p->node);
			}
			else if (lost)
				zk_part_step_again(p, true);
			else
				enter_failed(p, r, "list the barrier's members");
			break;

		case T_MAKE_READY:
			if (st->step != DB_COUNTING || zk_part_dropping(p))
				break;
			if (r->rc == ZOK || r->rc == ZNODEEXISTS)
				enter_done(p);
			else if (lost)
				zk_part_step_again(p, true);	/* looks at "ready" again */
			else
				enter_failed(p, r, "create the barrier's ready node");
			break;

		case T_LEAVE_LIST:
			if (st->step != DB_LEAVING || zk_part_dropping(p))
				break;
			if (r->rc == ZOK || r->rc == ZNONODE)
				leave_decide(p, r);
			else if (lost)
				zk_part_step_again(p, true);
			else
				leave_failed(p, zk_refusal_errcode(r->rc),
							 "ZooKeeper refused to list the barrier's members: %s.",
							 zerror(r->rc));
			break;

		case T_LEAVE_WATCH:
			if (st->step != DB_LEAVING || zk_part_dropping(p))
				break;
			if (r->rc == ZOK)
			{
				/*
				 * It is there: wait for its watch, unless we must not; then
				 * the leave ends without completing and deletes "ready"
				 * first, as Curator's does when its time is up.
				 */
				if (st->nowait)
				{
					st->gave_up = true;
					leave_finish(p);
				}
			}
			else if (r->rc == ZNONODE)
				leave_list(p);	/* gone already: look again */
			else if (lost)
				zk_part_step_again(p, true);
			else
				leave_failed(p, zk_refusal_errcode(r->rc),
							 "ZooKeeper refused to look at a member node: %s.",
							 zerror(r->rc));
			break;

		case T_LEAVE_DEL_OWN:
			if (r->rc == ZOK || r->rc == ZNONODE)
			{
				own_node_gone(p);
				if (st->finishing && st->step == DB_LEAVING && !zk_part_dropping(p))
					leave_finish(p);
			}
			else if (lost)
			{
				/* deleted or not: the next listing tells */
				zk_part_set_phase(p, NODE_EXISTS);
				zk_part_step_again(p, true);
			}
			else
			{
				zk_part_set_phase(p, NODE_EXISTS);
				if (st->step == DB_LEAVING && !zk_part_dropping(p))
					leave_failed(p, zk_refusal_errcode(r->rc),
								 "ZooKeeper refused to delete its node: %s.",
								 zerror(r->rc));
			}
			break;

		case T_LEFT_STAT:
			if (st->step != DB_LEFT || zk_part_dropping(p))
				break;
			if (lost)
				zk_part_step_again(p, true);	/* looked at again once connected */
			else if (!ready_delete(p, r, T_DEL_READY))
				leave_settled(p);
			break;

		case T_DEL_READY:
			if (st->step != DB_LEFT || zk_part_dropping(p))
				break;
			if (lost)
				zk_part_step_again(p, true);	/* looked at again once connected */
			else
			{
				if (r->rc != ZOK && r->rc != ZNONODE)
					ereport(LOG,
							(errmsg("zklock could not delete node \"%s\": %s",
									r->path, zerror(r->rc))));
				leave_settled(p);
			}
			break;

		case T_GONE_LIST:
			if (st->step != DB_GONE)
				break;
			if (lost)
				zk_part_last_calls_lost(p);	/* made again once connected */
			else if (r->rc == ZOK)
			{
				bool		ready = false;
				bool		members = false;

				for (int i = 0; i < r->nchildren; i++)
				{
					if (strcmp(r->children[i], READY_NODE) == 0)
						ready = true;
					else
						members = true;
				}
				if (ready && !members)
					ready_look(p, T_GONE_STAT); /* it outlived every member */
			}
			else if (r->rc != ZNONODE)
				ereport(LOG,
						(errmsg("zklock could not list the members of double barrier \"%s\": %s",
								p->name, zerror(r->rc))));
			break;

		case T_GONE_STAT:
			if (st->step != DB_GONE)
				break;
			if (lost)
				zk_part_last_calls_lost(p);	/* made again once connected */
			else
				(void) ready_delete(p, r, T_GONE_READY);
			break;

		case T_GONE_READY:
			if (lost)
				zk_part_last_calls_lost(p);	/* made again once connected */
			else if (r->rc != ZOK && r->rc != ZNONODE)
				ereport(LOG,
						(errmsg("zklock could not delete node \"%s\": %s",
								r->path, zerror(r->rc))));
			break;
	}
}

/* Does the membership's end owe last calls: a member, not settled by a leave? */
static bool
dbarrier_has_last_calls(ZkPart *p)
{
	DbState    *st = state_of(p);

	return st->had_node && !st->settled;
}

/*
 * The membership ended (the holder gave its entry up: after leaving, or
 * a leave or enter that timed out or was cancelled, DISCARD ALL, backend
 * exit, an error), our node is gone and the session lives: the last
 * calls, so that "ready" does not outlive every member.  The engine frees
 * the given-up entry (the caller returns) once they are answered; lost
 * with the connection, they are made again once connected.
 */
static void
dbarrier_dropped(ZkPart *p)
{
	DbState    *st = state_of(p);

	if (st->step != DB_GONE)
	{
		/*
		 * A leave given up deletes "ready", as Curator's timed-out leave;
		 * any other end only if no member is left.
		 */
		st->gone_ready = (st->step == DB_LEAVING || st->step == DB_LEFT);
		st->step = DB_GONE;
	}
	if (st->gone_ready)
		ready_look(p, T_GONE_STAT);
	else
	{
		/* after a sync: a lagging follower's "ready" may be a round old */
		zk_call_sync(p, T_SYNC_FIRST, p->parent);
		zk_call_list(p, T_GONE_LIST, p->parent, false);
	}
}

const ZkDriver zk_double_barrier_driver = {
	.kind = ZK_KIND_DOUBLE_BARRIER,
	.form = ZK_FORM_NONE,
	.step = dbarrier_step,
	.state_size = sizeof(DbState),
	.steps = {
		.ask = dbarrier_ask,
		.dropped = dbarrier_dropped,
		.has_last_calls = dbarrier_has_last_calls,
	},
};

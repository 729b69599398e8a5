/*-------------------------------------------------------------------------
 *
 * leader.c
 *	  The instance's leader elections: Curator's LeaderLatch, one per group
 *	  of zklock.leader_groups, and what the worker publishes about them.
 *
 * For each group the worker takes part, for its whole instance, in the
 * election on <zklock.root>/<group>, with Curator's LeaderLatch layout:
 * a protected ephemeral-sequential "_c_<uuid>-latch-<seq>" node directly
 * under the group's path, whose data says who we are (zk_node_data).  The
 * lowest sequence leads; every other participant watches its predecessor
 * (a getData watch, as Curator does).  The engine runs that protocol for
 * the latch driver like for a lock (create, list, decide, watch); decide()
 * is where this file learns that the instance leads.
 *
 * Two parts of the instance itself (ZkPart.group >= 0, no entries) serve a
 * group:
 *
 *	- the latch part, whose node is our place in the election;
 *	- the observer part, which finds the current leader (the lowest latch
 *	  node) and reads its data, with a getData watch on it, so that
 *	  zk_leaders shows who leads even when that changes far ahead of our
 *	  predecessor.  When the observer sees a leader other than us while
 *	  the latch part thinks we lead (someone deleted our node), it makes
 *	  the latch part look again, so the instance stops claiming a
 *	  leadership it lost.
 *
 * Both are instance parts: when the session is lost the engine keeps them
 * and they start over in the next session (reset() hears of it and the
 * instance stops leading at once); a part that fails (ZooKeeper refused
 * its node, say) is dropped and made again after 1, 2, 4, ... seconds, at
 * most a minute.  On reload, groups added to zklock.leader_groups
 * are joined and groups removed are left (our node is deleted).
 *
 * What backends see (zk_shared->groups, one ZkGroup per group) is written
 * only here.  Whether the instance leads *now* is decided by the reader:
 * ZkGroup.leader, in ZkGroup.session_id, and that session confirmed
 * within half its timeout (zk_trusted_session, as for held locks); see
 * src/backend/leader.c.
 *
 * The same finding of the leader, without a watch, answers ZK_LIST_LEADER
 * listings (zk_leader_info for a group the instance does not take part in).
 *
 * The SQL side is backend/leader.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "worker/engine/engine.h"

/* tags of the leader finding (observer and listings) */
#define T_FIND_LIST		1
#define T_FIND_GET		2

/* A failed part is made again after 1 s, 2 s, 4 s, ... at most a minute. */
#define RETRY_MS		1000
#define RETRY_MAX_MS	60000

/* The worker's own view of a group (slot i is zk_shared->groups[i]). */
typedef struct LeaderGroup
{
	char	   *name;			/* NULL: slot unused */
	ZkPart	   *latch;			/* our place in the election, or NULL */
	ZkPart	   *observer;		/* finds the leader, or NULL */
	TimestampTz retry_at;		/* make a missing part again then */
	int			failures;		/* in a row, for the retry's delay */
	bool		leading;		/* the latch part holds */
	int64		session_id;		/* ... in this session */
	TimestampTz since;			/* leading since / leader known since */
	char		leader_node[ZK_NODE_MAX];
	char		leader_data[ZK_DATA_SHOWN];
} LeaderGroup;

static LeaderGroup groups[ZK_MAX_GROUPS];

/* ---- publishing ---- */

/* Copy what the worker knows of group i to shared memory. */
static void
publish(int i)
{
	LeaderGroup *g = &groups[i];
	ZkGroup    *s = &zk_shared->groups[i];

	LWLockAcquire(zk_shared->lock, LW_EXCLUSIVE);
	s->in_use = (g->name != NULL);
	s->leader = g->leading;
	s->session_id = g->leading ? g->session_id : 0;
	s->since = g->since;
	strlcpy(s->leader_node, g->leader_node, sizeof(s->leader_node));
	strlcpy(s->leader_data, g->leader_data, sizeof(s->leader_data));
	strlcpy(s->name, g->name ? g->name : "", sizeof(s->name));
	LWLockRelease(zk_shared->lock);
}

/* The group an instance part serves, if the part is still its current one. */
static LeaderGroup *
group_of(ZkPart *p)
{
	LeaderGroup *g;

	if (p->group < 0 || p->group >= ZK_MAX_GROUPS)
		return NULL;
	g = &groups[p->group];
	if (g->name == NULL || (g->latch != p && g->observer != p))
		return NULL;
	return g;
}

/* Who leads the group, as far as we know (node NULL: nobody, or unknown). */
static void
set_leader(LeaderGroup *g, const char *node, const char *data)
{
	if (node == NULL)
	{
		g->leader_node[0] = '\0';
		g->leader_data[0] = '\0';
		g->since = 0;
		return;
	}
	if (strcmp(g->leader_node, node) != 0)
	{
		strlcpy(g->leader_node, node, sizeof(g->leader_node));
		g->since = GetCurrentTimestamp();
		elog(DEBUG1, "zklock: group \"%s\" is led by node \"%s\"", g->name, node);
	}
	if (data)
		strlcpy(g->leader_data, data, sizeof(g->leader_data));
}

/* A part of the group failed: make it again later, later each time. */
static void
retry_later(LeaderGroup *g)
{
	int			shift = Min(g->failures, 6);

	g->failures++;
	g->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											  Min(RETRY_MS << shift, RETRY_MAX_MS));
}

/* The instance stops leading (if it did): say so and why. */
static void
stop_leading(LeaderGroup *g, const char *why)
{
	if (!g->leading)
		return;
	g->leading = false;
	g->session_id = 0;
	ereport(LOG,
			(errmsg("zklock: this instance no longer leads group \"%s\"", g->name),
			 errdetail_internal("%s", why)));
}

/* ---- the latch part ---- */

static bool
latch_counts(ZkForm form)
{
	return form == ZK_FORM_LATCH;
}

/* The lowest sequence leads; the others watch their predecessor. */
static int
latch_decide(ZkPart *p, ZkNodeRef *nodes, int n, int self)
{
	LeaderGroup *g = group_of(p);

	if (g == NULL || g->latch != p || zk_part_dropping(p))
		return ZK_WATCH_CHILDREN;	/* leaving: decide nothing, wait for
									 * nothing; the engine deletes the node */

	/* the listing names the leader: tell the observer if that is news */
	if (strcmp(g->leader_node, nodes[0].name) != 0 && g->observer)
		zk_part_look_again(g->observer);

	g->failures = 0;			/* the election works */
	if (self != 0)
		return self - 1;

	{
		char	   *data = zk_node_data(p);

		g->leading = true;
		g->session_id = p->session_id;	/* the session its node belongs to */
		set_leader(g, p->node, data);
		pfree(data);
	}
	publish(p->group);
	ereport(LOG,
			(errmsg("zklock: this instance now leads group \"%s\"", g->name),
			 errdetail_internal("Its node is \"%s/%s\".", p->parent, p->node)));
	return ZK_HOLDS;
}

/*
 * A watch of the latch part fired.  While leading, that is the data watch
 * on our own node: it changed or, as someone deleted it, went.  Stop
 * claiming at once, before looking again (a list), so that the next
 * participant, whose watch on our node fired too, never leads beside us;
 * the listing makes us lead again if our node is still the lowest.
 */
static void
latch_fired(ZkPart *p)
{
	LeaderGroup *g = group_of(p);

	if (g == NULL || g->latch != p || !g->leading)
		return;
	stop_leading(g, "Its latch node changed or was deleted; it looks again.");
	zk_part_unhold(p);
	publish(p->group);
}

/* The latch part lost its node (session lost, node deleted) or failed. */
static void
latch_reset(ZkPart *p, const char *why, bool failed)
{
	LeaderGroup *g = group_of(p);

	if (g == NULL || g->latch != p)
		return;
	stop_leading(g, why);
	if (failed)
	{
		ereport(WARNING,
				(errmsg("zklock could not take part in the election of leader group \"%s\"",
						g->name),
				 errdetail_internal("%s", why),
				 errhint("It tries again later.")));
		g->latch = NULL;
		retry_later(g);
	}
	publish(p->group);
}

static void latch_fired(ZkPart *p);
static void leader_init(void);
static void leader_reload(void);
static void leader_run(void);
static void leader_exit(void);

const ZkDriver zk_latch_driver = {
	.kind = ZK_KIND_LATCH,
	.form = ZK_FORM_LATCH,
	.reset = latch_reset,
	.fired = latch_fired,
	.init = leader_init,
	.reload = leader_reload,
	.run = leader_run,
	.exit = leader_exit,
	.seq = {
		.counts = latch_counts,
		.decide = latch_decide,
		.revocable = true,	/* a data watch on our node while leading */
	},
};

/* ---- finding the leader: the observer part, and listings ---- */

/*
 * The leader was found (node NULL: the group has no participant), with
 * the number of participants.
 */
static void
found(ZkPart *p, bool observe, const char *node, const char *data, int n)
{
	LeaderGroup *g;

	if (!observe)
	{
		StringInfo	rows = zk_list_rows(p);

		if (node)
		{
			char		count[16];
			const char *cols[3];

			snprintf(count, sizeof(count), "%d", n);
			cols[0] = node;
			cols[1] = data;
			cols[2] = count;
			zk_add_row(rows, 3, cols);
		}
		zk_part_rows(p, rows);
		return;
	}

	if ((g = group_of(p)) == NULL)
		return;
	set_leader(g, node, data);
	publish(p->group);

	/* we think we lead, but the leader is someone else: look again */
	if (g->latch && zk_part_holds(g->latch) &&
		(node == NULL || strcmp(node, g->latch->node) != 0))
		zk_part_look_again(g->latch);
}

/* A call failed: wait for the reconnection, or give up. */
static void
find_failed(ZkPart *p, const ZkResult *r)
{
	if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
		return;					/* looked at again once connected */
	zk_part_fail(p, zk_refusal_errcode(r->rc),
				 "ZooKeeper refused to list leader group \"%s\": %s.",
				 p->name, zerror(r->rc));
}

/*
 * List the group's latch nodes, read the lowest one's data.  The observer
 * (observe) keeps a watch on the leader's node, or on the children while
 * there is no participant.
 */
static void
find_step(ZkPart *p, const ZkResult *r, bool observe)
{
	ZkLeaderFind *f = observe ? &p->ds.observer : &p->ds.list->find;
	ZkNodeRef  *nodes;
	int			n;
	char		path[ZK_PATH_MAX];

	if (zk_part_dropping(p))
		return;
	if (r == NULL)
	{
		f->watched = false;
		zk_call_list(p, T_FIND_LIST, p->parent, false);
		return;
	}
	switch (r->tag)
	{
		case T_FIND_LIST:
			if (r->rc != ZOK && r->rc != ZNONODE)
			{
				find_failed(p, r);
				return;
			}
			n = zk_list_participants(r, latch_counts, &nodes);
			if (n > 0)
			{
				f->n = n;
				snprintf(path, sizeof(path), "%s/%s", p->parent, nodes[0].name);
				zk_call_get(p, T_FIND_GET, path, observe);
				return;
			}
			found(p, observe, NULL, NULL, 0);
			if (observe && !f->watched && !zk_part_dropping(p))
			{
				/* wait for a participant (our own latch part's node) */
				f->watched = true;
				zk_call_list(p, T_FIND_LIST, p->parent, true);
			}
			break;
		case T_FIND_GET:
			if (r->rc == ZOK)
				found(p, observe, zk_node_of(r->path), r->data ? r->data : "",
					  f->n);
			else if (r->rc == ZNONODE)
			{
				/* the leader went between the listing and the read */
				f->watched = false;
				zk_call_list(p, T_FIND_LIST, p->parent, false);
			}
			else
				find_failed(p, r);
			break;
	}
}

static void
observer_step(ZkPart *p, const ZkResult *r)
{
	find_step(p, r, true);
}

/* The observer's session ended (it starts over) or it failed. */
static void
observer_reset(ZkPart *p, const char *why, bool failed)
{
	LeaderGroup *g = group_of(p);

	if (g == NULL || g->observer != p)
		return;
	set_leader(g, NULL, NULL);
	if (failed)
	{
		ereport(WARNING,
				(errmsg("zklock could not follow the leader of group \"%s\"", g->name),
				 errdetail_internal("%s", why),
				 errhint("It tries again later.")));
		g->observer = NULL;
		retry_later(g);
	}
	publish(p->group);
}

static const ZkDriver observer_driver = {
	.kind = ZK_KIND_LATCH,
	.form = ZK_FORM_NONE,
	.step = observer_step,
	.reset = observer_reset,
};

/*
 * A ZK_LIST_LEADER listing (recipes/inspect.c hands it over): one row
 * (leader node, its data, number of participants), none without
 * participants.
 */
void
zk_leader_list_step(ZkPart *p, const ZkResult *r)
{
	find_step(p, r, false);
}

/* ---- joining and leaving ---- */

static void
make_parts(int i)
{
	LeaderGroup *g = &groups[i];

	/* the latch first: its create goes out before the observer's listing */
	if (g->latch == NULL)
		g->latch = zk_instance_part(&zk_latch_driver, g->name, i);
	if (g->observer == NULL)
		g->observer = zk_instance_part(&observer_driver, g->name, i);
}

static void
join(int i, const char *name)
{
	LeaderGroup *g = &groups[i];

	memset(g, 0, sizeof(*g));
	g->name = MemoryContextStrdup(TopMemoryContext, name);
	publish(i);
	ereport(LOG,
			(errmsg("zklock: this instance takes part in the election of leader group \"%s\"",
					name)));
	make_parts(i);
}

static void
leave(int i)
{
	LeaderGroup *g = &groups[i];
	ZkPart	   *latch = g->latch;
	ZkPart	   *observer = g->observer;

	stop_leading(g, "The group was removed from zklock.leader_groups.");
	ereport(LOG,
			(errmsg("zklock: this instance leaves the election of leader group \"%s\"",
					g->name)));
	g->latch = g->observer = NULL;
	pfree(g->name);
	memset(g, 0, sizeof(*g));
	publish(i);
	/* their nodes are deleted; nothing of theirs reaches us any more */
	if (latch)
		zk_part_drop(latch);
	if (observer)
		zk_part_drop(observer);
}

/* Settings were (re)loaded: join and leave groups as zklock.leader_groups says. */
static void
leader_reload(void)
{
	char	   *raw = pstrdup(zklock_leader_groups ? zklock_leader_groups : "");
	List	   *names;
	ListCell   *lc;

	if (!SplitGUCList(raw, ',', &names))
	{
		/* the check hook let it pass, so this cannot happen */
		elog(LOG, "zklock: could not parse zklock.leader_groups");
		return;
	}

	for (int i = 0; i < ZK_MAX_GROUPS; i++)
	{
		bool		named = false;

		if (groups[i].name == NULL)
			continue;
		foreach(lc, names)
			if (strcmp(lfirst(lc), groups[i].name) == 0)
				named = true;
		if (!named)
			leave(i);
	}

	foreach(lc, names)
	{
		const char *name = lfirst(lc);
		int			free_slot = -1;
		bool		member = false;

		for (int i = 0; i < ZK_MAX_GROUPS; i++)
		{
			if (groups[i].name && strcmp(groups[i].name, name) == 0)
				member = true;
			else if (groups[i].name == NULL && free_slot < 0)
				free_slot = i;
		}
		if (!member && free_slot >= 0)
			join(free_slot, name);
	}
	list_free(names);
	pfree(raw);
}

/* The worker starts: nothing of a previous run counts; join the groups. */
static void
leader_init(void)
{
	memset(groups, 0, sizeof(groups));
	for (int i = 0; i < ZK_MAX_GROUPS; i++)
		publish(i);
	leader_reload();
}

/* The worker exits: its session, and every leadership, ends with it. */
static void
leader_exit(void)
{
	for (int i = 0; i < ZK_MAX_GROUPS; i++)
	{
		if (groups[i].name == NULL || !groups[i].leading)
			continue;
		stop_leading(&groups[i], "The zklock worker is exiting; its ZooKeeper session ends.");
		publish(i);
	}
}

/* Every turn: make again the parts that failed, once their time came. */
static void
leader_run(void)
{
	TimestampTz now = 0;

	for (int i = 0; i < ZK_MAX_GROUPS; i++)
	{
		LeaderGroup *g = &groups[i];

		if (g->name == NULL || (g->latch && g->observer))
			continue;
		if (now == 0)
			now = GetCurrentTimestamp();
		if (now >= g->retry_at)
			make_parts(i);
	}
}

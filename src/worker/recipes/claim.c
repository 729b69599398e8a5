/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  Job claims: "this (job, slot) is done once", made final with the
 *	  claiming transaction.
 *
 * A claim of job J for slot S is the znode <zklock.root>/J/claims/<S>,
 * named after the slot's time in UTC (shared/paths.c, zk_slot_name).  Its
 * data is the JSON of zk_node_data() with "slot", "claimed_at", a random
 * "claim" nonce and "state" added.
 *
 *	- The claim (zk_job_claim): the worker creates the node EPHEMERAL with
 *	  state "pending".  NODEEXISTS: someone holds or finished the slot, the
 *	  request would block (false at once).  Created: granted, the backend
 *	  holds it in transaction scope (backend/holdings.c).
 *	- COMMIT (ZK_ASK_FINALIZE, at PRE_COMMIT): one multi-op deletes the
 *	  ephemeral node (at the data version we created) and creates a
 *	  PERSISTENT node of the same path with state "final"
 *	  (zk_call_finalize).  ZooKeeper applies a multi's operations in order
 *	  and all or none, so the slot is never open in between and never final
 *	  without the commit having asked for it.  Any failure fails the COMMIT
 *	  (40001, backend/holdings.c).
 *	- Abort, backend exit: the entry is given up and the engine deletes the
 *	  ephemeral node; crash or session loss: ZooKeeper deletes it.  Either
 *	  way the slot is open again.
 *	- Abort after the claim was made final (the COMMIT failed later than
 *	  PRE_COMMIT: a serialization failure, another extension's callback):
 *	  the backend gives the entry up with ZK_ASK_REOPEN, and the final node
 *	  goes on the reopen list (below).
 *
 * Outcomes the worker cannot know (the reply of a create or of the multi
 * lost with the connection) are settled by the nonce: a create's is looked
 * for again once connected (get; ours when its data has our nonce); a
 * finalize whose outcome is unknown, or that succeeded after its backend
 * gave up (the transaction aborted), or whose transaction aborted after it,
 * is put on the reopen list: the claims' own part deletes the node at that
 * path while its data carries that nonce (a get, then a delete at the
 * version it saw), whatever the session, since a final node outlives
 * sessions.  The list lives in the worker's memory and is worked through
 * whenever the worker is connected: an outage only delays it.  A claim
 * made final whose part goes with a session loss before its transaction
 * ends is not on it (README: the windows left).
 *
 * Retention (zklock.claim_retention): the claims' own part (an instance
 * part, ZK_GROUP_CLAIMS) lists, every min(retention / 2, 1 minute), the
 * claims of every job this instance's worker has claimed since it started
 * and deletes final ones whose slot and creation are both older than the
 * retention.
 *
 * Listings (ZK_LIST_CLAIMS, via recipes/inspect.c): every claim node of a
 * job, one row each: node name, data, ctime (ms), final ("t"/"f").
 *
 * The SQL side is backend/claim.c; the claiming transaction is kept by
 * backend/holdings.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/engine/engine.h"

/* tags */
#define T_CLAIM_CREATE	1
#define T_CLAIM_CHECK	2
#define T_CLAIM_FINAL	3
#define T_LIST_LIST		4
#define T_LIST_GET		5
#define T_SWEEP_LIST	6
#define T_SWEEP_STAT	7
#define T_SWEEP_DEL		8
#define T_REOPEN_GET	9
#define T_REOPEN_DEL	10
#define T_CLAIM_SYNC	11		/* answers need nothing: what follows it */
#define T_REOPEN_SYNC	12		/* is answered after it */
#define T_CLAIM_LOOK	13		/* getData with a watch of another's claim */

/* where a claim part is (ZkPart.step) */
#define CLAIM_START		0		/* create the node */
#define CLAIM_CREATING	1		/* create sent */
#define CLAIM_CHECK		2		/* create's reply lost: is the node ours? */
#define CLAIM_HELD		3		/* our ephemeral node exists: granted */
#define CLAIM_FINALIZING 4		/* the multi is on its way */
#define CLAIM_FINAL		5		/* made final: its transaction decides */
#define CLAIM_OVER		6		/* taken by someone else, failed, or settled */
#define CLAIM_REOPENING	7		/* its transaction aborted after the claim
								 * was made final (or might have been): its
								 * release waits for the reopening */
#define CLAIM_LOOKING	8		/* someone else's node is there: final? */
#define CLAIM_WAITING	9		/* ... an open claim: wait for it to end */
#define CLAIM_FINAL_WAIT 10		/* ... made final a moment ago: its COMMIT
								 * may still fail and reopen it */

#define NONCE_LEN		ZK_NONCE_LEN
#define MAX_JOBS		10000
#define MAX_REOPEN		10000
#define REOPEN_INTERVAL_MS	1000
#define SWEEP_MAX_MS	60000

/* a node to delete while its data carries our nonce */
typedef struct ReopenItem
{
	char	   *path;
	char		nonce[NONCE_LEN + 1];
	ZkMono		not_before;		/* not looked at before (0: at once) */
	bool		deleting;		/* its delete is on its way */
	bool		refused;		/* ZooKeeper refused to read or delete it */
} ReopenItem;

static ZkPart *claims_part;		/* the claims' own part */
static HTAB *jobs;				/* names of the jobs claimed by us */
static List *reopen = NIL;		/* of ReopenItem, in TopMemoryContext */
/*
 * Claims that wait while a final node made a moment ago may still be
 * reopened (CLAIM_FINAL_WAIT): until when, at the latest.
 */
typedef struct FinalWait
{
	ZkPart	   *part;
	ZkMono		until;
} FinalWait;

static List *final_waits = NIL;	/* of FinalWait, in TopMemoryContext */
static ZkMono next_sweep = 0;	/* monotonic, as every interval here */
static ZkMono next_reopen = 0;

/* ---- helpers ---- */

static void
claim_path(ZkPart *p, char *buf, size_t size)
{
	snprintf(buf, size, "%s/%s", p->parent, p->node);
}

/* The nonce in a claim's data ("claim":"<hex>"), or "" if none. */
static void
data_nonce(const char *data, char *nonce)
{
	const char *key = "\"claim\":\"";
	const char *s = data ? strstr(data, key) : NULL;

	nonce[0] = '\0';
	if (s == NULL)
		return;
	s += strlen(key);
	if (strlen(s) > NONCE_LEN && s[NONCE_LEN] == '"')
	{
		memcpy(nonce, s, NONCE_LEN);
		nonce[NONCE_LEN] = '\0';
	}
}

/* Our part's claim data with another state ("pending" -> state). */
static char *
claim_data(ZkPart *p, const char *state)
{
	const char *tail = "\"pending\"}";
	size_t		len = strlen(p->extra) - strlen(tail);

	return psprintf("%.*s\"%s\"}", (int) len, p->extra, state);
}

/* Remember a job whose claims the retention must sweep. */
static void
note_job(const char *name)
{
	char		key[ZK_NAME_MAX + 1];

	if (hash_get_num_entries(jobs) >= MAX_JOBS)
		return;
	memset(key, 0, sizeof(key));
	strlcpy(key, name, sizeof(key));
	(void) hash_search(jobs, key, HASH_ENTER, NULL);
}

static void
reopen_add(const char *path, const char *data, ZkMono not_before)
{
	ReopenItem *it;
	MemoryContext old;

	if (list_length(reopen) >= MAX_REOPEN)
	{
		ereport(WARNING,
				(errmsg("zklock cannot reopen job claim \"%s\": too many to reopen",
						path)));
		return;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	it = palloc(sizeof(ReopenItem));
	it->path = pstrdup(path);
	data_nonce(data, it->nonce);
	it->not_before = not_before;
	it->deleting = false;
	it->refused = false;
	reopen = lappend(reopen, it);
	MemoryContextSwitchTo(old);
	if (not_before == 0)
		next_reopen = 0;
}

static void
reopen_free(ReopenItem *it)
{
	pfree(it->path);
	pfree(it);
}

/* The item of the claim whose data is "data" at path, or NULL. */
static ReopenItem *
reopen_find(const char *path, const char *data)
{
	char		nonce[NONCE_LEN + 1];
	ListCell   *lc;

	data_nonce(data, nonce);
	foreach(lc, reopen)
	{
		ReopenItem *it = lfirst(lc);

		if (strcmp(it->path, path) == 0 && strcmp(it->nonce, nonce) == 0)
			return it;
	}
	return NULL;
}

static void
reopen_forget(ReopenItem *it)
{
	reopen = list_delete_ptr(reopen, it);
	reopen_free(it);
}

/* ZooKeeper's ctime (ms since 1970) as a TimestampTz. */
static TimestampTz
zk_time(int64 ms)
{
	return ms * 1000 -
		((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC);
}

/* ---- the claim of one backend ---- */

static void
claim_create(ZkPart *p)
{
	char		path[ZK_PATH_MAX];

	claim_path(p, path, sizeof(path));
	p->step = CLAIM_CREATING;
	p->phase = NODE_CREATING;
	zk_call_create(p, T_CLAIM_CREATE, path, p->extra, ZOO_EPHEMERAL, true);
}

static void
claim_start(ZkPart *p)
{
	char		nonce[NONCE_LEN + 1];
	char	   *base;
	char	   *slot = zk_slot_name(p->targ);
	char	   *now = zk_slot_name(GetCurrentTimestamp());

	if (!zk_nonce(nonce))
	{
		zk_part_fail(p, ERRCODE_INTERNAL_ERROR, "Could not generate random bytes.");
		return;
	}
	strlcpy(p->node, slot, sizeof(p->node));
	base = zk_node_data(p);
	base[strlen(base) - 1] = '\0';	/* its closing brace */
	if (p->extra)
		pfree(p->extra);
	p->extra = MemoryContextStrdup(TopMemoryContext,
								   psprintf("%s,\"slot\":\"%s\",\"claimed_at\":\"%s\",\"claim\":\"%s\",\"state\":\"pending\"}",
											base, slot, now, nonce));
	note_job(p->name);
	claim_create(p);
}

/* The slot is done (final), or taken and we must not wait: false. */
static void
claim_taken(ZkPart *p)
{
	p->phase = NODE_NONE;
	p->step = CLAIM_OVER;
	zk_part_taken(p);
	zk_part_drop(p);
}

/*
 * The final node of another claim is at the claim's path.  It was made at
 * that claim's PRE_COMMIT, and its transaction can still fail after that
 * (a serialization failure, another extension's commit work, the answer
 * of the finalize lost), and then its worker reopens the slot: at once,
 * or once it is connected again, within about twice the session timeout.
 * So a waiting request that finds a final node younger than that keeps
 * waiting on its watch until that age (claim_run): deleted meanwhile, it
 * claims again; still there, the slot is done (false).  An older one is
 * done at once.
 */
static void
claim_final_seen(ZkPart *p, const struct Stat *stat)
{
	int64		grace_ms = 2 * (int64) zklock_session_timeout + 2 * REOPEN_INTERVAL_MS;
	int64		age_ms = (GetCurrentTimestamp() - zk_time(stat->ctime)) / 1000;
	FinalWait  *w = NULL;
	ListCell   *lc;

	if (age_ms >= grace_ms)
	{
		claim_taken(p);
		return;
	}
	p->step = CLAIM_FINAL_WAIT;
	zk_part_wait_on(p, p->node);
	foreach(lc, final_waits)	/* one per part (it may look again) */
	{
		if (((FinalWait *) lfirst(lc))->part == p)
			w = lfirst(lc);
	}
	if (w == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		w = palloc(sizeof(FinalWait));
		w->part = p;
		final_waits = lappend(final_waits, w);
		MemoryContextSwitchTo(old);
	}
	w->until = ZkMonoPlusMs(zk_mono_now(), grace_ms - Max(age_ms, 0));
}

/*
 * Someone else's node is at the claim's path.  A request that must not
 * wait is answered false at once.  One that may wait looks at the node,
 * with a data watch: final, the slot is done (false); an open claim, it
 * waits for that claim to end, and then claims again: made final, false;
 * given up (its transaction aborted, its backend or session went), the
 * slot is open and this request may take it.
 */
static void
claim_exists(ZkPart *p)
{
	int			id = zk_part_entry(p);
	char		path[ZK_PATH_MAX];

	p->phase = NODE_NONE;
	if (id < 0 || (ZK_ENTRY(id)->flags & ZKR_NOWAIT))
	{
		claim_taken(p);
		return;
	}
	p->step = CLAIM_LOOKING;
	claim_path(p, path, sizeof(path));
	zk_call_get(p, T_CLAIM_LOOK, path, true);
}

static void
claim_step(ZkPart *p, const ZkResult *r)
{
	char		path[ZK_PATH_MAX];

	if (r == NULL)
	{
		switch (p->step)
		{
			case CLAIM_START:
				if (!p->dropping)
					claim_start(p);
				break;
			case CLAIM_LOOKING:
			case CLAIM_WAITING:
			case CLAIM_FINAL_WAIT:
				/* the claim waited for ended (its watch), or lost answers */
				if (!p->dropping)
					claim_start(p);
				break;
			case CLAIM_CHECK:
				/* after a sync: a follower may not have our create yet */
				claim_path(p, path, sizeof(path));
				zk_call_sync(p, T_CLAIM_SYNC, p->parent);
				zk_call_get(p, T_CLAIM_CHECK, path, false);
				break;
			default:
				break;
		}
		return;
	}

	switch (r->tag)
	{
		case T_CLAIM_CREATE:
			if (r->rc == ZOK)
			{
				zk_part_node_created(p, r->path, &r->stat);
				p->step = CLAIM_HELD;
				zk_part_grant(p);
			}
			else if (r->rc == ZNODEEXISTS)
				claim_exists(p);
			else if (r->rc == ZNONODE)
			{
				/* a parent went (a reaped container): create them again */
				p->step = CLAIM_START;
				if (zk_part_parent_gone(p))
				{
					p->need_eval = true;
					pfree(p->extra);
					p->extra = NULL;
				}
			}
			else if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
			{
				/* created or not: look once connected (advance() asks) */
				p->step = CLAIM_CHECK;
				p->need_eval = true;
			}
			else
			{
				p->phase = NODE_NONE;
				p->step = CLAIM_OVER;
				zk_part_fail(p, zk_refusal_errcode(r->rc),
							 "ZooKeeper refused to create the claim node: %s.",
							 zerror(r->rc));
			}
			break;

		case T_CLAIM_CHECK:
			if (r->rc == ZOK && r->has_stat && zk_is_ours(&r->stat))
			{
				char		ours[NONCE_LEN + 1];
				char		theirs[NONCE_LEN + 1];

				data_nonce(p->extra, ours);
				data_nonce(r->data, theirs);
				if (strcmp(ours, theirs) != 0)
				{
					claim_exists(p);
					break;
				}
				zk_part_node_created(p, r->path, &r->stat);
				p->step = CLAIM_HELD;
				zk_part_grant(p);	/* or, dropping, the engine deletes it */
			}
			else if (r->rc == ZOK)
				claim_exists(p);
			else if (r->rc == ZNONODE)
			{
				/* our create never happened */
				p->phase = NODE_NONE;
				p->step = CLAIM_START;
				if (!p->dropping)
				{
					p->need_eval = true;
					pfree(p->extra);
					p->extra = NULL;
				}
			}
			else
				p->need_eval = true;	/* again once connected */
			break;

		case T_CLAIM_LOOK:
			if (p->step != CLAIM_LOOKING || p->dropping)
				break;
			if (r->rc == ZOK && r->has_stat && r->stat.ephemeralOwner == 0)
				claim_final_seen(p, &r->stat);
			else if (r->rc == ZOK)
			{
				/* open: the watch tells when it is made final or given up */
				p->step = CLAIM_WAITING;
				zk_part_wait_on(p, p->node);
			}
			else if (r->rc == ZNONODE)
				claim_start(p); /* gone meanwhile: claim again */
			else if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
				p->need_eval = true;	/* claims again once connected */
			else
			{
				p->step = CLAIM_OVER;
				zk_part_fail(p, zk_refusal_errcode(r->rc),
							 "ZooKeeper refused to read the claim node: %s.",
							 zerror(r->rc));
			}
			break;

		case T_CLAIM_FINAL:
			{
				int			id = zk_part_entry(p);

				claim_path(p, path, sizeof(path));
				/* no more node of ours to delete: final, or for reopening */
				pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
				p->phase = NODE_NONE;
				if (r->rc == ZOK && id >= 0)
				{
					ReopenItem *it = reopen_find(path, p->extra);

					/* the transaction's end decides (claim_ask, REOPEN) */
					if (it)
						reopen_forget(it);
					p->step = CLAIM_FINAL;
					zk_set_ask_outcome(id, ZK_ASK_DONE, 0, NULL);
					break;
				}
				/* failed, unknown, or done after its transaction went */
				{
					ReopenItem *it = reopen_find(path, p->extra);

					if (it)
						it->not_before = 0;
					else
						reopen_add(path, p->extra, 0);
					next_reopen = 0;
				}
				/* a given-up entry's release waits for the reopening */
				p->step = id >= 0 ? CLAIM_OVER : CLAIM_REOPENING;
				if (id >= 0)
					zk_set_ask_outcome(id, ZK_ASK_FAILED,
									   ERRCODE_T_R_SERIALIZATION_FAILURE,
									   zk_is_connection_loss(r->rc) ?
									   "The connection to ZooKeeper was lost while making the claim final (%s)." :
									   "ZooKeeper refused to make the claim final: %s.",
									   zerror(r->rc));
				break;
			}
	}
}

static void
claim_ask(ZkPart *p, int id, ZkAsk ask)
{
	char		path[ZK_PATH_MAX];

	if (ask == ZK_ASK_REOPEN)
	{
		/*
		 * The transaction aborted and gave the entry up.  A claim it made
		 * final goes on the reopen list; one still being made final is
		 * there already (T_CLAIM_FINAL settles it); any other has only an
		 * ephemeral node, which the engine deletes with the entry.  Until
		 * a due reopening is done, the release waits (claim_busy), so that
		 * the failed COMMIT returns with the slot open again.
		 */
		if (p->step == CLAIM_FINAL)
		{
			claim_path(p, path, sizeof(path));
			reopen_add(path, p->extra, 0);
			p->step = CLAIM_REOPENING;
		}
		else if (p->step == CLAIM_OVER)
			p->step = CLAIM_REOPENING;	/* a failed finalize's, if due */
		zk_set_ask_outcome(id, ZK_ASK_DONE, 0, NULL);
		return;
	}
	if (ask != ZK_ASK_FINALIZE)
	{
		zk_set_ask_outcome(id, ZK_ASK_FAILED, ERRCODE_FEATURE_NOT_SUPPORTED,
						   "A job claim cannot do that.");
		return;
	}
	if (p->step != CLAIM_HELD || p->phase != NODE_EXISTS)
	{
		zk_set_ask_outcome(id, ZK_ASK_FAILED, ERRCODE_T_R_SERIALIZATION_FAILURE,
						   "The claim's node is gone.");
		return;
	}
	if (!zk_connected() || p->session_id != zk_session())
	{
		zk_set_ask_outcome(id, ZK_ASK_FAILED, ERRCODE_T_R_SERIALIZATION_FAILURE,
						   "The zklock worker has no ZooKeeper connection in the claim's session.");
		return;
	}
	claim_path(p, path, sizeof(path));
	p->step = CLAIM_FINALIZING;
	p->phase = NODE_DELETING;	/* the multi deletes it; nothing else may */

	/*
	 * Should the multi's answer never come (the session abandoned), the
	 * node is looked at once its fate is settled: the transaction cannot
	 * have committed without that answer.
	 */
	reopen_add(path, p->extra,
			   ZkMonoPlusMs(zk_mono_now(), 2 * zklock_session_timeout + 1000));
	zk_call_finalize(p, T_CLAIM_FINAL, path, p->version, claim_data(p, "final"));
}

/*
 * Does the release of an aborted claim wait for its reopening?  While its
 * item is due and ZooKeeper has not refused to read or delete the node
 * (a connection loss is tried again, and then the backend's wait ends by
 * the rule of zk_lock_held).
 */
static bool
claim_busy(ZkPart *p)
{
	char		path[ZK_PATH_MAX];
	ReopenItem *it;

	if (p->step != CLAIM_REOPENING || p->extra == NULL)
		return false;
	claim_path(p, path, sizeof(path));
	it = reopen_find(path, p->extra);
	return it != NULL && it->not_before == 0 && !it->refused;
}

/* A claim part goes: it waits for nothing any more. */
static void
claim_freed(ZkPart *p)
{
	ListCell   *lc;

	foreach(lc, final_waits)
	{
		FinalWait  *w = lfirst(lc);

		if (w->part == p)
		{
			final_waits = foreach_delete_current(final_waits, lc);
			pfree(w);
		}
	}
}

static void claim_init(void);
static void claim_reload(void);
static void claim_run(void);

const ZkDriver zk_claim_driver = {
	.kind = ZK_KIND_JOB_CLAIM,
	.suffix = ZK_SUFFIX_CLAIMS,
	.form = ZK_FORM_NONE,
	.step = claim_step,
	.ask = claim_ask,
	.busy = claim_busy,
	.freed = claim_freed,
	.init = claim_init,
	.reload = claim_reload,
	.run = claim_run,
};

/* ---- listings (ZK_LIST_CLAIMS) ---- */

void
zk_claim_list_step(ZkPart *p, const ZkResult *r)
{
	char		path[ZK_PATH_MAX];
	MemoryContext old;

	if (r == NULL)
	{
		old = MemoryContextSwitchTo(TopMemoryContext);
		if (p->rows == NULL)
			p->rows = makeStringInfo();	/* freed with the part */
		MemoryContextSwitchTo(old);
		resetStringInfo(p->rows);
		p->count = 0;
		snprintf(path, sizeof(path), "%s/claims", p->parent);
		zk_call_list(p, T_LIST_LIST, path, false);
		return;
	}
	if (r->rc != ZOK && r->rc != ZNONODE)
	{
		if (p->rows)
			zk_part_fail(p, zk_is_connection_loss(r->rc) ?
						 ERRCODE_CONNECTION_FAILURE : zk_refusal_errcode(r->rc),
						 "ZooKeeper could not list the claims of job \"%s\": %s.",
						 p->name, zerror(r->rc));
		return;
	}
	switch (r->tag)
	{
		case T_LIST_LIST:
			for (int i = 0; r->rc == ZOK && i < r->nchildren; i++)
			{
				TimestampTz slot;

				if (!zk_parse_slot_name(r->children[i], &slot))
					continue;
				snprintf(path, sizeof(path), "%s/%s", r->path, r->children[i]);
				zk_call_get(p, T_LIST_GET, path, false);
				p->count++;
			}
			break;
		case T_LIST_GET:
			p->count--;
			if (r->rc == ZOK)
			{
				const char *cols[4];
				char		ctime[32];

				snprintf(ctime, sizeof(ctime), INT64_FORMAT, (int64) r->stat.ctime);
				cols[0] = zk_node_of(r->path);
				cols[1] = r->data ? r->data : "";
				cols[2] = ctime;
				cols[3] = r->stat.ephemeralOwner == 0 ? "t" : "f";
				zk_add_row(p->rows, 4, cols);
			}
			break;
	}
	if (p->count == 0 && p->inflight == 0)
		zk_part_rows(p);
}

/* ---- the claims' own part: retention and reopening ---- */

static int
sweep_interval_ms(void)
{
	int64		half = (int64) zklock_claim_retention * 500;

	return (int) Max(1000, Min(half, SWEEP_MAX_MS));
}

static void
own_step(ZkPart *p, const ZkResult *r)
{
	ZkMono		now = zk_mono_now();
	TimestampTz wall = GetCurrentTimestamp();	/* for ages of claims */
	char		path[ZK_PATH_MAX];

	if (r == NULL)
	{
		ListCell   *lc;

		if (reopen != NIL && now >= next_reopen)
		{
			/*
			 * After a sync, so that a follower behind the leader shows the
			 * nodes as they are: a delete of ours whose answer was lost may
			 * have been applied, and a node of the same path since is
			 * someone else's claim (its nonce tells).  One sync orders every
			 * read sent after it.
			 */
			zk_call_sync(p, T_REOPEN_SYNC,
						 ((ReopenItem *) linitial(reopen))->path);
			foreach(lc, reopen)
			{
				ReopenItem *it = lfirst(lc);

				if (now >= it->not_before)
					zk_call_get(p, T_REOPEN_GET, it->path, false);
			}
			next_reopen = ZkMonoPlusMs(now, REOPEN_INTERVAL_MS);
		}
		if (zklock_claim_retention > 0 && now >= next_sweep)
		{
			HASH_SEQ_STATUS hs;
			char	   *job;

			hash_seq_init(&hs, jobs);
			while ((job = hash_seq_search(&hs)) != NULL)
			{
				zk_path(path, sizeof(path), job, "/claims");
				zk_call_list(p, T_SWEEP_LIST, path, false);
			}
			next_sweep = ZkMonoPlusMs(now, sweep_interval_ms());
		}
		return;
	}

	switch (r->tag)
	{
		case T_REOPEN_GET:
		case T_REOPEN_DEL:
			{
				/*
				 * Every due item of this path: a GET settles the items whose
				 * nonce the node does not carry (or all, if it is gone) and
				 * deletes the node for the one whose nonce it carries; a
				 * DELETE that went through settles that one.  Items of a
				 * finalize still on its way are not due.
				 */
				char		nonce[NONCE_LEN + 1];
				ListCell   *lc;
				bool		del = false;

				if (r->rc != ZOK && r->rc != ZNONODE)
				{
					bool		refused = !zk_is_connection_loss(r->rc) &&
						r->rc != ZCLOSING && r->rc != ZBADVERSION;

					foreach(lc, reopen)
					{
						ReopenItem *it = lfirst(lc);

						if (strcmp(it->path, r->path) != 0)
							continue;
						if (r->tag == T_REOPEN_DEL)
							it->deleting = false;
						if (refused)
							it->refused = true;	/* no release waits for it */
					}
					if (r->tag == T_REOPEN_GET &&
						!zk_is_connection_loss(r->rc) && r->rc != ZCLOSING)
						ereport(WARNING,
								(errmsg("zklock could not look at job claim \"%s\" to reopen it: %s",
										r->path, zerror(r->rc)),
								 errhint("It tries again.")));
					break;		/* tried again */
				}
				data_nonce(r->rc == ZOK ? r->data : NULL, nonce);
				foreach(lc, reopen)
				{
					ReopenItem *it = lfirst(lc);

					if (strcmp(it->path, r->path) != 0 || now < it->not_before)
						continue;
					if (r->tag == T_REOPEN_DEL)
					{
						if (!it->deleting)
							continue;
						if (r->rc == ZOK)
							ereport(LOG,
									(errmsg("zklock reopened job claim \"%s\"", r->path),
									 errdetail("Its transaction did not commit.")));
					}
					else if (r->rc == ZOK && strcmp(nonce, it->nonce) == 0)
					{
						if (!it->deleting && !del)
							zk_call_delete(p, T_REOPEN_DEL, r->path, r->stat.version);
						it->deleting = true;
						del = true;
						continue;
					}
					reopen = foreach_delete_current(reopen, lc);
					reopen_free(it);
				}
				break;
			}
		case T_SWEEP_LIST:
			{
				TimestampTz cutoff = wall -
					(int64) zklock_claim_retention * USECS_PER_SEC;

				for (int i = 0; r->rc == ZOK && i < r->nchildren; i++)
				{
					TimestampTz slot;

					if (!zk_parse_slot_name(r->children[i], &slot) || slot >= cutoff)
						continue;
					snprintf(path, sizeof(path), "%s/%s", r->path, r->children[i]);
					zk_call_exists(p, T_SWEEP_STAT, path);
				}
				break;
			}
		case T_SWEEP_STAT:
			if (r->rc == ZOK && r->has_stat && r->stat.ephemeralOwner == 0 &&
				zk_time(r->stat.ctime) <
				wall - (int64) zklock_claim_retention * USECS_PER_SEC)
				zk_call_delete(p, T_SWEEP_DEL, r->path, r->stat.version);
			break;
		case T_SWEEP_DEL:
			if (r->rc == ZOK)
				elog(DEBUG1, "zklock: removed old job claim \"%s\"", r->path);
			break;
	}
}

static void
own_reset(ZkPart *p, const char *why, bool failed)
{
	if (failed)
		claims_part = zk_instance_part(p->driver, "", ZK_GROUP_CLAIMS);
}

static const ZkDriver own_driver = {
	.kind = ZK_KIND_JOB_CLAIM,
	.suffix = "",
	.form = ZK_FORM_NONE,
	.step = own_step,
	.reset = own_reset,
};

static void
claim_init(void)
{
	HASHCTL		ctl;

	ctl.keysize = ZK_NAME_MAX + 1;
	ctl.entrysize = ZK_NAME_MAX + 1;
	ctl.hcxt = TopMemoryContext;
	jobs = hash_create("zklock claimed jobs", 64, &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	claims_part = zk_instance_part(&own_driver, "", ZK_GROUP_CLAIMS);
}

/* Settings were reloaded: a new zklock.claim_retention applies at once. */
static void
claim_reload(void)
{
	next_sweep = 0;
}

/* From the engine's turn: start reopening or sweeping when due. */
static void
claim_run(void)
{
	ZkMono		now = zk_mono_now();
	ListCell   *lc;
	List	   *due = NIL;

	/*
	 * Waits on a final node whose time is up, while connected: the slot is
	 * done.  (Waits that went on are dropped: their part moved on.)  The
	 * parts are answered after the walk, as that may free them.
	 */
	foreach(lc, final_waits)
	{
		FinalWait  *w = lfirst(lc);
		ZkPart	   *p = w->part;

		if (p->step == CLAIM_FINAL_WAIT && !p->dropping &&
			(now < w->until || !zk_connected()))
			continue;
		if (p->step == CLAIM_FINAL_WAIT && !p->dropping)
			due = lappend(due, p);
		final_waits = foreach_delete_current(final_waits, lc);
		pfree(w);
	}
	foreach(lc, due)
		claim_taken(lfirst(lc));
	list_free(due);

	if (claims_part == NULL || !zk_connected() || claims_part->inflight > 0)
		return;
	if ((reopen != NIL && now >= next_reopen) ||
		(zklock_claim_retention > 0 && now >= next_sweep &&
		 hash_get_num_entries(jobs) > 0))
		zk_part_look_again(claims_part);
}

/*-------------------------------------------------------------------------
 *
 * claim.c
 *	  Job claims: "this (job, slot) is done once", settled by the claiming
 *	  transaction's commit record.
 *
 * A claim of job J for slot S is the znode <zklock.root>/J/claims/<S>,
 * named after the slot's time in UTC (shared/paths.c, zk_slot_name).  Its
 * data is the JSON of zk_node_data() with "slot", "claimed_at", a random
 * "claim" nonce and "state" added.  Its states:
 *
 *	pending		EPHEMERAL: claimed, its transaction runs.  NODEEXISTS for
 *				anyone else: a no-wait claim answers false at once, a
 *				waiting one waits on the node (a data watch).
 *	committing	PERSISTENT, made at the claimant's PRE_COMMIT (ZK_ASK_FINALIZE)
 *				by one multi: delete the ephemeral node (at the version we
 *				created), create the persistent one, create its child
 *				<nonce> (below) and the claim's entry in the instance's
 *				index of unsettled claims (below).  Its transaction can
 *				still fail after PRE_COMMIT (a serialization failure,
 *				another extension's commit work, a crash), so the outcome is
 *				unknown: a waiting claim keeps waiting on the node.
 *	committed	the outcome read from the claimant's commit log: the slot is
 *				done.  Set by one multi: delete the index entry, set the
 *				node's data at version 0.  "final", written by 1.4, is
 *				taken for committed.
 *	(deleted)	the transaction did not commit: one multi deletes the index
 *				entry, the child and the node (at version 0).  The slot is
 *				open again and a waiting claim takes it.
 *
 * Settling reads the outcome, never a clock: xact_outcome() asks this
 * instance's commit log about the transaction named in the index entry
 * (full xid, and the timeline and end of a WAL record of that xid that the
 * backend flushed before asking for the finalize: backend/holdings.c).  A
 * transaction still running, or committed but not yet flushed (an
 * asynchronous commit), is asked again later.  The worker settles its own
 * claims when their backend gives them up (at COMMIT, ABORT or exit) and,
 * after a worker restart, a new session or the end of recovery (a
 * promotion), every claim in the index of its system identifier: a
 * crashed primary's claims are settled by itself once restarted, or by
 * the standby promoted in its place, whose commit log is the outcome that
 * survived.  A record beyond the point where the promoted timeline left
 * the claimant's is not in the new primary's history (its xid may even be
 * handed out again): such a claim is reopened.  Standbys settle nothing of
 * others (their commit log lags), and on a standby a claim has no xid: it
 * is written committed at PRE_COMMIT (at most once: a COMMIT that fails
 * later reopens it only while the worker remembers it).
 *
 * The index: <zklock.root>/zklock.instances/unsettled/<system identifier>/
 * <nonce>, a persistent node per unsettled claim (in a persistent folder
 * per system, made when its primary's worker first reads it), whose data
 * is "<xid> <timeline> <lsn>\n<claim path>".  It exists exactly while the
 * claim is committing: settling deletes it in the same multi, so two
 * settlers (the instance and an operator, zk_job_claim_settle) cannot both
 * settle one claim, and a settler never touches a newer claim of the same
 * path.
 *
 * The child <nonce> ties every delete of a persistent claim to the claim
 * it saw: deletes go in a multi with the delete of the child, so a sweep
 * that looked at an old claim cannot delete a newer one made at the same
 * path meanwhile (a node's version alone cannot tell them apart).  A node
 * with a child is also refused by the plain versioned deletes of 1.4.
 *
 * Retention (zklock.claim_retention): the claims' own part (an instance
 * part, ZK_GROUP_CLAIMS) lists, every min(retention / 2, 1 minute), the
 * claims of every job this instance's worker has claimed since it started,
 * and deletes committed ones whose slot and creation are both older than
 * the retention.  Unsettled ones are never swept.
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

#include "access/clog.h"
#include "access/timeline.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "utils/elog.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "shared/pg_compat.h"
#include "worker/engine/engine.h"

/* tags */
#define T_CLAIM_CREATE	1
#define T_CLAIM_CHECK	2
#define T_CLAIM_FINAL	3
#define T_LIST_LIST		4
#define T_LIST_GET		5
#define T_SWEEP_LIST	6
#define T_SWEEP_GET		7
#define T_SWEEP_DEL		8
#define T_SETTLE_GET	9		/* the claim's data, to mark it committed */
#define T_SETTLE		10		/* the multi that settles it */
#define T_CLAIM_SYNC	11		/* answers need nothing: what follows it */
#define T_SETTLE_SYNC	12		/* is answered after it */
#define T_CLAIM_LOOK	13		/* getData with a watch of another's claim */
#define T_INDEX_PARENT	14		/* the index's folder, for a finalize */
#define T_SCAN_LIST		15		/* the index of our system identifier */
#define T_SCAN_GET		16
#define T_PENDING_GET	17		/* a finalize lost: our pending node? */
#define T_PENDING_DEL	18
#define T_MANUAL_GET	19		/* zk_job_claim_settle */
#define T_MANUAL		20
#define T_SWEEP_CLOCK	21		/* ZooKeeper's time, for the sweep */
#define T_SCAN_SYNC		22
#define T_INDEX_DIR		23		/* answer ignored: made, or was there */

/* where a claim part is (ZkPart.step) */
#define CLAIM_START		0		/* create the node */
#define CLAIM_CREATING	1		/* create sent */
#define CLAIM_CHECK		2		/* create's reply lost: is the node ours? */
#define CLAIM_HELD		3		/* our ephemeral node exists: granted */
#define CLAIM_FINALIZING 4		/* the multi is on its way */
#define CLAIM_FINAL		5		/* made final: its transaction decides */
#define CLAIM_OVER		6		/* taken by someone else, failed, or settled */
#define CLAIM_SETTLING	7		/* given up after it was made final (or
								 * might have been): its release waits for
								 * the settling */
#define CLAIM_LOOKING	8		/* someone else's node is there: settled? */
#define CLAIM_WAITING	9		/* ... open or committing: wait for it */
#define CLAIM_MANUAL	10		/* zk_job_claim_settle */

#define NONCE_LEN		ZK_NONCE_LEN
#define MAX_JOBS		10000
#define MAX_UNSETTLED	10000
#define SETTLE_POLL_MS	250		/* a transaction still running: look again */
#define SWEEP_MAX_MS	60000
#define SCAN_INTERVAL_MS 60000	/* the index is read again */

/* What the commit log says of a claim's transaction. */
typedef enum XactOutcome
{
	XO_RUNNING,					/* running, or committed and not flushed */
	XO_COMMITTED,
	XO_ABORTED,					/* aborted, crashed, or not in our history */
	XO_UNKNOWN					/* too old for the commit log: by hand */
} XactOutcome;

/*
 * A claim made final and not settled yet, in TopMemoryContext.  Made by
 * the finalize of a part of ours, or found in the index.
 */
typedef struct Unsettled
{
	char	   *claim;			/* the claim node's path */
	char	   *entry;			/* its index entry's path; NULL: a
								 * standby's claim, committed already */
	char		nonce[NONCE_LEN + 1];
	ZkClaimXact xact;
	char	   *data;			/* its data while committing, or NULL: read
								 * it before marking it committed */
	ZkPart	   *part;			/* the claim part whose release waits */
	ZkAsk		word;			/* what its backend said at the end */
	bool		held;			/* its backend has not given it up yet */
	bool		finalizing;		/* the finalize is on its way */
	bool		pending_too;	/* the finalize's answer was lost: our
								 * pending node may still be there */
	bool		busy;			/* a call about it is on its way */
	ZkMono		not_before;		/* not looked at before (0: at once) */
} Unsettled;

static ZkPart *claims_part;		/* the claims' own part */
static HTAB *jobs;				/* names of the jobs claimed by us */
static List *unsettled = NIL;	/* of Unsettled */
static bool scan_due = true;	/* the index is to be read */
static ZkMono next_scan = 0;
static int64 sweep_now = 0;		/* ZooKeeper's time (ms) at the sweep */
static bool was_in_recovery = true;
static ZkMono next_sweep = 0;	/* monotonic, as every interval here */

/* ---- helpers ---- */

static void
claim_path(ZkPart *p, char *buf, size_t size)
{
	snprintf(buf, size, "%s/%s", p->parent, p->node);
}

/*
 * The value of "key" in data zklock wrote, when it is a string with no
 * escapes (a nonce, a state, a system identifier), into out; false if
 * absent or longer than size - 1.
 */
static bool
data_field(const char *data, const char *key, char *out, size_t size)
{
	char		pat[32];
	const char *s;
	const char *end;

	out[0] = '\0';
	snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	s = data ? strstr(data, pat) : NULL;
	if (s == NULL)
		return false;
	s += strlen(pat);
	end = strchr(s, '"');
	if (end == NULL || (size_t) (end - s) >= size || memchr(s, '\\', end - s))
		return false;
	memcpy(out, s, end - s);
	out[end - s] = '\0';
	return true;
}

/* The value of "key" in data zklock wrote, when it is a number. */
static bool
data_number(const char *data, const char *key, char *out, size_t size)
{
	char		pat[32];
	const char *s;
	size_t		n;

	out[0] = '\0';
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	s = data ? strstr(data, pat) : NULL;
	if (s == NULL)
		return false;
	s += strlen(pat);
	n = strspn(s, "0123456789");
	if (n == 0 || n >= size)
		return false;
	memcpy(out, s, n);
	out[n] = '\0';
	return true;
}

/* The nonce in a claim's data, or "" if none. */
static void
data_nonce(const char *data, char *nonce)
{
	if (!data_field(data, "claim", nonce, NONCE_LEN + 1) ||
		strlen(nonce) != NONCE_LEN)
		nonce[0] = '\0';
}

/* Does a claim's data say it is committing (made final, not settled)? */
static bool
data_committing(const char *data)
{
	char		state[16];

	return data_field(data, "state", state, sizeof(state)) &&
		strcmp(state, "committing") == 0;
}

/* Our part's claim data with another state: the pending data's tail. */
static char *
claim_data(ZkPart *p, const char *state)
{
	const char *tail = "\"pending\"}";
	size_t		len = strlen(p->extra) - strlen(tail);

	return psprintf("%.*s%s}", (int) len, p->extra, state);
}

/* Committing data made committed (the state is its last field). */
static char *
committed_data(const char *data)
{
	const char *s = strstr(data, "\"state\":\"committing\"");

	Assert(s != NULL);
	return psprintf("%.*s\"state\":\"committed\"%s", (int) (s - data), data,
					s + strlen("\"state\":\"committing\""));
}

/* <root>/zklock.instances/unsettled/<system identifier>, for sysid */
static void
index_dir(char *buf, size_t size, const char *sysid)
{
	snprintf(buf, size, "%s/%s/unsettled/%s", zklock_root, ZK_INSTANCES_DIR,
			 sysid);
}

static void
own_index_dir(char *buf, size_t size)
{
	char		sysid[32];

	snprintf(sysid, sizeof(sysid), UINT64_FORMAT, GetSystemIdentifier());
	index_dir(buf, size, sysid);
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

/* ZooKeeper's ctime (ms since 1970) as a TimestampTz. */
static TimestampTz
zk_time(int64 ms)
{
	return ms * 1000 -
		((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC);
}

/* ---- unsettled claims ---- */

static Unsettled *
unsettled_add(const char *claim, const char *nonce, const ZkClaimXact *xact,
			  const char *data)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	Unsettled  *u = palloc0(sizeof(Unsettled));

	u->claim = pstrdup(claim);
	strlcpy(u->nonce, nonce, sizeof(u->nonce));
	u->xact = *xact;
	if (xact->has_xid)
	{
		char		dir[ZK_PATH_MAX];

		own_index_dir(dir, sizeof(dir));
		u->entry = psprintf("%s/%s", dir, nonce);
		u->data = data ? pstrdup(data) : NULL;
	}
	unsettled = lappend(unsettled, u);
	MemoryContextSwitchTo(old);
	return u;
}

static void
unsettled_forget(Unsettled *u)
{
	unsettled = list_delete_ptr(unsettled, u);
	pfree(u->claim);
	if (u->entry)
		pfree(u->entry);
	if (u->data)
		pfree(u->data);
	pfree(u);
}

static Unsettled *
unsettled_of_part(ZkPart *p)
{
	ListCell   *lc;

	foreach(lc, unsettled)
		if (((Unsettled *) lfirst(lc))->part == p)
			return lfirst(lc);
	return NULL;
}

static Unsettled *
unsettled_of_nonce(const char *nonce)
{
	ListCell   *lc;

	foreach(lc, unsettled)
		if (strcmp(((Unsettled *) lfirst(lc))->nonce, nonce) == 0)
			return lfirst(lc);
	return NULL;
}

/* The item whose call about this claim path is on its way. */
static Unsettled *
unsettled_busy(const char *claim)
{
	ListCell   *lc;

	foreach(lc, unsettled)
	{
		Unsettled  *u = lfirst(lc);

		if (u->busy && strcmp(u->claim, claim) == 0)
			return u;
	}
	return NULL;
}

static bool
unsettled_due(Unsettled *u, ZkMono now)
{
	return !u->held && !u->finalizing && !u->busy && now >= u->not_before;
}

/*
 * Is the WAL record that ended at lsn on timeline tli part of this
 * instance's history?  On its current timeline, if it is not beyond what
 * was flushed; on an earlier one, only if it ended before our timeline
 * branched off it.  The caller has made sure the history file exists.
 */
static bool
in_history(TimeLineID tli, XLogRecPtr lsn, TimeLineID current,
		   XLogRecPtr flushed)
{
	List	   *history;
	ListCell   *lc;

	if (tli == current)
		return lsn <= flushed;
	history = readTimeLineHistory(current);
	foreach(lc, history)
	{
		TimeLineHistoryEntry *h = lfirst(lc);

		if (h->tli == tli)
			return XLogRecPtrIsInvalid(h->end) || lsn <= h->end;
	}
	return false;
}

/*
 * What this instance's commit log says of a claim's transaction (see the
 * header).  The caller has checked that the instance is not in recovery.
 *
 * A transaction is running while a backend has it as its xid (checked
 * before the commit log: a committing backend marks the commit log first,
 * and leaves the procarray after; BackendXidGetPid, as it has no shortcut
 * through RecentXmin, which a worker without snapshots never sets), and a
 * commit counts once its record is flushed.  An xid older than the commit
 * log keeps, a timeline newer than ours (we are a primary left behind by a
 * failover), or a history we cannot read, is unknown: the claim is left to
 * its own instance or to an operator.
 */
static XactOutcome
xact_outcome_read(const ZkClaimXact *x)
{
	TimeLineID	current;
	XLogRecPtr	flushed = GetFlushRecPtr(&current);
	FullTransactionId fxid = FullTransactionIdFromU64(x->xid);
	FullTransactionId next = ReadNextFullTransactionId();
	TransactionId xid = XidFromFullTransactionId(fxid);
	XLogRecPtr	commit_lsn = InvalidXLogRecPtr;
	XidStatus	status = TRANSACTION_STATUS_IN_PROGRESS;
	bool		running;
	bool		known;

	if (x->timeline > current ||
		(x->timeline < current && !existsTimeLineHistory(current)))
		return XO_UNKNOWN;
	if (!in_history(x->timeline, x->lsn, current, flushed))
		return XO_ABORTED;
	if (!FullTransactionIdPrecedes(fxid, next))
		return XO_UNKNOWN;		/* cannot be, with its record in our WAL */
	LWLockAcquire(XactTruncationLock, LW_SHARED);
	known = U64FromFullTransactionId(next) - x->xid < (uint64) 1 << 31 &&
		!TransactionIdPrecedes(xid, ZkTransamVariables->oldestClogXid);
	running = known && BackendXidGetPid(xid) != 0;
	if (known && !running)
		status = TransactionIdGetStatus(xid, &commit_lsn);
	LWLockRelease(XactTruncationLock);
	if (!known)
		return XO_UNKNOWN;
	if (running)
		return XO_RUNNING;
	if (status != TRANSACTION_STATUS_COMMITTED)
		return XO_ABORTED;
	return !XLogRecPtrIsInvalid(commit_lsn) && commit_lsn > flushed ?
		XO_RUNNING : XO_COMMITTED;
}

/* The same, an error (the commit log or a history file unreadable) unknown. */
static XactOutcome
xact_outcome(const ZkClaimXact *x)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile XactOutcome result = XO_UNKNOWN;

	PG_TRY();
	{
		result = xact_outcome_read(x);
	}
	PG_CATCH();
	{
		ErrorData  *ed;

		/* nothing else of the worker holds an LWLock in a driver's step */
		LWLockReleaseAll();
		MemoryContextSwitchTo(cxt);
		ed = CopyErrorData();
		FlushErrorState();
		ereport(WARNING,
				(errmsg("zklock could not read the outcome of transaction " UINT64_FORMAT ": %s",
						x->xid, ed->message)));
		FreeErrorData(ed);
		result = XO_UNKNOWN;
	}
	PG_END_TRY();
	return result;
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
								   psprintf("%s,\"slot\":\"%s\",\"claimed_at\":\"%s\",\"claim\":\"%s\",\"retention\":%d,\"state\":\"pending\"}",
											base, slot, now, nonce,
											zklock_claim_retention));
	note_job(p->name);
	claim_create(p);
}

/* The slot is done, or taken and we must not wait: false. */
static void
claim_taken(ZkPart *p)
{
	p->phase = NODE_NONE;
	p->step = CLAIM_OVER;
	zk_part_taken(p);
	zk_part_drop(p);
}

/*
 * Someone else's node is at the claim's path.  A request that must not
 * wait is answered false at once.  One that may wait looks at the node,
 * with a data watch: committed, the slot is done (false); pending or
 * committing, it waits for that claim to be settled, and then claims
 * again: committed, false; deleted (its transaction did not commit), the
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

/*
 * Send the finalize of our claim (see the header): the multi that makes
 * it committing (committed on a standby), with its child and its index
 * entry.
 */
static void
send_finalize(ZkPart *p, Unsettled *u)
{
	ZkWrite		w[ZK_MULTI_MAX];
	char		child[ZK_PATH_MAX];
	char	   *data = u->data ? u->data : claim_data(p, "\"committed\"");
	int			n = 0;

	snprintf(child, sizeof(child), "%s/%s", u->claim, u->nonce);
	w[n++] = (ZkWrite) {ZKC_DELETE, u->claim, NULL, p->version, 0};
	w[n++] = (ZkWrite) {ZKC_CREATE, u->claim, data, -1, ZOO_PERSISTENT};
	w[n++] = (ZkWrite) {ZKC_CREATE, child, NULL, -1, ZOO_PERSISTENT};
	if (u->entry)
	{
		char	   *entry = psprintf("zklock claim " UINT64_FORMAT " %u %X/%X\n%s",
									 u->xact.xid, u->xact.timeline,
									 LSN_FORMAT_ARGS(u->xact.lsn), u->claim);

		w[n++] = (ZkWrite) {ZKC_CREATE, u->entry, entry, -1, ZOO_PERSISTENT};
	}
	u->finalizing = true;
	zk_call_multi(p, T_CLAIM_FINAL, u->claim, w, n);
}

/* The answer to the finalize. */
static void
claim_finalized(ZkPart *p, const ZkResult *r)
{
	int			id = zk_part_entry(p);
	Unsettled  *u = unsettled_of_part(p);

	if (u == NULL)
		return;					/* cannot be: the part keeps its item */
	u->finalizing = false;
	if (r->rc == ZNONODE && r->op == 3 && p->parent_tries++ < 3)
	{
		/* the index's folder is not there (a new ZooKeeper): make it */
		char		dir[ZK_PATH_MAX];

		own_index_dir(dir, sizeof(dir));
		zk_parents_gone(dir);
		u->finalizing = true;
		zk_call_create(p, T_INDEX_PARENT, dir, NULL, ZOO_PERSISTENT, true);
		return;
	}
	/* no more node of ours for the engine to delete */
	pg_atomic_fetch_sub_u32(&zk_shared->n_nodes, 1);
	p->phase = NODE_NONE;
	if (r->rc == ZOK)
	{
		/* the transaction decides (claim_ask) */
		if (id >= 0)
		{
			p->step = CLAIM_FINAL;
			zk_set_ask_outcome(id, ZK_ASK_DONE, 0, NULL);
		}
		return;
	}

	/*
	 * Made final or not (the answer lost), or refused (nothing was done):
	 * its transaction cannot commit without this answer, so it is settled
	 * like any other (as aborted), and should the multi not have been
	 * applied, our pending node is deleted then.
	 */
	u->pending_too = true;
	p->step = id >= 0 ? CLAIM_OVER : CLAIM_SETTLING;
	if (id >= 0)
		zk_set_ask_outcome(id, ZK_ASK_FAILED,
						   ERRCODE_T_R_SERIALIZATION_FAILURE,
						   zk_is_connection_loss(r->rc) || r->rc == ZCLOSING ?
						   "The connection to ZooKeeper was lost while making the claim final (%s)." :
						   "ZooKeeper refused to make the claim final: %s.",
						   zerror(r->rc));
}

/* A committing node's data: settled later, or committed. */
static void
claim_look(ZkPart *p, const ZkResult *r)
{
	if (r->rc == ZOK && r->has_stat && r->stat.ephemeralOwner == 0 &&
		!data_committing(r->data))
		claim_taken(p);			/* committed: the slot is done */
	else if (r->rc == ZOK)
	{
		/* pending or committing: the watch tells when it is settled */
		p->step = CLAIM_WAITING;
		zk_part_wait_on(p, p->node);
	}
	else if (r->rc == ZNONODE)
		claim_start(p);			/* gone meanwhile: claim again */
	else if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
		p->need_eval = true;	/* claims again once connected */
	else
	{
		p->step = CLAIM_OVER;
		zk_part_fail(p, zk_refusal_errcode(r->rc),
					 "ZooKeeper refused to read the claim node: %s.",
					 zerror(r->rc));
	}
}

static void manual_step(ZkPart *p, const ZkResult *r);

static void
claim_step(ZkPart *p, const ZkResult *r)
{
	char		path[ZK_PATH_MAX];

	if (r == NULL)
	{
		switch (p->step)
		{
			case CLAIM_START:
			case CLAIM_LOOKING:
			case CLAIM_WAITING:
				/* (re)start; the claim waited for was settled (its watch) */
				if (p->dropping)
					break;
				if (zk_part_entry(p) >= 0 &&
					(ZK_ENTRY(zk_part_entry(p))->flags & ZKR_SETTLE))
					manual_step(p, NULL);
				else
					claim_start(p);
				break;
			case CLAIM_MANUAL:
				manual_step(p, NULL);
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
			if (p->step == CLAIM_LOOKING && !p->dropping)
				claim_look(p, r);
			break;

		case T_CLAIM_FINAL:
			claim_finalized(p, r);
			break;

		case T_INDEX_PARENT:
			{
				Unsettled  *u = unsettled_of_part(p);

				if (u == NULL)
					break;
				if (r->rc == ZOK || r->rc == ZNODEEXISTS)
					send_finalize(p, u);
				else
				{
					/* as a finalize refused (or lost) */
					ZkResult	failed = *r;

					if (r->rc == ZNONODE)
						zk_parents_gone(r->path);
					failed.op = r->rc == ZNONODE ? 3 : -1;
					claim_finalized(p, &failed);
				}
				break;
			}

		case T_MANUAL_GET:
		case T_MANUAL:
			manual_step(p, r);
			break;
	}
}

/*
 * The backend asks: make the claim final (at PRE_COMMIT), or it gave the
 * claim up because its transaction ended (REOPEN: aborted, COMMITTED) or
 * the backend exited.  Made final, the claim is settled by the commit log
 * (own_step), and the release waits for that (claim_busy); a claim never
 * made final has only its ephemeral node, which the engine deletes with
 * the entry.
 */
static void
claim_ask(ZkPart *p, int id, ZkAsk ask)
{
	char		path[ZK_PATH_MAX];
	ZkClaimXact xact;
	Unsettled  *u;

	if (ask == ZK_ASK_REOPEN || ask == ZK_ASK_COMMITTED)
	{
		if ((u = unsettled_of_part(p)) != NULL)
		{
			u->word = ask;
			u->held = false;
			u->not_before = 0;
			p->step = CLAIM_SETTLING;
		}
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
	if (list_length(unsettled) >= MAX_UNSETTLED)
	{
		zk_set_ask_outcome(id, ZK_ASK_FAILED, ERRCODE_T_R_SERIALIZATION_FAILURE,
						   "The zklock worker has too many claims to settle.");
		return;
	}
	LWLockAcquire(zk_shared->lock, LW_SHARED);
	xact = ZK_ENTRY(id)->claim_xact;
	LWLockRelease(zk_shared->lock);

	claim_path(p, path, sizeof(path));
	{
		char		nonce[NONCE_LEN + 1];
		char	   *data = NULL;

		data_nonce(p->extra, nonce);
		if (xact.has_xid)
			data = claim_data(p, psprintf("\"committing\",\"xid\":\"" UINT64_FORMAT "\"",
										  xact.xid));
		u = unsettled_add(path, nonce, &xact, data);
	}
	u->part = p;
	u->held = true;
	p->step = CLAIM_FINALIZING;
	p->phase = NODE_DELETING;	/* the multi deletes it; nothing else may */
	send_finalize(p, u);
}

/*
 * Does the release of a claim given up after it was made final wait?
 * While it is not settled, so that COMMIT or ROLLBACK returns with the
 * slot committed or open again.  (Should ZooKeeper be out of reach, the
 * backend's wait ends by the rule of zk_lock_held.)
 */
static bool
claim_busy(ZkPart *p)
{
	return p->step == CLAIM_SETTLING && unsettled_of_part(p) != NULL;
}

/* A claim part goes: its item is settled without it. */
static void
claim_freed(ZkPart *p)
{
	Unsettled  *u;

	while ((u = unsettled_of_part(p)) != NULL)
	{
		u->part = NULL;
		u->held = false;
		if (u->finalizing)
		{
			/* its answer will not come: as if lost, and not committed */
			u->finalizing = false;
			u->pending_too = true;
			u->word = ZK_ASK_REOPEN;
		}
	}
}

static void claim_init(void);
static void claim_reload(void);
static void claim_run(void);

const ZkDriver zk_claim_driver = {
	.kind = ZK_KIND_JOB_CLAIM,
	.form = ZK_FORM_NONE,
	.step = claim_step,
	.freed = claim_freed,
	.init = claim_init,
	.reload = claim_reload,
	.run = claim_run,
	.steps = {
		.ask = claim_ask,
		.busy = claim_busy,
	},
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


/* ---- settling, by hand (zk_job_claim_settle) ---- */

/*
 * A superuser settles a committing claim whose instance will not: the
 * claim part of a ZKR_SETTLE request reads the node, and one multi deletes
 * its index entry (named by the node's system identifier and nonce) and
 * marks it committed (arg 1) or deletes it (arg 0).  Answers 1 when it
 * settled the claim, 0 when there was no committing claim (or it was
 * settled meanwhile).  Its write is at most once (ZKR_AT_MOST_ONCE).
 */
static void
manual_step(ZkPart *p, const ZkResult *r)
{
	int			id = zk_part_entry(p);
	char		path[ZK_PATH_MAX];

	if (r == NULL)
	{
		strlcpy(p->node, zk_slot_name(p->targ), sizeof(p->node));
		claim_path(p, path, sizeof(path));
		p->step = CLAIM_MANUAL;
		zk_call_sync(p, T_CLAIM_SYNC, p->parent);
		zk_call_get(p, T_MANUAL_GET, path, false);
		return;
	}
	if (id < 0)
		return;
	if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
	{
		if (r->tag == T_MANUAL)
			zk_part_fail(p, ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN,
						 "The connection to ZooKeeper was lost while settling the claim: it may or may not have been settled.");
		else
			p->need_eval = true;	/* read again once connected */
		return;
	}
	if (r->tag == T_MANUAL_GET)
	{
		char		sysid[32];
		char		nonce[NONCE_LEN + 1];
		char		entry[ZK_PATH_MAX];
		char		child[ZK_PATH_MAX];
		ZkWrite		w[3];

		if (r->rc == ZNONODE ||
			(r->rc == ZOK && (r->stat.ephemeralOwner != 0 ||
							  !data_committing(r->data))))
		{
			zk_part_done(p, 0);
			return;
		}
		data_nonce(r->data, nonce);
		if (r->rc != ZOK || nonce[0] == '\0' ||
			!data_field(r->data, "system", sysid, sizeof(sysid)))
		{
			zk_part_fail(p, r->rc == ZOK ? ERRCODE_DATA_CORRUPTED :
						 zk_refusal_errcode(r->rc),
						 r->rc == ZOK ? "The claim node's data does not name its claim." :
						 "ZooKeeper refused to read the claim node: %s.",
						 zerror(r->rc));
			return;
		}
		index_dir(entry, sizeof(entry), sysid);
		strlcat(entry, "/", sizeof(entry));
		strlcat(entry, nonce, sizeof(entry));
		snprintf(child, sizeof(child), "%s/%s", r->path, nonce);
		w[0] = (ZkWrite) {ZKC_DELETE, entry, NULL, -1, 0};
		if (ZK_ENTRY(id)->arg)
		{
			w[1] = (ZkWrite) {ZKC_SET, r->path, committed_data(r->data),
			r->stat.version, 0};
			zk_call_multi(p, T_MANUAL, r->path, w, 2);
		}
		else
		{
			w[1] = (ZkWrite) {ZKC_DELETE, child, NULL, -1, 0};
			w[2] = (ZkWrite) {ZKC_DELETE, r->path, NULL, r->stat.version, 0};
			zk_call_multi(p, T_MANUAL, r->path, w, 3);
		}
		return;
	}
	/* T_MANUAL */
	if (r->rc == ZOK)
	{
		ereport(LOG,
				(errmsg("zklock job claim \"%s\" settled by hand as %s",
						r->path, ZK_ENTRY(id)->arg ? "committed" : "not committed")));
		zk_part_done(p, 1);
	}
	else if (r->rc == ZNONODE || r->rc == ZBADVERSION)
		zk_part_done(p, 0);		/* settled meanwhile */
	else
		zk_part_fail(p, zk_refusal_errcode(r->rc),
					 "ZooKeeper refused to settle the claim: %s.",
					 zerror(r->rc));
}

/* ---- the claims' own part: settling, retention ---- */

static int
sweep_interval_ms(void)
{
	int64		half = (int64) zklock_claim_retention * 500;

	return (int) Max(1000, Min(half, SWEEP_MAX_MS));
}

/* The multi that settles u: committed, or reopened. */
static void
send_settle(ZkPart *own, Unsettled *u, bool committed)
{
	ZkWrite		w[3];
	char		child[ZK_PATH_MAX];
	char	   *data = NULL;
	int			n = 0;

	snprintf(child, sizeof(child), "%s/%s", u->claim, u->nonce);
	if (u->entry)
		w[n++] = (ZkWrite) {ZKC_DELETE, u->entry, NULL, -1, 0};
	if (committed)
	{
		data = committed_data(u->data);
		w[n++] = (ZkWrite) {ZKC_SET, u->claim, data, 0, 0};
	}
	else
	{
		w[n++] = (ZkWrite) {ZKC_DELETE, child, NULL, -1, 0};
		w[n++] = (ZkWrite) {ZKC_DELETE, u->claim, NULL, 0, 0};
	}
	u->word = committed ? ZK_ASK_COMMITTED : ZK_ASK_REOPEN;
	u->busy = true;
	zk_call_multi(own, T_SETTLE, u->claim, w, n);
}

/* Settle a due claim, or look again later. */
static void
settle(ZkPart *own, Unsettled *u, ZkMono now)
{
	bool		committed;

	if (u->entry == NULL)
		committed = (u->word != ZK_ASK_REOPEN);	/* a standby's: its word */
	else
	{
		if (RecoveryInProgress())
		{
			u->not_before = ZkMonoPlusMs(now, SCAN_INTERVAL_MS);
			return;
		}
		switch (xact_outcome(&u->xact))
		{
			case XO_RUNNING:
				u->not_before = ZkMonoPlusMs(now, SETTLE_POLL_MS);
				zk_engine_wake_at(u->not_before);
				return;
			case XO_UNKNOWN:
				ereport(WARNING,
						(errmsg("zklock cannot settle job claim \"%s\": the outcome of its transaction " UINT64_FORMAT " is unknown here",
								u->claim, u->xact.xid),
						 errdetail("The commit log no longer has it, or it was made on a newer timeline than this instance's."),
						 errhint("A superuser settles it with zk_job_claim_settle().")));
				unsettled_forget(u);
				return;
			case XO_COMMITTED:
				committed = true;
				break;
			default:
				committed = false;
				break;
		}
	}
	if (committed && u->entry == NULL)
	{
		unsettled_forget(u);	/* a standby's claim: committed already */
		return;
	}
	if (committed && u->data == NULL)
	{
		u->busy = true;
		u->word = ZK_ASK_COMMITTED;
		zk_call_get(own, T_SETTLE_GET, u->claim, false);
		return;
	}
	send_settle(own, u, committed);
}

/*
 * A committed claim the sweep looked at: removed when its slot and its
 * creation are both older than the retention, the larger of ours and the
 * claimant's, on ZooKeeper's clock (sweep_now).  The delete goes with that
 * of the claim's nonce child, so it removes this claim and no newer one of
 * the same path.  A claim made by 1.4 has no child: a child is created and
 * deleted in the same multi, which fails on an ephemeral node (a pending
 * claim made meanwhile), and the delete is at the version seen.
 */
static void
sweep(ZkPart *own, const ZkResult *r)
{
	char		nonce[NONCE_LEN + 1];
	char		child[ZK_PATH_MAX];
	char		retention[16];
	int64		keep_s = zklock_claim_retention;
	TimestampTz slot;
	TimestampTz cutoff;
	ZkWrite		w[3];

	if (keep_s <= 0)
		return;					/* set to 0, "keep", by a reload meanwhile */
	if (data_number(r->data, "retention", retention, sizeof(retention)))
		keep_s = Max(keep_s, strtoi64(retention, NULL, 10));
	cutoff = zk_time(sweep_now) - keep_s * USECS_PER_SEC;
	if (!zk_parse_slot_name(zk_node_of(r->path), &slot) || slot >= cutoff ||
		zk_time(r->stat.ctime) >= cutoff)
		return;
	data_nonce(r->data, nonce);
	if (r->stat.numChildren > 0 && nonce[0] != '\0')
	{
		snprintf(child, sizeof(child), "%s/%s", r->path, nonce);
		w[0] = (ZkWrite) {ZKC_DELETE, child, NULL, -1, 0};
		w[1] = (ZkWrite) {ZKC_DELETE, r->path, NULL, -1, 0};
		zk_call_multi(own, T_SWEEP_DEL, r->path, w, 2);
	}
	else if (r->stat.numChildren == 0)
	{
		snprintf(child, sizeof(child), "%s/sweep", r->path);
		w[0] = (ZkWrite) {ZKC_CREATE, child, NULL, -1, ZOO_PERSISTENT};
		w[1] = (ZkWrite) {ZKC_DELETE, child, NULL, -1, 0};
		w[2] = (ZkWrite) {ZKC_DELETE, r->path, NULL, r->stat.version, 0};
		zk_call_multi(own, T_SWEEP_DEL, r->path, w, 3);
	}
}

/* Parse an index entry's data (see the header) into a new item. */
static void
scan_found(const char *entry, const char *data)
{
	ZkClaimXact xact;
	unsigned long long xid;
	unsigned int tli;
	unsigned int hi;
	unsigned int lo;
	int			n = 0;
	const char *nonce = zk_node_of(entry);

	if (data == NULL || unsettled_of_nonce(nonce) ||
		list_length(unsettled) >= MAX_UNSETTLED)
		return;
	if (sscanf(data, "zklock claim %llu %u %X/%X\n%n", &xid, &tli, &hi, &lo,
			   &n) != 4 || n == 0 || strlen(nonce) != NONCE_LEN)
	{
		ereport(WARNING,
				(errmsg("zklock ignores \"%s\": not an index entry of an unsettled job claim",
						entry)));
		return;
	}
	memset(&xact, 0, sizeof(xact));
	xact.has_xid = true;
	xact.xid = xid;
	xact.timeline = tli;
	xact.lsn = ((uint64) hi << 32) | lo;
	(void) unsettled_add(data + n, nonce, &xact, NULL);
	ereport(LOG,
			(errmsg("zklock found unsettled job claim \"%s\" of transaction %llu",
					data + n, xid),
			 errdetail("Its outcome is read from this instance's commit log.")));
}

static void
own_step(ZkPart *p, const ZkResult *r)
{
	ZkMono		now = zk_mono_now();
	char		path[ZK_PATH_MAX];
	Unsettled  *u;

	if (r == NULL)
	{
		ListCell   *lc;
		List	   *due;
		bool		synced = false;

		if ((scan_due || now >= next_scan) && !RecoveryInProgress())
		{
			/*
			 * After a sync: the entries were written in other sessions (a
			 * worker before us, a primary we replace), and a new session
			 * may be served by a follower behind the leader.
			 */
			own_index_dir(path, sizeof(path));
			zk_call_sync(p, T_SCAN_SYNC, path);
			zk_call_list(p, T_SCAN_LIST, path, false);
			scan_due = false;
			next_scan = ZkMonoPlusMs(now, SCAN_INTERVAL_MS);
		}
		/* settle() may forget items: walk a copy */
		due = NIL;
		foreach(lc, unsettled)
		{
			u = lfirst(lc);
			if (unsettled_due(u, now) && !unsettled_busy(u->claim))
				due = lappend(due, u);
		}
		foreach(lc, due)
		{
			u = lfirst(lc);
			if (unsettled_busy(u->claim))
				continue;		/* another item of that path went first */

			/*
			 * After a sync, so that a follower behind the leader shows the
			 * nodes as they are (a settle of ours whose answer was lost may
			 * have been applied).  One sync orders every read after it.
			 */
			if (!synced)
				zk_call_sync(p, T_SETTLE_SYNC, u->claim);
			synced = true;
			settle(p, u, now);
		}
		list_free(due);
		if (zklock_claim_retention > 0 && now >= next_sweep)
		{
			HASH_SEQ_STATUS hs;
			char	   *job;

			hash_seq_init(&hs, jobs);
			while ((job = hash_seq_search(&hs)) != NULL)
			{
				/*
				 * Ages are measured on ZooKeeper's clock: the mtime of a
				 * write of the claims' parent (its data is never read),
				 * answered before the listing.
				 */
				zk_path(path, sizeof(path), job, "/claims");
				zk_call_set(p, T_SWEEP_CLOCK, path, NULL, -1);
				zk_call_list(p, T_SWEEP_LIST, path, false);
			}
			next_sweep = ZkMonoPlusMs(now, sweep_interval_ms());
		}
		return;
	}

	switch (r->tag)
	{
		case T_SCAN_LIST:
			if (r->rc == ZOK)
				for (int i = 0; i < r->nchildren; i++)
				{
					if (unsettled_of_nonce(r->children[i]))
						continue;
					snprintf(path, sizeof(path), "%s/%s", r->path,
							 r->children[i]);
					zk_call_get(p, T_SCAN_GET, path, false);
				}
			else if (r->rc == ZNONODE)
			{
				/* made now, so that finalizes find it (persistent) */
				zk_call_create(p, T_INDEX_DIR, r->path, NULL, ZOO_PERSISTENT,
							   true);
			}
			else
				scan_due = true;	/* again */
			break;

		case T_SCAN_GET:
			if (r->rc == ZOK)
				scan_found(r->path, r->data);
			else if (r->rc != ZNONODE)
				scan_due = true;
			break;

		case T_SETTLE_GET:
			if ((u = unsettled_busy(r->path)) == NULL)
				break;
			u->busy = false;
			if (r->rc == ZOK)
			{
				char		nonce[NONCE_LEN + 1];

				data_nonce(r->data, nonce);
				if (strcmp(nonce, u->nonce) == 0 && data_committing(r->data))
				{
					u->data = MemoryContextStrdup(TopMemoryContext, r->data);
					send_settle(p, u, true);
					break;
				}
			}
			if (r->rc == ZOK || r->rc == ZNONODE)
			{
				/* not our committing claim: only its entry is left */
				ZkWrite		w = {ZKC_DELETE, u->entry, NULL, -1, 0};

				u->busy = true;
				u->word = ZK_ASK_NONE;
				zk_call_multi(p, T_SETTLE, u->claim, &w, 1);
			}
			else if (!zk_is_connection_loss(r->rc) && r->rc != ZCLOSING)
			{
				ereport(WARNING,
						(errmsg("zklock could not read job claim \"%s\" to settle it: %s",
								u->claim, zerror(r->rc)),
						 errhint("A superuser settles it with zk_job_claim_settle().")));
				unsettled_forget(u);
			}
			break;

		case T_SETTLE:
			/* the settling multi, or the delete of a stale index entry */
			if ((u = unsettled_busy(r->path)) == NULL)
				break;
			u->busy = false;
			if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
				break;			/* again, after a sync */
			if (r->rc == ZOK)
			{
				if (u->word == ZK_ASK_REOPEN)
					ereport(LOG,
							(errmsg("zklock reopened job claim \"%s\"", u->claim),
							 errdetail("Its transaction did not commit.")));
				else if (u->word == ZK_ASK_COMMITTED)
					elog(DEBUG1, "zklock: job claim \"%s\" committed", u->claim);
			}
			else if (r->rc == ZNONODE && u->pending_too &&
					 u->word == ZK_ASK_REOPEN)
			{
				/* never made final: our pending node may be there */
				u->busy = true;
				zk_call_get(p, T_PENDING_GET, u->claim, false);
				break;
			}
			else if (r->rc != ZOK && r->rc != ZNONODE)
				ereport(WARNING,
						(errmsg("zklock could not settle job claim \"%s\": %s",
								u->claim, zerror(r->rc)),
						 errhint("A superuser settles it with zk_job_claim_settle().")));
			/* ZNONODE: settled by someone else, or never made final */
			unsettled_forget(u);
			break;

		case T_PENDING_GET:
		case T_PENDING_DEL:
			if ((u = unsettled_busy(r->path)) == NULL)
				break;
			u->busy = false;
			if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
				break;
			if (r->tag == T_PENDING_GET && r->rc == ZOK &&
				zk_is_ours(&r->stat))
			{
				char		nonce[NONCE_LEN + 1];

				data_nonce(r->data, nonce);
				if (strcmp(nonce, u->nonce) == 0)
				{
					u->busy = true;
					zk_call_delete(p, T_PENDING_DEL, u->claim, r->stat.version);
					break;
				}
			}
			unsettled_forget(u);
			break;

		case T_SWEEP_CLOCK:
			sweep_now = r->rc == ZOK && r->has_stat ? r->stat.mtime : 0;
			break;
		case T_SWEEP_LIST:
			/* (a reload may have set the retention to 0, "keep", meanwhile) */
			for (int i = 0; r->rc == ZOK && sweep_now > 0 &&
				 zklock_claim_retention > 0 && i < r->nchildren; i++)
			{
				TimestampTz slot;

				if (!zk_parse_slot_name(r->children[i], &slot) ||
					slot >= zk_time(sweep_now) -
					(int64) zklock_claim_retention * USECS_PER_SEC)
					continue;
				snprintf(path, sizeof(path), "%s/%s", r->path, r->children[i]);
				zk_call_get(p, T_SWEEP_GET, path, false);
			}
			break;
		case T_SWEEP_GET:
			if (r->rc == ZOK && r->has_stat && r->stat.ephemeralOwner == 0 &&
				!data_committing(r->data) && sweep_now > 0)
				sweep(p, r);
			break;
		case T_SWEEP_DEL:
			if (r->rc == ZOK)
				elog(DEBUG1, "zklock: removed old job claim \"%s\"", r->path);
			break;
	}
}

/* The session was lost or the part failed: read the index again. */
static void
own_reset(ZkPart *p, const char *why, bool failed)
{
	ListCell   *lc;

	scan_due = true;
	foreach(lc, unsettled)
		((Unsettled *) lfirst(lc))->busy = false;	/* their calls are gone */
	if (failed)
		claims_part = zk_instance_part(p->driver, "", ZK_GROUP_CLAIMS);
}

static const ZkDriver own_driver = {
	.kind = ZK_KIND_JOB_CLAIM,
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

/*
 * From the engine's turn: start settling, reading the index or sweeping
 * when due.  The end of recovery (a promotion) reads the index: the claims
 * of a primary this instance replaces are now ours to settle.
 */
static void
claim_run(void)
{
	ZkMono		now = zk_mono_now();
	ListCell   *lc;
	bool		due = false;

	if (was_in_recovery && !RecoveryInProgress())
	{
		was_in_recovery = false;
		scan_due = true;
	}
	if (claims_part == NULL || !zk_connected() || claims_part->inflight > 0)
		return;
	foreach(lc, unsettled)
		due |= unsettled_due(lfirst(lc), now);
	if (due || ((scan_due || now >= next_scan) && !RecoveryInProgress()) ||
		(zklock_claim_retention > 0 && now >= next_sweep &&
		 hash_get_num_entries(jobs) > 0))
		zk_part_look_again(claims_part);
}

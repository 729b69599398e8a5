/*-------------------------------------------------------------------------
 *
 * claim_settle.c
 *	  Job claims made final, settled by the claiming transaction's commit
 *	  record; the index of unsettled claims; retention.
 *
 * What a claim is, and its states, is in claim.c.
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
#include "worker/recipes/claim_internal.h"

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

static ZkPart *claims_part;		/* the claims' own part */
static HTAB *jobs;				/* names of the jobs claimed by us */
static List *unsettled = NIL;	/* of UnsettledClaim */
static bool scan_due = true;	/* the index is to be read */
static ZkMono next_scan = 0;
static int64 sweep_now = 0;		/* ZooKeeper's time (ms) at the sweep */
static bool was_in_recovery = true;
static ZkMono next_sweep = 0;	/* monotonic, as every interval here */

/* ---- the index, the jobs claimed ---- */

/* <root>/zklock.instances/unsettled/<system identifier>, for sysid */
void
claim_index_dir(char *buf, size_t size, const char *sysid)
{
	snprintf(buf, size, "%s/%s/unsettled/%s", zklock_root, ZK_INSTANCES_DIR,
			 sysid);
}

void
claim_own_index_dir(char *buf, size_t size)
{
	char		sysid[32];

	snprintf(sysid, sizeof(sysid), UINT64_FORMAT, GetSystemIdentifier());
	claim_index_dir(buf, size, sysid);
}

/* Remember a job whose claims the retention must sweep. */
void
claim_note_job(const char *name)
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

UnsettledClaim *
claim_unsettled_add(const char *claim, const char *nonce, const ZkClaimXact *xact,
			  const char *data)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	UnsettledClaim  *u = palloc0(sizeof(UnsettledClaim));

	u->claim = pstrdup(claim);
	strlcpy(u->nonce, nonce, sizeof(u->nonce));
	u->xact = *xact;
	if (xact->has_xid)
	{
		char		dir[ZK_PATH_MAX];

		claim_own_index_dir(dir, sizeof(dir));
		u->entry = psprintf("%s/%s", dir, nonce);
		u->data = data ? pstrdup(data) : NULL;
	}
	unsettled = lappend(unsettled, u);
	MemoryContextSwitchTo(old);
	return u;
}

static void
unsettled_forget(UnsettledClaim *u)
{
	unsettled = list_delete_ptr(unsettled, u);
	pfree(u->claim);
	if (u->entry)
		pfree(u->entry);
	if (u->data)
		pfree(u->data);
	pfree(u);
}

UnsettledClaim *
claim_unsettled_of_part(ZkPart *p)
{
	ListCell   *lc;

	foreach(lc, unsettled)
		if (((UnsettledClaim *) lfirst(lc))->part == p)
			return lfirst(lc);
	return NULL;
}

/* Are there as many unsettled claims as the worker keeps? */
bool
claim_unsettled_full(void)
{
	return list_length(unsettled) >= MAX_UNSETTLED;
}

static UnsettledClaim *
unsettled_of_nonce(const char *nonce)
{
	ListCell   *lc;

	foreach(lc, unsettled)
		if (strcmp(((UnsettledClaim *) lfirst(lc))->nonce, nonce) == 0)
			return lfirst(lc);
	return NULL;
}

/* The item whose call about this claim path is on its way. */
static UnsettledClaim *
unsettled_busy(const char *claim)
{
	ListCell   *lc;

	foreach(lc, unsettled)
	{
		UnsettledClaim  *u = lfirst(lc);

		if (u->busy && strcmp(u->claim, claim) == 0)
			return u;
	}
	return NULL;
}

static bool
unsettled_due(UnsettledClaim *u, ZkMono now)
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

/* ---- the claims' own part: settling, retention ---- */

static int
sweep_interval_ms(void)
{
	int64		half = (int64) zklock_claim_retention * 500;

	return (int) Max(1000, Min(half, SWEEP_MAX_MS));
}

/* The multi that settles u: committed, or reopened. */
static void
send_settle(ZkPart *own, UnsettledClaim *u, bool committed)
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
		data = claim_committed_data(u->data);
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
settle(ZkPart *own, UnsettledClaim *u, ZkMono now)
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
	if (claim_data_number(r->data, "retention", retention, sizeof(retention)))
		keep_s = Max(keep_s, strtoi64(retention, NULL, 10));
	cutoff = zk_time(sweep_now) - keep_s * USECS_PER_SEC;
	if (!zk_parse_slot_name(zk_node_of(r->path), &slot) || slot >= cutoff ||
		zk_time(r->stat.ctime) >= cutoff)
		return;
	claim_data_nonce(r->data, nonce);
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
	(void) claim_unsettled_add(data + n, nonce, &xact, NULL);
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
	UnsettledClaim  *u;

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
			claim_own_index_dir(path, sizeof(path));
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

				claim_data_nonce(r->data, nonce);
				if (strcmp(nonce, u->nonce) == 0 && claim_data_committing(r->data))
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

				claim_data_nonce(r->data, nonce);
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
				!claim_data_committing(r->data) && sweep_now > 0)
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
		((UnsettledClaim *) lfirst(lc))->busy = false;	/* their calls are gone */
	if (failed)
		claims_part = zk_instance_part(p->driver, "", ZK_GROUP_CLAIMS);
}

static const ZkDriver own_driver = {
	.kind = ZK_KIND_JOB_CLAIM,
	.form = ZK_FORM_NONE,
	.step = own_step,
	.reset = own_reset,
};

void
claim_settle_init(void)
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
void
claim_settle_reload(void)
{
	next_sweep = 0;
}

/*
 * From the engine's turn: start settling, reading the index or sweeping
 * when due.  The end of recovery (a promotion) reads the index: the claims
 * of a primary this instance replaces are now ours to settle.
 */
void
claim_settle_run(void)
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

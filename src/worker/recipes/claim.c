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
 * Settling (claim_settle.c) reads the outcome of a claim made final from
 * the commit log of the claimant's instance, never a clock, and keeps the
 * index of unsettled claims and the retention of committed ones.
 *
 * The claim of one backend (this file) creates the pending node, makes it
 * final at the backend's ask, waits on someone else's claim, and hands a
 * claim made final over to settling when its backend gives it up.  A
 * claim part of a ZKR_SETTLE request settles a claim by hand.
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

#include "storage/lwlock.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "worker/recipes/claim_internal.h"

/* where a claim part is */
typedef enum ClaimStep
{
	CLAIM_START = 0,			/* create the node */
	CLAIM_CREATING,				/* create sent */
	CLAIM_CHECK,				/* create's reply lost: is the node ours? */
	CLAIM_HELD,					/* our ephemeral node exists: granted */
	CLAIM_FINALIZING,			/* the multi is on its way */
	CLAIM_FINAL,				/* made final: its transaction decides */
	CLAIM_OVER,					/* taken by someone else, failed, or settled */
	CLAIM_SETTLING,				/* given up after it was made final (or
								 * might have been): its release waits for
								 * the settling */
	CLAIM_LOOKING,				/* someone else's node is there: settled? */
	CLAIM_WAITING,				/* ... open or committing: wait for it */
	CLAIM_MANUAL				/* zk_job_claim_settle */
} ClaimStep;

/* the driver's state of a claim part (ZkPart.ds.claim) */
typedef struct ClaimState
{
	ClaimStep	step;
	char	   *data;			/* our node's data (pending), or NULL */
} ClaimState;

/* ---- a claim node's path and data ---- */

void
claim_path(ZkPart *p, char *buf, size_t size)
{
	snprintf(buf, size, "%s/%s", p->parent, p->node);
}

/*
 * The value of "key" in data zklock wrote, when it is a string with no
 * escapes (a nonce, a state, a system identifier), into out; false if
 * absent or longer than size - 1.
 */
bool
claim_data_field(const char *data, const char *key, char *out, size_t size)
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
bool
claim_data_number(const char *data, const char *key, char *out, size_t size)
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
void
claim_data_nonce(const char *data, char *nonce)
{
	if (!claim_data_field(data, "claim", nonce, NONCE_LEN + 1) ||
		strlen(nonce) != NONCE_LEN)
		nonce[0] = '\0';
}

/* Does a claim's data say it is committing (made final, not settled)? */
bool
claim_data_committing(const char *data)
{
	char		state[16];

	return claim_data_field(data, "state", state, sizeof(state)) &&
		strcmp(state, "committing") == 0;
}

/* Our node's data is not needed any more. */
static void
forget_data(ZkPart *p)
{
	if (p->ds.claim->data)
		pfree(p->ds.claim->data);
	p->ds.claim->data = NULL;
}

/* Our part's claim data with another state: the pending data's tail. */
char *
claim_data(ZkPart *p, const char *state)
{
	const char *tail = "\"pending\"}";
	size_t		len = strlen(p->ds.claim->data) - strlen(tail);

	return psprintf("%.*s%s}", (int) len, p->ds.claim->data, state);
}

/* Committing data made committed (the state is its last field). */
char *
claim_committed_data(const char *data)
{
	const char *s = strstr(data, "\"state\":\"committing\"");

	Assert(s != NULL);
	return psprintf("%.*s\"state\":\"committed\"%s", (int) (s - data), data,
					s + strlen("\"state\":\"committing\""));
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
		p->ds.claim->step = CLAIM_MANUAL;
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
			zk_part_step_again(p, true);	/* read again once connected */
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
							  !claim_data_committing(r->data))))
		{
			zk_part_done(p, 0);
			return;
		}
		claim_data_nonce(r->data, nonce);
		if (r->rc != ZOK || nonce[0] == '\0' ||
			!claim_data_field(r->data, "system", sysid, sizeof(sysid)))
		{
			zk_part_fail(p, r->rc == ZOK ? ERRCODE_DATA_CORRUPTED :
						 zk_refusal_errcode(r->rc),
						 r->rc == ZOK ? "The claim node's data does not name its claim." :
						 "ZooKeeper refused to read the claim node: %s.",
						 zerror(r->rc));
			return;
		}
		claim_index_dir(entry, sizeof(entry), sysid);
		strlcat(entry, "/", sizeof(entry));
		strlcat(entry, nonce, sizeof(entry));
		snprintf(child, sizeof(child), "%s/%s", r->path, nonce);
		w[0] = (ZkWrite) {ZKC_DELETE, entry, NULL, -1, 0};
		if (ZK_ENTRY(id)->arg)
		{
			w[1] = (ZkWrite) {ZKC_SET, r->path, claim_committed_data(r->data),
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

/* ---- the claim of one backend ---- */

static void
claim_create(ZkPart *p)
{
	char		path[ZK_PATH_MAX];

	claim_path(p, path, sizeof(path));
	p->ds.claim->step = CLAIM_CREATING;
	zk_part_set_phase(p, NODE_CREATING);
	zk_call_create(p, T_CLAIM_CREATE, path, p->ds.claim->data, ZOO_EPHEMERAL, true);
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
	forget_data(p);
	p->ds.claim->data = MemoryContextStrdup(TopMemoryContext,
								   psprintf("%s,\"slot\":\"%s\",\"claimed_at\":\"%s\",\"claim\":\"%s\",\"retention\":%d,\"state\":\"pending\"}",
											base, slot, now, nonce,
											zklock_claim_retention));
	claim_note_job(p->name);
	claim_create(p);
}

/* The slot is done, or taken and we must not wait: false. */
static void
claim_taken(ZkPart *p)
{
	zk_part_set_phase(p, NODE_NONE);
	p->ds.claim->step = CLAIM_OVER;
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

	zk_part_set_phase(p, NODE_NONE);
	if (id < 0 || (ZK_ENTRY(id)->flags & ZKR_NOWAIT))
	{
		claim_taken(p);
		return;
	}
	p->ds.claim->step = CLAIM_LOOKING;
	claim_path(p, path, sizeof(path));
	zk_call_get(p, T_CLAIM_LOOK, path, true);
}

/*
 * Send the finalize of our claim (see the header): the multi that makes
 * it committing (committed on a standby), with its child and its index
 * entry.
 */
static void
send_finalize(ZkPart *p, UnsettledClaim *u)
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
	UnsettledClaim  *u = claim_unsettled_of_part(p);

	if (u == NULL)
		return;					/* cannot be: the part keeps its item */
	u->finalizing = false;
	if (r->rc == ZNONODE && r->op == 3 && p->parent_tries++ < 3)
	{
		/* the index's folder is not there (a new ZooKeeper): make it */
		char		dir[ZK_PATH_MAX];

		claim_own_index_dir(dir, sizeof(dir));
		zk_parents_gone(dir);
		u->finalizing = true;
		zk_call_create(p, T_INDEX_PARENT, dir, NULL, ZOO_PERSISTENT, true);
		return;
	}
	/* no more node of ours for the engine to delete */
	zk_part_set_phase(p, NODE_NONE);
	if (r->rc == ZOK)
	{
		/* the transaction decides (claim_ask) */
		if (id >= 0)
		{
			p->ds.claim->step = CLAIM_FINAL;
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
	p->ds.claim->step = id >= 0 ? CLAIM_OVER : CLAIM_SETTLING;
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
		!claim_data_committing(r->data))
		claim_taken(p);			/* committed: the slot is done */
	else if (r->rc == ZOK)
	{
		/* pending or committing: the watch tells when it is settled */
		p->ds.claim->step = CLAIM_WAITING;
		zk_part_wait_on(p, p->node);
	}
	else if (r->rc == ZNONODE)
		claim_start(p);			/* gone meanwhile: claim again */
	else if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
		zk_part_step_again(p, true);	/* claims again once connected */
	else
	{
		p->ds.claim->step = CLAIM_OVER;
		zk_part_fail(p, zk_refusal_errcode(r->rc),
					 "ZooKeeper refused to read the claim node: %s.",
					 zerror(r->rc));
	}
}

static void
claim_step(ZkPart *p, const ZkResult *r)
{
	char		path[ZK_PATH_MAX];

	if (r == NULL)
	{
		switch (p->ds.claim->step)
		{
			case CLAIM_START:
			case CLAIM_LOOKING:
			case CLAIM_WAITING:
				/* (re)start; the claim waited for was settled (its watch) */
				if (zk_part_dropping(p))
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
				p->ds.claim->step = CLAIM_HELD;
				zk_part_grant(p);
			}
			else if (r->rc == ZNODEEXISTS)
				claim_exists(p);
			else if (r->rc == ZNONODE)
			{
				/* a parent went (a reaped container): create them again */
				p->ds.claim->step = CLAIM_START;
				if (zk_part_parent_gone(p))
				{
					zk_part_step_again(p, true);
					forget_data(p);
				}
			}
			else if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
			{
				/* created or not: look once connected (advance() asks) */
				p->ds.claim->step = CLAIM_CHECK;
				zk_part_step_again(p, true);
			}
			else
			{
				zk_part_set_phase(p, NODE_NONE);
				p->ds.claim->step = CLAIM_OVER;
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

				claim_data_nonce(p->ds.claim->data, ours);
				claim_data_nonce(r->data, theirs);
				if (strcmp(ours, theirs) != 0)
				{
					claim_exists(p);
					break;
				}
				zk_part_node_created(p, r->path, &r->stat);
				p->ds.claim->step = CLAIM_HELD;
				zk_part_grant(p);	/* or, dropping, the engine deletes it */
			}
			else if (r->rc == ZOK)
				claim_exists(p);
			else if (r->rc == ZNONODE)
			{
				/* our create never happened */
				zk_part_set_phase(p, NODE_NONE);
				p->ds.claim->step = CLAIM_START;
				if (!zk_part_dropping(p))
				{
					zk_part_step_again(p, true);
					forget_data(p);
				}
			}
			else
				zk_part_step_again(p, true);	/* again once connected */
			break;

		case T_CLAIM_LOOK:
			if (p->ds.claim->step == CLAIM_LOOKING && !zk_part_dropping(p))
				claim_look(p, r);
			break;

		case T_CLAIM_FINAL:
			claim_finalized(p, r);
			break;

		case T_INDEX_PARENT:
			{
				UnsettledClaim  *u = claim_unsettled_of_part(p);

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
	UnsettledClaim  *u;

	if (ask == ZK_ASK_REOPEN || ask == ZK_ASK_COMMITTED)
	{
		if ((u = claim_unsettled_of_part(p)) != NULL)
		{
			u->word = ask;
			u->held = false;
			u->not_before = 0;
			p->ds.claim->step = CLAIM_SETTLING;
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
	if (p->ds.claim->step != CLAIM_HELD || p->phase != NODE_EXISTS)
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
	if (claim_unsettled_full())
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

		claim_data_nonce(p->ds.claim->data, nonce);
		if (xact.has_xid)
			data = claim_data(p, psprintf("\"committing\",\"xid\":\"" UINT64_FORMAT "\"",
										  xact.xid));
		u = claim_unsettled_add(path, nonce, &xact, data);
	}
	u->part = p;
	u->held = true;
	p->ds.claim->step = CLAIM_FINALIZING;
	zk_part_set_phase(p, NODE_DELETING);	/* the multi deletes it; nothing else may */
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
	return p->ds.claim->step == CLAIM_SETTLING && claim_unsettled_of_part(p) != NULL;
}

/* A claim part goes: its item is settled without it. */
static void
claim_freed(ZkPart *p)
{
	UnsettledClaim  *u;

	while ((u = claim_unsettled_of_part(p)) != NULL)
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
	forget_data(p);
}

const ZkDriver zk_claim_driver = {
	.kind = ZK_KIND_JOB_CLAIM,
	.form = ZK_FORM_NONE,
	.state_size = sizeof(ClaimState),
	.step = claim_step,
	.freed = claim_freed,
	.init = claim_settle_init,
	.reload = claim_settle_reload,
	.run = claim_settle_run,
	.steps = {
		.ask = claim_ask,
		.busy = claim_busy,
	},
};

/* ---- listings (ZK_LIST_CLAIMS) ---- */

void
zk_claim_list_step(ZkPart *p, const ZkResult *r)
{
	ZkListState *st = p->ds.list;
	char		path[ZK_PATH_MAX];

	if (r == NULL)
	{
		(void) zk_list_rows(p);
		st->awaited = 0;
		snprintf(path, sizeof(path), "%s/claims", p->parent);
		zk_call_list(p, T_LIST_LIST, path, false);
		return;
	}
	if (r->rc != ZOK && r->rc != ZNONODE)
	{
		if (st->rows.data)
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
				st->awaited++;
			}
			break;
		case T_LIST_GET:
			st->awaited--;
			if (r->rc == ZOK)
			{
				const char *cols[4];
				char		ctime[32];

				snprintf(ctime, sizeof(ctime), INT64_FORMAT, (int64) r->stat.ctime);
				cols[0] = zk_node_of(r->path);
				cols[1] = r->data ? r->data : "";
				cols[2] = ctime;
				cols[3] = r->stat.ephemeralOwner == 0 ? "t" : "f";
				zk_add_row(&st->rows, 4, cols);
			}
			break;
	}
	if (st->awaited == 0 && p->inflight == 0)
		zk_part_rows(p, &st->rows);
}

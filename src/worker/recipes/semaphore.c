/*-------------------------------------------------------------------------
 *
 * semaphore.c
 *	  Driver of a lease of Curator's InterProcessSemaphoreV2.
 *
 * A lease is an ephemeral-sequential "-lease-" node under
 * <zklock.root>/<name>/leases, taken while holding the semaphore's entry
 * mutex (recipes/lock.c, composed by backend/holdings.c): it holds once the
 * leases number at most max_leases, else it waits for any change of the
 * children.  As in Curator, every acquirer of one semaphore must use the
 * same max_leases.  Curator's InterProcessSemaphoreMutex is this recipe
 * with max_leases 1.
 *
 * Several leases in one call, all or none (take_leases, backend/holdings.c):
 * while holding the entry mutex the backend asks for all qty lease parts at
 * once, each deciding as above, and has them all only when every one
 * holds.  That is exactly "the leases, ours included, number at most
 * max_leases": the lease created last listed the children after all qty
 * of ours existed, and while we hold the entry mutex nobody else adds a
 * lease (every participant, Curator's included, creates its lease only
 * under the entry mutex), so the count it accepted can only have fallen
 * since.  A part created earlier may hold sooner, on a listing without
 * our later leases: it means nothing until all hold, and all are given
 * back when one does not.  Curator's own acquire(qty) takes the entry
 * mutex once per lease instead; both keep to the same protocol.
 *
 * A semaphore sized by a shared count (Curator's
 * InterProcessSemaphoreV2(client, path, SharedCountReader)): the lease's
 * request names the count (ZkPart.sarg), and max_leases is the count's
 * value (ZkPart.ds.leases), read before the part decides, with a watch (the
 * part's side watch, worker/engine/watches.c) while it waits: a change of
 * the count wakes it at once, and it reads the count again before it
 * decides again.  As in Curator, only waiting leases look at the count:
 * leases that hold keep holding when it drops, and a count below 1 admits
 * nobody.  The nodes are Curator's: the count is its own node
 * (recipes/shared_count.c), the semaphore's children are as above.  A
 * count that is not there fails the lease with 22023, one that is not 4
 * bytes with 22P02 (the backend read it before, so these are a count
 * deleted or spoiled while the lease waits).
 *
 * The SQL side is backend/lock.c (zk_semaphore_*), composed by
 * backend/holdings.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "worker/engine/engine.h"

static bool
lease_counts(ZkForm form)
{
	return form == ZK_FORM_LEASE;
}

static int
lease_decide(ZkPart *p, ZkNodeRef *nodes, int n, int self)
{
	int32		max_leases = p->sarg ? p->ds.leases : p->arg;

	return n <= max_leases ? ZK_HOLDS : ZK_WATCH_CHILDREN;
}

/* tag of the read of the shared count */
#define T_COUNT		1

/* The check: none for a lease of a fixed max_leases. */
static bool
lease_precheck(ZkPart *p, const ZkResult *r)
{
	return p->sarg == NULL;
}

/*
 * Read the shared count, with the side watch.  The engine also runs the
 * check again after a reconnect or a lost create's reply (advance), before
 * any listing said whether one is needed: a lease of a fixed max_leases
 * needs none.
 */
static void
lease_begin(ZkPart *p)
{
	char		path[ZK_PATH_MAX];

	if (p->sarg == NULL)
	{
		zk_part_checked(p);
		return;
	}
	zk_path(path, sizeof(path), p->sarg, "");
	zk_call_get_side(p, T_COUNT, path);
}

static void
lease_step(ZkPart *p, const ZkResult *r)
{
	int32		value;

	if (r == NULL || r->tag != T_COUNT || zk_part_dropping(p) || zk_part_holds(p))
		return;
	if (r->rc == ZNONODE)
		zk_part_fail(p, ERRCODE_INVALID_PARAMETER_VALUE,
					 "Its shared count \"%s\" does not exist (no node \"%s\").",
					 p->sarg, r->path);
	else if (r->rc != ZOK)
	{
		/* a connection loss: read again once connected */
		if (!zk_is_connection_loss(r->rc) && r->rc != ZCLOSING)
			zk_part_fail(p, zk_refusal_errcode(r->rc),
						 "ZooKeeper refused to read its shared count \"%s\": %s.",
						 p->sarg, zerror(r->rc));
	}
	else if (zk_count_decode(p, r, 0, &value) && p->side_path != NULL)
	{
		/* (without the watch, which a fire took meanwhile: read again) */
		p->ds.leases = value;
		zk_part_checked(p);
	}
}

const ZkDriver zk_semaphore_driver = {
	.kind = ZK_KIND_SEMAPHORE,
	.form = ZK_FORM_LEASE,
	.step = lease_step,
	.seq = {
		.watch_children = true,
		.counts = lease_counts,
		.decide = lease_decide,
		.begin = lease_begin,
		.precheck = lease_precheck,
	},
};

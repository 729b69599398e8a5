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
	return n <= p->arg ? ZK_HOLDS : ZK_WATCH_CHILDREN;
}

const ZkDriver zk_semaphore_driver = {
	.kind = ZK_KIND_SEMAPHORE,
	.suffix = ZK_SUFFIX_LEASES,
	.form = ZK_FORM_LEASE,
	.watch_children = true,
	.counts = lease_counts,
	.decide = lease_decide,
};

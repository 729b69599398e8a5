/*-------------------------------------------------------------------------
 *
 * semaphore.c
 *	  Driver of a lease of Curator's InterProcessSemaphoreV2.
 *
 * A lease is an ephemeral-sequential "-lease-" node under
 * <zklock.root>/<name>/leases, taken while holding the semaphore's entry
 * mutex (recipes/lock.c; holdings.c composes the two): it holds once the
 * leases number at most max_leases, else it waits for any change of the
 * children.  As in Curator, every acquirer of one semaphore must use the
 * same max_leases.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "engine.h"

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
	.suffix = "/leases",
	.form = ZK_FORM_LEASE,
	.watch_children = true,
	.counts = lease_counts,
	.decide = lease_decide,
};

/*-------------------------------------------------------------------------
 *
 * inspect.c
 *	  Driver of listings (ZK_KIND_LIST): a backend asks what is in
 *	  ZooKeeper under a name, and gets rows back (zk_part_rows).
 *
 * The request's arg says what to list (ZkListWhat); each kind of listing
 * is answered by the recipe it belongs to.  So far: ZK_LIST_LEADER, the
 * leader of a group (recipes/leader.c), and ZK_LIST_CLAIMS, the claims of a
 * job (recipes/claim.c).  Others fail with 0A000.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "engine.h"

static void
list_step(ZkPart *p, const ZkResult *r)
{
	switch ((ZkListWhat) p->arg)
	{
		case ZK_LIST_LEADER:
			zk_leader_list_step(p, r);
			return;
		case ZK_LIST_CLAIMS:
			zk_claim_list_step(p, r);
			return;
		default:
			if (r == NULL)
				zk_part_fail(p, ERRCODE_FEATURE_NOT_SUPPORTED,
							 "This zklock worker cannot make that listing.");
			return;
	}
}

const ZkDriver zk_list_driver = {
	.kind = ZK_KIND_LIST,
	.suffix = "",
	.form = ZK_FORM_NONE,
	.step = list_step,
};

/*-------------------------------------------------------------------------
 *
 * kinds.c
 *	  What each kind of request is called, and where its node is.
 *
 * A kind (ZkKind, zklock.h) names a recipe's request on both sides: a
 * backend asks for it and words its errors with zk_kind_name() and
 * zk_kind_failed(); the worker runs the kind's driver
 * (src/worker/recipes/) and names the kind in its log.  zk_kind_suffix()
 * is where under <zklock.root>/<name> a request of the kind has its node:
 * the engine places the nodes of the kind's driver there, and zk_locks
 * (backend/monitor.c) shows the node's path.  The facts are the columns
 * of kindlist.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "shared/zklock.h"

typedef struct ZkKindInfo
{
	const char *name;
	const char *suffix;
	const char *failed;
} ZkKindInfo;

#define PG_ZK_KIND(symbol, name, label, suffix, wait, driver, failed) \
	[symbol] = {name, suffix, failed},

static const ZkKindInfo kinds[ZK_NUM_KINDS] = {
#include "shared/kindlist.h"
};

#undef PG_ZK_KIND

/* What a request of this kind is, for messages: a noun phrase. */
const char *
zk_kind_name(ZkKind kind)
{
	Assert(kind >= 0 && kind < ZK_NUM_KINDS);
	return kinds[kind].name;
}

/*
 * The message of a request of this kind that failed, untranslated: the
 * format of an errmsg() with the request's name for its %s (errmsg
 * translates it).
 */
const char *
zk_kind_failed(ZkKind kind)
{
	Assert(kind >= 0 && kind < ZK_NUM_KINDS);
	return kinds[kind].failed;
}

/*
 * What a request of this kind appends to <zklock.root>/<name> for the
 * parent of its node.
 */
const char *
zk_kind_suffix(ZkKind kind)
{
	Assert(kind >= 0 && kind < ZK_NUM_KINDS);
	return kinds[kind].suffix;
}

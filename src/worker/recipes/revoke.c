/*-------------------------------------------------------------------------
 *
 * revoke.c
 *	  Driver of cooperative revocation (ZK_KIND_REVOKE): Curator's
 *	  Revoker.attemptRevoke on every current holder of a lock.
 *
 * Curator asks the holder of a lock to let go by writing "__REVOKE__"
 * (ZK_REVOKE_MESSAGE) into the holder's node with setData; a holder that
 * made itself revocable watches its node's data and, seeing that message,
 * is told (Curator's RevocationListener; zklock's holders, see
 * worker/engine/sequential.c).
 * Revoker.attemptRevoke does that for one node its caller names, usually
 * the first of InterProcessMutex.getParticipantNodes(), i.e. the holder.
 *
 * zk_lock_revoke(name) does it for every node that holds the name now:
 * one listing of <zklock.root>/<name>, the lock family's order (mutex,
 * read and write lock, and Kazoo's lock nodes: recipes/lock.c) tells which
 * participants hold (the first one if it is exclusive, else every reader
 * before the first exclusive one), and one setData per holder.  A holder
 * that is gone by then (NONODE) was not asked, as in Curator, nor one whose
 * node refuses the write (its ACL): that is logged, and fails the request
 * only when no holder could be asked.  The result is how many holders were
 * asked.  Nothing is deleted: whether a holder
 * lets go is up to it.
 *
 * A connection lost meanwhile: the request goes on once connected (step
 * with r NULL), and writes only to the nodes its one listing chose, so
 * that it never reaches a holder that came after them.  A listing whose
 * answer was lost is made again; writes whose answers were lost are made
 * again to the same nodes (their paths are unique: the message twice is
 * harmless), and one that then finds its node gone counts as made, as its
 * first try may have been what made that holder let go.
 *
 * The SQL side is zk_lock_revoke() in backend/lock.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "worker/engine/engine.h"

/* tags of the driver's calls */
#define T_REVOKE_LIST	1
#define T_REVOKE_SET	2

/* the driver's state of a part (ZkPart.ds.revoke) */
typedef struct RevokeState
{
	int			awaited;		/* setData answers awaited; -1: one was lost
								 * (it starts over once connected) */
	int			asked;			/* holders asked */
	int			refusal;		/* the first refusal of a setData, or 0 */
	bool		again;			/* writes are made again from here on */
	char	   *unanswered;		/* the paths of the writes not answered
								 * yet, one per line; NULL: not listed yet */
} RevokeState;

/*
 * Write the revocation request into every chosen node whose write was not
 * answered yet; done if there is none.
 */
static void
revoke_send_all(ZkPart *p)
{
	RevokeState *st = p->ds.revoke;

	for (char *s = st->unanswered; *s;)
	{
		char	   *end = strchr(s, '\n');

		*end = '\0';
		zk_call_set(p, T_REVOKE_SET, s, ZK_REVOKE_MESSAGE, -1);
		*end = '\n';
		st->awaited++;
		s = end + 1;
	}
	if (st->awaited == 0)
		zk_part_done(p, st->asked);
}

/* The write to path was answered: take it off the unanswered ones. */
static void
revoke_answered(ZkPart *p, const char *path)
{
	size_t		len = strlen(path);

	for (char *s = p->ds.revoke->unanswered; s && *s;)
	{
		char	   *end = strchr(s, '\n');

		if ((size_t) (end - s) == len && memcmp(s, path, len) == 0)
		{
			memmove(s, end + 1, strlen(end + 1) + 1);
			return;
		}
		s = end + 1;
	}
}

/* A call failed: wait for the reconnection (then start over), or fail. */
static void
revoke_failed(ZkPart *p, const ZkResult *r, const char *what)
{
	if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
	{
		p->ds.revoke->awaited = -1; /* the answers still out no longer count */
		return;
	}
	zk_part_fail(p, zk_refusal_errcode(r->rc), "ZooKeeper refused to %s: %s.",
				 what, zerror(r->rc));
}

static void
revoke_step(ZkPart *p, const ZkResult *r)
{
	RevokeState *st = p->ds.revoke;

	if (zk_part_dropping(p))
		return;
	if (r == NULL)
	{
		st->awaited = 0;
		if (st->unanswered == NULL)
		{
			st->asked = 0;
			st->refusal = 0;
			zk_call_list(p, T_REVOKE_LIST, p->parent, false);
			return;
		}
		st->again = true;
		revoke_send_all(p);
		return;
	}
	if (st->awaited < 0)
		return;					/* starts over once connected */

	switch (r->tag)
	{
		case T_REVOKE_LIST:
			{
				ZkNodeRef  *nodes;
				int			n;
				StringInfoData chosen;

				if (r->rc == ZNONODE)
				{
					zk_part_done(p, 0);
					return;
				}
				if (r->rc != ZOK)
				{
					revoke_failed(p, r, "list the lock's nodes");
					return;
				}
				n = zk_list_participants(r, zk_lock_family_counts, &nodes);
				initStringInfo(&chosen);
				for (int i = 0; i < n; i++)
					if (zk_lock_family_holds(nodes, n, i))
						appendStringInfo(&chosen, "%s/%s\n", p->parent,
										 nodes[i].name);
				st->unanswered = MemoryContextStrdup(TopMemoryContext,
													 chosen.data);
				pfree(chosen.data);
				revoke_send_all(p);
				return;
			}
		case T_REVOKE_SET:
			if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
			{
				revoke_failed(p, r, "write the revocation request");
				return;
			}
			revoke_answered(p, r->path);
			if (r->rc == ZOK || (r->rc == ZNONODE && st->again))
				st->asked++;
			else if (r->rc != ZNONODE)
			{
				/*
				 * NONODE: that holder let go meanwhile.  Another refusal
				 * (a node whose ACL does not let us write) leaves that
				 * holder unasked; the others still are.
				 */
				ereport(LOG,
						(errmsg("zklock could not ask the holder of node \"%s\" to let go: %s",
								r->path, zerror(r->rc))));
				if (st->refusal == 0)
					st->refusal = r->rc;
			}
			if (--st->awaited > 0)
				return;
			if (st->asked == 0 && st->refusal != 0)
				zk_part_fail(p, zk_refusal_errcode(st->refusal),
							 "ZooKeeper refused to write the revocation request: %s.",
							 zerror(st->refusal));
			else
				zk_part_done(p, st->asked);
			return;
	}
}

/* The part goes: the paths it kept. */
static void
revoke_freed(ZkPart *p)
{
	if (p->ds.revoke->unanswered)
		pfree(p->ds.revoke->unanswered);
}

const ZkDriver zk_revoke_driver = {
	.kind = ZK_KIND_REVOKE,
	.form = ZK_FORM_NONE,
	.state_size = sizeof(RevokeState),
	.step = revoke_step,
	.freed = revoke_freed,
};

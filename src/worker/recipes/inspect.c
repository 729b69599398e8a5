/*-------------------------------------------------------------------------
 *
 * inspect.c
 *	  Driver of listings (ZK_KIND_LIST): a backend asks what is in
 *	  ZooKeeper under a name, and gets rows back (zk_part_rows).
 *
 * The request's arg says what to list (ZkListWhat); each kind of listing
 * is answered by the recipe it belongs to: ZK_LIST_LEADER, the leader of a
 * group (recipes/leader.c), and ZK_LIST_CLAIMS, the claims of a job
 * (recipes/claim.c).  Others fail with 0A000.
 *
 * The participants of a lock (ZK_LIST_LOCK) and of a semaphore
 * (ZK_LIST_SEMAPHORE) are listed here: every node that takes part, with
 * its data, whoever made it (zklock, Curator, Kazoo).  One listing of the
 * parent (<name>; a semaphore's <name>/leases and <name>/locks), the
 * participants in the recipe's order, one getData each (answers come in
 * the order asked: a session's requests are answered in order).  A node
 * gone before its read is left out.  One row per node: path, sequence,
 * kind, holds ("t"/"f"; NULL for leases, whose holding depends on the
 * max_leases every participant passes: the backend decides), data.  Data
 * that is not valid UTF-8 (or holds a NUL byte) is shown as "\x" and its
 * bytes in hex, as bytea shows them.  A connection lost meanwhile starts
 * the listing over once connected.
 *
 * The SQL side: the participants functions of backend/monitor.c,
 * zk_leader_info() (backend/leader.c) and zk_job_claims()
 * (backend/claim.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "utils/memutils.h"

#include "worker/engine/engine.h"

/* tags of the participants' listing */
#define T_PART_LIST		1
#define T_PART_GET		2

/* What the listing knows of a node it reads, in the order read. */
typedef struct PartNode
{
	char		kind[8];
	char		holds;			/* 't', 'f', or 0: not known here */
} PartNode;

/* What a listing of participants read (ZkListState.nodes). */
typedef struct PartNodes
{
	int			asked;			/* nodes whose data was asked for */
	int			answered;
	int			room;
	PartNode	nodes[FLEXIBLE_ARRAY_MEMBER];
} PartNodes;

/* The listing's state, with room for n nodes asked for. */
static PartNodes *
part_nodes(ZkPart *p, int n)
{
	PartNodes  *pn = p->ds.list->nodes;

	if (pn == NULL || pn->room < n)
	{
		int			room = Max(n * 2, 16);
		Size		size = offsetof(PartNodes, nodes) + sizeof(PartNode) * room;

		if (pn == NULL)
			pn = MemoryContextAllocZero(TopMemoryContext, size);
		else
			pn = repalloc(pn, size);
		pn->room = room;
		p->ds.list->nodes = pn;
	}
	return pn;
}

static bool
lease_counts(ZkForm form)
{
	return form == ZK_FORM_LEASE;
}

static bool
entry_counts(ZkForm form)
{
	return form == ZK_FORM_LOCK;
}

static const char *
form_kind(ZkForm form, bool semaphore)
{
	switch (form)
	{
		case ZK_FORM_LOCK:
			return semaphore ? "entry" : "lock";
		case ZK_FORM_KAZOO_LOCK:
			return "lock";
		case ZK_FORM_WRITE:
			return "write";
		case ZK_FORM_READ:
		case ZK_FORM_KAZOO_READ:
			return "read";
		case ZK_FORM_LEASE:
			return "lease";
		default:
			return "?";
	}
}

/* A node's data as text: as written if valid UTF-8, else \x and hex. */
static char *
data_text(const char *data, int len)
{
	StringInfoData s;

	if (memchr(data, '\0', len) == NULL &&
		pg_verify_mbstr(PG_UTF8, data, len, true))
		return pnstrdup(data, len);
	initStringInfo(&s);
	appendStringInfoString(&s, "\\x");
	for (int i = 0; i < len; i++)
		appendStringInfo(&s, "%02x", (unsigned char) data[i]);
	return s.data;
}

/*
 * The listing's rows, empty (a listing starts, or starts over); freed with
 * the part.
 */
StringInfo
zk_list_rows(ZkPart *p)
{
	StringInfo	rows = &p->ds.list->rows;

	if (rows->data == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		initStringInfo(rows);
		MemoryContextSwitchTo(old);
	}
	else
		resetStringInfo(rows);
	return rows;
}

/* A call failed: wait for the reconnection (then start over), or fail. */
static void
part_failed(ZkPart *p, const ZkResult *r)
{
	if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
	{
		p->ds.list->awaited = -1;	/* the answers still out no longer count */
		return;
	}
	zk_part_fail(p, zk_refusal_errcode(r->rc),
				 "ZooKeeper refused to list the participants of \"%s\": %s.",
				 p->name, zerror(r->rc));
}

static void
participants_step(ZkPart *p, const ZkResult *r)
{
	ZkListState *st = p->ds.list;
	bool		semaphore = (p->arg == ZK_LIST_SEMAPHORE);
	PartNodes  *pn;

	if (zk_part_dropping(p))
		return;
	if (r == NULL)
	{
		char		path[ZK_PATH_MAX];

		(void) zk_list_rows(p);
		pn = part_nodes(p, 0);
		pn->asked = pn->answered = 0;
		if (semaphore)
		{
			snprintf(path, sizeof(path), "%s/leases", p->parent);
			zk_call_list(p, T_PART_LIST, path, false);
			snprintf(path, sizeof(path), "%s/locks", p->parent);
			zk_call_list(p, T_PART_LIST, path, false);
			st->awaited = 2;
		}
		else
		{
			zk_call_list(p, T_PART_LIST, p->parent, false);
			st->awaited = 1;
		}
		return;
	}
	if (st->awaited < 0)
		return;					/* starts over once connected */

	switch (r->tag)
	{
		case T_PART_LIST:
			{
				ZkNodeRef  *nodes;
				int			n;
				bool		leases;

				leases = semaphore && strcmp(zk_node_of(r->path), "leases") == 0;
				if (r->rc != ZOK && r->rc != ZNONODE)
				{
					part_failed(p, r);
					return;
				}
				st->awaited--;
				n = zk_list_participants(r, !semaphore ? zk_lock_family_counts :
										 leases ? lease_counts : entry_counts,
										 &nodes);
				pn = part_nodes(p, st->nodes->asked + n);
				for (int i = 0; i < n; i++)
				{
					char		path[ZK_PATH_MAX];
					PartNode   *x = &pn->nodes[pn->asked++];

					strlcpy(x->kind, form_kind(nodes[i].parsed.form, semaphore),
							sizeof(x->kind));
					if (!semaphore)
						x->holds = zk_lock_family_holds(nodes, n, i) ? 't' : 'f';
					else if (!leases)
						x->holds = (i == 0) ? 't' : 'f';	/* the entry mutex */
					else
						x->holds = 0;
					snprintf(path, sizeof(path), "%s/%s", r->path, nodes[i].name);
					zk_call_get(p, T_PART_GET, path, false);
					st->awaited++;
				}
				break;
			}
		case T_PART_GET:
			{
				PartNode   *x;

				pn = st->nodes;
				x = &pn->nodes[pn->answered++];
				if (r->rc == ZOK)
				{
					ZkNodeName nn;
					char		seq[16];
					const char *cols[5];

					(void) zk_parse_node(zk_node_of(r->path), &nn);
					snprintf(seq, sizeof(seq), "%d", (int) nn.seq);
					cols[0] = r->path;
					cols[1] = seq;
					cols[2] = x->kind;
					cols[3] = x->holds == 't' ? "t" : x->holds == 'f' ? "f" : NULL;
					cols[4] = r->data ? data_text(r->data, r->datalen) : NULL;
					zk_add_row(&st->rows, 5, cols);
				}
				else if (r->rc != ZNONODE)
				{
					part_failed(p, r);
					return;
				}
				st->awaited--;
				break;
			}
	}
	if (st->awaited == 0)
		zk_part_rows(p, &st->rows);
}

static void
list_step(ZkPart *p, const ZkResult *r)
{
	switch ((ZkListWhat) p->arg)
	{
		case ZK_LIST_LOCK:
		case ZK_LIST_SEMAPHORE:
			participants_step(p, r);
			return;
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

/* The part goes: what its state points to. */
static void
list_freed(ZkPart *p)
{
	if (p->ds.list->rows.data)
		pfree(p->ds.list->rows.data);
	if (p->ds.list->nodes)
		pfree(p->ds.list->nodes);
}

const ZkDriver zk_list_driver = {
	.kind = ZK_KIND_LIST,
	.form = ZK_FORM_NONE,
	.state_size = sizeof(ZkListState),
	.step = list_step,
	.freed = list_freed,
};

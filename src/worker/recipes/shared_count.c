/*-------------------------------------------------------------------------
 *
 * shared_count.c
 *	  Drivers of Curator's SharedCount: read (ZK_KIND_COUNT_READ), set
 *	  (ZK_KIND_COUNT_SET), compare-and-set (ZK_KIND_COUNT_CAS) and add
 *	  (ZK_KIND_COUNT_ADD).
 *
 * The shared count named N is the persistent node <zklock.root>/N whose
 * data is a 4-byte big-endian two's complement integer, as Curator's
 * SharedCount and Kazoo's Counter(support_curator=True) write it; its
 * missing ancestors are created as container nodes.  A node that holds
 * anything else (a lock's parent has no data, a barrier holds text) is not
 * a count: every request refuses it with 22P02, naming the node; except
 * the empty node Kazoo's Counter makes before its first write (decode).
 *
 * Each request is a one-shot part of its own, ending with zk_part_done:
 *
 *	- read (arg: the seed) gets the node; when there is none it creates it
 *	  with the seed, as Curator's start() does, or with targ set (the read
 *	  before a semaphore sized by the count) fails with 22023.  Its result
 *	  is the value and version (count_result).
 *	- set (arg: the value) reads the node and sets it at the version read
 *	  (again if someone wrote in between), creating it when absent: so it
 *	  never overwrites a node that is not a count.  Result: value and new
 *	  version.
 *	- compare-and-set (arg: the value, targ: the version read before) reads
 *	  the node and, if it is still at that version, sets it at that version,
 *	  as trySetCount does: 1 when applied, 0 when the count changed
 *	  meanwhile (or is gone).  The read first costs a round trip, but a
 *	  node that is not a count is never written, whatever its version.
 *	- add (arg: the delta, targ: the seed) reads, creates with the seed
 *	  when absent, and sets value + delta at the version read, again with
 *	  the new value while someone else wrote in between, at most MAX_TRIES
 *	  rounds (DistributedAtomicLong's optimistic mode).  Result: the new
 *	  value and version.
 *
 * Writes are made at most once.  A connection lost while a write is in
 * flight starts the part over once connected (step with r NULL), which
 * reads the node after a sync: still at the version the write was made
 * at, the write was not applied (and no longer can be: ZooKeeper orders a
 * session's requests across reconnects) and is made again; otherwise a
 * set that finds its value there is done, and everything else fails with
 * 40003 (statement_completion_unknown): the count holds another value (our
 * write, if applied, was overwritten since), or it holds exactly what our
 * compare-and-set or add would have written, which another client's
 * identical write (an add of the same delta to the same value) makes too.
 * A seed create whose reply was lost is simply looked at again: a count
 * that exists is a count created when absent, by us or anyone.  When the
 * session is lost after a write was sent, the request is not started over
 * (ZKR_AT_MOST_ONCE: 40003 in the backend).
 *
 * The SQL side is backend/shared_count.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "utils/memutils.h"

#include "worker/engine/engine.h"

/* tags of the drivers' calls */
#define T_GET			1		/* read the count */
#define T_SEED			2		/* create it with the seed */
#define T_CREATE		3		/* set: create it with the value */
#define T_SET			4		/* setData at a version */
#define T_CHECK			5		/* read after a write's reply was lost */
#define T_SYNC_FIRST	6		/* sync: its answer needs nothing */

/* where a part is (CountState.step) */
typedef enum CountStep
{
	S_IDLE = 0,					/* no write in flight */
	S_SET_SENT,					/* a setData went out at state->version */
	S_CREATE_SENT				/* set's create went out */
} CountStep;

/* Give up when the count keeps changing under us. */
#define MAX_TRIES		64

#define COUNT_BYTES		4

/* What a part remembers across a lost connection (ZkPart.ds.count). */
typedef struct CountState
{
	CountStep	step;			/* a write in flight */
	int			tries;			/* rounds of create and set so far */
	int32		version;		/* the version our setData is made at */
	int32		value;			/* the value it writes */
} CountState;

/* The result of read, set and add: the value and the version. */
static int64
count_result(int32 value, int32 version)
{
	return (int64) (((uint64) (uint32) version << 32) | (uint32) value);
}

static void
encode(int32 value, char *buf)
{
	uint32		v = (uint32) value;

	buf[0] = (char) (v >> 24);
	buf[1] = (char) (v >> 16);
	buf[2] = (char) (v >> 8);
	buf[3] = (char) v;
}

/*
 * The value a read found (the seed for an empty node, see below), or false
 * (the part failed) when the node is not a count.  An empty persistent node that never had children is a count
 * Kazoo's Counter made (its ensure_path) and has not written yet, which
 * Kazoo reads as its default: it reads as the request's seed, and is
 * written at its version like any other.  A lock's or semaphore's parent
 * is empty too, but has or had children.
 */
bool
zk_count_decode(ZkPart *p, const ZkResult *r, int32 seed, int32 *value)
{
	const unsigned char *d = (const unsigned char *) r->data;

	if ((r->data == NULL || r->datalen == 0) && r->has_stat &&
		r->stat.ephemeralOwner == 0 && r->stat.numChildren == 0 &&
		r->stat.cversion == 0)
	{
		*value = seed;
		return true;
	}
	if (r->data == NULL || r->datalen != COUNT_BYTES)
	{
		zk_part_fail(p, ERRCODE_INVALID_TEXT_REPRESENTATION,
					 "Node \"%s\" holds %d bytes, not a shared count (a 4-byte big-endian integer).",
					 r->path, r->data ? r->datalen : 0);
		return false;
	}
	*value = (int32) (((uint32) d[0] << 24) | ((uint32) d[1] << 16) |
					  ((uint32) d[2] << 8) | (uint32) d[3]);
	return true;
}

static bool
decode(ZkPart *p, const ZkResult *r, int32 *value)
{
	return zk_count_decode(p, r, p->driver->kind == ZK_KIND_COUNT_ADD ?
						   (int32) p->targ : p->arg, value);
}

/*
 * A call failed: connection losses wait for the reconnection (the part
 * starts over then); anything else fails the part.
 */
static void
call_failed(ZkPart *p, const ZkResult *r, const char *what)
{
	if (zk_is_connection_loss(r->rc) || r->rc == ZCLOSING)
		return;
	p->ds.count->step = S_IDLE;	/* refused: nothing to look for */
	zk_part_fail(p, zk_refusal_errcode(r->rc), "ZooKeeper refused to %s: %s.",
				 what, zerror(r->rc));
}

/* Too many rounds: the count keeps changing under us. */
static bool
too_many_tries(ZkPart *p)
{
	if (++p->ds.count->tries <= MAX_TRIES)
		return false;
	zk_part_fail(p, ERRCODE_T_R_SERIALIZATION_FAILURE,
				 "Its node kept changing under %d attempts to write it.",
				 MAX_TRIES);
	return true;
}

static void
send_set(ZkPart *p, int32 value, int32 version)
{
	CountState *s = p->ds.count;
	char		buf[COUNT_BYTES];

	s->value = value;
	s->version = version;
	p->ds.count->step = S_SET_SENT;
	encode(value, buf);
	zk_call_set_bytes(p, T_SET, p->parent, buf, COUNT_BYTES, version);
}

static void
send_create(ZkPart *p, int tag, int32 value)
{
	CountState *s = p->ds.count;
	char		buf[COUNT_BYTES];

	s->value = value;
	if (tag == T_CREATE)
		p->ds.count->step = S_CREATE_SENT;
	encode(value, buf);
	zk_call_create_bytes(p, tag, p->parent, buf, COUNT_BYTES,
						 ZOO_PERSISTENT, true);
}

/*
 * Read the count again, after a sync when a write's reply was lost (so
 * that the read sees whatever ZooKeeper applied of it).
 */
static void
read_count(ZkPart *p)
{
	if (p->ds.count->step != S_IDLE)
	{
		zk_call_sync(p, T_SYNC_FIRST, p->parent);
		zk_call_get(p, T_CHECK, p->parent, false);
	}
	else
		zk_call_get(p, T_GET, p->parent, false);
}

/*
 * The count was read at value/version (with no write of ours in flight):
 * what the request does with it.
 */
static void
count_read(ZkPart *p, int32 value, int32 version)
{
	int32		sum;

	switch (p->driver->kind)
	{
		case ZK_KIND_COUNT_READ:
			zk_part_done(p, count_result(value, version));
			break;
		case ZK_KIND_COUNT_SET:
			send_set(p, p->arg, version);
			break;
		case ZK_KIND_COUNT_CAS:
			if (version != (int32) p->targ)
				zk_part_done(p, 0);
			else
				send_set(p, p->arg, version);
			break;
		case ZK_KIND_COUNT_ADD:
			if (pg_add_s32_overflow(value, p->arg, &sum))
				zk_part_fail(p, ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
							 "The count is %d: adding %d to it leaves the range of a 4-byte integer.",
							 value, p->arg);
			else
				send_set(p, sum, version);
			break;
		default:
			break;
	}
}

/* The count is not there: what the request does. */
static void
count_absent(ZkPart *p)
{
	switch (p->driver->kind)
	{
		case ZK_KIND_COUNT_SET:
			send_create(p, T_CREATE, p->arg);
			break;
		case ZK_KIND_COUNT_CAS:
			zk_part_done(p, 0); /* the version read before is gone */
			break;
		case ZK_KIND_COUNT_ADD:
			send_create(p, T_SEED, (int32) p->targ);
			break;
		default:
			if (p->targ != 0)
				zk_part_fail(p, ERRCODE_INVALID_PARAMETER_VALUE,
							 "Shared count \"%s\" does not exist (no node \"%s\").",
							 p->name, p->parent);
			else
				send_create(p, T_SEED, p->arg);
			break;
	}
}

/*
 * The read after a write's reply was lost: was it applied?  (See the
 * header.)
 */
static void
check_lost_write(ZkPart *p, const ZkResult *r)
{
	CountState *s = p->ds.count;
	int32		value;
	bool		set_sent = (p->ds.count->step == S_SET_SENT);

	if (r->rc != ZOK && r->rc != ZNONODE)
	{
		call_failed(p, r, "read the shared count");
		return;
	}
	p->ds.count->step = S_IDLE;
	if (r->rc == ZNONODE)
	{
		zk_part_fail(p, ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN,
					 "The connection to ZooKeeper was lost before the write of node \"%s\" was answered, and the node is not there now: the write was either never made, or made and the node deleted since.",
					 r->path);
		return;
	}
	if (!decode(p, r, &value))
		return;
	if (set_sent && r->stat.version == s->version)
	{
		/* not applied, and it cannot be any more: as if just read */
		count_read(p, value, r->stat.version);
		return;
	}
	if (p->driver->kind == ZK_KIND_COUNT_SET && r->datalen == COUNT_BYTES &&
		value == s->value)
	{
		zk_part_done(p, count_result(value, r->stat.version));
		return;
	}
	zk_part_fail(p, ERRCODE_T_R_STATEMENT_COMPLETION_UNKNOWN,
				 "The connection to ZooKeeper was lost before the write of node \"%s\" was answered, and the count has changed since it was read (now %d at version %d): the write may or may not have been made.",
				 r->path, value, r->stat.version);
}

/* The step driver of all four requests. */
static void
count_step(ZkPart *p, const ZkResult *r)
{
	int32		value;

	if (zk_part_dropping(p))
		return;
	if (r == NULL)
	{
		read_count(p);
		return;
	}
	switch (r->tag)
	{
		case T_GET:
			if (r->rc == ZOK)
			{
				if (decode(p, r, &value))
					count_read(p, value, r->stat.version);
			}
			else if (r->rc == ZNONODE)
				count_absent(p);
			else
				call_failed(p, r, "read the shared count");
			break;
		case T_CHECK:
			check_lost_write(p, r);
			break;
		case T_SEED:
			if (r->rc == ZOK)
				count_read(p, p->ds.count->value, 0);
			else if (r->rc == ZNODEEXISTS || r->rc == ZNONODE)
			{
				/* made by someone else meanwhile, or an ancestor reaped */
				if (r->rc == ZNONODE)
					zk_parents_gone(p->parent);
				if (!too_many_tries(p))
					read_count(p);
			}
			else
				call_failed(p, r, "create the shared count");
			break;
		case T_CREATE:
			if (r->rc == ZOK)
			{
				p->ds.count->step = S_IDLE;
				zk_part_done(p, count_result(p->ds.count->value, 0));
			}
			else if (r->rc == ZNODEEXISTS || r->rc == ZNONODE)
			{
				p->ds.count->step = S_IDLE;
				if (r->rc == ZNONODE)
					zk_parents_gone(p->parent);
				if (!too_many_tries(p))
					read_count(p);
			}
			else
				call_failed(p, r, "create the shared count");
			break;
		case T_SET:
			if (r->rc == ZOK)
			{
				p->ds.count->step = S_IDLE;
				if (p->driver->kind == ZK_KIND_COUNT_CAS)
					zk_part_done(p, 1);
				else
					zk_part_done(p, count_result(p->ds.count->value,
												 r->stat.version));
			}
			else if (r->rc == ZBADVERSION || r->rc == ZNONODE)
			{
				/* someone wrote (or deleted it) first */
				p->ds.count->step = S_IDLE;
				if (p->driver->kind == ZK_KIND_COUNT_CAS)
					zk_part_done(p, 0);
				else if (!too_many_tries(p))
					read_count(p);
			}
			else
				call_failed(p, r, "set the shared count");
			break;
	}
}

const ZkDriver zk_count_read_driver = {
	.kind = ZK_KIND_COUNT_READ,
	.form = ZK_FORM_NONE,
	.step = count_step,
	.state_size = sizeof(CountState),
};

const ZkDriver zk_count_set_driver = {
	.kind = ZK_KIND_COUNT_SET,
	.form = ZK_FORM_NONE,
	.step = count_step,
	.state_size = sizeof(CountState),
};

const ZkDriver zk_count_cas_driver = {
	.kind = ZK_KIND_COUNT_CAS,
	.form = ZK_FORM_NONE,
	.step = count_step,
	.state_size = sizeof(CountState),
};

const ZkDriver zk_count_add_driver = {
	.kind = ZK_KIND_COUNT_ADD,
	.form = ZK_FORM_NONE,
	.step = count_step,
	.state_size = sizeof(CountState),
};

/*-------------------------------------------------------------------------
 *
 * protocol.c
 *	  The shared-memory request protocol between backends and the worker:
 *	  the pool of entries and the format of the rows of a listing, which
 *	  both processes use.
 *
 * The pool of ZkEntry structs (protocol.h) lives in shared memory; every
 * transition of an entry that crosses a process boundary is made by one
 * of two sides:
 *
 *	backend (src/backend/request.c: requests, give-ups, the rule of what is
 *	held; src/backend/wait.c: the waits):
 *			 zk_request()	takes a free entry, fills it in, queues it
 *			 zk_wait()		sleeps on its latch until the worker decided, the
 *							caller's deadline passed or an interrupt came
 *			 zk_ask()		asks more of a held entry, and waits for it
 *			 zk_ask_wait()	the same for an ask that waits for others (leave
 *							a double barrier), like a lock wait
 *			 zk_give_up()	hands the entry back (release, cancel, exit)
 *			 zk_await_released()	waits until the worker is done with
 *							the entries given up: a release returns once
 *							everyone else can take what it released
 *	worker (src/worker/reply.c): zk_take_queue(), zk_set_outcome(),
 *			 zk_set_grant(), ..., zk_free_entry()
 *
 * The rule for "this backend holds it": the entry is HELD, and the
 * ZooKeeper session its node belongs to is the worker's current session,
 * confirmed within the last half session timeout (zk_entry_valid,
 * backend/request.c).  Re-entrant grants, the *_held and *_token functions
 * and the COMMIT check all ask this, so none of them can vouch for a node
 * of a session that is gone or that nobody has confirmed lately.
 *
 * The rule that keeps ZooKeeper clean: once a backend has given an entry up
 * it never uses it again, and the worker deals with whatever the entry
 * left in ZooKeeper.  So whatever ends a wait, no node is left behind and no
 * given-up entry can turn into a holder.  The worker frees the entry only
 * once its node is deleted (or serves another request of the instance, the
 * lock having passed to it), and the backend waits for that before its
 * release returns (zk_await_released): a release is visible to every
 * client of ZooKeeper when it returns, as Curator's is.
 *
 * This file holds what both processes run: setting up the pool, and the
 * rows of a listing, which the worker writes (zk_add_row, zk_rows_store)
 * and a backend reads (zk_rows_load) in a DSM segment.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/dsm.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "shared/protocol.h"

/*
 * zklock.max_locks is capped so that every allocation scaling with it stays
 * below MaxAllocSize: zk_locks copies the entries in use, each smaller than
 * an entry (backend/monitor.c); the worker's per-entry arrays are much
 * smaller too.
 */
StaticAssertDecl((Size) ZK_MAX_LOCKS_LIMIT * sizeof(ZkEntry) <= MaxAllocSize,
				 "zklock.max_locks entries must fit in one allocation");

ZkShared   *zk_shared = NULL;

static Size
zk_shmem_size(void)
{
	return add_size(offsetof(ZkShared, entries),
					mul_size(zklock_max_locks, sizeof(ZkEntry)));
}

/* shmem_request_hook part: reserve our memory and our LWLock. */
void
zk_shmem_request(void)
{
	RequestAddinShmemSpace(zk_shmem_size());
	RequestNamedLWLockTranche("zklock", 1);
}

/* shmem_startup_hook part: create or attach to our shared state. */
void
zk_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	zk_shared = ShmemInitStruct("zklock", zk_shmem_size(), &found);
	if (!found)
	{
		memset(zk_shared, 0, zk_shmem_size());
		zk_shared->lock = &(GetNamedLWLockTranche("zklock"))->lock;
		zk_shared->session_state = ZKS_CONNECTING;
		pg_atomic_init_u64(&zk_shared->n_requests, 0);
		pg_atomic_init_u64(&zk_shared->n_grants, 0);
		pg_atomic_init_u64(&zk_shared->n_local_grants, 0);
		pg_atomic_init_u64(&zk_shared->n_timeouts, 0);
		pg_atomic_init_u64(&zk_shared->n_reconnects, 0);
		pg_atomic_init_u64(&zk_shared->n_session_losses, 0);
		pg_atomic_init_u64(&zk_shared->n_orphans, 0);
		pg_atomic_init_u64(&zk_shared->n_waits, 0);
		pg_atomic_init_u64(&zk_shared->n_cancels, 0);
		pg_atomic_init_u64(&zk_shared->n_zk_requests, 0);
		pg_atomic_init_u64(&zk_shared->n_zk_multis, 0);
		pg_atomic_init_u64(&zk_shared->n_zk_multi_writes, 0);
		pg_atomic_init_u64(&zk_shared->n_zk_multis_refused, 0);
		pg_atomic_init_u64(&zk_shared->stats_reset,
						   (uint64) GetCurrentTimestamp());
		pg_atomic_init_u32(&zk_shared->n_nodes, 0);
		pg_atomic_init_u32(&zk_shared->n_watches, 0);
		dlist_init(&zk_shared->free_entries);
		dlist_init(&zk_shared->used_entries);
		ConditionVariableInit(&zk_shared->entry_freed);
		dlist_init(&zk_shared->queue);
		zk_shared->num_entries = zklock_max_locks;
		for (int i = 0; i < zklock_max_locks; i++)
			dlist_push_tail(&zk_shared->free_entries,
							&zk_shared->entries[i].link);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * The rows of a listing, as the worker hands them to a backend in a DSM
 * segment: an int32 count, then per row an int32 number of columns and per
 * column a flag byte (0: NULL) and, unless NULL, a NUL-terminated string.
 */

/* Append one row (ncols strings, NULL for SQL NULL) to a listing. */
void
zk_add_row(StringInfo rows, int ncols, const char *const *cols)
{
	int32		nc = ncols;

	if (rows->len == 0)
	{
		int32		zero = 0;

		appendBinaryStringInfo(rows, (char *) &zero, sizeof(int32));
	}
	appendBinaryStringInfo(rows, (char *) &nc, sizeof(int32));
	for (int c = 0; c < ncols; c++)
	{
		appendStringInfoChar(rows, cols[c] ? 1 : 0);
		if (cols[c])
			appendBinaryStringInfo(rows, cols[c], strlen(cols[c]) + 1);
	}
	((int32 *) rows->data)[0]++;
}

/*
 * Put the rows zk_add_row made into a pinned DSM segment, for a backend to
 * attach to: *handle gets it (0 when there are no rows) and *n how many
 * rows.  False when no segment could be made.
 */
bool
zk_rows_store(StringInfo rows, dsm_handle *handle, int32 *n)
{
	dsm_segment *seg;

	*handle = 0;
	*n = 0;
	if (rows->len == 0)
		return true;
	memcpy(n, rows->data, sizeof(int32));
	seg = dsm_create(rows->len, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	if (seg == NULL)
		return false;
	memcpy(dsm_segment_address(seg), rows->data, rows->len);
	dsm_pin_segment(seg);
	*handle = dsm_segment_handle(seg);
	dsm_detach(seg);
	return true;
}

/*
 * Read the rows of a segment zk_rows_store made, and release the segment:
 * returns how many, with *rows allocated in the caller's memory context
 * (none if the segment is gone).
 */
int
zk_rows_load(dsm_handle handle, ZkRow **rows)
{
	dsm_segment *seg;
	char	   *p;
	int			n;

	*rows = NULL;
	if (handle == 0)
		return 0;
	seg = dsm_attach(handle);
	dsm_unpin_segment(handle);
	if (seg == NULL)
		return 0;

	p = dsm_segment_address(seg);
	memcpy(&n, p, sizeof(int32));
	p += sizeof(int32);
	*rows = palloc0(sizeof(ZkRow) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		ZkRow	   *r = &(*rows)[i];

		memcpy(&r->ncols, p, sizeof(int32));
		p += sizeof(int32);
		for (int c = 0; c < r->ncols; c++)
		{
			bool		isnull = (*p++ == 0);

			if (isnull)
				r->cols[c] = NULL;
			else
			{
				r->cols[c] = pstrdup(p);
				p += strlen(p) + 1;
			}
		}
	}
	dsm_detach(seg);
	return n;
}

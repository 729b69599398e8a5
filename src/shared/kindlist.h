/*---------------------------------------------------------------------------
 *
 * kindlist.h
 *	  The kinds of request: every fact of a kind, in one list.
 *
 * Each line is one kind (ZkKind), in the enum's order.  The file is
 * included with PG_ZK_KIND defined to pick the columns a place needs, as
 * PostgreSQL does with its resource managers (access/rmgrlist.h): the enum
 * (zklock.h), the names, failure messages and suffixes (kinds.c), the
 * labels of zk_locks (backend/monitor.c), the wait events
 * (wait_events.c) and the table of drivers (worker/engine/engine.c) all
 * come from it, so they cannot disagree.
 *
 * The columns:
 *	symbol	the ZkKind value
 *	name	what a request of the kind is, in messages: a noun phrase
 *			("zklock %s \"%s\" was lost")
 *	label	its kind in zk_locks, or NULL if it never shows there with one
 *			(zk_locks then shows "?")
 *	suffix	what it appends to <zklock.root>/<name> for the parent of its
 *			node, as in Curator's layout: its driver puts its nodes there,
 *			and zk_locks shows that path
 *	wait	what a backend waiting for it shows in pg_stat_activity
 *	driver	its driver (src/worker/recipes/; declared in engine.h)
 *	failed	the message of a request of the kind that failed, with the
 *			request's name for its %s; marked for translation
 *
 * There is deliberately no #ifndef guard: the file is included once per
 * table it makes.
 *
 *---------------------------------------------------------------------------
 */

/* symbol, name, label, suffix, wait, driver, failed */

/* exclusive lock (Curator InterProcessMutex) */
PG_ZK_KIND(ZK_KIND_LOCK, "lock", "lock", "", ZK_WAIT_LOCK,
		   zk_lock_driver,
		   gettext_noop("zklock could not acquire lock \"%s\""))

/* shared side of InterProcessReadWriteLock */
PG_ZK_KIND(ZK_KIND_READ, "read lock", "read", "", ZK_WAIT_READ,
		   zk_read_driver,
		   gettext_noop("zklock could not acquire read lock \"%s\""))

/* exclusive side of InterProcessReadWriteLock */
PG_ZK_KIND(ZK_KIND_WRITE, "write lock", "write", "", ZK_WAIT_WRITE,
		   zk_write_driver,
		   gettext_noop("zklock could not acquire write lock \"%s\""))

/* a lease of InterProcessSemaphoreV2 */
PG_ZK_KIND(ZK_KIND_SEMAPHORE, "semaphore", "semaphore", ZK_SUFFIX_LEASES,
		   ZK_WAIT_SEMAPHORE, zk_semaphore_driver,
		   gettext_noop("zklock could not acquire a lease of semaphore \"%s\""))

/* the semaphore's entry mutex (<name>/locks) */
PG_ZK_KIND(ZK_KIND_SEMAPHORE_ENTRY, "semaphore entry lock", "semaphore entry",
		   ZK_SUFFIX_LOCKS, ZK_WAIT_SEMAPHORE, zk_semaphore_entry_driver,
		   gettext_noop("zklock could not enter semaphore \"%s\""))

/* the instance in a LeaderLatch election (no request of a backend) */
PG_ZK_KIND(ZK_KIND_LATCH, "leader latch", NULL, "", ZK_WAIT_LOCK,
		   zk_latch_driver,
		   gettext_noop("zklock could not join leader election \"%s\""))

/* DistributedBarrier.setBarrier */
PG_ZK_KIND(ZK_KIND_BARRIER_SET, "barrier", NULL, "", ZK_WAIT_BARRIER,
		   zk_barrier_set_driver,
		   gettext_noop("zklock could not set barrier \"%s\""))

/* DistributedBarrier.removeBarrier */
PG_ZK_KIND(ZK_KIND_BARRIER_REMOVE, "barrier", NULL, "", ZK_WAIT_BARRIER,
		   zk_barrier_remove_driver,
		   gettext_noop("zklock could not remove barrier \"%s\""))

/* DistributedBarrier.waitOnBarrier */
PG_ZK_KIND(ZK_KIND_BARRIER_WAIT, "barrier", NULL, "", ZK_WAIT_BARRIER,
		   zk_barrier_wait_driver,
		   gettext_noop("zklock could not wait on barrier \"%s\""))

/* a member of DistributedDoubleBarrier */
PG_ZK_KIND(ZK_KIND_DOUBLE_BARRIER, "double barrier", "double barrier", "",
		   ZK_WAIT_DOUBLE_BARRIER, zk_double_barrier_driver,
		   gettext_noop("zklock could not enter double barrier \"%s\""))

/* a claim of a job's time slot */
PG_ZK_KIND(ZK_KIND_JOB_CLAIM, "job claim", "job claim", ZK_SUFFIX_CLAIMS,
		   ZK_WAIT_JOB_CLAIM, zk_claim_driver,
		   gettext_noop("zklock could not claim job \"%s\""))

/* Revoker.attemptRevoke on every holder */
PG_ZK_KIND(ZK_KIND_REVOKE, "revocation", "revocation", "", ZK_WAIT_REVOKE,
		   zk_revoke_driver,
		   gettext_noop("zklock could not revoke lock \"%s\""))

/* a listing: participants, claims */
PG_ZK_KIND(ZK_KIND_LIST, "listing", "listing", "", ZK_WAIT_LIST,
		   zk_list_driver,
		   gettext_noop("zklock could not list \"%s\""))

/* SharedCount: getVersionedValue (start()) */
PG_ZK_KIND(ZK_KIND_COUNT_READ, "shared count", "shared count", "",
		   ZK_WAIT_SHARED_COUNT, zk_count_read_driver,
		   gettext_noop("zklock could not read shared count \"%s\""))

/* SharedCount.setCount */
PG_ZK_KIND(ZK_KIND_COUNT_SET, "shared count", "shared count", "",
		   ZK_WAIT_SHARED_COUNT, zk_count_set_driver,
		   gettext_noop("zklock could not set shared count \"%s\""))

/* SharedCount.trySetCount */
PG_ZK_KIND(ZK_KIND_COUNT_CAS, "shared count", "shared count", "",
		   ZK_WAIT_SHARED_COUNT, zk_count_cas_driver,
		   gettext_noop("zklock could not compare and set shared count \"%s\""))

/* an add to a SharedCount (a CAS loop) */
PG_ZK_KIND(ZK_KIND_COUNT_ADD, "shared count", "shared count", "",
		   ZK_WAIT_SHARED_COUNT, zk_count_add_driver,
		   gettext_noop("zklock could not add to shared count \"%s\""))

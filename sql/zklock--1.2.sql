/* zklock--1.2.sql: distributed locks held in Apache ZooKeeper, version 1.2 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION zklock" to load this file. \quit

-- KEEP THIS FILE EQUIVALENT TO THE UPDATE PATHS.  A fresh
-- CREATE EXTENSION zklock (this file) and CREATE EXTENSION zklock VERSION
-- '1.0' or '1.1' followed by ALTER EXTENSION zklock UPDATE TO '1.2'
-- (zklock--1.0.sql, zklock--1.0--1.1.sql, zklock--1.1--1.2.sql) must leave
-- the same objects with the same definitions, comments and privileges; the
-- pg_regress suite "upgrade" (sql/upgrade.sql) checks it, and that no
-- function of the extension is executable by PUBLIC.
--
-- This file is 1.1's (zklock--1.1.sql) with 1.2's additions at the end.
-- Adding something to 1.2: append it at the end of BOTH this file and
-- zklock--1.1--1.2.sql, as one block per function: CREATE FUNCTION,
-- COMMENT ON FUNCTION, then
-- REVOKE ALL ON FUNCTION @extschema@.name(argument types) FROM PUBLIC and
-- the GRANTs it needs.  Create objects unqualified (they go into the
-- extension's schema); refer to existing ones as @extschema@.name.  Never
-- pick objects by a pattern such as LIKE 'zk\_%': the extension's schema
-- (CREATE EXTENSION zklock SCHEMA s; public by default) also holds the
-- user's own objects.  zklock--1.0.sql and zklock--1.1.sql are frozen; so
-- is 1.2 once released: later changes go into zklock--1.3.sql and
-- zklock--1.2--1.3.sql.

-- Conventions of every acquiring function:
--   timeout_ms NULL waits without limit (statement_timeout, lock_timeout and
--   cancel still apply), 0 does not wait, > 0 waits at most that long;
--   returns true when held, false when not granted in time.
--   Session-scope holdings stack (one release per acquire) and end with the
--   session; *_xact holdings end with the transaction, or with ROLLBACK TO
--   a savepoint set before them.

----------------------------------------------------------------------------
-- Exclusive lock: Apache Curator InterProcessMutex on <zklock.root>/<name>.
----------------------------------------------------------------------------
CREATE FUNCTION zk_lock_acquire(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_acquire(text, integer) IS
'take a session-scope exclusive zklock lock; true when held, false on timeout';

CREATE FUNCTION zk_lock_try(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_try(text) IS
'take a session-scope exclusive zklock lock if it is free, without waiting';

CREATE FUNCTION zk_lock_acquire_xact(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_acquire_xact(text, integer) IS
'take a transaction-scope exclusive zklock lock; true when held, false on timeout';

CREATE FUNCTION zk_lock_try_xact(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_try_xact(text) IS
'take a transaction-scope exclusive zklock lock if it is free, without waiting';

CREATE FUNCTION zk_lock_release(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_release(text) IS
'release one level of a session-scope zklock lock; false and a warning if not held';

CREATE FUNCTION zk_lock_held(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_held(text) IS
'whether this session holds the zklock lock now';

CREATE FUNCTION zk_lock_token(name text)
RETURNS bigint AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_token(text) IS
'fencing token (czxid of the lock node) of this session''s holding; NULL when not held';

----------------------------------------------------------------------------
-- Multi-lock: Curator InterProcessMultiLock over exclusive locks.
----------------------------------------------------------------------------
CREATE FUNCTION zk_lock_acquire_all(names text[], timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_acquire_all(text[], integer) IS
'take the session-scope exclusive locks of all names, or none; true when all are held';

CREATE FUNCTION zk_lock_acquire_all_xact(names text[], timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_acquire_all_xact(text[], integer) IS
'take the transaction-scope exclusive locks of all names, or none';

----------------------------------------------------------------------------
-- Read-write lock: Curator InterProcessReadWriteLock on <zklock.root>/<name>.
----------------------------------------------------------------------------
CREATE FUNCTION zk_rwlock_read(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_read(text, integer) IS
'take a session-scope read lock; shared with other readers, excluded by writers';

CREATE FUNCTION zk_rwlock_read_xact(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_read_xact(text, integer) IS
'take a transaction-scope read lock';

CREATE FUNCTION zk_rwlock_read_release(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_read_release(text) IS
'release one level of a session-scope read lock; false and a warning if not held';

CREATE FUNCTION zk_rwlock_read_held(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_read_held(text) IS
'whether this session holds the read lock now';

CREATE FUNCTION zk_rwlock_read_token(name text)
RETURNS bigint AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_read_token(text) IS
'fencing token of this session''s read lock; NULL when not held';

CREATE FUNCTION zk_rwlock_write(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_write(text, integer) IS
'take a session-scope write lock; excludes readers and writers';

CREATE FUNCTION zk_rwlock_write_xact(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_write_xact(text, integer) IS
'take a transaction-scope write lock';

CREATE FUNCTION zk_rwlock_write_release(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_write_release(text) IS
'release one level of a session-scope write lock; false and a warning if not held';

CREATE FUNCTION zk_rwlock_write_held(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_write_held(text) IS
'whether this session holds the write lock now';

CREATE FUNCTION zk_rwlock_write_token(name text)
RETURNS bigint AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_write_token(text) IS
'fencing token of this session''s write lock; NULL when not held';

----------------------------------------------------------------------------
-- Semaphore: Curator InterProcessSemaphoreV2 on <zklock.root>/<name>
-- (entry mutex in <name>/locks, one lease node per lease in <name>/leases).
----------------------------------------------------------------------------
CREATE FUNCTION zk_semaphore_acquire(name text, max_leases integer,
                                     timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_acquire(text, integer, integer) IS
'take one session-scope lease of a semaphore of max_leases leases';

CREATE FUNCTION zk_semaphore_acquire_xact(name text, max_leases integer,
                                          timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_acquire_xact(text, integer, integer) IS
'take one transaction-scope lease of a semaphore';

CREATE FUNCTION zk_semaphore_release(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_release(text) IS
'return one session-scope lease; false and a warning if none is held';

CREATE FUNCTION zk_semaphore_held(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_held(text) IS
'whether this session holds a lease of the semaphore now';

CREATE FUNCTION zk_semaphore_token(name text)
RETURNS bigint AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_token(text) IS
'fencing token of this session''s newest lease; NULL when none is held';

----------------------------------------------------------------------------
-- Every kind.
----------------------------------------------------------------------------
CREATE FUNCTION zk_lock_release_all()
RETURNS integer AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_release_all() IS
'release every session-scope zklock holding of this session, of every kind; returns how many';

----------------------------------------------------------------------------
-- Monitoring.
----------------------------------------------------------------------------
CREATE FUNCTION zk_locks_internal(
    OUT pid integer, OUT database text, OUT name text, OUT kind text,
    OUT scope text, OUT state text, OUT count integer, OUT token bigint,
    OUT znode text, OUT since timestamptz, OUT waiting_on text)
RETURNS SETOF record AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW zk_locks AS SELECT * FROM @extschema@.zk_locks_internal();
COMMENT ON VIEW zk_locks IS
'zklock holdings and waits of this instance: one row per holding scope or waiting request';

CREATE FUNCTION zk_status(
    OUT state text, OUT session_id text, OUT server text,
    OUT session_timeout_ms integer, OUT last_error text,
    OUT requests bigint, OUT grants bigint, OUT timeouts bigint,
    OUT reconnects bigint, OUT session_losses bigint, OUT worker_pid integer)
RETURNS record AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_status() IS
'state of the zklock worker''s ZooKeeper session, with counters';

----------------------------------------------------------------------------
-- Privileges: taking distributed locks is granted explicitly (see README);
-- monitoring is for pg_monitor.  The extension's own functions, listed one
-- by one (1.0 revoked from every zk_* function of the schema, the user's
-- included).
----------------------------------------------------------------------------
REVOKE ALL ON FUNCTION
    @extschema@.zk_lock_acquire(text, integer),
    @extschema@.zk_lock_try(text),
    @extschema@.zk_lock_acquire_xact(text, integer),
    @extschema@.zk_lock_try_xact(text),
    @extschema@.zk_lock_release(text),
    @extschema@.zk_lock_held(text),
    @extschema@.zk_lock_token(text),
    @extschema@.zk_lock_acquire_all(text[], integer),
    @extschema@.zk_lock_acquire_all_xact(text[], integer),
    @extschema@.zk_rwlock_read(text, integer),
    @extschema@.zk_rwlock_read_xact(text, integer),
    @extschema@.zk_rwlock_read_release(text),
    @extschema@.zk_rwlock_read_held(text),
    @extschema@.zk_rwlock_read_token(text),
    @extschema@.zk_rwlock_write(text, integer),
    @extschema@.zk_rwlock_write_xact(text, integer),
    @extschema@.zk_rwlock_write_release(text),
    @extschema@.zk_rwlock_write_held(text),
    @extschema@.zk_rwlock_write_token(text),
    @extschema@.zk_semaphore_acquire(text, integer, integer),
    @extschema@.zk_semaphore_acquire_xact(text, integer, integer),
    @extschema@.zk_semaphore_release(text),
    @extschema@.zk_semaphore_held(text),
    @extschema@.zk_semaphore_token(text),
    @extschema@.zk_lock_release_all(),
    @extschema@.zk_locks_internal(),
    @extschema@.zk_status()
FROM PUBLIC;
REVOKE ALL ON @extschema@.zk_locks FROM PUBLIC;
GRANT SELECT ON @extschema@.zk_locks TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.zk_locks_internal() TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.zk_status() TO pg_monitor;

----------------------------------------------------------------------------
-- Added in 1.1 (the same blocks as at the end of zklock--1.0--1.1.sql).
----------------------------------------------------------------------------

----------------------------------------------------------------------------
-- Instance leadership: the worker takes part in an Apache Curator
-- LeaderLatch election on <zklock.root>/<group> for each group of
-- zklock.leader_groups.
----------------------------------------------------------------------------
CREATE FUNCTION zk_is_leader(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION zk_is_leader(text) IS
'whether this instance leads the zklock leader group now; false for a group not in zklock.leader_groups';
REVOKE ALL ON FUNCTION @extschema@.zk_is_leader(text) FROM PUBLIC;

CREATE FUNCTION zk_leaders_internal(
    OUT group_name text, OUT leader_id text, OUT leader_znode text,
    OUT since timestamptz, OUT is_us boolean)
RETURNS SETOF record AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_leaders_internal() IS
'rows of the zk_leaders view';
REVOKE ALL ON FUNCTION @extschema@.zk_leaders_internal() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.zk_leaders_internal() TO pg_monitor;

CREATE VIEW zk_leaders AS SELECT * FROM @extschema@.zk_leaders_internal();
COMMENT ON VIEW zk_leaders IS
'the leader groups this instance takes part in (zklock.leader_groups), and who leads each';
REVOKE ALL ON @extschema@.zk_leaders FROM PUBLIC;
GRANT SELECT ON @extschema@.zk_leaders TO pg_monitor;

CREATE FUNCTION zk_leader_info(name text,
    OUT group_name text, OUT leader_id text, OUT leader_znode text,
    OUT since timestamptz, OUT is_us boolean)
RETURNS record AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_leader_info(text) IS
'who leads a zklock leader group, also one this instance does not take part in';
REVOKE ALL ON FUNCTION @extschema@.zk_leader_info(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.zk_leader_info(text) TO pg_monitor;

----------------------------------------------------------------------------
-- Once-per-slot job claims: <zklock.root>/<job>/claims/<slot in UTC>,
-- made final when the claiming transaction commits.
----------------------------------------------------------------------------
CREATE FUNCTION zk_job_claim(job text, slot timestamptz)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_job_claim(text, timestamptz) IS
'claim the slot of a job for this transaction: true for exactly one caller cluster-wide, final at commit, open again on abort';
REVOKE ALL ON FUNCTION @extschema@.zk_job_claim(text, timestamptz) FROM PUBLIC;

CREATE FUNCTION zk_job_claims(job text,
    OUT slot timestamptz, OUT claimed_by text, OUT pid integer,
    OUT claimed_at timestamptz, OUT final boolean)
RETURNS SETOF record AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_job_claims(text) IS
'the claims of a job in ZooKeeper, oldest slot first';
REVOKE ALL ON FUNCTION @extschema@.zk_job_claims(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.zk_job_claims(text) TO pg_monitor;

----------------------------------------------------------------------------
-- Barrier: Apache Curator's DistributedBarrier, the persistent node
-- <zklock.root>/<name>.
----------------------------------------------------------------------------
CREATE FUNCTION zk_barrier_set(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_barrier_set(text) IS
'set a zklock barrier; true if this call set it, false if it was set already';
REVOKE ALL ON FUNCTION @extschema@.zk_barrier_set(text) FROM PUBLIC;

CREATE FUNCTION zk_barrier_remove(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_barrier_remove(text) IS
'remove a zklock barrier; true if this call removed it, false if it was not set';
REVOKE ALL ON FUNCTION @extschema@.zk_barrier_remove(text) FROM PUBLIC;

CREATE FUNCTION zk_barrier_wait(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_barrier_wait(text, integer) IS
'wait until a zklock barrier is not set; true then, false on timeout';
REVOKE ALL ON FUNCTION @extschema@.zk_barrier_wait(text, integer) FROM PUBLIC;

----------------------------------------------------------------------------
-- Double barrier: Apache Curator's DistributedDoubleBarrier, the members'
-- ephemeral nodes <zklock.root>/<name>/<uuid> and the node "ready".
----------------------------------------------------------------------------
CREATE FUNCTION zk_double_barrier_enter(name text, members integer,
    timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_double_barrier_enter(text, integer, integer) IS
'enter a zklock double barrier; true once members have entered, false on timeout';
REVOKE ALL ON FUNCTION @extschema@.zk_double_barrier_enter(text, integer, integer) FROM PUBLIC;

CREATE FUNCTION zk_double_barrier_leave(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_double_barrier_leave(text, integer) IS
'leave a zklock double barrier entered by this session; true once all members have left, false on timeout';
REVOKE ALL ON FUNCTION @extschema@.zk_double_barrier_leave(text, integer) FROM PUBLIC;

----------------------------------------------------------------------------
-- Cooperative revocation: Apache Curator's Revoker.attemptRevoke (the bytes
-- __REVOKE__ written into a holder's node), for every holder of a lock.
----------------------------------------------------------------------------
CREATE FUNCTION zk_lock_revoke(name text)
RETURNS integer AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_revoke(text) IS
'ask every current holder of a zklock lock (exclusive, read or write) to let go, as Curator''s Revoker does; returns how many were asked';
REVOKE ALL ON FUNCTION @extschema@.zk_lock_revoke(text) FROM PUBLIC;

CREATE FUNCTION zk_lock_revocation_requested(name text)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_revocation_requested(text) IS
'whether someone asked the holders of a zklock lock this session holds to let go';
REVOKE ALL ON FUNCTION @extschema@.zk_lock_revocation_requested(text) FROM PUBLIC;

-- revocable => true: when revoked, the running statement is cancelled and
-- the holding let go at the end of the transaction.  No defaults: the
-- 1.0 functions keep the calls with one or two arguments.
CREATE FUNCTION zk_lock_acquire(name text, timeout_ms integer, revocable boolean)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_acquire(text, integer, boolean) IS
'take a session-scope exclusive zklock lock; revocable: let go when revoked';
REVOKE ALL ON FUNCTION @extschema@.zk_lock_acquire(text, integer, boolean) FROM PUBLIC;

CREATE FUNCTION zk_lock_acquire_xact(name text, timeout_ms integer, revocable boolean)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_acquire_xact(text, integer, boolean) IS
'take a transaction-scope exclusive zklock lock; revocable: let go when revoked';
REVOKE ALL ON FUNCTION @extschema@.zk_lock_acquire_xact(text, integer, boolean) FROM PUBLIC;

CREATE FUNCTION zk_rwlock_read(name text, timeout_ms integer, revocable boolean)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_read(text, integer, boolean) IS
'take a session-scope read lock; revocable: let go when revoked';
REVOKE ALL ON FUNCTION @extschema@.zk_rwlock_read(text, integer, boolean) FROM PUBLIC;

CREATE FUNCTION zk_rwlock_read_xact(name text, timeout_ms integer, revocable boolean)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_read_xact(text, integer, boolean) IS
'take a transaction-scope read lock; revocable: let go when revoked';
REVOKE ALL ON FUNCTION @extschema@.zk_rwlock_read_xact(text, integer, boolean) FROM PUBLIC;

CREATE FUNCTION zk_rwlock_write(name text, timeout_ms integer, revocable boolean)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_write(text, integer, boolean) IS
'take a session-scope write lock; revocable: let go when revoked';
REVOKE ALL ON FUNCTION @extschema@.zk_rwlock_write(text, integer, boolean) FROM PUBLIC;

CREATE FUNCTION zk_rwlock_write_xact(name text, timeout_ms integer, revocable boolean)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_rwlock_write_xact(text, integer, boolean) IS
'take a transaction-scope write lock; revocable: let go when revoked';
REVOKE ALL ON FUNCTION @extschema@.zk_rwlock_write_xact(text, integer, boolean) FROM PUBLIC;

-- zk_locks gains revocation_requested (a column at the end: the view is
-- replaced in place, its comment and privileges stay).
CREATE FUNCTION zk_locks_internal_1_1(
    OUT pid integer, OUT database text, OUT name text, OUT kind text,
    OUT scope text, OUT state text, OUT count integer, OUT token bigint,
    OUT znode text, OUT since timestamptz, OUT waiting_on text,
    OUT revocation_requested boolean)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'zk_locks_internal'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_locks_internal_1_1() IS
'rows of the zk_locks view';
REVOKE ALL ON FUNCTION @extschema@.zk_locks_internal_1_1() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.zk_locks_internal_1_1() TO pg_monitor;

CREATE OR REPLACE VIEW zk_locks AS SELECT * FROM @extschema@.zk_locks_internal_1_1();

----------------------------------------------------------------------------
-- Participants across the cluster: every node under a lock or semaphore,
-- whoever made it (zklock, Curator, Kazoo), with its data.
----------------------------------------------------------------------------
CREATE FUNCTION zk_lock_participants(name text,
    OUT node text, OUT sequence bigint, OUT kind text, OUT holds boolean,
    OUT owner text)
RETURNS SETOF record AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_participants(text) IS
'the nodes of a zklock lock, read-write lock or Kazoo lock in ZooKeeper, in lock order: who holds and who waits, cluster-wide';
REVOKE ALL ON FUNCTION @extschema@.zk_lock_participants(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.zk_lock_participants(text) TO pg_monitor;

CREATE FUNCTION zk_semaphore_participants(name text, max_leases integer DEFAULT NULL,
    OUT node text, OUT sequence bigint, OUT kind text, OUT holds boolean,
    OUT owner text)
RETURNS SETOF record AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_participants(text, integer) IS
'the lease and entry nodes of a zklock semaphore in ZooKeeper, cluster-wide';
REVOKE ALL ON FUNCTION @extschema@.zk_semaphore_participants(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.zk_semaphore_participants(text, integer) TO pg_monitor;

----------------------------------------------------------------------------
-- Semaphore: several leases in one call (Apache Curator's
-- InterProcessSemaphoreV2.acquire(qty)), all or none.
----------------------------------------------------------------------------
CREATE FUNCTION zk_semaphore_acquire_leases(name text, max_leases integer,
                                            qty integer,
                                            timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_acquire_leases(text, integer, integer, integer) IS
'take qty session-scope leases of a semaphore of max_leases leases, all or none; zk_semaphore_release returns them all';
REVOKE ALL ON FUNCTION @extschema@.zk_semaphore_acquire_leases(text, integer, integer, integer) FROM PUBLIC;

CREATE FUNCTION zk_semaphore_acquire_leases_xact(name text, max_leases integer,
                                                 qty integer,
                                                 timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_acquire_leases_xact(text, integer, integer, integer) IS
'take qty transaction-scope leases of a semaphore, all or none';
REVOKE ALL ON FUNCTION @extschema@.zk_semaphore_acquire_leases_xact(text, integer, integer, integer) FROM PUBLIC;

----------------------------------------------------------------------------
-- Added in 1.2 (the same blocks as in zklock--1.1--1.2.sql).
----------------------------------------------------------------------------

----------------------------------------------------------------------------
-- Counters: the zk_stats view, one row of cumulative counts since the
-- server started (or zk_stats_reset()), to graph rates from.
----------------------------------------------------------------------------
CREATE FUNCTION zk_stats_internal(
    OUT requests bigint, OUT grants bigint, OUT local_grants bigint,
    OUT waits bigint, OUT timeouts bigint, OUT cancels bigint,
    OUT session_losses bigint, OUT reconnects bigint,
    OUT orphans_deleted bigint, OUT zk_requests bigint,
    OUT nodes integer, OUT watches integer, OUT stats_reset timestamptz)
RETURNS record AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_stats_internal() IS
'the row of the zk_stats view';
REVOKE ALL ON FUNCTION @extschema@.zk_stats_internal() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.zk_stats_internal() TO pg_monitor;

CREATE VIEW zk_stats AS SELECT * FROM @extschema@.zk_stats_internal();
COMMENT ON VIEW zk_stats IS
'cumulative zklock counters of this instance since the server started or zk_stats_reset(), with the current nodes and watches';
REVOKE ALL ON @extschema@.zk_stats FROM PUBLIC;
GRANT SELECT ON @extschema@.zk_stats TO pg_monitor;

CREATE FUNCTION zk_stats_reset()
RETURNS void AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_stats_reset() IS
'set the cumulative counters of zk_stats (and zk_status()) to zero';
REVOKE ALL ON FUNCTION @extschema@.zk_stats_reset() FROM PUBLIC;

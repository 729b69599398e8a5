/* zklock--1.0.sql: distributed locks held in Apache ZooKeeper */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION zklock" to load this file. \quit

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

CREATE VIEW zk_locks AS SELECT * FROM zk_locks_internal();
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
-- monitoring is for pg_monitor.
----------------------------------------------------------------------------
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
         WHERE p.pronamespace = '@extschema@'::regnamespace
           AND p.proname LIKE 'zk\_%'
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END $$;
REVOKE ALL ON zk_locks FROM PUBLIC;
GRANT SELECT ON zk_locks TO pg_monitor;
GRANT EXECUTE ON FUNCTION zk_locks_internal() TO pg_monitor;
GRANT EXECUTE ON FUNCTION zk_status() TO pg_monitor;

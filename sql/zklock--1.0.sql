/* zklock--1.0.sql: distributed locks held in Apache ZooKeeper */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION zklock" to load this file. \quit

-- Exclusive lock (Apache Curator InterProcessMutex on <zklock.root>/<name>).
-- timeout_ms: NULL waits without limit, 0 does not wait, > 0 waits at most
-- that long.  Session-scope locks stack like advisory locks.

CREATE FUNCTION zk_lock_acquire(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_acquire(text, integer) IS
'take a session-scope exclusive zklock lock; true when held, false on timeout';

CREATE FUNCTION zk_lock_try(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_try'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_try(text) IS
'take a session-scope exclusive zklock lock if it is free, without waiting';

CREATE FUNCTION zk_lock_acquire_xact(name text, timeout_ms integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_acquire_xact'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_acquire_xact(text, integer) IS
'take a transaction-scope exclusive zklock lock; true when held, false on timeout';

CREATE FUNCTION zk_lock_try_xact(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_try_xact'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_try_xact(text) IS
'take a transaction-scope exclusive zklock lock if it is free, without waiting';

CREATE FUNCTION zk_lock_release(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_release'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_release(text) IS
'release one level of a session-scope zklock lock; false and a warning if not held';

CREATE FUNCTION zk_lock_release_all()
RETURNS integer
AS 'MODULE_PATHNAME', 'zk_lock_release_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_release_all() IS
'release every session-scope zklock holding of this session; returns how many';

CREATE FUNCTION zk_lock_held(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lock_held'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_held(text) IS
'whether this session holds the zklock lock now';

CREATE FUNCTION zk_lock_token(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_token'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_lock_token(text) IS
'fencing token (czxid of the lock node) of this session''s holding; NULL when not held';

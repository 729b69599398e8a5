/* zklock--1.0--1.1.sql: upgrade zklock from version 1.0 to 1.1 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.1'" to load this file. \quit

-- KEEP THIS FILE AND zklock--1.1.sql EQUIVALENT.  A fresh
-- CREATE EXTENSION zklock (zklock--1.1.sql) and CREATE EXTENSION zklock
-- VERSION '1.0' followed by ALTER EXTENSION zklock UPDATE TO '1.1'
-- (zklock--1.0.sql, then this file) must leave the same objects with the
-- same definitions, comments and privileges; the pg_regress suite "upgrade"
-- (sql/upgrade.sql) checks it, and that no function of the extension is
-- executable by PUBLIC.
--
-- Adding something to 1.1: append it at the end of BOTH files, as one block
-- per function: CREATE FUNCTION, COMMENT ON FUNCTION, then
-- REVOKE ALL ON FUNCTION @extschema@.name(argument types) FROM PUBLIC and
-- the GRANTs it needs.  Create objects unqualified (they go into the
-- extension's schema); refer to existing ones as @extschema@.name.  Never
-- pick objects by a pattern such as LIKE 'zk\_%': the extension's schema
-- also holds the user's own objects.

----------------------------------------------------------------------------
-- 1.0's objects: nothing to do.  1.1 creates them as 1.0 did and only takes
-- EXECUTE from PUBLIC differently: from an explicit list of its own
-- functions, where 1.0 took it from every zk_* function of its schema.  On
-- the extension's own functions the result is the same, so an upgraded 1.0
-- already has 1.1's privileges.  Deliberately not done here:
--   * 1.0's REVOKE over LIKE 'zk\_%', which also hit the user's own zk_*
--     functions;
--   * undoing that: what PUBLIC had on them before cannot be known, and
--     granting it back could open what an administrator closed since (see
--     CHANGELOG.md: check them by hand);
--   * revoking again from the extension's own functions: it would take back
--     what an administrator has granted PUBLIC since.
----------------------------------------------------------------------------

----------------------------------------------------------------------------
-- Added in 1.1 (the same blocks as at the end of zklock--1.1.sql).
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

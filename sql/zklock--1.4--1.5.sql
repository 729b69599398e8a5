/* zklock--1.4--1.5.sql: upgrade zklock from version 1.4 to 1.5 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.5'" to load this file. \quit

-- There is no zklock--1.5.sql: CREATE EXTENSION zklock runs
-- zklock--1.2.sql and then the update scripts (see zklock--1.2--1.3.sql).
-- Create objects unqualified; refer to existing ones as @extschema@.name.

----------------------------------------------------------------------------
-- Job claims are settled by the claiming transaction's commit record: a
-- claim made final at PRE_COMMIT is 'committing' until its instance reads
-- the outcome from its commit log.  zk_job_claims shows the state and the
-- transaction; zk_job_claim_settle settles a claim by hand when its
-- instance is gone for good.
----------------------------------------------------------------------------

-- zk_job_claims gains columns: it is made again, and whoever could execute
-- it keeps that right (the grants are carried over).
CREATE TEMPORARY TABLE zklock_claims_grants AS
SELECT a.grantee, a.is_grantable
  FROM pg_proc p, aclexplode(p.proacl) a
 WHERE p.oid = '@extschema@.zk_job_claims(text)'::regprocedure
   AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner;

DROP FUNCTION @extschema@.zk_job_claims(text);
CREATE FUNCTION zk_job_claims(job text,
    OUT slot timestamptz, OUT claimed_by text, OUT pid integer,
    OUT claimed_at timestamptz, OUT final boolean,
    OUT state text, OUT xid xid8, OUT system_identifier text)
RETURNS SETOF record AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_job_claims(text) IS
'the claims of a job in ZooKeeper, oldest slot first';
REVOKE ALL ON FUNCTION @extschema@.zk_job_claims(text) FROM PUBLIC;

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT * FROM pg_temp.zklock_claims_grants LOOP
        -- regrole's output is quoted as needed already
        EXECUTE format('GRANT EXECUTE ON FUNCTION @extschema@.zk_job_claims(text) TO %s%s',
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC'
                            ELSE g.grantee::regrole::text END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;
DROP TABLE pg_temp.zklock_claims_grants;

CREATE FUNCTION zk_job_claim_settle(job text, slot timestamptz, committed boolean)
RETURNS boolean AS 'MODULE_PATHNAME', 'zk_job_claim_settle'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_job_claim_settle(text, timestamptz, boolean) IS
'settle by hand a committing job claim whose instance is gone: mark it committed, or reopen the slot (superuser only)';
REVOKE ALL ON FUNCTION @extschema@.zk_job_claim_settle(text, timestamptz, boolean) FROM PUBLIC;

----------------------------------------------------------------------------
-- Shared counts (Curator's SharedCount, Kazoo's Counter with
-- support_curator=True): the persistent node <zklock.root>/<name> holding
-- a 4-byte big-endian integer.
----------------------------------------------------------------------------
CREATE FUNCTION zk_shared_count(name text, seed integer DEFAULT 0,
    OUT count integer, OUT version integer)
RETURNS record AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_shared_count(text, integer) IS
'the value and version of a shared count in ZooKeeper, created with the seed when absent';
REVOKE ALL ON FUNCTION @extschema@.zk_shared_count(text, integer) FROM PUBLIC;

CREATE FUNCTION zk_shared_count_set(name text, count integer)
RETURNS integer AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_shared_count_set(text, integer) IS
'set a shared count (created when absent); returns its new version';
REVOKE ALL ON FUNCTION @extschema@.zk_shared_count_set(text, integer) FROM PUBLIC;

CREATE FUNCTION zk_shared_count_try_set(name text, version integer, count integer)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_shared_count_try_set(text, integer, integer) IS
'set a shared count if its version is still the one read before; false if it changed meanwhile';
REVOKE ALL ON FUNCTION @extschema@.zk_shared_count_try_set(text, integer, integer) FROM PUBLIC;

CREATE FUNCTION zk_shared_count_add(name text, delta integer, seed integer DEFAULT 0)
RETURNS integer AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_shared_count_add(text, integer, integer) IS
'add to a shared count atomically (created with the seed when absent); returns the new value';
REVOKE ALL ON FUNCTION @extschema@.zk_shared_count_add(text, integer, integer) FROM PUBLIC;

----------------------------------------------------------------------------
-- zk_grant_usage(role, monitoring): the grants of the README's Privileges
-- section in one call, to be run again after every ALTER EXTENSION zklock
-- UPDATE so that a role gets the functions a new version adds (no zklock
-- function is granted to PUBLIC).  An application role gets EXECUTE on
-- every lock, claim, leadership, barrier, revocation and shared-count
-- function, named below (a later version's script replaces this function
-- with its own list); with monitoring => true a role gets what pg_monitor
-- has on the extension's objects (the views and listings).  Never
-- zk_stats_reset, zk_job_claim_settle or zk_grant_usage itself.
----------------------------------------------------------------------------
CREATE FUNCTION zk_grant_usage(role regrole, monitoring boolean DEFAULT false)
RETURNS integer LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    app_functions CONSTANT name[] := ARRAY[
        -- locks, multi-locks, read-write locks, semaphores: session scope
        'zk_lock_acquire', 'zk_lock_try', 'zk_lock_acquire_all',
        'zk_lock_release', 'zk_lock_release_all', 'zk_lock_held', 'zk_lock_token',
        'zk_rwlock_read', 'zk_rwlock_write',
        'zk_rwlock_read_release', 'zk_rwlock_write_release',
        'zk_rwlock_read_held', 'zk_rwlock_write_held',
        'zk_rwlock_read_token', 'zk_rwlock_write_token',
        'zk_semaphore_acquire', 'zk_semaphore_acquire_leases',
        'zk_semaphore_release', 'zk_semaphore_held', 'zk_semaphore_token',
        -- transaction scope
        'zk_lock_acquire_xact', 'zk_lock_try_xact', 'zk_lock_acquire_all_xact',
        'zk_rwlock_read_xact', 'zk_rwlock_write_xact',
        'zk_semaphore_acquire_xact', 'zk_semaphore_acquire_leases_xact',
        -- jobs, barriers, revocation, shared counts
        'zk_job_claim', 'zk_is_leader',
        'zk_barrier_set', 'zk_barrier_remove', 'zk_barrier_wait',
        'zk_double_barrier_enter', 'zk_double_barrier_leave',
        'zk_lock_revoke', 'zk_lock_revocation_requested',
        'zk_shared_count', 'zk_shared_count_set', 'zk_shared_count_try_set',
        'zk_shared_count_add'];
    ext_oid oid;
    ext_owner oid;
    me oid;
    obj record;
    granted integer := 0;
BEGIN
    SELECT e.oid, e.extowner INTO ext_oid, ext_owner
      FROM pg_extension e WHERE e.extname = 'zklock';
    SELECT r.oid INTO me FROM pg_roles r WHERE r.rolname = current_user;
    IF NOT (SELECT r.rolsuper FROM pg_roles r WHERE r.oid = me)
       AND me IS DISTINCT FROM ext_owner THEN
        RAISE EXCEPTION 'permission denied to grant the use of zklock'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Only a superuser or the owner of extension zklock may call zk_grant_usage.';
    END IF;
    IF role IS NULL THEN
        RAISE EXCEPTION 'the role to grant to must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;

    FOR obj IN
        SELECT format('GRANT EXECUTE ON FUNCTION %s TO %s',
                      p.oid::regprocedure, role) AS command
          FROM pg_depend d JOIN pg_proc p ON p.oid = d.objid
         WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext_oid
           AND d.deptype = 'e' AND d.classid = 'pg_proc'::regclass
           AND CASE WHEN monitoring
                    THEN EXISTS (SELECT FROM aclexplode(p.proacl) a
                                  WHERE a.grantee = 'pg_monitor'::regrole
                                    AND a.privilege_type = 'EXECUTE')
                    ELSE p.proname = ANY (app_functions) END
        UNION ALL
        SELECT format('GRANT SELECT ON %s TO %s', c.oid::regclass, role)
          FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
         WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext_oid
           AND d.deptype = 'e' AND d.classid = 'pg_class'::regclass
           AND monitoring
           AND EXISTS (SELECT FROM aclexplode(c.relacl) a
                        WHERE a.grantee = 'pg_monitor'::regrole
                          AND a.privilege_type = 'SELECT')
        ORDER BY 1
    LOOP
        EXECUTE obj.command;
        granted := granted + 1;
    END LOOP;
    RETURN granted;
END
$$;
COMMENT ON FUNCTION zk_grant_usage(regrole, boolean) IS
'grant a role every zklock function an application uses (monitoring => true: the views and listings pg_monitor has); run again after every ALTER EXTENSION zklock UPDATE; superuser or the extension''s owner only';
REVOKE ALL ON FUNCTION @extschema@.zk_grant_usage(regrole, boolean) FROM PUBLIC;

----------------------------------------------------------------------------
-- zk_version(): the version of the loaded library, X.Y.Z (extversion is
-- that of the SQL objects).  For monitoring, like zk_status().
----------------------------------------------------------------------------
CREATE FUNCTION zk_version()
RETURNS text AS 'MODULE_PATHNAME' LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION zk_version() IS
'the version of the zklock library this server loaded (X.Y.Z)';
REVOKE ALL ON FUNCTION @extschema@.zk_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.zk_version() TO pg_monitor;

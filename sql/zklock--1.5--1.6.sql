/* zklock--1.5--1.6.sql: upgrade zklock from version 1.5 to 1.6 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.6'" to load this file. \quit

-- There is no zklock--1.6.sql: CREATE EXTENSION zklock runs
-- zklock--1.2.sql and then the update scripts (see zklock--1.2--1.3.sql).
-- Create objects unqualified; refer to existing ones as @extschema@.name.

----------------------------------------------------------------------------
-- Semaphores sized by a shared count (Curator's
-- InterProcessSemaphoreV2(client, path, SharedCountReader)): the name of a
-- shared count in place of max_leases; its value is the size, watched
-- while waiting.  Distinct names rather than overloads on (text, text)
-- and (text, integer): a quoted literal such as '5' would resolve to the
-- text one.  zk_semaphore_release, _held and _token serve both.
----------------------------------------------------------------------------
CREATE FUNCTION zk_semaphore_acquire_by_count(name text, count_name text,
                                              timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_acquire_by_count(text, text, integer) IS
'take one session-scope lease of a semaphore whose size is the value of a shared count';
REVOKE ALL ON FUNCTION @extschema@.zk_semaphore_acquire_by_count(text, text, integer) FROM PUBLIC;

CREATE FUNCTION zk_semaphore_acquire_by_count_xact(name text, count_name text,
                                                   timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_acquire_by_count_xact(text, text, integer) IS
'take one transaction-scope lease of a semaphore whose size is the value of a shared count';
REVOKE ALL ON FUNCTION @extschema@.zk_semaphore_acquire_by_count_xact(text, text, integer) FROM PUBLIC;

CREATE FUNCTION zk_semaphore_acquire_leases_by_count(name text, count_name text,
    qty integer, timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_acquire_leases_by_count(text, text, integer, integer) IS
'take qty session-scope leases of a semaphore sized by a shared count, all or none';
REVOKE ALL ON FUNCTION @extschema@.zk_semaphore_acquire_leases_by_count(text, text, integer, integer) FROM PUBLIC;

CREATE FUNCTION zk_semaphore_acquire_leases_by_count_xact(name text, count_name text,
    qty integer, timeout_ms integer DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_semaphore_acquire_leases_by_count_xact(text, text, integer, integer) IS
'take qty transaction-scope leases of a semaphore sized by a shared count, all or none';
REVOKE ALL ON FUNCTION @extschema@.zk_semaphore_acquire_leases_by_count_xact(text, text, integer, integer) FROM PUBLIC;

----------------------------------------------------------------------------
-- zk_grant_usage: the same, with the functions above in its list (see
-- zklock--1.4--1.5.sql).  Run it again for each role after this update.
----------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION zk_grant_usage(role regrole, monitoring boolean DEFAULT false)
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
        -- semaphores sized by a shared count, both scopes
        'zk_semaphore_acquire_by_count', 'zk_semaphore_acquire_leases_by_count',
        'zk_semaphore_acquire_by_count_xact',
        'zk_semaphore_acquire_leases_by_count_xact',
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

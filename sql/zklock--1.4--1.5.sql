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

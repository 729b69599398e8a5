/* zklock--1.2--1.3.sql: upgrade zklock from version 1.2 to 1.3 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.3'" to load this file. \quit

-- There is no zklock--1.3.sql: CREATE EXTENSION zklock runs
-- zklock--1.2.sql and then this script, so a fresh 1.3 and an updated one
-- are the same by construction (the pg_regress suite "upgrade" still
-- compares them with 1.0 and 1.1 updated).  A later version may add
-- zklock--1.3--1.4.sql the same way.  Create objects unqualified; refer to
-- existing ones as @extschema@.name; never pick objects by a pattern.

----------------------------------------------------------------------------
-- zk_stats: the counters of coalesced writes (zk_multis, zk_multi_writes,
-- zk_multis_refused), appended to the view's columns.  The view is
-- replaced, not dropped, so that views of its users and grants on it stay;
-- its function, whose result changes, is replaced by one of a new name.
----------------------------------------------------------------------------
CREATE FUNCTION zk_stats_internal_1_3(
    OUT requests bigint, OUT grants bigint, OUT local_grants bigint,
    OUT waits bigint, OUT timeouts bigint, OUT cancels bigint,
    OUT session_losses bigint, OUT reconnects bigint,
    OUT orphans_deleted bigint, OUT zk_requests bigint,
    OUT nodes integer, OUT watches integer, OUT stats_reset timestamptz,
    OUT zk_multis bigint, OUT zk_multi_writes bigint,
    OUT zk_multis_refused bigint)
RETURNS record AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_stats_internal_1_3() IS
'the row of the zk_stats view';
REVOKE ALL ON FUNCTION @extschema@.zk_stats_internal_1_3() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.zk_stats_internal_1_3() TO pg_monitor;

CREATE OR REPLACE VIEW zk_stats AS SELECT * FROM @extschema@.zk_stats_internal_1_3();

ALTER EXTENSION zklock DROP FUNCTION @extschema@.zk_stats_internal();
DROP FUNCTION @extschema@.zk_stats_internal();

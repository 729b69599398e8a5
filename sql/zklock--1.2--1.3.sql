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
-- zk_multis_refused), after zk_requests.  A view's columns cannot be
-- inserted, so the view and its function are made again, with the same
-- comments and privileges.
----------------------------------------------------------------------------
ALTER EXTENSION zklock DROP VIEW @extschema@.zk_stats;
ALTER EXTENSION zklock DROP FUNCTION @extschema@.zk_stats_internal();
DROP VIEW @extschema@.zk_stats;
DROP FUNCTION @extschema@.zk_stats_internal();

CREATE FUNCTION zk_stats_internal(
    OUT requests bigint, OUT grants bigint, OUT local_grants bigint,
    OUT waits bigint, OUT timeouts bigint, OUT cancels bigint,
    OUT session_losses bigint, OUT reconnects bigint,
    OUT orphans_deleted bigint, OUT zk_requests bigint,
    OUT zk_multis bigint, OUT zk_multi_writes bigint,
    OUT zk_multis_refused bigint,
    OUT nodes integer, OUT watches integer, OUT stats_reset timestamptz)
RETURNS record AS 'MODULE_PATHNAME', 'zk_stats_internal_1_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_stats_internal() IS
'the row of the zk_stats view';
REVOKE ALL ON FUNCTION @extschema@.zk_stats_internal() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.zk_stats_internal() TO pg_monitor;

CREATE VIEW zk_stats AS SELECT * FROM @extschema@.zk_stats_internal();
COMMENT ON VIEW zk_stats IS
'cumulative zklock counters of this instance since the server started or zk_stats_reset(), with the current nodes and watches';
REVOKE ALL ON @extschema@.zk_stats FROM PUBLIC;
GRANT SELECT ON @extschema@.zk_stats TO pg_monitor;

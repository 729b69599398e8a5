/* zklock--1.1--1.2.sql: upgrade zklock from version 1.1 to 1.2 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.2'" to load this file. \quit

-- KEEP THIS FILE AND zklock--1.2.sql EQUIVALENT.  A fresh
-- CREATE EXTENSION zklock (zklock--1.2.sql) and CREATE EXTENSION zklock
-- VERSION '1.1' (or '1.0') followed by ALTER EXTENSION zklock UPDATE TO
-- '1.2' must leave the same objects with the same definitions, comments and
-- privileges; the pg_regress suite "upgrade" (sql/upgrade.sql) checks it,
-- and that no function of the extension is executable by PUBLIC.
--
-- Adding something to 1.2: append it at the end of BOTH files, as one block
-- per function (see zklock--1.2.sql).  Create objects unqualified; refer to
-- existing ones as @extschema@.name; never pick objects by a pattern.

----------------------------------------------------------------------------
-- Added in 1.2 (the same blocks as at the end of zklock--1.2.sql).
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

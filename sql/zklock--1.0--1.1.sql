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

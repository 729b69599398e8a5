/* zklock--1.3--1.4.sql: upgrade zklock from version 1.3 to 1.4 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.4'" to load this file. \quit

-- There is no zklock--1.4.sql: CREATE EXTENSION zklock runs
-- zklock--1.2.sql and then the update scripts (see zklock--1.2--1.3.sql).
-- Create objects unqualified; refer to existing ones as @extschema@.name.

----------------------------------------------------------------------------
-- zk_job_claim with a timeout: waits while another claim of the slot is
-- open, and takes the slot if that claim ends without being made final,
-- so that a slot whose first claimant failed is not lost.  The two-argument
-- form keeps answering at once.
----------------------------------------------------------------------------
CREATE FUNCTION zk_job_claim(job text, slot timestamptz, timeout_ms integer)
RETURNS boolean AS 'MODULE_PATHNAME', 'zk_job_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION zk_job_claim(text, timestamptz, integer) IS
'claim the slot of a job for this transaction, waiting up to timeout_ms (NULL: no limit) while another claim of it is open: true if claimed, false if done or still claimed elsewhere';
REVOKE ALL ON FUNCTION @extschema@.zk_job_claim(text, timestamptz, integer) FROM PUBLIC;

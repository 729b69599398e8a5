-- Once-per-slot job claims (zk_job_claim, zk_job_claims).  pg_regress has
-- one session: what another caller sees is what this one sees after its
-- transaction ended (test/t/087_job_claim.pl has two instances).
SET TimeZone = 'UTC';
-- bad input: class 22, nothing sent to ZooKeeper
SELECT zk_job_claim(NULL, '2026-01-01 10:00+00');
SELECT zk_job_claim('reg/job', NULL);
SELECT zk_job_claim('reg/job', 'infinity');
SELECT zk_job_claim('reg/job', '-infinity');
SELECT zk_job_claim('', '2026-01-01 10:00+00');
SELECT zk_job_claim('/reg/job', '2026-01-01 10:00+00');
SELECT zk_job_claim('reg/job/claims', '2026-01-01 10:00+00');
SELECT * FROM zk_job_claims(NULL);
SELECT * FROM zk_job_claims('a//b');
-- ... and their SQLSTATEs
\set VERBOSITY sqlstate
SELECT zk_job_claim(NULL, '2026-01-01 10:00+00');
SELECT zk_job_claim('reg/job', NULL);
SELECT zk_job_claim('reg/job', 'infinity');
SELECT zk_job_claim('reg/job', '10000-01-01 00:00+00');
SELECT zk_job_claim('reg/job', '0044-03-15 12:00+00 BC');
SELECT zk_job_claim('a/./b', '2026-01-01 10:00+00');
SELECT zk_job_claim(repeat('x', 1025), '2026-01-01 10:00+00');
SELECT * FROM zk_job_claims(NULL);
SELECT * FROM zk_job_claims('a//b');
\set VERBOSITY default
-- nothing claimed yet
SELECT * FROM zk_job_claims('reg/job');
-- a single statement: its own transaction, final when it commits
SELECT zk_job_claim('reg/job', '2026-01-01 10:00+00');
SELECT zk_job_claim('reg/job', '2026-01-01 10:00+00');
-- the same instant in another time zone is the same slot
SELECT zk_job_claim('reg/job', '2026-01-01 11:00+01');
-- rolled back: the slot is open again
BEGIN;
SELECT zk_job_claim('reg/job', '2026-01-01 11:00+00');
-- within its transaction, a claim is held: asking again says true
SELECT zk_job_claim('reg/job', '2026-01-01 11:00+00');
SELECT kind, name, scope, state, znode FROM zk_locks WHERE pid = pg_backend_pid();
ROLLBACK;
BEGIN;
SELECT zk_job_claim('reg/job', '2026-01-01 11:00+00');
COMMIT;
SELECT zk_job_claim('reg/job', '2026-01-01 11:00+00');
-- a savepoint rolled back gives up the claims taken inside it
BEGIN;
SAVEPOINT s;
SELECT zk_job_claim('reg/job', '2026-01-01 12:00+00');
ROLLBACK TO SAVEPOINT s;
SAVEPOINT t;
SELECT zk_job_claim('reg/job', '2026-01-01 12:00+00');
RELEASE SAVEPOINT t;
COMMIT;
SELECT zk_job_claim('reg/job', '2026-01-01 12:00+00');
-- an error in the transaction: rolled back, open again
BEGIN;
SELECT zk_job_claim('reg/job', '2026-01-01 13:00+00');
SELECT 1/0;
COMMIT;
-- PREPARE TRANSACTION is refused (the claim cannot outlive the session)
BEGIN;
SELECT zk_job_claim('reg/job', '2026-01-01 13:00+00');
PREPARE TRANSACTION 'jobclaim';
-- ... and rolls the transaction back: open again
SELECT zk_job_claim('reg/job', '2026-01-01 13:00+00') AS open_again;
-- slots with fractions of a second are slots of their own
SELECT zk_job_claim('reg/job', '2026-01-01 10:00:00.25+00');
-- the listing: oldest slot first, final, who claimed it
SELECT slot, claimed_by IS NOT NULL AS by_known, pid = pg_backend_pid() AS our_pid,
       claimed_at > now() - interval '1 hour' AS recent, final
  FROM zk_job_claims('reg/job');
SELECT count(*) FROM zk_job_claims('reg/other');
-- zklock.claim_retention: a reload setting in seconds
SHOW zklock.claim_retention;
SET zklock.claim_retention = '1d';
-- privileges: zk_job_claim for those granted it, zk_job_claims for pg_monitor
CREATE ROLE zk_japp LOGIN;
CREATE ROLE zk_jmon LOGIN IN ROLE pg_monitor;
SET ROLE zk_japp;
SELECT zk_job_claim('reg/job', '2026-01-01 14:00+00');
SELECT count(*) FROM zk_job_claims('reg/job');
RESET ROLE;
GRANT EXECUTE ON FUNCTION zk_job_claim(text, timestamptz) TO zk_japp;
SET ROLE zk_japp;
SELECT zk_job_claim('reg/job', '2026-01-01 14:00+00');
RESET ROLE;
SET ROLE zk_jmon;
SELECT count(*) FROM zk_job_claims('reg/job');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION zk_job_claim(text, timestamptz) FROM zk_japp;
DROP ROLE zk_japp;
DROP ROLE zk_jmon;
-- 1.4: zk_job_claim(job, slot, timeout_ms): a negative timeout is refused;
-- 0 does not wait, NULL waits without limit (an open slot is claimed at once)
SELECT zk_job_claim('reg/job', '2026-01-01 10:00+00', -1);
BEGIN;
SELECT zk_job_claim('reg/job-wait', '2026-01-01 10:00+00', NULL);
SELECT zk_job_claim('reg/job-wait', '2026-01-01 10:00+00', 0);
SELECT zk_job_claim('reg/job-wait', '2026-01-01 10:00+00');
ROLLBACK;
-- 1.5: a claim is settled by its transaction's commit record: committed
-- once COMMIT returns, with the transaction's xid and this system's id
BEGIN;
SELECT zk_job_claim('reg/job-xid', '2026-01-01 10:00+00');
SELECT pg_current_xact_id() AS claim_xid \gset
COMMIT;
SELECT final, state, xid = :'claim_xid'::xid8 AS its_xid,
       system_identifier = (SELECT system_identifier::text FROM pg_control_system()) AS this_system
  FROM zk_job_claims('reg/job-xid');
-- a waiting claim of a committed slot answers false
SELECT zk_job_claim('reg/job-xid', '2026-01-01 10:00+00', NULL);
-- a transaction without an xid gets one for its claim
BEGIN;
SELECT zk_job_claim('reg/job-xid', '2026-01-01 11:00+00');
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid_yet;
COMMIT;
SELECT slot, state, xid IS NOT NULL AS has_xid FROM zk_job_claims('reg/job-xid');
-- zk_job_claim_settle: bad input, superusers only, and only a committing claim
SELECT zk_job_claim_settle('reg/job-xid', '2026-01-01 10:00+00', NULL);
SELECT zk_job_claim_settle('reg/job-xid', NULL, true);
SELECT zk_job_claim_settle('', '2026-01-01 10:00+00', true);
\set VERBOSITY sqlstate
SELECT zk_job_claim_settle('reg/job-xid', '2026-01-01 10:00+00', NULL);
SELECT zk_job_claim_settle('reg/job-xid', 'infinity', true);
\set VERBOSITY default
CREATE ROLE zk_jsettle;
GRANT EXECUTE ON FUNCTION zk_job_claim_settle(text, timestamptz, boolean) TO zk_jsettle;
SET ROLE zk_jsettle;
SELECT zk_job_claim_settle('reg/job-xid', '2026-01-01 10:00+00', false);
RESET ROLE;
DROP OWNED BY zk_jsettle;
DROP ROLE zk_jsettle;
-- committed, or no claim at all: nothing to settle
SELECT zk_job_claim_settle('reg/job-xid', '2026-01-01 10:00+00', false);
SELECT zk_job_claim_settle('reg/job-xid', '2026-01-01 23:00+00', true);
SELECT state FROM zk_job_claims('reg/job-xid') WHERE slot = '2026-01-01 10:00+00';

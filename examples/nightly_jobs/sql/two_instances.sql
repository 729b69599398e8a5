-- one slot, run on this instance and then on the other: it runs once
SELECT nightly_run('backup', '2026-11-28 02:00+00');
SELECT count(*) FROM nightly_runs;
-- the other instance (ZKLOCK_TEST_INSTANCES = 1)
\getenv other_port ZKLOCK_TEST_PORT1
\c postgres - 127.0.0.1 :other_port
CREATE EXTENSION nightly_jobs CASCADE;
\i sql/wait_connected.psql
SELECT nightly_run('backup', '2026-11-28 02:00+00');
SELECT count(*) FROM nightly_runs;
SELECT slot, state FROM zk_job_claims('backup');

-- ZooKeeper stopped: zklock raises 08001, the job says to retry
\! "$ZKLOCK_TEST_ZOOKEEPER" down
\set VERBOSITY sqlstate
SELECT zk_job_claim('backup', '2026-11-28 03:00+00');
\set VERBOSITY default
SELECT nightly_run('backup', '2026-11-28 03:00+00');
SELECT count(*) FROM nightly_runs WHERE slot = '2026-11-28 03:00+00';
-- ZooKeeper back: once connected again, the retry runs the job
\! "$ZKLOCK_TEST_ZOOKEEPER" up
\i sql/wait_connected.psql
SELECT nightly_run('backup', '2026-11-28 03:00+00');
SELECT count(*) FROM nightly_runs WHERE slot = '2026-11-28 03:00+00';

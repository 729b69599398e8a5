-- ZooKeeper stopped: zklock raises 08001, the job says to retry
\! "$ZKLOCK_TEST_ZOOKEEPER" down
\set VERBOSITY sqlstate
SELECT zk_job_claim('backup', '2026-11-28 03:00+00');
\set VERBOSITY default
SELECT nightly_run('backup', '2026-11-28 03:00+00');
SELECT count(*) FROM nightly_runs WHERE slot = '2026-11-28 03:00+00';
-- ZooKeeper back: once connected, the retry runs the job
\! "$ZKLOCK_TEST_ZOOKEEPER" up
DO $$
BEGIN
	FOR i IN 1..300 LOOP
		EXIT WHEN (SELECT state FROM zk_status()) = 'connected';
		PERFORM pg_sleep(0.1);
	END LOOP;
END
$$;
SELECT state FROM zk_status();
SELECT nightly_run('backup', '2026-11-28 03:00+00');
SELECT count(*) FROM nightly_runs WHERE slot = '2026-11-28 03:00+00';

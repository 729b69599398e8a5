\echo Use "CREATE EXTENSION nightly_jobs CASCADE" to load this file. \quit

-- the runs done by this instance
CREATE TABLE nightly_runs (
	job text NOT NULL,
	slot timestamptz NOT NULL,
	ran_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (job, slot)
);

-- Run job "job" for its scheduled time "slot", once across every instance
-- on the same ZooKeeper: 'ran' when this call ran it, 'skipped' when
-- another run has it, 'retry' when ZooKeeper could not be asked (08001):
-- nothing was done, call again later.  The claim and the run commit or
-- fail together (one transaction).
CREATE FUNCTION nightly_run(job text, slot timestamptz) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT	-- this extension's schema and zklock's
AS $$
BEGIN
	IF NOT zk_job_claim(job, slot) THEN
		RETURN 'skipped';
	END IF;
	INSERT INTO nightly_runs (job, slot) VALUES (job, slot);
	RETURN 'ran';
EXCEPTION
	WHEN sqlclient_unable_to_establish_sqlconnection THEN	-- 08001
		RAISE WARNING 'job "%" not run: ZooKeeper is unavailable', job;
		RETURN 'retry';
END
$$;

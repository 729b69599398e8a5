-- the extension, with zklock; then wait until zklock's worker is connected
CREATE EXTENSION nightly_jobs CASCADE;
DO $$
BEGIN
	FOR i IN 1..300 LOOP
		EXIT WHEN (SELECT state FROM zk_status()) = 'connected';
		PERFORM pg_sleep(0.1);
	END LOOP;
END
$$;
SELECT state FROM zk_status();

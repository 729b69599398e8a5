-- Multi-locks: all or nothing.
\set VERBOSITY sqlstate
SELECT zk_lock_acquire_all(NULL);
SELECT zk_lock_acquire_all('{}');
SELECT zk_lock_acquire_all(ARRAY['ok', NULL]);
SELECT zk_lock_acquire_all(ARRAY['ok', 'a//b']);
SELECT zk_lock_acquire_all(ARRAY['ok'], -1);
\set VERBOSITY default
SELECT zk_lock_acquire_all_xact('{}');
-- nothing was taken by the failed calls
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid();
SELECT zk_lock_acquire_all(ARRAY['reg/m3', 'reg/m1', 'reg/m2', 'reg/m1']);
SELECT name, count FROM zk_locks WHERE pid = pg_backend_pid() ORDER BY name;
SELECT zk_lock_release_all();
BEGIN;
SELECT zk_lock_acquire_all_xact(ARRAY['reg/m1', 'reg/m2'], 1000);
SELECT name, scope FROM zk_locks WHERE pid = pg_backend_pid() ORDER BY name;
COMMIT;
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';

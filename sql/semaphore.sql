-- Semaphores, seen from one session: one lease per call.
\set VERBOSITY sqlstate
SELECT zk_semaphore_acquire('reg/sem', 0);
SELECT zk_semaphore_acquire('reg/sem', -1, 0);
SELECT zk_semaphore_acquire('reg/sem', NULL, 0);
SELECT zk_semaphore_acquire('', 1);
\set VERBOSITY default
SELECT zk_semaphore_acquire('reg/sem', 0);
SELECT zk_semaphore_held('reg/sem'), zk_semaphore_token('reg/sem') IS NULL AS no_token;
SELECT zk_semaphore_acquire('reg/sem', 2), zk_semaphore_acquire('reg/sem', 2, 0);
-- both leases are taken: a third does not fit
SELECT zk_semaphore_acquire('reg/sem', 2, 0);
SELECT zk_semaphore_acquire('reg/sem', 2, 200);
SELECT zk_semaphore_held('reg/sem'), zk_semaphore_token('reg/sem') > 0 AS has_token;
SELECT count(*) AS leases FROM zk_locks WHERE name = 'reg/sem' AND kind = 'semaphore' AND state = 'held';
SELECT zk_semaphore_release('reg/sem');
SELECT zk_semaphore_acquire('reg/sem', 2, 0);
SELECT zk_semaphore_release('reg/sem'), zk_semaphore_release('reg/sem');
SELECT zk_semaphore_release('reg/sem');
SELECT zk_semaphore_held('reg/sem');
-- transaction scope
BEGIN;
SELECT zk_semaphore_acquire_xact('reg/sem', 1);
SELECT zk_semaphore_acquire_xact('reg/sem', 1, 0);
SELECT zk_semaphore_release('reg/sem');
COMMIT;
SELECT zk_semaphore_held('reg/sem');
SELECT zk_semaphore_acquire('reg/sem', 1, 0);
SELECT zk_lock_release_all();

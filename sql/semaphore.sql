-- Semaphores, seen from one session: one lease per call, or qty leases in
-- one call (zk_semaphore_acquire_leases), all or none.
\set VERBOSITY sqlstate
SELECT zk_semaphore_acquire('reg/sem', 0);
SELECT zk_semaphore_acquire('reg/sem', -1, 0);
SELECT zk_semaphore_acquire('reg/sem', NULL, 0);
SELECT zk_semaphore_acquire('', 1);
\set VERBOSITY default
SELECT zk_semaphore_acquire('reg/sem', 0);
SELECT zk_semaphore_held('reg/sem'), zk_semaphore_token('reg/sem') IS NULL AS no_token;
SELECT zk_semaphore_acquire('reg/sem', 2), zk_semaphore_acquire('reg/sem', 2, 0);
-- both leases are this session's: a third would wait for them forever
-- (not re-entrant), so it is refused at once, whatever the timeout (55000)
SELECT zk_semaphore_acquire('reg/sem', 2, 0);
SELECT zk_semaphore_acquire('reg/sem', 2, 200);
DO $$
BEGIN
    PERFORM zk_semaphore_acquire('reg/sem', 2);
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RAISE NOTICE 'third lease: %', SQLSTATE;
END $$;
SELECT zk_semaphore_held('reg/sem'), zk_semaphore_token('reg/sem') > 0 AS has_token;
SELECT count(*) AS leases FROM zk_locks WHERE name = 'reg/sem' AND kind = 'semaphore' AND state = 'held';
SELECT zk_semaphore_release('reg/sem');
SELECT zk_semaphore_acquire('reg/sem', 2, 0);
SELECT zk_semaphore_release('reg/sem'), zk_semaphore_release('reg/sem');
SELECT zk_semaphore_release('reg/sem');
SELECT zk_semaphore_held('reg/sem');
-- transaction scope
BEGIN;
SELECT zk_semaphore_acquire_xact('reg/sem', 2);
SELECT zk_semaphore_acquire_xact('reg/sem', 2, 0);
SELECT zk_semaphore_release('reg/sem');
COMMIT;
SELECT zk_semaphore_held('reg/sem');
SELECT zk_semaphore_acquire('reg/sem', 1, 0);
SELECT zk_lock_release_all();

-- The non-reentrant mutex (Curator's InterProcessSemaphoreMutex): a
-- semaphore of one lease.  A second acquire by the holder is refused.
SELECT zk_semaphore_acquire('reg/mutex', 1);
SELECT zk_semaphore_acquire('reg/mutex', 1, 0);
BEGIN;
SELECT zk_semaphore_acquire_xact('reg/mutex', 1);
ROLLBACK;
SELECT zk_semaphore_held('reg/mutex');
SELECT zk_semaphore_release('reg/mutex');
SELECT zk_semaphore_release('reg/mutex');
BEGIN;
SELECT zk_semaphore_acquire_xact('reg/mutex', 1, 0);
SELECT zk_semaphore_acquire('reg/mutex', 1, 0);
COMMIT;
SELECT zk_semaphore_held('reg/mutex');
SELECT zk_semaphore_acquire('reg/mutex', 1, 0), zk_semaphore_release('reg/mutex');

-- Several leases in one call: bad arguments (class 22), nothing sent
\set VERBOSITY sqlstate
SELECT zk_semaphore_acquire_leases('reg/semq', 3, 0);
SELECT zk_semaphore_acquire_leases('reg/semq', 3, -2, 0);
SELECT zk_semaphore_acquire_leases('reg/semq', 3, NULL, 0);
SELECT zk_semaphore_acquire_leases('reg/semq', 3, 4, 0);
SELECT zk_semaphore_acquire_leases('reg/semq', 0, 1, 0);
SELECT zk_semaphore_acquire_leases('reg/semq', NULL, 1, 0);
SELECT zk_semaphore_acquire_leases('reg/semq', 3, 2, -1);
SELECT zk_semaphore_acquire_leases('reg/semq/', 3, 2, 0);
SELECT zk_semaphore_acquire_leases(NULL, 3, 2, 0);
SELECT zk_semaphore_acquire_leases_xact('reg/semq', 3, 0);
SELECT zk_semaphore_acquire_leases_xact('reg/semq', 2, 3, 0);
SELECT zk_semaphore_acquire_leases_xact('reg/semq', 3, 2, -1);
-- a count too large to take is refused before anything is allocated
SELECT zk_semaphore_acquire_leases('reg/semq', 2147483647, 2147483647, 0);
SELECT zk_semaphore_acquire_leases_xact('reg/semq', 2147483647, 2147483647, 0);
\set VERBOSITY default
SELECT zk_semaphore_acquire_leases('reg/semq', 3, 0);
SELECT zk_semaphore_acquire_leases('reg/semq', 3, 4, 0);
-- nothing was taken or left behind: all three leases are free
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';
SELECT zk_semaphore_held('reg/semq');
SELECT zk_semaphore_acquire_leases('reg/semq', 3, 3, 0);
SELECT count(*) AS leases FROM zk_locks
 WHERE name = 'reg/semq' AND kind = 'semaphore' AND state = 'held';
SELECT zk_semaphore_token('reg/semq') > 0 AS has_token;
-- one release returns all three
SELECT zk_semaphore_release('reg/semq');
SELECT zk_semaphore_held('reg/semq');
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';
-- releases go newest call first: one lease, then two in one call
SELECT zk_semaphore_acquire('reg/semq', 3, 0),
       zk_semaphore_acquire_leases('reg/semq', 3, 2, 0);
SELECT count(*) AS leases FROM zk_locks
 WHERE name = 'reg/semq' AND kind = 'semaphore' AND state = 'held';
-- all three are this session's: one more is refused (55000), not waited on
SELECT zk_semaphore_acquire_leases('reg/semq', 3, 1, 1000);
SELECT zk_semaphore_release('reg/semq');
SELECT count(*) AS leases FROM zk_locks
 WHERE name = 'reg/semq' AND kind = 'semaphore' AND state = 'held';
-- two would not fit beside the one this session holds
SELECT zk_semaphore_acquire_leases('reg/semq', 3, 3, 0);
SELECT zk_semaphore_acquire_leases('reg/semq', 3, 2, 0);
SELECT zk_semaphore_release('reg/semq'), zk_semaphore_release('reg/semq');
SELECT zk_semaphore_release('reg/semq');
-- transaction scope: the leases go with the transaction, or the savepoint
BEGIN;
SELECT zk_semaphore_acquire_leases_xact('reg/semq', 3, 2);
SAVEPOINT s;
SELECT zk_semaphore_acquire_leases_xact('reg/semq', 3, 1, 0);
SELECT count(*) AS leases FROM zk_locks
 WHERE name = 'reg/semq' AND kind = 'semaphore' AND state = 'held';
ROLLBACK TO SAVEPOINT s;
SELECT count(*) AS leases FROM zk_locks
 WHERE name = 'reg/semq' AND kind = 'semaphore' AND state = 'held';
SELECT zk_semaphore_release('reg/semq');
COMMIT;
SELECT zk_semaphore_held('reg/semq');
SELECT zk_semaphore_acquire_leases('reg/semq', 3, 3, 0), zk_lock_release_all();
-- Semaphores sized by a shared count (zk_semaphore_acquire_by_count): the
-- count's value is the size.  Bad arguments (class 22), nothing sent
SELECT zk_semaphore_acquire_by_count('reg/semc', NULL);
SELECT zk_semaphore_acquire_by_count('reg/semc', '');
SELECT zk_semaphore_acquire_leases_by_count('reg/semc', 'reg/semc-size', 0);
SELECT zk_semaphore_acquire_leases_by_count('reg/semc', 'reg/semc-size', NULL);
-- a count that is not there: 22023, and nothing is created
SELECT zk_semaphore_acquire_by_count('reg/semc', 'reg/semc-size', 0);
SELECT count(*) FROM zk_semaphore_participants('reg/semc');
-- a node that is not a count (a lock's parent holds no data): 22P02
SELECT zk_lock_acquire('reg/semc-lock', 0), zk_lock_release('reg/semc-lock');
SELECT zk_semaphore_acquire_by_count('reg/semc', 'reg/semc-lock', 0);
SELECT count(*) FROM zk_semaphore_participants('reg/semc');
-- a count of 2: two leases, a third is this session's own (55000)
SELECT zk_shared_count_set('reg/semc-size', 2) >= 0 AS set;
SELECT zk_semaphore_acquire_by_count('reg/semc', 'reg/semc-size'),
       zk_semaphore_acquire_by_count('reg/semc', 'reg/semc-size', 0);
SELECT zk_semaphore_acquire_by_count('reg/semc', 'reg/semc-size', 0);
-- sized one way per session: max_leases, or another count, is refused (55000)
SELECT zk_semaphore_acquire('reg/semc', 3, 0);
SELECT zk_shared_count_set('reg/semc-size2', 5) >= 0 AS set;
SELECT zk_semaphore_acquire_by_count('reg/semc', 'reg/semc-size2', 0);
-- the count raised: one more
SELECT zk_shared_count_set('reg/semc-size', 3) >= 0 AS set;
SELECT zk_semaphore_acquire_by_count('reg/semc', 'reg/semc-size', 0);
SELECT count(*) AS leases FROM zk_locks
 WHERE name = 'reg/semc' AND kind = 'semaphore' AND state = 'held';
-- lowered: the leases held stay, the session's own fill it (55000)
SELECT zk_shared_count_set('reg/semc-size', 1) >= 0 AS set;
SELECT zk_semaphore_held('reg/semc');
SELECT zk_semaphore_acquire_by_count('reg/semc', 'reg/semc-size', 0);
SELECT zk_semaphore_release('reg/semc'), zk_semaphore_release('reg/semc'),
       zk_semaphore_release('reg/semc');
-- a semaphore held by max_leases is not sized by a count in the same session
SELECT zk_semaphore_acquire('reg/semc', 3, 0);
SELECT zk_semaphore_acquire_by_count('reg/semc', 'reg/semc-size', 0);
SELECT zk_semaphore_release('reg/semc');
-- several leases in one call, all or none: 2 of a count of 1 do not fit
SELECT zk_semaphore_acquire_leases_by_count('reg/semc', 'reg/semc-size', 2, 0);
SELECT count(*) FROM zk_semaphore_participants('reg/semc');
SELECT zk_shared_count_set('reg/semc-size', 2) >= 0 AS set;
SELECT zk_semaphore_acquire_leases_by_count('reg/semc', 'reg/semc-size', 2, 0);
SELECT zk_semaphore_release('reg/semc'), zk_semaphore_held('reg/semc');
-- a count of 0 admits nobody; waiting ends with the timeout
SELECT zk_shared_count_set('reg/semc-size', 0) >= 0 AS set;
SELECT zk_semaphore_acquire_by_count('reg/semc', 'reg/semc-size', 100);
-- transaction scope
SELECT zk_shared_count_set('reg/semc-size', 1) >= 0 AS set;
BEGIN;
SELECT zk_semaphore_acquire_by_count_xact('reg/semc', 'reg/semc-size');
SELECT zk_semaphore_acquire_leases_by_count_xact('reg/semc', 'reg/semc-size', 1, 0);
COMMIT;
SELECT zk_semaphore_held('reg/semc');
BEGIN;
SELECT zk_semaphore_acquire_leases_by_count_xact('reg/semc', 'reg/semc-size', 1, 0);
ROLLBACK;
SELECT zk_semaphore_held('reg/semc'), count(*) AS nodes
  FROM zk_semaphore_participants('reg/semc');

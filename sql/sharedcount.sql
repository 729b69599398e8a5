-- Shared count (Curator's SharedCount): the persistent node
-- <zklock.root>/<name> holding a 4-byte big-endian integer.
-- NULL and bad arguments (class 22): nothing sent to ZooKeeper
SELECT zk_shared_count(NULL);
SELECT zk_shared_count('reg/count', NULL);
SELECT zk_shared_count('');
SELECT zk_shared_count('/reg/count');
SELECT zk_shared_count_set(NULL, 1);
SELECT zk_shared_count_set('reg/count', NULL);
SELECT zk_shared_count_set('reg/count/', 1);
SELECT zk_shared_count_try_set(NULL, 0, 1);
SELECT zk_shared_count_try_set('reg/count', NULL, 1);
SELECT zk_shared_count_try_set('reg/count', 0, NULL);
SELECT zk_shared_count_try_set('reg/count', -1, 1);
SELECT zk_shared_count_add(NULL, 1);
SELECT zk_shared_count_add('reg/count', NULL);
SELECT zk_shared_count_add('reg/count', 1, NULL);
SELECT zk_shared_count_add('reg/../count', 1);
SELECT zk_shared_count_add('reg/count/leases', 1);
-- ... and none of them created the count: a compare-and-set finds none
SELECT zk_shared_count_try_set('reg/count', 0, 1);
-- created with the seed when absent; the seed of a later read is ignored
SELECT * FROM zk_shared_count('reg/count', 7);
SELECT * FROM zk_shared_count('reg/count', 99);
SELECT * FROM zk_shared_count('reg/count');
-- set: the value, and the version it made
SELECT zk_shared_count_set('reg/count', 10);
SELECT * FROM zk_shared_count('reg/count');
-- compare-and-set: on the version read, once
SELECT zk_shared_count_try_set('reg/count', 1, 11);
SELECT zk_shared_count_try_set('reg/count', 1, 12);
SELECT * FROM zk_shared_count('reg/count');
-- add: the new value; negative deltas; the range of a 4-byte integer
SELECT zk_shared_count_add('reg/count', 5);
SELECT zk_shared_count_add('reg/count', -20);
SELECT * FROM zk_shared_count('reg/count');
SELECT zk_shared_count_set('reg/count', 2147483647);
SELECT zk_shared_count_add('reg/count', 1);
DO $$
BEGIN
    PERFORM zk_shared_count_add('reg/count', 1);
EXCEPTION WHEN numeric_value_out_of_range THEN
    RAISE NOTICE 'add: %', SQLSTATE;
END $$;
SELECT zk_shared_count_set('reg/count', -2147483648);
SELECT * FROM zk_shared_count('reg/count');
-- add to an absent count: created with the seed, then added to
SELECT zk_shared_count_add('reg/count-add', 3, 40);
SELECT * FROM zk_shared_count('reg/count-add');
-- set of an absent count creates it
SELECT zk_shared_count_set('reg/count-set', 5);
SELECT * FROM zk_shared_count('reg/count-set');
-- a node that is not a count (a barrier's text, a lock's parent without
-- data): 22P02 naming the node, and it is left as it was
SELECT zk_barrier_set('reg/count-barrier');
\set VERBOSITY terse
SELECT zk_shared_count('reg/count-barrier');
SELECT zk_shared_count_set('reg/count-barrier', 1);
SELECT zk_shared_count_try_set('reg/count-barrier', 0, 1);
SELECT zk_shared_count_add('reg/count-barrier', 1);
\set VERBOSITY default
DO $$
BEGIN
    PERFORM zk_shared_count('reg/count-barrier');
EXCEPTION WHEN invalid_text_representation THEN
    RAISE NOTICE 'read: %', SQLSTATE;
END $$;
SELECT zk_barrier_wait('reg/count-barrier', 0);
SELECT zk_barrier_remove('reg/count-barrier');
SELECT zk_lock_acquire('reg/count-lock');
SELECT zk_shared_count('reg/count-lock');
SELECT zk_lock_release('reg/count-lock');
-- the failed calls left nothing: no request waits, nothing is held
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid();

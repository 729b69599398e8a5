-- Barrier (Curator's DistributedBarrier): the persistent node
-- <zklock.root>/<name>, set, removed and waited on.
-- NULL and bad names (class 22): nothing sent to ZooKeeper
SELECT zk_barrier_set(NULL);
SELECT zk_barrier_remove(NULL);
SELECT zk_barrier_wait(NULL);
SELECT zk_barrier_wait(NULL, 0);
SELECT zk_barrier_set('');
SELECT zk_barrier_set('/reg/barrier');
SELECT zk_barrier_remove('reg/../barrier');
SELECT zk_barrier_wait('reg/barrier/');
SELECT zk_barrier_wait('reg/barrier/locks', 0);
SELECT zk_barrier_wait('reg/barrier', -1);
DO $$
BEGIN
    PERFORM zk_barrier_set('reg//barrier');
EXCEPTION WHEN invalid_parameter_value THEN
    RAISE NOTICE 'bad name: %', SQLSTATE;
END $$;
-- never set: waits return true at once, whatever the timeout
SELECT zk_barrier_wait('reg/barrier'), zk_barrier_wait('reg/barrier', 0),
       zk_barrier_wait('reg/barrier', 10);
-- set, set, remove, remove
SELECT zk_barrier_set('reg/barrier');
SELECT zk_barrier_set('reg/barrier');
SELECT zk_barrier_wait('reg/barrier', 0);
SELECT zk_barrier_wait('reg/barrier', 200);
SELECT zk_barrier_remove('reg/barrier');
SELECT zk_barrier_remove('reg/barrier');
-- nothing left in ZooKeeper: the node is gone, the barrier is not set
SELECT zk_barrier_wait('reg/barrier', 0);
-- set again after its removal
SELECT zk_barrier_set('reg/barrier/deep/er');
SELECT zk_barrier_wait('reg/barrier/deep/er', 0);
SELECT zk_barrier_remove('reg/barrier/deep/er');
SELECT zk_barrier_wait('reg/barrier/deep/er', 0);
-- a name in use as a lock is no barrier: 55000 for set, remove and wait
SELECT zk_lock_acquire('reg/barrier/lock');
SELECT zk_barrier_set('reg/barrier/lock');
SELECT zk_barrier_remove('reg/barrier/lock');
SELECT zk_barrier_wait('reg/barrier/lock', 0);
-- ... with SQLSTATE 55000
DO $$
BEGIN
    PERFORM zk_barrier_wait('reg/barrier/lock');
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RAISE NOTICE 'wait: %', SQLSTATE;
END $$;
SELECT zk_lock_held('reg/barrier/lock');
SELECT zk_lock_release('reg/barrier/lock');
-- the failed calls left nothing: no request waits, nothing is held
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid();

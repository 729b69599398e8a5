-- Cooperative revocation (Curator's Revoker) and the participants of a
-- lock or semaphore across the cluster.
-- NULL and bad arguments (class 22): nothing sent to ZooKeeper
SELECT zk_lock_revoke(NULL);
SELECT zk_lock_revoke('');
SELECT zk_lock_revoke('/reg/revoke');
SELECT zk_lock_revoke('reg/../revoke');
SELECT zk_lock_revocation_requested(NULL);
SELECT zk_lock_revocation_requested('reg/revoke/');
SELECT zk_lock_acquire('reg/revoke', NULL, NULL);
SELECT zk_lock_acquire_xact('reg/revoke', -1, true);
SELECT zk_rwlock_read(NULL, 0, true);
SELECT zk_rwlock_write_xact('reg//revoke', 0, false);
SELECT * FROM zk_lock_participants(NULL);
SELECT * FROM zk_lock_participants('reg/revoke/');
SELECT * FROM zk_semaphore_participants(NULL);
SELECT * FROM zk_semaphore_participants('reg/revoke', 0);
SELECT * FROM zk_semaphore_participants('reg/revoke', -5);
DO $$
BEGIN
    PERFORM zk_lock_revoke('reg//revoke');
EXCEPTION WHEN invalid_parameter_value THEN
    RAISE NOTICE 'bad name: %', SQLSTATE;
END $$;
DO $$
BEGIN
    PERFORM zk_lock_acquire('reg/revoke', 0, NULL);
EXCEPTION WHEN null_value_not_allowed THEN
    RAISE NOTICE 'null revocable: %', SQLSTATE;
END $$;
-- the 1.0 calls still resolve to the 1.0 functions
SELECT zk_lock_acquire('reg/revoke'), zk_lock_acquire('reg/revoke', 0);
SELECT zk_lock_release('reg/revoke'), zk_lock_release('reg/revoke');
-- nobody holds it: nobody to ask, nobody listed
SELECT zk_lock_revoke('reg/revoke');
SELECT * FROM zk_lock_participants('reg/revoke');
SELECT * FROM zk_semaphore_participants('reg/revoke', 2);
-- a holder: listed with its node's data, asked once by a revocation
SELECT zk_lock_acquire('reg/revoke', NULL, false);
SELECT zk_lock_revocation_requested('reg/revoke');
SELECT node ~ '^/zklock/reg/revoke/_c_[0-9a-f-]{36}-lock-[0-9]{10}$' AS node_ok,
       sequence >= 0 AS has_sequence, kind, holds,
       (owner::json->>'pid')::int = pg_backend_pid() AS mine,
       owner::json->>'app' AS app, owner::jsonb ? 'instance' AS has_instance,
       owner::jsonb ? 'host' AS has_host
  FROM zk_lock_participants('reg/revoke');
SELECT zk_lock_revoke('reg/revoke');
-- the holder hears of it through its node's data watch (polled for up to a
-- minute: at once on a quiet machine)
DO $$
BEGIN
    FOR i IN 1..6000 LOOP
        EXIT WHEN zk_lock_revocation_requested('reg/revoke');
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
SELECT zk_lock_revocation_requested('reg/revoke');
SELECT name, state, revocation_requested FROM zk_locks WHERE name = 'reg/revoke';
-- the revocation request replaced the node's data; cooperative: still held
SELECT kind, holds, owner FROM zk_lock_participants('reg/revoke');
SELECT zk_lock_held('reg/revoke');
SELECT zk_lock_release('reg/revoke');
SELECT zk_lock_revocation_requested('reg/revoke');
-- read locks: every reader before the first writer holds
SELECT zk_rwlock_read('reg/revoke/rw');
SELECT kind, holds FROM zk_lock_participants('reg/revoke/rw');
SELECT zk_lock_revoke('reg/revoke/rw');
SELECT zk_rwlock_read_release('reg/revoke/rw');
-- a semaphore: its leases, not a lock's participants
SELECT zk_semaphore_acquire('reg/revoke/sem', 2);
SELECT kind, holds, (owner::json->>'pid')::int = pg_backend_pid() AS mine
  FROM zk_semaphore_participants('reg/revoke/sem', 2);
SELECT kind, holds FROM zk_semaphore_participants('reg/revoke/sem');
SELECT count(*) FROM zk_lock_participants('reg/revoke/sem');
SELECT zk_lock_revoke('reg/revoke/sem');
SELECT zk_semaphore_release('reg/revoke/sem');
-- nothing left behind
SELECT count(*) FROM zk_lock_participants('reg/revoke');
SELECT count(*) FROM zk_lock_participants('reg/revoke/rw');
SELECT count(*) FROM zk_semaphore_participants('reg/revoke/sem');
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid();

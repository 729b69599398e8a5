-- Read-write locks, seen from one session.
SELECT zk_rwlock_read('reg/rw'), zk_rwlock_read('reg/rw', 0);
SELECT zk_rwlock_read_held('reg/rw'), zk_rwlock_write_held('reg/rw');
SELECT zk_rwlock_read_token('reg/rw') > 0 AS has_token;
-- upgrade would wait forever: refused at once
\set VERBOSITY sqlstate
SELECT zk_rwlock_write('reg/rw', 0);
\set VERBOSITY default
SELECT zk_rwlock_write('reg/rw');
SELECT zk_rwlock_read_release('reg/rw'), zk_rwlock_read_release('reg/rw');
SELECT zk_rwlock_read_release('reg/rw');
-- downgrade: hold write, take read, release write; read stays held
SELECT zk_rwlock_write('reg/rw');
SELECT zk_rwlock_read('reg/rw', 1000);
SELECT zk_rwlock_write_release('reg/rw');
SELECT zk_rwlock_read_held('reg/rw'), zk_rwlock_write_held('reg/rw');
SELECT zk_rwlock_read_release('reg/rw');
-- transaction scope, with a downgrade inside the transaction
BEGIN;
SELECT zk_rwlock_write_xact('reg/rw2', 0);
SELECT zk_rwlock_read_xact('reg/rw2', NULL);
SELECT zk_rwlock_write_release('reg/rw2');
SELECT zk_rwlock_read_held('reg/rw2'), zk_rwlock_write_held('reg/rw2');
COMMIT;
SELECT zk_rwlock_read_held('reg/rw2'), zk_rwlock_write_held('reg/rw2');
-- the exclusive lock of the same name is a different holding
SELECT zk_lock_try('reg/rw3'), zk_rwlock_read_held('reg/rw3');
SELECT zk_lock_release_all();

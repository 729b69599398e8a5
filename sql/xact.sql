-- Transaction-scope locks: released at commit, abort and ROLLBACK TO.
BEGIN;
SELECT zk_lock_acquire_xact('reg/x');
SELECT zk_lock_held('reg/x');
SELECT zk_lock_try_xact('reg/x');
-- cannot be released by hand
SELECT zk_lock_release('reg/x');
COMMIT;
SELECT zk_lock_held('reg/x');
BEGIN;
SELECT zk_lock_acquire_xact('reg/x');
ROLLBACK;
SELECT zk_lock_held('reg/x');
-- savepoints: what was taken inside goes with ROLLBACK TO
BEGIN;
SELECT zk_lock_acquire_xact('reg/outer');
SAVEPOINT s1;
SELECT zk_lock_acquire_xact('reg/inner');
SELECT zk_lock_acquire_xact('reg/outer');
ROLLBACK TO s1;
SELECT zk_lock_held('reg/outer'), zk_lock_held('reg/inner');
SAVEPOINT s2;
SELECT zk_lock_acquire_xact('reg/inner');
RELEASE s2;
-- a released savepoint's locks belong to the parent now
SAVEPOINT s3;
ROLLBACK TO s3;
SELECT zk_lock_held('reg/outer'), zk_lock_held('reg/inner');
COMMIT;
SELECT zk_lock_held('reg/outer'), zk_lock_held('reg/inner');
-- an error inside a plpgsql exception block is a subtransaction abort
DO $$
BEGIN
  BEGIN
    PERFORM zk_lock_acquire_xact('reg/plpgsql');
    RAISE EXCEPTION 'boom';
  EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'held after the block failed: %', zk_lock_held('reg/plpgsql');
  END;
END $$;
-- session and transaction scope of one name stack on one holding
BEGIN;
SELECT zk_lock_acquire('reg/both');
SELECT zk_lock_acquire_xact('reg/both');
SELECT zk_lock_release('reg/both');
SELECT zk_lock_held('reg/both');
COMMIT;
SELECT zk_lock_held('reg/both');
BEGIN;
SELECT zk_lock_acquire_xact('reg/both2');
SELECT zk_lock_acquire('reg/both2');
COMMIT;
SELECT zk_lock_held('reg/both2');
SELECT zk_lock_release('reg/both2');
SELECT zk_lock_held('reg/both2');
-- PREPARE TRANSACTION is refused while transaction-scope locks are held
BEGIN;
SELECT zk_lock_acquire_xact('reg/prep');
PREPARE TRANSACTION 'zk_prep';
SELECT zk_lock_held('reg/prep');
-- but allowed with session-scope ones (they belong to the session)
SELECT zk_lock_acquire('reg/prep-session');
BEGIN;
SELECT zk_lock_held('reg/prep-session');
PREPARE TRANSACTION 'zk_prep_ok';
COMMIT PREPARED 'zk_prep_ok';
SELECT zk_lock_release('reg/prep-session');

-- Bad input: every case is an error of class 22 raised before anything is
-- sent to ZooKeeper, and leaves nothing held.
\set VERBOSITY sqlstate
SELECT zk_lock_acquire('');
SELECT zk_lock_acquire(NULL);
SELECT zk_lock_acquire('/abs');
SELECT zk_lock_acquire('trailing/');
SELECT zk_lock_acquire('a//b');
SELECT zk_lock_acquire('.');
SELECT zk_lock_acquire('a/..');
SELECT zk_lock_acquire('a/./b');
SELECT zk_lock_acquire(E'tab\there');
SELECT zk_lock_acquire(E'new\nline');
SELECT zk_lock_acquire(U&'c1\0085control');
SELECT zk_lock_acquire(U&'private\E000use');
SELECT zk_lock_acquire(repeat('x', 1025));
SELECT zk_lock_try('');
SELECT zk_lock_acquire_xact('a//b');
SELECT zk_lock_try_xact('..');
SELECT zk_lock_release('');
SELECT zk_lock_held('a/../b');
SELECT zk_lock_token('/');
SELECT zk_lock_acquire('ok', -1);
SELECT zk_lock_acquire_xact('ok', -5);
\set VERBOSITY default
-- messages, for a human reading them
SELECT zk_lock_acquire('a//b');
SELECT zk_lock_acquire(repeat('x', 1025));
SELECT zk_lock_acquire('ok', -1);
-- the longest name and unusual but valid ones work
SELECT zk_lock_acquire(repeat('x', 1024), 0);
SELECT zk_lock_release(repeat('x', 1024));
SELECT zk_lock_try('with space/ünïcödé/…dots.../-_:@');
SELECT zk_lock_release('with space/ünïcödé/…dots.../-_:@');
-- nothing is held after all that
SELECT zk_lock_release_all();

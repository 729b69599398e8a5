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
-- characters ZooKeeper refuses: beyond the Basic Multilingual Plane, U+FFFE
SELECT zk_lock_acquire(U&'emoji\+01F600');
SELECT zk_lock_acquire(U&'nonchar\FFFE');
-- segments shaped like the nodes recipes create (zklock's and Curator's
-- protected nodes, Kazoo's) and the children of a semaphore after the first
SELECT zk_lock_acquire('p/_c_0f0e0d0c-0b0a-4908-8706-050403020100-lock-0000000001');
SELECT zk_lock_acquire('p/_c_0f0e0d0c-0b0a-4908-8706-050403020100-__READ__-000000001');
SELECT zk_lock_acquire('p/0123456789abcdef0123456789abcdef__lock__0000000001');
SELECT zk_lock_acquire('pool/leases');
SELECT zk_lock_acquire('pool/locks/x');
-- the first segment where the workers' session nodes live
SELECT zk_lock_acquire('zklock.instances/x');
\set VERBOSITY default
SELECT zk_lock_acquire('zklock.instances');
-- messages, for a human reading them
SELECT zk_lock_acquire('a//b');
SELECT zk_lock_acquire(repeat('x', 1025));
SELECT zk_lock_acquire('ok', -1);
-- the longest name and unusual but valid ones work
SELECT zk_lock_acquire(repeat('x', 1024), 0);
SELECT zk_lock_release(repeat('x', 1024));
SELECT zk_lock_try('with space/ünïcödé/…dots.../-_:@');
SELECT zk_lock_release('with space/ünïcödé/…dots.../-_:@');
-- a name that merely ends in digits is a lock like any other, and does not
-- make its parent's lock look held
SELECT zk_lock_acquire('reg/p/x0000000000', 0);
SELECT zk_lock_try('reg/p');
SELECT zk_lock_release('reg/p'), zk_lock_release('reg/p/x0000000000');
SELECT zk_lock_acquire('leases', 0), zk_lock_release('leases');
SELECT zk_lock_acquire('x/zklock.instances', 0), zk_lock_release('x/zklock.instances');
-- nothing is held after all that
SELECT zk_lock_release_all();

-- Session-scope exclusive locks, seen from one session.
-- acquire, re-entrancy and release, like advisory locks
SELECT zk_lock_held('reg/a');
SELECT zk_lock_token('reg/a') IS NULL AS no_token;
SELECT zk_lock_acquire('reg/a');
SELECT zk_lock_held('reg/a');
SELECT zk_lock_token('reg/a') > 0 AS has_token;
SELECT zk_lock_token('reg/a') AS first_token \gset
SELECT zk_lock_acquire('reg/a', 0);
SELECT zk_lock_try('reg/a');
-- re-entrant holdings share one node, hence one token
SELECT zk_lock_token('reg/a') = :first_token AS same_token;
SELECT zk_lock_release('reg/a');
SELECT zk_lock_release('reg/a');
SELECT zk_lock_held('reg/a');
SELECT zk_lock_release('reg/a');
SELECT zk_lock_held('reg/a');
SELECT zk_lock_release('reg/a');
-- a new holding gets a new, larger token (czxid grows with every grant)
SELECT zk_lock_acquire('reg/a', 1000);
SELECT zk_lock_token('reg/a') > :first_token AS larger_token;
SELECT zk_lock_release('reg/a');
-- names are case-sensitive paths; a child path is a different lock
SELECT zk_lock_try('reg/b'), zk_lock_try('reg/B'), zk_lock_try('reg/b/c');
SELECT zk_lock_held('reg/b'), zk_lock_held('reg/B'), zk_lock_held('reg/b/c');
-- release_all releases every session-scope holding, once each
SELECT zk_lock_acquire('reg/b');
SELECT zk_lock_release_all();
SELECT zk_lock_held('reg/b'), zk_lock_held('reg/B'), zk_lock_held('reg/b/c');
SELECT zk_lock_release_all();
SELECT zk_lock_release('reg/b');
-- zk_lock_acquire with timeouts of every kind when free
SELECT zk_lock_acquire('reg/t', NULL), zk_lock_acquire('reg/t', 0),
       zk_lock_acquire('reg/t', 50);
SELECT zk_lock_release_all();
-- DISCARD ALL releases every session-scope holding, as it releases advisory
-- locks (a connection pooler's reset)
SELECT zk_lock_acquire('reg/discard'), zk_rwlock_read('reg/discard2'),
       zk_semaphore_acquire('reg/discard3', 1);
DISCARD ALL;
SELECT zk_lock_held('reg/discard'), zk_rwlock_read_held('reg/discard2'),
       zk_semaphore_held('reg/discard3');
SELECT zk_lock_release_all();

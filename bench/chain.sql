-- bench/chain.sql: one waiter of the chain (pgbench -f, -t 1, -M prepared,
-- -D prefix=NAME -D round=R -D barrier=K).  It queues on the lock, notes
-- when it got it, lets go at once, and then stays connected (on an advisory
-- lock the gate holds until the whole chain is through), so that no backend
-- exit runs while the lock is handed down.
SELECT zk_lock_acquire(:prefix::text) AS held, extract(epoch FROM clock_timestamp()) AS granted \gset
SELECT zk_lock_release(:prefix::text);
INSERT INTO bench_chain VALUES (:round, :granted);
SELECT pg_advisory_lock_shared(:barrier);

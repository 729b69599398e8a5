-- bench/hot.sql: one cycle on the one lock all clients share (pgbench -f,
-- -M prepared, -D prefix=NAME): acquire, release.  Scenarios "hot" and
-- "hot2" (the same lock from two instances).
SELECT zk_lock_acquire(:prefix::text);
SELECT zk_lock_release(:prefix::text);

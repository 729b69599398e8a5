-- bench/own.sql: one cycle of a client on a lock of its own (pgbench -f,
-- -M prepared, -D prefix=NAME): acquire, release.  Scenarios "uncontended"
-- and "distinct".
SELECT zk_lock_acquire(:prefix::text || '/' || :client_id);
SELECT zk_lock_release(:prefix::text || '/' || :client_id);

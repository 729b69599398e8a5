-- bench/new.sql: one cycle on a lock never used before (pgbench -f,
-- -M prepared, -D prefix=NAME): the name is the client id and a random
-- 40-bit number, so its parent node does not exist yet.  Scenario "new".
\set r random(1, 1099511627776)
SELECT zk_lock_acquire(:prefix::text || '/' || :client_id || '-' || :r);
SELECT zk_lock_release(:prefix::text || '/' || :client_id || '-' || :r);

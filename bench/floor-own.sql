-- bench/floor-own.sql: the SQL floor of bench/own.sql (pgbench -f,
-- -M prepared, -D prefix=NAME): the same two statements with PostgreSQL's
-- own advisory locks on a key made from the same name, on the same
-- instance with the same clients: what a cycle costs before zklock's
-- worker and ZooKeeper.  Scenarios "uncontended" and "distinct".
SELECT pg_advisory_lock(hashtext(:prefix::text || '/' || :client_id));
SELECT pg_advisory_unlock(hashtext(:prefix::text || '/' || :client_id));

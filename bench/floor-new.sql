-- bench/floor-new.sql: the SQL floor of bench/new.sql (see floor-own.sql):
-- a key from a new name every cycle.  Scenario "new".
\set r random(1, 1099511627776)
SELECT pg_advisory_lock(hashtext(:prefix::text || '/' || :client_id || '-' || :r));
SELECT pg_advisory_unlock(hashtext(:prefix::text || '/' || :client_id || '-' || :r));

-- The zk_locks view, zk_status(), the zk_stats view and privileges.
-- (a request of its own first, so that it does not depend on the suites before)
SELECT zk_lock_try('reg/first') AND zk_lock_release('reg/first') AS requested;
SELECT state, session_id ~ '^0x[0-9a-f]+$' AS has_session, server IS NOT NULL AS has_server,
       session_timeout_ms > 0 AS has_timeout, requests > 0 AS counted,
       worker_pid > 0 AS has_worker
  FROM zk_status();
SELECT zk_lock_acquire('reg/view');
BEGIN;
SELECT zk_lock_acquire_xact('reg/view');
SELECT zk_lock_acquire_xact('reg/view');
SELECT pid = pg_backend_pid() AS mine, database = current_database() AS here,
       name, kind, scope, state, count, token = zk_lock_token('reg/view') AS token_ok,
       znode ~ '^/zklock/reg/view/_c_[0-9a-f-]{36}-lock-[0-9]{10}$' AS znode_ok,
       since <= now() AS since_ok, waiting_on
  FROM zk_locks WHERE name = 'reg/view' ORDER BY scope;
COMMIT;
SELECT name, scope, count FROM zk_locks WHERE name = 'reg/view';
SELECT zk_lock_release('reg/view');
-- zk_stats: one row of counters
SELECT count(*) AS one_row FROM zk_stats;
SELECT requests > 0 AS counted, grants > 0 AS granted, zk_requests > 0 AS sent,
       nodes >= 0 AND watches >= 0 AS gauges, stats_reset <= now() AS reset_before
  FROM zk_stats;
-- zk_status() shows the same counters (nothing else takes locks meanwhile)
SELECT s.requests = t.requests AND s.grants = t.grants AND s.timeouts = t.timeouts
       AND s.reconnects = t.reconnects AND s.session_losses = t.session_losses AS same
  FROM zk_stats s, zk_status() t;
-- zk_stats_reset(): the cumulative counters start again from 0
SELECT zk_stats_reset();
SELECT requests, grants, local_grants, waits, timeouts, cancels, session_losses,
       reconnects, orphans_deleted, zk_requests, zk_multis, zk_multi_writes,
       zk_multis_refused, stats_reset > now() - interval '1 minute' AS reset_now
  FROM zk_stats;
-- 100 uncontended acquire-release cycles count 100 requests and 100 grants
-- (each a node in ZooKeeper: no local grant), no wait, timeout or cancel;
-- each cycle sends at least a create, a listing and a delete
CREATE TEMP TABLE stats_before AS SELECT * FROM zk_stats;
DO $$
BEGIN
    FOR i IN 1..100 LOOP
        PERFORM zk_lock_try('reg/stats');
        PERFORM zk_lock_release('reg/stats');
    END LOOP;
END $$;
SELECT a.requests - b.requests AS requests, a.grants - b.grants AS grants,
       a.local_grants - b.local_grants AS local_grants, a.waits - b.waits AS waits,
       a.timeouts - b.timeouts AS timeouts, a.cancels - b.cancels AS cancels,
       a.zk_requests - b.zk_requests >= 300 AS zk_requests_ok,
       a.stats_reset = b.stats_reset AS not_reset
  FROM zk_stats a, stats_before b;
DROP TABLE stats_before;
-- privileges: nothing for PUBLIC, monitoring for pg_monitor
CREATE ROLE zk_app LOGIN;
CREATE ROLE zk_mon LOGIN IN ROLE pg_monitor;
SET ROLE zk_app;
SELECT zk_lock_try('reg/priv');
SELECT * FROM zk_locks;
SELECT state FROM zk_status();
SELECT grants FROM zk_stats;
SELECT zk_stats_reset();
RESET ROLE;
GRANT EXECUTE ON FUNCTION zk_lock_try(text), zk_lock_release(text) TO zk_app;
SET ROLE zk_app;
SELECT zk_lock_try('reg/priv');
SELECT zk_lock_release('reg/priv');
-- the credentials file setting is superuser-only (the message's wording
-- differs between PostgreSQL versions, its SQLSTATE does not)
\set VERBOSITY sqlstate
SHOW zklock.auth_file;
\set VERBOSITY default
SELECT count(*) FROM pg_settings WHERE name = 'zklock.auth_file';
RESET ROLE;
SET ROLE zk_mon;
SELECT count(*) >= 0 AS can_read FROM zk_locks;
SELECT state FROM zk_status();
SELECT count(*) AS can_read FROM zk_stats;
-- resetting is for superusers (or whom they grant it)
SELECT zk_stats_reset();
SELECT zk_lock_try('reg/priv');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION zk_lock_try(text), zk_lock_release(text) FROM zk_app;
DROP ROLE zk_app;
DROP ROLE zk_mon;

-- The zk_locks view, zk_status() and privileges.
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
-- privileges: nothing for PUBLIC, monitoring for pg_monitor
CREATE ROLE zk_app LOGIN;
CREATE ROLE zk_mon LOGIN IN ROLE pg_monitor;
SET ROLE zk_app;
SELECT zk_lock_try('reg/priv');
SELECT * FROM zk_locks;
SELECT state FROM zk_status();
RESET ROLE;
GRANT EXECUTE ON FUNCTION zk_lock_try(text), zk_lock_release(text) TO zk_app;
SET ROLE zk_app;
SELECT zk_lock_try('reg/priv');
SELECT zk_lock_release('reg/priv');
-- the credentials file setting is superuser-only
SHOW zklock.auth_file;
SELECT count(*) FROM pg_settings WHERE name = 'zklock.auth_file';
RESET ROLE;
SET ROLE zk_mon;
SELECT count(*) >= 0 AS can_read FROM zk_locks;
SELECT state FROM zk_status();
SELECT zk_lock_try('reg/priv');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION zk_lock_try(text), zk_lock_release(text) FROM zk_app;
DROP ROLE zk_app;
DROP ROLE zk_mon;

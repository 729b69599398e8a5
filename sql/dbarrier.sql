-- Double barrier (Curator's DistributedDoubleBarrier): member nodes
-- <zklock.root>/<name>/<uuid> and the node "ready".
-- NULL and bad arguments (class 22): nothing sent to ZooKeeper
SELECT zk_double_barrier_enter(NULL, 2);
SELECT zk_double_barrier_leave(NULL);
SELECT zk_double_barrier_enter('', 2);
SELECT zk_double_barrier_enter('/reg/dbar', 2);
SELECT zk_double_barrier_enter('reg/dbar/ready', 2);
SELECT zk_double_barrier_leave('reg/../dbar');
SELECT zk_double_barrier_enter('reg/dbar', NULL);
SELECT zk_double_barrier_enter('reg/dbar', 0);
SELECT zk_double_barrier_enter('reg/dbar', -3, 0);
SELECT zk_double_barrier_enter('reg/dbar', 2, -1);
SELECT zk_double_barrier_leave('reg/dbar', -1);
DO $$
BEGIN
    PERFORM zk_double_barrier_enter('reg/dbar', 0);
EXCEPTION WHEN invalid_parameter_value THEN
    RAISE NOTICE 'members 0: %', SQLSTATE;
END $$;
-- leaving without entering: 55000
SELECT zk_double_barrier_leave('reg/dbar');
DO $$
BEGIN
    PERFORM zk_double_barrier_leave('reg/dbar', 0);
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RAISE NOTICE 'leave without enter: %', SQLSTATE;
END $$;
-- nothing of the refused calls is left (entries given up show as
-- 'releasing' until the worker has freed them)
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';
-- one member is enough for a barrier of one
SELECT zk_double_barrier_enter('reg/dbar/one', 1);
SELECT kind, scope, state, znode ~ '^/zklock/reg/dbar/one/[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' AS uuid_node
  FROM zk_locks WHERE pid = pg_backend_pid();
-- entering twice: 55000
SELECT zk_double_barrier_enter('reg/dbar/one', 1);
DO $$
BEGIN
    PERFORM zk_double_barrier_enter('reg/dbar/one', 1, 0);
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RAISE NOTICE 'enter twice: %', SQLSTATE;
END $$;
-- still a member, and the only one: leaving returns at once
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';
SELECT zk_double_barrier_leave('reg/dbar/one');
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';
SELECT zk_double_barrier_leave('reg/dbar/one');
-- the leave deleted "ready": a barrier of two is not entered by one
SELECT zk_double_barrier_enter('reg/dbar/one', 2, 0);
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';
-- a timed-out enter leaves nothing: again alone, not entered
SELECT zk_double_barrier_enter('reg/dbar/two', 2, 100);
SELECT zk_double_barrier_enter('reg/dbar/two', 2, 0);
SELECT zk_double_barrier_enter('reg/dbar/two', 2, 100);
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';
SELECT zk_double_barrier_leave('reg/dbar/two', 0);
-- entered alone, leave without waiting: true (nobody else to wait for)
SELECT zk_double_barrier_enter('reg/dbar/one', 1, 0);
SELECT zk_double_barrier_leave('reg/dbar/one', 0);
SELECT zk_double_barrier_enter('reg/dbar/one', 2, 0);
-- an enter in an aborted transaction stays: memberships are session scope
BEGIN;
SELECT zk_double_barrier_enter('reg/dbar/xact', 1);
ROLLBACK;
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';
SELECT zk_lock_release_all();
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';
SELECT zk_double_barrier_leave('reg/dbar/xact');
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';
-- DISCARD ALL ends a membership (its node goes, as at backend exit)
SELECT zk_double_barrier_enter('reg/dbar/discard', 1);
DISCARD ALL;
SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() AND state <> 'releasing';
SELECT zk_double_barrier_leave('reg/dbar/discard');
SELECT zk_double_barrier_enter('reg/dbar/discard', 1);
SELECT zk_double_barrier_leave('reg/dbar/discard');

-- Instance leadership on an instance without zklock.leader_groups: it takes
-- part in no election, and every answer says so without a message.
SHOW zklock.leader_groups;
SELECT zk_is_leader('cron');
SELECT zk_is_leader(NULL) IS NULL AS null_is_null;
SELECT count(*) FROM zk_leaders;
-- a group nobody takes part in: no leader, looked up in ZooKeeper
SELECT group_name, leader_id, leader_znode, since, is_us
  FROM zk_leader_info('reg/leader/none');
SELECT zk_leader_info(NULL) IS NULL AS null_is_null;
-- bad group names (class 22), nothing sent to ZooKeeper
SELECT zk_is_leader('');
SELECT zk_is_leader('/cron');
SELECT zk_is_leader('a/../b');
SELECT * FROM zk_leader_info('cron/locks');
SELECT * FROM zk_leader_info('_c_00000000-0000-0000-0000-000000000000-latch-0000000001');
-- zklock.leader_groups: a reload setting, checked like names
SET zklock.leader_groups = 'cron';
ALTER SYSTEM SET zklock.leader_groups = 'cron, a//b';
ALTER SYSTEM SET zklock.leader_groups = 'cron, cron';
-- privileges: nothing for PUBLIC, zk_leaders and zk_leader_info for pg_monitor
CREATE ROLE zk_lapp LOGIN;
CREATE ROLE zk_lmon LOGIN IN ROLE pg_monitor;
SET ROLE zk_lapp;
SELECT zk_is_leader('cron');
SELECT * FROM zk_leaders;
RESET ROLE;
GRANT EXECUTE ON FUNCTION zk_is_leader(text) TO zk_lapp;
SET ROLE zk_lapp;
SELECT zk_is_leader('cron');
RESET ROLE;
SET ROLE zk_lmon;
SELECT count(*) FROM zk_leaders;
SELECT leader_id FROM zk_leader_info('reg/leader/none');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION zk_is_leader(text) FROM zk_lapp;
DROP ROLE zk_lapp;
DROP ROLE zk_lmon;

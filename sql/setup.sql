-- zklock regression suite: set-up.  The instance is started by pg_regress
-- with zklock preloaded and zklock.hosts pointing at the test ZooKeeper.
CREATE EXTENSION zklock;
SELECT name, setting, unit, context FROM pg_settings
 WHERE name LIKE 'zklock.%' AND name <> 'zklock.hosts' ORDER BY name;
-- the settings' namespace is reserved
SET zklock.no_such_setting = 1;

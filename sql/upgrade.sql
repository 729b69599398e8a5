-- Packaging of the SQL API:
--   * a fresh CREATE EXTENSION zklock (the default version), 1.0 updated
--     to it through 1.1 and 1.2, and 1.1 updated to it leave the same objects,
--     definitions, comments and privileges (each install script and the
--     update path ending in its version must stay equivalent);
--   * no function or view of the extension is usable by PUBLIC;
--   * CREATE EXTENSION changes no object it does not own (a user's zk_*
--     function keeps its privileges);
--   * CREATE EXTENSION zklock SCHEMA s works.
-- In a database of its own, so the other suites' zklock stays as it is.
SELECT current_database() AS regress_db \gset
CREATE DATABASE zklock_upgrade;
\c zklock_upgrade
CREATE SCHEMA upg;
-- a user's function that merely has a zklock-like name
CREATE FUNCTION public.zk_mine() RETURNS integer LANGUAGE sql AS 'SELECT 1';
-- Every member of extension zklock, and what defines it: one row per object
-- and property.  Whatever can differ between two ways of making the
-- extension belongs here.  Not the row types of its views and their array
-- types, which PostgreSQL 17 and later list as members too: they come and go
-- with their views.
CREATE FUNCTION upg.zklock_objects(OUT object text, OUT property text, OUT value text)
RETURNS SETOF record LANGUAGE sql AS $$
WITH m AS (
    SELECT d.classid, d.objid, d.objsubid,
           pg_describe_object(d.classid, d.objid, d.objsubid) AS object
      FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
       AND e.extname = 'zklock'
       AND NOT EXISTS (SELECT FROM pg_type t
                        WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
                          AND (t.typrelid <> 0
                               OR t.typelem IN (SELECT oid FROM pg_type
                                                 WHERE typrelid <> 0))))
SELECT 'extension zklock', 'extension',
       format('version %s, schema %s, relocatable %s, config %s %s',
              extversion, extnamespace::regnamespace, extrelocatable,
              extconfig, extcondition)
  FROM pg_extension WHERE extname = 'zklock'
UNION ALL
SELECT m.object, 'member', (pg_identify_object(m.classid, m.objid, m.objsubid)).type
  FROM m
UNION ALL
SELECT m.object, 'comment', d.description
  FROM m JOIN pg_description d
       ON (d.classoid, d.objoid, d.objsubid) = (m.classid, m.objid, m.objsubid)
UNION ALL
-- initial privileges, of the object and of its columns
SELECT pg_describe_object(i.classoid, i.objoid, i.objsubid), 'initial privileges',
       i.privtype::text || ' ' || i.initprivs::text
  FROM m JOIN pg_init_privs i ON (i.classoid, i.objoid) = (m.classid, m.objid)
UNION ALL
SELECT m.object, x.property, x.value
  FROM m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid,
       LATERAL (VALUES
           ('definition', CASE WHEN p.prokind IN ('f', 'p')
                               THEN pg_get_functiondef(p.oid) END),
           ('owner', p.proowner::regrole::text),
           ('privileges', p.proacl::text)) x(property, value)
UNION ALL
SELECT m.object, x.property, x.value
  FROM m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid,
       LATERAL (VALUES
           ('kind', c.relkind::text),
           ('definition', CASE WHEN c.relkind IN ('v', 'm')
                               THEN pg_get_viewdef(c.oid) END),
           ('owner', c.relowner::regrole::text),
           ('privileges', c.relacl::text),
           ('columns',
            (SELECT string_agg(format('%s %s%s%s %s', a.attname,
                                      format_type(a.atttypid, a.atttypmod),
                                      CASE WHEN a.attnotnull THEN ' not null' END,
                                      ' default ' || pg_get_expr(ad.adbin, ad.adrelid),
                                      a.attacl), ', ' ORDER BY a.attnum)
               FROM pg_attribute a
               LEFT JOIN pg_attrdef ad ON (ad.adrelid, ad.adnum) = (a.attrelid, a.attnum)
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped))
       ) x(property, value)
$$;
-- Functions and relations of the extension that PUBLIC can use.
CREATE FUNCTION upg.zklock_public_can_use(OUT object text, OUT privilege text)
RETURNS SETOF record LANGUAGE sql AS $$
SELECT pg_describe_object(d.classid, d.objid, 0), x.privilege
  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
       CROSS JOIN (VALUES ('EXECUTE'), ('SELECT'), ('INSERT'), ('UPDATE'),
                          ('DELETE'), ('TRUNCATE')) x(privilege)
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND e.extname = 'zklock'
   AND CASE WHEN d.classid = 'pg_proc'::regclass
            THEN x.privilege = 'EXECUTE'
                 AND has_function_privilege('public', d.objid, 'EXECUTE')
            WHEN d.classid = 'pg_class'::regclass
            THEN x.privilege <> 'EXECUTE'
                 AND has_table_privilege('public', d.objid, x.privilege)
            ELSE false END
 ORDER BY 1, 2
$$;
-- What the user's own function zk_mine() allows.
CREATE FUNCTION upg.zk_mine_privileges(OUT proacl aclitem[], OUT public_can_execute boolean,
                                       OUT initial_privileges bigint)
LANGUAGE sql AS $$
SELECT p.proacl, has_function_privilege('public', p.oid, 'EXECUTE'),
       (SELECT count(*) FROM pg_init_privs i
         WHERE (i.classoid, i.objoid) = ('pg_proc'::regclass, p.oid))
  FROM pg_proc p WHERE p.oid = 'public.zk_mine()'::regprocedure
$$;
SELECT * FROM upg.zk_mine_privileges();
-- 1. A fresh CREATE EXTENSION, of the default version.
CREATE EXTENSION zklock;
SELECT extversion FROM pg_extension WHERE extname = 'zklock';
-- zk_mine() is left alone: still EXECUTE for PUBLIC, no initial privileges
SELECT * FROM upg.zk_mine_privileges();
-- nothing of the extension for PUBLIC
SELECT * FROM upg.zklock_public_can_use();
CREATE TABLE upg.fresh AS SELECT * FROM upg.zklock_objects();
DROP EXTENSION zklock;
-- the update paths to 1.6
SELECT source, target, path FROM pg_extension_update_paths('zklock')
 WHERE target = '1.6' AND path IS NOT NULL
 ORDER BY source;
-- 2. 1.0, then ALTER EXTENSION UPDATE to 1.1, then to the default version.
CREATE EXTENSION zklock VERSION '1.0';
-- 1.0 took EXECUTE from PUBLIC on zk_mine() too (what 1.1 fixes)
SELECT * FROM upg.zk_mine_privileges();
-- the owner repairs it; the update must not take it again
GRANT EXECUTE ON FUNCTION public.zk_mine() TO PUBLIC;
ALTER EXTENSION zklock UPDATE TO '1.1';
ALTER EXTENSION zklock UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'zklock';
SELECT public_can_execute FROM upg.zk_mine_privileges();
CREATE TABLE upg.updated AS SELECT * FROM upg.zklock_objects();
DROP EXTENSION zklock;
-- 2b. 1.1, then ALTER EXTENSION UPDATE to the default version.
CREATE EXTENSION zklock VERSION '1.1';
ALTER EXTENSION zklock UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'zklock';
CREATE TABLE upg.updated_1_1 AS SELECT * FROM upg.zklock_objects();
-- the properties compared: each was found for some object
SELECT property, count(*) > 0 AS found FROM upg.fresh GROUP BY property ORDER BY property;
SELECT count(*) > 0 AS has_members FROM upg.fresh WHERE property = 'member';
-- every difference between fresh and updated from 1.0 (none)
(SELECT 'fresh only' AS side, * FROM upg.fresh
 EXCEPT ALL SELECT 'fresh only', * FROM upg.updated)
UNION ALL
(SELECT 'updated only', * FROM upg.updated
 EXCEPT ALL SELECT 'updated only', * FROM upg.fresh)
ORDER BY object, property, side;
-- every difference between fresh and updated from 1.1 (none)
(SELECT 'fresh only' AS side, * FROM upg.fresh
 EXCEPT ALL SELECT 'fresh only', * FROM upg.updated_1_1)
UNION ALL
(SELECT 'updated only', * FROM upg.updated_1_1
 EXCEPT ALL SELECT 'updated only', * FROM upg.fresh)
ORDER BY object, property, side;
-- 1.2's objects are there
SELECT object FROM upg.fresh
 WHERE property = 'member' AND object ~ 'zk_stats'
 ORDER BY object;
DROP EXTENSION zklock;
-- 2c. 1.2 works with this library before ALTER EXTENSION UPDATE (its
-- zk_stats has no counters of multis), and gets them with it.
-- A view of the user's on zk_stats stays (the update replaces the view).
CREATE EXTENSION zklock VERSION '1.2';
SELECT count(*) AS columns FROM pg_attribute
 WHERE attrelid = 'zk_stats'::regclass AND attnum > 0;
SELECT requests >= 0 AND zk_requests >= 0 AS works FROM zk_stats;
CREATE VIEW upg.my_stats AS SELECT grants, zk_requests FROM zk_stats;
ALTER EXTENSION zklock UPDATE;
SELECT string_agg(attname, ', ' ORDER BY attnum) AS columns FROM pg_attribute
 WHERE attrelid = 'zk_stats'::regclass AND attnum > 0;
SELECT zk_multis >= 0 AND zk_multi_writes >= zk_multis * 2
       AND zk_multis_refused <= zk_multis AS works FROM zk_stats;
SELECT grants >= 0 AS still_works FROM upg.my_stats;
DROP VIEW upg.my_stats;
DROP EXTENSION zklock;
-- 2d. 1.3 works with this library, and gets zk_job_claim's timeout with
-- the update.
CREATE EXTENSION zklock VERSION '1.3';
SELECT count(*) AS claim_functions FROM pg_proc WHERE proname = 'zk_job_claim';
ALTER EXTENSION zklock UPDATE;
SELECT pg_get_function_arguments(oid) AS claim_arguments FROM pg_proc
 WHERE proname = 'zk_job_claim' ORDER BY 1;
BEGIN;
SELECT zk_job_claim('reg/upgrade', '2026-01-01 10:00+00', 0);
ROLLBACK;
DROP EXTENSION zklock;
-- 2e. 1.4 works with this library (zk_job_claims of five columns), and the
-- update gives zk_job_claims its new columns, keeps who may call it, and
-- adds zk_job_claim_settle for superusers only.
CREATE EXTENSION zklock VERSION '1.4';
CREATE ROLE zklock_upg_reader;
CREATE ROLE "Zklock Upg-Reader";
GRANT EXECUTE ON FUNCTION zk_job_claims(text) TO zklock_upg_reader, "Zklock Upg-Reader";
SELECT count(*) AS rows FROM zk_job_claims('reg/upgrade-none');
ALTER EXTENSION zklock UPDATE;
SELECT pg_get_function_arguments('zk_job_claims(text)'::regprocedure) AS claims_columns;
SELECT has_function_privilege('zklock_upg_reader', 'zk_job_claims(text)', 'EXECUTE') AS reader,
       has_function_privilege('Zklock Upg-Reader', 'zk_job_claims(text)', 'EXECUTE') AS quoted_reader,
       has_function_privilege('pg_monitor', 'zk_job_claims(text)', 'EXECUTE') AS monitor,
       has_function_privilege('public', 'zk_job_claim_settle(text, timestamptz, boolean)', 'EXECUTE') AS public_settles;
SELECT count(*) AS rows FROM zk_job_claims('reg/upgrade-none');
DROP EXTENSION zklock;
DROP ROLE zklock_upg_reader;
DROP ROLE "Zklock Upg-Reader";
-- 2f. After 1.4 -> 1.5, zk_grant_usage gives a role that had the 1.4
-- grants the functions 1.5 added, again and again with the same result;
-- with monitoring => true what pg_monitor has; nobody but a superuser (or
-- the extension's owner) may call it.
CREATE EXTENSION zklock VERSION '1.4';
CREATE ROLE zklock_upg_app;
CREATE ROLE zklock_upg_mon;
GRANT EXECUTE ON FUNCTION zk_lock_try(text), zk_lock_release(text) TO zklock_upg_app;
ALTER EXTENSION zklock UPDATE;
SELECT has_function_privilege('zklock_upg_app', 'zk_shared_count_add(text, integer, integer)', 'EXECUTE') AS before;
SELECT zk_grant_usage('zklock_upg_app') AS granted;
SELECT zk_grant_usage('zklock_upg_app') AS granted_again;
SELECT zk_grant_usage('zklock_upg_mon', monitoring => true) AS granted_monitoring;
-- what each role may execute now, beside the superuser's
SELECT r.role,
       string_agg(p.proname, ', ' ORDER BY p.proname)
           FILTER (WHERE NOT has_function_privilege(r.role, p.oid, 'EXECUTE')) AS not_granted
  FROM (VALUES ('zklock_upg_app'), ('zklock_upg_mon')) r(role),
       pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
       AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
 WHERE r.role = 'zklock_upg_app' OR p.proname !~ '^zk_(lock|rwlock|semaphore|barrier|double_barrier|shared_count)'
 GROUP BY r.role ORDER BY r.role;
SET ROLE zklock_upg_app;
SELECT zk_shared_count_add('reg/upgrade-grant', 1) >= 1 AS added;
SELECT zk_lock_try('reg/upgrade-grant') AS locked, zk_lock_release('reg/upgrade-grant') AS released;
SELECT count(*) FROM zk_job_claims('reg/upgrade-none');
SELECT zk_grant_usage('zklock_upg_app');
RESET ROLE;
SET ROLE zklock_upg_mon;
SELECT count(*) AS rows FROM zk_job_claims('reg/upgrade-none');
SELECT count(*) >= 0 AS reads FROM zk_locks, zk_stats, zk_leaders, zk_status();
-- the loaded library is X.Y.Z of the SQL version X.Y
SELECT zk_version() LIKE (SELECT extversion FROM pg_extension WHERE extname = 'zklock') || '.%'
       AS library_is_this_version;
SELECT zk_lock_try('reg/upgrade-grant');
RESET ROLE;
-- EXECUTE on zk_grant_usage is not enough: it checks who calls it
GRANT EXECUTE ON FUNCTION zk_grant_usage(regrole, boolean) TO zklock_upg_app;
SET ROLE zklock_upg_app;
SELECT zk_grant_usage('zklock_upg_mon');
RESET ROLE;
DROP EXTENSION zklock;
DROP ROLE zklock_upg_app;
DROP ROLE zklock_upg_mon;
-- 2g. 1.5 works with this library; after 1.5 -> 1.6 zk_grant_usage gives a
-- role that had 1.5's grants the semaphores sized by a shared count.
CREATE EXTENSION zklock VERSION '1.5';
CREATE ROLE zklock_upg_app;
SELECT zk_grant_usage('zklock_upg_app') AS granted_1_5;
SELECT zk_shared_count_set('reg/upgrade-size', 1) >= 0 AS set;
SELECT zk_semaphore_acquire('reg/upgrade-sem', 1, 0) AS acquired,
       zk_semaphore_release('reg/upgrade-sem') AS released;
ALTER EXTENSION zklock UPDATE;
SELECT has_function_privilege('zklock_upg_app', 'zk_semaphore_acquire_by_count(text, text, integer)', 'EXECUTE') AS before;
SELECT zk_grant_usage('zklock_upg_app') AS granted_1_6;
SET ROLE zklock_upg_app;
SELECT zk_semaphore_acquire_by_count('reg/upgrade-sem', 'reg/upgrade-size', 0) AS acquired,
       zk_semaphore_release('reg/upgrade-sem') AS released;
RESET ROLE;
DROP EXTENSION zklock;
DROP ROLE zklock_upg_app;
-- 3. Into a schema of its own: everything goes there and works from there.
CREATE SCHEMA s;
CREATE EXTENSION zklock SCHEMA s;
SELECT (pg_identify_object(d.classid, d.objid, 0)).schema, count(*) > 0 AS has_members
  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND e.extname = 'zklock'
 GROUP BY 1;
SELECT * FROM upg.zklock_public_can_use();
SHOW search_path;
SELECT zk_lock_try('reg/schema');
SELECT s.zk_lock_try('reg/schema');
SELECT s.zk_lock_held('reg/schema'), s.zk_lock_token('reg/schema') > 0 AS has_token;
SELECT name, kind, scope, state, count FROM s.zk_locks WHERE name = 'reg/schema';
SELECT s.zk_lock_release('reg/schema');
SELECT s.zk_lock_held('reg/schema');
BEGIN;
SELECT s.zk_lock_acquire_xact('reg/schema', 0);
COMMIT;
SELECT state FROM s.zk_status();
SELECT grants > 0 AS counted FROM s.zk_stats;
-- the scripts refer to the schema as @extschema@: not relocatable
ALTER EXTENSION zklock SET SCHEMA public;
\c :regress_db
DROP DATABASE zklock_upgrade;

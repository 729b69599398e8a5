-- zklock regression suite: the names a role may use (zklock.allowed_names).
--
-- Every function of the extension that takes a name (first argument name,
-- job or names) is called by a role confined to 'scope_a/*' with a name
-- outside it: all of them must refuse it with 42501 before anything is sent
-- to ZooKeeper, except those that look only at the session's own holdings
-- (releases, *_held, *_token, zk_lock_revocation_requested) and the leader
-- groups (the instance's configuration).  The list comes from the catalog,
-- so a new function that forgets the check changes this output.
\set VERBOSITY sqlstate
SELECT current_user AS su \gset
CREATE ROLE zk_scope_a LOGIN;
CREATE ROLE zk_scope_free LOGIN;
SELECT zk_grant_usage('zk_scope_a', monitoring => true);
SELECT zk_grant_usage('zk_scope_free', monitoring => true);
ALTER ROLE zk_scope_a SET zklock.allowed_names = 'scope_a/*';

-- the calls: minimal arguments, the name outside the scope; 42501 (scope)
-- is the scope's refusal
CREATE FUNCTION scope_calls(nm text)
RETURNS TABLE (fn text, outcome text) LANGUAGE plpgsql AS $$
DECLARE
	p record;
	args text[];
	t oid;
BEGIN
	FOR p IN
		SELECT pr.oid, pr.proname, pr.proargtypes, pr.pronargs,
			   pr.pronargdefaults, pr.proretset
		  FROM pg_proc pr
		  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass
			   AND d.objid = pr.oid AND d.deptype = 'e'
		  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'zklock'
		 WHERE pr.pronargs > 0
		   AND (pr.proargnames)[1] IN ('name', 'job', 'names')
		 ORDER BY pr.proname, pr.pronargs
	LOOP
		args := '{}';
		FOR i IN 0 .. p.pronargs - p.pronargdefaults - 1 LOOP
			t := p.proargtypes[i];
			args := args || CASE
				WHEN i = 0 AND t = 'text'::regtype THEN quote_literal(nm)
				WHEN i = 0 AND t = 'text[]'::regtype THEN
					'ARRAY[' || quote_literal(nm) || ']'
				WHEN t IN ('integer'::regtype, 'bigint'::regtype) THEN '1'
				WHEN t = 'boolean'::regtype THEN 'false'
				WHEN t = 'timestamptz'::regtype THEN
					quote_literal('2026-01-01 00:00+00') || '::timestamptz'
				WHEN t = 'text'::regtype THEN quote_literal('x')
				ELSE 'NULL' END;
		END LOOP;
		fn := p.proname || '(' || array_to_string(args, ', ') || ')';
		BEGIN
			IF p.proretset THEN
				EXECUTE 'SELECT count(*) FROM ' || fn;
			ELSE
				EXECUTE 'SELECT ' || fn;
			END IF;
			outcome := 'ran';
		EXCEPTION WHEN OTHERS THEN
			outcome := SQLSTATE ||
				CASE WHEN SQLERRM LIKE 'permission denied for zklock %'
				THEN ' (scope)' ELSE '' END;
		END;
		RETURN NEXT;
	END LOOP;
END $$;

-- every function, so that only the scope refuses
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO zk_scope_a, zk_scope_free;

-- the confined role: the setting comes from ALTER ROLE ... SET at login
\c - zk_scope_a
SHOW zklock.allowed_names;
SET client_min_messages = error;
SELECT * FROM scope_calls('scope_b/job');
-- names inside the scope work
SELECT zk_lock_acquire('scope_a/x'), zk_lock_release('scope_a/x');
SELECT zk_lock_acquire_all(ARRAY['scope_a/x', 'scope_a/y']), zk_lock_release_all();
SELECT zk_barrier_set('scope_a/b'), zk_barrier_remove('scope_a/b');
SELECT count(*) FROM zk_lock_participants('scope_a/x');
BEGIN;
SELECT zk_job_claim('scope_a/job', '2026-01-01 00:00+00');
ROLLBACK;
-- a semaphore in the scope sized by a count outside it
SELECT zk_semaphore_acquire_by_count('scope_a/s', 'scope_b/count', 0);
-- a multi-lock with one name outside takes none
SELECT zk_lock_acquire_all(ARRAY['scope_a/x', 'scope_b/y']);
SELECT zk_lock_held('scope_a/x');
RESET client_min_messages;
-- the message
\set VERBOSITY default
SELECT zk_lock_try('scope_b/x');
\set VERBOSITY sqlstate
-- the role cannot widen its own scope, in any way
SET zklock.allowed_names = '*';
SELECT set_config('zklock.allowed_names', '*', false);
RESET zklock.allowed_names;
RESET ALL;
ALTER ROLE zk_scope_a SET zklock.allowed_names = '*';
SHOW zklock.allowed_names;

-- an unconfined role is unaffected
\c - zk_scope_free
SHOW zklock.allowed_names;
SELECT zk_lock_acquire('scope_b/x'), zk_lock_release('scope_b/x');
SELECT zk_barrier_set('scope_b/b'), zk_barrier_remove('scope_b/b');
SELECT count(*) FROM zk_job_claims('scope_b/job');
BEGIN;
SELECT zk_job_claim('scope_b/job', '2026-01-01 00:00+00');
ROLLBACK;

-- a superuser is unaffected, whatever the setting says
\c - :su
SET zklock.allowed_names = 'scope_a/*';
SELECT zk_lock_acquire('scope_b/x'), zk_lock_release('scope_b/x');
-- bad settings
SET zklock.allowed_names = 'a/*,,b';
SET zklock.allowed_names = '""';
-- an empty list allows no name (but a superuser's)
ALTER ROLE zk_scope_a SET zklock.allowed_names = '';
\c - zk_scope_a
SELECT zk_lock_try('scope_a/x');
\c - :su
-- a holding stays releasable when the scope narrows
SET ROLE zk_scope_free;
SELECT zk_lock_acquire('scope_b/held');
RESET ROLE;
SET zklock.allowed_names = 'scope_a/*';
SET ROLE zk_scope_free;
SELECT zk_lock_try('scope_b/held');
SELECT zk_lock_held('scope_b/held'), zk_lock_token('scope_b/held') > 0 AS token;
SELECT zk_lock_release('scope_b/held');
RESET ROLE;
RESET zklock.allowed_names;

DROP FUNCTION scope_calls(text);
DROP OWNED BY zk_scope_a, zk_scope_free;
DROP ROLE zk_scope_a;
DROP ROLE zk_scope_free;

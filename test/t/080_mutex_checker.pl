# 080_mutex_checker.pl
#    A Jepsen-style mutual-exclusion checker on one machine.
#
#    Six clients, three on each of two PostgreSQL instances sharing one
#    ZooKeeper, loop: take a zklock lock (with an odd name: spaces, quotes,
#    non-ASCII letters, several segments), do a deliberately
#    non-atomic read-modify-write of a counter kept in a third PostgreSQL
#    instance (the store, reached through dblink: read, pause, write
#    value + 1), release.  Each completed write records its critical section
#    (client, token, start, end) in the store in the same statement as the
#    write.  In about a third of their sections the clients take the lock
#    again (re-entrant) and give that back before they write, so a
#    re-entrant release that freed the lock would show as an overlap.
#    Faults are injected meanwhile: ZooKeeper restarted within the session
#    timeout, a worker paused (SIGSTOP) past the session timeout while one
#    of its clients is inside its critical section, and a worker terminated
#    (SIGTERM; the postmaster starts another, with a new session) while its
#    clients hold and wait; in each phase, for a few seconds, network faults
#    on ma's connection (it reaches ZooKeeper through the fault proxy,
#    test/zkfaultproxy): the replies of its creates, deletes and multis
#    withheld after the server applied them, its connection cut, its
#    reconnects refused for a moment.
#
#    Phase 1 (no fencing): before writing, a client checks zk_lock_held in
#    its own session and does not write when the lock was lost; the write
#    follows the check within milliseconds, far less than the half session
#    timeout zk_lock_held keeps in reserve.  Checked: counter == completed
#    sections (no lost update), no two sections overlap, tokens grow with
#    every section, and the client whose worker was paused found its lock
#    lost and did not write.
#
#    Phase 2 (fencing tokens): no zk_lock_held check at all; the store keeps
#    the highest token seen, the read registers the reader's token and the
#    write is guarded (UPDATE ... WHERE last_token <= token).  The client
#    whose worker is paused writes anyway, with a stale token: it must be
#    rejected, and counter == accepted writes (zero lost updates).
#
#    Local hand-off is on (the default): the three clients of an instance
#    mostly get the lock from each other on the instance's node, within
#    zklock.handoff_limit / handoff_time while the other instance waits.
#    A section of a local hand-off has a token that is not a multiple of
#    1024 (czxid * 1024 + grants before it on the node); both phases must
#    have some, and their tokens must still grow from section to section.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(zk_status_of poll_status signal_process zk_restart_node
  zk_session_alive zk_lock_nodes);
use ZkFaultProxy;

my $T0 = time;
my $zk = ZkLockTest::zk_start(tick => 500);

# the store: plain PostgreSQL, no zklock
my $store = PostgreSQL::Test::Cluster->new('store');
$store->init;
$store->append_conf('postgresql.conf', "max_connections = 40\n");
$store->start;
$store->safe_psql('postgres', <<'SQL');
CREATE TABLE counter (id integer PRIMARY KEY, value bigint NOT NULL,
                      last_token bigint NOT NULL);
INSERT INTO counter VALUES (1, 0, 0), (2, 0, 0);
CREATE TABLE sections (id bigserial PRIMARY KEY, phase integer NOT NULL,
                       client text NOT NULL, token bigint NOT NULL,
                       t_start timestamptz NOT NULL, t_end timestamptz NOT NULL,
                       value bigint NOT NULL, reentered boolean NOT NULL);
CREATE TABLE ctl (stop boolean NOT NULL, phase integer NOT NULL,
                  victim text, go boolean NOT NULL, victim_state text);
INSERT INTO ctl VALUES (false, 1, NULL, false, NULL);
SQL

# ma keeps its session across a ZooKeeper restart (10 s) and reaches
# ZooKeeper through the fault proxy; mb's worker is the one paused (4 s, so
# that the pause is short)
my $proxy = ZkFaultProxy->start($zk);
my $ma = ZkLockTest::pg_node('ma', $proxy->hosts, 'zklock.session_timeout' => '10000');
my $mb = ZkLockTest::pg_node('mb', $zk);

my $client_sql = <<'SQL';
CREATE EXTENSION dblink;
CREATE FUNCTION client_loop(me text, conn text, lk text) RETURNS text
LANGUAGE plpgsql AS $fn$
DECLARE
	c record;
	got boolean;
	v bigint;
	tok bigint;
	t0 timestamptz;
	n integer;
	outcome text;
	victim boolean;
	announced boolean;
	depth integer;
	reentered boolean;
	ok integer := 0;
	lost integer := 0;
	fenced integer := 0;
	tmo integer := 0;
	err integer := 0;
	lasterr text := '';
BEGIN
	PERFORM dblink_connect('store', conn);
	PERFORM set_config('zklock.connect_timeout', '1000', false);
	LOOP
		SELECT * INTO c FROM dblink('store', 'SELECT stop, phase, victim, go FROM ctl')
		  AS t(stop boolean, phase integer, victim text, go boolean);
		EXIT WHEN c.stop;
		victim := c.victim IS NOT DISTINCT FROM me;
		announced := false;
		BEGIN
			got := zk_lock_acquire(lk, 2000);
		EXCEPTION WHEN OTHERS THEN
			err := err + 1;
			lasterr := SQLERRM;
			PERFORM pg_sleep(0.05);
			CONTINUE;
		END;
		IF NOT got THEN
			tmo := tmo + 1;
			CONTINUE;
		END IF;
		depth := 1;

		-- the critical section
		outcome := NULL;
		BEGIN
			t0 := clock_timestamp();
			tok := zk_lock_token(lk);
			IF random() < 0.3 THEN
				IF zk_lock_acquire(lk, 2000) THEN
					depth := 2;
				ELSE
					outcome := 'error: re-entrant acquire timed out';
				END IF;
			END IF;
			reentered := depth = 2;
			IF outcome IS NOT NULL THEN
				NULL;
			ELSIF tok IS NULL THEN
				outcome := 'lost';
			ELSIF c.phase = 1 THEN
				SELECT value INTO v FROM dblink('store',
					'SELECT value FROM counter WHERE id = 1') AS t(value bigint);
			ELSE
				-- fenced read: registers our token, refused to a stale one
				SELECT value INTO v FROM dblink('store', format(
					'UPDATE counter SET last_token = %s WHERE id = 2 AND last_token <= %s RETURNING value',
					tok, tok)) AS t(value bigint);
				IF NOT FOUND THEN
					outcome := 'fenced';
				END IF;
			END IF;
			IF outcome IS NULL THEN
				IF victim THEN
					-- stay inside until the test has done its worst
					PERFORM dblink_exec('store', format(
						'UPDATE ctl SET victim_state = %L', 'in:' || tok));
					announced := true;
					WHILE NOT (SELECT t.go FROM dblink('store', 'SELECT go FROM ctl')
							   AS t(go boolean)) LOOP
						PERFORM pg_sleep(0.02);
					END LOOP;
				ELSE
					PERFORM pg_sleep(0.005 + random() * 0.02);
				END IF;
				-- the re-entrant holding given back: still held once
				IF depth = 2 THEN
					PERFORM zk_lock_release(lk);
					depth := 1;
				END IF;
				IF c.phase = 1 THEN
					IF zk_lock_held(lk) THEN
						SELECT count(*) INTO n FROM dblink('store', format(
							'WITH u AS (UPDATE counter SET value = %s WHERE id = 1 RETURNING value) '
							'INSERT INTO sections (phase, client, token, t_start, t_end, value, reentered) '
							'SELECT 1, %L, %s, %L, clock_timestamp(), value, %L FROM u RETURNING 1',
							v + 1, me, tok, t0, reentered)) AS t(x integer);
						outcome := CASE WHEN n = 1 THEN 'wrote' ELSE 'rejected' END;
					ELSE
						outcome := 'lost';
					END IF;
				ELSE
					-- no zk_lock_held check: the fence alone must protect
					SELECT count(*) INTO n FROM dblink('store', format(
						'WITH u AS (UPDATE counter SET value = %s WHERE id = 2 AND last_token <= %s RETURNING value) '
						'INSERT INTO sections (phase, client, token, t_start, t_end, value, reentered) '
						'SELECT 2, %L, %s, %L, clock_timestamp(), value, %L FROM u RETURNING 1',
						v + 1, tok, me, tok, t0, reentered)) AS t(x integer);
					outcome := CASE WHEN n = 1 THEN 'wrote' ELSE 'rejected' END;
				END IF;
			END IF;
		EXCEPTION WHEN OTHERS THEN
			outcome := 'error: ' || SQLERRM;
		END;

		IF outcome = 'wrote' THEN
			ok := ok + 1;
		ELSIF outcome = 'lost' THEN
			lost := lost + 1;
		ELSIF outcome IN ('fenced', 'rejected') THEN
			fenced := fenced + 1;
		ELSE
			err := err + 1;
			lasterr := outcome;
		END IF;
		IF announced THEN
			PERFORM dblink_exec('store', format(
				'UPDATE ctl SET victim = NULL, go = false, victim_state = %L', outcome));
		END IF;
		BEGIN
			FOR i IN 1 .. depth LOOP
				PERFORM zk_lock_release(lk);
			END LOOP;
		EXCEPTION WHEN OTHERS THEN
			err := err + 1;
		END;
	END LOOP;
	PERFORM dblink_disconnect('store');
	RETURN format('wrote=%s lost=%s fenced=%s timeout=%s error=%s %s',
				  ok, lost, fenced, tmo, err, lasterr);
END $fn$;
SQL
$_->safe_psql('postgres', $client_sql) foreach ($ma, $mb);

sub store_q { return $store->safe_psql('postgres', $_[0]); }

my $conn = $store->connstr('postgres');
my $lock = q{mutex "checker"/it's ünïcödé…/-_:@ x};
my @clients;
foreach my $spec ([ $ma, 'a1' ], [ $ma, 'a2' ], [ $ma, 'a3' ],
	[ $mb, 'b1' ], [ $mb, 'b2' ], [ $mb, 'b3' ])
{
	my ($nd, $name) = @$spec;
	my $s = ZkLockTest::Session->new($nd);
	$s->send("SELECT client_loop('$name', \$conn\$$conn\$conn\$, \$lk\$$lock\$lk\$)");
	push @clients, [ $name, $s ];
}

my $faults = 0;

# Wait until $more sections of $phase were completed (by clients whose name
# matches $like, default all).
sub wait_sections
{
	my ($phase, $more, $what, $like) = @_;
	$like //= '%';
	my $q = "SELECT count(*) FROM sections WHERE phase = $phase AND client LIKE '$like'";
	my $base = store_q($q);
	ok(poll_until(sub { store_q($q) >= $base + $more }, timeout => 60),
		"$what: $more more critical sections completed");
}

# Make $victim (a client of $node) the victim: once it is inside its
# critical section, run $fault (given $node's status), wait until a client
# of the other instance ($others, a LIKE pattern) has completed a section,
# then let the victim go on; returns what the victim did.
sub fault_victim
{
	my ($phase, $victim, $node, $others, $what, $fault) = @_;
	store_q("UPDATE ctl SET victim = '$victim', go = false, victim_state = NULL");
	ok( poll_until(sub { store_q('SELECT victim_state LIKE \'in:%\' FROM ctl') eq 't' },
			timeout => 60),
		"phase $phase: $victim is inside its critical section");
	my $st = poll_status($node, sub { $_[0]{state} eq 'connected' });
	my $max = store_q('SELECT coalesce(max(id), 0) FROM sections');
	my $t = time;
	$fault->($st);
	$faults++;
	ok( poll_until(
			sub {
				store_q("SELECT count(*) FROM sections WHERE id > $max AND client LIKE '$others'") > 0;
			},
			timeout => 60),
		"phase $phase: while $victim sits in its section, the other instance's clients get the lock");
	note sprintf('phase %d: the other instance wrote %.1f s after %s', $phase, time - $t, $what);
	store_q('UPDATE ctl SET go = true');
	ok(poll_until(sub { store_q('SELECT victim_state NOT LIKE \'in:%\' FROM ctl') eq 't' },
			timeout => 60),
		"phase $phase: $victim leaves its section");
	return store_q('SELECT victim_state FROM ctl');
}

# b1 the victim: mb's worker paused until ZooKeeper has expired its session.
sub pause_victim
{
	my ($phase) = @_;
	my $old;
	my $outcome = fault_victim(
		$phase, 'b1', $mb, 'a%',
		"mb's worker was paused",
		sub {
			$old = $_[0];
			ZkFault::stop_worker($mb, $old->{worker_pid});
		});
	ok(!zk_session_alive($zk, 1, $old->{session_id}),
		"phase $phase: ZooKeeper has expired mb's session");
	signal_process($old->{worker_pid}, 'CONT');
	ok( poll_status($mb,
			sub { $_[0]{state} eq 'connected' && $_[0]{session_id} ne $old->{session_id} },
			timeout => 30),
		"phase $phase: mb's worker resumes with a new session");
	return $outcome;
}

# Network faults on ma's connection for $secs seconds, every 0.2 - 0.8 s
# one of: the reply of ma's next delete, create or multi withheld (the
# server applies it; the connection is reset), the connection cut, ma's
# reconnects refused for up to a second (well within its session).
sub net_faults
{
	my ($phase, $secs) = @_;
	my $st0 = $proxy->status;
	my @kinds = (
		sub { $proxy->withhold('delete') },
		sub { $proxy->withhold('anycreate') },
		sub { $proxy->withhold('multi') },
		sub { $proxy->cut },
		sub { $proxy->refuse(sprintf('%.2f', 0.3 + rand 0.7)); $proxy->cut });
	my $end = time + $secs;
	while (time < $end)
	{
		$kinds[ int rand @kinds ]->();
		$faults++;
		Time::HiRes::sleep(0.2 + rand 0.6);    # the faults' pace, not a wait
	}
	$proxy->disarm;
	$proxy->accept;
	my $st = $proxy->status;
	note sprintf('phase %d: network faults on ma: %d replies withheld, %d cuts',
		$phase, $st->{fired} - $st0->{fired}, $st->{cuts} - $st0->{cuts});
	ok(poll_status($ma, sub { $_[0]{state} eq 'connected' }, timeout => 30),
		"phase $phase: ma is connected after the network faults");
	return;
}

# ---------------------------------------------------------------------------
note 'phase 1: zk_lock_held guards the write';
# ---------------------------------------------------------------------------

wait_sections(1, 30, 'warm-up');

# fault: ZooKeeper restarted within ma's session timeout
my %st0 = map { $_->name => zk_status_of($_) } ($ma, $mb);
$zk->stop_node(1);
zk_restart_node($zk, 1);
$faults++;
my $sa = poll_status($ma,
	sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $st0{ma}{reconnects} },
	timeout => 30);
ok($sa, 'ma reconnects after the ZooKeeper restart');
is($sa->{session_losses} // '', $st0{ma}{session_losses}, 'ma kept its session');
my $sb = poll_status($mb, sub { $_[0]{state} eq 'connected' });
my $mb_lost = $sb->{session_losses} > $st0{mb}{session_losses};
note 'mb after the restart: ' . ($mb_lost ? 'session lost' : 'session kept');
wait_sections(1, 30, 'after the ZooKeeper restart');

# fault: mb's worker paused while its client b1 is in its critical section
is(pause_victim(1), 'lost',
	'b1 sees zk_lock_held false after the pause and does not write');
wait_sections(1, 20, 'after the pause', 'b%');

# fault: ma's worker terminated while its client a1 is in its critical
# section; the postmaster starts another, which has a new session
is( fault_victim(
		1, 'a1', $ma, 'b%',
		"ma's worker was terminated",
		sub {
			my ($old) = @_;
			signal_process($old->{worker_pid}, 'TERM');
			ok( poll_status($ma,
					sub {
						$_[0]{state} eq 'connected'
						  && $_[0]{worker_pid} ne $old->{worker_pid}
						  && $_[0]{session_id} ne $old->{session_id};
					},
					timeout => 60),
				"phase 1: ma's restarted worker has a new session");
		}),
	'lost',
	'a1 sees zk_lock_held false after its worker restarted and does not write');
wait_sections(1, 20, 'after the worker restart', 'a%');

net_faults(1, 4);
wait_sections(1, 20, 'after the network faults', 'a%');

# ---------------------------------------------------------------------------
note 'phase 2: fencing tokens guard the write';
# ---------------------------------------------------------------------------

store_q('UPDATE ctl SET phase = 2');
wait_sections(2, 30, 'phase 2 warm-up');
net_faults(2, 4);
wait_sections(2, 20, 'after the network faults', 'a%');
is(pause_victim(2), 'rejected',
	'b1 writes with its stale token after the pause: the store rejects it');
wait_sections(2, 20, 'after the second pause', 'b%');

store_q('UPDATE ctl SET stop = true');
my $lost_sections = 0;
foreach my $c (@clients)
{
	my ($name, $s) = @$c;
	my ($out, $err) = $s->result(timeout => 60);
	like($out // '', qr/^wrote=\d+ lost=(\d+) fenced=(\d+) timeout=\d+ error=\d+/,
		"client $name stops cleanly");
	$lost_sections += $1 + $2 if ($out // '') =~ /lost=(\d+) fenced=(\d+)/;
	note "client $name: " . ($out // 'no result');
	$s->quit;
}
# The victims lost their lock three times (b1 twice, a1 once); one more
# section may have been lost when mb lost its session in the ZooKeeper
# restart.  Any other loss is a lock given up too early (a re-entrant
# release that let the node go, say).
cmp_ok($lost_sections, '<=', 3 + ($mb_lost ? 1 : 0),
	'clients lost their lock (or were fenced) only in the faults');

# ---------------------------------------------------------------------------
note 'checking the history';
# ---------------------------------------------------------------------------

my ($sections1, $counter1) =
  split /\|/, store_q('SELECT (SELECT count(*) FROM sections WHERE phase = 1), '
	  . '(SELECT value FROM counter WHERE id = 1)');
my $overlaps1 = store_q(
	'SELECT count(*) FROM sections a JOIN sections b ON a.id < b.id '
	  . 'WHERE a.phase = 1 AND b.phase = 1 '
	  . 'AND a.t_start < b.t_end AND b.t_start < a.t_end');
my $inversions1 = store_q(
	'SELECT count(*) FROM (SELECT token, lag(token) OVER (ORDER BY t_start) AS prev '
	  . 'FROM sections WHERE phase = 1) s WHERE token <= prev');
my $clients1 = store_q('SELECT count(DISTINCT client) FROM sections WHERE phase = 1');
my $local1 = store_q('SELECT count(*) FROM sections WHERE phase = 1 AND token % 1024 <> 0');
my $reentered1 = store_q('SELECT count(*) FROM sections WHERE phase = 1 AND reentered');
cmp_ok($sections1, '>=', 80, 'phase 1: enough critical sections to mean something');
cmp_ok($local1, '>', 0, "phase 1: $local1 sections were local hand-offs");
cmp_ok($reentered1, '>', 0, "phase 1: in $reentered1 sections the lock was taken again and given back");
is($clients1, 6, 'phase 1: every client completed sections');
is($counter1, $sections1, 'phase 1: counter == completed critical sections (no lost update)');
is($overlaps1, 0, 'phase 1: no two critical sections overlap');
is($inversions1, 0, 'phase 1: fencing tokens grow from each section to the next');

my ($sections2, $counter2) =
  split /\|/, store_q('SELECT (SELECT count(*) FROM sections WHERE phase = 2), '
	  . '(SELECT value FROM counter WHERE id = 2)');
my $overlaps2 = store_q(
	'SELECT count(*) FROM sections a JOIN sections b ON a.id < b.id '
	  . 'WHERE a.phase = 2 AND b.phase = 2 '
	  . 'AND a.t_start < b.t_end AND b.t_start < a.t_end');
my $local2 = store_q('SELECT count(*) FROM sections WHERE phase = 2 AND token % 1024 <> 0');
cmp_ok($sections2, '>=', 50, 'phase 2: enough accepted writes to mean something');
cmp_ok($local2, '>', 0, "phase 2: $local2 accepted writes were local hand-offs");
is($counter2, $sections2, 'phase 2: counter == accepted writes (zero lost updates)');

my $lost_updates = ($sections1 - $counter1) + ($sections2 - $counter2);
note "phase 1: $sections1 critical sections ($local1 local hand-offs, $reentered1 re-entered), counter $counter1, "
  . "$overlaps1 overlaps, $inversions1 token inversions";
note "phase 2: $sections2 accepted writes, counter $counter2, "
  . "$overlaps2 overlapping sections (harmless under fencing)";
note "faults injected: $faults; violations: "
  . ($overlaps1 + $inversions1 + abs($lost_updates));

foreach my $nd ($ma, $mb)
{
	ok($nd->poll_query_until('postgres', 'SELECT count(*) = 0 FROM zk_locks'),
		$nd->name . ': zk_locks empty after the clients ended');
}
my @left;
ok(poll_until(sub { @left = zk_lock_nodes($zk, '/zklock'); !@left }, timeout => 30),
	'no node left in ZooKeeper')
  or diag "left: @left";
note sprintf('080_mutex_checker took %.0f s', time - $T0);

$_->stop foreach ($ma, $mb, $store);
done_testing();

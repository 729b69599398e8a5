# 060_faults.pl
#    zklock under faults: ZooKeeper restarted within the session timeout,
#    ZooKeeper down, the worker paused past the session timeout, a backend
#    killed with SIGKILL (crash restart), the worker terminated alone, churn
#    while ZooKeeper goes away and comes back, and container parents reaped
#    while requests arrive.  The rule checked throughout: never two holders
#    that both believe they hold a lock, no request that hangs, and no node
#    left in ZooKeeper that nobody owns.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(sqlstate zk_status_of poll_status poll_session signal_process
  wait_process_state zk_tree zk_lock_nodes zk_exists children_become
  zk_restart_node zk_session_alive wait_waiting zk_wait_idle);

my $T0 = time;

# tickTime 500 ms (so sessions of 4 s expire promptly); test/zk sets
# minSessionTimeout=1000 and maxSessionTimeout=60000, so 20 s is allowed.
my $zk = ZkLockTest::zk_start(tick => 500);

sub session { return ZkLockTest::Session->new(@_); }

sub children { return ZkLockTest::zk_children($zk, "/zklock/$_[0]"); }

# The znode of the zk_locks row of backend $pid for lock $name, or ''.
sub znode_of
{
	my ($node, $pid, $name) = @_;
	return $node->safe_psql('postgres',
		"SELECT znode FROM zk_locks WHERE pid = $pid AND name = '$name'");
}

# ===========================================================================
note '(1) ZooKeeper stopped and restarted within the session timeout';
# ===========================================================================

# 20 s: the outage below lasts until zk_lock_held turns false (half the
# timeout, 10 s at most) plus a restart of ZooKeeper, and must stay within
# the timeout.  PostgreSQL::Test::Cluster turns restart_after_crash off;
# (4) needs it.
my $slow = ZkLockTest::pg_node('slow', $zk, 'zklock.session_timeout' => '20000',
	'restart_after_crash' => 'on');
$slow->safe_psql('postgres',
	'CREATE TABLE grant_log (id serial PRIMARY KEY, who text NOT NULL)');

my $st0 = poll_status($slow, sub { $_[0]{state} eq 'connected' });
is($st0->{session_timeout_ms}, '20000', 'slow: negotiated session timeout 20 s');

my $h = session($slow);
is($h->query_ok("SELECT zk_lock_acquire('r1')"), 't', 'holder acquires r1');
my $token = $h->query_ok("SELECT zk_lock_token('r1')");
my ($x1, $x2) = (session($slow), session($slow));
$x1->query_ok('BEGIN');
is($x1->query_ok("SELECT zk_lock_acquire_xact('r2')"),
	't', 'a transaction holds r2 in transaction scope');
$x2->query_ok('BEGIN');
is($x2->query_ok("SELECT zk_lock_acquire_xact('r4')"),
	't', 'another transaction holds r4 in transaction scope');
my $h3 = session($slow);
is($h3->query_ok("SELECT zk_lock_acquire('r3')"), 't', 'a third session holds r3');
my $w3 = session($slow);
# (with local hand-off, the default, the waiters queue inside the instance
# behind its one node, shown in zk_locks as what they wait on: they have no
# node of their own)
$w3->send("SELECT zk_lock_acquire('r3')");
ZkLockTest::wait_for_extension_wait($slow, $w3);
my @w;
for my $i (0, 1)
{
	$w[$i] = session($slow);
	$w[$i]->send("SELECT zk_lock_acquire('r1'); "
		  . "INSERT INTO grant_log (who) VALUES ('w$i')");
	ZkLockTest::wait_for_extension_wait($slow, $w[$i]);
}
my @r1_before = children('r1');
is(scalar @r1_before, 1, 'one node for the holder and its two waiters');
is( $slow->safe_psql(
		'postgres',
		"SELECT count(*) FROM zk_locks WHERE name = 'r1' AND state = 'waiting' "
		  . "AND znode IS NULL AND waiting_on = '$r1_before[0]'"),
	'2',
	'the waiters queue behind that node (no node of their own)');

my $t_stop = time;
$zk->stop_node(1);
ok(poll_status($h, sub { $_[0]{state} eq 'suspended' }, timeout => 10),
	'the worker notices the connection loss: state suspended');
is($h3->query_ok("SELECT zk_lock_release('r3')"), 't',
	'a release during the outage returns at once');
# r3's waiter queues behind the instance's node (local hand-off), which
# holds r3 in a session confirmed less than half a timeout ago: it may be
# granted now, exactly as long as the releasing holder could still have
# believed it held r3 (see docs/failures.md, Safety argument); r1's waiters, behind a
# holder that does not let go, keep waiting.
ok(poll_session($h, "SELECT zk_lock_held('r1')", 'f', timeout => 20),
	'holder: zk_lock_held turns false while the session cannot be confirmed');
note sprintf('held false %.1f s into the outage', time - $t_stop);
my ($out, $err) = $x1->query('COMMIT');
is(sqlstate($err), '40001',
	'a transaction-scope holder cannot commit while its lock is unconfirmed (40001)');
ok(!grep({ $_->done } @w), 'waiters of r1 keep waiting while ZooKeeper is down');

zk_restart_node($zk, 1);
my $st1 = poll_status($h,
	sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $st0->{reconnects} },
	timeout => 30);
my $outage = time - $t_stop;
ok($st1, 'the worker reconnects after the restart');
note sprintf('ZooKeeper outage seen by the test: %.1f s', $outage);
$st1 //= {};
is($st1->{session_id} // '', $st0->{session_id}, 'the session is resumed, not replaced');
is($st1->{session_losses} // '', $st0->{session_losses}, 'no session loss counted');
cmp_ok($st1->{reconnects} // 0, '>', $st0->{reconnects}, 'reconnects incremented');

ok(poll_session($h, "SELECT zk_lock_held('r1')", 't', timeout => 10),
	'holder: zk_lock_held true again after the reconnect');
is($h->query_ok("SELECT zk_lock_token('r1')"), $token, 'holder: same fencing token');
is_deeply([ children('r1') ], \@r1_before,
	'holder and waiters keep their nodes (and so their places)');
ok(!$w[0]->done && !$w[1]->done, 'waiters of r1 still wait');
($out, $err) = $w3->result(timeout => 30);
is($out, 't', 'the release made during the outage is carried out: r3\'s waiter is granted');
is($w3->query_ok("SELECT zk_lock_held('r3')"), 't', 'and holds r3 once the session is confirmed');
is($w3->query_ok("SELECT zk_lock_release('r3')"), 't', 'and releases r3');
($out, $err) = $x2->query('COMMIT');
is($err, '', 'a transaction-scope holder commits after the reconnect: nothing was lost');

is($h->query_ok("SELECT zk_lock_release('r1')"), 't', 'holder releases');
($out, $err) = $w[0]->result(timeout => 30);
is($out, 't', 'first waiter is granted');
ok(!$w[1]->done, 'second waiter still waits while the first holds');
is($w[0]->query_ok("SELECT zk_lock_release('r1')"), 't', 'first waiter releases');
($out, $err) = $w[1]->result(timeout => 30);
is($out, 't', 'second waiter is granted');
is($w[1]->query_ok("SELECT zk_lock_release('r1')"), 't', 'second waiter releases');
is($slow->safe_psql('postgres', 'SELECT string_agg(who, \',\' ORDER BY id) FROM grant_log'),
	'w0,w1', 'waiters were granted in arrival order');
is_deeply([ zk_lock_nodes($zk, "/zklock/$_") ], [], "no node left under $_")
  foreach qw(r1 r2 r3 r4);
$_->quit foreach ($h, $x1, $x2, $h3, $w3, @w);

# ===========================================================================
note '(1b) the worker paused for most of its session timeout keeps its session';
# ===========================================================================
# The worker stays paused until ZooKeeper has heard nothing from it for two
# thirds of its 20 s session timeout and half a second more, as the server
# counts (whenever the worker's last probe was): longer than the two thirds
# after which the client drops a silent connection (and closes the socket
# it just reported), well short of the session timeout.  The worker must
# go on, not fail: usually it reconnects; when the reply to a probe sent
# just before the pause is waiting when it resumes, the connection is alive
# and stays.  Either way the same worker confirms the same session again.
{
	my $p = session($slow);
	is($p->query_ok("SELECT zk_lock_acquire('p1')"), 't', 'a session holds p1');
	my $st = poll_status($slow, sub { $_[0]{state} eq 'connected' });
	ZkFault::stop_worker($slow, $st->{worker_pid});
	my $idle = zk_wait_idle($zk, 1, $st->{session_id}, 20000 * 2 / 3 + 500,
		timeout => 30);
	signal_process($st->{worker_pid}, 'CONT');
	ok(defined $idle,
		'ZooKeeper hears nothing from the paused worker for two thirds of its session timeout');
	cmp_ok($idle // 20000, '<', 20000, 'the pause ends within the session timeout');
	note "the worker resumed after ${\ ($idle // '?') } ms of silence";
	# vouched for again only once the session is confirmed after the pause
	ok(poll_session($p, "SELECT zk_lock_held('p1')", 't', timeout => 30),
		'p1 is held again');
	my $st2 = zk_status_of($p);
	is($st2->{state}, 'connected', 'the worker is connected after the pause');
	is($st2->{worker_pid}, $st->{worker_pid}, 'the same worker: it did not fail');
	is($st2->{session_id}, $st->{session_id}, 'it kept its session');
	note 'reconnects during the pause: ' . ($st2->{reconnects} - $st->{reconnects});
	is($p->query_ok("SELECT zk_lock_release('p1')"), 't', 'and released');
	$p->quit;
}

# ===========================================================================
note '(2) ZooKeeper down: requests fail in time with class 08, then recover';
# ===========================================================================

my $fa = ZkLockTest::pg_node('fa', $zk);
my $fb = ZkLockTest::pg_node('fb', $zk);
poll_status($_, sub { $_[0]{state} eq 'connected' }) foreach ($fa, $fb);

my $ha = session($fa);
is($ha->query_ok("SELECT zk_lock_acquire('d1')"), 't', 'holder on fa acquires d1');
my $wa = session($fa);
$wa->query_ok('SET zklock.connect_timeout = 1000');
$wa->send("SELECT zk_lock_acquire('d1')");
ZkLockTest::wait_for_extension_wait($fa, $wa);    # behind ha, in fa
my $sfa = zk_status_of($fa);

my $t_down = time;
$zk->stop_node(1);
ok(poll_status($ha, sub { $_[0]{state} ne 'connected' }, timeout => 10),
	'fa notices that ZooKeeper is gone');
ok(poll_session($ha, "SELECT zk_lock_held('d1')", 'f', timeout => 10),
	'the holder is told: zk_lock_held false (no confirmation for half the timeout)');
note sprintf('held false %.1f s into the outage', time - $t_down);

my $n = session($fa);
$n->query_ok('SET zklock.connect_timeout = 1000');
foreach my $call ("zk_lock_try('d2')", "zk_lock_acquire('d2')",
	"zk_lock_acquire('d2', 60000)", "zk_lock_acquire_xact('d2')")
{
	my $t0 = time;
	($out, $err) = $n->query("SELECT $call");
	my $elapsed = time - $t0;
	like(sqlstate($err), qr/^08/, "$call fails with an SQLSTATE of class 08");
	like($err, qr/\Q${\ $zk->connect }\E/, "$call: the message names the hosts");
	cmp_ok($elapsed, '<', 4, "$call: gives up after about zklock.connect_timeout");
}

# the waiter queued before the outage must not hang: its session is given up
# after the session timeout, then it has connect_timeout to get a new one
($out, $err) = $wa->result(timeout => 30);
my $wa_elapsed = time - $t_down;
ok(defined $out, 'the waiter queued before the outage does not hang');
like(sqlstate($err), qr/^08/, 'it fails with class 08 while ZooKeeper is down');
note sprintf('waiter failed %.1f s into the outage: %s', $wa_elapsed, $err // '');

ok( poll_until(
		sub {
			$fa->safe_psql('postgres',
				"SELECT state FROM zk_locks WHERE pid = " . $ha->pid) eq 'lost';
		},
		timeout => 30),
	'once the session is given up the holding shows as lost in zk_locks');
($out, $err) = $ha->query("SELECT zk_lock_held('d1')");
is($out, 'f', 'zk_lock_held of the lost holding is false');
like($err, qr/WARNING: .*zklock lock "d1" was lost/, 'with a WARNING that it was lost');
is($ha->query_ok("SELECT count(*) FROM zk_locks WHERE pid = " . $ha->pid),
	'0', 'and the holding is dropped');
($out, $err) = $ha->query("SELECT zk_lock_release('d1')");
is($out, 'f', 'releasing it afterwards returns false');
like($err, qr/WARNING: .*zklock lock "d1" was lost before this release/,
	'with a WARNING that says it was lost (not "you don\'t own")');
($out, $err) = $ha->query("SELECT zk_lock_release('d1')");
like($err, qr/WARNING: .*you don't own a zklock lock named "d1"/,
	'a second release: the usual WARNING of a lock not held');

zk_restart_node($zk, 1);
ok( poll_session(
		$n, "SELECT zk_lock_try('d1')", 't', timeout => 30),
	'fa recovers without intervention: a lock can be taken again');
is($fb->safe_psql('postgres', "SELECT zk_lock_try('d1')"),
	'f', 'and it excludes the other instance');
is($n->query_ok("SELECT zk_lock_release('d1')"), 't', 'released');
is($fb->safe_psql('postgres',
		"SELECT zk_lock_acquire('d1', 10000) AND zk_lock_release('d1')"),
	't', 'the other instance gets it then');
my $sfa2 = poll_status($fa, sub { $_[0]{state} eq 'connected' });
cmp_ok($sfa2->{session_losses}, '>', $sfa->{session_losses},
	'fa counted the session loss');
is_deeply([ children_become($zk, '/zklock/d1', []) ], [], 'no node left under d1');
is_deeply([ children_become($zk, '/zklock/d2', []) ], [], 'no node left under d2');
$_->quit foreach ($ha, $wa, $n);

# ===========================================================================
note '(3) the worker paused (SIGSTOP) past the session timeout';
# ===========================================================================

# Never two holders that both believe they hold a lock: a holder on fa
# watches its own zk_lock_held every 2 ms (held_until_false: the clock at
# the start of the last call that said true, and of the first that said
# false), a waiter on fb reads the clock once its acquire has returned
# (acquire_clocked), and the grant must come after the last true.  (One
# clock: both instances run on this machine.  A grant less than a call's
# length after the last true would slip through; a holder that keeps
# believing for longer does not.)
$fa->safe_psql('postgres', <<'SQL');
CREATE FUNCTION held_until_false(lock text, timeout_s float8) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
	t timestamptz;
	last_true timestamptz;
BEGIN
	LOOP
		t := clock_timestamp();
		IF NOT zk_lock_held(lock) THEN
			RETURN coalesce(extract(epoch FROM last_true)::text, '-') || ' '
			  || extract(epoch FROM t);
		END IF;
		last_true := t;
		IF t > t0 + make_interval(secs => timeout_s) THEN
			RAISE EXCEPTION 'zk_lock_held(%) still true after % s', lock, timeout_s;
		END IF;
		PERFORM pg_sleep(0.002);
	END LOOP;
END $$;
SQL

sub acquire_clocked
{
	my ($lock) = @_;
	return "SELECT g, extract(epoch FROM clock_timestamp()) "
	  . "FROM (SELECT zk_lock_acquire('$lock') AS g OFFSET 0) s";
}

# Start held_until_false in session $s of $node and wait until it has seen
# the lock held once (it sleeps only after a true).
sub watch_held
{
	my ($node, $s, $lock) = @_;
	# (60 s: it returns as soon as zk_lock_held is false, 2 s into the pause)
	$s->send("SELECT held_until_false('$lock', 60)");
	# fails at once should the function end before it was seen watching
	poll_until(
		sub {
			$s->done
			  || $node->safe_psql('postgres',
				"SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = "
				  . $s->pid) eq 't';
		},
		timeout => 60);
	ok(!$s->done, "the holder of $lock watches zk_lock_held")
	  or diag 'held_until_false ended: ' . join(' / ', $s->peek);
	return;
}

# What held_until_false said: (last true, first false) as epoch seconds,
# each undef when missing.
sub held_watch_result
{
	my ($s) = @_;
	my ($out, $err) = $s->result(timeout => 30);
	my ($last_true, $first_false) = ($out // '') =~ /^(\S+) (\S+)$/;
	diag "held_until_false: \"" . ($out // '') . "\", \"$err\""
	  unless defined $first_false;
	$last_true = undef if defined $last_true && $last_true eq '-';
	return ($last_true, $first_false);
}

# The result of acquire_clocked: (granted, the clock then).
sub clocked_result
{
	my ($s) = @_;
	my ($out, $err) = $s->result(timeout => 30);
	diag "acquire: \"" . ($out // '') . "\", \"$err\"" if ($err // '') ne '';
	return split /\|/, $out // '';
}

my $h1 = session($fa);
is($h1->query_ok("SELECT zk_lock_acquire('p1')"), 't', 'fa holds p1');
my $x3 = session($fa);
$x3->query_ok('BEGIN');
is($x3->query_ok("SELECT zk_lock_acquire_xact('p2')"), 't',
	'a transaction on fa holds p2 in transaction scope');
my $hb3 = session($fb);
is($hb3->query_ok("SELECT zk_lock_acquire('p3')"), 't', 'fb holds p3');
my $wa3 = session($fa);
$wa3->send("SELECT zk_lock_acquire('p3')");
wait_waiting($fa, $wa3, $zk, '/zklock/p3', 2);
my $wb = session($fb);
$wb->send(acquire_clocked('p1'));
wait_waiting($fb, $wb, $zk, '/zklock/p1', 2);
my $wb2 = session($fb);
$wb2->send("SELECT zk_lock_acquire('p2')");
wait_waiting($fb, $wb2, $zk, '/zklock/p2', 2);

$sfa = poll_status($fa, sub { $_[0]{state} eq 'connected' });
my $wpid = $sfa->{worker_pid};
watch_held($fa, $h1, 'p1');
ZkFault::stop_worker($fa, $wpid);
my $t_pause = time;
note "fa's worker $wpid stopped; session $sfa->{session_id}";

# the holder of p3 on fb lets go while fa's session still lives: the waiter
# of fa is next in ZooKeeper, but its worker cannot act on it
is($hb3->query_ok("SELECT zk_lock_release('p3')"), 't', 'fb releases p3');

my ($last_true, $first_false) = held_watch_result($h1);
ok(defined $first_false, 'holder on fa: zk_lock_held turns false during the pause');
my $t_false = ($first_false // $t_pause + 99) - $t_pause;
cmp_ok($t_false, '<', 3.0,
	'held is false within about half the session timeout (2 s)');

my ($granted, $t_granted) = clocked_result($wb);
is($granted, 't', 'fb is granted p1 once ZooKeeper expired fa\'s session');
cmp_ok($t_granted // 0, '>', $last_true // 9e9,
	'fb got p1 only after fa\'s holder was last told it held p1');
note sprintf('held false after %.2f s, fb granted after %.2f s of pause',
	$t_false, ($t_granted // 0) - $t_pause);
is($h1->query_ok("SELECT zk_lock_held('p1')"), 'f',
	'the paused instance\'s holder still says not held');
is($h1->query_ok("SELECT zk_lock_token('p1')"), '',
	'and gives no fencing token');
ok(!zk_session_alive($zk, 1, $sfa->{session_id}),
	'ZooKeeper no longer knows fa\'s session');
is($wb2->result(timeout => 30), 't', 'fb is granted p2 as well');
($out, $err) = $x3->query('COMMIT');
is(sqlstate($err), '40001',
	'COMMIT of the transaction holding the lost p2 fails with 40001');
is($hb3->query_ok("SELECT zk_lock_acquire('p3', 10000)"),
	't', 'fb takes p3 again: fa\'s waiter node expired with its session');

signal_process($wpid, 'CONT');
my $sfa3 = poll_status($fa,
	sub { $_[0]{state} eq 'connected' && $_[0]{session_id} ne $sfa->{session_id} },
	timeout => 30);
ok($sfa3, 'after SIGCONT the worker opens a new session');
cmp_ok($sfa3->{session_losses} // 0, '>', $sfa->{session_losses},
	'the session loss is counted');

# fa's waiter of p3 must start over in the new session, behind the holder
# from fb: it must not be granted on the strength of its old node
ok( poll_until(sub { $wa3->done || (() = children('p3')) == 2 }, timeout => 30),
	'fa\'s waiter re-queues or ends');
ok(!$wa3->done, 'fa\'s waiter of p3 is not granted while fb holds it');
is($hb3->query_ok("SELECT zk_lock_release('p3')"), 't', 'fb releases p3');
($out, $err) = $wa3->result(timeout => 30);
is($out, 't', 'fa\'s waiter is granted after fb let go');
is($wa3->query_ok("SELECT zk_lock_release('p3')"), 't', 'and releases');

is( $fa->safe_psql('postgres',
		"SELECT state FROM zk_locks WHERE pid = " . $h1->pid . " AND name = 'p1'"),
	'lost',
	'zk_locks shows fa\'s holding of p1 as lost');
($out, $err) = $h1->query("SELECT zk_lock_release('p1')");
is($out, 'f', 'releasing the lost p1 returns false');
like($err, qr/WARNING: .*"p1" was lost/, 'with a WARNING');

# no orphans: what is left under p1 and p2 belongs to fb's session
my $sfb = zk_status_of($fb);
my @left = grep { $_->{ephemeral} ne '' } (zk_tree($zk, '/zklock/p1'), zk_tree($zk, '/zklock/p2'));
is(scalar @left, 2, 'one node each under p1 and p2');
is_deeply([ map { $_->{ephemeral} } @left ], [ ($sfb->{session_id}) x 2 ],
	'both belong to fb\'s session');
is($wb->query_ok("SELECT zk_lock_release('p1')"), 't', 'fb releases p1');
is($wb2->query_ok("SELECT zk_lock_release('p2')"), 't', 'fb releases p2');
is($h1->query_ok("SELECT zk_lock_acquire('p1', 10000)"), 't', 'fa takes p1 again');
is($h1->query_ok("SELECT zk_lock_release('p1')"), 't', 'and releases it');
is_deeply([ zk_lock_nodes($zk, "/zklock/$_") ], [], "no node left under $_")
  foreach qw(p1 p2 p3);
$_->quit foreach ($h1, $x3, $hb3, $wa3, $wb, $wb2);

# ===========================================================================
note '(4) a backend killed with SIGKILL: crash restart ends the old session';
# ===========================================================================

my $hk = session($slow);
is($hk->query_ok("SELECT zk_lock_acquire('k1')"), 't', 'slow holds k1');
my $wk = session($slow);
$wk->send("SELECT zk_lock_acquire('k1')");
ZkLockTest::wait_for_extension_wait($slow, $wk);    # behind hk, in slow
my $wkb = session($fa);
$wkb->send("SELECT zk_lock_acquire('k1')");
my @k1 = wait_waiting($fa, $wkb, $zk, '/zklock/k1', 2);    # slow's node, fa's
my $wkb_node = znode_of($fa, $wkb->pid, 'k1');
$wkb_node =~ s{.*/}{};
my $sslow = zk_status_of($slow);

my $t_kill = time;
kill 'KILL', $hk->pid;
my @k1_after = children_become($zk, '/zklock/k1', [$wkb_node], timeout => 30);
my $gone = time - $t_kill;
is_deeply(\@k1_after, [$wkb_node], 'the nodes of slow\'s old session are gone');
cmp_ok($gone, '<', 5,
	'within a few seconds, well under the session timeout (20 s)');
note sprintf('slow\'s nodes went %.2f s after the SIGKILL', $gone);
is($wkb->result(timeout => 30), 't', 'the waiter on fa is granted');
ok( poll_until(
		sub {
			$slow->log_contains(
				qr/ending ZooKeeper session \Q$sslow->{session_id}\E left by its previous run/);
		},
		timeout => 10),
	'slow\'s new worker ended the session of its previous run');
ok(!zk_session_alive($zk, 1, $sslow->{session_id}),
	'ZooKeeper no longer knows the old session');
$wk->result(timeout => 30);
ok(!$wk->alive, 'the waiting backend on slow went with the crash restart');
$_->quit foreach ($hk, $wk);
my $sslow2 = poll_status($slow,
	sub { $_[0]{state} eq 'connected' && $_[0]{session_id} ne $sslow->{session_id} });
ok($sslow2, 'slow has a new session after the restart');
is($slow->safe_psql('postgres', "SELECT zk_lock_try('k1')"), 'f',
	'slow works and sees k1 held by fa');
is($wkb->query_ok("SELECT zk_lock_release('k1')"), 't', 'fa releases k1');
is($slow->safe_psql('postgres',
		"SELECT zk_lock_acquire('k1', 10000) AND zk_lock_release('k1')"),
	't', 'slow takes and releases k1');
is_deeply([ children_become($zk, '/zklock/k1', []) ], [], 'no node left under k1');
$wkb->quit;

# ===========================================================================
note '(5) the worker terminated alone (SIGTERM)';
# ===========================================================================

my $h5 = session($fa);
is($h5->query_ok("SELECT zk_lock_acquire('w1')"), 't', 'fa holds w1');
my $x5 = session($fa);
$x5->query_ok('BEGIN');
is($x5->query_ok("SELECT zk_lock_acquire_xact('w2')"), 't',
	'a transaction on fa holds w2');
my $w5 = session($fa);
$w5->send("SELECT zk_lock_acquire('w1')");
ZkLockTest::wait_for_extension_wait($fa, $w5);    # behind h5, in fa
my $wb5 = session($fb);
$wb5->send(acquire_clocked('w1'));
wait_waiting($fb, $wb5, $zk, '/zklock/w1', 2);    # fa's node, fb's

$sfa = poll_status($fa, sub { $_[0]{state} eq 'connected' });
$wpid = $sfa->{worker_pid};
watch_held($fa, $h5, 'w1');
my $t_term = time;
kill 'TERM', $wpid;
ok(wait_process_state($wpid, sub { !defined $_[0] || $_[0] eq 'Z' }, timeout => 10),
	'the worker exits on SIGTERM');
my ($last_true5, $first_false5) = held_watch_result($h5);
ok(defined $first_false5, 'the holder is told: zk_lock_held false');
my ($granted5, $t_granted5) = clocked_result($wb5);
is($granted5, 't', 'fb is granted w1: the closed session took fa\'s nodes along');
my $t_wb5 = ($t_granted5 // $t_term + 99) - $t_term;
cmp_ok($t_wb5, '<', 4, 'at once, not after a session timeout');
cmp_ok($t_granted5 // 0, '>', $last_true5 // 9e9,
	'fb got w1 only after fa\'s holder was last told it held w1');
note sprintf('held false %.3f s, fb granted %.3f s after the SIGTERM',
	($first_false5 // $t_term + 99) - $t_term, $t_wb5);

my $sfa5 = poll_status($fa,
	sub { $_[0]{worker_pid} ne '' && $_[0]{worker_pid} != $wpid && $_[0]{state} eq 'connected' },
	timeout => 30);
ok($sfa5, 'the postmaster restarts the worker, which connects again');
ok( poll_until(sub { $w5->done || (() = children('w1')) == 2 }, timeout => 30),
	'fa\'s waiter waits again with a new node, or ends');
my $w5_waits = !$w5->done;
my ($w5_out, $w5_err) = $w5_waits ? (undef, '') : $w5->result;
ok($w5_waits || ($w5_out // '') ne 't',
	'fa\'s waiter is not granted while fb holds w1');
note "fa's waiter ended with \"$w5_err\"" unless $w5_waits;
is($fa->safe_psql('postgres',
		"SELECT state FROM zk_locks WHERE pid = " . $h5->pid),
	'lost', 'zk_locks shows the holding as lost');
($out, $err) = $h5->query("SELECT zk_lock_release('w1')");
is($out, 'f', 'releasing the lost w1 returns false');
like($err, qr/WARNING: .*"w1" was lost/, 'with a WARNING');
($out, $err) = $x5->query('COMMIT');
is(sqlstate($err), '40001', 'the transaction holding w2 fails at COMMIT with 40001');
ok($fa->log_contains(qr/zklock lock "w1" held by process ${\ $h5->pid } was lost/),
	'the server log names the lost holding');

is($wb5->query_ok("SELECT zk_lock_release('w1')"), 't', 'fb releases w1');
if ($w5_waits)
{
	($out, $err) = $w5->result(timeout => 30);
	is($out, 't', 'fa\'s waiter is granted then');
	is($w5->query_ok("SELECT zk_lock_release('w1')"), 't', 'and releases');
}
is($h5->query_ok("SELECT zk_lock_acquire('w1', 10000)"), 't', 'locks work again on fa');
is($fb->safe_psql('postgres', "SELECT zk_lock_try('w1')"), 'f', 'and exclude fb');
is($h5->query_ok("SELECT zk_lock_release('w1')"), 't', 'released');
is_deeply([ zk_lock_nodes($zk, "/zklock/$_") ], [], "no node left under $_")
  foreach qw(w1 w2);
$_->quit foreach ($h5, $x5, $w5, $wb5);

# ===========================================================================
note '(7) churn while ZooKeeper goes away and comes back';
# ===========================================================================

# Each cycle's critical section runs from just after the acquire returned
# to just before a zk_lock_held that still says true (a holder that lost
# its lock meanwhile records nothing); the sections recorded, by both
# instances, must not overlap on any lock.
my $churn_sql = <<'SQL';
CREATE TABLE churn_ctl (stop boolean NOT NULL);
INSERT INTO churn_ctl VALUES (false);
CREATE SEQUENCE churn_ok;
CREATE SEQUENCE churn_bad;
CREATE TABLE churn_cs (lock text NOT NULL, t0 timestamptz NOT NULL,
	t1 timestamptz NOT NULL);
CREATE FUNCTION churn(names integer) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	n text;
	got boolean;
	t0 timestamptz;
	t1 timestamptz;
	ok integer := 0;
	tmo integer := 0;
	err integer := 0;
	lost integer := 0;
BEGIN
	PERFORM set_config('zklock.connect_timeout', '700', false);
	WHILE NOT (SELECT stop FROM churn_ctl) LOOP
		n := 'churn' || floor(random() * names)::integer;
		BEGIN
			got := zk_lock_acquire(n, 1000);
		EXCEPTION WHEN OTHERS THEN
			err := err + 1;
			PERFORM nextval('churn_bad');
			CONTINUE;
		END;
		IF NOT got THEN
			tmo := tmo + 1;
			PERFORM nextval('churn_bad');
			CONTINUE;
		END IF;
		t0 := clock_timestamp();
		PERFORM pg_sleep(random() * 0.01);
		t1 := clock_timestamp();
		IF zk_lock_held(n) THEN
			INSERT INTO churn_cs VALUES (n, t0, t1);
		END IF;
		IF zk_lock_release(n) THEN
			ok := ok + 1;
			PERFORM nextval('churn_ok');
		ELSE
			lost := lost + 1;
		END IF;
	END LOOP;
	RETURN format('ok=%s timeout=%s error=%s lost=%s', ok, tmo, err, lost);
END $$;
SQL
$fa->safe_psql('postgres', $churn_sql);
$fb->safe_psql('postgres', $churn_sql);

sub churn_count
{
	my ($node, $seq) = @_;
	return $node->safe_psql('postgres',
		"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM $seq");
}

# wait until both instances completed $more acquire/release cycles
sub churn_progress
{
	my ($more, $what) = @_;
	my %base = map { $_->name => churn_count($_, 'churn_ok') } ($fa, $fb);
	ok( poll_until(
			sub {
				!grep { churn_count($_, 'churn_ok') < $base{ $_->name } + $more }
				  ($fa, $fb);
			},
			timeout => 60),
		"$what: both instances complete acquire/release cycles");
}

my @churners = ((map { session($fa) } 1 .. 3), (map { session($fb) } 1 .. 2));
$_->send('SELECT churn(3)') foreach @churners;
churn_progress(30, 'before the faults');

my %bad0 = map { $_->name => churn_count($_, 'churn_bad') } ($fa, $fb);
my %losses;
my @cycles = (
	[ 'stop, start at once', sub { $zk->stop_node(1) }, sub { } ],
	[ 'SIGKILL, start at once', sub { $zk->kill_node(1) }, sub { } ],
	[
		'stop, start once both sessions were given up',
		sub {
			%losses = map { $_->name => zk_status_of($_)->{session_losses} } ($fa, $fb);
			$zk->stop_node(1);
		},
		sub {
			foreach my $nd ($fa, $fb)
			{
				my $l = $losses{ $nd->name };
				ok(poll_status($nd, sub { $_[0]{session_losses} > $l }, timeout => 30),
					$nd->name . ' gives its session up');
			}
		}
	]);
push @cycles, [
	'the worker of fa terminated (ZooKeeper stays up)',
	sub {
		my $st = poll_status($fa, sub { $_[0]{state} eq 'connected' });
		kill 'TERM', $st->{worker_pid};
		ok( poll_status($fa,
				sub { $_[0]{worker_pid} ne '' && $_[0]{worker_pid} != $st->{worker_pid}
					  && $_[0]{state} eq 'connected' },
				timeout => 30),
			'fa\'s worker is restarted and connects');
	},
	sub { },
	'no restart' ];
foreach my $c (@cycles)
{
	my ($what, $down, $wait, $no_restart) = @$c;
	$down->();
	$wait->();
	zk_restart_node($zk, 1) unless $no_restart;
	churn_progress(20, "after \"$what\"");
}
my %bad1 = map { $_->name => churn_count($_, 'churn_bad') } ($fa, $fb);
cmp_ok($bad1{fa} - $bad0{fa} + $bad1{fb} - $bad0{fb}, '>', 0,
	'some requests timed out or failed during the outages (the faults bit)');

$_->safe_psql('postgres', 'UPDATE churn_ctl SET stop = true') foreach ($fa, $fb);
my $i = 0;
foreach my $s (@churners)
{
	$i++;
	($out, $err) = $s->result(timeout => 60);
	like($out // '', qr/^ok=\d+ timeout=\d+ error=\d+ lost=\d+$/,
		"churner $i finishes its loop (no request hangs)");
	note "churner $i: " . ($out // 'no result');
	$s->quit;
}
foreach my $nd ($fa, $fb)
{
	ok( $nd->poll_query_until('postgres', 'SELECT count(*) = 0 FROM zk_locks'),
		$nd->name . ': zk_locks is empty once the sessions have ended');
}

# never two holders: the critical sections of each lock, of both
# instances, one after another
my %sections;
my %count;
foreach my $nd ($fa, $fb)
{
	foreach my $row (split /\n/,
		$nd->safe_psql('postgres',
			'SELECT lock, extract(epoch FROM t0), extract(epoch FROM t1) FROM churn_cs'))
	{
		my ($lock, $t0, $t1) = split /\|/, $row;
		push @{ $sections{$lock} }, [ $t0, $t1, $nd->name ];
		$count{ $nd->name }++;
	}
}
cmp_ok($count{ $_->name } // 0, '>', 0, $_->name . ': critical sections recorded')
  foreach ($fa, $fb);
note 'critical sections: ' . join(', ', map { "$_ " . ($count{$_} // 0) } sort keys %count);
my @overlaps;
foreach my $lock (sort keys %sections)
{
	my @cs = sort { $a->[0] <=> $b->[0] } @{ $sections{$lock} };
	my $last = shift @cs;
	foreach my $c (@cs)
	{
		push @overlaps, "$lock: $last->[2] [$last->[0], $last->[1]] and $c->[2] [$c->[0], $c->[1]]"
		  if $c->[0] <= $last->[1];
		$last = $c if $c->[1] > $last->[1];
	}
}
is(scalar @overlaps, 0, 'no two critical sections on one lock overlap')
  or diag join("\n", @overlaps[ 0 .. ($#overlaps < 9 ? $#overlaps : 9) ]);
my @orphans;
ok(poll_until(sub { @orphans = zk_lock_nodes($zk, '/zklock'); !@orphans }, timeout => 30),
	'no orphan node left in ZooKeeper')
  or diag "left: @orphans";
foreach my $k (0 .. 2)
{
	is($fb->safe_psql('postgres',
			"SELECT zk_lock_try('churn$k') AND zk_lock_release('churn$k')"),
		't', "churn$k is free: nobody holds it");
}

# ===========================================================================
note '(8) container parents reaped while requests arrive';
# ===========================================================================

my $s8 = session($fa);
foreach my $round (1 .. 3)
{
	ok(poll_until(sub { !zk_exists($zk, '/zklock/reap') }, timeout => 30),
		"round $round: the parent /zklock/reap is absent (reaped)");
	is($s8->query_ok("SELECT zk_lock_acquire('reap', 10000)"), 't',
		"round $round: acquire after the parent was reaped");
	ok(zk_exists($zk, '/zklock/reap'), "round $round: the parent exists again");
	is($s8->query_ok("SELECT zk_lock_release('reap')"), 't', "round $round: release");
}
ok(poll_until(sub { !zk_exists($zk, '/zklock/reap') }, timeout => 30),
	'the parent is reaped once empty (the root stays: it holds the session nodes)');
is($s8->query_ok("SELECT zk_lock_acquire('reap/deep/x', 10000)"), 't',
	'acquire re-creates every ancestor');
is($s8->query_ok("SELECT zk_lock_release('reap/deep/x')"), 't', 'release');

# requests arriving at random moments around the 1 s container checks
$fa->safe_psql('postgres', <<'SQL');
CREATE FUNCTION reap_race(rounds integer) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	bad integer := 0;
	msg text := '';
BEGIN
	FOR i IN 1 .. rounds LOOP
		BEGIN
			IF zk_lock_try('reap2') THEN
				PERFORM zk_lock_release('reap2');
			ELSE
				bad := bad + 1;
			END IF;
		EXCEPTION WHEN OTHERS THEN
			bad := bad + 1;
			msg := SQLERRM;
		END;
		PERFORM pg_sleep(0.1 + random() * 0.3);
	END LOOP;
	RETURN bad || msg;
END $$;
SQL
($out, $err) = $s8->query("SELECT reap_race(25)");
is($out, '0', 'every try succeeds while the parent keeps being reaped');
is($err, '', 'without errors or warnings');
ok(!$fa->log_contains('parent node kept disappearing'),
	'the engine never gave up on a reaped parent');
$s8->quit;

my @nodes_left;
ok(poll_until(sub { @nodes_left = zk_lock_nodes($zk, '/zklock'); !@nodes_left }, timeout => 30),
	'no node left anywhere')
  or diag "left: @nodes_left";
ok(!$_->log_contains('could not delete node'), $_->name . ': no failed deletes')
  foreach ($slow, $fa, $fb);
note sprintf('060_faults took %.0f s', time - $T0);

$_->stop foreach ($slow, $fa, $fb);
done_testing();

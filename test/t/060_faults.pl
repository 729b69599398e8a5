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
  zk_restart_node zk_session_alive wait_waiting);

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
# behind its one node, shown as theirs in zk_locks)
$w3->send("SELECT zk_lock_acquire('r3')");
ZkLockTest::wait_for_extension_wait($slow, $w3->pid);
my @w;
for my $i (0, 1)
{
	$w[$i] = session($slow);
	$w[$i]->send("SELECT zk_lock_acquire('r1'); "
		  . "INSERT INTO grant_log (who) VALUES ('w$i')");
	ZkLockTest::wait_for_extension_wait($slow, $w[$i]->pid);
}
my @r1_before = children('r1');
is(scalar @r1_before, 1, 'one node for the holder and its two waiters');
is( $slow->safe_psql(
		'postgres',
		"SELECT count(*) FROM zk_locks WHERE name = 'r1' AND state = 'waiting' "
		  . "AND znode = '/zklock/r1/$r1_before[0]'"),
	'2',
	'the waiters queue behind that node');

my $t_stop = time;
$zk->stop_node(1);
ok(poll_status($h, sub { $_[0]{state} eq 'suspended' }, timeout => 10),
	'the worker notices the connection loss: state suspended');
is($h3->query_ok("SELECT zk_lock_release('r3')"), 't',
	'a release during the outage returns at once');
# r3's waiter queues behind the instance's node (local hand-off), which
# holds r3 in a session confirmed less than half a timeout ago: it may be
# granted now, exactly as long as the releasing holder could still have
# believed it held r3 (see README, Safety argument); r1's waiters, behind a
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
# 14 s of a 20 s session: longer than the two thirds after which the client
# drops a silent connection (and closes the socket it just reported), shorter
# than the session timeout counted from the worker's last probe (every
# quarter timeout).  The worker must reconnect, not fail.
{
	my $p = session($slow);
	is($p->query_ok("SELECT zk_lock_acquire('p1')"), 't', 'a session holds p1');
	my $st = poll_status($slow, sub { $_[0]{state} eq 'connected' });
	signal_process($st->{worker_pid}, 'STOP');
	Time::HiRes::sleep(14);    # the fault itself: a pause of this length
	signal_process($st->{worker_pid}, 'CONT');
	my $st2 = poll_status($slow,
		sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $st->{reconnects} });
	ok($st2, 'the worker reconnects after the pause');
	$st2 //= {};
	is($st2->{worker_pid} // '', $st->{worker_pid}, 'the same worker: it did not fail');
	is($st2->{session_id} // '', $st->{session_id}, 'it resumed its session');
	ok(poll_session($p, "SELECT zk_lock_held('p1')", 't', timeout => 10),
		'p1 is held again');
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
ZkLockTest::wait_for_extension_wait($fa, $wa->pid);    # behind ha, in fa
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
like($err, qr/WARNING: .*you don't own a zklock lock named "d1"/,
	'with the usual WARNING of a lock not held');

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
$wb->send("SELECT zk_lock_acquire('p1')");
wait_waiting($fb, $wb, $zk, '/zklock/p1', 2);
my $wb2 = session($fb);
$wb2->send("SELECT zk_lock_acquire('p2')");
wait_waiting($fb, $wb2, $zk, '/zklock/p2', 2);

$sfa = poll_status($fa, sub { $_[0]{state} eq 'connected' });
my $wpid = $sfa->{worker_pid};
signal_process($wpid, 'STOP');
my $t_pause = time;
note "fa's worker $wpid stopped; session $sfa->{session_id}";

# the holder of p3 on fb lets go while fa's session still lives: the waiter
# of fa is next in ZooKeeper, but its worker cannot act on it
is($hb3->query_ok("SELECT zk_lock_release('p3')"), 't', 'fb releases p3');

ok(poll_session($h1, "SELECT zk_lock_held('p1')", 'f', timeout => 10),
	'holder on fa: zk_lock_held turns false during the pause');
my $t_false = time - $t_pause;
ok(!$wb->done, 'at that moment fb has not been granted p1');
cmp_ok($t_false, '<', 3.0,
	'held is false within about half the session timeout (2 s)');

($out, $err) = $wb->result(timeout => 30);
my $t_grant = time - $t_pause;
is($out, 't', 'fb is granted p1 once ZooKeeper expired fa\'s session');
cmp_ok($t_grant, '>', $t_false, 'fb got p1 only after fa stopped vouching for it');
note sprintf('held false after %.2f s, fb granted after %.2f s of pause',
	$t_false, $t_grant);
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
ZkLockTest::wait_for_extension_wait($slow, $wk->pid);    # behind hk, in slow
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
ZkLockTest::wait_for_extension_wait($fa, $w5->pid);    # behind h5, in fa
my $wb5 = session($fb);
$wb5->send("SELECT zk_lock_acquire('w1')");
wait_waiting($fb, $wb5, $zk, '/zklock/w1', 2);    # fa's node, fb's

$sfa = poll_status($fa, sub { $_[0]{state} eq 'connected' });
$wpid = $sfa->{worker_pid};
my $t_term = time;
kill 'TERM', $wpid;
ok(wait_process_state($wpid, sub { !defined $_[0] || $_[0] eq 'Z' }, timeout => 10),
	'the worker exits on SIGTERM');
ok(poll_session($h5, "SELECT zk_lock_held('w1')", 'f', timeout => 10),
	'the holder is told at once: zk_lock_held false');
($out, $err) = $wb5->result(timeout => 30);
is($out, 't', 'fb is granted w1: the closed session took fa\'s nodes along');
my $t_wb5 = time - $t_term;
cmp_ok($t_wb5, '<', 4, 'at once, not after a session timeout');
note sprintf('fb granted %.2f s after the SIGTERM', $t_wb5);

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

my $churn_sql = <<'SQL';
CREATE TABLE churn_ctl (stop boolean NOT NULL);
INSERT INTO churn_ctl VALUES (false);
CREATE SEQUENCE churn_ok;
CREATE SEQUENCE churn_bad;
CREATE FUNCTION churn(names integer) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	n text;
	got boolean;
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
		ELSIF zk_lock_release(n) THEN
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
ok(poll_until(sub { !zk_exists($zk, '/zklock') }, timeout => 30),
	'the root container /zklock itself is reaped once empty');
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

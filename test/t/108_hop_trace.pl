# 108_hop_trace.pl
#    The worker hop: zklock.trace_hops, the backends
#    answered in one turn woken together when it ends, and zk_locks' compact
#    copies.
#    - zklock.trace_hops is for superusers only (42501 otherwise); off, a
#      session logs no hop; on, each request and each release logs one line
#      of the eight steps of ZkHopStep (microseconds or "-"), and a hop
#      through ZooKeeper has every step from "taken" on;
#    - a grant without ZooKeeper (a local hand-off) skips the step "the
#      replies read" (docs/benchmark.md), even when the worker read other
#      replies while the request waited;
#    - one COMMIT releasing several locks, each with a local waiter: every
#      waiter is granted in the turn that takes the releases and woken when
#      it ends, and every hand-off is logged as a hop with its latch set;
#    - zk_locks with holdings whose strings fill more than one of the
#      copies' 64 kB blocks, and a waiter: every row, name, znode and
#      waiting_on as in shared memory;
#    - a request whose writes the worker holds back behind the writes in
#      flight (zklock.write_batch): the time they are held is the worker's
#      (steps "taken" to "pushed out of the socket"), not ZooKeeper's
#      ("the replies read").  The test holds them back (ZooKeeper paused)
#      for a second it measures itself.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate children_become);

my $zk = ZkLockTest::zk_start();
my $node = ZkLockTest::pg_node('hop_rev', $zk, 'max_connections' => 40);

sub session { return ZkLockTest::Session->new($node); }

# The hop lines (client_min_messages = log) in a session's error output:
# a list of [what, [eight steps]].
sub hops
{
	my ($err) = @_;
	my @hops;
	while (($err // '') =~ /zklock hop (request|release):((?: (?:\d+|-)){8})\s*$/mg)
	{
		push @hops, [ $1, [ split ' ', $2 ] ];
	}
	return @hops;
}

# Every "zklock hop" line at all (to see malformed ones too).
sub hop_lines
{
	my ($err) = @_;
	return scalar(() = ($err // '') =~ /zklock hop /g);
}

my ($out, $err);

# ---- the setting: superusers only; off, nothing is logged ----

my $s = session();
$s->query_ok("CREATE ROLE hop_user LOGIN");
($out, $err) = $s->query("SET ROLE hop_user; SET zklock.trace_hops = on");
is(sqlstate($err), '42501', 'a non-superuser cannot turn zklock.trace_hops on');
$s->query_ok("RESET ROLE");

$s->query_ok("SET log_statement = none; SET client_min_messages = log");
($out, $err) = $s->query(
	"SELECT zk_lock_acquire('hop_off'); SELECT zk_lock_release('hop_off')");
is($out, "t\nt", 'untraced cycle');
is(hop_lines($err), 0, 'off: no hop logged') or diag $err;

# ---- on: one line per request and per release ----

$s->query_ok("SET zklock.trace_hops = on");
for my $round (1 .. 2)
{
	($out, $err) = $s->query("SELECT zk_lock_acquire('hop_on')");
	is($out, 't', "round $round: acquired");
	my @h = hops($err);
	is(scalar(@h), 1, "round $round: one hop logged for the request")
	  or diag $err;
	is(hop_lines($err), scalar(@h), "round $round: no malformed hop line");
	if (@h)
	{
		is($h[0][0], 'request', "round $round: a request");
		# step 1 (the worker's wait returned) is "-" when it was awake
		my @through = @{ $h[0][1] }[ 1 .. 7 ];
		is(scalar(grep { /^\d+$/ } @through), 7,
			"round $round: an acquire through ZooKeeper went through every step from taken on"
		) or diag "steps: @{ $h[0][1] }";
	}

	($out, $err) = $s->query("SELECT zk_lock_release('hop_on')");
	is($out, 't', "round $round: released");
	@h = hops($err);
	is(scalar(@h), 1, "round $round: one hop logged for the release")
	  or diag $err;
	if (@h)
	{
		is($h[0][0], 'release', "round $round: a release");
		my @through = @{ $h[0][1] }[ 1 .. 7 ];
		is(scalar(grep { /^\d+$/ } @through), 7,
			"round $round: a release whose delete went to ZooKeeper went through every step from taken on"
		) or diag "steps: @{ $h[0][1] }";
	}
}
$s->query_ok("SET zklock.trace_hops = off");
($out, $err) = $s->query(
	"SELECT zk_lock_acquire('hop_on'); SELECT zk_lock_release('hop_on')");
is(hop_lines($err), 0, 'turned off again: no hop logged') or diag $err;

# ---- a local hand-off skips "the replies read" ----

my $holder = session();
my $waiter = session();
my $other = session();
is($holder->query("SELECT zk_lock_acquire('hop_ho')"), 't', 'holder acquired');
$waiter->query_ok("SET log_statement = none; SET client_min_messages = log");
$waiter->query_ok("SET zklock.trace_hops = on");
$waiter->send("SELECT zk_lock_acquire('hop_ho')");
ZkLockTest::wait_for_extension_wait($node, $waiter);
# the worker took it: it waits behind the instance's node
ok( poll_until(
		sub {
			$s->query_ok(
				"SELECT count(*) FROM zk_locks WHERE pid = "
				  . $waiter->pid
				  . " AND state = 'waiting' AND waiting_on IS NOT NULL") eq '1';
		}),
	'the waiter queues behind the local holder');
# the worker reads replies while it waits (another session's cycle)
is( $other->query(
		"SELECT zk_lock_try('hop_other'); SELECT zk_lock_release('hop_other')"),
	"t\nt",
	'another lock taken and given back meanwhile');
is($holder->query("SELECT zk_lock_release('hop_ho')"), 't', 'holder released');
($out, $err) = $waiter->result;
is($out, 't', 'the waiter got the lock by a local hand-off');
my @h = hops($err);
is(scalar(@h), 1, 'one hop logged for the handed-off request') or diag $err;
is($h[0][1][4], '-',
	'a grant without ZooKeeper skips "the replies read" (step 5)')
  or diag "steps: @{ $h[0][1] }";
is($waiter->query("SELECT zk_lock_release('hop_ho')"), 't', 'waiter released');

# ---- one COMMIT, several local waiters, one turn ----

my $n = 6;
my @waiters = map { session() } 1 .. $n;
$holder->query_ok("BEGIN");
for my $i (1 .. $n)
{
	is($holder->query("SELECT zk_lock_acquire_xact('hop_multi_$i')"),
		't', "holder took hop_multi_$i");
}
for my $i (1 .. $n)
{
	my $w = $waiters[ $i - 1 ];
	$w->query_ok("SET log_statement = none; SET client_min_messages = log");
	$w->query_ok("SET zklock.trace_hops = on");
	$w->send("SELECT zk_lock_acquire('hop_multi_$i')");
	ZkLockTest::wait_for_extension_wait($node, $w);
}
ok( poll_until(
		sub {
			$s->query_ok(
				"SELECT count(*) FROM zk_locks WHERE name LIKE 'hop_multi_%' "
				  . "AND state = 'waiting' AND waiting_on IS NOT NULL") eq $n;
		}),
	'every waiter queues behind the holder');
($out, $err) = $holder->query("COMMIT");
is($err, '', 'COMMIT released them all');
for my $i (1 .. $n)
{
	my $w = $waiters[ $i - 1 ];
	($out, $err) = $w->result;
	is($out, 't', "waiter $i granted");
	my @hi = hops($err);
	is(scalar(@hi), 1, "waiter $i: one hop logged") or diag $err;
	like($hi[0][1][5] // '', qr/^\d+$/, "waiter $i: its latch was set (step 6)")
	  if @hi;
}
for my $i (1 .. $n)
{
	is($waiters[ $i - 1 ]->query("SELECT zk_lock_release('hop_multi_$i')"),
		't', "waiter $i released");
	is(scalar(children_become($zk, "/zklock/hop_multi_$i", 0)),
		0, "hop_multi_$i: no node left");
}

# ---- zk_locks: strings over more than one 64 kB block ----

my $many = 100;    # names of 1,000 bytes: about 110 kB of strings
my $names = "SELECT 'hop_long_' || i || '_' || repeat('x', 990) AS name "
  . "FROM generate_series(1, $many) i";
is( $holder->query(
		"SELECT count(*) FILTER (WHERE zk_lock_acquire(name)) FROM ($names) n"),
	$many,
	"holder took $many locks with long names");
my $long1 = "'hop_long_1_' || repeat('x', 990)";
my $w1 = $waiters[0];
$w1->send("SELECT zk_lock_acquire($long1)");
ZkLockTest::wait_for_extension_wait($node, $w1);
ok( poll_until(
		sub {
			$s->query_ok(
				"SELECT count(*) FROM zk_locks WHERE pid = "
				  . $w1->pid
				  . " AND waiting_on IS NOT NULL") eq '1';
		}),
	'a waiter on one of them');
is( $s->query_ok(
		"SELECT count(*), count(DISTINCT name), "
		  . "md5(string_agg(name, ',' ORDER BY name)) = "
		  . "(SELECT md5(string_agg(name, ',' ORDER BY name)) FROM ($names) n), "
		  . "bool_and(kind = 'lock' AND scope = 'session' AND state = 'held' "
		  . "AND count = 1 AND token IS NOT NULL AND waiting_on IS NULL "
		  . "AND database = 'postgres' "
		  . "AND znode LIKE '/zklock/' || name || '/\\_c\\_%-lock-%') "
		  . "FROM zk_locks WHERE pid = "
		  . $holder->pid),
	"$many|$many|t|t",
	'zk_locks: every holding, its name and znode intact');
is( $s->query_ok(
		"SELECT w.state, w.name = $long1, w.scope IS NULL, "
		  . "w.waiting_on = regexp_replace(h.znode, '^.*/', '') "
		  . "FROM zk_locks w JOIN zk_locks h ON h.name = w.name AND h.pid = "
		  . $holder->pid
		  . " WHERE w.pid = "
		  . $w1->pid),
	'waiting|t|t|t',
	"zk_locks: the waiter's name, znode and waiting_on intact");
is( $holder->query(
		"SELECT count(*) FILTER (WHERE zk_lock_release(name)) FROM ($names) n"),
	$many,
	'holder released them');
is($w1->result, 't', 'the waiter got its lock');
is($w1->query("SELECT zk_lock_release($long1)"), 't', 'the waiter released');
is($s->query_ok("SELECT count(*) FROM zk_locks"), '0', 'zk_locks empty again');

$_->quit for ($s, $holder, $waiter, $other, @waiters);

# ---- writes held back behind the writes in flight ----

# Without local hand-off every request makes its node.  ZooKeeper paused,
# releases are sent one at a time until their deletes in flight reach the
# limit and the next one is held back; from then on every write waits
# while ZooKeeper stays paused, also the create of the traced request X
# (on a lock K holds, so that its parent is known to exist and is not
# reaped as an empty container meanwhile).  (A session timeout long
# enough for ZooKeeper to stay paused a while.)
my $nh = ZkLockTest::pg_node('hop_hold', $zk,
	'zklock.session_timeout' => 20000,
	'zklock.local_handoff' => 'off',
	'log_min_messages' => 'debug2',
	'max_connections' => 40);
my $max = 12;
my @hs = map { ZkLockTest::Session->new($nh) } 1 .. $max;
my $k = ZkLockTest::Session->new($nh);
my $x = ZkLockTest::Session->new($nh);
is($hs[ $_ - 1 ]->query("SELECT zk_lock_acquire('hop_hold_$_')"),
	't', "hop_hold_$_ held")
  for 1 .. $max;
is($k->query("SELECT zk_lock_acquire('hop_hold_x')"), 't', 'K holds hop_hold_x');
$x->query_ok("SET log_statement = none; SET client_min_messages = log; SET zklock.trace_hops = on");
my $log = -s $nh->logfile;
$zk->pause_node(1);
my ($held, $i) = (0, 0);
while ($i < $max && !$held)
{
	$hs[$i]->send("SELECT zk_lock_release('hop_hold_" . ($i + 1) . "')");
	ZkLockTest::wait_for_extension_wait($nh, $hs[$i]);
	$i++;
	$held = poll_until(
		sub {
			$nh->log_contains(
				qr/calls wait for an answer to the writes in flight/, $log);
		},
		timeout => 1);
}
ok($held, "writes held back behind the ones in flight after $i releases");
$x->send("SELECT zk_lock_acquire('hop_hold_x')");
ZkLockTest::wait_for_extension_wait($nh, $x);
my $ta = clock_gettime(CLOCK_MONOTONIC);
Time::HiRes::sleep(1);    # the hold the test measures, not a synchronisation
my $tb = clock_gettime(CLOCK_MONOTONIC);
$zk->resume_node(1);
is($hs[ $_ - 1 ]->result, 't', "hop_hold_$_ released once ZooKeeper answers")
  for 1 .. $i;
is($k->query("SELECT zk_lock_release('hop_hold_x')"), 't', 'K released');
($out, $err) = $x->result;
is($out, 't', 'X granted');
@h = hops($err);
is(scalar(@h), 1, "one hop logged for X's request") or diag $err;
if (@h)
{
	my @st = map { $_ eq '-' ? 0 : $_ } @{ $h[0][1] };
	my $to_taken = $st[0] + $st[1];        # queued -> taken, us
	my $taken_to_out = $st[2] + $st[3];    # taken -> pushed out, us
	my $hold = int(($tb - $ta) * 1e6) - $to_taken;
	cmp_ok($taken_to_out, '>=', $hold,
		'the time its writes were held back counts before "pushed out of the socket", not as ZooKeeper\'s'
	) or diag "steps: @{ $h[0][1] }; held back at least $hold us";
}
is($x->query("SELECT zk_lock_release('hop_hold_x')"), 't', 'X released');
is($hs[ $_ - 1 ]->query("SELECT zk_lock_release('hop_hold_$_')"),
	't', "hop_hold_$_ released")
  for $i + 1 .. $max;
$_->quit for ($k, $x);
$_->quit for @hs;
done_testing();

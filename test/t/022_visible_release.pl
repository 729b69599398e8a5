# 022_visible_release.pl
#    A release is visible when it returns.  Once zk_lock_release, a read or
#    write lock's release, a semaphore's release, zk_lock_release_all,
#    DISCARD ALL, or the COMMIT or ROLLBACK of a transaction holding
#    transaction-scope locks has returned on one instance, a no-wait
#    attempt on another instance takes the lock, and ZooKeeper shows no
#    node of it: with the default settings and a ZooKeeper that fsyncs its
#    log.  A failed no-wait attempt and a timed-out acquire leave nothing
#    behind when they return either.  With ZooKeeper paused, a release
#    does not return until its delete is answered.  When ZooKeeper cannot be reached, a
#    COMMIT still returns, without an error, once the session can no longer
#    be vouched for (half the session timeout after its last confirmation).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);

my $zk = ZkLockTest::zk_start(fsync => 1);
my $node_a = ZkLockTest::pg_node('vis_a', $zk);
my $node_b = ZkLockTest::pg_node('vis_b', $zk);
my $a = ZkLockTest::Session->new($node_a);
my $b = ZkLockTest::Session->new($node_b);

# Each case: what A runs to take and give back the lock (the last
# statement is the release, or the COMMIT), what B then tries once, and
# how B gives it back.
my $rounds = 150;
my @cases = (
	[
		'lock: release',
		[ "SELECT zk_lock_acquire('vis1')", "SELECT zk_lock_release('vis1')" ],
		"SELECT zk_lock_try('vis1')",
		"SELECT zk_lock_release('vis1')"
	],
	[
		'transaction-scope lock: COMMIT',
		[ "BEGIN", "SELECT zk_lock_acquire_xact('vis2')", "COMMIT" ],
		"SELECT zk_lock_try('vis2')",
		"SELECT zk_lock_release('vis2')"
	],
	[
		'write lock: release (then a read attempt)',
		[ "SELECT zk_rwlock_write('vis3')", "SELECT zk_rwlock_write_release('vis3')" ],
		"SELECT zk_rwlock_read('vis3', 0)",
		"SELECT zk_rwlock_read_release('vis3')"
	],
	[
		'lock: ROLLBACK',
		[ "BEGIN", "SELECT zk_lock_acquire_xact('vis4')", "ROLLBACK" ],
		"SELECT zk_lock_try('vis4')",
		"SELECT zk_lock_release('vis4')"
	],
	[
		'semaphore lease: release',
		[ "SELECT zk_semaphore_acquire('vis5', 1)", "SELECT zk_semaphore_release('vis5')" ],
		"SELECT zk_semaphore_acquire('vis5', 1, 0)",
		"SELECT zk_semaphore_release('vis5')"
	],
	[
		'release_all',
		[ "SELECT zk_lock_acquire('vis6')", "SELECT zk_lock_release_all()" ],
		"SELECT zk_lock_try('vis6')",
		"SELECT zk_lock_release('vis6')"
	],
	[
		'DISCARD ALL',
		[ "SELECT zk_lock_acquire('vis7')", "DISCARD ALL" ],
		"SELECT zk_lock_try('vis7')",
		"SELECT zk_lock_release('vis7')"
	],
	[
		'ROLLBACK TO SAVEPOINT',
		[
			"BEGIN", "SAVEPOINT s", "SELECT zk_lock_acquire_xact('vis8')",
			"ROLLBACK TO SAVEPOINT s"
		],
		"SELECT zk_lock_try('vis8')",
		"SELECT zk_lock_release('vis8')"
	],
);

foreach my $case (@cases)
{
	my ($label, $take_release, $try, $back) = @$case;
	my $n = $label =~ /^(?:lock: release|transaction-scope|write lock)/ ? $rounds : 30;
	my $failed = 0;
	for (1 .. $n)
	{
		$a->query_ok($_) foreach @$take_release;
		my $got = $b->query_ok($try);
		$failed++ if $got ne 't';
		$b->query_ok($back) if $got eq 't';
		$a->query_ok('ROLLBACK') if $label eq 'ROLLBACK TO SAVEPOINT';
	}
	is($failed, 0, "$label on A, then a no-wait attempt on B: taken in all $n rounds");
}

# ---------------------------------------------------------------------------
note 'a returned release leaves no node; neither does a failed attempt';

foreach my $i (1 .. 20)
{
	$a->query_ok("SELECT zk_lock_acquire('vis_nodes')");
	is($b->query_ok("SELECT zk_lock_try('vis_nodes')"), 'f', "round $i: B's try fails while A holds")
	  if $i == 1;
	$b->query_ok("SELECT zk_lock_try('vis_nodes')") if $i > 1;
	is(scalar(ZkLockTest::zk_children($zk, '/zklock/vis_nodes')), 1,
		"round $i: only A's node once B's failed try returned") if $i <= 3;
	is($b->query_ok("SELECT zk_lock_acquire('vis_nodes', 20)"), 'f', "round $i: B's acquire times out")
	  if $i <= 3;
	is(scalar(ZkLockTest::zk_children($zk, '/zklock/vis_nodes')), 1,
		"round $i: only A's node once B's timed-out acquire returned") if $i <= 3;
	$a->query_ok("SELECT zk_lock_release('vis_nodes')");
	is(scalar(ZkLockTest::zk_children($zk, '/zklock/vis_nodes')), 0,
		"round $i: no node once A's release returned") if $i <= 3;
}

# ---------------------------------------------------------------------------
note 'a lock handed to a waiter of the same instance is not free: it has a new holder';

my $a2 = ZkLockTest::Session->new($node_a);
$a->query_ok("SELECT zk_lock_acquire('vis_local')");
$a2->send("SELECT zk_lock_acquire('vis_local')");
ZkLockTest::wait_for_extension_wait($node_a, $a2);
$a->query_ok("SELECT zk_lock_release('vis_local')");
is($b->query_ok("SELECT zk_lock_try('vis_local')"), 'f',
	'B cannot take it while the waiter of A\'s instance holds it');
is($a2->result, 't', 'the waiter of A\'s instance was granted');
$a2->query_ok("SELECT zk_lock_release('vis_local')");
is($b->query_ok("SELECT zk_lock_try('vis_local')"), 't', 'then B takes it at once');
$b->query_ok("SELECT zk_lock_release('vis_local')");

# ---------------------------------------------------------------------------
note 'a release waits for ZooKeeper to delete the node';

# With ZooKeeper paused right before the release, the release must not
# return (its delete is unanswered) while the session is still vouched for;
# once ZooKeeper goes on, it returns and no node is left.  On an instance of
# its own with a session timeout of 20 s: the vouching lasts 10 s after the
# last confirmation, so that the half second looked at is well inside it
# however long pausing ZooKeeper takes on a busy machine (with 4 s it
# lasted 2 s, of which the pause could take most).
my $node_p = ZkLockTest::pg_node('vis_p', $zk, 'zklock.session_timeout' => '20000');
my $p = ZkLockTest::Session->new($node_p);
foreach my $case (
	[ 'release', "SELECT zk_lock_acquire('vis_p1')", 'zk_lock_release', 'vis_p1' ],
	[ 'COMMIT', "BEGIN; SELECT zk_lock_acquire_xact('vis_p2')", 'COMMIT', 'vis_p2' ],
	[ 'write lock release', "SELECT zk_rwlock_write('vis_p3')", 'zk_rwlock_write_release', 'vis_p3' ],
	[ 'lease release', "SELECT zk_semaphore_acquire('vis_p4', 1)", 'zk_semaphore_release', 'vis_p4', 'vis_p4/leases' ],
	[ 'DISCARD ALL', "SELECT zk_lock_acquire('vis_p5')", 'DISCARD ALL', 'vis_p5' ])
{
	my ($label, $take, $release, $name, $parent) = @$case;
	$p->query_ok($take);
	my $sql = $release =~ /^zk_/ ? "SELECT $release('$name')" : $release;
	$zk->pause_node(1);
	$p->send($sql);
	ok(!poll_until(sub { $p->done }, timeout => 0.5),
		"$label: with ZooKeeper paused, it has not returned");
	$zk->resume_node(1);
	my ($out, $err) = $p->result;
	is($err, '', "$label: it returns once ZooKeeper goes on");
	is(scalar(ZkLockTest::zk_children($zk, '/zklock/' . ($parent // $name))), 0,
		"$label: and no node is left when it has");
}

$p->quit;
$node_p->stop;

# ---------------------------------------------------------------------------
note 'ZooKeeper unreachable: COMMIT returns, without an error, within half the session timeout';

# The TAP nodes run with zklock.session_timeout = 4000.
$a->query_ok("BEGIN");
$a->query_ok("SELECT zk_lock_acquire_xact('vis_down')");
$zk->stop_node(1);
my $t0 = time();
my ($out, $err) = $a->query("COMMIT");
my $took = time() - $t0;
is(sqlstate($err), '(none)', 'COMMIT raised no error') or diag $err;
# the wait ends once the session is no longer vouched for: half the
# timeout after its last confirmation (with headroom for a loaded machine)
cmp_ok($took, '<', 2 + 2, "COMMIT returned within half the session timeout (took ${took}s)");
$zk->start_node(1);
ok(poll_until(sub { scalar(ZkLockTest::zk_children($zk, '/zklock/vis_down')) == 0 }, timeout => 30),
	'the node goes with the session (or its delete) once ZooKeeper is back');
ok(poll_until(sub { $b->query("SELECT zk_lock_try('vis_down')") eq 't' }, timeout => 30),
	'and B can take the lock');

done_testing();

# 089_barrier.pl
#    The barrier (zk_barrier_set, zk_barrier_remove, zk_barrier_wait), the
#    node Curator's DistributedBarrier uses: two PostgreSQL instances, a
#    real Curator and Kazoo on one ZooKeeper.  A wait on one instance ends
#    when the other removes the barrier; Curator and Kazoo set and remove
#    what zklock waits on, and wait on what zklock sets and removes; a
#    cancelled or timed out wait leaves no watch in ZooKeeper; lock_timeout
#    and statement_timeout end a wait as they end a lock wait; a name in use
#    as a lock (zklock's or Curator's) is refused with 55000.
#
#    Every "is waiting" is established positively (pg_stat_activity, the
#    server's watch count), never by sleeping.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(zk_watch_count zk_exists);
use ZkInterop;

my $zk = ZkLockTest::zk_start();
my $pa = ZkLockTest::pg_node('barrier_a', $zk);
my $pb = ZkLockTest::pg_node('barrier_b', $zk);
my $curator = ZkInterop::curator($zk);

my $sa = ZkLockTest::Session->new($pa);
my $sb = ZkLockTest::Session->new($pb);

sub watches { return zk_watch_count($zk, 1); }

# Wait until the server's watch count is $want; true when it got there.
sub watches_become
{
	my ($want) = @_;
	return poll_until(sub { watches() == $want });
}

my $zklock_session = ZkFault::zklock_sessions($pa, $pb);
is(scalar keys %$zklock_session, 2, 'both instances have a session');

# Sessions with a data (or exists) watch on $path, split into zklock's and
# the others' (Curator's): (zklock count, others count).
sub watchers_of
{
	my ($path) = @_;
	my ($mine, $others) = (0, 0);
	foreach my $w (ZkFault::zk_watchers($zk, 1))
	{
		next unless $w->[0] eq $path;
		$zklock_session->{ $w->[1] } ? $mine++ : $others++;
	}
	return ($mine, $others);
}

# Wait until zklock has (or, with $want 0, has no) watch on $path.
sub zklock_watch_becomes
{
	my ($path, $want) = @_;
	return poll_until(sub { (watchers_of($path))[0] == $want });
}

# Start a zklock wait on barrier $name in $s, and see it wait: in
# pg_stat_activity, with one more watch in ZooKeeper, on its node.
sub start_wait
{
	my ($node, $s, $name) = @_;
	my $before = watches();
	$s->send("SELECT zk_barrier_wait('$name')");
	ZkLockTest::wait_for_extension_wait($node, $s);
	ok(zklock_watch_becomes("/zklock/$name", 1),
		"$name: the waiter watches the node");
	is(watches(), $before + 1, "$name: the server has one more watch");
	ok(!$s->done, "$name: the wait goes on");
	return $before;
}

# ---------------------------------------------------------------------------
note 'a wait on instance A ends when instance B removes the barrier';

is($sb->query_ok("SELECT zk_barrier_set('bar/ab')"), 't', 'B sets the barrier');
ok(zk_exists($zk, '/zklock/bar/ab'), 'its node exists');
is(ZkLockTest::zk_python($zk,
		q{print(zk.exists(args[0]).ephemeralOwner, end='')}, '/zklock/bar/ab'),
	'0', 'the node is persistent');
is($sa->query_ok("SELECT zk_barrier_set('bar/ab')"), 'f',
	'A finds it set already');
start_wait($pa, $sa, 'bar/ab');
is($sb->query_ok("SELECT zk_barrier_remove('bar/ab')"), 't', 'B removes it');
is($sa->result, 't', "A's wait returns true");
ok(zklock_watch_becomes('/zklock/bar/ab', 0), 'no watch of zklock is left');
ok(!zk_exists($zk, '/zklock/bar/ab'), 'the node is gone');
is($sa->query_ok("SELECT zk_barrier_remove('bar/ab')"), 'f',
	'A finds nothing to remove');

# ---------------------------------------------------------------------------
note 'Curator sets, zklock waits, Curator removes';

is($curator->ask(c1 => 'barrier-set /zklock/bar/cur'), 'ok', 'Curator sets');
is($sa->query_ok("SELECT zk_barrier_set('bar/cur')"), 'f',
	'zklock sees it set');
is($sa->query_ok("SELECT zk_barrier_wait('bar/cur', 200)"), 'f',
	'a wait with a timeout returns false');
ok(zklock_watch_becomes('/zklock/bar/cur', 0),
	'the timed-out wait left no watch');
start_wait($pa, $sa, 'bar/cur');
is($curator->ask(c1 => 'barrier-remove /zklock/bar/cur'), 'ok',
	'Curator removes');
is($sa->result, 't', "zklock's wait returns true");
ok(zklock_watch_becomes('/zklock/bar/cur', 0), 'no watch of zklock is left');

# ---------------------------------------------------------------------------
note 'zklock sets, Curator waits, zklock removes';

is($sa->query_ok("SELECT zk_barrier_set('bar/zk')"), 't', 'zklock sets');
$curator->send(c2 => 'barrier-wait /zklock/bar/zk -1');
ok(poll_until(sub { (watchers_of('/zklock/bar/zk'))[1] == 1 }),
	"Curator's watch is set");
ok(!$curator->answered('c2'), 'Curator waits');
is($sb->query_ok("SELECT zk_barrier_remove('bar/zk')"), 't',
	'zklock (instance B) removes');
is($curator->answer('c2'), 'ok', "Curator's waitOnBarrier returns");
# Curator's wait with a timeout on a barrier zklock set
is($sa->query_ok("SELECT zk_barrier_set('bar/zk2')"), 't', 'zklock sets');
is($curator->ask(c2 => 'barrier-wait /zklock/bar/zk2 200'), 'timeout',
	"Curator's wait with a timeout times out");
is($sa->query_ok("SELECT zk_barrier_remove('bar/zk2')"), 't',
	'zklock removes');
is($curator->ask(c2 => 'barrier-wait /zklock/bar/zk2 -1'), 'ok',
	'Curator sees it removed');
# and a barrier zklock set, Curator removes
is($sa->query_ok("SELECT zk_barrier_set('bar/zk')"), 't', 'zklock sets again');
is($curator->ask(c2 => 'barrier-remove /zklock/bar/zk'), 'ok',
	'Curator removes it');
is($sa->query_ok("SELECT zk_barrier_wait('bar/zk', 0)"), 't',
	'zklock sees it removed');

# ---------------------------------------------------------------------------
note "Kazoo's Barrier on the same node, both ways";

my $kazoo_barrier = q{
	from kazoo.recipe.barrier import Barrier
	b = Barrier(zk, args[1])
	if args[0] == 'create':
		b.create(); print('ok', end='')
	elif args[0] == 'remove':
		print(b.remove(), end='')
	else:
		print(b.wait(timeout=float(args[2])), end='')
};
sub kazoo_barrier { return ZkLockTest::zk_python($zk, $kazoo_barrier, @_); }

is(kazoo_barrier('create', '/zklock/bar/kz'), 'ok', 'Kazoo sets');
is($sa->query_ok("SELECT zk_barrier_set('bar/kz')"), 'f', 'zklock sees it set');
start_wait($pa, $sa, 'bar/kz');
is(kazoo_barrier('remove', '/zklock/bar/kz'), 'True', 'Kazoo removes');
is($sa->result, 't', "zklock's wait returns true");
ok(zklock_watch_becomes('/zklock/bar/kz', 0), 'no watch of zklock is left');

is($sb->query_ok("SELECT zk_barrier_set('bar/kz')"), 't', 'zklock sets');
is(kazoo_barrier('wait', '/zklock/bar/kz', '0.2'), 'False',
	"Kazoo's wait times out while it is set");
is($sb->query_ok("SELECT zk_barrier_remove('bar/kz')"), 't', 'zklock removes');
is(kazoo_barrier('wait', '/zklock/bar/kz', '0.2'), 'True',
	"Kazoo's wait returns at once");
is(kazoo_barrier('remove', '/zklock/bar/kz'), 'False',
	'Kazoo finds nothing to remove');

# ---------------------------------------------------------------------------
note 'cancel, statement_timeout and lock_timeout end a wait, leaving no watch';

is($sb->query_ok("SELECT zk_barrier_set('bar/cancel')"), 't', 'barrier set');
my $w0 = start_wait($pa, $sa, 'bar/cancel');
is($pa->safe_psql('postgres', "SELECT pg_cancel_backend(" . $sa->pid . ")"),
	't', 'cancel sent');
my ($out, $err) = $sa->result;
is(sqlstate($err), '57014', 'the wait ends with SQLSTATE 57014');
like($err, qr/user request/, 'with the usual message');
ok(watches_become($w0), "the server's watch count is back where it was");
ok(zklock_watch_becomes('/zklock/bar/cancel', 0),
	'the cancelled wait left no watch');
is($sa->query_ok('SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid()'),
	'0', 'nothing of the wait is left in zk_locks');

foreach my $case ([ 'statement_timeout', '57014' ], [ 'lock_timeout', '55P03' ])
{
	my ($setting, $code) = @$case;
	$sa->query_ok("SET $setting = '500ms'");
	($out, $err) = $sa->query("SELECT zk_barrier_wait('bar/cancel')");
	is(sqlstate($err), $code, "$setting ends the wait with $code");
	$sa->query_ok("RESET $setting");
	ok(zklock_watch_becomes('/zklock/bar/cancel', 0),
		"$setting: no watch is left");
}
is($sb->query_ok("SELECT zk_barrier_remove('bar/cancel')"), 't',
	'barrier removed');

# ---------------------------------------------------------------------------
note 'a name in use as a lock is no barrier: 55000';

is($sb->query_ok("SELECT zk_lock_acquire('bar/lock')"), 't',
	'B holds lock bar/lock');
foreach my $call ("zk_barrier_set('bar/lock')", "zk_barrier_remove('bar/lock')",
	"zk_barrier_wait('bar/lock')")
{
	($out, $err) = $sa->query("SELECT $call");
	is(sqlstate($err), '55000', "$call: 55000");
}
like($err, qr/in use by a lock/, 'the message says why');
is($sb->query_ok("SELECT zk_lock_held('bar/lock')"), 't',
	'the lock is still held');
is($sb->query_ok("SELECT zk_lock_release('bar/lock')"), 't',
	'and released');

is($curator->ask(c3 => 'mutex-acquire /zklock/bar/curlock -1'), 'ok',
	'Curator holds a mutex on bar/curlock');
($out, $err) = $sa->query("SELECT zk_barrier_set('bar/curlock')");
is(sqlstate($err), '55000', "zk_barrier_set on Curator's lock: 55000");
($out, $err) = $sa->query("SELECT zk_barrier_wait('bar/curlock', 0)");
is(sqlstate($err), '55000', "zk_barrier_wait on Curator's lock: 55000");
is($curator->ask(c3 => 'mutex-release'), 'ok', 'Curator releases it');
ok(zklock_watch_becomes('/zklock/bar/lock', 0)
	  && zklock_watch_becomes('/zklock/bar/curlock', 0),
	'the refused calls left no watch');

$curator->quit;
$sa->quit;
$sb->quit;
$pa->stop;
$pb->stop;
$zk->stop;
done_testing();

# 094_scale.pl
#    Many held locks with long names through ZooKeeper restarts.  The
#    ZooKeeper C client re-registers every watch it holds in one SetWatches
#    message when it connects again, and the server refuses a message
#    longer than its jute.maxbuffer (1 MB by default) by dropping the
#    connection: the client then reconnects in a loop until the session is
#    lost.  3,000 held locks with names of about 200 bytes watch more than
#    that (a data watch on each holder's node, and a child watch on each
#    lock's parent once looked at again after a reconnect).  The worker
#    drops the client's watches before it connects again and sets again
#    only those it needs (see src/worker/watches.c): every lock is kept
#    through three restarts of ZooKeeper in a row, with at most two
#    reconnects each and the same session throughout.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(zk_status_of poll_status zk_restart_node zk_watch_count);

my $T0 = time;

# N locks of names of about 200 bytes: their nodes' paths are about 260
# bytes, so N data watches alone come to about 0.8 MB, and N more child
# watches on the parents take the message past 1 MB.
my $N = 3000;
my $prefix = 'scale/' . ('n' x 185) . '/';

# tickTime 500 ms: the 20 s session timeout is granted (maxSessionTimeout
# is 60 s in test/zk), and outlives every restart below.
my $zk = ZkLockTest::zk_start(tick => 500);
my $node = ZkLockTest::pg_node(
	'scale', $zk,
	'zklock.session_timeout' => '20000',
	'zklock.max_locks' => $N + 100);

my $st0 = poll_status($node, sub { $_[0]{state} eq 'connected' });
is($st0->{session_timeout_ms}, '20000', 'negotiated session timeout 20 s');

# four backends take N/4 locks each, at the same time
my @s = map { ZkLockTest::Session->new($node) } 1 .. 4;
my $per = $N / 4;
for my $i (0 .. 3)
{
	my ($lo, $hi) = ($i * $per + 1, ($i + 1) * $per);
	$s[$i]->send(
		"SELECT count(*) FILTER (WHERE zk_lock_acquire('$prefix' || lpad(g::text, 8, '0'))) "
		  . "FROM generate_series($lo, $hi) g");
}
for my $i (0 .. 3)
{
	my ($out, $err) = $s[$i]->result(timeout => 180);
	is($out, $per, "backend $i holds its $per locks");
}
note sprintf('%d locks taken in %.1f s', $N, time - $T0);

my $m = ZkLockTest::Session->new($node);
my $held_sql = "SELECT count(*) FROM zk_locks WHERE state = 'held'";
is($m->query_ok($held_sql), $N, "zk_locks shows $N held");

# the holders' data watches on their nodes (after 100 ms of holding)
ok(poll_until(sub { zk_watch_count($zk, 1) >= $N }, timeout => 60),
	'ZooKeeper has the holders\' watches');
note 'watches on the server: ' . zk_watch_count($zk, 1);

my $st = zk_status_of($m);
for my $round (1 .. 3)
{
	my $t = time;
	$zk->stop_node(1);
	ok(poll_status($m, sub { $_[0]{state} eq 'suspended' }, timeout => 20),
		"restart $round: the worker notices the connection loss");
	zk_restart_node($zk, 1);
	my $st1 = poll_status($m,
		sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $st->{reconnects} },
		timeout => 30);
	ok($st1, "restart $round: the worker reconnects");
	$st1 //= {};

	# settled: every holder looked at again, and the watches it needs are
	# set again (a session whose connection keeps being dropped never gets
	# there)
	ok( poll_until(
			sub {
				zk_watch_count($zk, 1) >= $N
				  && zk_status_of($m)->{state} eq 'connected';
			},
			timeout => 60),
		"restart $round: ZooKeeper has the watches again");
	my $st2 = zk_status_of($m);
	note sprintf('restart %d: %.1f s, %d reconnects, %d watches on the server',
		$round, time - $t, $st2->{reconnects} - $st->{reconnects},
		zk_watch_count($zk, 1));
	is($st2->{session_id}, $st0->{session_id},
		"restart $round: the session is resumed");
	is($st2->{session_losses}, $st0->{session_losses},
		"restart $round: no session loss");
	cmp_ok($st2->{reconnects} - $st->{reconnects}, '<=', 2,
		"restart $round: at most two reconnects");
	is($m->query_ok($held_sql), $N, "restart $round: all $N locks still held");
	$st = $st2;
}

# every holding is vouched for, and ZooKeeper still has every node
ok( poll_until(
		sub {
			$s[0]->query_ok(
				"SELECT zk_lock_held('$prefix' || lpad('1', 8, '0'))") eq 't';
		},
		timeout => 20),
	'a holding is vouched for after the restarts');
my $ephemerals = ZkFault::zk_mntr($zk, 1)->{zk_ephemerals_count};
cmp_ok($ephemerals, '>=', $N, "ZooKeeper keeps the $N nodes");

for my $i (0 .. 3)
{
	is($s[$i]->query_ok('SELECT zk_lock_release_all()'), $per,
		"backend $i releases its locks");
}
is($m->query_ok("SELECT count(*) FROM zk_locks"), '0', 'nothing left in zk_locks');

note sprintf('094 took %.0f s', time - $T0);
done_testing();

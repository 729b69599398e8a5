# 098_scale.pl
#    Many held locks with long names through ZooKeeper restarts.  The
#    ZooKeeper C client re-registers every watch it holds in one SetWatches
#    message when it connects again, and the server refuses a message
#    longer than its jute.maxbuffer (1 MB by default) by dropping the
#    connection: the client then reconnects in a loop until the session is
#    lost.  3,000 held locks with names of about 200 bytes watch more than
#    that (a data watch on each holder's node, and a child watch on each
#    lock's parent once looked at again after a reconnect).  The worker
#    drops the client's watches before it connects again and sets again
#    only those it needs (see src/worker/engine/watches.c): every lock is
#    kept through three restarts of ZooKeeper in a row, with at most two
#    reconnects each and the same session throughout.  Meanwhile the idle
#    instance asks ZooKeeper nothing (the reconciler lists no parent where
#    every part holds), and after an outage that outlasted the session's
#    confirmation, holdings are vouched for again as soon as the worker is
#    connected, however many it holds: the session's probe goes ahead of
#    its look at every part.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(zk_status_of poll_status zk_restart_node zk_watch_count);
use ZkFaultProxy;

my $T0 = time;

# zk_stats.zk_requests of the instance of session $s
sub zk_requests
{
	return $_[0]->query_ok('SELECT zk_requests FROM zk_stats');
}

# CPU time of a process so far, in clock ticks (utime + stime)
sub cpu_ticks
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return 0;
	my $stat = <$fh>;
	close $fh;
	$stat =~ s/^.*\)\s+//;
	my @f = split /\s+/, $stat;
	return $f[11] + $f[12];
}

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

my $wpid = $node->safe_psql('postgres', 'SELECT worker_pid FROM zk_status()');
my $rss0 = ZkFault::rss_kb($wpid, 'VmRSS');

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
my $t_locks = time;
is($m->query_ok($held_sql), $N, "zk_locks shows $N held");
note sprintf('zk_locks with %d held: %.1f ms (from the test, with psql)',
	$N, (time - $t_locks) * 1000);

# the holders' data watches on their nodes (after 100 ms of holding)
ok(poll_until(sub { zk_watch_count($zk, 1) >= $N }, timeout => 60),
	'ZooKeeper has the holders\' watches');
note 'watches on the server: ' . zk_watch_count($zk, 1);

# An idle instance holding N locks asks ZooKeeper nothing: the reconciler
# (a round every 5 s) lists no parent where every part of the instance
# holds.  Two rounds' time: N/2 requests would be most of a round of
# listings.
note sprintf('worker memory: %.0f bytes more resident per held lock',
	(ZkFault::rss_kb($wpid, 'VmRSS') - $rss0) * 1024 / $N);
my $r0 = zk_requests($m);
my $cpu0 = cpu_ticks($wpid);
ok( !poll_until(sub { zk_requests($m) - $r0 >= $N / 2 }, timeout => 11),
	'the idle worker sends ZooKeeper (almost) nothing');
note sprintf('idle: %d requests, %d CPU ticks of the worker in 11 s',
	zk_requests($m) - $r0, cpu_ticks($wpid) - $cpu0);

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

# ===========================================================================
# Vouching first after a reconnect.  Backends vouch for a holding only
# while the session was confirmed within half its timeout; after an outage
# longer than that, the first confirmation (the worker's probe) is what
# makes the holdings count again.  It must not wait behind the instance's
# look at every part: the fault proxy holds the server's replies from the
# reply to the first look at a lock (a listing or a read under "vouch/")
# on, and the holding is vouched for while they are held.  Replies come in
# the order of the requests, so this fails whenever the probe is sent
# behind even one of the looks, however fast the machine.
# ===========================================================================
my $N2 = 2000;
my $proxy = ZkFaultProxy->start($zk);
my $vouch = ZkLockTest::pg_node(
	'vouch', $proxy->hosts,
	'zklock.session_timeout' => '10000',
	'zklock.max_locks' => $N2 + 100);
poll_status($vouch, sub { $_[0]{state} eq 'connected' });
my @v = map { ZkLockTest::Session->new($vouch) } 1 .. 4;
my $per2 = $N2 / 4;
for my $i (0 .. 3)
{
	my ($lo, $hi) = ($i * $per2 + 1, ($i + 1) * $per2);
	$v[$i]->send(
		"SELECT count(*) FILTER (WHERE zk_lock_acquire('vouch/' || g)) "
		  . "FROM generate_series($lo, $hi) g");
}
for my $i (0 .. 3)
{
	my ($out, $err) = $v[$i]->result(timeout => 300);
	is($out, $per2, "vouch: backend $i holds its $per2 locks");
}
my $vst0 = zk_status_of($v[1]);
for my $round (1 .. 3)
{
	ok(poll_until(sub { zk_watch_count($zk, 1) >= $N2 }, timeout => 60),
		"vouch $round: the holders' watches are set");
	$zk->stop_node(1);
	ok( poll_until(
			sub { $v[0]->query_ok("SELECT zk_lock_held('vouch/1')") eq 'f' },
			timeout => 20),
		"vouch $round: zk_lock_held turns false during the outage");
	$proxy->hold_at('getChildren,getChildren2,getData,exists', 'vouch/');
	zk_restart_node($zk, 1);
	ok(poll_until(sub { $proxy->status->{held} }, timeout => 30),
		"vouch $round: the worker looks at its locks again (the replies are held from the first)"
	);
	ok( poll_until(
			sub { $v[0]->query_ok("SELECT zk_lock_held('vouch/1')") eq 't' },
			timeout => 5,
			interval => 0.01),
		"vouch $round: the holding is vouched for before the look at any lock is answered"
	);
	$proxy->release;
}
my $vst1 = zk_status_of($v[1]);
is($vst1->{session_id}, $vst0->{session_id}, 'vouch: the session was kept');
for my $i (0 .. 3)
{
	is($v[$i]->query_ok('SELECT zk_lock_release_all()'), $per2,
		"vouch: backend $i releases its locks");
}
$proxy->stop;

note sprintf('098 took %.0f s', time - $T0);
done_testing();

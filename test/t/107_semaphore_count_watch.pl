# 107_semaphore_count_watch.pl
#    Semaphores sized by a shared count: the waiter's side watch on the
#    count across the endings and failures 106 does not cover.
#    - a connection lost and regained in the same session while a lease
#      waits: the worker dropped the client's watches, so the waiter must
#      watch the count again (wchp) and a raised count must admit it;
#    - the session lost while a lease waits: the same in the new session;
#    - after every ending of a waiter (timeout, cancel, backend exit, count
#      deleted or spoiled under several leases, grant) nothing is left: no
#      lease node, no entry-mutex node, no watch of the instance on the
#      count, and zk_stats' watches gauge back where it was;
#    - a semaphore sized by a NUMBER whose first listing's reply is lost
#      (the fault proxy) after its lease node was created: the lease's
#      driver now has a check (begin), which the engine runs again after
#      reconnecting, and which must not take a number-sized lease for a
#      count-sized one.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate children_become);
use ZkFault qw(zk_status_of poll_status zk_watchers zklock_sessions);
use ZkFaultProxy;

my $zk = ZkLockTest::zk_start();
my $proxy = ZkFaultProxy->start($zk);
my $pa = ZkLockTest::pg_node('semr_a', $proxy->hosts,
	'zklock.session_timeout' => 6000);
my $pb = ZkLockTest::pg_node('semr_b', $zk);

my ($sa1, $sa2) = map { ZkLockTest::Session->new($pa) } 1 .. 2;
my ($sb1, $sb2) = map { ZkLockTest::Session->new($pb) } 1 .. 2;
my ($out, $err);

sub set_count
{
	my ($name, $value) = @_;
	$sb2->query_ok("SELECT zk_shared_count_set('$name', $value)");
	return;
}

# Is the count's node watched by the instance's current ZooKeeper session?
sub count_watched_now
{
	my ($node, $name) = @_;
	my $sessions = zklock_sessions($node);
	return scalar grep { $_->[0] eq "/zklock/$name" && $sessions->{ $_->[1] } }
	  zk_watchers($zk, 1);
}

sub count_watched
{
	my ($node, $name) = @_;
	return poll_until(sub { count_watched_now($node, $name) });
}

sub count_unwatched
{
	my ($node, $name) = @_;
	return poll_until(sub { !count_watched_now($node, $name) });
}

sub watches_gauge
{
	my ($s) = @_;
	return $s->query_ok('SELECT watches FROM zk_stats');
}

# Poll until zk_stats' watches gauge of the session's instance is $want.
sub gauge_becomes
{
	my ($s, $want) = @_;
	my $got;
	poll_until(sub { ($got = watches_gauge($s)) == $want });
	return $got;
}

# $s waits for a lease of $sem sized by $count: in zklock, its lease
# nodes among $n, the count watched by its instance
sub waits
{
	my ($node, $s, $sem, $count, $n, $what) = @_;
	ZkLockTest::wait_for_extension_wait($node, $s);
	is(scalar(children_become($zk, "/zklock/$sem/leases", $n)), $n,
		"$what: its lease node is there");
	ok(count_watched($node, $count), "$what: its instance watches the count");
	return;
}

# Nothing of the semaphore left but $held lease nodes, no entry mutex
sub nothing_left
{
	my ($sem, $held, $what) = @_;
	is(scalar(children_become($zk, "/zklock/$sem/leases", $held)), $held,
		"$what: $held lease node(s) left");
	is(scalar(children_become($zk, "/zklock/$sem/locks", 0)), 0,
		"$what: no entry-mutex node left");
	return;
}

# ===========================================================================
note '1. the connection lost and regained while a lease waits';

set_count('r/c1', 0);
$sa1->send("SELECT zk_semaphore_acquire_by_count('r/s1', 'r/c1', 60000)");
waits($pa, $sa1, 'r/s1', 'r/c1', 1, 'a waits on a count of 0');
my $reconnects = zk_status_of($pa)->{reconnects};
my $sid = zk_status_of($pa)->{session_id};
$proxy->cut;
ok( poll_status(
		$pa,
		sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $reconnects },
		timeout => 30),
	'a reconnects');
is(zk_status_of($pa)->{session_id}, $sid, '... in the same session');
ok(!$sa1->done, 'the waiter still waits');
ok(count_watched($pa, 'r/c1'), 'the waiter watches the count again');
set_count('r/c1', 1);
($out, $err) = $sa1->result(timeout => 30);
is("$out$err", 't', 'the count raised: the waiter gets its lease');
$sa1->query_ok("SELECT zk_semaphore_release('r/s1')");
nothing_left('r/s1', 0, 'released');

# ===========================================================================
note '2. the session lost while a lease waits';

set_count('r/c1', 0);
$sa1->send("SELECT zk_semaphore_acquire_by_count('r/s1', 'r/c1', 120000)");
waits($pa, $sa1, 'r/s1', 'r/c1', 1, 'a waits on a count of 0');
$sid = zk_status_of($pa)->{session_id};
$proxy->refuse(30);
$proxy->cut;
ok(poll_until(sub { !ZkFault::zk_session_alive($zk, 1, $sid) }, timeout => 60),
	'a\'s session expired');
$proxy->accept;
ok( poll_status(
		$pa,
		sub { $_[0]{state} eq 'connected' && $_[0]{session_id} ne $sid },
		timeout => 60),
	'a connects in a new session');
waits($pa, $sa1, 'r/s1', 'r/c1', 1, 'the waiter starts over');
set_count('r/c1', 1);
($out, $err) = $sa1->result(timeout => 30);
is("$out$err", 't', 'the count raised: the waiter gets its lease');
$sa1->query_ok("SELECT zk_semaphore_release('r/s1')");
nothing_left('r/s1', 0, 'released');

# ===========================================================================
note '3. every ending of a waiter leaves nothing behind';

my $base = watches_gauge($sb1);
note "b's watches gauge at rest: $base";

note 'timeout';
set_count('r/c2', 0);
($out, $err) = $sb1->query(
	"SELECT zk_semaphore_acquire_by_count('r/s2', 'r/c2', 500)");
is("$out$err", 'f', 'a waiter on a count of 0 times out');
nothing_left('r/s2', 0, 'timed out');
ok(count_unwatched($pb, 'r/c2'), 'timed out: b no longer watches the count');
is(gauge_becomes($sb1, $base), $base, 'timed out: the watches gauge is back');

note 'cancel';
$sb1->send("SELECT zk_semaphore_acquire_by_count('r/s2', 'r/c2')");
waits($pb, $sb1, 'r/s2', 'r/c2', 1, 'b waits');
$sb2->query_ok("SELECT pg_cancel_backend(" . $sb1->pid . ")");
($out, $err) = $sb1->result;
is(sqlstate($err), '57014', 'cancelled');
nothing_left('r/s2', 0, 'cancelled');
ok(count_unwatched($pb, 'r/c2'), 'cancelled: b no longer watches the count');
is(gauge_becomes($sb1, $base), $base, 'cancelled: the watches gauge is back');

note 'backend exit';
$sb1->send("SELECT zk_semaphore_acquire_by_count('r/s2', 'r/c2')");
waits($pb, $sb1, 'r/s2', 'r/c2', 1, 'b waits');
$sb2->query_ok("SELECT pg_terminate_backend(" . $sb1->pid . ")");
($out, $err) = $sb1->result;
like($err, qr/terminat/, 'its backend was terminated');
$sb1 = ZkLockTest::Session->new($pb);
nothing_left('r/s2', 0, 'backend exit');
ok(count_unwatched($pb, 'r/c2'), 'backend exit: b no longer watches the count');
is(gauge_becomes($sb1, $base), $base, 'backend exit: the watches gauge is back');

note 'the count deleted while two leases of one call wait';
set_count('r/c2', 1);
is($sb2->query_ok("SELECT zk_semaphore_acquire_by_count('r/s2', 'r/c2', 0)"),
	't', 'b2 holds the one lease');
$sb1->send("SELECT zk_semaphore_acquire_leases_by_count('r/s2', 'r/c2', 2)");
waits($pb, $sb1, 'r/s2', 'r/c2', 3, 'two leases wait');
ZkLockTest::zk_python($zk, q{zk.delete('/zklock/r/c2')});
($out, $err) = $sb1->result;
is(sqlstate($err), '22023', 'the count deleted: 22023');
nothing_left('r/s2', 1, 'count deleted');
is($sb2->query_ok("SELECT zk_semaphore_release('r/s2')"), 't', 'b2 releases');
nothing_left('r/s2', 0, 'count deleted, released');
ok(count_unwatched($pb, 'r/c2'), 'count deleted: b no longer watches it');
is(gauge_becomes($sb1, $base), $base, 'count deleted: the watches gauge is back');

note 'the count spoiled while two leases of one call wait';
set_count('r/c2', 1);
is($sb2->query_ok("SELECT zk_semaphore_acquire_by_count('r/s2', 'r/c2', 0)"),
	't', 'b2 holds the one lease');
$sb1->send("SELECT zk_semaphore_acquire_leases_by_count('r/s2', 'r/c2', 2)");
waits($pb, $sb1, 'r/s2', 'r/c2', 3, 'two leases wait');
ZkLockTest::zk_python($zk, q{zk.set('/zklock/r/c2', b'abcde')});
($out, $err) = $sb1->result;
is(sqlstate($err), '22P02', 'the count spoiled: 22P02');
nothing_left('r/s2', 1, 'count spoiled');
ok(count_unwatched($pb, 'r/c2'), 'count spoiled: b no longer watches it');
is(gauge_becomes($sb1, $base), $base, 'count spoiled: the watches gauge is back');
is($sb2->query_ok("SELECT zk_semaphore_release('r/s2')"), 't', 'b2 releases');
ZkLockTest::zk_python($zk, q{zk.delete('/zklock/r/c2')});

note 'granted';
set_count('r/c2', 0);
$sb1->send("SELECT zk_semaphore_acquire_by_count('r/s2', 'r/c2')");
waits($pb, $sb1, 'r/s2', 'r/c2', 1, 'b waits');
set_count('r/c2', 1);
($out, $err) = $sb1->result;
is("$out$err", 't', 'the count raised: granted');
ok(count_unwatched($pb, 'r/c2'), 'granted: b no longer watches the count');
is(gauge_becomes($sb1, $base), $base, 'granted: the watches gauge is back');
$sb1->query_ok("SELECT zk_semaphore_release('r/s2')");
nothing_left('r/s2', 0, 'released');

# ===========================================================================
note '4. a number-sized lease whose first listing is answered after a reconnect';

$reconnects = zk_status_of($pa)->{reconnects};
$proxy->withhold('getChildren', '/zklock/r/n/leases');
$sa1->send("SELECT zk_semaphore_acquire('r/n', 2, 60000)");
ok($proxy->wait_fired, 'the reply to the lease\'s first listing was lost');
ok( poll_status(
		$pa,
		sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $reconnects },
		timeout => 30),
	'a reconnects in its session');
($out, $err) = $sa1->result(timeout => 60);
is("$out$err", 't', 'the number-sized lease of a free semaphore is granted');
$sa1->query_ok("SELECT zk_semaphore_release('r/n')") if $out eq 't';
nothing_left('r/n', 0, 'number-sized, released');

note 'a number-sized lease whose create\'s reply is lost';
$reconnects = zk_status_of($pa)->{reconnects};
$proxy->withhold('create2', '/zklock/r/n2/leases');
$sa1->send("SELECT zk_semaphore_acquire('r/n2', 2, 60000)");
ok($proxy->wait_fired, 'the reply to the lease\'s create was lost');
ok( poll_status(
		$pa,
		sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $reconnects },
		timeout => 30),
	'a reconnects in its session');
($out, $err) = $sa1->result(timeout => 60);
is("$out$err", 't', 'the lease, found again, is granted');
$sa1->query_ok("SELECT zk_semaphore_release('r/n2')") if $out eq 't';
nothing_left('r/n2', 0, 'lost create, released');

done_testing();

# 100_at_most_once.pl
#    zk_barrier_set, zk_barrier_remove and zk_lock_revoke change something
#    at most once: when the worker's session is lost while one is pending,
#    it is not started over in the new session once it sent its write (the
#    write may have been applied: 40003, statement_completion_unknown), and
#    it is started over when it had sent none (it was queued during the
#    outage: nothing was done, so the new session does it, as a call made
#    then would).  Instance a reaches ZooKeeper through the fault proxy,
#    which refuses its connections until its session is lost (and, for the
#    writes sent, withholds the reply of the write after the server applied
#    it); instance b looks and holds locks directly.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(zk_status_of poll_status zk_exists);
use ZkFaultProxy;

my $zk = ZkLockTest::zk_start();
my $proxy = ZkFaultProxy->start($zk);
# a's calls wait for a session far longer than its session lives
my $pa = ZkLockTest::pg_node('once_a', $proxy->hosts,
	'zklock.session_timeout' => 4000,
	'zklock.connect_timeout' => 120000);
my $pb = ZkLockTest::pg_node('once_b', $zk);
poll_status($_, sub { $_[0]{state} eq 'connected' }) foreach ($pa, $pb);

sub session { return ZkLockTest::Session->new(@_); }
my $sb = session($pb);
my $monitor = session($pa);

# a's session is lost (its calls waited through it); then a connects again
sub lose_session_of_a
{
	my ($what, $losses) = @_;
	ok( poll_status(
			$monitor, sub { $_[0]{session_losses} > $losses }, timeout => 60),
		"$what: a's session is lost");
	$proxy->accept;
	ok( poll_status(
			$monitor, sub { $_[0]{state} eq 'connected' }, timeout => 60),
		"$what: a connects again, in a new session");
}

# ---------------------------------------------------------------------------
note 'queued during the outage, nothing sent: started over in the new session';

is($sb->query_ok("SELECT zk_barrier_set('once/removed')"), 't',
	'b sets the barrier a will remove');
my $holder = session($pb);
is($holder->query_ok("SELECT zk_lock_acquire('once/lock')"), 't',
	'b holds the lock a will revoke');

my $losses = zk_status_of($monitor)->{session_losses};
$proxy->refuse(600);
$proxy->cut;
ok(poll_status($monitor, sub { $_[0]{state} ne 'connected' }, timeout => 30),
	'a is cut off');
my ($set, $remove, $revoke) = map { session($pa) } 1 .. 3;
$set->send("SELECT zk_barrier_set('once/set')");
$remove->send("SELECT zk_barrier_remove('once/removed')");
$revoke->send("SELECT zk_lock_revoke('once/lock')");
lose_session_of_a('nothing sent', $losses);

my ($out, $err) = $set->result(timeout => 60);
is($out, 't', 'zk_barrier_set sets the barrier in the new session') or diag $err;
($out, $err) = $remove->result(timeout => 60);
is($out, 't', 'zk_barrier_remove removes it in the new session') or diag $err;
($out, $err) = $revoke->result(timeout => 60);
is($out, '1', 'zk_lock_revoke asks the holder in the new session') or diag $err;
is($sb->query_ok("SELECT zk_barrier_wait('once/set', 0)"), 'f',
	'b sees the barrier set');
is($sb->query_ok("SELECT zk_barrier_wait('once/removed', 0)"), 't',
	'b sees the other removed');
is($holder->query_ok("SELECT zk_lock_revocation_requested('once/lock')"), 't',
	'the holder was asked to let go');
is($holder->query_ok("SELECT zk_lock_release('once/lock')"), 't',
	'the holder lets go');

# ---------------------------------------------------------------------------
note 'the write sent and applied, its reply lost, then the session: 40003';

# Session $s sends $sql; ZooKeeper applies its write (op $op on a path with
# $sub) but the reply is lost, and a's session with it: the call's error.
sub write_then_lose_session
{
	my ($what, $s, $sql, $op, $sub) = @_;
	my $losses = zk_status_of($monitor)->{session_losses};
	$proxy->withhold($op, $sub);
	$proxy->refuse(600);
	$s->send($sql);
	ok($proxy->wait_fired, "$what: ZooKeeper applied a's write; its reply was lost");
	lose_session_of_a($what, $losses);
	my ($out, $err) = $s->result(timeout => 60);
	return $err;
}

$err = write_then_lose_session('set sent', $set,
	"SELECT zk_barrier_set('once/lost')", 'anycreate', '/once/lost');
is(sqlstate($err), '40003', 'zk_barrier_set fails with 40003') or diag $err;
like($err, qr/may or may not have been made/, '... saying the change may have been made');
is($sb->query_ok("SELECT zk_barrier_wait('once/lost', 0)"), 'f',
	'b sees that it was made');

is($holder->query_ok("SELECT zk_lock_acquire('once/lock2')"), 't',
	'b holds another lock');
$err = write_then_lose_session('revocation sent', $revoke,
	"SELECT zk_lock_revoke('once/lock2')", 'setData', '/once/lock2/');
is(sqlstate($err), '40003', 'zk_lock_revoke fails with 40003') or diag $err;
ok( poll_until(
		sub {
			$holder->query_ok("SELECT zk_lock_revocation_requested('once/lock2')")
			  eq 't';
		},
		timeout => 10),
	'the holder was asked once');

$_->quit foreach ($set, $remove, $revoke, $holder, $monitor, $sb);
$proxy->stop;
done_testing();

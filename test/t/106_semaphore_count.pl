# 106_semaphore_count.pl
#    Semaphores sized by a shared count (zk_semaphore_acquire_by_count and
#    its _xact and _leases forms), Curator's
#    InterProcessSemaphoreV2(client, path, SharedCountReader): two
#    PostgreSQL instances (a through test/zkfaultproxy) and a real Curator
#    on one ZooKeeper.
#    - the count is the size: a raised count admits a waiter at once (its
#      watch on the count fires), whoever raised it; a lowered count keeps
#      the leases held and admits nobody new until they are under it;
#    - with Curator on the same paths: leases of both never exceed the
#      count, a count raised by Curator's SharedCount admits a zklock
#      waiter and one raised by zklock a Curator waiter; Kazoo's Counter
#      (support_curator=True) raises it too (Kazoo's Semaphore has no
#      count-sized form);
#    - a count that is absent or not 4 bytes fails (22023, 22P02 naming
#      the node) before anything is created; one deleted or spoiled while a
#      lease waits fails that lease and leaves no node of it, the leases
#      held stay;
#    - a lost reply to the read of the count (the fault proxy): read again
#      after reconnecting, granted once;
#    - ZooKeeper stopped: 08001, within min(timeout_ms, connect_timeout).
#
#    "Waits" is established positively: the session waits in zklock
#    (pg_stat_activity), its lease node is there and its instance's
#    ZooKeeper session watches the count (4lw wchp).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate children_become);
use ZkFault qw(zk_status_of poll_status zk_exists zk_watchers zklock_sessions);
use ZkFaultProxy;
use ZkInterop;

my $zk = ZkLockTest::zk_start();
my $proxy = ZkFaultProxy->start($zk);
# a's session outlives the moments its connections are refused
my $pa = ZkLockTest::pg_node('semc_a', $proxy->hosts,
	'zklock.session_timeout' => 8000);
my $pb = ZkLockTest::pg_node('semc_b', $zk, 'zklock.connect_timeout' => 1500);
my $curator = ZkInterop::curator($zk);
my $kazoo = ZkInterop::kazoo($zk);

my ($sa1, $sa2) = map { ZkLockTest::Session->new($pa) } 1 .. 2;
my ($sb1, $sb2) = map { ZkLockTest::Session->new($pb) } 1 .. 2;
my ($out, $err);

# Poll until the semaphore has that many lease nodes
sub leases_become
{
	my ($name, $n) = @_;
	my $got = children_become($zk, "/zklock/$name/leases", $n);
	return $got;
}

sub set_count
{
	my ($name, $value) = @_;
	$sa2->query_ok("SELECT zk_shared_count_set('$name', $value)");
	return;
}

# Poll until the instance's ZooKeeper session watches the count's node.
sub count_watched
{
	my ($node, $name) = @_;
	my $sessions = zklock_sessions($node);
	return poll_until(
		sub {
			grep { $_->[0] eq "/zklock/$name" && $sessions->{ $_->[1] } }
			  zk_watchers($zk, 1);
		});
}

# $s waits for a lease: in zklock, its lease node among $n, the count
# watched
sub waits
{
	my ($node, $s, $name, $count, $n, $what) = @_;
	ZkLockTest::wait_for_extension_wait($node, $s);
	is(leases_become($name, $n), $n, "$what: its lease node is there");
	ok(count_watched($node, $count), "$what: its instance watches the count");
	return;
}

# A count of 1: a's session holds the lease, b's waits for one.
sub one_held_one_waits
{
	set_count('sem/size', 1);
	is($sa1->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size')"),
		't', 'a holds the one lease of a count of 1');
	$sb1->send("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size')");
	waits($pb, $sb1, 'sem/jobs', 'sem/size', 2, 'b waits');
	return;
}

# ===========================================================================
note '1. zklock on two instances: the count is the size';

set_count('sem/size', 2);
is($sa1->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size')"),
	't', 'a takes a lease of a count of 2');
is($sb1->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size', 0)"),
	't', 'b takes the second');
is($sb2->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size', 0)"),
	'f', 'a third does not get one');
is(leases_become('sem/jobs', 2), 2, 'and left no lease node');

$sb2->send("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size')");
waits($pb, $sb2, 'sem/jobs', 'sem/size', 3, 'b waits for a third');
set_count('sem/size', 3);
($out, $err) = $sb2->result;
is("$out$err", 't', 'the count raised to 3: the waiter gets its lease');

note 'the count lowered: the leases held stay, nobody new';
set_count('sem/size', 1);
is($_->query_ok("SELECT zk_semaphore_held('sem/jobs')"), 't', 'a lease is still held')
  foreach ($sa1, $sb1, $sb2);
is(leases_become('sem/jobs', 3), 3, 'three lease nodes');
is($sa2->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size', 0)"),
	'f', 'a fourth does not get one');
$sa1->query_ok("SELECT zk_semaphore_release('sem/jobs')");
$sb1->query_ok("SELECT zk_semaphore_release('sem/jobs')");
is($sa2->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size', 0)"),
	'f', 'two released: one lease is left, as many as the count, so still none');
$sa2->send("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size')");
waits($pa, $sa2, 'sem/jobs', 'sem/size', 2, 'a waits');
$sb2->query_ok("SELECT zk_semaphore_release('sem/jobs')");
($out, $err) = $sa2->result;
is("$out$err", 't', 'the last of the old leases released: the waiter gets one');
$sa2->query_ok("SELECT zk_semaphore_release('sem/jobs')");

note 'several leases in one call wait for a count that fits them';
set_count('sem/size', 1);
$sb1->send("SELECT zk_semaphore_acquire_leases_by_count('sem/jobs', 'sem/size', 2)");
waits($pb, $sb1, 'sem/jobs', 'sem/size', 2, 'two leases of a count of 1 wait');
set_count('sem/size', 2);
($out, $err) = $sb1->result;
is("$out$err", 't', 'the count raised to 2: both granted');
is($sb1->query_ok("SELECT zk_semaphore_release('sem/jobs')"), 't', 'one release returns both');
is(leases_become('sem/jobs', 0), 0, 'no lease node left');

# ===========================================================================
note '2. with Curator\'s InterProcessSemaphoreV2(client, path, SharedCountReader)';

my $sem = '/zklock/sem/jobs';
my $size = '/zklock/sem/size';
set_count('sem/size', 2);
is($curator->ask(c1 => "sem-acquire-count $sem $size 10000"), 'ok',
	'Curator takes a lease of the count of 2');
is($sa1->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size', 0)"),
	't', 'zklock takes the second');
is($curator->ask(c2 => "sem-acquire-count $sem $size 300"), 'timeout',
	'Curator does not get a third');
is($sb1->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size', 0)"),
	'f', 'nor does zklock');
is(leases_become('sem/jobs', 2), 2, 'two lease nodes: never more than the count');

$curator->send(c2 => "sem-acquire-count $sem $size -1");
is(leases_become('sem/jobs', 3), 3, 'a blocking Curator acquire waits, its lease created');
ok(!$curator->answered('c2'), 'it has not returned');
set_count('sem/size', 3);
is($curator->answer('c2'), 'ok', 'zklock raises the count to 3: Curator gets its lease');

$sb1->send("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size')");
waits($pb, $sb1, 'sem/jobs', 'sem/size', 4, 'zklock waits for a fourth');
is($curator->ask(cs => "count-start $size 0"), 'ok', 'Curator starts a SharedCount on the count');
is($curator->ask(cs => 'count-set 4'), 'ok', 'and sets it to 4');
($out, $err) = $sb1->result;
is("$out$err", 't', 'zklock gets its lease');

is($curator->ask(cs => 'count-set 2'), 'ok', 'Curator lowers the count to 2');
is($sa1->query_ok("SELECT zk_semaphore_held('sem/jobs')"), 't', 'zklock\'s leases stay');
is($sb1->query_ok("SELECT zk_semaphore_held('sem/jobs')"), 't', '... both');
is($curator->ask(c3 => "sem-acquire-count $sem $size 300"), 'timeout',
	'Curator does not get a fifth');
is($sb2->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size', 0)"),
	'f', 'nor does zklock');
is(leases_become('sem/jobs', 4), 4, 'the four held leases are still there');
$sa1->query_ok("SELECT zk_semaphore_release('sem/jobs')");
is($curator->ask(c1 => 'sem-release'), 'ok', 'Curator and zklock release one each');
is($curator->ask(c3 => "sem-acquire-count $sem $size 300"), 'timeout',
	'two left, as many as the count: Curator gets none');
is($sb2->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size', 0)"),
	'f', 'nor does zklock');
$curator->send(c3 => "sem-acquire-count $sem $size -1");
is(leases_become('sem/jobs', 3), 3, 'Curator waits');
$sb1->query_ok("SELECT zk_semaphore_release('sem/jobs')");
is($curator->answer('c3'), 'ok', 'zklock releases: Curator gets its lease');
is($sb2->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/size', 0)"),
	'f', 'two held again: zklock gets none');
is($curator->ask($_ => 'sem-release'), 'ok', "Curator's $_ releases") foreach qw(c2 c3);
is(leases_become('sem/jobs', 0), 0, 'no lease node left');

note 'Kazoo\'s Counter (support_curator=True) raises the count too';
one_held_one_waits();
is($kazoo->ask(k1 => 'counter-add /zklock/sem/size 1'), 'ok 1 2', 'Kazoo adds 1');
($out, $err) = $sb1->result;
is("$out$err", 't', 'b gets its lease');
$_->query_ok("SELECT zk_semaphore_release('sem/jobs')") foreach ($sa1, $sb1);

# ===========================================================================
note '3. a count that is not there, or not a count';

($out, $err) = $sa1->query(
	"SELECT zk_semaphore_acquire_by_count('sem/other', 'sem/absent', 0)");
is(sqlstate($err), '22023', 'an absent count: 22023');
like($err, qr{Shared count "sem/absent" does not exist}, '... saying so');
ok(!zk_exists($zk, '/zklock/sem/absent'), 'the count was not created');
ok(!zk_exists($zk, '/zklock/sem/other'), 'nor anything of the semaphore');

ZkLockTest::zk_python($zk, q{zk.create('/zklock/sem/three', b'\x00\x00\x01')});
($out, $err) = $sa1->query(
	"SELECT zk_semaphore_acquire_by_count('sem/other', 'sem/three', 0)");
is(sqlstate($err), '22P02', 'a count node of 3 bytes: 22P02');
like($err, qr{Node "/zklock/sem/three" holds 3 bytes}, '... naming the node');
ok(!zk_exists($zk, '/zklock/sem/other'), 'nothing of the semaphore was created');

note 'the count deleted, or spoiled, while a lease waits';
one_held_one_waits();
ZkLockTest::zk_python($zk, q{zk.delete('/zklock/sem/size')});
($out, $err) = $sb1->result;
is(sqlstate($err), '22023', 'the count deleted: the waiter fails with 22023');
like($err, qr{Its shared count "sem/size" does not exist}, '... saying so');
is(leases_become('sem/jobs', 1), 1, 'its lease node is gone');
is($sa1->query_ok("SELECT zk_semaphore_held('sem/jobs')"), 't', 'the lease held stays');

set_count('sem/size', 1);
$sb1->send("SELECT zk_semaphore_acquire_by_count_xact('sem/jobs', 'sem/size')");
waits($pb, $sb1, 'sem/jobs', 'sem/size', 2, 'b waits again (transaction scope)');
ZkLockTest::zk_python($zk, q{zk.set('/zklock/sem/size', b'abc')});
($out, $err) = $sb1->result;
is(sqlstate($err), '22P02', 'the count spoiled (3 bytes): the waiter fails with 22P02');
like($err, qr{Node "/zklock/sem/size" holds 3 bytes}, '... naming the node');
is(leases_become('sem/jobs', 1), 1, 'its lease node is gone');
is($sa1->query_ok("SELECT zk_semaphore_release('sem/jobs')"), 't', 'a releases');
is(leases_become('sem/jobs', 0), 0, 'no lease node left');

# ===========================================================================
note '4. a lost reply to the read of the count';

set_count('sem/lost-size', 0);
$sa1->send("SELECT zk_semaphore_acquire_by_count('sem/lost', 'sem/lost-size')");
waits($pa, $sa1, 'sem/lost', 'sem/lost-size', 1, 'a waits on a count of 0');
my $reconnects = zk_status_of($pa)->{reconnects};
$proxy->withhold('getData', '/zklock/sem/lost-size');
$proxy->refuse(120);
$sb2->query_ok("SELECT zk_shared_count_set('sem/lost-size', 1)");
ok($proxy->wait_fired, 'b raised the count: a read it again, and the reply was lost');
$proxy->accept;
ok( poll_status(
		$pa,
		sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $reconnects },
		timeout => 30),
	'a reconnects in its session');
($out, $err) = $sa1->result(timeout => 60);
is("$out$err", 't', 'a reads the count again and gets its lease');
is(leases_become('sem/lost', 1), 1, 'one lease node');
$sa1->query_ok("SELECT zk_semaphore_release('sem/lost')");

# ===========================================================================
note '5. ZooKeeper stopped: 08001';

$zk->stop_node(1);
($out, $err) = $sb1->query(
	"SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/lost-size', 0)");
is(sqlstate($err), '08001', 'an acquire fails with 08001');
my $t0 = Time::HiRes::time();
($out, $err) = $sb1->query(
	"SELECT zk_semaphore_acquire_leases_by_count('sem/jobs', 'sem/lost-size', 1, 200)");
my $took = Time::HiRes::time() - $t0;
is(sqlstate($err), '08001', 'so does one of several leases with timeout_ms 200');
# the outage contract: min(timeout_ms, zklock.connect_timeout (1500 ms))
cmp_ok($took, '<', 1.2, "... by its timeout_ms, not connect_timeout (${took}s)");
ZkFault::zk_restart_node($zk, 1);
ok(poll_status($pb, sub { $_[0]{state} eq 'connected' }, timeout => 30),
	'b is connected again');
is($sb1->query_ok("SELECT zk_semaphore_acquire_by_count('sem/jobs', 'sem/lost-size', 0)"),
	't', 'and takes a lease');
is(leases_become('sem/jobs', 1), 1, 'one lease node: nothing was left behind');

$curator->quit;
$kazoo->quit;
done_testing();

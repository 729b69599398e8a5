# 091_double_barrier.pl
#    The double barrier (zk_double_barrier_enter, zk_double_barrier_leave),
#    Curator's DistributedDoubleBarrier on the same path: SQL sessions of
#    two PostgreSQL instances and real Curator members in one barrier.
#    Enter waits until `members` have entered, leave until all have left,
#    whoever (SQL or Curator) comes first or last; a member whose backend
#    is terminated leaves with it; a timed-out, cancelled or
#    statement/lock-timed-out enter or leave leaves no member node behind;
#    a leave that ends without completing deletes "ready" (as Curator's
#    when its time is up) before it returns, and so does the last membership to end without
#    leaving (DISCARD ALL, backend exit), so that "ready" never outlives
#    every member and lets the next round's first member through alone;
#    an instance that loses its ZooKeeper session (its worker paused past
#    the session timeout) loses its memberships, and an enter still
#    waiting starts over in the next session; an instance whose replies
#    are lost (test/zkfaultproxy withholds the reply of its member's
#    create, its ready's create, its member's delete, its ready's delete,
#    then resets the connection) or whose connection is cut while it waits
#    still enters and leaves once, with the others, and leaves nothing
#    behind, also when its lost delete of "ready" is sent again after the
#    next round began.  zk_stats counts a leave
#    that times out in timeouts, one ended by cancel or lock_timeout in
#    cancels, as for a lock wait.
#
#    Every "is waiting" is established positively (pg_stat_activity, the
#    member nodes in ZooKeeper, Curator's watch), never by sleeping.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(zk_exists poll_status signal_process zk_restart_node);
use ZkInterop;
use ZkFaultProxy;

my $zk = ZkLockTest::zk_start();
# Session timeouts (the harness's maximum) that A and B keep their sessions,
# and A its releases trusted, through the outages of ZooKeeper below (a
# leave whose time is up meanwhile)
my $pa = ZkLockTest::pg_node('dbarrier_a', $zk, 'zklock.session_timeout' => '60000');
my $pb = ZkLockTest::pg_node('dbarrier_b', $zk, 'zklock.session_timeout' => '60000');
my $curator = ZkInterop::curator($zk);

my $sa = ZkLockTest::Session->new($pa);
my $sb = ZkLockTest::Session->new($pb);

# The member nodes of barrier $name (its children but "ready").
sub members_of
{
	my ($name) = @_;
	return grep { $_ ne 'ready' } ZkLockTest::zk_children($zk, "/zklock/$name");
}

# Wait until barrier $name has $want member nodes.
sub members_become
{
	my ($name, $want) = @_;
	return poll_until(sub { scalar(members_of($name)) == $want });
}

# zk_stats' timeouts and cancels of instance A, as "timeouts cancels".
sub stats_a
{
	return join ' ', split /\|/,
	  $pa->safe_psql('postgres', 'SELECT timeouts, cancels FROM zk_stats');
}

# What stats_a() counted since $before.
sub counted_since
{
	my ($before) = @_;
	my @b = split / /, $before;
	my @n = split / /, stats_a();
	return join ' ', $n[0] - $b[0], $n[1] - $b[1];
}

sub ready_exists
{
	my ($name) = @_;
	return zk_exists($zk, "/zklock/$name/ready");
}

my $zklock_session = ZkFault::zklock_sessions($pa, $pb);
is(scalar keys %$zklock_session, 2, 'both instances have a session');

# Watches on nodes below $path of zklock's sessions ($zklock true) or of
# the others (Curator's).
sub watches_below
{
	my ($path, $zklock) = @_;
	return scalar grep {
		index($_->[0], "$path/") == 0
		  && ($zklock_session->{ $_->[1] } ? 1 : 0) == ($zklock ? 1 : 0)
	} ZkFault::zk_watchers($zk, 1);
}

sub curator_watches_below { return watches_below($_[0], 0); }

# Wait until nothing of barrier $name is left: no member node, no
# "ready", and no watch of zklock on any of them.
sub barrier_empty
{
	my ($name) = @_;
	return poll_until(
		sub {
			scalar(ZkLockTest::zk_children($zk, "/zklock/$name")) == 0
			  && watches_below("/zklock/$name", 1) == 0;
		});
}

# Send a call that must wait, and see it wait.
sub start_waiting
{
	my ($node, $s, $sql, $what) = @_;
	$s->send($sql);
	ZkLockTest::wait_for_extension_wait($node, $s);
	ok(!$s->done, "$what waits");
	return;
}

# ---------------------------------------------------------------------------
note 'three members: SQL on instance A, SQL on instance B, Curator';

start_waiting($pa, $sa, "SELECT zk_double_barrier_enter('db/three', 3)",
	'A (1 of 3) entering');
ok(members_become('db/three', 1), "A's member node exists");
my @nodes = members_of('db/three');
like($nodes[0], qr/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
	'named by a random UUID, as Curator names its members');
is(ZkLockTest::zk_python($zk,
		q{print(zk.exists(args[0]).ephemeralOwner != 0, end='')},
		"/zklock/db/three/$nodes[0]"),
	'True', 'the member node is ephemeral');
start_waiting($pb, $sb, "SELECT zk_double_barrier_enter('db/three', 3)",
	'B (2 of 3) entering');
ok(members_become('db/three', 2), "B's member node exists");
ok(!$sa->done, 'A still waits with 2 of 3 entered');
ok(!ready_exists('db/three'), 'no ready node yet');
is($curator->ask(c1 => 'dbarrier-enter /zklock/db/three 3 -1'), 'ok',
	'Curator enters as the third member at once');
is($sa->result, 't', "A's enter returns true");
is($sb->result, 't', "B's enter returns true");
ok(ready_exists('db/three'), 'the ready node exists');
is(scalar(members_of('db/three')), 3, 'three member nodes');
is($sa->query_ok(
		"SELECT kind || ' ' || scope || ' ' || state FROM zk_locks "
		  . "WHERE pid = pg_backend_pid()"),
	'double barrier session held', 'zk_locks shows the membership');

start_waiting($pa, $sa, "SELECT zk_double_barrier_leave('db/three')",
	'A (first to leave) leaving');
start_waiting($pb, $sb, "SELECT zk_double_barrier_leave('db/three')",
	'B (second to leave) leaving');
ok(!$sa->done, 'A still waits while Curator is in the barrier');
is($curator->ask(c1 => 'dbarrier-leave -1'), 'ok', 'Curator leaves');
is($sa->result, 't', "A's leave returns true");
is($sb->result, 't', "B's leave returns true");
ok(barrier_empty('db/three'),
	'no member node, no ready node and no watch of zklock is left');
is($sa->query_ok(
		"SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() "
		  . "AND state <> 'releasing'"),
	'0', 'A is no member any more');

# ---------------------------------------------------------------------------
note 'Curator enters first and waits; zklock leaves first and waits';

$curator->send(c2 => 'dbarrier-enter /zklock/db/two 2 -1');
ok(members_become('db/two', 1), "Curator's member node exists");
ok(poll_until(sub { curator_watches_below('/zklock/db/two') == 1 }),
	'Curator watches the ready node');
ok(!$curator->answered('c2'), 'Curator waits');
is($sa->query_ok("SELECT zk_double_barrier_enter('db/two', 2)"), 't',
	'zklock enters as the second member at once');
is($curator->answer('c2'), 'ok', "Curator's enter returns");
start_waiting($pa, $sa, "SELECT zk_double_barrier_leave('db/two')",
	'zklock leaving first');
is($curator->ask(c2 => 'dbarrier-leave -1'), 'ok', 'Curator leaves');
is($sa->result, 't', "zklock's leave returns true");
ok(barrier_empty('db/two'), 'nothing is left of the barrier');

note 'the same barrier again: zklock enters first, Curator leaves first';

start_waiting($pb, $sb, "SELECT zk_double_barrier_enter('db/two', 2)",
	'zklock (instance B) entering first');
is($curator->ask(c2 => 'dbarrier-enter /zklock/db/two 2 -1'), 'ok',
	'Curator enters as the second member at once');
is($sb->result, 't', "zklock's enter returns true");
$curator->send(c2 => 'dbarrier-leave -1');
ok(poll_until(sub { curator_watches_below('/zklock/db/two') == 1 }),
	"Curator's leave watches a member node");
ok(!$curator->answered('c2'), "Curator's leave waits for zklock");
is($sb->query_ok("SELECT zk_double_barrier_leave('db/two')"), 't',
	'zklock leaves, last');
is($curator->answer('c2'), 'ok', "Curator's leave returns");
ok(barrier_empty('db/two'), 'nothing is left of the barrier');

# ---------------------------------------------------------------------------
note 'two members on one instance, and one on the other';

my $sa2 = ZkLockTest::Session->new($pa);
start_waiting($pa, $sa, "SELECT zk_double_barrier_enter('db/same', 3)",
	'A entering');
start_waiting($pa, $sa2, "SELECT zk_double_barrier_enter('db/same', 3)",
	'a second session of instance A entering');
ok(members_become('db/same', 2), 'two member nodes of instance A');
ok(!$sa->done && !$sa2->done, 'both wait');
is($sb->query_ok("SELECT zk_double_barrier_enter('db/same', 3)"), 't',
	'B enters as the third member at once');
is($sa->result, 't', "A's enter returns true");
is($sa2->result, 't', "the second session's enter returns true");
start_waiting($pa, $sa, "SELECT zk_double_barrier_leave('db/same')",
	'A leaving');
start_waiting($pb, $sb, "SELECT zk_double_barrier_leave('db/same')",
	'B leaving');
ok(!$sa->done, 'A still waits for the second session of its instance');
is($sa2->query_ok("SELECT zk_double_barrier_leave('db/same')"), 't',
	'the second session leaves, last');
is($sa->result, 't', "A's leave returns true");
is($sb->result, 't', "B's leave returns true");
ok(barrier_empty('db/same'), 'nothing is left of the barrier');
$sa2->quit;

# ---------------------------------------------------------------------------
note 'a member whose backend is terminated leaves with it';

my $sk = ZkLockTest::Session->new($pa);
start_waiting($pa, $sk, "SELECT zk_double_barrier_enter('db/kill', 3)",
	'a member to be killed entering');
ok(members_become('db/kill', 1), 'its member node exists');
is($pa->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $sk->pid . ')'),
	't', 'its backend is terminated while it waits');
ok(members_become('db/kill', 0), 'its member node is gone');
$sk->quit;

$sk = ZkLockTest::Session->new($pa);
$sk->send("SELECT zk_double_barrier_enter('db/kill', 2)");
is($sb->query_ok("SELECT zk_double_barrier_enter('db/kill', 2)"), 't',
	'B enters beside it');
is($sk->result, 't', 'both entered');
is($pa->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $sk->pid . ')'),
	't', 'the other member is terminated inside the barrier');
ok(members_become('db/kill', 1), 'its member node is gone');
is($sb->query_ok("SELECT zk_double_barrier_leave('db/kill', 30000)"), 't',
	"B's leave does not wait for the terminated member");
ok(barrier_empty('db/kill'), 'nothing is left of the barrier');
$sk->quit;

# ---------------------------------------------------------------------------
note 'timeouts, cancel, statement_timeout and lock_timeout leave nothing';

is($sa->query_ok("SELECT zk_double_barrier_enter('db/t', 2, 300)"), 'f',
	'an enter with a timeout returns false');
ok(members_become('db/t', 0), 'its member node is gone');
is($sa->query_ok("SELECT zk_double_barrier_enter('db/t', 2, 0)"), 'f',
	'an enter that must not wait returns false');
ok(members_become('db/t', 0), 'its member node is gone');

start_waiting($pa, $sa, "SELECT zk_double_barrier_enter('db/t', 2)",
	'an enter to be cancelled');
ok(members_become('db/t', 1), 'its member node exists');
is($pa->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $sa->pid . ')'),
	't', 'cancel sent');
my ($out, $err) = $sa->result;
is(sqlstate($err), '57014', 'the enter ends with SQLSTATE 57014');
ok(members_become('db/t', 0), 'the cancelled enter left no member node');

foreach my $case ([ 'statement_timeout', '57014' ], [ 'lock_timeout', '55P03' ])
{
	my ($setting, $code) = @$case;
	$sa->query_ok("SET $setting = '500ms'");
	($out, $err) = $sa->query("SELECT zk_double_barrier_enter('db/t', 2)");
	is(sqlstate($err), $code, "$setting ends an enter with $code");
	ok(members_become('db/t', 0), "$setting: no member node is left");
	$sa->query_ok("RESET $setting");
}
is($sa->query_ok(
		"SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid() "
		  . "AND state <> 'releasing'"),
	'0', 'nothing of the enters is left in zk_locks');

note 'a leave that times out or is cancelled: the member node goes';

$curator->send(c3 => 'dbarrier-enter /zklock/db/lt 2 -1');
ok(members_become('db/lt', 1), "Curator's member node exists");
is($sa->query_ok("SELECT zk_double_barrier_enter('db/lt', 2)"), 't',
	'zklock enters beside Curator');
is($curator->answer('c3'), 'ok', 'Curator entered');
ok(ready_exists('db/lt'), '"ready" exists');
my $stats = stats_a();
is($sa->query_ok("SELECT zk_double_barrier_leave('db/lt', 300)"), 'f',
	'a leave with a timeout returns false while Curator is inside');
is(counted_since($stats), '1 0', 'zk_stats counts it as a timeout');
ok(members_become('db/lt', 1), "zklock's member node is gone, Curator's stays");
ok(poll_until(sub { !ready_exists('db/lt') }),
	'the timed-out leave deleted "ready", as Curator\'s does');
($out, $err) = $sa->query("SELECT zk_double_barrier_leave('db/lt', 0)");
is(sqlstate($err), '55000', 'the session is no member any more');
is($curator->ask(c3 => 'dbarrier-leave -1'), 'ok',
	'Curator leaves, alone now');
ok(barrier_empty('db/lt'), 'nothing is left of the barrier');

$curator->send(c3 => 'dbarrier-enter /zklock/db/lt 2 -1');
ok(members_become('db/lt', 1), "Curator's member node exists");
is($sa->query_ok("SELECT zk_double_barrier_enter('db/lt', 2)"), 't',
	'zklock enters beside Curator again');
is($curator->answer('c3'), 'ok', 'Curator entered');
$stats = stats_a();
start_waiting($pa, $sa, "SELECT zk_double_barrier_leave('db/lt')",
	'a leave to be cancelled');
is($pa->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $sa->pid . ')'),
	't', 'cancel sent');
($out, $err) = $sa->result;
is(sqlstate($err), '57014', 'the leave ends with SQLSTATE 57014');
is(counted_since($stats), '0 1', 'zk_stats counts it as a cancel');
ok(members_become('db/lt', 1), "zklock's member node is gone, Curator's stays");
ok(poll_until(sub { !ready_exists('db/lt') }),
	'the cancelled leave deleted "ready"');
$sa->query_ok("SET lock_timeout = '500ms'");
is($sa->query_ok("SELECT zk_double_barrier_enter('db/lt', 1)"), 't',
	'zklock enters a third time (a barrier of one: at once)');
$stats = stats_a();
($out, $err) = $sa->query("SELECT zk_double_barrier_leave('db/lt')");
is(sqlstate($err), '55P03', 'lock_timeout ends a leave with 55P03');
is(counted_since($stats), '0 1', 'zk_stats counts it as a cancel');
$sa->query_ok("RESET lock_timeout");
ok(members_become('db/lt', 1), "zklock's member node is gone, Curator's stays");
ok(poll_until(sub { !ready_exists('db/lt') }),
	'the leave ended by lock_timeout deleted "ready"');
is($curator->ask(c3 => 'dbarrier-leave -1'), 'ok', 'Curator leaves');
ok(barrier_empty('db/lt'), 'nothing is left of the barrier');

# A leave that times out returns only once "ready" is deleted, even when
# its own node was gone before (it was not the lowest member) and
# ZooKeeper is away when its time is up: it waits for ZooKeeper (while A's
# session stays trusted, as a release does).  The other member is a
# persistent node named to sort first.  $outage ("paused" or "stopped")
# happens once the leave's own node is gone, before its $timeout (s)
# is up; $meanwhile runs after that, and $back ends the outage.  The
# timeouts (8 s) leave room for looking at the members and stopping or
# pausing ZooKeeper (a second or two on a busy machine) before the time is up.
sub leave_through_outage
{
	my ($name, $timeout, $outage, $start, $meanwhile, $back) = @_;
	my $low = "/zklock/$name/00000000-0000-4000-8000-000000000000";
	ZkLockTest::zk_python($zk, q{zk.create(args[0], b'', makepath=True)}, $low);
	is($sa->query_ok("SELECT zk_double_barrier_enter('$name', 2)"), 't',
		"$name: zklock enters beside a member that sorts first");
	ok(ready_exists($name), "$name: \"ready\" exists");
	my $t_leave = Time::HiRes::time();
	$sa->send("SELECT zk_double_barrier_leave('$name', ${timeout}000)");
	ok(members_become($name, 1), "$name: the leave deleted its own node and waits");
	$start->();
	cmp_ok(Time::HiRes::time() - $t_leave, '<', $timeout - 0.3,
		"$name: ZooKeeper was $outage before the leave's time was up");
	ok(!poll_until(sub { $sa->done }, timeout => $t_leave + $timeout + 0.8 - Time::HiRes::time()),
		"$name: with ZooKeeper $outage, the timed-out leave has not returned");
	$meanwhile->() if $meanwhile;
	$back->();
	is($sa->result, 'f', "$name: once ZooKeeper is back, the leave returns false");
	ok(!ready_exists($name), "$name: and \"ready\" was gone when it returned");
	ZkLockTest::zk_python($zk, q{zk.delete(args[0])}, $low);
	ok(barrier_empty($name), "$name: nothing is left of the barrier");
}

leave_through_outage('db/rd', 8, 'paused', sub { $zk->pause_node(1) },
	undef, sub { $zk->resume_node(1) });

# Stopped and started again within A's session timeout: the last calls are
# made once the session is connected again.  Meanwhile, an enter that gets
# no node (no connection) and whose time is up has no last calls to make:
# it fails at once with 08001 (it could not ask ZooKeeper: never false).
leave_through_outage(
	'db/rc', 8, 'stopped',
	sub { $zk->stop_node(1) },
	sub {
		my $sa2 = ZkLockTest::Session->new($pa);
		my $t_enter = Time::HiRes::time();
		my ($out, $err) = $sa2->query("SELECT zk_double_barrier_enter('db/off', 2, 500)");
		is(ZkFault::sqlstate($err), '08001',
			'with ZooKeeper stopped, an enter with a timeout fails with 08001, not false');
		cmp_ok(Time::HiRes::time() - $t_enter, '<', 5,
			'when its time is up, not once ZooKeeper is back');
		$sa2->quit;
	},
	sub { zk_restart_node($zk, 1) });
is_deeply([ sort keys %{ ZkFault::zklock_sessions($pa, $pb) } ],
	[ sort keys %$zklock_session ],
	'A and B kept their ZooKeeper sessions through the outages');

# ---------------------------------------------------------------------------
note 'no member completes leaving: "ready" does not outlive the members';

# A (instance A) leaves without waiting while B (instance B) is inside: as
# Curator's leave when its time is up, it deletes "ready" before it
# answers.  B then ends its membership with DISCARD ALL.
my $s2 = ZkLockTest::Session->new($pa);
start_waiting($pa, $s2, "SELECT zk_double_barrier_enter('db/stale', 2)",
	'A (1 of 2) entering');
ok(members_become('db/stale', 1), "A's member node exists");
is($sb->query_ok("SELECT zk_double_barrier_enter('db/stale', 2)"), 't',
	'B enters');
is($s2->result, 't', 'A enters');
ok(ready_exists('db/stale'), '"ready" exists');
is($s2->query_ok("SELECT zk_double_barrier_leave('db/stale', 0)"), 'f',
	'A leaves without waiting (B is inside): false');
ok(!ready_exists('db/stale'), 'A deleted "ready" before it answered');
ok(members_become('db/stale', 1), "A's member node is gone, B's stays");
$sb->query_ok('DISCARD ALL');
ok(barrier_empty('db/stale'),
	'B ends its membership with DISCARD ALL: nothing is left');
is($s2->query_ok("SELECT zk_double_barrier_enter('db/stale', 2, 0)"), 'f',
	'the next round does not let one member of two through');
ok(barrier_empty('db/stale'), 'nothing is left of the barrier');

# Neither leaves: A ends its membership with DISCARD ALL ("ready" stays
# for B, still inside), then B's backend exits: B's instance, finding no
# member node left, deletes "ready".
my $sb2 = ZkLockTest::Session->new($pb);
start_waiting($pa, $s2, "SELECT zk_double_barrier_enter('db/stale', 2)",
	'A (1 of 2) entering again');
ok(members_become('db/stale', 1), "A's member node exists");
is($sb2->query_ok("SELECT zk_double_barrier_enter('db/stale', 2)"), 't',
	'B enters');
is($s2->result, 't', 'A enters');
$s2->query_ok('DISCARD ALL');
ok(members_become('db/stale', 1), "A's member node is gone, B's stays");
ok(ready_exists('db/stale'), '"ready" stays while B is inside');
my $sb2_pid = $sb2->pid;
$sb2->quit;
ok( poll_until(
		sub {
			$pb->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE pid = $sb2_pid")
			  eq '0';
		}),
	"B's backend exits");
ok(barrier_empty('db/stale'),
	'no member node is left, and neither is "ready"');
is($s2->query_ok("SELECT zk_double_barrier_enter('db/stale', 2, 0)"), 'f',
	'the next round does not let one member of two through');
ok(barrier_empty('db/stale'), 'nothing is left of the barrier');
$s2->quit;

# ---------------------------------------------------------------------------
note 'an instance that loses its ZooKeeper session leaves with it';

my $pc = ZkLockTest::pg_node('dbarrier_c', $zk,
	'zklock.session_timeout' => '4000');
my $sc = ZkLockTest::Session->new($pc);
my $sw = ZkLockTest::Session->new($pc);
$curator->send(c4 => 'dbarrier-enter /zklock/db/loss 2 -1');
ok(members_become('db/loss', 1), "Curator's member node exists");
is($sc->query_ok("SELECT zk_double_barrier_enter('db/loss', 2)"), 't',
	'a session of instance C enters beside Curator');
is($curator->answer('c4'), 'ok', 'Curator entered');
start_waiting($pc, $sw, "SELECT zk_double_barrier_enter('db/loss2', 2)",
	'another session of C entering a second barrier');
ok(members_become('db/loss2', 1), 'its member node exists');
my @old = members_of('db/loss2');

my $st = poll_status($pc, sub { $_[0]{state} eq 'connected' });
ZkFault::stop_worker($pc, $st->{worker_pid});
ok(members_become('db/loss', 1),
	"C's member node expires with its session (the worker is paused)");
ok(members_become('db/loss2', 0), "so does its waiting member's node");
is($curator->ask(c4 => 'dbarrier-leave -1'), 'ok',
	'Curator leaves without waiting for the lost member');
ok(barrier_empty('db/loss'), 'nothing is left of the barrier');
signal_process($st->{worker_pid}, 'CONT');
ok(poll_status($pc,
		sub { $_[0]{state} eq 'connected' && $_[0]{session_id} ne $st->{session_id} },
		timeout => 30),
	'C has a new ZooKeeper session');

ok(members_become('db/loss2', 1),
	'the waiting enter starts over in the new session');
isnt((members_of('db/loss2'))[0], $old[0], 'with a new member node');
ok(!$sw->done, 'and still waits');
is($curator->ask(c5 => 'dbarrier-enter /zklock/db/loss2 2 -1'), 'ok',
	'Curator enters that barrier as the second member');
is($sw->result, 't', "C's waiting enter returns true");

($out, $err) = $sc->query("SELECT zk_double_barrier_leave('db/loss')");
is(sqlstate($err), '40001', 'the lost member cannot leave: 40001');
like($err, qr/was left when its ZooKeeper session ended/,
	'the message says why');
is($sc->query_ok("SELECT zk_double_barrier_enter('db/loss', 1)"), 't',
	'it can enter again');
is($sc->query_ok("SELECT zk_double_barrier_leave('db/loss')"), 't',
	'and leave');
start_waiting($pc, $sw, "SELECT zk_double_barrier_leave('db/loss2')",
	'C leaving the second barrier');
is($curator->ask(c5 => 'dbarrier-leave -1'), 'ok', 'Curator leaves it');
is($sw->result, 't', "C's leave returns true");
ok(barrier_empty('db/loss') && barrier_empty('db/loss2'),
	'nothing is left of either barrier');
$sc->quit;
$sw->quit;
$pc->stop;

# ---------------------------------------------------------------------------
note 'lost replies and cut connections of instance D (the fault proxy)';

my $proxy = ZkFaultProxy->start($zk);
my $pd = ZkLockTest::pg_node('dbarrier_d', $proxy->hosts,
	'zklock.session_timeout' => '8000');
my $sd = ZkLockTest::Session->new($pd);
$sb2 = ZkLockTest::Session->new($pb);
my $LOST = 'db/lost';

# One round of D and B in barrier db/lost (2 members): $first enters
# first and waits, then the other; then both leave.  $fault, when given,
# is [op, path substring] to withhold on D, armed before $arm_at ('enter'
# or 'leave').
sub lost_round
{
	my ($what, $first, $arm_at, $fault) = @_;
	my %s = (D => [ $pd, $sd ], B => [ $pb, $sb ]);
	my $second = $first eq 'D' ? 'B' : 'D';
	$proxy->withhold(@$fault) if $fault && $arm_at eq 'enter';
	start_waiting(@{ $s{$first} }, "SELECT zk_double_barrier_enter('$LOST', 2)",
		"$what: $first entering first");
	ok(members_become($LOST, 1), "$what: $first is a member");
	$proxy->cut if !$fault && $arm_at eq 'cut';
	is($s{$second}[1]->query_ok("SELECT zk_double_barrier_enter('$LOST', 2)"),
		't', "$what: $second enters second");
	is($s{$first}[1]->result, 't', "$what: ${first}'s enter returns true");
	$proxy->withhold(@$fault) if $fault && $arm_at eq 'leave';
	$_->[1]->send("SELECT zk_double_barrier_leave('$LOST')") foreach values %s;
	is($_->[1]->result, 't', "$what: leave returns true") foreach values %s;
	ok($proxy->wait_fired, "$what: the reply was withheld") if $fault;
	ok(barrier_empty($LOST), "$what: nothing is left of the barrier");
	return;
}

lost_round('member create', 'D', 'enter', [ 'anycreate', "/$LOST/" ]);
lost_round('ready create', 'B', 'enter', [ 'anycreate', "/$LOST/ready" ]);
lost_round('member delete', 'D', 'leave', [ 'delete', "/$LOST/" ]);
lost_round('cut while waiting', 'D', 'cut');

note 'D\'s delete of "ready" is sent again after the next round began';

start_waiting($pb, $sb, "SELECT zk_double_barrier_enter('$LOST', 2)",
	'B entering first');
is($sd->query_ok("SELECT zk_double_barrier_enter('$LOST', 2)"), 't',
	'D enters second');
is($sb->result, 't', "B's enter returns true");
my $reconnects = ZkFault::zk_status_of($pd)->{reconnects};
$proxy->withhold('delete', "/$LOST/ready");
$proxy->refuse(120);
# B's membership ends without a leave (DISCARD ALL): its last calls leave
# "ready" alone while D is inside, so the delete of "ready" is D's, when it
# leaves last (had both left together, either could delete it, and the
# other would find it gone and send none)
$sb->query_ok('DISCARD ALL');
ok(members_become($LOST, 1), 'B\'s membership ended: D is the only member');
$sd->send("SELECT zk_double_barrier_leave('$LOST')");
ok($proxy->wait_fired, 'D\'s delete of "ready" is applied, its reply lost');
start_waiting($pb, $sb, "SELECT zk_double_barrier_enter('$LOST', 2)",
	'next round: B entering first');
is($sb2->query_ok("SELECT zk_double_barrier_enter('$LOST', 2)"), 't',
	'next round: a second session of B enters second');
is($sb->result, 't', "next round: B's enter returns true");
$proxy->accept;
ok( poll_status(
		$pd,
		sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $reconnects },
		timeout => 30),
	'D reconnects in its session');
is($sd->result, 't', "D's leave of the first round returns true");
$sb->send("SELECT zk_double_barrier_leave('$LOST')");
is($sb2->query_ok("SELECT zk_double_barrier_leave('$LOST')"), 't',
	'next round: the second session leaves');
is($sb->result, 't', "next round: B's leave returns true");
ok(barrier_empty($LOST), 'nothing is left of the barrier');
$_->quit foreach ($sd, $sb2);
$pd->stop;
$proxy->stop;

$curator->quit;
$sa->quit;
$sb->quit;
$pa->stop;
$pb->stop;
$zk->stop;
done_testing();

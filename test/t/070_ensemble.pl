# 070_ensemble.pl
#    A 3-node ZooKeeper ensemble loses its leader while a lock is held and
#    waiters from two instances are queued: the sessions survive the
#    failover, holders keep their locks (held true again within the session
#    timeout, same fencing token), waiters keep their places and are granted
#    in the order promised (docs/operations.md, Local hand-off): the waiters of one
#    instance in their arrival order, the nodes of the instances in the
#    order of their ZooKeeper sequence numbers (each node's grants one after
#    another), fencing tokens increasing in grant order.  Then the new
#    leader is killed while a release is in flight: the release is carried
#    out after the failover.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(poll_status poll_session
  zk_lock_nodes children_become zk_restart_node wait_waiting);

my $T0 = time;
my $zk = ZkLockTest::zk_start(nodes => 3);

# A failover (election, then the client finding a live server) must fit in
# the session timeout; 10 s leaves room on a slow machine.
my $na = ZkLockTest::pg_node('ens_a', $zk, 'zklock.session_timeout' => '10000');
my $nb = ZkLockTest::pg_node('ens_b', $zk, 'zklock.session_timeout' => '10000');
my @nodes = ($na, $nb);

sub session { return ZkLockTest::Session->new(@_); }
sub children { return ZkLockTest::zk_children($zk, "/zklock/$_[0]"); }

my %st0;
foreach my $nd (@nodes)
{
	$st0{ $nd->name } = poll_status($nd, sub { $_[0]{state} eq 'connected' });
	note $nd->name . " is connected to $st0{ $nd->name }{server}";
}

# ===========================================================================
note 'the leader is killed while a lock is held and waiters are queued';
# ===========================================================================

my $h = session($na);
is($h->query_ok("SELECT zk_lock_acquire('e1')"), 't', 'ens_a holds e1');
my $token = $h->query_ok("SELECT zk_lock_token('e1')");

# The grant just made to session $s as $who: its fencing token and the
# sequence number of the node it was granted on (the instance's node).
sub grant_of
{
	my ($s, $who) = @_;
	my ($tok, $znode) = split /\|/,
	  $s->query_ok("SELECT zk_lock_token('e1'), "
		  . "(SELECT znode FROM zk_locks WHERE pid = pg_backend_pid() AND name = 'e1')"),
	  -1;
	my ($seq) = $znode =~ /-(\d{10})$/;
	return { who => $who, token => $tok, znode => $znode, seq => $seq // -1 };
}
my @grants = (grant_of($h, 'holder'));

# waiters alternate between the instances: b, a, b (with local hand-off,
# the default, each instance has one node: a's waiter queues behind the
# holder's, the second b waiter behind the first's)
my @w;
my @w_nodes = ($nb, $na, $nb);
for my $i (0 .. 2)
{
	$w[$i] = session($w_nodes[$i]);
	$w[$i]->send("SELECT zk_lock_acquire('e1')");
	ZkLockTest::wait_for_extension_wait($w_nodes[$i], $w[$i]);
}
my @e1_before = children_become($zk, '/zklock/e1', 2);
is(scalar @e1_before, 2, 'one node for each instance');

my $leader = $zk->leader;
my $t_kill = time;
$zk->kill_node($leader);
note "killed leader: node $leader";

my %st1;
foreach my $nd (@nodes)
{
	my $n0 = $st0{ $nd->name };
	$st1{ $nd->name } = poll_status($nd,
		sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $n0->{reconnects} },
		timeout => 60);
	ok($st1{ $nd->name }, $nd->name . ' reconnects after the failover');
	my $s1 = $st1{ $nd->name } // {};
	is($s1->{session_id} // '', $n0->{session_id}, $nd->name . ': same session');
	is($s1->{session_losses} // '', $n0->{session_losses},
		$nd->name . ': no session loss');
	note $nd->name . ' now on ' . ($s1->{server} // '?');
}
ok(poll_session($h, "SELECT zk_lock_held('e1')", 't', timeout => 30),
	'the holder holds e1 again after the failover');
my $t_back = time - $t_kill;
cmp_ok($t_back, '<', 10, 'within the session timeout (10 s)');
note sprintf('held true again %.1f s after the leader was killed', $t_back);
is($h->query_ok("SELECT zk_lock_token('e1')"), $token, 'same fencing token');
is_deeply([ children('e1') ], \@e1_before, 'holder and waiters keep their nodes');
ok(!grep({ $_->done } @w), 'all waiters still wait');
is($nb->safe_psql('postgres', "SELECT zk_lock_try('e1')"), 'f',
	'a newcomer on the other instance cannot take e1');

is($h->query_ok("SELECT zk_lock_release('e1')"), 't', 'the holder releases');
# every waiter gets e1, one at a time (ens_a's waiter may come before the
# first of ens_b: a local hand-off within zklock.handoff_limit)
my @to_grant = (0 .. 2);
while (@to_grant)
{
	my $i;
	ok( poll_until(
			sub { ($i) = grep { $w[$_]->done } @to_grant; defined $i },
			timeout => 30),
		'one more waiter is granted');
	last unless defined $i;
	my ($out, $err) = $w[$i]->result;
	is($out, 't', "waiter $i is granted");
	push @grants, grant_of($w[$i], "waiter $i");
	@to_grant = grep { $_ != $i } @to_grant;
	ok(!grep({ $w[$_]->done } @to_grant), "the others still wait while waiter $i holds e1")
	  if @to_grant;
	is($w[$i]->query_ok("SELECT zk_lock_held('e1')"), 't', "waiter $i holds e1");
	is($w[$i]->query_ok("SELECT zk_lock_release('e1')"), 't', "waiter $i releases");
}
is_deeply([ children_become($zk, '/zklock/e1', []) ], [], 'no node left under e1');

# the order: grants, and the nodes they were made on, as they happened
note 'grants: '
  . join(', ', map { "$_->{who} (token $_->{token}, node $_->{seq})" } @grants);
my %arrival = (ens_a => [ 'holder', 'waiter 1' ], ens_b => [ 'waiter 0', 'waiter 2' ]);
my %instance_of = (holder => 'ens_a', map { ("waiter $_" => $w_nodes[$_]->name) } 0 .. 2);
foreach my $inst (sort keys %arrival)
{
	is_deeply([ grep { $instance_of{$_} eq $inst } map { $_->{who} } @grants ],
		$arrival{$inst}, "$inst: its waiters are granted in their arrival order");
}
for my $k (1 .. $#grants)
{
	my ($prev, $g) = @grants[ $k - 1, $k ];
	cmp_ok($g->{token}, '>', $prev->{token},
		"$g->{who}: fencing token larger than that of $prev->{who} before it");
	cmp_ok($g->{seq}, '>=', $prev->{seq},
		"$g->{who}: granted on a node no earlier in ZooKeeper's sequence than $prev->{who}");
	if ($g->{znode} eq $prev->{znode})
	{
		# czxid * 1024 + the grants made on the node before
		is($g->{token}, $prev->{token} + 1,
			"$g->{who}: the next grant on the node of $prev->{who}, counted in its token");
	}
	else
	{
		is($g->{token} % 1024, 0, "$g->{who}: the first grant on a new node");
	}
}

# ===========================================================================
note 'the new leader is killed while a release is in flight';
# ===========================================================================

zk_restart_node($zk, $leader);
my $leader2 = $zk->leader;
foreach my $nd (@nodes)
{
	$st0{ $nd->name } = poll_status($nd, sub { $_[0]{state} eq 'connected' });
}
is($h->query_ok("SELECT zk_lock_acquire('e2')"), 't', 'ens_a holds e2');
my $wb = session($nb);
$wb->send("SELECT zk_lock_acquire('e2')");
wait_waiting($nb, $wb, $zk, '/zklock/e2', 2);
my $t2 = session($na);
is($t2->query_ok("SELECT zk_lock_acquire('e3')"), 't', 'ens_a also holds e3');

$zk->kill_node($leader2);
note "killed leader: node $leader2";
# the release returns at once; the worker deletes the node when it can
is($h->query_ok("SELECT zk_lock_release('e2')"), 't',
	'the holder releases e2 during the election');
my ($out, $err) = $wb->result(timeout => 60);
is($out, 't', 'the waiter on ens_b is granted once the release went through');
foreach my $nd (@nodes)
{
	my $s = poll_status($nd, sub { $_[0]{state} eq 'connected' });
	is($s->{session_id}, $st0{ $nd->name }{session_id},
		$nd->name . ': same session after the second failover');
}
ok(poll_session($t2, "SELECT zk_lock_held('e3')", 't', timeout => 30),
	'the holder of e3 still holds it');
is($nb->safe_psql('postgres', "SELECT zk_lock_try('e3')"), 'f',
	'and e3 still excludes the other instance');
is($wb->query_ok("SELECT zk_lock_release('e2')"), 't', 'ens_b releases e2');
is($t2->query_ok("SELECT zk_lock_release('e3')"), 't', 'ens_a releases e3');
$_->quit foreach ($h, $wb, $t2, @w);

foreach my $nd (@nodes)
{
	ok($nd->poll_query_until('postgres', 'SELECT count(*) = 0 FROM zk_locks'),
		$nd->name . ': zk_locks empty');
	ok(!$nd->log_contains('could not delete node'), $nd->name . ': no failed deletes');
}
my @left;
ok(poll_until(sub { @left = zk_lock_nodes($zk, '/zklock'); !@left }, timeout => 30),
	'no node left in ZooKeeper')
  or diag "left: @left";
note sprintf('070_ensemble took %.0f s', time - $T0);

$_->stop foreach @nodes;
done_testing();

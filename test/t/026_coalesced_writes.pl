# 026_coalesced_writes.pl
#    The worker coalesces the creates and deletes of lock nodes that reach
#    it together into one ZooKeeper multi transaction (zklock.write_batch),
#    and a multi that ZooKeeper refuses as a whole serves every request as
#    if each had been sent alone.  The requests are made to arrive together
#    by stopping the worker (SIGSTOP, in its idle wait: ZkFault::stop_worker)
#    while the sessions ask, and letting it go on once they all wait.
#    - Eight acquires of known locks go in one multi; each session holds
#      its lock, with a fencing token made of its node's czxid (learnt
#      without a Stat: see sequential.c), and another instance finds each
#      taken.
#    - Eight releases go in one multi; every lock is free for another
#      instance at once.
#    - Eight acquires, one of whose parents was deleted meanwhile: the multi
#      is refused, the create ZooKeeper names gets its refusal (and creates
#      the parent again), those before it go again in one multi, those
#      after it alone; every session holds its lock.
#    - Eight releases, one of whose nodes was deleted meanwhile by someone
#      else: the multi is refused, that delete finds its node gone, the
#      others go again likewise; no node is left and every lock is free
#      elsewhere.
#    - Two read locks of one name asked for together get different tokens
#      (one create per parent and multi).
#    - Writes held back while others are in flight, when the session ends,
#      are not sent in the next session.
#    - With zklock.write_batch = 1 no multi is sent.
#    zk_stats counts each multi, its writes and each refusal.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(poll_status signal_process stop_worker zk_tree zk_lock_nodes);

my $zk = ZkLockTest::zk_start();
# A session timeout of 10 s: the worker of A is stopped while eight sessions
# ask and the test looks at each (a second or two on a busy machine), which
# must stay well within the 2/3 of the timeout after which its ZooKeeper
# client would give up the connection and the writes would not go together.
# (Not longer: the writes in flight when the last part ends the session may
# leave nodes that go only when that session expires.)
my $node_a = ZkLockTest::pg_node('co_a', $zk, 'log_min_messages' => 'debug2',
	'zklock.session_timeout' => '10000');
my $node_b = ZkLockTest::pg_node('co_b', $zk);
my $b = ZkLockTest::Session->new($node_b);
my $n = 8;
my @s = map { ZkLockTest::Session->new($node_a) } 1 .. $n;

# Run one statement per session (with the session's index for %d) while
# the worker is stopped, run $meanwhile, let the worker go on, and return
# the sessions' answers.
sub together
{
	my ($sql, $meanwhile, $count) = @_;
	my @who = @s[ 0 .. ($count // $n) - 1 ];
	my $st = poll_status($node_a,
		sub { $_[0]{state} eq 'connected' && $_[0]{worker_pid} ne '' });
	my $t0 = Time::HiRes::time();
	stop_worker($node_a, $st->{worker_pid});
	for my $i (1 .. @who)
	{
		$who[ $i - 1 ]->send(sprintf($sql, $i));
	}
	ZkLockTest::wait_for_extension_wait($node_a, $_) foreach @who;
	$meanwhile->() if $meanwhile;
	signal_process($st->{worker_pid}, 'CONT');
	my $stopped = Time::HiRes::time() - $t0;
	note sprintf('the worker was stopped for %.1f s', $stopped);
	cmp_ok($stopped, '<', 6.5, 'the worker was stopped for less than 2/3 of the session timeout')
	  or diag 'the machine is too busy for this test';
	return map { [ $_->result ] } @who;
}

# After a refused multi of $n writes logged since $from: the write ZooKeeper
# named (K) got its refusal; the K-1 before it, which it found fine, went
# again together (a multi when there are two or more), those after it
# alone.
sub check_refusal
{
	my ($from, $what) = @_;
	my $text = substr(slurp_file($node_a->logfile), $from);
	ok($text =~ /ZooKeeper refused a multi of $n writes: no node at its write (\d+); the others go again/,
		"ZooKeeper refused the multi, naming a $what")
	  or return;
	my $before = $1 - 1;
	my $after = substr($text, $+[0]);
	if ($before >= 2)
	{
		like($after, qr/sent a multi of $before writes/,
			"the $before ${what}s before it went again together");
	}
	unlike($after, qr/sent a multi of (?!$before writes)\d+ writes/,
		"the ${what}s after it went alone");
}

# zk_stats' counters of multis: [ zk_multis, zk_multi_writes,
# zk_multis_refused ].
sub multi_stats
{
	return [ split /\|/,
		  $node_a->safe_psql('postgres',
			  'SELECT zk_multis, zk_multi_writes, zk_multis_refused FROM zk_stats') ];
}

# What multi_stats() counted since $before.
sub multis_since
{
	my ($before) = @_;
	my $now = multi_stats();
	return [ map { $now->[$_] - $before->[$_] } 0 .. 2 ];
}

# Lock nodes (ephemeral) of lock co/$i; in scalar context their number.
sub nodes_of
{
	my @nodes = ZkFault::zk_lock_nodes($zk, "/zklock/co/$_[0]");
	return @nodes;
}

# Whether instance B can take lock co/$i at once (and gives it back).
sub free_elsewhere
{
	my ($i) = @_;
	my $got = $b->query_ok("SELECT zk_lock_try('co/$i')");
	$b->query_ok("SELECT zk_lock_release('co/$i')") if $got eq 't';
	return $got eq 't';
}

# The lock parents exist (and are known to the worker); a persistent child
# each keeps ZooKeeper from reaping them (they are container nodes), made
# while the locks are held: an empty parent can be reaped at once.
for my $i (1 .. $n)
{
	is($s[0]->query_ok("SELECT zk_lock_try('co/$i')"), 't', "co/$i taken once");
}
ZkLockTest::zk_python($zk, q{
for i in range(1, int(args[0]) + 1):
    zk.create('/zklock/co/%d/keep' % i, b'')
}, $n);
for my $i (1 .. $n)
{
	is($s[0]->query_ok("SELECT zk_lock_release('co/$i')"), 't', "co/$i released");
}

# ---------------------------------------------------------------------------
note 'acquires in one multi';

my $log = -s $node_a->logfile;
my $stats = multi_stats();
my @r = together("SELECT zk_lock_acquire('co/%d')");
is_deeply(multis_since($stats), [ 1, $n, 0 ],
	"zk_stats: one multi of $n writes, none refused");
for my $i (1 .. $n)
{
	is_deeply($r[ $i - 1 ], [ 't', '' ], "session $i holds co/$i");
	is(scalar(nodes_of($i)), 1, "co/$i has one node");
	ok(!free_elsewhere($i), "co/$i is taken for another instance");
}
ok($node_a->log_contains(qr/sent a multi of $n writes/, $log),
	'the creates went in one multi');
ok(!$node_a->log_contains(qr/multi of \d+ writes was not done/, $log),
	'which ZooKeeper did');
my $czxids = ZkLockTest::zk_python($zk, q{
for i in range(1, int(args[0]) + 1):
    for c in zk.get_children('/zklock/co/%d' % i):
        if c != 'keep':
            print(zk.exists('/zklock/co/%d/%s' % (i, c)).czxid)
}, $n);
my @czxid = split /\n/, $czxids;
for my $i (1 .. $n)
{
	is($s[ $i - 1 ]->query_ok("SELECT zk_lock_token('co/$i') >> 10"),
		$czxid[ $i - 1 ], "co/$i: the token carries its node's czxid");
}

# ---------------------------------------------------------------------------
note 'two nodes of one lock asked for together';

# Nodes created in one multi share their czxid: two read locks of one name
# (a node each, both granted at once) must not get the same fencing token.
is($s[0]->query_ok("SELECT zk_rwlock_read('co/pair')"), 't', 'the parent exists');
is($s[0]->query_ok("SELECT zk_rwlock_read_release('co/pair')"), 't', 'and is known');
@r = together("SELECT zk_rwlock_read('co/pair')", undef, 2);
is_deeply([ map { $_->[0] } @r ], [ 't', 't' ], 'both sessions hold the read lock');
my @tokens = map { $_->query_ok("SELECT zk_rwlock_read_token('co/pair')") } @s[ 0, 1 ];
isnt($tokens[0], $tokens[1], 'with different fencing tokens');
my @pair_czxid = split /\n/, ZkLockTest::zk_python($zk, q{
for c in zk.get_children('/zklock/co/pair'):
    print(zk.exists('/zklock/co/pair/' + c).czxid)
});
is_deeply([ sort map { $_ >> 10 } @tokens ], [ sort @pair_czxid ],
	"each the czxid of its session's node");
is($s[$_]->query_ok("SELECT zk_rwlock_read_release('co/pair')"), 't',
	'read lock released')
  foreach 0, 1;

# ---------------------------------------------------------------------------
note 'releases in one multi';

$log = -s $node_a->logfile;
@r = together("SELECT zk_lock_release('co/%d')");
for my $i (1 .. $n)
{
	is_deeply($r[ $i - 1 ], [ 't', '' ], "session $i released co/$i");
	is(scalar(nodes_of($i)), 0, "co/$i has no node left");
	ok(free_elsewhere($i), "co/$i is free for another instance at once");
}
ok($node_a->log_contains(qr/sent a multi of $n writes/, $log),
	'the deletes went in one multi');

# ---------------------------------------------------------------------------
note 'acquires in one multi, one of whose parents went meanwhile';

$log = -s $node_a->logfile;
$stats = multi_stats();
@r = together(
	"SELECT zk_lock_acquire('co/%d')",
	sub {
		ZkLockTest::zk_python($zk, q{
zk.delete('/zklock/co/3/keep')
zk.delete('/zklock/co/3')
});
	});
for my $i (1 .. $n)
{
	is_deeply($r[ $i - 1 ], [ 't', '' ], "session $i holds co/$i");
	is(scalar(nodes_of($i)), 1, "co/$i has one node");
	ok(!free_elsewhere($i), "co/$i is taken for another instance");
}
check_refusal($log, 'create');
is(multis_since($stats)->[2], 1, 'zk_stats: one multi refused');

# ---------------------------------------------------------------------------
note 'releases in one multi, one of whose nodes someone else deleted';

my ($gone) = nodes_of(5);
$log = -s $node_a->logfile;
@r = together("SELECT zk_lock_release('co/%d')",
	sub { ZkLockTest::zk_python($zk, q{zk.delete(args[0])}, $gone); });
for my $i (1 .. $n)
{
	is($r[ $i - 1 ][0], 't', "session $i released co/$i") unless $i == 5;
	is(scalar(nodes_of($i)), 0, "co/$i has no node left");
	ok(free_elsewhere($i), "co/$i is free for another instance at once");
}
check_refusal($log, 'delete');

# ---------------------------------------------------------------------------
note 'zklock.write_batch = 1';

$node_a->append_conf('postgresql.conf', "zklock.write_batch = 1\n");
$node_a->reload;
poll_until(sub { $s[0]->query_ok('SHOW zklock.write_batch') eq '1' })
  or die 'the setting did not come';
$log = -s $node_a->logfile;
$stats = multi_stats();
@r = together("SELECT zk_lock_acquire('co/%d')");
is_deeply([ map { $_->[0] } @r ], [ ('t') x $n ], 'every session holds its lock');
@r = together("SELECT zk_lock_release('co/%d')");
is_deeply([ map { $_->[0] } @r ], [ ('t') x $n ], 'and releases it');
ok(!$node_a->log_contains(qr/sent a multi/, $log), 'without a multi');
is_deeply(multis_since($stats), [ 0, 0, 0 ], 'zk_stats: no multi');
my @left = ZkFault::zk_lock_nodes($zk, '/zklock/co');
is_deeply(\@left, [], 'no node left');

# ---------------------------------------------------------------------------
note 'writes held back when the session ends';

# With ZooKeeper paused, the first writes stay in flight and the later ones
# wait for their answer; then zklock.hosts changes, which ends the session
# at once.  What waited must not go out in the next session: its protected
# prefix names the old one, so nobody would delete it, and the lock would
# stay taken behind it.
$node_a->append_conf('postgresql.conf', "zklock.write_batch = 64\n");
$node_a->reload;
poll_until(sub { $s[0]->query_ok('SHOW zklock.write_batch') eq '64' })
  or die 'the setting did not come';
$zk->pause_node(1);
$log = -s $node_a->logfile;
for my $i (1 .. $n)
{
	# (60 s: a node the old session made goes with it, 10 s after the end)
	$s[ $i - 1 ]->send("SELECT zk_lock_acquire('co/$i', 60000)");
	ZkLockTest::wait_for_extension_wait($node_a, $s[ $i - 1 ]);
}
ok( poll_until(
		sub { $node_a->log_contains(qr/calls wait for an answer to the writes in flight/, $log) }),
	'later writes wait for the ones in flight');
# the same server, written differently
my $hosts = $zk->connect;
$node_a->append_conf('postgresql.conf', "zklock.hosts = '$hosts,$hosts'\n");
$node_a->reload;
ok( poll_until(
		sub { $node_a->log_contains(qr/zklock lost ZooKeeper session/, $log) }),
	'the session ends');
$zk->resume_node(1);
for my $i (1 .. $n)
{
	is_deeply([ $s[ $i - 1 ]->result ], [ 't', '' ],
		"session $i holds co/$i in the next session");
	is($s[ $i - 1 ]->query_ok("SELECT zk_lock_release('co/$i')"), 't',
		"and releases it");
}
my @stale;
# (a node of the old session, had one been made, goes with that session:
# within its 10 s timeout)
ok(poll_until(sub { !(@stale = ZkFault::zk_lock_nodes($zk, '/zklock/co')) }, timeout => 60),
	'no node is left behind') or diag "left: @stale";

$_->quit foreach @s;
$b->quit;
done_testing();

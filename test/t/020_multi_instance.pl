# 020_multi_instance.pl
#    Two PostgreSQL instances sharing one ZooKeeper exclude each other, and
#    lock names are global across the databases of an instance: the
#    exclusion is ZooKeeper's, not the instance's.  A release is visible
#    when it returns: the other instance takes the lock at once, and
#    ZooKeeper has no node left by it; so has a failed attempt.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);

my $zk = ZkLockTest::zk_start();
my $node_a = ZkLockTest::pg_node('inst_a', $zk);
my $node_b = ZkLockTest::pg_node('inst_b', $zk);

sub children
{
	my ($name) = @_;
	return ZkLockTest::zk_children($zk, "/zklock/$name");
}

sub children_become
{
	my ($name, $want) = @_;
	return ZkLockTest::Session::children_become($zk, "/zklock/$name", $want);
}

# ---------------------------------------------------------------------------
note 'two instances on one ZooKeeper';

my $a1 = ZkLockTest::Session->new($node_a);
my $b1 = ZkLockTest::Session->new($node_b);

is($a1->query_ok("SELECT zk_lock_acquire('shared')"), 't', 'A acquires');
my $token_a = $a1->query_ok("SELECT zk_lock_token('shared')");
my @c = children('shared');
is(scalar @c, 1, 'one node, A\'s');
my $node_of_a = $c[0] // '';

is($node_b->safe_psql('postgres', "SELECT zk_lock_try('shared')"),
	'f', 'zk_lock_try on B is false while A holds');
is($node_b->safe_psql('postgres', "SELECT zk_lock_acquire('shared', 300)"),
	'f', 'a timed acquire on B times out while A holds');
is_deeply([ children('shared') ], [$node_of_a], 'B\'s attempts left no node');

$b1->send("SELECT zk_lock_acquire('shared')");
ZkLockTest::wait_for_extension_wait($node_b, $b1);
@c = children_become('shared', 2);
is(scalar @c, 2, 'B\'s waiter has its node next to A\'s');
my ($node_of_b) = grep { $_ ne $node_of_a } @c;
ok(!$b1->done, 'B waits while A holds');

is($a1->query_ok("SELECT zk_lock_release('shared')"), 't', 'A releases');
is($b1->result, 't', 'B\'s blocking acquire is granted');
my $token_b = $b1->query_ok("SELECT zk_lock_token('shared')");
cmp_ok($token_b, '>', $token_a, 'B\'s token is larger than A\'s');
is_deeply([ children('shared') ], [ $node_of_b // '' ],
	'only B\'s node is left');

is($a1->query_ok("SELECT zk_lock_try('shared')"),
	'f', 'now A cannot take it');
is($b1->query_ok("SELECT zk_lock_release('shared')"), 't', 'B releases');
is($a1->query_ok("SELECT zk_lock_try('shared')"), 't',
	'A takes it again at once with a no-wait attempt');
my $token_a2 = $a1->query_ok("SELECT zk_lock_token('shared')");
cmp_ok($token_a2, '>', $token_b, 'tokens keep increasing across instances');
is($a1->query_ok("SELECT zk_lock_release('shared')"), 't', 'A releases');
is_deeply([ children('shared') ], [], 'no node left');

# a release with nobody else around: B's instance keeps nothing behind it
foreach my $round (1 .. 3)
{
	is($b1->query_ok("SELECT zk_lock_acquire('quiet')"),
		't', "round $round: B takes a lock nobody else wants");
	is($b1->query_ok("SELECT zk_lock_release('quiet')"),
		't', "round $round: B releases it");
	is($a1->query_ok("SELECT zk_lock_try('quiet')"),
		't', "round $round: A takes it at once with a no-wait attempt");
	is($a1->query_ok("SELECT zk_lock_release_all()"),
		'1', "round $round: A releases it");
	is_deeply([ children('quiet') ], [], "round $round: no node left");
}

# ---------------------------------------------------------------------------
note 'a waiter on B is granted when A\'s instance shuts down';

is($a1->query_ok("SELECT zk_lock_acquire('shutdown')"), 't', 'A acquires');
$b1->send("SELECT zk_lock_acquire('shutdown')");
ZkLockTest::wait_for_extension_wait($node_b, $b1);
children_become('shutdown', 2);
ok(!$b1->done, 'B waits');
$a1->quit;
$node_a->stop('fast');
is($b1->result, 't', 'B is granted once A\'s instance is down');
is(scalar(children_become('shutdown', 1)), 1, 'only B\'s node is left');
is($b1->query_ok("SELECT zk_lock_release('shutdown')"), 't', 'B releases');
is_deeply([ children('shutdown') ], [], 'no node left');
$node_a->start;

# ---------------------------------------------------------------------------
note 'names are global across databases';

$node_a->safe_psql('postgres', 'CREATE DATABASE other');
$node_a->safe_psql('other', 'CREATE EXTENSION zklock');

my $p = ZkLockTest::Session->new($node_a, dbname => 'postgres');
my $o = ZkLockTest::Session->new($node_a, dbname => 'other');

is($p->query_ok("SELECT zk_lock_acquire('db')"), 't',
	'session in database postgres acquires');
is($o->query_ok("SELECT zk_lock_try('db')"),
	'f', 'session in database other cannot take the same name');
is($o->query_ok("SELECT zk_lock_try_xact('db')"),
	'f', 'not even in transaction scope');

$o->send("SELECT zk_lock_acquire('db')");
ZkLockTest::wait_for_extension_wait($node_a, $o);
# (with local hand-off it waits inside the instance, behind p's node)
is( $node_a->safe_psql(
		'postgres',
		"SELECT state FROM zk_locks WHERE name = 'db' AND pid = " . $o->pid),
	'waiting',
	'zk_locks shows the session in database other waiting');
ok(!$o->done, 'session in database other waits');
is($p->query_ok("SELECT zk_lock_release('db')"), 't',
	'session in database postgres releases');
is($o->result, 't', 'session in database other is granted');
is($p->query_ok("SELECT zk_lock_try('db')"),
	'f', 'and now excludes the session in database postgres');
is($node_b->safe_psql('postgres', "SELECT zk_lock_try('db')"),
	'f', 'and a session of the other instance');
is($o->query_ok("SELECT zk_lock_release('db')"), 't', 'released');
is_deeply([ children('db') ], [], 'no node left');

$_->quit foreach ($p, $o, $b1);

# ---------------------------------------------------------------------------
note 'nothing left behind';
foreach my $name (qw(shared quiet shutdown db))
{
	is_deeply([ children_become($name, []) ], [], "/zklock/$name has no children");
}

ok(!$node_a->log_contains(qr/PANIC|TRAP:|terminated by signal/),
	'no crash in the server log of ' . $node_a->name);
ok(!$node_b->log_contains(qr/PANIC|TRAP:|terminated by signal/),
	'no crash in the server log of ' . $node_b->name);

$node_a->stop;
$node_b->stop;
done_testing();

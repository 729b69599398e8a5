# 050_interop.pl
#    zklock interoperates with the real clients it claims to be compatible
#    with, in both directions, on one ZooKeeper: Apache Curator 5
#    (InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphoreV2,
#    through test/java/CuratorDriver.java) and Kazoo (Lock with
#    extra_lock_patterns=["-lock-"], through test/python/kazoo_driver.py).
#    A zklock holder excludes them and they exclude zklock; a waiter on
#    either side is woken by the other side's release; read-write locks share
#    and exclude across clients; a semaphore's leases are counted across
#    clients; nothing is left behind.
#
#    "Waits" is established positively, never by sleeping: a peer waits once
#    ZooKeeper shows its watch on the holder's node (4lw wchp), a zklock
#    session once pg_stat_activity shows wait_event_type Extension and
#    zk_locks names the node it waits on.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkInterop;

# Curator's protected names, which zklock uses too: _c_<uuid>-<base><seq>
my $UUID = qr/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;
my %NODE_RE = (
	lock  => qr/^_c_$UUID-lock-\d{10}$/,
	read  => qr/^_c_$UUID-__READ__\d{10}$/,
	write => qr/^_c_$UUID-__WRIT__\d{10}$/,
	lease => qr/^_c_$UUID-lease-\d{10}$/,
	# Kazoo's Lock: <uuid4 hex>__lock__<seq>
	kazoo => qr/^[0-9a-f]{32}__lock__\d{10}$/,);

my $zk = ZkLockTest::zk_start();
my $node = ZkLockTest::pg_node('interop', $zk);

my $curator = ZkInterop::curator($zk);
my $kazoo = ZkInterop::kazoo($zk);

my @s = map { ZkLockTest::Session->new($node) } 1 .. 3;
my ($s1, $s2, $s3) = @s;

# every parent of lock nodes used, checked empty at the end
my %paths_used;

sub children
{
	my ($path) = @_;
	$paths_used{$path} = 1;
	return ZkLockTest::zk_children($zk, $path);
}

# Poll until the children of $path are exactly @$want (an array ref) or,
# given a number, are that many; returns the last listing.
sub children_become
{
	my ($path, $want) = @_;
	$paths_used{$path} = 1;
	return ZkLockTest::Session::children_become($zk, $path, $want);
}

# The children of $path that are not in @$old.
sub new_children
{
	my ($path, $old) = @_;
	my %old = map { $_ => 1 } @$old;
	return grep { !$old{$_} } children($path);
}

# Poll until some session watches znode $path (4lw wchp): a peer that has
# decided to wait for the holder of that node.  Returns whether it happened.
sub watched
{
	my ($path) = @_;
	return poll_until(
		sub {
			my $w = $zk->four(1, 'wchp');
			return $w =~ /^\Q$path\E$/m;
		});
}

# Poll until some session has a child watch (getChildren with a watch):
# in this test only semaphore waiters on their leases set one, and every
# such watch set before the latest change of the leases has fired by then.
# 4lw wchp lists data watches only, mntr's zk_watch_count counts both.
sub child_watched
{
	return poll_until(
		sub {
			my ($total) = $zk->four(1, 'mntr') =~ /^zk_watch_count\s+(\d+)$/m;
			my $data = () = $zk->four(1, 'wchp') =~ /^\s+0x[0-9a-f]+$/mg;
			note "watches: $total in all, $data data watches";
			return ($total // 0) - $data > 0;
		});
}

# Start $sql in session $s and wait until it waits on a zklock and zk_locks
# names the node it waits on; returns that node.
sub start_sql_waiter
{
	my ($s, $sql) = @_;
	$s->send($sql);
	ZkLockTest::wait_for_extension_wait($node, $s);
	my $on = '';
	poll_until(
		sub {
			$on = $node->safe_psql('postgres',
				    "SELECT waiting_on FROM zk_locks WHERE pid = "
				  . $s->pid
				  . " AND state = 'waiting' AND waiting_on IS NOT NULL");
			return $on ne '';
		});
	return $on;
}

sub sql
{
	my ($s, $sql) = @_;
	return $s->query_ok($sql);
}

# ===========================================================================
note '1. a zklock mutex excludes Curator\'s InterProcessMutex and Kazoo\'s Lock';

# The peers, each with its tag, its commands, and what its nodes look like.
my @peers = (
	{
		name    => 'Curator',
		d       => $curator,
		tag     => 'c1',
		acquire => 'mutex-acquire',
		release => 'mutex-release',
		re      => $NODE_RE{lock},
	},
	{
		name    => 'Kazoo',
		d       => $kazoo,
		tag     => 'k1',
		acquire => 'lock-acquire',
		release => 'lock-release',
		re      => $NODE_RE{kazoo},
	});

foreach my $p (@peers)
{
	my ($d, $t, $pn) = ($p->{d}, $p->{tag}, $p->{name});
	my $lock = "m1_" . lc $pn;
	my $path = "/zklock/$lock";

	is(sql($s1, "SELECT zk_lock_acquire('$lock')"), 't',
		"$pn: zklock session takes $lock");
	my @c = children($path);
	is(scalar @c, 1, "$pn: one node, zklock's");
	like($c[0] // '', $NODE_RE{lock}, "$pn: zklock's node is _c_<uuid>-lock-<seq>");
	my $sql_node = $c[0] // '';

	is($d->ask($t => "$p->{acquire} $path 0"),
		'timeout', "$pn: acquire without waiting fails while zklock holds");
	is($d->ask($t => "$p->{acquire} $path 500"),
		'timeout', "$pn: acquire with a 500 ms timeout fails while zklock holds");
	is_deeply([ children_become($path, [$sql_node]) ],
		[$sql_node], "$pn: its failed attempts left no node");

	# a waiting peer is woken by the zklock release
	$d->send($t => "$p->{acquire} $path -1");
	my @peer_nodes;
	poll_until(sub { (@peer_nodes = new_children($path, [$sql_node])) > 0 });
	like($peer_nodes[0] // '', $p->{re}, "$pn: its waiting node has its own naming");
	note "$path: zklock holds $sql_node, $pn waits with " . ($peer_nodes[0] // '?');
	ok(watched("$path/$sql_node"), "$pn: watches zklock's node, i.e. waits");
	ok(!$d->answered($t), "$pn: acquire has not returned while zklock holds");
	is(sql($s2, "SELECT zk_lock_try('$lock')"),
		'f', "$pn: a second zklock session cannot take it either");

	is(sql($s1, "SELECT zk_lock_release('$lock')"), 't',
		"$pn: zklock releases $lock");
	is($d->answer($t), 'ok', "$pn: the waiting acquire succeeds after the zklock release");
	is_deeply([ children_become($path, [ $peer_nodes[0] // '' ]) ],
		[ $peer_nodes[0] // '' ], "$pn: the peer's node is the only one");
	is(sql($s2, "SELECT zk_lock_try('$lock')"),
		'f', "$pn: zklock cannot take it while $pn holds");
	is($d->ask($t => $p->{release}), 'ok', "$pn: releases");
	children_become($path, []);

	# and without anybody waiting
	is(sql($s1, "SELECT zk_lock_acquire('$lock')"), 't',
		"$pn: zklock takes $lock again");
	is($d->ask($t => "$p->{acquire} $path 0"), 'timeout',
		"$pn: excluded again");
	is(sql($s1, "SELECT zk_lock_release('$lock')"), 't', "$pn: zklock releases");
	# the release's delete runs in the background; a timed acquire waits
	# for it if needed
	is($d->ask($t => "$p->{acquire} $path 10000"), 'ok',
		"$pn: acquires after the zklock release");
	is($d->ask($t => $p->{release}), 'ok', "$pn: releases");
	is_deeply([ children_become($path, []) ], [], "$pn: no node left in $path");
}

# ===========================================================================
note '2. a Curator or Kazoo holder excludes zklock; a zklock waiter is woken '
  . 'by its release';

foreach my $p (@peers)
{
	my ($d, $t, $pn) = ($p->{d}, $p->{tag}, $p->{name});
	my $lock = "m2_" . lc $pn;
	my $path = "/zklock/$lock";

	is($d->ask($t => "$p->{acquire} $path 5000"), 'ok', "$pn takes $lock");
	my @c = children($path);
	is(scalar @c, 1, "$pn: one node, the peer's");
	like($c[0] // '', $p->{re}, "$pn: its node has its own naming");
	my $peer_node = $c[0] // '';

	is(sql($s1, "SELECT zk_lock_try('$lock')"),
		'f', "$pn holds: zk_lock_try is false");
	is(sql($s1, "SELECT zk_lock_acquire('$lock', 0)"),
		'f', "$pn holds: zk_lock_acquire with timeout_ms 0 is false");
	is(sql($s1, "SELECT zk_lock_acquire('$lock', 300)"),
		'f', "$pn holds: zk_lock_acquire with timeout_ms 300 is false");
	is(sql($s1, "SELECT zk_lock_held('$lock')"),
		'f', "$pn holds: the zklock session does not hold it");
	is_deeply([ children_become($path, [$peer_node]) ],
		[$peer_node], "$pn holds: zklock's attempts left no node");

	my $on = start_sql_waiter($s1, "SELECT zk_lock_acquire('$lock')");
	is($on, $peer_node, "$pn holds: the blocking zk_lock_acquire waits on the peer's node");
	my ($sql_node) = new_children($path, [$peer_node]);
	like($sql_node // '', $NODE_RE{lock}, "$pn holds: zklock's waiting node");
	ok(!$s1->done, "$pn holds: zk_lock_acquire has not returned");

	is($d->ask($t => $p->{release}), 'ok', "$pn releases");
	my ($out, $err) = $s1->result;
	is($out, 't', "zk_lock_acquire returns true once $pn released");
	is($err, '', 'without an error');
	is(sql($s1, "SELECT zk_lock_held('$lock')"), 't', "$pn: zklock holds it now");
	is_deeply([ children_become($path, [ $sql_node // '' ]) ],
		[ $sql_node // '' ], "$pn: zklock's node is the only one");
	is($d->ask($t => "$p->{acquire} $path 300"),
		'timeout', "$pn is excluded by the new zklock holder");
	is(sql($s1, "SELECT zk_lock_release('$lock')"), 't', 'zklock releases');
	is_deeply([ children_become($path, []) ], [], "$pn: no node left in $path");
}

# ===========================================================================
note '3. read-write lock: Curator\'s InterProcessReadWriteLock and zklock';

my $rw = '/zklock/rw';
my ($out, $err, $on, @c);

# 3a. readers of both share; any writer is excluded
is($curator->ask(r1 => "read-acquire $rw 0"), 'ok', 'Curator reader 1 takes the read lock');
is(sql($s1, "SELECT zk_rwlock_read('rw', 0)"), 't',
	'a zklock reader shares it with the Curator reader');
is($curator->ask(r2 => "read-acquire $rw 0"), 'ok',
	'Curator reader 2 shares it with both');
is(sql($s2, "SELECT zk_rwlock_read('rw', 0)"), 't', 'zklock reader 2 shares it too');
@c = children($rw);
is(scalar(grep { $_ =~ $NODE_RE{read} } @c), 4,
	'four _c_<uuid>-__READ__<seq> nodes');
is(sql($s3, "SELECT zk_rwlock_write('rw', 0)"), 'f',
	'a zklock writer is excluded by the readers');
is(sql($s3, "SELECT zk_rwlock_write_held('rw')"), 'f', 'and holds nothing');
is($curator->ask(w1 => "write-acquire $rw 300"), 'timeout',
	'a Curator writer is excluded by the readers');
is_deeply([ children_become($rw, [@c]) ], [@c],
	'the failed writers left no node');
is($curator->ask(r1 => 'read-release'), 'ok', 'Curator reader 1 releases');
is($curator->ask(r2 => 'read-release'), 'ok', 'Curator reader 2 releases');
is(sql($s3, "SELECT zk_rwlock_write('rw', 0)"), 'f',
	'the zklock readers still exclude a zklock writer');
is(sql($s1, "SELECT zk_rwlock_read_release('rw')"), 't', 'zklock reader 1 releases');
is(sql($s2, "SELECT zk_rwlock_read_release('rw')"), 't', 'zklock reader 2 releases');
children_become($rw, []);

# 3b. a Curator writer excludes zklock readers and writers
is($curator->ask(w1 => "write-acquire $rw 0"), 'ok', 'Curator writer takes the write lock');
my ($cw) = children($rw);
like($cw // '', $NODE_RE{write}, 'its node is _c_<uuid>-__WRIT__<seq>');
is(sql($s1, "SELECT zk_rwlock_read('rw', 0)"), 'f',
	'Curator writer holds: zklock read with timeout_ms 0 is false');
is(sql($s1, "SELECT zk_rwlock_write('rw', 0)"), 'f',
	'Curator writer holds: zklock write with timeout_ms 0 is false');
is(sql($s1, "SELECT zk_rwlock_write('rw', 300)"), 'f',
	'Curator writer holds: zklock write with timeout_ms 300 is false');
is_deeply([ children_become($rw, [ $cw // '' ]) ],
	[ $cw // '' ], 'zklock\'s attempts left no node');
$on = start_sql_waiter($s1, "SELECT zk_rwlock_read('rw')");
is($on, $cw, 'a blocking zklock read waits on the Curator writer\'s node');
ok(!$s1->done, 'the zklock reader has not returned');
is($curator->ask(w1 => 'write-release'), 'ok', 'Curator writer releases');
($out, $err) = $s1->result;
is($out, 't', 'the zklock reader gets the read lock once the Curator writer released');
is($err, '', 'without an error');
is(sql($s1, "SELECT zk_rwlock_read_held('rw')"), 't', 'it holds the read lock');
is(sql($s1, "SELECT zk_rwlock_read_release('rw')"), 't', 'and releases it');
children_become($rw, []);

# 3c. a zklock writer excludes Curator readers and writers, and wakes them
is(sql($s1, "SELECT zk_rwlock_write('rw', 0)"), 't', 'zklock writer takes the write lock');
my ($zw) = children($rw);
like($zw // '', $NODE_RE{write}, 'zklock\'s node is _c_<uuid>-__WRIT__<seq>');
is($curator->ask(r1 => "read-acquire $rw 300"), 'timeout',
	'zklock writer holds: Curator readLock().acquire(300 ms) fails');
is($curator->ask(w1 => "write-acquire $rw 300"), 'timeout',
	'zklock writer holds: Curator writeLock().acquire(300 ms) fails');
is_deeply([ children_become($rw, [ $zw // '' ]) ],
	[ $zw // '' ], 'Curator\'s attempts left no node');
$curator->send(r1 => "read-acquire $rw -1");
ok(watched("$rw/" . ($zw // '')),
	'a blocking Curator reader watches the zklock writer\'s node');
ok(!$curator->answered('r1'), 'the Curator reader has not returned');
is(sql($s1, "SELECT zk_rwlock_write_release('rw')"), 't', 'zklock writer releases');
is($curator->answer('r1'), 'ok',
	'the Curator reader gets the read lock once the zklock writer released');
is(sql($s2, "SELECT zk_rwlock_write('rw', 0)"), 'f',
	'the Curator reader excludes a zklock writer');
is(sql($s2, "SELECT zk_rwlock_read('rw', 0)"), 't',
	'and shares with a zklock reader');
is($curator->ask(r1 => 'read-release'), 'ok', 'Curator reader releases');

# 3d. a zklock reader excludes Curator writers but not Curator readers; a
# waiting writer of either kind holds back later readers of both
my ($zr) = children_become($rw, 1);
like($zr // '', $NODE_RE{read}, 'zklock reader\'s node is _c_<uuid>-__READ__<seq>');
is($curator->ask(w1 => "write-acquire $rw 300"), 'timeout',
	'zklock reader holds: Curator writeLock().acquire(300 ms) fails');
is($curator->ask(r1 => "read-acquire $rw 300"), 'ok',
	'zklock reader holds: Curator readLock().acquire(300 ms) succeeds');
is($curator->ask(r1 => 'read-release'), 'ok', 'Curator reader releases');
$curator->send(w1 => "write-acquire $rw -1");
ok(watched("$rw/" . ($zr // '')),
	'a blocking Curator writer watches the zklock reader\'s node');
ok(!$curator->answered('w1'), 'the Curator writer has not returned');
is(sql($s3, "SELECT zk_rwlock_read('rw', 0)"), 'f',
	'a later zklock reader queues behind the waiting Curator writer');
is($curator->ask(r2 => "read-acquire $rw 300"), 'timeout',
	'so does a later Curator reader');
is(sql($s2, "SELECT zk_rwlock_read_release('rw')"), 't', 'zklock reader releases');
is($curator->answer('w1'), 'ok',
	'the Curator writer gets the write lock once the zklock reader released');
is(sql($s3, "SELECT zk_rwlock_read('rw', 0)"), 'f',
	'the Curator writer excludes zklock readers');
my ($cw2) = children_become($rw, 1);
$on = start_sql_waiter($s3, "SELECT zk_rwlock_write('rw')");
is($on, $cw2, 'a blocking zklock writer waits on the Curator writer\'s node');
is($curator->ask(w1 => 'write-release'), 'ok', 'Curator writer releases');
($out, $err) = $s3->result;
is($out, 't', 'the zklock writer gets the write lock once the Curator writer released');
is(sql($s3, "SELECT zk_rwlock_write_release('rw')"), 't', 'and releases it');
is_deeply([ children_become($rw, []) ], [], "no node left in $rw");

# ===========================================================================
note '4. semaphore: Curator\'s InterProcessSemaphoreV2 and zklock, max_leases 2';

my $sem = '/zklock/sem';
my ($locks, $leases) = ("$sem/locks", "$sem/leases");

is(sql($s1, "SELECT zk_semaphore_acquire('sem', 2, 0)"), 't', 'zklock takes lease 1 of 2');
is($curator->ask(l1 => "sem-acquire $sem 2 5000"), 'ok', 'Curator takes lease 2 of 2');
@c = children($leases);
is(scalar(grep { $_ =~ $NODE_RE{lease} } @c), 2,
	"two _c_<uuid>-lease-<seq> nodes in $leases");
is_deeply([ children_become($locks, []) ], [], "the entry mutex $locks is free");

is(sql($s2, "SELECT zk_semaphore_acquire('sem', 2, 0)"), 'f',
	'full: a third lease by zklock with timeout_ms 0 fails');
is(sql($s2, "SELECT zk_semaphore_held('sem')"), 'f', 'and is not held');
is_deeply([ children_become($leases, [@c]) ], [@c], 'it left no lease node');
is_deeply([ children_become($locks, []) ], [], 'nor an entry mutex node');
is($curator->ask(l2 => "sem-acquire $sem 2 500"), 'timeout',
	'full: a third lease by Curator with a 500 ms timeout fails');
is_deeply([ children_become($leases, [@c]) ], [@c], 'it left no lease node');
is_deeply([ children_become($locks, []) ], [], 'nor an entry mutex node');

# Curator returns its lease: the third by zklock succeeds
is($curator->ask(l1 => 'sem-release'), 'ok', 'Curator returns its lease');
is(sql($s2, "SELECT zk_semaphore_acquire('sem', 2, 0)"), 't',
	'then the third lease by zklock succeeds');
is(sql($s3, "SELECT zk_semaphore_acquire('sem', 2, 0)"), 'f',
	'full again with two zklock leases');

# a waiting Curator lease is granted when zklock returns one
$curator->send(l2 => "sem-acquire $sem 2 -1");
poll_until(sub { children($leases) == 3 && children($locks) == 1 });
is(scalar(children($leases)), 3,
	'a blocking Curator acquire waits with its lease node created');
is(scalar(children($locks)), 1, 'holding the entry mutex meanwhile');
ok(child_watched(), 'it watches the leases');
ok(!$curator->answered('l2'), 'the Curator acquire has not returned');
is(sql($s3, "SELECT zk_semaphore_acquire('sem', 2, 0)"), 'f',
	'zklock with timeout_ms 0 fails meanwhile');
is(sql($s1, "SELECT zk_semaphore_release('sem')"), 't', 'zklock returns a lease');
is($curator->answer('l2'), 'ok', 'the waiting Curator acquire succeeds');
is_deeply([ children_become($locks, []) ], [], 'Curator released the entry mutex');
is(scalar(children_become($leases, 2)), 2, 'two leases are out');

# a waiting zklock lease is granted when Curator returns one
$s1->send("SELECT zk_semaphore_acquire('sem', 2)");
ZkLockTest::wait_for_extension_wait($node, $s1);
poll_until(sub { children($leases) == 3 && children($locks) == 1 });
is(scalar(children($leases)), 3,
	'a blocking zk_semaphore_acquire waits with its lease node created');
is(scalar(children($locks)), 1, 'holding the entry mutex meanwhile');
ok(child_watched(), 'it watches the leases');
ok(!$s1->done, 'zk_semaphore_acquire has not returned');
is($curator->ask(l3 => "sem-acquire $sem 2 300"), 'timeout',
	'a Curator acquire fails meanwhile (zklock holds the entry mutex)');
is($curator->ask(l2 => 'sem-release'), 'ok', 'Curator returns its lease');
($out, $err) = $s1->result;
is($out, 't', 'the waiting zk_semaphore_acquire returns true');
is($err, '', 'without an error');
is(sql($s1, "SELECT zk_semaphore_held('sem')"), 't', 'it holds a lease');
is(sql($s1, "SELECT zk_semaphore_release('sem')"), 't', 'zklock returns lease');
is(sql($s2, "SELECT zk_semaphore_release('sem')"), 't', 'zklock returns the other lease');
is_deeply([ children_become($leases, []) ], [], "no lease left in $leases");

# ===========================================================================
note '5. nothing left behind';

is_deeply([ $curator->unclaimed ], [], 'Curator said nothing unexpected');
is_deeply([ $kazoo->unclaimed ], [], 'Kazoo said nothing unexpected');
is($curator->quit, 0, 'the Curator driver ends cleanly');
is($kazoo->quit, 0, 'the Kazoo driver ends cleanly');
$_->quit foreach @s;
foreach my $path (sort keys %paths_used)
{
	is_deeply([ children_become($path, []) ], [], "$path has no children");
}
is_deeply(
	[
		grep { !$paths_used{"/zklock/$_"} && $_ ne 'sem' && $_ ne 'zklock.instances' }
		  children('/zklock')
	],
	[], 'no lock paths but the ones used (and the session nodes)');
ok(!$node->log_contains(qr/could not delete node|PANIC|TRAP:|terminated by signal/),
	'no failed deletes or crashes in the server log');

$node->stop;
done_testing();

# 099_watch_bookkeeping.pl
#    What the worker keeps per lock, read adversarially.
#
#    A holder's data watch on its own node is kept with the holder, not in
#    the registry of watches, and the ZooKeeper client keeps one watcher
#    per path: a reader of the same instance that waits behind our writer
#    watches the same node, and when it gives up, the removal of its watch
#    must not take away the one the writer relies on (the writer still
#    hears a revocation), whether the reader gives up before or after the
#    writer's watch is set; afterwards no watch is left counted.
#
#    Every part is listed under its parent's entry, also a part that never
#    has a node (zk_lock_participants only lists): the reconciler looks
#    only where a node of ours was, so an idle instance that only listed
#    names asks ZooKeeper nothing afterwards.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);

my $zk = ZkLockTest::zk_start();
my $pg = ZkLockTest::pg_node('bookkeeping', $zk);
my $s1 = ZkLockTest::Session->new($pg);
my $s2 = ZkLockTest::Session->new($pg);
my $s3 = ZkLockTest::Session->new($pg);

sub watches { return $s3->query_ok('SELECT watches FROM zk_stats'); }

for my $round (1 .. 2)
{
	my $name = "bk/shared-$round";
	is($s1->query_ok("SELECT zk_rwlock_write('$name', NULL, false)"), 't',
		"$round: the writer holds");
	# round 1: the reader gives up after the writer's own watch is set
	# (100 ms of holding); round 2: before it is
	my $t = $round == 1 ? 600 : 20;
	is($s2->query_ok("SELECT zk_rwlock_read('$name', $t)"), 'f',
		"$round: a reader of the same instance times out");
	ok(poll_until(sub { watches() >= 1 }),
		"$round: the writer's watch is set");
	is($s3->query_ok("SELECT zk_lock_revoke('$name')"), '1',
		"$round: one holder asked to let go");
	ok( poll_until(
			sub {
				$s1->query_ok("SELECT zk_lock_revocation_requested('$name')")
				  eq 't';
			},
			timeout => 10),
		"$round: the writer heard it");
	is($s1->query_ok("SELECT zk_rwlock_write_release('$name')"), 't',
		"$round: released");
	ok(poll_until(sub { watches() == 0 }), "$round: no watch left counted");
}

sub zk_requests { return $s3->query_ok('SELECT zk_requests FROM zk_stats'); }

my $N = 50;
for my $i (1 .. $N)
{
	$s1->query_ok("SELECT count(*) FROM zk_lock_participants('bk/listed/$i')");
}
my $r0 = zk_requests();

# two reconciler rounds (every 5 s); a round would list all $N parents
ok( !poll_until(sub { zk_requests() - $r0 >= $N }, timeout => 11),
	'the reconciler does not list the parents of parts that had no node');
note sprintf('requests in 11 s after %d participants listings: %d',
	$N, zk_requests() - $r0);

done_testing();

# 007_wait_events.pl
#    What pg_stat_activity shows while zklock waits: wait_event_type
#    'Extension' everywhere, and on PostgreSQL 17 and later a wait event
#    named for what the backend waits for (ZklockLock, ZklockReadLock,
#    ZklockWriteLock, ZklockSemaphore, ZklockJobClaim, ZklockBarrier,
#    ZklockRelease; pg_wait_events lists them all); on 15 and 16 the wait
#    event is 'Extension'.  The troubleshooting query of the README finds
#    each waiting session and nothing else.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFaultProxy;

my $zk = ZkLockTest::zk_start();
my $proxy = ZkFaultProxy->start($zk);
# a long session timeout: a release held up by the proxy keeps waiting
# while the session is vouched for (half of it), longer than any poll here
# without local hand-off the waiters are granted in ZooKeeper's order (a
# writer of the instance may not overtake the waiting reader)
my $node = ZkLockTest::pg_node('wait_events', $proxy->hosts,
	'zklock.session_timeout' => 60000,
	'zklock.local_handoff' => 'off');
my $named = $node->pg_version >= 17;

# The wait event expected for $name: the name on 17 and later.
sub event { return $named ? $_[0] : 'Extension'; }

sub session { return ZkLockTest::Session->new($node, @_); }

# The README's query of the sessions waiting in zklock, as pids.
my $troubleshooting_sql = $named
  ? "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity "
  . "WHERE wait_event LIKE 'Zklock%' AND backend_type = 'client backend'"
  : "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity "
  . "WHERE wait_event_type = 'Extension' AND backend_type = 'client backend'";

# Poll until session $s waits with wait event $event; checks it and that the
# troubleshooting query names exactly the sessions in @$waiting.
sub waits_as
{
	my ($s, $event, $what, $waiting) = @_;
	my $row = '';
	my $ok = poll_until(
		sub {
			$row = $node->safe_psql('postgres',
				"SELECT coalesce(wait_event_type, '') || '/' || coalesce(wait_event, '') "
				  . 'FROM pg_stat_activity WHERE pid = ' . $s->pid);
			return $row eq 'Extension/' . $event;
		},
		timeout => 60,
		interval => 0.02);
	ok($ok, "$what: waits as Extension/$event") or diag("last row: \"$row\"");
	is($node->safe_psql('postgres', $troubleshooting_sql),
		join(',', sort { $a <=> $b } map { $_->pid } @$waiting),
		"$what: the troubleshooting query lists the waiting sessions");
	return;
}

my $s1 = session();
my $s2 = session();
my $s3 = session();

# an exclusive lock
is($s1->query_ok("SELECT zk_lock_acquire('we_lock')"), 't', 'a holds we_lock');
$s2->send("SELECT zk_lock_acquire('we_lock')");
waits_as($s2, event('ZklockLock'), 'lock', [$s2]);
is($s1->query_ok("SELECT zk_lock_release('we_lock')"), 't', 'a releases');
is($s2->result, 't', 'b gets we_lock');
is($s2->query_ok("SELECT zk_lock_release('we_lock')"), 't', 'b releases');

# the two sides of a read-write lock
is($s1->query_ok("SELECT zk_rwlock_write('we_rw')"), 't', 'a holds we_rw for writing');
$s2->send("SELECT zk_rwlock_read('we_rw')");
waits_as($s2, event('ZklockReadLock'), 'read lock', [$s2]);
$s3->send("SELECT zk_rwlock_write('we_rw')");
waits_as($s3, event('ZklockWriteLock'), 'write lock', [ $s2, $s3 ]);
is($s1->query_ok("SELECT zk_rwlock_write_release('we_rw')"), 't', 'a releases we_rw');
is($s2->result, 't', 'b reads');
is($s2->query_ok("SELECT zk_rwlock_read_release('we_rw')"), 't', 'b releases we_rw');
is($s3->result, 't', 'c writes');
is($s3->query_ok("SELECT zk_rwlock_write_release('we_rw')"), 't', 'c releases we_rw');

# a semaphore
is($s1->query_ok("SELECT zk_semaphore_acquire('we_sem', 1)"), 't', 'a holds the only lease');
$s2->send("SELECT zk_semaphore_acquire('we_sem', 1)");
waits_as($s2, event('ZklockSemaphore'), 'semaphore', [$s2]);
is($s1->query_ok("SELECT zk_semaphore_release('we_sem')"), 't', 'a returns it');
is($s2->result, 't', 'b gets the lease');
is($s2->query_ok("SELECT zk_semaphore_release('we_sem')"), 't', 'b returns it');

# a job claim waiting for another transaction's claim of the slot
is($s1->query_ok("BEGIN; SELECT zk_job_claim('we_job', '2026-01-01 00:00+00')"),
	't', 'a claims the slot in an open transaction');
$s2->send("SELECT zk_job_claim('we_job', '2026-01-01 00:00+00', 600000)");
waits_as($s2, event('ZklockJobClaim'), 'job claim', [$s2]);
$s1->query_ok('ROLLBACK');
is($s2->result, 't', 'b gets the slot once a rolled back');

# a barrier
is($s1->query_ok("SELECT zk_barrier_set('we_barrier')"), 't', 'a sets the barrier');
$s2->send("SELECT zk_barrier_wait('we_barrier')");
waits_as($s2, event('ZklockBarrier'), 'barrier', [$s2]);
is($s1->query_ok("SELECT zk_barrier_remove('we_barrier')"), 't', 'a removes it');
is($s2->result, 't', 'b passes');

# a release waiting for ZooKeeper to answer its delete (held by the proxy)
is($s1->query_ok("SELECT zk_lock_acquire('we_release')"), 't', 'a holds we_release');
$proxy->hold_at('delete,multi', '/we_release/');
$s1->send("SELECT zk_lock_release('we_release')");
waits_as($s1, event('ZklockRelease'), 'release', [$s1]);
$proxy->release;
is($s1->result, 't', 'the release returns once the answer comes');
is($s2->query_ok("SELECT zk_lock_try('we_release')"), 't', 'and the lock is free');
is($s2->query_ok("SELECT zk_lock_release('we_release')"), 't', 'b releases');

# nobody waits now; on 17 and later pg_wait_events lists every name (the
# worker registers them when it starts; it has no row in pg_stat_activity)
SKIP:
{
	skip 'named wait events need PostgreSQL 17', 1 unless $named;
	is( $node->safe_psql('postgres',
			"SELECT string_agg(name, ',' ORDER BY name) FROM pg_wait_events "
			  . "WHERE type = 'Extension' AND name LIKE 'Zklock%'"),
		join(',',
			sort map { "Zklock$_" }
			  qw(Lock ReadLock WriteLock Semaphore Barrier DoubleBarrier
			  JobClaim Revoke List SharedCount Release WorkerMain)),
		'pg_wait_events lists the wait events of zklock');
}
is($node->safe_psql('postgres', $troubleshooting_sql), '',
	'the troubleshooting query lists nobody when nobody waits');

$_->quit foreach ($s1, $s2, $s3);
$node->stop;
$proxy->stop;
$zk->stop;
done_testing();

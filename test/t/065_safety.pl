# 065_safety.pl
#    Invariants of "never two holders" and "every request ends" (issue 9)
#    across two instances sharing one ZooKeeper:
#    - a holding made in a session the worker no longer has (the worker was
#      terminated and restarted) is lost: no re-entrant grant, held or token
#      answer vouches for it, while another instance holds the lock;
#    - every mix of lock kinds on one name conflicts, or fails while the
#      name is in use as a semaphore, cluster-wide;
#    - a write holder gets the read lock at once, even with a writer queued
#      behind it, and the queued writer gets the lock after both are let go;
#    - repeated zk_lock_try on a held lock leaves no watch behind;
#    - a release is visible at once to the next request of the instance.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(poll_status zk_watch_count signal_process wait_waiting);

my $zk = ZkLockTest::zk_start();
my $na = ZkLockTest::pg_node('safe_a', $zk);
my $nb = ZkLockTest::pg_node('safe_b', $zk);

sub session { return ZkLockTest::Session->new(@_); }

sub children
{
	return ZkLockTest::zk_children($zk, "/zklock/$_[0]");
}

sub worker_pid
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(worker_pid::text, '') FROM zk_status()");
}

foreach my $nd ($na, $nb)
{
	poll_status($nd, sub { $_[0]{state} eq 'connected' });
}

# ===========================================================================
note 'A1: a holding of a session the worker no longer has is lost';
# ===========================================================================
{
	my $a = session($na);
	is($a->query_ok("SELECT zk_lock_acquire('r')"), 't', 'A holds r');

	my $old = worker_pid($na);
	signal_process($old, 'TERM');
	ok( poll_until(
			sub {
				my $pid = worker_pid($na);
				return $pid ne '' && $pid ne $old;
			}),
		'the postmaster restarts the worker');

	my $b = session($nb);
	is($b->query_ok("SELECT zk_lock_acquire('r', 30000)"),
		't', 'B gets r once the first worker\'s session is gone');

	my ($out, $err) = $a->query("SELECT zk_lock_acquire('r', 1000)");
	isnt($out, 't',
		'A\'s re-entrant acquire of r does not return true while B holds r');
	like($err, qr/was lost/, 'A is told its holding of r was lost');
	is($a->query_ok("SELECT zk_lock_held('r')"), 'f', 'zk_lock_held(r) is false on A');
	is($a->query_ok("SELECT zk_lock_token('r') IS NULL"), 't',
		'zk_lock_token(r) is NULL on A');
	is($b->query_ok("SELECT zk_lock_release('r')"), 't', 'B releases r');
	is($a->query_ok("SELECT zk_lock_acquire('r', 10000)"), 't',
		'A can take r afresh');
	is($a->query_ok("SELECT zk_lock_release('r')"), 't', 'A releases r');
	my ($rel) = $a->query("SELECT zk_lock_release('r')");
	is($rel, 'f', 'A held r once only: the lost holding was dropped');
}

# ===========================================================================
note 'A2: every mix of kinds on one name, across instances';
# ===========================================================================
{
	my %take = (
		lock      => "zk_lock_acquire('%s', %d)",
		read      => "zk_rwlock_read('%s', %d)",
		write     => "zk_rwlock_write('%s', %d)",
		semaphore => "zk_semaphore_acquire('%s', 2, %d)",);
	my %give = (
		lock      => "zk_lock_release('%s')",
		read      => "zk_rwlock_read_release('%s')",
		write     => "zk_rwlock_write_release('%s')",
		semaphore => "zk_semaphore_release('%s')",);
	my $i = 0;
	foreach my $first (sort keys %take)
	{
		foreach my $second (sort keys %take)
		{
			my $name = 'kinds' . $i++;
			my $compatible =
			  ($first eq 'read' && $second eq 'read')
			  || ($first eq 'semaphore' && $second eq 'semaphore');
			my $a = session($na);
			my $b = session($nb);
			is($a->query_ok("SELECT " . sprintf($take{$first}, $name, 10000)),
				't', "$first on A");
			my ($out, $err) =
			  $b->query("SELECT " . sprintf($take{$second}, $name, 300));
			if ($compatible)
			{
				is($out, 't', "$second on B shares $name with $first on A");
			}
			elsif (($first eq 'semaphore') != ($second eq 'semaphore'))
			{
				isnt($out, 't', "$second on B is not granted beside $first on A");
				is(sqlstate($err), '55000',
					"$second on B: the name is in use as another kind (55000)");
			}
			else
			{
				is($out, 'f', "$second on B waits for $first on A and times out");
			}
			$b->query("SELECT " . sprintf($give{$second}, $name)) if ($out // '') eq 't';
			is($a->query_ok("SELECT " . sprintf($give{$first}, $name)),
				't', "$first released on A");
			ok( poll_until(
					sub { scalar(grep { /^_c_/ } children($name)) == 0 }),
				"nothing of $first/$second left under $name");
			$a->quit;
			$b->quit;
		}
	}
}

# ===========================================================================
note 'B8: a write holder gets the read lock at once, a writer queued behind';
# ===========================================================================
{
	my $a = session($na);
	my $b = session($na);
	my $c = session($nb);
	is($a->query_ok("SELECT zk_rwlock_write('d')"), 't', 'A holds write d');
	# queued in this order: B (behind A's node, in A's instance: local
	# hand-off) before C (a node of its own, after A's)
	$b->send("SELECT zk_rwlock_write('d')");
	ZkLockTest::wait_for_extension_wait($na, $b->pid);
	$c->send("SELECT zk_rwlock_write('d')");
	wait_waiting($nb, $c, $zk, '/zklock/d', 2);
	is($a->query_ok("SELECT zk_rwlock_read('d', 2000)"),
		't', 'A gets read d at once while writers wait');
	is($a->query_ok("SELECT zk_lock_acquire('d', 2000)"),
		't', 'A\'s write lock covers the exclusive lock of d too');
	is($a->query_ok("SELECT zk_rwlock_write_release('d')"), 't', 'A lets go of write');
	ok(!$b->done && !$c->done, 'the writers still wait: A holds read and lock');
	is($a->query_ok("SELECT zk_lock_release('d')"), 't', 'A lets go of lock');
	is($a->query_ok("SELECT zk_rwlock_read_release('d')"), 't', 'A lets go of read');
	is($b->result, 't', 'the first queued writer gets d');
	ok(!$c->done, 'the second still waits');
	is($b->query_ok("SELECT zk_rwlock_write_release('d')"), 't', 'B lets go');
	is($c->result, 't', 'the second queued writer gets d');
	is($c->query_ok("SELECT zk_rwlock_write_release('d')"), 't', 'C lets go');

	is($a->query_ok("SELECT zk_rwlock_read('u')"), 't', 'A holds read u');
	my ($out, $err) = $a->query("SELECT zk_lock_acquire('u', 0)");
	is(sqlstate($err), '55000', 'an exclusive lock over one\'s own read lock is refused');
	is($a->query_ok("SELECT zk_rwlock_read_release('u')"), 't', 'A lets go of u');
}

# ===========================================================================
note 'B10: zk_lock_try on a held lock leaves no watch behind';
# ===========================================================================
{
	my $a = session($na);
	is($a->query_ok("SELECT zk_lock_acquire('w')"), 't', 'A holds w');
	my $before = zk_watch_count($zk, 1);
	is( $nb->safe_psql(
			'postgres',
			"SELECT count(*) FILTER (WHERE zk_lock_try('w')) FROM generate_series(1, 200)"
		),
		'0',
		'200 tries on B all fail');
	my $after = zk_watch_count($zk, 1);
	cmp_ok($after - $before, '<=', 1, "watches on the server: $before before, $after after");
	is($a->query_ok("SELECT zk_lock_release('w')"), 't', 'A releases w');
}

# ===========================================================================
note 'issue 12.4: a release is visible at once within the instance';
# ===========================================================================
{
	my $a = session($na);
	my $b = session($na);
	my $fails = 0;
	for my $round (1 .. 40)
	{
		$b->query_ok("SELECT zk_lock_acquire('m/b')");
		my $got = $a->query_ok("SELECT zk_lock_acquire_all(ARRAY['m/a','m/b'], 50)");
		$fails++ if $got ne 'f';
		my $try = $b->query_ok("SELECT zk_lock_try('m/a')");
		$fails++ if $try ne 't';
		$b->query_ok("SELECT zk_lock_release('m/a')") if $try eq 't';
		$b->query_ok("SELECT zk_lock_release('m/b')");
	}
	is($fails, 0, 'after a failed multi-lock the other session gets m/a at once, 40 times');
}

done_testing();

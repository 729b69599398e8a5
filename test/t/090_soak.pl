# 090_soak.pl
#    10,000 acquire/release cycles from 20 backends (pgbench, 5 lock names,
#    so that most acquisitions queue): nothing may accumulate.  Measured
#    before and after, once everything has settled: the znodes under
#    /zklock, ZooKeeper's watch count (wchs) and the worker's resident
#    memory (VmRSS).  Bounds:
#      - znodes: no ephemeral node left; at most the 5 parents (containers
#        the server may have reaped meanwhile), never more than before;
#      - watches: no more than before (every watch of a waiter fires when its
#        predecessor goes);
#      - worker VmRSS: grows by at most 1 MB over the 10,000 cycles, after a
#        1,000-cycle warm-up (a leak of 100 bytes per cycle would exceed it;
#        a typical run grows by well under 100 kB).
#    Also: every cycle succeeds, the worker's counters add up, and no entry
#    of shared memory stays in use.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(zk_status_of poll_status zk_tree zk_watch_count rss_kb);

my $T0 = time;
my $NAMES = 5;
my $CLIENTS = 20;
my $CYCLES = 10_000;
my $RSS_BOUND_KB = 1024;

my $zk = ZkLockTest::zk_start();
my $node = ZkLockTest::pg_node('soak', $zk,
	'max_connections' => '50',
	'log_statement' => 'none');

my $script = $node->basedir . '/soak.sql';
PostgreSQL::Test::Utils::append_to_file($script, <<"SQL");
\\set k random(0, @{[ $NAMES - 1 ]})
SELECT zk_lock_acquire('soak' || :k);
SELECT zk_lock_release('soak' || :k);
SQL

# Run pgbench: $CLIENTS clients, $per transactions each; returns its output.
sub pgbench
{
	my ($per) = @_;
	my ($out, $err) = ('', '');
	my $t = time;
	my $ok = IPC::Run::run(
		[
			$node->installed_command('pgbench'), '-n', '-c', $CLIENTS,
			'-j', 2, '-t', $per, '-f', $script,
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(150));
	my $total = $CLIENTS * $per;
	ok($ok, "pgbench ran $total cycles") or diag "pgbench: $err";
	like($out, qr/number of transactions actually processed: $total\/$total/,
		"all $total cycles completed");
	unlike($out, qr/number of failed transactions: [1-9]/, 'none failed');
	my ($tps) = $out =~ /tps = ([\d.]+)/;
	note sprintf('%d cycles in %.1f s (%s cycles/s)', $total, time - $t, $tps // '?');
	return $out;
}

# Wait until nothing is held, waited for or being released, and ZooKeeper
# holds no ephemeral node under /zklock; then measure.
sub settled_figures
{
	my ($what, $max_watches) = @_;
	ok($node->poll_query_until('postgres', 'SELECT count(*) = 0 FROM zk_locks'),
		"$what: no entry in use (zk_locks empty)");
	my @tree;
	ok( poll_until(
			sub {
				@tree = zk_tree($zk, '/zklock');
				!grep { $_->{ephemeral} ne '' } @tree;
			},
			timeout => 30),
		"$what: no lock node left in ZooKeeper");
	my $watches;
	if (defined $max_watches)
	{
		poll_until(sub { ($watches = zk_watch_count($zk, 1)) <= $max_watches },
			timeout => 30);
	}
	else
	{
		$watches = zk_watch_count($zk, 1);
	}
	my $st = zk_status_of($node);
	my %f = (
		znodes => scalar(@tree),
		watches => $watches,
		rss => rss_kb($st->{worker_pid}),
		worker_pid => $st->{worker_pid},
		requests => $st->{requests},
		grants => $st->{grants},
		timeouts => $st->{timeouts},
		session_id => $st->{session_id});
	note sprintf('%s: %d znodes under /zklock, %d watches, worker VmRSS %d kB, '
		  . 'requests %d, grants %d', $what, @f{qw(znodes watches rss requests grants)});
	return \%f;
}

poll_status($node, sub { $_[0]{state} eq 'connected' });

# warm-up: let the worker, the client library and the server reach their
# steady state
pgbench(50);
my $before = settled_figures('before');

pgbench($CYCLES / $CLIENTS);
my $after = settled_figures('after', $before->{watches});

is($after->{worker_pid}, $before->{worker_pid}, 'the same worker throughout');
is($after->{session_id}, $before->{session_id}, 'the same ZooKeeper session throughout');
is($after->{requests} - $before->{requests}, $CYCLES, "$CYCLES requests counted");
is($after->{grants} - $before->{grants}, $CYCLES, "$CYCLES grants counted");
is($after->{timeouts}, $before->{timeouts}, 'no timeouts');

# (the parents are CONTAINER nodes that ZooKeeper reaps about a second after
# they empty, so "before" may have caught fewer of them than "after": the
# bound is the number of names, not the earlier count)
cmp_ok($after->{znodes}, '<=', $NAMES, 'znodes under /zklock: at most the parents of the names');
cmp_ok($after->{watches}, '<=', $before->{watches}, 'watches: no more than before');
my $growth = $after->{rss} - $before->{rss};
cmp_ok($growth, '<=', $RSS_BOUND_KB,
	"worker VmRSS grows by at most $RSS_BOUND_KB kB over $CYCLES cycles");
note "worker VmRSS: $before->{rss} kB -> $after->{rss} kB ($growth kB)";

# the pool of entries is whole again: every backend can take a lock at once
is( $node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE zk_lock_try('soak' || i)) FROM generate_series(0, $NAMES - 1) i"),
	$NAMES,
	'every lock is free afterwards');
ok(!$node->log_contains('could not delete node'), 'no failed deletes');
note sprintf('090_soak took %.0f s', time - $T0);

$node->stop;
done_testing();

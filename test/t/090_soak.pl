# 090_soak.pl
#    10,000 acquire/release cycles from 20 sessions (5 lock names, so that
#    most acquisitions queue), each cycle two statements as an application
#    sends them: nothing may accumulate.  Measured after a 1,000-cycle
#    warm-up (which takes the measurements once too, so that what their
#    queries load is loaded) and again after the 10,000 cycles, once
#    everything has settled: the znodes under /zklock, ZooKeeper's watch
#    count (wchs), the private memory (RssAnon) of the worker and of the 20
#    backends, which stay connected throughout, and the memory the
#    backends' contexts hold.
#    Bounds:
#      - znodes: no ephemeral node left; at most the 5 parents (containers
#        the server may have reaped meanwhile), never more than before;
#      - watches: no more than before (every watch of a waiter fires when its
#        predecessor goes);
#      - memory: no leak.  After the warm-up a cycle leaves nothing behind,
#        so memory may differ from the warm-up's figures by a small amount
#        that does not depend on the number of cycles (a page or two of a
#        heap settling), not by anything that grows with them: the worker's
#        RssAnon by at most 64 kB (6.5 bytes per cycle: a leak of even the
#        smallest malloc chunk, 32 bytes, per cycle is five times that),
#        each backend's by at most 32 kB (500 cycles each: 64 bytes per
#        cycle), the used bytes of each backend's memory contexts by at most
#        1 kB (2 bytes per cycle).  A typical run: the worker and each
#        backend grow by 0 to 8 kB, the contexts' used bytes not at all.
#    Also: every cycle succeeds, the worker's counters add up, and no entry
#    of shared memory stays in use.

use strict;
use warnings;

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
my $WARMUP = 1_000;
my $CYCLES = 10_000;
my $WORKER_BOUND_KB = 64;
my $BACKEND_BOUND_KB = 32;
my $CONTEXT_BOUND_BYTES = 1024;

my $zk = ZkLockTest::zk_start();
my $node = ZkLockTest::pg_node('soak', $zk,
	'max_connections' => '50',
	'log_statement' => 'none');

my @clients = map { ZkLockTest::Session->new($node) } 1 .. $CLIENTS;

# $total cycles, spread over the clients: each client sends its share as
# one script of separate statements (one transaction each) and the test
# waits for all of them.
sub cycles
{
	my ($total) = @_;
	my $per = $total / $CLIENTS;
	my $t = time;
	foreach my $c (@clients)
	{
		my $script = '';
		foreach (1 .. $per)
		{
			my $k = int(rand($NAMES));
			$script .= "SELECT zk_lock_acquire('soak$k');\n"
			  . "SELECT zk_lock_release('soak$k');\n";
		}
		$c->send($script);
	}
	ok(poll_until(sub { !grep { !$_->done } @clients }, interval => 0.05, timeout => 150),
		"$total cycles end");
	my ($ok, $bad) = (0, 0);
	foreach my $c (@clients)
	{
		my ($out, $err) = $c->result;
		my @t = grep { $_ eq 't' } split /\n/, ($out // '');
		$ok += @t / 2;
		$bad++ if @t != 2 * $per || $err ne '';
		diag "client " . $c->pid . ": " . scalar(@t) . " of " . 2 * $per
		  . " statements returned true; errors: $err"
		  if @t != 2 * $per || $err ne '';
	}
	is($ok, $total, "all $total cycles acquired and released");
	is($bad, 0, 'no client saw an error');
	note sprintf('%d cycles in %.1f s (%.0f cycles/s)',
		$total, time - $t, $total / ((time - $t) || 1));
	return;
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
				# not the worker's session node (zklock.instances)
				@tree = grep { $_->{path} !~ m{^/zklock/zklock\.instances} }
				  zk_tree($zk, '/zklock');
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
		worker => rss_kb($st->{worker_pid}, 'RssAnon'),
		worker_pid => $st->{worker_pid},
		requests => $st->{requests},
		grants => $st->{grants},
		timeouts => $st->{timeouts},
		session_id => $st->{session_id});
	foreach my $c (@clients)
	{
		$f{context}{ $c->pid } =
		  $c->query_ok('SELECT sum(used_bytes) FROM pg_backend_memory_contexts');
		$f{backend}{ $c->pid } = rss_kb($c->pid, 'RssAnon');
	}
	my ($sum_backends, $sum_contexts) = (0, 0);
	$sum_backends += $_ foreach values %{ $f{backend} };
	$sum_contexts += $_ foreach values %{ $f{context} };
	note sprintf('%s: %d znodes under /zklock, %d watches, worker RssAnon %d kB, '
		  . 'backends RssAnon %d kB and contexts %d bytes in all, requests %d, grants %d',
		$what, @f{qw(znodes watches worker)}, $sum_backends, $sum_contexts,
		@f{qw(requests grants)});
	return \%f;
}

poll_status($node, sub { $_[0]{state} eq 'connected' });

# warm-up: let the worker, the backends, the client library and the server
# reach their steady state, the measurement included
cycles($WARMUP / 2);
settled_figures('during the warm-up');
cycles($WARMUP / 2);
my $before = settled_figures('after the warm-up');

cycles($CYCLES);
my $after = settled_figures("after $CYCLES more cycles", $before->{watches});

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

my $growth = $after->{worker} - $before->{worker};
note "worker RssAnon: $before->{worker} kB -> $after->{worker} kB ($growth kB)";
cmp_ok($growth, '<=', $WORKER_BOUND_KB,
	"worker: private memory grows by at most $WORKER_BOUND_KB kB over $CYCLES cycles");
my @rss = sort { $a <=> $b }
  map { $after->{backend}{ $_->pid } - $before->{backend}{ $_->pid } } @clients;
my @ctx = sort { $a <=> $b }
  map { $after->{context}{ $_->pid } - $before->{context}{ $_->pid } } @clients;
my ($worst_rss, $worst_ctx) = ($rss[-1], $ctx[-1]);
note "backends: RssAnon grew by $rss[0] to $worst_rss kB, "
  . "their contexts' used bytes by $ctx[0] to $worst_ctx";
cmp_ok($worst_rss, '<=', $BACKEND_BOUND_KB,
	"backends: private memory grows by at most $BACKEND_BOUND_KB kB each over "
	  . $CYCLES / $CLIENTS . ' cycles each');
cmp_ok($worst_ctx, '<=', $CONTEXT_BOUND_BYTES,
	"backends: their memory contexts hold at most $CONTEXT_BOUND_BYTES bytes more each");

# the pool of entries is whole again: every backend can take a lock at once
is( $node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE zk_lock_try('soak' || i)) FROM generate_series(0, $NAMES - 1) i"),
	$NAMES,
	'every lock is free afterwards');
$_->quit foreach @clients;
ok(!$node->log_contains('could not delete node'), 'no failed deletes');
note sprintf('090_soak took %.0f s', time - $T0);

$node->stop;
done_testing();

# 033_zk_down_cpu.pl
#    While ZooKeeper refuses connections the worker waits between its
#    attempts instead of spinning: over several seconds of an outage it uses
#    less than 5% of a core.  Its attempts are at most about a second apart
#    (and not many more): a listener of the test on ZooKeeper's port, which
#    accepts and closes every connection, counts them.  When ZooKeeper is
#    back the worker reconnects within about a second.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use IO::Select;
use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use POSIX ();
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(poll_status);

my $zk = ZkLockTest::zk_start();
my $node = ZkLockTest::pg_node('cpu', $zk);
my $s = ZkLockTest::Session->new($node);

# user + system CPU time of a process so far, in seconds
my $ticks = POSIX::sysconf(POSIX::_SC_CLK_TCK) || 100;
sub cpu_seconds
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or die "no process $pid: $!";
	my $stat = <$fh>;
	close $fh;
	# the fields after the command name, which is in parentheses
	$stat =~ s/^.*\)\s+//s;
	my @f = split /\s+/, $stat;
	return ($f[11] + $f[12]) / $ticks;    # utime, stime (fields 14, 15)
}

my $st = poll_status($s, sub { $_[0]{state} eq 'connected' });
ok($st, 'the worker is connected');
my $worker = $st->{worker_pid};

# some work first, so that the engine has its periodic tasks scheduled
is($s->query_ok("SELECT zk_lock_acquire('cpu')"), 't', 'a lock is taken');
is($s->query_ok("SELECT zk_lock_release('cpu')"), 't', 'and released');

# ---------------------------------------------------------------------------
note 'ZooKeeper stopped: the worker does not spin';

$zk->stop_node(1);
ok(poll_status($s, sub { $_[0]{state} ne 'connected' }, timeout => 30),
	'the worker notices that ZooKeeper is gone');

# Long enough to cover the session's loss (4 s), a new session's first
# attempts and the engine's periodic tasks falling due while disconnected.
my $window = 8;
my ($c0, $t0) = (cpu_seconds($worker), time);
ok(poll_until(sub { time - $t0 >= $window }, timeout => $window + 5),
	"$window s of outage pass");
my ($c1, $t1) = (cpu_seconds($worker), time);
my $share = ($c1 - $c0) / ($t1 - $t0);
note sprintf('worker CPU during the outage: %.3f s in %.1f s (%.1f%% of a core)',
	$c1 - $c0, $t1 - $t0, 100 * $share);
cmp_ok($share, '<', 0.05, 'the worker used less than 5% of a core');
isnt($s->query_ok('SELECT state FROM zk_status()'), 'connected',
	'it is not connected (ZooKeeper is still down)');

# ---------------------------------------------------------------------------
note 'the worker\'s attempts, counted on ZooKeeper\'s port';

# Every attempt connects, finds the connection closed and fails like a
# refused one; the worker waits as between rounds of refused attempts.
my $listener = IO::Socket::INET->new(
	LocalAddr => '127.0.0.1',
	LocalPort => $zk->port(1),
	Listen    => 16,
	ReuseAddr => 1) or die "cannot listen on ZooKeeper's port: $!";
my $sel = IO::Select->new($listener);
my @attempts;
($c0, $t0) = (cpu_seconds($worker), time);
while (time - $t0 < $window)
{
	next unless $sel->can_read(0.1);
	my $conn = $listener->accept or next;
	push @attempts, time;
	close $conn;
}
($c1, $t1) = (cpu_seconds($worker), time);
close $listener;
my @gaps = map { $attempts[$_] - $attempts[ $_ - 1 ] } 1 .. $#attempts;
note sprintf('%d attempts in %.1f s, %.2f s apart at most; worker CPU %.1f%% of a core',
	scalar @attempts, $t1 - $t0, (sort { $b <=> $a } @gaps, 0)[0],
	100 * ($c1 - $c0) / ($t1 - $t0));
# after the first outage the wait between attempts has reached its
# maximum, a second: about one attempt a second
cmp_ok(scalar @attempts, '>=', $window / 2, 'the worker keeps trying ...');
cmp_ok(scalar @attempts, '<=', 2 * $window, '... about once a second, not more');
cmp_ok((sort { $b <=> $a } @gaps, 0)[0], '<', 1.6,
	'no two attempts are much more than a second apart');
cmp_ok(($c1 - $c0) / ($t1 - $t0), '<', 0.05,
	'the worker used less than 5% of a core meanwhile');

# ---------------------------------------------------------------------------
note 'ZooKeeper back: the worker reconnects within about a second';

# (not start_node's own wait: test/zk can mistake the moment before its
# exec of java for a JVM that died)
$zk->start_node(1, wait => 0);
ok(poll_until(sub { $zk->four(1, 'srvr') =~ /^Mode: standalone/m }, timeout => 60),
	'ZooKeeper serves again');
my $back = time;
ok(poll_status($s, sub { $_[0]{state} eq 'connected' }, timeout => 30),
	'the worker reconnects');
my $took = time - $back;
note sprintf('reconnected %.2f s after ZooKeeper served again', $took);
# at most a second between attempts, plus a handshake the server may have
# accepted while starting (dropped after a second), plus headroom
cmp_ok($took, '<', 5, 'within a few seconds');
is($s->query_ok("SELECT zk_lock_try('cpu')"), 't', 'locks work again');
is($s->query_ok("SELECT zk_lock_release('cpu')"), 't', 'released');

$s->quit;
ok(!$node->log_contains(qr/PANIC|TRAP:|terminated by signal/),
	'no crash in the server log');
$node->stop;
done_testing();

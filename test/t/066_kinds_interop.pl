# 066_kinds_interop.pl
#    Kinds of lock on one name within one backend: a backend holding the
#    exclusive lock of a name, whose session waits for a confirmation (the
#    worker paused), that asks for the read lock of the name gets it on its
#    own node once the session is confirmed, as a re-entrant acquire of the
#    same kind does, instead of queueing behind its own node.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(zk_status_of poll_status poll_session signal_process
  zk_lock_nodes);

my $zk = ZkLockTest::zk_start();

# A session timeout of 10 s: the worker's session goes unconfirmed 2.5 to
# 5 s after the worker stops (it confirms every quarter timeout and vouches
# for half a timeout), and cannot be lost before 7.5 s.
my $node = ZkLockTest::pg_node('kinds', $zk, 'zklock.session_timeout' => '10000');
poll_status($node, sub { $_[0]{state} eq 'connected' });

# ===========================================================================
note 'the exclusive lock\'s holder asks for the read lock while its '
  . 'session waits for a confirmation';
# ===========================================================================
{
	my $h = ZkLockTest::Session->new($node);
	is($h->query_ok("SELECT zk_lock_acquire('kxdl')"), 't', 'H holds the lock kxdl');
	my @nodes = zk_lock_nodes($zk, '/zklock/kxdl');
	is(scalar @nodes, 1, 'one node, H\'s');
	my $st = zk_status_of($h);
	my $pid = $st->{worker_pid};

	signal_process($pid, 'STOP');
	my $stopped = time;
	ok(poll_session($h, "SELECT zk_lock_held('kxdl')", 'f', timeout => 30),
		'with the worker stopped, H\'s lock soon counts as not held');
	$h->send("SELECT zk_rwlock_read('kxdl', 8000)");
	ZkLockTest::wait_for_extension_wait($node, $h->pid);
	my $paused = time - $stopped;
	signal_process($pid, 'CONT');
	note sprintf 'the worker was stopped for %.1f s', $paused;

	my $asked = time;
	my ($out, $err) = $h->result;
	note sprintf 'zk_rwlock_read returned after %.1f s', time - $asked;
	is($out, 't', 'H gets the read lock once its session is confirmed again');
	is($err, '', 'without a warning or an error');
	ok(poll_status($h, sub { $_[0]{state} eq 'connected' }),
		'the worker is connected again');
	is(zk_status_of($h)->{session_losses},
		$st->{session_losses}, 'in the same session (the pause did not expire it)');
	is($h->query_ok("SELECT zk_rwlock_read_held('kxdl')"), 't',
		'H holds the read lock');
	is_deeply([ zk_lock_nodes($zk, '/zklock/kxdl') ],
		[@nodes], 'on its lock\'s node, the only one');
	($out) = $h->query("SELECT zk_rwlock_read_release('kxdl')");
	is($out, 't', 'H lets go of read');
	is($h->query_ok("SELECT zk_lock_held('kxdl')"), 't', 'and still holds the lock');
	is($h->query_ok("SELECT zk_lock_release('kxdl')"), 't', 'H lets go of the lock');
	ok(poll_until(sub { !zk_lock_nodes($zk, '/zklock/kxdl') }), 'no node is left');
	$h->quit;
}

ok(!$node->log_contains(qr/PANIC|TRAP:|terminated by signal/),
	'no crashes in the server log');
$node->stop;
done_testing();

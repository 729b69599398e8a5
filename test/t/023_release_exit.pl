# 023_release_exit.pl
#    A backend on its way out does not wait for its releases.  COMMIT and
#    ROLLBACK wait until what they released is deleted in ZooKeeper (at
#    most while the worker's session may live on), but a backend that is
#    terminated (pg_terminate_backend), idle in a transaction holding a
#    transaction-scope lock or in the middle of such a COMMIT, exits at
#    once: its nodes are deleted by the worker or go with the session
#    anyway, and nobody waits for its answer.  Checked with the worker
#    stopped (SIGSTOP), so that no release can complete: the wait would
#    otherwise last until the session can no longer be vouched for, most
#    of zklock.session_timeout (10 s here).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(poll_status signal_process process_state children_become);

my $zk = ZkLockTest::zk_start(tick => 500);
my $node = ZkLockTest::pg_node('exit', $zk, 'zklock.session_timeout' => '10000');

# The bound for a terminated backend to be gone: well below the 7.5 s or
# more that a wait for the stopped worker would last (the session was
# confirmed at most a quarter of its timeout before the worker stopped).
my $bound = 4;

# Stop the worker right after its session was confirmed; returns its pid.
sub stop_worker
{
	my $st = poll_status($node,
		sub { $_[0]{state} eq 'connected' && $_[0]{worker_pid} ne '' });
	ZkFault::stop_worker($node, $st->{worker_pid});
	return $st->{worker_pid};
}

# pg_terminate_backend($pid); how long until the process is gone (undef
# when it is still there after 30 s).
sub terminate
{
	my ($pid) = @_;
	my $t0 = time;
	is($node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)"),
		't', "backend $pid signalled");
	return poll_until(sub { !defined process_state($pid) },
		timeout => 30, interval => 0.02)
	  ? time - $t0
	  : undef;
}

# ---------------------------------------------------------------------------
note 'terminated while idle in a transaction holding a transaction-scope lock';

my $a = ZkLockTest::Session->new($node);
$a->query_ok('BEGIN');
is($a->query_ok("SELECT zk_lock_acquire_xact('exit1')"), 't', 'lock taken');
my $wpid = stop_worker();
my $took = terminate($a->pid);
ok(defined $took && $took < $bound,
	sprintf('the backend exited at once (%s s)',
		defined $took ? sprintf('%.2f', $took) : 'not within 30'));
signal_process($wpid, 'CONT');
is(scalar(children_become($zk, '/zklock/exit1', 0)), 0, 'its node goes');

# ---------------------------------------------------------------------------
note 'terminated while its COMMIT waits for the release';

my $b = ZkLockTest::Session->new($node);
$b->query_ok('BEGIN');
is($b->query_ok("SELECT zk_lock_acquire_xact('exit2')"), 't', 'lock taken');
$wpid = stop_worker();
$b->send('COMMIT');
ZkLockTest::wait_for_extension_wait($node, $b);
ok(!$b->done, 'COMMIT waits for the stopped worker');
$took = terminate($b->pid);
ok(defined $took && $took < $bound,
	sprintf('the backend exited at once (%s s)',
		defined $took ? sprintf('%.2f', $took) : 'not within 30'));
signal_process($wpid, 'CONT');
is(scalar(children_become($zk, '/zklock/exit2', 0)), 0, 'its node goes');

# ---------------------------------------------------------------------------
note 'with the worker running, COMMIT still waits for the delete';

my $c = ZkLockTest::Session->new($node);
$c->query_ok('BEGIN');
is($c->query_ok("SELECT zk_lock_acquire_xact('exit3')"), 't', 'lock taken');
$c->query_ok('COMMIT');
is(scalar(ZkLockTest::zk_children($zk, '/zklock/exit3')), 0,
	'no node once COMMIT returned');

done_testing();

# 024_release_lock_timeout.pl
#    lock_timeout bounds the wait for a lock, not the wait for the release
#    of what a wait gave up.  An acquire whose own timeout passes, or a
#    no-wait attempt that finds the lock taken, waits until its node is
#    deleted before it answers false; lock_timeout running out meanwhile
#    must not turn that answer into an error (55P03).  Checked with the
#    worker stopped (SIGSTOP) right after the request queued its node, so
#    that the delete cannot complete: the answer then comes once the
#    session can no longer be vouched for.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(sqlstate children_become);
use ZkFault qw(poll_status signal_process);

my $zk = ZkLockTest::zk_start(tick => 500);

# Without local hand-off every request has a node of its own, so that the
# waiter's timeout gives up a node even though the holder is local.
my $node = ZkLockTest::pg_node('lt', $zk, 'zklock.local_handoff' => 'off');

my $h = ZkLockTest::Session->new($node);
my $a = ZkLockTest::Session->new($node);
is($h->query_ok("SELECT zk_lock_acquire('lt1')"), 't', 'holder takes the lock');

$a->query_ok("SET lock_timeout = 1000");
$a->send("SELECT zk_lock_acquire('lt1', 300)");
is(scalar(children_become($zk, '/zklock/lt1', 2)), 2, 'the waiter queued its node');
my $st = poll_status($node, sub { $_[0]{state} eq 'connected' });
signal_process($st->{worker_pid}, 'STOP');
my ($out, $err) = $a->result(timeout => 60);
signal_process($st->{worker_pid}, 'CONT');
is(sqlstate($err), '(none)', 'the timed-out acquire raised no error') or diag $err;
is($out, 'f', 'it answered false');

# the worker was stopped for about a session timeout: the holder's session
# may have been given up meanwhile, and its release then only warns
$h->query("SELECT zk_lock_release('lt1')");
is(scalar(children_become($zk, '/zklock/lt1', 0)), 0, 'no node left');

done_testing();

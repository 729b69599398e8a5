# 024_release_lock_timeout.pl
#    lock_timeout bounds the wait for a lock, not the wait for the release
#    of what a wait gave up.  An acquire whose own timeout passes waits
#    until its node is deleted before it answers false; lock_timeout
#    running out meanwhile must not turn that answer into an error (55P03).
#    The delete cannot complete: the worker reaches ZooKeeper through the
#    fault proxy, which holds every reply from the one to that delete on
#    (the server applies it, the worker never hears so).  Nothing here
#    depends on when the waiter's timeout fires: the held delete is what
#    shows that the waiter queued a node and gave it up, and the answer
#    then comes once the session can no longer be vouched for (half the
#    session timeout without a reply, 2 s), after lock_timeout.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate children_become);
use ZkFault qw(poll_status);
use ZkFaultProxy;

my $zk = ZkLockTest::zk_start(tick => 500);
my $proxy = ZkFaultProxy->start($zk);

# Without local hand-off every request has a node of its own, so that the
# waiter's timeout gives up a node even though the holder is local.
my $node = ZkLockTest::pg_node('lt', $proxy->hosts, 'zklock.local_handoff' => 'off');
poll_status($node, sub { $_[0]{state} eq 'connected' })
  or die 'the worker did not connect';

my $h = ZkLockTest::Session->new($node);
my $a = ZkLockTest::Session->new($node);
is($h->query_ok("SELECT zk_lock_acquire('lt1')"), 't', 'holder takes the lock');

# the holder's node is not deleted before the end: the next delete of a node
# of lt1 is the waiter's
$proxy->hold_at('delete,multi', '/zklock/lt1/');
$a->query_ok("SET lock_timeout = 1000");
my $t0 = Time::HiRes::time();
$a->send("SELECT zk_lock_acquire('lt1', 300)");
ok(poll_until(sub { $proxy->status->{held} }, timeout => 60),
	'the waiter timed out and the delete of its queued node was sent (its reply held)')
  or diag 'proxy: ' . join ' ', %{ $proxy->status };
my ($out, $err) = $a->result(timeout => 60);
my $took = Time::HiRes::time() - $t0;
$proxy->release;
is(sqlstate($err), '(none)', 'the timed-out acquire raised no error') or diag $err;
is($out, 'f', 'it answered false');
# the release wait lasts until the session is no longer vouched for (2 s
# without a reply): lock_timeout (1 s) ran out during it
cmp_ok($took, '>', 1.0, 'it answered after lock_timeout had run out');

# without replies for about half a session timeout, the holder's session
# may have been given up meanwhile, and its release then only warns
$h->query("SELECT zk_lock_release('lt1')");
is(scalar(children_become($zk, '/zklock/lt1', 0)), 0, 'no node left');

$proxy->stop;
done_testing();

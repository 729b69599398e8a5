# 094_review_dbarrier.pl
#    Review finding on the double barrier (fails today).
#
#    When no member completes leaving (one leave times out, the other
#    member ends its membership with DISCARD ALL, backend exit or session
#    loss), nobody deletes "ready": it stays behind after every member node
#    is gone, and the next round of the barrier lets anyone through at once,
#    whatever "members" says (Curator's leave deletes "ready" when it times
#    out, so a Curator member in the same place would not leave it).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(zk_exists);

my $zk = ZkLockTest::zk_start();
my $pa = ZkLockTest::pg_node('review_db', $zk);

my $sa = ZkLockTest::Session->new($pa);
my $sb = ZkLockTest::Session->new($pa);
my $sc = ZkLockTest::Session->new($pa);

sub members_of
{
	my ($name) = @_;
	return grep { $_ ne 'ready' } ZkLockTest::zk_children($zk, "/zklock/$name");
}

$sa->send("SELECT zk_double_barrier_enter('rdb/stale', 2)");
ok(poll_until(sub { scalar(members_of('rdb/stale')) == 1 }),
	'the first member waits');
is($sb->query_ok("SELECT zk_double_barrier_enter('rdb/stale', 2)"), 't',
	'the second enters');
is($sa->result, 't', 'the first enters');

is($sa->query_ok("SELECT zk_double_barrier_leave('rdb/stale', 0)"), 'f',
	'the first leaves without waiting (the second is inside)');
$sb->query_ok('DISCARD ALL');
ok(poll_until(sub { scalar(members_of('rdb/stale')) == 0 }),
	'no member node is left');

ok(!zk_exists($zk, '/zklock/rdb/stale/ready'),
	'no "ready" is left behind either');
is($sc->query_ok("SELECT zk_double_barrier_enter('rdb/stale', 2, 0)"), 'f',
	'a new round with one member of two does not pass');

$sc->query_ok('DISCARD ALL');
$_->quit foreach ($sa, $sb, $sc);
done_testing();

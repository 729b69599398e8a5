# 103_claim_sweep.pl
#    The retention sweep (zklock.claim_retention) deletes only the claim
#    node it judged old: a sweep that read an old committed claim node
#    must not delete the new claim node of the same path that another
#    instance created (and committed) after someone deleted the old one,
#    which would let the slot be run a second time.
#
#    Instance a sweeps through the fault proxy: the reply to its read of
#    the old node is held while the old node is deleted (by another
#    client) and instance b claims the slot again and commits; then the
#    reply goes on to a's worker.  Once a's next sweep has begun (its next
#    listing, held in turn: everything the first one sent has been
#    answered), b's claim node is still there and instance c cannot claim
#    the slot.

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
use ZkFault qw(poll_status);
use ZkFaultProxy;
use ZkClaimTest qw(claim_node slot_name runs);

my $JOB = 'swept';
my $R = 2;    # a's zklock.claim_retention, seconds, once it sweeps

my $zk = ZkLockTest::zk_start(tick => 500);
my $proxy = ZkFaultProxy->start($zk);
# a long session: a's worker hears nothing while its replies are held
my $pa = ZkLockTest::pg_node('sw_a', $proxy->hosts, cluster_name => 'sw_a',
	'zklock.session_timeout' => 20000, 'zklock.claim_retention' => 0);
my $pb = ZkLockTest::pg_node('sw_b', $zk, cluster_name => 'sw_b');
my $pc = ZkLockTest::pg_node('sw_c', $zk, cluster_name => 'sw_c');
my @all = ($pa, $pb, $pc);
$_->safe_psql('postgres', 'CREATE TABLE runs (slot text NOT NULL)') foreach @all;
ok(poll_status($_, sub { $_[0]{state} eq 'connected' }, timeout => 60),
	$_->name . ' is connected')
  foreach @all;

sub run_sql
{
	my ($slot) = @_;
	return "INSERT INTO runs SELECT '$slot' WHERE zk_job_claim('$JOB', '$slot') RETURNING 'ran'";
}

my $S = '2020-01-01 00:00+00';
is($pa->safe_psql('postgres', run_sql($S)), 'ran', "a runs the old slot $S (its job now swept by a)");
my $old = claim_node($zk, $JOB, $S);
ok($old->{exists} && !$old->{ephemeral}, 'its claim node is persistent');
my $ctime = ZkLockTest::zk_python($zk, q{print(zk.exists(args[0]).ctime)},
	"/zklock/$JOB/claims/" . slot_name($S));
chomp $ctime;
ok(poll_until(sub { time - $ctime / 1000 > $R + 1 }, timeout => 30),
	"the node is older than a's retention-to-be ($R s)");

# a's sweep reads the old node; the reply is held
$proxy->hold_at('exists,getData', slot_name($S));
$pa->safe_psql('postgres', "ALTER SYSTEM SET zklock.claim_retention = '${R}s'");
$pa->reload;
ok(poll_until(sub { $proxy->status->{held} }, timeout => 30),
	'a\'s sweep read the old node; the reply is held');

# meanwhile: the old node is deleted, b claims the slot again and commits
ZkLockTest::zk_python($zk, q{zk.delete(args[0], recursive=True)}, "/zklock/$JOB/claims/" . slot_name($S));
is($pb->safe_psql('postgres', run_sql($S)), 'ran', 'b claims the slot again and runs it');
my $new;
ok( poll_until(
		sub {
			$new = claim_node($zk, $JOB, $S);
			return $new->{exists} && !$new->{ephemeral}
			  && ($new->{state} // '') =~ /^(committed|final)$/;
		},
		timeout => 30),
	'b\'s claim node is settled');
isnt($new->{czxid}, $old->{czxid}, 'b\'s claim node is a new node');

# the held reply goes on; a's next listing is held in turn
$proxy->hold_at('getChildren,getChildren2', "/$JOB/claims");
$proxy->release;
ok(poll_until(sub { $proxy->status->{held} }, timeout => 30),
	'a\'s sweep went through and its next one began');
my $now = claim_node($zk, $JOB, $S);
ok($now->{exists}, 'b\'s claim node is still there')
  and is($now->{czxid}, $new->{czxid}, '... the same node');
is($pc->safe_psql('postgres', run_sql($S)), '', 'c cannot claim the slot b ran');
is(runs('runs', $S, $pb, $pc), 1, 'the slot is run once since b claimed it');
$proxy->release;

$proxy->stop;
done_testing();

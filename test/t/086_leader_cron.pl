# 086_leader_cron.pl
#    The real pg_cron (Debian postgresql-15-cron) on two instances sharing
#    one ZooKeeper, both in leader group cron: a job guarded by
#    WHERE zk_is_leader('cron') runs on exactly one instance; when that
#    instance stops, the job runs on the other.
#
#    pg_cron 1.4 schedules by the minute.  The job is scheduled every
#    minute on both instances and one real firing on both is awaited (at
#    most about a minute); the rest calls the job's command, as pg_cron
#    stores it, directly, in sessions named "direct" (the table's column
#    via tells those rows from pg_cron's, which may come at any minute).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);

my $zk = ZkLockTest::zk_start();
my ($pa, $pb) =
  ZkLockTest::cron_nodes($zk, 'cron', 'zklock.leader_groups' => 'cron');

my $JOB = q{INSERT INTO runs(instance) SELECT current_setting('cluster_name') WHERE zk_is_leader('cron')};

foreach my $n ($pa, $pb)
{
	$n->safe_psql('postgres', q{
		CREATE EXTENSION pg_cron;
		CREATE TABLE runs (instance text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp(),
		                   via text NOT NULL DEFAULT current_setting('application_name'));
	});
	$n->safe_psql('postgres',
		"SELECT cron.schedule('leader-job', '* * * * *', \$job\$$JOB\$job\$)");
}

sub q1
{
	my ($node, $sql) = @_;
	my ($rc, $out) = $node->psql('postgres', $sql);
	return $rc == 0 ? $out : undef;
}

# zk_is_leader('cron') of a node: 't' or 'f', undef when it could not be asked.
sub leads { return q1($_[0], "SELECT zk_is_leader('cron')"); }

sub is_leader { return (leads($_[0]) // '') eq 't'; }

# The job's command, as pg_cron stores and runs it.
sub run_job_directly
{
	my ($node) = @_;
	$node->safe_psql('postgres',
		q{SET application_name = 'direct';
		  DO $$ BEGIN EXECUTE (SELECT command FROM cron.job WHERE jobname = 'leader-job'); END $$});
}

sub runs { return q1($_[0], 'SELECT count(*) FROM runs') // -1; }

# The rows the job's command inserted when run directly.
sub direct_runs { return q1($_[0], "SELECT count(*) FROM runs WHERE via = 'direct'") // -1; }

my $leader;
ok( poll_until(
		sub {
			my @l = grep { is_leader($_) } ($pa, $pb);
			$leader = $l[0] if @l == 1;
			return @l == 1;
		},
		timeout => 60),
	'exactly one instance leads group cron');
my $follower = $leader eq $pa ? $pb : $pa;

# ---------------------------------------------------------------------------
note 'the job\'s command, run on both instances';

run_job_directly($_) foreach ($pa, $pb, $pa, $pb);
is(direct_runs($leader), 2, 'it inserted on the leader, each time');
is(runs($follower), 0, 'and never on the follower');

# ---------------------------------------------------------------------------
note 'pg_cron fires the job on both instances (at most a minute)';

my $fired = "SELECT count(*) FROM cron.job_run_details WHERE status = 'succeeded'";
ok( poll_until(
		sub { (q1($pa, $fired) // 0) > 0 && (q1($pb, $fired) // 0) > 0 },
		timeout => 150,
		interval => 1),
	'pg_cron ran the job on both instances');
is(runs($follower), 0, 'the follower\'s runs inserted nothing');
# a run inserts and commits, then pg_cron marks it succeeded (one snapshot)
is( q1(
		$leader, q{
	SELECT (SELECT count(*) FROM runs WHERE via <> 'direct')
	       BETWEEN (SELECT count(*) FROM cron.job_run_details WHERE status = 'succeeded')
	           AND (SELECT count(*) FROM cron.job_run_details WHERE status <> 'failed')}),
	't', 'every pg_cron run on the leader inserted one row');
is(join(',', map { leads($_) // 'no answer' } ($leader, $follower)), 't,f',
	'leadership did not move meanwhile');

# ---------------------------------------------------------------------------
note 'the leader stops: the job runs on the other instance';

$leader->stop('fast');
ok(poll_until(sub { is_leader($follower) }, timeout => 30),
	'the other instance leads');
# the stopped one cannot be asked: the live one and ZooKeeper say who leads
like(q1($follower, "SELECT is_us, leader_id FROM zk_leaders WHERE group_name = 'cron'"),
	qr/^t\|\{"instance":"\Q${\ $follower->name }\E"/,
	'zk_leaders on the live instance names it as the leader');
my @latch = grep { /-latch-\d{10}$/ } ZkLockTest::zk_children($zk, '/zklock/cron');
is(scalar @latch, 1, 'ZooKeeper has one latch node left');
like( ZkLockTest::zk_python(
		$zk, q{print(zk.get(args[0])[0].decode(), end='')},
		"/zklock/cron/" . ($latch[0] // 'none')),
	qr/^\{"instance":"\Q${\ $follower->name }\E"/,
	'the live instance\'s');
run_job_directly($follower);
is(direct_runs($follower), 1, 'the job now inserts on the new leader');

done_testing();

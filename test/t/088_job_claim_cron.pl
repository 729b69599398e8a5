# 088_job_claim_cron.pl
#    The real pg_cron (Debian postgresql-15-cron) on two instances sharing
#    one ZooKeeper, running the same job every minute, one instance's job
#    late (clock skew, a late cron): it starts after the other instance's
#    run of the same slot has finished.
#
#      - guarded by zk_job_claim('report', date_trunc('minute', now())),
#        the job runs exactly once per slot;
#      - guarded by the plain lock (zk_lock_try_xact), it runs twice: the
#        first run has released the lock before the late one tries (the
#        reason zk_job_claim exists);
#      - when the first claimer fails (raises an error) in a slot, the
#        other instance runs the job in the same slot.
#
#    pg_cron 1.4 schedules by the minute: most of this calls the job's
#    function directly with chosen slots (a late run is one that starts
#    after the first has finished); one real firing on both instances is
#    awaited (at most about two minutes).

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
my ($pa, $pb) = ZkLockTest::cron_nodes($zk, 'jcron');

# The job, in both patterns.  knobs: whether the instance's runs are late
# and whether it fails after claiming.  A late run waits, before anything
# else, until the test has put its slot into table go, which it does once
# the other instance's runs of that slot have finished (now(), the
# transaction's start, still names the slot the cron fired for); it gives
# up with an error after 150 s.
my $SETUP = q{
CREATE EXTENSION pg_cron;
CREATE TABLE runs (instance text NOT NULL, pattern text NOT NULL,
                   slot timestamptz NOT NULL,
                   at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE knobs (late boolean NOT NULL, fail boolean NOT NULL);
INSERT INTO knobs VALUES (false, false);
CREATE TABLE go (slot timestamptz PRIMARY KEY);
CREATE FUNCTION wait_turn(s timestamptz) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '150 s';
BEGIN
    WHILE (SELECT late FROM knobs) AND NOT EXISTS (SELECT 1 FROM go WHERE go.slot = s) LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'slot % of the late run was not let go within 150 s', s;
        END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
CREATE FUNCTION report_claim(slot timestamptz) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM wait_turn(slot);
    IF zk_job_claim('report', slot) THEN
        INSERT INTO runs (instance, pattern, slot)
            VALUES (current_setting('cluster_name'), 'claim', slot);
        IF (SELECT fail FROM knobs) THEN
            RAISE EXCEPTION 'the report failed on %', current_setting('cluster_name');
        END IF;
    END IF;
END $$;
CREATE FUNCTION report_lock(slot timestamptz) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM wait_turn(slot);
    IF zk_lock_try_xact('report-lock') THEN
        INSERT INTO runs (instance, pattern, slot)
            VALUES (current_setting('cluster_name'), 'lock', slot);
    END IF;
END $$;
};
$_->safe_psql('postgres', $SETUP) foreach ($pa, $pb);

sub q1
{
	my ($node, $sql) = @_;
	my ($rc, $out) = $node->psql('postgres', $sql);
	return $rc == 0 ? $out : undef;
}

# Runs of a pattern in a slot, on both instances together.
sub runs_in
{
	my ($pattern, $slot) = @_;
	my $n = 0;
	foreach my $node ($pa, $pb)
	{
		$n += q1($node,
			"SELECT count(*) FROM runs WHERE pattern = '$pattern' AND slot = '$slot'") // 1000;
	}
	return $n;
}

# ---------------------------------------------------------------------------
note 'the job\'s function called directly: a on time, b after a finished';

foreach my $slot ('2026-05-01 10:00+00', '2026-05-01 10:01+00', '2026-05-01 10:02+00')
{
	foreach my $node ($pa, $pb)
	{
		$node->safe_psql('postgres', "SELECT report_claim('$slot')");
		$node->safe_psql('postgres', "SELECT report_lock('$slot')");
	}
	is(runs_in('claim', $slot), 1, "zk_job_claim: one run in slot $slot");
	is(runs_in('lock', $slot), 2, "zk_lock_try_xact: two runs in slot $slot");
}
is(q1($pb, q{SELECT count(*) FROM runs WHERE pattern = 'claim'}), '0',
	'the late instance never ran the claimed job');

# ---------------------------------------------------------------------------
note 'the first claimer fails: the other instance runs the job in the same slot';

my $S4 = '2026-05-01 10:03+00';
$pa->safe_psql('postgres', 'UPDATE knobs SET fail = true');
my ($rc, $out, $err) = $pa->psql('postgres', "SELECT report_claim('$S4')");
like($err, qr/the report failed on jcron_a/, 'a claims, then its job fails');
is(q1($pa, "SELECT count(*) FROM runs WHERE slot = '$S4'"), '0', 'a\'s run was rolled back');
ok( poll_until(
		sub {
			(q1($pb, "SELECT count(*) FROM zk_job_claims('report') WHERE slot = '$S4'") // 1)
			  eq '0';
		},
		timeout => 30),
	'a\'s claim is gone');
$pb->safe_psql('postgres', "SELECT report_claim('$S4')");
is(q1($pb, "SELECT count(*) FROM runs WHERE pattern = 'claim' AND slot = '$S4'"), '1',
	'b ran the job in that slot');
$pa->safe_psql('postgres', "SELECT report_claim('$S4')");
is(runs_in('claim', $S4), 1, 'and nobody runs it again');
$pa->safe_psql('postgres', 'UPDATE knobs SET fail = false');

# ---------------------------------------------------------------------------
note 'pg_cron fires both patterns every minute on both instances, b late';

$pb->safe_psql('postgres', 'UPDATE knobs SET late = true');
foreach my $node ($pa, $pb)
{
	$node->safe_psql('postgres', q{
		SELECT cron.schedule('report-claim', '* * * * *',
		                     $j$SELECT report_claim(date_trunc('minute', now()))$j$);
		SELECT cron.schedule('report-lock', '* * * * *',
		                     $j$SELECT report_lock(date_trunc('minute', now()))$j$);
	});
}

# slots (minutes) in which both jobs succeeded on an instance
sub fired_slots
{
	my ($node) = @_;
	my $out = q1($node, q{
		SELECT date_trunc('minute', d.start_time)
		  FROM cron.job_run_details d JOIN cron.job j USING (jobid)
		 WHERE d.status = 'succeeded'
		 GROUP BY 1 HAVING count(DISTINCT j.jobname) = 2
		 ORDER BY 1});
	return defined $out ? split(/\n/, $out) : ();
}

my $slot;
ok( poll_until(
		sub {
			# b's runs of a slot go on once both of a's have finished
			my @a = fired_slots($pa);
			foreach my $s (@a)
			{
				q1($pb, "INSERT INTO go VALUES ('$s') ON CONFLICT DO NOTHING");
			}
			# pg_cron may fire the minute the jobs were scheduled in on b
			# but not on a: b's runs of a minute before a's first are let
			# go at once, or they would wait for a run that never comes
			# (and the runs queued behind them would start minutes late)
			q1($pb, "INSERT INTO go SELECT DISTINCT date_trunc('minute', start_time) "
				  . "FROM cron.job_run_details WHERE status = 'running' "
				  . "AND start_time < '$a[0]' ON CONFLICT DO NOTHING")
			  if @a;
			my %b = map { $_ => 1 } fired_slots($pb);
			($slot) = grep { $b{$_} } fired_slots($pa);
			return defined $slot;
		},
		timeout => 150,
		interval => 1),
	'pg_cron ran both jobs on both instances in one minute');
$slot //= 'none';
note "slot $slot";
is(runs_in('claim', $slot), 1, 'zk_job_claim: the job ran once in that slot');
is(q1($pa, "SELECT count(*) FROM runs WHERE pattern = 'claim' AND slot = '$slot'"), '1',
	'... on the instance on time');
is(runs_in('lock', $slot), 2,
	'zk_lock_try_xact: the job ran twice in that slot (once on each instance)');
is(q1($pa, "SELECT count(*) FROM cron.job_run_details WHERE status = 'failed'"), '0',
	'no pg_cron run failed on a');
is(q1($pb, "SELECT count(*) FROM cron.job_run_details WHERE status = 'failed'"), '0',
	'nor on b');

$_->stop foreach ($pa, $pb);
done_testing();

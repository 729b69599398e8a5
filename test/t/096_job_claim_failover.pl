# 096_job_claim_failover.pl
#    A job slot is never lost: zk_job_claim(job, slot, timeout_ms) (1.4)
#    waits while another instance's claim of the slot is open, and takes
#    the slot when that claim ends without being made final -- its
#    transaction failed, its backend was terminated, its instance lost the
#    ZooKeeper session while the job ran -- and answers false when it was
#    made final.  Across every case, each slot is run (committed) exactly
#    once over the two instances.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session;
use ZkFault qw(sqlstate zk_status_of signal_process poll_status poll_session);

# tickTime 500 ms: the instances' 4 s sessions are allowed and expire promptly
my $zk = ZkLockTest::zk_start(tick => 500);
my $pa = ZkLockTest::pg_node('fo_a', $zk, cluster_name => 'fo_a');
my $pb = ZkLockTest::pg_node('fo_b', $zk, cluster_name => 'fo_b');
$_->safe_psql('postgres', 'CREATE TABLE work (slot text NOT NULL)') foreach ($pa, $pb);

sub session { return ZkLockTest::Session->new(@_); }

sub claim_sql
{
	my ($slot, $timeout) = @_;
	return "SELECT zk_job_claim('failover', '$slot', $timeout)";
}

# committed runs of a slot, over both instances
sub runs
{
	my ($slot) = @_;
	my $n = 0;
	$n += $_->safe_psql('postgres', "SELECT count(*) FROM work WHERE slot = '$slot'")
	  foreach ($pa, $pb);
	return $n;
}

# The claimant a claims $slot and does its work; b, on the other instance,
# claims the same slot with a timeout and is seen waiting for a's claim.
sub claimant_and_waiter
{
	my ($slot, $begin) = @_;
	my $sa = session($pa);
	my $sb = session($pb);
	$sa->query_ok($begin // 'BEGIN');
	is($sa->query_ok(claim_sql($slot, 'NULL')), 't', "$slot: a claims the slot");
	$sa->query_ok("INSERT INTO work VALUES ('$slot')");
	$sb->query_ok('BEGIN');
	$sb->send(claim_sql($slot, 60000));
	ZkLockTest::wait_for_extension_wait($pb, $sb);
	ok(!$sb->done, "$slot: b waits while a's claim is open");
	return ($sa, $sb);
}

# b got the slot: it does the work and commits
sub waiter_runs
{
	my ($sb, $slot, $what) = @_;
	my ($out, $err) = $sb->result(timeout => 60);
	is($out, 't', "$slot: b takes the slot once $what");
	is($err, '', "$slot: ... without an error");
	$sb->query_ok("INSERT INTO work VALUES ('$slot')");
	$sb->query_ok('COMMIT');
	is($pb->safe_psql('postgres',
		"SELECT claimed_by || ' ' || final FROM zk_job_claims('failover') "
		  . "WHERE slot = '$slot'"),
		'fo_b true', "$slot: the final claim is b's");
}

# ---------------------------------------------------------------------------
note 'the claimant commits: the waiter answers false (the slot is done)';

my $S = '2026-04-01 10:00+00';
my ($sa, $sb) = claimant_and_waiter($S);
$sa->query_ok('COMMIT');
my ($out, $err) = $sb->result(timeout => 60);
is($out, 'f', "$S: b answers false once a's claim is made final");
$sb->query_ok('ROLLBACK');
is(runs($S), 1, "$S: run once");
$_->quit foreach ($sa, $sb);

# ---------------------------------------------------------------------------
note 'the claimant\'s job fails: the waiter runs the slot';

$S = '2026-04-01 11:00+00';
($sa, $sb) = claimant_and_waiter($S);
($out, $err) = $sa->query('SELECT 1/0');
is(sqlstate($err), '22012', "$S: a's job raises an error");
$sa->query_ok('ROLLBACK');
waiter_runs($sb, $S, 'a\'s transaction failed');
is(runs($S), 1, "$S: run once, by b");
$_->quit foreach ($sa, $sb);

# ---------------------------------------------------------------------------
note 'the claimant\'s backend is terminated: the waiter runs the slot';

$S = '2026-04-01 12:00+00';
($sa, $sb) = claimant_and_waiter($S);
is($pa->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $sa->pid . ')'),
	't', "$S: a's backend is terminated");
waiter_runs($sb, $S, 'a\'s backend went');
is(runs($S), 1, "$S: run once, by b");
$_->quit foreach ($sa, $sb);

# ---------------------------------------------------------------------------
note 'the claimant\'s instance loses its session while the job runs';

$S = '2026-04-01 13:00+00';
($sa, $sb) = claimant_and_waiter($S);
my $st = zk_status_of($pa);
# stopped in its idle wait, not holding the shared-memory lock
ZkFault::stop_worker($pa, $st->{worker_pid});
# ZooKeeper expires a's session after its 4 s and deletes the open claim
waiter_runs($sb, $S, 'a\'s session expired');
signal_process($st->{worker_pid}, 'CONT');
($out, $err) = $sa->query('COMMIT');
is(sqlstate($err), '40001', "$S: a's COMMIT fails with 40001: its claim is gone");
is(runs($S), 1, "$S: run once, by b");
ok(poll_status($pa, sub { $_[0]{state} eq 'connected' }, timeout => 30),
	'a\'s worker has a new session');
$_->quit foreach ($sa, $sb);

# ---------------------------------------------------------------------------
note 'the claimant\'s COMMIT fails after its claim was made final';

# A SERIALIZABLE transaction fails at COMMIT (40001) after zklock made its
# claim final at PRE_COMMIT: the waiter sees a final node, which a's worker
# then reopens.  The waiter must not take the final node for a done slot.
$S = '2026-04-01 13:30+00';
$pa->safe_psql('postgres', 'CREATE TABLE skew (x int)');
($sa, $sb) = claimant_and_waiter($S, 'BEGIN ISOLATION LEVEL SERIALIZABLE');
my $other = session($pa);
$sa->query_ok('SELECT count(*) FROM skew');
$other->query_ok('BEGIN ISOLATION LEVEL SERIALIZABLE');
$other->query_ok('SELECT count(*) FROM skew');
$sa->query_ok('INSERT INTO skew VALUES (1)');
$other->query_ok('INSERT INTO skew VALUES (2)');
$other->query_ok('COMMIT');
($out, $err) = $sa->query('COMMIT');
is(sqlstate($err), '40001', "$S: a's COMMIT fails after its claim was made final");
waiter_runs($sb, $S, 'a\'s COMMIT failed');
is(runs($S), 1, "$S: run once, by b");
$_->quit foreach ($sa, $sb, $other);

# ---------------------------------------------------------------------------
note 'a timeout that passes while the other claim is open: false';

$S = '2026-04-01 14:00+00';
$sa = session($pa);
$sb = session($pb);
$sa->query_ok('BEGIN');
is($sa->query_ok(claim_sql($S, 'NULL')), 't', "$S: a claims the slot");
my $t0 = time;
is($sb->query_ok(claim_sql($S, 300)), 'f', "$S: b with 300 ms answers false");
cmp_ok(time - $t0, '>=', 0.3, "$S: ... after waiting its timeout");
($out, $err) = $sb->query("SELECT zk_job_claim('failover', '$S')");
is($out, 'f', "$S: the two-argument form answers false at once");
$sa->query_ok('ROLLBACK');
ok(poll_session($sb, claim_sql($S, 0), 't', timeout => 30),
	"$S: the slot a gave up is b's on a later try (timeout 0)");
$_->quit foreach ($sa, $sb);

done_testing();

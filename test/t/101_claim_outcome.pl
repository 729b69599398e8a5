# 101_claim_outcome.pl
#    A job slot's fate follows its claimant's transaction, not a timer.  A
#    waiting claim (zk_job_claim(job, slot, NULL)) that finds another
#    claim made final at that claim's PRE_COMMIT waits for that
#    transaction's outcome however long it takes, whatever the clocks and
#    the session timeouts say: committed, it answers false at once
#    (milliseconds, not a grace period); aborted, it takes the slot.  Each
#    case ends with exactly one committed run of the slot:
#
#    - a committed slot answers false in well under a second, for a call
#      made after the commit and for one already waiting;
#    - the claimant's transaction used a postgres_fdw foreign table before
#      its claim and the remote COMMIT runs a deferred constraint trigger
#      that blocks past 2 x the waiter's session timeout + 2 s (on a lock
#      the test holds), then fails;
#    - the waiter's wall clock 30 s ahead (libfaketime), the claimant a
#      SERIALIZABLE transaction failing at COMMIT; its reopening is held
#      up in the fault proxy so that the waiter sees the final node first;
#    - the reply of the claimant's finalize is lost and the claimant is cut
#      off from ZooKeeper past 2 x the waiter's session timeout + 2 s: its
#      COMMIT fails, the waiter must still get the slot.

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
use ZkFault qw(sqlstate poll_status);
use ZkFaultProxy;
use ZkClaimTest qw(claim_node slot_name runs faketime_restart);

my $JOB = 'outcome';
# every instance's zklock.session_timeout (ms); the old grace of a waiter
# was 2 x this + 2 s
my $S_MS = 4000;
my $GRACE = 2 * $S_MS / 1000 + 2;

# tickTime 500 ms: 4 s sessions are allowed and expire promptly
my $zk = ZkLockTest::zk_start(tick => 500);
my $proxy = ZkFaultProxy->start($zk);
my $pa = ZkLockTest::pg_node('oc_a', $proxy->hosts, cluster_name => 'oc_a');
my $pb = ZkLockTest::pg_node('oc_b', $zk, cluster_name => 'oc_b');
my $pc = ZkLockTest::pg_node('oc_c', $zk, cluster_name => 'oc_c');
my @all = ($pa, $pb, $pc);
# c's wall clock 30 s ahead of the others'
faketime_restart($pc, "$PostgreSQL::Test::Utils::tmp_check/faketime_offset", 30);
$_->safe_psql('postgres', 'CREATE TABLE runs (slot text NOT NULL)') foreach @all;
ok(poll_status($_, sub { $_[0]{state} eq 'connected' }, timeout => 60),
	$_->name . ' is connected')
  foreach @all;
cmp_ok(
	$pc->safe_psql('postgres', 'SELECT extract(epoch FROM clock_timestamp())') - time,
	'>', 25, 'c\'s wall clock is 30 s ahead');

sub session { return ZkLockTest::Session->new(@_); }

sub claim_sql
{
	my ($slot, $timeout) = @_;
	return "SELECT zk_job_claim('$JOB', '$slot', $timeout)";
}

sub runs_of { return runs('runs', $_[0], @all); }

# The waiter $w (BEGIN sent, claim pending) has its answer: runs the slot
# when it got it, gives up otherwise; returns the answer.
sub waiter_finishes
{
	my ($w, $slot) = @_;
	my ($out, $err) = $w->result(timeout => 90);
	$out //= '(no answer)';
	if ($out eq 't')
	{
		$w->query_ok("INSERT INTO runs VALUES ('$slot')");
		$w->query_ok('COMMIT');
	}
	else
	{
		$w->query('ROLLBACK');
	}
	return ($out, $err);
}

# ---------------------------------------------------------------------------
note 'a committed slot answers a waiter false in well under a second';

my $S = '2026-06-01 10:00+00';
my $sa = session($pa);
my $sb = session($pb);
$sa->query_ok('BEGIN');
is($sa->query_ok(claim_sql($S, 'NULL')), 't', "$S: a claims the slot");
$sa->query_ok("INSERT INTO runs VALUES ('$S')");
$sa->query_ok('COMMIT');
my $t0 = time;
my ($out, $err) = $sb->query(claim_sql($S, 'NULL'));
my $took = time - $t0;
is($out, 'f', "$S: b's waiting claim of the committed slot answers false");
note sprintf('%s: answered after %.3f s', $S, $took);
cmp_ok($took, '<', 1, "$S: ... in well under a second (not 2 x S = ${GRACE} s)");

$S = '2026-06-01 10:30+00';
$sa->query_ok('BEGIN');
is($sa->query_ok(claim_sql($S, 'NULL')), 't', "$S: a claims the slot");
$sa->query_ok("INSERT INTO runs VALUES ('$S')");
$sb->query_ok('BEGIN');
$sb->send(claim_sql($S, 'NULL'));
ZkLockTest::wait_for_extension_wait($pb, $sb);
$sa->query_ok('COMMIT');
$t0 = time;
($out, $err) = $sb->result(timeout => 60);
$took = time - $t0;
is($out, 'f', "$S: b, waiting while a's claim was open, answers false once a committed");
note sprintf('%s: answered %.3f s after a\'s COMMIT returned', $S, $took);
cmp_ok($took, '<', 1, "$S: ... in well under a second");
$sb->query_ok('ROLLBACK');
is(runs_of($S), 1, "$S: run once");
$_->quit foreach ($sa, $sb);

# ---------------------------------------------------------------------------
note 'postgres_fdw\'s remote COMMIT blocks past the old grace, then fails';

# The remote table (on b) has a deferred constraint trigger that takes an
# advisory lock the test holds, then raises: the remote COMMIT, which
# postgres_fdw sends from its pre-commit callback, blocks as long as the
# test wants, then fails, and the claimant's COMMIT with it.
$pb->safe_psql('postgres', q{
CREATE TABLE remote_step (k int);
CREATE FUNCTION remote_step_fails() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_advisory_lock(4242);
	RAISE EXCEPTION 'the remote step of the job fails late';
END $$;
CREATE CONSTRAINT TRIGGER remote_step_fails AFTER INSERT ON remote_step
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION remote_step_fails();
});
$pa->safe_psql('postgres',
	'CREATE EXTENSION postgres_fdw; '
	  . 'CREATE SERVER b FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '
	  . "'${\ $pb->host }', port '${\ $pb->port }', dbname 'postgres'); "
	  . 'CREATE USER MAPPING FOR CURRENT_USER SERVER b; '
	  . "CREATE FOREIGN TABLE remote_step (k int) SERVER b OPTIONS (table_name 'remote_step')");

$S = '2026-06-01 11:00+00';
my $gate = session($pb);
$gate->query_ok('SELECT pg_advisory_lock(4242)');
$sa = session($pa);
$sb = session($pb);
$sa->query_ok('BEGIN');
is($sa->query_ok('SELECT count(*) FROM remote_step'), '0',
	"$S: a's job uses the foreign table first ...");
is($sa->query_ok(claim_sql($S, 'NULL')), 't', "$S: ... then claims the slot");
$sa->query_ok("INSERT INTO runs VALUES ('$S')");
$sa->query_ok('INSERT INTO remote_step VALUES (1)');
$sb->query_ok('BEGIN');
$sb->send(claim_sql($S, 'NULL'));
ZkLockTest::wait_for_extension_wait($pb, $sb);
$sa->send('COMMIT');
ok( $pb->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'postgres_fdw' "
		  . "AND wait_event_type = 'Lock' AND wait_event = 'advisory'"),
	"$S: a's COMMIT waits in the remote COMMIT's deferred trigger");
$t0 = time;
# past the old grace (2 x S + 2 s after the finalize, which came before)
poll_until(sub { $sb->done }, timeout => $GRACE + 1.5);
ok(!$sb->done,
	sprintf('%s: b still waits %.1f s later: a\'s outcome is not known yet', $S, time - $t0));
$gate->query_ok('SELECT pg_advisory_unlock(4242)');
($out, $err) = $sa->result(timeout => 60);
like($err, qr/ERROR:.*the remote step of the job fails late/,
	"$S: a's COMMIT fails in the remote COMMIT");
($out, $err) = waiter_finishes($sb, $S);
is($out, 't', "$S: b takes the slot a's failed COMMIT left open");
is(runs_of($S), 1, "$S: exactly one committed run");
$_->quit foreach ($sa, $sb, $gate);

# ---------------------------------------------------------------------------
note 'the waiter\'s clock 30 s ahead; a SERIALIZABLE claimant fails at COMMIT';

$S = '2026-06-01 12:00+00';
$pa->safe_psql('postgres', 'CREATE TABLE skew (x int)');
$sa = session($pa);
my $sc = session($pc);
my $other = session($pa);
$sa->query_ok('BEGIN ISOLATION LEVEL SERIALIZABLE');
is($sa->query_ok(claim_sql($S, 'NULL')), 't', "$S: a claims the slot");
$sa->query_ok("INSERT INTO runs VALUES ('$S')");
$sc->query_ok('BEGIN');
$sc->send(claim_sql($S, 'NULL'));
ZkLockTest::wait_for_extension_wait($pc, $sc);
$sa->query_ok('SELECT count(*) FROM skew');
$other->query_ok('BEGIN ISOLATION LEVEL SERIALIZABLE');
$other->query_ok('SELECT count(*) FROM skew');
$sa->query_ok('INSERT INTO skew VALUES (1)');
$other->query_ok('INSERT INTO skew VALUES (2)');
$other->query_ok('COMMIT');
# a's worker must not settle the failed claim before c has looked at it:
# hold the replies to a's first read or sync of the claim after its
# finalize (the reopening looks before it deletes; a finalize is a multi
# and does not match)
$proxy->hold_at('sync,getData,exists', slot_name($S));
$sa->send('COMMIT');
poll_until(sub { $sc->done }, timeout => 5);
$proxy->release;
($out, $err) = $sa->result(timeout => 60);
is(sqlstate($err), '40001', "$S: a's COMMIT fails after its claim was made final");
($out, $err) = waiter_finishes($sc, $S);
is($out, 't', "$S: c (clock 30 s ahead) takes the slot");
is(runs_of($S), 1, "$S: exactly one committed run");
$_->quit foreach ($sa, $sc, $other);

# ---------------------------------------------------------------------------
note 'a lost finalize reply, the claimant cut off past the old grace';

$S = '2026-06-01 13:00+00';
$sa = session($pa);
$sb = session($pb);
$sa->query_ok('BEGIN');
is($sa->query_ok(claim_sql($S, 'NULL')), 't', "$S: a claims the slot");
$sa->query_ok("INSERT INTO runs VALUES ('$S')");
$sb->query_ok('BEGIN');
$sb->send(claim_sql($S, 'NULL'));
ZkLockTest::wait_for_extension_wait($pb, $sb);
my $losses = ZkFault::zk_status_of($pa)->{session_losses};
$proxy->refuse(600);
$proxy->withhold('multi', slot_name($S));
$sa->send('COMMIT');
ok($proxy->wait_fired, "$S: the finalize was answered, its reply lost, a cut off");
is($proxy->status->{last_err}, 0, "$S: ... and the server applied it (ZooKeeper error 0)");
my $n = claim_node($zk, $JOB, $S);
ok($n->{exists} && !$n->{ephemeral}, "$S: the claim node is persistent (made final)");
$t0 = time;
poll_until(sub { $sb->done }, timeout => $GRACE + 1.5);
ok(!$sb->done,
	sprintf('%s: b still waits %.1f s later, a cut off all along', $S, time - $t0));
$proxy->accept;
($out, $err) = $sa->result(timeout => 60);
is(sqlstate($err), '40001', "$S: a's COMMIT fails with 40001");
ok(poll_status($pa, sub { $_[0]{state} eq 'connected' && $_[0]{session_losses} > $losses },
		timeout => 60),
	"$S: a is connected again, in a new session");
($out, $err) = waiter_finishes($sb, $S);
is($out, 't', "$S: b takes the slot a's aborted transaction left");
is(runs_of($S), 1, "$S: exactly one committed run");
$_->quit foreach ($sa, $sb);

$proxy->stop;
done_testing();

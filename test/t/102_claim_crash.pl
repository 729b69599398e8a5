# 102_claim_crash.pl
#    A job claim made final at PRE_COMMIT is settled from its
#    transaction's durable outcome when the claimant's instance crashes
#    before it could say: the slot is run exactly once.
#
#    - The claimant's postmaster and every process of it killed (SIGKILL)
#      between the finalize and the commit record (the finalize's reply
#      held in the fault proxy after the server applied it, so the backend
#      is still in PRE_COMMIT): after the restart the claim is reopened and
#      the waiting instance runs the slot.
#    - Killed right after the commit record (synchronous_standby_names
#      names a standby that does not exist: COMMIT waits after the local
#      commit record, before zklock's COMMIT callback): after the restart
#      the claim is committed and the waiter answers false.
#    - A primary killed between finalize and end of commit and replaced by
#      its promoted streaming standby (same system identifier): a claim
#      whose commit record was replicated is marked committed, one whose
#      commit record was not is reopened, also when the new primary has
#      meanwhile handed out and committed the very transaction id the old
#      one gave that transaction (the new primary's worker kept away from
#      ZooKeeper until then).
#    - (1.5) A claimant's instance that never comes back: zk_job_claims
#      shows the unsettled claim and whose it is, and a superuser settles
#      it by hand with zk_job_claim_settle.

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
use ZkFault qw(sqlstate poll_status signal_process);
use ZkFaultProxy;
use ZkClaimTest qw(claim_node slot_name runs crash_instance become_subreaper
  has_15 claim_state_becomes);

ok(become_subreaper(), 'the test reaps the processes of crashed instances');

my $zk = ZkLockTest::zk_start(tick => 500);
my $proxy = ZkFaultProxy->start($zk, name => 'pa');
my $pa = ZkLockTest::pg_node('cr_a', $proxy->hosts, cluster_name => 'cr_a',
	wal_level => 'replica', max_wal_senders => 2);
my $pb = ZkLockTest::pg_node('cr_b', $zk, cluster_name => 'cr_b');
$_->safe_psql('postgres', 'CREATE TABLE runs (slot text NOT NULL)') foreach ($pa, $pb);

sub session { return ZkLockTest::Session->new(@_); }

sub claim_sql
{
	my ($job, $slot, $timeout) = @_;
	return "SELECT zk_job_claim('$job', '$slot', $timeout)";
}

# The waiter $w (BEGIN sent, claim pending) has its answer: runs the slot
# when it got it; returns the answer.
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

# a claims $slot of job 'crash' and writes its run; b waits for the slot
sub claimant_and_waiter
{
	my ($slot) = @_;
	my $sa = session($pa);
	my $sb = session($pb);
	$sa->query_ok('BEGIN');
	is($sa->query_ok(claim_sql('crash', $slot, 'NULL')), 't', "$slot: a claims the slot");
	$sa->query_ok("INSERT INTO runs VALUES ('$slot')");
	$sb->query_ok('BEGIN');
	$sb->send(claim_sql('crash', $slot, 'NULL'));
	ZkLockTest::wait_for_extension_wait($pb, $sb);
	return ($sa, $sb);
}

# ---------------------------------------------------------------------------
note 'the claimant\'s instance killed between finalize and commit record';

my $S = '2026-07-01 10:00+00';
my ($sa, $sb) = claimant_and_waiter($S);
$proxy->hold_at('multi', slot_name($S));
$sa->send('COMMIT');
ok(poll_until(sub { $proxy->status->{held} }, timeout => 30),
	"$S: the finalize was applied, its reply held");
my $n = claim_node($zk, 'crash', $S);
ok($n->{exists} && !$n->{ephemeral}, "$S: the claim node is persistent");
ZkLockTest::wait_for_extension_wait($pa, $sa);
ok(!$sa->done, "$S: a's COMMIT waits in PRE_COMMIT");
crash_instance($pa);
$proxy->disarm;
$proxy->release;
$pa->start;
($sa->result(timeout => 30));
is(runs('runs', $S, $pa), 0, "$S: a's run was not committed (no commit record)");
my ($out, $err) = waiter_finishes($sb, $S);
is($out, 't', "$S: after a's restart the slot is reopened and b takes it");
is(runs('runs', $S, $pa, $pb), 1, "$S: exactly one committed run");
$_->quit foreach ($sa, $sb);

# ---------------------------------------------------------------------------
note 'the claimant\'s instance killed right after the commit record';

$S = '2026-07-01 11:00+00';
($sa, $sb) = claimant_and_waiter($S);
$pa->append_conf('postgresql.conf', "synchronous_standby_names = 'nobody_here'\n");
$pa->reload;
ok( $pa->poll_query_until('postgres',
		"SELECT current_setting('synchronous_standby_names') = 'nobody_here'"),
	"$S: a's COMMITs wait for a synchronous standby that does not exist");
$sa->send('COMMIT');
ok( $pa->poll_query_until('postgres',
		'SELECT wait_event = \'SyncRep\' FROM pg_stat_activity WHERE pid = ' . $sa->pid),
	"$S: a's COMMIT wrote its commit record and waits for the standby");
crash_instance($pa);
$pa->append_conf('postgresql.conf', "synchronous_standby_names = ''\n");
$pa->start;
($sa->result(timeout => 30));
is(runs('runs', $S, $pa), 1, "$S: a's run is committed (its commit record)");
($out, $err) = waiter_finishes($sb, $S);
is($out, 'f', "$S: after a's restart b answers false: the slot is done");
is(runs('runs', $S, $pa, $pb), 1, "$S: exactly one committed run");
ok(claim_state_becomes($zk, 'crash', $S, 'committed', timeout => 20),
	"$S: the claim node says committed");
$_->quit foreach ($sa, $sb);

# ---------------------------------------------------------------------------
note 'a primary replaced by its promoted standby settles the old claims';

my $p1 = PostgreSQL::Test::Cluster->new('cr_p1');
$p1->init(allows_streaming => 1);
ZkLockTest::use_private_install($p1);
$p1->append_conf('postgresql.conf',
	"shared_preload_libraries = 'zklock'\nzklock.hosts = '"
	  . $zk->connect
	  . "'\nzklock.session_timeout = 4000\ncluster_name = 'cr_p1'\nmax_connections = 20\n");
$p1->start;
$p1->safe_psql('postgres', 'CREATE EXTENSION zklock; CREATE TABLE runs (slot text NOT NULL)');
$p1->backup('bk');
my $proxy2 = ZkFaultProxy->start($zk, name => 's1');
my $s1 = PostgreSQL::Test::Cluster->new('cr_s1');
$s1->init_from_backup($p1, 'bk', has_streaming => 1);
$s1->append_conf('postgresql.conf',
	"cluster_name = 'cr_s1'\nzklock.hosts = '" . $proxy2->hosts . "'\n");
$s1->start;
$p1->wait_for_catchup($s1);
is($s1->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 's1 is a streaming standby');
is($s1->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	$p1->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	'of the same system identifier');
ok(poll_status($s1, sub { $_[0]{state} eq 'connected' }, timeout => 60),
	's1\'s worker is connected (through its proxy)');

# Commits on p1 wait for a synchronous standby that does not exist (s1 is
# an asynchronous one): each claimant's COMMIT stops after its commit
# record, before zklock's COMMIT callback could ask for the claim to be
# marked committed.
$p1->append_conf('postgresql.conf', "synchronous_standby_names = 'nobody_here'\n");
$p1->reload;
ok( $p1->poll_query_until('postgres',
		"SELECT current_setting('synchronous_standby_names') = 'nobody_here'"),
	'p1\'s commits wait for a synchronous standby that does not exist');

my $SA = '2026-07-01 12:00+00';    # its commit record replicated
my $SB = '2026-07-01 13:00+00';    # its commit record never replicated
my $qa = session($p1);
$qa->query_ok('BEGIN');
is($qa->query_ok(claim_sql('promote', $SA, 'NULL')), 't', "$SA: p1 claims the slot");
$qa->query_ok("INSERT INTO runs VALUES ('$SA')");
$qa->send('COMMIT');
ok( $p1->poll_query_until('postgres',
		'SELECT wait_event = \'SyncRep\' FROM pg_stat_activity WHERE pid = ' . $qa->pid),
	"$SA: its COMMIT wrote its commit record");
ok( $s1->poll_query_until('postgres', "SELECT count(*) = 1 FROM runs WHERE slot = '$SA'"),
	"$SA: s1 has replayed it");

# nothing more reaches s1 from p1
my $walsender = $p1->safe_psql('postgres', 'SELECT pid FROM pg_stat_replication');
like($walsender, qr/^\d+$/, 'p1 has one walsender');
signal_process($walsender, 'STOP');
my $qb = session($p1);
$qb->query_ok('BEGIN');
my $xid_b = $qb->query_ok('SELECT txid_current()');
is($qb->query_ok(claim_sql('promote', $SB, 'NULL')), 't', "$SB: p1 claims the slot");
$qb->query_ok("INSERT INTO runs VALUES ('$SB')");
$qb->send('COMMIT');
ok( $p1->poll_query_until('postgres',
		'SELECT wait_event = \'SyncRep\' FROM pg_stat_activity WHERE pid = ' . $qb->pid),
	"$SB: its COMMIT wrote its commit record (transaction $xid_b), not sent to s1");
$n = claim_node($zk, 'promote', $SB);
ok($n->{exists} && !$n->{ephemeral}, "$SB: the claim node is persistent");
is($n->{xid} // '(none)', $xid_b, "$SB: the claim node names the transaction");

# s1's worker away from ZooKeeper, then p1 gone for good and s1 promoted
$proxy2->refuse(3600);
$proxy2->cut;
ok(poll_status($s1, sub { $_[0]{state} ne 'connected' }, timeout => 60),
	's1\'s worker is cut off from ZooKeeper');
crash_instance($p1);
$s1->promote;
is($s1->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 'f', 's1 is the primary now');
is($s1->safe_psql('postgres', "SELECT count(*) FROM runs WHERE slot IN ('$SA', '$SB')"),
	'1', 's1 has the run of the replicated commit only');
# the new primary hands out the old primary's unreplicated transaction ids
# again: commit past the one of the claim of $SB
$s1->safe_psql('postgres', qq{
DO \$\$
DECLARE x bigint;
BEGIN
	LOOP
		x := txid_current();
		COMMIT;
		EXIT WHEN x > $xid_b;
	END LOOP;
END \$\$});
is($s1->safe_psql('postgres', "SELECT pg_xact_status('$xid_b'::xid8)"), 'committed',
	"s1 has committed a transaction of its own with id $xid_b");
$proxy2->accept;
ok(poll_status($s1, sub { $_[0]{state} eq 'connected' }, timeout => 60),
	's1\'s worker is connected again');
ok(claim_state_becomes($zk, 'promote', $SB, 'gone', timeout => 20),
	"$SB: s1 reopens the claim whose commit it never had");
ok(claim_state_becomes($zk, 'promote', $SA, 'committed', timeout => 20),
	"$SA: s1 marks the claim whose commit it replayed committed");
my $w = session($pb);
foreach my $slot ($SA, $SB)
{
	$w->query_ok('BEGIN');
	$w->send(claim_sql('promote', $slot, 30000));
	waiter_finishes($w, $slot);
	is(runs('runs', $slot, $s1, $pb), 1, "$slot: exactly one committed run");
}
is(runs('runs', $SB, $pb), 1, "$SB: run by b");
$w->quit;
$_->quit foreach ($qa, $qb);

# ---------------------------------------------------------------------------
note '(1.5) a claimant that never comes back: settled by hand';

SKIP:
{
	skip 'zk_job_claims\' outcome columns and zk_job_claim_settle are 1.5', 9
	  unless has_15($pb);

	$S = '2026-07-01 14:00+00';
	my $sysid = $pa->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
	($sa, $sb) = claimant_and_waiter($S);
	my $xid = $sa->query_ok('SELECT txid_current()');
	$proxy->hold_at('multi', slot_name($S));
	$sa->send('COMMIT');
	ok(poll_until(sub { $proxy->status->{held} }, timeout => 30),
		"$S: the finalize was applied, its reply held");
	crash_instance($pa);    # and never started again
	$proxy->disarm;
	$proxy->release;
	is( $pb->safe_psql('postgres',
			"SELECT state || ' ' || xid || ' ' || system_identifier "
			  . "FROM zk_job_claims('crash') WHERE slot = '$S'"),
		"committing $xid $sysid",
		"$S: zk_job_claims shows the unsettled claim and whose it is");
	ok(!$sb->done, "$S: b still waits");
	$pb->safe_psql('postgres', 'CREATE ROLE settler LOGIN');
	my ($o, $e);
	$pb->psql('postgres', "SELECT zk_job_claim_settle('crash', '$S', false)",
		stdout => \$o, stderr => \$e, extra_params => [ '-U', 'settler' ]);
	like($e, qr/permission denied|must be superuser/, "$S: settling is for superusers");
	is($pb->safe_psql('postgres', "SELECT zk_job_claim_settle('crash', '$S', false)"),
		't', "$S: a superuser reopens it");
	($out, $err) = waiter_finishes($sb, $S);
	is($out, 't', "$S: b takes the slot");
	is(runs('runs', $S, $pb), 1, "$S: run once, by b");
	is($pb->safe_psql('postgres', "SELECT zk_job_claim_settle('crash', '$S', true)"),
		'f', "$S: a settled claim is not settled again");
	is( $pb->safe_psql('postgres',
			"SELECT state FROM zk_job_claims('crash') WHERE slot = '$S'"),
		'committed', "$S: b's claim is committed");
	$_->quit foreach ($sa, $sb);
}

$proxy->stop;
$proxy2->stop;
done_testing();

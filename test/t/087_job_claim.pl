# 087_job_claim.pl
#    Once-per-slot job claims (zk_job_claim) across two instances sharing
#    one ZooKeeper: one caller per (job, slot) gets true, the others false
#    at once; an aborted or killed claimer leaves the slot open; a commit
#    that cannot make the claim final fails with 40001 and leaves the slot
#    open; a commit that fails after the claims were made final (a
#    serialization failure at commit) reopens them; postgres_fdw's remote
#    commit runs before zklock makes a claim final, so when it fails (also
#    with ZooKeeper unreachable, or the backend terminated while it waits)
#    the claim was never final and the slot is open again; a final claim is
#    persistent; zklock.claim_retention removes old committed claims, never
#    before the retention of the instance that made them.

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
use ZkFault qw(sqlstate poll_status poll_session zk_restart_node);

# tickTime 500 ms: the instances' 4 s sessions are allowed and expire promptly
my $zk = ZkLockTest::zk_start(tick => 500);
my $pa = ZkLockTest::pg_node('claim_a', $zk, cluster_name => 'claim_a');
my $pb = ZkLockTest::pg_node('claim_b', $zk, cluster_name => 'claim_b');
$_->safe_psql('postgres', 'CREATE TABLE work (slot text NOT NULL)') foreach ($pa, $pb);

sub session { return ZkLockTest::Session->new(@_); }

sub claim_sql { return "SELECT zk_job_claim('$_[0]', '$_[1]')"; }

my $claims_of = sub {
	my ($job) = @_;
	return [ ZkLockTest::zk_children($zk, "/zklock/$job/claims") ];
};

# ---------------------------------------------------------------------------
note 'one caller per slot; the others get false at once';

my $sa = session($pa);
my $sb = session($pb);
my $S1 = '2026-03-01 10:00+00';
$sa->query_ok('BEGIN');
is($sa->query_ok(claim_sql('report', $S1)), 't', 'a claims the slot');
my $t0 = time;
is($sb->query_ok(claim_sql('report', $S1)), 'f', 'b does not get it');
cmp_ok(time - $t0, '<', 3, '... at once, without waiting for a');
is_deeply($claims_of->('report'), ['2026-03-01T10:00:00Z'],
	'the claim node is <root>/<job>/claims/<slot in UTC>');
is($sb->query_ok("SELECT final FROM zk_job_claims('report')"), 'f',
	'b sees the claim, not final yet');

# ---------------------------------------------------------------------------
note 'the claimer\'s transaction aborts: the other instance gets the slot';

$sa->query_ok("INSERT INTO work VALUES ('S1')");
$sa->query_ok('ROLLBACK');
ok(poll_session($sb, claim_sql('report', $S1), 't', timeout => 30),
	'b claims the slot a rolled back (and commits it)');
is($pb->safe_psql('postgres',
	"SELECT claimed_by || ' ' || final FROM zk_job_claims('report')"),
	'claim_b true', 'the final claim names instance b');
$sb->quit;
$sb = session($pb);
is($sa->query_ok(claim_sql('report', $S1)), 'f',
	'a final claim cannot be taken again ...');
is($sb->query_ok(claim_sql('report', $S1)), 'f',
	'... not even by its claimer\'s instance, after its session ended');
my $eph = ZkLockTest::zk_python($zk,
	q{print(zk.exists(args[0]).ephemeralOwner)}, '/zklock/report/claims/2026-03-01T10:00:00Z');
chomp $eph;
is($eph, '0', 'the final claim is a persistent znode');

# ---------------------------------------------------------------------------
note 'the claimer\'s backend is killed before it commits';

my $S2 = '2026-03-01 11:00+00';
my $victim = session($pa);
$victim->query_ok('BEGIN');
is($victim->query_ok(claim_sql('report', $S2)), 't', 'a claims another slot');
is($sb->query_ok(claim_sql('report', $S2)), 'f', 'b does not get it');
is($pa->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $victim->pid . ')'),
	't', 'the claiming backend is terminated');
ok(poll_session($sb, claim_sql('report', $S2), 't', timeout => 30),
	'b then claims the slot');
$victim->quit;

# ---------------------------------------------------------------------------
note 'COMMIT while ZooKeeper is unreachable fails with 40001; the slot stays open';

my $S3 = '2026-03-01 12:00+00';
$sa->query_ok('BEGIN');
is($sa->query_ok(claim_sql('report', $S3)), 't', 'a claims a third slot');
$sa->query_ok("INSERT INTO work VALUES ('S3')");
$zk->stop_node(1);
my ($out, $err) = $sa->query('COMMIT');
is(sqlstate($err), '40001', 'COMMIT fails with 40001 (serialization failure)');
like($err, qr/job claim|finalize/, 'and says it is about the job claim');
is($sa->query_ok('SELECT count(*) FROM work'), '0', 'the work was rolled back');
zk_restart_node($zk, 1);
ok(poll_session($sb, claim_sql('report', $S3), 't', timeout => 60),
	'after ZooKeeper is back the slot is open: b claims it');
# a's first claim once its worker is back must say taken: a true here,
# even if a later call said false, would be a second claim of the slot
ok(poll_status($pa, sub { $_[0]{state} eq 'connected' }, timeout => 30),
	'a\'s worker is connected again');
($out, $err) = $sa->query(claim_sql('report', $S3));
is($out, 'f', 'a sees the slot taken: its first claim after the outage returns false');
is($err, '', 'without an error');

# ---------------------------------------------------------------------------
note 'ZooKeeper paused during COMMIT: the multi-op\'s answer is lost';

# The worker sends the multi-op to a frozen server and gives up on the
# connection; the server may still apply it when it resumes.  The commit
# fails either way, and the worker deletes the node (it carries the
# claim's nonce) once it can: the slot opens again.
my $S5 = '2026-03-01 13:00+00';
$sa->query_ok('BEGIN');
is($sa->query_ok(claim_sql('report', $S5)), 't', 'a claims a fourth slot');
$sa->query_ok("INSERT INTO work VALUES ('S5')");
$zk->pause_node(1);
($out, $err) = $sa->query('COMMIT');
$zk->resume_node(1);
is(sqlstate($err), '40001', 'COMMIT fails with 40001');
is($sa->query_ok('SELECT count(*) FROM work'), '0', 'the work was rolled back');
ok(poll_session($sb, claim_sql('report', $S5), 't', timeout => 60),
	'the slot opens again: b claims it');
note 'a\'s worker ' . ($pa->log_contains('zklock reopened job claim')
	? 'deleted the final node the multi-op had made' : 'found nothing to reopen');

# ---------------------------------------------------------------------------
note 'COMMIT fails after the claims were made final: they are reopened';

# Two SERIALIZABLE transactions on instance a, each reading the row the
# other writes.  The one that commits first marks the other (the claimer)
# as the pivot of a dangerous structure; the claimer's COMMIT then fails in
# PostgreSQL's serialization check, which runs after zklock's PRE_COMMIT
# callback has made its claims final.
$pa->safe_psql('postgres',
	'CREATE TABLE ssi (k int PRIMARY KEY, v int NOT NULL); '
	  . 'INSERT INTO ssi VALUES (1, 0), (2, 0)');
my $S6 = '2026-03-01 14:00+00';
my $S7 = '2026-03-01 15:00+00';
my $pivot = session($pa);
my $other = session($pa);
$_->query_ok('BEGIN ISOLATION LEVEL SERIALIZABLE') foreach ($pivot, $other);
$pivot->query_ok('SELECT v FROM ssi WHERE k = 1');
$other->query_ok('SELECT v FROM ssi WHERE k = 2');
$pivot->query_ok('UPDATE ssi SET v = v + 1 WHERE k = 2');
$other->query_ok('UPDATE ssi SET v = v + 1 WHERE k = 1');
is($pivot->query_ok(claim_sql('report', $S6)), 't', 'a claims a slot ...');
is($pivot->query_ok(claim_sql('report', $S7)), 't', '... and another one');
$pivot->query_ok("INSERT INTO work VALUES ('S6'), ('S7')");
is(($other->query('COMMIT'))[1], '', 'the other transaction commits');
($out, $err) = $pivot->query('COMMIT');
is(sqlstate($err), '40001', 'the claimer\'s COMMIT fails with 40001 ...');
like($err, qr/pivot, during commit attempt/,
	'... in PostgreSQL\'s serialization check at commit');
is($pivot->query_ok(q{SELECT count(*) FROM work WHERE slot IN ('S6', 'S7')}),
	'0', 'the work was rolled back');
foreach my $slot ('2026-03-01T14:00:00Z', '2026-03-01T15:00:00Z')
{
	ok( poll_until(
			sub { $pa->log_contains(qr/zklock reopened job claim "[^"]*\Q$slot\E"/) },
			timeout => 30),
		"a's worker deleted the final claim of $slot");
}
is($sb->query_ok(claim_sql('report', $S6)), 't', 'b then claims the first slot');
is($sb->query_ok(claim_sql('report', $S7)), 't', 'and the second');
$_->quit foreach ($pivot, $other);

# ---------------------------------------------------------------------------
note 'another extension fails the COMMIT, with ZooKeeper unreachable';

# postgres_fdw commits its remote transaction (on instance b) in its own
# PRE_COMMIT callback, registered when the session first uses a foreign
# table; zklock registers its callbacks when the library is preloaded, and
# PostgreSQL calls the newest first, so the remote COMMIT comes before the
# claim is made final, even when the session used the foreign table before
# it claimed.  The remote COMMIT waits on a deferred unique check for a row
# another transaction of b inserted; ZooKeeper is paused meanwhile; that
# transaction commits, the remote COMMIT fails, and with it the claimer's.
# The claim was never made final: its node goes with the rollback, or
# with the session the worker loses while ZooKeeper is unreachable.
$pb->safe_psql('postgres',
	'CREATE TABLE dq (k int, CONSTRAINT dq_k UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)');
$pa->safe_psql('postgres',
	'CREATE EXTENSION postgres_fdw; '
	  . 'CREATE SERVER b FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '
	  . "'${\ $pb->host }', port '${\ $pb->port }', dbname 'postgres'); "
	  . 'CREATE USER MAPPING FOR CURRENT_USER SERVER b; '
	  . "CREATE FOREIGN TABLE dq (k int) SERVER b OPTIONS (table_name 'dq')");
# The claimer's COMMIT (sent) waits for postgres_fdw's remote COMMIT on b,
# before zklock makes the claim of slot final.
sub remote_commit_waits
{
	my ($slot) = @_;
	ok( poll_until(
			sub {
				$pb->safe_psql('postgres',
					"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'postgres_fdw' "
					  . "AND wait_event_type = 'Lock'") eq '1';
			},
			timeout => 30),
		'its COMMIT waits for the remote COMMIT ...');
	is($sb->query_ok(
			"SELECT state FROM zk_job_claims('report') WHERE slot = '$slot'"),
		'pending', '... before the claim is made final');
	return;
}

my $S8 = '2026-03-01 16:00+00';
my $holder = session($pb);
my $claimer = session($pa);
$holder->query_ok('BEGIN');
$holder->query_ok('INSERT INTO dq VALUES (8)');
$claimer->query_ok('BEGIN');
is($claimer->query_ok('SELECT count(*) FROM dq'), '0',
	'the claimer uses the foreign table first ...');
is($claimer->query_ok(claim_sql('report', $S8)), 't', '... then claims a slot');
$claimer->query_ok("INSERT INTO work VALUES ('S8')");
$claimer->query_ok('INSERT INTO dq VALUES (8)');
$claimer->send('COMMIT');
remote_commit_waits($S8);
my $losses = ZkFault::zk_status_of($pa)->{session_losses};
$zk->pause_node(1);
is(($holder->query('COMMIT'))[1], '', 'the transaction of b commits its row');
($out, $err) = $claimer->result;
is(sqlstate($err), '23505',
	'the remote COMMIT fails on the duplicate, and the claimer\'s COMMIT with it');
is($claimer->query_ok(q{SELECT count(*) FROM work WHERE slot = 'S8'}),
	'0', 'the work was rolled back');
ok(poll_status($pa, sub { $_[0]{session_losses} > $losses }, timeout => 60),
	'a\'s worker loses its session while ZooKeeper is unreachable');
$zk->resume_node(1);
ok(poll_session($sb, claim_sql('report', $S8), 't', timeout => 60),
	'once ZooKeeper is back, b claims the slot');
ok(!$pa->log_contains(qr/zklock reopened job claim "[^"]*2026-03-01T16:00:00Z"/),
	'a never made the claim final');
$_->quit foreach ($holder, $claimer);

note 'the claimer\'s backend terminated while its COMMIT waits';

# b's holder inserts row k of dq; the claimer (on a) uses the foreign
# table, claims the slot and inserts k too, so its COMMIT waits in
# postgres_fdw's pre-commit, before zklock makes the claim final.  Returns
# the two sessions, the claimer's COMMIT sent.
sub commit_waits_remotely
{
	my ($slot, $k) = @_;
	my $holder = session($pb);
	my $claimer = session($pa);
	$holder->query_ok('BEGIN');
	$holder->query_ok("INSERT INTO dq VALUES ($k)");
	$claimer->query_ok('BEGIN');
	$claimer->query_ok('SELECT count(*) FROM dq');
	is($claimer->query_ok(claim_sql('report', $slot)), 't', 'a claims a slot');
	$claimer->query_ok("INSERT INTO dq VALUES ($k)");
	$claimer->send('COMMIT');
	remote_commit_waits($slot);
	return ($holder, $claimer);
}

my $S9 = '2026-03-01 17:00+00';
($holder, $claimer) = commit_waits_remotely($S9, 9);
is($pa->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $claimer->pid . ')'),
	't', 'the claimer\'s backend is terminated');
ok(poll_session($sb, claim_sql('report', $S9), 't', timeout => 30),
	'b then claims the slot: the claim was given up with the backend');
$holder->query_ok('ROLLBACK');
$_->quit foreach ($holder, $claimer);

note 'a failed COMMIT returns once its claim is deleted';

# As above, but ZooKeeper is only paused for a moment while the claimer's
# COMMIT fails: the ROLLBACK of its claim waits for the node's delete (the
# session is still vouched for), and a claim of the slot made right after
# the COMMIT returned gets it.  Were the delete left to after the return,
# that claim's create would reach ZooKeeper first and find the slot taken.
my $S10 = '2026-03-01 18:00+00';
($holder, $claimer) = commit_waits_remotely($S10, 10);
$zk->pause_node(1);
is(($holder->query('COMMIT'))[1], '', 'the transaction of b commits its row');
# the claimer's COMMIT fails; its rollback cannot delete the claim while
# ZooKeeper is paused, and does not return before it has
poll_until(
	sub {
		$claimer->done
		  || $pa->safe_psql('postgres',
			'SELECT wait_event_type FROM pg_stat_activity WHERE pid = '
			  . $claimer->pid) eq 'Extension';
	},
	timeout => 30,
	interval => 0.02);
ok(!$claimer->done,
	'the failed COMMIT waits while its claim cannot be deleted');
$zk->resume_node(1);
($out, $err) = $claimer->result;
is(sqlstate($err), '23505', 'the claimer\'s COMMIT failed');
is($claimer->query_ok(claim_sql('report', $S10)), 't',
	'a claim of the slot right after that COMMIT returned gets it');
$_->quit foreach ($holder, $claimer);

# ---------------------------------------------------------------------------
note 'zklock.claim_retention removes old committed claims';

# A claim is kept for the larger of the sweeping instance's retention and
# that of the instance that made it (in its data): a, restarted with a
# retention of 2 s, removes its own old claims but not b's (7 days).
my $old = '2020-01-01 00:00+00';
my $old_b = '2020-01-02 00:00+00';
my $future = $pa->safe_psql('postgres',
	"SELECT date_trunc('hour', now() + interval '1 day')");
$_->quit foreach ($sa, $sb);
$pa->safe_psql('postgres', "ALTER SYSTEM SET zklock.claim_retention = '2s'");
$pa->restart;
ok(poll_status($pa, sub { $_[0]{state} eq 'connected' }, timeout => 30),
	'a is connected again, with a retention of 2 s');
$sa = session($pa);
$sb = session($pb);
is($sb->query_ok(claim_sql('old-job', $old_b)), 't',
	'b (retention 7 days) claims a slot long past');
is($sb->query_ok(claim_sql('b-only', $old)), 't',
	'b claims a slot long past of a job a never claimed');
is($sa->query_ok(claim_sql('old-job', $future)), 't', 'a claims a slot tomorrow');
is($sa->query_ok(claim_sql('old-job', $old)), 't', 'and a slot long past');
ok( poll_until(sub { !grep { $_ eq '2020-01-01T00:00:00Z' } @{ $claims_of->('old-job') } },
		timeout => 30),
	'a\'s old committed claim is removed (slot and creation older than 2 s)');
is( $pa->safe_psql('postgres',
		"SELECT string_agg(slot::text, ',' ORDER BY slot) = '$old_b'::timestamptz::text || ',' || '$future'::timestamptz::text FROM zk_job_claims('old-job')"),
	't', 'the claim of a slot to come is kept, and b\'s old one (its retention is longer)');
is_deeply($claims_of->('b-only'), ['2020-01-01T00:00:00Z'],
	'a job never claimed from the sweeping instance is not swept by it');

$_->quit foreach ($sa, $sb);
$_->stop foreach ($pa, $pb);
done_testing();

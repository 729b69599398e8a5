# 105_claim_running_xact.pl
#    A worker that starts again (a new ZooKeeper session) while a
#    claimant's transaction is between PRE_COMMIT (its claim made final,
#    "committing") and its commit record finds the claim in the index of
#    unsettled claims and leaves it alone while the transaction runs, for
#    transaction ids in both halves of the 32-bit xid space: the worker
#    never takes a snapshot (its RecentXmin stays 3), so a running-check
#    that trusts RecentXmin (TransactionIdIsActive) takes every xid in
#    [2^31 + 3, 2^32) for finished, reads "in progress" from the commit
#    log as not committed and reopens the claim of a transaction that then
#    commits: two committed runs.
#
#    The claimant is held between the two points without a fault proxy:
#    commits wait for a synchronous standby that does not exist; a session
#    X that writes a row and NOTIFYs commits first and waits in SyncRep
#    holding the notify queue's lock (taken in PreCommit_Notify, held
#    until its transaction ends); the claimant Y NOTIFYs too, so its
#    COMMIT, past zklock's PRE_COMMIT, waits for that lock before it
#    writes its commit record.
#
#    - a_low: the instance's xids as initdb leaves them (low half);
#    - a_high: next xid moved to 2^31 + 2^20 with pg_resetwal, in two
#      steps with every database frozen in between (pg_resetwal of
#      PostgreSQL 15 leaves oldestXid, so one jump would stop the instance
#      for wraparound, and unfrozen rows of initdb would be in the future).
#    b waits for the slot; once the claimant commits the claim is marked
#    committed and b answers false: one committed run.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(zk_status_of poll_status signal_process);
use ZkClaimTest qw(claim_node slot_name runs claim_state_becomes);

my $JOB = 'rx';
my $zk = ZkLockTest::zk_start(tick => 500);
my $pb = ZkLockTest::pg_node('rx_b', $zk, cluster_name => 'rx_b');
$pb->safe_psql('postgres', 'CREATE TABLE runs (slot text NOT NULL)');

sub session { return ZkLockTest::Session->new(@_); }

sub claim_sql
{
	my ($slot) = @_;
	return "SELECT zk_job_claim('$JOB', '$slot', NULL)";
}

# The next xid of $node (stopped) set to $xid, a multiple of 2^20 (a
# pg_xact segment of its own, made at the first xid).
sub reset_xid
{
	my ($node, $xid) = @_;
	PostgreSQL::Test::Utils::system_or_bail($node->installed_command('pg_resetwal'),
		'-x', $xid, '-D', $node->data_dir);
	return;
}

# A claimant instance.  Its COMMITs wait for a synchronous standby that
# does not exist from the start (what it runs itself commits with
# synchronous_commit = local); autovacuum, whose commits would wait too,
# is off.  $high: its xids in the upper half.
sub claimant_node
{
	my ($name, $high) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => 1);
	$node->append_conf('postgresql.conf',
		"autovacuum = off\nautovacuum_freeze_max_age = 2000000000\n");
	if ($high)
	{
		# first to 2^30: within 2^31 of initdb's rows and oldestXid
		reset_xid($node, 1024 * 1048576);
		$node->start;
		$node->safe_psql('postgres',
			'ALTER DATABASE template0 ALLOW_CONNECTIONS true');
		$node->safe_psql($_, 'VACUUM FREEZE') foreach qw(template0 template1 postgres);
		$node->safe_psql('postgres',
			'ALTER DATABASE template0 ALLOW_CONNECTIONS false; CHECKPOINT');
		cmp_ok($node->safe_psql('postgres', 'SELECT oldest_xid::text::bigint FROM pg_control_checkpoint()'),
			'>=', 1024 * 1048576, "$name: every database frozen past 2^30");
		$node->stop;
		reset_xid($node, 2049 * 1048576);
	}
	ZkLockTest::use_private_install($node);
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'zklock'\nzklock.hosts = '"
		  . $zk->connect
		  . "'\nzklock.session_timeout = 4000\ncluster_name = '$name'\n"
		  . "synchronous_standby_names = 'nobody'\n");
	$node->start;
	$node->safe_psql('postgres',
		'SET synchronous_commit = local; CREATE EXTENSION zklock; '
		  . 'CREATE TABLE runs (slot text NOT NULL); CREATE TABLE hold (x int)');
	return $node;
}

sub zk_requests
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT zk_requests FROM zk_stats');
}

sub waits_on
{
	my ($node, $pid, $cond) = @_;
	return $node->poll_query_until('postgres',
		"SELECT $cond FROM pg_stat_activity WHERE pid = $pid");
}

sub scenario
{
	my ($pa, $slot, $half) = @_;
	my $tag = "$half: $slot";
	my $sx = session($pa);
	my $sy = session($pa);
	my $sw = session($pb);

	# Y claims the slot and writes its run
	$sy->query_ok('BEGIN');
	$sy->query_ok('NOTIFY zk_hold2');
	is($sy->query_ok(claim_sql($slot)), 't', "$tag: Y on a claims the slot");
	my $xid = $sy->query_ok('SELECT txid_current()');
	my $xid32 = $xid % 2**32;
	if ($half eq 'high')
	{
		cmp_ok($xid32, '>=', 2**31 + 3, "$tag: Y's xid $xid32 is in [2^31 + 3, 2^32)");
	}
	else
	{
		cmp_ok($xid32, '<', 2**31, "$tag: Y's xid $xid32 is below 2^31");
	}
	$sy->query_ok("INSERT INTO runs VALUES ('$slot')");

	# W on b waits for the slot
	$sw->query_ok('BEGIN');
	$sw->send(claim_sql($slot));
	ZkLockTest::wait_for_extension_wait($pb, $sw->pid);

	# X holds the notify queue's lock in SyncRep (a commit waits there
	# only when its transaction wrote WAL before the commit record)
	$sx->send('BEGIN; INSERT INTO hold VALUES (1); NOTIFY zk_hold; COMMIT');
	ok(waits_on($pa, $sx->pid, "wait_event = 'SyncRep'"),
		"$tag: X wrote its commit record and waits in SyncRep");

	# Y's COMMIT: PRE_COMMIT makes the claim final, then it waits for X
	$sy->send('COMMIT');
	my $n = claim_state_becomes($zk, $JOB, $slot, 'committing', timeout => 60);
	ok($n, "$tag: Y's PRE_COMMIT made the claim final (committing)");
	is($n->{xid} // '(none)', $xid, "$tag: the claim names Y's transaction") if $n;
	ok(waits_on($pa, $sy->pid, "wait_event_type = 'Lock'"),
		"$tag: Y waits for the notify lock before its commit record");
	ok(!$sy->done, "$tag: Y's COMMIT has not returned");
	is($pa->safe_psql('postgres', "SELECT pg_xact_status('$xid'::xid8)"),
		'in progress', "$tag: Y's transaction is in progress");

	# a's worker starts again, in a new session
	my $old = zk_status_of($pa);
	my $offset = -s $pa->logfile;
	signal_process($old->{worker_pid}, 'TERM');
	ok( poll_status(
			$pa,
			sub {
				$_[0]{state} eq 'connected'
				  && $_[0]{worker_pid} ne ''
				  && $_[0]{worker_pid} ne $old->{worker_pid}
				  && $_[0]{session_id} ne $old->{session_id};
			}),
		"$tag: a's worker started again in a new ZooKeeper session");
	my $path = "/zklock/$JOB/claims/" . slot_name($slot);
	my $found = qr/zklock found unsettled job claim "\Q$path\E" of transaction $xid\b/;
	ok( poll_until(
			sub { slurp_file($pa->logfile, $offset) =~ $found },
			timeout => 60),
		"$tag: the new worker found the claim in the index");

	# every settle round of the worker syncs (one ZooKeeper request) and
	# then reads the outcome: let it look several times
	my $base = zk_requests($pa);
	my $cur = $base;
	poll_until(
		sub {
			$cur = zk_requests($pa);
			my $m = claim_node($zk, $JOB, $slot);
			return $cur >= $base + 8
			  || !$m->{exists}
			  || ($m->{state} // '') ne 'committing';
		},
		timeout => 60);
	cmp_ok($cur - $base, '>=', 8, "$tag: the new worker made its settle rounds");
	$n = claim_node($zk, $JOB, $slot);
	is($n->{exists} ? $n->{state} : 'gone', 'committing',
		"$tag: the claim of the running transaction stays committing");
	ok(slurp_file($pa->logfile, $offset) !~ /zklock reopened job claim/,
		"$tag: the worker reopened no claim");
	ok(!$sw->done, "$tag: W still waits");
	ok(!$sy->done, "$tag: Y still waits");

	# release: X and Y commit
	$pa->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = ''");
	$pa->reload;
	my ($out, $err) = $sx->result(timeout => 60);
	is($err // 'timed out', '', "$tag: X committed");
	($out, $err) = $sy->result(timeout => 60);
	ok(defined $out, "$tag: Y's COMMIT returned");
	note "$tag: Y's COMMIT said: $err" if defined $err && $err ne '';
	is(runs('runs', $slot, $pa), 1, "$tag: Y's run is committed");

	($out, $err) = $sw->result(timeout => 60);
	is($out // '(no answer)', 'f', "$tag: W answers false: the slot is done");
	if (($out // '') eq 't')
	{
		$sw->query_ok("INSERT INTO runs VALUES ('$slot')");
		$sw->query_ok('COMMIT');
	}
	else
	{
		$sw->query('ROLLBACK');
	}
	ok(claim_state_becomes($zk, $JOB, $slot, 'committed', timeout => 30),
		"$tag: the claim is committed");
	is(runs('runs', $slot, $pa, $pb), 1, "$tag: exactly one committed run");
	$_->quit foreach ($sx, $sy, $sw);
	return;
}

my $pa_low = claimant_node('rx_a_low', 0);
scenario($pa_low, '2026-08-01 10:00+00', 'low');
$pa_low->stop;

my $pa_high = claimant_node('rx_a_high', 1);
scenario($pa_high, '2026-08-01 11:00+00', 'high');

done_testing();

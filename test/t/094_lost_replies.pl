# 094_lost_replies.pl
#    A request applied by ZooKeeper whose reply is lost with the connection
#    (test/zkfaultproxy between instance a's worker and ZooKeeper withholds
#    the reply of exactly one request, chosen by its op code and path, then
#    resets the connection; a reconnects within its session) must not act
#    twice, nor on what other instances did in between:
#    - an aborted claim's delete: another instance's claim of the slot, or
#      its final node, is not deleted; a third instance does not get the
#      slot; the slot has one committed run;
#    - zk_barrier_remove: another instance's barrier set in between stays
#      (and its waiter waits);
#    - zk_barrier_set: another instance's remove in between stays done;
#    - zk_lock_revoke: the revocation does not reach the holder after the
#      one it was written to;
#    - zk_stats.nodes is back to 0 after a COMMIT cancelled while its
#      claim's finalize was in flight (the proxy holds the replies).
#    Instance a reconnects only once the other instances acted: the proxy
#    refuses its connections until then.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(zk_status_of poll_status poll_session zk_exists);
use ZkFaultProxy;

my $zk = ZkLockTest::zk_start();
my $proxy = ZkFaultProxy->start($zk);
# a's session outlives the moments its connections are refused
my $pa = ZkLockTest::pg_node('lost_a', $proxy->hosts,
	cluster_name => 'lost_a', 'zklock.session_timeout' => 8000);
my $pb = ZkLockTest::pg_node('lost_b', $zk, cluster_name => 'lost_b');
my $pc = ZkLockTest::pg_node('lost_c', $zk, cluster_name => 'lost_c');
my @nodes = ($pa, $pb, $pc);
$_->safe_psql('postgres', 'CREATE TABLE work (slot timestamptz NOT NULL)')
  foreach @nodes;

sub session { return ZkLockTest::Session->new(@_); }
my ($sa, $sb, $sc) = map { session($_) } @nodes;

sub claim_sql { return "SELECT zk_job_claim('lost', '$_[0]')"; }

# The number of nodes a's worker counts as its own (zk_stats.nodes).
sub a_nodes { return $sa->query_ok('SELECT nodes FROM zk_stats'); }

my $base_nodes = a_nodes();

# Withhold the reply of a's next request of op $op on a path containing
# $sub: new connections are refused, $send makes a send the request, and
# once the server has applied it (its reply dropped, a's connection reset)
# this returns a's reconnect count from before.
sub lose_reply
{
	my ($what, $op, $sub, $send) = @_;
	my $reconnects = zk_status_of($sa)->{reconnects};
	$proxy->withhold($op, $sub);
	$proxy->refuse(120);
	$send->();
	ok($proxy->wait_fired, "$what: ZooKeeper answered a's $op");
	is($proxy->status->{last_err}, '0', "$what: ... and applied it; the reply was lost");
	return $reconnects;
}

# Let a reconnect (in its session) and wait until it has.
sub reconnect_a
{
	my ($what, $reconnects) = @_;
	$proxy->accept;
	ok( poll_status(
			$pa,
			sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $reconnects },
			timeout => 30),
		"$what: a reconnects in its session");
	return;
}

# Wait until a's worker has settled its nodes: none of its own left.
sub a_settled
{
	my ($what) = @_;
	ok(poll_session($sa, 'SELECT nodes FROM zk_stats', $base_nodes, timeout => 30),
		"$what: a's worker has no node of its own left")
	  or diag 'zk_stats.nodes of a: ' . a_nodes();
	return;
}

# Committed runs of the slot, over the three instances.
sub runs
{
	my ($slot) = @_;
	my $n = 0;
	$n += $_->safe_psql('postgres',
		"SELECT count(*) FROM work WHERE slot = '$slot'") foreach @nodes;
	return $n;
}

sub final_claim
{
	my ($slot) = @_;
	return $pb->safe_psql('postgres',
		"SELECT claimed_by || ' ' || final FROM zk_job_claims('lost') "
		  . "WHERE slot = '$slot'");
}

# A claim of instance c: its answer; when true it runs and commits too.
sub c_claims
{
	my ($slot) = @_;
	$sc->query_ok('BEGIN');
	my $got = $sc->query_ok(claim_sql($slot));
	if ($got eq 't')
	{
		$sc->query_ok("INSERT INTO work VALUES ('$slot')");
		my (undef, $err) = $sc->query('COMMIT');
		note "c's COMMIT: " . ($err eq '' ? 'committed' : $err);
	}
	else
	{
		$sc->query_ok('ROLLBACK');
	}
	return $got;
}

# a claims slot $ts (YYYY-MM-DD HH:MM+00), writes its work and rolls
# back, and the reply of the claim node's delete is lost; then b claims the
# slot and writes its work.  Returns a's reconnect count from before.
sub a_aborts_b_claims
{
	my ($what, $ts) = @_;
	(my $node = $ts) =~ s/^(\S+) (\d\d:\d\d)\+00$/$1T$2:00Z/;
	$sa->query_ok('BEGIN');
	is($sa->query_ok(claim_sql($ts)), 't', "$what: a claims the slot");
	$sa->query_ok("INSERT INTO work VALUES ('$ts')");
	my $r = lose_reply($what, 'delete', "/claims/$node", sub { $sa->send('ROLLBACK') });
	$sb->query_ok('BEGIN');
	is($sb->query_ok(claim_sql($ts)), 't', "$what: b claims the slot a rolled back");
	$sb->query_ok("INSERT INTO work VALUES ('$ts')");
	return $r;
}

# a reconnects; its ROLLBACK returns and its worker settles.
sub a_rolled_back
{
	my ($what, $r) = @_;
	reconnect_a($what, $r);
	unlike(($sa->result)[1], qr/ERROR/, "$what: a's ROLLBACK returned without an error");
	a_settled($what);
	return;
}

# ---------------------------------------------------------------------------
note 'an aborted claim\'s delete applied twice: b claims in between';

my $S1 = '2026-04-01 10:00+00';
a_rolled_back('claim', a_aborts_b_claims('claim', $S1));
is(c_claims($S1), 'f', 'c does not get the slot b holds');
is(($sb->query('COMMIT'))[1], '', 'b commits');
is(runs($S1), 1, 'the slot has one committed run');
is(final_claim($S1), 'lost_b true', 'and b\'s final node');

# ---------------------------------------------------------------------------
note 'an aborted claim\'s delete applied twice: b commits in between';

my $S2 = '2026-04-01 11:00+00';
my $r = a_aborts_b_claims('final', $S2);
is(($sb->query('COMMIT'))[1], '', 'b commits');
a_rolled_back('final', $r);
is(final_claim($S2), 'lost_b true', 'b\'s final node stays');
is(c_claims($S2), 'f', 'c does not get the slot b finished');
is(runs($S2), 1, 'the slot has one committed run');

# ---------------------------------------------------------------------------
note 'zk_barrier_remove applied twice: b sets the barrier in between';

my $bar = 'lost_bar_remove';
is($sa->query_ok("SELECT zk_barrier_set('$bar')"), 't', 'a sets a barrier');
$r = lose_reply('remove', 'delete', "/$bar",
	sub { $sa->send("SELECT zk_barrier_remove('$bar')") });
is($sb->query_ok("SELECT zk_barrier_set('$bar')"), 't',
	'b sets the barrier a removed');
my $waiter = session($pb);
$waiter->send("SELECT zk_barrier_wait('$bar')");
ZkLockTest::wait_for_extension_wait($pb, $waiter);
reconnect_a('remove', $r);
my ($out, $err) = $sa->result;
note "a's zk_barrier_remove answered \"$out\" $err";
ok(zk_exists($zk, "/zklock/$bar"), 'b\'s barrier is still set');
ok(!$waiter->done, 'its waiter still waits');
is($sb->query_ok("SELECT zk_barrier_remove('$bar')"), 't', 'b removes it');
is($waiter->result, 't', 'then the waiter passes');
$waiter->quit;

# ---------------------------------------------------------------------------
note 'zk_barrier_set applied twice: b removes the barrier in between';

$bar = 'lost_bar_set';
$r = lose_reply('set', 'anycreate', "/$bar",
	sub { $sa->send("SELECT zk_barrier_set('$bar')") });
is($sb->query_ok("SELECT zk_barrier_remove('$bar')"), 't',
	'b removes the barrier a set');
reconnect_a('set', $r);
($out, $err) = $sa->result;
note "a's zk_barrier_set answered \"$out\" $err";
ok(defined $out, 'a\'s zk_barrier_set returns');
ok(!zk_exists($zk, "/zklock/$bar"), 'the barrier stays removed');

# ---------------------------------------------------------------------------
note 'zk_lock_revoke applied twice: the holder changes in between';

my $lock = 'lost_rev';
my $h1 = session($pb);
my $h2 = session($pc);
$h1->query_ok('BEGIN');
is($h1->query_ok("SELECT zk_lock_acquire_xact('$lock', NULL, true)"), 't',
	'h1 (on b) holds a revocable lock');
$h2->query_ok('BEGIN');
$h2->send("SELECT zk_lock_acquire_xact('$lock', NULL, true)");
ZkLockTest::wait_for_extension_wait($pc, $h2);
$r = lose_reply('revoke', 'setData', "/$lock/",
	sub { $sa->send("SELECT zk_lock_revoke('$lock')") });
ok(poll_session($h1, "SELECT zk_lock_revocation_requested('$lock')", 't'),
	'h1 was asked to let go');
$h1->query('ROLLBACK');
is($h2->result, 't', 'h1 lets go, h2 (on c) acquires');
reconnect_a('revoke', $r);
($out, $err) = $sa->result;
note "a's zk_lock_revoke answered \"$out\" $err";
my @holders = ZkLockTest::zk_children($zk, "/zklock/$lock");
is(scalar @holders, 1, 'one node in the lock: h2\'s');
my $data = ZkLockTest::zk_python($zk,
	q{print(zk.get(args[0])[0].decode(errors='replace'))}, "/zklock/$lock/$holders[0]");
chomp $data;
isnt($data, '__REVOKE__', 'the revocation did not reach h2\'s node');
is($h2->query_ok("SELECT zk_lock_revocation_requested('$lock')"), 'f',
	'h2 was not asked to let go');
($out, $err) = $h2->query('COMMIT');
unlike($err, qr/revoked/, 'h2 keeps its lock to its commit');
$_->quit foreach ($h1, $h2);

# ---------------------------------------------------------------------------
note 'zk_stats.nodes after a COMMIT cancelled during its finalize';

my $S3 = '2026-04-01 12:00+00';
a_settled('before');
$sa->query_ok('BEGIN');
is($sa->query_ok(claim_sql($S3)), 't', 'a claims a third slot');
$sa->query_ok("INSERT INTO work VALUES ('$S3')");
is(a_nodes(), $base_nodes + 1, 'a\'s worker counts the claim node');
$proxy->hold;
$sa->send('COMMIT');
ZkLockTest::wait_for_extension_wait($pa, $sa);
is($pa->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $sa->pid . ')'),
	't', 'a\'s COMMIT is cancelled while its finalize waits for its reply');
($out, $err) = $sa->result;
$proxy->release;
note "a's COMMIT: " . ($err eq '' ? 'committed' : $err);
is(runs($S3), $err eq '' ? 1 : 0, 'the work is committed exactly when the COMMIT was');
ok(poll_session($sb, claim_sql($S3), $err eq '' ? 'f' : 't', timeout => 30),
	'the slot is open exactly when the COMMIT failed');
ok( poll_session(
		$sa, q{SELECT count(*) FROM zk_locks WHERE kind = 'job claim'},
		'0', timeout => 30),
	'a\'s claim is gone from zk_locks');
is(a_nodes(), $base_nodes, 'zk_stats.nodes is back where it was');

$_->quit foreach ($sa, $sb, $sc);
$proxy->stop;
$_->stop foreach @nodes;
done_testing();

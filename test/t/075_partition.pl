# 075_partition.pl
#    Session confirmation from the quorum.  A follower
#    cut off from its leader keeps serving reads until syncLimit x tickTime
#    have passed, which here (0.5 s x 30 = 15 s) is much longer than the
#    zklock session timeout (4 s).  Instance A talks only to such a follower F;
#    once the leader has expired A's session and instance B has taken A's
#    locks, A must not claim them any more: zk_lock_held false, no fencing
#    token, and a transaction that holds a lost transaction-scope lock must
#    not commit - although F, still a follower, would confirm A's session
#    with any read it is asked.  Then the partition heals and A recovers by
#    itself, leaving nothing of its dead session in ZooKeeper.
#
#    The 3-node ensemble runs with TCP proxies between its servers
#    (zk_start(proxies => 1), see test/zk): partition(F) blackholes F's
#    peer connections without closing them, so F notices only through its
#    own read timeout.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(zk_status_of poll_status zk_session_alive zk_tree
  zk_lock_nodes);

my $T0 = time;

# A cut-off follower serves for SYNC_LIMIT x TICK ms; zklock's session
# timeout must be well below that, with room for B to take the locks and
# for the checks on A.
my $TICK = 500;
my $SYNC_LIMIT = 30;
my $SESSION_TIMEOUT = 4000;
my $FOLLOWER_WINDOW = $TICK * $SYNC_LIMIT / 1000;    # seconds

my $zk = ZkLockTest::zk_start(
	nodes      => 3,
	proxies    => 1,
	tick       => $TICK,
	sync_limit => $SYNC_LIMIT);

my $leader = $zk->leader;
my ($f, $g) = grep { $_ != $leader } 1 .. 3;
note "leader: node $leader; A's follower F: node $f; the other follower: node $g";

sub hosts { return join ',', map { '127.0.0.1:' . $zk->port($_) } @_; }

my $na = ZkLockTest::pg_node('part_a', hosts($f),
	'zklock.session_timeout' => $SESSION_TIMEOUT);
my $nb = ZkLockTest::pg_node('part_b', hosts($leader, $g),
	'zklock.session_timeout' => $SESSION_TIMEOUT);

my $st_a = poll_status($na, sub { $_[0]{state} eq 'connected' });
ok($st_a, 'A is connected');
$st_a //= {};
my $sid_a = lc($st_a->{session_id} // '');
note "A: session $sid_a on $st_a->{server}";
like($st_a->{server} // '', qr/:\Q@{[ $zk->port($f) ]}\E$/, 'A talks to F');
ok(poll_status($nb, sub { $_[0]{state} eq 'connected' }), 'B is connected');

# The state of node $i in one line, for the log.
sub node_state
{
	my ($i) = @_;
	my $srvr = $zk->four($i, 'srvr');
	my ($mode) = $srvr =~ /^Mode: (\S+)/m;
	my ($zxid) = $srvr =~ /^Zxid: (\S+)/m;
	return sprintf('node %d: mode %s, zxid %s', $i, $mode // 'not serving',
		$zxid // '-');
}

# The moment of the partition and A's connection on F then.
my ($t_cut, $a_on_f0);

# A's connection on F, from F's "cons": requests received, last operation
# answered (EXIS: the worker's exists probe, PING), time of the last answer
# (ms on F's monotonic clock).
sub a_on_f
{
	my ($line) = grep { /sid=\Q$sid_a\E\b/i } split /\n/, $zk->four($f, 'cons');
	return undef unless defined $line;
	my %c = $line =~ /\b(recved|lop|lresp)=(\w+)/g;
	return \%c;
}

# What F did for A since the partition (sampled by a_on_f just after the
# cut), in words.
sub f_answers_a
{
	my $now = a_on_f();
	return "F lists no connection of A's session" unless $now;
	return sprintf('since the cut F received %d requests of A\'s session and '
		  . 'answered them, the last (%s) %.1f s after its last answer before '
		  . 'the cut',
		$now->{recved} - $a_on_f0->{recved}, $now->{lop},
		($now->{lresp} - $a_on_f0->{lresp}) / 1000);
}

# ===========================================================================
note 'A holds p (session scope) and px (transaction scope) through F';
# ===========================================================================

my $ha = ZkLockTest::Session->new($na);
is($ha->query_ok("SELECT zk_lock_acquire('p')"), 't', 'A acquires p');
is($ha->query_ok("SELECT zk_lock_held('p')"), 't', 'A holds p');
my $token_a = $ha->query_ok("SELECT zk_lock_token('p')");
like($token_a, qr/^\d+$/, 'A has a fencing token for p');

my $hx = ZkLockTest::Session->new($na);
$hx->query_ok('BEGIN');
is($hx->query_ok("SELECT zk_lock_acquire_xact('px')"), 't',
	'A acquires px in an open transaction');
$hx->query_ok('CREATE TABLE px_work (x int)');

ok(poll_until(sub { zk_session_alive($zk, $leader, $sid_a) }, timeout => 10),
	"the leader tracks A's session");

# ===========================================================================
note 'F is cut off; B takes p and px once the majority expired A';
# ===========================================================================

$t_cut = time;
$zk->partition($f);
$a_on_f0 = a_on_f() // { recved => 0, lresp => 0 };
note 'partitioned: ' . join(',', $zk->partitioned) . '; ' . node_state($f);

# B waits in zk_lock_acquire until A's nodes go, i.e. until the leader has
# expired A's session (after about the session timeout).
my $hb = ZkLockTest::Session->new($nb);
my ($out, $err) = $hb->query("SELECT zk_lock_acquire('p', 30000)");
my $t_b = time - $t_cut;
is($out, 't', 'B acquires p once A\'s session expired') or diag $err;
note sprintf('B got p %.1f s after the partition', $t_b);
is($hb->query_ok("SELECT zk_lock_acquire('px', 5000)"), 't', 'B acquires px');
ok(!zk_session_alive($zk, $leader, $sid_a),
	"the leader no longer tracks A's session");

# F must still be a follower serving its clients for the checks below to
# mean anything: ZooKeeper's majority has moved on, F has not noticed.
my $f_before = node_state($f);
my $f_dump = $zk->four($f, 'dump');
my $f_stale = $f_dump =~ /^\s*\Q$sid_a\E:?\s*$/mi ? 1 : 0;
my $st_a_now = zk_status_of($na);
note sprintf('%.1f s after the partition: %s; F %s A\'s session and '
	  . 'ephemeral nodes; A\'s worker: %s on %s; %s',
	time - $t_cut, $f_before,
	$f_stale ? 'still lists' : 'no longer lists',
	$st_a_now->{state}, $st_a_now->{server} || '-', f_answers_a());

# ---- the checks: A must not claim what B holds -----------------------------
my ($held, $held_err) = $ha->query("SELECT zk_lock_held('p')");
my $t_held = time - $t_cut;
isnt($held // '', 't',
	"A's zk_lock_held('p') is not true while B holds p (F still serves A)")
  or diag sprintf('zk_lock_held(\'p\') on A returned "%s" %.1f s after the '
	  . 'partition, when the majority had expired A\'s session and only the '
	  . 'cut-off follower F could still answer for it',
	$held // '(no result)', $t_held);
note "zk_lock_held('p') on A: " . ($held // '(none)')
  . ($held_err ne '' ? " / $held_err" : '');

my ($tok, $tok_err) = $ha->query("SELECT zk_lock_token('p')");
my $a_told = "$held_err\n$tok_err";
ok(!defined $tok || $tok eq '',
	"A's zk_lock_token('p') returns no token while B holds p")
  or diag "zk_lock_token('p') on A returned $tok (A's token was $token_a)";

my ($c_out, $c_err) = $hx->query('COMMIT');
is(sqlstate($c_err), '40001',
	'COMMIT of the transaction holding the lost px fails with 40001')
  or diag "COMMIT on A: " . ($c_err eq '' ? 'succeeded' : $c_err);
is($na->safe_psql('postgres', "SELECT to_regclass('px_work') IS NULL"), 't',
	'the work done under the lost px was not committed');

my $f_after = node_state($f);
my $t_checks = time - $t_cut;
note sprintf('checks done %.1f s after the partition (F gives up after %d s): %s',
	$t_checks, $FOLLOWER_WINDOW, $f_after);
ok($f_before =~ /mode follower/ && $f_after =~ /mode follower/,
	'F was still a serving follower before and after the checks')
  or diag 'the checks ran outside the window where F serves stale reads: '
  . "before: $f_before; after: $f_after";
ok($f_stale, "F still listed A's expired session (its view was stale)")
  or diag "dump of F:\n$f_dump";

# ===========================================================================
note 'the partition heals; A recovers by itself';
# ===========================================================================

$zk->heal($f);
my $t_heal = time;
ok(poll_until(sub { $zk->node_mode($f) =~ /^(leader|follower)$/ }, timeout => 60),
	'F serves again after the heal');
note node_state($f);

my $st_a2 = poll_status($na,
	sub { $_[0]{state} eq 'connected' && lc($_[0]{session_id}) ne $sid_a },
	timeout => 60);
ok($st_a2, 'A has a new session');
note sprintf('A: session %s on %s, %.1f s after the heal, session losses %s',
	$st_a2->{session_id} // '-', $st_a2->{server} // '-', time - $t_heal,
	$st_a2->{session_losses} // '-')
  if $st_a2;

($out, $err) = $ha->query("SELECT zk_lock_held('p')");
is($out, 'f', 'A no longer holds p');
$a_told .= "\n$err";
like($a_told, qr/zklock lock "p" was lost/,
	'the session holding p was told it was lost');
is(scalar $hx->query("SELECT zk_lock_held('px')"), 'f', 'A no longer holds px');
is($ha->query_ok("SELECT zk_lock_acquire('p_fresh', 10000)"), 't',
	'A acquires a fresh name');
is($ha->query_ok("SELECT zk_lock_release('p_fresh')"), 't', 'and releases it');
is($nb->safe_psql('postgres', "SELECT zk_lock_try('p')"), 'f',
	'p is still B\'s');

is($hb->query_ok("SELECT zk_lock_release('p')"), 't', 'B releases p');
is($hb->query_ok("SELECT zk_lock_release('px')"), 't', 'B releases px');
$_->quit foreach ($ha, $hx, $hb);

# ===========================================================================
note 'nothing is left behind';
# ===========================================================================

my @dead = grep { lc($_->{ephemeral}) eq $sid_a } zk_tree($zk, '/zklock');
is_deeply([ map { $_->{path} } @dead ], [], "no znode of A's dead session");
my @left;
ok(poll_until(sub { @left = zk_lock_nodes($zk, '/zklock'); !@left }, timeout => 30),
	'no lock node left in ZooKeeper')
  or diag "left: @left";
ok(poll_until(sub { $zk->four($f, 'dump') !~ /^\s*\Q$sid_a\E:?\s*$/mi },
		timeout => 30),
	"F has dropped A's dead session too");
foreach my $nd ($na, $nb)
{
	ok($nd->poll_query_until('postgres', 'SELECT count(*) = 0 FROM zk_locks'),
		$nd->name . ': zk_locks empty');
}
is_deeply([ $zk->partitioned ], [], 'no node is cut off');

note sprintf('075_partition took %.0f s', time - $T0);
$_->stop foreach ($na, $nb);
done_testing();

# 104_shared_count.pl
#    Shared counts (zk_shared_count, zk_shared_count_set,
#    zk_shared_count_try_set, zk_shared_count_add), the node of Curator's
#    SharedCount and Kazoo's Counter(support_curator=True): two PostgreSQL
#    instances (a through test/zkfaultproxy), a real Curator and a real
#    Kazoo on one ZooKeeper.
#    - values set by each of zklock, Curator and Kazoo are read by the
#      others, and a count created by one with its seed is read by the
#      others;
#    - compare-and-set races between Curator and zklock, and between the
#      two instances, have exactly one winner each;
#    - concurrent adds of both instances and Kazoo lose nothing: the values
#      they report are exactly 1..N;
#    - a node that is not a count (a barrier's) is 22P02 naming the node;
#      Kazoo's empty counter node reads as the seed;
#    - a write whose reply is lost (the server applied it) is never applied
#      twice: a set reports its version, or fails with 40003 when another
#      write came in between, which stays; a compare-and-set and an add
#      fail with 40003 and the count holds their write once;
#    - ZooKeeper stopped: 08001.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(zk_status_of poll_status);
use ZkFaultProxy;
use ZkInterop;

my $zk = ZkLockTest::zk_start();
my $proxy = ZkFaultProxy->start($zk);
# a's session outlives the moments its connections are refused
my $pa = ZkLockTest::pg_node('count_a', $proxy->hosts,
	'zklock.session_timeout' => 8000);
my $pb = ZkLockTest::pg_node('count_b', $zk, 'zklock.connect_timeout' => 1500);
my $curator = ZkInterop::curator($zk);
my $kazoo = ZkInterop::kazoo($zk);

my $sa = ZkLockTest::Session->new($pa);
my $sb = ZkLockTest::Session->new($pb);

# "value version" of a count as zklock reads it
sub count_of
{
	my ($s, $name) = @_;
	my $row = $s->query_ok(
		"SELECT count || ' ' || version FROM zk_shared_count('$name')");
	return $row;
}

# Wait until Curator's count of tag $tag reads "ok $want"
sub curator_reads
{
	my ($tag, $want) = @_;
	my $got;
	my $ok = poll_until(sub { ($got = $curator->ask($tag => 'count-get')) eq "ok $want" });
	diag "Curator's $tag reads \"$got\", not \"ok $want\"" unless $ok;
	return $ok;
}

# ---------------------------------------------------------------------------
note 'values set by each are read by the others';

is($sa->query_ok("SELECT zk_shared_count_set('sc/x', 5)"), '0',
	'a sets sc/x to 5, creating it (version 0)');
is(count_of($sb, 'sc/x'), '5 0', 'b reads 5 at version 0');
is($curator->ask(c1 => 'count-start /zklock/sc/x 0'), 'ok', 'Curator starts a SharedCount on it');
ok(curator_reads(c1 => '5 0'), 'Curator reads 5 at version 0');
is($kazoo->ask(k1 => 'counter-get /zklock/sc/x'), 'ok 5', 'Kazoo reads 5');

is($curator->ask(c1 => 'count-set 17'), 'ok', 'Curator sets 17');
is(count_of($sa, 'sc/x'), '17 1', 'a reads 17 at version 1');
is($kazoo->ask(k1 => 'counter-add /zklock/sc/x 3'), 'ok 17 20', 'Kazoo adds 3 to 17');
is(count_of($sb, 'sc/x'), '20 2', 'b reads 20 at version 2');
ok(curator_reads(c1 => '20 2'), 'Curator reads 20 at version 2');
is($sb->query_ok("SELECT zk_shared_count_add('sc/x', -25)"), '-5', 'b adds -25: -5');
is($kazoo->ask(k1 => 'counter-get /zklock/sc/x'), 'ok -5', 'Kazoo reads -5');
ok(curator_reads(c1 => '-5 3'), 'Curator reads -5 at version 3');

note 'created with its seed by one, read by the others';
is($curator->ask(c2 => 'count-start /zklock/sc/seed-curator 42'), 'ok',
	'Curator starts a new SharedCount with seed 42');
is(count_of($sa, 'sc/seed-curator'), '42 0', 'a reads 42 at version 0 (its seed 0 ignored)');
is($sb->query_ok("SELECT count FROM zk_shared_count('sc/seed-zklock', 9)"), '9',
	'b creates sc/seed-zklock with seed 9');
is($curator->ask(c3 => 'count-start /zklock/sc/seed-zklock 0'), 'ok',
	'Curator starts a SharedCount on it with seed 0');
ok(curator_reads(c3 => '9 0'), 'Curator reads 9');
is($kazoo->ask(k1 => 'counter-get /zklock/sc/seed-zklock'), 'ok 9', 'Kazoo reads 9');
is($sa->query_ok("SELECT zk_shared_count_add('sc/seed-add', 1, 100)"), '101',
	'a adds 1 to an absent count with seed 100: 101');
is($kazoo->ask(k1 => 'counter-get /zklock/sc/seed-add'), 'ok 101', 'Kazoo reads 101');

note 'the empty node Kazoo makes before its first write reads as the seed';
is($kazoo->ask(k1 => 'counter-get /zklock/sc/kazoo-empty'), 'ok 0',
	'Kazoo reads its default from the empty node it makes');
is($sa->query_ok("SELECT count || ' ' || version FROM zk_shared_count('sc/kazoo-empty', 3)"),
	'3 0', 'zklock reads its seed at version 0');
is($kazoo->ask(k1 => 'counter-add /zklock/sc/kazoo-empty 4'), 'ok 0 4',
	'Kazoo adds 4 to its default: now 4 bytes');
is(count_of($sa, 'sc/kazoo-empty'), '4 1', 'which zklock reads');
is($kazoo->ask(k1 => 'counter-get /zklock/sc/kazoo-empty2'), 'ok 0',
	'Kazoo makes another empty counter node');
is($sb->query_ok("SELECT zk_shared_count_add('sc/kazoo-empty2', 5, 10)"), '15',
	'zklock adds 5 to it with seed 10: 15');
is($kazoo->ask(k1 => 'counter-get /zklock/sc/kazoo-empty2'), 'ok 15', 'Kazoo reads 15');

note 'a node that is not a count: 22P02, naming it';
# (a barrier of zklock's: its node holds text.  Curator's holds the
# client's address, which is empty where the host name does not resolve,
# as in the test/matrix chroots: then it reads as an unwritten count)
is($sb->query_ok("SELECT zk_barrier_set('sc/a-barrier')"), 't',
	'zklock sets a barrier (its node holds text)');
my ($out, $err) = $sa->query("SELECT zk_shared_count('sc/a-barrier')");
is(sqlstate($err), '22P02', 'zklock refuses to read it as a count, with 22P02');
like($err, qr{Node "/zklock/sc/a-barrier" holds \d+ bytes}, '... naming the node');
($out, $err) = $sb->query("SELECT zk_shared_count_add('sc/a-barrier', 1)");
is(sqlstate($err), '22P02', 'and to add to it');
is($curator->ask(c4 => 'barrier-wait /zklock/sc/a-barrier 0'), 'timeout',
	'the barrier is still set, for Curator too');

# ---------------------------------------------------------------------------
note 'compare-and-set races: exactly one winner';

is($curator->ask(r1 => 'count-start /zklock/sc/race 0'), 'ok', 'Curator starts sc/race');
my ($curator_wins, $zklock_wins) = (0, 0);
foreach my $round (1 .. 10)
{
	my $base = $round * 10;
	my $v = $sa->query_ok("SELECT zk_shared_count_set('sc/race', $base)");
	ok(curator_reads(r1 => "$base $v"), "round $round: Curator read $base at version $v");
	is(count_of($sb, 'sc/race'), "$base $v", "round $round: b read it too");
	$curator->send(r1 => 'count-try-set ' . ($base + 1));
	$sb->send("SELECT zk_shared_count_try_set('sc/race', $v, " . ($base + 2) . ')');
	my $c = $curator->answer('r1');
	my ($z, $zerr) = $sb->result;
	is($zerr, '', "round $round: zklock's compare-and-set returns");
	my $winners = ($c eq 'ok true') + ($z eq 't');
	is($winners, 1, "round $round: one winner (Curator \"$c\", zklock \"$z\")");
	$curator_wins++ if $c eq 'ok true';
	$zklock_wins++ if $z eq 't';
	my $want = $c eq 'ok true' ? $base + 1 : $base + 2;
	is(count_of($sa, 'sc/race'), "$want " . ($v + 1),
		"round $round: the count holds the winner's value, one write later");
}
note "Curator won $curator_wins rounds, zklock $zklock_wins";

foreach my $round (1 .. 5)
{
	my ($value, $v) = split / /, count_of($sa, 'sc/race');
	$sa->send("SELECT zk_shared_count_try_set('sc/race', $v, -1)");
	$sb->send("SELECT zk_shared_count_try_set('sc/race', $v, -2)");
	my ($x) = $sa->result;
	my ($y) = $sb->result;
	is(($x eq 't') + ($y eq 't'), 1, "a against b, round $round: one winner ($x, $y)");
	is(count_of($sb, 'sc/race'), ($x eq 't' ? -1 : -2) . ' ' . ($v + 1),
		"a against b, round $round: the winner's value");
}

# ---------------------------------------------------------------------------
note 'concurrent adds of both instances and Kazoo: nothing lost';

my $N = 20;
my $sa2 = ZkLockTest::Session->new($pa);
my $sb2 = ZkLockTest::Session->new($pb);
my @adders = ($sa, $sa2, $sb, $sb2);
$_->send("SELECT string_agg(zk_shared_count_add('sc/sum', 1)::text, ' ') "
	  . "FROM generate_series(1, $N)")
  foreach @adders;
# Kazoo: four threads, each adding $N/4 times in turn
$kazoo->send('k' . ($_ % 4) => 'counter-add /zklock/sc/sum 1') foreach 1 .. $N;
my @seen;
foreach my $s (@adders)
{
	my ($o, $e) = $s->result(timeout => 120);
	is($e, '', 'an adder session returns without an error');
	push @seen, split / /, ($o // '');
}
foreach (1 .. $N)
{
	my $k = $kazoo->answer('k' . ($_ % 4), timeout => 120);
	push @seen, (split / /, $k)[2] if $k =~ /^ok /;
}
my $total = 5 * $N;
is(scalar(@seen), $total, "$total adds reported a value");
is(join(',', sort { $a <=> $b } @seen), join(',', 1 .. $total),
	"the values reported are exactly 1..$total: each add applied once");
is((split / /, count_of($sa, 'sc/sum'))[0], $total, "the count is $total");

# ---------------------------------------------------------------------------
note 'a lost reply: never applied twice';

# Withhold the reply of a's next setData of $path, refuse its reconnects,
# run $send; once the server applied it, run $between and let a reconnect.
# Returns a's answer (out, err).
sub lose_set_reply
{
	my ($what, $path, $sql, $between) = @_;
	my $reconnects = zk_status_of($sa)->{reconnects};
	$proxy->withhold('setData', $path);
	$proxy->refuse(120);
	$sa->send($sql);
	ok($proxy->wait_fired, "$what: ZooKeeper answered a's setData");
	is($proxy->status->{last_err}, '0', "$what: ... and applied it; the reply was lost");
	$between->() if $between;
	$proxy->accept;
	ok( poll_status(
			$pa,
			sub { $_[0]{state} eq 'connected' && $_[0]{reconnects} > $reconnects },
			timeout => 30),
		"$what: a reconnects in its session");
	return $sa->result(timeout => 60);
}

$sb->query_ok("SELECT zk_shared_count_set('sc/lost', 100)");
($out, $err) = lose_set_reply('add', '/zklock/sc/lost',
	"SELECT zk_shared_count_add('sc/lost', 7)");
ok(($err eq '' && $out eq '107') || sqlstate($err) eq '40003',
	"add: a reports the value it set or fails with 40003 (\"$out\" $err)");
is(count_of($sb, 'sc/lost'), '107 1', 'add: the count holds the add once');

($out, $err) = lose_set_reply('add, b adds between', '/zklock/sc/lost',
	"SELECT zk_shared_count_add('sc/lost', 7)",
	sub { is($sb->query_ok("SELECT zk_shared_count_add('sc/lost', 1)"), '115',
			'b adds 1 meanwhile, after a\'s add') });
ok(($err eq '' && $out eq '114') || sqlstate($err) eq '40003',
	"add, b adds between: a reports 114 or fails with 40003 (\"$out\" $err)");
is(count_of($sb, 'sc/lost'), '115 3', 'add, b adds between: each add applied once');

($out, $err) = lose_set_reply('set', '/zklock/sc/lost',
	"SELECT zk_shared_count_set('sc/lost', 200)");
is($err, '', 'set: no error');
is($out, '4', 'set: a reports the version its set made');
is(count_of($sb, 'sc/lost'), '200 4', 'set: applied once');

($out, $err) = lose_set_reply('set, b sets between', '/zklock/sc/lost',
	"SELECT zk_shared_count_set('sc/lost', 300)",
	sub { is($sb->query_ok("SELECT zk_shared_count_set('sc/lost', 301)"), '6',
			'b sets 301 meanwhile') });
is(sqlstate($err), '40003', 'set, b sets between: a fails with 40003');
like($err, qr{/zklock/sc/lost}, '... naming the node');
is(count_of($sb, 'sc/lost'), '301 6', 'set, b sets between: b\'s value stays');

($out, $err) = lose_set_reply('compare-and-set', '/zklock/sc/lost',
	"SELECT zk_shared_count_try_set('sc/lost', 6, 400)");
ok(($err eq '' && $out eq 't') || sqlstate($err) eq '40003',
	"compare-and-set: true or 40003 (\"$out\" $err)");
is(count_of($sb, 'sc/lost'), '400 7', 'compare-and-set: applied once');

# ---------------------------------------------------------------------------
note 'ZooKeeper stopped: 08001';

$zk->stop_node(1);
($out, $err) = $sb->query("SELECT zk_shared_count('sc/x')");
is(sqlstate($err), '08001', 'a read fails with 08001');
($out, $err) = $sb->query("SELECT zk_shared_count_add('sc/x', 1)");
is(sqlstate($err), '08001', 'an add fails with 08001');
ZkFault::zk_restart_node($zk, 1);
ok(poll_status($pb, sub { $_[0]{state} eq 'connected' }, timeout => 30),
	'b is connected again');
is(count_of($sb, 'sc/x'), '-5 3', 'the count is as it was');

$curator->quit;
$kazoo->quit;
done_testing();

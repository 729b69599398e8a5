# 082_handoff.pl
#    Local hand-off (zklock.local_handoff, on by default): the backends of
#    one instance queue for a lock inside the instance, behind its one node,
#    and the worker hands the lock from one to the next without going back
#    to ZooKeeper.
#    - Within an instance: waiters are granted in arrival order; every way a
#      local wait can end (timeout_ms, lock_timeout, statement_timeout,
#      cancel, termination, leaving from the middle of the queue) leaves no
#      phantom holder; the holder's exit and COMMIT hand the lock on; a
#      released lock is free at once; nothing is left in ZooKeeper.
#    - Bounded unfairness: while the instance's backends keep handing the
#      lock around, a contender elsewhere (another instance, Curator,
#      Kazoo) that queues gets it once the instance's backends queued
#      before it are served and at most zklock.handoff_limit later requests
#      of the instance have overtaken it (instance A: limit 3, time 60 s),
#      or, with zklock.handoff_time = 0, none (instance B: limit 1000).
#    - Retention (zklock.retain_time): a released node is kept for the
#      instance's next request, which gets it back without a new node; a
#      no-wait attempt elsewhere finds it taken; a waiting contender
#      elsewhere ends the retention at once.
#    - Fencing tokens strictly increase in grant order across both instances,
#      local grants included: token = czxid * 1024 + grants before it on
#      that node.
#
#    Counting is done with tokens, not clocks: the local grants made on the
#    instance's node before the contender got the lock are those whose token
#    carries that node's czxid (token >> 10).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkInterop;

my $LIMIT = 3;

my $zk = ZkLockTest::zk_start();
my $na = ZkLockTest::pg_node('hand_a', $zk,
	'zklock.handoff_limit' => $LIMIT,
	'zklock.handoff_time' => '60s');
my $nb = ZkLockTest::pg_node('hand_b', $zk,
	'zklock.handoff_limit' => 1000,
	'zklock.handoff_time' => '0');

my %names_used;

sub session { return ZkLockTest::Session->new(@_); }

sub children
{
	my ($name) = @_;
	$names_used{$name} = 1;
	return ZkLockTest::zk_children($zk, "/zklock/$name");
}

sub children_become
{
	my ($name, $want) = @_;
	$names_used{$name} = 1;
	return ZkLockTest::Session::children_become($zk, "/zklock/$name", $want);
}

# Start $sql (an acquire of a lock) in session $s of node $nd and wait
# until it waits on the zklock latch.
sub start_waiter
{
	my ($nd, $s, $sql) = @_;
	$s->send($sql);
	ZkLockTest::wait_for_extension_wait($nd, $s);
	return;
}

sub is_handoff_on
{
	my ($nd) = @_;
	return $nd->safe_psql('postgres', 'SHOW zklock.local_handoff') eq 'on';
}

ok(is_handoff_on($na) && is_handoff_on($nb), 'local hand-off is on by default');

# ===========================================================================
note 'within one instance: one node, waiters granted in arrival order';
# ===========================================================================
$na->safe_psql('postgres',
	'CREATE TABLE log (id serial PRIMARY KEY, who text, token bigint)');
my $h = session($na);
is($h->query_ok("SELECT zk_lock_acquire('q')"), 't', 'H holds q');
my $t0 = $h->query_ok("SELECT zk_lock_token('q')");
my @hnode = children('q');
is(scalar @hnode, 1, 'one node while H holds');

my %w = map { $_ => session($na) } qw(a b c);
my @arrival = qw(c a b);
foreach my $k (@arrival)
{
	start_waiter($na, $w{$k},
		    "SELECT zk_lock_acquire('q'); "
		  . "INSERT INTO log (who, token) VALUES ('$k', zk_lock_token('q')); "
		  . "SELECT zk_lock_release('q')");
}
is( $na->safe_psql(
		'postgres',
		"SELECT string_agg(state, ',' ORDER BY state) FROM zk_locks WHERE name = 'q'"),
	'held,waiting,waiting,waiting',
	'zk_locks: H holds, three wait');
is_deeply([ children('q') ], \@hnode,
	'the waiters queue inside the instance, behind its one node');
my $try = session($na);
is($try->query_ok("SELECT zk_lock_try('q')"), 'f', 'zk_lock_try is false while H holds');
is($try->query_ok("SELECT zk_lock_held('q')"), 'f', 'and does not hold');
ok(!$w{$_}->done, "waiter $_ still waits") foreach @arrival;

is($h->query_ok("SELECT zk_lock_release('q')"), 't', 'H releases');
foreach my $k (@arrival)
{
	my ($out, $err) = $w{$k}->result;
	is($out, "t\nt", "waiter $k was granted and released");
	is($err, '', "waiter $k had no error");
}
is($h->query_ok("SELECT string_agg(who, ',' ORDER BY id) FROM log"),
	join(',', @arrival), 'granted in arrival order');
is( $h->query_ok(
		"SELECT string_agg((token - $t0)::text, ',' ORDER BY id) FROM log"),
	'1,2,3',
	'local grants on one node: each token is one more than the last');
is_deeply([ children_become('q', []) ], [], 'no node left once all released');
is($try->query_ok("SELECT zk_lock_try('q')"), 't', 'free at once for the next');
is($try->query_ok("SELECT zk_lock_release('q')"), 't', 'released');

# ===========================================================================
note 'every way a local wait ends leaves no phantom holder';
# ===========================================================================

# After the holder of $name releases it, a third session must get it at once:
# no ended waiter stands in the way or has turned into a holder.
sub check_no_phantom
{
	my ($name, $holder, $what, @ended) = @_;
	is($holder->query_ok("SELECT zk_lock_release('$name')"), 't', "$what: holder releases");
	my $third = session($na);
	is($third->query_ok("SELECT zk_lock_try('$name')"),
		't', "$what: a third session gets the lock at once");
	is($_->query_ok("SELECT zk_lock_held('$name')"), 'f',
		"$what: the ended waiter does not hold it") foreach @ended;
	is($third->query_ok("SELECT zk_lock_release('$name')"), 't', "$what: released");
	$third->quit;
	is_deeply([ children_become($name, []) ], [], "$what: no node left");
	return;
}

my $s1 = session($na);
my $s2 = session($na);
foreach my $case (
	[ 'timeout_ms', undef, "SELECT zk_lock_acquire('%s', 300)", undef ],
	[ 'lock_timeout', "SET lock_timeout = '300ms'", undef, '55P03' ],
	[ 'statement_timeout', "SET statement_timeout = '300ms'", undef, '57014' ],
	[ 'pg_cancel_backend', 'cancel', undef, '57014' ],)
{
	my ($what, $set, $sql, $code) = @$case;
	my $name = "end_$what";
	is($s1->query_ok("SELECT zk_lock_acquire('$name')"), 't', "$what: holder acquires");
	my ($out, $err);
	if (!defined $set)
	{
		($out, $err) = $s2->query(sprintf($sql, $name));
		is($out, 'f', "$what: the local waiter is not granted");
	}
	elsif ($set eq 'cancel')
	{
		start_waiter($na, $s2, "SELECT zk_lock_acquire('$name')");
		is($na->safe_psql('postgres', "SELECT pg_cancel_backend(" . $s2->pid . ")"),
			't', "$what: cancel sent");
		($out, $err) = $s2->result;
	}
	else
	{
		$s2->query_ok($set);
		($out, $err) = $s2->query("SELECT zk_lock_acquire('$name')");
		$s2->query_ok('RESET lock_timeout; RESET statement_timeout');
	}
	is(sqlstate($err), $code, "$what: the wait ends with SQLSTATE $code")
	  if defined $code;
	is( $na->safe_psql(
			'postgres', "SELECT count(*) FROM zk_locks WHERE name = '$name'"),
		'1', "$what: only the holder is left in zk_locks");
	check_no_phantom($name, $s1, $what, $s2);
}

# a waiter terminated while waiting
{
	is($s1->query_ok("SELECT zk_lock_acquire('term')"), 't', 'holder acquires term');
	my $w = session($na);
	start_waiter($na, $w, "SELECT zk_lock_acquire('term')");
	is($na->safe_psql('postgres', "SELECT pg_terminate_backend(" . $w->pid . ")"),
		't', 'waiter terminated');
	my ($out, $err) = $w->result;
	is(sqlstate($err), '57P01', 'its session ends with 57P01');
	$w->quit;
	ok( $na->poll_query_until(
			'postgres', "SELECT count(*) = 1 FROM zk_locks WHERE name = 'term'"),
		'only the holder is left in zk_locks');
	check_no_phantom('term', $s1, 'after terminating a local waiter');
}

# a waiter leaving from the middle of the queue
{
	is($s1->query_ok("SELECT zk_lock_acquire('mid')"), 't', 'holder acquires mid');
	my $w1 = session($na);
	my $w2 = session($na);
	my $w3 = session($na);
	start_waiter($na, $_, "SELECT zk_lock_acquire('mid')") foreach ($w1, $w2, $w3);
	is($na->safe_psql('postgres', "SELECT pg_cancel_backend(" . $w2->pid . ")"),
		't', 'the middle waiter is cancelled');
	my ($out, $err) = $w2->result;
	is(sqlstate($err), '57014', 'its wait ends with 57014');
	ok(!$w1->done && !$w3->done, 'the others still wait');
	is($s1->query_ok("SELECT zk_lock_release('mid')"), 't', 'holder releases');
	is($w1->result, 't', 'the first waiter is granted');
	ok(!$w3->done, 'the third still waits');
	is($w2->query_ok("SELECT zk_lock_held('mid')"), 'f', 'the cancelled one does not hold it');
	is($w1->query_ok("SELECT zk_lock_release('mid')"), 't', 'the first releases');
	is($w3->result, 't', 'the third is granted');
	is($w3->query_ok("SELECT zk_lock_release('mid')"), 't', 'the third releases');
	is_deeply([ children_become('mid', []) ], [], 'no node left');
	$_->quit foreach ($w1, $w2, $w3);
}

# ===========================================================================
note 'the holder\'s exit and COMMIT hand the lock on';
# ===========================================================================
{
	my $x = session($na);
	is($x->query_ok("SELECT zk_lock_acquire('exit'), zk_lock_acquire('exit')"),
		't|t', 'holder acquires twice');
	start_waiter($na, $s2, "SELECT zk_lock_acquire('exit')");
	$x->quit;
	is($s2->result, 't', 'the local waiter is granted when the holder disconnects');
	$x = session($na);
	start_waiter($na, $x, "SELECT zk_lock_acquire('exit')");
	is($na->safe_psql('postgres', "SELECT pg_terminate_backend(" . $s2->pid . ")"),
		't', 'holder terminated');
	is($x->result, 't', 'the local waiter is granted when the holder is terminated');
	is($x->query_ok("SELECT zk_lock_release('exit')"), 't', 'released');
	$s2->quit;
	$s2 = session($na);

	$s1->query_ok('BEGIN');
	is($s1->query_ok("SELECT zk_lock_acquire_xact('xact')"), 't', 'transaction lock');
	start_waiter($na, $x, "SELECT zk_lock_acquire('xact')");
	$s1->query_ok('COMMIT');
	is($x->result, 't', 'the local waiter is granted at COMMIT');
	is($s1->query_ok("SELECT zk_lock_held('xact')"), 'f', 'not held after COMMIT');
	is($x->query_ok("SELECT zk_lock_release('xact')"), 't', 'released');
	is_deeply([ children_become($_, []) ], [], "no node left under $_")
	  foreach qw(exit xact);
	$x->quit;
}

# ===========================================================================
note 'bounded unfairness: a contender elsewhere waits at most the bound';
# ===========================================================================

# Each node gets a log of its grants of "hot" and a procedure that keeps
# taking and releasing it, logging every grant with its token.
foreach my $nd ($na, $nb)
{
	$nd->safe_psql('postgres', <<'SQL');
CREATE TABLE grants (id serial PRIMARY KEY, who text, token bigint,
                     at timestamptz);
CREATE TABLE ctl (stop boolean NOT NULL);
INSERT INTO ctl VALUES (false);
CREATE PROCEDURE churn(me text) LANGUAGE plpgsql AS $$
BEGIN
	LOOP
		EXIT WHEN (SELECT stop FROM ctl);
		PERFORM zk_lock_acquire('hot');
		INSERT INTO grants (who, token, at)
			VALUES (me, zk_lock_token('hot'), clock_timestamp());
		PERFORM pg_sleep(0.001);
		PERFORM zk_lock_release('hot');
		COMMIT;
	END LOOP;
END $$;
SQL
}
$names_used{hot} = 1;

# Child watches on the server: all watches (mntr) minus data watches
# (wchp lists only those).  In this section the only child watch is the
# one a holding instance keeps on the lock's parent to see contenders.
sub child_watches
{
	my ($total) = $zk->four(1, 'mntr') =~ /^zk_watch_count\s+(\d+)$/m;
	my $data = () = $zk->four(1, 'wchp') =~ /^\s+0x[0-9a-f]+$/mg;
	return ($total // 0) - $data;
}

# One round: on $home, a holder and three churners queued behind it; the
# contender queues (through $queue, which returns once it waits), then the
# holder lets go.  Returns the number of local grants after the holder's,
# on its node, i.e. made while the contender waited: (some of) the three
# churners queued before it, then those of their next requests that
# overtook it.  The instance counts a request as queued before the
# contender only if it came before the last listing of the parent that
# showed no contender, so the count is at most 3 + the limit.
sub round
{
	my ($what, $home, $queue, $granted, $release) = @_;
	my $holder = session($home);
	$home->safe_psql('postgres', 'UPDATE ctl SET stop = false');
	is($holder->query_ok("SELECT zk_lock_acquire('hot')"), 't', "$what: holder on its instance");
	my $tok = $holder->query_ok("SELECT zk_lock_token('hot')");
	$holder->query_ok(
		"INSERT INTO grants (who, token, at) VALUES ('holder', $tok, clock_timestamp())");
	my @churners = map { session($home) } 1 .. 3;
	my $i = 0;
	$_->send("CALL churn('c" . ++$i . "')") foreach @churners;
	ok( $home->poll_query_until('postgres',
			"SELECT count(*) = 3 FROM zk_locks WHERE name = 'hot' AND state = 'waiting'"),
		"$what: three churners wait inside the instance");
	my @before = children('hot');
	is(scalar @before, 1, "$what: one node, the instance's");

	$queue->();
	children_become('hot', 2);
	# the holding instance has listed the parent again since the contender's
	# node appeared: its child watch is set again ...
	ok(poll_until(sub { child_watches() >= 1 }), "$what: the instance sees the contender");
	# ... and a round trip of its worker orders us after that listing
	is($home->safe_psql('postgres', "SELECT zk_lock_try('sync'), zk_lock_release('sync')"),
		't|t', "$what: a round trip through the instance's worker");

	is($holder->query_ok("SELECT zk_lock_release('hot')"), 't', "$what: holder releases");
	ok($granted->(), "$what: the contender is granted");
	my $local = $home->safe_psql('postgres',
		"SELECT count(*) FROM grants WHERE who <> 'holder' AND token >> 10 = $tok >> 10");
	$release->();
	$home->safe_psql('postgres', 'UPDATE ctl SET stop = true');
	foreach my $c (@churners)
	{
		my ($out, $err) = $c->result;
		is($err, '', "$what: churner ends without error");
		$c->quit;
	}
	$holder->quit;
	is_deeply([ children_become('hot', []) ], [], "$what: no node left");
	note "$what: $local local grants while the contender waited";
	return $local;
}

# another instance (B) as the contender of A (limit 3)
my $bs = session($nb);
my $local = round(
	'instance B waits for A',
	$na,
	sub {
		start_waiter($nb, $bs,
			    "SELECT zk_lock_acquire('hot'); "
			  . "INSERT INTO grants (who, token, at) VALUES ('B', zk_lock_token('hot'), clock_timestamp())"
		);
	},
	sub { my ($out, $err) = $bs->result; return ($out // '') eq "t" && $err eq ''; },
	sub { $bs->query_ok("SELECT zk_lock_release('hot')"); });
cmp_ok($local, '<=', 3 + $LIMIT,
	"instance B got the lock after the 3 queued before it and at most $LIMIT overtaking grants on A");
cmp_ok($local, '>', 0, 'A handed the lock on locally meanwhile');

# Curator and Kazoo as the contender
my $curator = ZkInterop::curator($zk);
$local = round(
	'Curator waits for A',
	$na,
	sub {
		$curator->send(c1 => 'mutex-acquire /zklock/hot -1');
	},
	sub { return $curator->answer('c1') eq 'ok'; },
	sub { is($curator->ask(c1 => 'mutex-release'), 'ok', 'Curator releases'); });
cmp_ok($local, '<=', 3 + $LIMIT, "Curator got the lock after at most 3 + $LIMIT local grants on A");
$curator->quit;

my $kazoo = ZkInterop::kazoo($zk);
$local = round(
	'Kazoo waits for A',
	$na,
	sub {
		$kazoo->send(k1 => 'lock-acquire /zklock/hot -1');
	},
	sub { return $kazoo->answer('k1') eq 'ok'; },
	sub { is($kazoo->ask(k1 => 'lock-release'), 'ok', 'Kazoo releases'); });
cmp_ok($local, '<=', 3 + $LIMIT, "Kazoo got the lock after at most 3 + $LIMIT local grants on A");
$kazoo->quit;

# zklock.handoff_time = 0 on B: no local grant once A waits
my $as = session($na);
$local = round(
	'instance A waits for B (handoff_time 0)',
	$nb,
	sub {
		start_waiter($na, $as,
			    "SELECT zk_lock_acquire('hot'); "
			  . "INSERT INTO grants (who, token, at) VALUES ('A', zk_lock_token('hot'), clock_timestamp())"
		);
	},
	sub { my ($out, $err) = $as->result; return ($out // '') eq "t" && $err eq ''; },
	sub { $as->query_ok("SELECT zk_lock_release('hot')"); });
cmp_ok($local, '<=', 3,
	'with handoff_time 0, B gave the lock to A once at most the 3 queued before it were served');

# ===========================================================================
note 'fencing tokens strictly increase in grant order across instances';
# ===========================================================================
{
	# every grant of "hot" on both instances, in the order of the times
	# logged inside the critical sections (which never overlap)
	my @all;
	foreach my $nd ($na, $nb)
	{
		foreach my $row (split /\n/,
			$nd->safe_psql('postgres',
				"SELECT extract(epoch FROM at)::numeric(20,6), token, who FROM grants"))
		{
			my ($at, $token, $who) = split /\|/, $row;
			push @all, [ $at, $token, $nd->name . ":$who" ];
		}
	}
	@all = sort { $a->[0] <=> $b->[0] } @all;
	my $inversions = 0;
	my $local_grants = 0;
	for my $i (1 .. $#all)
	{
		$inversions++ if $all[$i][1] <= $all[ $i - 1 ][1];
		$local_grants++ if ($all[$i][1] & 1023) != 0;
	}
	cmp_ok(scalar @all, '>', 20, 'grants of "hot" logged on both instances: ' . scalar @all);
	cmp_ok($local_grants, '>', 0, "local grants among them: $local_grants");
	is($inversions, 0, 'each token is larger than the one before it');
	my @remote = grep { $_->[2] =~ /:(A|B)$/ } @all;
	is(scalar @remote, 2, 'both instances\' contenders are in the history');
}

# ===========================================================================
note 'retention: a released node kept for the instance, given up at once when anyone queues';
# ===========================================================================
# zklock.retain_time = 10s (its maximum) on A, so that a retention that is
# not given up at once shows as a wait longer than the contender's bound
# (about one round trip more than an acquire of a free lock; 2 s here, for
# a loaded machine).
$na->append_conf('postgresql.conf', "zklock.retain_time = '10s'");
$na->reload;
my $ra = session($na);
my $rb = session($nb);
# Once A's worker has the setting, a release keeps the node and the next
# acquire of the instance is granted on it: its token is not the node's
# first (token % 1024 > 0).
my $rtoken;
ok( poll_until(
		sub {
			$ra->query_ok("SELECT zk_lock_acquire('ret', 5000)") eq 't' or return 0;
			$rtoken = $ra->query_ok("SELECT zk_lock_token('ret')");
			$ra->query_ok("SELECT zk_lock_release('ret')");
			return $rtoken % 1024 > 0;
		}),
	'A gets its released node back without a new one');
my @kept = children('ret');
is(scalar @kept, 1, 'the released node stays in ZooKeeper');
is($ra->query_ok("SELECT zk_lock_acquire('ret', 5000)"), 't',
	'A acquires again');
cmp_ok($ra->query_ok("SELECT zk_lock_token('ret')"), '>', $rtoken,
	'on the same node, with a larger token');
is_deeply([ children('ret') ], \@kept, 'still the one node');
is($ra->query_ok("SELECT zk_lock_release('ret')"), 't', 'A releases');
is($rb->query_ok("SELECT zk_lock_try('ret')"), 'f',
	'a no-wait attempt on B finds the kept node taken');
my $rt0 = time;
is($rb->query_ok("SELECT zk_lock_acquire('ret', 5000)"), 't',
	'a waiting acquire on B is granted before the 10 s retention ends');
my $rwait = time - $rt0;
cmp_ok($rwait, '<', 2, 'A gives its kept node up at once for the waiting contender');
note sprintf('the contender on B waited %.3f s', $rwait);
my @now = children('ret');
ok(@now == 1 && $now[0] ne $kept[0], 'A gave its node up; B holds its own');
cmp_ok($rb->query_ok("SELECT zk_lock_token('ret')"), '>', $rtoken,
	"B's token is larger than A's");
is($rb->query_ok("SELECT zk_lock_release('ret')"), 't', 'B releases');
$na->append_conf('postgresql.conf', "zklock.retain_time = '10ms'");
$na->reload;
ok( poll_until(
		sub { $ra->query_ok('SHOW zklock.retain_time') eq '10ms' }),
	'A back to the default retention');
$_->quit foreach ($ra, $rb);

# ===========================================================================
note 'nothing left behind';
# ===========================================================================
$_->quit foreach ($h, $try, $s1, $s2, $bs, $as, values %w);
foreach my $nd ($na, $nb)
{
	ok($nd->poll_query_until('postgres', 'SELECT count(*) = 0 FROM zk_locks'),
		$nd->name . ': zk_locks is empty');
	ok(!$nd->log_contains(qr/PANIC|TRAP:|terminated by signal/),
		'no crash in the server log of ' . $nd->name);
}
foreach my $name (sort keys %names_used)
{
	is_deeply([ children_become($name, []) ], [], "/zklock/$name has no children");
}

$_->stop foreach ($na, $nb);
done_testing();

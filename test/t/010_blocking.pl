# 010_blocking.pl
#    The exclusive lock on one instance: blocking waits and what ends them
#    (release, timeout_ms, lock_timeout, statement_timeout, cancel, a
#    cancel racing the grant, the holder's exit, termination of the
#    waiter), transaction scope, FIFO order of waiters, and a waiter leaving
#    from the middle of the queue.  After every way a wait can end,
#    ZooKeeper must hold exactly the nodes of the sessions that still hold
#    or wait, and a cancelled waiter must never become a holder.
#
#    The instance runs with zklock.local_handoff = off: this is the test of
#    the node-per-session layout (each waiting session has a node of its own,
#    waits on its predecessor's, and leaves nothing when its wait ends).  The
#    same ways a wait can end, with hand-off on (the default: the instance's
#    waiters queue inside the instance behind its one node), are in
#    082_handoff.pl.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);

# A node we create: _c_<uuid v4>-lock-<10 digit sequence>
my $NODE_RE =
  qr/^_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-lock-\d{10}$/;

my $zk = ZkLockTest::zk_start();
my $node = ZkLockTest::pg_node('blocking', $zk, 'zklock.local_handoff' => 'off');

my @names_used;

# Children of lock $name's znode.
sub children
{
	my ($name) = @_;
	return ZkLockTest::zk_children($zk, "/zklock/$name");
}

# Poll until the children of lock $name are exactly @$want (an array ref)
# or, given a number, are that many; returns the last listing.
sub children_become
{
	my ($name, $want) = @_;
	return ZkLockTest::Session::children_become($zk, "/zklock/$name", $want);
}

# The SQLSTATE of the first ERROR or FATAL in psql's verbose error output.

sub session
{
	return ZkLockTest::Session->new($node, @_);
}

# Start a blocking acquire of $name in $s and wait until it waits on the
# zklock latch and its node exists ($nodes_then nodes in all); returns the
# waiter's node name.
sub start_waiter
{
	my ($s, $name, $nodes_then, $sql) = @_;
	my @before = children($name);
	$s->send($sql // "SELECT zk_lock_acquire('$name')");
	ZkLockTest::wait_for_extension_wait($node, $s);
	my @after = children_become($name, $nodes_then);
	my %old = map { $_ => 1 } @before;
	my @new = grep { !$old{$_} } @after;
	return $new[0] // '';
}

# After the holder of $name releases it, a third session must get it at
# once with zk_lock_try: nothing left by a cancelled waiter stands in the
# way, and no given-up request has turned into a holder.
sub check_no_phantom
{
	my ($name, $holder, $what) = @_;
	is($holder->query_ok("SELECT zk_lock_release('$name')"),
		't', "$what: holder releases");
	my $third = session();
	is($third->query_ok("SELECT zk_lock_try('$name')"),
		't', "$what: a third session gets the lock at once after the release");
	my @c = children_become($name, 1);
	is(scalar @c, 1, "$what: the third session's node is the only one");
	is($third->query_ok("SELECT zk_lock_release('$name')"),
		't', "$what: third session releases");
	$third->quit;
	is_deeply([ children_become($name, []) ], [], "$what: no node left");
	return;
}

# ---------------------------------------------------------------------------
note 'a waiter blocks while the lock is held and wakes on release';
push @names_used, 'blk';

my $s1 = session();
my $s2 = session();
my $s3 = session();

is($s1->query_ok("SELECT zk_lock_acquire('blk')"), 't', 'holder acquires');
my $token1 = $s1->query_ok("SELECT zk_lock_token('blk')");
like($token1, qr/^\d+$/, 'holder has a token');
my @c = children('blk');
is(scalar @c, 1, 'one node for the holder');
like($c[0] // '', $NODE_RE, 'holder node has a protected sequential name');
my $holder_node = $c[0] // '';

my $waiter_node = start_waiter($s2, 'blk', 2);
like($waiter_node, $NODE_RE, 'waiter created its node');
is( $node->safe_psql(
		'postgres',
		"SELECT wait_event_type, wait_event, state FROM pg_stat_activity WHERE pid = "
		  . $s2->pid),
	'Extension|' . ($node->pg_version >= 17 ? 'ZklockLock' : 'Extension') . '|active',
	'waiter shows wait_event_type Extension in pg_stat_activity');
ok(!$s2->done, 'waiter still waits once its node exists');

is($s3->query_ok("SELECT zk_lock_try('blk')"), 'f',
	'zk_lock_try returns false while the lock is held');
is_deeply(
	[ children_become('blk', [ sort $holder_node, $waiter_node ]) ],
	[ sort $holder_node, $waiter_node ],
	'zk_lock_try leaves no node behind');
is($s3->query_ok("SELECT zk_lock_held('blk')"), 'f',
	'the failed try does not hold');
ok(!$s2->done, 'waiter still waits after the failed try');

is($s1->query_ok("SELECT zk_lock_release('blk')"), 't', 'holder releases');
my ($out, $err) = $s2->result;
is($out, 't', 'waiter is granted after the release');
is($err, '', 'no error for the waiter');
is($s2->query_ok("SELECT zk_lock_held('blk')"), 't', 'waiter holds it now');
my $token2 = $s2->query_ok("SELECT zk_lock_token('blk')");
cmp_ok($token2, '>', $token1, 'the new holder has a larger token');
is($s1->query_ok("SELECT zk_lock_held('blk')"), 'f',
	'old holder does not hold it any more');
is_deeply([ children_become('blk', [$waiter_node]) ],
	[$waiter_node], 'only the new holder\'s node is left');
is($s2->query_ok("SELECT zk_lock_release('blk')"), 't', 'new holder releases');
is_deeply([ children_become('blk', []) ], [], 'no node left');

# ---------------------------------------------------------------------------
note 'timeout_ms';
push @names_used, 'tmo';

is($s1->query_ok("SELECT zk_lock_acquire('tmo')"), 't', 'holder acquires');
($holder_node) = children('tmo');

my $t0 = time;
($out, $err) = $s2->query("SELECT zk_lock_acquire('tmo', 1500)");
my $elapsed = time - $t0;
is($out, 'f', 'acquire with timeout_ms returns false when not granted');
is($err, '', 'a timeout is no error');
cmp_ok($elapsed, '>=', 1.45, 'it waited about timeout_ms (not less)');
# the wait ends at timeout_ms, then one round trip deletes the waiter's node;
# 2 s of headroom for a loaded machine
cmp_ok($elapsed, '<', 1.5 + 2, 'it returned within 2 s of timeout_ms');
is_deeply([ children_become('tmo', [$holder_node]) ],
	[$holder_node], 'the timed-out waiter left no node');
is($s2->query_ok("SELECT zk_lock_held('tmo')"), 'f',
	'the timed-out waiter does not hold it');

# a waiter with a timeout is granted if the lock comes free in time
start_waiter($s2, 'tmo', 2, "SELECT zk_lock_acquire('tmo', 120000)");
is($s1->query_ok("SELECT zk_lock_release('tmo')"), 't', 'holder releases');
is($s2->result, 't', 'waiter with timeout_ms is granted on release');
is($s2->query_ok("SELECT zk_lock_release('tmo')"), 't', 'and releases');
is_deeply([ children_become('tmo', []) ], [], 'no node left');

# a timed-out waiter must not have turned into a holder
is($s1->query_ok("SELECT zk_lock_acquire('tmo')"), 't', 'holder acquires');
is($s2->query_ok("SELECT zk_lock_acquire('tmo', 500)"),
	'f', 'waiter times out again');
children_become('tmo', 1);
check_no_phantom('tmo', $s1, 'after timeout_ms');

# ---------------------------------------------------------------------------
note 'lock_timeout, statement_timeout and cancel end a wait';

foreach my $case (
	[ 'lock_timeout', "SET lock_timeout = '1s'", '55P03', qr/lock timeout/ ],
	[
		'statement_timeout', "SET statement_timeout = '1s'",
		'57014', qr/statement timeout/
	],
	[ 'pg_cancel_backend', undef, '57014', qr/user request/ ])
{
	my ($what, $set, $code, $msg_re) = @$case;
	my $name = "end_$what";
	push @names_used, $name;

	is($s1->query_ok("SELECT zk_lock_acquire('$name')"),
		't', "$what: holder acquires");
	($holder_node) = children($name);

	if (defined $set)
	{
		$s2->query_ok($set);
		$t0 = time;
		($out, $err) = $s2->query("SELECT zk_lock_acquire('$name')");
		$elapsed = time - $t0;
		cmp_ok($elapsed, '>=', 0.95, "$what: the wait lasted the timeout");
		cmp_ok($elapsed, '<', 1 + 2, "$what: and ended within 2 s of it");
		$s2->query_ok("RESET lock_timeout; RESET statement_timeout");
	}
	else
	{
		my $wnode = start_waiter($s2, $name, 2);
		like($wnode, $NODE_RE, "$what: waiter's node exists before the cancel");
		is( $node->safe_psql('postgres',
				"SELECT pg_cancel_backend(" . $s2->pid . ")"),
			't',
			"$what: cancel sent");
		($out, $err) = $s2->result;
	}
	is(sqlstate($err), $code, "$what: the wait ends with SQLSTATE $code");
	like($err, $msg_re, "$what: with the usual message");
	is_deeply([ children_become($name, [$holder_node]) ],
		[$holder_node], "$what: the waiter's node is gone");
	is($s2->query_ok("SELECT zk_lock_held('$name')"),
		'f', "$what: the session stays usable and does not hold the lock");
	check_no_phantom($name, $s1, $what);
	is($s2->query_ok("SELECT zk_lock_held('$name')"),
		'f', "$what: the cancelled waiter never got the lock");
}

# ---------------------------------------------------------------------------
note 'a cancel racing the grant: granted and holding, or cancelled and not';
push @names_used, 'race';

# Each round: s1 holds, s2 waits (its node waits on s1's), then s1's release
# and a cancel of s2 are sent at an offset from each other: the cancel first
# (negative offsets: the cancel should win), nearly together (the race), or
# the release first (the grant should win).  Whatever the outcome, the
# waiter holds the lock exactly when its acquire returned true: a cancelled
# acquire (57014) must not leave the session holding, and a holding session
# must have been told so.  The offsets only spread the race (nothing waits
# on them); they are dense where the grant takes over from the cancel
# (about 1 ms after the release is sent, on an idle machine).  Both
# outcomes must occur: if one has not by the end of the list, rounds go on
# at offsets further out on its side.
my $canceller = session();
my %outcomes = (granted => 0, cancelled => 0);
my @offsets_ms = (
	-20, -5, -1, 0, 0.25, 0.5, 0.75, 1, 1.25, 1.5,
	1.75, 2, 2.5, 3, 4, 6, 8, 12, 25, 50);
my %further = (cancelled => [ -200, -1000 ], granted => [ 200, 1000 ]);
my $round = 0;

sub race_round
{
	my ($offset_ms) = @_;
	$round++;
	my $what = "round $round (cancel at ${offset_ms} ms)";
	is($s1->query_ok("SELECT zk_lock_acquire('race')"), 't', "$what: holder acquires");
	$s2->send("SELECT zk_lock_acquire('race')");
	ok( poll_until(
			sub {
				$s3->query_ok(
					"SELECT count(*) FROM zk_locks JOIN pg_stat_activity USING (pid) "
					  . "WHERE pid = ${\ $s2->pid } AND name = 'race' "
					  . "AND waiting_on IS NOT NULL AND wait_event_type = 'Extension'"
				) eq '1';
			},
			interval => 0.005),
		"$what: the waiter waits, its node behind the holder's");

	my $release = sub { $s1->send("SELECT zk_lock_release('race')") };
	my $cancel =
	  sub { $canceller->send("SELECT pg_cancel_backend(" . $s2->pid . ")") };
	my ($first, $second) =
	  $offset_ms < 0 ? ($cancel, $release) : ($release, $cancel);
	$first->();
	Time::HiRes::sleep(abs($offset_ms) / 1000);
	$second->();
	is($s1->result, 't', "$what: holder released");
	is($canceller->result, 't', "$what: cancel sent");

	my ($out, $err) = $s2->result;
	my $granted = ($out // '') eq 't' && $err eq '';
	my $cancelled = sqlstate($err) eq '57014';
	ok($granted || $cancelled, "$what: the waiter was granted or cancelled")
	  or diag "output \"" . ($out // '') . "\", error \"$err\"";
	my $held = $s2->query_ok("SELECT zk_lock_held('race')");
	is($held, $granted ? 't' : 'f',
		"$what: the waiter holds the lock exactly when its acquire returned true")
	  or diag "output \"" . ($out // '') . "\", error \"$err\", held $held";
	$outcomes{ $granted ? 'granted' : 'cancelled' }++ if $granted || $cancelled;

	if ($held eq 't')
	{
		is($s3->query_ok("SELECT zk_lock_try('race')"),
			'f', "$what: the waiter's holding excludes others");
		is($s2->query_ok("SELECT zk_lock_release('race')"),
			't', "$what: the waiter releases");
	}
	# a node left by the waiter would be ahead of any newcomer's
	is($s3->query_ok("SELECT zk_lock_try('race')"),
		't', "$what: once the waiter is done, another session gets it at once");
	is($s3->query_ok("SELECT zk_lock_release('race')"), 't', "$what: and releases");
	return;
}

race_round($_) foreach @offsets_ms;
foreach my $outcome (sort keys %further)
{
	foreach my $offset_ms (@{ $further{$outcome} })
	{
		last if $outcomes{$outcome} > 0;
		race_round($offset_ms);
	}
}
note "outcomes of $round rounds: "
  . join(', ', map { "$_ $outcomes{$_}" } sort keys %outcomes);
cmp_ok($outcomes{$_}, '>', 0, "some rounds ended with the waiter $_")
  foreach sort keys %outcomes;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM zk_locks WHERE name = 'race'"),
	'after the rounds nobody holds, waits for or releases the lock');
is_deeply([ children_become('race', []) ], [], 'and no node of it is left');
$canceller->quit;

# ---------------------------------------------------------------------------
note 'the holder\'s exit releases its locks';

# normal disconnect, with the lock taken twice (stacked)
push @names_used, 'exit';
my $h = session();
is($h->query_ok("SELECT zk_lock_acquire('exit'), zk_lock_acquire('exit')"),
	't|t', 'holder acquires twice');
my $wnode = start_waiter($s2, 'exit', 2);
$h->quit;
is($s2->result, 't', 'waiter is granted when the holder disconnects');
is_deeply([ children_become('exit', [$wnode]) ],
	[$wnode], 'the holder\'s node is gone');
is($s2->query_ok("SELECT zk_lock_release('exit')"), 't', 'waiter releases');
is_deeply([ children_become('exit', []) ], [], 'no node left');

# pg_terminate_backend of the holder
$h = session();
is($h->query_ok("SELECT zk_lock_acquire('exit')"), 't', 'holder acquires');
$wnode = start_waiter($s2, 'exit', 2);
is($node->safe_psql('postgres', "SELECT pg_terminate_backend(" . $h->pid . ")"),
	't', 'holder terminated');
is($s2->result, 't', 'waiter is granted when the holder is terminated');
is_deeply([ children_become('exit', [$wnode]) ],
	[$wnode], 'the terminated holder\'s node is gone');
$h->quit;
is($s2->query_ok("SELECT zk_lock_release('exit')"), 't', 'waiter releases');
is_deeply([ children_become('exit', []) ], [], 'no node left');

# ---------------------------------------------------------------------------
note 'a waiter terminated while waiting leaves nothing';
push @names_used, 'term';

is($s1->query_ok("SELECT zk_lock_acquire('term')"), 't', 'holder acquires');
($holder_node) = children('term');
my $w = session();
$wnode = start_waiter($w, 'term', 2);
like($wnode, $NODE_RE, 'waiter\'s node exists');
is($node->safe_psql('postgres', "SELECT pg_terminate_backend(" . $w->pid . ")"),
	't', 'waiter terminated');
($out, $err) = $w->result;
is(sqlstate($err), '57P01', 'the waiter\'s session ends with 57P01');
ok(!$w->alive, 'its psql has gone');
$w->quit;
is_deeply([ children_become('term', [$holder_node]) ],
	[$holder_node], 'the terminated waiter\'s node is gone');
check_no_phantom('term', $s1, 'after terminating a waiter');

# ---------------------------------------------------------------------------
note 'transaction scope';
push @names_used, 'xact';

foreach my $end ('COMMIT', 'ROLLBACK')
{
	$s1->query_ok('BEGIN');
	is($s1->query_ok("SELECT zk_lock_acquire_xact('xact')"),
		't', "$end: transaction lock acquired");
	is($s1->query_ok("SELECT zk_lock_held('xact')"), 't', "$end: held");
	start_waiter($s2, 'xact', 2);
	ok(!$s2->done, "$end: waiter waits while the transaction runs");
	$s1->query_ok($end);
	is($s2->result, 't', "$end: waiter is granted at $end");
	is($s1->query_ok("SELECT zk_lock_held('xact')"),
		'f', "$end: not held after $end");
	is($s2->query_ok("SELECT zk_lock_release('xact')"), 't',
		"$end: waiter releases");
	is_deeply([ children_become('xact', []) ], [], "$end: no node left");
}

# a statement outside a transaction block: released when it ends
is($s1->query_ok("SELECT zk_lock_acquire_xact('xact')"),
	't', 'transaction lock in an implicit transaction');
is($s3->query_ok("SELECT zk_lock_try('xact')"),
	't', 'released at the end of the statement');
is($s3->query_ok("SELECT zk_lock_release('xact')"), 't', 'released again');

# ROLLBACK TO SAVEPOINT releases what was taken after the savepoint ...
$s1->query_ok('BEGIN; SAVEPOINT sp');
is($s1->query_ok("SELECT zk_lock_acquire_xact('xact')"),
	't', 'transaction lock taken inside a savepoint');
start_waiter($s2, 'xact', 2);
$s1->query_ok('ROLLBACK TO SAVEPOINT sp');
is($s2->result, 't',
	'waiter is granted at ROLLBACK TO SAVEPOINT, transaction still open');
is($s1->query_ok("SELECT zk_lock_held('xact')"),
	'f', 'not held after ROLLBACK TO SAVEPOINT');
$s1->query_ok('COMMIT');
is($s2->query_ok("SELECT zk_lock_release('xact')"), 't', 'waiter releases');
is_deeply([ children_become('xact', []) ], [], 'no node left');

# ... but keeps what was taken before it, and what a released savepoint took
$s1->query_ok('BEGIN');
is($s1->query_ok("SELECT zk_lock_acquire_xact('xact')"),
	't', 'transaction lock before the savepoint');
$s1->query_ok('SAVEPOINT sp');
is($s1->query_ok("SELECT zk_lock_acquire_xact('xact')"),
	't', 'taken again inside the savepoint');
$s1->query_ok('ROLLBACK TO SAVEPOINT sp');
is($s1->query_ok("SELECT zk_lock_held('xact')"),
	't', 'still held after ROLLBACK TO SAVEPOINT');
is($s3->query_ok("SELECT zk_lock_try('xact')"),
	'f', 'another session still cannot take it');
$s1->query_ok('RELEASE SAVEPOINT sp; SAVEPOINT sp2');
is($s1->query_ok("SELECT zk_lock_acquire_xact('xact2')"),
	't', 'second lock taken inside another savepoint');
push @names_used, 'xact2';
$s1->query_ok('RELEASE SAVEPOINT sp2');
is($s3->query_ok("SELECT zk_lock_try('xact2')"),
	'f', 'lock of a released savepoint is held by the transaction');
start_waiter($s2, 'xact', 2);
$s1->query_ok('COMMIT');
is($s2->result, 't', 'waiter is granted at COMMIT');
is($s3->query_ok("SELECT zk_lock_try('xact2')"),
	't', 'the released savepoint\'s lock ends with the transaction too');
is($s3->query_ok("SELECT zk_lock_release_all()"), '1', 'third releases');
is($s2->query_ok("SELECT zk_lock_release('xact')"), 't', 'waiter releases');
is_deeply([ children_become('xact', []) ], [], 'no node left');

# ---------------------------------------------------------------------------
note 'waiters are granted in arrival order';
push @names_used, 'fifo';

$s1->query_ok('CREATE TABLE fifo_log (id serial PRIMARY KEY, waiter text)');
is($s1->query_ok("SELECT zk_lock_acquire('fifo')"), 't', 'holder acquires');
my %w = map { $_ => session() } qw(a b c);

# arrival order differs from the order the sessions were opened in
my @arrival = qw(c a b);
my %wnode;
my $n = 1;
foreach my $k (@arrival)
{
	$n++;
	$wnode{$k} = start_waiter(
		$w{$k}, 'fifo', $n,
		"SELECT zk_lock_acquire('fifo'); "
		  . "INSERT INTO fifo_log (waiter) VALUES ('$k'); "
		  . "SELECT zk_lock_release('fifo')");
}
my @by_seq =
  map { $_->[0] }
  sort { $a->[1] cmp $b->[1] }
  map { [ $_, $wnode{$_} =~ /(\d{10})$/ ] } @arrival;
is_deeply(\@by_seq, \@arrival, 'sequence numbers follow arrival order');
is($s1->query_ok('SELECT count(*) FROM fifo_log'), '0', 'nobody got in yet');
ok(!$w{$_}->done, "waiter $_ still waits") foreach @arrival;

is($s1->query_ok("SELECT zk_lock_release('fifo')"), 't', 'holder releases');
foreach my $k (@arrival)
{
	($out, $err) = $w{$k}->result;
	is($out, "t\nt", "waiter $k was granted and released");
	is($err, '', "waiter $k had no error");
	$w{$k}->quit;
}
is($s1->query_ok('SELECT string_agg(waiter, \',\' ORDER BY id) FROM fifo_log'),
	join(',', @arrival), 'granted in arrival order');

# ---------------------------------------------------------------------------
note 'a waiter leaving from the middle of the queue lets nobody in';
push @names_used, 'mid';

is($s1->query_ok("SELECT zk_lock_acquire('mid')"), 't', 'holder acquires');
($holder_node) = children('mid');
my $w1 = session();
my $w2 = session();
my $w1node = start_waiter($w1, 'mid', 2);
my $w2node = start_waiter($w2, 'mid', 3);
is($node->safe_psql('postgres', "SELECT pg_cancel_backend(" . $w1->pid . ")"),
	't', 'first waiter cancelled');
($out, $err) = $w1->result;
is(sqlstate($err), '57014', 'first waiter\'s wait ends with 57014');
is_deeply(
	[ children_become('mid', [ sort $holder_node, $w2node ]) ],
	[ sort $holder_node, $w2node ],
	'first waiter\'s node is gone');
# the second waiter watched the first one's node and has looked again by
# now; it must watch the holder instead of taking the lock
ok(!$w2->done, 'second waiter still waits while the holder holds');
# (the worker handles the second waiter's new listing before the try's,
# so by the time the try has failed the second waiter has been decided on)
is($s3->query_ok("SELECT zk_lock_try('mid')"), 'f', 'the lock is still taken');
is( $node->safe_psql(
		'postgres',
		"SELECT wait_event_type FROM pg_stat_activity WHERE pid = " . $w2->pid),
	'Extension',
	'second waiter still waits on the zklock latch');
ok(!$w2->done, 'second waiter has no result');
is($s1->query_ok("SELECT zk_lock_release('mid')"), 't', 'holder releases');
is($w2->result, 't', 'second waiter is granted on the release');
is_deeply([ children_become('mid', [$w2node]) ],
	[$w2node], 'only the second waiter\'s node is left');
is($w1->query_ok("SELECT zk_lock_held('mid')"), 'f',
	'the cancelled first waiter does not hold it');
is($w2->query_ok("SELECT zk_lock_release('mid')"), 't', 'released');
$_->quit foreach ($w1, $w2);

# ---------------------------------------------------------------------------
note 'nothing left behind';

$_->quit foreach ($s1, $s2, $s3);
foreach my $name (@names_used)
{
	is_deeply([ children_become($name, []) ], [], "/zklock/$name has no children");
}
ok(!$node->log_contains('could not delete node'),
	'no failed deletes in the server log');

ok(!$node->log_contains(qr/PANIC|TRAP:|terminated by signal/),
	'no crash in the server log of ' . $node->name);

$node->stop;
done_testing();


# 083_linearizable.pl
#    A linearizability check of the exclusive lock, as Jepsen's checkers do.
#
#    Seven clients call zk_lock_acquire (timeout 20-80 ms), zk_lock_try and
#    zk_lock_release at random on one lock: three sessions on each of two
#    PostgreSQL instances sharing one ZooKeeper, and a Curator
#    InterProcessMutex (acquire(0) as its try) in one JVM kept running for
#    the whole run.  A client that does not hold tries (60 %) or acquires;
#    one that holds releases at once or after 0-5 ms.  Between calls it
#    thinks 0-5 ms, or half of the time pauses up to 60 ms: without quiet
#    moments every failed try would overlap someone's call, and the check
#    below could excuse them all.
#
#    Each call is synchronous; its invocation and completion are taken just
#    around it on CLOCK_MONOTONIC (one clock for the whole machine; the
#    PostgreSQL clients are child processes of this test with a psql session
#    each, the Curator client is the test process).  The history is checked
#    against a single mutex (test/perl/ZkLinCheck.pm): no two holdings
#    overlap for certain (acquire's completion to release's invocation), and
#    every try that returned f or acquire that timed out overlapped
#    something that could have been in its way: another client's holding
#    (acquire's invocation to release's completion), another client's
#    acquire call, or another client's failed try that is itself excused.
#    The violations are printed with the calls around them; the whole
#    history is written to tmp_check/log/083_linearizable_history.tsv.
#
#    Among other things a release must be visible when it returns: a try
#    elsewhere right after it must not find the lock taken.  The one timing
#    bound assumed: an acquire of a free lock is granted within its timeout
#    (20 ms or more, for two loopback round trips).
#
#    Instance b reaches ZooKeeper through the fault proxy
#    (test/zkfaultproxy); meanwhile a fault client (a child process) injects
#    network faults on b's connection one after another: the reply of its
#    next create, delete or multi withheld after the server applied it
#    (then the connection is reset), the connection cut, its reconnects
#    refused for a moment.  Each fault goes into the history as a window
#    from its injection until b has reconnected: overlaps are checked as
#    without faults; a failed attempt or an error within a window is
#    excused (availability, not safety).
#
#    The checker is first run on hand-written histories: a legal one passes,
#    overlapping holdings, a lone failed try, a lone timed-out acquire, a
#    chain of failed tries with nothing at its start and a failed release
#    are flagged; a timed-out acquire or an error during a network fault is
#    not, overlapping holdings during one are.
#
#    ZKLOCK_LIN_SEED=N repeats a run's random choices (printed as "seed").

use strict;
use warnings;

use IO::Handle;
use IO::Select;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);

use ZkLinCheck;
use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkInterop;
use ZkFault qw(zk_status_of poll_status);
use ZkFaultProxy;

my $LOCK = 'lin';
my $OPS = 150;          # calls per client, then a last release if held
my $P_TRY = 0.6;        # share of zk_lock_try among the attempts
my $RUN_LIMIT = 40;     # seconds: no new call after this
my $SEED = $ENV{ZKLOCK_LIN_SEED} // int(rand(1 << 30));

# ---------------------------------------------------------------------------
note 'the checker on hand-written histories';
# ---------------------------------------------------------------------------

# history from [client, op, inv, comp, result] with times in ms
sub hist
{
	return [
		map {
			my ($c, $op, $i, $o, $r) = @$_;
			{ client => $c, op => $op, inv => $i / 1000, comp => $o / 1000, result => $r }
		} @_
	];
}

sub kinds
{
	my ($h) = @_;
	my $r = ZkLinCheck::check($h);
	return join ',', map { "$_->{kind}:" . join('+', map { "$_->{client}/$_->{op}" } @{ $_->{ops} }) }
	  @{ $r->{violations} };
}

my $legal = hist(
	[ 'a', 'acquire', 0,    1,    't' ],
	[ 'b', 'try',     2,    3,    'f' ],    # a holds
	[ 'e', 'acquire', 3,    9,    'f' ],    # a, then b hold
	[ 'b', 'acquire', 4,    8,    't' ],    # granted after a's release began
	[ 'a', 'release', 5,    6,    't' ],
	[ 'c', 'try',     10.5, 12,   'f' ],    # b's release still running
	[ 'b', 'release', 10,   11,   't' ],
	[ 'd', 'try',     11.5, 12.5, 'f' ],    # c's failed try may be ahead
	[ 'a', 'try',     13,   14,   't' ],
	[ 'a', 'release', 15,   16,   't' ]);
is(kinds($legal), '', 'checker: a legal history passes');

my @overlapping = (
	[ 'a', 'acquire', 0,  1,  't' ],
	[ 'b', 'try',     2,  3,  't' ],
	[ 'b', 'release', 5,  6,  't' ],
	[ 'a', 'release', 10, 11, 't' ]);
is(kinds(hist(@overlapping)), 'overlap:a/acquire+a/release+b/try+b/release',
	'checker: overlapping holdings are flagged');

is( kinds(
		hist(
			[ 'a', 'acquire', 0, 1, 't' ],
			[ 'a', 'release', 2, 3, 't' ],
			[ 'b', 'try',     4, 5, 'f' ])),
	'failed try:b/try',
	'checker: a failed try with nobody in its way is flagged');

is( kinds(
		hist(
			[ 'a', 'try',     0, 1,  't' ],
			[ 'a', 'release', 2, 3,  't' ],
			[ 'b', 'acquire', 4, 25, 'f' ])),
	'timed-out acquire:b/acquire',
	'checker: a timed-out acquire with nobody in its way is flagged');

is( kinds(
		hist(
			[ 'a', 'acquire', 0,   1, 't' ],
			[ 'a', 'release', 2,   3, 't' ],
			[ 'b', 'try',     4,   5, 'f' ],
			[ 'c', 'try',     4.5, 6, 'f' ])),
	'failed try:b/try,failed try:c/try',
	'checker: failed tries excusing each other, with nothing at the start, are flagged');

is( kinds(
		hist(
			[ 'a', 'acquire', 0, 1, 't' ],
			[ 'a', 'release', 2, 3, 'f' ])),
	'bad release:a/acquire+a/release',
	'checker: a release of a holding returning f is flagged');

is( kinds(
		hist(
			[ 'n', 'fault',   3, 30, 't' ],
			[ 'a', 'try',     0, 1,  't' ],
			[ 'a', 'release', 2, 3,  't' ],
			[ 'b', 'acquire', 4, 25, 'f' ],
			[ 'c', 'try',     26, 27, 'f' ])),
	'',
	'checker: failed attempts during a network fault are excused');

my $err_in_fault = hist([ 'n', 'fault', 0, 10, 't' ], [ 'a', 'try', 1, 2, 't' ]);
$err_in_fault->[1]{err} = 'could not reach ZooKeeper';
is(kinds($err_in_fault), '', 'checker: an error during a network fault is excused');

is( kinds(hist([ 'n', 'fault', 0, 20, 't' ], @overlapping)),
	'overlap:a/acquire+a/release+b/try+b/release',
	'checker: overlapping holdings during a network fault are flagged');

# ---------------------------------------------------------------------------
note 'the live run';
# ---------------------------------------------------------------------------

my $T0 = Time::HiRes::time;
my $zk = ZkLockTest::zk_start();
my $proxy = ZkFaultProxy->start($zk);
my $na = ZkLockTest::pg_node('lin_a', $zk);
my $nb = ZkLockTest::pg_node('lin_b', $proxy->hosts);
note "seed $SEED";

sub now { return clock_gettime(CLOCK_MONOTONIC); }

# One client's run: $call->($op, $timeout_ms) makes one call and returns
# (result, error); returns the history.
sub run_client
{
	my ($name, $call) = @_;
	my (@hist, $held);
	my $stop = now() + $RUN_LIMIT;
	my $step = sub {
		my ($op, $arg) = @_;
		my $inv = now();
		my ($res, $err) = $call->($op, $arg);
		my $comp = now();
		push @hist,
		  {
			client => $name,
			op     => $op,
			arg    => $arg,
			inv    => $inv,
			comp   => $comp,
			result => $res // '',
			err    => ($err // '') =~ s/\s+/ /gr    # one line of the history
		  };
		return !$err;
	};
	for (1 .. $OPS)
	{
		last if now() > $stop;
		if ($held)
		{
			# release right after, or after a short hold
			Time::HiRes::sleep(rand(0.005)) if rand() < 0.5;
			last unless $step->('release');
			$held = 0;
		}
		else
		{
			# think 0-5 ms, or (half of the time) pause up to 60 ms
			Time::HiRes::sleep(rand() < 0.5 ? rand(0.060) : rand(0.005));
			my ($op, $arg) = rand() < $P_TRY ? ('try') : ('acquire', 20 + int(rand(61)));
			last unless $step->($op, $arg);
			$held = $hist[-1]{result} eq 't';
		}
	}
	$step->('release') if $held && !$hist[-1]{err};
	return @hist;
}

sub pg_call
{
	my ($s, $op, $arg) = @_;
	my $sql =
	    $op eq 'try'     ? "SELECT zk_lock_try('$LOCK')"
	  : $op eq 'acquire' ? "SELECT zk_lock_acquire('$LOCK', $arg)"
	  :                    "SELECT zk_lock_release('$LOCK')";
	my ($out, $err) = $s->query($sql);
	return ($out, $err) if defined $out && $out =~ /^[tf]$/ && $err eq '';
	return (undef, ($err // 'timed out') . ($out ? " (printed \"$out\")" : ''));
}

my $curator_path = "/zklock/$LOCK";

sub curator_call
{
	my ($cur, $op, $arg) = @_;
	my $cmd =
	    $op eq 'try'     ? "mutex-acquire $curator_path 0"
	  : $op eq 'acquire' ? "mutex-acquire $curator_path $arg"
	  :                    'mutex-release';
	my $answer = $cur->ask(c1 => $cmd) // 'no answer';
	return ('t') if $answer eq 'ok';
	return ('f') if $answer eq 'timeout' && $op ne 'release';
	return (undef, "Curator: $answer");
}

my @FIELDS = qw(client op arg inv comp result err);

# The clients are child processes: each opens its session (on $node), says
# it is ready, waits for the start (the parent closes the pipe), runs
# $run->($session) and writes the operations it returns to a file.  They
# leave by POSIX::_exit, so that no END block of this test (which would stop
# the servers) runs in them.
my $dir = PostgreSQL::Test::Utils::tempdir('lin');
pipe(my $go_r, my $go_w) or die "pipe: $!";
pipe(my $ready_r, my $ready_w) or die "pipe: $!";
my @kids;

sub spawn
{
	my ($name, $node, $seed, $run) = @_;
	STDOUT->flush;
	STDERR->flush;
	my $pid = fork;
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		close $go_w;
		close $ready_r;
		srand($seed);
		my $rc = 0;
		open my $fh, '>', "$dir/$name" or POSIX::_exit(2);
		eval {
			my $s = ZkLockTest::Session->new($node);
			$s->query_ok("SET application_name = '$name'");
			syswrite $ready_w, "$name\n";
			close $ready_w;
			my $buf;
			sysread $go_r, $buf, 1;    # end of file: go
			foreach my $op ($run->($s))
			{
				print $fh join("\t", map { $op->{$_} // '' } @FIELDS), "\n";
			}
			$s->quit;
			1;
		} or do {
			my $e = $@ =~ s/\s+/ /gr;
			print $fh "!\t$e\n";
			$rc = 1;
		};
		close $fh;
		POSIX::_exit($rc);
	}
	push @kids, [ $pid, $name ];
	return;
}

# Network faults on b's connection, one after another, each written as an
# operation "fault" spanning its injection and b's reconnection after it
# (in its session, or in a new one).
sub inject_faults
{
	my ($s, $stop, $stop_file) = @_;
	# each returns whether it broke a connection
	my $withhold = sub {
		my ($op) = @_;
		$proxy->withhold($op);
		return 1 if $proxy->wait_fired(timeout => 0.3);
		# a withheld request that b did not send soon: none
		$proxy->disarm;
		return $proxy->wait_fired(timeout => 0);
	};
	my $cut = sub { return ($proxy->cut =~ /cut=(\d+)/)[0] > 0; };
	my @kinds = (
		[ 'withhold delete', sub { $withhold->('delete') } ],
		[ 'withhold create', sub { $withhold->('anycreate') } ],
		[ 'withhold multi',  sub { $withhold->('multi') } ],
		[ 'cut',             $cut ],
		[
			'refuse',
			sub { $proxy->refuse(sprintf('%.2f', 0.1 + rand 0.3)); $cut->() }
		]);
	my @hist;
	while (now() < $stop && !-e $stop_file)
	{
		Time::HiRes::sleep(0.05 + rand 0.25);    # the faults' pace
		my ($what, $do) = @{ $kinds[ int rand @kinds ] };
		my $st0 = zk_status_of($s);
		my $inv = now();
		next unless $do->();
		poll_status(
			$s,
			sub {
				$_[0]{state} eq 'connected'
				  && ($_[0]{reconnects} > $st0->{reconnects}
					|| $_[0]{session_id} ne $st0->{session_id});
			},
			timeout => 30)
		  or die "b did not reconnect after a fault ($what): zk_status "
		  . join(' ', %{ zk_status_of($s) }) . '; proxy '
		  . join(' ', %{ $proxy->status });
		push @hist,
		  {
			client => 'net',
			op     => 'fault',
			arg    => $what,
			inv    => $inv,
			comp   => now(),
			result => 't',
			err    => ''
		  };
	}
	$proxy->disarm;
	$proxy->accept;
	return @hist;
}

my $k = 0;
foreach my $spec ([ $na, 'a1' ], [ $na, 'a2' ], [ $na, 'a3' ],
	[ $nb, 'b1' ], [ $nb, 'b2' ], [ $nb, 'b3' ])
{
	my ($node, $name) = @$spec;
	spawn($name, $node, $SEED + ++$k,
		sub { my ($s) = @_; return run_client($name, sub { pg_call($s, @_) }); });
}
spawn('net', $nb, $SEED + 100,
	sub { return inject_faults($_[0], now() + $RUN_LIMIT, "$dir/stop"); });
close $ready_w;
close $go_r;

my $sel = IO::Select->new($ready_r);
my $ready = '';
my $ready_by = Time::HiRes::time + $PostgreSQL::Test::Utils::timeout_default;
while (($ready =~ tr/\n//) < @kids && Time::HiRes::time < $ready_by)
{
	next unless $sel->can_read(1);
	sysread($ready_r, $ready, 4096, length $ready) or last;
}
is($ready =~ tr/\n//, scalar @kids, 'the PostgreSQL clients and the fault client are connected');

my $curator = ZkInterop::curator($zk);
srand($SEED);
close $go_w;    # go
my @history = run_client('c1', sub { curator_call($curator, @_) });

# the clients stop within $RUN_LIMIT s, plus one call, plus the last
# release; then the fault client, told to, after its current fault
my %left = map { $_->[0] => $_->[1] } @kids;
foreach my $who ('clients', 'net')
{
	poll_until(
		sub {
			foreach my $pid (keys %left)
			{
				delete $left{$pid} if waitpid($pid, POSIX::WNOHANG()) == $pid;
			}
			return !grep { ($who eq 'net') == ($_ eq 'net') } values %left;
		},
		timeout => $RUN_LIMIT + $PostgreSQL::Test::Utils::timeout_default,
		interval => 0.05);
	next if $who eq 'net';
	open my $stop, '>', "$dir/stop" or die "$dir/stop: $!";
	close $stop;
}
ok(!%left, 'the PostgreSQL clients and the fault client have finished')
  or diag 'still running: ' . join ' ', values %left;
kill 'KILL', keys %left;

foreach my $kid (@kids)
{
	my ($pid, $name) = @$kid;
	my @lines;
	if (open my $fh, '<', "$dir/$name")
	{
		chomp(@lines = <$fh>);
	}
	my @bad = grep { /^!/ } @lines;
	ok(!@bad && @lines, "client $name ran") or diag "client $name: @bad";
	foreach (grep { !/^!/ } @lines)
	{
		my %op;
		@op{@FIELDS} = split /\t/, $_, -1;
		$op{arg} = undef if $op{arg} eq '';
		push @history, \%op;
	}
}
is($curator->quit, 0, 'Curator driver exits cleanly');
$ready_r->close;

my $hfile = "$PostgreSQL::Test::Utils::log_path/083_linearizable_history.tsv";
if (open my $hf, '>', $hfile)
{
	foreach my $op (sort { $a->{inv} <=> $b->{inv} } @history)
	{
		print $hf join("\t", map { $op->{$_} // '' } @FIELDS), "\n";
	}
	close $hf;
}
my $r = ZkLinCheck::check(\@history);
my %st = %{ $r->{stats} };
note 'calls: ' . join(', ', map { "$_: $st{$_}" } sort keys %st);
my %faults;
$faults{ $_->{arg} }++ foreach grep { $_->{op} eq 'fault' } @history;
note 'network faults on b: ' . join(', ', map { "$_: $faults{$_}" } sort keys %faults);
my %held_by;
$held_by{ $_->{client} }++ foreach @{ $r->{holdings} };
note 'holdings per client: ' . join(', ', map { "$_: $held_by{$_}" } sort keys %held_by);
my @t = sort { $a <=> $b } map { ($_->{inv}, $_->{comp}) } @history;
note sprintf('%d calls in %.1f s', scalar @history, @t ? $t[-1] - $t[0] : 0);

cmp_ok(scalar @history, '>=', 300, 'enough calls to mean something');
is(join(',', sort keys %held_by), 'a1,a2,a3,b1,b2,b3,c1', 'every client held the lock');
cmp_ok($st{'try f'} // 0, '>=', 10, 'tries found the lock taken often enough to check them');
is(scalar @{ $r->{violations} }, 0, 'the history is linearizable for one mutex')
  or diag ZkLinCheck::report($r, \@history);

# ---------------------------------------------------------------------------
note 'nothing is left';
# ---------------------------------------------------------------------------

foreach my $nd ($na, $nb)
{
	ok($nd->poll_query_until('postgres', 'SELECT count(*) = 0 FROM zk_locks'),
		$nd->name . ': zk_locks empty after the clients ended');
}
my @nodes;
ok(poll_until(sub { @nodes = ZkLockTest::zk_children($zk, "/zklock/$LOCK"); !@nodes },
		timeout => 30),
	'no lock node left in ZooKeeper')
  or diag "left: @nodes";
note sprintf('083_linearizable took %.0f s', Time::HiRes::time - $T0);

$_->stop foreach ($na, $nb);
done_testing();

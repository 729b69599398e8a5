# 095_claims_checker.pl
#    A checker of once-per-slot job claims under network faults.
#
#    Three instances sharing one ZooKeeper, three backends each, claim the
#    slots of one job in a moving window (explicit slot timestamps, a few
#    slots open at a time, so that claimers of all instances meet on each
#    slot): each attempt is one transaction that claims a slot with the
#    waiting form (zk_job_claim(job, slot, NULL): it waits for the outcome
#    of another open or unsettled claim of the slot), writes a row of work
#    for it (slot, instance, backend) only when the claim was granted, and
#    ends at random with COMMIT, ROLLBACK, an error and COMMIT (which rolls
#    back), or a COMMIT that fails late, after zklock's pre-commit work
#    may have run: a deferred constraint trigger that takes a moment and
#    raises, or a postgres_fdw foreign table (used before the claim) whose
#    remote table's deferred trigger does the same at the remote COMMIT.
#    The instances differ: c's wall clock is 30 s ahead (libfaketime), and
#    their zklock.session_timeout are 8, 4 and 6 s.  Instance a reaches
#    ZooKeeper through the
#    fault proxy (test/zkfaultproxy), which meanwhile, every 0.15 - 0.75 s,
#    does one of: withhold the reply of a's next delete, multi or create of
#    a claim node (the server applies it, the reply is lost and the
#    connection reset), cut a's connection, refuse a's reconnects for up to
#    1.5 s (within a's 8 s session).
#
#    Then, once the instances have settled, for every slot: at most one
#    committed run, and exactly one when an attempt of b or c (never
#    faulted) that meant to commit did so without an error (whatever its
#    claim answered); a committed node (1.4: "final") exactly when a run
#    committed, naming the instance whose run it was; no ephemeral claim
#    node left.
#
#    Bounded by time (30 s of claiming; ZKLOCK_CLAIMS_CHECKER_SECONDS sets
#    another) and by attempts.

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
use ZkFault qw(poll_status);
use ZkFaultProxy;
use ZkClaimTest qw(faketime_restart);

my $T0 = time;
my $DURATION = $ENV{ZKLOCK_CLAIMS_CHECKER_SECONDS} // 30;
my $MAX_ATTEMPTS = 60000;
my $BACKENDS = 3;
my $WINDOW = 3;         # slots open at a time
my $ADVANCE = 8;        # attempts per slot the window moves by
my $JOB = 'checker';

my $zk = ZkLockTest::zk_start();
my $proxy = ZkFaultProxy->start($zk);
my %node;
$node{a} = ZkLockTest::pg_node('chk_a', $proxy->hosts,
	cluster_name => 'chk_a', 'zklock.session_timeout' => 8000);
$node{b} = ZkLockTest::pg_node('chk_b', $zk, cluster_name => 'chk_b',
	'zklock.session_timeout' => 4000);
$node{c} = ZkLockTest::pg_node('chk_c', $zk, cluster_name => 'chk_c',
	'zklock.session_timeout' => 6000);
faketime_restart($node{c}, "$PostgreSQL::Test::Utils::tmp_check/faketime_offset", 30);
my @names = sort keys %node;
my %next_of = (a => 'b', b => 'c', c => 'a');
foreach my $n (@names)
{
	# work rows of a late-failing attempt fail its COMMIT: a deferred
	# trigger that takes a moment, then raises; remote_step does the same
	# at the remote COMMIT of the instance next to it
	$node{$n}->safe_psql('postgres', q{
CREATE TABLE work (slot timestamptz NOT NULL, backend integer NOT NULL,
	fail_late boolean NOT NULL DEFAULT false);
CREATE TABLE remote_step (k int);
CREATE FUNCTION fails_late() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_TABLE_NAME = 'work' THEN
		IF NOT NEW.fail_late THEN
			RETURN NULL;
		END IF;
	END IF;
	PERFORM pg_sleep(0.05 + random() * 0.3);
	RAISE EXCEPTION 'the job fails late';
END $$;
CREATE CONSTRAINT TRIGGER fails_late AFTER INSERT ON work
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fails_late();
CREATE CONSTRAINT TRIGGER fails_late AFTER INSERT ON remote_step
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fails_late();
CREATE EXTENSION postgres_fdw;
});
	my $r = $node{ $next_of{$n} };
	$node{$n}->safe_psql('postgres',
		'CREATE SERVER next FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '
		  . "'${\ $r->host }', port '${\ $r->port }', dbname 'postgres'); "
		  . 'CREATE USER MAPPING FOR CURRENT_USER SERVER next; '
		  . 'CREATE FOREIGN TABLE remote_step_f (k int) SERVER next '
		  . "OPTIONS (table_name 'remote_step')");
}

# slot k: minute k after the base
sub slot_ts
{
	my ($k) = @_;
	return sprintf('2026-05-%02d %02d:%02d+00',
		1 + int($k / 1440), int($k / 60) % 24, $k % 60);
}

# slot k's claim node name
sub slot_name_of
{
	my ($k) = @_;
	return sprintf('2026-05-%02dT%02d:%02d:00Z',
		1 + int($k / 1440), int($k / 60) % 24, $k % 60);
}

my @clients;
foreach my $n (@names)
{
	push @clients, { inst => $n, s => ZkLockTest::Session->new($node{$n}) }
	  foreach 1 .. $BACKENDS;
}

# One attempt: a transaction on slot $k ending as $how.
sub attempt_sql
{
	my ($k, $how) = @_;
	my $ts = slot_ts($k);
	my $sql = "BEGIN;\n";
	# the foreign table first, so that postgres_fdw's callback is there
	# before zklock's
	$sql .= "SELECT count(*) FROM remote_step_f;\n" if $how eq 'late fdw';
	$sql .= "INSERT INTO work SELECT '$ts', pg_backend_pid(), "
	  . ($how eq 'late trigger' ? 'true' : 'false')
	  . " WHERE zk_job_claim('$JOB', '$ts', NULL) RETURNING 'claimed';\n";
	$sql .= "SELECT 1 / 0;\n" if $how eq 'error';
	$sql .= "INSERT INTO remote_step_f VALUES (1);\n" if $how eq 'late fdw';
	$sql .= $how eq 'rollback' ? 'ROLLBACK' : 'COMMIT';
	return $sql;
}

my %count;
my ($attempts, $faults, $next_fault, $window) = (0, 0, time + 0.5, 0);
my %max_slot;
# slots an attempt of b or c meant to commit and committed without an error
my %reliable;
my @fault_kinds = (
	([ 'withhold delete', sub { $proxy->withhold('delete', "/$JOB/claims/") } ]) x 2,
	[ 'withhold multi', sub { $proxy->withhold('multi', "/$JOB/claims/") } ],
	[ 'withhold create', sub { $proxy->withhold('anycreate', "/$JOB/claims/") } ],
	[ 'cut', sub { $proxy->cut } ],
	[
		'refuse and cut',
		sub { $proxy->refuse(sprintf('%.2f', 0.3 + rand 1.2)); $proxy->cut }
	],);

note 'claiming';
my $deadline = time + $DURATION;
while (1)
{
	my $stopping = time >= $deadline || $attempts >= $MAX_ATTEMPTS;
	my $busy = 0;
	foreach my $c (@clients)
	{
		if ($c->{pending})
		{
			if (!$c->{s}->done)
			{
				$busy++;
				next;
			}
			my ($out, $err) = $c->{s}->result;
			$c->{pending} = 0;
			my $claimed = ($out // '') =~ /claimed/;
			$count{ $claimed ? "claimed, $c->{how}" : 'not claimed' }++;
			$count{'commit failed'}++
			  if $claimed && $c->{how} eq 'commit' && $err =~ /ERROR/;
			$count{"error: $1"}++
			  if $err =~ /ERROR:  (\w{5}):/ && $1 ne '22012';
			$reliable{ $c->{slot} } = 1
			  if $c->{inst} ne 'a' && $c->{how} eq 'commit' && $err !~ /ERROR/
			  && defined $out;
		}
		next if $stopping;
		my $k = $window + int(rand $WINDOW);
		my $r = rand;
		$c->{how} =
		    $r < 0.5  ? 'commit'
		  : $r < 0.65 ? 'rollback'
		  : $r < 0.75 ? 'error'
		  : $r < 0.9  ? 'late trigger'
		  :             'late fdw';
		$c->{slot} = slot_name_of($k);
		$c->{s}->send(attempt_sql($k, $c->{how}));
		$c->{pending} = 1;
		$busy++;
		$attempts++;
		$window++ if $attempts % $ADVANCE == 0;
	}
	last if $stopping && !$busy;
	if (!$stopping && time >= $next_fault)
	{
		my $f = $fault_kinds[ int rand @fault_kinds ];
		$f->[1]->();
		$count{"fault: $f->[0]"}++;
		$faults++;
		$next_fault = time + 0.15 + rand 0.6;
	}
	Time::HiRes::sleep(0.002);
}
$proxy->disarm;
$proxy->accept;
my $slots = $window + $WINDOW;
note sprintf('%d attempts on %d slots in %.0f s, %d faults', $attempts, $slots,
	time - $T0, $faults);
note "$_: $count{$_}" foreach sort keys %count;
$_->{s}->quit foreach @clients;
cmp_ok($count{'claimed, commit'} // 0, '>=', 50, 'enough committed claims to mean something');
cmp_ok($count{'fault: withhold delete'} // 0, '>', 0, 'lost replies were among the faults');
my $st = $proxy->status;
note "proxy: fired $st->{fired}, aborted $st->{aborted}, cuts $st->{cuts}, refused $st->{refused}";
cmp_ok($st->{fired}, '>', 0, 'some replies were withheld after the server applied the request');

ok(poll_status($node{a}, sub { $_[0]{state} eq 'connected' }, timeout => 30),
	'a is connected again');
foreach my $n (@names)
{
	ok( $node{$n}->poll_query_until('postgres',
			q{SELECT count(*) = 0 FROM zk_locks WHERE kind = 'job claim'}),
		"$n has no claim in progress left");
}

note 'checking every slot';

# committed runs: slot name (as the claim node's) => [ "instance backend" ]
my %runs;
foreach my $n (@names)
{
	foreach my $line (split /\n/, $node{$n}->safe_psql('postgres',
		q{SELECT to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), backend FROM work}))
	{
		my ($slot, $pid) = split /\|/, $line;
		push @{ $runs{$slot} }, "chk_$n $pid";
	}
}

# The claim nodes: slot => [ephemeral owner or '', state, instance]
sub claim_nodes
{
	my $out = ZkLockTest::zk_python(
		$zk, q{
import json
base = args[0]
try:
    kids = zk.get_children(base)
except NoNodeError:
    kids = []
for k in sorted(kids):
    try:
        data, st = zk.get(base + '/' + k)
    except NoNodeError:
        continue
    try:
        d = json.loads(data.decode())
    except ValueError:
        d = {}
    print('%s\t%s\t%s\t%s' % (k, hex(st.ephemeralOwner) if st.ephemeralOwner else '',
                              d.get('state', '?'), d.get('instance', '?')))
}, "/zklock/$JOB/claims");
	my %nodes;
	foreach my $line (split /\n/, $out)
	{
		my ($slot, @f) = split /\t/, $line, -1;
		$nodes{$slot} = \@f;
	}
	return \%nodes;
}

# The violations, as lines; empty when every slot is right.
sub violations
{
	my $nodes = claim_nodes();
	my @v;
	my %all = (%runs, %$nodes, %reliable);
	foreach my $slot (sort keys %all)
	{
		my @r = @{ $runs{$slot} // [] };
		my $nd = $nodes->{$slot};
		push @v, "$slot: committed " . scalar(@r) . " times (@r)" if @r > 1;
		push @v, "$slot: an attempt of b or c committed, but no run did" if !@r && $reliable{$slot};
		if ($nd && $nd->[0] ne '')
		{
			push @v, "$slot: an ephemeral claim node is left (owner $nd->[0])";
		}
		elsif ($nd && $nd->[1] ne 'committed')
		{
			push @v, "$slot: a persistent claim node in state $nd->[1]";
		}
		elsif (@r && !$nd)
		{
			push @v, "$slot: committed by @r but no final node";
		}
		elsif (!@r && $nd)
		{
			push @v, "$slot: a final node of $nd->[2] but no committed run";
		}
		elsif (@r == 1 && $r[0] !~ /^\Q$nd->[2]\E /)
		{
			push @v, "$slot: committed by $r[0] but the final node names $nd->[2]";
		}
	}
	return @v;
}

# reopenings of failed finalizes may still be under way: give them time
my @violations;
poll_until(sub { @violations = violations(); !@violations }, timeout => 20, interval => 0.5);
my $committed = grep { @{ $runs{$_} } } keys %runs;
note "$committed slots committed";
note scalar(keys %reliable) . ' slots with an attempt of b or c that committed';
is(scalar @violations, 0, 'every slot: at most one committed run, exactly one where '
	  . 'an attempt of b or c committed, a committed node exactly when a run '
	  . 'committed, no ephemeral claim node');
diag $_ foreach @violations;

$proxy->stop;
$node{$_}->stop foreach @names;
note sprintf('095_claims_checker took %.0f s', time - $T0);
done_testing();

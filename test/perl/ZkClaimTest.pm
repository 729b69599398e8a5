# ZkClaimTest.pm
#    Helpers for the TAP tests of job claims whose fate follows their
#    transaction (test/t/101_claim_outcome.pl, 102_claim_crash.pl,
#    103_claim_sweep.pl, 105_claim_running_xact.pl, 095_claims_checker.pl):
#    a claim node as ZooKeeper has it, committed runs counted over
#    instances, an instance crashed with SIGKILL (postmaster and every
#    child at once) and restarted, an instance restarted under libfaketime,
#    whether the 1.5 SQL is there.
#    Documentation: POD below.

=pod

=head1 NAME

ZkClaimTest - job claim helpers for zklock's TAP tests

=head1 SYNOPSIS

  use ZkClaimTest qw(claim_node slot_name runs crash_instance);

  my $n = claim_node($zk, 'job', '2026-04-01 10:00+00');
  # { exists => 1, ephemeral => 0, state => 'committing', xid => '...', ... }
  is(runs('job_runs', '2026-04-01 10:00+00', $pa, $pb), 1, 'run once');
  crash_instance($pa);          # SIGKILL to the postmaster and its children
  $pa->start;

=head1 FUNCTIONS

=over

=cut

package ZkClaimTest;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use POSIX ();
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);

our @EXPORT_OK = qw(claim_node slot_name runs crash_instance become_subreaper
  faketime_restart has_15 claim_state_becomes);

=pod

=item slot_name($ts)

The claim node's name of a slot written C<YYYY-MM-DD HH:MM+00> (the test's
slots are whole minutes in UTC): C<YYYY-MM-DDTHH:MM:00Z>.

=cut

sub slot_name
{
	my ($ts) = @_;
	my ($d, $hm) = $ts =~ /^(\d{4}-\d\d-\d\d) (\d\d:\d\d)\+00$/
	  or croak "slot $ts is not YYYY-MM-DD HH:MM+00";
	return "${d}T$hm:00Z";
}

=pod

=item claim_node($zk, $job, $slot)

The claim node C</zklock/JOB/claims/SLOT> (C<$slot> as for C<slot_name>,
or already a node name) as a hash reference: C<exists> (0 or 1),
C<ephemeral>, C<czxid>, C<version>, and the fields of its JSON data
(C<state>, C<xid>, C<system_identifier>, C<timeline>, C<lsn>, C<claim>,
C<instance>, ...).

=cut

sub claim_node
{
	my ($zk, $job, $slot) = @_;
	my $name = $slot =~ /T/ ? $slot : slot_name($slot);
	my $out = ZkLockTest::zk_python(
		$zk, q{
import json
try:
    data, st = zk.get(args[0])
except NoNodeError:
    print('exists\t0')
else:
    print('exists\t1')
    print('ephemeral\t%d' % (1 if st.ephemeralOwner else 0))
    print('czxid\t%d' % st.czxid)
    print('version\t%d' % st.version)
    try:
        d = json.loads(data.decode())
    except ValueError:
        d = {}
    for k, v in d.items():
        print('%s\t%s' % (k, v))
}, "/zklock/$job/claims/$name");
	my %h = map { split /\t/, $_, 2 } split /\n/, $out;
	return \%h;
}

=pod

=item claim_state_becomes($zk, $job, $slot, $want, timeout => secs)

Polls the claim node until C<$want> describes it: C<'gone'> (no node), or
a state (C<pending>, C<committing>, C<committed>) of a node that exists.
Returns the last C<claim_node> seen when it did, undef otherwise (default
timeout 60 s).

=cut

sub claim_state_becomes
{
	my ($zk, $job, $slot, $want, %opts) = @_;
	my $n;
	my $ok = poll_until(
		sub {
			$n = claim_node($zk, $job, $slot);
			return $want eq 'gone'
			  ? !$n->{exists}
			  : $n->{exists} && ($n->{state} // '') eq $want;
		},
		timeout => $opts{timeout} // 60,
		interval => 0.2);
	return $ok ? $n : undef;
}

=pod

=item runs($table, $slot, @nodes)

Committed runs of C<$slot>: the rows of C<$table> (a column C<slot text>)
naming it, summed over the instances C<@nodes> that run.

=cut

sub runs
{
	my ($table, $slot, @nodes) = @_;
	my $n = 0;
	$n += $_->safe_psql('postgres', "SELECT count(*) FROM $table WHERE slot = '$slot'")
	  foreach @nodes;
	return $n;
}

=pod

=item has_15($node)

Whether the extension on C<$node> has the 1.5 SQL (C<zk_job_claim_settle>,
the outcome columns of C<zk_job_claims>).

=cut

sub has_15
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) > 0 FROM pg_proc WHERE proname = 'zk_job_claim_settle'")
	  eq 't';
}

=pod

=item become_subreaper()

Makes the test process the child subreaper of its descendants (Linux
prctl PR_SET_CHILD_SUBREAPER), so that the processes of an instance whose
postmaster was killed become its children and C<crash_instance> can reap
them: a zombie postmaster would keep its lock file "in use" and the
instance could not start again where PID 1 reaps nothing (containers).
Call it before the instances start.  Returns true when it worked.

=cut

sub become_subreaper
{
	my $nr = eval { require 'syscall.ph'; &SYS_prctl(); };
	$nr //= 157 if (POSIX::uname())[4] eq 'x86_64';
	return 0 unless defined $nr;
	return syscall($nr, 36, 1, 0, 0, 0) == 0;    # PR_SET_CHILD_SUBREAPER
}

=pod

=item crash_instance($node)

Crashes C<$node> as a power cut would look to it: stops the postmaster
(SIGSTOP, so that it starts no crash recovery), SIGKILLs every child of it
and then the postmaster, waits until they are all gone (reaping those that
became ours, see C<become_subreaper>) and forgets the postmaster's pid in
C<$node>.  Returns the pids killed.  Start the node again with
C<< $node->start >>.

=cut

sub _children
{
	my ($ppid) = @_;
	my @kids;
	opendir my $dh, '/proc' or croak "/proc: $!";
	foreach my $pid (grep { /^\d+$/ } readdir $dh)
	{
		open my $fh, '<', "/proc/$pid/stat" or next;
		my $stat = <$fh>;
		close $fh;
		push @kids, $pid if defined $stat && $stat =~ /\)\s+\S+\s+(\d+)/ && $1 == $ppid;
	}
	closedir $dh;
	return @kids;
}

sub _gone
{
	my ($pid) = @_;
	waitpid($pid, POSIX::WNOHANG());
	open my $fh, '<', "/proc/$pid/stat" or return 1;
	my $stat = <$fh>;
	close $fh;
	return !defined $stat || $stat =~ /\)\s+Z/;
}

sub crash_instance
{
	my ($node) = @_;
	my $pm = $node->{_pid};
	croak 'crash_instance: the node does not run' unless defined $pm;
	kill 'STOP', $pm;
	my @kids = _children($pm);
	kill 'KILL', @kids if @kids;
	kill 'KILL', $pm;
	kill 'CONT', $pm;
	$node->{_pid} = undef;
	my @all = ($pm, @kids);
	poll_until(sub { !grep { !_gone($_) } @all }, timeout => 60, interval => 0.05)
	  or croak "crash_instance: processes @all still there";
	# zombies that are not ours keep the lock files "in use": remove them
	# only then, as an operator would after checking
	if (grep { -e "/proc/$_" } @all)
	{
		diag 'crash_instance: zombies left (no subreaper), removing the lock files';
		unlink $node->data_dir . '/postmaster.pid';
		unlink glob($node->host . '/.s.PGSQL.' . $node->port . '.lock')
		  if $node->host =~ m{^/};
	}
	note 'crashed ' . $node->name . " (postmaster $pm, children @kids)";
	return @all;
}

=pod

=item faketime_restart($node, $offset_file, $seconds)

Restarts C<$node> under libfaketime with its wall clock C<$seconds> ahead
of real time (negative: behind), read from C<$offset_file> (rewritten
here), the monotonic clock left alone (see 034_clock_step.pl).  Skips the
whole test when libfaketime is not installed.

=cut

sub faketime_restart
{
	my ($node, $offset_file, $seconds) = @_;
	my ($faketime) = grep { -f } glob('/usr/lib/*/faketime/libfaketime.so.1');
	Test::More::plan(skip_all => 'libfaketime is not installed (Debian package faketime)')
	  unless $faketime;
	open my $fh, '>', "$offset_file.tmp" or croak "$offset_file.tmp: $!";
	printf $fh "%+d\n", $seconds;
	close $fh or croak "$offset_file.tmp: $!";
	rename "$offset_file.tmp", $offset_file or croak "$offset_file: $!";
	$node->stop;
	local $ENV{LD_PRELOAD} = $faketime;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $offset_file;
	local $ENV{FAKETIME_NO_CACHE} = '1';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	$node->start;
	return;
}

=pod

=back

=cut

1;

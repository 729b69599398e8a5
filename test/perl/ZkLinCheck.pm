
# ZkLinCheck.pm
#    A checker of lock histories against a single mutex, as Jepsen's
#    checkers do, for test/t/083_linearizable.pl.  Documentation: POD below.

=pod

=head1 NAME

ZkLinCheck - check a history of lock operations against one mutex

=head1 SYNOPSIS

  use ZkLinCheck;

  my @history = (
	  { client => 'a1', op => 'acquire', arg => 30, inv => 0.001,
		comp => 0.003, result => 't' },
	  { client => 'a1', op => 'release', inv => 0.004, comp => 0.005,
		result => 't' },
	  { client => 'b1', op => 'try', inv => 0.006, comp => 0.007,
		result => 'f' },
  );
  my $r = ZkLinCheck::check(\@history);
  diag ZkLinCheck::report($r, \@history) if @{ $r->{violations} };

=head1 DESCRIPTION

A history is a list of completed operations on one lock, each a hash:
C<client> (who called; a client's operations never overlap one another),
C<op> (C<acquire> with a timeout, C<try> without waiting, C<release>),
C<inv> and C<comp> (invocation and completion on one clock, in seconds),
C<result> (C<t> granted or released, C<f> not granted or not released) and
C<err> (an error message, or empty; outside network faults an error is a
violation of its own).  A client acquires only when it holds nothing and
releases only what it holds.

A history may also hold network faults: operations C<fault> (C<client>
whoever injected them, C<arg> what they were), whose C<inv> and C<comp>
span the time from the fault's injection until its client had reconnected.
They weaken nothing about safety (overlaps are judged as without them);
they excuse what a network fault may cost in availability only: a failed
attempt that overlaps one (a fault can delay an acquire past its timeout)
and an operation that failed with an error during one.

A holding is a successful acquire or try and the client's next release.
The lock is certainly held from the acquire's completion to the release's
invocation (its I<certain> interval) and possibly from the acquire's
invocation to the release's completion (its I<widest> interval).

Flagged, and nothing else:

=over

=item overlap

Two holdings whose certain intervals overlap: both clients held the lock at
once.

=item failed try, timed-out acquire

An attempt that did not get the lock (a try that returned f, an acquire that
timed out) although, during its whole call, nobody else could have been in
its way: it overlaps no other client's holding (widest interval), no other
client's acquire call (a waiter queued ahead of it, whatever became of that
acquire), and no other client's failed try that is itself excused.

The last rule is needed for soundness.  The recipe (Curator's, and
zklock's) creates a sequential node, lists the queue and gives up when a
node is ahead of its own; a failed no-wait attempt's node exists until it
is deleted, so another attempt listing meanwhile may see it ahead and fail
too, after whatever had been in the first one's way is gone.  If a node
exists only within its owner's call or holding (a release or a failed
attempt returns once its node is gone, which is what is checked), then by
induction on node order every failed attempt is excused by such a chain,
starting at a holding or an acquire.  A chain of failed tries alone, with
no holding or acquire at its start, is flagged.

A timed-out acquire with nothing in its way is flagged on one timing
assumption: a free lock is granted within the acquire's timeout.  Callers
give timeouts ample room for that.

=item bad release, error

A release that returned f, and any operation that failed with an error
(outside a network fault).
Whether an operation that failed took or gave up the lock is not known: the
other rules count it as possibly holding from its invocation on.

=back

Everything is judged with intervals on the one clock; overlap for an
excuse includes touching ends, overlap for a violation does not, so that
the checker errs towards passing.

=cut

package ZkLinCheck;

use strict;
use warnings;

use Carp;
use List::Util qw(max min);

my $INF = 9**9**9;

=pod

=head1 FUNCTIONS

=over

=item ZkLinCheck::check(\@history)

Returns a hash: C<violations> (a list of hashes: C<kind>, C<text>, C<ops>,
the operations involved), C<holdings> (hashes: C<client>, C<acq>, C<rel>
(the operations; C<rel> undef when never released), C<cert> and C<wide>
(pairs [from, to]) and counts in C<stats>.

=cut

sub check
{
	my ($history) = @_;
	my @ops = sort { $a->{inv} <=> $b->{inv} } @$history;
	my @faults = grep { $_->{op} eq 'fault' } @ops;
	@ops = grep { $_->{op} ne 'fault' } @ops;
	my (@violations, @holdings, %open, @failed);
	my %stats;
	$stats{faults} = scalar @faults if @faults;

	# holdings, bad releases and errors, client by client
	foreach my $op (@ops)
	{
		$stats{"$op->{op} " . ($op->{err} ? 'error' : $op->{result})}++;
		croak "operation of $op->{client} completes before it starts"
		  if $op->{comp} < $op->{inv};
		if ($op->{err})
		{
			# a violation of its own, unless a network fault was under way;
			# whether it took or released the lock is not known, so it may
			# have held from its invocation on
			push @violations,
			  { kind => 'error', text => 'operation failed', ops => [$op] }
			  unless grep { $_->{inv} <= $op->{comp} && $op->{inv} <= $_->{comp} }
			  @faults;
			if ($op->{op} eq 'release')
			{
				my $h = delete $open{ $op->{client} };
				$h->{cert}[1] = $op->{inv} if $h;
			}
			else
			{
				push @holdings,
				  {
					client => $op->{client},
					acq    => $op,
					cert   => [ $INF, $INF ],
					wide   => [ $op->{inv}, $INF ],
				  };
			}
			next;
		}
		if ($op->{op} eq 'release')
		{
			my $h = delete $open{ $op->{client} };
			if ($op->{result} ne 't' || !$h)
			{
				push @violations,
				  {
					kind => 'bad release',
					text => $h ? 'release of a holding returned f' : 'release without a holding',
					ops => [ $h ? ($h->{acq}) : (), $op ]
				  };
			}
			next unless $h;
			$h->{rel} = $op;
			$h->{cert}[1] = $op->{inv};
			$h->{wide}[1] = $op->{comp} if $op->{result} eq 't';
		}
		elsif ($op->{result} eq 't')
		{
			croak "$op->{client} acquires while it holds" if $open{ $op->{client} };
			my $h = {
				client => $op->{client},
				acq    => $op,
				cert   => [ $op->{comp}, $INF ],
				wide   => [ $op->{inv}, $INF ],
			};
			push @holdings, $h;
			$open{ $op->{client} } = $h;
		}
		else
		{
			push @failed, $op;
		}
	}

	# no two certain intervals overlap (strictly)
	my @by_start = sort { $a->{cert}[0] <=> $b->{cert}[0] } @holdings;
	for my $i (0 .. $#by_start)
	{
		my $h = $by_start[$i];
		for my $j ($i + 1 .. $#by_start)
		{
			my $g = $by_start[$j];
			last if $g->{cert}[0] >= $h->{cert}[1];
			next if $g->{cert}[1] <= $g->{cert}[0];    # empty
			push @violations,
			  {
				kind => 'overlap',
				text => sprintf('holdings of %s and %s overlap for certain',
					$h->{client}, $g->{client}),
				ops => [ grep { defined } $h->{acq}, $h->{rel}, $g->{acq}, $g->{rel} ]
			  };
		}
	}

	# failed attempts: excused by another client's holding (widest) or
	# acquire call, a network fault, or (closure) another client's excused
	# failed try
	my @blockers = (
		(map { [ $_->{client}, @{ $_->{wide} } ] } @holdings),
		(map { [ $_->{client}, $_->{inv}, $_->{comp} ] }
		  grep { $_->{op} eq 'acquire' && !$_->{err} } @ops),
		(map { [ "\0fault", $_->{inv}, $_->{comp} ] } @faults));
	my (%excused, @queue);
	foreach my $f (@failed)
	{
		if (grep { $_->[0] ne $f->{client} && $_->[1] <= $f->{comp} && $f->{inv} <= $_->[2] }
			@blockers)
		{
			$excused{$f} = 1;
			push @queue, $f;
		}
	}
	while (my $e = shift @queue)
	{
		next unless $e->{op} eq 'try';
		foreach my $f (@failed)
		{
			next if $excused{$f} || $f->{client} eq $e->{client};
			next unless $e->{inv} <= $f->{comp} && $f->{inv} <= $e->{comp};
			$excused{$f} = 1;
			push @queue, $f;
		}
	}
	foreach my $f (grep { !$excused{$_} } @failed)
	{
		push @violations,
		  {
			kind => $f->{op} eq 'try' ? 'failed try' : 'timed-out acquire',
			text => ($f->{op} eq 'try' ? 'try returned f' : 'acquire timed out')
			  . ' while nobody else held, waited or could be in its way',
			ops => [$f]
		  };
	}

	$stats{holdings} = scalar @holdings;
	return { violations => \@violations, holdings => \@holdings, stats => \%stats };
}

=pod

=item ZkLinCheck::describe($op, $t0)

One line for an operation, times in ms after C<$t0>.

=cut

sub describe
{
	my ($op, $t0) = @_;
	$t0 //= 0;
	return sprintf('%-4s %-7s%-5s [%10.3f, %10.3f] ms -> %s',
		$op->{client}, $op->{op},
		defined $op->{arg} ? "($op->{arg})" : '',
		1000 * ($op->{inv} - $t0),
		1000 * ($op->{comp} - $t0),
		$op->{err} ? "error: $op->{err}" : $op->{result});
}

=pod

=item ZkLinCheck::report($result, \@history, max => 10, before => 0.015, after => 0.005)

Text for the violations found (at most C<max>): each with its operations
and every operation of the history that overlaps the window from
C<before> seconds before the first of them to C<after> seconds after the
last, so that what happened around it can be read.

=cut

sub report
{
	my ($r, $history, %opts) = @_;
	my $max = $opts{max} // 10;
	my $before = $opts{before} // 0.015;
	my $after = $opts{after} // 0.005;
	my @ops = sort { $a->{inv} <=> $b->{inv} } @$history;
	my $t0 = @ops ? $ops[0]{inv} : 0;
	my @v = @{ $r->{violations} };
	my $text = sprintf("%d violation(s)%s; times in ms from the first invocation\n",
		scalar @v, @v > $max ? ", the first $max shown" : '');
	foreach my $v (@v[ 0 .. min($max, scalar @v) - 1 ])
	{
		my $from = min(map { $_->{inv} } @{ $v->{ops} }) - $before;
		my $to = max(map { $_->{comp} } @{ $v->{ops} }) + $after;
		my %mine = map { $_ => 1 } @{ $v->{ops} };
		$text .= "$v->{kind}: $v->{text}\n";
		foreach my $op (grep { $_->{inv} <= $to && $_->{comp} >= $from } @ops)
		{
			$text .= ($mine{$op} ? '  >> ' : '     ') . describe($op, $t0) . "\n";
		}
	}
	return $text;
}

=pod

=back

=cut

1;

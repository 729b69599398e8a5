# ZkLockTest/Session.pm
#    A psql session that stays open and whose statements can be sent
#    without waiting for them (a waiter that blocks in zk_lock_acquire), and
#    polling helpers, for zklock's TAP tests.  Documentation: POD below.

=pod

=head1 NAME

ZkLockTest::Session - open psql sessions and polling for zklock's TAP tests

=head1 SYNOPSIS

  use ZkLockTest::Session qw(poll_until);

  my $holder = ZkLockTest::Session->new($node);
  my $waiter = ZkLockTest::Session->new($node, dbname => 'postgres');
  is($holder->query("SELECT zk_lock_acquire('a')"), 't');
  $waiter->send("SELECT zk_lock_acquire('a')");    # does not wait
  ZkLockTest::wait_for_extension_wait($node, $waiter->pid);
  ok(!$waiter->done, 'still waiting');
  $holder->query("SELECT zk_lock_release('a')");
  my ($out, $err) = $waiter->result;                # waits for it
  $holder->quit;

  poll_until(sub { ZkLockTest::zk_children($zk, '/zklock/a') == 0 })
    or fail('node of a not deleted');

=head1 DESCRIPTION

A session is B<psql -XAtq -f -> fed through IPC::Run, with
C<ON_ERROR_STOP> off and C<VERBOSITY> set to C<verbose>, so that errors
carry their SQLSTATE ("ERROR:  55P03: canceling statement due to lock
timeout") and a failing statement leaves the session usable.  Output is
unaligned and tuples-only: one line per row, columns separated by C<|>.

=cut

package ZkLockTest::Session;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

our @EXPORT_OK = qw(poll_until sqlstate children_become);

=pod

=head1 METHODS

=over

=item ZkLockTest::Session->new($node, dbname => 'postgres', connstr => undef)

Connects to C<$node> and returns the session once it is ready; its backend
pid is known then.  C<connstr> connects elsewhere with C<$node>'s psql (a
connection pooler in front of it, say) instead of to C<$node>'s database
C<dbname>.

=cut

sub new
{
	my ($class, $node, %opts) = @_;
	my $dbname = $opts{dbname} // 'postgres';
	my $self = bless {
		node    => $node,
		in      => '',
		out     => '',
		err     => '',
		n       => 0,
		pending => undef,
		timer   => IPC::Run::timer($PostgreSQL::Test::Utils::timeout_default),
	}, $class;
	$self->{run} = IPC::Run::start(
		[
			$node->installed_command('psql'), '-XAtq', '-v', 'ON_ERROR_STOP=0',
			'-v', 'VERBOSITY=verbose', '-d', $opts{connstr} // $node->connstr($dbname),
			'-f', '-'
		],
		'<', \$self->{in}, '>', \$self->{out}, '2>', \$self->{err},
		$self->{timer});
	my ($pid, $err) = $self->query('SELECT pg_backend_pid()');
	croak "could not open a psql session on " . $node->name . ": $err"
	  unless defined $pid && $pid =~ /^\d+$/;
	$self->{pid} = $pid;
	return $self;
}

=pod

=item $session->pid

The session's backend pid.

=cut

sub pid { return $_[0]->{pid}; }

=pod

=item $session->send($sql)

Sends C<$sql> (one or more statements; a final semicolon is optional) and
returns at once.  Only one send may be pending: collect it with C<result>.

=cut

sub send
{
	my ($self, $sql) = @_;
	croak "a statement of this session is still pending"
	  if defined $self->{pending};
	my $banner = "zklock-session-done-" . ++$self->{n};
	$self->{out} = '';
	$self->{err} = '';
	$self->{in} .= "$sql\n;\n\\echo $banner\n\\warn $banner\n";
	$self->{pending} = $banner;
	$self->{timer}->start($PostgreSQL::Test::Utils::timeout_default);
	$self->{run}->pump_nb if $self->{run}->pumpable;
	return;
}

# Is the banner of the pending send in both streams?
sub _complete
{
	my ($self) = @_;
	my $b = $self->{pending};
	return $self->{out} =~ /^\Q$b\E$/m && $self->{err} =~ /^\Q$b\E$/m;
}

=pod

=item $session->done

Whether the pending send has completed (without waiting; true as well when
psql has gone away).

=cut

sub done
{
	my ($self) = @_;
	croak "nothing pending" unless defined $self->{pending};
	$self->{run}->pump_nb if $self->{run}->pumpable;
	return $self->_complete || !$self->{run}->pumpable;
}

=pod

=item $session->pending

Whether a send waits to be collected with C<result>.

=item $session->peek

What the pending send printed so far, (output, error), without collecting
it: for a diagnostic.

=cut

sub pending { return defined $_[0]->{pending}; }

sub peek
{
	my ($self) = @_;
	my ($out, $err) = ($self->{out}, $self->{err});
	if (defined(my $b = $self->{pending}))
	{
		$out =~ s/^\Q$b\E\n?//m;
		$err =~ s/^\Q$b\E\n?//m;
	}
	chomp $out;
	chomp $err;
	return ($out, $err);
}

=pod

=item $session->result(timeout => secs)

Waits for the pending send to complete and returns its standard output (in
list context: output and standard error), without trailing newlines.  When
psql exits first (its backend was terminated) it returns what was printed,
and C<alive> is false from then on.  When the timeout (default
C<$PostgreSQL::Test::Utils::timeout_default>) passes first it returns
undef for the output and the error "timed out", and the session stays
pending.

=cut

sub result
{
	my ($self, %opts) = @_;
	croak "nothing pending" unless defined $self->{pending};
	my $secs = $opts{timeout} // $PostgreSQL::Test::Utils::timeout_default;
	$self->{timer}->start($secs);
	while (!$self->_complete)
	{
		last unless $self->{run}->pumpable;
		if ($self->{timer}->is_expired)
		{
			diag "psql session $self->{pid}: no result within $secs s; "
			  . "output so far: \"$self->{out}\", errors: \"$self->{err}\"";
			return wantarray ? (undef, 'timed out') : undef;
		}
		$self->{run}->pump;
	}
	my $b = $self->{pending};
	my ($out, $err) = ($self->{out}, $self->{err});
	$out =~ s/^\Q$b\E\n?//m;
	$err =~ s/^\Q$b\E\n?//m;
	chomp $out;
	chomp $err;
	$self->{pending} = undef;
	$self->{out} = $self->{err} = '';
	$self->{timer}->start($PostgreSQL::Test::Utils::timeout_default);
	return wantarray ? ($out, $err) : $out;
}

=pod

=item $session->query($sql)

C<send> and C<result>: output in scalar context, (output, error) in list
context.

=item $session->query_ok($sql)

Like C<query> but dies when anything was printed on standard error.

=cut

sub query
{
	my ($self, $sql) = @_;
	$self->send($sql);
	return $self->result;
}

sub query_ok
{
	my ($self, $sql) = @_;
	my ($out, $err) = $self->query($sql);
	croak "query \"$sql\" failed in session $self->{pid}: "
	  . ($err // 'timed out')
	  if !defined $out || $err ne '';
	return $out;
}

=pod

=item $session->alive

Whether psql still runs.

=item $session->quit

Ends psql (\q) and waits for it to exit.  Safe to call when it has gone.

=cut

sub alive
{
	my ($self) = @_;
	$self->{run}->pump_nb if $self->{run}->pumpable;
	return $self->{run}->pumpable;
}

sub quit
{
	my ($self) = @_;
	return if $self->{quit}++;
	if ($self->{run}->pumpable)
	{
		$self->{in} .= "\\q\n";
		$self->{timer}->start($PostgreSQL::Test::Utils::timeout_default);
		eval { $self->{run}->finish; };
	}
	else
	{
		eval { $self->{run}->finish; };
	}
	return;
}

sub DESTROY
{
	my ($self) = @_;
	local ($?, $@);
	eval { $self->{run}->kill_kill if $self->{run} && !$self->{quit}; };
	return;
}

=pod

=back

=head1 FUNCTIONS

=over

=item poll_until($code, timeout => secs, interval => secs)

Calls C<$code> until it returns true, every C<interval> seconds (default
0.1) for at most C<timeout> seconds (default
C<$PostgreSQL::Test::Utils::timeout_default>).  Returns true when it did,
false when time ran out.  For conditions that must become true, e.g. a
znode that goes; not a substitute for synchronisation.

=cut

sub poll_until
{
	my ($code, %opts) = @_;
	my $timeout = $opts{timeout} // $PostgreSQL::Test::Utils::timeout_default;
	my $interval = $opts{interval} // 0.1;
	my $deadline = Time::HiRes::time() + $timeout;
	while (1)
	{
		return 1 if $code->();
		return 0 if Time::HiRes::time() >= $deadline;
		Time::HiRes::sleep($interval);
	}
}

=item sqlstate($err)

The SQLSTATE of the first ERROR or FATAL in psql's verbose error output
(as the sessions of this module produce), or C<(none)>.

=cut

sub sqlstate
{
	my ($err) = @_;
	return ($err // '') =~ /(?:ERROR|FATAL):  ([0-9A-Z]{5}):/ ? $1 : '(none)';
}

=item children_become($zk, $path, $want, timeout => S)

Polls until the children of znode C<$path> are exactly the names of the
array ref C<$want> (in any order) or, given a number, are that many;
returns the last listing (sorted).

=cut

sub children_become
{
	my ($zk, $path, $want, %opts) = @_;
	my @c;
	poll_until(
		sub {
			@c = ZkLockTest::zk_children($zk, $path);
			return ref $want ? "@c" eq "@{[ sort @$want ]}" : @c == $want;
		},
		timeout => $opts{timeout} // 30);
	return @c;
}

=pod

=back

=cut

1;

# ZkFaultProxy.pm
#    The client-side fault proxy (test/zkfaultproxy) for zklock's TAP tests:
#    starts one between an instance's worker and a ZooKeeper client port,
#    sends it commands (withhold the reply of one chosen request, cut every
#    connection, refuse reconnects, hold replies) and waits by polling for a
#    withheld request to have been applied.  Documentation: POD below.

=pod

=head1 NAME

ZkFaultProxy - lose a ZooKeeper client's replies and connections on purpose

=head1 SYNOPSIS

  use ZkLockTest;
  use ZkFaultProxy;

  my $zk = ZkLockTest::zk_start();
  my $proxy = ZkFaultProxy->start($zk);
  my $node = ZkLockTest::pg_node('a', $proxy->hosts);

  $proxy->withhold('delete', '/claims/');   # the next delete of a claim
  ...                                       # something sends it
  ok($proxy->wait_fired, 'the server applied it, the reply was lost');

  $proxy->cut;                  # reset every connection
  $proxy->refuse(2);            # and new ones for 2 s
  $proxy->hold; ...; $proxy->release;

=head1 DESCRIPTION

The proxy listens on a free port of 127.0.0.1 and forwards to one client
port of the harness (node 1 by default), reading the frames of ZooKeeper's
client protocol, so that it can pick a request by its op code and path.  A
withheld request reaches the server; its reply does not reach the client,
nothing sent after it reaches the server, and once the server's reply has
arrived (the request was applied) the connection is reset on both sides:
what a client sees when a connection breaks between the server's commit and
its answer.  The client reconnects through the proxy within its session.
See F<test/zkfaultproxy> for the commands.

The proxy's log is F<zkfaultproxy_NAME.log> in the test's log directory.
It is stopped by C<stop>, when the object goes away, or when the test ends.

=head1 METHODS

=cut

package ZkFaultProxy;

use strict;
use warnings;

use Carp;
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);

our $PROXY_SCRIPT = abs_path(dirname(abs_path(__FILE__)) . '/../zkfaultproxy');

my $count = 0;

=pod

=over

=item ZkFaultProxy->start($zk, node => 1, name => 'proxyN')

Starts a proxy to the client port of node C<node> of the harness C<$zk>
(or to the port given as C<port>) and returns it once it serves.

=cut

sub start
{
	my ($class, $zk, %opts) = @_;
	my $name = $opts{name} // 'proxy' . ++$count;
	my $port = $opts{port} // $zk->port($opts{node} // 1);
	my $dir = PostgreSQL::Test::Utils::tempdir("fault_$name");
	my $state = "$dir/state";
	my $log = "$PostgreSQL::Test::Utils::log_path/zkfaultproxy_$name.log";
	my $h = IPC::Run::start([ $ZkLockTest::PYTHON, $PROXY_SCRIPT, $port, $state ],
		'<', '/dev/null', '>>', $log, '2>>', $log);
	my $self = bless {
		name  => $name,
		state => $state,
		h     => $h,
		owner => $$,
	}, $class;
	poll_until(sub { -s $state }, timeout => 30)
	  or croak "the fault proxy $name did not start (see $log)";
	open my $fh, '<', $state or croak "$state: $!";
	my $line = <$fh>;
	close $fh;
	@$self{qw(listen control)} = split ' ', $line;
	note "fault proxy $name: 127.0.0.1:$self->{listen} -> 127.0.0.1:$port"
	  . " (control $self->{control}, log $log)";
	return $self;
}

=pod

=item $proxy->hosts

The connect string for zklock.hosts: C<127.0.0.1:PORT>.

=cut

sub hosts { return "127.0.0.1:$_[0]->{listen}"; }

=pod

=item $proxy->command($line)

Sends one command line and returns the answer; dies unless it begins with
"ok".

=cut

sub command
{
	my ($self, $line) = @_;
	my $sock = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $self->{control},
		Proto    => 'tcp',
		Timeout  => 10)
	  or croak "fault proxy $self->{name}: cannot connect: $@";
	print $sock "$line\n";
	my $answer = <$sock> // '';
	close $sock;
	chomp $answer;
	croak "fault proxy $self->{name}: \"$line\" answered \"$answer\""
	  unless $answer =~ /^ok\b/;
	return $answer;
}

=pod

=item $proxy->status

The status as a hash reference: armed (C<OP:SUBSTRING> or C<->), fired,
last_err (the server's error code in the last withheld reply: 0 when it was
applied), aborted, cuts, connections, held, refusing, refused, requests.

=cut

sub status
{
	my ($self) = @_;
	my %h = $self->command('status') =~ /(\w+)=(\S+)/g;
	return \%h;
}

=pod

=item $proxy->withhold($op, $substring)

Arms the one-shot fault (see the file header of F<test/zkfaultproxy>) on
the next request of op C<$op> (create, delete, setData, multi, ... or a
number) whose path (for a multi: the path of one of its operations)
contains C<$substring> (optional), or on the next multi with an operation
of op C<$op> on such a path (a coalesced write); remembers the count of fired faults for
C<wait_fired>.

=cut

sub withhold
{
	my ($self, $op, $sub) = @_;
	$self->{fired_before} = $self->status->{fired};
	$self->command(join ' ', 'withhold', $op, defined $sub ? $sub : ());
	return;
}

=pod

=item $proxy->wait_fired(timeout => secs)

Polls until the fault armed by the last C<withhold> has fired (the server
answered the request, its reply was dropped and the connection reset);
returns true when it did, false after the timeout (default 30 s).

=cut

sub wait_fired
{
	my ($self, %opts) = @_;
	croak 'wait_fired without withhold' unless defined $self->{fired_before};
	return poll_until(sub { $self->status->{fired} > $self->{fired_before} },
		timeout => $opts{timeout} // 30, interval => 0.05);
}

=pod

=item $proxy->cut, $proxy->refuse($secs), $proxy->accept, $proxy->hold, $proxy->release, $proxy->disarm

The commands of the same names.

=cut

sub cut     { return $_[0]->command('cut'); }
sub refuse  { return $_[0]->command("refuse $_[1]"); }
sub accept  { return $_[0]->command('accept'); }
sub hold    { return $_[0]->command('hold'); }
sub release { return $_[0]->command('release'); }
sub disarm  { return $_[0]->command('disarm'); }

=pod

=item $proxy->hold_at($ops, $substring)

Arms a one-shot hold: from the server's reply to the next request of one
of the ops C<$ops> (comma-separated names) whose path contains
C<$substring>, that reply included, the server's bytes are kept as by
C<hold> until C<release>.  C<< $proxy->status->{held} >> turns 1 then.

=cut

sub hold_at
{
	my ($self, $ops, $sub) = @_;
	return $self->command(join ' ', 'holdat', $ops, defined $sub ? $sub : ());
}

=pod

=item $proxy->stop

Stops the proxy (done at the latest when the object goes away).

=cut

sub stop
{
	my ($self) = @_;
	return if $self->{stopped}++ || $self->{owner} != $$;
	unlink $self->{state};
	eval { $self->command('quit'); };
	eval {
		$self->{h}->finish
		  or $self->{h}->kill_kill;
	};
	return;
}

sub DESTROY
{
	my ($self) = @_;
	local ($?, $@);
	eval { $self->stop; };
	return;
}

=pod

=back

=cut

1;

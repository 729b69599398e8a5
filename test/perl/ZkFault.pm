# ZkFault.pm
#    Helpers for zklock's fault-injection TAP tests (test/t/060_faults.pl,
#    070_ensemble.pl, 080_mutex_checker.pl, 090_soak.pl): signals to
#    processes, ZooKeeper restarts that wait by polling, the whole znode tree
#    under a path, ZooKeeper's session and watch tables, how long a server
#    has heard nothing from a session, zk_status() as a hash, a process's
#    resident memory.  Documentation: POD below.

=pod

=head1 NAME

ZkFault - fault injection and inspection helpers for zklock's TAP tests

=head1 SYNOPSIS

  use ZkLockTest;
  use ZkLockTest::Session qw(poll_until sqlstate children_become);
  use ZkFault qw(sqlstate zk_status_of signal_process zk_tree);

  my $st = zk_status_of($node);       # {state => 'connected', ...}
  stop_worker($node, $st->{worker_pid});   # SIGSTOP, in its idle wait
  ...
  signal_process($st->{worker_pid}, 'CONT');
  my @left = grep { $_->{ephemeral} } zk_tree($zk, '/zklock');

=head1 FUNCTIONS

=over

=cut

package ZkFault;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Time::HiRes;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate children_become);

our @EXPORT_OK = qw(
  sqlstate zk_status_of poll_status signal_process process_state
  wait_process_state zk_tree zk_lock_nodes zk_exists children_become
  zk_restart_node zk_wait_serving zk_session_alive zk_watch_count
  zk_mntr rss_kb poll_session wait_waiting zk_watchers zklock_sessions
  zk_wait_idle stop_worker);

=pod

=item sqlstate($stderr), children_become($zk, $path, $want, timeout => secs)

Re-exported from L<ZkLockTest::Session>.

=cut

=pod

=item zk_status_of($node_or_session)

zk_status() of an instance as a hash reference (state, session_id, server,
session_timeout_ms, last_error, requests, grants, timeouts, reconnects,
session_losses, worker_pid; NULLs as empty strings).  Takes a
PostgreSQL::Test::Cluster (a new connection) or an open
ZkLockTest::Session (cheaper when polled).

=cut

my @STATUS_COLS = qw(state session_id server session_timeout_ms requests
  grants timeouts reconnects session_losses worker_pid);

sub zk_status_of
{
	my ($who) = @_;
	my $sql = 'SELECT ' . join(', ', @STATUS_COLS) . ' FROM zk_status()';
	my $out;
	if ($who->isa('ZkLockTest::Session'))
	{
		$out = $who->query_ok($sql);
	}
	else
	{
		$out = $who->safe_psql('postgres', $sql);
	}
	my @v = split /\|/, $out, -1;
	my %h;
	@h{@STATUS_COLS} = @v;
	return \%h;
}

=pod

=item poll_status($who, $code, timeout => secs)

Polls zk_status_of($who) every 0.1 s until C<< $code->($status) >> is true;
returns the last status when it was, undef when time ran out (default 60 s).

=cut

sub poll_status
{
	my ($who, $code, %opts) = @_;
	my $st;
	my $ok = poll_until(
		sub {
			$st = eval { zk_status_of($who) };
			return $st && $code->($st);
		},
		timeout => $opts{timeout} // 60);
	return $ok ? $st : undef;
}

=pod

=item poll_session($session, $sql, $want, timeout => secs)

Runs C<$sql> in an open ZkLockTest::Session every 0.1 s until it prints
C<$want> with nothing on standard error; returns true when it did, false
after the timeout (default 60 s).

=cut

sub poll_session
{
	my ($s, $sql, $want, %opts) = @_;
	return poll_until(
		sub {
			my ($out, $err) = $s->query($sql);
			return defined $out && $out eq $want && $err eq '';
		},
		timeout => $opts{timeout} // 60);
}

=pod

=item wait_waiting($node, $session, $zk, $path, $n)

Waits until C<$session> waits in a zklock acquisition and the znode C<$path>
has C<$n> children; returns the list of children.

=cut

sub wait_waiting
{
	my ($node, $s, $zk, $path, $n) = @_;
	ZkLockTest::wait_for_extension_wait($node, $s);
	return children_become($zk, $path, $n);
}

=pod

=item process_state($pid)

One-letter state of a process (R, S, D, T, Z, ...), undef when it is gone.

=item signal_process($pid, $sig)

Sends the signal; for STOP waits until the process is stopped (state T),
for CONT until it is not.

=item wait_process_state($pid, $code, timeout => secs)

Polls until C<< $code->(process_state($pid)) >> is true.

=cut

sub process_state
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or return undef;
	my $stat = <$fh>;
	close $fh;
	return undef unless defined $stat && $stat =~ /\)\s+(\S)/;
	return $1;
}

sub wait_process_state
{
	my ($pid, $code, %opts) = @_;
	return poll_until(sub { $code->(process_state($pid)) },
		timeout => $opts{timeout} // 30, interval => 0.01);
}

sub signal_process
{
	my ($pid, $sig) = @_;
	croak "no pid" unless defined $pid && $pid =~ /^\d+$/;
	kill($sig, $pid) or croak "kill $sig $pid: $!";
	if ($sig eq 'STOP')
	{
		wait_process_state($pid, sub { ($_[0] // '') eq 'T' })
		  or croak "process $pid did not stop";
	}
	elsif ($sig eq 'CONT')
	{
		wait_process_state($pid, sub { ($_[0] // 'gone') ne 'T' })
		  or croak "process $pid did not continue";
	}
	return;
}

=pod

=item stop_worker($node, $pid)

Stops the zklock worker C<$pid> (SIGSTOP) where it holds nothing a backend
needs: in its idle wait (the epoll wait of its WaitEventSet, as
F</proc/PID/syscall> shows), never inside the shared memory's lock, on
which every backend's zklock call would then block (an LWLock wait, not
the C<Extension> wait a test waits for) for as long as the worker stays
stopped.  Stopped elsewhere, it is let go on (SIGCONT) and stopped again,
until it is stopped in its wait; dies after 30 s.  (A bgworker without a
database connection has no row in C<pg_stat_activity>, so its wait event
cannot be read there.)  On an architecture not known below, or when the
file cannot be read, it is stopped wherever it is, as before.  C<$node>
names it in messages.

=cut

# The syscalls of an epoll wait (WaitEventSetWait on Linux), by machine.
my %EPOLL_WAITS = (
	x86_64  => [ 232, 281, 441 ],    # epoll_wait, epoll_pwait, epoll_pwait2
	aarch64 => [ 22, 441 ],          # epoll_pwait, epoll_pwait2
);

# The syscall a stopped process is in ("-1": none, undef: unknown).
sub _syscall_of
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/syscall" or return undef;
	my $line = <$fh> // '';
	close $fh;
	return $line =~ /^(-?\d+|running)/ ? $1 : undef;
}

sub stop_worker
{
	my ($node, $pid) = @_;
	croak "no pid" unless defined $pid && $pid =~ /^\d+$/;
	my $machine = (POSIX::uname())[4];
	my %idle = map { $_ => 1 } @{ $EPOLL_WAITS{$machine} // [] };
	my ($tries, $seen) = (0, '');
	my $ok = poll_until(
		sub {
			$tries++;
			signal_process($pid, 'STOP');
			$seen = _syscall_of($pid);
			return 1 if !%idle || !defined $seen || $idle{$seen};
			signal_process($pid, 'CONT');
			return 0;
		},
		timeout => 30, interval => 0.01);
	croak "could not stop the zklock worker $pid of " . $node->name
	  . " in its idle wait in $tries tries (last in syscall $seen)"
	  unless $ok;
	note "the zklock worker $pid of " . $node->name . ' is stopped in '
	  . (defined $seen && %idle ? "its wait (try $tries)" : 'a place not checked');
	return;
}

=pod

=item zk_tree($zk, $path)

Every znode below C<$path> (not C<$path> itself), depth first, as hash
references { path, ephemeral (owner session as 0x... or ''), children
(number of children) }.  Empty when C<$path> does not exist.

=cut

sub zk_tree
{
	my ($zk, $path) = @_;
	my $out = ZkLockTest::zk_python(
		$zk, q{
def walk(p):
    try:
        kids = zk.get_children(p)
    except NoNodeError:
        return
    for k in sorted(kids):
        c = p.rstrip('/') + '/' + k
        try:
            data, st = zk.get(c)
        except NoNodeError:
            continue
        print('%s\t%s\t%d' % (c, hex(st.ephemeralOwner) if st.ephemeralOwner else '', st.numChildren))
        walk(c)
walk(args[0])
}, $path);
	my @nodes;
	foreach my $line (split /\n/, $out)
	{
		my ($p, $eph, $n) = split /\t/, $line;
		push @nodes, { path => $p, ephemeral => $eph // '', children => $n // 0 };
	}
	return @nodes;
}

=pod

=item zk_lock_nodes($zk, $path)

Paths of the ephemeral nodes below C<$path> (what a holder or waiter
leaves), sorted; not the workers' session nodes (below
C</zklock/zklock.instances>), which live as long as their session.

=cut

sub zk_lock_nodes
{
	my ($zk, $path) = @_;
	return sort map { $_->{path} }
	  grep { $_->{ephemeral} ne '' && $_->{path} !~ m{/zklock\.instances/} }
	  zk_tree($zk, $path);
}

=pod

=item zk_exists($zk, $path)

Whether the znode exists.

=cut

sub zk_exists
{
	my ($zk, $path) = @_;
	my $out = ZkLockTest::zk_python($zk,
		q{print('yes' if zk.exists(args[0]) else 'no')}, $path);
	chomp $out;
	return $out eq 'yes';
}

=pod

=item zk_wait_serving($zk, $i, timeout => secs)

Polls node C<$i> with C<srvr> until it serves (standalone, leader or
follower); returns true when it does.

=item zk_restart_node($zk, $i)

Starts a stopped node C<$i> again and waits until it serves.  (Not
C<start_node>'s own wait: test/zk can mistake the moment before the exec of
java for a JVM that died.)

=cut

sub zk_wait_serving
{
	my ($zk, $i, %opts) = @_;
	return poll_until(
		sub { $zk->four($i, 'srvr') =~ /^Mode: (standalone|leader|follower)/m },
		timeout => $opts{timeout} // 60);
}

sub zk_restart_node
{
	my ($zk, $i) = @_;
	$zk->start_node($i, wait => 0);
	zk_wait_serving($zk, $i) or croak "ZooKeeper node $i does not serve again";
	return;
}

=pod

=item zk_session_alive($zk, $i, $session_id)

Whether ZooKeeper node C<$i> (the leader, or the standalone server) still
tracks session C<$session_id> (as zk_status() prints it, 0x...), from the
C<dump> four-letter word.

=cut

sub zk_session_alive
{
	my ($zk, $i, $sid) = @_;
	my $dump = $zk->four($i, 'dump');
	my ($tracker) = $dump =~ /^SessionTracker dump:\n(.*?)^ephemeral nodes dump:/ms;
	croak "no session dump from node $i: $dump" unless defined $tracker;
	return $tracker =~ /^\s*\Q$sid\E\s*$/m ? 1 : 0;
}

=pod

=item zk_wait_idle($zk, $i, $session_id, $ms, timeout => secs)

Polls ZooKeeper node C<$i> until it has heard nothing from session
C<$session_id> (as zk_status() prints it) for at least C<$ms>
milliseconds, as the server itself counts (C<lresp> of C<cons>, the time
of its last answer to that session, against that of a fresh answer to a
kazoo client of its own, so both are the server's clock); returns that
idle time in ms, or undef when the session has no connection to the node
or C<timeout> (default 60) seconds passed first.

=cut

sub zk_wait_idle
{
	my ($zk, $i, $sid, $ms, %opts) = @_;
	my $port = $zk->port($i);
	my $want = int($ms) + ($ms > int($ms) ? 1 : 0);
	my $out = ZkLockTest::zk_python(
		"127.0.0.1:$port", q{
import re, socket, time
port, target, want, deadline = int(args[0]), args[1], int(args[2]), time.time() + float(args[3])
me = '%x' % zk.client_id[0]
def lresp(text, sid):
    m = re.search(r'sid=0x0*%s,[^)]*?\blresp=(\d+)' % sid, text)
    return int(m.group(1)) if m else None
idle, text = None, b''
while time.time() < deadline:
    zk.exists('/')
    s = socket.create_connection(('127.0.0.1', port), timeout=5)
    s.sendall(b'cons')
    text = b''
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        text += chunk
    s.close()
    now, last = lresp(text.decode(), me), lresp(text.decode(), target)
    idle = None if now is None or last is None else now - last
    if idle is None or idle >= want:
        break
    time.sleep(0.05)
print('' if idle is None else idle)
if idle is None or idle < want:
    print(text.decode())
}, $port, _hexid($sid), $want, $opts{timeout} // 60);
	my ($idle, $cons) = split /\n/, $out, 2;
	return $idle if $idle ne '' && $idle >= $want;
	diag "session $sid idle "
	  . ($idle eq '' ? 'unknown' : "$idle ms") . " on node $i: $cons";
	return undef;
}

=pod

=item zk_watch_count($zk, $i)

Total watches of node C<$i>, from C<wchs>.

=item zk_mntr($zk, $i)

C<mntr> of node C<$i> as a hash reference (zk_znode_count,
zk_ephemerals_count, zk_watch_count, ...).

=cut

sub zk_watch_count
{
	my ($zk, $i) = @_;
	my $out = $zk->four($i, 'wchs');
	croak "no answer to wchs from node $i" unless $out =~ /Total watches:\s*(\d+)/;
	return $1;
}

=pod

=item zk_watchers($zk, $i)

The watches C<wchp> of node C<$i> lists (data and exists watches): a list of
C<[path, session]> pairs, the session in lower-case hex without C<0x>
and leading zeros.  Dies when the node does not answer (down, paused, not
serving): an empty list means ZooKeeper said it has no such watch.

=item zklock_sessions(@nodes)

The ZooKeeper sessions of the zklock workers of the PostgreSQL instances
C<@nodes> once connected, as a hash reference keyed like the sessions of
zk_watchers.

=cut

sub _hexid { my ($id) = @_; $id =~ s/^0x0*//i; return lc $id; }

# The answer of node $i to the four-letter word $cmd, read to its end.
# Unlike $zk->four, whose answer is '' both when the server says nothing
# and when it does not answer, this dies when no answer came within 10 s
# or the server does not serve; ZooKeeper ends every answer of the watch
# words with a newline, even an empty one.
sub _four_answered
{
	my ($zk, $i, $cmd) = @_;
	my $port = $zk->port($i);
	my $sock = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $port,
		Proto => 'tcp',
		Timeout => 10)
	  or croak "ZooKeeper node $i (port $port) did not take the question $cmd: $@";
	$sock->autoflush(1);
	print $sock $cmd;
	my $sel = IO::Select->new($sock);
	my $deadline = Time::HiRes::time() + 10;
	my $answer = '';
	while (1)
	{
		my $left = $deadline - Time::HiRes::time();
		croak "ZooKeeper node $i did not answer $cmd within 10 s"
		  . " (so far: \"$answer\")"
		  if $left <= 0 || !$sel->can_read($left);
		my $n = sysread($sock, my $buf, 65536);
		croak "reading the answer of ZooKeeper node $i to $cmd: $!"
		  unless defined $n;
		last if $n == 0;
		$answer .= $buf;
	}
	close $sock;
	croak "ZooKeeper node $i gave no (whole) answer to $cmd: \"$answer\""
	  unless $answer =~ /\n\z/;
	croak "ZooKeeper node $i does not serve: $answer"
	  if $answer =~ /not currently serving/;
	return $answer;
}

sub zk_watchers
{
	my ($zk, $i) = @_;
	my ($cur, @w) = ('');
	foreach my $line (split /\n/, _four_answered($zk, $i, 'wchp'))
	{
		if ($line =~ m{^(/\S*)$})
		{
			$cur = $1;
		}
		elsif ($line =~ /^\s+(0x[0-9a-f]+)$/i)
		{
			push @w, [ $cur, _hexid($1) ];
		}
	}
	return @w;
}

sub zklock_sessions
{
	my (@nodes) = @_;
	my %s;
	foreach my $node (@nodes)
	{
		my $st = poll_status($node,
			sub { $_[0]{state} eq 'connected' && $_[0]{session_id} ne '' });
		$s{ _hexid($st->{session_id}) } = 1 if $st;
	}
	return \%s;
}

sub zk_mntr
{
	my ($zk, $i) = @_;
	my %h;
	foreach my $line (split /\n/, $zk->four($i, 'mntr'))
	{
		$h{$1} = $2 if $line =~ /^(\S+)\s+(.*)$/;
	}
	return \%h;
}

=pod

=item rss_kb($pid, $field)

Resident memory of a process in kB, from /proc/<pid>/status: C<$field>
VmRSS (the default: all of it, shared memory it touched included) or
RssAnon (its private memory: heap, stack, what malloc and palloc hand out).

=cut

sub rss_kb
{
	my ($pid, $field) = @_;
	$field //= 'VmRSS';
	open my $fh, '<', "/proc/$pid/status" or croak "no process $pid: $!";
	while (<$fh>)
	{
		if (/^\Q$field\E:\s+(\d+)\s+kB/)
		{
			close $fh;
			return $1;
		}
	}
	close $fh;
	croak "no $field for process $pid";
}

=pod

=back

=cut

1;

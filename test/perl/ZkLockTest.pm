
# ZkLockTest.pm
#    Helpers for zklock's TAP tests (test/t/*.pl): throwaway ZooKeeper
#    servers and ensembles (through test/zk), PostgreSQL nodes preloading
#    zklock, and a look into ZooKeeper with kazoo.  Documentation: POD below.
#
#    Network partitions: zk_start(nodes => 3, proxies => 1) runs the
#    ensemble with TCP proxies (test/zkproxy) between the servers on their
#    quorum and election ports, all on 127.0.0.1; $zk->partition($i) cuts
#    node $i off from the others (the proxies stop forwarding in both
#    directions but keep the connections open, a silent blackhole, and
#    reset new ones), $zk->heal($i) ends that.  Clients reach the client
#    ports directly.  tick, sync_limit and init_limit set tickTime, syncLimit
#    and initLimit: a cut-off follower keeps serving reads for syncLimit x
#    tickTime.  See test/zk's header and 075_partition.pl.

=pod

=head1 NAME

ZkLockTest - ZooKeeper and PostgreSQL helpers for zklock's TAP tests

=head1 SYNOPSIS

  use PostgreSQL::Test::Cluster;
  use PostgreSQL::Test::Utils;
  use Test::More;
  use ZkLockTest;

  my $zk = ZkLockTest::zk_start(nodes => 3);
  my $node = ZkLockTest::pg_node('primary', $zk, lock_timeout => '5s');

  is($node->safe_psql('postgres', "SELECT zk_lock_try('a')"), 't');
  is_deeply([ ZkLockTest::zk_children($zk, '/zklock/a') ], [], 'no orphans');

  $zk->kill_node($zk->leader);
  ...
  done_testing();

=head1 DESCRIPTION

The ZooKeeper side is the shell harness F<test/zk> (located relative to this
file); every method below runs it.  A harness lives in a temporary directory
below C<$PostgreSQL::Test::Utils::tmp_check> (kept when a test fails, with each
node's log in F<nodeI/zk.log>) and is stopped when the object goes away or the
test script ends, whichever comes first.

Nodes are numbered from 1.

=cut

package ZkLockTest;

use strict;
use warnings;

use Carp;
use Cwd qw(abs_path);
use File::Basename qw(basename dirname);
use File::Temp;
use IPC::Run;
use Scalar::Util qw(weaken);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

# test/zk, found next to this module's directory (test/perl/../zk); resolved
# at load time, before a test could chdir.
our $ZK_SCRIPT = abs_path(dirname(abs_path(__FILE__)) . '/../zk');

# The top of the source tree (test/perl/../..), for docs/ and monitoring/.
our $SRC_DIR = abs_path(dirname(abs_path(__FILE__)) . '/../..');

# The Python that has kazoo (on Debian: python3-kazoo).
our $PYTHON = $ENV{ZKLOCK_TEST_PYTHON} // '/usr/bin/python3';

# Harnesses started by this process (weak references), stopped in END at the
# latest.
my @harnesses;

# Run test/zk with the given arguments; return its output without the final
# newline.  Dies, showing test/zk's complaints, when it fails.
sub _run_zk
{
	my @cmd = ($ZK_SCRIPT, @_);
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(\@cmd, '<', '/dev/null', '>', \$out, '2>', \$err);
	print STDERR $err if $err ne '';    # ends up in the test's log
	croak "\"test/zk @_\" failed (exit status " . ($? >> 8) . "): $err"
	  unless $ok;
	chomp $out;
	return $out;
}

=pod

=head1 ZOOKEEPER

=over

=item ZkLockTest::zk_start(nodes => 1, tick => 500, sync_limit => 6, init_limit => 20, proxies => 0, jvm_flags => [...])

Starts a standalone ZooKeeper (C<nodes> 1, the default) or an ensemble of
C<nodes> nodes on free loopback ports, waits until it serves (with a leader)
and returns a harness object.  C<tick> is ZooKeeper's tickTime in ms,
C<sync_limit> and C<init_limit> its syncLimit and initLimit in ticks (a
follower that hears nothing from its leader for syncLimit x tickTime gives
up on it; until then it serves reads from what it has);
C<fsync> true makes the servers fsync their transaction log before they
answer, as in production (forceSync=yes);
C<jvm_flags> are extra JVM flags, e.g.
C<['-Dzookeeper.extendedTypesEnabled=true']>.

With C<proxies> true (ensembles only) the servers talk to each other through
TCP proxies on 127.0.0.1 (F<test/zkproxy>, one process controlled by
F<test/zk>), so that C<partition> and C<heal> below can cut a node off.  The
proxy is stopped with the ensemble.

=cut

sub zk_start
{
	my (%opts) = @_;
	my $nodes = $opts{nodes} // 1;
	my $dir;
	if (defined $PostgreSQL::Test::Utils::tmp_check)
	{
		# tempdir() is kept when the test fails, removed otherwise
		$dir = PostgreSQL::Test::Utils::tempdir('zk_' . basename($0, '.pl'));
	}
	else
	{
		$dir = File::Temp::tempdir('zklock_zk_XXXX', TMPDIR => 1, CLEANUP => 1);
	}

	my @args = ('start', $dir, '--nodes', $nodes);
	push @args, '--tick', $opts{tick} if defined $opts{tick};
	push @args, '--sync-limit', $opts{sync_limit} if defined $opts{sync_limit};
	push @args, '--init-limit', $opts{init_limit} if defined $opts{init_limit};
	push @args, '--proxies' if $opts{proxies};
	push @args, '--fsync' if $opts{fsync};
	push @args, map { ('--jvm-flag', $_) } @{ $opts{jvm_flags} // [] };
	my $connect = _run_zk(@args);

	my $self = bless {
		dir     => $dir,
		nodes   => $nodes,
		connect => $connect,
		proxies => $opts{proxies} ? 1 : 0,
		owner   => $$,
		stopped => 0,
	}, 'ZkLockTest::ZooKeeper';
	push @harnesses, $self;
	weaken($harnesses[-1]);
	note "ZooKeeper ($nodes node(s)"
	  . ($opts{proxies} ? ', proxied' : '')
	  . ") at $connect, state in $dir";
	return $self;
}

END
{
	# keep the test's exit status: Test::More and PostgreSQL::Test::Utils
	# look at $? after us
	local $?;
	foreach my $zk (grep { defined } @harnesses)
	{
		eval { $zk->stop if $zk->{owner} == $$; };
		diag "stopping ZooKeeper in $zk->{dir}: $@" if $@;
	}
}

=pod

=back

=head2 Harness methods

=over

=item $zk->connect

The connect string, e.g. C<127.0.0.1:23456> or
C<127.0.0.1:23456,127.0.0.1:23457,127.0.0.1:23458>.

=item $zk->dir, $zk->nodes

The state directory and the number of nodes.

=item $zk->port(i)

Client port of node i.

=item $zk->stop

Stops every node (TERM, then KILL); done automatically at the latest when
the test ends.

=item $zk->stop_node(i), $zk->start_node(i), $zk->kill_node(i)

Stop node i cleanly, restart it on its old port with its old data (waits
until it serves again: for an ensemble member that needs a quorum), or
SIGKILL it.  C<< $zk->start_node(i, wait => 0) >> does not wait.

=item $zk->pause_node(i), $zk->resume_node(i)

SIGSTOP / SIGCONT node i: the server keeps its sockets open but answers
nothing, as in a long GC pause or a frozen VM.

=item $zk->leader

Index of the current leader, waiting up to 30 s for there to be one (1 for
a standalone server).  Dies when there is none.

=item $zk->four(i, cmd)

Sends a four-letter word (ruok, srvr, mntr, wchs, cons, ...) to node i and
returns the answer ('' when the node does not answer within 3 s).

=item $zk->status

test/zk's status lines: "index port running|paused|stopped|partitioned mode
pid".

=item $zk->partition(i), $zk->heal(i)

Only for a harness started with C<< proxies => 1 >>.  C<partition> cuts node
i off from the other servers: the proxies stop forwarding between i and
the others in both directions but keep the TCP connections open (nothing is
closed or reset: a follower notices only when syncLimit x tickTime pass
without word from its leader, and serves its clients from its stale copy
until then), and new connections between them are reset.  C<heal> forwards
again and closes the connections that were cut, so the servers reconnect
at once.  Client ports are never cut.  Returns at once; poll for the state
you need.

=item $zk->partitioned

The nodes cut off now (a list).

=item $zk->node_mode(i)

Mode of node i from C<srvr> (leader, follower, standalone), '' when it
does not serve.

=back

=cut

package ZkLockTest::ZooKeeper;

use strict;
use warnings;

sub connect { return $_[0]->{connect}; }
sub dir     { return $_[0]->{dir}; }
sub nodes   { return $_[0]->{nodes}; }

sub port
{
	my ($self, $i) = @_;
	return ZkLockTest::_run_zk('port', $self->{dir}, $i);
}

sub stop
{
	my ($self) = @_;
	return if $self->{stopped};
	ZkLockTest::_run_zk('stop', $self->{dir});
	$self->{stopped} = 1;
	return;
}

sub stop_node
{
	my ($self, $i) = @_;
	ZkLockTest::_run_zk('stop-node', $self->{dir}, $i);
	return;
}

sub start_node
{
	my ($self, $i, %opts) = @_;
	my @wait = ($opts{wait} // 1) ? () : ('--no-wait');
	ZkLockTest::_run_zk('start-node', $self->{dir}, $i, @wait);
	$self->{stopped} = 0;
	return;
}

sub kill_node
{
	my ($self, $i) = @_;
	ZkLockTest::_run_zk('kill-node', $self->{dir}, $i);
	return;
}

sub pause_node
{
	my ($self, $i) = @_;
	ZkLockTest::_run_zk('pause-node', $self->{dir}, $i);
	return;
}

sub resume_node
{
	my ($self, $i) = @_;
	ZkLockTest::_run_zk('resume-node', $self->{dir}, $i);
	return;
}

sub leader
{
	my ($self) = @_;
	return ZkLockTest::_run_zk('leader', $self->{dir});
}

sub four
{
	my ($self, $i, $cmd) = @_;
	return ZkLockTest::_run_zk('4lw', $self->{dir}, $i, $cmd);
}

sub status
{
	my ($self) = @_;
	return ZkLockTest::_run_zk('status', $self->{dir});
}

sub partition
{
	my ($self, $i) = @_;
	Carp::croak 'partition needs a harness started with proxies => 1'
	  unless $self->{proxies};
	ZkLockTest::_run_zk('partition', $self->{dir}, $i);
	return;
}

sub heal
{
	my ($self, $i) = @_;
	Carp::croak 'heal needs a harness started with proxies => 1'
	  unless $self->{proxies};
	ZkLockTest::_run_zk('heal', $self->{dir}, $i);
	return;
}

sub partitioned
{
	my ($self) = @_;
	return () unless $self->{proxies};
	my $out = ZkLockTest::_run_zk('proxy', $self->{dir});
	my ($list) = $out =~ /partitioned=(\S+)/;
	return () unless defined $list && $list ne '-';
	return split /,/, $list;
}

sub node_mode
{
	my ($self, $i) = @_;
	my ($mode) = $self->four($i, 'srvr') =~ /^Mode: (\S+)/m;
	return $mode // '';
}

sub DESTROY
{
	my ($self) = @_;
	local ($?, $@);
	eval { $self->stop if $self->{owner} == $$; };
	return;
}

package ZkLockTest;

=pod

=head1 POSTGRESQL

=over

=item ZkLockTest::pg_node($name, $zk, %extra_conf)

Creates, initializes and starts a PostgreSQL::Test::Cluster with
C<shared_preload_libraries = 'zklock'>, C<zklock.hosts> pointing at C<$zk>
(a harness, or a connect string of your own), C<zklock.session_timeout =
4000> and then the settings of C<%extra_conf> (name => value, appended in
the order given, values quoted for postgresql.conf, so they override the
defaults above).  Runs C<CREATE EXTENSION zklock> in database postgres and
returns the node.

=cut

sub pg_node
{
	my ($name, $zk, @extra) = @_;
	croak 'odd number of settings' if @extra % 2;

	my $hosts = ref $zk ? $zk->connect : $zk;
	my $conf = "\n# zklock test settings\n"
	  . "shared_preload_libraries = 'zklock'\n"
	  . "zklock.hosts = " . _conf_quote($hosts) . "\n"
	  . "zklock.session_timeout = 4000\n";
	while (my ($setting, $value) = splice(@extra, 0, 2))
	{
		$conf .= "$setting = " . _conf_quote($value) . "\n";
	}

	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	use_private_install($node);
	$node->append_conf('postgresql.conf', $conf);
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION zklock');
	return $node;
}

=pod

=item ZkLockTest::cron_nodes($zk, $prefix, @settings)

Two instances, C<${prefix}_a> and C<${prefix}_b> (also their cluster_name),
preloading zklock and pg_cron (C<cron.database_name = postgres>, background
workers), with the extra settings given; skips the whole test when pg_cron
(Debian package postgresql-15-cron) is not installed.

=cut

sub cron_nodes
{
	my ($zk, $prefix, @extra) = @_;
	my $sharedir = `pg_config --sharedir`;
	chomp $sharedir;
	Test::More::plan(skip_all =>
		  'pg_cron is not installed (Debian package postgresql-15-cron)')
	  unless -f "$sharedir/extension/pg_cron.control";
	my @conf = (
		shared_preload_libraries => 'zklock,pg_cron',
		'cron.database_name' => 'postgres',
		'cron.use_background_workers' => 'on',
		@extra);
	return map { pg_node("${prefix}_$_", $zk, @conf, cluster_name => "${prefix}_$_") }
	  qw(a b);
}

=pod

=item ZkLockTest::use_private_install($node)

Makes C<$node> (initialized, not started) load zklock from the private
installation test/run-tests built for this run: includes the file named by
C<$ZKLOCK_TEST_INSTALL_CONF> (dynamic_library_path, extension_destdir) in its
postgresql.conf.  Does nothing when that variable is empty (run-tests
--no-build: the system's installation is used).  pg_node does this itself;
call it for nodes made with PostgreSQL::Test::Cluster directly.

=cut

sub use_private_install
{
	my ($node) = @_;
	my $conf = $ENV{ZKLOCK_TEST_INSTALL_CONF} // '';
	$node->append_conf('postgresql.conf', "include " . _conf_quote($conf) . "\n")
	  if $conf ne '';
	return;
}

# A value quoted for postgresql.conf.
sub _conf_quote
{
	my ($value) = @_;
	$value =~ s/'/''/g;
	return "'$value'";
}

=pod

=item ZkLockTest::wait_for_extension_wait($node, $who, timeout => secs)

Polls C<pg_stat_activity> of C<$node> until the session C<$who> shows
C<wait_event_type = 'Extension'>, i.e. waits in a zklock call.  C<$who> is
a L<ZkLockTest::Session> whose statement was sent (best: its statement
finishing without the wait is then seen at once), a backend pid (a
number) or an C<application_name> (anything else).  Returns 1.

A wait that cannot come fails early, with what was seen (the session's
row and the zklock worker's): at once when the session's statement
completed (its output and error are shown) or its backend is gone; after
15 s when the backend stayed idle (no statement) or waited on anything
else (an LWLock that a stopped worker holds, say) all along; after
C<timeout> seconds (default 60) in any case.

=cut

sub wait_for_extension_wait
{
	my ($node, $who, %opts) = @_;
	croak 'wait_for_extension_wait needs a session, a pid or an application_name'
	  unless defined $who && $who ne '';
	my $session = ref $who && $who->isa('ZkLockTest::Session') ? $who : undef;
	$who = $session->pid if $session;
	my $which =
	  $who =~ /^\d+$/
	  ? "pid = $who"
	  : "application_name = '" . ($who =~ s/'/''/gr) . "'";
	my $timeout = $opts{timeout} // 60;
	my $stuck_after = 15;
	my $start = Time::HiRes::time();
	my ($row, $last_kind, $kind_since) = ('', '', $start);
	my $fail = sub {
		my ($why) = @_;
		croak "session $who never waited on a zklock: $why after "
		  . sprintf('%.1f', Time::HiRes::time() - $start)
		  . " s; its row (pid|state|wait_event_type|wait_event|query): \"$row\"; "
		  . 'zklock worker: ' . _worker_process($node);
	};
	while (1)
	{
		if ($session && $session->pending && $session->done)
		{
			my ($out, $err) = $session->peek;
			$fail->("its statement completed (output \"$out\", error \"$err\")");
		}
		$row = $node->safe_psql('postgres',
			"SELECT pid, state, coalesce(wait_event_type, ''), "
			  . "coalesce(wait_event, ''), left(query, 200) "
			  . "FROM pg_stat_activity WHERE $which");
		my (undef, $state, $type) = split /\|/, $row, -1;
		return 1 if ($type // '') eq 'Extension';
		my $now = Time::HiRes::time();
		$fail->('its backend is gone')
		  if $row eq '' && $who =~ /^\d+$/;
		my $kind =
		    $row eq '' ? 'absent'
		  : $state ne 'active' ? "state $state"
		  : $type ne '' ? "waiting on $type"
		  : 'running';
		if ($kind ne $last_kind)
		{
			($last_kind, $kind_since) = ($kind, $now);
		}
		elsif ($kind ne 'running' && $now - $kind_since >= $stuck_after)
		{
			$fail->("$kind for $stuck_after s");
		}
		$fail->("no wait within $timeout s") if $now - $start >= $timeout;
		Time::HiRes::sleep(0.05);
	}
}

# The zklock worker of $node as the kernel sees it, for a diagnostic: "pid
# P, state S (T: stopped), in syscall N" (it has no row in pg_stat_activity:
# no database connection), or "none found".
sub _worker_process
{
	my ($node) = @_;
	my $pm = $node->{_pid} // return 'none found (no postmaster)';
	foreach my $stat (glob '/proc/[0-9]*/stat')
	{
		open my $fh, '<', $stat or next;
		my $line = <$fh> // '';
		close $fh;
		my ($pid, $comm, $state, $ppid) =
		  $line =~ /^(\d+) \((.*)\) (\S) (\d+)/ or next;
		next unless $ppid == $pm;
		open my $cf, '<', "/proc/$pid/cmdline" or next;
		my $cmd = <$cf> // '';
		close $cf;
		next unless $cmd =~ /zklock worker/;
		my $sys = '?';
		if (open my $sf, '<', "/proc/$pid/syscall")
		{
			$sys = (split ' ', <$sf> // '?')[0];
			close $sf;
		}
		return "pid $pid, state $state (T: stopped), in syscall $sys";
	}
	return 'none found';
}

=pod

=item ZkLockTest::example_file($name, %values)

The text of C<docs/examples/$name>, a configuration file users copy, with
the values marked C<[site]> replaced for this run and nothing else
changed.  A mark is a comment containing C<[site]>: at the end of the
line it marks (YAML), or on a line of its own before it (ini and shell
files, which have no end-of-line comments).  Each marked value is named by
its path: YAML keys joined with dots, C<[]> appended for a list item
(C<restapi.listen>, C<postgresql.pg_hba[]>); C<section.key> in an ini
file (C<pgbouncer.listen_port>); the variable in a shell file.
C<%values> maps every path marked in the file to the new value, or to a
code reference that gets the value as written and returns the new one.
Dies when a marked value has no entry or an entry marks nothing, so a
change to the file shows in its test.

=cut

sub example_file
{
	my ($name, %values) = @_;
	my $file = "$SRC_DIR/docs/examples/$name";
	open my $fh, '<', $file or croak "cannot open $file: $!";
	my @lines = <$fh>;
	close $fh;

	my (%used, @stack, $section, $mark_next);
	my $fill = sub {
		my ($path, $old) = @_;
		croak "$name: no value given for the [site] value $path"
		  unless exists $values{$path};
		$used{$path} = 1;
		my $v = $values{$path};
		return ref $v eq 'CODE' ? $v->($old) : $v;
	};
	foreach my $line (@lines)
	{
		if ($line =~ /^\s*[;#].*\[site\]/)
		{
			$mark_next = 1;
			next;
		}
		next if $line =~ /^\s*(?:[;#].*)?$/;
		if ($name =~ /\.ya?ml$/)
		{
			my ($indent, $item, $key, $rest) =
			  $line =~ /^(\s*)(- )?(?:([\w.]+):(?:\s|$))?(.*?)\n?$/;
			pop @stack while @stack && $stack[-1][0] >= length $indent;
			my $path = join '.', map { $_->[1] } @stack;
			$path = join '.', grep { $_ ne '' } $path, $key // ''
			  if defined $key;
			$path .= '[]' if $item;
			push @stack, [ length $indent, $key ] if defined $key && !$item;
			next unless $rest =~ /^(.*?)(\s+#[^#]*\[site\].*)$/s;
			my ($old, $comment) = ($1, $2);
			my $new = $fill->($path, $old);
			$line = $indent . ($item // '') . (defined $key ? "$key: " : '')
			  . $new . $comment . "\n";
		}
		elsif ($line =~ /^\[(\w+)\]/)
		{
			$section = $1;
		}
		elsif ($mark_next && $line =~ /^(\s*)([\w.]+)(\s*=\s*)(.*?)\s*$/)
		{
			my ($indent, $key, $eq, $old) = ($1, $2, $3, $4);
			my $path = defined $section ? "$section.$key" : $key;
			if (!defined $section && $old =~ /^'(.*)'$/)
			{
				# a shell variable: single-quoted
				my $new = $fill->($path, $1);
				$line = "$key='$new'\n";
			}
			else
			{
				$line = "$indent$key$eq" . $fill->($path, $old) . "\n";
			}
		}
		$mark_next = 0;
	}
	my @unused = grep { !$used{$_} } sort keys %values;
	croak "$name: no [site] value at " . join(', ', @unused) if @unused;
	return join '', @lines;
}

=pod

=item ZkLockTest::doc_block($page, $name, $from => $to, ...)

The fenced block of C<$page> (a path below the top of the tree, e.g.
C<docs/tls.md>) right after the line C<< <!-- docs-block: $name --> >>,
with each C<$from> replaced by its C<$to>, in order.  Dies when there is
no such block or a C<$from> is not in it, so that a change of the page
shows in its test.  Replace only what a reader adapts too: ports, paths,
file names.

=cut

sub doc_block
{
	my ($page, $name, @replace) = @_;
	my $text = slurp_file("$SRC_DIR/$page");
	$text =~ /^<!-- docs-block: \Q$name\E -->\n```\w*\n(.*?)^```$/ms
	  or croak "$page has no block \"$name\"";
	my $block = $1;
	while (my ($from, $to) = splice(@replace, 0, 2))
	{
		index($block, $from) >= 0
		  or croak "block \"$name\" of $page does not contain \"$from\"";
		$block =~ s/\Q$from\E/$to/g;
	}
	return $block;
}

=pod

=back

=head1 LOOKING INTO ZOOKEEPER

=over

=item ZkLockTest::zk_children($zk, $path)

Sorted names of the children of znode C<$path> (empty list when it does not
exist), read with kazoo; in scalar context their number.  C<$zk> is a harness
or a connect string.

=cut

sub zk_children
{
	my ($zk, $path) = @_;
	my $out = zk_python(
		$zk, q{
try:
    for child in sorted(zk.get_children(args[0])):
        print(child)
except NoNodeError:
    pass
}, $path);
	# an array, so that a scalar context gets the number of children
	my @children = sort split /\n/, $out;
	return @children;
}

=pod

=item ZkLockTest::zk_python($zk, $code, @args)

Runs Python code with a started kazoo client in C<zk> (connected to the
harness's nodes that are neither stopped nor paused), the extra arguments
in the list C<args>, and C<KazooClient>, C<NoNodeError> and
C<NodeExistsError> imported; returns what it prints.  Dies when it fails.
Handy for playing a foreign client, e.g.
C<zk.create('/zklock/a/_c_x-lock-', ephemeral=True, sequence=True)>.

=cut

sub zk_python
{
	my ($zk, $code, @args) = @_;
	my $hosts = ref $zk ? _observer_hosts($zk) : $zk;
	# The caller's code runs through exec(), dedented, so it may be written
	# with any common indentation.
	my $wrapper = <<'PY';
import logging, sys, textwrap
logging.basicConfig(level=logging.CRITICAL)
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NodeExistsError
zk = KazooClient(hosts=sys.argv[1], timeout=10.0)
zk.start(timeout=30)
try:
    exec(compile(textwrap.dedent(sys.argv[2]), '<zk_python>', 'exec'),
         {'zk': zk, 'args': sys.argv[3:], 'KazooClient': KazooClient,
          'NoNodeError': NoNodeError, 'NodeExistsError': NodeExistsError})
finally:
    zk.stop()
    zk.close()
PY
	my ($out, $err) = ('', '');
	IPC::Run::run([ $PYTHON, '-c', $wrapper, $hosts, $code, @args ],
		'<', '/dev/null', '>', \$out, '2>', \$err)
	  or croak "kazoo script failed: $err";
	return $out;
}

# Connect string of the harness's nodes that run and are not paused (kazoo
# would lose seconds on a paused one); all of them if none is.
sub _observer_hosts
{
	my ($zk) = @_;
	my @up =
	  map { "127.0.0.1:$_->[1]" }
	  grep { $_->[2] eq 'running' }
	  map { [ split ' ' ] } split /\n/, $zk->status;
	return @up ? join(',', @up) : $zk->connect;
}

=pod

=back

=cut

1;


# ZkInterop.pm
#    Real peer clients for zklock's interoperability test
#    (test/t/050_interop.pl): Apache Curator (test/java/CuratorDriver.java,
#    compiled on the fly) and Kazoo (test/python/kazoo_driver.py), each a
#    process answering commands line by line.  Documentation: POD below.

=pod

=head1 NAME

ZkInterop - Curator and Kazoo peers driven from zklock's TAP tests

=head1 SYNOPSIS

  use ZkInterop;

  my $curator = ZkInterop::curator($zk);          # one JVM for the test
  my $kazoo = ZkInterop::kazoo($zk);

  is($curator->ask(c1 => 'mutex-acquire /zklock/a 500'), 'timeout');
  $curator->send(c1 => 'mutex-acquire /zklock/a -1');   # blocks in Curator
  ...
  is($curator->answer('c1'), 'ok');                     # waits for it
  $curator->quit;

=head1 DESCRIPTION

A driver reads lines "TAG COMMAND ARGS" and answers each with one line
"TAG RESULT" (C<ok>, C<timeout> or C<error ...>); commands of one tag run in
order on the tag's own thread, commands of different tags concurrently.  The
commands are listed at the top of each driver's source.  A driver's standard
error goes to a file in C<$PostgreSQL::Test::Utils::log_path>.

=cut

package ZkInterop;

use strict;
use warnings;

use Carp;
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

# test/ (this module lives in test/perl)
our $TEST_DIR = abs_path(dirname(abs_path(__FILE__)) . '/..');

# Jars of Debian's libcurator-recipes-java (and what it depends on:
# libcurator-framework-java, libcurator-client-java, libzookeeper-java,
# libguava-java, libslf4j-java).  Curator's lock recipes use these directly;
# Debian's jars also name their dependencies with absolute paths in their
# manifests' Class-Path (jackson for curator-framework; netty, metrics, ...
# for zookeeper), so curator-recipes.jar plus an slf4j binding would do too.
# slf4j-simple prints Curator's and ZooKeeper's warnings to the driver's log.
our $JAVA_DIR = $ENV{ZKLOCK_TEST_JAVA_DIR} // '/usr/share/java';
our @CURATOR_JARS = qw(curator-recipes.jar curator-framework.jar
  curator-client.jar zookeeper.jar zookeeper-jute.jar guava.jar
  slf4j-api.jar slf4j-simple.jar);

our $JAVA = $ENV{JAVA} // 'java';
our $JAVAC = $ENV{JAVAC} // 'javac';

# The Python that has kazoo (on Debian: python3-kazoo), as in ZkLockTest.
our $PYTHON = $ENV{ZKLOCK_TEST_PYTHON} // '/usr/bin/python3';

=pod

=head1 FUNCTIONS

=over

=item ZkInterop::curator_classpath()

The class path of Curator's jars (without the driver's classes).

=cut

sub curator_classpath
{
	return join ':', map { "$JAVA_DIR/$_" } @CURATOR_JARS;
}

=pod

=item ZkInterop::curator($zk)

Compiles F<test/java/CuratorDriver.java> into a temporary directory below
C<tmp_check> (never into the source tree), starts it against C<$zk> (a
harness or a connect string) and returns the driver once it is connected.

=cut

sub curator
{
	my ($zk) = @_;
	my $classes = PostgreSQL::Test::Utils::tempdir('curator_classes');
	my $cp = curator_classpath();
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[
			$JAVAC, '-nowarn', '-d', $classes, '-cp', $cp,
			"$TEST_DIR/java/CuratorDriver.java"
		],
		'<', '/dev/null', '>', \$out, '2>', \$err)
	  or croak "javac CuratorDriver.java failed: $out$err";
	return ZkInterop::Driver->start(
		'curator',
		[
			$JAVA, '-Xss512k', '-XX:+UseSerialGC', '-XX:TieredStopAtLevel=1',
			'-Dorg.slf4j.simpleLogger.defaultLogLevel=warn',
			'-cp', "$cp:$classes", 'CuratorDriver', _connect($zk)
		]);
}

=pod

=item ZkInterop::kazoo($zk)

Starts F<test/python/kazoo_driver.py> against C<$zk> and returns the
driver once it is connected.

=cut

sub kazoo
{
	my ($zk) = @_;
	return ZkInterop::Driver->start('kazoo',
		[ $PYTHON, "$TEST_DIR/python/kazoo_driver.py", _connect($zk) ]);
}

sub _connect
{
	my ($zk) = @_;
	return ref $zk ? $zk->connect : $zk;
}

=pod

=back

=head1 DRIVER METHODS

=over

=item $driver->send($tag, $command)

Sends "TAG COMMAND" and returns at once.

=item $driver->answer($tag, timeout => secs)

Waits for the next answer of C<$tag> and returns it ("ok", "timeout",
"error ..."); undef when none came within C<timeout> seconds (default
C<$PostgreSQL::Test::Utils::timeout_default>) or the driver died.

=item $driver->answered($tag)

Whether an answer of C<$tag> has arrived (without waiting or consuming it).

=item $driver->ask($tag, $command)

C<send> and C<answer>.

=item $driver->unclaimed

The answers that arrived but were never collected with C<answer>, as
"TAG RESULT" lines (after a final look at the output).

=item $driver->quit

Asks the driver to end (whatever it holds goes with its session) and
waits for it to exit; returns its exit status.

=back

=cut

package ZkInterop::Driver;

use strict;
use warnings;

use Carp;
use File::Basename qw(basename);
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

sub start
{
	my ($class, $name, $cmd) = @_;
	my $log = "$PostgreSQL::Test::Utils::log_path/"
	  . basename($0, '.pl') . "_$name.log";
	my $self = bless {
		name    => $name,
		in      => '',
		out     => '',
		answers => {},
		log     => $log,
		timer   => IPC::Run::timer($PostgreSQL::Test::Utils::timeout_default),
	}, $class;
	note "starting $name driver: @$cmd (stderr in $log)";
	$self->{run} = IPC::Run::start($cmd, '<', \$self->{in}, '>', \$self->{out},
		'2>>', $log, $self->{timer});
	$self->_wait_for(sub { $self->{ready} }, $PostgreSQL::Test::Utils::timeout_default)
	  or croak "$name driver did not get ready: " . _tail($log);
	return $self;
}

sub _tail
{
	my ($file) = @_;
	open my $fh, '<', $file or return '';
	my @lines = <$fh>;
	return join '', @lines[ ($#lines > 20 ? $#lines - 20 : 0) .. $#lines ];
}

# Move complete lines of output into the answer queues.
sub _collect
{
	my ($self) = @_;
	while ($self->{out} =~ s/^([^\n]*)\n//)
	{
		my $line = $1;
		if ($line eq 'ready')
		{
			$self->{ready} = 1;
		}
		elsif ($line =~ /^(\S+) (.*)$/)
		{
			push @{ $self->{answers}{$1} }, $2;
			note "$self->{name}: $line";
		}
		else
		{
			diag "$self->{name} driver said: $line";
		}
	}
	return;
}

# Pump until $cond is true or $secs pass; returns whether it is.
sub _wait_for
{
	my ($self, $cond, $secs) = @_;
	$self->{timer}->start($secs);
	while (1)
	{
		$self->_collect;
		return 1 if $cond->();
		return 0 if !$self->{run}->pumpable || $self->{timer}->is_expired;
		$self->{run}->pump;
	}
}

sub send
{
	my ($self, $tag, $command) = @_;
	croak "$self->{name} driver has gone" unless $self->{run}->pumpable;
	note "$self->{name} <- $tag $command";
	$self->{in} .= "$tag $command\n";
	$self->{run}->pump_nb;
	return;
}

sub answered
{
	my ($self, $tag) = @_;
	$self->{run}->pump_nb if $self->{run}->pumpable;
	$self->_collect;
	return scalar @{ $self->{answers}{$tag} // [] };
}

sub answer
{
	my ($self, $tag, %opts) = @_;
	my $secs = $opts{timeout} // $PostgreSQL::Test::Utils::timeout_default;
	my $got = $self->_wait_for(sub { @{ $self->{answers}{$tag} // [] } }, $secs);
	unless ($got)
	{
		diag "$self->{name} driver: no answer for $tag within $secs s"
		  . ($self->{run}->pumpable ? '' : ' (it has exited)')
		  . "; its log ends with:\n" . _tail($self->{log});
		return undef;
	}
	return shift @{ $self->{answers}{$tag} };
}

sub ask
{
	my ($self, $tag, $command) = @_;
	$self->send($tag, $command);
	return $self->answer($tag);
}

sub unclaimed
{
	my ($self) = @_;
	$self->{run}->pump_nb if $self->{run}->pumpable;
	$self->_collect;
	my @lines;
	foreach my $tag (sort keys %{ $self->{answers} })
	{
		push @lines, map { "$tag $_" } @{ $self->{answers}{$tag} };
	}
	return @lines;
}

sub quit
{
	my ($self) = @_;
	return $self->{status} if defined $self->{status};
	if ($self->{run}->pumpable)
	{
		$self->{in} .= "quit\n";
		$self->{timer}->start($PostgreSQL::Test::Utils::timeout_default);
		eval { $self->{run}->finish; };
		if ($@)
		{
			diag "$self->{name} driver did not exit: $@";
			eval { $self->{run}->kill_kill; };
		}
	}
	else
	{
		eval { $self->{run}->finish; };
	}
	$self->_collect;
	$self->{status} = $self->{run}->full_result(0) // -1;
	return $self->{status};
}

sub DESTROY
{
	my ($self) = @_;
	local ($?, $@);
	eval { $self->{run}->kill_kill if $self->{run} && !defined $self->{status}; };
	return;
}

1;

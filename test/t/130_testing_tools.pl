# 130_testing_tools.pl
#    What zklock gives users for their own regression tests
#    (docs/testing.md): testing/zklock-test-zookeeper, the throwaway
#    ZooKeeper, answers on 127.0.0.1 only, refuses a port in use, stops and
#    starts again on its port, goes with its directory when its parent
#    process is killed, names the package to install when Java or ZooKeeper
#    is missing, and its "run" starts instances that preload zklock and
#    stops everything whatever the command did; the page's Makefile is the
#    example's (examples/nightly_jobs, whose make installcheck
#    test/example-test runs from the package), its psql excerpts are the
#    example's, and its shell block runs.

use strict;
use warnings;

use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

use ZkLockTest;

my $SRC = $ZkLockTest::SRC_DIR;
my $ZK = "$SRC/testing/zklock-test-zookeeper";
my $EXAMPLE = "$SRC/examples/nightly_jobs";
my $base = tempdir('zktool_XXXX', DIR => $PostgreSQL::Test::Utils::tmp_check, CLEANUP => 1);

# Run the program: (exit status, stdout, stderr).
sub zk
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $ZK, @_ ], '<', \undef, '>', \$out, '2>', \$err);
	return ($? >> 8, $out, $err);
}

# ZooKeeper's answer to "ruok" on 127.0.0.1:$port ('' when none).
sub ruok
{
	my ($port) = @_;
	my $out = '';
	IPC::Run::run([ 'bash', '-c', 'exec 3<> "/dev/tcp/127.0.0.1/$0" || exit 1; printf ruok >&3; timeout 3 cat <&3', $port ],
		'>', \$out, '2>', \my $err);
	return $out;
}

# The command line in /proc/PID/cmdline file $1 ('' when it is gone).
sub cmdline
{
	my ($file) = @_;
	open my $fh, '<', $file or return '';
	local $/;
	my $s = <$fh> // '';
	return $s;
}

# Poll up to 30 s for $cond.
sub eventually
{
	my ($cond) = @_;
	for (1 .. 300)
	{
		return 1 if $cond->();
		usleep(100_000);
	}
	return 0;
}

# --- the page and the example --------------------------------------------
my $page = slurp_file("$SRC/docs/testing.md");
# its fenced blocks: [language, text, the line before]
my (@blocks, $open, $before);
foreach my $line (split /\n/, $page)
{
	if (!$open && $line =~ /^```(\w*)$/)
	{
		$open = [ $1, '', $before ];
	}
	elsif ($open && $line eq '```')
	{
		push @blocks, $open;
		undef $open;
	}
	elsif ($open)
	{
		$open->[1] .= "$line\n";
	}
	$before = $line;
}
my @make = map { $_->[1] } grep { $_->[0] eq 'make' } @blocks;
is(scalar @make, 1, 'docs/testing.md has one Makefile');
is($make[0], slurp_file("$EXAMPLE/Makefile"), "the page's Makefile is examples/nightly_jobs/Makefile");

my @sql = map { $_->[1] } grep { $_->[0] eq 'sql' } @blocks;
is(scalar @sql, 1, 'the page has one SQL block');
ok(index(slurp_file("$EXAMPLE/sql/wait_connected.psql"), $sql[0] // 'none') >= 0,
	"the page's wait for the worker is the example's");

my $scripts = join '', map { slurp_file($_) } glob("$EXAMPLE/sql/*.sql");
my @excerpts = map { $_->[1] } grep { $_->[0] eq '' } @blocks;
ok(@excerpts >= 2, 'the page has psql excerpts');
foreach my $line (map { split /\n/ } @excerpts)
{
	next if $line eq '-- ...';
	ok(index($scripts, "$line\n") >= 0, "the example's scripts have the page's line: $line");
}

# --- start: 127.0.0.1 only, its settings ---------------------------------
# (each server's parent is this test: should the test die, they go too)
my ($rc, $out, $err) = zk('start', "$base/a", '--parent', $$,
	'--hosts-file', "$base/hosts", '--env-file', "$base/env");
is($rc, 0, 'start') or diag $err;
like($out, qr/^127\.0\.0\.1:(\d+)\n\z/, 'start prints the zklock.hosts value');
my ($port) = $out =~ /:(\d+)/;
is(slurp_file("$base/hosts"), $out, '--hosts-file has it');
is(slurp_file("$base/env"), "ZKLOCK_TEST_HOSTS=127.0.0.1:$port\nZKLOCK_TEST_ZOOKEEPER_DIR=$base/a\n",
	'--env-file has it and the directory');
is(ruok($port), 'imok', 'the server answers');
my @listen = grep { /:$port\s/ } split /\n/, `ss -Htln`;
ok(@listen >= 1 && !(grep { !/\s127\.0\.0\.1:$port\s/ } @listen), 'it listens on 127.0.0.1 only')
  or diag join("\n", @listen);
my $cfg = slurp_file("$base/a/zoo.cfg");
like($cfg, qr/^forceSync=no$/m, 'fsync is off');
like($cfg, qr/^tickTime=200$/m, 'the tick is 200 ms');

# its directory is its own
($rc, $out, $err) = zk('start', "$base/a", '--parent', $$);
like($err, qr/\Q$base\E\/a is in use by another ZooKeeper/, 'a second start in the same directory is refused');

# a port in use is refused, and nothing is left
($rc, $out, $err) = zk('start', "$base/b", '--port', $port, '--parent', $$);
isnt($rc, 0, 'a second server on the same port fails');
like($err, qr/port $port of 127\.0\.0\.1 is in use/, 'it says the port is in use');
ok(!-e "$base/b", 'and leaves no directory');

# an outage: down and up on the same port
is((zk('down', "$base/a"))[0], 0, 'down');
is(ruok($port), '', 'the server is down');
is((zk('up', "$base/a"))[0], 0, 'up');
is(ruok($port), 'imok', 'it answers again on its port');
is((zk('hosts', "$base/a"))[1], "127.0.0.1:$port\n", 'hosts');
is((zk('stop', "$base/a"))[0], 0, 'stop');
ok(!-e "$base/a", 'stop removes the directory');
is(ruok($port), '', 'the server is gone');

# --- the parent killed ---------------------------------------------------
my $parent = IPC::Run::start([ 'sleep', '600' ]);
my $ppid = $parent->{KIDS}[0]{PID};
($rc, $out) = zk('start', "$base/c", '--parent', $ppid);
is($rc, 0, 'start with a parent');
($port) = $out =~ /:(\d+)/;
my $jvm = slurp_file("$base/c/pid");
chomp $jvm;
kill 'KILL', $ppid;
$parent->finish;
ok(eventually(sub { !-e "$base/c" && !kill(0, $jvm) }),
	'once its parent is killed, the server goes and its directory with it');
is(ruok($port), '', 'the server does not answer');

# --- missing Java or ZooKeeper ---------------------------------------------
{
	local $ENV{JAVA} = '/nonexistent/java';
	($rc, $out, $err) = zk('start', "$base/d");
	isnt($rc, 0, 'without Java, start fails');
	like($err, qr/java not found: install Debian's zookeeper package/, 'naming the package');
}
{
	local $ENV{ZK_CLASSPATH} = '/nonexistent/zookeeper.jar';
	($rc, $out, $err) = zk('start', "$base/d");
	like($err, qr/install Debian's zookeeper package \(apt-get install zookeeper\)/,
		'without ZooKeeper, start names the package');
}
ok(!-e "$base/d", 'neither leaves a directory');

# --- run, with an instance --------------------------------------------------
my $bindir = `$ENV{PG_CONFIG} --bindir`;
chomp $bindir;
my @include = $ENV{ZKLOCK_TEST_INSTALL_CONF} ? ('--set', "include=$ENV{ZKLOCK_TEST_INSTALL_CONF}") : ();
my $wait = q{DO $$ BEGIN FOR i IN 1..300 LOOP EXIT WHEN (SELECT state FROM zk_status()) = 'connected'; }
  . q{PERFORM pg_sleep(0.1); END LOOP; END $$};
($rc, $out, $err) = zk('run', '--dir', "$base/e", '--instances', '1', '--bindir', $bindir, @include,
	'--set', 'zklock.connect_timeout=1000', '--', 'bash', '-c',
	qq{"$bindir/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "\$ZKLOCK_TEST_PORT1" -d postgres }
	  . q{-c 'CREATE EXTENSION zklock' -c "$0" -c 'SELECT state FROM zk_status()' }
	  . q{-c "SELECT setting FROM pg_settings WHERE name = 'zklock.hosts'" && }
	  . q{echo "hosts $ZKLOCK_TEST_HOSTS" && exit 3}, $wait);
is($rc, 3, "run exits with the command's status") or diag $err;
like($out, qr/^connected\n(127\.0\.0\.1:\d+)\nhosts \1\n\z/,
	'its instance preloads zklock, connected to the ZooKeeper the command was given')
  or diag "out: $out\nerr: $err";
ok(!-e "$base/e", 'run removes its directory');
ok(!grep({ index(cmdline($_), "$base/e") >= 0 } glob('/proc/[0-9]*/cmdline')),
	'and leaves no process (server, instance, watchdog)');

# --- the page's shell block --------------------------------------------------
my @sh = map { $_->[1] } grep { $_->[0] eq 'sh' && $_->[2] eq '<!-- run by test/t/130_testing_tools.pl -->' } @blocks;
is(scalar @sh, 1, 'the page has one shell block to run');
my $sh = $sh[0] // '';
ok($sh =~ s{^ZK=/usr/lib/postgresql/\d+/bin/zklock-test-zookeeper(?=\s)}{ZK=$ZK}m,
	'the shell block names the installed program');
IPC::Run::run([ 'bash', '-e', '-c', $sh ], '>', \$out, '2>', \$err);
is($?, 0, 'the shell block runs') or diag $err;
like($out, qr/^zklock\.hosts = '127\.0\.0\.1:\d+'\na test against 127\.0\.0\.1:\d+\n\z/, 'with its output')
  or diag $out;

done_testing();

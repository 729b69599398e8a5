# 066_kinds_interop.pl
#    Kinds of lock on one name, across implementations and within one
#    backend:
#    - which of zklock's kinds (lock, read, write, semaphore) exclude which
#      recipe of the real Curator 5.4 (InterProcessMutex, the two sides of
#      InterProcessReadWriteLock, InterProcessSemaphoreV2) and Kazoo 2.8
#      (Lock, WriteLock, ReadLock, with the extra_lock_patterns
#      docs/interoperability.md names) on the same path: every cell of its table
#      "Kinds across implementations", both ways round (zklock first, then
#      the peer; the peer first, then zklock).  Where the peer does not
#      count zklock's node, the test shows the peer taking the lock beside
#      a zklock holder, as docs/interoperability.md warns;
#    - a backend holding the exclusive lock of a name, whose session waits
#      for a confirmation (the worker paused), that asks for the read lock
#      of the name gets it on its own node once the session is confirmed,
#      as a re-entrant acquire of the same kind does, instead of queueing
#      behind its own node.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(zk_status_of poll_status poll_session signal_process
  zk_lock_nodes);
use ZkInterop;

my $zk = ZkLockTest::zk_start();

# A session timeout of 10 s: the worker's session goes unconfirmed 2.5 to
# 5 s after the worker stops (it confirms every quarter timeout and vouches
# for half a timeout), and cannot be lost before 7.5 s.
my $node = ZkLockTest::pg_node('kinds', $zk, 'zklock.session_timeout' => '10000');
poll_status($node, sub { $_[0]{state} eq 'connected' });

my $curator = ZkInterop::curator($zk);
my $kazoo = ZkInterop::kazoo($zk);
my $s1 = ZkLockTest::Session->new($node);

# ===========================================================================
note '1. kinds across implementations, on one path';
# ===========================================================================

# zklock's kinds: how to take one without waiting, and give it back.
my %zklock = (
	lock  => [ "zk_lock_acquire('%s', 0)",  "zk_lock_release('%s')" ],
	read  => [ "zk_rwlock_read('%s', 0)",   "zk_rwlock_read_release('%s')" ],
	write => [ "zk_rwlock_write('%s', 0)",  "zk_rwlock_write_release('%s')" ],);

# The peers: driver, acquire command (PATH and TIMEOUT_MS follow), release.
my $K_ALL = '-lock-,__WRIT__,__READ__';
my %peer = (
	'Curator InterProcessMutex' => [ $curator, 'mutex-acquire %s %d', 'mutex-release' ],
	'Curator readLock'  => [ $curator, 'read-acquire %s %d',  'read-release' ],
	'Curator writeLock' => [ $curator, 'write-acquire %s %d', 'write-release' ],
	'Kazoo Lock ["-lock-"]' => [ $kazoo, 'lock-acquire %s %d -lock-', 'lock-release' ],
	"Kazoo Lock [$K_ALL]"      => [ $kazoo, "lock-acquire %s %d $K_ALL",  'lock-release' ],
	"Kazoo WriteLock [$K_ALL]" => [ $kazoo, "wlock-acquire %s %d $K_ALL", 'lock-release' ],
	'Kazoo ReadLock ["-lock-","__WRIT__"]' =>
	  [ $kazoo, 'rlock-acquire %s %d -lock-,__WRIT__', 'lock-release' ],);

# The table of docs/interoperability.md: excludes (x), shares (s), or no:
# zklock waits for the peer's node but the peer ignores zklock's (-).
my %table = (
	lock => {
		'Curator InterProcessMutex'            => 'x',
		'Curator readLock'                     => '-',
		'Curator writeLock'                    => '-',
		'Kazoo Lock ["-lock-"]'                => 'x',
		"Kazoo Lock [$K_ALL]"                  => 'x',
		"Kazoo WriteLock [$K_ALL]"             => 'x',
		'Kazoo ReadLock ["-lock-","__WRIT__"]' => 'x',
	},
	read => {
		'Curator InterProcessMutex'            => '-',
		'Curator readLock'                     => 's',
		'Curator writeLock'                    => 'x',
		'Kazoo Lock ["-lock-"]'                => '-',
		"Kazoo Lock [$K_ALL]"                  => 'x',
		"Kazoo WriteLock [$K_ALL]"             => 'x',
		'Kazoo ReadLock ["-lock-","__WRIT__"]' => 's',
	},
	write => {
		'Curator InterProcessMutex'            => '-',
		'Curator readLock'                     => 'x',
		'Curator writeLock'                    => 'x',
		'Kazoo Lock ["-lock-"]'                => '-',
		"Kazoo Lock [$K_ALL]"                  => 'x',
		"Kazoo WriteLock [$K_ALL]"             => 'x',
		'Kazoo ReadLock ["-lock-","__WRIT__"]' => 'x',
	},);

my $cell = 0;
foreach my $kind (qw(lock read write))
{
	my ($z_acquire, $z_release) = @{ $zklock{$kind} };
	foreach my $pn (sort keys %peer)
	{
		my ($d, $p_acquire, $p_release) = @{ $peer{$pn} };
		my $want = $table{$kind}{$pn};
		my $name = sprintf 'kx%02d', ++$cell;
		my $path = "/zklock/$name";
		my $tag = "t$cell";
		my $what = "zklock $kind, $pn";

		# zklock first: does the peer count zklock's node?
		is($s1->query_ok(sprintf "SELECT $z_acquire", $name),
			't', "$what: zklock takes $name");
		my $got = $d->ask($tag => sprintf $p_acquire, $path, 0);
		if ($want eq 'x')
		{
			is($got, 'timeout', "$what: the peer cannot take it while zklock holds");
		}
		else
		{
			is($got, 'ok',
				$want eq 's'
				? "$what: the peer shares it with zklock"
				: "$what: the peer takes it beside the zklock holder (two holders)");
		}
		is($d->ask($tag => $p_release), 'ok', "$what: the peer lets go")
		  if $got eq 'ok';
		is($s1->query_ok(sprintf "SELECT $z_release", $name), 't',
			"$what: zklock lets go");

		# the peer first: zklock counts every peer's node
		is($d->ask($tag => sprintf $p_acquire, $path, 10000),
			'ok', "$what: the peer takes $name");
		$got = $s1->query_ok(sprintf "SELECT $z_acquire", $name);
		is($got, $want eq 's' ? 't' : 'f',
			$want eq 's'
			? "$what: zklock shares it with the peer"
			: "$what: zklock cannot take it while the peer holds");
		is($s1->query_ok(sprintf "SELECT $z_release", $name),
			't', "$what: zklock lets go")
		  if $got eq 't';
		is($d->ask($tag => $p_release), 'ok', "$what: the peer lets go");
	}
}

# A name used as a lock on one side and as a semaphore on the other: zklock
# refuses when it finds the other's nodes; Curator never looks.
{
	is($curator->ask(sa => 'mutex-acquire /zklock/kxsa 0'), 'ok',
		'a Curator InterProcessMutex holds kxsa');
	my ($out, $err) = $s1->query("SELECT zk_semaphore_acquire('kxsa', 2, 0)");
	is(sqlstate($err), '55000',
		'zklock refuses a semaphore lease of kxsa: it is in use as a lock');
	is($curator->ask(sa => 'mutex-release'), 'ok', 'Curator lets go');

	is($s1->query_ok("SELECT zk_semaphore_acquire('kxsb', 2, 0)"), 't',
		'a zklock session holds a semaphore lease of kxsb');
	is($curator->ask(sb => 'mutex-acquire /zklock/kxsb 0'), 'ok',
		'a Curator InterProcessMutex takes kxsb beside it (two holders)');
	is($curator->ask(sb => 'mutex-release'), 'ok', 'Curator lets go');
	is($s1->query_ok("SELECT zk_semaphore_release('kxsb')"), 't', 'zklock lets go');

	is($curator->ask(sc => 'sem-acquire /zklock/kxsc 2 0'), 'ok',
		'a Curator InterProcessSemaphoreV2 holds a lease of kxsc');
	($out, $err) = $s1->query("SELECT zk_lock_acquire('kxsc', 0)");
	is(sqlstate($err), '55000',
		'zklock refuses the lock kxsc: it is in use as a semaphore');
	is($curator->ask(sc => 'sem-release'), 'ok', 'Curator lets go');

	is($s1->query_ok("SELECT zk_lock_acquire('kxsd', 0)"), 't',
		'a zklock session holds the lock kxsd');
	is($curator->ask(sd => 'sem-acquire /zklock/kxsd 2 0'), 'ok',
		'a Curator InterProcessSemaphoreV2 takes a lease of kxsd beside it');
	is($curator->ask(sd => 'sem-release'), 'ok', 'Curator lets go');
	is($s1->query_ok("SELECT zk_lock_release('kxsd')"), 't', 'zklock lets go');
}

is_deeply([ $curator->unclaimed ], [], 'Curator said nothing unexpected');
is_deeply([ $kazoo->unclaimed ], [], 'Kazoo said nothing unexpected');
is($curator->quit, 0, 'the Curator driver ends cleanly');
is($kazoo->quit, 0, 'the Kazoo driver ends cleanly');
my @left;
ok(poll_until(sub { !(@left = zk_lock_nodes($zk, '/zklock')) }),
	'no lock node is left');
note "left: @left" if @left;

# ===========================================================================
note '2. the exclusive lock\'s holder asks for the read lock while its '
  . 'session waits for a confirmation';
# ===========================================================================
{
	my $h = ZkLockTest::Session->new($node);
	is($h->query_ok("SELECT zk_lock_acquire('kxdl')"), 't', 'H holds the lock kxdl');
	my @nodes = zk_lock_nodes($zk, '/zklock/kxdl');
	is(scalar @nodes, 1, 'one node, H\'s');
	my $st = zk_status_of($h);
	my $pid = $st->{worker_pid};

	ZkFault::stop_worker($node, $pid);
	my $stopped = time;
	ok(poll_session($h, "SELECT zk_lock_held('kxdl')", 'f', timeout => 30),
		'with the worker stopped, H\'s lock soon counts as not held');
	$h->send("SELECT zk_rwlock_read('kxdl', 8000)");
	ZkLockTest::wait_for_extension_wait($node, $h);
	my $paused = time - $stopped;
	signal_process($pid, 'CONT');
	note sprintf 'the worker was stopped for %.1f s', $paused;

	my $asked = time;
	my ($out, $err) = $h->result;
	note sprintf 'zk_rwlock_read returned after %.1f s', time - $asked;
	is($out, 't', 'H gets the read lock once its session is confirmed again');
	is($err, '', 'without a warning or an error');
	ok(poll_status($h, sub { $_[0]{state} eq 'connected' }),
		'the worker is connected again');
	is(zk_status_of($h)->{session_losses},
		$st->{session_losses}, 'in the same session (the pause did not expire it)');
	is($h->query_ok("SELECT zk_rwlock_read_held('kxdl')"), 't',
		'H holds the read lock');
	is_deeply([ zk_lock_nodes($zk, '/zklock/kxdl') ],
		[@nodes], 'on its lock\'s node, the only one');
	($out) = $h->query("SELECT zk_rwlock_read_release('kxdl')");
	is($out, 't', 'H lets go of read');
	is($h->query_ok("SELECT zk_lock_held('kxdl')"), 't', 'and still holds the lock');
	is($h->query_ok("SELECT zk_lock_release('kxdl')"), 't', 'H lets go of the lock');
	ok(poll_until(sub { !zk_lock_nodes($zk, '/zklock/kxdl') }), 'no node is left');
	$h->quit;
}

$s1->quit;
ok(!$node->log_contains(qr/PANIC|TRAP:|terminated by signal/),
	'no crashes in the server log');
$node->stop;
done_testing();

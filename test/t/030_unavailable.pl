# 030_unavailable.pl
#    When zklock cannot work, it says so: ZooKeeper down (class 08 error
#    naming the hosts, after zklock.connect_timeout, then recovery by
#    itself), the library not preloaded (55000 with a hint), the pool of
#    zklock.max_locks entries exhausted (53400 naming the setting).  Also:
#    the worker is visible under its process title.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);

my $zk = ZkLockTest::zk_start();
my $node = ZkLockTest::pg_node('unavail', $zk, 'zklock.max_locks' => '16');


sub children_become
{
	my ($name, $want) = @_;
	return ZkLockTest::Session::children_become($zk, "/zklock/$name", $want);
}

# Child processes of $node's postmaster: list of [pid, command line].
sub postmaster_children
{
	my ($n) = @_;
	open my $fh, '<', $n->data_dir . '/postmaster.pid'
	  or die "no postmaster.pid: $!";
	my $pm = <$fh>;
	close $fh;
	chomp $pm;
	my $out = `ps -o pid=,args= --ppid $pm`;
	return map { /^\s*(\d+)\s+(.*)$/ ? [ $1, $2 ] : () } split /\n/, $out;
}

# Take the locks m1 .. m$n in session $s with zk_lock_try; returns how many
# were taken.  Entries still being released right after a release_all are
# waited for by the extension, so no attempt may fail.
sub take_locks
{
	my ($s, $n) = @_;
	my $taken = 0;
	for my $i (1 .. $n)
	{
		my ($out, $err) = $s->query("SELECT zk_lock_try('m$i')");
		if (($out // '') eq 't' && $err eq '')
		{
			$taken++;
		}
		else
		{
			diag "taking m$i: output \"" . ($out // '') . "\", error \"$err\"";
		}
	}
	return $taken;
}

# ---------------------------------------------------------------------------
note 'the worker\'s process title';

my @workers = grep { $_->[1] =~ /zklock/ } postmaster_children($node);
is(scalar @workers, 1, 'one child of the postmaster has "zklock" in its title');
like($workers[0][1] // '', qr/zklock worker/, 'it is the zklock worker');

# ---------------------------------------------------------------------------
note 'zklock.max_locks';

my $s1 = ZkLockTest::Session->new($node);
my $s2 = ZkLockTest::Session->new($node);

is($s1->query_ok(
		"SELECT count(*) FILTER (WHERE zk_lock_acquire('m' || i, 0)) "
		  . "FROM generate_series(1, 16) i"),
	'16',
	'16 different locks taken in one session');
my ($out, $err) = $s1->query("SELECT zk_lock_acquire('m17')");
is(sqlstate($err), '53400', 'the 17th gives 53400');
like($err, qr/zklock\.max_locks/, 'the error names zklock.max_locks');
is($s1->query_ok("SELECT zk_lock_acquire('m1')"),
	't', 'taking a lock already held again needs no new entry');
($out, $err) = $s2->query("SELECT zk_lock_acquire('m1')");
is(sqlstate($err), '53400',
	'another session\'s request fails at once too, rather than waiting');
($out, $err) = $s2->query("SELECT zk_lock_try('m1')");
is(sqlstate($err), '53400', 'as does its zk_lock_try');
is($s1->query_ok('SELECT zk_lock_release_all()'),
	'16', 'zk_lock_release_all releases 16 locks');
# entries given up a moment ago are waited for, not counted against the limit
($out, $err) = $s1->query("SELECT zk_lock_try('m1')");
is($err, '', 'a lock can be taken right after release_all');
is($s1->query_ok("SELECT zk_lock_release('m1')"), 't', 'and released');
is(take_locks($s1, 16), 16, 'after release_all the 16 can be taken again');
is($s1->query_ok('SELECT zk_lock_release_all()'), '16', 'released again');
is_deeply([ children_become("m$_", []) ], [], "no node left for m$_")
  foreach (1 .. 16);

# ---------------------------------------------------------------------------
note 'ZooKeeper down';

is($s1->query_ok("SELECT zk_lock_try('u')"), 't', 'locks work before');
is($s1->query_ok("SELECT zk_lock_release('u')"), 't', 'released');

$zk->stop_node(1);

$s2->query_ok('SET zklock.connect_timeout = 1000');
foreach my $call ("zk_lock_try('u')", "zk_lock_acquire('u')",
	"zk_lock_acquire('u', 60000)", "zk_lock_acquire_xact('u')")
{
	my $t0 = time;
	($out, $err) = $s2->query("SELECT $call");
	my $elapsed = time - $t0;
	like(sqlstate($err), qr/^08/, "$call fails with an SQLSTATE of class 08");
	like($err, qr/\Q${\ $zk->connect }\E/,
		"$call: the message names the ZooKeeper hosts");
	# zklock.connect_timeout (1 s) is how long a request waits for a
	# session: not less, and not much more (2 s of headroom for a loaded
	# machine; the default would be 5 s)
	cmp_ok($elapsed, '>=', 0.95,
		"$call: waited zklock.connect_timeout before giving up");
	cmp_ok($elapsed, '<', 1 + 2,
		"$call: gave up within 2 s after zklock.connect_timeout");
	note "$call failed after $elapsed s: $err";
}
is($s2->query_ok("SELECT zk_lock_held('u')"),
	'f', 'the session is usable and holds nothing');

# (not start_node's own wait: test/zk can mistake the moment before its
# exec of java for a JVM that died)
$zk->start_node(1, wait => 0);
ok(poll_until(sub { $zk->four(1, 'srvr') =~ /^Mode: standalone/m }, timeout => 60),
	'ZooKeeper serves again');

ok( $node->poll_query_until(
		'postgres',
		"SELECT zk_lock_try('u') FROM "
		  . "(SELECT set_config('zklock.connect_timeout', '1000', false)) s"),
	'the worker reconnects by itself and locks work again');

is($s1->query_ok("SELECT zk_lock_acquire('u', 30000)"),
	't', 'a session acquires after the outage');
is($s2->query_ok("SELECT zk_lock_try('u')"),
	'f', 'and excludes another session');
is($s1->query_ok("SELECT zk_lock_release('u')"), 't', 'released');
is($s2->query_ok("SELECT zk_lock_try('u')"), 't', 'the other one gets it');
is($s2->query_ok("SELECT zk_lock_release('u')"), 't', 'released');
is_deeply([ children_become('u', []) ], [], 'no node left for u');

# requests that failed during the outage must not have kept their entries
is(take_locks($s1, 16), 16,
	'all 16 entries are free again after the outage');
is($s1->query_ok('SELECT zk_lock_release_all()'), '16', 'released');
is_deeply([ children_become("m$_", []) ], [], "no node left for m$_")
  foreach (1 .. 16);

$s1->quit;
$s2->quit;

# ---------------------------------------------------------------------------
note 'not preloaded';

my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
ZkLockTest::use_private_install($plain);
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION zklock');
pass('CREATE EXTENSION works without shared_preload_libraries');

foreach my $call (
	"zk_lock_acquire('a')", "zk_lock_acquire('a', 0)",
	"zk_lock_acquire('a', 100)", "zk_lock_try('a')",
	"zk_lock_acquire_xact('a')", "zk_lock_acquire_xact('a', 0)",
	"zk_lock_try_xact('a')", "zk_lock_release('a')",
	"zk_lock_release_all()", "zk_lock_held('a')",
	"zk_lock_token('a')")
{
	my ($ret, $stdout, $stderr) = $plain->psql(
		'postgres', "SELECT $call",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	is(sqlstate($stderr), '55000', "$call refuses with 55000");
	like($stderr, qr/HINT:  .*shared_preload_libraries/,
		"$call: the hint names shared_preload_libraries");
}
my ($ret, $stdout, $stderr) = $plain->psql(
	'postgres', "LOAD 'zklock'; SELECT zk_lock_try('a')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
is(sqlstate($stderr), '55000', 'refuses after LOAD too');
is(scalar(grep { $_->[1] =~ /zklock/ } postmaster_children($plain)),
	0, 'no zklock worker without preloading');
$plain->stop;

ok(!$node->log_contains(qr/PANIC|TRAP:|terminated by signal/),
	'no crash in the server log of ' . $node->name);

$node->stop;
done_testing();

# 034_clock_step.pl
#    How long a session's holdings are trusted is measured on the monotonic
#    clock: the wall clock stepped back while the worker is paused or cut off
#    from ZooKeeper extends nothing.  zk_lock_held, zk_is_leader and the
#    COMMIT check stop vouching half a session timeout after the last
#    confirmation, and the worker gives a session it cannot confirm up after
#    a session timeout, whatever the wall clock says.
#
#    The instance runs under libfaketime (Debian package faketime): every
#    process of it reads the wall clock shifted by the offset in a file the
#    test rewrites (FAKETIME_TIMESTAMP_FILE, read again at every call with
#    FAKETIME_NO_CACHE), while CLOCK_MONOTONIC is left alone
#    (FAKETIME_DONT_FAKE_MONOTONIC): a step of the system clock, seen by
#    this instance only.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(sqlstate poll_status poll_session signal_process);

my ($faketime) = grep { -f } glob('/usr/lib/*/faketime/libfaketime.so.1');
plan skip_all => 'libfaketime is not installed (Debian package faketime)'
  unless $faketime;

my $zk = ZkLockTest::zk_start();
my $node = ZkLockTest::pg_node('clock', $zk, 'zklock.leader_groups' => 'clock');

my $offset_file = "$PostgreSQL::Test::Utils::tmp_check/faketime_offset";

# Shift the instance's wall clock by $seconds (negative: back) from real
# time; the file is replaced at once, never seen half written.
sub set_clock
{
	my ($seconds) = @_;
	open my $fh, '>', "$offset_file.tmp" or die "$offset_file.tmp: $!";
	printf $fh "%+d\n", $seconds;
	close $fh or die "$offset_file.tmp: $!";
	rename "$offset_file.tmp", $offset_file or die "$offset_file: $!";
	return;
}

# How far the instance's wall clock is behind the test's, in seconds.
sub clock_lag
{
	my ($s) = @_;
	my $t = time;
	return $t - $s->query_ok('SELECT extract(epoch FROM clock_timestamp())');
}

set_clock(0);
$node->stop;
{
	local $ENV{LD_PRELOAD} = $faketime;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $offset_file;
	local $ENV{FAKETIME_NO_CACHE} = '1';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	$node->start;
}

my $s = ZkLockTest::Session->new($node);
my $x = ZkLockTest::Session->new($node);
my $st = poll_status($s, sub { $_[0]{state} eq 'connected' });
ok($st, 'the worker is connected');
my $worker = $st->{worker_pid};
cmp_ok(abs(clock_lag($s)), '<', 60, 'the instance\'s clock is right to begin with');

# ---------------------------------------------------------------------------
note 'the worker paused, the clock stepped back an hour';

is($s->query_ok("SELECT zk_lock_acquire('c')"), 't', 'a session lock is taken');
$x->query_ok('BEGIN');
is($x->query_ok("SELECT zk_lock_acquire_xact('cx')"), 't',
	'a transaction takes a transaction-scope lock');
ok(poll_session($s, "SELECT zk_is_leader('clock')", 't', timeout => 30),
	'the instance leads group "clock"');
is($s->query_ok("SELECT zk_lock_held('c')"), 't', 'zk_lock_held says it holds c');

ZkFault::stop_worker($node, $worker);
set_clock(-3600);
my $paused = time;
cmp_ok(clock_lag($s), '>', 3000, 'the instance\'s clock is an hour behind');

ok(poll_session($s, "SELECT zk_lock_held('c')", 'f', timeout => 30),
	'zk_lock_held turns false while the worker confirms nothing');
my $took = time - $paused;
note sprintf('zk_lock_held turned false %.1f s after the worker was paused', $took);
# half the session timeout (2 s) after the last confirmation; generous for a
# loaded machine, far below the hour the wall clock went back
cmp_ok($took, '<', 10, 'within about half the session timeout');
is($s->query_ok("SELECT zk_is_leader('clock')"), 'f', 'zk_is_leader says false too');
my ($out, $err) = $x->query('COMMIT');
is(sqlstate($err), '40001',
	'COMMIT of the transaction holding a transaction-scope lock fails with 40001');

signal_process($worker, 'CONT');

# ---------------------------------------------------------------------------
note 'ZooKeeper paused, the clock stepped back another hour';

ok(poll_session($s, "SELECT zk_lock_try('c2')", 't', timeout => 60),
	'after the pause the worker confirms its session again, and grants');
$st = poll_status($s, sub { $_[0]{state} eq 'connected' });
my $losses = $st->{session_losses};

$zk->pause_node(1);
set_clock(-7200);
$paused = time;
ok(poll_status($s, sub { $_[0]{session_losses} > $losses }, timeout => 60),
	'the worker gives up the session it cannot confirm');
$took = time - $paused;
note sprintf('the session was given up %.1f s after ZooKeeper was paused', $took);
# the session timeout (4 s) after the last confirmation, with headroom
cmp_ok($took, '<', 12, 'within about the session timeout');
($out, $err) = $s->query("SELECT zk_lock_held('c2')");
is($out, 'f', 'its holdings are no longer held ...');
like($err, qr/lock "c2" was lost/, '... and a WARNING says the lock was lost');

$zk->resume_node(1);
ok(poll_session($s, "SELECT zk_lock_try('c3')", 't', timeout => 60),
	'with ZooKeeper back, locks are granted again');

set_clock(0);
$_->quit foreach ($s, $x);
ok(!$node->log_contains(qr/PANIC|TRAP:|terminated by signal/),
	'no crash in the server log');
$node->stop;
done_testing();

# 025_release_pm_death.pl
#    A COMMIT waiting for its releases when the postmaster dies.  The wait
#    runs after the commit record, in the transaction's commit callback,
#    where nothing may fail: exiting from inside it makes PostgreSQL try to
#    abort a committed transaction ("cannot abort transaction ..., it was
#    already committed", a PANIC).  The backend must stop waiting instead,
#    finish the commit and go away as any backend does when its postmaster
#    is gone.  The worker is stopped (SIGSTOP) so that the release cannot
#    complete before the postmaster is killed.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);
use ZkFault qw(poll_status signal_process process_state);

my $zk = ZkLockTest::zk_start(tick => 500);
my $node = ZkLockTest::pg_node('pmd', $zk, 'zklock.session_timeout' => '10000');
$node->safe_psql('postgres', 'CREATE TABLE t (x int)');

my $a = ZkLockTest::Session->new($node);
$a->query_ok('BEGIN');
$a->query_ok('INSERT INTO t VALUES (1)');	# the transaction has an xid
is($a->query_ok("SELECT zk_lock_acquire_xact('pmd1')"), 't', 'lock taken');
my $st = poll_status($node, sub { $_[0]{state} eq 'connected' });
my $wpid = $st->{worker_pid};
ZkFault::stop_worker($node, $wpid);
$a->send('COMMIT');
ZkLockTest::wait_for_extension_wait($node, $a);
ok(!$a->done, 'COMMIT waits for the stopped worker');

$node->kill9;
ok(poll_until(sub { !defined process_state($a->pid) }, timeout => 30),
	'the backend goes away once the postmaster is gone');
signal_process($wpid, 'CONT');
ok(poll_until(sub { !defined process_state($wpid) }, timeout => 30),
	'so does the worker');

my $log = slurp_file($node->logfile);
ok($log !~ /PANIC/, 'no PANIC in the server log')
  or diag $log =~ /(.*PANIC.*)/;

done_testing();

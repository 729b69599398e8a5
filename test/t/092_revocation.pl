# 092_revocation.pl
#    Cooperative revocation (Curator's Revoker and Revocable) and the
#    participants of a lock across the cluster: two PostgreSQL instances, a
#    real Curator and Kazoo on one ZooKeeper.
#
#    - zk_lock_revoke reaches a Curator InterProcessMutex holder that called
#      makeRevocable (its listener fires), and Curator's
#      Revoker.attemptRevoke reaches a zklock holder
#      (zk_lock_revocation_requested, zk_locks); nothing is deleted.
#    - A holding acquired with revocable => true: the statement running
#      when the request comes is cancelled and the holding let go, with a
#      WARNING saying why; an idle session lets go at the end of its next
#      transaction.  Requests of the instance queued behind a revoked node
#      get the lock on a fresh node.
#    - A holder whose node another client deletes learns it at once (its
#      node's data watch fires).
#    - zk_lock_participants shows zklock's, Curator's and Kazoo's nodes with
#      their data as written (non-UTF-8 data in hex), in lock order.
#
#    Every "is waiting" or "has heard" is established positively (polling
#    a condition), never by sleeping.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkInterop;

my $zk = ZkLockTest::zk_start();
my $pa = ZkLockTest::pg_node('revoke_a', $zk);
my $pb = ZkLockTest::pg_node('revoke_b', $zk);
my $curator = ZkInterop::curator($zk);
my $kazoo = ZkInterop::kazoo($zk);

my $sa = ZkLockTest::Session->new($pa);
my $sa2 = ZkLockTest::Session->new($pa);
my $sb = ZkLockTest::Session->new($pb);

# Poll a query of a session until it prints $want.
sub query_becomes
{
	my ($s, $sql, $want) = @_;
	my $got;
	poll_until(sub { $got = $s->query_ok($sql); $got eq $want });
	return $got;
}

# Wait until session $s of $node runs a statement (not idle, not waiting
# on a zklock).
sub wait_running
{
	my ($node, $s) = @_;
	return $node->poll_query_until('postgres',
		"SELECT state = 'active' AND wait_event_type IS DISTINCT FROM 'Extension' "
		  . "FROM pg_stat_activity WHERE pid = " . $s->pid);
}

# Data of a znode, read with kazoo.
sub zk_data
{
	my ($path) = @_;
	return ZkLockTest::zk_python($zk,
		q{print(zk.get(args[0])[0].decode('utf-8', 'replace'), end='')},
		$path);
}

# ---------------------------------------------------------------------------
note 'zk_lock_revoke reaches a revocable Curator holder, cooperatively';

is($curator->ask(c1 => 'mutex-acquire-revocable /zklock/rev/cur 5000'), 'ok',
	'Curator takes a revocable mutex');
is($curator->ask(c1 => 'revoked'), 'ok 0', 'its listener has not fired');
is($sb->query_ok("SELECT zk_lock_revoke('rev/cur')"), '1',
	'instance B asks one holder');
ok(poll_until(sub { $curator->ask(c1 => 'revoked') eq 'ok 1' }),
	"Curator's revocation listener fires");
my ($node) = ZkLockTest::zk_children($zk, '/zklock/rev/cur');
is(zk_data("/zklock/rev/cur/$node"), '__REVOKE__',
	'the holder node holds the bytes __REVOKE__');
is($sa->query_ok("SELECT zk_lock_try('rev/cur')"), 'f',
	'Curator still holds it: nothing was deleted');
is($curator->ask(c1 => 'mutex-release'), 'ok', 'Curator lets go');
is($sa->query_ok("SELECT zk_lock_acquire('rev/cur', 10000)"), 't',
	'then instance A gets it');
is($sa->query_ok("SELECT zk_lock_revocation_requested('rev/cur')"), 'f',
	"A's new holding was not asked");
is($sa->query_ok("SELECT zk_lock_release('rev/cur')"), 't', 'A releases');

# ---------------------------------------------------------------------------
note "Curator's Revoker reaches a zklock holder";

is($sa->query_ok("SELECT zk_lock_acquire('rev/zk')"), 't', 'A takes a lock');
is($sa->query_ok("SELECT zk_lock_revocation_requested('rev/zk')"), 'f',
	'nobody asked yet');
like($curator->ask(c2 => 'revoke-holder /zklock/rev/zk'),
	qr{^ok /zklock/rev/zk/_c_[0-9a-f-]{36}-lock-\d{10}$},
	"Curator's Revoker.attemptRevoke on the first participant");
is(query_becomes($sa, "SELECT zk_lock_revocation_requested('rev/zk')", 't'),
	't', 'the zklock holder hears of it');
is($pa->safe_psql('postgres',
		"SELECT state || ' ' || revocation_requested FROM zk_locks WHERE name = 'rev/zk'"),
	'held true', 'zk_locks shows it, still held');
is($sa->query_ok("SELECT zk_lock_held('rev/zk')"), 't',
	'not revocable: it keeps the lock');
is($sb->query_ok("SELECT zk_lock_try('rev/zk')"), 'f', 'B cannot take it');
is($sa->query_ok("SELECT zk_lock_release('rev/zk')"), 't', 'A lets go');
is($sb->query_ok("SELECT zk_lock_try('rev/zk')"), 't',
	'B gets it at once: the release is visible when it returns');
is($sb->query_ok("SELECT zk_lock_release('rev/zk')"), 't', 'B releases');

# ---------------------------------------------------------------------------
note 'local hand-off: requests queued behind a revoked node get a fresh one';

is($sa->query_ok("SELECT zk_lock_acquire('rev/h')"), 't', 'A session 1 holds');
$sa2->send("SELECT zk_lock_acquire('rev/h'), zk_lock_revocation_requested('rev/h')");
ZkLockTest::wait_for_extension_wait($pa, $sa2);
is($sb->query_ok("SELECT zk_lock_revoke('rev/h')"), '1',
	"B asks the instance's one holder");
is(query_becomes($sa, "SELECT zk_lock_revocation_requested('rev/h')", 't'),
	't', 'session 1 hears of it');
is($sa->query_ok("SELECT zk_lock_release('rev/h')"), 't', 'session 1 lets go');
is($sa2->result, 't|f', 'session 2 gets the lock on a node nobody asked');
is($sa2->query_ok("SELECT zk_lock_release('rev/h')"), 't', 'session 2 releases');

# ---------------------------------------------------------------------------
note 'revocable => true: the running statement is cancelled and the lock let go';

$sa->query_ok('BEGIN');
is($sa->query_ok("SELECT zk_lock_acquire_xact('rev/x', NULL, true)"), 't',
	'A takes a revocable transaction lock');
$sa->send('SELECT pg_sleep(600)');
ok(wait_running($pa, $sa), 'A runs a long statement');
is($sb->query_ok("SELECT zk_lock_revoke('rev/x')"), '1', 'B revokes');
my ($out, $err) = $sa->result;
is(sqlstate($err), '57014', 'the statement is cancelled (57014)');
like($err, qr/WARNING:  01000: zklock lock "rev\/x" was revoked; this session let go of it/,
	'a WARNING says why');
like($err, qr/revocable => true/, '... and how it was acquired');
$sa->query('ROLLBACK');
is($sb->query_ok("SELECT zk_lock_try('rev/x')"), 't',
	'B gets the lock at once (the letting go returned once the node was deleted)');
is($sb->query_ok("SELECT zk_lock_release('rev/x')"), 't', 'B releases');

note 'an idle holder lets go at the end of its next transaction';
is($sa->query_ok("SELECT zk_lock_acquire('rev/s', NULL, true)"), 't',
	'A takes a revocable session lock and goes idle');
is($sb->query_ok("SELECT zk_lock_revoke('rev/s')"), '1', 'B revokes');
ok( $pa->poll_query_until('postgres',
		"SELECT revocation_requested FROM zk_locks WHERE name = 'rev/s'"),
	'A has heard of it');
is($pa->safe_psql('postgres',
		"SELECT state FROM zk_locks WHERE name = 'rev/s'"),
	'held', 'nothing runs in the idle session: still held');
($out, $err) = $sa->query('SELECT 1');
is($out, '1', 'its next statement runs');
like($err, qr/zklock lock "rev\/s" was revoked; this session let go of it/,
	'and lets go, with the WARNING');
is($sa->query_ok("SELECT zk_lock_held('rev/s')"), 'f', 'A no longer holds it');
is($sb->query_ok("SELECT zk_lock_try('rev/s')"), 't',
	'B gets the lock at once (the letting go returned once the node was deleted)');
is($sb->query_ok("SELECT zk_lock_release('rev/s')"), 't', 'B releases');

note "Curator's Revoker cancels a revocable zklock writer";
is($sa->query_ok("SELECT zk_rwlock_write('rev/w', NULL, true)"), 't',
	'A takes a revocable write lock');
$sa->send('SELECT pg_sleep(600)');
ok(wait_running($pa, $sa), 'A runs a long statement');
like($curator->ask(c2 => 'revoke-holder /zklock/rev/w'),
	qr{^ok /zklock/rev/w/_c_[0-9a-f-]{36}-__WRIT__\d{10}$},
	"Curator's Revoker asks the writer");
($out, $err) = $sa->result;
is(sqlstate($err), '57014', 'the statement is cancelled');
like($err, qr/zklock write lock "rev\/w" was revoked/, 'the WARNING says why');
is($sa->query_ok("SELECT zk_rwlock_write_held('rev/w')"), 'f',
	'the session-scope write lock was let go');
is($curator->ask(c2 => 'read-acquire /zklock/rev/w 10000'), 'ok',
	'Curator reads it then');
is($curator->ask(c2 => 'read-release'), 'ok', 'Curator releases');

# ---------------------------------------------------------------------------
note 'no cancel where letting go would not release the lock';

$sa->query_ok('CREATE TABLE marker (x int)');

# A runs a statement that ends by itself once marker has a row; B revokes
# $name; the worker must note the request and not cancel the statement,
# and A must still hold $kind lock $name afterwards.
sub revoke_without_cancel
{
	my ($name, $held_fn, $what) = @_;
	my $pid = $sa->pid;
	$sa->send(q{DO $$ BEGIN
	  WHILE NOT EXISTS (SELECT 1 FROM marker) LOOP PERFORM pg_sleep(0.05); END LOOP;
	END $$});
	ok(wait_running($pa, $sa), "$what: A runs a statement");
	my $logstart = -s $pa->logfile;
	ok($sb->query_ok("SELECT zk_lock_revoke('$name')") >= 1,
		"$what: B revokes");
	my $log;
	ok( poll_until(
			sub {
				$log = substr(slurp_file($pa->logfile), $logstart);
				$log =~ /"\Q$name\E" held by process $pid was/;
			}),
		"$what: the worker has heard of the request");
	like($log, qr/held by process $pid was asked to let go/,
		"$what: it notes the request");
	unlike($log, qr/held by process $pid was revoked; cancelling/,
		"$what: and does not cancel A's statement");
	# a round trip through A's worker before the statement may end
	is($sa2->query_ok("SELECT zk_lock_try('rev/other')"), 't',
		"$what: the worker has moved on");
	$sa2->query_ok('INSERT INTO marker VALUES (1)');
	my ($out, $err) = $sa->result;
	is(sqlstate($err), '(none)', "$what: A's statement was not cancelled")
	  or diag $err;
	$sa2->query_ok('DELETE FROM marker');
	is($sa2->query_ok("SELECT zk_lock_release('rev/other')"), 't',
		"$what: session 2 releases");
	is($sa->query_ok("SELECT $held_fn('$name')"), 't',
		"$what: A still holds it");
	return $err;
}

is($sa->query_ok("SELECT zk_lock_acquire('rev/sticky')"), 't',
	'A holds rev/sticky, not revocable');
is($sa->query_ok("SELECT zk_lock_acquire('rev/sticky', NULL, true)"), 't',
	'and again, re-entrant, revocable');
is($sa->query_ok("SELECT zk_lock_release('rev/sticky')"), 't',
	'and releases the newest (the revocable one)');
revoke_without_cancel('rev/sticky', 'zk_lock_held', 'revocable one released');
is($sa->query_ok("SELECT zk_lock_release('rev/sticky')"), 't', 'A releases');

is($sa->query_ok("SELECT zk_rwlock_write('rev/cover')"), 't',
	'A holds write lock rev/cover, not revocable');
is($sa->query_ok("SELECT zk_rwlock_read('rev/cover', NULL, true)"), 't',
	'and a revocable read lock, which its write node covers');
$err = revoke_without_cancel('rev/cover', 'zk_rwlock_write_held',
	'revocable read under a plain write');
like($err, qr/zklock read lock "rev\/cover" was revoked; this session let go of it/,
	'the revocable read lock was let go at the end of that transaction');
is($sa->query_ok("SELECT zk_rwlock_read_held('rev/cover')"), 'f',
	'A no longer holds the read lock');
is($sa->query_ok("SELECT zk_rwlock_write_held('rev/cover')"), 't',
	'the write lock stays');
is($sa->query_ok("SELECT zk_rwlock_write_release('rev/cover')"), 't',
	'A releases it');
$sa->query_ok('DROP TABLE marker');

# ---------------------------------------------------------------------------
note 'every reader is asked';

is($curator->ask(r1 => 'read-acquire /zklock/rev/rw 5000'), 'ok',
	'Curator reads');
is($sa->query_ok("SELECT zk_rwlock_read('rev/rw')"), 't', 'A reads');
is($sb->query_ok("SELECT zk_lock_revoke('rev/rw')"), '2', 'both readers asked');
is(query_becomes($sa, "SELECT zk_lock_revocation_requested('rev/rw')", 't'),
	't', 'the zklock reader hears of it');
is($sa->query_ok("SELECT zk_rwlock_read_release('rev/rw')"), 't',
	'A lets go');
is($curator->ask(r1 => 'read-release'), 'ok', 'Curator lets go');

note 'a holder whose node refuses the write is not asked; the others are';
my $ro = ZkLockTest::zk_python($zk, q{
	from kazoo.security import make_acl
	zk.ensure_path(args[0])
	print(zk.create(args[0] + '/_c_00000000-0000-0000-0000-000000000000-__READ__',
		b'read-only', acl=[make_acl('world', 'anyone', read=True)],
		sequence=True), end='')
}, '/zklock/rev/acl');
like($ro, qr{__READ__\d{10}$}, 'a reader node nobody may write, first in line');
is($sa->query_ok("SELECT zk_rwlock_read('rev/acl')"), 't', 'A reads beside it');
my $acl_logstart = -s $pb->logfile;
is($sb->query_ok("SELECT zk_lock_revoke('rev/acl')"), '1',
	'one holder asked: A, not the read-only node');
like(substr(slurp_file($pb->logfile), $acl_logstart),
	qr/could not ask the holder of node "\Q$ro\E" to let go: not authenticated/,
	'the refusal is logged');
is(query_becomes($sa, "SELECT zk_lock_revocation_requested('rev/acl')", 't'),
	't', 'A hears of it');
is($sa->query_ok("SELECT zk_rwlock_read_release('rev/acl')"), 't',
	'A lets go');
my ($out_ro, $err_ro) = $sb->query("SELECT zk_lock_revoke('rev/acl')");
is(sqlstate($err_ro), '42501',
	'with only the read-only node holding, the revocation fails (42501)');
ZkLockTest::zk_python($zk, q{zk.delete(args[0])}, $ro);

# ---------------------------------------------------------------------------
note "the holder's data watch also sees its node deleted by someone else";

is($sa->query_ok("SELECT zk_lock_acquire('rev/del')"), 't', 'A holds a lock');
ZkLockTest::zk_python($zk, q{
for c in zk.get_children(args[0]):
    zk.delete(args[0] + '/' + c)
}, '/zklock/rev/del');
# at once: the data watch on the holder's node fires, one read confirms
# (3 s for a loaded machine)
ok( poll_until(
		sub {
			$sa2->query_ok("SELECT state FROM zk_locks WHERE name = 'rev/del'")
			  eq 'lost';
		},
		timeout => 3,
		interval => 0.05),
	'the holding is lost at once, with nobody contending');
($out, $err) = $sa->query("SELECT zk_lock_held('rev/del')");
is($out, 'f', 'A no longer holds it');
like($err, qr/zklock lock "rev\/del" was lost/, 'with a WARNING');

# ---------------------------------------------------------------------------
note 'participants: zklock, Curator and Kazoo, with their data';

is($curator->ask(p1 => 'mutex-acquire /zklock/rev/p 5000'), 'ok',
	'Curator holds');
$sa->send("SELECT zk_lock_acquire('rev/p')");
ZkLockTest::wait_for_extension_wait($pa, $sa);
$kazoo->send(k1 => 'lock-acquire /zklock/rev/p -1');
ok(poll_until(sub { scalar(ZkLockTest::zk_children($zk, '/zklock/rev/p')) == 3 }),
	'Kazoo queues too');
my $rows = $sb->query_ok(
	"SELECT kind, holds, owner FROM zk_lock_participants('rev/p')");
my @rows = split /\n/, $rows;
is(scalar @rows, 3, 'three participants');
like($rows[0], qr/^lock\|t\|[0-9a-f.:]+$/,
	"Curator's holds, its data its client's address");
like($rows[1], qr/^lock\|f\|\{"instance":.*"pid":${\ $sa->pid },"app":/,
	"zklock's waits, its data naming the backend");
is($rows[2], 'lock|f|', "Kazoo's waits, its data as written (empty)");
is($sb->query_ok(
		"SELECT string_agg(sequence::text, ',' ORDER BY sequence) = "
		  . "string_agg(sequence::text, ',') FROM zk_lock_participants('rev/p')"),
	't', 'in sequence order');
is($sb->query_ok(
		"SELECT count(*) FROM zk_lock_participants('rev/p') "
		  . "WHERE node ~ '^/zklock/rev/p/[0-9a-f]{32}__lock__[0-9]{10}\$'"),
	'1', "Kazoo's node by its name");

# a foreign node whose data is not UTF-8
ZkLockTest::zk_python($zk,
	q{zk.create(args[0], b'\xff\x00ok', sequence=True)},
	'/zklock/rev/p/_c_00000000-0000-0000-0000-000000000000-lock-');
is($sb->query_ok(
		"SELECT owner FROM zk_lock_participants('rev/p') ORDER BY sequence DESC LIMIT 1"),
	'\xff006f6b', 'data that is not UTF-8 is shown in hex');
ZkLockTest::zk_python($zk, q{
for c in zk.get_children(args[0]):
    if c.startswith('_c_00000000-'):
        zk.delete(args[0] + '/' + c)
}, '/zklock/rev/p');

is($curator->ask(p1 => 'mutex-release'), 'ok', 'Curator lets go');
is($sa->result, 't', 'zklock gets it');
is($sb->query_ok(
		"SELECT string_agg(kind || ':' || holds, ',' ORDER BY sequence) "
		  . "FROM zk_lock_participants('rev/p')"),
	'lock:true,lock:false', 'zklock holds, Kazoo waits');
is($sa->query_ok("SELECT zk_lock_release('rev/p')"), 't', 'zklock lets go');
is($kazoo->answer('k1'), 'ok', 'Kazoo gets it');
is($kazoo->ask(k1 => 'lock-release'), 'ok', 'Kazoo lets go');
ok(poll_until(sub { scalar(ZkLockTest::zk_children($zk, '/zklock/rev/p')) == 0 }),
	'nothing is left');
is($sb->query_ok("SELECT count(*) FROM zk_lock_participants('rev/p')"), '0',
	'no participants');

# ---------------------------------------------------------------------------
note "a semaphore's participants: Curator's lease and zklock's";

is($curator->ask(s1 => 'sem-acquire /zklock/rev/sem 2 5000'), 'ok',
	'Curator takes a lease');
is($sa->query_ok("SELECT zk_semaphore_acquire('rev/sem', 2)"), 't',
	'A takes a lease');
# the acquire returned once its entry mutex was deleted
@rows = split /\n/, $sb->query_ok(
	"SELECT kind, holds, owner FROM zk_semaphore_participants('rev/sem', 2)");
is(scalar(@rows), 2, 'two participants (the entry mutex is free)');
like($rows[0], qr/^lease\|t\|[0-9a-f.:]+$/, "Curator's lease first, holding");
like($rows[1], qr/^lease\|t\|\{"instance":.*"pid":${\ $sa->pid },/,
	"then zklock's, holding");
is($sb->query_ok(
		"SELECT string_agg(holds::text, ',') FROM zk_semaphore_participants('rev/sem', 1)"),
	'true,false', 'with max_leases 1, only the first would hold');
is($sb->query_ok("SELECT zk_lock_revoke('rev/sem')"), '0',
	'a semaphore is not revoked');
is($sa->query_ok("SELECT zk_semaphore_release('rev/sem')"), 't', 'A releases');
is($curator->ask(s1 => 'sem-release'), 'ok', 'Curator releases');
is($sb->query_ok("SELECT count(*) FROM zk_semaphore_participants('rev/sem')"),
	'0', 'no participants left');

$_->quit foreach ($sa, $sa2, $sb);
$curator->quit;
$kazoo->quit;
done_testing();

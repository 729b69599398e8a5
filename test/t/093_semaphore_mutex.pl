# 093_semaphore_mutex.pl
#    Curator's non-reentrant mutex and multi-lease acquire, against the real
#    Curator (test/java/CuratorDriver.java), both ways, on one ZooKeeper:
#
#    1. InterProcessSemaphoreMutex is a semaphore of one lease: while zklock
#       holds zk_semaphore_acquire(name, 1), Curator's acquire(timeout)
#       fails, and a blocked Curator acquire gets the mutex when zklock
#       releases; while Curator holds it, zklock waits (with its lease node
#       created, under the entry mutex) and gets it when Curator releases.
#       A second acquire by the holding session is refused (55000).
#    2. zk_semaphore_acquire_leases(name, max, qty): all or none.  While a
#       Curator client holds leases, zklock's qty leases wait (all its lease
#       nodes created under the entry mutex); a timeout or a cancel leaves
#       none behind; Curator's release lets all qty through.  While zklock
#       holds qty leases, Curator's acquire(qty) waits and one release of
#       zklock's lets it through.
#    3. Safety across two instances: clients of two PostgreSQL instances
#       take 1 to 3 of 3 leases in a loop and count the leases in use in a
#       table with CHECK (in_use <= 3), through dblink (each change commits
#       at once); the count must never pass 3 and must reach 0 at the end.
#
#    "Waits" is established positively, never by sleeping: a zklock session
#    once pg_stat_activity shows wait_event_type Extension and its lease
#    nodes are there, a Curator client once its nodes are there (the entry
#    mutex taken and its lease created) and it has not answered.

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

my $UUID = qr/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;
my $LEASE_RE = qr/^_c_$UUID-lease-\d{10}$/;

my $zk = ZkLockTest::zk_start();
my $node = ZkLockTest::pg_node('sem_a', $zk);
my $node2 = ZkLockTest::pg_node('sem_b', $zk);
my $curator = ZkInterop::curator($zk);

my @s = map { ZkLockTest::Session->new($node) } 1 .. 2;
my ($s1, $s2) = @s;

sub children
{
	return ZkLockTest::zk_children($zk, $_[0]);
}

sub children_become
{
	my ($path, $want) = @_;
	return ZkLockTest::Session::children_become($zk, $path, $want);
}

# Poll until the leases and the entry mutex have that many nodes.
sub nodes_become
{
	my ($base, $leases, $locks) = @_;
	return poll_until(
		sub {
			scalar(children("$base/leases")) == $leases
			  && scalar(children("$base/locks")) == $locks;
		});
}

# zk_locks rows of this session, by state
sub my_rows
{
	my ($s, $name, $state) = @_;
	return $node->safe_psql('postgres',
		    "SELECT count(*) FROM zk_locks WHERE pid = "
		  . $s->pid
		  . " AND name = '$name' AND kind = 'semaphore' AND state = '$state'");
}

my ($out, $err);

# ===========================================================================
note '1. non-reentrant mutex: zk_semaphore_acquire(name, 1) and Curator\'s '
  . 'InterProcessSemaphoreMutex';

my $mx = '/zklock/smx';

is($s1->query_ok("SELECT zk_semaphore_acquire('smx', 1)"), 't',
	'zklock takes the mutex (one lease of one)');
my @l = children("$mx/leases");
is(scalar(@l), 1, "one lease node in $mx/leases");
like($l[0], $LEASE_RE, 'named _c_<uuid>-lease-<seq>');
is_deeply([ children_become("$mx/locks", []) ], [], 'the entry mutex is free');

is($curator->ask(c1 => "semmutex-acquire $mx 500"), 'timeout',
	'Curator\'s InterProcessSemaphoreMutex.acquire(500 ms) fails meanwhile');
is_deeply([ children_become("$mx/leases", [@l]) ], [@l],
	'and left no lease node');
is_deeply([ children_become("$mx/locks", []) ], [], 'nor an entry mutex node');

($out, $err) = $s1->query("SELECT zk_semaphore_acquire('smx', 1, 2000)");
is(sqlstate($err), '55000',
	'a second acquire by the holding session is refused at once (55000)');
like($err, qr/not re-entrant/, 'saying it is not re-entrant');
is($s1->query_ok("SELECT zk_semaphore_held('smx')"), 't', 'the mutex is still held');
is($s2->query_ok("SELECT zk_semaphore_acquire('smx', 1, 0)"), 'f',
	'another zklock session does not get it');

# a blocked Curator acquire gets the mutex when zklock releases
$curator->send(c1 => "semmutex-acquire $mx -1");
ok(nodes_become($mx, 2, 1),
	'a blocking Curator acquire waits: its lease created, the entry mutex held');
ok(!$curator->answered('c1'), 'it has not returned');
is($s1->query_ok("SELECT zk_semaphore_release('smx')"), 't', 'zklock releases');
is($curator->answer('c1'), 'ok', 'then Curator gets the mutex');
ok(nodes_become($mx, 1, 0), 'one lease (Curator\'s), the entry mutex free');

# Curator holds: zklock waits and gets the mutex when Curator releases
is($s2->query_ok("SELECT zk_semaphore_acquire('smx', 1, 300)"), 'f',
	'zk_semaphore_acquire(name, 1, 300) fails while Curator holds it');
ok(nodes_become($mx, 1, 0), 'and left no node');
$s1->send("SELECT zk_semaphore_acquire('smx', 1)");
ZkLockTest::wait_for_extension_wait($node, $s1);
ok(nodes_become($mx, 2, 1),
	'a blocking zk_semaphore_acquire waits with its lease node, holding the entry mutex');
ok(!$s1->done, 'it has not returned');
is($curator->ask(c2 => "semmutex-acquire $mx 300"), 'timeout',
	'a second Curator client fails meanwhile');
is($curator->ask(c1 => 'semmutex-release'), 'ok', 'Curator releases');
($out, $err) = $s1->result;
is($out, 't', 'the waiting zk_semaphore_acquire returns true');
is($err, '', 'without an error');
ok(nodes_become($mx, 1, 0), 'one lease (zklock\'s), the entry mutex free');
is($curator->ask(c2 => "semmutex-acquire $mx 300"), 'timeout',
	'Curator is excluded again');
is($s1->query_ok("SELECT zk_semaphore_release('smx')"), 't', 'zklock releases');
is_deeply([ children_become("$mx/leases", []) ], [], 'no lease left');

# ===========================================================================
note '2. several leases in one call, all or none, max_leases 3';

my $sq = '/zklock/sq';

is($curator->ask(c3 => "sem-acquire-qty $sq 3 2 5000"), 'ok',
	'Curator takes 2 of 3 leases (acquire(2))');
ok(nodes_become($sq, 2, 0), 'two lease nodes');
my @cur = children("$sq/leases");

is($s1->query_ok("SELECT zk_semaphore_acquire_leases('sq', 3, 2, 0)"), 'f',
	'zklock asking 2 of 3 without waiting fails');
is_deeply([ children_become("$sq/leases", [@cur]) ], [@cur],
	'it left no lease node (not even one of the two)');
is_deeply([ children_become("$sq/locks", []) ], [], 'nor an entry mutex node');

is($s1->query_ok("SELECT zk_semaphore_acquire_leases('sq', 3, 2, 700)"), 'f',
	'with a 700 ms timeout it fails too');
is_deeply([ children_become("$sq/leases", [@cur]) ], [@cur], 'and left no lease node');
is_deeply([ children_become("$sq/locks", []) ], [], 'nor an entry mutex node');
is(my_rows($s1, 'sq', 'held'), '0', 'zk_locks shows no held lease');

# cancelled while waiting: nothing left
$s1->send("SELECT zk_semaphore_acquire_leases('sq', 3, 2)");
ZkLockTest::wait_for_extension_wait($node, $s1);
ok(nodes_become($sq, 4, 1),
	'a blocking acquire of 2 waits with both lease nodes, holding the entry mutex');
$node->safe_psql('postgres', "SELECT pg_cancel_backend(" . $s1->pid . ")");
($out, $err) = $s1->result;
is(sqlstate($err), '57014', 'cancelled (57014)');
is_deeply([ children_become("$sq/leases", [@cur]) ], [@cur],
	'both its lease nodes are gone');
is_deeply([ children_become("$sq/locks", []) ], [], 'and the entry mutex');
is($s1->query_ok("SELECT zk_semaphore_held('sq')"), 'f', 'nothing is held');

# Curator holds 2, zklock waits for 2, Curator releases: zklock gets both
$s1->send("SELECT zk_semaphore_acquire_leases('sq', 3, 2)");
ZkLockTest::wait_for_extension_wait($node, $s1);
ok(nodes_become($sq, 4, 1), 'zklock waits for 2 leases: four lease nodes, entry mutex held');
ok(!$s1->done, 'it has not returned');
is(my_rows($s1, 'sq', 'held') + my_rows($s1, 'sq', 'waiting'), 2,
	'zk_locks shows its two leases');
is($curator->ask(c4 => "sem-acquire $sq 3 300"), 'timeout',
	'a Curator acquire of one lease fails meanwhile (zklock holds the entry mutex)');
is($curator->ask(c3 => 'sem-release'), 'ok', 'Curator returns its two leases');
($out, $err) = $s1->result;
is($out, 't', 'zklock\'s acquire of two returns true');
is($err, '', 'without an error');
is(my_rows($s1, 'sq', 'held'), '2', 'zk_locks shows two held leases');
ok(nodes_become($sq, 2, 0), 'two lease nodes (zklock\'s), the entry mutex free');

# zklock holds 2, Curator's acquire(2) waits, zklock releases: Curator gets them
is($s2->query_ok("SELECT zk_semaphore_acquire('sq', 3, 0)"), 't',
	'one more lease by another zklock session fits (3 of 3)');
is($s2->query_ok("SELECT zk_semaphore_release('sq')"), 't', 'and is returned');
ok(nodes_become($sq, 2, 0), 'two lease nodes again');
$curator->send(c3 => "sem-acquire-qty $sq 3 2 -1");
# Curator's acquire(2) takes one lease (3 of 3), then waits for the second
ok(nodes_become($sq, 4, 1),
	'Curator\'s acquire(2) waits: its first lease taken, its second created, entry mutex held');
ok(!$curator->answered('c3'), 'it has not returned');
is($s2->query_ok("SELECT zk_semaphore_acquire('sq', 3, 0)"), 'f',
	'a zklock acquire of one fails meanwhile');
is($s1->query_ok("SELECT zk_semaphore_release('sq')"), 't',
	'one zk_semaphore_release returns both zklock leases');
is($curator->answer('c3'), 'ok', 'then Curator\'s acquire(2) returns');
ok(nodes_become($sq, 2, 0), 'two lease nodes (Curator\'s), the entry mutex free');
is($s1->query_ok("SELECT zk_semaphore_held('sq')"), 'f', 'zklock holds none');
is($s1->query_ok("SELECT zk_semaphore_acquire_leases('sq', 3, 2, 300)"), 'f',
	'2 more do not fit beside Curator\'s 2');
is($s1->query_ok("SELECT zk_semaphore_acquire_leases('sq', 3, 1, 0)"), 't',
	'1 does');
is($s1->query_ok("SELECT zk_semaphore_release('sq')"), 't', 'and is returned');
is($curator->ask(c3 => 'sem-release'), 'ok', 'Curator returns its leases');
is_deeply([ children_become("$sq/leases", []) ], [], 'no lease left');

# ===========================================================================
note '3. safety: two instances, 1 to 3 of 3 leases, never more than 3 in use';

my $connstr = $node->connstr('postgres') =~ s/'/''/gr;
$node->safe_psql('postgres', <<'SQL');
CREATE TABLE inuse (id integer PRIMARY KEY,
                    in_use integer NOT NULL CHECK (in_use BETWEEN 0 AND 3),
                    peak integer NOT NULL, grants integer NOT NULL,
                    multi integer NOT NULL);
INSERT INTO inuse VALUES (1, 0, 0, 0, 0);
SQL

# one client: $rounds rounds of 1 to 3 leases; returns how many timed out
my $rounds = 25;
my $client_sql = <<"SQL";
CREATE EXTENSION dblink;
CREATE FUNCTION safety_loop() RETURNS integer LANGUAGE plpgsql AS \$fn\$
DECLARE
	q integer;
	timeouts integer := 0;
BEGIN
	PERFORM dblink_connect('store', '$connstr');
	FOR i IN 1 .. $rounds LOOP
		q := 1 + floor(random() * 3)::integer;
		IF zk_semaphore_acquire_leases('safety', 3, q, 30000) THEN
			PERFORM dblink_exec('store', format(
				'UPDATE inuse SET in_use = in_use + %s, peak = greatest(peak, in_use + %s), '
				'grants = grants + 1, multi = multi + (%s > 1)::integer WHERE id = 1',
				q, q, q));
			PERFORM pg_sleep(random() * 0.02);
			PERFORM dblink_exec('store', format(
				'UPDATE inuse SET in_use = in_use - %s WHERE id = 1', q));
			IF NOT zk_semaphore_release('safety') THEN
				RAISE EXCEPTION 'zk_semaphore_release returned false';
			END IF;
		ELSE
			timeouts := timeouts + 1;
		END IF;
	END LOOP;
	PERFORM dblink_disconnect('store');
	RETURN timeouts;
END
\$fn\$;
SQL
$_->safe_psql('postgres', $client_sql) foreach ($node, $node2);

my @clients = (
	(map { ZkLockTest::Session->new($node) } 1 .. 2),
	(map { ZkLockTest::Session->new($node2) } 1 .. 2));
$_->send('SELECT safety_loop()') foreach @clients;
my $i = 0;
foreach my $c (@clients)
{
	$i++;
	($out, $err) = $c->result(timeout => 300);
	is($out, '0', "client $i: all $rounds rounds granted");
	is($err, '', "client $i: no error");
}
my ($in_use, $peak, $grants, $multi) = split /\|/,
  $node->safe_psql('postgres',
	'SELECT in_use, peak, grants, multi FROM inuse WHERE id = 1');
is($grants, 4 * $rounds, 'every round was granted');
cmp_ok($peak, '<=', 3, "never more than 3 leases in use (peak $peak)");
cmp_ok($peak, '>=', 2, 'leases were in use at once');
cmp_ok($multi, '>', 0, "multi-lease rounds took part ($multi)");
is($in_use, 0, 'none in use at the end');
is_deeply([ children_become('/zklock/safety/leases', []) ], [], 'no lease left');
is_deeply([ children_become('/zklock/safety/locks', []) ], [], 'no entry mutex node left');
$_->quit foreach @clients;

# ===========================================================================
note '4. nothing left behind';

is_deeply([ $curator->unclaimed ], [], 'Curator said nothing unexpected');
is($curator->quit, 0, 'the Curator driver ends cleanly');
$_->quit foreach @s;
foreach my $p ("$mx/leases", "$mx/locks", "$sq/leases", "$sq/locks")
{
	is_deeply([ children_become($p, []) ], [], "$p has no children");
}
foreach my $n ($node, $node2)
{
	ok(!$n->log_contains(qr/could not delete node|PANIC|TRAP:|terminated by signal/),
		$n->name . ': no failed delete or crash in the server log');
}

done_testing();

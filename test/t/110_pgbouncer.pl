# 110_pgbouncer.pl
#    zklock behind a real PgBouncer (Debian package pgbouncer) on loopback,
#    running the configuration files users copy (docs/examples/pgbouncer-
#    session.ini and pgbouncer-transaction.ini, as written but for their
#    [site] values), one server connection per pool, so that every client
#    of a pool gets the same server session:
#    - session pooling: when a client leaves, PgBouncer's default
#      server_reset_query (DISCARD ALL) releases its session-scope locks,
#      semaphore leases and double barrier memberships before the next
#      client gets the server connection;
#    - transaction pooling: transaction-scope locks and job claims work;
#      a session-scope lock outlives the client's transaction and passes
#      to the next client of the server connection (the trap), which
#      zklock.session_locks = off (here set per database, as an operator
#      would) refuses with 55000 and a hint naming the _xact variant.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use File::Spec;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate children_become);

my $PGBOUNCER = '/usr/sbin/pgbouncer';
plan skip_all => 'PgBouncer is not installed (Debian package pgbouncer)'
  unless -x $PGBOUNCER;

my $zk = ZkLockTest::zk_start();
my $node = ZkLockTest::pg_node('bounced', $zk);
my $user = $node->safe_psql('postgres', 'SELECT current_user');

# appdb: what an operator does for an application behind transaction
# pooling: session-scope acquisitions refused for the whole database
$node->safe_psql('postgres', 'CREATE DATABASE appdb');
$node->safe_psql('postgres',
	'ALTER DATABASE appdb SET zklock.session_locks = off');
$node->safe_psql('appdb', 'CREATE EXTENSION zklock');

# ---------------------------------------------------------------------------
# PgBouncers running docs/examples/pgbouncer-session.ini and
# pgbouncer-transaction.ini as users copy them, but for their [site] values:
# loopback ports, temporary files, and one server connection per pool, so
# that every client of a pool gets the same server session.  Clients
# authenticate with SCRAM (auth_type of the files) to PgBouncer, which
# reaches the instance over its Unix socket.

my $password = 'bouncer-secret';
$node->safe_psql('postgres', qq{ALTER ROLE "$user" PASSWORD '$password'});
my (%port, @bouncers);

# start_bouncer(name, example file, database): a PgBouncer whose database
# "app" is the instance's database given
sub start_bouncer
{
	my ($name, $file, $db) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir("pgbouncer_$name");
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	PostgreSQL::Test::Utils::append_to_file("$dir/userlist.txt",
		qq{"$user" "$password"\n});
	PostgreSQL::Test::Utils::append_to_file(
		"$dir/pgbouncer.ini",
		ZkLockTest::example_file(
			$file,
			'databases.app' => sprintf('host=%s port=%d dbname=%s',
				$node->host, $node->port, $db),
			'pgbouncer.listen_addr' => '127.0.0.1',
			'pgbouncer.listen_port' => $port,
			'pgbouncer.unix_socket_dir' => '',
			'pgbouncer.auth_file' => "$dir/userlist.txt",
			'pgbouncer.logfile' => "$dir/pgbouncer.log",
			'pgbouncer.pidfile' => "$dir/pgbouncer.pid",
			'pgbouncer.default_pool_size' => 1));
	my ($out, $err) = ('', '');
	push @bouncers, IPC::Run::start([ $PGBOUNCER, "$dir/pgbouncer.ini" ],
		'<', \undef, '>', \$out, '2>', \$err);
	$port{$name} = $port;
	ok( poll_until(
			sub {
				# psql refused a connection may exit before it read its
				# input: IPC::Run then dies writing it (a broken pipe)
				my $rc = eval {
					($node->psql('postgres', 'SELECT 1', connstr => via($name)))[0];
				};
				return defined $rc && $rc == 0;
			},
			timeout => 30),
		"PgBouncer $file ($name) accepts connections")
	  or BAIL_OUT("pgbouncer did not start: $err "
		  . PostgreSQL::Test::Utils::slurp_file("$dir/pgbouncer.log"));
	return;
}
END { $_->kill_kill foreach grep { $_->pumpable } @bouncers; }

sub via
{
	my ($name) = @_;
	return "host=127.0.0.1 port=$port{$name} dbname=app user=$user password=$password";
}

# a client of PgBouncer (a psql session through it)
sub client
{
	my ($name) = @_;
	return ZkLockTest::Session->new($node, connstr => via($name));
}

start_bouncer('session_db', 'pgbouncer-session.ini', 'postgres');
start_bouncer('txn_db', 'pgbouncer-transaction.ini', 'postgres');
start_bouncer('app_txn', 'pgbouncer-transaction.ini', 'appdb');

# a direct session on the instance: another backend, as any other client
my $direct = ZkLockTest::Session->new($node);

sub held_by
{
	my ($pid) = @_;
	return $node->safe_psql('postgres',
		"SELECT string_agg(kind || ' ' || name, ', ' ORDER BY kind, name) FROM zk_locks WHERE pid = $pid"
	);
}

# ---------------------------------------------------------------------------
note 'session pooling: the reset query releases what a departed client held';

my $c1 = client('session_db');
my $server_pid = $c1->query_ok('SELECT pg_backend_pid()');
is( $c1->query_ok(
		q{SELECT zk_lock_acquire('pool/s'), zk_rwlock_read('pool/r'),
		         zk_semaphore_acquire('pool/sem', 1),
		         zk_double_barrier_enter('pool/db', 1, 0)}),
	't|t|t|t',
	'a client takes a lock, a read lock, a semaphore lease and enters a double barrier'
);
is(held_by($server_pid),
	'double barrier pool/db, lock pool/s, read pool/r, semaphore pool/sem',
	'its server session holds them');
is($direct->query("SELECT zk_lock_try('pool/s')"), 'f',
	'another backend cannot take the lock meanwhile');

$c1->quit;
ok(poll_until(sub { held_by($server_pid) eq '' }, timeout => 30),
	'once the client left, its server session holds nothing')
  or diag 'still held: ' . held_by($server_pid);
my $c2 = client('session_db');
is($c2->query_ok('SELECT pg_backend_pid()'),
	$server_pid, 'the next client gets the same server session');
is( $c2->query_ok(
		q{SELECT zk_lock_held('pool/s'), zk_rwlock_read_held('pool/r'),
		         zk_semaphore_held('pool/sem')}),
	'f|f|f',
	'and holds none of it');
is($direct->query("SELECT zk_lock_try('pool/s')"),
	't', 'another backend takes the lock');
is($direct->query("SELECT zk_lock_release('pool/s')"), 't', 'and releases it');
is(scalar(ZkLockTest::zk_children($zk, '/zklock/pool/r')),
	0, 'the read lock node is gone');
is(scalar(ZkLockTest::zk_children($zk, '/zklock/pool/sem/leases')),
	0, 'the lease is gone');
is(scalar(ZkLockTest::zk_children($zk, '/zklock/pool/db')),
	0, 'the double barrier member and ready are gone');
$c2->quit;

# ---------------------------------------------------------------------------
note 'transaction pooling: transaction-scope locks and job claims';

my $x = client('txn_db');
my $y = client('txn_db');
is( $x->query_ok(
		q{BEGIN;
		  SELECT zk_lock_acquire_xact('pool/t'), zk_rwlock_write_xact('pool/w'),
		         zk_semaphore_acquire_xact('pool/tsem', 1),
		         zk_lock_acquire_all_xact(ARRAY['pool/m1', 'pool/m2']);
		  SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid();
		  COMMIT}),
	"t|t|t|t\n5",
	'a transaction holds transaction-scope locks through the pooler');
is($direct->query(
		q{SELECT zk_lock_try_xact('pool/t') AND zk_rwlock_write_xact('pool/w', 0)
		         AND zk_semaphore_acquire_xact('pool/tsem', 1, 0)
		         AND zk_lock_acquire_all_xact(ARRAY['pool/m1', 'pool/m2'], 0)}),
	't', 'after its COMMIT another backend takes all of them');

my $slot = "timestamptz '2026-11-25 10:00:00+00'";
is($x->query_ok("SELECT zk_job_claim('pool-job', $slot)"),
	't', 'a client claims a job slot (its statement is its transaction)');
is($y->query_ok("SELECT zk_job_claim('pool-job', $slot)"),
	'f', 'another client of the pool finds it claimed');
is( $direct->query(
		"SELECT count(*) FILTER (WHERE final) FROM zk_job_claims('pool-job')"),
	'1', 'the claim is final');
is($y->query_ok(
		"BEGIN; SELECT zk_job_claim('pool-job', $slot + interval '1 hour'); ROLLBACK"),
	't', 'a claim in a transaction that rolls back');
is($x->query_ok("SELECT zk_job_claim('pool-job', $slot + interval '1 hour')"),
	't', 'leaves the slot open for the next client');

# ---------------------------------------------------------------------------
note 'transaction pooling: a session-scope lock passes to the next client';

my ($xpid) = split /\|/,
  $x->query_ok("SELECT pg_backend_pid(), zk_lock_acquire('pool/trap')");
is($y->query_ok('SELECT pg_backend_pid()'),
	$xpid, 'clients x and y share one server session');
is($y->query_ok("SELECT zk_lock_held('pool/trap')"),
	't', 'client x took a session-scope lock: client y now holds it');
is($y->query_ok("SELECT zk_lock_release('pool/trap')"),
	't', 'and client y can release what client x took');
is($direct->query("SELECT zk_lock_try('pool/trap')"),
	't', 'another backend takes it while client x has not let go');
is($direct->query("SELECT zk_lock_release('pool/trap')"), 't', 'released');
$x->quit;
$y->quit;

# ---------------------------------------------------------------------------
note 'zklock.session_locks = off: session-scope acquisitions are refused';

my $app = client('app_txn');
is($app->query_ok('SHOW zklock.session_locks'), 'off',
	'the database sets zklock.session_locks off');
my @refused = (
	[ q{zk_lock_acquire('app/x')},                 'zk_lock_acquire_xact() or zk_lock_try_xact()' ],
	[ q{zk_lock_acquire('app/x', 0)},              'zk_lock_acquire_xact() or zk_lock_try_xact()' ],
	[ q{zk_lock_acquire('app/x', NULL, true)},     'zk_lock_acquire_xact() or zk_lock_try_xact()' ],
	[ q{zk_lock_try('app/x')},                     'zk_lock_acquire_xact() or zk_lock_try_xact()' ],
	[ q{zk_lock_acquire_all(ARRAY['app/x', 'app/y'])}, 'zk_lock_acquire_all_xact()' ],
	[ q{zk_rwlock_read('app/x')},                  'zk_rwlock_read_xact()' ],
	[ q{zk_rwlock_read('app/x', NULL, true)},      'zk_rwlock_read_xact()' ],
	[ q{zk_rwlock_write('app/x', 0)},              'zk_rwlock_write_xact()' ],
	[ q{zk_semaphore_acquire('app/s', 2)},         'zk_semaphore_acquire_xact()' ],
	[ q{zk_semaphore_acquire_leases('app/s', 2, 2)}, 'zk_semaphore_acquire_leases_xact()' ],
	[ q{zk_double_barrier_enter('app/d', 1, 0)},   'no transaction-scope variant' ],);
foreach my $r (@refused)
{
	my ($call, $hint) = @$r;
	my ($out, $err) = $app->query("SELECT $call");
	is(sqlstate($err), '55000', "$call is refused with 55000");
	like($err, qr/HINT:  .*\Q$hint\E/, "  and a hint naming $hint");
}
like(
	($app->query(q{SELECT zk_lock_try('app/x')}))[1],
	qr/ERROR:  55000: cannot acquire session-scope zklock lock "app\/x"\nDETAIL:  zklock.session_locks is off: .*\nHINT:  Use zk_lock_acquire_xact\(\) or zk_lock_try_xact\(\), which ends with the transaction/,
	'the message says why and what to use instead');
is(scalar(ZkLockTest::zk_children($zk, '/zklock/app')),
	0, 'nothing was created in ZooKeeper');
is( $app->query_ok(
		q{BEGIN;
		  SELECT zk_lock_acquire_xact('app/x'), zk_lock_try_xact('app/y'),
		         zk_rwlock_read_xact('app/r'), zk_rwlock_write_xact('app/w', NULL, true),
		         zk_semaphore_acquire_xact('app/s', 2),
		         zk_semaphore_acquire_leases_xact('app/s2', 2, 2),
		         zk_lock_acquire_all_xact(ARRAY['app/m1', 'app/m2']);
		  COMMIT}),
	't|t|t|t|t|t|t',
	'the transaction-scope variants work');
is( scalar $app->query(
		q{SELECT zk_lock_release('app/x'), zk_lock_release_all(),
		         zk_barrier_set('app/b'), zk_barrier_remove('app/b')}),
	'f|0|t|t', 'releases and barriers, which hold nothing, are allowed');
is($app->query_ok('SET zklock.session_locks = on; SHOW zklock.session_locks'),
	'on', 'a superuser may turn it on again');
$app->quit;

# a role that is not a superuser cannot turn it on
$node->safe_psql('appdb', 'CREATE ROLE zk_app');
my ($rc, $out, $err) = $node->psql('appdb',
	'SET ROLE zk_app; SET zklock.session_locks = on');
like($err, qr/permission denied to set parameter "zklock.session_locks"/,
	'other roles cannot set it');

$direct->quit;
$_->kill_kill foreach @bouncers;
done_testing();

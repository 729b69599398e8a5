# 112_patroni.pl
#    zklock in a two-member Patroni cluster (Debian package patroni) whose
#    DCS is the test ZooKeeper, the same ensemble zklock uses, each member
#    running docs/examples/patroni.yml as written but for its [site] values:
#    Patroni under its namespace /service, zklock under zklock.root
#    /zklock, zklock preloaded through the parameters of Patroni's DCS
#    configuration.  Patroni restarts and promotes the instances itself;
#    the test asks it for a switchover and, for a failover, stops every
#    process of the primary at once (SIGSTOP to all, then SIGKILL), so that
#    only ZooKeeper's session expiry frees its locks: the lock's node is
#    still there a second after the kill and goes within twice the session
#    timeout.  It checks:
#    both members' workers connect (the replica's too: the worker needs no
#    database); locks, leadership and job claims work from both; a job
#    guarded by a claim runs once per slot across switchover and failover;
#    a lock held by a session that survives (the promoted member's) is
#    still held; the locks of a stopped instance are free at once, a
#    killed one's when its session expires; Patroni's and
#    zklock's znodes stay apart.
#
#    Patroni's start-up is slow: both members start together (one
#    initialises, the other clones it) and every section reuses them.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use HTTP::Tiny;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);

my $PATRONI = '/usr/bin/patroni';
my $PATRONICTL = '/usr/bin/patronictl';
plan skip_all => 'Patroni is not installed (Debian package patroni)'
  unless -x $PATRONI && -x $PATRONICTL;

my $bindir = `pg_config --bindir`;
chomp $bindir;
my $user = getpwuid($<);

my $zk = ZkLockTest::zk_start();
my $dir = PostgreSQL::Test::Utils::tempdir('patroni');
my $sockdir = PostgreSQL::Test::Utils::tempdir_short();

# ---------------------------------------------------------------------------
# Two Patroni members, m1 and m2, of cluster pg-main, each running
# docs/examples/patroni.yml as users copy it: only its [site] values are
# this machine's (loopback ports, temporary directories, the test
# ZooKeeper, the OS user the test runs as for peer authentication).  With
# test/run-tests's private build, its two settings (dynamic_library_path,
# extension_destdir) are added to the member's parameters.

my %install;
if (my $f = $ENV{ZKLOCK_TEST_INSTALL_CONF})
{
	foreach (split /\n/, PostgreSQL::Test::Utils::slurp_file($f))
	{
		$install{$1} = $2 =~ s/''/'/gr if /^\s*(\w+)\s*=\s*'(.*)'\s*$/;
	}
}

my %members;
foreach my $name (qw(m1 m2))
{
	my $m = {
		name => $name,
		pgport => PostgreSQL::Test::Cluster::get_free_port(),
		apiport => PostgreSQL::Test::Cluster::get_free_port(),
		data => "$dir/$name",
		conf => "$dir/$name.yml",
		# beside the servers' logs, so that test/run-tests shows its tail
		log => "$PostgreSQL::Test::Utils::log_path/112_patroni_$name.log",
	};
	my $conf = ZkLockTest::example_file(
		'patroni.yml',
		'name' => $name,
		'restapi.listen' => "127.0.0.1:$m->{apiport}",
		'restapi.connect_address' => "127.0.0.1:$m->{apiport}",
		'zookeeper.hosts' => "['${\ $zk->connect }']",
		# a failover in seconds rather than a minute (the site's choice)
		'bootstrap.dcs.ttl' => 8,
		'bootstrap.dcs.loop_wait' => 1,
		'bootstrap.dcs.retry_timeout' => 3,
		'bootstrap.dcs.postgresql.parameters.zklock.hosts' => "'${\ $zk->connect }'",
		'postgresql.listen' => "127.0.0.1:$m->{pgport}",
		'postgresql.connect_address' => "127.0.0.1:$m->{pgport}",
		'postgresql.data_dir' => $m->{data},
		'postgresql.pgpass' => "$dir/pgpass_$name",
		'postgresql.authentication.superuser.username' => $user,
		'postgresql.authentication.superuser.password' => sub { $_[0] },
		'postgresql.authentication.replication.password' => sub { $_[0] },
		'postgresql.parameters.unix_socket_directories' => $sockdir,
		'postgresql.pg_hba[]' => sub { $_[0] =~ s{10\.0\.0\.0/24}{127.0.0.1/32}r });
	my $install = join '',
	  map { "    $_: '$install{$_}'\n" } sort keys %install;
	$conf =~ s/^(  parameters:\n)/$1$install/m or die 'no postgresql.parameters';
	PostgreSQL::Test::Utils::append_to_file($m->{conf}, $conf);
	$members{$name} = $m;
}

sub start_member
{
	my ($m) = @_;
	$m->{patroni} = IPC::Run::start([ $PATRONI, $m->{conf} ],
		'<', \undef, '>>', $m->{log}, '2>>', $m->{log});
	return;
}

END
{
	local $?;
	foreach my $m (values %members)
	{
		next unless $m->{patroni} && $m->{patroni}->pumpable;
		$m->{patroni}->signal('TERM');
		eval { $m->{patroni}->finish; };
	}
	# a PostgreSQL left behind by a Patroni that did not get to stop it
	foreach my $m (values %members)
	{
		system("$bindir/pg_ctl", '-D', $m->{data}, '-m', 'immediate', 'stop')
		  if -f "$m->{data}/postmaster.pid";
	}
}

start_member($_) foreach @members{qw(m1 m2)};

sub connstr
{
	my ($m) = @_;
	# the Unix socket: peer authentication, as the file's pg_hba says
	return "host=$sockdir port=$m->{pgport} dbname=postgres user=$user";
}

# one statement in a new connection: (output, error); output undef when psql
# failed (the member is down, say)
sub sql
{
	my ($m, $sql) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(
		[ "$bindir/psql", '-XAtq', '-v', 'ON_ERROR_STOP=1', '-v',
		  'VERBOSITY=verbose', '-d', connstr($m), '-c', $sql ],
		'<', \undef, '>', \$out, '2>', \$err);
	chomp $out;
	return wantarray ? ($ok ? $out : undef, $err) : ($ok ? $out : undef);
}

sub sql_ok
{
	my ($m, $sql) = @_;
	my ($out, $err) = sql($m, $sql);
	die "$m->{name}: \"$sql\" failed: $err" unless defined $out;
	return $out;
}

sub in_recovery { return sql($_[0], 'SELECT pg_is_in_recovery()') // ''; }

# a streaming standby has its WAL receiver streaming
sub streaming
{
	return (sql($_[0], 'SELECT status FROM pg_stat_wal_receiver') // '') eq
	  'streaming';
}

# Wait until one member is the primary and the other a streaming standby;
# returns (primary, standby).
sub roles
{
	my (%opts) = @_;
	my ($p, $s);
	poll_until(
		sub {
			my @p = grep { in_recovery($_) eq 'f' } values %members;
			my @s = grep { streaming($_) } values %members;
			return 0 unless @p == 1 && @s == 1;
			($p, $s) = ($p[0], $s[0]);
			return 1;
		},
		timeout => $opts{timeout} // 120,
		interval => 0.5) or return ();
	return ($p, $s);
}

# a psql session that stays open on a member
package PatroniMember
{
	sub new { my ($class, $m) = @_; return bless {%$m}, $class; }
	sub installed_command { return "$bindir/$_[1]"; }
}

sub session
{
	my ($m) = @_;
	return ZkLockTest::Session->new(PatroniMember->new($m),
		connstr => connstr($m));
}

# ---------------------------------------------------------------------------
note 'the cluster comes up: one primary, one streaming standby';

my $t0 = time;
my ($primary, $standby) = roles();
ok($primary, 'Patroni made a primary and a streaming standby')
  or BAIL_OUT('the Patroni cluster did not come up; see ' . join ', ',
	map { $_->{log} } values %members);
note sprintf 'primary %s, standby %s, after %.1f s', $primary->{name},
  $standby->{name}, time - $t0;

sql_ok($primary, 'CREATE EXTENSION zklock');
sql_ok($primary, q{
	CREATE TABLE runs (slot timestamptz NOT NULL, member text NOT NULL);
	-- the job, on every member: only the primary can write, and there
	-- a claim makes it once per slot
	CREATE FUNCTION job(slot timestamptz) RETURNS boolean LANGUAGE plpgsql AS $f$
	BEGIN
	    IF pg_is_in_recovery() THEN
	        RETURN false;
	    END IF;
	    IF NOT zk_job_claim('patroni-job', slot) THEN
	        RETURN false;
	    END IF;
	    INSERT INTO runs VALUES (slot, current_setting('port'));
	    RETURN true;
	END $f$});
ok(poll_until(sub { (sql($standby, q{SELECT count(*) FROM pg_proc WHERE proname = 'job'}) // '') eq '1' }),
	'the extension and the job reach the standby');

is(sql($_, 'SELECT state FROM zk_status()'), 'connected',
	"the zklock worker of the $_->{name} connected")
  foreach ($primary, $standby);
# zklock.session_timeout of the file, as ZooKeeper granted it (ms)
my $SESSION_TIMEOUT =
  sql_ok($primary, 'SELECT session_timeout_ms FROM zk_status()');
note "ZooKeeper session timeout: $SESSION_TIMEOUT ms";
is(sql_ok($primary, q{SELECT setting FROM pg_settings WHERE name = 'zklock.root'}),
	'/zklock', 'zklock.root came through Patroni\'s parameters');

# ---------------------------------------------------------------------------
note 'locks, leadership and claims from both members';

is(sql_ok($primary, q{SELECT zk_lock_try('pat/a')}), 't', 'the primary takes a lock');
my $hold = session($primary);
is($hold->query_ok(q{SELECT zk_lock_acquire('pat/a')}), 't',
	'a session of the primary holds it');
is(sql_ok($standby, q{SELECT zk_lock_try('pat/a')}), 'f',
	'the standby cannot take it meanwhile');
is($hold->query_ok(q{SELECT zk_lock_release('pat/a')}), 't', 'released');
is( sql_ok($standby,
		q{BEGIN; SELECT zk_lock_acquire_xact('pat/a', 5000); COMMIT}),
	't', 'the standby takes it (transaction scope, a read-only transaction)');

my $slot0 = "timestamptz '2026-11-25 09:00:00+00'";
is(sql_ok($standby, "SELECT zk_job_claim('pat/standby-job', $slot0)"),
	't', 'the standby claims a slot');
is(sql_ok($primary, "SELECT zk_job_claim('pat/standby-job', $slot0)"),
	'f', 'the primary finds it claimed');
is(sql_ok($primary,
		"SELECT count(*) FILTER (WHERE final) FROM zk_job_claims('pat/standby-job')"),
	'1', 'the standby\'s claim is final');

sub leaders
{
	return join ',', map { $_->{name} }
	  grep { (sql($_, q{SELECT zk_is_leader('cron')}) // '') eq 't' }
	  sort { $a->{name} cmp $b->{name} } values %members;
}
my $leader;
ok(poll_until(sub { ($leader = leaders()) =~ /^m\d$/ }, timeout => 30),
	'exactly one member leads group cron, a standby as well as a primary')
  or diag "leading: $leader";

my $slot1 = "timestamptz '2026-11-25 10:00:00+00'";
my $slot2 = "$slot1 + interval '1 hour'";
my $slot3 = "$slot1 + interval '2 hours'";
is(join(',', map { sql_ok($_, "SELECT job($slot1)") } ($standby, $primary, $primary)),
	'f,t,f', 'slot 1: the job runs once, on the primary');

# sessions that hold session-scope locks through the switchover
my $on_primary = session($primary);
my $on_standby = session($standby);
is($on_primary->query_ok(q{SELECT zk_lock_acquire('pat/p')}), 't',
	'a session of the primary holds pat/p');
is($on_standby->query_ok(q{SELECT zk_lock_acquire('pat/s')}), 't',
	'a session of the standby holds pat/s');

# ---------------------------------------------------------------------------
note 'switchover';

my ($old_primary, $old_standby) = ($primary, $standby);
$t0 = time;
my ($sw_out, $sw_err) = ('', '');
IPC::Run::run(
	[
		$PATRONICTL, '-c', $primary->{conf}, 'switchover',
		'--leader', $primary->{name}, '--candidate', $standby->{name},
		'--force'
	],
	'<', \undef, '>', \$sw_out, '2>', \$sw_err)
  or diag "patronictl switchover: $sw_out $sw_err";
($primary, $standby) = roles();
is($primary && $primary->{name}, $old_standby->{name},
	'the standby is the primary now, and the old primary streams from it');
note sprintf 'switchover took %.1f s', time - $t0;

ok($on_standby->alive, 'the promoted member\'s session survived');
is($on_standby->query_ok(q{SELECT zk_lock_held('pat/s')}), 't',
	'and still holds pat/s');
ok(poll_until(sub { (sql($standby, 'SELECT state FROM zk_status()') // '') eq 'connected' }),
	'the demoted member\'s worker connected again');
is(sql_ok($standby, q{SELECT zk_lock_try('pat/s')}), 'f',
	'nobody else can take pat/s');
isnt(scalar $on_primary->query(q{SELECT 1}), '1',
	'the demoted member\'s session ended');
ok( poll_until(
		sub {
			(sql($primary, q{SELECT zk_lock_try('pat/p') AND zk_lock_release('pat/p')}) // '') eq 't';
		},
		timeout => 2 * $SESSION_TIMEOUT / 1000),
	'its lock pat/p is free');

is(join(',', map { sql_ok($_, "SELECT job($slot2)") } ($standby, $primary, $primary)),
	'f,t,f', 'slot 2: the job runs once, on the new primary');
is(sql_ok($primary, "SELECT job($slot1)"), 'f',
	'slot 1 does not run again on the new primary');
ok(poll_until(sub { leaders() =~ /^m\d$/ }, timeout => 30),
	'one member leads group cron');

# ---------------------------------------------------------------------------
note 'failover: the primary is killed (Patroni and PostgreSQL)';

# what survives: a session of the standby holding a lock; what dies: one of
# the primary's
my $survivor = session($standby);
is($survivor->query_ok(q{SELECT zk_lock_acquire('pat/t')}), 't',
	'a session of the standby holds pat/t');
my $victim = session($primary);
is($victim->query_ok(q{SELECT zk_lock_acquire('pat/k')}), 't',
	'a session of the primary holds pat/k');
ok(poll_until(sub { (sql($standby, "SELECT count(*) FROM runs WHERE slot = $slot2") // '') eq '1' }),
	'slot 2\'s run reached the standby');

# Every process of the member, Patroni and PostgreSQL (the postmaster and
# all its children, the zklock worker too), is stopped at once with
# SIGSTOP and then killed with SIGKILL, as when the host dies: no process
# gets to do anything in between, so nothing closes the worker's
# ZooKeeper session and the member's locks can only go when ZooKeeper
# expires it.  (The postmaster's death alone would make the worker close
# its session at once.)
sub kill_member
{
	my ($m) = @_;
	my ($pm) = split /\n/,
	  PostgreSQL::Test::Utils::slurp_file("$m->{data}/postmaster.pid");
	my $patroni = $m->{patroni}{KIDS}[0]{PID};
	my @pids = ($patroni);
	foreach my $stat (glob '/proc/[0-9]*/stat')
	{
		open my $fh, '<', $stat or next;
		my $line = <$fh> // '';
		close $fh;
		push @pids, $1
		  if $line =~ /^(\d+) \(.*\) \S (\d+) / && ($2 == $pm || $2 == $patroni);
	}
	push @pids, $pm unless grep { $_ == $pm } @pids;
	kill 'STOP', @pids;
	kill 'KILL', @pids;
	eval { $m->{patroni}->finish; };
	return;
}

# the member that survives must not lead group cron already: if it does,
# it steps back (leaves the group and joins again, behind the primary)
if ((sql($standby, q{SELECT zk_is_leader('cron')}) // '') eq 't')
{
	sql_ok($standby, q{ALTER SYSTEM SET zklock.leader_groups = ''});
	sql_ok($standby, 'SELECT pg_reload_conf()');
	poll_until(sub { leaders() eq $primary->{name} }, timeout => 30);
	sql_ok($standby, 'ALTER SYSTEM RESET zklock.leader_groups');
	sql_ok($standby, 'SELECT pg_reload_conf()');
	ZkLockTest::Session::children_become($zk, '/zklock/cron', 2);
}
is(leaders(), $primary->{name}, 'the primary leads group cron');
is(scalar(ZkLockTest::zk_children($zk, '/zklock/cron')), 2,
	'and the standby takes part');

my $dead = $primary;
my @k_nodes = ZkLockTest::zk_children($zk, '/zklock/pat/k');
is(scalar @k_nodes, 1, 'pat/k has its one lock node');
$t0 = time;
kill_member($dead);
# a second after the kill the session has not expired: the node is there
Time::HiRes::sleep(1 - (time - $t0)) if time - $t0 < 1;
is_deeply([ ZkLockTest::zk_children($zk, '/zklock/pat/k') ],
	\@k_nodes, 'a second after the kill the lock node of pat/k is still there');
is(sql($standby, q{SELECT zk_lock_try('pat/k')}), 'f',
	'and nobody else can take pat/k');
my $freed;
ok( poll_until(
		sub {
			return 0 if ZkLockTest::zk_children($zk, '/zklock/pat/k');
			$freed = time - $t0;
			return 1;
		},
		timeout => 60),
	'the killed instance\'s lock node goes when ZooKeeper expires its session');
cmp_ok($freed, '<=', 2 * $SESSION_TIMEOUT / 1000,
	'within twice the session timeout');
note sprintf 'pat/k free after %.1f s', $freed // -1;
is(sql($standby, q{SELECT zk_lock_try('pat/k') AND zk_lock_release('pat/k')}),
	't', 'the survivor takes and releases pat/k');

ok( poll_until(
		sub { (sql($standby, q{SELECT zk_is_leader('cron')}) // '') eq 't' },
		timeout => 30),
	'the survivor leads group cron');
cmp_ok(time - $t0, '<=', 2 * $SESSION_TIMEOUT / 1000,
	'within twice zklock.session_timeout');
ok(poll_until(sub { in_recovery($standby) eq 'f' }, timeout => 120),
	'Patroni promoted the survivor');
note sprintf 'failover took %.1f s', time - $t0;
$primary = $standby;

ok($survivor->alive, 'the promoted member\'s session survived');
is($survivor->query_ok(q{SELECT zk_lock_held('pat/t')}), 't',
	'and still holds pat/t');
is(sql_ok($primary, "SELECT job($slot3)"), 't', 'slot 3: the job runs on the new primary');
is(sql_ok($primary, "SELECT job($slot2)"), 'f', 'slot 2 does not run again');
is( sql_ok($primary,
		q{SELECT string_agg(n::text, ',' ORDER BY slot) FROM (SELECT slot, count(*) AS n FROM runs GROUP BY slot) r}),
	'1,1,1', 'every slot ran exactly once');

# ---------------------------------------------------------------------------
note 'Patroni\'s and zklock\'s znodes';

my $tree = ZkLockTest::zk_python(
	$zk, q{
def walk(path):
    for child in sorted(zk.get_children(path)):
        p = path.rstrip('/') + '/' + child
        print(p)
        walk(p)
walk('/')
});
my @paths = split /\n/, $tree;
is(join(',', sort grep { m{^/[^/]+$} } @paths),
	'/service,/zklock,/zookeeper', 'the top level: Patroni\'s namespace, zklock.root, ZooKeeper\'s own');
ok((grep { $_ eq '/service/pg-main/leader' } @paths)
	  && (grep { m{^/service/pg-main/members/m\d$} } @paths),
	'Patroni\'s keys are under /service/pg-main');
is(join(',', grep { m{^/service/} && m{_c_|-latch-|-lock-|/claims} } @paths),
	'', 'none of zklock\'s nodes is under Patroni\'s namespace');
is(join(',', grep { m{^/zklock/} && m{/(leader|members|config|initialize|failover|sync|history|status|optime)$} } @paths),
	'', 'none of Patroni\'s keys is under zklock.root');

$_->quit foreach ($hold, $on_primary, $on_standby, $survivor, $victim);
$primary->{patroni}->signal('TERM');
eval { $primary->{patroni}->finish; };
done_testing();

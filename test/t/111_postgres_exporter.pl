# 111_postgres_exporter.pl
#    zk_stats counts exactly what the sessions did (grants, local grants,
#    waits, timeouts, cancels), and the real Prometheus postgres_exporter
#    (Debian package prometheus-postgres-exporter) with zklock's queries
#    file (monitoring/postgres_exporter.yaml), run with the environment
#    users copy (docs/examples/prometheus-postgres-exporter) as a member of
#    pg_monitor, serves them, the session state and zk_locks by state on
#    /metrics, scraped over loopback.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use HTTP::Tiny;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(poll_status signal_process);

my $EXPORTER = '/usr/bin/prometheus-postgres-exporter';
my $QUERIES = "$FindBin::RealBin/../../monitoring/postgres_exporter.yaml";
plan skip_all =>
  'postgres_exporter is not installed (Debian package prometheus-postgres-exporter)'
  unless -x $EXPORTER;

my $zk = ZkLockTest::zk_start();
my $node = ZkLockTest::pg_node('exported', $zk);

sub stats
{
	my $row = $node->safe_psql('postgres',
		'SELECT requests, grants, local_grants, waits, timeouts, cancels FROM zk_stats');
	my %s;
	@s{qw(requests grants local_grants waits timeouts cancels)} = split /\|/, $row;
	return \%s;
}

# ---------------------------------------------------------------------------
note 'lock traffic, counted';

$node->safe_psql('postgres', 'SELECT zk_stats_reset()');
is_deeply(
	stats(),
	{ requests => 0, grants => 0, local_grants => 0, waits => 0, timeouts => 0, cancels => 0 },
	'zk_stats_reset() starts every counter from 0');

my ($a, $b, $c, $d, $e) = map { ZkLockTest::Session->new($node) } 1 .. 5;
is($a->query_ok("SELECT zk_lock_acquire('exp/x')"), 't', 'a holds exp/x');
$b->send("SELECT zk_lock_acquire('exp/x')");
ZkLockTest::wait_for_extension_wait($node, $b);
is($c->query("SELECT zk_lock_acquire('exp/x', 200)"), 'f', 'c times out');
my (undef, $err) =
  $d->query("SET statement_timeout = 200; SELECT zk_lock_acquire('exp/x')");
is(sqlstate($err), '57014', 'd is cancelled by statement_timeout');
is($a->query_ok("SELECT zk_lock_release('exp/x')"), 't', 'a releases');
is($b->result, 't', 'b gets the lock (a local hand-off)');
$e->send("SELECT zk_lock_acquire('exp/x')");
ZkLockTest::wait_for_extension_wait($node, $e);
is_deeply(
	stats(),
	{ requests => 5, grants => 2, local_grants => 1, waits => 4, timeouts => 1, cancels => 1 },
	'zk_stats: 5 requests, 2 grants (1 local), 4 waits (1 timed out, 1 cancelled)');

# two releases that reach the worker together: one multi of two deletes
is($c->query_ok("SELECT zk_lock_acquire('exp/m1')"), 't', 'c holds exp/m1');
is($d->query_ok("RESET statement_timeout; SELECT zk_lock_acquire('exp/m2')"), 't',
	'd holds exp/m2');
my $worker = poll_status($node, sub { $_[0]{worker_pid} ne '' })->{worker_pid};
ZkFault::stop_worker($node, $worker);
$c->send("SELECT zk_lock_release('exp/m1')");
$d->send("SELECT zk_lock_release('exp/m2')");
ZkLockTest::wait_for_extension_wait($node, $_) foreach ($c, $d);
signal_process($worker, 'CONT');
is($c->result, 't', 'c releases exp/m1');
is($d->result, 't', 'd releases exp/m2');

# ---------------------------------------------------------------------------
note 'the exporter serves them';

# The exporter runs with the environment of
# docs/examples/prometheus-postgres-exporter as users copy it (the file
# Debian's service reads), but for its [site] values: this instance's
# socket and port, a loopback listen address, and the queries file of
# the tree.  It connects as role prometheus, a member of pg_monitor, as
# that file says.
my $port = PostgreSQL::Test::Cluster::get_free_port();
$node->safe_psql('postgres',
	'CREATE ROLE prometheus LOGIN; GRANT pg_monitor TO prometheus');
my %env = map { /^(\w+)='(.*)'$/ ? ($1 => $2) : () } split /\n/,
  ZkLockTest::example_file(
	'prometheus-postgres-exporter',
	DATA_SOURCE_NAME => sub {
		$_[0] =~ s{host=\S+ port=\d+}{sprintf 'host=%s port=%d', $node->host, $node->port}er;
	},
	ARGS => sub {
		$_[0] =~ s{--web\.listen-address=\S*}{--web.listen-address=127.0.0.1:$port}r
		  =~ s{--extend\.query-path=\S+}{--extend.query-path=$QUERIES}r;
	});
like($env{DATA_SOURCE_NAME}, qr/^user=prometheus /,
	'the exporter connects as prometheus');
local $ENV{DATA_SOURCE_NAME} = $env{DATA_SOURCE_NAME};
my ($xout, $xerr) = ('', '');
my $exporter = IPC::Run::start([ $EXPORTER, split ' ', $env{ARGS} ],
	'<', \undef, '>', \$xout, '2>', \$xerr);
END { $exporter->kill_kill if $exporter && $exporter->pumpable; }

my $http = HTTP::Tiny->new(timeout => 10);
my %m;
my $scraped = '';
ok( poll_until(
		sub {
			my $r = $http->get("http://127.0.0.1:$port/metrics");
			return 0 unless $r->{success};
			%m = ();
			$scraped = $r->{content};
			# name{labels} value; the exporter adds a label server="..."
			foreach (split /\n/, $r->{content})
			{
				next unless /^(\w+)(?:\{(.*)\})? (\S+)$/;
				my ($name, $labels, $value) = ($1, $2 // '', $3);
				$labels =~ s/(^|,)server="[^"]*"//;
				$labels =~ s/^,//;
				$m{ $labels eq '' ? $name : "$name\{$labels\}" } = $value;
			}
			return exists $m{zklock_stats_grants_total};
		},
		timeout => 60,
		interval => 0.5),
	'/metrics has zklock_stats')
  or diag "exporter output: $xerr\nscraped:\n"
  . join("\n", grep { /^zklock_/ } split /\n/, $scraped);

is($m{pg_up}, 1, 'the exporter reaches the instance');
is($m{pg_exporter_last_scrape_error}, 0, 'every query of the scrape worked');
my %want = (
	requests_total => 7,
	grants_total => 4,
	local_grants_total => 1,
	waits_total => 4,
	timeouts_total => 1,
	cancels_total => 1,
	session_losses_total => 0,
	orphans_deleted_total => 0,
	nodes => 1,
);
is($m{"zklock_stats_$_"}, $want{$_}, "zklock_stats_$_ $want{$_}")
  foreach sort keys %want;
cmp_ok($m{zklock_stats_zk_requests_total}, '>=', 3,
	'zklock_stats_zk_requests_total: at least the create, listing and data watch of the node');
cmp_ok($m{zklock_stats_watches}, '>=', 1, 'zklock_stats_watches: at least one');
is( join('|', map { $m{"zklock_stats_${_}_total"} } qw(zk_multis zk_multi_writes zk_multis_refused)),
	'1|2|0', 'zklock_stats_zk_multis_total 1, _zk_multi_writes_total 2, _zk_multis_refused_total 0');
cmp_ok($m{zklock_stats_reconnects_total}, '<=', 1,
	'zklock_stats_reconnects_total: no more than the first connection');
my $reset = $node->safe_psql('postgres',
	'SELECT extract(epoch FROM stats_reset) FROM zk_stats');
ok(abs($m{zklock_stats_reset_time_seconds} - $reset) < 0.001,
	'zklock_stats_reset_time_seconds: when zk_stats_reset() ran');
is($m{'zklock_session_state{state="connected"}'},
	1, 'zklock_session_state: connected');
is( join(',', map { $m{"zklock_session_state{state=\"$_\"}"} }
		  ('connecting', 'suspended', 'lost', 'no worker')),
	'0,0,0,0',
	'and no other state');
is($m{zklock_status_session_timeout_ms}, 4000, 'zklock_status_session_timeout_ms');
is($m{'zklock_locks_count{state="held"}'}, 1, 'zklock_locks_count: b holds');
is($m{'zklock_locks_count{state="waiting"}'}, 1, 'and e waits');
is($m{'zklock_locks_count{state="lost"}'} + $m{'zklock_locks_count{state="releasing"}'},
	0, 'nothing lost or releasing');

is($b->query_ok("SELECT zk_lock_release('exp/x')"), 't', 'b releases');
is($e->result, 't', 'e gets the lock');
is($e->query_ok("SELECT zk_lock_release('exp/x')"), 't', 'e releases');
$_->quit foreach ($a, $b, $c, $d, $e);
$exporter->kill_kill;
done_testing();

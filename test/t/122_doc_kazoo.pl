# 122_doc_kazoo.pl
#    The Kazoo example of docs/interoperability.md ("Authentication and
#    timeouts") runs as written against an instance with zklock.auth_file
#    holding its credentials (zkuser:secret), with only the ensemble's
#    address replaced and its run_report() defined: while a SQL session
#    holds the lock, the example gets LockTimeout (after its 10 seconds)
#    and says so; once released, it takes the lock, which SQL sessions then
#    cannot take, with a node whose ACL is the one zklock gives its own
#    (all rights for the digest identity, READ for anyone).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until);

my $doc = slurp_file("$ZkLockTest::SRC_DIR/docs/interoperability.md");
my ($example) = $doc =~ /^## Authentication and timeouts\n.*?^```python\n(.*?)^```$/ms;
ok($example, 'docs/interoperability.md has the Kazoo example')
  or BAIL_OUT('no Kazoo example');

my $zk = ZkLockTest::zk_start();
my $dir = PostgreSQL::Test::Utils::tempdir();
PostgreSQL::Test::Utils::append_to_file("$dir/zookeeper.auth", "zkuser:secret\n");
chmod 0600, "$dir/zookeeper.auth" or die "chmod: $!";
my $node = ZkLockTest::pg_node('kazoo', $zk,
	'zklock.auth_file' => "$dir/zookeeper.auth");

my $script = $example;
is($script =~ s/"zk1:2181,zk2:2181,zk3:2181"/'"' . $zk->connect . '"'/e, 1,
	'the example names the ensemble once');
# run_report: says so, shows its node's ACL, and holds until told to go
$script = <<'PY' . $script;
import sys
def run_report():
    acl = sorted((a.id.scheme, a.perms) for a in zk.get_acls(lock.path + "/" + lock.node)[0])
    print("running the report, node ACL", acl, flush=True)
    sys.stdin.readline()
PY
PostgreSQL::Test::Utils::append_to_file("$dir/example.py", $script);

# the example, started; returns the harness and its output's buffer
sub start_example
{
	my ($in, $out) = ('', '');
	my $h = IPC::Run::start([ $ZkLockTest::PYTHON, "$dir/example.py" ],
		'<', \$in, '>', \$out, '2>&1');
	return ($h, \$in, \$out);
}

my $s = ZkLockTest::Session->new($node);
is($s->query_ok(q{SELECT zk_lock_acquire('nightly-report')}), 't',
	'a SQL session holds nightly-report');
my $t0 = time;
my ($h, $in, $out) = start_example();
$h->finish;
like($$out, qr/^someone else is running the report$/m,
	'the example gets LockTimeout and says so');
cmp_ok(time - $t0, '>=', 10, 'after its 10 seconds');

is($s->query_ok(q{SELECT zk_lock_release('nightly-report')}), 't', 'released');
($h, $in, $out) = start_example();
poll_until(
	sub {
		$h->pump_nb if $h->pumpable;
		return $$out =~ /running the report/ || !$h->pumpable;
	},
	timeout => 60);
like($$out, qr/running the report/,
	'the example takes the lock and runs the report')
  or diag $$out;
like($$out, qr/node ACL \[\('digest', 31\), \('world', 1\)\]/,
	'its node: all rights for the digest identity, READ for anyone');
is($s->query_ok(q{SELECT zk_lock_try('nightly-report')}), 'f',
	'meanwhile a SQL session cannot take the lock');
$$in .= "\n";
ok($h->finish, 'the example releases and ends') or diag $$out;
is($s->query_ok(q{SELECT zk_lock_try('nightly-report')}), 't',
	'then the SQL session takes it');
$s->quit;
done_testing();

# 123_doc_curator.pl
#    The Java (Curator) examples of docs/interoperability.md run as written,
#    inside a class with their imports, compiled and run with the commands
#    the page gives (the class path: curator-recipes.jar, whose manifest
#    brings the rest, and slf4j-nop.jar), with only the ensemble's address
#    replaced and the job defined.  (Without its -sourcepath, javac
#    compiles a source file it finds in a jar the manifests bring, and
#    fails writing its class back into that jar.)
#
#    - "Examples": while a SQL session holds nightly-report, the example
#      says someone else is running the report (after its 10 seconds); once
#      released, it takes the lock, which SQL sessions then cannot take.
#    - "Authentication and timeouts", against an instance whose
#      zklock.auth_file holds the example's credentials (zkuser:secret):
#      its timed acquire returns false while SQL holds the lock; once
#      released, it takes the lock with a node whose ACL is the one zklock
#      gives its own (all rights for the digest identity, READ for anyone).

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkInterop;
use ZkLockTest;
use ZkLockTest::Session qw(poll_until);

my $doc = slurp_file("$ZkLockTest::SRC_DIR/docs/interoperability.md");
my ($plain) = $doc =~ /^## Examples\n.*?^```java\n(.*?)^```$/ms;
my ($auth) = $doc =~ /^## Authentication and timeouts\n.*?^```java\n(.*?)^```$/ms;
ok($plain, 'docs/interoperability.md has the Curator example');
ok($auth, '... and the one with authentication');
BAIL_OUT('no Curator example') unless $plain && $auth;
my ($javac) = $doc =~ /compile with\s+`javac ([^`]+)`/;
my ($java) = $doc =~ /run with\s+`java ([^`]+)`/;
ok($javac && $java, 'the page says how to compile and run it');
BAIL_OUT('no commands') unless $javac && $java;
my @javac = ($ZkInterop::JAVAC, '-nowarn', split ' ', $javac);
my @java = ($ZkInterop::JAVA, '-XX:TieredStopAtLevel=1', split ' ', $java);

my $zk = ZkLockTest::zk_start();
my $dir = PostgreSQL::Test::Utils::tempdir();

# The example $body as the main() of class Report in $dir/$name, with the
# ensemble $zk, compiled as the page says.  The job prints the ACL of the
# lock's node ("digest:31 world:1") and holds the lock until a line comes
# on its standard input.
sub compile_example
{
	my ($name, $body, $address) = @_;
	my $connect = $zk->connect;
	is($body =~ s/"\Q$address\E"/"$connect"/g, 1,
		"$name: the example names the ensemble once");
	is($body =~ s{/\* (?:the job|run the report) \*/}{job(zk, lock);}g, 1,
		"$name: the example has one place for the job");
	my $src = <<"JAVA";
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.api.ACLProvider;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.ACL;

public class Report {
    static void job(CuratorFramework zk, InterProcessMutex lock) throws Exception {
        for (String node : lock.getParticipantNodes()) {
            String acl = zk.getACL().forPath(node).stream()
                .map(a -> a.getId().getScheme() + ":" + a.getPerms()).sorted()
                .collect(Collectors.joining(" "));
            System.out.println("running the report, node ACL " + acl);
        }
        System.out.flush();
        System.in.read();
    }

    public static void main(String[] args) throws Exception {
$body
        System.out.println("done");
        System.exit(0);
    }
}
JAVA
	my $classes = "$dir/$name";
	mkdir $classes or die "mkdir $classes: $!";
	PostgreSQL::Test::Utils::append_to_file("$classes/Report.java", $src);
	my ($out, $err) = ('', '');
	ok( IPC::Run::run(
			\@javac, '<', '/dev/null', '>', \$out, '2>', \$err,
			init => sub { chdir $classes or die "chdir: $!" }),
		"$name: it compiles as the page says") or diag "$out$err";
	return $classes;
}

# the example in $classes, started; returns the harness and its buffers
sub start_example
{
	my ($classes) = @_;
	my ($in, $out) = ('', '');
	my $h = IPC::Run::start(\@java, '<', \$in, '>', \$out, '2>&1',
		init => sub { chdir $classes or die "chdir: $!" });
	return ($h, \$in, \$out);
}

# The example in $classes against SQL sessions of $node: it gives up while
# one holds the lock; it takes it once released.
sub check_example
{
	my ($name, $classes, $node, $acl, $busy) = @_;
	my $s = ZkLockTest::Session->new($node);
	is($s->query_ok(q{SELECT zk_lock_acquire('nightly-report')}), 't',
		"$name: a SQL session holds nightly-report");
	my $t0 = time;
	my ($h, $in, $out) = start_example($classes);
	$h->finish;
	like($$out, $busy, "$name: the example gives up") or diag $$out;
	unlike($$out, qr/running the report, node ACL/,
		"$name: ... without running the job");
	cmp_ok(time - $t0, '>=', 10, "$name: after its 10 seconds");

	is($s->query_ok(q{SELECT zk_lock_release('nightly-report')}), 't',
		"$name: released");
	($h, $in, $out) = start_example($classes);
	poll_until(
		sub {
			$h->pump_nb if $h->pumpable;
			return $$out =~ /running the report/ || !$h->pumpable;
		},
		timeout => 60);
	like($$out, qr/running the report, node ACL \Q$acl\E$/m,
		"$name: the example takes the lock (its node's ACL: $acl)")
	  or diag $$out;
	is($s->query_ok(q{SELECT zk_lock_try('nightly-report')}), 'f',
		"$name: meanwhile a SQL session cannot take the lock");
	$$in .= "\n";
	ok($h->finish, "$name: the example releases and ends") or diag $$out;
	like($$out, qr/^done$/m, "$name: ... after its job");
	is($s->query_ok(q{SELECT zk_lock_try('nightly-report')}), 't',
		"$name: then the SQL session takes it");
	is($s->query_ok(q{SELECT zk_lock_release('nightly-report')}), 't',
		"$name: and releases it");
	$s->quit;
}

my $plain_node = ZkLockTest::pg_node('curator_plain', $zk);
check_example('plain', compile_example('plain', $plain, 'zk1:2181'),
	$plain_node, 'world:31',
	qr/^someone else is running the report$/m);
$plain_node->stop;

PostgreSQL::Test::Utils::append_to_file("$dir/zookeeper.auth", "zkuser:secret\n");
chmod 0600, "$dir/zookeeper.auth" or die "chmod: $!";
my $auth_node = ZkLockTest::pg_node('curator_auth', $zk,
	'zklock.auth_file' => "$dir/zookeeper.auth");
check_example('auth',
	compile_example('auth', $auth, 'zk1:2181,zk2:2181,zk3:2181'),
	$auth_node, 'digest:31 world:1', qr/^done$/m);

done_testing();

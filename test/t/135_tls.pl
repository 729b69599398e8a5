# 135_tls.pl
#    The TLS recipe of docs/tls.md, run as written: ZooKeeper with only a
#    TLS port, one stunnel tunnel per instance with a client certificate of
#    its own, zklock.acl_identities naming both.  Locks and a job claim
#    across the two instances through their tunnels; a plain connection to
#    the TLS port gets no session; a Kazoo client with a certificate outside
#    the fleet can read but not delete a held lock's node nor create under
#    the parents; a tunnel restarted within the session timeout keeps the
#    session and its locks, one down for longer loses them; a tunnel whose
#    TLS handshake fails is named in last_error and the 08001's hint, and
#    the ZooKeeper client's repeated log lines are rate-limited; bad values
#    of zklock.acl_identities are refused with 22023.
#
#    The configuration comes from the blocks of docs/tls.md marked
#    "<!-- docs-block: NAME -->"; doc_block() replaces only the strings it is
#    given (ports, paths, certificate file names) and dies when one of them
#    is not in the block, so that a change of the page shows here.  Beyond
#    the page: zoo.cfg gets a tickTime, a dataDir and
#    secureClientPortAddress=127.0.0.1 (loopback only), the class path
#    slf4j-simple.jar (the server's log), and the one ZooKeeper server of
#    the test stands for all three servers of the page (each tunnel's three
#    services connect to it; its certificate names zk1, zk2 and zk3).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use IO::Select;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(poll_status zk_status_of);

plan skip_all => 'stunnel4 is not installed (Debian package stunnel4)'
  unless -x '/usr/bin/stunnel4';

my $started = time;
my $dir = PostgreSQL::Test::Utils::tempdir('tls');
# A block of docs/tls.md (ZkLockTest::doc_block).
sub doc_block { return ZkLockTest::doc_block('docs/tls.md', @_); }

sub run_ok
{
	my ($cmd, $what) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run($cmd, '<', '/dev/null', '>', \$out, '2>', \$err)
	  or die "$what failed: $err";
	return $out;
}

# ---------------------------------------------------------------------------
note 'a throwaway CA, a certificate for ZooKeeper and one per client';

sub openssl { return run_ok([ 'openssl', @_ ], "openssl @_[0..1]"); }

my @ec = ('-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes');
openssl('req', '-x509', @ec, '-keyout', "$dir/ca.key", '-out', "$dir/ca.crt",
	'-subj', '/O=Example/CN=Example test CA', '-days', '2');
append_to_file("$dir/san.ext",
	"subjectAltName=DNS:zk1.example.net,DNS:zk2.example.net,DNS:zk3.example.net\n");
foreach my $c ([ 'zk1', 'O=Example/OU=zookeeper/CN=zk1' ],
	[ 'db1', 'O=Example/OU=databases/CN=db1' ],
	[ 'db2', 'O=Example/OU=databases/CN=db2' ],
	[ 'intruder', 'O=Example/OU=databases/CN=intruder' ])
{
	my ($name, $subject) = @$c;
	openssl('req', @ec, '-keyout', "$dir/$name.key", '-out', "$dir/$name.csr",
		'-subj', "/$subject");
	openssl('x509', '-req', '-in', "$dir/$name.csr", '-CA', "$dir/ca.crt",
		'-CAkey', "$dir/ca.key", '-CAcreateserial', '-out', "$dir/$name.crt",
		'-days', '2', ($name eq 'zk1' ? ('-extfile', "$dir/san.ext") : ()));
}
# a certificate of another CA (self-signed), which ZooKeeper refuses
openssl('req', '-x509', @ec, '-keyout', "$dir/rogue.key", '-out',
	"$dir/rogue.crt", '-subj', '/O=Example/OU=databases/CN=db1', '-days', '2');
append_to_file("$dir/zk1.pem",
	slurp_file("$dir/zk1.key") . slurp_file("$dir/zk1.crt"));
chmod 0600, map { "$dir/$_" } qw(zk1.pem db1.key db2.key intruder.key rogue.key);

my $dn = doc_block('dn', '/etc/stunnel/db1.crt' => "$dir/db1.crt");
my $printed = run_ok([ 'sh', '-c', $dn ], 'the DN command');
is($printed, "subject=CN=db1,OU=databases,O=Example\n",
	'the DN command prints the DN as the page says');

# ---------------------------------------------------------------------------
note 'ZooKeeper with only a TLS port';

my $zk_port = PostgreSQL::Test::Cluster::get_free_port();
mkdir "$dir/data";
append_to_file("$dir/zoo.cfg",
	"tickTime=500\ndataDir=$dir/data\nsecureClientPortAddress=127.0.0.1\n"
	  . doc_block('zoo.cfg',
		'secureClientPort=2281' => "secureClientPort=$zk_port",
		'/etc/zookeeper/tls/zk1.pem' => "$dir/zk1.pem",
		'/etc/zookeeper/tls/ca.crt' => "$dir/ca.crt"));
my ($classpath) = doc_block('classpath') =~ /^CLASSPATH="(.*)"$/m
  or die 'no CLASSPATH in the classpath block';
$classpath .= ':/usr/share/java/slf4j-simple.jar';
my $zk = IPC::Run::start(
	[
		'java', '-Xmx256m', '-cp', $classpath,
		'org.apache.zookeeper.server.quorum.QuorumPeerMain', "$dir/zoo.cfg"
	],
	'<', '/dev/null', '>>', "$dir/zk.log", '2>&1');

# ---------------------------------------------------------------------------
note 'a tunnel per instance';

my (%tunnel, %ports);
foreach my $who (qw(db1 db2))
{
	$ports{$who} = [ map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. 3 ];
}

# The stunnel configuration of the page for instance $who, with the
# certificate $cert (default: $who's).
sub tunnel_conf
{
	my ($who, $cert) = @_;
	$cert //= $who;
	my @p = @{ $ports{$who} };
	my $file = "$dir/stunnel-$who.conf";
	unlink $file;
	append_to_file($file,
		doc_block('stunnel',
			'/etc/stunnel/db1.crt' => "$dir/$cert.crt",
			'/etc/stunnel/db1.key' => "$dir/$cert.key",
			'/etc/stunnel/zookeeper-ca.crt' => "$dir/ca.crt",
			(map { ("127.0.0.1:230$_" => "127.0.0.1:$p[$_ - 1]") } 1 .. 3),
			(map { ("zk$_.example.net:2281" => "127.0.0.1:$zk_port") } 1 .. 3)));
	return $file;
}

sub tunnel_start
{
	my ($who, $cert) = @_;
	my $conf = tunnel_conf($who, $cert);
	$tunnel{$who} = IPC::Run::start([ 'stunnel4', $conf ],
		'<', '/dev/null', '>>', "$dir/stunnel-$who.log", '2>&1');
	# listening once it has read its configuration
	my $port = $ports{$who}[0];
	poll_until(sub { IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") })
	  or die "the tunnel of $who does not listen";
}

sub tunnel_stop
{
	my ($who) = @_;
	$tunnel{$who}->kill_kill;
	delete $tunnel{$who};
}

END
{
	local $?;    # the children's exit statuses are not the test's
	$_->kill_kill foreach grep { defined } values %tunnel;
	$zk->kill_kill if $zk;
}

tunnel_start($_) foreach qw(db1 db2);

# ---------------------------------------------------------------------------
note 'two instances with the settings of the page';

my %conf;
foreach my $who (qw(db1 db2))
{
	my @p = @{ $ports{$who} };
	my $block = doc_block('postgresql.conf',
		map { ("127.0.0.1:230$_" => "127.0.0.1:$p[$_ - 1]") } 1 .. 3);
	while ($block =~ /^(\S+) = '(.*)'$/mg)
	{
		$conf{$who}{$1} = $2 =~ s/''/'/gr;
	}
}
# an 8 s session timeout: a tunnel restart has that long (it takes well
# under a second), and the longer outage below lasts until it is over
my @common = ('zklock.session_timeout' => '8000');
my $pa = ZkLockTest::pg_node('tls_a', $conf{db1}{'zklock.hosts'}, @common,
	'zklock.acl_identities' => $conf{db1}{'zklock.acl_identities'});
my $pb = ZkLockTest::pg_node('tls_b', $conf{db2}{'zklock.hosts'}, @common,
	'zklock.acl_identities' => $conf{db2}{'zklock.acl_identities'});
foreach my $node ($pa, $pb)
{
	ok(poll_status($node, sub { $_[0]{state} eq 'connected' }),
		$node->name . ' connects through its tunnel');
}

# ---------------------------------------------------------------------------
note 'locks and a job claim across both instances';

my $sa = ZkLockTest::Session->new($pa);
my $sb = ZkLockTest::Session->new($pb);
is($sa->query_ok("SELECT zk_lock_acquire('tls_x', 10000)"), 't', 'a takes tls_x');
is($sb->query_ok("SELECT zk_lock_try('tls_x')"), 'f', 'b does not get it');
is($sa->query_ok("SELECT zk_lock_release('tls_x')"), 't', 'a releases it');
# b creates under the parent a created, and deletes there: the fleet's rights
is($sb->query_ok("SELECT zk_lock_try('tls_x')"), 't', 'b takes tls_x');
is($sb->query_ok("SELECT zk_lock_release('tls_x')"), 't', 'b releases it');
is($sa->query_ok("SELECT zk_lock_acquire('tls_x', 10000)"), 't',
	'a takes tls_x again and holds it');

my $slot = '2026-03-01 10:00+00';
$sb->query_ok('BEGIN');
is($sb->query_ok("SELECT zk_job_claim('tls_job', '$slot')"), 't', 'b claims the slot');
is($sa->query_ok("SELECT zk_job_claim('tls_job', '$slot')"), 'f', 'a does not get it');
$sb->query_ok('COMMIT');
is($sa->query_ok("SELECT final FROM zk_job_claims('tls_job')"), 't',
	'a sees the claim final');

# ---------------------------------------------------------------------------
note 'a plain connection to the TLS port gets no session';

{
	my $sock = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$zk_port")
	  or die "cannot connect to ZooKeeper's TLS port: $!";
	# ZooKeeper's ConnectRequest: length 44, protocol 0, lastZxid 0,
	# timeout 4000, session 0, a password of 16 zero bytes
	syswrite($sock, pack('N N Q> N Q> N a16', 44, 0, 0, 4000, 0, 16, ''));
	my $got = '';
	my $sel = IO::Select->new($sock);
	while ($sel->can_read(30))
	{
		my $n = sysread($sock, my $buf, 4096);
		last unless $n;
		$got .= $buf;
	}
	# a ConnectResponse would start with its length, 36 or more, and
	# protocol version 0; a TLS alert, if any, starts with 0x15
	ok(length($got) < 8 || unpack('N', $got) > 1000 || substr($got, 0, 1) eq "\x15",
		'the server closes a plain connection without a session ('
		  . length($got) . ' bytes)');
}

# ---------------------------------------------------------------------------
note 'a certificate outside the fleet can read, not change';

my $kazoo_tls = <<'PY';
import logging, sys
logging.basicConfig(level=logging.CRITICAL)
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
d, port = sys.argv[1], sys.argv[2]
zk = KazooClient(hosts='127.0.0.1:' + port, use_ssl=True, verify_certs=True,
                 certfile=d + '/intruder.crt', keyfile=d + '/intruder.key',
                 ca=d + '/ca.crt', timeout=10.0)
zk.start(timeout=30)
def attempt(what, f):
    try:
        f()
        print(what, 'done')
    except NoAuthError:
        print(what, 'refused')
    except Exception as e:
        print(what, type(e).__name__)
holders = zk.get_children('/zklock/tls_x')
print('holders', len(holders))
acl, _ = zk.get_acls('/zklock/tls_x')
# ZooKeeper 3.8 keeps the creator's entry ("auth") beside the same one of
# the list: the same DN, as openssl prints it, not a fourth entry
print('acl', ' '.join(sorted(set('%s:%s:%d' % (a.id.scheme, a.id.id, a.perms) for a in acl))))
node = '/zklock/tls_x/' + holders[0]
attempt('delete-holder', lambda: zk.delete(node))
attempt('set-holder', lambda: zk.set(node, b'__REVOKE__'))
attempt('create-under-lock', lambda: zk.create('/zklock/tls_x/_c_0-lock-', ephemeral=True, sequence=True))
attempt('create-under-root', lambda: zk.create('/zklock/intruder'))
claims = zk.get_children('/zklock/tls_job/claims')
attempt('delete-claim', lambda: zk.delete('/zklock/tls_job/claims/' + claims[0]))
zk.stop()
PY
my $out = run_ok([ $ZkLockTest::PYTHON, '-c', $kazoo_tls, $dir, $zk_port ],
	'the Kazoo client outside the fleet');
like($out, qr/^holders 1$/m, 'it reads the holders of tls_x');
is(($out =~ /^acl (.*)$/m)[0],
	'world:anyone:1 x509:CN=db1,OU=databases,O=Example:31 x509:CN=db2,OU=databases,O=Example:31',
	'the parent grants all rights to the fleet (the creator\'s DN as printed by openssl), READ to everyone');
foreach my $what (qw(delete-holder set-holder create-under-lock create-under-root delete-claim))
{
	like($out, qr/^$what refused$/m, "it cannot $what");
}
is($sb->query_ok("SELECT zk_lock_try('tls_x')"), 'f', 'a still holds tls_x');

# ---------------------------------------------------------------------------
note 'a tunnel restarted within the session timeout keeps the session';

my $before = zk_status_of($sa);
tunnel_stop('db1');
ok(poll_status($sa, sub { $_[0]{state} eq 'suspended' }),
	'a notices that its connection is gone');
tunnel_start('db1');
my $after = poll_status($sa, sub { $_[0]{state} eq 'connected' });
ok($after, 'a reconnects through the restarted tunnel');
is($after->{session_id}, $before->{session_id}, '... to the same session');
is($after->{session_losses}, $before->{session_losses}, '... losing nothing');
is($sb->query_ok("SELECT zk_lock_try('tls_x')"), 'f', 'a still holds tls_x');
is($sa->query_ok("SELECT count(*) FROM zk_locks WHERE name = 'tls_x'"), '1',
	'a still lists its holding');

# ---------------------------------------------------------------------------
note 'a tunnel down for longer than the session timeout';

$pa->safe_psql('postgres',
	"ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()");
tunnel_stop('db1');
ok(poll_status($pa, sub { $_[0]{session_losses} > $before->{session_losses} }),
	'a loses its session');
$sa->query('SELECT 1');    # takes the session's warnings of the loss, if any
ok(poll_until(sub { $sb->query_ok("SELECT zk_lock_try('tls_x')") eq 't' }),
	'b gets tls_x once ZooKeeper expired the session of a');

note 'the tunnel comes back, with a certificate ZooKeeper does not trust';
my $log_from = -s $pa->logfile;
tunnel_start('db1', 'rogue');
my $last;
ok( poll_until(
		sub {
			$last = ($sa->query('SELECT last_error FROM zk_status()'))[0] // '';
			return $last =~ /closed right after it was made, (\d+) times/ && $1 >= 12;
		}),
	'last_error names the tunnel after repeated resets')
  or diag "last_error: $last";
like($last, qr/TLS tunnel .* see the tunnel's log/, '... and its log');
my ($out08, $err08) = $sa->query(
	"SET zklock.connect_timeout = 200; SELECT zk_lock_try('tls_z'); RESET zklock.connect_timeout");
is(sqlstate($err08), '08001', 'a request fails with 08001');
like($err08, qr/HINT:  Every connection was closed right after it was made: if zklock.hosts names a TLS tunnel/,
	'... whose hint names the tunnel');
my @client_lines = grep { /zookeeper client:/ }
  split /\n/, substr(slurp_file($pa->logfile), $log_from);
my ($resets) = $last =~ /(\d+) times/;
cmp_ok(scalar(@client_lines), '<=', 6,
	"the client's repeated lines are rate-limited ("
	  . scalar(@client_lines) . " lines for $resets resets)");
$pa->safe_psql('postgres',
	"ALTER SYSTEM RESET log_min_messages; SELECT pg_reload_conf()");

tunnel_stop('db1');
tunnel_start('db1');
$after = poll_status($sa, sub { $_[0]{state} eq 'connected' });
ok($after && $after->{session_id} ne $before->{session_id},
	'a connects again with a new session once the tunnel is back');
is(($sa->query("SELECT state FROM zk_locks WHERE name = 'tls_x'"))[0], 'lost',
	'the holding of a is lost, as documented');
my ($rel, $relerr) = $sa->query("SELECT zk_lock_release('tls_x')");
is($rel, 'f', '... its release returns false');
like($relerr, qr/WARNING/, '... with a WARNING');
is(($sa->query("SELECT zk_lock_try('tls_x')"))[0], 'f', 'b holds tls_x now');

# ---------------------------------------------------------------------------
note 'bad values of zklock.acl_identities';

foreach my $bad (
	[ 'x509:CN=db1,O=Example', 'put each x509 identity in double quotes' ],
	[ 'digest:app:secret', 'the hash being the base64' ],
	[ 'world:anyone', 'neither' ])
{
	my ($v, $want) = @$bad;
	my ($o, $e) = $sa->query("ALTER SYSTEM SET zklock.acl_identities = '$v'");
	is(sqlstate($e), '22023', "\"$v\" is refused with 22023");
	like($e, qr/\Q$want\E/i, "... saying \"$want\"");
}

$sa->quit;
$sb->quit;
note sprintf('135_tls.pl took %.1f s', time - $started);
done_testing();

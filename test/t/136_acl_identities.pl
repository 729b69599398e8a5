# 136_acl_identities.pl
#    zklock.acl_identities with digest identities, on a plain ZooKeeper
#    (135_tls.pl has the x509 ones, through TLS): two instances with
#    digest users of their own and a Kazoo peer, all three named in the
#    list, share locks (each creates and deletes under parents another
#    created, ZooKeeper checking DELETE on the parent); a Kazoo client
#    with another digest user can read but not delete a held lock's node
#    nor create under the parents; without the list the second instance
#    cannot release a lock under a parent the first created (what the
#    fleet's rights are for); a worker with the list but no identity at
#    all gets "invalid acl" and leaves no node behind.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use Digest::SHA qw(sha1);
use IPC::Run;
use MIME::Base64 qw(encode_base64);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(poll_status);

my $zk = ZkLockTest::zk_start();
my $dir = PostgreSQL::Test::Utils::tempdir('acl');

sub digest_id
{
	my ($user, $pw) = @_;
	return "digest:$user:" . encode_base64(sha1("$user:$pw"), '');
}

# the command of docs/tls.md that computes a digest identity's hash
{
	my $cmd = ZkLockTest::doc_block('docs/tls.md', 'digest',
		"'user:password'" => "'peer:pw-peer'");
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'sh', '-c', $cmd ], '>', \$out, '2>', \$err)
	  or die "the digest command failed: $err";
	is("digest:peer:$out", digest_id('peer', 'pw-peer') . "\n",
		'the command of docs/tls.md computes the hash of a digest identity');
}

sub auth_file
{
	my ($user, $pw) = @_;
	my $file = "$dir/$user.auth";
	append_to_file($file, "$user:$pw\n");
	chmod 0600, $file;
	return $file;
}

my $fleet = join ', ', map { '"' . digest_id($_, "pw-$_") . '"' } qw(inst_a inst_b peer);
my $pa = ZkLockTest::pg_node('acl_a', $zk,
	'zklock.auth_file' => auth_file('inst_a', 'pw-inst_a'),
	'zklock.acl_identities' => $fleet);
my $pb = ZkLockTest::pg_node('acl_b', $zk,
	'zklock.auth_file' => auth_file('inst_b', 'pw-inst_b'),
	'zklock.acl_identities' => $fleet);
foreach my $node ($pa, $pb)
{
	ok(poll_status($node, sub { $_[0]{state} eq 'connected' }),
		$node->name . ' connects');
}
my $sa = ZkLockTest::Session->new($pa);
my $sb = ZkLockTest::Session->new($pb);

# ---------------------------------------------------------------------------
note 'the fleet shares the parents';

is($sa->query_ok("SELECT zk_lock_acquire('acl_x', 10000)"), 't', 'a takes acl_x');
is($sb->query_ok("SELECT zk_lock_try('acl_x')"), 'f', 'b does not get it');
is($sa->query_ok("SELECT zk_lock_release('acl_x')"), 't', 'a releases it');
is($sb->query_ok("SELECT zk_lock_try('acl_x')"), 't',
	'b takes acl_x under the parent a created');
is($sb->query_ok("SELECT zk_lock_release('acl_x')"), 't', '... and releases it');
is($sa->query_ok("SELECT zk_lock_acquire('acl_x', 10000)"), 't', 'a holds acl_x again');

my $kazoo = q{
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions
c = KazooClient(hosts=args[0], auth_data=[('digest', args[1])])
c.start(timeout=30)
def attempt(what, f):
    try:
        f()
        print(what, 'done')
    except NoAuthError:
        print(what, 'refused')
    except Exception as e:
        print(what, type(e).__name__)
acl, _ = c.get_acls('/zklock/acl_x')
# the user of each digest (others see the hashes masked); ZooKeeper 3.8
# keeps the creator's entry beside the same one of the list
print('acl', ' '.join(sorted(set('%s:%s:%d' % (a.id.scheme, a.id.id.split(':')[0], a.perms) for a in acl))))
holders = c.get_children('/zklock/acl_x')
print('holders', len(holders))
attempt('create-under-lock', lambda: c.delete(c.create('/zklock/acl_x/_c_0-lock-', ephemeral=True, sequence=True)))
attempt('delete-holder', lambda: c.delete('/zklock/acl_x/' + holders[0]))
c.stop()
};

my $out = ZkLockTest::zk_python($zk, $kazoo, $zk->connect, 'stranger:pw-stranger');
like($out, qr/^acl digest:inst_a:31 digest:inst_b:31 digest:peer:31 world:anyone:1$/m,
	'the parent gives all rights to the creator and the list, READ to everyone');
like($out, qr/^holders 1$/m, 'another digest user reads the holders');
like($out, qr/^create-under-lock refused$/m, '... but cannot create under the parent');
like($out, qr/^delete-holder refused$/m, '... nor delete the held lock\'s node');

$out = ZkLockTest::zk_python($zk, $kazoo, $zk->connect, 'peer:pw-peer');
like($out, qr/^create-under-lock done$/m, 'the peer of the list creates and deletes under the parent');
like($out, qr/^delete-holder done$/m, '... and can delete the holder\'s node (a fleet member may)');
ok( poll_until(
		sub {
			($sa->query("SELECT state FROM zk_locks WHERE name = 'acl_x'"))[0] eq 'lost';
		}),
	'a sees its holding lost');
is(($sa->query("SELECT zk_lock_release('acl_x')"))[0], 'f', '... and its release returns false');

# ---------------------------------------------------------------------------
note 'without the list, b cannot delete under a parent a created';

$sb->quit;
$pb->append_conf('postgresql.conf', "zklock.acl_identities = ''\n");
$pb->restart;
ok(poll_status($pb, sub { $_[0]{state} eq 'connected' }), 'b restarts without the list');
$sb = ZkLockTest::Session->new($pb);
is($sa->query_ok("SELECT zk_lock_try('acl_y')"), 't', 'a creates acl_y (a\'s ACL names b)');
is($sa->query_ok("SELECT zk_lock_release('acl_y')"), 't', '... and releases it');
# b's own nodes grant only b, but a's parent lets b create and delete
is($sb->query_ok("SELECT zk_lock_try('acl_y')"), 't', 'b creates under a parent that names it');
is($sb->query_ok("SELECT zk_lock_release('acl_y')"), 't', '... and deletes there');
is($sb->query_ok("SELECT zk_lock_try('acl_z')"), 't', 'b creates acl_z with its own ACL only');
is($sb->query_ok("SELECT zk_lock_release('acl_z')"), 't', '... and releases it');
my ($o, $e) = $sa->query("SELECT zk_lock_try('acl_z')");
is(sqlstate($e), '42501', 'a cannot create under the parent b made without the list');

# ---------------------------------------------------------------------------
note 'the list without any identity: ZooKeeper refuses the ACL';

my $pc = ZkLockTest::pg_node('acl_c', $zk, 'zklock.acl_identities' => $fleet);
ok(poll_status($pc, sub { $_[0]{state} eq 'connected' }), 'c connects without credentials');
(undef, $o, $e) = $pc->psql('postgres', "SELECT zk_lock_try('acl_c_lock')");
like($e, qr/invalid acl/i, 'its request fails: invalid acl');
is(scalar(ZkLockTest::zk_children($zk, '/zklock/acl_c_lock')), 0, 'no node is left behind');

$_->quit foreach ($sa, $sb);
done_testing();

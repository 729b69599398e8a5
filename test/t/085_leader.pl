# 085_leader.pl
#    Instance leadership (zklock.leader_groups, zk_is_leader, zk_leaders,
#    zk_leader_info): two PostgreSQL instances sharing one ZooKeeper take
#    part in a Curator LeaderLatch election on /zklock/cron.  Exactly one
#    leads; leadership moves when the leader stops cleanly, when its worker
#    is killed (crash restart), when its worker is paused (session expiry,
#    and the paused one stops saying true before the other starts), when
#    another client deletes its node and when a reload removes the group; a
#    real Curator LeaderLatch on the same path sees the same single leader,
#    and when Curator leads no instance says true.  A group whose node
#    ZooKeeper refuses is retried; a hot standby takes part too.
#
#    "Stable" is established positively, never by sleeping: exactly one
#    instance says true, and every running instance's zk_leaders names the
#    lowest latch node ZooKeeper has.  "Does not lead" is an answer 'f'
#    from the instance (one that cannot answer is asked nothing: then the
#    live instance and ZooKeeper are).  "At once" is established by cause,
#    not by the clock: the old leader's session was closed, not left to
#    expire (ZooKeeper logs every expiry).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkInterop;
use ZkFault ();

my $UUID = qr/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;
my $LATCH = qr/^_c_$UUID-latch-(\d{10})$/;
my $GROUP = '/zklock/cron';

my $zk = ZkLockTest::zk_start();
my $pa = ZkLockTest::pg_node('lead_a', $zk,
	'zklock.leader_groups' => 'cron, Nightly/Report', cluster_name => 'lead_a',
	restart_after_crash => 'on', wal_level => 'replica', max_wal_senders => 4);
my $pb = ZkLockTest::pg_node('lead_b', $zk,
	'zklock.leader_groups' => 'cron, Nightly/Report', cluster_name => 'lead_b',
	restart_after_crash => 'on');
my %name_of = ($pa => 'lead_a', $pb => 'lead_b');
my %running = ($pa => 1, $pb => 1);

# The latch nodes of the group, lowest sequence first.
sub latch_nodes
{
	my @c = grep { /$LATCH/ } ZkLockTest::zk_children($zk, $GROUP);
	return sort { ($a =~ /(\d{10})$/)[0] <=> ($b =~ /(\d{10})$/)[0] } @c;
}

sub latch_count
{
	my @c = latch_nodes();
	return scalar @c;
}

sub node_data
{
	my ($path) = @_;
	return ZkLockTest::zk_python($zk,
		q{
try:
    print(zk.get(args[0])[0].decode(), end='')
except NoNodeError:
    pass
}, $path);
}

sub q1
{
	my ($node, $sql) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql);
	return $rc == 0 ? $out : undef;
}

# zk_is_leader of a node: 't' or 'f', undef when it could not be asked (down,
# restarting).
sub leads
{
	my ($node, $group) = @_;
	return q1($node, "SELECT zk_is_leader('" . ($group // 'cron') . "')");
}

sub is_leader { return (leads(@_) // '') eq 't'; }

# "f,f" when neither instance leads and both said so.
sub neither_leads
{
	return join(',', map { leads($_) // 'no answer' } ($pa, $pb));
}

# The ZooKeeper session of a node's worker once connected (0x...).
sub session_of
{
	my ($node) = @_;
	my $sid;
	poll_until(
		sub {
			$sid = q1($node,
				"SELECT session_id FROM zk_status() WHERE state = 'connected'");
			return defined $sid && $sid ne '';
		});
	return $sid // '';
}

# Whether ZooKeeper expired session $sid (0x..., as zk_status shows it):
# it logs "Expiring session 0x<hex>, timeout of ...ms exceeded".
sub zk_expired
{
	my ($sid) = @_;
	return slurp_file($zk->dir . '/node1/zk.log') =~
	  /Expiring session \Q$sid\E, timeout/ ? 1 : 0;
}

# zk_leaders of a node: { group_name => "leader_znode|is_us|leader_id" }
sub leaders_view
{
	my ($node) = @_;
	my %v;
	my $out = q1($node,
		"SELECT group_name, coalesce(leader_znode, ''), is_us, coalesce(leader_id, '') FROM zk_leaders"
	) // '';
	foreach (split /\n/, $out)
	{
		my ($g, $z, $us, $id) = split /\|/, $_, 4;
		$v{$g} = { znode => $z, is_us => $us, id => $id };
	}
	return \%v;
}

# Poll until exactly one running instance leads and every running one's
# zk_leaders names the lowest latch node; returns that instance (undef if
# it did not happen).
sub single_leader
{
	my (%opts) = @_;
	my $leader;
	poll_until(
		sub {
			my @l = grep { $running{$_} && is_leader($_) } ($pa, $pb);
			return 0 unless @l == 1;
			my @latch = latch_nodes();
			return 0 unless @latch;
			foreach my $n (grep { $running{$_} } ($pa, $pb))
			{
				my $v = leaders_view($n)->{cron} or return 0;
				return 0 unless $v->{znode} eq "$GROUP/$latch[0]";
				return 0 unless $v->{is_us} eq ($n eq $l[0] ? 't' : 'f');
			}
			$leader = $l[0];
			return 1;
		},
		timeout => $opts{timeout} // 60);
	return $leader;
}

sub other { return $_[0] eq $pa ? $pb : $pa; }

sub worker_pid
{
	my ($node) = @_;
	my $pid;
	poll_until(
		sub {
			$pid = q1($node,
				"SELECT worker_pid FROM zk_status() WHERE state = 'connected'");
			return defined $pid && $pid ne '';
		});
	return $pid;
}

sub set_groups
{
	my ($node, $groups) = @_;
	$node->append_conf('postgresql.conf', "zklock.leader_groups = '$groups'\n");
	$node->reload;
}

# ---------------------------------------------------------------------------
note 'two instances in group cron: exactly one leads';

my $l = single_leader();
ok($l, 'exactly one instance leads, and both agree on it');
my $f = other($l);
my @latch = latch_nodes();
is(scalar @latch, 2, 'two latch nodes, one per instance');
like($latch[0] // '', $LATCH, 'latch nodes have Curator\'s LeaderLatch form');
my $lv = leaders_view($l)->{cron};
my $data0 = node_data("$GROUP/$latch[0]");
is($lv->{id}, $data0, 'zk_leaders.leader_id is the leader node\'s data');
like($data0, qr/"instance":"\Q$name_of{$l}\E"/,
	'the lowest latch node is the leading instance\'s');
is(leaders_view($f)->{cron}{id}, $data0, 'the follower names the same leader');
ok( poll_until(
		sub { $l->log_contains(qr/zklock: this instance now leads group "cron"/) }),
	'the leader logged that it leads');
is(q1($l, "SELECT since IS NOT NULL AND since <= now() FROM zk_leaders WHERE group_name = 'cron'"),
	't', 'zk_leaders.since is set');

# zk_leader_info on both, for a group each takes part in
is(q1($f, "SELECT leader_znode, is_us FROM zk_leader_info('cron')"),
	"$GROUP/$latch[0]|f", 'zk_leader_info on the follower');
is(q1($l, "SELECT leader_znode, is_us FROM zk_leader_info('cron')"),
	"$GROUP/$latch[0]|t", 'zk_leader_info on the leader');

# ---------------------------------------------------------------------------
note 'groups the instance does not take part in, bad input';

foreach my $n ($pa, $pb)
{
	my ($rc, $out, $err) = $n->psql('postgres', "SELECT zk_is_leader('nosuch')");
	is("$rc|$out|$err", '0|f|', "$name_of{$n}: zk_is_leader of another group is false, no message");
}
is(q1($pa, 'SELECT zk_is_leader(NULL) IS NULL'), 't', 'zk_is_leader(NULL) is NULL');
{
	my ($rc, $out, $err) = $pa->psql('postgres', "SELECT zk_is_leader('a//b')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	is(sqlstate($err), '22023', 'an invalid group name is an error (22023)');
}
is(q1($pa, "SELECT group_name, leader_id IS NULL, leader_znode IS NULL, since IS NULL, is_us FROM zk_leader_info('nosuch')"),
	'nosuch|t|t|t|f', 'zk_leader_info of a group without participants');
# a participant whose data is not valid UTF-8 (any client may write anything)
ZkLockTest::zk_python(
	$zk, q{
zk.create('/zklock/binary/_c_00000000-0000-4000-8000-000000000000-latch-',
          b'id-\xff\xfe', sequence=True, makepath=True)
});
is(q1($pa, "SELECT leader_id, leader_znode LIKE '/zklock/binary/_c_%-latch-0000000000' FROM zk_leader_info('binary')"),
	'id-|t', 'a leader id is shown up to where it stops being UTF-8');
ZkLockTest::zk_python($zk, q{
for c in zk.get_children('/zklock/binary'):
    zk.delete('/zklock/binary/' + c)
zk.delete('/zklock/binary')
});
is(q1($pa, "SELECT string_agg(group_name, ',' ORDER BY group_name) FROM zk_leaders"),
	'Nightly/Report,cron', 'zk_leaders: one row per group, names as written in the setting');
ok( poll_until(
		sub {
			1 == grep { is_leader($_, 'Nightly/Report') } ($pa, $pb);
		}),
	'exactly one instance leads group Nightly/Report');
is(q1($pa, "SELECT zk_is_leader('nightly/report')"), 'f', 'group names are case-sensitive');

# ---------------------------------------------------------------------------
note 'the leader stops cleanly: leadership moves at once';

my $sid = session_of($l);
my $t0 = time;
$l->stop('fast');
$running{$l} = 0;
ok(poll_until(sub { is_leader($f) }, timeout => 30), 'the other instance leads');
my $moved = time - $t0;
ok(!zk_expired($sid),
	'at once: the stopped leader closed its session, which was not left to expire');
note sprintf('leadership moved %.2f s after the clean stop began', $moved);
ok( $l->log_contains(
		qr/zklock: this instance no longer leads group "cron"\n[^\n]*DETAIL:  The zklock worker is exiting/
	),
	'the stopped leader logged that it no longer leads');
ok(poll_until(sub { $f->log_contains(qr/zklock: this instance now leads group "cron"/) }),
	'the new leader logged it');

$l->start;
$running{$l} = 1;
my $l2 = single_leader();
is($l2 // '', $f, 'the restarted instance joins as a follower: leadership stays');
is(latch_count(), 2, 'two latch nodes again');
($l, $f) = ($f, $l);

# ---------------------------------------------------------------------------
note 'the leader\'s worker is killed (SIGKILL, crash restart)';

my $wpid = worker_pid($l);
$sid = session_of($l);
$t0 = time;
kill 'KILL', $wpid;
ok(poll_until(sub { is_leader($f) }, timeout => 30),
	'the other instance leads after the crash');
$moved = time - $t0;
ok( poll_until(
		sub {
			$l->log_contains(
				qr/zklock is ending ZooKeeper session \Q$sid\E left by its previous run/);
		},
		timeout => 30),
	'the restarted worker ended the session its predecessor left');
ok(!zk_expired($sid),
	'so the crashed worker\'s session was not left to expire');
note sprintf('leadership moved %.2f s after SIGKILL of the worker', $moved);
# the crashed instance may not answer yet: ask the live one and ZooKeeper
my @after = latch_nodes();
like(node_data("$GROUP/$after[0]"), qr/"instance":"\Q$name_of{$f}\E"/,
	'the lowest latch node is the surviving instance\'s');
is(q1($f, "SELECT leader_znode, is_us FROM zk_leaders WHERE group_name = 'cron'"),
	"$GROUP/$after[0]|t", 'and the surviving instance\'s zk_leaders says it leads');
$l2 = single_leader();
is($l2 // '', $f, 'the restarted instance follows');
($l, $f) = ($f, $l);

# ---------------------------------------------------------------------------
note 'the leader\'s worker is paused (SIGSTOP): its session expires';

$wpid = worker_pid($l);
$sid = session_of($l);
my $both = 0;
$t0 = time;
ZkFault::stop_worker($l, $wpid);
my ($t_false, $t_moved);
ok( poll_until(
		sub {
			my $ll = leads($l) // 'no answer';
			my $ff = is_leader($f);
			$both ||= $ll eq 't' && $ff;
			$t_false //= time - $t0 if $ll eq 'f';
			return $ff;
		},
		timeout => 30,
		interval => 0.05),
	'the other instance leads once the paused one\'s session expired');
$t_moved = time - $t0;
ok(!$both, 'never did both say they lead');
ok(defined $t_false && $t_false < $t_moved,
	'the paused instance stopped saying it leads before the other started');
note sprintf('paused leader false after %.2f s, other leads after %.2f s',
	$t_false // -1, $t_moved);
ok(zk_expired($sid), 'ZooKeeper expired the paused worker\'s session');
kill 'CONT', $wpid;
ok( poll_until(
		sub { $l->log_contains(qr/zklock: this instance no longer leads group "cron"/) }),
	'the resumed worker logged that it no longer leads');
$l2 = single_leader();
is($l2 // '', $f, 'after resuming, the paused instance follows');
($l, $f) = ($f, $l);

# ---------------------------------------------------------------------------
note 'another client deletes the leader\'s node';

my ($lowest) = latch_nodes();
ZkLockTest::zk_python($zk, 'zk.delete(args[0])', "$GROUP/$lowest");
ok(poll_until(sub { is_leader($f) }, timeout => 30), 'the next instance leads');
ok(poll_until(sub { (leads($l) // '') eq 'f' }, timeout => 30),
	'the instance whose node was deleted no longer says it leads');
ok( poll_until(
		sub {
			$l->log_contains(
				qr/no longer leads group "cron"\n[^\n]*DETAIL:  Its latch node changed or was deleted/
			);
		}),
	'and logs why');
$l2 = single_leader();
is($l2 // '', $f, 'it takes part again, as a follower');
is(latch_count(), 2, 'with a new node');
($l, $f) = ($f, $l);

# ---------------------------------------------------------------------------
note 'a reload removes the group from the leader';

my $lnode = leaders_view($l)->{cron}{znode};
set_groups($l, '');
ok(poll_until(sub { is_leader($f) }, timeout => 30),
	'the other instance leads once the group is left');
is(leads($l), 'f', 'the instance that left does not lead');
ok(poll_until(sub { latch_count() == 1 }), 'its latch node is deleted');
ok(poll_until(sub { !grep { "$GROUP/$_" eq $lnode } latch_nodes() }),
	'the node that is gone is the one that led');
is(q1($l, 'SELECT count(*) FROM zk_leaders'), '0', 'zk_leaders is empty');
my $fnode = "$GROUP/" . (latch_nodes())[0];
is(q1($l, "SELECT leader_znode, is_us, since IS NULL FROM zk_leader_info('cron')"),
	"$fnode|f|t", 'zk_leader_info looks into ZooKeeper for a group not taken part in');
like(q1($l, "SELECT leader_id FROM zk_leader_info('cron')"),
	qr/"instance":"\Q$name_of{$f}\E"/, 'and names the leading instance');
ok(poll_until(sub { $l->log_contains(qr/zklock: this instance no longer leads group "cron"/) }),
	'leaving is logged');
set_groups($l, 'cron');
ok(poll_until(sub { latch_count() == 2 }), 'a reload adding the group joins again');
$l2 = single_leader();
is($l2 // '', $f, 'as a follower');
($l, $f) = ($f, $l);

# ---------------------------------------------------------------------------
note 'Curator LeaderLatch on the same path';

my $curator = ZkInterop::curator($zk);
is($curator->ask(c1 => "latch-start $GROUP curator-1"), 'ok', 'Curator joins');
ok(poll_until(sub { latch_count() == 3 }), 'three latch nodes');
my $leader_data = node_data("$GROUP/" . (latch_nodes())[0]);
is($curator->ask(c1 => 'latch-leader'), "ok false $leader_data",
	'Curator does not lead, and its getLeader() id is the leading instance\'s node data');
is(leaders_view($l)->{cron}{id}, $leader_data, 'the instance shows the same id');
is(single_leader() // '', $l, 'still exactly one instance leads');

# both instances leave: Curator leads; both join again: Curator keeps leading
set_groups($_, '') foreach ($pa, $pb);
is($curator->ask(c1 => 'latch-await 30000'), 'ok', 'Curator leads once both left');
set_groups($_, 'cron') foreach ($pa, $pb);
ok(poll_until(sub { latch_count() == 3 }), 'both instances joined again');
ok( poll_until(
		sub {
			(leaders_view($pa)->{cron}{id} // '') eq 'curator-1'
			  && (leaders_view($pb)->{cron}{id} // '') eq 'curator-1';
		},
		timeout => 30),
	'both instances see Curator as the leader');
is(neither_leads(), 'f,f', 'no instance says it leads');
is(q1($pa, "SELECT is_us FROM zk_leaders"), 'f', 'zk_leaders: not us');
is($curator->ask(c1 => 'latch-leader'), 'ok true curator-1', 'Curator leads');

is($curator->ask(c1 => 'latch-close'), 'ok', 'Curator leaves');
$l = single_leader();
ok($l, 'one instance leads after Curator left');
is(latch_count(), 2, 'two latch nodes left');
$curator->quit;

# ---------------------------------------------------------------------------
note 'a group whose node ZooKeeper refuses: retried, never led, then joined';

ZkLockTest::zk_python(
	$zk, q{
from kazoo.security import make_digest_acl, make_acl
zk.add_auth('digest', 'other:secret')
zk.create('/zklock/refused',
          acl=[make_digest_acl('other', 'secret', all=True),
               make_acl('world', 'anyone', read=True)])
});
set_groups($pa, 'cron, refused');
ok( poll_until(
		sub {
			$pa->log_contains(
				qr/could not take part in the election of leader group "refused"/);
		}),
	'the refused create is reported');
ok( poll_until(
		sub {
			my @w = slurp_file($pa->logfile) =~
			  /could not take part in the election of leader group "refused"/g;
			return @w >= 2;
		},
		timeout => 30),
	'and tried again');
is(q1($pa, "SELECT zk_is_leader('refused')"), 'f', 'the instance does not lead it');
is(q1($pa, "SELECT leader_id IS NULL FROM zk_leaders WHERE group_name = 'refused'"),
	't', 'zk_leaders: no leader');
ok(single_leader(), 'group cron is unaffected');
ZkLockTest::zk_python(
	$zk, q{
zk.add_auth('digest', 'other:secret')
zk.delete('/zklock/refused')
});
ok(poll_until(sub { is_leader($pa, 'refused') }, timeout => 90),
	'once the refusing node is gone, the instance joins and leads');

# ---------------------------------------------------------------------------
note 'a hot standby takes part too';

$pa->backup('for_standby');
my $st = PostgreSQL::Test::Cluster->new('lead_standby');
$st->init_from_backup($pa, 'for_standby', has_streaming => 1);
$st->append_conf('postgresql.conf',
	"cluster_name = 'lead_standby'\nzklock.leader_groups = 'cron'\n");
$st->start;
is($st->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'it is a standby');
ok(poll_until(sub { latch_count() == 3 }), 'the standby has its latch node');
ok(poll_until(sub { (leaders_view($st)->{cron}{znode} // '') eq "$GROUP/" . (latch_nodes())[0] }),
	'and sees the leader');
is(q1($st, "SELECT zk_is_leader('cron')"), 'f', 'it follows');
ok(single_leader(), 'the primaries still have exactly one leader');
set_groups($_, '') foreach ($pa, $pb);
ok(poll_until(sub { is_leader($st) }, timeout => 30),
	'once the primaries leave, the standby leads');
is(neither_leads(), 'f,f', 'alone');
$st->stop('fast');

done_testing();

# 065_safety.pl
#    Invariants of "never two holders" and "every request ends"
#    across two instances sharing one ZooKeeper:
#    - a holding made in a session the worker no longer has (the worker was
#      terminated and restarted) is lost: no re-entrant grant, held or token
#      answer vouches for it, while another instance holds the lock;
#    - every mix of lock kinds on one name conflicts (a semaphore of 2
#      takes no third lease), or fails while the name is in use as a
#      semaphore, cluster-wide;
#    - a write holder gets the read lock at once, even with a writer queued
#      behind it, and the queued writer gets the lock after both are let go;
#    - repeated zk_lock_try on a held lock leaves no watch behind;
#    - a request ZooKeeper refuses fails with the refusal, never as a
#      timeout;
#    - a multi-lock whose first part was lost (session expiry) while it
#      waited for the second fails, and leaves nothing;
#    - a semaphore lease asked again after a session loss goes through the
#      entry mutex again (no over-subscription, no hang);
#    - a node of the worker's own session that no request claims (a create
#      that landed unseen) is deleted by the reconciler;
#    - a release is visible at once to the next request of the instance.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(poll_until sqlstate);
use ZkFault qw(poll_status zk_watch_count signal_process wait_waiting);

my $zk = ZkLockTest::zk_start();
my $na = ZkLockTest::pg_node('safe_a', $zk);
my $nb = ZkLockTest::pg_node('safe_b', $zk);

sub session { return ZkLockTest::Session->new(@_); }

sub children
{
	return ZkLockTest::zk_children($zk, "/zklock/$_[0]");
}

sub worker_pid
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(worker_pid::text, '') FROM zk_status()");
}

foreach my $nd ($na, $nb)
{
	poll_status($nd, sub { $_[0]{state} eq 'connected' });
}

# ===========================================================================
note 'a holding of a session the worker no longer has is lost';
# ===========================================================================
{
	my $a = session($na);
	is($a->query_ok("SELECT zk_lock_acquire('r')"), 't', 'A holds r');

	my $old = worker_pid($na);
	signal_process($old, 'TERM');
	ok( poll_until(
			sub {
				my $pid = worker_pid($na);
				return $pid ne '' && $pid ne $old;
			}),
		'the postmaster restarts the worker');

	my $b = session($nb);
	is($b->query_ok("SELECT zk_lock_acquire('r', 30000)"),
		't', 'B gets r once the first worker\'s session is gone');

	my ($out, $err) = $a->query("SELECT zk_lock_acquire('r', 1000)");
	isnt($out, 't',
		'A\'s re-entrant acquire of r does not return true while B holds r');
	like($err, qr/was lost/, 'A is told its holding of r was lost');
	is($a->query_ok("SELECT zk_lock_held('r')"), 'f', 'zk_lock_held(r) is false on A');
	is($a->query_ok("SELECT zk_lock_token('r') IS NULL"), 't',
		'zk_lock_token(r) is NULL on A');
	is($b->query_ok("SELECT zk_lock_release('r')"), 't', 'B releases r');
	is($a->query_ok("SELECT zk_lock_acquire('r', 10000)"), 't',
		'A can take r afresh');
	is($a->query_ok("SELECT zk_lock_release('r')"), 't', 'A releases r');
	my ($rel) = $a->query("SELECT zk_lock_release('r')");
	is($rel, 'f', 'A held r once only: the lost holding was dropped');
}

# ===========================================================================
note 'every mix of kinds on one name, across instances';
# ===========================================================================
{
	my %take = (
		lock      => "zk_lock_acquire('%s', %d)",
		read      => "zk_rwlock_read('%s', %d)",
		write     => "zk_rwlock_write('%s', %d)",
		semaphore => "zk_semaphore_acquire('%s', 2, %d)",);
	my %give = (
		lock      => "zk_lock_release('%s')",
		read      => "zk_rwlock_read_release('%s')",
		write     => "zk_rwlock_write_release('%s')",
		semaphore => "zk_semaphore_release('%s')",);
	my $i = 0;
	foreach my $first (sort keys %take)
	{
		foreach my $second (sort keys %take)
		{
			my $name = 'kinds' . $i++;
			my $compatible =
			  ($first eq 'read' && $second eq 'read')
			  || ($first eq 'semaphore' && $second eq 'semaphore');
			my $a = session($na);
			my $b = session($nb);
			is($a->query_ok("SELECT " . sprintf($take{$first}, $name, 10000)),
				't', "$first on A");
			my ($out, $err) =
			  $b->query("SELECT " . sprintf($take{$second}, $name, 300));
			if ($compatible)
			{
				is($out, 't', "$second on B shares $name with $first on A");
				if ($first eq 'semaphore')
				{
					# both leases of 2 are taken: a third one waits
					my $c = session($na);
					is($c->query_ok("SELECT " . sprintf($take{semaphore}, $name, 300)),
						'f', 'a third lease of 2 waits for one of them and times out');
					$c->quit;
				}
			}
			elsif (($first eq 'semaphore') != ($second eq 'semaphore'))
			{
				isnt($out, 't', "$second on B is not granted beside $first on A");
				is(sqlstate($err), '55000',
					"$second on B: the name is in use as another kind (55000)");
			}
			else
			{
				is($out, 'f', "$second on B waits for $first on A and times out");
			}
			$b->query("SELECT " . sprintf($give{$second}, $name)) if ($out // '') eq 't';
			is($a->query_ok("SELECT " . sprintf($give{$first}, $name)),
				't', "$first released on A");
			ok( poll_until(
					sub { scalar(grep { /^_c_/ } children($name)) == 0 }),
				"nothing of $first/$second left under $name");
			$a->quit;
			$b->quit;
		}
	}
}

# ===========================================================================
note 'a write holder gets the read lock at once, a writer queued behind';
# ===========================================================================
{
	my $a = session($na);
	my $b = session($na);
	my $c = session($nb);
	is($a->query_ok("SELECT zk_rwlock_write('d')"), 't', 'A holds write d');
	# queued in this order: B (behind A's node, in A's instance: local
	# hand-off) before C (a node of its own, after A's)
	$b->send("SELECT zk_rwlock_write('d')");
	ZkLockTest::wait_for_extension_wait($na, $b);
	$c->send("SELECT zk_rwlock_write('d')");
	wait_waiting($nb, $c, $zk, '/zklock/d', 2);
	is($a->query_ok("SELECT zk_rwlock_read('d', 2000)"),
		't', 'A gets read d at once while writers wait');
	is($a->query_ok("SELECT zk_lock_acquire('d', 2000)"),
		't', 'A\'s write lock covers the exclusive lock of d too');
	is($a->query_ok("SELECT zk_rwlock_write_release('d')"), 't', 'A lets go of write');
	ok(!$b->done && !$c->done, 'the writers still wait: A holds read and lock');
	is($a->query_ok("SELECT zk_lock_release('d')"), 't', 'A lets go of lock');
	is($a->query_ok("SELECT zk_rwlock_read_release('d')"), 't', 'A lets go of read');
	is($b->result, 't', 'the first queued writer gets d');
	ok(!$c->done, 'the second still waits');
	is($b->query_ok("SELECT zk_rwlock_write_release('d')"), 't', 'B lets go');
	is($c->result, 't', 'the second queued writer gets d');
	is($c->query_ok("SELECT zk_rwlock_write_release('d')"), 't', 'C lets go');

	is($a->query_ok("SELECT zk_rwlock_read('u')"), 't', 'A holds read u');
	my ($out, $err) = $a->query("SELECT zk_lock_acquire('u', 0)");
	is(sqlstate($err), '55000', 'an exclusive lock over one\'s own read lock is refused');
	is($a->query_ok("SELECT zk_rwlock_read_release('u')"), 't', 'A lets go of u');
}

# ===========================================================================
note 'tries and short waits on a held lock leave no watch behind';
# ===========================================================================
{
	my $a = session($na);
	is($a->query_ok("SELECT zk_lock_acquire('w')"), 't', 'A holds w');
	# A's data watch on its own node comes once it has held for 100 ms
	my $own = $a->query_ok("SELECT znode FROM zk_locks WHERE name = 'w'");
	ok(poll_until(sub { grep { $_->[0] eq $own } ZkFault::zk_watchers($zk, 1) }),
		'A watches its own node');
	my $before = zk_watch_count($zk, 1);
	is( $nb->safe_psql(
			'postgres',
			"SELECT count(*) FILTER (WHERE zk_lock_try('w')) FROM generate_series(1, 200)"
		),
		'0',
		'200 tries on B all fail');
	# a timeout that ends the wait while the watch is being set
	is( $nb->safe_psql(
			'postgres',
			"SELECT count(*) FILTER (WHERE zk_lock_acquire('w', 1 + g % 4)) FROM generate_series(1, 200) g"
		),
		'0',
		'200 acquires with timeouts of 1 to 4 ms on B all time out');
	my $after;
	ok( poll_until(sub { ($after = zk_watch_count($zk, 1)) <= $before }),
		'every watch the tries set is removed from the server again');
	note "watches on the server: $before before, $after after";
	is($a->query_ok("SELECT zk_lock_release('w')"), 't', 'A releases w');
}

# ===========================================================================
note 'a request ZooKeeper refuses fails with the refusal, also with a timeout';
# ===========================================================================
{
	# a parent only readable: every create under it is refused (NOAUTH)
	ZkLockTest::zk_python($zk, q{
		from kazoo.security import make_acl
		zk.ensure_path('/zklock')
		zk.create('/zklock/ro', acl=[make_acl('world', 'anyone', read=True)])
	});
	my $a = session($na);
	foreach my $call ("zk_lock_try('ro')", "zk_lock_acquire('ro', 2000)",
		"zk_rwlock_read('ro', 2000)", "zk_semaphore_acquire('ro', 2, 2000)")
	{
		my ($out, $err) = $a->query("SELECT $call");
		isnt($out, 'f', "$call is not reported as a timeout");
		is(sqlstate($err), '42501', "$call fails with 42501");
		like($err, qr/refused/, "$call: the error says ZooKeeper refused");
		note $err;
	}
	is($a->query_ok("SELECT count(*) FROM zk_locks WHERE pid = pg_backend_pid()"),
		'0', 'nothing is left of the refused requests');
	is($a->query_ok("SELECT zk_lock_acquire('ok-after-ro', 2000)"), 't',
		'the session goes on with other names');
	is($a->query_ok("SELECT zk_lock_release('ok-after-ro')"), 't', 'and lets go');
}

# The state of a worker's session, and the worker paused past its timeout.
sub session_losses
{
	return ZkFault::zk_status_of($_[0])->{session_losses};
}

sub expire_session
{
	my ($node, $until) = @_;
	my $losses = session_losses($node);
	my $pid = worker_pid($node);
	ZkFault::stop_worker($node, $pid);
	my $ok = $until->();
	signal_process($pid, 'CONT');
	ok( poll_status(
			$node,
			sub {
				$_[0]{state} eq 'connected' && $_[0]{session_losses} > $losses;
			}),
		'the paused worker finds its session expired and connects anew');
	return $ok;
}

# ===========================================================================
note 'a multi-lock part lost while waiting for another fails the call';
# ===========================================================================
{
	my $a = session($na);
	my $b = session($nb);
	my $c = session($nb);
	is($b->query_ok("SELECT zk_lock_acquire('a6/y')"), 't', 'B holds a6/y');
	$a->send("SELECT zk_lock_acquire_all(ARRAY['a6/x', 'a6/y'], 60000)");
	wait_waiting($na, $a, $zk, '/zklock/a6/y', 2);
	is(scalar(children('a6/x')), 1, 'A holds a6/x and waits for a6/y');
	$c->send("SELECT zk_lock_acquire('a6/x', 60000)");
	wait_waiting($nb, $c, $zk, '/zklock/a6/x', 2);

	ok( expire_session(
			$na,
			sub {
				my ($out) = $c->result(timeout => 60);
				return ($out // '') eq 't';
			}),
		'C gets a6/x once A\'s session expired');
	is($b->query_ok("SELECT zk_lock_release('a6/y')"), 't', 'B lets go of a6/y');
	my ($out, $err) = $a->result(timeout => 60);
	isnt($out, 't', 'A\'s zk_lock_acquire_all does not return true: a6/x was lost');
	is(sqlstate($err), '40001', 'it fails with 40001');
	is($a->query_ok("SELECT zk_lock_held('a6/x') OR zk_lock_held('a6/y')"),
		'f', 'A holds neither part');
	ok(poll_until(sub { scalar(children('a6/y')) == 0 }),
		'nothing of A is left under a6/y');
	is($c->query_ok("SELECT zk_lock_held('a6/x')"), 't', 'C still holds a6/x');
	is($c->query_ok("SELECT zk_lock_release('a6/x')"), 't', 'C lets go');
	$_->quit foreach ($a, $b, $c);
}

# ===========================================================================
note 'a lease asked again after a session loss takes the entry mutex again';
# ===========================================================================
{
	my $h = session($nb);
	my $a = session($na);
	my $d = session($nb);
	is($h->query_ok("SELECT zk_semaphore_acquire('a7', 1)"), 't', 'H holds the only lease of a7');
	$a->send("SELECT zk_semaphore_acquire('a7', 1, 60000)");
	wait_waiting($na, $a, $zk, '/zklock/a7/leases', 2);
	my @before = children('a7/leases');
	$d->send("SELECT zk_semaphore_acquire('a7', 1, 60000)");
	wait_waiting($nb, $d, $zk, '/zklock/a7/locks', 2);

	# A's mutex and lease go with its session; D takes the mutex and its lease
	ok( expire_session(
			$na,
			sub {
				return poll_until(
					sub {
						my %was = map { $_ => 1 } @before;
						my @now = children('a7/leases');
						return @now == 2 && (grep { !$was{$_} } @now) == 1;
					});
			}),
		'D holds the entry mutex and waits with its lease in place of A\'s');
	# A asks again: it queues for the mutex and adds no lease meanwhile
	ok( poll_until(
			sub {
				scalar(children('a7/locks')) == 2
				  || scalar(children('a7/leases')) > 2;
			}),
		'A asks again');
	is(scalar(children('a7/leases')), 2,
		'A has no lease node while D holds the entry mutex');
	is($h->query_ok("SELECT zk_semaphore_release('a7')"), 't', 'H lets go');
	my ($out, $err) = $d->result(timeout => 30);
	is($out, 't', 'D, the holder of the entry mutex, gets the lease');
	ok(!$a->done, 'A still waits');
	is($d->query_ok("SELECT zk_semaphore_release('a7')"), 't', 'D lets go');
	($out, $err) = $a->result(timeout => 30);
	is($out, 't', 'A gets the lease after D');
	is($a->query_ok("SELECT zk_semaphore_release('a7')"), 't', 'A lets go');
	ok( poll_until(
			sub {
				!grep { /^_c_/ } (children('a7/leases'), children('a7/locks'));
			}),
		'nothing is left under a7');
	$_->quit foreach ($h, $a, $d);
}

# ===========================================================================
note 'a node of the worker\'s session that no request claims is deleted';
# ===========================================================================
{
	my $a = session($na);
	my $c = session($nb);
	is($a->query_ok("SELECT zk_lock_acquire('b9')"), 't', 'A holds b9');
	my $st = ZkFault::zk_status_of($na);

	# A create of ours that landed unseen: while the worker is paused,
	# another client resumes its session (from the file the worker keeps it
	# in) and creates a node with zklock's protected prefix for that
	# session; it leaves without closing the session, and the worker goes
	# on with it.
	open my $fh, '<', $na->data_dir . '/zklock.session' or die "zklock.session: $!";
	my (undef, $sid, $pw) = map { chomp; $_ } <$fh>;
	close $fh;
	my $log_offset = -s $na->logfile;
	my $wpid = worker_pid($na);
	ZkFault::stop_worker($na, $wpid);
	my $made = eval { ZkLockTest::zk_python($zk, q{
		import os, sys
		sid = int(args[0], 16)
		pw = bytes.fromhex(args[1])
		h = '%016x' % sid
		# zklock's UUID: the session's hex digits after the version digit,
		# after the variant digit, and at the end (nodename.c)
		u = '0123abcd-4567-4%s89-8%s-%s' % (h[0], h[1:4], h[4:])
		imp = KazooClient(hosts=args[2], client_id=(sid, pw), timeout=10.0)
		imp.start(timeout=30)
		p = imp.retry(imp.create, '/zklock/b9/_c_%s-lock-' % u,
					  ephemeral=True, sequence=True)
		print(p)
		sys.stdout.flush()
		os._exit(0)   # leave the session to its owner: no close
	}, $sid, $pw, $zk->connect) } // '';
	note $@ if $@;
	signal_process($wpid, 'CONT');
	chomp $made;
	note "made $made";
	like($made, qr{^/zklock/b9/_c_[0-9a-f-]{37}lock-\d{10}$}, 'a node of our session was made');

	is($a->query_ok("SELECT zk_lock_release('b9')"), 't', 'A lets go of b9');
	my ($out, $err) = $c->query("SELECT zk_lock_acquire('b9', 30000)");
	is($out, 't', 'C gets b9: the node nobody claims does not block it for long');
	ok($na->wait_for_log(qr/deleting orphaned node "\Q$made\E"/, $log_offset),
		'the worker says it deleted the unclaimed node');
	my $st2 = ZkFault::zk_status_of($na);
	is($st2->{session_id}, $st->{session_id}, 'the worker kept its session');
	is($st2->{session_losses}, $st->{session_losses}, 'no session loss counted');
	is($c->query_ok("SELECT zk_lock_release('b9')"), 't', 'C lets go');
	$_->quit foreach ($a, $c);
}

# ===========================================================================
note 'a release is visible at once within the instance';
# ===========================================================================
{
	my $a = session($na);
	my $b = session($na);
	my $fails = 0;
	for my $round (1 .. 40)
	{
		$b->query_ok("SELECT zk_lock_acquire('m/b')");
		my $got = $a->query_ok("SELECT zk_lock_acquire_all(ARRAY['m/a','m/b'], 50)");
		$fails++ if $got ne 'f';
		my $try = $b->query_ok("SELECT zk_lock_try('m/a')");
		$fails++ if $try ne 't';
		$b->query_ok("SELECT zk_lock_release('m/a')") if $try eq 't';
		$b->query_ok("SELECT zk_lock_release('m/b')");
	}
	is($fails, 0, 'after a failed multi-lock the other session gets m/a at once, 40 times');
}

done_testing();

# 120_doc_sql.pl
#    Every fenced ```sql block of README.md, CONTRIBUTING.md and docs/*.md
#    runs, in the order of its file, against an instance preloading pg_cron
#    and zklock with a real ZooKeeper, and does not fail (or fails with the
#    SQLSTATE it is marked to).  Each file gets a database of its own
#    (README.md: postgres, which cron.database_name names, as the README's
#    pg_cron set-up says); zklock is created in it first unless one of the
#    file's blocks does so.  HTML comments before a block steer it (see
#    CONTRIBUTING.md, "Tested documentation"):
#      <!-- docs-test: session NAME -->    run it in session NAME (default 1)
#      <!-- docs-test: expect A / B -->    its output, rows separated by " / "
#      <!-- docs-test: error SQLSTATE -->  it must fail with that SQLSTATE
#      <!-- docs-test: setup SQL -->       run SQL first, in the same session
#      <!-- docs-test: concurrent N -->    run it in N new sessions at once
#    Then the README's privileges block (zk_grant_usage), run in a database
#    of its own, must give the application role or pg_monitor every
#    function of the extension but the superuser's (zk_stats_reset(),
#    zk_job_claim_settle(), zk_grant_usage()).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;
use ZkLockTest::Session qw(sqlstate);

my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
plan skip_all => 'pg_cron is not installed (Debian package postgresql-15-cron)'
  unless -f "$sharedir/extension/pg_cron.control";

my $SRC = $ZkLockTest::SRC_DIR;
my @files = ('README.md', 'CONTRIBUTING.md',
	map { s{^\Q$SRC\E/}{}r } sort glob "$SRC/docs/*.md");

# The fenced sql blocks of a file: [line, sql, {directives}] each; the
# directives before a block are its own.
sub sql_blocks
{
	my ($file) = @_;
	my @blocks;
	my (%dir, $in, $indent, $sql, $start);
	my $n = 0;
	foreach my $line (split /\n/, slurp_file("$SRC/$file"))
	{
		$n++;
		if (defined $in)
		{
			if ($line =~ /^\s*```\s*$/)
			{
				push @blocks, [ $start, $sql, {%dir} ] if $in eq 'sql';
				%dir = ();
				undef $in;
			}
			else
			{
				$sql .= ($line =~ s/^ {0,$indent}//r) . "\n";
			}
		}
		elsif ($line =~ /^(\s*)```(\w*)/)
		{
			($indent, $in, $sql, $start) = (length $1, $2, '', $n);
		}
		elsif (my ($what, $arg) = $line =~ /<!-- docs-test: (\w+)\s*(.*?)\s*-->/)
		{
			die "$file:$n: unknown docs-test directive \"$what\""
			  unless $what =~ /^(?:session|expect|error|setup|concurrent)$/;
			$dir{$what} = $arg;
		}
	}
	die "$file: unterminated code block" if defined $in;
	return @blocks;
}

my $zk = ZkLockTest::zk_start();
my $node = PostgreSQL::Test::Cluster->new('docs');
$node->init;
ZkLockTest::use_private_install($node);
$node->append_conf('postgresql.conf', <<"EOF");
shared_preload_libraries = 'pg_cron,zklock'
cron.database_name = 'postgres'
cron.use_background_workers = on
max_worker_processes = 20
zklock.hosts = '${\ $zk->connect }'
zklock.session_timeout = 4000
EOF
$node->start;

# The result of what $s was sent, within a minute; a block still running
# then (waiting for a lock nobody releases) has its backend terminated, so
# that its psql ends, and fails as timed out.
sub block_result
{
	my ($s) = @_;
	my ($out, $err) = $s->result(timeout => 60);
	return ($out, $err) if defined $out;
	$node->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $s->pid . ')');
	$s->result(timeout => 30);
	return (undef, 'timed out after 60 s');
}

foreach my $file (@files)
{
	my @blocks = sql_blocks($file);
	next unless @blocks;
	my $db = $file eq 'README.md' ? 'postgres' : 'doc_' . lc($file =~ s{.*/|\.md$}{}gr);
	$node->safe_psql('postgres', "CREATE DATABASE $db") if $db ne 'postgres';
	$node->safe_psql($db, 'CREATE EXTENSION zklock')
	  unless grep { $_->[1] =~ /CREATE EXTENSION (IF NOT EXISTS )?zklock/i } @blocks;
	note "$file: " . scalar(@blocks) . " sql blocks, in database $db";

	my %sessions;
	foreach my $b (@blocks)
	{
		my ($line, $sql, $d) = @$b;
		my $where = "$file:$line";
		my @runs;
		if (my $n = $d->{concurrent})
		{
			my @s = map { ZkLockTest::Session->new($node, dbname => $db) } 1 .. $n;
			$_->send($sql) foreach @s;
			@runs = map { [ block_result($_) ] } @s;
			$_->quit foreach @s;
		}
		else
		{
			my $name = $d->{session} // '1';
			my $s = $sessions{$name} //=
			  ZkLockTest::Session->new($node, dbname => $db);
			if (defined $d->{setup})
			{
				$s->send($d->{setup});
				my ($out, $err) = block_result($s);
				unlike($err, qr/ERROR:|timed out/, "$where: its setup runs")
				  or diag $err;
			}
			$s->send($sql);
			@runs = ([ block_result($s) ]);
			delete $sessions{$name} unless $s->alive;
		}
		foreach my $r (@runs)
		{
			my ($out, $err) = @$r;
			if (defined $d->{error})
			{
				is(sqlstate($err), $d->{error}, "$where fails with $d->{error}");
				next;
			}
			unlike($err, qr/(?:ERROR|FATAL):|timed out|connection to server/,
				"$where runs") or diag "block:\n$sql\nerror:\n$err";
			is($out, join("\n", split m{ / }, $d->{expect}),
				"$where returns $d->{expect}")
			  if defined $d->{expect};
		}
	}
	$_->quit foreach values %sessions;
}

# ---------------------------------------------------------------------------
note 'the README\'s privileges block covers every function';

my ($grant) = grep { $_->[1] =~ /zk_grant_usage\(/ } sql_blocks('README.md');
ok($grant, 'the README has a privileges block calling zk_grant_usage')
  or BAIL_OUT('no privileges block');
$node->safe_psql('postgres', 'CREATE DATABASE doc_grants');
$node->safe_psql('doc_grants', 'CREATE EXTENSION zklock');
# the roles exist already (the block ran in the README's database)
$node->safe_psql('doc_grants', $grant->[1] =~ s/^\s*CREATE ROLE [^;]*;//mgr);

# the extension's functions for which a condition holds
sub functions_where
{
	my ($cond) = @_;
	return $node->safe_psql(
		'doc_grants', qq{
	SELECT string_agg(p.oid::regprocedure::text, ', ' ORDER BY p.oid::regprocedure::text)
	  FROM pg_proc p
	  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
	  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'zklock'
	 WHERE $cond});
}
my $monitoring = q{p.proname ~ '(_internal|_participants|_info|_claims|^zk_status$|^zk_version$)'};
is( functions_where(
		q{NOT has_function_privilege('app_role', p.oid, 'EXECUTE')
		  AND NOT has_function_privilege('monitoring_role', p.oid, 'EXECUTE')}),
	'zk_grant_usage(regrole,boolean), zk_job_claim_settle(text,timestamp with time zone,boolean), zk_stats_reset()',
	'every function but the superuser\'s zk_stats_reset(), zk_job_claim_settle() and zk_grant_usage() is granted to app_role or monitoring_role');
is(functions_where("$monitoring AND has_function_privilege('app_role', p.oid, 'EXECUTE')"),
	'', 'app_role gets none of the monitoring functions (pg_monitor has them)');
is( functions_where(
		"NOT $monitoring AND p.proname NOT IN ('zk_stats_reset', 'zk_job_claim_settle', 'zk_grant_usage')
		 AND NOT has_function_privilege('app_role', p.oid, 'EXECUTE')"),
	'', 'app_role may call every lock, claim, leadership and barrier function');
my ($rc, $out, $err) = $node->psql('doc_grants', q{
	SET ROLE monitoring_role;
	SELECT count(*) >= 0 FROM zk_locks, zk_stats, zk_leaders, zk_status()});
is($out, 't', 'monitoring_role reads the views') or diag $err;

$node->stop;
done_testing();

# 005_unit.pl
#    The C unit tests of test/unit (plain C parts of zklock, such as the
#    order of sequence numbers across ZooKeeper's wrap): each is compiled
#    against src/ and run; every check it prints counts as a test here.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $src = $ENV{TESTDIR} // '.';
my $tmp = PostgreSQL::Test::Utils::tempdir();
my %units = ('nodename_test' => [ 'test/unit/nodename_test.c', 'src/shared/nodename.c' ]);

foreach my $unit (sort keys %units)
{
	my $bin = "$tmp/$unit";
	my @files = map { "$src/$_" } @{ $units{$unit} };
	my ($out, $err);
	ok(IPC::Run::run([ 'cc', '-Wall', '-Werror', "-I$src/src", '-o', $bin, @files ],
			'>', \$out, '2>', \$err),
		"$unit compiles")
	  or diag $err;
	next unless -x $bin;
	IPC::Run::run([$bin], '>', \$out, '2>', \$err);
	my $checks = 0;
	foreach my $line (split /\n/, $out)
	{
		next unless $line =~ /^(not )?ok \d+ - (.*)$/;
		ok(!defined $1, "$unit: $2");
		$checks++;
	}
	cmp_ok($checks, '>', 0, "$unit printed its checks");
	like($out, qr/^1\.\.$checks$/m, "$unit ran all its checks");
}

done_testing();

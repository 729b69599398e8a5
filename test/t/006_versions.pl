# 006_versions.pl
#    One version everywhere: zklock.control's default_version X.Y, the
#    "version" of META.json (the distribution and the library, X.Y.0 or a
#    later X.Y.Z; its "provides" says the same) and the newest entry of
#    debian/changelog (X.Y.Z-N) agree, and a newer package is made for a
#    newer extension.  The library reports that version in zk_version() and
#    in the worker's start line (the upgrade suite checks zk_version()).
#    Needs no server.

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

my $src = $ENV{TESTDIR} // '.';

my ($control) = slurp_file("$src/zklock.control") =~ /^default_version = '([^']*)'$/m;
ok(defined $control, "zklock.control has a default_version")
  or BAIL_OUT('no default_version');

my $meta = slurp_file("$src/META.json");
my ($dist) = $meta =~ /^   "version": "([^"]*)",$/m;
my ($provides) = $meta =~ /"provides":\s*\{\s*"zklock":\s*\{[^}]*"version":\s*"([^"]*)"/s;
ok(defined $dist, 'META.json has a version') or BAIL_OUT('no version in META.json');
like($dist, qr/^\Q$control\E\.\d+$/,
	"META.json's version $dist is X.Y.Z of default_version $control");
is($provides, $dist, "META.json's provides names the same version");

my ($deb) = slurp_file("$src/debian/changelog") =~ /^zklock \(([^)]*)\)/;
ok(defined $deb, 'debian/changelog has an entry') or BAIL_OUT('no entry');
like($deb, qr/^\Q$dist\E-\d+$/,
	"debian/changelog's newest version $deb is the package of $dist");

ok(-f "$src/sql/zklock--$control.sql" || glob("$src/sql/zklock--*--$control.sql"),
	"there is a script that installs or updates to $control");

done_testing();

# 121_doc_links.pl
#    Every relative link of the documentation (README.md, CONTRIBUTING.md,
#    CHANGELOG.md, docs/*.md) reaches a file of the tree, and every #anchor
#    a heading of its file, named as GitHub names heading anchors
#    (lowercased, punctuation but - and _ dropped, spaces to -, a repeated
#    name suffixed -1, -2, ...).  Needs neither ZooKeeper nor PostgreSQL.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use File::Basename qw(dirname);
use File::Spec;
use PostgreSQL::Test::Utils;
use Test::More;

use ZkLockTest;

my $SRC = $ZkLockTest::SRC_DIR;
my @files = map { s{^\Q$SRC\E/}{}r } (glob("$SRC/*.md"), glob("$SRC/docs/*.md"));
ok(scalar(grep { m{^docs/} } @files) >= 5, 'docs/ has its pages')
  or diag "files: @files";

# Text outside fenced code blocks.
sub prose
{
	my ($file) = @_;
	my ($fenced, @lines) = (0);
	foreach (split /\n/, slurp_file("$SRC/$file"))
	{
		if (/^\s*```/) { $fenced = !$fenced; next; }
		push @lines, $_ unless $fenced;
	}
	return @lines;
}

my %anchors;
sub anchors
{
	my ($file) = @_;
	return $anchors{$file} //= do {
		my (%a, %seen);
		foreach (prose($file))
		{
			next unless /^#{1,6} (.*)$/;
			my $slug = lc $1;
			$slug =~ s/[^\w\- ]//g;
			$slug =~ tr/ /-/;
			my $n = $seen{$slug}++;
			$a{ $n ? "$slug-$n" : $slug } = 1;
		}
		\%a;
	};
}

my $links = 0;
foreach my $file (@files)
{
	my $dir = dirname($file);
	foreach my $line (prose($file))
	{
		# [text](target) and ![alt](target); inline code is not a link
		(my $text = $line) =~ s/`[^`]*`//g;
		while ($text =~ /\]\(([^)\s]+)\)/g)
		{
			my $target = $1;
			next if $target =~ /^(?:https?|mailto):/;
			$links++;
			my ($path, $anchor) = split /#/, $target, 2;
			my $to = $path eq '' ? $file
			  : File::Spec->abs2rel(File::Spec->rel2abs($path, "$SRC/$dir"), $SRC);
			$to =~ s{/$}{};
			if (!-e "$SRC/$to")
			{
				fail("$file: link $target: no file $to");
				next;
			}
			next unless defined $anchor;
			ok(anchors($to)->{$anchor}, "$file: link $target")
			  or diag "$to has no heading for #$anchor";
		}
	}
}
cmp_ok($links, '>', 100, "links checked: $links");
done_testing();

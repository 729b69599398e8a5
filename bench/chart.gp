# bench/chart.gp - the chart of bench/run, two panels of clustered bars per
# scenario: above, cycles per second of zklock, Curator and the one-session
# limit (visible: waiting for its delete; fire-and-forget: not); below,
# ZooKeeper's CPU time per cycle of each.
# Called as: gnuplot -e "datafile='...'; outfile='...'; subtitle='...';
#                        curator='...'; cols='2 3 4 5'; cpucols='6 7 8 9'" chart.gp
# datafile: one line per scenario: "label" zklock curator limit-visible
# limit-fire-and-forget, then the same four in µs of ZooKeeper CPU per cycle
# (NaN: none)

set terminal svg size 1100,860 dynamic enhanced font 'Helvetica,12' background rgb 'white'
set output outfile
set datafile separator "\t"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics mytics lc rgb '#dddddd'
set key top left
set xtics nomirror font ',9'
set ytics nomirror
set border 3
# the same left margin in both panels, so that their bars line up
set lmargin 12
# cols, cpucols: the columns that have values (a column of NaN only would
# make gnuplot give up)
if (!exists("cols")) cols = "2 3 4 5"
if (!exists("cpucols")) cpucols = "6 7 8 9"
tool(c) = (c - 2) % 4
name(c) = tool(c) == 0 ? 'zklock (pgbench)' : tool(c) == 1 ? 'Curator ('.curator.')' : \
	tool(c) == 2 ? 'one-session limit, visible release (C client)' : 'one-session limit, fire-and-forget release'
colour(c) = tool(c) == 0 ? 0x1f77b4 : tool(c) == 1 ? 0xff7f0e : tool(c) == 2 ? 0x2ca02c : 0xb5dfb5

set multiplot title "zklock vs Apache Curator 5.4 InterProcessMutex vs one ZooKeeper session's limit\n{/*0.8 ".subtitle."}"

set size 1, 0.55
set origin 0, 0.38
set bmargin 3
set ylabel "cycles per second (chain: handoffs per second), log scale"
# a log scale: local hand-off puts the hot-lock rows an order of magnitude
# above the others
set logscale y
set yrange [10:*]
plot for [c in cols] datafile using int(c):xtic(1) title name(int(c)) lc rgb colour(int(c))

set size 1, 0.38
set origin 0, 0
set bmargin 4
unset logscale y
set yrange [0:*]
set ylabel "ZooKeeper CPU µs per cycle"
if (strlen(cpucols) > 0) {
	plot for [c in cpucols] datafile using int(c):xtic(1) notitle lc rgb colour(int(c))
}

unset multiplot

# bench/chart.gp - the chart of bench/run: cycles per second of zklock,
# Curator and the one-session limit for each scenario (clustered bars).
# Called as: gnuplot -e "datafile='...'; outfile='...'; subtitle='...';
#                        curator='...'; cols='2 3 4'" chart.gp
# datafile: one line per scenario: "label" zklock curator limit (NaN: none)

set terminal svg size 1100,560 dynamic enhanced font 'Helvetica,12' background rgb 'white'
set output outfile
set datafile separator "\t"
set title "zklock vs Apache Curator 5.4 InterProcessMutex vs one ZooKeeper session's limit\n{/*0.8 ".subtitle."}"
set ylabel "cycles per second (chain: handoffs per second), log scale"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics mytics lc rgb '#dddddd'
# a log scale: local hand-off puts the hot-lock rows an order of magnitude
# above the others
set logscale y
set yrange [10:*]
set key top left
set xtics nomirror font ',9'
set ytics nomirror
set border 3
set bmargin 4
# cols: the columns that have values ("2 3 4"; a column of NaN only would
# make gnuplot give up)
if (!exists("cols")) cols = "2 3 4"
name(c) = c == 2 ? 'zklock (pgbench)' : c == 3 ? 'Curator ('.curator.')' : 'one-session limit (C client)'
colour(c) = c == 2 ? 0x1f77b4 : c == 3 ? 0xff7f0e : 0x2ca02c
plot for [c in cols] datafile using int(c):xtic(1) title name(int(c)) lc rgb colour(int(c))

/*
 * CuratorBench.java
 *    The Apache Curator column of zklock's benchmark (bench/run):
 *    InterProcessMutex doing the scenarios of the pgbench scripts.
 *
 * Usage: java -cp <curator jars>:<dir> CuratorBench CONNECT SESSIONS
 *            SECONDS WARMUP SCENARIO:THREADS...|-
 *
 * With "-" instead of scenarios it reads one SCENARIO:THREADS a line from
 * standard input and answers each with one line (a result, or "error
 * SCENARIO:THREADS ..." when it failed), until "quit" or end of input: the
 * driver then runs the three clients of a scenario one after the other,
 * close in time, so that the load of a shared machine drifts less between
 * them.
 *
 * SESSIONS is "shared" (one CuratorFramework, i.e. one ZooKeeper session,
 * for all threads of an "instance", as zklock's worker holds one session for
 * all backends of a PostgreSQL instance) or "per-thread" (one each).
 * Every thread has an InterProcessMutex object of its own, as every
 * PostgreSQL backend is a client of its own.  Scenarios:
 *
 *   uncontended:1   acquire+release of the thread's own lock
 *   distinct:N      N threads, each on a lock of its own
 *   hot:N           N threads on one lock
 *   hot2:N          one lock, N/2 threads on each of two "instances" (two
 *                   sessions in shared mode)
 *   new:N           each cycle a lock never used before (parent created)
 *   warmup:N        distinct:N for 3 x WARMUP seconds, for the JIT
 *   chain:N         N threads queued on one lock held by a gate; the gate
 *                   lets go and each thread releases as soon as it holds:
 *                   the time between consecutive grants (ROUNDS rounds, from
 *                   the environment variable BENCH_CHAIN_ROUNDS, default 1)
 *
 * warmup:N answers "result warmup N 0 0 0 0 -".
 * A timed scenario runs WARMUP seconds unmeasured, then counts the cycles
 * that end within SECONDS.  For each scenario prints one line
 *
 *   result SCENARIO THREADS CYCLES_PER_S P50_MS P99_MS CYCLES WINDOWS [NOTE]
 *
 * (nearest-rank percentiles of the cycle latency; for chain, of the
 * handoff intervals, and the rate is handoffs per second).  WINDOWS is
 * FROM:TO, the measured window in wall-clock epoch seconds (for bench/run's
 * ZooKeeper CPU samples); for chain one per round, separated by commas,
 * from the gate's release to the last grant.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBench
{
	private static String connect;
	private static boolean shared;
	private static final List<CuratorFramework> clients = new ArrayList<>();
	private static final String ROOT = "/curator-bench";

	/* a growable array of longs */
	private static final class Longs
	{
		long[] a = new long[1024];
		int n;

		void add(long v)
		{
			if (n == a.length)
				a = Arrays.copyOf(a, 2 * n);
			a[n++] = v;
		}
	}

	private static CuratorFramework newClient() throws Exception
	{
		CuratorFramework c = CuratorFrameworkFactory.newClient(connect, 10000, 5000,
			new ExponentialBackoffRetry(100, 3));
		c.start();
		if (!c.blockUntilConnected(30, TimeUnit.SECONDS))
			throw new RuntimeException("no ZooKeeper session within 30 s");
		clients.add(c);
		return c;
	}

	/* The client of thread i of an instance: the instance's shared one, or a new one. */
	private static CuratorFramework clientFor(CuratorFramework instance) throws Exception
	{
		return shared ? instance : newClient();
	}

	/* Nearest-rank percentile, in milliseconds, of sorted nanoseconds. */
	private static double percentileMs(long[] sorted, int n, double q)
	{
		if (n == 0)
			return 0;
		int rank = (int) Math.ceil(q * n);
		if (rank < 1)
			rank = 1;
		return sorted[rank - 1] / 1e6;
	}

	/* Wall-clock epoch seconds of a System.nanoTime() value. */
	private static double epochOf(long nanoTime)
	{
		long nanoNow = System.nanoTime();
		Instant wall = Instant.now();

		return wall.getEpochSecond() + wall.getNano() / 1e9 + (nanoTime - nanoNow) / 1e9;
	}

	/* "FROM:TO" of a window given in System.nanoTime() values. */
	private static String window(long from, long to)
	{
		return String.format("%.6f:%.6f", epochOf(from), epochOf(to));
	}

	private static void report(String scenario, int threads, double rate,
							   long[] values, int n, String windows, String note)
	{
		Arrays.sort(values, 0, n);
		System.out.printf("result %s %d %.1f %.3f %.3f %d %s%s%n", scenario, threads, rate,
						  percentileMs(values, n, 0.50), percentileMs(values, n, 0.99), n,
						  windows, note.isEmpty() ? "" : " " + note);
		System.out.flush();
	}

	/* What a thread of a timed scenario locks in its cycle c. */
	private interface PathOf
	{
		String path(int thread, long cycle);
	}

	/*
	 * A timed scenario: threads[i] cycles on the client given, acquire then
	 * release, until the window ends.  group[i] names the thread's instance
	 * (for hot2's per-instance rates).
	 */
	private static void timed(String scenario, CuratorFramework[] threadClients, int[] group,
							  PathOf pathOf, boolean newLockEachCycle,
							  double seconds, double warmup) throws Exception
	{
		int n = threadClients.length;
		long start = System.nanoTime() + 200_000_000L;	/* threads get going */
		long from = start + (long) (warmup * 1e9);
		long to = from + (long) (seconds * 1e9);
		Longs[] lat = new Longs[n];
		Thread[] ts = new Thread[n];
		AtomicLong failures = new AtomicLong();

		for (int i = 0; i < n; i++)
		{
			final int me = i;
			lat[i] = new Longs();
			ts[i] = new Thread(() -> {
				try
				{
					InterProcessMutex m = newLockEachCycle ? null
						: new InterProcessMutex(threadClients[me], pathOf.path(me, 0));
					while (System.nanoTime() < start)
						Thread.sleep(1);
					for (long c = 1;; c++)
					{
						long t0 = System.nanoTime();
						if (t0 >= to)
							break;
						if (newLockEachCycle)
							m = new InterProcessMutex(threadClients[me], pathOf.path(me, c));
						m.acquire();
						m.release();
						long t1 = System.nanoTime();
						if (t1 >= from && t1 < to)
							lat[me].add(t1 - t0);
					}
				}
				catch (Exception e)
				{
					failures.incrementAndGet();
					e.printStackTrace();
				}
			});
			ts[i].start();
		}
		for (Thread t : ts)
			t.join();
		if (failures.get() > 0)
			throw new RuntimeException(scenario + ": " + failures.get() + " threads failed");

		int total = 0;
		for (Longs l : lat)
			total += l.n;
		long[] all = new long[total];
		int k = 0;
		long[] perGroup = new long[2];
		for (int i = 0; i < n; i++)
		{
			System.arraycopy(lat[i].a, 0, all, k, lat[i].n);
			k += lat[i].n;
			perGroup[group[i]] += lat[i].n;
		}
		if (scenario.equals("warmup"))
			return;
		String note = "";
		if (scenario.equals("hot2"))
			note = String.format("instances=%.1f/%.1f", perGroup[0] / seconds, perGroup[1] / seconds);
		report(scenario, n, total / seconds, all, total, window(from, to), note);
	}

	/*
	 * N threads queue behind a gate holding the lock; the gate lets go and
	 * each thread releases as soon as it holds.  Measures the intervals
	 * between consecutive grants (the first from the gate's release).
	 */
	private static void chain(CuratorFramework instance, int n, int rounds) throws Exception
	{
		Longs intervals = new Longs();
		long totalNs = 0;
		StringBuilder windows = new StringBuilder();

		for (int r = 0; r < rounds; r++)
		{
			String path = ROOT + "/chain-" + r;
			InterProcessMutex gate = new InterProcessMutex(instance, path);
			gate.acquire();
			long[] done = new long[n];
			Thread[] ts = new Thread[n];
			AtomicLong failures = new AtomicLong();
			for (int i = 0; i < n; i++)
			{
				final int me = i;
				final CuratorFramework c = clientFor(instance);
				ts[i] = new Thread(() -> {
					try
					{
						InterProcessMutex m = new InterProcessMutex(c, path);
						m.acquire();
						m.release();
						done[me] = System.nanoTime();
					}
					catch (Exception e)
					{
						failures.incrementAndGet();
						e.printStackTrace();
					}
				});
				ts[i].start();
			}
			/* all queued: the gate's node and one per thread */
			long deadline = System.nanoTime() + 60_000_000_000L;
			while (instance.getChildren().forPath(path).size() < n + 1)
			{
				if (System.nanoTime() > deadline)
					throw new RuntimeException("chain: the waiters did not all queue within 60 s");
				Thread.sleep(5);
			}
			long released = System.nanoTime();
			gate.release();
			for (Thread t : ts)
				t.join();
			if (failures.get() > 0)
				throw new RuntimeException("chain: " + failures.get() + " threads failed");
			Arrays.sort(done);
			long prev = released;
			for (long d : done)
			{
				intervals.add(d - prev);
				prev = d;
			}
			totalNs += done[n - 1] - released;
			windows.append(windows.length() > 0 ? "," : "").append(window(released, done[n - 1]));
			/* per-thread sessions of this round */
			if (!shared)
				while (clients.size() > 1)
					clients.remove(clients.size() - 1).close();
		}
		report("chain", n, intervals.n / (totalNs / 1e9), intervals.a, intervals.n,
			   windows.toString(), "");
	}

	/* Run one scenario given as SCENARIO:THREADS. */
	private static void runScenario(String spec, double seconds, double warmup, int rounds)
		throws Exception
	{
		String[] w = spec.split(":");
		if (w.length != 2)
			throw new IllegalArgumentException("not SCENARIO:THREADS: " + spec);
		String scenario = w[0];
		int n = Integer.parseInt(w[1]);
		CuratorFramework first = clients.get(0);
		CuratorFramework second = null;
		CuratorFramework[] tc = new CuratorFramework[n];
		int[] group = new int[n];
		try
		{
			if (scenario.equals("hot2"))
				second = newClient();
			for (int i = 0; i < n; i++)
			{
				group[i] = (second != null && i >= n / 2) ? 1 : 0;
				tc[i] = clientFor(group[i] == 1 ? second : first);
			}
			final String base = ROOT + "/" + scenario + "-" + n;
			switch (scenario)
			{
				case "uncontended":
				case "distinct":
					timed(scenario, tc, group, (t, c) -> base + "/t" + t, false, seconds, warmup);
					break;
				case "warmup":
					timed(scenario, tc, group, (t, c) -> base + "/t" + t, false, 3 * warmup, 0);
					System.out.println("result warmup " + n + " 0 0 0 0 -");
					System.out.flush();
					break;
				case "hot":
				case "hot2":
					timed(scenario, tc, group, (t, c) -> base, false, seconds, warmup);
					break;
				case "new":
					timed(scenario, tc, group, (t, c) -> base + "/t" + t + "-" + c, true, seconds, warmup);
					break;
				case "chain":
					chain(first, n, rounds);
					break;
				default:
					throw new IllegalArgumentException("unknown scenario " + scenario);
			}
		}
		finally
		{
			/* close the sessions of this scenario, all but the first */
			while (clients.size() > 1)
				clients.remove(clients.size() - 1).close();
		}
	}

	public static void main(String[] args) throws Exception
	{
		if (args.length < 5)
		{
			System.err.println("usage: CuratorBench CONNECT shared|per-thread SECONDS WARMUP SCENARIO:THREADS...|-");
			System.exit(2);
		}
		connect = args[0];
		shared = args[1].equals("shared");
		double seconds = Double.parseDouble(args[2]);
		double warmup = Double.parseDouble(args[3]);
		int rounds = Integer.parseInt(System.getenv().getOrDefault("BENCH_CHAIN_ROUNDS", "1"));

		CuratorFramework first = newClient();
		if (args[4].equals("-"))
		{
			/* one scenario a line; each gets one answer line */
			BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
			String line;
			while ((line = in.readLine()) != null)
			{
				line = line.trim();
				if (line.equals("quit"))
					break;
				if (line.isEmpty())
					continue;
				try
				{
					runScenario(line, seconds, warmup, rounds);
				}
				catch (Exception e)
				{
					e.printStackTrace();
					System.out.println("error " + line + " " + e);
					System.out.flush();
				}
			}
		}
		else
		{
			for (int a = 4; a < args.length; a++)
				runScenario(args[a], seconds, warmup, rounds);
		}
		first.close();
	}
}

/*
 * CuratorDriver.java
 *    A peer for zklock's interoperability test (test/t/050_interop.pl):
 *    Apache Curator's lock recipes (with revocation), LeaderLatch,
 *    DistributedBarrier, DistributedDoubleBarrier and SharedCount, driven line by line on
 *    standard input.
 *
 * Usage: java -cp <curator and zookeeper jars>:<dir> CuratorDriver CONNECT
 *
 * Prints "ready" once its session is connected.  Then every input line is
 * "TAG COMMAND [ARGS]" and gets exactly one answer line "TAG RESULT", where
 * RESULT is "ok", "timeout" or "error <exception>".  Each TAG is one holder:
 * its commands run one after another on the tag's own thread (Curator's
 * mutexes belong to the thread that acquired them), while commands of
 * different tags run concurrently, so a blocked acquire of one tag does not
 * hold up the others.  TIMEOUT_MS < 0 waits without limit.
 *
 *   TAG mutex-acquire PATH TIMEOUT_MS     InterProcessMutex(PATH)
 *   TAG mutex-release
 *   TAG mutex-acquire-revocable PATH TIMEOUT_MS
 *                                         the same after makeRevocable(): the
 *                                         listener counts revocation requests
 *   TAG revoked                           "ok N": how often the tag's listener
 *                                         was called
 *   TAG revoke-holder PATH                Revoker.attemptRevoke on the first of
 *                                         InterProcessMutex(PATH)
 *                                         .getParticipantNodes() (the holder):
 *                                         "ok NODE", "ok none" if there is none
 *   TAG read-acquire PATH TIMEOUT_MS      InterProcessReadWriteLock(PATH)
 *   TAG read-release                          .readLock()
 *   TAG write-acquire PATH TIMEOUT_MS         .writeLock()
 *   TAG write-release
 *   TAG sem-acquire PATH MAX TIMEOUT_MS   InterProcessSemaphoreV2(PATH, MAX)
 *   TAG sem-acquire-qty PATH MAX QTY TIMEOUT_MS
 *                                         the same, .acquire(QTY): QTY leases
 *   TAG sem-acquire-count PATH COUNT_PATH TIMEOUT_MS
 *                                         InterProcessSemaphoreV2(PATH,
 *                                         SharedCountReader): sized by the
 *                                         SharedCount at COUNT_PATH (one per
 *                                         path, started with seed 0)
 *   TAG sem-release                       return the tag's lease(s)
 *   TAG semmutex-acquire PATH TIMEOUT_MS  InterProcessSemaphoreMutex(PATH)
 *   TAG semmutex-release
 *   TAG latch-start PATH ID               LeaderLatch(PATH, ID).start(): join
 *                                         the election (ID: the node's data)
 *   TAG latch-await TIMEOUT_MS            ok once the tag's latch leads
 *   TAG latch-leader                      "ok LEADS ID": whether the tag's
 *                                         latch leads (true/false) and the
 *                                         current leader's id (getLeader(),
 *                                         the leader node's data; "" if none)
 *   TAG latch-close                       leave the election
 *   TAG barrier-set PATH                  DistributedBarrier(PATH)
 *   TAG barrier-remove PATH                   .setBarrier(), .removeBarrier()
 *   TAG barrier-wait PATH TIMEOUT_MS          .waitOnBarrier(): ok once the
 *                                         barrier is not set
 *   TAG dbarrier-enter PATH MEMBERS TIMEOUT_MS
 *                                         DistributedDoubleBarrier(PATH,
 *                                         MEMBERS).enter(): the tag's member
 *   TAG dbarrier-leave TIMEOUT_MS         .leave() of the tag's member
 *   TAG count-start PATH SEED             SharedCount(PATH, SEED).start(): the
 *                                         tag's count (created with SEED when
 *                                         absent)
 *   TAG count-get                         "ok VALUE VERSION": its
 *                                         getVersionedValue(), remembered for
 *                                         count-try-set
 *   TAG count-set VALUE                   its setCount(VALUE)
 *   TAG count-try-set VALUE               "ok true|false": its trySetCount(the
 *                                         value count-get returned, VALUE)
 *   TAG count-close                       close the tag's count
 *   quit                                  close the session and exit
 *
 * End of input counts as quit.  Answers "TAG error ..." for a release
 * without a holding.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorDriver
{
	private static CuratorFramework client;

	/* one thread per tag */
	private static final Map<String, ExecutorService> threads = new HashMap<>();

	/* what each tag holds (touched only by the tag's thread) */
	private static final Map<String, InterProcessLock> locks =
		new java.util.concurrent.ConcurrentHashMap<>();
	private static final Map<String, Collection<Lease>> leases =
		new java.util.concurrent.ConcurrentHashMap<>();
	private static final Map<String, LeaderLatch> latches =
		new java.util.concurrent.ConcurrentHashMap<>();
	private static final Map<String, DistributedDoubleBarrier> dbarriers =
		new java.util.concurrent.ConcurrentHashMap<>();
	private static final Map<String, SharedCount> counts =
		new java.util.concurrent.ConcurrentHashMap<>();
	private static final Map<String, VersionedValue<Integer>> countsRead =
		new java.util.concurrent.ConcurrentHashMap<>();
	/* the SharedCounts that size semaphores, by path */
	private static final Map<String, SharedCount> sizes = new HashMap<>();
	/* revocation requests heard, per tag */
	private static final Map<String, java.util.concurrent.atomic.AtomicInteger> revoked =
		new java.util.concurrent.ConcurrentHashMap<>();

	private static synchronized void answer(String line)
	{
		System.out.println(line);
		System.out.flush();
	}

	/* acquire with TIMEOUT_MS semantics; true when held */
	private static boolean acquire(InterProcessLock lock, long ms) throws Exception
	{
		if (ms < 0)
		{
			lock.acquire();
			return true;
		}
		return lock.acquire(ms, TimeUnit.MILLISECONDS);
	}

	/* one lease of s for tag, with TIMEOUT_MS semantics */
	private static String acquireLease(String tag, InterProcessSemaphoreV2 s, long ms) throws Exception
	{
		Lease lease = ms < 0 ? s.acquire() : s.acquire(ms, TimeUnit.MILLISECONDS);

		if (lease == null)
			return "timeout";
		leases.put(tag, Collections.singletonList(lease));
		return "ok";
	}

	/* the started SharedCount of path, for sem-acquire-count */
	private static synchronized SharedCount size(String path) throws Exception
	{
		SharedCount c = sizes.get(path);

		if (c == null)
		{
			c = new SharedCount(client, path, 0);
			c.start();
			sizes.put(path, c);
		}
		return c;
	}

	private static String run(String tag, String[] w) throws Exception
	{
		switch (w[1])
		{
			case "mutex-acquire":
			{
				InterProcessMutex m = new InterProcessMutex(client, w[2]);
				if (!acquire(m, Long.parseLong(w[3])))
					return "timeout";
				locks.put(tag + "/mutex", m);
				return "ok";
			}
			case "mutex-acquire-revocable":
			{
				InterProcessMutex m = new InterProcessMutex(client, w[2]);
				java.util.concurrent.atomic.AtomicInteger n =
					revoked.computeIfAbsent(tag, k -> new java.util.concurrent.atomic.AtomicInteger());

				m.makeRevocable(lock -> n.incrementAndGet());
				if (!acquire(m, Long.parseLong(w[3])))
					return "timeout";
				locks.put(tag + "/mutex", m);
				return "ok";
			}
			case "revoked":
			{
				java.util.concurrent.atomic.AtomicInteger n = revoked.get(tag);
				return "ok " + (n == null ? 0 : n.get());
			}
			case "revoke-holder":
			{
				java.util.Collection<String> nodes =
					new InterProcessMutex(client, w[2]).getParticipantNodes();
				if (nodes.isEmpty())
					return "ok none";
				String node = nodes.iterator().next();
				Revoker.attemptRevoke(client, node);
				return "ok " + node;
			}
			case "read-acquire":
			case "write-acquire":
			{
				InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, w[2]);
				boolean read = w[1].startsWith("read");
				InterProcessLock l = read ? rw.readLock() : rw.writeLock();
				if (!acquire(l, Long.parseLong(w[3])))
					return "timeout";
				locks.put(tag + (read ? "/read" : "/write"), l);
				return "ok";
			}
			case "semmutex-acquire":
			{
				InterProcessSemaphoreMutex m = new InterProcessSemaphoreMutex(client, w[2]);
				if (!acquire(m, Long.parseLong(w[3])))
					return "timeout";
				locks.put(tag + "/semmutex", m);
				return "ok";
			}
			case "mutex-release":
			case "semmutex-release":
			case "read-release":
			case "write-release":
			{
				String key = tag + "/" + w[1].substring(0, w[1].indexOf('-'));
				InterProcessLock l = locks.remove(key);
				if (l == null)
					return "error nothing held";
				l.release();
				return "ok";
			}
			case "sem-acquire":
				return acquireLease(tag,
									new InterProcessSemaphoreV2(client, w[2], Integer.parseInt(w[3])),
									Long.parseLong(w[4]));
			case "sem-acquire-qty":
			{
				InterProcessSemaphoreV2 s =
					new InterProcessSemaphoreV2(client, w[2], Integer.parseInt(w[3]));
				int qty = Integer.parseInt(w[4]);
				long ms = Long.parseLong(w[5]);
				Collection<Lease> got = ms < 0 ? s.acquire(qty) :
					s.acquire(qty, ms, TimeUnit.MILLISECONDS);
				if (got == null)
					return "timeout";
				leases.put(tag, got);
				return "ok";
			}
			case "sem-acquire-count":
				return acquireLease(tag,
									new InterProcessSemaphoreV2(client, w[2], size(w[3])),
									Long.parseLong(w[4]));
			case "sem-release":
			{
				Collection<Lease> got = leases.remove(tag);
				if (got == null)
					return "error nothing held";
				for (Lease lease : got)
					lease.close();
				return "ok";
			}
			case "latch-start":
			{
				if (latches.containsKey(tag))
					return "error latch already started";
				LeaderLatch l = new LeaderLatch(client, w[2], w[3]);
				l.start();
				latches.put(tag, l);
				return "ok";
			}
			case "latch-await":
			{
				LeaderLatch l = latches.get(tag);
				if (l == null)
					return "error no latch";
				long ms = Long.parseLong(w[2]);
				if (ms < 0)
				{
					l.await();
					return "ok";
				}
				return l.await(ms, TimeUnit.MILLISECONDS) ? "ok" : "timeout";
			}
			case "latch-leader":
			{
				LeaderLatch l = latches.get(tag);
				if (l == null)
					return "error no latch";
				return "ok " + l.hasLeadership() + " " + l.getLeader().getId();
			}
			case "latch-close":
			{
				LeaderLatch l = latches.remove(tag);
				if (l == null)
					return "error no latch";
				l.close();
				return "ok";
			}
			case "barrier-set":
				new DistributedBarrier(client, w[2]).setBarrier();
				return "ok";
			case "barrier-remove":
				new DistributedBarrier(client, w[2]).removeBarrier();
				return "ok";
			case "barrier-wait":
			{
				DistributedBarrier b = new DistributedBarrier(client, w[2]);
				long ms = Long.parseLong(w[3]);
				if (ms < 0)
				{
					b.waitOnBarrier();
					return "ok";
				}
				return b.waitOnBarrier(ms, TimeUnit.MILLISECONDS) ? "ok" : "timeout";
			}
			case "dbarrier-enter":
			{
				DistributedDoubleBarrier b =
					new DistributedDoubleBarrier(client, w[2], Integer.parseInt(w[3]));
				long ms = Long.parseLong(w[4]);
				dbarriers.put(tag, b);
				if (ms < 0)
				{
					b.enter();
					return "ok";
				}
				return b.enter(ms, TimeUnit.MILLISECONDS) ? "ok" : "timeout";
			}
			case "dbarrier-leave":
			{
				DistributedDoubleBarrier b = dbarriers.get(tag);
				if (b == null)
					return "error no double barrier";
				long ms = Long.parseLong(w[2]);
				if (ms < 0)
				{
					b.leave();
					return "ok";
				}
				return b.leave(ms, TimeUnit.MILLISECONDS) ? "ok" : "timeout";
			}
			case "count-start":
			{
				if (counts.containsKey(tag))
					return "error count already started";
				SharedCount c = new SharedCount(client, w[2], Integer.parseInt(w[3]));
				c.start();
				counts.put(tag, c);
				return "ok";
			}
			case "count-get":
			{
				SharedCount c = counts.get(tag);
				if (c == null)
					return "error no count";
				VersionedValue<Integer> v = c.getVersionedValue();
				countsRead.put(tag, v);
				return "ok " + v.getValue() + " " + v.getVersion();
			}
			case "count-set":
			{
				SharedCount c = counts.get(tag);
				if (c == null)
					return "error no count";
				c.setCount(Integer.parseInt(w[2]));
				return "ok";
			}
			case "count-try-set":
			{
				SharedCount c = counts.get(tag);
				VersionedValue<Integer> v = countsRead.get(tag);
				if (c == null || v == null)
					return "error no count read";
				return "ok " + c.trySetCount(v, Integer.parseInt(w[2]));
			}
			case "count-close":
			{
				SharedCount c = counts.remove(tag);
				countsRead.remove(tag);
				if (c == null)
					return "error no count";
				c.close();
				return "ok";
			}
			default:
				return "error unknown command " + w[1];
		}
	}

	public static void main(String[] args) throws Exception
	{
		client = CuratorFrameworkFactory.newClient(args[0], 10000, 10000,
												   new ExponentialBackoffRetry(100, 5));
		client.start();
		if (!client.blockUntilConnected(60, TimeUnit.SECONDS))
		{
			System.err.println("CuratorDriver: no connection to " + args[0]);
			System.exit(1);
		}
		answer("ready");

		BufferedReader in = new BufferedReader(
			new InputStreamReader(System.in, StandardCharsets.UTF_8));
		String line;
		while ((line = in.readLine()) != null)
		{
			final String[] w = line.trim().split("\\s+");
			if (w.length == 0 || w[0].isEmpty())
				continue;
			if (w[0].equals("quit"))
				break;
			final String tag = w[0];
			if (w.length < 2)
			{
				answer(tag + " error no command");
				continue;
			}
			ExecutorService t = threads.computeIfAbsent(tag, k -> Executors.newSingleThreadExecutor(r -> {
				Thread th = new Thread(r, "tag-" + k);
				th.setDaemon(true);
				return th;
			}));
			t.submit(() -> {
				String result;
				try
				{
					result = run(tag, w);
				}
				catch (Exception e)
				{
					result = "error " + e.toString().replace('\n', ' ');
				}
				answer(tag + " " + result);
			});
		}

		/* whatever is still held goes with the session */
		for (LeaderLatch l : latches.values())
			l.close();
		for (SharedCount c : counts.values())
			c.close();
		for (SharedCount c : sizes.values())
			c.close();
		for (ExecutorService t : threads.values())
			t.shutdownNow();
		client.close();
		System.exit(0);
	}
}

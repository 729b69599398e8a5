/*-------------------------------------------------------------------------
 *
 * zklimit.c
 *	  The "one-session limit" of zklock's benchmark (bench/run): what one
 *	  ZooKeeper session driven by the single-threaded C client (the client
 *	  zklock's worker uses) can do when nothing else costs anything.
 *
 * One session runs CHAINS independent chains, each on a lock of its own.  A
 * chain's cycle is what an uncontended acquire+release costs in the best
 * one-round-trip design: create(ephemeral sequential, Curator-style
 * protected name) pipelined with getChildren of the lock's parent, the node
 * checked to be the lowest, then an asynchronous delete, and at once the
 * next cycle (the delete is not waited for: ZooKeeper handles a session's
 * requests in order, so the next listing no longer shows the node).  This
 * "fire-and-forget" release returns before the lock is free.
 *
 * With --wait-delete a chain's next cycle starts only when its delete has
 * been answered: a release that is visible when it returns, as zklock's
 * and Curator's are.  A cycle is then two writes in sequence (the create,
 * pipelined with the listing, then the delete).
 *
 * Like zklock's worker, it takes every reply already on the socket in one
 * go and corks the socket while the completions send the next requests, so
 * that they leave together instead of as two TCP segments each (the
 * client sends a request's length and body separately, with TCP_NODELAY).
 *
 * With --new-names every cycle takes a lock never used before: the parent
 * (a container, as Curator and zklock create them) is created in the same
 * pipeline, ahead of the node, and NODEEXISTS from it is ignored, so that a
 * first acquire is one round trip too.
 *
 * Usage: zklimit [--new-names] [--wait-delete] [--warmup SECONDS]
 *				  CONNECT CHAINS SECONDS
 *
 * Prints one line
 *		result CYCLES_PER_S P50_MS P99_MS CYCLES FROM TO
 * counting the cycles that ended within SECONDS after the warm-up, FROM to
 * TO (wall-clock epoch seconds, for bench/run's ZooKeeper CPU samples).  A
 * cycle ends, and its latency runs from sending the create to, the
 * listing's answer, or with --wait-delete the delete's answer.  Exits 1 on
 * any ZooKeeper error (a lost connection included).
 *
 * Build: cc -O2 -o zklimit zklimit.c -lzookeeper_st
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <zookeeper/zookeeper.h>

#define PATH_LEN 256

/* one chain: one lock, one cycle at a time */
typedef struct Chain
{
	int			index;
	long		cycle;			/* cycles started */
	double		started;		/* when this cycle's create was sent */
	char		parent[PATH_LEN];	/* the lock's path */
	char		prefix[PATH_LEN];	/* parent + protected node name prefix */
	char		node[PATH_LEN];		/* the node this cycle created */
} Chain;

static zhandle_t *zh;
static bool connected;
static bool new_names;
static bool wait_delete;
static char root[64];
static double measure_from;		/* window of counted cycles */
static double measure_to;
static bool stopping;			/* start no more cycles */
static int	outstanding;		/* requests sent and not answered */

static double *latencies;		/* of counted cycles, in seconds */
static size_t n_latencies;
static size_t max_latencies;

/* Seconds on the monotonic clock. */
static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Seconds since the epoch, on the wall clock. */
static double
wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
fail(const char *what, int rc)
{
	fprintf(stderr, "zklimit: %s: %s\n", what, zerror(rc));
	exit(1);
}

/* Session events: remember when connected; anything else ends the run. */
static void
watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	(void) h;
	(void) path;
	(void) ctx;
	if (type != ZOO_SESSION_EVENT)
		return;
	if (state == ZOO_CONNECTED_STATE)
		connected = true;
	else if (connected)
	{
		fprintf(stderr, "zklimit: session state %d\n", state);
		exit(1);
	}
}

/*
 * Drive the client until *flag is true (with flag NULL: until nothing is
 * outstanding), failing when the deadline (monotonic seconds) passes first;
 * with stop_at > 0, return at that time whatever the state.
 */
static void
run_until(bool *flag, double deadline, double stop_at)
{
	while (flag ? !*flag : outstanding > 0)
	{
		int			fd;
		int			interest;
		int			events = 0;
		int			rc;
		int			ms;
		struct timeval tv;
		struct pollfd pfd;
		int			avail = 0;
		int			one = 1;
		int			zero = 0;
		bool		corked;

		if (stop_at > 0 && now() >= stop_at)
			return;
		if (now() > deadline)
		{
			fprintf(stderr, "zklimit: timed out waiting for ZooKeeper\n");
			exit(1);
		}
		rc = zookeeper_interest(zh, &fd, &interest, &tv);
		if (rc != ZOK && rc != ZNOTHING && rc != ZINVALIDSTATE)
			fail("zookeeper_interest", rc);
		ms = tv.tv_sec * 1000 + tv.tv_usec / 1000;
		if (ms > 20)
			ms = 20;			/* look at the clock often enough */
		pfd.fd = fd;
		pfd.events = ((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
			((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0);
		pfd.revents = 0;
		if (poll(&pfd, fd >= 0 ? 1 : 0, ms) < 0 && errno != EINTR)
		{
			perror("zklimit: poll");
			exit(1);
		}
		if (pfd.revents & (POLLIN | POLLHUP | POLLERR))
			events |= ZOOKEEPER_READ;
		if (pfd.revents & POLLOUT)
			events |= ZOOKEEPER_WRITE;
		/*
		 * As zklock's worker does (src/worker/session.c): take every reply
		 * already on the socket, and let the requests their completions send
		 * leave together (corked) rather than as two TCP segments each.
		 */
		corked = fd >= 0 && zoo_state(zh) == ZOO_CONNECTED_STATE &&
			setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one)) == 0;
		rc = zookeeper_process(zh, events);
		while (rc == ZOK && (events & ZOOKEEPER_READ) && fd >= 0 &&
			   ioctl(fd, FIONREAD, &avail) == 0 && avail > 0)
			rc = zookeeper_process(zh, ZOOKEEPER_READ);
		if (corked)
			(void) setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
		if (rc != ZOK && rc != ZNOTHING && rc != ZINVALIDSTATE)
			fail("zookeeper_process", rc);
	}
}

/* Sequence number of a node name: its trailing ten digits. */
static long
sequence_of(const char *name)
{
	size_t		len = strlen(name);

	return len >= 10 ? atol(name + len - 10) : -1;
}

static void start_cycle(Chain *c);

/* A cycle of chain c ended at t: count it if within the window. */
static void
cycle_ended(Chain *c, double t)
{
	if (t < measure_from || t >= measure_to)
		return;
	if (n_latencies == max_latencies)
	{
		max_latencies = max_latencies ? 2 * max_latencies : 65536;
		latencies = realloc(latencies, max_latencies * sizeof(double));
		if (!latencies)
		{
			perror("zklimit");
			exit(1);
		}
	}
	latencies[n_latencies++] = t - c->started;
}

static void
void_done(int rc, const void *data)
{
	outstanding--;
	if (rc != ZOK && rc != ZNODEEXISTS && rc != ZNONODE)
		fail((const char *) data, rc);
}

static void
setup_done(int rc, const char *value, const void *data)
{
	(void) value;
	void_done(rc, data);
}

static void
create_done(int rc, const char *value, const void *data)
{
	Chain	   *c = (Chain *) data;

	outstanding--;
	if (rc != ZOK)
		fail("create", rc);
	snprintf(c->node, PATH_LEN, "%s", value);
}

static void
parent_done(int rc, const char *value, const void *data)
{
	(void) value;
	(void) data;
	outstanding--;
	if (rc != ZOK && rc != ZNODEEXISTS)
		fail("create parent", rc);
}

/* With --wait-delete, the delete's answer: the cycle is complete. */
static void
delete_done(int rc, const void *data)
{
	Chain	   *c = (Chain *) data;

	outstanding--;
	if (rc != ZOK)
		fail("delete", rc);
	cycle_ended(c, now());
	if (!stopping)
		start_cycle(c);
}

/* The listing's answer: the cycle's acquire is complete. */
static void
children_done(int rc, const struct String_vector *strings, const void *data)
{
	Chain	   *c = (Chain *) data;
	double		t = now();
	const char *mine = strrchr(c->node, '/');
	long		my_seq;
	bool		found = false;
	int			i;

	outstanding--;
	if (rc != ZOK)
		fail("getChildren", rc);
	mine = mine ? mine + 1 : c->node;
	my_seq = sequence_of(mine);
	for (i = 0; i < strings->count; i++)
	{
		if (strcmp(strings->data[i], mine) == 0)
			found = true;
		else if (sequence_of(strings->data[i]) < my_seq)
		{
			fprintf(stderr, "zklimit: chain %d does not hold its lock (%s before %s)\n",
					c->index, strings->data[i], mine);
			exit(1);
		}
	}
	if (!found)
	{
		fprintf(stderr, "zklimit: node %s missing from its parent's listing\n", c->node);
		exit(1);
	}

	if (wait_delete)
	{
		/* release; the cycle ends with the delete's answer */
		outstanding++;
		rc = zoo_adelete(zh, c->node, -1, delete_done, c);
		if (rc != ZOK)
			fail("delete", rc);
		return;
	}

	cycle_ended(c, t);
	/* release, and go on without waiting for it */
	outstanding++;
	rc = zoo_adelete(zh, c->node, -1, void_done, "delete");
	if (rc != ZOK)
		fail("delete", rc);
	if (!stopping)
		start_cycle(c);
}

/* Send one cycle's pipelined requests. */
static void
start_cycle(Chain *c)
{
	int			rc;

	c->cycle++;
	c->started = now();
	if (new_names)
	{
		char		name[2 * PATH_LEN];

		snprintf(c->parent, PATH_LEN, "%s/n%d-%ld", root, c->index, c->cycle);
		snprintf(name, sizeof(name), "%s%s", c->parent, c->prefix);
		outstanding++;
		rc = zoo_acreate(zh, c->parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
						 ZOO_CONTAINER, parent_done, c);
		if (rc != ZOK)
			fail("create parent", rc);
		outstanding++;
		rc = zoo_acreate(zh, name, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
						 ZOO_EPHEMERAL_SEQUENTIAL, create_done, c);
	}
	else
	{
		char		name[2 * PATH_LEN];

		snprintf(name, sizeof(name), "%s%s", c->parent, c->prefix);
		outstanding++;
		rc = zoo_acreate(zh, name, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
						 ZOO_EPHEMERAL_SEQUENTIAL, create_done, c);
	}
	if (rc != ZOK)
		fail("create", rc);
	outstanding++;
	rc = zoo_aget_children(zh, c->parent, 0, children_done, c);
	if (rc != ZOK)
		fail("getChildren", rc);
}

static int
compare_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of the sorted latencies, in milliseconds. */
static double
percentile_ms(double q)
{
	size_t		rank;

	if (n_latencies == 0)
		return 0;
	rank = (size_t) (q * n_latencies + 0.999999);
	if (rank < 1)
		rank = 1;
	return latencies[rank - 1] * 1000;
}

static void
usage(void)
{
	fprintf(stderr, "usage: zklimit [--new-names] [--wait-delete] [--warmup SECONDS] CONNECT CHAINS SECONDS\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	double		warmup = 1;
	double		wall_offset;
	double		seconds;
	int			nchains;
	const char *connect;
	Chain	   *chains;
	int			i;
	int			rc;

	while (argc > 1 && strncmp(argv[1], "--", 2) == 0)
	{
		if (strcmp(argv[1], "--new-names") == 0)
			new_names = true;
		else if (strcmp(argv[1], "--wait-delete") == 0)
			wait_delete = true;
		else if (strcmp(argv[1], "--warmup") == 0 && argc > 2)
		{
			warmup = atof(argv[2]);
			argv++;
			argc--;
		}
		else
			usage();
		argv++;
		argc--;
	}
	if (argc != 4)
		usage();
	connect = argv[1];
	nchains = atoi(argv[2]);
	seconds = atof(argv[3]);
	if (nchains < 1 || seconds <= 0 || warmup < 0)
		usage();

	srandom((unsigned) getpid() ^ (unsigned) time(NULL));
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	zh = zookeeper_init(connect, watcher, 10000, NULL, NULL, 0);
	if (!zh)
	{
		perror("zklimit: zookeeper_init");
		return 1;
	}
	run_until(&connected, now() + 30, 0);

	/* a root of this run; a persistent parent per chain */
	snprintf(root, sizeof(root), "/zklimit-%d", (int) getpid());
	outstanding++;
	rc = zoo_acreate(zh, root, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0,
					 setup_done, "create root");
	if (rc != ZOK)
		fail("create root", rc);
	chains = calloc(nchains, sizeof(Chain));
	for (i = 0; i < nchains; i++)
	{
		Chain	   *c = &chains[i];

		c->index = i;
		snprintf(c->parent, PATH_LEN, "%s/c%d", root, i);
		/* a Curator-style protected name: _c_<uuid>-lock- */
		snprintf(c->prefix, PATH_LEN,
				 "/_c_%08lx-%04lx-4%03lx-8%03lx-%06lx%06lx-lock-",
				 random() & 0xffffffffL, random() & 0xffffL,
				 random() & 0xfffL, random() & 0xfffL,
				 random() & 0xffffffL, random() & 0xffffffL);
		if (!new_names)
		{
			outstanding++;
			rc = zoo_acreate(zh, c->parent, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, 0,
							 setup_done, "create parent");
			if (rc != ZOK)
				fail("create parent", rc);
		}
	}
	run_until(NULL, now() + 30, 0);

	/* the run */
	wall_offset = wall_now() - now();
	measure_from = now() + warmup;
	measure_to = measure_from + seconds;
	for (i = 0; i < nchains; i++)
		start_cycle(&chains[i]);
	run_until(NULL, measure_to + 30, measure_to);
	stopping = true;
	run_until(NULL, now() + 30, 0);

	qsort(latencies, n_latencies, sizeof(double), compare_double);
	printf("result %.1f %.3f %.3f %zu %.6f %.6f\n",
		   n_latencies / seconds, percentile_ms(0.50), percentile_ms(0.99),
		   n_latencies, measure_from + wall_offset, measure_to + wall_offset);

	zookeeper_close(zh);
	return 0;
}

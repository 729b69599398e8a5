/*-------------------------------------------------------------------------
 *
 * session.c
 *	  The worker's ZooKeeper session.
 *
 * This file owns the zhandle_t of the single-threaded ZooKeeper client and
 * the session's life: connecting, noticing a suspended connection,
 * deciding that the session is lost, and opening a new one.  The client has
 * no threads; zk_session_wait() drives it from the worker's latch wait
 * (zookeeper_interest() tells which socket events and timeout it needs,
 * zookeeper_process() runs completions and watchers).
 *
 * Session states as published to backends (protocol.h):
 *	CONNECTING	no session yet
 *	CONNECTED	usable
 *	SUSPENDED	connection lost; ZooKeeper may still keep the session
 *	LOST		expired, or not confirmed for longer than the session timeout
 *				by our own clock (the client only learns of expiry once it
 *				reconnects); a new session is opened at once
 *
 * How long holdings can be trusted: every quarter of the session timeout we
 * send a cheap read (a probe) and, when its reply comes, publish the time
 * the probe was *sent* as "confirmed_at".  ZooKeeper processed the probe
 * after that time, so the session lived then and cannot expire before
 * confirmed_at + timeout.  Backends trust a holding only while confirmed_at
 * is younger than half the timeout; a paused or cut-off worker therefore
 * stops vouching for its locks well before ZooKeeper could hand them to
 * someone else.
 *
 * Crash restarts: the session id and password are kept in
 * $PGDATA/zklock.session.  After a crash (kill -9 of any backend restarts
 * every process, this worker included) the new worker first resumes that
 * session only to close it, so ZooKeeper deletes its nodes at once instead
 * of after a whole session timeout.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "postmaster/postmaster.h"

#include "protocol.h"
#include "worker.h"

#define SESSION_FILE "zklock.session"

zhandle_t  *zk_zh = NULL;

static bool connected = false;
static bool ending_old = false; /* zk_zh resumes a dead worker's session */
static bool end_old_now = false;
static TimestampTz end_old_deadline = 0;
static int64 session_id = 0;
static char *session_hosts = NULL;	/* zklock.hosts the session uses */
static char *session_auth = NULL;	/* zklock.auth the session was given */
static bool authenticated = false;	/* session_auth was usable and sent */
static TimestampTz confirmed_at = 0;
static TimestampTz next_probe_at = 0;
static const char *lost_reason = NULL;	/* set by the watcher, acted on later */
static TimestampTz reopen_at = 0;	/* retry a failed zookeeper_init then */
static bool auth_failed = false;
static int	pending_fd = -1;		/* socket of a connection being set up */
static TimestampTz pending_since = 0;

static void open_handle(const clientid_t *cid);

bool
zk_session_connected(void)
{
	return zk_zh != NULL && connected && !ending_old;
}

/* Route the client's own log lines to the server log at DEBUG1. */
static void
client_log(const char *message)
{
	elog(DEBUG1, "zookeeper client: %s", message);
	if (strstr(message, "ZOO_ERROR") != NULL)
		zk_set_last_error("%s", message);
}

/* ---- the session file ---- */

/*
 * The file names the postmaster it belongs to (pid and start time, which a
 * crash restart keeps), so that a copy of the data directory — a base
 * backup for a standby, a clone — never ends the session of the instance it
 * was copied from.
 */
static void
write_session_file(const clientid_t *cid)
{
	char		tmp[MAXPGPATH];
	FILE	   *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", SESSION_FILE);
	f = AllocateFile(tmp, PG_BINARY_W);
	if (f == NULL)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", tmp)));
		return;
	}
	fprintf(f, "%d %lld\n%llx\n", (int) PostmasterPid, (long long) PgStartTime,
			(unsigned long long) cid->client_id);
	for (int i = 0; i < (int) sizeof(cid->passwd); i++)
		fprintf(f, "%02x", (unsigned char) cid->passwd[i]);
	fprintf(f, "\n");
	if (FreeFile(f) != 0)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", tmp)));
	else
		(void) durable_rename(tmp, SESSION_FILE, LOG);
}

/* Read the session left by this postmaster's previous worker, if any. */
static bool
read_session_file(clientid_t *cid)
{
	FILE	   *f = AllocateFile(SESSION_FILE, PG_BINARY_R);
	int			pid;
	long long	started;
	unsigned long long id;
	bool		ok;

	if (f == NULL)
		return false;
	memset(cid, 0, sizeof(*cid));
	ok = fscanf(f, "%d %lld %llx", &pid, &started, &id) == 3;
	for (int i = 0; ok && i < (int) sizeof(cid->passwd); i++)
	{
		unsigned int b;

		ok = fscanf(f, "%2x", &b) == 1;
		cid->passwd[i] = (char) b;
	}
	FreeFile(f);
	cid->client_id = (int64) id;
	if (ok && (pid != (int) PostmasterPid || started != (long long) PgStartTime))
	{
		/* another postmaster's (or a copy's): not ours to end */
		ereport(DEBUG1,
				(errmsg("zklock ignores \"%s\" of another postmaster",
						SESSION_FILE)));
		ok = false;
	}
	return ok && id != 0;
}

static void
remove_session_file(void)
{
	if (unlink(SESSION_FILE) != 0 && errno != ENOENT)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", SESSION_FILE)));
}

/* ---- events ---- */

static void
publish_confirmed(TimestampTz t)
{
	if (t > confirmed_at)
	{
		confirmed_at = t;
		pg_atomic_write_u64(&zk_shared->confirmed_at, (uint64) t);
	}
}

static void
probe_done(int rc, const struct Stat *stat, const void *data)
{
	if (rc == ZOK || rc == ZNONODE)
		publish_confirmed((TimestampTz) (uintptr_t) data);
}

static void
session_watcher(zhandle_t *zh, int type, int state, const char *path,
				void *ctx)
{
	if (type != ZOO_SESSION_EVENT)
		return;

	if (ending_old)
	{
		/* alive or expired, either way we can close it now */
		if (state == ZOO_CONNECTED_STATE || state == ZOO_EXPIRED_SESSION_STATE ||
			state == ZOO_AUTH_FAILED_STATE)
			end_old_now = true;
		return;
	}

	if (state == ZOO_CONNECTED_STATE)
	{
		const clientid_t *cid = zoo_client_id(zh);

		connected = true;
		next_probe_at = 0;		/* confirm at once */
		if (cid->client_id != session_id)
		{
			session_id = cid->client_id;
			confirmed_at = 0;
			publish_confirmed(GetCurrentTimestamp());
			write_session_file(cid);
			ereport(LOG,
					(errmsg("zklock connected to ZooKeeper at \"%s\", session 0x%llx, timeout %d ms",
							session_hosts, (unsigned long long) session_id,
							zoo_recv_timeout(zh))));
		}
		else
		{
			pg_atomic_fetch_add_u64(&zk_shared->n_reconnects, 1);
			ereport(LOG,
					(errmsg("zklock reconnected to ZooKeeper, session 0x%llx resumed",
							(unsigned long long) session_id)));
		}
		zk_set_session_state(ZKS_CONNECTED, session_id, zoo_recv_timeout(zh),
							 zoo_get_current_server(zh));
		zk_engine_connected();
	}
	else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE)
	{
		if (connected)
		{
			connected = false;
			ereport(LOG,
					(errmsg("zklock lost its connection to ZooKeeper; session 0x%llx suspended",
							(unsigned long long) session_id)));
			zk_set_last_error("connection to ZooKeeper lost");
			zk_set_session_state(ZKS_SUSPENDED, session_id,
								 zoo_recv_timeout(zh), NULL);
		}
	}
	else if (state == ZOO_EXPIRED_SESSION_STATE)
		lost_reason = "the ZooKeeper session expired";
	else if (state == ZOO_AUTH_FAILED_STATE)
	{
		lost_reason = "ZooKeeper refused the credentials of zklock.auth";
		auth_failed = true;
	}
}

/* ---- authentication ---- */

/*
 * The ACL of every node we create: open when zklock.auth is not set; else
 * all rights for our identity ("auth": whoever authenticated as we did)
 * and read for everyone.
 */
struct ACL_vector *
zk_session_acl(void)
{
	static struct ACL protected_acl[] = {
		{0, {"auth", ""}},
		{0, {"world", "anyone"}},
	};
	static struct ACL_vector protected_vector = {2, protected_acl};

	if (!authenticated)
		return &ZOO_OPEN_ACL_UNSAFE;
	protected_acl[0].perms = ZOO_PERM_ALL;
	protected_acl[1].perms = ZOO_PERM_READ;
	return &protected_vector;
}

static void
auth_done(int rc, const void *data)
{
	if (rc != ZOK && rc != ZCLOSING)
		zk_set_last_error("ZooKeeper refused zklock.auth: %s", zerror(rc));
}

/*
 * Present zklock.auth to ZooKeeper.  Its value never goes to the log or to
 * an error message.
 */
static void
add_auth(void)
{
	const char *colon;

	authenticated = false;
	if (session_auth[0] == '\0')
		return;
	colon = strchr(session_auth, ':');
	if (colon == NULL || colon == session_auth)
	{
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock.auth is not of the form user:password; connecting without authentication")));
		return;
	}
	authenticated = zoo_add_auth(zk_zh, "digest", session_auth,
								 strlen(session_auth), auth_done, NULL) == ZOK;
}

/* ---- opening and closing ---- */

static void
open_handle(const clientid_t *cid)
{
	connected = false;
	session_id = 0;
	lost_reason = NULL;
	if (session_hosts)
		pfree(session_hosts);
	session_hosts = MemoryContextStrdup(TopMemoryContext, zklock_hosts);
	if (session_auth)
		pfree(session_auth);
	session_auth = MemoryContextStrdup(TopMemoryContext, zklock_auth);

	zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
	zk_zh = zookeeper_init(session_hosts, session_watcher,
						   zklock_session_timeout, cid, NULL, 0);
	if (zk_zh == NULL)
	{
		ereport(LOG,
				(errmsg("zklock could not start a ZooKeeper session for \"%s\": %m",
						session_hosts)));
		reopen_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
		return;
	}
	zoo_set_log_callback(zk_zh, client_log);
	if (cid == NULL)
		add_auth();
	zk_set_session_state(ZKS_CONNECTING, 0, 0, NULL);
}

/*
 * Start: end the session of a previous incarnation if one was left behind
 * (see the file header), then open a new session.
 */
void
zk_session_start(void)
{
	clientid_t	cid;

	if (read_session_file(&cid))
	{
		ereport(LOG,
				(errmsg("zklock is ending ZooKeeper session 0x%llx left by its previous run",
						(unsigned long long) cid.client_id)));
		ending_old = true;
		end_old_now = false;
		end_old_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   zklock_connect_timeout);
		open_handle(&cid);
		if (zk_zh != NULL)
			return;
		ending_old = false;
	}
	open_handle(NULL);
}

/*
 * Close the handle.  When connected, ZooKeeper ends the session and deletes
 * its nodes at once, and the session file is no longer needed.
 */
void
zk_session_stop(void)
{
	if (zk_zh)
	{
		zhandle_t  *zh = zk_zh;
		bool		was_connected = connected || end_old_now;

		zk_zh = NULL;
		connected = false;
		if (zookeeper_close(zh) == ZOK && was_connected)
			remove_session_file();
	}
}

/* The session is gone or must go: tell the engine, and open a new one. */
static void
session_restart(const char *why)
{
	ereport(WARNING,
			(errmsg("zklock lost ZooKeeper session 0x%llx: %s",
					(unsigned long long) session_id, why)));
	pg_atomic_fetch_add_u64(&zk_shared->n_session_losses, 1);
	zk_set_last_error("session 0x%llx lost: %s",
					  (unsigned long long) session_id, why);
	zk_set_session_state(ZKS_LOST, session_id, 0, NULL);
	zk_session_stop();
	zk_engine_session_lost(why);
	if (auth_failed)
	{
		/* retried only after a pause: the credentials will not improve */
		auth_failed = false;
		reopen_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 5000);
		return;
	}
	open_handle(NULL);
}

/*
 * Settings were reloaded: move to the new ensemble or identity if
 * zklock.hosts or zklock.auth changed.
 */
void
zk_session_reload(void)
{
	if (session_hosts && strcmp(session_hosts, zklock_hosts) != 0)
		session_restart("zklock.hosts changed");
	else if (session_auth && strcmp(session_auth, zklock_auth) != 0)
		session_restart("zklock.auth changed");
}

/*
 * Drop a connection attempt whose session handshake gets no answer.
 *
 * A ZooKeeper server that accepts a connection before it has loaded its
 * database never answers it (ZooKeeper 3.8.0, as Debian 12 ships it, after
 * a restart), and the client would wait two thirds of the session timeout
 * before trying again: long enough to lose the session over a restart it
 * should survive.  A handshake takes milliseconds, so after a tenth of the
 * timeout (at least a second) we shut the socket down; the client sees the
 * connection fail and tries again at once.
 */
static void
kick_stuck_handshake(int fd)
{
	TimestampTz now = GetCurrentTimestamp();
	int			limit = Max(1000, zklock_session_timeout / 10);

	if (fd < 0 || connected)
	{
		pending_fd = -1;
		return;
	}
	if (fd != pending_fd)
	{
		pending_fd = fd;
		pending_since = now;
	}
	else if (TimestampDifferenceExceeds(pending_since, now, limit))
	{
		ereport(LOG,
				(errmsg("zklock got no answer to its session handshake from ZooKeeper within %d ms; trying again",
						limit)));
		shutdown(fd, SHUT_RDWR);
		pending_fd = -1;
	}
}

/*
 * Wait for whatever the client or the worker needs (socket events, the
 * client's timeout, the next probe, our latch, at most a second) and let
 * the client process it.  Returns after one wait; the caller handles its
 * latch.
 */
void
zk_session_wait(void)
{
	int			fd = -1;
	int			interest = 0;
	struct timeval tv = {1, 0};
	long		timeout;
	int			wl = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;
	int			rc;
	int			events = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (zk_zh == NULL && now >= reopen_at)
		open_handle(NULL);

	if (ending_old && (end_old_now || now >= end_old_deadline))
	{
		zk_session_stop();
		ending_old = false;
		open_handle(NULL);
	}

	if (zk_zh && zookeeper_interest(zk_zh, &fd, &interest, &tv) == ZINVALIDSTATE &&
		lost_reason == NULL && !ending_old)
		lost_reason = "the ZooKeeper handle became unusable";

	if (lost_reason)
	{
		session_restart(lost_reason);
		return;
	}
	kick_stuck_handshake(fd);

	if (zk_session_connected() && now >= next_probe_at)
	{
		if (zoo_aexists(zk_zh, "/", 0, probe_done,
						(const void *) (uintptr_t) now) == ZOK)
			next_probe_at = TimestampTzPlusMilliseconds(now,
														zoo_recv_timeout(zk_zh) / 4);
	}

	timeout = Min(tv.tv_sec * 1000L + tv.tv_usec / 1000, 1000L);
	if (fd >= 0)
	{
		if (interest & ZOOKEEPER_READ)
			wl |= WL_SOCKET_READABLE;
		if (interest & ZOOKEEPER_WRITE)
			wl |= WL_SOCKET_WRITEABLE;
	}
	rc = WaitLatchOrSocket(MyLatch, wl, fd, timeout, PG_WAIT_EXTENSION);
	if (rc & WL_SOCKET_READABLE)
		events |= ZOOKEEPER_READ;
	if (rc & WL_SOCKET_WRITEABLE)
		events |= ZOOKEEPER_WRITE;

	if (zk_zh)
		(void) zookeeper_process(zk_zh, events);

	if (lost_reason)
		session_restart(lost_reason);
	else if (zk_zh && session_id != 0 && !ending_old &&
			 TimestampDifferenceExceeds(confirmed_at, GetCurrentTimestamp(),
										zoo_recv_timeout(zk_zh)))
		session_restart("ZooKeeper did not confirm the session within its timeout");
}

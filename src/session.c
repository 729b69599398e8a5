/*-------------------------------------------------------------------------
 *
 * session.c
 *	  The worker's ZooKeeper session.
 *
 * This file owns the zhandle_t of the single-threaded ZooKeeper client and
 * the session's life: connecting, noticing a suspended connection, deciding
 * that the session is lost, and opening a new one.  The client has no
 * threads; zk_session_wait() drives it from the worker's latch wait
 * (zookeeper_interest() tells which socket events and timeout it needs,
 * zookeeper_process() runs completions and watchers).
 *
 * Session states as published to backends (protocol.h):
 *	CONNECTING	no session yet
 *	CONNECTED	usable
 *	SUSPENDED	connection lost; ZooKeeper may still keep the session
 *	LOST		expired, or silent for longer than the session timeout by our
 *				own clock (the client only learns of expiry once it
 *				reconnects); a new session is opened at once
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "protocol.h"
#include "worker.h"

zhandle_t  *zk_zh = NULL;

static bool connected = false;
static int64 session_id = 0;
static TimestampTz last_heard = 0;	/* last data from the server */
static const char *lost_reason = NULL;	/* set by the watcher, acted on later */
static TimestampTz reopen_at = 0;	/* retry a failed zookeeper_init then */

bool
zk_session_connected(void)
{
	return zk_zh != NULL && connected;
}

/* Route the client's own log lines to the server log at DEBUG1. */
static void
client_log(const char *message)
{
	elog(DEBUG1, "zookeeper client: %s", message);
}

static void
session_watcher(zhandle_t *zh, int type, int state, const char *path,
				void *ctx)
{
	if (type != ZOO_SESSION_EVENT)
		return;

	if (state == ZOO_CONNECTED_STATE)
	{
		const clientid_t *cid = zoo_client_id(zh);

		connected = true;
		last_heard = GetCurrentTimestamp();
		if (cid->client_id != session_id)
		{
			session_id = cid->client_id;
			ereport(LOG,
					(errmsg("zklock connected to ZooKeeper at \"%s\", session 0x%llx, timeout %d ms",
							zklock_hosts, (unsigned long long) session_id,
							zoo_recv_timeout(zh))));
		}
		else
			ereport(LOG,
					(errmsg("zklock reconnected to ZooKeeper, session 0x%llx resumed",
							(unsigned long long) session_id)));
		zk_set_session_state(ZKS_CONNECTED, session_id);
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
			zk_set_session_state(ZKS_SUSPENDED, session_id);
		}
	}
	else if (state == ZOO_EXPIRED_SESSION_STATE)
		lost_reason = "the ZooKeeper session expired";
	else if (state == ZOO_AUTH_FAILED_STATE)
		lost_reason = "ZooKeeper authentication failed";
}

/* Open a new session (asynchronously: it is usable once connected). */
void
zk_session_start(void)
{
	connected = false;
	session_id = 0;
	lost_reason = NULL;
	zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
	zk_zh = zookeeper_init(zklock_hosts, session_watcher,
						   zklock_session_timeout, NULL, NULL, 0);
	if (zk_zh == NULL)
	{
		ereport(LOG,
				(errmsg("zklock could not start a ZooKeeper session for \"%s\": %m",
						zklock_hosts)));
		reopen_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
		return;
	}
	zoo_set_log_callback(zk_zh, client_log);
	zk_set_session_state(ZKS_CONNECTING, 0);
}

/* Close the handle; ZooKeeper deletes the session's nodes at once. */
void
zk_session_stop(void)
{
	if (zk_zh)
	{
		zhandle_t  *zh = zk_zh;

		zk_zh = NULL;
		connected = false;
		zookeeper_close(zh);
	}
}

/* The session is gone: tell the engine, and open a new one. */
static void
session_lost(const char *why)
{
	ereport(LOG,
			(errmsg("zklock lost ZooKeeper session 0x%llx: %s",
					(unsigned long long) session_id, why)));
	zk_set_session_state(ZKS_LOST, session_id);
	zk_session_stop();
	zk_engine_session_lost(why);
	zk_session_start();
}

/*
 * Wait for whatever the client or the worker needs (socket events, the
 * client's timeout, our latch, at most a second) and let the client
 * process it.  Returns after one wait; the caller handles its latch.
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

	if (zk_zh == NULL)
	{
		if (GetCurrentTimestamp() >= reopen_at)
			zk_session_start();
	}
	else if (zookeeper_interest(zk_zh, &fd, &interest, &tv) == ZINVALIDSTATE &&
			 lost_reason == NULL)
		lost_reason = "the ZooKeeper handle became unusable";

	if (lost_reason)
	{
		session_lost(lost_reason);
		return;
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
	{
		(void) zookeeper_process(zk_zh, events);
		if (connected && (events & ZOOKEEPER_READ))
			last_heard = GetCurrentTimestamp();
	}

	if (lost_reason)
		session_lost(lost_reason);
	else if (zk_zh && session_id != 0 && !connected &&
			 TimestampDifferenceExceeds(last_heard, GetCurrentTimestamp(),
										zoo_recv_timeout(zk_zh)))
		session_lost("no contact with ZooKeeper for longer than the session timeout");
}

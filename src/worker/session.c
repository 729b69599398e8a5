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
 * Session states as published to backends (shared/protocol.h):
 *	CONNECTING	no session yet
 *	CONNECTED	usable
 *	SUSPENDED	connection lost; ZooKeeper may still keep the session
 *	LOST		expired, or not confirmed for longer than the session timeout
 *				by our own clock (the client only learns of expiry once it
 *				reconnects); a new session is opened at once
 *
 * While no server accepts a connection, rounds of attempts (each tries
 * every host of zklock.hosts) are spaced out, up to a second apart, so that
 * an outage does not keep the worker busy.
 *
 * How long holdings can be trusted: every quarter of the session timeout we
 * send a sync (a probe) and, when its reply comes, publish the time the
 * probe was *sent* as "confirmed_at", read from the monotonic clock
 * (ZkMono, protocol.h) like every duration here: a wall clock stepped back
 * while we are cut off must not stretch the trust.  A sync is answered
 * only once the ZooKeeper leader has processed it, after every proposal it
 * had outstanding (a closeSession included) and in order with them on the
 * way back: a follower cut off from the leader, which still serves reads
 * for up to syncLimit x tickTime, cannot answer it.  So the reply proves that
 * the quorum still had the session after the probe was sent, and it cannot
 * expire before confirmed_at + timeout.  Backends trust a holding only
 * while confirmed_at is younger than half the timeout and the holding
 * belongs to this very session (backend/request.c); a paused or cut-off worker
 * therefore stops vouching for its locks well before ZooKeeper could hand
 * them to someone else.
 *
 * This file never calls the engine: what happened to the session comes
 * back from zk_session_wait() as events, and the worker loop tells the
 * engine.
 *
 * Credentials and the ACL of our nodes: credentials.c.
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

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
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

#include "shared/pg_compat.h"
#include "shared/protocol.h"
#include "worker/session.h"
#include "worker/session_internal.h"

#define SESSION_FILE "zklock.session"

/* How often the client may look up zklock.hosts' names again (ms). */
#define RESOLVE_DELAY_MS	5000

/* After the client gave up a connection, wait this long before the next (ms). */
#define INTEREST_RETRY_MS	50

/*
 * When a round of connection attempts failed (the client tried every host
 * of zklock.hosts and asks to wait before the next round), wait at least
 * this long before the next round, doubling from round to round up to the
 * maximum, back to the minimum once connected (ms).  A stopped ensemble
 * then costs a round a second, and a server that is back is found within a
 * second.  Within a round the client moves on to the next host at once, so
 * an ensemble fails over without waiting.
 */
#define BACKOFF_MIN_MS		10
#define BACKOFF_MAX_MS		1000

/* While the credentials file cannot be used, read it again this often (ms). */
#define AUTH_RETRY_MS		30000

/* Replies read from the socket in one turn of the worker, at most. */
#define MAX_REPLIES_PER_TURN	256

/*
 * A resumed session whose connection ZooKeeper dropped this many times in a
 * row before the session could be confirmed on it is closed (see
 * session_changed).
 */
#define MAX_UNCONFIRMED_CONNECTIONS	5

zhandle_t  *zk_zh = NULL;
void		(*zk_session_disconnected_hook) (void) = NULL;

/*
 * Where the session is in its life, one phase at a time (the watcher moves
 * ZKP_ENDING_OLD to ZKP_OLD_ANSWERED; everything else happens outside
 * ZooKeeper's callbacks).  Backends see less (ZkSessionState, published
 * with zk_set_session_state): CONNECTED only in ZKP_CONNECTED.
 */
typedef enum ZkSessionPhase
{
	ZKP_CLOSED,					/* no handle: not started yet, or the next
								 * is opened at reopen_at (zookeeper_init
								 * failed, ZooKeeper refused the
								 * credentials) */
	ZKP_AUTH_BLOCKED,			/* no handle: zklock.auth_file cannot be
								 * used; read again at reopen_at and on
								 * reload */
	ZKP_ENDING_OLD,				/* the handle resumes the session a
								 * previous worker left, only to close it
								 * (until end_old_deadline) */
	ZKP_OLD_ANSWERED,			/* ... and ZooKeeper answered for it
								 * (connected, expired or refused): close it
								 * now */
	ZKP_CONNECTING,				/* the handle is our session's: not
								 * connected yet, or the connection was lost
								 * (suspended) */
	ZKP_CONNECTED				/* ... connected: usable */
} ZkSessionPhase;

static ZkSessionPhase phase = ZKP_CLOSED;	/* set by the watcher too */
static ZkMono end_old_deadline = 0;
static int64 session_id = 0;
static char *session_hosts = NULL;	/* zklock.hosts the session uses */
static ZkMono confirmed_at = 0;
static ZkMono next_probe_at = 0;
static ZkMono connected_at = 0;	/* when the current connection was made */
static int	unconfirmed_connections = 0;	/* in a row, see session_changed */
/* why the session is lost, a sentence; set by the watcher, acted on later */
static const char *lost_reason = NULL;
static ZkMono reopen_at = 0;	/* retry a failed zookeeper_init then */
/* ZooKeeper refused the credentials: noted by the watcher with lost_reason */
static bool auth_failed = false;
static int	backoff_ms = 0;			/* wait after the last failed round */
static ZkMono retry_at = 0;			/* no connection attempt before then */
static int	pending_fd = -1;		/* socket of a connection being set up */
static ZkMono pending_since = 0;
/* the connection state the watcher saw last, for session_changed */
static volatile int observed_state = 0;
static volatile bool state_changed = false;
static int	events = 0;			/* ZK_EVENT_* since the last wait returned */
static const char *event_why = NULL;	/* for ZK_EVENT_LOST */

static void open_handle(const clientid_t *cid);

/* Does the handle resume a previous worker's session, only to close it? */
static inline bool
ending_old(void)
{
	return phase == ZKP_ENDING_OLD || phase == ZKP_OLD_ANSWERED;
}

bool
zk_session_connected(void)
{
	return zk_zh != NULL && phase == ZKP_CONNECTED;
}

/* The id of the current session, or 0. */
int64
zk_session_id(void)
{
	return zk_zh != NULL && !ending_old() ? session_id : 0;
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
publish_confirmed(ZkMono t)
{
	if (t > confirmed_at)
	{
		confirmed_at = t;
		zk_set_confirmed(session_id, t);
	}
}

/*
 * The probe's reply (see the file header).  Never throws (publishing takes
 * the shared LWLock only).
 */
static void
probe_done(int rc, const char *value, const void *data)
{
	if (rc == ZOK)
		publish_confirmed((ZkMono) (uintptr_t) data);
}

/* Send a probe now; the next one is due a quarter of the timeout later. */
static void
send_probe(ZkMono now)
{
	if (zoo_async(zk_zh, "/", probe_done, (const void *) (uintptr_t) now) == ZOK)
		next_probe_at = ZkMonoPlusMs(now, zoo_recv_timeout(zk_zh) / 4);
}

/*
 * The client's session watcher.  Like every ZooKeeper callback it only
 * notes what happened (session_changed() acts on it once
 * zookeeper_process() has returned): it never throws, logs or touches
 * shared memory.
 */
static void
session_watcher(zhandle_t *zh, int type, int state, const char *path,
				void *ctx)
{
	if (type != ZOO_SESSION_EVENT)
		return;

	if (ending_old())
	{
		/* alive or expired, either way we can close it now */
		if (state == ZOO_CONNECTED_STATE || state == ZOO_EXPIRED_SESSION_STATE ||
			state == ZOO_AUTH_FAILED_STATE)
			phase = ZKP_OLD_ANSWERED;
		return;
	}
	if (state == ZOO_EXPIRED_SESSION_STATE)
		lost_reason = "The ZooKeeper session expired.";
	else if (state == ZOO_AUTH_FAILED_STATE)
	{
		lost_reason = "ZooKeeper refused the credentials of zklock.auth_file.";
		auth_failed = true;
	}
	else
	{
		observed_state = state;
		state_changed = true;
	}
}

/*
 * The connection is lost; ZooKeeper may still keep the session.  Noticed
 * from the watcher's event, or earlier from the client's state (see
 * zk_session_wait): the client reports the loss to its watcher only at the
 * next zookeeper_process(), which may also complete the next connection,
 * and the worker must see every loss to set its watches again.
 */
static void
suspend(void)
{
	phase = ZKP_CONNECTING;
	if (confirmed_at >= connected_at)
		unconfirmed_connections = 0;
	else
		unconfirmed_connections++;
	ereport(LOG,
			(errmsg("zklock lost its connection to ZooKeeper; session 0x%llx suspended",
					(unsigned long long) session_id)));
	zk_set_last_error("connection to ZooKeeper lost");
	zk_set_session_state(ZKS_SUSPENDED, session_id,
						 zoo_recv_timeout(zk_zh), NULL);
}

/* Act on the connection state the watcher saw last. */
static void
session_changed(void)
{
	int			state = observed_state;

	state_changed = false;
	if (zk_zh == NULL || ending_old())
		return;
	if (state == ZOO_CONNECTED_STATE && phase != ZKP_CONNECTED)
	{
		const clientid_t *cid = zoo_client_id(zk_zh);

		if (cid->client_id == session_id &&
			unconfirmed_connections >= MAX_UNCONFIRMED_CONNECTIONS &&
			zk_mono_now() - confirmed_at >
			(int64) zoo_recv_timeout(zk_zh) * 1000 / 3)
		{
			/*
			 * ZooKeeper keeps dropping the connection right after
			 * resuming the session (a request it refuses, such as a
			 * message longer than its jute.maxbuffer), and has not
			 * confirmed it for a third of its timeout (a flapping network
			 * that still lets the confirmation through is left alone):
			 * the session would
			 * live on without being of use to anyone, keeping its nodes
			 * from everybody else until it expires.  Close it now, while
			 * connected, so that ZooKeeper deletes its nodes at once.
			 */
			lost_reason = "ZooKeeper kept dropping the connection before the session could be confirmed; the worker closed the session.";
			return;
		}
		phase = ZKP_CONNECTED;
		connected_at = zk_mono_now();
		backoff_ms = 0;
		retry_at = 0;
		zk_client_log_connected();
		zk_set_last_error("%s", "");	/* what failed before is over */

		/*
		 * Confirm at once, ahead of whatever the engine sends once it hears
		 * of the connection (a look at every part): backends vouch for
		 * their holdings again as soon as the reply comes, however many
		 * there are.
		 */
		send_probe(connected_at);
		if (cid->client_id != session_id)
		{
			/* a new session: the quorum created it just now */
			session_id = cid->client_id;
			confirmed_at = 0;
			unconfirmed_connections = 0;
			write_session_file(cid);
			ereport(LOG,
					(errmsg("zklock connected to ZooKeeper at \"%s\", session 0x%llx, timeout %d ms",
							session_hosts, (unsigned long long) session_id,
							zoo_recv_timeout(zk_zh))));
			zk_set_session_state(ZKS_CONNECTED, session_id,
								 zoo_recv_timeout(zk_zh),
								 zoo_get_current_server(zk_zh));
			publish_confirmed(zk_mono_now());
		}
		else
		{
			pg_atomic_fetch_add_u64(&zk_shared->n_reconnects, 1);
			ereport(LOG,
					(errmsg("zklock reconnected to ZooKeeper, session 0x%llx resumed",
							(unsigned long long) session_id)));
			zk_set_session_state(ZKS_CONNECTED, session_id,
								 zoo_recv_timeout(zk_zh),
								 zoo_get_current_server(zk_zh));
		}
		events |= ZK_EVENT_CONNECTED;
	}
	else if ((state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) &&
			 phase == ZKP_CONNECTED)
		suspend();
}

/* ---- opening and closing ---- */

/*
 * Open a handle: for a new session (cid NULL) with the credentials of
 * zklock.auth_file, which must be usable, or to resume the session cid.
 */
static void
open_handle(const clientid_t *cid)
{
	if (cid == NULL)
		phase = ZKP_CLOSED;		/* else the caller made it ZKP_ENDING_OLD */
	session_id = 0;
	lost_reason = NULL;
	if (session_hosts)
		pfree(session_hosts);
	session_hosts = MemoryContextStrdup(TopMemoryContext, zklock_hosts);
	if (cid == NULL)
	{
		if (!zk_credentials_load())
		{
			/* no connection rather than one with open ACLs */
			ereport(LOG,
					(errcode(ERRCODE_CONFIG_FILE_ERROR),
					 errmsg("zklock is not connecting to ZooKeeper"),
					 errdetail("The file named by zklock.auth_file cannot be used."),
					 errhint("Fix the file; zklock reads it again every %d seconds and on reload.",
							 AUTH_RETRY_MS / 1000)));
			phase = ZKP_AUTH_BLOCKED;
			zk_set_auth_blocked(zklock_auth_file);
			reopen_at = ZkMonoPlusMs(zk_mono_now(), AUTH_RETRY_MS);
			zk_set_session_state(ZKS_CONNECTING, 0, 0, NULL);
			return;
		}
		zk_set_auth_blocked(NULL);
	}

	zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
	zk_zh = zookeeper_init(session_hosts, session_watcher,
						   zklock_session_timeout, cid, NULL, 0);
	if (zk_zh == NULL)
	{
		ereport(LOG,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("zklock could not start a ZooKeeper session for \"%s\": %m",
						session_hosts),
				 errhint("Check zklock.hosts.")));
		reopen_at = ZkMonoPlusMs(zk_mono_now(), 1000);
		return;
	}
	zoo_set_log_callback(zk_zh, zk_client_log);
	/* look the hosts up again at most every few seconds, not every turn */
	zoo_set_servers_resolution_delay(zk_zh, RESOLVE_DELAY_MS);
	if (cid == NULL)
	{
		zk_credentials_present(zk_zh);
		phase = ZKP_CONNECTING;
	}
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
		phase = ZKP_ENDING_OLD;
		end_old_deadline = ZkMonoPlusMs(zk_mono_now(), zklock_connect_timeout);
		open_handle(&cid);
		if (zk_zh != NULL)
			return;
		phase = ZKP_CLOSED;
	}
	open_handle(NULL);
}

/*
 * Close the handle.  When connected, ZooKeeper ends the session and deletes
 * its nodes at once, and the session file is no longer needed.  Returns
 * true when a connected session was closed so.
 */
bool
zk_session_stop(void)
{
	bool		closed = false;

	if (zk_zh)
	{
		zhandle_t  *zh = zk_zh;
		bool		was_connected = phase == ZKP_CONNECTED ||
			phase == ZKP_OLD_ANSWERED;
		int			rc;

		zk_zh = NULL;
		if (!ending_old())
			phase = ZKP_CLOSED;
		HOLD_INTERRUPTS();
		rc = zookeeper_close(zh);
		RESUME_INTERRUPTS();
		phase = ZKP_CLOSED;
		if (rc == ZOK && was_connected)
		{
			remove_session_file();
			closed = true;
		}
	}
	return closed;
}

/* The events since the last call, for the worker loop. */
static int
take_events(const char **why)
{
	int			ev = events;

	*why = event_why;
	events = 0;
	event_why = NULL;
	return ev;
}

/*
 * The session is gone or must go: note the event for the engine, and open
 * a new one.  why is a sentence (it becomes the DETAIL of this and of the
 * engine's messages).
 */
static void
session_restart(const char *why)
{
	ereport(WARNING,
			(errmsg("zklock lost ZooKeeper session 0x%llx",
					(unsigned long long) session_id),
			 errdetail_internal("%s", why)));
	pg_atomic_fetch_add_u64(&zk_shared->n_session_losses, 1);
	zk_set_last_error("session 0x%llx lost: %s",
					  (unsigned long long) session_id, why);
	zk_set_session_state(ZKS_LOST, session_id, 0, NULL);
	zk_session_stop();
	events = (events & ~ZK_EVENT_CONNECTED) | ZK_EVENT_LOST;
	event_why = why;
	if (auth_failed)
	{
		/* retried only after a pause: the credentials will not improve */
		auth_failed = false;
		reopen_at = ZkMonoPlusMs(zk_mono_now(), 5000);
		return;
	}
	open_handle(NULL);
}

/*
 * Settings were reloaded: move to the new ensemble or identity if
 * zklock.hosts, zklock.auth_file or that file's content changed, and try
 * to connect again if the credentials file was unusable.  Returns the
 * events, as zk_session_wait().
 */
int
zk_session_reload(const char **why)
{
	const char *reason;

	if (phase == ZKP_AUTH_BLOCKED)
	{
		/* not connected: nothing to lose, just try again */
		phase = ZKP_CLOSED;
		if (zk_zh == NULL)
			open_handle(NULL);
	}
	else if (session_hosts && strcmp(session_hosts, zklock_hosts) != 0)
	{
		/* another ensemble: try it at once */
		backoff_ms = 0;
		retry_at = 0;
		session_restart("zklock.hosts changed.");
	}
	else if (zk_zh != NULL && !ending_old() &&
			 (reason = zk_credentials_changed()) != NULL)
		session_restart(reason);
	return take_events(why);
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
	ZkMono		now = zk_mono_now();
	int			limit = Max(1000, zklock_session_timeout / 10);

	if (fd < 0 || phase == ZKP_CONNECTED)
	{
		pending_fd = -1;
		return;
	}
	if (fd != pending_fd)
	{
		pending_fd = fd;
		pending_since = now;
	}
	else if (now - pending_since >= (int64) limit * 1000)
	{
		ereport(LOG,
				(errmsg("zklock got no answer to its session handshake from ZooKeeper within %d ms",
						limit),
				 errdetail("The worker drops the connection and tries again.")));
		shutdown(fd, SHUT_RDWR);
		pending_fd = -1;
	}
}

/*
 * The worker's wait: one WaitEventSet kept across turns (building one per
 * turn costs an epoll instance and three registrations, five system calls,
 * every turn), rebuilt only when the client's socket changes.
 *
 * PostgreSQL 15 cannot remove an event from a set or move it to another
 * socket, so a different socket, or none, means a new set.  The socket is
 * told apart by its inode, not only by its number: the client closes its
 * socket when a connection fails and may open the next one under the same
 * number, and the kernel drops a closed socket from an epoll set on its
 * own, so changing the events of a number that now names another socket
 * would fail (and end the worker).  A set never carries a socket event
 * without READABLE or WRITEABLE: a socket with no interest is waited on
 * as no socket.
 */
static WaitEventSet *wait_set = NULL;
static int	wait_fd = -1;			/* socket in wait_set, or -1 */
static ino_t wait_ino = 0;			/* its inode */
static int	wait_pos = -1;			/* its event in wait_set */
static uint32 wait_sock_events = 0;	/* WL_SOCKET_* it waits for */

static void
wait_set_prepare(int fd, uint32 sock_events)
{
	struct stat st;
	ino_t		ino = 0;

	if (sock_events == 0)
		fd = -1;
	if (fd >= 0)
	{
		if (fstat(fd, &st) == 0)
			ino = st.st_ino;
		else
			fd = -1;			/* not a descriptor: wait on no socket */
	}

	if (wait_set != NULL && fd == wait_fd && (fd < 0 || ino == wait_ino))
	{
		if (fd >= 0 && sock_events != wait_sock_events)
		{
			ModifyWaitEvent(wait_set, wait_pos, sock_events, NULL);
			wait_sock_events = sock_events;
		}
		return;
	}

	if (wait_set != NULL)
		FreeWaitEventSet(wait_set);
	wait_set = NULL;
	wait_fd = -1;
	wait_set = ZkCreateWaitEventSet(3);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
					  NULL, NULL);
	if (fd >= 0)
	{
		wait_pos = AddWaitEventToSet(wait_set, sock_events, fd, NULL, NULL);
		wait_fd = fd;
		wait_ino = ino;
		wait_sock_events = sock_events;
	}
}

/*
 * Hold back (on) or push out (off) what the client sends.  The client sets
 * TCP_NODELAY and sends a request's length and its body with a send() each,
 * so every request would leave as two TCP segments, each waking the server
 * (and, on loopback, costing the sender the receiver's side of the stack
 * too).  The engine corks the socket when it hands the first call of a
 * turn to the client (engine/calls.c) and the worker uncorks it at the end
 * of the turn: they leave together, in as few segments as their size
 * allows, and a turn that sends nothing (the answer to a backend's request,
 * say) costs no system call for it before the backend is woken.  Only the
 * socket waited on in this turn is corked, and only while connected;
 * nothing between the wait and the uncork opens a socket.
 */
static int	corked_fd = -1;

void
zk_session_cork(bool on)
{
	int			v = on ? 1 : 0;

	if (on)
	{
		if (corked_fd >= 0 || wait_fd < 0 || !zk_session_connected())
			return;
		if (setsockopt(wait_fd, IPPROTO_TCP, TCP_CORK, &v, sizeof(v)) == 0)
			corked_fd = wait_fd;
	}
	else if (corked_fd >= 0)
	{
		/* fails harmlessly if the client closed the socket meanwhile */
		(void) setsockopt(corked_fd, IPPROTO_TCP, TCP_CORK, &v, sizeof(v));
		corked_fd = -1;
	}
}

/*
 * Wait for whatever the client or the worker needs (socket events, the
 * client's timeout, the next probe, our latch, the engine's timeout_ms, at
 * most a second) and let the client process it.  Returns after one wait,
 * with the events (ZK_EVENT_*) that the engine must hear of, in the order
 * LOST before CONNECTED; *why says why a session was lost.  The caller
 * handles its latch.
 *
 * Every duration here is measured on the monotonic clock (ZkMono): the
 * probes' times, from which backends judge how far to trust the session,
 * and the worker's own rule that a session not confirmed for a whole
 * timeout is lost.
 */
int
zk_session_wait(long timeout_ms, const char **why)
{
	int			fd = -1;
	int			interest = 0;
	struct timeval tv = {1, 0};
	long		timeout;
	uint32		sock_events = 0;
	WaitEvent	occurred[3];
	int			nev;
	int			rc;
	int			io = 0;
	bool		waiting_round = false;
	ZkMono		now = zk_mono_now();

	if (zk_zh == NULL && now >= reopen_at)
		open_handle(NULL);

	if (phase == ZKP_OLD_ANSWERED ||
		(phase == ZKP_ENDING_OLD && now >= end_old_deadline))
	{
		zk_session_stop();
		open_handle(NULL);
	}

	/*
	 * The probe goes first: sending it can find the connection broken, and
	 * the client then closes the socket, which zookeeper_interest() must
	 * not have told us of yet.
	 */
	if (zk_session_connected() && now >= next_probe_at)
		send_probe(now);

	if (zk_zh && phase != ZKP_CONNECTED && now < retry_at)
	{
		/*
		 * Between two rounds of connection attempts.  The client is not
		 * asked: it would connect at once (it leaves the waiting to us).
		 */
		long		left = (long) ((retry_at - now + 999) / 1000);

		waiting_round = true;
		tv.tv_sec = left / 1000;
		tv.tv_usec = (left % 1000) * 1000L;
	}
	else if (zk_zh)
	{
		rc = zookeeper_interest(zk_zh, &fd, &interest, &tv);
		if (rc == ZINVALIDSTATE && lost_reason == NULL && !ending_old())
			lost_reason = "The ZooKeeper handle became unusable.";
		else if (rc != ZOK)
		{
			/*
			 * The client gave up its connection (nothing heard for two
			 * thirds of the timeout, after the worker was stopped; a ping
			 * it could not send; no address for zklock.hosts) and may have
			 * closed the socket it has just told us of.  Wait on no socket,
			 * briefly, then let the client read what it can (finding a
			 * reset connection) and connect again.
			 */
			fd = -1;
			tv.tv_sec = 0;
			tv.tv_usec = INTEREST_RETRY_MS * 1000L;
			io = ZOOKEEPER_READ;
		}
		else if (fd < 0 && phase != ZKP_CONNECTED)
		{
			/*
			 * The client has tried every host in vain and asks to wait tv
			 * before the next round: wait that long or the backoff,
			 * whichever is longer.
			 */
			long		client_ms = tv.tv_sec * 1000L + tv.tv_usec / 1000;

			backoff_ms = backoff_ms == 0 ? BACKOFF_MIN_MS :
				Min(backoff_ms * 2, BACKOFF_MAX_MS);
			retry_at = ZkMonoPlusMs(now, Max(client_ms, backoff_ms));
			waiting_round = true;
			tv.tv_sec = Max(client_ms, backoff_ms) / 1000;
			tv.tv_usec = (Max(client_ms, backoff_ms) % 1000) * 1000L;
		}
	}

	if (lost_reason)
	{
		session_restart(lost_reason);
		return take_events(why);
	}
	kick_stuck_handshake(fd);

	timeout = Min(tv.tv_sec * 1000L + tv.tv_usec / 1000, 1000L);
	timeout = Max(Min(timeout, timeout_ms), 0);
	if (fd >= 0)
	{
		if (interest & ZOOKEEPER_READ)
			sock_events |= WL_SOCKET_READABLE;
		if (interest & ZOOKEEPER_WRITE)
			sock_events |= WL_SOCKET_WRITEABLE;
	}
	wait_set_prepare(fd, sock_events);
	nev = WaitEventSetWait(wait_set, timeout, occurred, lengthof(occurred),
						   zk_wait_event(ZK_WAIT_WORKER));
	if (unlikely(zk_hop_tracing))
	{
		zk_hop_turn.woke = zk_mono_now();
		zk_hop_turn.read = 0;	/* none read in this turn yet */
	}
	for (int i = 0; i < nev; i++)
	{
		if (occurred[i].events & WL_SOCKET_READABLE)
			io |= ZOOKEEPER_READ;
		if (occurred[i].events & WL_SOCKET_WRITEABLE)
			io |= ZOOKEEPER_WRITE;
	}

	/*
	 * Only zookeeper_process() completes a connection, and the client then
	 * sends every watch it holds in one message (see engine/watches.c): not
	 * connected now, whoever must drop them does so before, and the next
	 * connection is a reconnect (session_changed) even if the client's
	 * watcher hears of the loss only together with it.
	 */
	if (zk_zh && !ending_old() && zoo_state(zk_zh) != ZOO_CONNECTED_STATE)
	{
		if (phase == ZKP_CONNECTED)
			suspend();
		if (zk_session_disconnected_hook)
			zk_session_disconnected_hook();
	}

	/* no interrupt may end the process inside the client's callbacks */
	HOLD_INTERRUPTS();
	if (zk_zh && !waiting_round)
	{
		rc = zookeeper_process(zk_zh, io);

		/*
		 * One zookeeper_process() reads at most one reply from the socket.
		 * Take the others that are already there in this turn, instead of
		 * a whole turn of the loop each: the engine then acts on all of
		 * them at once.  Stop at anything that concerns the connection (the
		 * client may have closed the socket).
		 */
		for (int n = 1; rc == ZOK && (io & ZOOKEEPER_READ) && n < MAX_REPLIES_PER_TURN &&
			 zk_zh != NULL && !state_changed && lost_reason == NULL; n++)
		{
			int			avail = 0;

			if (ioctl(fd, FIONREAD, &avail) != 0 || avail <= 0)
				break;
			rc = zookeeper_process(zk_zh, ZOOKEEPER_READ);
		}
	}
	RESUME_INTERRUPTS();
	if (unlikely(zk_hop_tracing) && (io & ZOOKEEPER_READ))
		zk_hop_turn.read = zk_mono_now();

	/* act on what the callbacks noted */
	zk_credentials_check_refused();
	if (state_changed)
		session_changed();
	if (lost_reason)
		session_restart(lost_reason);
	else if (zk_zh && session_id != 0 && !ending_old() &&
			 zk_mono_now() - confirmed_at >=
			 (int64) zoo_recv_timeout(zk_zh) * 1000)
		session_restart("ZooKeeper did not confirm the session within its timeout.");
	return take_events(why);
}

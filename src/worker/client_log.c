/*-------------------------------------------------------------------------
 *
 * client_log.c
 *	  The ZooKeeper client's own log lines, as the worker passes them on:
 *	  to the server log, rate-limited, and its errors as the last error
 *	  users see.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "shared/protocol.h"
#include "worker/session.h"
#include "worker/session_internal.h"

/* A client log line that repeats is written at most this often (ms). */
#define CLIENT_LOG_REPEAT_MS	10000

/*
 * After this many connections in a row closed right after they were made,
 * last_error and the 08001's hint name the TLS tunnel.
 */
#define CLOSED_ON_CONNECT_HINT	5

/* The lines written lately (a failing connection alternates a few). */
#define CLIENT_LINES		16

static struct
{
	char		text[256];		/* the line, without its time and process */
	ZkMono		at;				/* when it was last written */
	int			left_out;		/* repeats not written since */
}			client_lines[CLIENT_LINES];

static int	closed_on_connect = 0;	/* connections in a row, see client_log */

/*
 * Write one of the client's log lines to the server log at DEBUG1, unless
 * the same line was written less than CLIENT_LOG_REPEAT_MS ago: a
 * connection refused or reset at once is retried every few dozen ms, and
 * each attempt logs the same lines.  text is the line without its time
 * stamp and process.
 */
static void
client_log_line(const char *message, const char *text)
{
	ZkMono		now = zk_mono_now();
	int			slot = 0;

	for (int i = 0; i < CLIENT_LINES; i++)
	{
		if (strncmp(text, client_lines[i].text,
					sizeof(client_lines[i].text) - 1) == 0)
		{
			slot = i;
			break;
		}
		if (client_lines[i].at < client_lines[slot].at)
			slot = i;			/* the oldest, to be replaced */
	}
	if (strncmp(text, client_lines[slot].text,
				sizeof(client_lines[slot].text) - 1) != 0)
	{
		strlcpy(client_lines[slot].text, text, sizeof(client_lines[slot].text));
		client_lines[slot].left_out = 0;
	}
	else if (now - client_lines[slot].at < (int64) CLIENT_LOG_REPEAT_MS * 1000)
	{
		client_lines[slot].left_out++;
		return;
	}
	if (client_lines[slot].left_out > 0)
		elog(DEBUG1, "zookeeper client: %s (the same line came %d more times in the last %d seconds)",
			 message, client_lines[slot].left_out,
			 (int) ((now - client_lines[slot].at) / 1000000));
	else
		elog(DEBUG1, "zookeeper client: %s", message);
	client_lines[slot].at = now;
	client_lines[slot].left_out = 0;
}

/*
 * Route the client's own log lines to the server log at DEBUG1 (repeats
 * rate-limited); an error becomes the last error shown to users
 * (zk_status(), 08001's detail), as a phrase: "HOST:PORT: Connection
 * refused" for a socket's error, else the client's text without its time
 * stamp, thread and source location.
 *
 * A connection closed by the other side before the session handshake is
 * answered ("failed while receiving a server response" while not
 * connected), again and again, is what a TLS tunnel shows when it cannot
 * complete its handshake with ZooKeeper (the TLS error is only in the
 * tunnel's log): after CLOSED_ON_CONNECT_HINT of them in a row, the last
 * error says so, and the 08001's hint too.
 */
void
zk_client_log(const char *message)
{
	const char *text = strstr(message, "ZOO_");
	const char *err;
	const char *why;
	const char *end;

	client_log_line(message, text ? text : message);
	if (text == NULL || strncmp(text, "ZOO_ERROR@", 10) != 0)
		return;
	text = strstr(text, ": ");
	text = text ? text + 2 : message;
	if (strncmp(text, "Socket ", 7) == 0 &&
		(err = strstr(text, "errno=")) != NULL &&
		(why = strchr(err, '(')) != NULL &&
		(end = strchr(why, ')')) != NULL)
	{
		const char *host = text + 7;
		int			hostlen = strcspn(host, " ");

		if (host[0] == '[' && hostlen > 2)
		{
			host++;
			hostlen -= 2;
		}
		if (!zk_session_connected() &&
			strstr(end, "failed while receiving a server response") != NULL)
			closed_on_connect++;
		else if (closed_on_connect > 0)
		{
			closed_on_connect = 0;
			zk_set_closed_on_connect(false);
		}
		if (closed_on_connect >= CLOSED_ON_CONNECT_HINT)
		{
			zk_set_last_error("%.*s: the connection was closed right after it was made, %d times in a row (a TLS tunnel does this when it cannot reach ZooKeeper or its TLS handshake with ZooKeeper fails: see the tunnel's log)",
							  hostlen, host, closed_on_connect);
			zk_set_closed_on_connect(true);
		}
		else
			zk_set_last_error("%.*s: %.*s", hostlen, host,
							  (int) (end - why - 1), why + 1);
	}
	else
		zk_set_last_error("%s", text);
}

/* A connection was made: connections are no longer closed at once. */
void
zk_client_log_connected(void)
{
	closed_on_connect = 0;
	zk_set_closed_on_connect(false);
}

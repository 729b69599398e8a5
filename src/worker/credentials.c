/*-------------------------------------------------------------------------
 *
 * credentials.c
 *	  The worker's credentials for ZooKeeper and the ACL of the nodes it
 *	  creates.
 *
 * Credentials: zklock.auth_file names a file holding "user:password" for
 * ZooKeeper's digest scheme.  It is read whenever a new session is opened
 * and on every reload (a changed path or content opens a new session).  As
 * PostgreSQL does for its SSL key, the file must be a regular file owned by
 * the server's user without group or world access; otherwise, and when it
 * cannot be read or parsed, the worker does not connect at all (connecting
 * without the credentials would create nodes everyone may change) until a
 * reload finds it usable, or keeps its current session when it learns of
 * the problem on a reload.  The credentials never go to the log, to an
 * error message or to zk_status().
 *
 * Identities: through a TLS tunnel (docs/tls.md) ZooKeeper also knows the
 * session by the DN of the tunnel's client certificate (x509).  The ACL of
 * the nodes we create gives all rights to every identity of the session
 * and of zklock.acl_identities, the fleet (zk_session_acl).
 *
 * The session (session.c) asks for the credentials when it opens a new
 * handle (zk_credentials_load, zk_credentials_present) and on a reload
 * (zk_credentials_changed); like every ZooKeeper callback, auth_done only
 * notes a refusal, which zk_credentials_check_refused publishes later.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "storage/fd.h"
#include "utils/memutils.h"

#include "shared/protocol.h"
#include "worker/session.h"
#include "worker/session_internal.h"

static char *session_auth_file = NULL;	/* zklock.auth_file of the session */
static char *session_auth = NULL;	/* the credentials read from it, or "" */
static bool authenticated = false;	/* session_auth was sent */

/* Longest credentials file accepted, in bytes. */
#define AUTH_FILE_MAX	1024

/*
 * The ACL of every node we create, parents included.  Open when neither
 * zklock.auth_file nor zklock.acl_identities is set.  Otherwise all rights
 * for our own identities ("auth": ZooKeeper puts in every identity the
 * session authenticated as, the digest user of zklock.auth_file and the
 * x509 DN of the certificate the TLS tunnel presents), all rights for each
 * identity of zklock.acl_identities (the other instances of the fleet and
 * their Curator or Kazoo peers: ZooKeeper checks DELETE on the parent, so
 * every member must have it on the shared parents), and READ for everyone.
 * A session with no identity at all gets "invalid ACL" from ZooKeeper
 * rather than nodes it could not delete.  The vector points into the
 * setting's parsed value, valid until the next reload: ZooKeeper's client
 * serializes it when the call is made.
 */
struct ACL_vector *
zk_session_acl(void)
{
	static struct ACL *acl = NULL;
	static int	acl_size = 0;
	static struct ACL_vector vector = {0, NULL};
	const ZkAclIdentities *ids = zk_acl_identities();
	int			size = 2 + (ids ? ids->count : 0);
	int			n = 0;

	if (!authenticated && ids == NULL)
		return &ZOO_OPEN_ACL_UNSAFE;
	if (size > acl_size)
	{
		if (acl != NULL)
			pfree(acl);
		acl = MemoryContextAlloc(TopMemoryContext, sizeof(struct ACL) * size);
		acl_size = size;
	}
	acl[n].perms = ZOO_PERM_ALL;
	acl[n].id.scheme = "auth";
	acl[n++].id.id = "";
	for (int i = 0; ids != NULL && i < ids->count; i++)
	{
		acl[n].perms = ZOO_PERM_ALL;
		acl[n].id.scheme = (char *) ids->ids[i].scheme;
		acl[n++].id.id = (char *) ids->ids[i].id;
	}
	acl[n].perms = ZOO_PERM_READ;
	acl[n].id.scheme = "world";
	acl[n++].id.id = "anyone";
	vector.count = n;
	vector.data = acl;
	return &vector;
}

/* Forget credentials: overwrite them before the memory is freed. */
static void
free_secret(char *secret)
{
	if (secret)
	{
		explicit_bzero(secret, strlen(secret));
		pfree(secret);
	}
}

/*
 * Read the credentials from the file named by zklock.auth_file (a relative
 * path is relative to the data directory, the worker's working directory).
 * Returns them palloc'd in TopMemoryContext, "" when the setting is empty,
 * or NULL after logging (at LOG, as PostgreSQL reports configuration files
 * it cannot use on reload) and publishing as last_error why the file
 * cannot be used.  Neither ever shows the file's content.
 */
static char *
read_auth_file(const char *path)
{
	char		buf[AUTH_FILE_MAX + 2];
	struct stat st;
	int			fd;
	int			len;
	int			save_errno;
	char	   *colon;
	char	   *result;

	if (path[0] == '\0')
		return MemoryContextStrdup(TopMemoryContext, "");

	fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		save_errno = errno;
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not open zklock credentials file \"%s\": %m",
						path),
				 errhint("zklock.auth_file must name a file the server's user can read.")));
		zk_set_last_error("could not open zklock credentials file \"%s\": %s",
						  path, strerror(save_errno));
		return NULL;
	}
	if (fstat(fd, &st) != 0)
	{
		save_errno = errno;
		CloseTransientFile(fd);
		errno = save_errno;
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not stat zklock credentials file \"%s\": %m",
						path)));
		zk_set_last_error("could not stat zklock credentials file \"%s\": %s",
						  path, strerror(save_errno));
		return NULL;
	}
	if (!S_ISREG(st.st_mode))
	{
		CloseTransientFile(fd);
		ereport(LOG,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("zklock credentials file \"%s\" is not a regular file",
						path)));
		zk_set_last_error("zklock credentials file \"%s\" is not a regular file",
						  path);
		return NULL;
	}
	if (st.st_uid != geteuid())
	{
		CloseTransientFile(fd);
		ereport(LOG,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("zklock credentials file \"%s\" must be owned by the database server's user",
						path),
				 errdetail("The file is owned by user ID %u; the server runs as user ID %u.",
						   (unsigned int) st.st_uid, (unsigned int) geteuid()),
				 errhint("Give the file to the server's user with chown and make it mode 0600, then reload the configuration.")));
		zk_set_last_error("zklock credentials file \"%s\" is owned by user ID %u, not by the server's user ID %u",
						  path, (unsigned int) st.st_uid,
						  (unsigned int) geteuid());
		return NULL;
	}
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		CloseTransientFile(fd);
		ereport(LOG,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("zklock credentials file \"%s\" has group or world access",
						path),
				 errdetail("The file has permissions %04o; it must have permissions u=rw (0600) or less.",
						   (unsigned int) (st.st_mode & 07777)),
				 errhint("Run \"chmod 0600 %s\", then reload the configuration.",
						 path)));
		zk_set_last_error("zklock credentials file \"%s\" has group or world access (permissions %04o)",
						  path, (unsigned int) (st.st_mode & 07777));
		return NULL;
	}

	len = read(fd, buf, sizeof(buf) - 1);
	save_errno = errno;
	CloseTransientFile(fd);
	if (len < 0)
	{
		errno = save_errno;
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not read zklock credentials file \"%s\": %m",
						path)));
		zk_set_last_error("could not read zklock credentials file \"%s\": %s",
						  path, strerror(save_errno));
		return NULL;
	}
	if (len > AUTH_FILE_MAX)
	{
		explicit_bzero(buf, sizeof(buf));
		ereport(LOG,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("zklock credentials file \"%s\" is too long", path),
				 errdetail("The file must hold one line of at most %d bytes.",
						   AUTH_FILE_MAX)));
		zk_set_last_error("zklock credentials file \"%s\" is too long", path);
		return NULL;
	}
	/* one line: trailing white space and the newline do not count */
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' ||
					   buf[len - 1] == ' ' || buf[len - 1] == '\t'))
		len--;
	buf[len] = '\0';
	colon = strchr(buf, ':');
	if (colon == NULL || colon == buf || memchr(buf, '\0', len) != NULL ||
		strchr(buf, '\n') != NULL)
	{
		explicit_bzero(buf, sizeof(buf));
		ereport(LOG,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("zklock credentials file \"%s\" is not of the form user:password",
						path),
				 errdetail("The file must hold one line: a user name, a colon and the password.")));
		zk_set_last_error("zklock credentials file \"%s\" is not of the form user:password",
						  path);
		return NULL;
	}
	result = MemoryContextStrdup(TopMemoryContext, buf);
	explicit_bzero(buf, sizeof(buf));
	return result;
}

static volatile int auth_rc = ZOK;	/* set by auth_done, acted on later */

static void
auth_done(int rc, const void *data)
{
	if (rc != ZOK && rc != ZCLOSING)
		auth_rc = rc;
}

/* Present the credentials zk_credentials_load read to a new handle. */
void
zk_credentials_present(zhandle_t *zh)
{
	authenticated = false;
	if (session_auth[0] == '\0')
		return;
	authenticated = zoo_add_auth(zh, "digest", session_auth,
								 strlen(session_auth), auth_done, NULL) == ZOK;
}

/*
 * After zookeeper_process(): publish, as the worker's last error, that
 * ZooKeeper refused the credentials, if auth_done noted so.
 */
void
zk_credentials_check_refused(void)
{
	if (auth_rc != ZOK)
	{
		zk_set_last_error("ZooKeeper refused the credentials of zklock.auth_file: %s",
						  zerror(auth_rc));
		auth_rc = ZOK;
	}
}

/*
 * Read zklock.auth_file for a new session: false when it cannot be used
 * (read_auth_file said why), else its credentials are the session's.
 */
bool
zk_credentials_load(void)
{
	char	   *auth = read_auth_file(zklock_auth_file);

	if (auth == NULL)
		return false;
	free_secret(session_auth);
	session_auth = auth;
	if (session_auth_file)
		pfree(session_auth_file);
	session_auth_file = MemoryContextStrdup(TopMemoryContext,
											zklock_auth_file);
	return true;
}

/*
 * Settings were reloaded: read zklock.auth_file again (the worker does
 * so while it has a session of its own).  Returns why the
 * session must move to another identity (a changed path or content), or
 * NULL.  An unusable file is reported and the session kept, as PostgreSQL
 * keeps its SSL configuration when a reload brings a bad one.
 */
const char *
zk_credentials_changed(void)
{
	char	   *auth;
	const char *why = NULL;

	if (session_auth == NULL)
		return NULL;			/* no session was opened with any yet */
	auth = read_auth_file(zklock_auth_file);
	if (auth == NULL)
	{
		ereport(LOG,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("zklock.auth_file was not reloaded"),
				 errdetail("The zklock worker keeps its current ZooKeeper session and credentials.")));
		return NULL;
	}
	if (strcmp(session_auth_file, zklock_auth_file) != 0)
		why = "zklock.auth_file changed.";
	else if (strcmp(session_auth, auth) != 0)
		why = "The credentials in zklock.auth_file changed.";
	free_secret(auth);
	return why;
}

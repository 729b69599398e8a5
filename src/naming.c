/*-------------------------------------------------------------------------
 *
 * naming.c
 *	  Lock names and znode paths.
 *
 * This file owns what a name may be and how it becomes a znode path:
 *
 *	- a lock named N lives at <zklock.root>/N; N is one or more segments
 *	  separated by '/', none empty, none "." or "..", no control characters
 *	  and nothing ZooKeeper refuses in a path, at most ZK_NAME_MAX bytes;
 *	- the nodes we create are Curator's "protected" names,
 *	  _c_<uuid>-<base><10-digit sequence>, so that a lost create reply can
 *	  be recovered by looking for our prefix;
 *	- the children of a lock are ordered by their trailing sequence number,
 *	  which orders Curator's, Kazoo's and our nodes alike.
 *
 * Validation happens in the backend, before anything is sent to ZooKeeper.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "utils/guc.h"

#include "zklock.h"

#define SEQ_DIGITS 10

/*
 * Is this code point one that ZooKeeper refuses in a path?  (Its
 * PathUtils.validatePath: C0 and C1 controls, DEL, surrogates and private
 * use, U+FFF0..U+FFFF.)
 */
static bool
zk_forbidden_char(pg_wchar c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0x9f) ||
		(c >= 0xd800 && c <= 0xf8ff) || (c >= 0xfff0 && c <= 0xffff);
}

/*
 * Check a '/'-separated path (without its leading '/') for empty, "." and
 * ".." segments and forbidden characters.  Returns NULL when it is fine,
 * else a description of the problem (untranslated fragment for errdetail).
 */
static const char *
zk_path_problem(const char *path)
{
	const char *seg = path;
	const char *p;

	for (p = path;; p++)
	{
		if (*p == '/' || *p == '\0')
		{
			size_t		len = p - seg;

			if (len == 0)
				return "an empty path segment";
			if ((len == 1 && seg[0] == '.') ||
				(len == 2 && seg[0] == '.' && seg[1] == '.'))
				return "a path segment \".\" or \"..\"";
			if (*p == '\0')
				break;
			seg = p + 1;
		}
	}

	/* Character check, on the UTF-8 form ZooKeeper sees. */
	{
		const unsigned char *s = (const unsigned char *) path;

		while (*s)
		{
			int			l = pg_utf_mblen(s);

			if (!pg_utf8_islegal(s, l))
				return "invalid UTF-8";
			if (zk_forbidden_char(utf8_to_unicode(s)))
				return "a control or reserved character";
			s += l;
		}
	}
	return NULL;
}

/*
 * Validate a lock name given by a user (already in UTF-8).  Raises an ERROR
 * of class 22 when it cannot be used; nothing is sent to ZooKeeper then.
 */
void
zk_check_name(const char *name)
{
	size_t		len = strlen(name);
	const char *problem;

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock lock name must not be empty")));
	if (len > ZK_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("zklock lock name is too long"),
				 errdetail("The name is %zu bytes long; the limit is %d bytes.",
						   len, ZK_NAME_MAX)));
	if (name[0] == '/' || name[len - 1] == '/')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid zklock lock name \"%s\"", name),
				 errdetail("A name must not begin or end with \"/\"; it is relative to zklock.root.")));
	problem = zk_path_problem(name);
	if (problem)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid zklock lock name"),
				 errdetail("The name contains %s.", problem)));
}

/*
 * GUC check hook for zklock.root: an absolute ZooKeeper path, not "/" and not
 * inside ZooKeeper's own /zookeeper tree.
 */
bool
zk_check_root(char **newval, void **extra, GucSource source)
{
	const char *root = *newval;
	size_t		len = strlen(root);
	const char *problem;

	if (len < 2 || root[0] != '/' || root[len - 1] == '/')
	{
		GUC_check_errdetail("zklock.root must be an absolute ZooKeeper path other than \"/\", without a trailing \"/\".");
		return false;
	}
	if (len > ZK_ROOT_MAX)
	{
		GUC_check_errdetail("zklock.root must be at most %d bytes long.", ZK_ROOT_MAX);
		return false;
	}
	problem = zk_path_problem(root + 1);
	if (problem)
	{
		GUC_check_errdetail("zklock.root contains %s.", problem);
		return false;
	}
	if (strcmp(root, "/zookeeper") == 0 || strncmp(root, "/zookeeper/", 11) == 0)
	{
		GUC_check_errdetail("The /zookeeper tree belongs to ZooKeeper itself.");
		return false;
	}
	return true;
}

/*
 * Write the parent path of a lock's nodes, <root>/<name><suffix>, into buf.
 * Returns the length written.  Names are validated and bounded, so the
 * buffer of ZK_PATH_MAX always suffices.
 */
int
zk_parent_path(char *buf, size_t size, const char *name, const char *suffix)
{
	int			n = snprintf(buf, size, "%s/%s%s", zklock_root, name, suffix);

	Assert(n > 0 && (size_t) n < size);
	return n;
}

/*
 * Write a fresh protected prefix "_c_<uuid>-" (a random version 4 UUID in
 * lowercase, Curator's form) into buf.
 */
void
zk_new_protected_prefix(char *buf, size_t size)
{
	uint8		u[16];

	if (!pg_strong_random(u, sizeof(u)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random UUID")));
	u[6] = (u[6] & 0x0f) | 0x40;
	u[8] = (u[8] & 0x3f) | 0x80;
	snprintf(buf, size,
			 "_c_%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x-",
			 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7],
			 u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* Does this child name end in a sequence number, i.e. is it a lock node? */
static bool
zk_has_sequence(const char *name, size_t len)
{
	if (len < SEQ_DIGITS)
		return false;
	for (size_t i = len - SEQ_DIGITS; i < len; i++)
		if (name[i] < '0' || name[i] > '9')
			return false;
	return true;
}

/*
 * qsort-style comparison of two child names of a lock: lock nodes (names
 * ending in a 10-digit sequence number, ours, Curator's and Kazoo's alike)
 * come first, ordered by that number; anything else after them, by name.
 * The engine ignores the latter: a foreign child can never be a holder.
 */
int
zk_compare_children(const char *a, const char *b)
{
	size_t		la = strlen(a);
	size_t		lb = strlen(b);
	bool		sa = zk_has_sequence(a, la);
	bool		sb = zk_has_sequence(b, lb);

	if (sa && sb)
	{
		int			c = memcmp(a + la - SEQ_DIGITS, b + lb - SEQ_DIGITS, SEQ_DIGITS);

		return c != 0 ? c : strcmp(a, b);
	}
	if (sa != sb)
		return sa ? -1 : 1;
	return strcmp(a, b);
}

/* Is this child a lock node (see zk_compare_children)? */
bool
zk_is_lock_node(const char *name)
{
	return zk_has_sequence(name, strlen(name));
}

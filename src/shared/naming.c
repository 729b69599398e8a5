/*-------------------------------------------------------------------------
 *
 * naming.c
 *	  Names: what a name may be.
 *
 * This file owns what a name may be, given how it becomes a znode path:
 *
 *	- a lock (barrier, group, job, ...) named N lives at <zklock.root>/N; N
 *	  is one or more segments separated by '/', at most ZK_NAME_MAX bytes of
 *	  UTF-8, and nothing ZooKeeper would refuse in a path: no empty, "." or
 *	  ".." segment, no character its PathUtils.validatePath rejects (C0 and
 *	  C1 controls, DEL, U+D800..U+F8FF, U+FFF0..U+FFFF, and everything
 *	  outside the Basic Multilingual Plane, which Java sees as surrogates);
 *	- no segment may look like a node a recipe creates (see nodename.c), so
 *	  that no name can make another lock look held, for zklock, Curator or
 *	  Kazoo;
 *	- the first segment may not be "zklock.instances" (ZK_INSTANCES_DIR:
 *	  the session nodes of the instances' workers, worker/engine/calls.c);
 *	- no segment after the first may be "leases" or "locks" (the children
 *	  of a semaphore in Curator's layout), "ready" (of a double barrier) or
 *	  "claims" (of a job's claims): lock "pool/leases" would otherwise be
 *	  counted as a lease of semaphore "pool";
 *	- a job claim's slot is a node named after its time in UTC (paths.c).
 *
 * Validation happens in the backend, before anything is sent to ZooKeeper
 * (backend/args.c takes a name argument and checks it here), and in the
 * check hooks of zklock.root and zklock.leader_groups.  Both sides turn
 * names into paths with paths.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "utils/guc.h"
#include "utils/varlena.h"

#include "shared/nodename.h"
#include "shared/zklock.h"

/* Segments that name a recipe's own children (see the file header). */
static const char *const reserved_segments[] = {"leases", "locks", "ready", "claims"};

/*
 * Is this code point one that ZooKeeper refuses in a path?  Java sees
 * everything beyond U+FFFF as a surrogate pair, which it refuses.
 */
static bool
zk_forbidden_char(pg_wchar c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0x9f) ||
		(c >= 0xd800 && c <= 0xf8ff) || c >= 0xfff0;
}

/*
 * What is wrong with a '/'-separated path (a name, or zklock.root without
 * its leading '/')?  NULL when nothing; else a sentence for errdetail.
 * With names set, segments are also checked against the recipes' node
 * names and reserved words.
 */
static const char *
zk_path_problem(const char *path, bool names)
{
	const char *seg = path;
	int			nseg = 0;

	for (const char *p = path;; p++)
	{
		if (*p == '/' || *p == '\0')
		{
			size_t		len = p - seg;

			if (len == 0)
				return "A name must not contain an empty segment (\"//\", or \"/\" at its start or end).";
			if ((len == 1 && seg[0] == '.') ||
				(len == 2 && seg[0] == '.' && seg[1] == '.'))
				return "A name must not contain a segment \".\" or \"..\".";
			if (names && zk_looks_like_node(seg, len))
				return "A segment of the name looks like a node that a lock recipe creates.";
			if (names && nseg == 0 && len == strlen(ZK_INSTANCES_DIR) &&
				memcmp(seg, ZK_INSTANCES_DIR, len) == 0)
				return "The first segment \"" ZK_INSTANCES_DIR "\" is reserved: it holds the session nodes of the instances' workers.";
			if (names && nseg > 0)
				for (int i = 0; i < lengthof(reserved_segments); i++)
					if (strlen(reserved_segments[i]) == len &&
						memcmp(seg, reserved_segments[i], len) == 0)
						return "The segments \"leases\", \"locks\", \"ready\" and \"claims\" are reserved after the first: they are the children of semaphores, double barriers and job claims.";
			nseg++;
			if (*p == '\0')
				break;
			seg = p + 1;
		}
	}

	/* characters, on the UTF-8 form ZooKeeper sees */
	for (const unsigned char *s = (const unsigned char *) path; *s;)
	{
		int			l = pg_utf_mblen(s);

		if (!pg_utf8_islegal(s, l))
			return "A name must be valid UTF-8.";
		if (zk_forbidden_char(utf8_to_unicode(s)))
			return "A name must not contain control characters, characters of the ranges U+D800 to U+F8FF and U+FFF0 to U+FFFF, or characters beyond U+FFFF: ZooKeeper refuses them in paths.";
		s += l;
	}
	return NULL;
}

/*
 * The problem with a name given by a user (already in UTF-8), or NULL.
 * *code gets the SQLSTATE to report.
 */
static const char *
zk_name_problem(const char *name, int *code)
{
	size_t		len = strlen(name);

	*code = ERRCODE_INVALID_PARAMETER_VALUE;
	if (len == 0)
		return "A name must not be empty.";
	if (len > ZK_NAME_MAX)
	{
		*code = ERRCODE_STRING_DATA_RIGHT_TRUNCATION;
		return "A name must be at most 1024 bytes long.";
	}
	return zk_path_problem(name, true);
}

/*
 * Validate a name given by a user (already in UTF-8); what says what it
 * names ("lock name", "group name", ...).  Raises an ERROR of class 22 when
 * it cannot be used; nothing is sent to ZooKeeper then.
 */
void
zk_check_name(const char *name, const char *what)
{
	int			code;
	const char *problem = zk_name_problem(name, &code);

	if (problem == NULL)
		return;
	if (code == ERRCODE_STRING_DATA_RIGHT_TRUNCATION)
		ereport(ERROR,
				(errcode(code),
				 errmsg("zklock %s is too long", what),
				 errdetail("The name is %zu bytes long; the limit is %d bytes.",
						   strlen(name), ZK_NAME_MAX)));
	ereport(ERROR,
			(errcode(code),
			 errmsg("invalid zklock %s \"%s\"", what, name),
			 errdetail("%s", problem)));
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
	problem = zk_path_problem(root + 1, false);
	if (problem)
	{
		GUC_check_errdetail("%s", problem);
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
 * GUC check hook for zklock.leader_groups: a comma-separated list of at most
 * ZK_MAX_GROUPS distinct names that follow the name rules.  Names are taken
 * as written (SplitGUCList: blanks around them dropped, no case folding, no
 * truncation; double quotes for a name with a comma), so that
 * zk_is_leader('Jobs') finds group Jobs.  worker/recipes/leader.c splits
 * alike.
 */
bool
zk_check_groups(char **newval, void **extra, GucSource source)
{
	char	   *raw = pstrdup(*newval);
	List	   *groups;
	ListCell   *lc;
	int			code;

	if (!SplitGUCList(raw, ',', &groups))
	{
		GUC_check_errdetail("zklock.leader_groups must be a comma-separated list of names.");
		return false;
	}
	if (list_length(groups) > ZK_MAX_GROUPS)
	{
		GUC_check_errdetail("zklock.leader_groups can name at most %d groups.", ZK_MAX_GROUPS);
		return false;
	}
	foreach(lc, groups)
	{
		const char *problem = zk_name_problem(lfirst(lc), &code);

		if (problem)
		{
			GUC_check_errdetail("Group \"%s\": %s", (char *) lfirst(lc), problem);
			return false;
		}
		for (ListCell *lc2 = lnext(groups, lc); lc2; lc2 = lnext(groups, lc2))
			if (strcmp(lfirst(lc), lfirst(lc2)) == 0)
			{
				GUC_check_errdetail("Group \"%s\" is named twice.", (char *) lfirst(lc));
				return false;
			}
	}
	return true;
}

/*
 * Check hook of zklock.allowed_names: a comma-separated list of patterns,
 * none empty, none longer than a name.  An empty list allows no name.
 */
bool
zk_check_patterns(char **newval, void **extra, GucSource source)
{
	char	   *raw = pstrdup(*newval);
	List	   *patterns;
	ListCell   *lc;

	if (!SplitGUCList(raw, ',', &patterns))
	{
		GUC_check_errdetail("zklock.allowed_names must be a comma-separated list of name patterns.");
		return false;
	}
	foreach(lc, patterns)
	{
		const char *pattern = lfirst(lc);

		if (pattern[0] == '\0')
		{
			GUC_check_errdetail("A pattern of zklock.allowed_names must not be empty.");
			return false;
		}
		if (strlen(pattern) > ZK_NAME_MAX)
		{
			GUC_check_errdetail("A pattern of zklock.allowed_names must be at most %d bytes long.",
								ZK_NAME_MAX);
			return false;
		}
	}
	return true;
}

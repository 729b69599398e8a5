/*-------------------------------------------------------------------------
 *
 * paths.c
 *	  Znode paths of names, and the node names of job claims' slots.
 *
 * A lock (barrier, group, job, ...) named N lives at <zklock.root>/N, and
 * a request's node under <zklock.root>/N<suffix> (kinds.c); a job claim's
 * slot is a node named after its time in UTC.  Both sides build paths
 * here: the worker for its calls, backends for what they show.  Names
 * reach this file already checked (naming.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "shared/zklock.h"

/*
 * Write the path <root>/<name><suffix> into buf.  Returns the length
 * written.  Names are validated and bounded, so ZK_PATH_MAX always
 * suffices.
 */
int
zk_path(char *buf, size_t size, const char *name, const char *suffix)
{
	int			n = snprintf(buf, size, "%s/%s%s", zklock_root, name,
							 suffix ? suffix : "");

	Assert(n > 0 && (size_t) n < size);
	return n;
}

/*
 * The node name of a job claim's slot: its time in UTC, ISO 8601,
 * "2026-11-23T10:00:00Z", with microseconds when it has any
 * ("...T10:00:00.250000Z").  One slot, one name.  The caller has refused
 * infinite slots.
 */
char *
zk_slot_name(TimestampTz slot)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (timestamp2tm(slot, NULL, &tm, &fsec, NULL, NULL) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	if (fsec != 0)
		return psprintf("%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
						tm.tm_year, tm.tm_mon, tm.tm_mday,
						tm.tm_hour, tm.tm_min, tm.tm_sec, (int) fsec);
	return psprintf("%04d-%02d-%02dT%02d:%02d:%02dZ",
					tm.tm_year, tm.tm_mon, tm.tm_mday,
					tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* Parse a slot node name back; false when it is not one. */
bool
zk_parse_slot_name(const char *s, TimestampTz *slot)
{
	struct pg_tm tm;
	int			usec = 0;
	int			n = 0;
	char		z = 0;

	memset(&tm, 0, sizeof(tm));
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon,
			   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
		return false;
	s += n;
	if (*s == '.')
	{
		if (sscanf(s, ".%6d%c", &usec, &z) != 2 || z != 'Z' || strlen(s) != 8)
			return false;
	}
	else if (strcmp(s, "Z") != 0)
		return false;
	return tm2timestamp(&tm, usec, NULL, slot) == 0;
}

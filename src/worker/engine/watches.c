/*-------------------------------------------------------------------------
 *
 * watches.c
 *	  The registry of the engine's watches, by path.
 *
 * Watches are kept in a registry by path: one client-side watcher per path
 * (the same function, no context), so repeated waits never pile up
 * watchers; a watch no part needs any more is removed from the server.  A
 * part relies on one watch at most (on what it waits for), and a holder
 * of a revocable recipe also on the data watch on its own node.  When a
 * watch fires, every part that relied on it looks again (process_fired,
 * engine.c; watch_fired_parts here); the watches die with the session
 * (zk_engine_session_lost).
 *
 * A waiting part may rely on a second watch, its side watch (a data watch
 * on a node its driver's check reads: a semaphore's shared count), in the
 * same registry: it is on the entry's side_parts rather than its parts.
 * When it fires, or is forgotten with the session's watches, the part
 * makes its check again (check_again) before it decides, and that
 * check sets the watch again.
 *
 * The data watch on a holder's own node is not in the registry: its path
 * is the part's node, which nobody else has, so the part itself says
 * whether it relies on the watch and whether the client holds it, and a
 * watch that fired finds its part among the parts by parent
 * (part_of_node).  An instance holding many locks then keeps, per lock,
 * only the client's own record of the watch.  Both kinds share the
 * client's one watcher per path: a removal of the path's data watch that
 * a waiter no longer needs is not sent while a holder relies on it.
 *
 * The client re-registers every watch it holds when it connects again, in
 * one SetWatches message, which the server refuses when it is longer than
 * its jute.maxbuffer (1 MB by default): it drops the connection, and the
 * client connects and sends it again, in a loop, until the session is
 * lost.  With many locks held or waited for, or long names, the watches
 * would not fit.  So the worker never lets the client re-register any: as
 * soon as the connection is lost, before the client connects again, it
 * drops every watch the client holds, on the client only
 * (zk_engine_drop_watches; the server forgot them with the connection),
 * and once connected again every part looks again (zk_engine_connected)
 * and sets again the watches it needs, each with the request that reads
 * what it watches, so nothing that happened meanwhile is missed.  The
 * registry therefore also knows which watches the client holds (at_client),
 * wanted or not, until they fire or are removed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/timestamp.h"

#include "worker/engine/engine_internal.h"

HTAB	   *watches;
HTAB	   *watch_calls;
uint32		watch_epoch = 0;	/* bumped when the session's watches die */
static int	n_at_client = 0;	/* entries the client holds */

/*
 * The parts relying on the data watch on their own node, or whose watch
 * the client holds (ZkPart.own_link).
 */
static dlist_head own_parts = DLIST_STATIC_INIT(own_parts);

/* Does the part rely on the data watch on its own node? */
static inline bool
own_relied(const ZkPart *p)
{
	return p->own == OWN_PENDING || p->own == OWN_SET;
}

/* Does the client hold a data watch on the part's own node? */
static inline bool
own_at_client(const ZkPart *p)
{
	return p->own == OWN_SET || p->own_stale;
}

/* The path of the part's own node, for its data watch. */
static void
own_node_path(ZkPart *p, char *buf)
{
	snprintf(buf, ZK_PATH_MAX, "%s/%s", p->parent, p->node);
}

static uint32
watch_key_hash(const void *key, Size keysize)
{
	const ZkWatchKey *k = key;

	return hash_bytes((const unsigned char *) k->path, strlen(k->path)) ^
		(k->children ? 0x9e3779b9 : 0);
}

static int
watch_key_match(const void *key1, const void *key2, Size keysize)
{
	const ZkWatchKey *k1 = key1;
	const ZkWatchKey *k2 = key2;

	if (k1->children != k2->children)
		return 1;
	return strcmp(k1->path, k2->path);
}

/* The registry and the count of calls in flight that set a watch. */
void
watches_init(void)
{
	watches = engine_hash("zklock watches", sizeof(ZkWatchKey),
						  sizeof(ZkWatch), watch_key_hash, watch_key_match);
	watch_calls = engine_hash("zklock watch calls", sizeof(ZkWatchKey),
							  sizeof(ZkWatchCalls), watch_key_hash,
							  watch_key_match);
}

/* A new entry's key: a copy of the path of its own. */
static void
own_key(ZkWatchKey *key)
{
	key->path = MemoryContextStrdup(engine_context, key->path);
}

/* Remove an entry (of watches or watch_calls) and its copy of the path. */
static void
remove_key(HTAB *htab, ZkWatchKey *key)
{
	char	   *path = (char *) key->path;

	hash_search(htab, key, HASH_REMOVE, NULL);
	pfree(path);
}

/* The registry's entry of a watch, made if new. */
static ZkWatch *
watch_entry(const ZkWatchKey *key)
{
	bool		found;
	ZkWatch    *w = hash_search(watches, key, HASH_ENTER, &found);

	if (!found)
	{
		own_key(&w->key);
		dlist_init(&w->parts);
		dlist_init(&w->side_parts);
		w->at_client = false;
		pg_atomic_fetch_add_u32(&zk_shared->n_watches, 1);
	}
	return w;
}

/* Does a part rely on the watch? */
static bool
wanted(ZkWatch *w)
{
	return !dlist_is_empty(&w->parts) || !dlist_is_empty(&w->side_parts);
}

bool
watch_wanted(const ZkWatchKey *key)
{
	ZkWatch    *w = hash_search(watches, key, HASH_FIND, NULL);

	return w != NULL && wanted(w);
}

static void
remove_entry(ZkWatch *w)
{
	if (w->at_client)
		n_at_client--;
	remove_key(watches, &w->key);
	pg_atomic_fetch_sub_u32(&zk_shared->n_watches, 1);
}

/*
 * The watch fired: the client no longer holds it, and the parts that
 * relied on it (which the caller took) look again.
 */
void
watch_spent(ZkWatch *w)
{
	Assert(!wanted(w));
	remove_entry(w);
}

/*
 * Note that no part needs the watch any more; true if none does.  The
 * registry forgets it unless the client still holds it.
 */
static bool
watch_unused(const ZkWatchKey *key)
{
	ZkWatch    *w = hash_search(watches, key, HASH_FIND, NULL);

	if (w == NULL || wanted(w))
		return false;
	if (!w->at_client)
		remove_entry(w);
	return true;
}

/* A call that set the watch was answered: the client holds it now. */
void
watch_at_client(const ZkWatchKey *key)
{
	ZkWatch    *w = watch_entry(key);

	if (!w->at_client)
		n_at_client++;
	w->at_client = true;
}

/* The client no longer holds the watch (its removal was answered). */
void
watch_left_client(const ZkWatchKey *key)
{
	ZkWatch    *w = hash_search(watches, key, HASH_FIND, NULL);

	if (w == NULL || !w->at_client)
		return;
	w->at_client = false;
	n_at_client--;
	if (!wanted(w))
		remove_entry(w);
}

/*
 * Forget every watch: the parts relying on one no longer do (they set it
 * again when they look again), and the calls setting one no longer count.
 * Those the client holds are removed from it, locally: no request goes to
 * the server (see the file header).
 */
void
forget_watches(void)
{
	HASH_SEQ_STATUS hs;
	ZkWatch    *w;
	ZkWatchCalls *wc;

	hash_seq_init(&hs, watches);
	while ((w = hash_seq_search(&hs)) != NULL)
	{
		if (w->at_client)
			zk_client_drop_watch(w->key.path, w->key.children);
		while (!dlist_is_empty(&w->parts))
		{
			ZkPart	   *p = dlist_container(ZkPart, watch_link,
											dlist_pop_head_node(&w->parts));

			pfree(p->watch_path);
			p->watch_path = NULL;
			p->watch_state = PW_NONE;
		}
		while (!dlist_is_empty(&w->side_parts))
		{
			ZkPart	   *p = dlist_container(ZkPart, side_link,
											dlist_pop_head_node(&w->side_parts));

			side_watch_taken(p);	/* its check sets the watch again */
		}
		remove_key(watches, &w->key);
	}
	while (!dlist_is_empty(&own_parts))
	{
		ZkPart	   *p = dlist_container(ZkPart, own_link,
										dlist_head_node(&own_parts));

		if (own_at_client(p))
		{
			char		path[ZK_PATH_MAX];

			own_node_path(p, path);
			zk_client_drop_watch(path, false);
		}
		own_watch_forget(p);
	}
	pg_atomic_write_u32(&zk_shared->n_watches, 0);
	n_at_client = 0;
	hash_seq_init(&hs, watch_calls);
	while ((wc = hash_seq_search(&hs)) != NULL)
		remove_key(watch_calls, &wc->key);
	watch_epoch++;
}

/*
 * The registry's side of an answered call, before its part hears of it
 * (process_call, engine.c).
 *
 * A watch this call set.  If the part's interest in the path was taken by
 * a watch that fired while this call was out (the fire came first, so the
 * watch this call set is a new one), the part decides from this answer and
 * relies on that new watch: take it on, beside any other part that has
 * registered for the path since.  Otherwise, when no part wants the watch
 * any more, make sure it is removed (the part's unwatch() may have sent the
 * removal already, which the server then applied after this call).  Either
 * way the client holds it now, until it fires or a removal is answered.
 */
void
watch_answered(ZkCall *c)
{
	ZkPart	   *p = c->part;

	if (c->watched && c->watch_epoch == watch_epoch)
		(void) count_watch_call(c->path, c->r.type == ZKC_LIST, -1);
	if (c->watch_set || c->r.tag == T_UNWATCH)
	{
		ZkWatchKey	key;

		key.path = c->path;
		key.children = c->watch_set ? (c->r.type == ZKC_LIST) :
			(c->mode == ZWATCHTYPE_CHILD);
		if (!c->watch_set)
		{
			/* the answer to a removal */
			if (c->r.rc == ZOK || c->r.rc == ZNOWATCHER)
			{
				watch_left_client(&key);
				if (!key.children)
					own_watch_left_client(key.path);
			}
		}
		else if (c->own)
		{
			if (c->watch_epoch == watch_epoch)
				own_watch_set(p);
		}
		else if (c->side)
		{
			/*
			 * A side watch is not taken on: a part whose interest a fire
			 * took makes its check again (see watches.c)
			 */
			watch_at_client(&key);
			if (!watch_wanted(&key))
				remove_watch(&key);
		}
		else
		{
			watch_at_client(&key);
			if (c->watch_epoch == watch_epoch && c->gen == p->gen &&
				!zk_part_dropping(p) &&
				p->watch_state == PW_FIRED)
				watch(p, c->path, key.children);
			else if (!watch_wanted(&key))
				remove_watch(&key);
		}
	}
}

/*
 * A watch fired: the registry's side.  The parts that relied on it go on
 * woken (ZkPart.watch_link) and side_woken (side_link), for the caller to
 * hand to watch_taken() and side_watch_taken() as each looks again; the
 * watch is spent.  Returns the part whose own node's data watch it was, if
 * it relied on it (see own_watch_fired).
 */
ZkPart *
watch_fired_parts(ZkFired *f, dlist_head *woken, dlist_head *side_woken)
{
	ZkPart	   *owner = f->data ? own_watch_fired(f->path) : NULL;

	dlist_init(woken);
	dlist_init(side_woken);
	for (int children = 0; children <= 1; children++)
	{
		ZkWatchKey	key;
		ZkWatch    *w;

		if (!(children ? f->children : f->data))
			continue;
		key.path = f->path;
		key.children = children;
		w = hash_search(watches, &key, HASH_FIND, NULL);
		if (w == NULL)
			continue;
		/* the watch is spent: take its parts, then let them set new ones */
		while (!dlist_is_empty(&w->parts))
			dlist_push_tail(woken, dlist_pop_head_node(&w->parts));
		while (!dlist_is_empty(&w->side_parts))
			dlist_push_tail(side_woken, dlist_pop_head_node(&w->side_parts));
		watch_spent(w);
	}
	return owner;
}

/* A part taken off its watch (it fired, or died with the session). */
void
watch_taken(ZkPart *p)
{
	pfree(p->watch_path);
	p->watch_path = NULL;
	p->watch_state = PW_FIRED;
}

/* A part taken off its side watch: its check is made again. */
void
side_watch_taken(ZkPart *p)
{
	pfree(p->side_path);
	p->side_path = NULL;
	check_again(p);
}

/*
 * The session ended: the part's watches are gone with it; the registry
 * forgets them next (forget_watches).
 */
void
watches_gone(ZkPart *p)
{
	if (p->watch_path)
	{
		dlist_delete(&p->watch_link);
		pfree(p->watch_path);
		p->watch_path = NULL;
		p->watch_state = PW_NONE;
	}
	if (p->side_path)
	{
		dlist_delete(&p->side_link);
		pfree(p->side_path);
		p->side_path = NULL;
	}
}

/*
 * The connection is lost (the worker loop asks before the client may
 * connect again): drop the client's watches so that it re-registers none.
 */
void
zk_engine_drop_watches(void)
{
	if (n_at_client > 0 || !dlist_is_empty(&own_parts))
		forget_watches();
}

/*
 * Count a call that sets a watch on path as in flight (delta 1), or as
 * answered (delta -1; only calls of the current watch epoch).  Returns how
 * many such calls are in flight now.
 */
int
count_watch_call(const char *path, bool children, int delta)
{
	ZkWatchKey	key;
	ZkWatchCalls *wc;
	bool		found;

	key.path = path;
	key.children = children;
	wc = hash_search(watch_calls, &key, delta > 0 ? HASH_ENTER : HASH_FIND,
					 &found);
	if (wc == NULL)
		return 0;
	if (!found)
	{
		own_key(&wc->key);
		wc->n = 0;
	}
	wc->n += delta;
	if (wc->n > 0)
		return wc->n;
	remove_key(watch_calls, &wc->key);
	return 0;
}

/* Note a call sent with a watch. */
void
watch_call_sent(ZkCall *c, bool children)
{
	c->watched = true;
	c->watch_epoch = watch_epoch;
	(void) count_watch_call(c->path, children, 1);
}

/* Register the part's interest in a watch on path (one per part). */
void
watch(ZkPart *p, const char *path, bool children)
{
	ZkWatchKey	key;
	ZkWatch    *w;

	if (p->watch_state == (children ? PW_CHILDREN : PW_DATA) &&
		strcmp(p->watch_path, path) == 0)
		return;
	unwatch(p);
	key.path = path;
	key.children = children;
	w = watch_entry(&key);
	dlist_push_tail(&w->parts, &p->watch_link);
	p->watch_path = MemoryContextStrdup(engine_context, path);
	p->watch_state = children ? PW_CHILDREN : PW_DATA;
}

/*
 * Remove our watch on key's path from the client and the server: all
 * watches of the path, which are ours alone (one watcher per path).  Only
 * that removal reaches the server; removing one watcher of a path only
 * checks the server has the watch and leaves it there until it fires.
 *
 * Not while a call that sets a watch on the path is still out: the server
 * would apply the removal after that call and take away the watch it set,
 * on which its part may rely (a part whose interest a fire took while its
 * listing was out takes on the watch of that listing when it is
 * answered).  The answer of the last such call removes the watch then, if
 * nobody wants it (process_call).
 */
void
remove_watch(const ZkWatchKey *key)
{
	ZkPart	   *owner;

	if (!zk_connected())
		return;
	if (hash_search(watch_calls, key, HASH_FIND, NULL) != NULL)
		return;
	/* a holder relies on the same (data) watch on its own node */
	if (!key->children && (owner = part_of_node(key->path)) != NULL &&
		own_relied(owner))
		return;
	send_unwatch(key);
}

/*
 * The part no longer needs its watch.  When no part does, it is removed
 * from the client and the server, so nothing is left to fire for nobody.
 */
void
unwatch(ZkPart *p)
{
	unwatch_ex(p, true);
}

/*
 * unwatch(), telling the server only when tell_server: a caller that is
 * about to delete a child of the watched parent lets that delete fire the
 * watch instead of removing it with a request of its own.
 */
void
unwatch_ex(ZkPart *p, bool tell_server)
{
	ZkWatchKey	key;

	key.children = (p->watch_state == PW_CHILDREN);
	p->watch_state = PW_NONE;
	if (p->watch_path == NULL)
		return;
	key.path = p->watch_path;
	dlist_delete(&p->watch_link);
	if (watch_unused(&key) && tell_server)
		remove_watch(&key);
	pfree(p->watch_path);
	p->watch_path = NULL;
}

/* Register the part's interest in its side watch, a data watch on path. */
void
side_watch(ZkPart *p, const char *path)
{
	ZkWatchKey	key;
	ZkWatch    *w;

	if (p->side_path && strcmp(p->side_path, path) == 0)
		return;
	side_unwatch(p);
	key.path = path;
	key.children = false;
	w = watch_entry(&key);
	dlist_push_tail(&w->side_parts, &p->side_link);
	p->side_path = MemoryContextStrdup(engine_context, path);
}

/* The part no longer needs its side watch (as unwatch()). */
void
side_unwatch(ZkPart *p)
{
	ZkWatchKey	key;

	if (p->side_path == NULL)
		return;
	key.path = p->side_path;
	key.children = false;
	dlist_delete(&p->side_link);
	if (watch_unused(&key))
		remove_watch(&key);
	pfree(p->side_path);
	p->side_path = NULL;
}

/*
 * A holder that did not ask to be revocable sets the data watch on its own
 * node only once it has held this long: an ordinary lock cycle then costs
 * ZooKeeper a create, a listing and a delete, as Curator's.  A revocation
 * request or a deletion of the node by someone else is seen at most this
 * much later; the reading that sets the watch sees what happened before.
 */
#define OWN_WATCH_DELAY_MS	100

/*
 * Keep the part on own_parts while it relies on its own watch or the
 * client holds it; zk_stats.watches counts them beside the registry's.
 */
static void
own_list(ZkPart *p)
{
	bool		listed = own_relied(p) || p->own_stale;

	if (listed == !dlist_node_is_detached(&p->own_link))
		return;
	if (listed)
	{
		dlist_push_tail(&own_parts, &p->own_link);
		pg_atomic_fetch_add_u32(&zk_shared->n_watches, 1);
	}
	else
	{
		dlist_delete_thoroughly(&p->own_link);
		pg_atomic_fetch_sub_u32(&zk_shared->n_watches, 1);
	}
}

static TimestampTz
own_watch_at(ZkPart *p)
{
	return TimestampTzPlusMilliseconds(p->held_since, OWN_WATCH_DELAY_MS);
}

/*
 * The holders that will want the data watch on their own node, in the
 * order they came to hold, so nearly in the order they will want it (one
 * that came back to the list late waits at most OWN_WATCH_DELAY_MS more):
 * set_due_own_watches() looks at those due, not at every part.
 */
static dlist_head own_due = DLIST_STATIC_INIT(own_due);

/* The part is no longer due an own watch (it has one, or goes). */
void
own_watch_undue(ZkPart *p)
{
	if (p->own == OWN_DUE)
	{
		dlist_delete(&p->own_due_link);
		p->own = OWN_NONE;
	}
}

/* Does the part want the data watch on its own node now? */
static bool
own_watch_wanted(ZkPart *p)
{
	dlist_iter	it;

	if (p->group >= 0 || GetCurrentTimestamp() >= own_watch_at(p))
		return true;
	/* a holder asked to be revocable: at once (its flags are a hint) */
	dlist_foreach(it, &p->holders)
	{
		int			id = dlist_container(ZkOp, link, it.cur) - ops;

		if (ZK_ENTRY(id)->flags & ZKR_REVOCABLE)
			return true;
	}
	return false;
}

/*
 * The data watch on our own node (drivers with "revocable"), beside the
 * part's one watch on what it waits for: Curator's revocation writes
 * "__REVOKE__" into a holder's node, and the node's deletion by someone
 * else shows up here too.  The watch is never removed from the server by
 * request: it goes when it fires, when our node is deleted (which fires
 * it) or with the session.
 */
void
own_watch(ZkPart *p)
{
	char		path[ZK_PATH_MAX];
	ZkCall	   *c;

	if (own_relied(p) || !p->driver->seq.revocable || !zk_part_holds(p) ||
		zk_part_dropping(p) || p->phase != NODE_EXISTS || !zk_connected())
		return;
	if (!own_watch_wanted(p))
	{
		if (p->own != OWN_DUE)
		{
			p->own = OWN_DUE;
			dlist_push_tail(&own_due, &p->own_due_link);
		}
		return;
	}
	own_watch_undue(p);
	own_node_path(p, path);
	p->own = OWN_PENDING;
	own_list(p);
	c = new_call(p, ZKC_GET, T_OWNDATA, path);
	watch_call_sent(c, false);
	c->own = true;
	queue_call(c);
}

/* The part no longer relies on the data watch on its own node. */
void
own_unwatch(ZkPart *p)
{
	if (!own_relied(p))
		return;
	if (p->own == OWN_SET)
		p->own_stale = true;	/* the client still holds it */
	p->own = OWN_NONE;
	own_list(p);
}

/* The call that set the data watch on the part's own node was answered. */
void
own_watch_set(ZkPart *p)
{
	if (p->own == OWN_PENDING)
		p->own = OWN_SET;
	else if (p->own != OWN_SET)
		p->own_stale = true;
	own_list(p);
}

/*
 * A data watch on path fired: the part whose own node it is, if it relied
 * on the watch (the client holds it no more either way), or NULL.
 */
ZkPart *
own_watch_fired(const char *path)
{
	ZkPart	   *p = part_of_node(path);
	bool		relied;

	if (p == NULL || dlist_node_is_detached(&p->own_link))
		return NULL;
	relied = own_relied(p);
	own_watch_forget(p);
	return relied ? p : NULL;
}

/* A removal of path's data watches was answered. */
void
own_watch_left_client(const char *path)
{
	ZkPart	   *p = part_of_node(path);

	if (p != NULL && own_at_client(p))
	{
		if (p->own == OWN_SET)
			p->own = OWN_PENDING;
		p->own_stale = false;
		own_list(p);
	}
}

/* Forget the part's own watch (the session's watches died). */
void
own_watch_forget(ZkPart *p)
{
	if (own_relied(p))
		p->own = OWN_NONE;
	p->own_stale = false;
	own_list(p);
}

/*
 * The part's node name is about to change (it starts over), or the part
 * goes: it relies on its own watch no more, and a watch on its node that
 * the client still holds (its node was not seen deleted: a delete
 * ZooKeeper refused, or a node given up unseen) is left to the registry as
 * an entry no part wants, so that forget_watches() still drops it and its
 * firing is spent there.
 */
void
own_watch_release(ZkPart *p)
{
	if (own_at_client(p) && p->node[0] != '\0')
	{
		char		path[ZK_PATH_MAX];
		ZkWatchKey	key;

		own_node_path(p, path);
		key.path = path;
		key.children = false;
		watch_at_client(&key);
	}
	own_watch_forget(p);
}

/* When the first holder due a data watch on its own node wants it, or 0. */
TimestampTz
own_watch_next_due(void)
{
	if (dlist_is_empty(&own_due))
		return 0;
	return own_watch_at(dlist_container(ZkPart, own_due_link,
										dlist_head_node(&own_due)));
}

/*
 * Set the data watches on their own nodes that holders want by now (run at
 * the end of every turn).  A holder that asked to be revocable has it set
 * when granted (grant, part.c).
 */
void
set_due_own_watches(void)
{
	TimestampTz now;

	if (!zk_connected() || dlist_is_empty(&own_due))
		return;					/* reconnecting advances every part */
	now = GetCurrentTimestamp();
	while (!dlist_is_empty(&own_due))
	{
		ZkPart	   *p = dlist_container(ZkPart, own_due_link,
										dlist_head_node(&own_due));

		if (own_watch_at(p) > now)
			break;
		own_watch_undue(p);
		own_watch(p);
	}
}

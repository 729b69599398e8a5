/*-------------------------------------------------------------------------
 *
 * nodename.h
 *	  The names of the nodes recipes create under a parent, and their order.
 *
 * Plain C (no PostgreSQL headers), so that test/unit can test it alone.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_NODENAME_H
#define ZKLOCK_NODENAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The node forms recipes create.  Only a child whose name has one of these
 * exact forms takes part in a recipe; anything else under a parent is
 * ignored.
 */
typedef enum ZkForm
{
	ZK_FORM_NONE = 0,			/* not a participant of any recipe */
	ZK_FORM_LOCK,				/* _c_<uuid>-lock-<seq>   (mutex, entry) */
	ZK_FORM_WRITE,				/* _c_<uuid>-__WRIT__<seq> */
	ZK_FORM_READ,				/* _c_<uuid>-__READ__<seq> */
	ZK_FORM_LEASE,				/* _c_<uuid>-lease-<seq>  (semaphore) */
	ZK_FORM_LATCH,				/* _c_<uuid>-latch-<seq>  (LeaderLatch) */
	ZK_FORM_KAZOO_LOCK,			/* <32 hex>__lock__<seq>  (Kazoo Lock) */
	ZK_FORM_KAZOO_READ,			/* <32 hex>__rlock__<seq> (Kazoo ReadLock) */
	ZK_NUM_FORMS
} ZkForm;

/* What a child name says about itself. */
typedef struct ZkNodeName
{
	ZkForm		form;
	int32_t		seq;			/* sequence number, wrapped as ZooKeeper does */
	uint64_t	session;		/* session id embedded by zklock, else 0 */
} ZkNodeName;

/* A child of a parent, for sorting. */
typedef struct ZkNodeRef
{
	const char *name;
	ZkNodeName	parsed;
	uint32_t	order;			/* distance from the earliest (zk_sort_nodes) */
} ZkNodeRef;

/* A UUID in canonical form is 36 characters. */
#define ZK_UUID_LEN 36
/* "_c_" + UUID + "-" */
#define ZK_PROTECTED_PREFIX_LEN (3 + ZK_UUID_LEN + 1)

extern const char *zk_form_base(ZkForm form);
extern bool zk_parse_node(const char *name, ZkNodeName *out);
extern bool zk_is_uuid(const char *s, size_t len);
extern bool zk_looks_like_node(const char *segment, size_t len);
extern int	zk_seq_cmp(int32_t a, int32_t b);
extern void zk_sort_nodes(ZkNodeRef *nodes, int n);
extern void zk_make_prefix(char *buf, size_t size, const uint8_t random[8],
						   uint64_t session);

#endif							/* ZKLOCK_NODENAME_H */

/*-------------------------------------------------------------------------
 *
 * args.h
 *	  The arguments of zklock's SQL functions (args.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_ARGS_H
#define ZKLOCK_ARGS_H

#include "fmgr.h"

#include "shared/zklock.h"

extern void zk_check_preloaded(void);
extern char *zk_name_from_text(text *t, const char *what);
extern char *zk_name_arg(FunctionCallInfo fcinfo, int argno, const char *what);
extern char *zk_own_name_arg(FunctionCallInfo fcinfo, int argno,
							 const char *what);
extern void zk_check_name_allowed(const char *name, const char *what);
extern int64 zk_timeout_arg(FunctionCallInfo fcinfo, int argno);
extern void zk_check_session_scope(const char *what, const char *name,
								   const char *instead);
extern const char *zk_xact_variant(ZkKind kind);

#endif							/* ZKLOCK_ARGS_H */

/*-------------------------------------------------------------------------
 *
 * pg_compat.h
 *	  What differs between the PostgreSQL major versions zklock supports.
 *
 * zklock builds against PostgreSQL 15, 16, 17 and 18.  Every difference of
 * the server's C API that zklock meets is bridged here, under zklock's own
 * names, so that the rest of the code has no version conditionals:
 *
 *	ZkMyProcNumber			this backend's index in ProcGlobal->allProcs
 *							(17 replaced PGPROC.pgprocno by MyProcNumber)
 *	ZkCreateWaitEventSet(n)	a wait event set of n events in
 *							TopMemoryContext, released only by
 *							FreeWaitEventSet (17 made the first argument a
 *							ResourceOwner in place of the memory context)
 *	ZkGucMalloc(size)		memory for a setting's "extra", NULL when out of
 *							memory (16 keeps it in a memory context, freed
 *							with guc_free; 15 frees it with free())
 *	ZkJsonLex(json)			a lexer of common/jsonapi.h for a string, its
 *							strings de-escaped (17 added the first argument)
 *	ZK_JSON_ACTION, ZK_JSON_ACTION_DONE
 *							the type a JsonSemAction callback returns, and
 *							how it returns (16 made it JsonParseErrorType)
 *
 * It also includes the header that declares the wait event sets (18 moved
 * them from storage/latch.h to storage/waiteventset.h).  Formats of 64-bit
 * integers need nothing here: "%llx" with an unsigned long long cast works
 * on every version (18 removed INT64_MODIFIER).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_PG_COMPAT_H
#define ZKLOCK_PG_COMPAT_H

#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/memutils.h"

#if PG_VERSION_NUM < 150000
#error "zklock needs PostgreSQL 15 or later"
#endif

#if PG_VERSION_NUM >= 180000
#include "storage/waiteventset.h"
#endif

#if PG_VERSION_NUM >= 170000
#define ZkMyProcNumber MyProcNumber
#define ZkCreateWaitEventSet(nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define ZkMyProcNumber (MyProc->pgprocno)
#define ZkCreateWaitEventSet(nevents) \
	CreateWaitEventSet(TopMemoryContext, (nevents))
#endif

#if PG_VERSION_NUM >= 160000
#define ZkGucMalloc(size) guc_malloc(LOG, (size))
#else
#define ZkGucMalloc(size) malloc(size)
#endif

#if PG_VERSION_NUM >= 170000
#define ZkJsonLex(json) \
	makeJsonLexContextCstringLen(NULL, (json), strlen(json), PG_UTF8, true)
#else
#define ZkJsonLex(json) \
	makeJsonLexContextCstringLen((char *) (json), strlen(json), PG_UTF8, true)
#endif
#if PG_VERSION_NUM >= 160000
#define ZK_JSON_ACTION JsonParseErrorType
#define ZK_JSON_ACTION_DONE return JSON_SUCCESS
#else
#define ZK_JSON_ACTION void
#define ZK_JSON_ACTION_DONE return
#endif

/* a transactional logical message, not flushed; returns its end */
#if PG_VERSION_NUM >= 170000
#define ZkLogLogicalMessage(prefix, msg, size) \
	LogLogicalMessage((prefix), (msg), (size), true, false)
#define ZkTransamVariables TransamVariables
#else
#define ZkLogLogicalMessage(prefix, msg, size) \
	LogLogicalMessage((prefix), (msg), (size), true)
#define ZkTransamVariables ShmemVariableCache
#endif

#endif							/* ZKLOCK_PG_COMPAT_H */

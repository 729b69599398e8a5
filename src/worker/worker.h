/*-------------------------------------------------------------------------
 *
 * worker.h
 *	  The background worker's entry point (worker.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_WORKER_H
#define ZKLOCK_WORKER_H

extern PGDLLEXPORT void zk_worker_main(Datum arg);

#endif							/* ZKLOCK_WORKER_H */

/* pe/world.h — the process world: one rank per process, blocking
 * collectives on host buffers (what pe.distributed's all_reduce, broadcast,
 * ... run on).
 *
 *     pe_world *w;                                   // under mpirun -np N
 *     if (pe_world_new(&w) != PE_OK) { fprintf(stderr, "%s\n", pe_last_error()); return 1; }
 *     float g[3] = {1, 2, 3};
 *     pe_world_allreduce(w, g, 3, PE_DTYPE_FP32);    // g = the sum over the N ranks
 *     int64_t all[2 * N];
 *     int64_t mine[2] = {pe_world_rank(w), 7};
 *     pe_world_allgather(w, mine, all, 2, PE_DTYPE_INT64);  // rank order
 *     pe_world_free(w);                              // before exit
 *
 * The world is MPI_COMM_WORLD (runtime/comm/mpi.c: a duplicate of it, so
 * this traffic never meets the program's own MPI calls or a
 * ParallelExecutor's). Every rank must call the same collectives in the
 * same order; a call that differs between ranks (another collective,
 * dtype, element count or root) fails on every rank with a message naming
 * the rank that differs — an error, not a hang. A rank that never calls
 * makes the others fail after PE_MPI_TIMEOUT seconds (default 600); when a
 * rank process dies, mpirun ends the whole job.
 *
 * Sums (allreduce, reduce) take fp32, fp64, int32, int64 and add in rank
 * order 0..N-1 (bitwise equal on every rank and run to run); broadcast and
 * allgather move bytes and take every dtype.
 *
 * Calls block the calling thread until this rank's part is done; calls
 * from several threads are serialized (one collective at a time). The one
 * exception, pe_world_allreduce_start, returns at once with a work handle
 * (the comm backend's pe_work): the sum moves on the backend's progress
 * thread while the caller goes on, and pe_world_work_wait returns its
 * status. It takes its place in the ranks' order of collectives when it
 * starts, like a blocking call (every rank must start the same
 * collectives in the same order, blocking or not).
 *
 * Ownership: the world is owned by the caller (pe_world_free, before the
 * process exits: PE calls MPI_Finalize at exit when every communicator is
 * freed). Buffers are borrowed for the call.
 *
 * Builds without MPI: pe_world_available() is false and pe_world_new
 * returns PE_ERR_UNSUPPORTED.
 */
#ifndef PE_WORLD_H
#define PE_WORLD_H

#include "pe/dtype.h"
#include "pe/status.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

typedef struct pe_world pe_world;

/* Whether this build of PE has the MPI backend. */
bool pe_world_available(void);

/* This process's rank of MPI_COMM_WORLD; initializes MPI when the program
 * has not (MPI_THREAD_MULTIPLE). *out is owned by the caller. */
pe_status pe_world_new(pe_world **out);

int pe_world_rank(const pe_world *w);
int pe_world_size(const pe_world *w);

/* buf[count] on every rank; afterwards each = the sum over ranks. */
pe_status pe_world_allreduce(pe_world *w, void *buf, int64_t count, pe_dtype dt);
/* buf of root = the sum over ranks; the other ranks' buffers unchanged. */
pe_status pe_world_reduce(pe_world *w, void *buf, int64_t count, pe_dtype dt, int root);
/* every rank's buf[count] = root's. */
pe_status pe_world_broadcast(pe_world *w, void *buf, int64_t count, pe_dtype dt, int root);
/* recv[size * count] = every rank's send[count], in rank order. */
pe_status pe_world_allgather(pe_world *w, const void *send, void *recv, int64_t count, pe_dtype dt);
/* Returns when every rank has called it. */
pe_status pe_world_barrier(pe_world *w);

/* Non-blocking allreduce: starts the sum of buf[count] over the ranks and
 * returns at once; *out (owned by the caller) completes when buf holds the
 * sum (buf is borrowed until then). A call this rank can see is wrong
 * returns the error and *out = NULL. */
typedef struct pe_world_work pe_world_work;
pe_status pe_world_allreduce_start(pe_world *w, void *buf, int64_t count, pe_dtype dt, pe_world_work **out);
/* Blocks until wk is done; its status (pe_last_error() names the call and
 * says what failed, e.g. the rank whose call differed). Waiting again
 * returns the same status. */
pe_status pe_world_work_wait(pe_world_work *wk);
/* Non-blocking: whether wk is done. */
bool pe_world_work_test(pe_world_work *wk);
/* Accepts NULL; a pending work is waited for first (its buffer is the
 * caller's), so free every work before pe_world_free. */
void pe_world_work_free(pe_world_work *wk);

void pe_world_free(pe_world *w); /* accepts NULL */

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

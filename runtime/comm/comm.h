/* runtime/comm/comm.h — collectives across places, behind one interface.
 *
 *     pe_comm *c = pe_comm_inproc_new(n_places, threads);
 *     void *bufs[4] = {g0, g1, g2, g3};                 // one buffer per place
 *     pe_comm_allreduce(c, bufs, numel, PE_DTYPE_FP32); // every buffer = sum
 *     pe_comm_free(c);
 *
 * A backend implements the vtable; the in-process CPU backend
 * (runtime/comm/inproc.c) sums across the places' buffers in one address
 * space, NCCL (runtime/comm/nccl.cu, CUDA builds) across GPUs, and a
 * multi-process backend (MPI) can be added behind the same calls.
 * All sums are in a fixed place order (0, 1, ..., N-1) so results are
 * bitwise reproducible.
 */
#ifndef PE_RUNTIME_COMM_H
#define PE_RUNTIME_COMM_H

#include "pe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_comm pe_comm;

typedef struct pe_comm_ops {
    const char *name;
    /* bufs[i]: numel elements of dtype on place i; afterwards each = sum. */
    pe_status (*allreduce)(pe_comm *c, void *const *bufs, int64_t numel, pe_dtype dt);
    /* bufs[root] = sum over places; other buffers unchanged. */
    pe_status (*reduce)(pe_comm *c, void *const *bufs, int64_t numel, pe_dtype dt, int root);
    /* every buffer = bufs[root]. */
    pe_status (*broadcast)(pe_comm *c, void *const *bufs, int64_t numel, pe_dtype dt, int root);
    void (*free)(pe_comm *c);
} pe_comm_ops;

struct pe_comm {
    const pe_comm_ops *ops;
    int n_places;
};

/* In-process CPU collectives over n_places buffers, using up to `threads`
 * OpenMP threads per call (reduce-scatter + all-gather by chunks). Owned by
 * caller (pe_comm_free). */
pe_comm *pe_comm_inproc_new(int n_places, int threads);

/* The backend for places[0..n) (runtime/comm/comm.c): all CPU, or a single
 * place -> in-process (`threads` as above; with one place nothing is read or
 * written); 2+ CUDA places, distinct visible devices -> NCCL (CUDA builds
 * with NCCL; buffer i is device memory of places[i]). Otherwise NULL
 * and pe_last_error() says why. Owned by caller (pe_comm_free). */
pe_comm *pe_comm_new_for_places(const pe_place *places, int n, int threads);

#ifdef PE_WITH_NCCL
/* NCCL collectives over devices[0..n) (distinct, visible), rank i on
 * devices[i], on each device's PE stream (pe_cuda_stream); every call
 * returns when the result is in place. NULL + message on failure. */
pe_comm *pe_comm_nccl_new(const int *devices, int n);
#endif

static inline pe_status pe_comm_allreduce(pe_comm *c, void *const *bufs, int64_t numel, pe_dtype dt) {
    return c->ops->allreduce(c, bufs, numel, dt);
}
static inline pe_status pe_comm_reduce(pe_comm *c, void *const *bufs, int64_t numel, pe_dtype dt, int root) {
    return c->ops->reduce(c, bufs, numel, dt, root);
}
static inline pe_status pe_comm_broadcast(pe_comm *c, void *const *bufs, int64_t numel, pe_dtype dt, int root) {
    return c->ops->broadcast(c, bufs, numel, dt, root);
}
static inline void pe_comm_free(pe_comm *c) {
    if (c) c->ops->free(c);
}

#ifdef __cplusplus
}
#endif
#endif

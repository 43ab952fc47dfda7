/* runtime/comm/comm.h — collectives between ranks, behind one backend
 * interface, with asynchronous work handles (c10d's ProcessGroup + Work).
 *
 *     // four in-process ranks, each driven by its own thread
 *     pe_comm *rank[4];
 *     pe_comm_inproc_world_new(4, threads, rank);
 *     ...                                            // on the thread of rank r:
 *     pe_work *w;
 *     if (pe_comm_allreduce(rank[r], grad, numel, PE_DTYPE_FP32, tag, &w) != PE_OK) return error;
 *     pe_work_on_done(w, grad_ready, ctx);           // or pe_work_test / pe_work_wait
 *     ...
 *     pe_status st = pe_work_wait(w);                // st + pe_last_error() say what failed
 *     pe_work_free(w);
 *     for (int r = 0; r < 4; r++) pe_comm_free(rank[r]);
 *
 *     // one thread driving every place of this process (the executor)
 *     pe_comm_group *g = pe_comm_new_for_places(places, n, threads);
 *     void *bufs[4] = {g0, g1, g2, g3};              // one buffer per place
 *     pe_group_allreduce(g, bufs, numel, PE_DTYPE_FP32);  // every buffer = sum
 *     pe_group_free(g);
 *
 * A pe_comm is ONE rank's view of a group of `size` ranks. Each collective
 * call returns at once with a pe_work that completes when this rank's part
 * is done. The ranks' calls of one collective are matched by a caller-chosen
 * 64-bit tag (every rank passes the same tag; calls issued from different
 * threads in different orders still match; a tag can be reused once the
 * collective has completed on every rank; NCCL and MPI ranks match by
 * issue order instead, see pe_coll_args). All ranks of a tag must pass the
 * same op, dtype, count and root, or every rank's work fails with a message
 * naming the rank that differs. Argument errors a rank can see alone (bad
 * root, bad dtype) are returned by the call itself, and the other ranks'
 * works of that tag fail too instead of waiting forever.
 *
 * Sums (allreduce, reduce, reduce_scatter) take fp32, fp64, int32, int64;
 * broadcast and allgather move bytes, so they take every dtype.
 *
 * Backends (a vtable, pe_comm_ops): in-process ranks sharing one address
 * space (runtime/comm/inproc.c), two-level composition of places inside a
 * process and processes (runtime/comm/hier.c), NCCL (runtime/comm/nccl.cu,
 * CUDA builds), MPI (runtime/comm/mpi.c, one rank per process; builds
 * with MPI). The in-process and MPI backends and the two-level composition
 * over them sum in a fixed rank order (0, 1, ..., N-1), so their results
 * are bitwise reproducible.
 *
 * Ownership: a pe_comm is owned by the caller (pe_comm_free); works are
 * owned by the caller (pe_work_free, allowed before completion: the work
 * then frees itself when done, and its callback still runs) and must be
 * freed before the pe_comm that made them. Buffers are borrowed until the
 * work completes.
 */
#ifndef PE_RUNTIME_COMM_H
#define PE_RUNTIME_COMM_H

#include "pe/tensor.h"

#include <pthread.h>
#include <stdbool.h>
#ifndef __cplusplus
#include <stdatomic.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_comm pe_comm;
typedef struct pe_work pe_work;
typedef struct pe_comm_group pe_comm_group;

/* ---- rank API ------------------------------------------------------------ */

int pe_comm_rank(const pe_comm *c);
int pe_comm_size(const pe_comm *c);
const char *pe_comm_backend(const pe_comm *c); /* "inproc", "hier", "nccl", "mpi"; borrowed */

/* Each returns PE_OK and *out = a work (owned by the caller), or an error
 * (and *out = NULL) for arguments this rank can see are wrong. */

/* buf: count elements on every rank; afterwards each = the sum over ranks. */
pe_status pe_comm_allreduce(pe_comm *c, void *buf, int64_t count, pe_dtype dt, uint64_t tag, pe_work **out);
/* The same with another reduction (pe_red: sum, max, min, prod). */
typedef enum pe_red { PE_RED_SUM = 0, PE_RED_MAX, PE_RED_MIN, PE_RED_PROD, PE_RED_COUNT } pe_red;
const char *pe_red_name(pe_red red); /* "sum", "max", "min", "prod" */
pe_status pe_comm_allreduce_red(pe_comm *c, void *buf, int64_t count, pe_dtype dt, pe_red red, uint64_t tag,
                                pe_work **out);
/* buf of root = the sum over ranks; other ranks' buffers unchanged. */
pe_status pe_comm_reduce(pe_comm *c, void *buf, int64_t count, pe_dtype dt, int root, uint64_t tag,
                         pe_work **out);
pe_status pe_comm_reduce_red(pe_comm *c, void *buf, int64_t count, pe_dtype dt, int root, pe_red red, uint64_t tag,
                             pe_work **out);
/* every rank's buf = root's buf. */
pe_status pe_comm_broadcast(pe_comm *c, void *buf, int64_t count, pe_dtype dt, int root, uint64_t tag,
                            pe_work **out);
/* recv[size * count] = every rank's send[count], in rank order. send may be
 * NULL: in place, this rank's part already at recv + rank * count. */
pe_status pe_comm_allgather(pe_comm *c, const void *send, void *recv, int64_t count, pe_dtype dt, uint64_t tag,
                            pe_work **out);
/* send[size * count]; recv[count] of rank r = the sum over ranks of chunk r
 * (elements r*count .. r*count+count). */
pe_status pe_comm_reduce_scatter(pe_comm *c, const void *send, void *recv, int64_t count, pe_dtype dt, uint64_t tag,
                                 pe_work **out);
/* Uneven chunks: counts[0..size) (the same array contents on every rank);
 * chunk r starts at counts[0] + ... + counts[r-1]. */
pe_status pe_comm_reduce_scatterv(pe_comm *c, const void *send, void *recv, const int64_t *counts, pe_dtype dt,
                                  uint64_t tag, pe_work **out);
/* Completes when every rank has called it with this tag. */
pe_status pe_comm_barrier(pe_comm *c, uint64_t tag, pe_work **out);

void pe_comm_free(pe_comm *c); /* accepts NULL; every work of c must be freed first */

/* ---- work handles ---------------------------------------------------------- */

typedef void (*pe_work_cb)(pe_work *w, pe_status st, void *user);

/* Blocks until w is done; its status (and pe_last_error() on this thread). */
pe_status pe_work_wait(pe_work *w);
/* Non-blocking: true when done (*st, when not NULL, gets its status). */
bool pe_work_test(pe_work *w, pe_status *st);
/* cb(w, status, user) exactly once: now on this thread when w is done
 * already, otherwise on whichever thread completes it (keep it short; do
 * not wait on other works inside it; NCCL works call it from a CUDA host
 * function, where no CUDA call is allowed). One callback per work. The
 * message of a failed work is pe_work_message(w). */
void pe_work_on_done(pe_work *w, pe_work_cb cb, void *user);
/* The message of a failed work ("" while pending or on success). Borrowed. */
const char *pe_work_message(const pe_work *w);
void pe_work_free(pe_work *w); /* accepts NULL; a pending work frees itself when done */

/* ---- backends -------------------------------------------------------------- */

typedef enum pe_coll {
    PE_COLL_ALLREDUCE,
    PE_COLL_REDUCE,
    PE_COLL_BROADCAST,
    PE_COLL_ALLGATHER,
    PE_COLL_REDUCE_SCATTER,
    PE_COLL_BARRIER,
    PE_COLL_COUNT
} pe_coll;

const char *pe_coll_name(pe_coll op); /* "allreduce", ... */

/* One rank's call, as a backend sees it (already checked against this
 * rank's view: dtype, root, counts, non-NULL buffers — unless err is set).
 * The NCCL backend ignores the tag for matching: NCCL pairs a
 * communicator's collectives by issue order, so its ranks must issue in
 * the same order (a group does). */
typedef struct pe_coll_args {
    pe_coll op;
    const void *send;      /* allgather, reduce_scatter: the input (never NULL here) */
    void *recv;            /* the buffer written (allreduce/reduce/broadcast: in place) */
    int64_t count;         /* allgather: per rank; reduce_scatter: this rank's chunk; else the buffer */
    const int64_t *counts; /* reduce_scatter: chunk of every rank (borrowed for the start call only) */
    int64_t total;         /* reduce_scatter: sum of counts; allgather: size * count */
    pe_dtype dt;
    int root;
    uint64_t tag;
    pe_red red;            /* allreduce, reduce, reduce_scatter: how elements combine (0 = sum) */
    /* != PE_OK: this rank's call failed its own checks (err_msg says why);
     * a backend that can tell the other ranks fails their works too, and
     * the frontend frees the returned work. */
    pe_status err;
    const char *err_msg;
} pe_coll_args;

typedef struct pe_comm_ops {
    const char *name;
    /* Starts a's collective on c; *out = a pending or done work. A non-OK
     * return means nothing was started. */
    pe_status (*start)(pe_comm *c, const pe_coll_args *a, pe_work **out);
    /* Optional: bracket the calls of several ranks issued by one thread
     * (NCCL's ncclGroupStart/End); NULL when not needed. */
    pe_status (*group_begin)(pe_comm *c);
    pe_status (*group_end)(pe_comm *c);
    void (*free)(pe_comm *c);
} pe_comm_ops;

struct pe_comm {
    const pe_comm_ops *ops;
    int rank, size;
};

/* A work: backends allocate it with pe_work_new (or a pool of their own)
 * and finish it exactly once with pe_work_complete. */
typedef struct pe_work_ops {
    /* Optional: poll for completion (may call pe_work_complete). */
    void (*poll)(pe_work *w);
    /* Optional: block until complete (must end in pe_work_complete);
     * NULL: wait on the work's condition variable. */
    void (*wait)(pe_work *w);
    /* Called once when the last reference is dropped (return to a pool). */
    void (*release)(pe_work *w);
} pe_work_ops;

#ifndef __cplusplus /* C++ backends (nccl.cu) use the functions only */
struct pe_work {
    const pe_work_ops *ops;
    void *backend; /* backend data */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int done;
    _Atomic int refs;
    pe_status st;
    pe_work_cb cb;
    void *cb_user;
    bool cb_called;
    char msg[512];
};
#endif

/* Initializes w (state pending, 2 references: the caller's and the
 * completion's). For pooled works: call on every reuse after pe_work_init_once. */
void pe_work_init_once(pe_work *w, const pe_work_ops *ops);
void pe_work_reset(pe_work *w);
void pe_work_destroy(pe_work *w); /* the mutex and condvar */
/* malloc'd work released with free() (or ops->release). NULL on out of memory. */
pe_work *pe_work_new(const pe_work_ops *ops);
/* The same with its backend pointer set; pe_work_backend reads it back. */
pe_work *pe_work_new_for(const pe_work_ops *ops, void *backend);
void *pe_work_backend(const pe_work *w);
/* One more reference (dropped by pe_work_free), for a backend that needs
 * the work alive past its completion. */
void pe_work_retain(pe_work *w);
/* Finishes w with st (message msg when st != PE_OK), runs the callback,
 * wakes waiters, drops the completion's reference. Exactly once per work. */
void pe_work_complete(pe_work *w, pe_status st, const char *msg);
/* A work already complete with st (and the current pe_last_error() as its
 * message when st != PE_OK). NULL on out of memory. */
pe_work *pe_work_new_done(pe_status st);

/* d[0..n) += s[0..n) elementwise, for the sum dtypes (fp32, fp64, int32,
 * int64); each element one add, so a caller's order of adds is the order. */
void pe_comm_add(void *d, const void *s, int64_t n, pe_dtype dt);
/* d[0..n) = red(d, s) elementwise (sum: pe_comm_add; max, min, prod;
 * integer products wrap). */
void pe_comm_combine(void *d, const void *s, int64_t n, pe_dtype dt, pe_red red);
/* d[0..n) = red(a, s) elementwise: pe_comm_combine on a copy of a, bit for
 * bit, without the copy. d may be a or s, not a partial overlap of either. */
void pe_comm_combine_to(void *d, const void *a, const void *s, int64_t n, pe_dtype dt, pe_red red);

/* "inproc rank 1/4: allreduce of 7 float32 elements (tag 3)" into buf. */
const char *pe_coll_desc(const pe_comm *c, const pe_coll_args *a, char *buf, size_t size);

/* ---- in-process backend ---------------------------------------------------- */

/* n ranks sharing one rendezvous table: ranks_out[r] = rank r of n. The rank
 * of a tag's collective that arrives last runs it in its own thread, with
 * up to `threads` OpenMP threads, and completes every rank's work; earlier
 * ranks' calls return a pending work at once. Each rank is owned by the
 * caller (pe_comm_free; the table goes with the last). */
pe_status pe_comm_inproc_world_new(int n, int threads, pe_comm **ranks_out);

/* ---- two-level composition (runtime/comm/hier.c) ----------------------------- */

/* The n_places places of this process over `outer` (borrowed, must outlive
 * them; one rank per process, rank = this process, size = processes):
 * ranks_out[p] has global rank outer_rank * n_places + p of
 * outer_size * n_places. Every collective of the rank API. Sums: per
 * element, the places of a process left to right in place order, then the
 * processes' sums left to right in process order — bitwise repeatable for
 * a given layout, the same bits on every rank, and with one place per
 * process the sequential sum in global rank order. Each collective makes
 * exactly one call on outer (from place 0), in the order the collectives'
 * first inner step completes (hier.c says how). */
pe_status pe_comm_hier_new(pe_comm *outer, int n_places, int threads, pe_comm **ranks_out);

/* ---- a group: one thread driving every place of this process ---------------- */

/* The ranks of one in-process world (or NCCL ranks of this process), driven
 * together: each call issues every rank's part with one tag and waits.
 * Safe to call from several threads at once (each call gets its own tag). */
#ifndef __cplusplus
struct pe_comm_group {
    const pe_comm_ops *ops; /* the ranks' backend (ops->name: "inproc", "nccl") */
    int n_places;
    pe_comm **ranks;
    _Atomic uint64_t next_tag;
    /* Optional whole-group fast path (in-process: run the collective on the
     * calling thread, no rendezvous): 1 = handled. sends: allgather's inputs
     * (NULL for the in-place collectives). */
    int (*direct)(pe_comm_group *g, const pe_coll_args *a, const void *const *sends, void *const *bufs,
                  pe_status *st);
};
#endif

/* In-process collectives over n_places buffers, using up to `threads`
 * OpenMP threads per call. Owned by caller (pe_group_free). */
pe_comm_group *pe_comm_inproc_new(int n_places, int threads);
/* A group over ranks[0..n) (ownership transferred: freed with the group). */
pe_comm_group *pe_comm_group_new(pe_comm **ranks, int n);

/* The backend for places[0..n) (runtime/comm/comm.c): all CPU, or a single
 * place -> in-process (`threads` as above; with one place nothing is read or
 * written, but an allgather copies its input into its output with memcpy:
 * host memory only); 2+ CUDA places, distinct visible devices -> NCCL (CUDA builds
 * with NCCL; buffer i is device memory of places[i]). Otherwise NULL
 * and pe_last_error() says why. Owned by caller (pe_group_free). */
pe_comm_group *pe_comm_new_for_places(const pe_place *places, int n, int threads);

/* bufs[i]: numel elements of dtype on place i; afterwards each = sum. */
pe_status pe_group_allreduce(pe_comm_group *g, void *const *bufs, int64_t numel, pe_dtype dt);
/* Roots are ranks of the group's world: its places, or across processes
 * (a group over two-level ranks) global ranks, whose buffer may be in
 * another process. */
/* bufs[root] = sum over places; other buffers unchanged. */
pe_status pe_group_reduce(pe_comm_group *g, void *const *bufs, int64_t numel, pe_dtype dt, int root);
/* every buffer = bufs[root]. */
pe_status pe_group_broadcast(pe_comm_group *g, void *const *bufs, int64_t numel, pe_dtype dt, int root);
/* Non-blocking: one work (owned by the caller) done when every place's is.
 * op: PE_COLL_ALLREDUCE, PE_COLL_REDUCE or PE_COLL_BROADCAST. */
pe_status pe_group_start(pe_comm_group *g, pe_coll op, void *const *bufs, int64_t numel, pe_dtype dt, int root,
                         pe_work **out);
/* Non-blocking reduce-scatter over the group's world (counts[0..size) per
 * rank, size = pe_comm_size of a rank): recv[i] of place i = the sum over
 * every rank of its rank's chunk of send. recv[i] may be send[i] + the
 * offset of its own chunk (in place) with the in-process and two-level
 * backends. */
pe_status pe_group_start_reduce_scatterv(pe_comm_group *g, const void *const *send, void *const *recv,
                                         const int64_t *counts, pe_dtype dt, pe_work **out);
/* Non-blocking all-gather in place: recv[i] holds size * count elements,
 * rank r's part at r * count (each place's own filled in). Places of one
 * process may pass the same buffer with the in-process and two-level
 * backends. */
pe_status pe_group_start_allgather(pe_comm_group *g, void *const *recv, int64_t count, pe_dtype dt, pe_work **out);
/* The general form: a->op (allreduce, reduce, broadcast or allgather),
 * a->count (allgather: elements per place), a->dt, a->root (a rank of
 * the group's world), a->red; bufs[i] what place i's rank writes
 * (allgather: size * count elements), sends[i] allgather's input (NULL:
 * in place, or not an allgather). out == NULL: blocks (the in-process
 * group runs it on the calling thread) and returns its status; otherwise
 * *out = one work (owned by the caller). */
pe_status pe_group_run(pe_comm_group *g, const pe_coll_args *a, const void *const *sends, void *const *bufs,
                       pe_work **out);
void pe_group_free(pe_comm_group *g); /* accepts NULL */

#ifdef PE_WITH_MPI
/* One rank per process over MPI (runtime/comm/mpi.c): rank and size of
 * MPI_COMM_WORLD (duplicated: PE's traffic never meets the program's).
 * Initializes MPI (MPI_THREAD_MULTIPLE) when the program has not; then PE
 * calls MPI_Finalize at exit, once. The ranks must issue their collectives
 * in the same order (as NCCL); a call that differs between the ranks
 * (another op, count, root, dtype or tag) fails on every rank. Sums are
 * in rank order 0..N-1, bitwise equal on every rank and run to run.
 * Environment: PE_MPI_CHUNK_BYTES (pieces, default 4 MiB),
 * PE_MPI_WINDOW (chunks in flight, default 4), PE_MPI_TIMEOUT (seconds
 * without progress before every pending work fails, default 600),
 * PE_MPI_SHM (1, the default: when all ranks run on one machine, allreduce
 * goes through a shared window of PE_MPI_CHUNK_BYTES per rank; 0 on any
 * rank: MPI's transfers only). Every rank must see the same values.
 * Owned by the caller (pe_comm_free, before exit). */
pe_status pe_comm_mpi_new(pe_comm **out);
#endif

#ifdef PE_WITH_NCCL
/* NCCL group over devices[0..n) (distinct, visible) of this process, rank i
 * on devices[i] (ncclCommInitRank of each, inside one ncclGroupStart/End).
 * NULL + message on failure. */
pe_comm_group *pe_comm_nccl_new(const int *devices, int n);
/* NCCL unique id for pe_comm_nccl_rank_new (send it to every process). */
typedef struct pe_nccl_id {
    char bytes[128];
} pe_nccl_id;
pe_status pe_nccl_get_id(pe_nccl_id *id);
/* Rank `rank` of `size` on `device`, for ranks spanning processes (every
 * rank calls it with the same id; it blocks until all have). */
pe_status pe_comm_nccl_rank_new(const pe_nccl_id *id, int rank, int size, int device, pe_comm **out);
/* Ranks first..first+n-1 of `size`, rank first+i on devices[i], made
 * together (ncclGroupStart/End): the GPUs of one process in a world that
 * spans processes. Every process calls it with the same id. out[0..n) are
 * owned by the caller (pe_comm_free each, or pe_comm_group_new). */
pe_status pe_comm_nccl_ranks_new(const pe_nccl_id *id, int first, int n, int size, const int *devices,
                                 pe_comm **out);
#endif

#ifdef __cplusplus
}
#endif
#endif

/* runtime/comm/nccl.cu — the NCCL backend: one rank per GPU place.
 *
 * Each rank is one NCCL communicator made by ncclCommInitRank from a
 * unique id the caller passes in, so ranks can span processes
 * (pe_comm_nccl_rank_new, pe_comm_nccl_ranks_new: the ranks of this
 * process in a world of several, global rank = trainer x GPUs + GPU);
 * pe_comm_nccl_new makes a world of this process's GPUs. The ranks of one
 * process are made at once (ncclGroupStart/End around the
 * ncclCommInitRank calls) and share one issue lock.
 *
 * A call never synchronizes a stream. The collective runs on the rank's
 * own communication stream, which first waits on an event recorded on the
 * place's compute stream (pe_cuda_stream: the kernels that produced the
 * data), so communication overlaps later compute. After the collective a
 * "done" event is recorded and a host function is queued behind it:
 *   - pe_work_test polls cudaEventQuery(done),
 *   - pe_work_wait is cudaEventSynchronize(done) plus ncclCommGetAsyncError,
 *   - callbacks run from the host function (cudaLaunchHostFunc): no
 *     progress thread to own, start or stop, and the callback runs as soon
 *     as the stream passes the collective. The price: a callback must not
 *     call CUDA (the scheduler's pe_sched_done only queues handles).
 * Whichever of the three sees the end first completes the work (an atomic
 * flag makes that exactly once). Works and their events are pooled per
 * rank; a work released on the host-function thread only goes back to the
 * pool (no CUDA call there).
 *
 * Matching: NCCL matches a communicator's collectives by issue order, not
 * by tag, so every rank must issue them in the same order; the tag only
 * names the call in messages. A group issues all its ranks' parts inside
 * ncclGroupStart/End under one mutex, so group calls from several threads
 * keep one order on every rank. Inside a group the events and host
 * functions are queued after ncclGroupEnd (NCCL launches at the end).
 *
 * Determinism: NCCL's ring/tree sum order is fixed for a topology, device
 * count, size and NCCL version: reproducible run to run, but not bitwise
 * equal to the in-process backend's rank-order sum. Broadcast and
 * allgather move bytes (every dtype); sums take fp32, fp64, int32, int64.
 * Uneven reduce_scatter is one ncclReduce per chunk in a group.
 */
#include "runtime/comm/comm.h"
#include "runtime/cuda/cuda_internal.h"

#include <atomic>
#include <new>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

struct nccl_rank;

/* Shared by the ranks of one group (one per rank otherwise). */
struct nccl_shared {
    pthread_mutex_t issue_mu;
    std::atomic<int> refs;
    struct nccl_work *pending; /* issued inside the current group */
};

struct nccl_work {
    nccl_work *next;
    pe_work *w;
    nccl_rank *r;
    cudaEvent_t done_ev;
    std::atomic<int> finished;
    char desc[192];
};

struct nccl_rank {
    pe_comm base; /* first: pe_comm * and nccl_rank * convert both ways */
    nccl_shared *sh;
    ncclComm_t comm;
    int device;
    cudaStream_t compute, stream;
    cudaEvent_t ready_ev;
    int *scratch; /* one int on the device: the barrier's allreduce */
    pthread_mutex_t pool_mu;
    nccl_work *pool;
};

thread_local nccl_shared *tls_in_group = nullptr;

/* NCCL's code string plus its last detailed message, when it has one. */
void nccl_message(ncclResult_t r, char *buf, size_t size) {
    const char *detail = ncclGetLastError(nullptr);
    snprintf(buf, size, "%s%s%s%s", ncclGetErrorString(r), detail && *detail ? " (" : "",
             detail && *detail ? detail : "", detail && *detail ? ")" : "");
}

bool nccl_sum_dtype(pe_dtype dt, ncclDataType_t *out) {
    switch (dt) {
    case PE_DTYPE_FP32: *out = ncclFloat32; return true;
    case PE_DTYPE_FP64: *out = ncclFloat64; return true;
    case PE_DTYPE_INT32: *out = ncclInt32; return true;
    case PE_DTYPE_INT64: *out = ncclInt64; return true;
    default: return false;
    }
}

void finish(nccl_work *nw, pe_status st, const char *msg) {
    if (nw->finished.exchange(1) == 0) pe_work_complete(nw->w, st, msg);
}

/* Host function behind the done event: no CUDA calls allowed here. It
 * holds a reference of its own, so a work that poll or wait completed
 * first is not back in the pool (and reused) before this has run. */
void CUDART_CB host_done(void *arg) {
    nccl_work *nw = static_cast<nccl_work *>(arg);
    finish(nw, PE_OK, nullptr);
    pe_work_free(nw->w);
}

/* A work whose host function was never queued: complete it and drop the
 * reference the host function would have dropped. */
void fail_unarmed(nccl_work *nw, pe_status st, const char *msg) {
    finish(nw, st, msg);
    pe_work_free(nw->w);
}

void work_poll(pe_work *w) {
    nccl_work *nw = static_cast<nccl_work *>(pe_work_backend(w));
    cudaError_t e = cudaEventQuery(nw->done_ev);
    if (e == cudaSuccess) {
        finish(nw, PE_OK, nullptr);
    } else if (e != cudaErrorNotReady) {
        (void)cudaGetLastError();
        char msg[512];
        snprintf(msg, sizeof msg, "%s: the stream of cuda:%d failed: %s", nw->desc, nw->r->device,
                 cudaGetErrorString(e));
        finish(nw, PE_ERR_DEVICE, msg);
    }
}

void work_wait(pe_work *w) {
    nccl_work *nw = static_cast<nccl_work *>(pe_work_backend(w));
    char msg[768];
    cudaError_t e = cudaEventSynchronize(nw->done_ev);
    ncclResult_t ar = ncclSuccess;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(msg, sizeof msg, "%s: the stream of cuda:%d failed: %s", nw->desc, nw->r->device,
                 cudaGetErrorString(e));
        finish(nw, PE_ERR_DEVICE, msg);
    } else if (ncclCommGetAsyncError(nw->r->comm, &ar) == ncclSuccess && ar != ncclSuccess && ar != ncclInProgress) {
        char nm[512];
        nccl_message(ar, nm, sizeof nm);
        snprintf(msg, sizeof msg, "%s: %s", nw->desc, nm);
        finish(nw, PE_ERR_DEVICE, msg);
    } else {
        finish(nw, PE_OK, nullptr);
    }
}

void work_release(pe_work *w) {
    nccl_work *nw = static_cast<nccl_work *>(pe_work_backend(w));
    pthread_mutex_lock(&nw->r->pool_mu);
    nw->next = nw->r->pool;
    nw->r->pool = nw;
    pthread_mutex_unlock(&nw->r->pool_mu);
}

const pe_work_ops k_work_ops = {work_poll, work_wait, work_release};

/* A pooled work of r (device r->device current). */
nccl_work *take_work(nccl_rank *r) {
    pthread_mutex_lock(&r->pool_mu);
    nccl_work *nw = r->pool;
    if (nw) r->pool = nw->next;
    pthread_mutex_unlock(&r->pool_mu);
    if (nw) {
        pe_work_reset(nw->w);
    } else {
        nw = new (std::nothrow) nccl_work();
        if (!nw) return nullptr;
        nw->r = r;
        if (!(nw->w = pe_work_new_for(&k_work_ops, nw))) {
            delete nw;
            return nullptr;
        }
        if (cudaEventCreateWithFlags(&nw->done_ev, cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            pe_work_destroy(nw->w);
            free(nw->w);
            delete nw;
            return nullptr;
        }
    }
    pe_work_retain(nw->w); /* the host function's reference */
    nw->finished.store(0);
    nw->next = nullptr;
    return nw;
}

/* pe_red -> NCCL's reduction. */
ncclRedOp_t nccl_red(pe_red red) {
    switch (red) {
    case PE_RED_MAX: return ncclMax;
    case PE_RED_MIN: return ncclMin;
    case PE_RED_PROD: return ncclProd;
    default: return ncclSum;
    }
}

/* The collective itself, on r->stream. */
ncclResult_t issue(nccl_rank *r, const pe_coll_args *a) {
    ncclDataType_t ndt = ncclUint8;
    size_t es = pe_dtype_size(a->dt);
    void *buf = a->recv;
    switch (a->op) {
    case PE_COLL_ALLREDUCE:
        nccl_sum_dtype(a->dt, &ndt);
        return ncclAllReduce(buf, buf, (size_t)a->count, ndt, nccl_red(a->red), r->comm, r->stream);
    case PE_COLL_REDUCE:
        nccl_sum_dtype(a->dt, &ndt);
        return ncclReduce(buf, buf, (size_t)a->count, ndt, nccl_red(a->red), a->root, r->comm, r->stream);
    case PE_COLL_BROADCAST:
        return ncclBroadcast(buf, buf, (size_t)a->count * es, ncclUint8, a->root, r->comm, r->stream);
    case PE_COLL_ALLGATHER:
        return ncclAllGather(a->send, a->recv, (size_t)a->count * es, ncclUint8, r->comm, r->stream);
    case PE_COLL_BARRIER:
        return ncclAllReduce(r->scratch, r->scratch, 1, ncclInt32, ncclSum, r->comm, r->stream);
    case PE_COLL_REDUCE_SCATTER: {
        nccl_sum_dtype(a->dt, &ndt);
        bool even = true;
        for (int q = 0; q < r->base.size; q++) even = even && a->counts[q] == a->counts[0];
        if (even) return ncclReduceScatter(a->send, a->recv, (size_t)a->count, ndt, ncclSum, r->comm, r->stream);
        ncclResult_t res = ncclGroupStart();
        int64_t off = 0;
        for (int q = 0; q < r->base.size && res == ncclSuccess; q++) {
            /* recvbuff is only written on the root of each chunk */
            res = ncclReduce((const char *)a->send + off * (int64_t)es, a->recv, (size_t)a->counts[q], ndt, ncclSum,
                             q, r->comm, r->stream);
            off += a->counts[q];
        }
        ncclResult_t e = ncclGroupEnd();
        return res != ncclSuccess ? res : e;
    }
    default: return ncclInvalidArgument;
    }
}

/* Queues the done event and the host function behind the collective. */
pe_status arm(nccl_work *nw) {
    nccl_rank *r = nw->r;
    cudaError_t e = cudaEventRecord(nw->done_ev, r->stream);
    if (e == cudaSuccess) e = cudaLaunchHostFunc(r->stream, host_done, nw);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pe_error(PE_ERR_DEVICE, "%s: cannot queue the completion on cuda:%d: %s", nw->desc, r->device,
                        cudaGetErrorString(e));
    }
    return PE_OK;
}

pe_status nccl_start(pe_comm *c, const pe_coll_args *a, pe_work **out) {
    nccl_rank *r = reinterpret_cast<nccl_rank *>(c);
    char desc[192];
    pe_coll_desc(c, a, desc, sizeof desc);
    /* NCCL cannot fail the other ranks' calls for us: they would hang */
    if (a->err != PE_OK) return a->err;
    pe_cuda_device_scope dev(r->device);
    if (!dev.ok()) return pe_error_wrap(PE_ERR_DEVICE, "%s", desc);
    nccl_work *nw = take_work(r);
    if (!nw) return pe_error(PE_ERR_NOMEM, "%s: out of memory (or no CUDA event) for a work", desc);
    snprintf(nw->desc, sizeof nw->desc, "%s", desc);
    bool grouped = tls_in_group == r->sh;
    if (!grouped) pthread_mutex_lock(&r->sh->issue_mu);
    /* communication starts after the kernels that produced the data */
    cudaError_t e = cudaEventRecord(r->ready_ev, r->compute);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(r->stream, r->ready_ev, 0);
    ncclResult_t res = ncclSuccess;
    if (e == cudaSuccess) res = issue(r, a);
    pe_status st = PE_OK;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        st = pe_error(PE_ERR_DEVICE, "%s: cannot order cuda:%d's streams: %s", desc, r->device,
                      cudaGetErrorString(e));
    } else if (res != ncclSuccess) {
        char msg[512];
        nccl_message(res, msg, sizeof msg);
        st = pe_error(PE_ERR_DEVICE, "%s: cuda:%d failed: %s", desc, r->device, msg);
    } else if (grouped) {
        nw->next = r->sh->pending; /* armed after ncclGroupEnd */
        r->sh->pending = nw;
    } else {
        st = arm(nw);
    }
    if (!grouped) pthread_mutex_unlock(&r->sh->issue_mu);
    if (st != PE_OK) {
        pe_work_free(nw->w); /* the caller's reference */
        fail_unarmed(nw, st, pe_last_error());
        return st;
    }
    *out = nw->w;
    return PE_OK;
}

pe_status nccl_group_begin(pe_comm *c) {
    nccl_rank *r = reinterpret_cast<nccl_rank *>(c);
    pthread_mutex_lock(&r->sh->issue_mu);
    tls_in_group = r->sh;
    ncclResult_t res = ncclGroupStart();
    if (res != ncclSuccess) {
        tls_in_group = nullptr;
        pthread_mutex_unlock(&r->sh->issue_mu);
        char msg[512];
        nccl_message(res, msg, sizeof msg);
        return pe_error(PE_ERR_DEVICE, "nccl: ncclGroupStart failed: %s", msg);
    }
    return PE_OK;
}

pe_status nccl_group_end(pe_comm *c) {
    nccl_rank *r = reinterpret_cast<nccl_rank *>(c);
    ncclResult_t res = ncclGroupEnd();
    pe_status st = PE_OK;
    char msg[512];
    if (res != ncclSuccess) {
        nccl_message(res, msg, sizeof msg);
        st = pe_error(PE_ERR_DEVICE, "nccl: ncclGroupEnd failed: %s", msg);
    }
    for (nccl_work *nw = r->sh->pending, *next; nw; nw = next) {
        next = nw->next;
        pe_status ast = PE_OK;
        if (st == PE_OK) {
            pe_cuda_device_scope dev(nw->r->device);
            ast = dev.ok() ? arm(nw) : PE_ERR_DEVICE;
        }
        /* not armed: nothing will ever complete it, so fail it here */
        if (st != PE_OK || ast != PE_OK) fail_unarmed(nw, st != PE_OK ? st : ast, pe_last_error());
    }
    r->sh->pending = nullptr;
    tls_in_group = nullptr;
    pthread_mutex_unlock(&r->sh->issue_mu);
    return st;
}

void nccl_free(pe_comm *c) {
    nccl_rank *r = reinterpret_cast<nccl_rank *>(c);
    {
        pe_cuda_device_scope dev(r->device);
        if (r->stream) (void)cudaStreamSynchronize(r->stream);
        while (r->pool) {
            nccl_work *nw = r->pool;
            r->pool = nw->next;
            (void)cudaEventDestroy(nw->done_ev);
            pe_work_destroy(nw->w);
            free(nw->w);
            delete nw;
        }
        if (r->comm) {
            ncclResult_t res = ncclCommDestroy(r->comm);
            if (res != ncclSuccess)
                pe_log(PE_LOG_ERROR, "ncclCommDestroy on cuda:%d failed: %s", r->device, ncclGetErrorString(res));
        }
        if (r->ready_ev) (void)cudaEventDestroy(r->ready_ev);
        if (r->stream) (void)cudaStreamDestroy(r->stream);
        if (r->scratch) (void)cudaFree(r->scratch);
    }
    if (r->sh->refs.fetch_sub(1) == 1) {
        pthread_mutex_destroy(&r->sh->issue_mu);
        delete r->sh;
    }
    pthread_mutex_destroy(&r->pool_mu);
    delete r;
}

const pe_comm_ops k_nccl_ops = {"nccl", nccl_start, nccl_group_begin, nccl_group_end, nccl_free};

nccl_shared *shared_new(int refs) {
    nccl_shared *sh = new (std::nothrow) nccl_shared();
    if (!sh) return nullptr;
    pthread_mutex_init(&sh->issue_mu, nullptr);
    sh->refs.store(refs);
    sh->pending = nullptr;
    return sh;
}

/* Rank `rank` of `size` on `device`, its streams and events; the NCCL
 * communicator is made by the caller. */
pe_status rank_new(nccl_shared *sh, int rank, int size, int device, nccl_rank **out) {
    *out = nullptr;
    nccl_rank *r = new (std::nothrow) nccl_rank();
    if (!r) return pe_error(PE_ERR_NOMEM, "nccl rank %d/%d on cuda:%d: out of memory", rank, size, device);
    r->base.ops = &k_nccl_ops;
    r->base.rank = rank;
    r->base.size = size;
    r->sh = sh;
    r->device = device;
    pthread_mutex_init(&r->pool_mu, nullptr);
    r->compute = static_cast<cudaStream_t>(pe_cuda_stream(device));
    if (!r->compute) {
        r->sh = nullptr;
        pthread_mutex_destroy(&r->pool_mu);
        delete r;
        return pe_error_wrap(PE_ERR_DEVICE, "nccl rank %d/%d on cuda:%d", rank, size, device);
    }
    pe_cuda_device_scope dev(device);
    cudaError_t e = dev.ok() ? cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking) : cudaErrorInvalidDevice;
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&r->ready_ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaMalloc(&r->scratch, sizeof(int));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        pe_status st = pe_error(PE_ERR_DEVICE, "nccl rank %d/%d on cuda:%d: %s", rank, size, device,
                                cudaGetErrorString(e));
        if (r->ready_ev) (void)cudaEventDestroy(r->ready_ev);
        if (r->stream) (void)cudaStreamDestroy(r->stream);
        pthread_mutex_destroy(&r->pool_mu);
        delete r;
        return st;
    }
    *out = r;
    return PE_OK;
}

} // namespace

extern "C" pe_status pe_nccl_get_id(pe_nccl_id *id) {
    static_assert(sizeof(ncclUniqueId) <= sizeof(pe_nccl_id), "pe_nccl_id too small");
    ncclUniqueId u;
    ncclResult_t res = ncclGetUniqueId(&u);
    if (res != ncclSuccess) {
        char msg[512];
        nccl_message(res, msg, sizeof msg);
        return pe_error(PE_ERR_DEVICE, "ncclGetUniqueId failed: %s", msg);
    }
    memset(id, 0, sizeof *id);
    memcpy(id->bytes, &u, sizeof u);
    return PE_OK;
}

extern "C" pe_status pe_comm_nccl_rank_new(const pe_nccl_id *id, int rank, int size, int device, pe_comm **out) {
    if (out) *out = nullptr;
    return pe_comm_nccl_ranks_new(id, rank, 1, size, &device, out);
}

extern "C" pe_status pe_comm_nccl_ranks_new(const pe_nccl_id *id, int first, int n, int size, const int *devices,
                                            pe_comm **out) {
    if (!id || !devices || !out || n < 1 || n > PE_MAX_PLACES || first < 0 || first + n > size)
        return pe_error(PE_ERR_INVALID, "NCCL ranks %d..%d of %d: bad ranks, devices or id", first, first + n - 1,
                        size);
    for (int i = 0; i < n; i++) out[i] = nullptr;
    int visible = pe_cuda_device_count();
    for (int i = 0; i < n; i++) {
        if (devices[i] < 0 || devices[i] >= visible)
            return pe_error(PE_ERR_INVALID, "NCCL collectives: cuda:%d is not a visible device (%d visible)",
                            devices[i], visible);
        for (int j = 0; j < i; j++)
            if (devices[j] == devices[i])
                return pe_error(PE_ERR_INVALID, "NCCL collectives: cuda:%d appears twice (one rank per device)",
                                devices[i]);
    }
    nccl_shared *sh = shared_new(0);
    if (!sh) return pe_error(PE_ERR_NOMEM, "out of memory creating NCCL ranks %d..%d", first, first + n - 1);
    nccl_rank *ranks[PE_MAX_PLACES] = {};
    pe_status st = PE_OK;
    for (int i = 0; i < n && st == PE_OK; i++) {
        st = rank_new(sh, first + i, size, devices[i], &ranks[i]);
        if (st == PE_OK) sh->refs.fetch_add(1);
    }
    ncclResult_t res = ncclSuccess;
    if (st == PE_OK) {
        /* the local ranks join together: ncclCommInitRank blocks until every
         * rank of the world has called it, so one call at a time would wait
         * for this process's next rank forever */
        ncclUniqueId u;
        memcpy(&u, id->bytes, sizeof u);
        res = ncclGroupStart();
        for (int i = 0; i < n && res == ncclSuccess; i++) {
            pe_cuda_device_scope dev(devices[i]);
            res = ncclCommInitRank(&ranks[i]->comm, size, u, first + i);
        }
        ncclResult_t e = ncclGroupEnd();
        if (res == ncclSuccess) res = e;
        if (res != ncclSuccess) {
            char msg[512];
            nccl_message(res, msg, sizeof msg);
            st = pe_error(PE_ERR_DEVICE, "ncclCommInitRank of ranks %d..%d of %d failed: %s", first, first + n - 1,
                          size, msg);
        }
    }
    if (st != PE_OK) {
        char keep[1024];
        snprintf(keep, sizeof keep, "%s", pe_last_error());
        for (int i = 0; i < n; i++)
            if (ranks[i]) {
                if (res != ncclSuccess) ranks[i]->comm = nullptr;
                nccl_free(&ranks[i]->base);
            }
        if (!ranks[0]) {
            pthread_mutex_destroy(&sh->issue_mu);
            delete sh;
        }
        return pe_error(st, "%s", keep);
    }
    for (int i = 0; i < n; i++) out[i] = &ranks[i]->base;
    return PE_OK;
}

extern "C" pe_comm_group *pe_comm_nccl_new(const int *devices, int n) {
    if (!devices || n < 1 || n > PE_MAX_PLACES) {
        pe_error(PE_ERR_INVALID, "NCCL collectives need 1..%d devices (got %d%s)", PE_MAX_PLACES, n,
                 devices ? "" : ", devices is NULL");
        return nullptr;
    }
    pe_nccl_id id;
    pe_comm *cs[PE_MAX_PLACES];
    if (pe_nccl_get_id(&id) != PE_OK || pe_comm_nccl_ranks_new(&id, 0, n, n, devices, cs) != PE_OK) return nullptr;
    return pe_comm_group_new(cs, n);
}

/* runtime/comm/nccl.cu — collectives across CUDA places with NCCL.
 *
 * The pe_comm backend for GPUs (runtime/comm/comm.h): one NCCL communicator
 * per device, all created at once by ncclCommInitAll in this process (rank
 * i = place i = devices[i]). A call issues the collective on every device's
 * PE stream (pe_cuda_stream, where that place's kernels run, so it starts
 * after the kernels that produced the gradient) inside one
 * ncclGroupStart/ncclGroupEnd, then synchronizes those streams: like the
 * CPU backend, the result is in every buffer when the call returns.
 *
 * Calls on different vars come from several scheduler threads at once;
 * NCCL needs the operations of a communicator in the same order on every
 * rank, so issuing (not waiting) is serialized by a mutex per pe_comm.
 *
 * Determinism: NCCL's ring/tree sum order is fixed for a given topology,
 * device count, size and NCCL version, so results are reproducible from run
 * to run, but they are NOT bitwise equal to the in-process backend's
 * place-order sum (floating-point sums in another order round differently);
 * integer results are exact either way.
 *
 * Broadcast moves bytes, so it takes every dtype (as the CPU backend does);
 * allreduce and reduce sum fp32, fp64, int32 and int64.
 */
#include "runtime/comm/comm.h"
#include "runtime/cuda/cuda_internal.h"

#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace {

struct nccl_comm {
    pe_comm base; /* first: pe_comm * and nccl_comm * convert both ways */
    pthread_mutex_t mu;
    int devices[PE_MAX_PLACES];
    ncclComm_t comms[PE_MAX_PLACES];
    cudaStream_t streams[PE_MAX_PLACES];
};

enum class coll { allreduce, reduce, broadcast };

const char *call_name(coll k) {
    switch (k) {
    case coll::allreduce: return "ncclAllReduce";
    case coll::reduce: return "ncclReduce";
    default: return "ncclBroadcast";
    }
}

/* Restores the thread's current device at the end of the scope: NCCL
 * switches devices internally while it sets up and launches. */
class device_restore {
public:
    device_restore() {
        if (cudaGetDevice(&prev_) != cudaSuccess) {
            (void)cudaGetLastError();
            prev_ = -1;
        }
    }
    ~device_restore() {
        if (prev_ >= 0) (void)cudaSetDevice(prev_);
    }
    device_restore(const device_restore &) = delete;
    device_restore &operator=(const device_restore &) = delete;

private:
    int prev_ = -1;
};

/* "cuda:0,cuda:1" into buf. */
const char *device_list(const int *devices, int n, char *buf, size_t size) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && o < size; i++) {
        int w = snprintf(buf + o, size - o, "%scuda:%d", i ? "," : "", devices[i]);
        if (w < 0) break;
        o += (size_t)w;
    }
    return buf;
}

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

pe_status run(nccl_comm *c, void *const *bufs, int64_t numel, pe_dtype dt, int root, coll k) {
    const char *what = k == coll::allreduce ? "allreduce" : k == coll::reduce ? "reduce" : "broadcast";
    int n = c->base.n_places;
    ncclDataType_t ndt = ncclUint8;
    size_t count = 0;
    if (k == coll::broadcast) {
        if (!pe_dtype_valid((int)dt))
            return pe_error(PE_ERR_INVALID, "broadcast: dtype %d is not a PE dtype", (int)dt);
        count = (size_t)(numel > 0 ? numel : 0) * pe_dtype_size(dt); /* bytes, as ncclUint8 */
    } else {
        if (!nccl_sum_dtype(dt, &ndt))
            return pe_error(PE_ERR_UNSUPPORTED, "%s: dtype %s is not supported (float32, float64, int32, int64)",
                            what, pe_dtype_name(dt));
        count = (size_t)(numel > 0 ? numel : 0);
    }
    if (root < 0 || root >= n) return pe_error(PE_ERR_INVALID, "%s: root %d is not a place (0..%d)", what, root, n - 1);
    if (n == 1 || count == 0) return PE_OK;
    for (int i = 0; i < n; i++)
        if (!bufs[i])
            return pe_error(PE_ERR_INVALID, "%s of %lld %s elements: the buffer of cuda:%d (place %d) is NULL", what,
                            (long long)numel, pe_dtype_name(dt), c->devices[i], i);

    /* "ncclReduce of 2048 float32 elements to place 1", for messages */
    char desc[160], msg[512];
    snprintf(desc, sizeof desc, "%s of %lld %s elements%s", call_name(k), (long long)numel, pe_dtype_name(dt),
             k == coll::allreduce ? "" : k == coll::reduce ? " to place " : " from place ");
    if (k != coll::allreduce) snprintf(desc + strlen(desc), sizeof desc - strlen(desc), "%d", root);
    int failed = -1;
    ncclResult_t r = ncclSuccess, rg;
    {
        device_restore keep;
        pthread_mutex_lock(&c->mu);
        rg = ncclGroupStart();
        if (rg == ncclSuccess) {
            for (int i = 0; i < n && r == ncclSuccess; i++) {
                void *b = bufs[i]; /* in place: send buffer = receive buffer */
                switch (k) {
                case coll::allreduce: r = ncclAllReduce(b, b, count, ndt, ncclSum, c->comms[i], c->streams[i]); break;
                case coll::reduce: r = ncclReduce(b, b, count, ndt, ncclSum, root, c->comms[i], c->streams[i]); break;
                default: r = ncclBroadcast(b, b, count, ndt, root, c->comms[i], c->streams[i]); break;
                }
                if (r != ncclSuccess) failed = i;
            }
            /* The group must be closed even after a failed call; NCCL then
             * launches nothing and reports the error again. */
            rg = ncclGroupEnd();
        }
        pthread_mutex_unlock(&c->mu);
    }
    if (failed >= 0) {
        nccl_message(r, msg, sizeof msg);
        return pe_error(PE_ERR_DEVICE, "%s: cuda:%d (place %d) failed: %s", desc, c->devices[failed], failed, msg);
    }
    if (rg != ncclSuccess) {
        char dl[256];
        nccl_message(rg, msg, sizeof msg);
        return pe_error(PE_ERR_DEVICE, "%s over %s: ncclGroupEnd failed: %s", desc,
                        device_list(c->devices, n, dl, sizeof dl), msg);
    }
    /* Wait outside the lock: other vars' collectives may be issued meanwhile. */
    pe_status st = PE_OK;
    for (int i = 0; i < n; i++) {
        cudaError_t e = cudaStreamSynchronize(c->streams[i]);
        ncclResult_t ar = ncclSuccess;
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            if (st == PE_OK)
                st = pe_error(PE_ERR_DEVICE, "%s: the stream of cuda:%d (place %d) failed: %s", desc, c->devices[i],
                              i, cudaGetErrorString(e));
        } else if (ncclCommGetAsyncError(c->comms[i], &ar) == ncclSuccess && ar != ncclSuccess && ar != ncclInProgress) {
            nccl_message(ar, msg, sizeof msg);
            if (st == PE_OK)
                st = pe_error(PE_ERR_DEVICE, "%s: cuda:%d (place %d) failed: %s", desc, c->devices[i], i, msg);
        }
    }
    return st;
}

pe_status nccl_allreduce(pe_comm *c, void *const *bufs, int64_t numel, pe_dtype dt) {
    return run(reinterpret_cast<nccl_comm *>(c), bufs, numel, dt, 0, coll::allreduce);
}

pe_status nccl_reduce(pe_comm *c, void *const *bufs, int64_t numel, pe_dtype dt, int root) {
    return run(reinterpret_cast<nccl_comm *>(c), bufs, numel, dt, root, coll::reduce);
}

pe_status nccl_broadcast(pe_comm *c, void *const *bufs, int64_t numel, pe_dtype dt, int root) {
    return run(reinterpret_cast<nccl_comm *>(c), bufs, numel, dt, root, coll::broadcast);
}

void nccl_free(pe_comm *cm) {
    nccl_comm *c = reinterpret_cast<nccl_comm *>(cm);
    {
        device_restore keep;
        for (int i = 0; i < c->base.n_places; i++) {
            if (!c->comms[i]) continue;
            ncclResult_t r = ncclCommDestroy(c->comms[i]);
            if (r != ncclSuccess)
                pe_log(PE_LOG_ERROR, "ncclCommDestroy on cuda:%d failed: %s", c->devices[i], ncclGetErrorString(r));
        }
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

const pe_comm_ops k_nccl_ops = {"nccl", nccl_allreduce, nccl_reduce, nccl_broadcast, nccl_free};

} // namespace

extern "C" pe_comm *pe_comm_nccl_new(const int *devices, int n) {
    char dl[256];
    if (!devices || n < 1 || n > PE_MAX_PLACES) {
        pe_error(PE_ERR_INVALID, "NCCL collectives need 1..%d devices (got %d%s)", PE_MAX_PLACES, n,
                 devices ? "" : ", devices is NULL");
        return nullptr;
    }
    device_list(devices, n, dl, sizeof dl);
    int visible = pe_cuda_device_count();
    for (int i = 0; i < n; i++) {
        if (devices[i] < 0 || devices[i] >= visible) {
            pe_error(PE_ERR_INVALID, "NCCL collectives over %s: cuda:%d is not a visible device (%d visible)", dl,
                     devices[i], visible);
            return nullptr;
        }
        for (int j = 0; j < i; j++)
            if (devices[j] == devices[i]) {
                pe_error(PE_ERR_INVALID, "NCCL collectives over %s: cuda:%d appears twice (one rank per device)", dl,
                         devices[i]);
                return nullptr;
            }
    }
    nccl_comm *c = static_cast<nccl_comm *>(calloc(1, sizeof(nccl_comm)));
    if (!c) {
        pe_error(PE_ERR_NOMEM, "out of memory creating NCCL collectives over %s", dl);
        return nullptr;
    }
    c->base.ops = &k_nccl_ops;
    c->base.n_places = n;
    for (int i = 0; i < n; i++) {
        c->devices[i] = devices[i];
        c->streams[i] = static_cast<cudaStream_t>(pe_cuda_stream(devices[i]));
        if (!c->streams[i]) {
            pe_error_wrap(PE_ERR_DEVICE, "NCCL collectives over %s", dl);
            free(c);
            return nullptr;
        }
    }
    ncclResult_t r;
    {
        device_restore keep;
        r = ncclCommInitAll(c->comms, n, c->devices);
    }
    if (r != ncclSuccess) {
        char msg[512];
        nccl_message(r, msg, sizeof msg);
        pe_error(PE_ERR_DEVICE, "ncclCommInitAll over %s failed: %s", dl, msg);
        free(c);
        return nullptr;
    }
    pthread_mutex_init(&c->mu, nullptr);
    return &c->base;
}

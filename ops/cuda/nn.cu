/* ops/cuda/nn.cu — CUDA kernels of the nn family and its gradients:
 * conv2d / depthwise_conv2d (+ _grad), conv2d_transpose (+ _grad), pool2d
 * (+ _grad), batch_norm (+ _grad), on float32 and float64 like the CPU
 * kernels (ops/cpu/nn.c, nn_grad.c, deconv.c).
 *
 * How:
 *   - Geometry: pe_conv_geom_get / pe_conv_transpose_geom_get /
 *     pe_pool_geom_get (ops/nn.h), the very functions infer and the CPU
 *     kernels call, so every attr rule (2/4 paddings, SAME/VALID, dilations,
 *     groups, ceil_mode, global/adaptive pooling) is read once.
 *   - Convolution: cuDNN on plain NCHW, with the three computations of
 *     the CPU side on an explicit geometry; conv2d_transpose is conv2d's
 *     backward-data and its gradients conv2d's forward and backward-weights
 *     (as deconv.c). Two ways, one plan cache per (device, kind, dtype,
 *     pointer alignment, shapes, attrs) holding the choice and its
 *     workspace size (device scratch):
 *     the classic API (the default): cudnnConvolutionForward /
 *     BackwardData / BackwardFilter with the first DETERMINISTIC algorithm
 *     cudnnGet*Algorithm_v7 proposes (cudnnFind*'s timed order with
 *     PE_CUDNN_EXHAUSTIVE_SEARCH=1; any with PE_CUDNN_DETERMINISTIC=0), no
 *     TF32 for float32 (CUDNN_FMA_MATH) unless PE_CUDA_TF32=1, preferring
 *     direct/GEMM algorithms under a 1 GiB workspace to FFT/Winograd ones
 *     (which round differently from the CPU sums);
 *     the graph (backend) API with PE_CUDNN_API=graph: one convolution node
 *     per operation graph, the first engine of cuDNN's heuristics (mode A)
 *     whose notes pass the same filters (DETERMINISTIC, no TF32 notes, no
 *     FFT/Winograd first, no runtime compilation), its execution plan built
 *     once and run with a variant pack of the op's pointers;
 *     PE_CUDNN_EXHAUSTIVE_SEARCH=1 times every plan that passes. The classic
 *     API stays the default: on an H200 its choices track the CPU kernels
 *     far closer over a training run (docs/benchmarks.md).
 *     cuDNN wants symmetric padding: asymmetric paddings (SAME, 4-value
 *     paddings) pad the input explicitly into scratch (forward, weights) or
 *     compute the padded input gradient and crop it (data). Where cuDNN has
 *     no deterministic algorithm, or a shape exceeds its int descriptors,
 *     direct gather kernels (ports of the CPU loops, one thread per output
 *     element) run instead. The bias add and the bias gradient are own
 *     kernels (the latter sums in double, fixed order, as the CPU loops).
 *     The cuDNN handle is the place's (pe_cuda_dnn), held under its lock and
 *     bound to the op's stream for the duration of the calls (dnn_guard).
 *   - Pooling: own kernels (not cuDNN: Paddle's window rules — empty windows
 *     in the padding, adaptive windows, exclusive divisors — are the CPU
 *     loops'): the forward is one thread per output with the CPU loop's order
 *     of operations; the backward recomputes each window's first maximum
 *     (max) and then gathers, per input cell, the contributions of the
 *     windows containing it in the CPU loop's (oy, ox) order — no atomics,
 *     the CPU loop's bits.
 *   - batch_norm: own kernels, because cuDNN updates the running variance
 *     with the unbiased batch variance while PE (Paddle's CPU kernel) uses
 *     the biased one. Per-channel sums in double: each channel's N*S values
 *     are cut into P fixed chunks (P from the shape only), one block sums a
 *     chunk by a tree in shared memory, one thread per channel adds the P
 *     partials in order — deterministic. Two passes for the variance
 *     (mean first, then sum (x-mean)^2), as the CPU loop; SavedVariance holds
 *     1/sqrt(var + eps); formulas as ops/cpu/nn.c / nn_grad.c with explicitly
 *     rounded double operations (no FMA contraction).
 *
 * Why: the CNN ops (ResNet/VGG style models) must run on a GPU place with
 * the CPU kernels' semantics; cuDNN gives the convolutions their speed,
 * the rest is simple enough to write exactly.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/nn.h"

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace {

/* ---- rounding helpers: separately rounded ops (no FMA contraction) ------ */

__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }

template <typename T> __device__ inline T lowest();
template <> __device__ inline float lowest<float>() { return -FLT_MAX; }
template <> __device__ inline double lowest<double>() { return -DBL_MAX; }

/* Fills n bytes at p with zeros on stream s. */
pe_status zero_async(const pe_op_ctx *ctx, void *p, size_t n, cudaStream_t s) {
    if (!p || !n) return PE_OK;
    return pe_cuda_check(ctx, cudaMemsetAsync(p, 0, n, s), "cudaMemsetAsync");
}

/* Copies n bytes device to device on stream s (nothing when dst == src). */
pe_status copy_async(const pe_op_ctx *ctx, void *dst, const void *src, size_t n, cudaStream_t s) {
    if (!n || dst == src) return PE_OK;
    return pe_cuda_check(ctx, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
}

/* ==== cuDNN plumbing ===================================================== */

pe_status dnn_check(const pe_op_ctx *ctx, cudnnStatus_t st, const char *what) {
    if (st == CUDNN_STATUS_SUCCESS) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_DEVICE, "cuDNN %s failed: %s", what, cudnnGetErrorString(st));
}

/* The place's cuDNN handle, locked and bound to the op's stream for the
 * scope (the previous stream is restored, then the lock released). ok()
 * false: the op's error is set. */
class dnn_guard {
public:
    dnn_guard(const pe_op_ctx *ctx, cudaStream_t s) : dev_(ctx->place.id) {
        cudnnHandle_t h = (cudnnHandle_t)pe_cuda_dnn(dev_);
        if (!h) {
            pe_ctx_error(ctx, PE_ERR_DEVICE, "%s", pe_last_error());
            return;
        }
        pe_cuda_dnn_lock(dev_);
        locked_ = true;
        if (cudnnGetStream(h, &prev_) != CUDNN_STATUS_SUCCESS) prev_ = nullptr;
        if (prev_ != s) {
            cudnnStatus_t st = cudnnSetStream(h, s);
            if (st != CUDNN_STATUS_SUCCESS) {
                dnn_check(ctx, st, "cudnnSetStream");
                return;
            }
            restore_ = true;
        }
        h_ = h;
    }
    ~dnn_guard() {
        if (restore_) (void)cudnnSetStream(h_, prev_);
        if (locked_) pe_cuda_dnn_unlock(dev_);
    }
    dnn_guard(const dnn_guard &) = delete;
    dnn_guard &operator=(const dnn_guard &) = delete;
    bool ok() const { return h_ != nullptr; }
    cudnnHandle_t get() const { return h_; }

private:
    int dev_;
    cudnnHandle_t h_ = nullptr;
    cudaStream_t prev_ = nullptr;
    bool locked_ = false, restore_ = false;
};

struct tensor_desc {
    cudnnTensorDescriptor_t d = nullptr;
    tensor_desc() { (void)cudnnCreateTensorDescriptor(&d); }
    ~tensor_desc() { if (d) cudnnDestroyTensorDescriptor(d); }
    tensor_desc(const tensor_desc &) = delete;
    tensor_desc &operator=(const tensor_desc &) = delete;
};
struct filter_desc {
    cudnnFilterDescriptor_t d = nullptr;
    filter_desc() { (void)cudnnCreateFilterDescriptor(&d); }
    ~filter_desc() { if (d) cudnnDestroyFilterDescriptor(d); }
    filter_desc(const filter_desc &) = delete;
    filter_desc &operator=(const filter_desc &) = delete;
};
struct conv_desc {
    cudnnConvolutionDescriptor_t d = nullptr;
    conv_desc() { (void)cudnnCreateConvolutionDescriptor(&d); }
    ~conv_desc() { if (d) cudnnDestroyConvolutionDescriptor(d); }
    conv_desc(const conv_desc &) = delete;
    conv_desc &operator=(const conv_desc &) = delete;
};

bool tf32_enabled() {
    static const bool on = [] {
        const char *v = getenv("PE_CUDA_TF32");
        return v && (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on"));
    }();
    return on;
}

/* PE_CUDNN_DETERMINISTIC=0: any cuDNN algorithm, atomics-based and
 * FFT/Winograd ones included (faster, but two runs may differ in the last
 * bits); default: deterministic ones only. */
bool deterministic_only() {
    static const bool on = [] {
        const char *v = getenv("PE_CUDNN_DETERMINISTIC");
        return !(v && (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off")));
    }();
    return on;
}

/* PE_CUDNN_EXHAUSTIVE_SEARCH=1 (or Paddle's FLAGS_cudnn_exhaustive_search=1):
 * order the candidates by cuDNN's timed trial runs (cudnnFind*) instead of
 * its heuristics, once per shape; the same filters apply after. */
bool exhaustive_search() {
    static const bool on = [] {
        for (const char *name : {"PE_CUDNN_EXHAUSTIVE_SEARCH", "FLAGS_cudnn_exhaustive_search"}) {
            const char *v = getenv(name);
            if (v && (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on"))) return true;
        }
        return false;
    }();
    return on;
}

/* ---- convolution plans ---------------------------------------------------
 * The three computations on the geometry g (its Input plane possibly padded
 * explicitly to hp x wp, cuDNN padding then 0). */
enum conv_kind { CONV_FWD = 0, CONV_BWD_DATA = 1, CONV_BWD_FILTER = 2 };

struct conv_plan {
    int algo = 0;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    size_t ws = 0;
    bool direct = false; /* no deterministic cuDNN algorithm: the direct kernels */
    cudnnBackendDescriptor_t exec = nullptr; /* the graph API's execution plan (owned by the cache), or
                                              * nullptr: the classic API's algo */
};

using conv_key = std::array<int64_t, 21>;
std::mutex g_plan_mu;
std::map<conv_key, conv_plan> g_plans;

/* Workspace cap for an algorithm (a larger one is taken only when no
 * smaller deterministic one exists). */
constexpr size_t kMaxWorkspace = (size_t)1 << 30;

/* cuDNN's view of a convolution: descriptors, padded plane, padding. */
struct conv_cudnn {
    tensor_desc x, y;
    filter_desc w;
    conv_desc conv;
    int64_t hp = 0, wp = 0; /* Input plane as cuDNN sees it */
    int64_t ph = 0, pw = 0; /* cuDNN's symmetric padding */
    bool explicit_pad = false;
    bool fits = false; /* every extent fits cuDNN's int descriptors */
};

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* Sets up c for g on dtype dt (math: the conv descriptor's math type).
 * c->fits false — an extent beyond cuDNN's ints, or descriptors cuDNN
 * refuses (or whose output plane differs from PE's): the direct kernels. */
pe_status conv_cudnn_init(const pe_op_ctx *ctx, conv_cudnn *c, const pe_conv_geom *g, pe_dtype dt,
                          cudnnMathType_t math) {
    (void)ctx;
    c->explicit_pad = g->pt != g->pb || g->pl != g->pr;
    c->hp = c->explicit_pad ? g->h + g->pt + g->pb : g->h;
    c->wp = c->explicit_pad ? g->w + g->pl + g->pr : g->w;
    c->ph = c->explicit_pad ? 0 : g->pt;
    c->pw = c->explicit_pad ? 0 : g->pl;
    const int64_t cg = g->c / g->groups;
    const int64_t v[] = {g->n, g->c, c->hp, c->wp, g->m, g->kh, g->kw, g->oh, g->ow, g->sh, g->sw, g->dh, g->dw,
                         c->ph, c->pw, g->groups, g->n * g->c * c->hp * c->wp, g->n * g->m * g->oh * g->ow,
                         g->m * cg * g->kh * g->kw};
    c->fits = c->x.d && c->y.d && c->w.d && c->conv.d;
    for (int64_t e : v) c->fits = c->fits && fits_int(e);
    if (!c->fits) return PE_OK;
    const cudnnDataType_t t = dt == PE_DTYPE_FP64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    int on = 0, oc = 0, oh = 0, ow = 0;
    c->fits =
        cudnnSetTensor4dDescriptor(c->x.d, CUDNN_TENSOR_NCHW, t, (int)g->n, (int)g->c, (int)c->hp, (int)c->wp) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnSetTensor4dDescriptor(c->y.d, CUDNN_TENSOR_NCHW, t, (int)g->n, (int)g->m, (int)g->oh, (int)g->ow) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnSetFilter4dDescriptor(c->w.d, t, CUDNN_TENSOR_NCHW, (int)g->m, (int)cg, (int)g->kh, (int)g->kw) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnSetConvolution2dDescriptor(c->conv.d, (int)c->ph, (int)c->pw, (int)g->sh, (int)g->sw, (int)g->dh,
                                        (int)g->dw, CUDNN_CROSS_CORRELATION, t) == CUDNN_STATUS_SUCCESS &&
        cudnnSetConvolutionGroupCount(c->conv.d, (int)g->groups) == CUDNN_STATUS_SUCCESS &&
        cudnnSetConvolutionMathType(c->conv.d, math) == CUDNN_STATUS_SUCCESS &&
        cudnnGetConvolution2dForwardOutputDim(c->conv.d, c->x.d, c->w.d, &on, &oc, &oh, &ow) ==
            CUDNN_STATUS_SUCCESS &&
        on == g->n && oc == g->m && oh == g->oh && ow == g->ow;
    return PE_OK;
}

/* Algorithms that transform the problem (FFT, Winograd) and so round
 * differently from a direct sum of products — up to ~1e-5 relative in
 * float32: taken only when nothing else is deterministic. */
bool transformed(cudnnConvolutionFwdAlgo_t a) {
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transformed(cudnnConvolutionBwdDataAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transformed(cudnnConvolutionBwdFilterAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/* Whether a heuristic result is usable: supported, deterministic (unless
 * PE_CUDNN_DETERMINISTIC=0), without TF32 unless allowed; `strict` (the
 * first choice) also within the workspace cap and, when deterministic, not a
 * transformed algorithm. */
template <typename Perf> bool perf_ok(const Perf &p, bool fp32_no_tf32, bool strict) {
    const bool det = deterministic_only();
    if (p.status != CUDNN_STATUS_SUCCESS || (det && p.determinism != CUDNN_DETERMINISTIC)) return false;
    if (strict && (p.memory > kMaxWorkspace || (det && transformed(p.algo)))) return false;
    if (fp32_no_tf32 && (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
        return false;
    return true;
}

/* The first usable result in cuDNN's order (its fastest first): strict
 * ones, then any deterministic one. */
template <typename Perf> bool pick_perf(const Perf *r, int n, bool fp32_no_tf32, Perf *out) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            if (perf_ok(r[i], fp32_no_tf32, pass == 0)) {
                *out = r[i];
                return true;
            }
    return false;
}

/* The plan cache's key: device, kind, dtype, math, the data pointers'
 * alignment, and every extent and attr cuDNN sees. */
conv_key conv_key_of(const pe_op_ctx *ctx, conv_kind kind, const pe_conv_geom *g, pe_dtype dt, const conv_cudnn *c,
                     int64_t align) {
    const bool fp32_no_tf32 = dt == PE_DTYPE_FP32 && !tf32_enabled();
    return conv_key{ctx->place.id, kind, (int64_t)dt, fp32_no_tf32, align, g->n, g->c, c->hp, c->wp, g->m, g->kh,
                    g->kw, g->groups, g->sh, g->sw, g->dh, g->dw, c->ph, c->pw, g->oh, g->ow};
}

/* ---- the graph (backend) API ----------------------------------------------
 * One convolution node per operation graph; cuDNN's heuristics (mode A)
 * rank the engine configurations, PE takes the first whose engine's notes
 * pass its filters — not NONDETERMINISTIC (unless PE_CUDNN_DETERMINISTIC=0),
 * no TF32 for float32 (TENSOR_CORE / DOWN_CONVERT_INPUTS /
 * REDUCED_PRECISION_REDUCTION, unless PE_CUDA_TF32=1), no runtime-compiled
 * kernels (they need NVRTC where PE runs), and on the first pass no FFT /
 * Winograd (rounding unlike a direct sum) nor a workspace over the cap —
 * and builds its execution plan once per key. With
 * PE_CUDNN_EXHAUSTIVE_SEARCH=1 every plan that passes is timed on the op's
 * own buffers (3 runs each, cudaEvent) and the fastest kept. */

/* An owned backend descriptor. */
struct bdesc {
    cudnnBackendDescriptor_t d = nullptr;
    cudnnStatus_t st;
    explicit bdesc(cudnnBackendDescriptorType_t t) { st = cudnnBackendCreateDescriptor(t, &d); }
    ~bdesc() { if (d) cudnnBackendDestroyDescriptor(d); }
    bdesc(const bdesc &) = delete;
    bdesc &operator=(const bdesc &) = delete;
    bool ok() const { return st == CUDNN_STATUS_SUCCESS && d; }
    cudnnBackendDescriptor_t release() {
        cudnnBackendDescriptor_t r = d;
        d = nullptr;
        return r;
    }
};

bool set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
              const void *v) {
    return cudnnBackendSetAttribute(d, a, t, n, v) == CUDNN_STATUS_SUCCESS;
}

/* A packed NCHW tensor of dims on dtype t, unique id uid. */
bool graph_tensor(bdesc &td, cudnnDataType_t t, int64_t uid, const int64_t dims[4], int64_t align) {
    const int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
    return td.ok() && set_attr(td.d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t) &&
           set_attr(td.d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims) &&
           set_attr(td.d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides) &&
           set_attr(td.d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) &&
           set_attr(td.d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) &&
           cudnnBackendFinalize(td.d) == CUDNN_STATUS_SUCCESS;
}

/* Unique ids of the three tensors: Input (x / dx), Filter (w / dw), Output (y / dy). */
enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

/* Whether the engine behind cfg passes PE's filters (strict: the first pass). */
bool engine_ok(cudnnBackendDescriptor_t cfg, bool fp32_no_tf32, bool strict) {
    bdesc eng(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0;
    if (!eng.ok() || cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                              &eng.d) != CUDNN_STATUS_SUCCESS || n != 1)
        return false;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cudnnBackendBehaviorNote_t behav[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    int64_t nn = 0, nb = 0;
    if (cudnnBackendGetAttribute(eng.d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(eng.d, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &nb, behav) != CUDNN_STATUS_SUCCESS)
        return false;
    const bool det = deterministic_only();
    for (int64_t i = 0; i < nn && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++) {
        const cudnnBackendNumericalNote_t x = notes[i];
        if (det && x == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
        if (fp32_no_tf32 && (x == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || x == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
                             x == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION))
            return false;
        if (strict && det && (x == CUDNN_NUMERICAL_NOTE_FFT || x == CUDNN_NUMERICAL_NOTE_WINOGRAD ||
                              x == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4 || x == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6 ||
                              x == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13))
            return false;
    }
    for (int64_t i = 0; i < nb && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; i++)
        if (behav[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return false;
    return true;
}

/* Runs execution plan exec on the three pointers (ptr[k] for UID_X, UID_W,
 * UID_Y) with workspace ws. */
cudnnStatus_t graph_execute(cudnnHandle_t h, cudnnBackendDescriptor_t exec, void *const ptr[3], void *ws) {
    bdesc vp(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    if (!vp.ok()) return vp.st;
    const int64_t uids[3] = {UID_X, UID_W, UID_Y};
    if (!set_attr(vp.d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids) ||
        !set_attr(vp.d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptr) ||
        !set_attr(vp.d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws))
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t st = cudnnBackendFinalize(vp.d);
    return st != CUDNN_STATUS_SUCCESS ? st : cudnnBackendExecute(h, exec, vp.d);
}

/* Milliseconds per run of exec (3 timed runs after one warm-up), or -1 when
 * it fails to run. */
float graph_time(const pe_op_ctx *ctx, cudnnHandle_t h, cudaStream_t s, cudnnBackendDescriptor_t exec, int64_t ws_bytes,
                 void *const ptr[3]) {
    pe_cuda_temp ws(ctx, (size_t)ws_bytes);
    if (!ws.ok((size_t)ws_bytes)) return -1.0f;
    cudaEvent_t a = nullptr, b = nullptr;
    float ms = -1.0f;
    if (cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess &&
        graph_execute(h, exec, ptr, ws.get()) == CUDNN_STATUS_SUCCESS && cudaEventRecord(a, s) == cudaSuccess) {
        bool ran = true;
        for (int i = 0; i < 3 && ran; i++) ran = graph_execute(h, exec, ptr, ws.get()) == CUDNN_STATUS_SUCCESS;
        if (ran && cudaEventRecord(b, s) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
            cudaEventElapsedTime(&ms, a, b) == cudaSuccess)
            ms /= 3.0f;
        else
            ms = -1.0f;
    }
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    (void)cudaGetLastError();
    return ms;
}

/* The graph API's plan for (kind, c, g, dt): p->exec set (owned by the
 * caller) when an engine passes the filters; left nullptr otherwise (the
 * classic API is asked next). */
void graph_plan(const pe_op_ctx *ctx, cudnnHandle_t h, cudaStream_t s, const conv_cudnn *c, conv_kind kind,
                const pe_conv_geom *g, pe_dtype dt, int64_t align, void *const ptr[3], conv_plan *p) {
    const cudnnDataType_t t = dt == PE_DTYPE_FP64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    const bool fp32_no_tf32 = dt == PE_DTYPE_FP32 && !tf32_enabled();
    const int64_t xd[4] = {g->n, g->c, c->hp, c->wp}, wd[4] = {g->m, g->c / g->groups, g->kh, g->kw},
                  yd[4] = {g->n, g->m, g->oh, g->ow};
    bdesc x(CUDNN_BACKEND_TENSOR_DESCRIPTOR), w(CUDNN_BACKEND_TENSOR_DESCRIPTOR), y(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (!graph_tensor(x, t, UID_X, xd, align) || !graph_tensor(w, t, UID_W, wd, align) ||
        !graph_tensor(y, t, UID_Y, yd, align))
        return;
    bdesc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t sd = 2, dil[2] = {g->dh, g->dw}, str[2] = {g->sh, g->sw}, pad[2] = {c->ph, c->pw};
    if (!conv.ok() || !set_attr(conv.d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t) ||
        !set_attr(conv.d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
        !set_attr(conv.d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd) ||
        !set_attr(conv.d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil) ||
        !set_attr(conv.d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str) ||
        !set_attr(conv.d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad) ||
        !set_attr(conv.d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad) ||
        cudnnBackendFinalize(conv.d) != CUDNN_STATUS_SUCCESS)
        return;
    /* the node: its descriptor type and the attr names of its slots, by kind */
    static const cudnnBackendDescriptorType_t op_type[3] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    static const cudnnBackendAttributeName_t a_x[3] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                                                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X},
                                             a_w[3] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                                                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW},
                                             a_y[3] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                                                       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY},
                                             a_conv[3] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                                          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                                                          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC},
                                             a_alpha[3] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                                                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA},
                                             a_beta[3] = {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                                          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                                                          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
    bdesc op(op_type[kind]);
    const double d1 = 1.0, d0 = 0.0;
    const float f1 = 1.0f, f0 = 0.0f;
    const bool f64 = dt == PE_DTYPE_FP64;
    const cudnnBackendAttributeType_t st_ = f64 ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
    if (!op.ok() || !set_attr(op.d, a_x[kind], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.d) ||
        !set_attr(op.d, a_w[kind], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w.d) ||
        !set_attr(op.d, a_y[kind], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.d) ||
        !set_attr(op.d, a_conv[kind], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv.d) ||
        !set_attr(op.d, a_alpha[kind], st_, 1, f64 ? (const void *)&d1 : (const void *)&f1) ||
        !set_attr(op.d, a_beta[kind], st_, 1, f64 ? (const void *)&d0 : (const void *)&f0) ||
        cudnnBackendFinalize(op.d) != CUDNN_STATUS_SUCCESS)
        return;
    bdesc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (!graph.ok() || !set_attr(graph.d, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op.d) ||
        !set_attr(graph.d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
        cudnnBackendFinalize(graph.d) != CUDNN_STATUS_SUCCESS)
        return;
    bdesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
    int64_t n = 0;
    if (!heur.ok() ||
        !set_attr(heur.d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph.d) ||
        !set_attr(heur.d, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm) ||
        cudnnBackendFinalize(heur.d) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                                 nullptr) != CUDNN_STATUS_SUCCESS ||
        n <= 0)
        return;
    std::vector<cudnnBackendDescriptor_t> cfgs((size_t)n, nullptr);
    for (auto &d : cfgs)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &d) != CUDNN_STATUS_SUCCESS) d = nullptr;
    int64_t got = 0;
    const bool all = std::all_of(cfgs.begin(), cfgs.end(), [](cudnnBackendDescriptor_t d) { return d != nullptr; });
    if (all && cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                                        cfgs.data()) == CUDNN_STATUS_SUCCESS) {
        const bool timed = exhaustive_search();
        float best_ms = -1.0f;
        for (int pass = 0; pass < 2 && !p->exec; pass++)
            for (int64_t i = 0; i < got && (timed || !p->exec); i++) {
                if (!engine_ok(cfgs[(size_t)i], fp32_no_tf32, pass == 0)) continue;
                bdesc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
                int64_t ws = 0, k = 0;
                if (!plan.ok() || !set_attr(plan.d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
                    !set_attr(plan.d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                              &cfgs[(size_t)i]) ||
                    cudnnBackendFinalize(plan.d) != CUDNN_STATUS_SUCCESS ||
                    cudnnBackendGetAttribute(plan.d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                             &k, &ws) != CUDNN_STATUS_SUCCESS ||
                    ws < 0 || (pass == 0 && (size_t)ws > kMaxWorkspace))
                    continue;
                if (timed) { /* PE_CUDNN_EXHAUSTIVE_SEARCH: the fastest of the plans that pass */
                    const float ms = graph_time(ctx, h, s, plan.d, ws, ptr);
                    if (ms < 0.0f || (best_ms >= 0.0f && ms >= best_ms)) continue;
                    best_ms = ms;
                    if (p->exec) cudnnBackendDestroyDescriptor(p->exec);
                }
                p->exec = plan.release();
                p->ws = (size_t)ws;
            }
    }
    for (auto d : cfgs)
        if (d) cudnnBackendDestroyDescriptor(d);
    if (p->exec) p->direct = false;
}

/* The classic API: cudnnGet*Algorithm_v7 / cudnnFind* as ranked; the
 * first usable result and its workspace. */
void classic_plan(const pe_op_ctx *ctx, cudnnHandle_t h, conv_cudnn *c, conv_kind kind, pe_dtype dt, conv_plan *plan);

/* PE_CUDNN_API=graph: the graph API first (the classic one where it has no
 * engine for a shape); default (or legacy): the classic API only. The
 * classic API's choices reproduce the CPU kernels' training within ~1e-6
 * over 20 CNN steps on an H200, the graph API's heuristic engines (faster:
 * ResNet-20 at 0.89x the classic step there) drift 1e-2 from it — see
 * docs/benchmarks.md, "Third GPU session". */
bool graph_api() {
    static const bool on = [] {
        const char *v = getenv("PE_CUDNN_API");
        return v && !strcmp(v, "graph");
    }();
    return on;
}

/* The largest of 16, 8, 4 dividing every pointer's address (the byte
 * alignment the graph API may assume). */
int64_t ptr_align(void *const ptr[3]) {
    int64_t a = 16;
    for (int k = 0; k < 3; k++)
        while (a > 1 && ((uintptr_t)ptr[k] % (uintptr_t)a)) a /= 2;
    return a;
}

/* The cached plan of (kind, g, dt) on the place, chosen on first use: the
 * graph API's, else the classic API's, else the direct kernels. */
pe_status conv_get_plan(const pe_op_ctx *ctx, cudnnHandle_t h, cudaStream_t s, conv_cudnn *c, conv_kind kind,
                        const pe_conv_geom *g, pe_dtype dt, void *const ptr[3], conv_plan *plan) {
    const int64_t align = ptr_align(ptr);
    const conv_key key = conv_key_of(ctx, kind, g, dt, c, align);
    {
        std::lock_guard<std::mutex> lk(g_plan_mu);
        auto it = g_plans.find(key);
        if (it != g_plans.end()) {
            *plan = it->second;
            return PE_OK;
        }
    }
    conv_plan p;
    p.direct = true;
    if (graph_api()) graph_plan(ctx, h, s, c, kind, g, dt, align, ptr, &p);
    if (!p.exec) classic_plan(ctx, h, c, kind, dt, &p);
    std::lock_guard<std::mutex> lk(g_plan_mu);
    auto ins = g_plans.emplace(key, p);
    if (!ins.second && p.exec) cudnnBackendDestroyDescriptor(p.exec); /* another thread cached one first */
    *plan = ins.first->second;
    return PE_OK;
}

void classic_plan(const pe_op_ctx *ctx, cudnnHandle_t h, conv_cudnn *c, conv_kind kind, pe_dtype dt, conv_plan *plan) {
    const bool fp32_no_tf32 = dt == PE_DTYPE_FP32 && !tf32_enabled();
    conv_plan p;
    p.direct = true;
    int n = 0;
    if (kind == CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT], best;
        if ((exhaustive_search() ? cudnnFindConvolutionForwardAlgorithm(h, c->x.d, c->w.d, c->conv.d, c->y.d,
                                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r)
                              : cudnnGetConvolutionForwardAlgorithm_v7(h, c->x.d, c->w.d, c->conv.d, c->y.d,
                                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r)) ==
                CUDNN_STATUS_SUCCESS &&
            pick_perf(r, n, fp32_no_tf32, &best)) {
            p.direct = false;
            p.algo = (int)best.algo;
            p.math = best.mathType;
        }
    } else if (kind == CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT], best;
        if ((exhaustive_search()
                 ? cudnnFindConvolutionBackwardDataAlgorithm(h, c->w.d, c->y.d, c->conv.d, c->x.d,
                                                             CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r)
                 : cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c->w.d, c->y.d, c->conv.d, c->x.d,
                                                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r)) ==
                CUDNN_STATUS_SUCCESS &&
            pick_perf(r, n, fp32_no_tf32, &best)) {
            p.direct = false;
            p.algo = (int)best.algo;
            p.math = best.mathType;
        }
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT], best;
        if ((exhaustive_search()
                 ? cudnnFindConvolutionBackwardFilterAlgorithm(h, c->x.d, c->y.d, c->conv.d, c->w.d,
                                                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r)
                 : cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c->x.d, c->y.d, c->conv.d, c->w.d,
                                                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r)) ==
                CUDNN_STATUS_SUCCESS &&
            pick_perf(r, n, fp32_no_tf32, &best)) {
            p.direct = false;
            p.algo = (int)best.algo;
            p.math = best.mathType;
        }
    }
    if (!p.direct) {
        /* Float32 without TF32: FMA-only kernels (cuDNN's default math may use TF32). */
        if (fp32_no_tf32) p.math = CUDNN_FMA_MATH;
        else if (dt == PE_DTYPE_FP64) p.math = CUDNN_DEFAULT_MATH;
        cudnnStatus_t st = cudnnSetConvolutionMathType(c->conv.d, p.math);
        if (kind == CONV_FWD)
            st = cudnnGetConvolutionForwardWorkspaceSize(h, c->x.d, c->w.d, c->conv.d, c->y.d,
                                                         (cudnnConvolutionFwdAlgo_t)p.algo, &p.ws);
        else if (kind == CONV_BWD_DATA)
            st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, c->w.d, c->y.d, c->conv.d, c->x.d,
                                                              (cudnnConvolutionBwdDataAlgo_t)p.algo, &p.ws);
        else
            st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c->x.d, c->y.d, c->conv.d, c->w.d,
                                                                (cudnnConvolutionBwdFilterAlgo_t)p.algo, &p.ws);
        if (st != CUDNN_STATUS_SUCCESS) p = conv_plan{};
        p.direct = st != CUDNN_STATUS_SUCCESS;
    }
    (void)ctx;
    *plan = p;
}

/* Marks a plan direct after cuDNN refused to run it (a graph plan stays
 * owned by the cache: another thread may hold it). */
void conv_plan_demote(const pe_op_ctx *ctx, conv_kind kind, const pe_conv_geom *g, pe_dtype dt, const conv_cudnn *c,
                      int64_t align) {
    const conv_key key = conv_key_of(ctx, kind, g, dt, c, align);
    std::lock_guard<std::mutex> lk(g_plan_mu);
    conv_plan &p = g_plans[key];
    p.direct = true;
}

/* Runs kind on cuDNN: fwd (a = x, b = w, out = y), bwd data (a = dy, b = w,
 * out = dx), bwd filter (a = x, b = dy, out = dw); x/dx in cuDNN's (padded)
 * plane. *done false: the caller runs the direct kernel instead. */
pe_status conv_run_cudnn(const pe_op_ctx *ctx, cudaStream_t s, const pe_conv_geom *g, pe_dtype dt, conv_kind kind,
                         conv_cudnn *c, const void *a, const void *b, void *out, bool *done) {
    *done = false;
    if (!c->fits) return PE_OK;
    dnn_guard dnn(ctx, s);
    if (!dnn.ok()) return PE_ERR_DEVICE;
    /* the graph API's three tensors: Input (x / dx), Filter (w / dw), Output (y / dy) */
    void *const ptr[3] = {kind == CONV_BWD_DATA ? out : (void *)a, kind == CONV_BWD_FILTER ? out : (void *)b,
                          kind == CONV_FWD ? out : kind == CONV_BWD_DATA ? (void *)a : (void *)b};
    conv_plan plan;
    PE_CHECK(conv_get_plan(ctx, dnn.get(), s, c, kind, g, dt, ptr, &plan));
    if (plan.direct) return PE_OK;
    pe_cuda_temp ws(ctx, plan.ws);
    if (!ws.ok(plan.ws)) return PE_ERR_NOMEM;
    if (plan.exec) {
        const cudnnStatus_t st = graph_execute(dnn.get(), plan.exec, ptr, ws.get());
        if ((int)st / 1000 == 2 || (int)st / 1000 == 3) { /* refused, nothing ran: the direct kernels */
            conv_plan_demote(ctx, kind, g, dt, c, ptr_align(ptr));
            return PE_OK;
        }
        PE_CHECK(dnn_check(ctx, st, "cudnnBackendExecute (convolution)"));
        *done = true;
        return PE_OK;
    }
    PE_CHECK(dnn_check(ctx, cudnnSetConvolutionMathType(c->conv.d, plan.math), "cudnnSetConvolutionMathType"));
    const float f1 = 1.0f, f0 = 0.0f;
    const double d1 = 1.0, d0 = 0.0;
    const void *one = dt == PE_DTYPE_FP64 ? (const void *)&d1 : (const void *)&f1;
    const void *zero = dt == PE_DTYPE_FP64 ? (const void *)&d0 : (const void *)&f0;
    cudnnStatus_t st;
    const char *what;
    if (kind == CONV_FWD) {
        what = "cudnnConvolutionForward";
        st = cudnnConvolutionForward(dnn.get(), one, c->x.d, a, c->w.d, b, c->conv.d,
                                     (cudnnConvolutionFwdAlgo_t)plan.algo, ws.get(), plan.ws, zero, c->y.d, out);
    } else if (kind == CONV_BWD_DATA) {
        what = "cudnnConvolutionBackwardData";
        st = cudnnConvolutionBackwardData(dnn.get(), one, c->w.d, b, c->y.d, a, c->conv.d,
                                          (cudnnConvolutionBwdDataAlgo_t)plan.algo, ws.get(), plan.ws, zero, c->x.d,
                                          out);
    } else {
        what = "cudnnConvolutionBackwardFilter";
        st = cudnnConvolutionBackwardFilter(dnn.get(), one, c->x.d, a, c->y.d, b, c->conv.d,
                                            (cudnnConvolutionBwdFilterAlgo_t)plan.algo, ws.get(), plan.ws, zero,
                                            c->w.d, out);
    }
    /* cuDNN 9's codes: 2xxx bad parameter, 3xxx not supported (nothing ran). */
    if ((int)st / 1000 == 2 || (int)st / 1000 == 3) {
        conv_plan_demote(ctx, kind, g, dt, c, ptr_align(ptr));
        return PE_OK;
    }
    PE_CHECK(dnn_check(ctx, st, what));
    *done = true;
    return PE_OK;
}

/* ==== convolution kernels ================================================ */

/* x: [N, C, H, W] -> xp: [N, C, H+pt+pb, W+pl+pr], zeros in the padding */
template <typename T>
__global__ void k_pad(const T *x, T *xp, int64_t nc, int64_t h, int64_t w, int64_t pt, int64_t pl, int64_t hp,
                      int64_t wp) {
    PE_CUDA_LOOP(i, nc * hp * wp) {
        const int64_t xx = i % wp - pl, t = i / wp, yy = t % hp - pt, p = t / hp;
        xp[i] = (yy >= 0 && yy < h && xx >= 0 && xx < w) ? x[(p * h + yy) * w + xx] : (T)0;
    }
}

/* xp: [N, C, hp, wp] -> x: [N, C, H, W] = xp[:, :, pt:pt+H, pl:pl+W] */
template <typename T>
__global__ void k_crop(const T *xp, T *x, int64_t nc, int64_t h, int64_t w, int64_t pt, int64_t pl, int64_t hp,
                       int64_t wp) {
    PE_CUDA_LOOP(i, nc * h * w) {
        const int64_t xx = i % w, t = i / w, yy = t % h, p = t / h;
        x[i] = xp[(p * hp + yy + pt) * wp + xx + pl];
    }
}

/* y: [N, M, P] += b: [M] */
template <typename T> __global__ void k_add_bias(T *y, const T *b, int64_t numel, int64_t m, int64_t plane) {
    PE_CUDA_LOOP(i, numel) { y[i] = add_rn(y[i], b[(i / plane) % m]); }
}

/* The direct loops of ops/cpu/nn.c / nn_grad.c, one thread per output element. */

/* x: [N, C, H, W], w: [M, C/groups, kh, kw], b: [M] or NULL -> y: [N, M, oh, ow] */
template <typename T>
__global__ void k_conv_direct(pe_conv_geom g, const T *x, const T *w, const T *b, T *y) {
    const int64_t cg = g.c / g.groups, mg = g.m / g.groups, khw = g.kh * g.kw;
    PE_CUDA_LOOP(i, g.n * g.m * g.oh * g.ow) {
        const int64_t ox = i % g.ow, t1 = i / g.ow, oy = t1 % g.oh, t2 = t1 / g.oh, m = t2 % g.m, n = t2 / g.m;
        const int64_t c0 = (m / mg) * cg;
        const T *wm = w + m * cg * khw;
        T acc = b ? b[m] : (T)0;
        for (int64_t ci = 0; ci < cg; ci++) {
            const T *xc = x + (n * g.c + c0 + ci) * g.h * g.w;
            const T *wc = wm + ci * khw;
            for (int64_t ky = 0; ky < g.kh; ky++) {
                const int64_t iy = oy * g.sh - g.pt + ky * g.dh;
                if (iy < 0 || iy >= g.h) continue;
                for (int64_t kx = 0; kx < g.kw; kx++) {
                    const int64_t ix = ox * g.sw - g.pl + kx * g.dw;
                    if (ix < 0 || ix >= g.w) continue;
                    acc = add_rn(acc, mul_rn(xc[iy * g.w + ix], wc[ky * g.kw + kx]));
                }
            }
        }
        y[i] = acc;
    }
}

/* dy: [N, M, oh, ow], w: [M, C/groups, kh, kw] -> dx: [N, C, H, W] */
template <typename T>
__global__ void k_conv_bwd_data_direct(pe_conv_geom g, const T *dy, const T *w, T *dx) {
    const int64_t cg = g.c / g.groups, mg = g.m / g.groups, khw = g.kh * g.kw;
    PE_CUDA_LOOP(i, g.n * g.c * g.h * g.w) {
        const int64_t ix = i % g.w, t1 = i / g.w, iy = t1 % g.h, t2 = t1 / g.h, c = t2 % g.c, n = t2 / g.c;
        const int64_t m0 = (c / cg) * mg, ci = c % cg;
        double acc = 0;
        for (int64_t m = m0; m < m0 + mg; m++) {
            const T *dyp = dy + (n * g.m + m) * g.oh * g.ow;
            const T *wp = w + (m * cg + ci) * khw;
            for (int64_t ky = 0; ky < g.kh; ky++) {
                const int64_t ty = iy + g.pt - ky * g.dh;
                if (ty < 0 || ty % g.sh) continue;
                const int64_t oy = ty / g.sh;
                if (oy >= g.oh) continue;
                for (int64_t kx = 0; kx < g.kw; kx++) {
                    const int64_t tx = ix + g.pl - kx * g.dw;
                    if (tx < 0 || tx % g.sw) continue;
                    const int64_t ox = tx / g.sw;
                    if (ox >= g.ow) continue;
                    acc = add_rn(acc, mul_rn((double)dyp[oy * g.ow + ox], (double)wp[ky * g.kw + kx]));
                }
            }
        }
        dx[i] = (T)acc;
    }
}

/* x: [N, C, H, W], dy: [N, M, oh, ow] -> dw: [M, C/groups, kh, kw] */
template <typename T>
__global__ void k_conv_bwd_weights_direct(pe_conv_geom g, const T *x, const T *dy, T *dw) {
    const int64_t cg = g.c / g.groups, mg = g.m / g.groups, khw = g.kh * g.kw, plane = g.oh * g.ow;
    PE_CUDA_LOOP(e, g.m * cg * khw) {
        const int64_t m = e / (cg * khw), ci = e / khw % cg, ky = e % khw / g.kw, kx = e % g.kw;
        const int64_t c = (m / mg) * cg + ci;
        double acc = 0;
        for (int64_t n = 0; n < g.n; n++) {
            const T *xp = x + (n * g.c + c) * g.h * g.w;
            const T *dyp = dy + (n * g.m + m) * plane;
            for (int64_t oy = 0; oy < g.oh; oy++) {
                const int64_t iy = oy * g.sh - g.pt + ky * g.dh;
                if (iy < 0 || iy >= g.h) continue;
                for (int64_t ox = 0; ox < g.ow; ox++) {
                    const int64_t ix = ox * g.sw - g.pl + kx * g.dw;
                    if (ix < 0 || ix >= g.w) continue;
                    acc = add_rn(acc, mul_rn((double)dyp[oy * g.ow + ox], (double)xp[iy * g.w + ix]));
                }
            }
        }
        dw[e] = (T)acc;
    }
}

/* dy: [N, M, P] -> db: [M] = sum over N and P, in double, one block per
 * channel with a fixed-order tree. */
template <typename T> __global__ void k_bias_grad(const T *dy, T *db, int64_t n, int64_t m, int64_t plane) {
    __shared__ double sh[PE_CUDA_THREADS];
    for (int64_t c = blockIdx.x; c < m; c += gridDim.x) {
        double a = 0;
        for (int64_t e = threadIdx.x; e < n * plane; e += blockDim.x)
            a = add_rn(a, (double)dy[((e / plane) * m + c) * plane + e % plane]);
        sh[threadIdx.x] = a;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w) sh[threadIdx.x] = add_rn(sh[threadIdx.x], sh[threadIdx.x + w]);
            __syncthreads();
        }
        if (threadIdx.x == 0) db[c] = (T)sh[0];
        __syncthreads();
    }
}

/* ---- the three computations (host) -------------------------------------- */

cudnnMathType_t conv_math(pe_dtype dt) {
    return dt == PE_DTYPE_FP32 && !tf32_enabled() ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

/* x: [N, C, H, W], w: [M, C/groups, kh, kw], b: [M] or NULL -> y: [N, M, oh, ow] */
template <typename T>
pe_status conv_fwd(const pe_op_ctx *ctx, cudaStream_t s, const pe_conv_geom *g, pe_dtype dt, const T *x, const T *w,
                   const T *b, T *y) {
    const int64_t ny = g->n * g->m * g->oh * g->ow;
    if (ny == 0) return PE_OK;
    conv_cudnn c;
    PE_CHECK(conv_cudnn_init(ctx, &c, g, dt, conv_math(dt)));
    bool done = false;
    {
        const size_t pbytes = c.explicit_pad && c.fits ? (size_t)(g->n * g->c * c.hp * c.wp) * sizeof(T) : 0;
        pe_cuda_temp xp(ctx, pbytes);
        if (!xp.ok(pbytes)) return PE_ERR_NOMEM;
        if (pbytes) {
            k_pad<T><<<pe_cuda_blocks(g->n * g->c * c.hp * c.wp), PE_CUDA_THREADS, 0, s>>>(
                x, xp.get<T>(), g->n * g->c, g->h, g->w, g->pt, g->pl, c.hp, c.wp);
            PE_CHECK(pe_cuda_check_launch(ctx));
        }
        PE_CHECK(conv_run_cudnn(ctx, s, g, dt, CONV_FWD, &c, pbytes ? xp.get<T>() : x, w, y, &done));
    }
    if (!done) {
        k_conv_direct<T><<<pe_cuda_blocks(ny), PE_CUDA_THREADS, 0, s>>>(*g, x, w, b, y);
        return pe_cuda_check_launch(ctx);
    }
    if (b) k_add_bias<T><<<pe_cuda_blocks(ny), PE_CUDA_THREADS, 0, s>>>(y, b, ny, g->m, g->oh * g->ow);
    return pe_cuda_check_launch(ctx);
}

/* dy: [N, M, oh, ow], w: [M, C/groups, kh, kw] -> dx: [N, C, H, W] (0 when dy is empty) */
template <typename T>
pe_status conv_bwd_data(const pe_op_ctx *ctx, cudaStream_t s, const pe_conv_geom *g, pe_dtype dt, const T *dy,
                        const T *w, T *dx) {
    const int64_t nx = g->n * g->c * g->h * g->w;
    if (g->n * g->m * g->oh * g->ow == 0) return zero_async(ctx, dx, (size_t)nx * sizeof(T), s);
    conv_cudnn c;
    PE_CHECK(conv_cudnn_init(ctx, &c, g, dt, conv_math(dt)));
    bool done = false;
    {
        const size_t pbytes = c.explicit_pad && c.fits ? (size_t)(g->n * g->c * c.hp * c.wp) * sizeof(T) : 0;
        pe_cuda_temp dxp(ctx, pbytes);
        if (!dxp.ok(pbytes)) return PE_ERR_NOMEM;
        PE_CHECK(conv_run_cudnn(ctx, s, g, dt, CONV_BWD_DATA, &c, dy, w, pbytes ? dxp.get<T>() : dx, &done));
        if (done && pbytes && nx) {
            k_crop<T><<<pe_cuda_blocks(nx), PE_CUDA_THREADS, 0, s>>>(dxp.get<T>(), dx, g->n * g->c, g->h, g->w,
                                                                     g->pt, g->pl, c.hp, c.wp);
            PE_CHECK(pe_cuda_check_launch(ctx));
        }
    }
    if (!done && nx) {
        k_conv_bwd_data_direct<T><<<pe_cuda_blocks(nx), PE_CUDA_THREADS, 0, s>>>(*g, dy, w, dx);
        return pe_cuda_check_launch(ctx);
    }
    return PE_OK;
}

/* x: [N, C, H, W], dy: [N, M, oh, ow] -> dw?: [M, C/groups, kh, kw], db?: [M] (0 when dy is empty) */
template <typename T>
pe_status conv_bwd_weights(const pe_op_ctx *ctx, cudaStream_t s, const pe_conv_geom *g, pe_dtype dt, const T *x,
                           const T *dy, T *dw, T *db) {
    const int64_t nw = g->m * (g->c / g->groups) * g->kh * g->kw;
    if (g->n * g->m * g->oh * g->ow == 0) {
        PE_CHECK(zero_async(ctx, dw, (size_t)nw * sizeof(T), s));
        return zero_async(ctx, db, (size_t)g->m * sizeof(T), s);
    }
    if (db) {
        k_bias_grad<T><<<pe_cuda_blocks(g->m * PE_CUDA_THREADS), PE_CUDA_THREADS, 0, s>>>(dy, db, g->n, g->m,
                                                                                         g->oh * g->ow);
        PE_CHECK(pe_cuda_check_launch(ctx));
    }
    if (!dw) return PE_OK;
    conv_cudnn c;
    PE_CHECK(conv_cudnn_init(ctx, &c, g, dt, conv_math(dt)));
    bool done = false;
    {
        const size_t pbytes = c.explicit_pad && c.fits ? (size_t)(g->n * g->c * c.hp * c.wp) * sizeof(T) : 0;
        pe_cuda_temp xp(ctx, pbytes);
        if (!xp.ok(pbytes)) return PE_ERR_NOMEM;
        if (pbytes) {
            k_pad<T><<<pe_cuda_blocks(g->n * g->c * c.hp * c.wp), PE_CUDA_THREADS, 0, s>>>(
                x, xp.get<T>(), g->n * g->c, g->h, g->w, g->pt, g->pl, c.hp, c.wp);
            PE_CHECK(pe_cuda_check_launch(ctx));
        }
        PE_CHECK(conv_run_cudnn(ctx, s, g, dt, CONV_BWD_FILTER, &c, pbytes ? xp.get<T>() : x, dy, dw, &done));
    }
    if (!done) {
        k_conv_bwd_weights_direct<T><<<pe_cuda_blocks(nw), PE_CUDA_THREADS, 0, s>>>(*g, x, dy, dw);
        return pe_cuda_check_launch(ctx);
    }
    return PE_OK;
}

template <typename T> const T *cdata(const pe_tensor *t) { return t ? (const T *)pe_tensor_data(t) : nullptr; }
template <typename T> T *mdata(pe_tensor *t) { return t ? (T *)pe_tensor_data(t) : nullptr; }

/* ==== pooling ============================================================ */

/* The input cells [a0, a1) of output o along one axis: pe_pool_window of
 * ops/cpu/nn_common.h (adaptive: [o*in/out, ceil((o+1)*in/out)); else the
 * k-window at o*s - p clipped to [0, in), empty when wholly in the padding). */
__device__ inline void pool_window(bool adaptive, int64_t o, int64_t in, int64_t out, int64_t s, int64_t k, int64_t p,
                                   int64_t *a0, int64_t *a1) {
    if (adaptive) {
        *a0 = o * in / out;
        *a1 = ((o + 1) * in + out - 1) / out;
        return;
    }
    int64_t lo = o * s - p, hi = lo + k < in ? lo + k : in;
    lo = lo > 0 ? lo : 0;
    *a0 = lo;
    *a1 = hi > lo ? hi : lo;
}

/* The outputs [o0, o1) along one axis whose window holds input cell i (a
 * contiguous range: window starts and ends grow with o). */
__device__ inline void pool_windows_of(bool adaptive, int64_t i, int64_t in, int64_t out, int64_t s, int64_t k,
                                       int64_t p, int64_t *o0, int64_t *o1) {
    if (adaptive) {
        const int64_t oc = i * out / in; /* holds i */
        int64_t lo = oc, hi = oc + 1;
        while (lo > 0 && (lo * in + out - 1) / out > i) lo--;
        while (hi < out && hi * in / out <= i) hi++;
        *o0 = lo;
        *o1 = hi;
        return;
    }
    /* o*s - p <= i < o*s - p + k */
    const int64_t t = i + p - k;
    int64_t lo = t < 0 ? 0 : t / s + 1, hi = (i + p) / s + 1;
    if (hi > out) hi = out;
    *o0 = lo;
    *o1 = hi > lo ? hi : lo;
}

/* x: [N, C, H, W] -> y: [N, C, oh, ow] (the CPU loop: max ignores NaN and
 * gives the lowest finite value on an empty window, avg 0 there) */
template <typename T> __global__ void k_pool_fwd(pe_pool_geom g, const T *x, T *y) {
    PE_CUDA_LOOP(i, g.n * g.c * g.oh * g.ow) {
        const int64_t ox = i % g.ow, t = i / g.ow, oy = t % g.oh, nc = t / g.oh;
        const T *xp = x + nc * g.h * g.w;
        int64_t h0, h1, w0, w1;
        pool_window(g.adaptive, oy, g.h, g.oh, g.sh, g.kh, g.pt, &h0, &h1);
        pool_window(g.adaptive, ox, g.w, g.ow, g.sw, g.kw, g.pl, &w0, &w1);
        T acc = g.is_max ? lowest<T>() : (T)0;
        for (int64_t iy = h0; iy < h1; iy++)
            for (int64_t ix = w0; ix < w1; ix++) {
                const T v = xp[iy * g.w + ix];
                if (g.is_max) acc = v > acc ? v : acc;
                else acc = add_rn(acc, v);
            }
        if (!g.is_max) {
            const int64_t cnt = (g.exclusive || g.adaptive) ? (h1 - h0) * (w1 - w0) : g.kh * g.kw;
            acc = cnt > 0 ? acc / (T)cnt : (T)0;
        }
        y[i] = acc;
    }
}

/* x: [N, C, H, W] -> arg: [N, C, oh, ow], the plane index of each window's
 * first maximum in row-major order (-1: empty window) */
template <typename T> __global__ void k_pool_argmax(pe_pool_geom g, const T *x, int64_t *arg) {
    PE_CUDA_LOOP(i, g.n * g.c * g.oh * g.ow) {
        const int64_t ox = i % g.ow, t = i / g.ow, oy = t % g.oh, nc = t / g.oh;
        const T *xp = x + nc * g.h * g.w;
        int64_t h0, h1, w0, w1;
        pool_window(g.adaptive, oy, g.h, g.oh, g.sh, g.kh, g.pt, &h0, &h1);
        pool_window(g.adaptive, ox, g.w, g.ow, g.sw, g.kw, g.pl, &w0, &w1);
        if (h1 <= h0 || w1 <= w0) {
            arg[i] = -1;
            continue;
        }
        int64_t a = h0 * g.w + w0;
        T best = xp[a];
        for (int64_t iy = h0; iy < h1; iy++)
            for (int64_t ix = w0; ix < w1; ix++)
                if (xp[iy * g.w + ix] > best) {
                    best = xp[iy * g.w + ix];
                    a = iy * g.w + ix;
                }
        arg[i] = a;
    }
}

/* dy: [N, C, oh, ow] (arg: k_pool_argmax's, max only) -> dx: [N, C, H, W]:
 * each cell gathers the windows holding it in (oy, ox) order — the order in
 * which the CPU loop adds into it. */
template <typename T> __global__ void k_pool_bwd(pe_pool_geom g, const T *dy, const int64_t *arg, T *dx) {
    PE_CUDA_LOOP(i, g.n * g.c * g.h * g.w) {
        const int64_t ix = i % g.w, t = i / g.w, iy = t % g.h, nc = t / g.h;
        const int64_t cell = iy * g.w + ix, obase = nc * g.oh * g.ow;
        int64_t oy0, oy1, ox0, ox1;
        pool_windows_of(g.adaptive, iy, g.h, g.oh, g.sh, g.kh, g.pt, &oy0, &oy1);
        pool_windows_of(g.adaptive, ix, g.w, g.ow, g.sw, g.kw, g.pl, &ox0, &ox1);
        T acc = (T)0;
        for (int64_t oy = oy0; oy < oy1; oy++) {
            int64_t h0, h1;
            pool_window(g.adaptive, oy, g.h, g.oh, g.sh, g.kh, g.pt, &h0, &h1);
            for (int64_t ox = ox0; ox < ox1; ox++) {
                const int64_t o = obase + oy * g.ow + ox;
                if (g.is_max) {
                    if (arg[o] == cell) acc = add_rn(acc, dy[o]);
                } else {
                    int64_t w0, w1;
                    pool_window(g.adaptive, ox, g.w, g.ow, g.sw, g.kw, g.pl, &w0, &w1);
                    const int64_t cnt = (g.exclusive || g.adaptive) ? (h1 - h0) * (w1 - w0) : g.kh * g.kw;
                    acc = add_rn(acc, dy[o] / (T)cnt);
                }
            }
        }
        dx[i] = acc;
    }
}

/* ==== batch_norm ========================================================= */

/* Each channel's M = N*S values cut into P chunks of `chunk`; one block per
 * (chunk, channel) sums its chunk in double (tree in shared memory) ->
 * part: [C, P, 2]. Mode 0: (x, 0); 1: ((x - mu)^2, 0); 2: (dy, dy * (x - mu)),
 * mu: [C] of type MT (the batch mean in scratch, or the Mean/SavedMean tensor). */
template <typename T, typename MT, int Mode>
__global__ void k_bn_partial(const T *x, const T *dy, const MT *mu, int64_t N, int64_t C, int64_t S, int64_t P,
                             int64_t chunk, double *part) {
    __shared__ double s0[PE_CUDA_THREADS], s1[PE_CUDA_THREADS];
    const int64_t M = N * S;
    const int tid = threadIdx.x;
    for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
        const int64_t e0 = (int64_t)blockIdx.x * chunk, e1 = e0 + chunk < M ? e0 + chunk : M;
        const double m = Mode ? (double)mu[c] : 0.0;
        double a0 = 0, a1 = 0;
        for (int64_t e = e0 + tid; e < e1; e += blockDim.x) {
            const int64_t i = ((e / S) * C + c) * S + e % S;
            if (Mode == 0) {
                a0 = add_rn(a0, (double)x[i]);
            } else if (Mode == 1) {
                const double d = sub_rn((double)x[i], m);
                a0 = add_rn(a0, mul_rn(d, d));
            } else {
                const double v = (double)dy[i];
                a0 = add_rn(a0, v);
                a1 = add_rn(a1, mul_rn(v, sub_rn((double)x[i], m)));
            }
        }
        s0[tid] = a0;
        s1[tid] = a1;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w >>= 1) {
            if (tid < w) {
                s0[tid] = add_rn(s0[tid], s0[tid + w]);
                s1[tid] = add_rn(s1[tid], s1[tid + w]);
            }
            __syncthreads();
        }
        if (tid == 0) {
            part[(c * P + blockIdx.x) * 2] = s0[0];
            part[(c * P + blockIdx.x) * 2 + 1] = s1[0];
        }
        __syncthreads();
    }
}

/* part: [C, P, 2] -> mu: [C] = (sum of the P first components) / M */
__global__ void k_bn_mean(const double *part, int64_t C, int64_t P, double M, double *mu) {
    PE_CUDA_LOOP(c, C) {
        double a = 0;
        for (int64_t p = 0; p < P; p++) a = add_rn(a, part[(c * P + p) * 2]);
        mu[c] = a / M;
    }
}

/* Per channel: the statistics (training: mu from k_bn_mean, var = sum
 * (x-mu)^2 / M from part; global: Mean/Variance), the outputs MeanOut,
 * VarianceOut, SavedMean, SavedVariance (each may be NULL; MeanOut/VarianceOut
 * may be Mean/Variance: read before written), and coef: [C, 2] = (a, shift)
 * with y = x * a + shift. */
template <typename T>
__global__ void k_bn_fwd_stats(const double *part, const double *bmu, int64_t C, int64_t P, double M,
                               const T *scale, const T *bias, const T *mean, const T *var, T *mean_out, T *var_out,
                               T *saved_mean, T *saved_var, bool global, double momentum, double eps, double *coef) {
    PE_CUDA_LOOP(c, C) {
        const double rm = (double)mean[c], rv = (double)var[c];
        double mu = rm, v = rv;
        if (!global) {
            double sq = 0;
            for (int64_t p = 0; p < P; p++) sq = add_rn(sq, part[(c * P + p) * 2]);
            mu = bmu[c];
            v = sq / M;
        }
        const double inv = 1.0 / sqrt(add_rn(v, eps)), a = mul_rn((double)scale[c], inv);
        const double sh = sub_rn((double)bias[c], mul_rn(mu, a));
        coef[2 * c] = a;
        coef[2 * c + 1] = sh;
        const double keep = 1.0 - momentum;
        if (mean_out) mean_out[c] = (T)(global ? rm : add_rn(mul_rn(momentum, rm), mul_rn(keep, mu)));
        if (var_out) var_out[c] = (T)(global ? rv : add_rn(mul_rn(momentum, rv), mul_rn(keep, v)));
        if (saved_mean) saved_mean[c] = (T)mu;
        if (saved_var) saved_var[c] = (T)inv;
    }
}

/* x: [N, C, S] -> y = (T)(x * a[c] + shift[c]) */
template <typename T>
__global__ void k_bn_apply(const T *x, T *y, const double *coef, int64_t numel, int64_t C, int64_t S) {
    PE_CUDA_LOOP(i, numel) {
        const int64_t c = (i / S) % C;
        y[i] = (T)add_rn(mul_rn((double)x[i], coef[2 * c]), coef[2 * c + 1]);
    }
}

/* Per channel of the backward: mu, inv (training: SavedMean and the saved
 * inverse std; global: Mean and 1/sqrt(Variance + eps)); with sums (part):
 * Bias@GRAD = sum dy, Scale@GRAD = inv * sum dy*(x-mu) (each may be NULL);
 * coef: [C, 5] = (a = scale*inv, mean(dy), mean(dy*xhat), mu, inv), the
 * means 0 when global. */
template <typename T>
__global__ void k_bn_bwd_stats(const double *part, int64_t C, int64_t P, double M, const T *scale, const T *mean,
                               const T *stat, bool global, double eps, T *dscale, T *dbias, double *coef) {
    PE_CUDA_LOOP(c, C) {
        const double mu = (double)mean[c];
        const double inv = global ? 1.0 / sqrt(add_rn((double)stat[c], eps)) : (double)stat[c];
        double sdy = 0, sdyx = 0;
        if (part)
            for (int64_t p = 0; p < P; p++) {
                sdy = add_rn(sdy, part[(c * P + p) * 2]);
                sdyx = add_rn(sdyx, part[(c * P + p) * 2 + 1]);
            }
        sdyx = mul_rn(sdyx, inv); /* sum dy * xhat */
        if (dbias) dbias[c] = (T)sdy;
        if (dscale) dscale[c] = (T)sdyx;
        coef[5 * c] = mul_rn((double)scale[c], inv);
        coef[5 * c + 1] = global ? 0.0 : sdy / M;
        coef[5 * c + 2] = global ? 0.0 : sdyx / M;
        coef[5 * c + 3] = mu;
        coef[5 * c + 4] = inv;
    }
}

/* x, dy: [N, C, S] -> dx = a * (dy - mean(dy) - (x - mu) * inv * mean(dy*xhat)) */
template <typename T>
__global__ void k_bn_bwd_apply(const T *x, const T *dy, T *dx, const double *coef, int64_t numel, int64_t C,
                               int64_t S) {
    PE_CUDA_LOOP(i, numel) {
        const double *k = coef + 5 * ((i / S) % C);
        const double xh = mul_rn(mul_rn(sub_rn((double)x[i], k[3]), k[4]), k[2]);
        dx[i] = (T)mul_rn(k[0], sub_rn(sub_rn((double)dy[i], k[1]), xh));
    }
}

/* X: [N, C, ...]: nothing to normalise over (ops/cpu/nn_common.h's
 * pe_bn_nothing_to_normalise): empty, or training with one value per channel. */
bool bn_nothing_to_normalise(const pe_tensor *x, bool global) {
    const int64_t numel = pe_tensor_numel(x), N = x->dims[0], C = x->dims[1];
    return numel == 0 || (!global && N * (numel / (N * C)) == 1);
}

/* The chunking of the per-channel sums: P chunks of `chunk` values each
 * (P from the shape only, so the sums' order is fixed). */
void bn_chunks(int64_t M, int64_t *P, int64_t *chunk) {
    int64_t p = (M + 4095) / 4096;
    if (p < 1) p = 1;
    if (p > 256) p = 256;
    *chunk = (M + p - 1) / p;
    *P = (M + *chunk - 1) / *chunk;
}

dim3 bn_grid(int64_t P, int64_t C) { return dim3((unsigned)P, (unsigned)(C < 65535 ? C : 65535)); }

template <typename T>
pe_status bn_fwd(const pe_op_ctx *ctx, cudaStream_t s) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const T *scale = cdata<T>(pe_ctx_in(ctx, "Scale")), *bias = cdata<T>(pe_ctx_in(ctx, "Bias"));
    const T *mean = cdata<T>(pe_ctx_in(ctx, "Mean")), *var = cdata<T>(pe_ctx_in(ctx, "Variance"));
    T *y = mdata<T>(pe_ctx_out(ctx, "Y"));
    T *mean_out = mdata<T>(pe_ctx_out(ctx, "MeanOut")), *var_out = mdata<T>(pe_ctx_out(ctx, "VarianceOut"));
    T *saved_mean = mdata<T>(pe_ctx_out(ctx, "SavedMean")), *saved_var = mdata<T>(pe_ctx_out(ctx, "SavedVariance"));
    const double eps = pe_ctx_float(ctx, "epsilon"), momentum = pe_ctx_float(ctx, "momentum");
    const bool global = pe_ctx_bool(ctx, "is_test") || pe_ctx_bool(ctx, "use_global_stats");
    const int64_t numel = pe_tensor_numel(x), N = x->dims[0], C = x->dims[1];
    const int64_t S = (N * C) != 0 ? numel / (N * C) : 0;
    const T *xd = cdata<T>(x);

    if (bn_nothing_to_normalise(x, global)) {
        /* Paddle: Y = X, statistics untouched, Saved* 0. */
        PE_CHECK(copy_async(ctx, y, xd, (size_t)numel * sizeof(T), s));
        PE_CHECK(copy_async(ctx, mean_out, mean, mean_out ? (size_t)C * sizeof(T) : 0, s));
        PE_CHECK(copy_async(ctx, var_out, var, var_out ? (size_t)C * sizeof(T) : 0, s));
        PE_CHECK(zero_async(ctx, saved_mean, (size_t)C * sizeof(T), s));
        return zero_async(ctx, saved_var, (size_t)C * sizeof(T), s);
    }
    const int64_t M = N * S;
    int64_t P = 1, chunk = 1;
    bn_chunks(M, &P, &chunk);
    const size_t bytes = ((global ? 0 : (size_t)C * P * 2 + (size_t)C) + 2 * (size_t)C) * sizeof(double);
    pe_cuda_temp tmp(ctx, bytes);
    if (!tmp.ok(bytes)) return PE_ERR_NOMEM;
    double *coef = tmp.get<double>(), *bmu = coef + 2 * C, *part = bmu + C;
    if (!global) {
        k_bn_partial<T, double, 0><<<bn_grid(P, C), PE_CUDA_THREADS, 0, s>>>(xd, nullptr, nullptr, N, C, S, P, chunk,
                                                                             part);
        k_bn_mean<<<pe_cuda_blocks(C), PE_CUDA_THREADS, 0, s>>>(part, C, P, (double)M, bmu);
        k_bn_partial<T, double, 1><<<bn_grid(P, C), PE_CUDA_THREADS, 0, s>>>(xd, nullptr, bmu, N, C, S, P, chunk,
                                                                             part);
    }
    k_bn_fwd_stats<T><<<pe_cuda_blocks(C), PE_CUDA_THREADS, 0, s>>>(
        global ? nullptr : part, global ? nullptr : bmu, C, P, (double)M, scale, bias, mean, var, mean_out, var_out,
        saved_mean, saved_var, global, momentum, eps, coef);
    k_bn_apply<T><<<pe_cuda_blocks(numel), PE_CUDA_THREADS, 0, s>>>(xd, y, coef, numel, C, S);
    return pe_cuda_check_launch(ctx);
}

template <typename T>
pe_status bn_bwd(const pe_op_ctx *ctx, cudaStream_t s) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    const bool global = pe_ctx_bool(ctx, "is_test") || pe_ctx_bool(ctx, "use_global_stats");
    const T *scale = cdata<T>(pe_ctx_in(ctx, "Scale")), *dy = cdata<T>(pe_ctx_in(ctx, "Y@GRAD"));
    const T *mean = cdata<T>(pe_ctx_in(ctx, global ? "Mean" : "SavedMean"));
    const T *stat = cdata<T>(pe_ctx_in(ctx, global ? "Variance" : "SavedVariance"));
    T *dx = mdata<T>(pe_ctx_out(ctx, "X@GRAD")), *dscale = mdata<T>(pe_ctx_out(ctx, "Scale@GRAD"));
    T *dbias = mdata<T>(pe_ctx_out(ctx, "Bias@GRAD"));
    const double eps = pe_ctx_float(ctx, "epsilon");
    const int64_t numel = pe_tensor_numel(x), N = x->dims[0], C = x->dims[1];
    const int64_t S = (N * C) != 0 ? numel / (N * C) : 0;
    const T *xd = cdata<T>(x);

    if (bn_nothing_to_normalise(x, global)) {
        /* The forward was Y = X. */
        if (dx) PE_CHECK(copy_async(ctx, dx, dy, (size_t)numel * sizeof(T), s));
        PE_CHECK(zero_async(ctx, dscale, (size_t)C * sizeof(T), s));
        return zero_async(ctx, dbias, (size_t)C * sizeof(T), s);
    }
    if (!dx && !dscale && !dbias) return PE_OK;
    const int64_t M = N * S;
    int64_t P = 1, chunk = 1;
    bn_chunks(M, &P, &chunk);
    const bool sums = !global || dscale || dbias;
    const size_t bytes = (5 * (size_t)C + (sums ? (size_t)C * P * 2 : 0)) * sizeof(double);
    pe_cuda_temp tmp(ctx, bytes);
    if (!tmp.ok(bytes)) return PE_ERR_NOMEM;
    double *coef = tmp.get<double>(), *part = coef + 5 * C;
    if (sums)
        k_bn_partial<T, T, 2><<<bn_grid(P, C), PE_CUDA_THREADS, 0, s>>>(xd, dy, mean, N, C, S, P, chunk, part);
    k_bn_bwd_stats<T><<<pe_cuda_blocks(C), PE_CUDA_THREADS, 0, s>>>(sums ? part : nullptr, C, P, (double)M, scale,
                                                                    mean, stat, global, eps, dscale, dbias, coef);
    if (dx) k_bn_bwd_apply<T><<<pe_cuda_blocks(numel), PE_CUDA_THREADS, 0, s>>>(xd, dy, dx, coef, numel, C, S);
    return pe_cuda_check_launch(ctx);
}

/* ==== op entry helpers =================================================== */

#define NN_STREAM(ctx, s)                                                                                    \
    pe_cuda_device_scope dev((ctx)->place.id);                                                               \
    cudaStream_t s;                                                                                          \
    PE_CHECK(pe_cuda_place_stream((ctx), dev, &s))

} // namespace

/* The CUDA kernels run NCHW; data_format / data_layout NHWC (ops/nn.h) is a CPU layout. */
static pe_status nchw_only(const pe_op_ctx *ctx, bool nhwc) {
    if (!nhwc) return PE_OK;
    return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "data_format NHWC runs on CPU places only (the CUDA kernels are NCHW)");
}

extern "C" {

/* Input: [N, C, H, W], Filter: [M, C/groups, kh, kw], Bias?: [M] -> Output: [N, M, oh, ow]
 * (conv2d and depthwise_conv2d) */
pe_status pe_cuda_conv2d(const pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_geom_get(ctx, &g));
    PE_CHECK(nchw_only(ctx, g.nhwc));
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *f = pe_ctx_in(ctx, "Filter"), *b = pe_ctx_in(ctx, "Bias");
    pe_tensor *y = pe_ctx_out(ctx, "Output");
    if (pe_tensor_numel(y) == 0) return PE_OK;
    NN_STREAM(ctx, s);
    pe_status st = PE_OK;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "Input", T,
                        st = conv_fwd<T>(ctx, s, &g, x->dtype, cdata<T>(x), cdata<T>(f), cdata<T>(b), mdata<T>(y)));
    return st;
}

/* Input: [N, C, H, W], Filter: [M, C/groups, kh, kw], Bias?: [M], Output@GRAD: [N, M, oh, ow] ->
 * Input@GRAD?: [N, C, H, W], Filter@GRAD?: [M, C/groups, kh, kw], Bias@GRAD?: [M] */
pe_status pe_cuda_conv2d_grad(const pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_geom_get(ctx, &g));
    PE_CHECK(nchw_only(ctx, g.nhwc));
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *f = pe_ctx_in(ctx, "Filter"), *dy = pe_ctx_in(ctx, "Output@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "Input@GRAD"), *df = pe_ctx_out(ctx, "Filter@GRAD");
    pe_tensor *db = pe_ctx_out(ctx, "Bias@GRAD");
    if (!dx && !df && !db) return PE_OK;
    NN_STREAM(ctx, s);
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "Input", T, {
        if (dx) PE_CHECK(conv_bwd_data<T>(ctx, s, &g, x->dtype, cdata<T>(dy), cdata<T>(f), mdata<T>(dx)));
        if (df || db)
            PE_CHECK(conv_bwd_weights<T>(ctx, s, &g, x->dtype, cdata<T>(x), cdata<T>(dy), mdata<T>(df), mdata<T>(db)));
    });
    return PE_OK;
}

/* Input: [N, Cin, H, W], Filter: [Cin, Cout/groups, kh, kw] -> Output: [N, Cout, OH, OW]
 * (the backward-data of the conv2d whose Input is Output) */
pe_status pe_cuda_conv2d_transpose(const pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_transpose_geom_get(ctx, &g));
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *f = pe_ctx_in(ctx, "Filter");
    pe_tensor *y = pe_ctx_out(ctx, "Output");
    if (pe_tensor_numel(y) == 0) return PE_OK;
    NN_STREAM(ctx, s);
    pe_status st = PE_OK;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "Input", T,
                        st = conv_bwd_data<T>(ctx, s, &g, x->dtype, cdata<T>(x), cdata<T>(f), mdata<T>(y)));
    return st;
}

/* Input: [N, Cin, H, W], Filter: [Cin, Cout/groups, kh, kw], Output@GRAD: [N, Cout, OH, OW] ->
 * Input@GRAD?: [N, Cin, H, W] (conv2d forward of Output@GRAD), Filter@GRAD?:
 * [Cin, Cout/groups, kh, kw] (conv2d backward-weights with Input := Output@GRAD, Output@GRAD := Input) */
pe_status pe_cuda_conv2d_transpose_grad(const pe_op_ctx *ctx) {
    pe_conv_geom g;
    PE_CHECK(pe_conv_transpose_geom_get(ctx, &g));
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "Input"), *f = pe_ctx_in(ctx, "Filter"), *dy = pe_ctx_in(ctx, "Output@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "Input@GRAD"), *df = pe_ctx_out(ctx, "Filter@GRAD");
    if (!dx && !df) return PE_OK;
    NN_STREAM(ctx, s);
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "Input", T, {
        if (dx && pe_tensor_numel(dx))
            PE_CHECK(conv_fwd<T>(ctx, s, &g, x->dtype, cdata<T>(dy), cdata<T>(f), (const T *)nullptr, mdata<T>(dx)));
        if (df)
            PE_CHECK(conv_bwd_weights<T>(ctx, s, &g, x->dtype, cdata<T>(dy), cdata<T>(x), mdata<T>(df), (T *)nullptr));
    });
    return PE_OK;
}

/* X: [N, C, H, W] -> Out: [N, C, oh, ow] */
pe_status pe_cuda_pool2d(const pe_op_ctx *ctx) {
    pe_pool_geom g;
    PE_CHECK(pe_pool_geom_get(ctx, &g));
    PE_CHECK(nchw_only(ctx, g.nhwc));
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *y = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(y);
    if (n == 0) return PE_OK;
    NN_STREAM(ctx, s);
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T,
                        k_pool_fwd<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>(g, cdata<T>(x), mdata<T>(y)));
    return pe_cuda_check_launch(ctx);
}

/* X: [N, C, H, W], Out, Out@GRAD: [N, C, oh, ow] -> X@GRAD: [N, C, H, W] */
pe_status pe_cuda_pool2d_grad(const pe_op_ctx *ctx) {
    pe_pool_geom g;
    PE_CHECK(pe_pool_geom_get(ctx, &g));
    PE_CHECK(nchw_only(ctx, g.nhwc));
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "X"), *dy = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    if (!dx) return PE_OK;
    const int64_t nx = pe_tensor_numel(dx), ny = pe_tensor_numel(dy);
    if (nx == 0) return PE_OK;
    NN_STREAM(ctx, s);
    if (ny == 0) return zero_async(ctx, pe_tensor_data(dx), pe_tensor_nbytes(dx), s);
    const size_t abytes = g.is_max ? (size_t)ny * sizeof(int64_t) : 0;
    pe_cuda_temp arg(ctx, abytes);
    if (!arg.ok(abytes)) return PE_ERR_NOMEM;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, {
        if (g.is_max)
            k_pool_argmax<T><<<pe_cuda_blocks(ny), PE_CUDA_THREADS, 0, s>>>(g, cdata<T>(x), arg.get<int64_t>());
        k_pool_bwd<T><<<pe_cuda_blocks(nx), PE_CUDA_THREADS, 0, s>>>(g, cdata<T>(dy), arg.get<int64_t>(),
                                                                     mdata<T>(dx));
    });
    return pe_cuda_check_launch(ctx);
}

/* X: [N, C, ...], Scale/Bias/Mean/Variance: [C] -> Y: like X;
 * MeanOut/VarianceOut/SavedMean/SavedVariance: [C] (formulas: ops/cpu/nn.c) */
pe_status pe_cuda_batch_norm(const pe_op_ctx *ctx) {
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    bool nhwc;
    int64_t c;
    PE_CHECK(pe_bn_layout(ctx, x, &nhwc, &c));
    PE_CHECK(nchw_only(ctx, nhwc));
    NN_STREAM(ctx, s);
    pe_status st = PE_OK;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, st = bn_fwd<T>(ctx, s));
    return st;
}

/* X: [N, C, ...], Scale, Bias: [C], SavedMean/SavedVariance (training) or
 * Mean/Variance (global): [C], Y@GRAD: like X -> X@GRAD?, Scale@GRAD?, Bias@GRAD?
 * (formulas: ops/cpu/nn_grad.c) */
pe_status pe_cuda_batch_norm_grad(const pe_op_ctx *ctx) {
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    bool nhwc;
    int64_t c;
    PE_CHECK(pe_bn_layout(ctx, x, &nhwc, &c));
    PE_CHECK(nchw_only(ctx, nhwc));
    NN_STREAM(ctx, s);
    pe_status st = PE_OK;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "X", T, st = bn_bwd<T>(ctx, s));
    return st;
}

} // extern "C"

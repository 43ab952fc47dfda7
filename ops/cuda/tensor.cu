/* ops/cuda/tensor.cu — CUDA kernels of the tensor family: reshape2 (also
 * flatten_contiguous_range, flatten2, squeeze2, unsqueeze2 and every
 * <op>_grad of theirs: a copy), transpose2, concat, split, slice, stack,
 * unstack and their grads, fill_constant, assign_value — the ops of
 * ops/cpu/tensor.c, for the same (every) dtype.
 *
 * How: all of them move bytes, so they dispatch on the element size, never
 * on the dtype. The reshapes are one device-to-device cudaMemcpyAsync on the
 * place's stream, skipped when Out shares X's buffer (in place), as the CPU
 * kernel does. transpose2 simplifies the permutation on the host like the
 * CPU kernel (drop size-1 dims, merge axes that stay adjacent); when the
 * innermost axis moves, the rest is a batch of 2-D transposes through a
 * 32 x 33 shared-memory tile (both the read and the write coalesced),
 * otherwise one thread per output element with the permuted offset.
 * concat / split / stack / unstack and their grads are the CPU kernel's
 * concat_split: the whole viewed as [outer, row bytes], each part as
 * [outer, chunk bytes] at a byte offset of each row, one launch per part,
 * moving the widest word (16, 8, 4, 2 or 1 bytes) that the row, chunk,
 * offset and pointers allow. slice uses the shared pe_slice_plan
 * (ops/tensor.h); slice_grad zeroes Input@GRAD (cudaMemsetAsync) and
 * scatters Out@GRAD into the region. fill_constant computes its value on the
 * host (pe_fill_constant_value, the CPU kernel's conversions) and fills the
 * element's bit pattern; assign_value converts its attr values on the host
 * and copies them up (a stream synchronization: the host array dies here).
 *
 * Why: every element is written by exactly one thread, nothing is summed,
 * so the results equal the CPU kernels' bit for bit.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/tensor.h"

#include <cstdlib>
#include <cstring>

namespace {

/* ---- byte copies (reshape2 and friends) ---------------------------------- */

/* dst <- src (n bytes) on stream s; nothing when they share the buffer. */
pe_status copy_bytes(const pe_op_ctx *ctx, void *dst, const void *src, size_t n, cudaStream_t s) {
    if (dst == src || !n) return PE_OK;
    return pe_cuda_check(ctx, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
}

/* dst <- src (nbytes) for the reshaping ops. */
pe_status run_copy(const pe_op_ctx *ctx, const pe_tensor *src, pe_tensor *dst) {
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const size_t n = pe_tensor_nbytes(src);
    if (pe_tensor_nbytes(dst) != n)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (!n || pe_tensor_data(dst) == pe_tensor_data(src)) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    return copy_bytes(ctx, pe_tensor_data(dst), pe_tensor_data(src), n, s);
}

/* ---- transpose2 ------------------------------------------------------------ */

/* The permutation after simplification, with the strides the kernels use. */
struct tplan {
    int r;                       /* rank after simplification */
    int64_t in_dims[PE_MAX_DIMS];
    int perm[PE_MAX_DIMS];       /* out axis j = in axis perm[j] */
    int64_t od[PE_MAX_DIMS];     /* out dims */
    int64_t s[PE_MAX_DIMS];      /* input stride (elements) of out axis j */
    int64_t ostr[PE_MAX_DIMS];   /* output stride of out axis j */
    int ji, jo;                  /* tiled: out axis of the input's innermost axis; out's innermost */
    int64_t A, B, sb, oa;        /* tiled: A = od[ji], B = od[jo], sb = s[jo], oa = ostr[ji] */
    int64_t outer, ta, tb;       /* tiled: batch size, tiles along A and B */
};

/* pe_transpose_plan_make (ops/tensor.c, shared with the CPU kernel) into t. */
void simplify(int r, const int64_t *xd, const int64_t *axis, tplan *t) {
    pe_transpose_plan p;
    pe_transpose_plan_make(r, xd, axis, &p);
    t->r = p.r;
    for (int j = 0; j < p.r; j++) {
        t->in_dims[j] = p.in_dims[j];
        t->perm[j] = p.perm[j];
    }
}

/* Fills the strides (r >= 2). */
void tplan_strides(tplan *t) {
    const int r = t->r;
    int64_t istr[PE_MAX_DIMS];
    istr[r - 1] = 1;
    for (int a = r - 2; a >= 0; a--) istr[a] = istr[a + 1] * t->in_dims[a + 1];
    for (int j = 0; j < r; j++) {
        t->od[j] = t->in_dims[t->perm[j]];
        t->s[j] = istr[t->perm[j]];
    }
    t->ostr[r - 1] = 1;
    for (int j = r - 2; j >= 0; j--) t->ostr[j] = t->ostr[j + 1] * t->od[j + 1];
}

#define TT 32 /* tile edge */
#define TROWS 8 /* threads per block: TT x TROWS */

/* in: [in_dims...] -> out: [od...], out[c] = in[sum c_j * s[j]], one thread per output element */
template <typename T>
__global__ void k_transpose_gather(const T *in, T *out, int64_t n, tplan t) {
    PE_CUDA_LOOP(i, n) {
        int64_t rem = i, off = 0;
        for (int j = t.r - 1; j >= 0; j--) {
            off += (rem % t.od[j]) * t.s[j];
            rem /= t.od[j];
        }
        out[i] = in[off];
    }
}

/* A batch of 2-D transposes: out[ob + a*oa + b] = in[ib + a + b*sb] for
 * a < A, b < B, per batch index over the out axes other than ji and jo; one
 * TT x TT tile per block iteration, read along a, written along b. */
template <typename T>
__global__ void k_transpose_tiled(const T *in, T *out, tplan t) {
    __shared__ T tile[TT][TT + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t tiles = t.ta * t.tb, total = t.outer * tiles;
    for (int64_t w = blockIdx.x; w < total; w += gridDim.x) {
        const int64_t o = w / tiles, tt = w % tiles;
        const int64_t a0 = (tt / t.tb) * TT, b0 = (tt % t.tb) * TT;
        int64_t ib = 0, ob = 0, rem = o;
        for (int j = t.r - 1; j >= 0; j--) {
            if (j == t.ji || j == t.jo) continue;
            const int64_t c = rem % t.od[j];
            rem /= t.od[j];
            ib += c * t.s[j];
            ob += c * t.ostr[j];
        }
        for (int k = ty; k < TT; k += TROWS) {
            const int64_t a = a0 + tx, b = b0 + k;
            if (a < t.A && b < t.B) tile[k][tx] = in[ib + a + b * t.sb];
        }
        __syncthreads();
        for (int k = ty; k < TT; k += TROWS) {
            const int64_t a = a0 + k, b = b0 + tx;
            if (a < t.A && b < t.B) out[ob + a * t.oa + b] = tile[tx][k];
        }
        __syncthreads();
    }
}

/* x: [d0, ..., d(r-1)] -> out: [d(axis[0]), ..., d(axis[r-1])] */
pe_status transpose_any(const pe_op_ctx *ctx, const pe_tensor *x, const int64_t *axis, pe_tensor *out) {
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const size_t nbytes = pe_tensor_nbytes(x);
    if (pe_tensor_nbytes(out) != nbytes)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (!nbytes) return PE_OK;
    tplan t;
    memset(&t, 0, sizeof t);
    simplify(x->ndim, x->dims, axis, &t);
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    const void *src = pe_tensor_data(x);
    void *dst = pe_tensor_data(out);
    if (t.r <= 1) return copy_bytes(ctx, dst, src, nbytes, s); /* identity after simplification */
    tplan_strides(&t);
    const int64_t n = pe_tensor_numel(x);
    if (t.perm[t.r - 1] == t.r - 1) { /* innermost axis in place: reads and writes run along it */
        PE_CUDA_ALL_TYPES(ctx, x->dtype, "X", T,
            k_transpose_gather<T><<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((const T *)src, (T *)dst, n, t));
        return pe_cuda_check_launch(ctx);
    }
    t.jo = t.r - 1;
    t.ji = 0;
    while (t.perm[t.ji] != t.r - 1) t.ji++;
    t.A = t.od[t.ji];
    t.B = t.od[t.jo];
    t.sb = t.s[t.jo];
    t.oa = t.ostr[t.ji];
    t.outer = n / (t.A * t.B);
    t.ta = (t.A + TT - 1) / TT;
    t.tb = (t.B + TT - 1) / TT;
    const int64_t total = t.outer * t.ta * t.tb;
    const unsigned blocks = (unsigned)(total < 65535 ? total : 65535);
    const dim3 threads(TT, TROWS);
    PE_CUDA_ALL_TYPES(ctx, x->dtype, "X", T,
        k_transpose_tiled<T><<<blocks, threads, 0, s>>>((const T *)src, (T *)dst, t));
    return pe_cuda_check_launch(ctx);
}

/* ---- concat, split, stack, unstack and their grads ----------------------- */

/* whole: [outer, row words], part: [outer, chunk words] at word offset off of
 * each row; ToWhole: part -> whole (concat), else whole -> part (split). */
template <typename W, bool ToWhole>
__global__ void k_move_part(W *whole, int64_t row, int64_t off, W *part, int64_t chunk, int64_t outer) {
    PE_CUDA_LOOP(i, outer * chunk) {
        const int64_t o = i / chunk, j = i - o * chunk;
        if (ToWhole) whole[o * row + off + j] = part[i];
        else part[i] = whole[o * row + off + j];
    }
}

template <typename W>
void launch_move(char *whole, size_t row, size_t off, char *part, size_t chunk, int64_t outer, bool to_whole,
                 cudaStream_t s) {
    const int64_t w = (int64_t)sizeof(W), cw = (int64_t)chunk / w;
    const unsigned g = pe_cuda_blocks(outer * cw);
    if (to_whole)
        k_move_part<W, true><<<g, PE_CUDA_THREADS, 0, s>>>((W *)whole, (int64_t)row / w, (int64_t)off / w, (W *)part,
                                                          cw, outer);
    else
        k_move_part<W, false><<<g, PE_CUDA_THREADS, 0, s>>>((W *)whole, (int64_t)row / w, (int64_t)off / w, (W *)part,
                                                           cw, outer);
}

/* The CPU kernel's move_part on the device: the widest word that divides
 * the row, the chunk, the offset and both base addresses. */
void move_part(char *whole, size_t row, size_t off, char *part, size_t chunk, int64_t outer, bool to_whole,
               cudaStream_t s) {
    if (!chunk || !outer) return;
    const uintptr_t bits = (uintptr_t)whole | (uintptr_t)part | (uintptr_t)row | (uintptr_t)off | (uintptr_t)chunk;
    if (!(bits & 15)) launch_move<uint4>(whole, row, off, part, chunk, outer, to_whole, s);
    else if (!(bits & 7)) launch_move<uint64_t>(whole, row, off, part, chunk, outer, to_whole, s);
    else if (!(bits & 3)) launch_move<uint32_t>(whole, row, off, part, chunk, outer, to_whole, s);
    else if (!(bits & 1)) launch_move<uint16_t>(whole, row, off, part, chunk, outer, to_whole, s);
    else launch_move<uint8_t>(whole, row, off, part, chunk, outer, to_whole, s);
}

/* whole: [pre..., sum a_i, post...] <-> parts i: [pre..., a_i, post...]
 * (viewed as [outer, a_i * inner]), or stacked parts [pre..., post...] of
 * whole [pre..., n, post...]; parts that are NULL tensors (absent gradients)
 * are skipped, their sizes taken from slot shape_slot (NULL: stacked) —
 * ops/cpu/tensor.c's concat_split, one launch per part. */
pe_status concat_split(const pe_op_ctx *ctx, pe_tensor *whole, const char *part_slot, bool parts_are_inputs,
                       const char *shape_slot, bool to_whole) {
    PE_CHECK(pe_cuda_check_inputs(ctx));
    const int r = whole->ndim;
    int64_t axis = pe_ctx_int(ctx, "axis");
    if (axis < 0) axis += r;
    const size_t es = pe_dtype_size(whole->dtype);
    const int64_t outer = pe_dims_prod(whole->dims, 0, (int)axis);
    const size_t row = (size_t)pe_dims_prod(whole->dims, (int)axis, r) * es;
    char *wd = (char *)pe_tensor_data(whole);
    const int n = parts_are_inputs ? pe_ctx_n_in(ctx, part_slot) : pe_ctx_n_out(ctx, part_slot);
    if (!outer || !row) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        pe_tensor *p = parts_are_inputs ? pe_ctx_in_at(ctx, part_slot, i) : pe_ctx_out_at(ctx, part_slot, i);
        const pe_tensor *shape = p ? p : shape_slot ? pe_ctx_in_at(ctx, shape_slot, i) : NULL;
        /* a stacked part lacks the axis: its chunk is the whole's post (as when shape_slot is NULL) */
        const size_t chunk = (size_t)(shape ? pe_dims_prod(shape->dims, (int)axis, shape->ndim)
                                            : pe_dims_prod(whole->dims, (int)axis + 1, r)) * es;
        if (p) {
            if (off + chunk > row)
                return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
            move_part(wd, row, off, (char *)pe_tensor_data(p), chunk, outer, to_whole, s);
        }
        off += chunk;
    }
    return pe_cuda_check_launch(ctx);
}

/* ---- slice --------------------------------------------------------------- */

/* The region of big ([bdims...]) that plan sp describes, for the kernel. */
struct sregion {
    int r;
    int64_t dims[PE_MAX_DIMS]; /* region (= small's) dims */
    int64_t bstr[PE_MAX_DIMS]; /* big's strides */
    int64_t base;              /* big's offset of the region's first element */
};

/* small: [dims...] (dense) <-> big's region; ToSmall: big -> small (slice),
 * else small -> big (slice_grad) */
template <typename T, bool ToSmall>
__global__ void k_slice(T *big, T *small, int64_t n, sregion g) {
    PE_CUDA_LOOP(i, n) {
        int64_t rem = i, off = g.base;
        for (int a = g.r - 1; a >= 0; a--) {
            off += (rem % g.dims[a]) * g.bstr[a];
            rem /= g.dims[a];
        }
        if (ToSmall) small[i] = big[off];
        else big[off] = small[i];
    }
}

/* Moves between the region and small on stream s (checked by the caller). */
pe_status slice_move(const pe_op_ctx *ctx, const pe_slice_plan *sp, const pe_tensor *bigt, void *big, void *small,
                     bool to_small, cudaStream_t s) {
    sregion g;
    memset(&g, 0, sizeof g);
    g.r = sp->r;
    for (int a = 0; a < sp->r; a++) g.dims[a] = sp->dims[a];
    if (sp->r > 0) g.bstr[sp->r - 1] = 1;
    for (int a = sp->r - 2; a >= 0; a--) g.bstr[a] = g.bstr[a + 1] * bigt->dims[a + 1];
    for (int a = 0; a < sp->r; a++) g.base += sp->start[a] * g.bstr[a];
    const int64_t n = pe_dims_prod(sp->dims, 0, sp->r); /* 1 for a scalar */
    if (n == 0) return PE_OK;
    const unsigned blocks = pe_cuda_blocks(n);
    if (to_small)
        PE_CUDA_ALL_TYPES(ctx, bigt->dtype, "Input", T,
            k_slice<T, true><<<blocks, PE_CUDA_THREADS, 0, s>>>((T *)big, (T *)small, n, g));
    else
        PE_CUDA_ALL_TYPES(ctx, bigt->dtype, "Input", T,
            k_slice<T, false><<<blocks, PE_CUDA_THREADS, 0, s>>>((T *)big, (T *)small, n, g));
    return PE_OK;
}

/* ---- fills --------------------------------------------------------------- */

/* out: [n] all equal to the element whose bits are `bits` */
template <typename T>
__global__ void k_fill(T *out, int64_t n, T v) {
    PE_CUDA_LOOP(i, n) out[i] = v;
}

/* Fills out (numel n, element size es) with the bit pattern in v. */
pe_status fill_bits(const pe_op_ctx *ctx, void *out, int64_t n, size_t es, const unsigned char *v, cudaStream_t s) {
    switch (es) {
    case 1:
        return pe_cuda_check(ctx, cudaMemsetAsync(out, v[0], (size_t)n, s), "cudaMemsetAsync");
    case 2: { uint16_t b; memcpy(&b, v, 2); k_fill<<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((uint16_t *)out, n, b); break; }
    case 4: { uint32_t b; memcpy(&b, v, 4); k_fill<<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((uint32_t *)out, n, b); break; }
    case 8: { uint64_t b; memcpy(&b, v, 8); k_fill<<<pe_cuda_blocks(n), PE_CUDA_THREADS, 0, s>>>((uint64_t *)out, n, b); break; }
    default: return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "element size %zu", es);
    }
    return pe_cuda_check_launch(ctx);
}

} // namespace

extern "C" {

/* x: [d...] -> out: [shape...], same elements in the same order (reshape2,
 * flatten_contiguous_range, flatten2, squeeze2, unsqueeze2; XShape has no data) */
pe_status pe_cuda_reshape2(const pe_op_ctx *ctx) {
    return run_copy(ctx, pe_ctx_in(ctx, "X"), pe_ctx_out(ctx, "Out"));
}

/* Out@GRAD: [shape...] -> X@GRAD: [d...] (XShape's dims), same elements in order */
pe_status pe_cuda_xshape_grad(const pe_op_ctx *ctx) {
    return run_copy(ctx, pe_ctx_in(ctx, "Out@GRAD"), pe_ctx_out(ctx, "X@GRAD"));
}

/* x: [d0, ..., d(r-1)] -> out: [d(axis[0]), ..., d(axis[r-1])] */
pe_status pe_cuda_transpose2(const pe_op_ctx *ctx) {
    int n;
    const int64_t *axis = pe_ctx_ints(ctx, "axis", &n);
    return transpose_any(ctx, pe_ctx_in(ctx, "X"), axis, pe_ctx_out(ctx, "Out"));
}

/* Out@GRAD: [d(axis[0]), ..., d(axis[r-1])] -> X@GRAD: [d0, ..., d(r-1)],
 * a transpose by the inverse permutation */
pe_status pe_cuda_transpose2_grad(const pe_op_ctx *ctx) {
    int n;
    const int64_t *axis = pe_ctx_ints(ctx, "axis", &n);
    int64_t inv[PE_MAX_DIMS];
    for (int i = 0; i < n; i++) inv[axis[i] < 0 ? axis[i] + n : axis[i]] = i;
    return transpose_any(ctx, pe_ctx_in(ctx, "Out@GRAD"), inv, pe_ctx_out(ctx, "X@GRAD"));
}

/* xs: [pre..., a_i, post...] -> out: [pre..., sum a_i, post...] */
pe_status pe_cuda_concat(const pe_op_ctx *ctx) {
    return concat_split(ctx, pe_ctx_out(ctx, "Out"), "X", true, "X", true);
}

/* Out@GRAD: [pre..., sum a_i, post...] -> X@GRAD_i: [pre..., a_i, post...] (absent ones skipped) */
pe_status pe_cuda_concat_grad(const pe_op_ctx *ctx) {
    return concat_split(ctx, pe_ctx_in(ctx, "Out@GRAD"), "X@GRAD", false, "X", false);
}

/* x: [pre..., d, post...] -> out_k: [pre..., s_k, post...] */
pe_status pe_cuda_split(const pe_op_ctx *ctx) {
    pe_tensor *x = pe_ctx_in(ctx, "X");
    const int n = pe_ctx_n_out(ctx, "Out");
    for (int k = 0; k < n; k++)
        if (!pe_ctx_out_at(ctx, "Out", k))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "output Out[%d] is empty (%s)", k, PE_EMPTY_VAR);
    return concat_split(ctx, x, "Out", false, "Out", false);
}

/* Out@GRAD_k: [pre..., s_k, post...] -> X@GRAD: [pre..., d, post...] */
pe_status pe_cuda_split_grad(const pe_op_ctx *ctx) {
    return concat_split(ctx, pe_ctx_out(ctx, "X@GRAD"), "Out@GRAD", true, "Out@GRAD", true);
}

/* parts_i: [pre..., post...] -> whole: [pre..., n, post...] (stack, unstack_grad) */
pe_status pe_cuda_stack(const pe_op_ctx *ctx) {
    const char *whole, *parts;
    pe_stack_slots(ctx, &whole, &parts);
    return concat_split(ctx, pe_ctx_out(ctx, whole), parts, true, NULL, true);
}

/* whole: [pre..., n, post...] -> parts_i: [pre..., post...] (unstack, stack_grad; absent ones skipped) */
pe_status pe_cuda_unstack(const pe_op_ctx *ctx) {
    const char *whole, *parts;
    pe_stack_slots(ctx, &whole, &parts);
    return concat_split(ctx, pe_ctx_in(ctx, whole), parts, false, NULL, false);
}

/* input: [d...] -> out: input[start_a : start_a + len_a, ...] (decreased dims dropped) */
pe_status pe_cuda_slice(const pe_op_ctx *ctx) {
    pe_tensor *in = pe_ctx_in(ctx, "Input"), *out = pe_ctx_out(ctx, "Out");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_slice_plan sp;
    PE_CHECK(pe_slice_plan_make(ctx, "Input", in, &sp));
    if (pe_dims_prod(sp.dims, 0, sp.r) != pe_tensor_numel(out) || out->dtype != in->dtype)
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (pe_tensor_numel(out) == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CHECK(slice_move(ctx, &sp, in, pe_tensor_data(in), pe_tensor_data(out), true, s));
    return pe_cuda_check_launch(ctx);
}

/* Input: [d...], Out@GRAD: the region's shape -> Input@GRAD: [d...], zeros
 * outside the region and Out@GRAD inside */
pe_status pe_cuda_slice_grad(const pe_op_ctx *ctx) {
    pe_tensor *in = pe_ctx_in(ctx, "Input"), *g = pe_ctx_in(ctx, "Out@GRAD"), *dx = pe_ctx_out(ctx, "Input@GRAD");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    pe_slice_plan sp;
    PE_CHECK(pe_slice_plan_make(ctx, "Input", in, &sp));
    if (pe_dims_prod(sp.dims, 0, sp.r) != pe_tensor_numel(g) || g->dtype != dx->dtype ||
        pe_tensor_numel(dx) != pe_tensor_numel(in))
        return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    const size_t n = pe_tensor_nbytes(dx);
    if (!n) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    PE_CHECK(pe_cuda_check(ctx, cudaMemsetAsync(pe_tensor_data(dx), 0, n, s), "cudaMemsetAsync"));
    PE_CHECK(slice_move(ctx, &sp, dx, pe_tensor_data(dx), pe_tensor_data(g), false, s));
    return pe_cuda_check_launch(ctx);
}

/* () -> out: [shape...] all equal to the value (the CPU kernel's conversions) */
pe_status pe_cuda_fill_constant(const pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    double v;
    int64_t iv = 0;
    bool is_int;
    PE_CHECK(pe_fill_constant_value(ctx, out->dtype, &v, &iv, &is_int));
    unsigned char b[8] = {0};
    switch (out->dtype) {
    case PE_DTYPE_FP32: { float f = (float)v; memcpy(b, &f, 4); break; }
    case PE_DTYPE_FP64: memcpy(b, &v, 8); break;
    case PE_DTYPE_INT32: { int32_t c = is_int ? (int32_t)iv : (int32_t)v; memcpy(b, &c, 4); break; }
    case PE_DTYPE_INT64: { int64_t c = is_int ? iv : (int64_t)v; memcpy(b, &c, 8); break; }
    case PE_DTYPE_UINT8: b[0] = (unsigned char)(is_int ? (int)iv : (int)v); break;
    case PE_DTYPE_BOOL: b[0] = v != 0.0; break; /* nan counts as true, as C */
    default: return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "dtype %s", pe_dtype_name(out->dtype));
    }
    const int64_t n = pe_tensor_numel(out);
    if (n == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    return fill_bits(ctx, pe_tensor_data(out), n, pe_dtype_size(out->dtype), b, s);
}

/* () -> out: [shape...] = the values of fp32_values / int32_values / int64_values,
 * converted on the host as the CPU kernel does, then copied up */
pe_status pe_cuda_assign_value(const pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const int64_t n = pe_tensor_numel(out);
    const size_t bytes = pe_tensor_nbytes(out);
    int nv = 0;
    const double *fv = NULL;
    const int64_t *lv = NULL;
    switch (out->dtype) {
    case PE_DTYPE_FP32: case PE_DTYPE_FP64: fv = pe_ctx_floats(ctx, "fp32_values", &nv); break;
    case PE_DTYPE_INT64: lv = pe_ctx_ints(ctx, "int64_values", &nv); break;
    case PE_DTYPE_INT32: case PE_DTYPE_UINT8: case PE_DTYPE_BOOL: lv = pe_ctx_ints(ctx, "int32_values", &nv); break;
    default: return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "dtype %s", pe_dtype_name(out->dtype));
    }
    if (nv < n) return pe_ctx_error(ctx, PE_ERR_INTERNAL, "kernel called with tensors shape inference did not produce");
    if (n == 0) return PE_OK;
    void *h = malloc(bytes);
    if (!h) return pe_ctx_error(ctx, PE_ERR_NOMEM, "host staging of %zu bytes", bytes);
    for (int64_t i = 0; i < n; i++) {
        switch (out->dtype) {
        case PE_DTYPE_FP32: ((float *)h)[i] = (float)fv[i]; break;
        case PE_DTYPE_FP64: ((double *)h)[i] = fv[i]; break;
        case PE_DTYPE_INT64: ((int64_t *)h)[i] = lv[i]; break;
        case PE_DTYPE_INT32: ((int32_t *)h)[i] = (int32_t)lv[i]; break;
        case PE_DTYPE_BOOL: ((uint8_t *)h)[i] = lv[i] != 0; break;
        default: ((uint8_t *)h)[i] = (uint8_t)lv[i]; break; /* uint8 */
        }
    }
    pe_status st;
    {
        pe_cuda_device_scope dev(ctx->place.id);
        cudaStream_t s;
        st = pe_cuda_place_stream(ctx, dev, &s);
        if (st == PE_OK) {
            cudaError_t e = cudaMemcpyAsync(pe_tensor_data(out), h, bytes, cudaMemcpyHostToDevice, s);
            if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* h is freed below */
            st = pe_cuda_check(ctx, e, "copying assign_value's values to the device");
        }
    }
    free(h);
    return st;
}

} // extern "C"

/* ops/cpu/tensor.c — CPU kernels of the tensor family: reshape2 (also
 * flatten_contiguous_range, flatten2, squeeze2, unsqueeze2 and all their
 * grads: a copy), transpose2, concat, split, slice, stack, unstack and
 * their grads, fill_constant, assign_value.
 *
 * All of them move bytes, so they work for every dtype by element size.
 * transpose2 first simplifies the permutation (drops size-1 dims, merges
 * axes that stay adjacent), so most real transposes become a batch of 2-D
 * transposes, done in cache-sized tiles; when the innermost axis stays in
 * place it is a strided copy of contiguous rows. Loops over many rows or
 * tiles are split across ctx->num_threads OpenMP threads (ops/cpu/par.h: the
 * decision is plain C, so small tensors never enter an OpenMP region); every
 * element is written by exactly one thread, so results never depend on the
 * count. The gradients reuse the forward movers: transpose2_grad transposes
 * by the inverse permutation, concat_grad is a split and split_grad a
 * concat, slice_grad zero-fills and copies the region back.
 */
#include "ops/tensor.h"
#include "ops/cpu/par.h"

#include <string.h>

/* Below this many bytes a copy stays on one thread. */
#define PAR_BYTES (1 << 16)

static int nthreads(const pe_op_ctx *ctx) { return ctx->num_threads > 0 ? ctx->num_threads : 1; }

/* dst <- src (n bytes); nothing when they share the buffer (in place) */
static void copy_bytes(void *dst, const void *src, size_t n, int nt) {
    if (dst == src || !n) return;
    const size_t chunk = PAR_BYTES;
    int64_t nc = (int64_t)((n + chunk - 1) / chunk);
    PE_PAR_FOR(n >= 4 * PAR_BYTES && nt > 1, c, nc, {
        size_t o = (size_t)c * chunk, len = n - o < chunk ? n - o : chunk;
        memcpy((char *)dst + o, (const char *)src + o, len);
    });
}

/* x: [d...] -> out: [shape...], same elements in the same order (reshape2,
 * flatten_contiguous_range, flatten2, squeeze2, unsqueeze2; XShape has no data) */
pe_status pe_cpu_reshape2(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    copy_bytes(pe_tensor_data(out), pe_tensor_data(x), pe_tensor_nbytes(x), nthreads(ctx));
    return PE_OK;
}

/* Out@GRAD: [shape...] -> X@GRAD: [d...] (XShape's dims), same elements in order */
pe_status pe_cpu_xshape_grad(const pe_op_ctx *ctx) {
    const pe_tensor *g = pe_ctx_in(ctx, "Out@GRAD");
    pe_tensor *dx = pe_ctx_out(ctx, "X@GRAD");
    copy_bytes(pe_tensor_data(dx), pe_tensor_data(g), pe_tensor_nbytes(g), nthreads(ctx));
    return PE_OK;
}

/* ---- transpose2 --------------------------------------------------------- */

typedef pe_transpose_plan tperm;


#define TILE 32

/* out[ob + a*oa + b] = in[ib + a + b*ib_s] for a < A, b < B, in TILE x TILE tiles */
#define DEFINE_TRANSPOSE(NAME, T)                                                                   \
    static void NAME(const void *src, void *dst, const tperm *t, int ji, int jo, int nt) {          \
        const T *in = src;                                                                          \
        T *out = dst;                                                                               \
        int r = t->r;                                                                               \
        int64_t istr[PE_MAX_DIMS], od[PE_MAX_DIMS], ostr[PE_MAX_DIMS], s[PE_MAX_DIMS];              \
        istr[r - 1] = 1;                                                                            \
        for (int a = r - 2; a >= 0; a--) istr[a] = istr[a + 1] * t->in_dims[a + 1];                 \
        for (int j = 0; j < r; j++) { od[j] = t->in_dims[t->perm[j]]; s[j] = istr[t->perm[j]]; }    \
        ostr[r - 1] = 1;                                                                            \
        for (int j = r - 2; j >= 0; j--) ostr[j] = ostr[j + 1] * od[j + 1];                         \
        int64_t A = od[ji], B = od[jo], sb = s[jo], oa = ostr[ji];                                  \
        int64_t outer = 1;                                                                          \
        for (int j = 0; j < r; j++) if (j != ji && j != jo) outer *= od[j];                         \
        int64_t ta = (A + TILE - 1) / TILE, tb = (B + TILE - 1) / TILE;                             \
        int64_t total = outer * ta * tb, bytes = A * B * outer * (int64_t)sizeof(T);                \
        PE_PAR_FOR(total > 16 && bytes > PAR_BYTES && nt > 1, w, total, {                           \
            int64_t o = w / (ta * tb), tt = w % (ta * tb);                                          \
            int64_t a0 = (tt / tb) * TILE, b0 = (tt % tb) * TILE;                                   \
            int64_t ib = 0, ob = 0, rem = o;                                                        \
            for (int j = r - 1; j >= 0; j--) {                                                      \
                if (j == ji || j == jo) continue;                                                   \
                int64_t c = rem % od[j];                                                            \
                rem /= od[j];                                                                       \
                ib += c * s[j];                                                                     \
                ob += c * ostr[j];                                                                  \
            }                                                                                       \
            int64_t a1 = a0 + TILE < A ? a0 + TILE : A, b1 = b0 + TILE < B ? b0 + TILE : B;         \
            for (int64_t a = a0; a < a1; a++)                                                       \
                for (int64_t b = b0; b < b1; b++) out[ob + a * oa + b] = in[ib + a + b * sb];       \
        });                                                                                         \
    }

DEFINE_TRANSPOSE(transpose_u8, uint8_t)
DEFINE_TRANSPOSE(transpose_u16, uint16_t)
DEFINE_TRANSPOSE(transpose_u32, uint32_t)
DEFINE_TRANSPOSE(transpose_u64, uint64_t)

/* Innermost axis unchanged: out row o (length L) = in row at the permuted offset. */
static void transpose_rows(const char *in, char *out, const tperm *t, size_t es, int nt) {
    int r = t->r;
    int64_t istr[PE_MAX_DIMS], od[PE_MAX_DIMS], s[PE_MAX_DIMS];
    istr[r - 1] = 1;
    for (int a = r - 2; a >= 0; a--) istr[a] = istr[a + 1] * t->in_dims[a + 1];
    for (int j = 0; j < r; j++) {
        od[j] = t->in_dims[t->perm[j]];
        s[j] = istr[t->perm[j]];
    }
    int64_t L = od[r - 1], rows = pe_dims_prod(od, 0, r - 1);
    size_t row_bytes = (size_t)L * es;
    PE_PAR_FOR((size_t)rows * row_bytes > PAR_BYTES && nt > 1, o, rows, {
        int64_t ib = 0, rem = o;
        for (int j = r - 2; j >= 0; j--) {
            ib += (rem % od[j]) * s[j];
            rem /= od[j];
        }
        memcpy(out + (size_t)o * row_bytes, in + (size_t)ib * es, row_bytes);
    });
}

/* x: [d0, ..., d(r-1)] -> out: [d(axis[0]), ..., d(axis[r-1])] */
static pe_status transpose_any(const pe_op_ctx *ctx, const pe_tensor *x, const int64_t *axis, pe_tensor *out) {
    size_t nbytes = pe_tensor_nbytes(x), es = pe_dtype_size(x->dtype);
    if (!nbytes) return PE_OK;
    tperm t;
    pe_transpose_plan_make(x->ndim, x->dims, axis, &t);
    const void *src = pe_tensor_data(x);
    void *dst = pe_tensor_data(out);
    if (t.r <= 1) { /* identity after simplification */
        memcpy(dst, src, nbytes);
        return PE_OK;
    }
    int nt = nthreads(ctx);
    if (t.perm[t.r - 1] == t.r - 1) {
        transpose_rows(src, dst, &t, es, nt);
        return PE_OK;
    }
    int ji = 0, jo = t.r - 1; /* ji: the out axis holding the input's innermost axis */
    while (t.perm[ji] != t.r - 1) ji++;
    switch (es) {
    case 1: transpose_u8(src, dst, &t, ji, jo, nt); break;
    case 2: transpose_u16(src, dst, &t, ji, jo, nt); break;
    case 4: transpose_u32(src, dst, &t, ji, jo, nt); break;
    case 8: transpose_u64(src, dst, &t, ji, jo, nt); break;
    default: return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "element size %zu", es);
    }
    return PE_OK;
}

/* x: [d0, ..., d(r-1)] -> out: [d(axis[0]), ..., d(axis[r-1])] */
pe_status pe_cpu_transpose2(const pe_op_ctx *ctx) {
    int n;
    const int64_t *axis = pe_ctx_ints(ctx, "axis", &n);
    return transpose_any(ctx, pe_ctx_in(ctx, "X"), axis, pe_ctx_out(ctx, "Out"));
}

/* Out@GRAD: [d(axis[0]), ..., d(axis[r-1])] -> X@GRAD: [d0, ..., d(r-1)],
 * a transpose by the inverse permutation */
pe_status pe_cpu_transpose2_grad(const pe_op_ctx *ctx) {
    int n;
    const int64_t *axis = pe_ctx_ints(ctx, "axis", &n);
    int64_t inv[PE_MAX_DIMS];
    for (int i = 0; i < n; i++) inv[axis[i] < 0 ? axis[i] + n : axis[i]] = i;
    return transpose_any(ctx, pe_ctx_in(ctx, "Out@GRAD"), inv, pe_ctx_out(ctx, "X@GRAD"));
}

/* ---- concat, split and their grads ------------------------------------------ */

/* whole: [outer, row bytes], part: [outer, chunk bytes] at byte offset off of
 * each row; to_whole: part -> whole (concat), else whole -> part (split). */
static void move_part(char *whole, size_t row, size_t off, char *part, size_t chunk, int64_t outer, bool to_whole,
                      int nt) {
    if (!chunk || !outer) return;
    if (outer == 1) {
        if (to_whole) memcpy(whole + off, part, chunk);
        else memcpy(part, whole + off, chunk);
        return;
    }
    PE_PAR_FOR((size_t)outer * chunk > PAR_BYTES && nt > 1, o, outer, {
        if (to_whole) memcpy(whole + (size_t)o * row + off, part + (size_t)o * chunk, chunk);
        else memcpy(part + (size_t)o * chunk, whole + (size_t)o * row + off, chunk);
    });
}

/* whole: [pre..., sum a_i, post...] <-> parts i: [pre..., a_i, post...]
 * (viewed as [outer, a_i * inner]), or stacked parts [pre..., post...] of
 * whole [pre..., n, post...]; parts that are NULL tensors (absent gradients)
 * are skipped, their sizes taken from slot shape_slot (NULL: stacked). */
static void concat_split(const pe_op_ctx *ctx, pe_tensor *whole, const char *part_slot, bool parts_are_inputs,
                         const char *shape_slot, bool to_whole) {
    int r = whole->ndim;
    int64_t axis = pe_ctx_int(ctx, "axis");
    if (axis < 0) axis += r;
    size_t es = pe_dtype_size(whole->dtype);
    int64_t outer = pe_dims_prod(whole->dims, 0, (int)axis);
    size_t row = (size_t)pe_dims_prod(whole->dims, (int)axis, r) * es;
    char *wd = pe_tensor_data(whole);
    int n = parts_are_inputs ? pe_ctx_n_in(ctx, part_slot) : pe_ctx_n_out(ctx, part_slot);
    int nt = nthreads(ctx);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        pe_tensor *p = parts_are_inputs ? pe_ctx_in_at(ctx, part_slot, i) : pe_ctx_out_at(ctx, part_slot, i);
        const pe_tensor *shape = p ? p : shape_slot ? pe_ctx_in_at(ctx, shape_slot, i) : NULL;
        /* a stacked part lacks the axis: its chunk is the whole's post (as when shape_slot is NULL) */
        size_t chunk = (size_t)(shape ? pe_dims_prod(shape->dims, (int)axis, shape->ndim)
                                      : pe_dims_prod(whole->dims, (int)axis + 1, r)) * es;
        if (p) move_part(wd, row, off, pe_tensor_data(p), chunk, outer, to_whole, nt);
        off += chunk;
    }
}

/* xs: [pre..., a_i, post...] -> out: [pre..., sum a_i, post...]
 * viewed as [outer, a_i * inner]: out row o = x_0 row o | x_1 row o | ... */
pe_status pe_cpu_concat(const pe_op_ctx *ctx) {
    concat_split(ctx, pe_ctx_out(ctx, "Out"), "X", true, "X", true);
    return PE_OK;
}

/* Out@GRAD: [pre..., sum a_i, post...] -> X@GRAD_i: [pre..., a_i, post...] (absent ones skipped) */
pe_status pe_cpu_concat_grad(const pe_op_ctx *ctx) {
    concat_split(ctx, pe_ctx_in(ctx, "Out@GRAD"), "X@GRAD", false, "X", false);
    return PE_OK;
}

/* x: [pre..., d, post...] -> out_k: [pre..., s_k, post...] */
pe_status pe_cpu_split(const pe_op_ctx *ctx) {
    pe_tensor *x = pe_ctx_in(ctx, "X");
    int n = pe_ctx_n_out(ctx, "Out");
    for (int k = 0; k < n; k++)
        if (!pe_ctx_out_at(ctx, "Out", k))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "output Out[%d] is empty (%s)", k, PE_EMPTY_VAR);
    concat_split(ctx, x, "Out", false, "Out", false);
    return PE_OK;
}

/* Out@GRAD_k: [pre..., s_k, post...] -> X@GRAD: [pre..., d, post...] */
pe_status pe_cpu_split_grad(const pe_op_ctx *ctx) {
    concat_split(ctx, pe_ctx_out(ctx, "X@GRAD"), "Out@GRAD", true, "Out@GRAD", true);
    return PE_OK;
}

/* ---- stack / unstack (and unstack_grad / stack_grad) ---------------------------- */

/* parts_i: [pre..., post...] -> whole: [pre..., n, post...] (stack, unstack_grad) */
pe_status pe_cpu_stack(const pe_op_ctx *ctx) {
    const char *whole, *parts;
    pe_stack_slots(ctx, &whole, &parts);
    concat_split(ctx, pe_ctx_out(ctx, whole), parts, true, NULL, true);
    return PE_OK;
}

/* whole: [pre..., n, post...] -> parts_i: [pre..., post...] (unstack, stack_grad; absent ones skipped) */
pe_status pe_cpu_unstack(const pe_op_ctx *ctx) {
    const char *whole, *parts;
    pe_stack_slots(ctx, &whole, &parts);
    concat_split(ctx, pe_ctx_in(ctx, whole), parts, false, NULL, false);
    return PE_OK;
}

/* ---- slice ----------------------------------------------------------------------- */

/* Copies between the region of `big` ([bdims...], plan sp) and the dense
 * `small` ([sp->dims...]). The region's trailing axes that are taken whole
 * merge with the last partial axis into one contiguous run per row. */
static void slice_move(const pe_slice_plan *sp, const int64_t *bdims, char *big, char *small, size_t es,
                       bool to_small, int nt) {
    int r = sp->r;
    if (r == 0) { /* a scalar: the one element */
        if (to_small) memcpy(small, big, es);
        else memcpy(big, small, es);
        return;
    }
    if (pe_dims_prod(sp->dims, 0, r) == 0) return;
    int64_t bstr[PE_MAX_DIMS], base = 0;
    bstr[r - 1] = 1;
    for (int a = r - 2; a >= 0; a--) bstr[a] = bstr[a + 1] * bdims[a + 1];
    for (int a = 0; a < r; a++) base += sp->start[a] * bstr[a];
    int t = r;
    while (t > 0 && sp->dims[t - 1] == bdims[t - 1]) t--;
    int ra = t > 0 ? t - 1 : 0; /* rows run over axes [0, ra) */
    size_t rb = (size_t)pe_dims_prod(sp->dims, ra, r) * es;
    int64_t rows = pe_dims_prod(sp->dims, 0, ra);
    PE_PAR_FOR((size_t)rows * rb > PAR_BYTES && nt > 1, o, rows, {
        int64_t off = base, rem = o;
        for (int a = ra - 1; a >= 0; a--) {
            off += (rem % sp->dims[a]) * bstr[a];
            rem /= sp->dims[a];
        }
        char *bp = big + (size_t)off * es, *sm = small + (size_t)o * rb;
        if (to_small) memcpy(sm, bp, rb);
        else memcpy(bp, sm, rb);
    });
}

/* input: [d...] -> out: input[start_a : start_a + len_a, ...] (decreased dims dropped) */
pe_status pe_cpu_slice(const pe_op_ctx *ctx) {
    pe_tensor *in = pe_ctx_in(ctx, "Input"), *out = pe_ctx_out(ctx, "Out");
    pe_slice_plan sp;
    PE_CHECK(pe_slice_plan_make(ctx, "Input", in, &sp));
    slice_move(&sp, in->dims, pe_tensor_data(in), pe_tensor_data(out), pe_dtype_size(in->dtype), true,
               nthreads(ctx));
    return PE_OK;
}

/* Input: [d...], Out@GRAD: the region's shape -> Input@GRAD: [d...], zeros
 * outside the region and Out@GRAD inside */
pe_status pe_cpu_slice_grad(const pe_op_ctx *ctx) {
    pe_tensor *in = pe_ctx_in(ctx, "Input"), *g = pe_ctx_in(ctx, "Out@GRAD"), *dx = pe_ctx_out(ctx, "Input@GRAD");
    pe_slice_plan sp;
    PE_CHECK(pe_slice_plan_make(ctx, "Input", in, &sp));
    size_t n = pe_tensor_nbytes(dx);
    char *d = pe_tensor_data(dx);
    int nt = nthreads(ctx);
    int64_t nc = (int64_t)((n + PAR_BYTES - 1) / PAR_BYTES);
    PE_PAR_FOR(n >= 4 * PAR_BYTES && nt > 1, c, nc, {
        size_t o = (size_t)c * PAR_BYTES;
        memset(d + o, 0, n - o < PAR_BYTES ? n - o : PAR_BYTES);
    });
    slice_move(&sp, dx->dims, d, pe_tensor_data(g), pe_dtype_size(dx->dtype), false, nt);
    return PE_OK;
}

/* ---- fill_constant, assign_value ----------------------------------------- */

/* () -> out: [shape...] all equal to the value */
pe_status pe_cpu_fill_constant(const pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    double v;
    int64_t iv;
    bool is_int;
    PE_CHECK(pe_fill_constant_value(ctx, out->dtype, &v, &iv, &is_int));
    int64_t n = pe_tensor_numel(out);
    void *d = pe_tensor_data(out);
    const int nt = nthreads(ctx);
    bool par = n >= PE_PAR_MIN && nt > 1;
    switch (out->dtype) {
    case PE_DTYPE_FP32: {
        float f = (float)v, *p = d;
        PE_PAR_FOR(par, i, n, { p[i] = f; });
        break;
    }
    case PE_DTYPE_FP64: {
        double *p = d;
        PE_PAR_FOR(par, i, n, { p[i] = v; });
        break;
    }
    case PE_DTYPE_INT32: {
        int32_t c = is_int ? (int32_t)iv : (int32_t)v, *p = d;
        PE_PAR_FOR(par, i, n, { p[i] = c; });
        break;
    }
    case PE_DTYPE_INT64: {
        int64_t c = is_int ? iv : (int64_t)v, *p = d;
        PE_PAR_FOR(par, i, n, { p[i] = c; });
        break;
    }
    case PE_DTYPE_UINT8: if (n) memset(d, is_int ? (int)iv : (int)v, (size_t)n); break;
    case PE_DTYPE_BOOL: if (n) memset(d, v != 0.0, (size_t)n); break; /* nan counts as true, as C */
    default: return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "dtype %s", pe_dtype_name(out->dtype));
    }
    return PE_OK;
}

/* () -> out: [shape...] = the values of fp32_values / int32_values / int64_values */
pe_status pe_cpu_assign_value(const pe_op_ctx *ctx) {
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    int64_t n = pe_tensor_numel(out);
    void *d = pe_tensor_data(out);
    int nv;
    switch (out->dtype) {
    case PE_DTYPE_FP32: {
        const double *v = pe_ctx_floats(ctx, "fp32_values", &nv);
        for (int64_t i = 0; i < n; i++) ((float *)d)[i] = (float)v[i];
        break;
    }
    case PE_DTYPE_FP64: {
        const double *v = pe_ctx_floats(ctx, "fp32_values", &nv);
        for (int64_t i = 0; i < n; i++) ((double *)d)[i] = v[i];
        break;
    }
    case PE_DTYPE_INT64: {
        const int64_t *v = pe_ctx_ints(ctx, "int64_values", &nv);
        for (int64_t i = 0; i < n; i++) ((int64_t *)d)[i] = v[i];
        break;
    }
    case PE_DTYPE_INT32: {
        const int64_t *v = pe_ctx_ints(ctx, "int32_values", &nv);
        for (int64_t i = 0; i < n; i++) ((int32_t *)d)[i] = (int32_t)v[i];
        break;
    }
    case PE_DTYPE_UINT8: case PE_DTYPE_BOOL: {
        const int64_t *v = pe_ctx_ints(ctx, "int32_values", &nv);
        for (int64_t i = 0; i < n; i++)
            ((uint8_t *)d)[i] = out->dtype == PE_DTYPE_BOOL ? v[i] != 0 : (uint8_t)v[i];
        break;
    }
    default: return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "dtype %s", pe_dtype_name(out->dtype));
    }
    return PE_OK;
}

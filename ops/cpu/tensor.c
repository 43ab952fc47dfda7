/* ops/cpu/tensor.c — CPU kernels of the tensor family: reshape2,
 * transpose2, concat, fill_constant, assign_value.
 *
 * All of them move bytes, so they work for every dtype by element size.
 * transpose2 first simplifies the permutation (drops size-1 dims, merges
 * axes that stay adjacent), so most real transposes become a batch of 2-D
 * transposes, done in cache-sized tiles; when the innermost axis stays in
 * place it is a strided copy of contiguous rows. Loops over many rows or
 * tiles are split across ctx->num_threads OpenMP threads; every element is
 * written by exactly one thread, so results never depend on the count.
 */
#include "ops/tensor.h"

#include <string.h>

/* Below this many bytes a copy stays on one thread. */
#define PAR_BYTES (1 << 16)

static int nthreads(const pe_op_ctx *ctx) { return ctx->num_threads > 0 ? ctx->num_threads : 1; }

/* x: [d...] -> out: [shape...], same elements in the same order */
pe_status pe_cpu_reshape2(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    const void *src = pe_tensor_data(x);
    void *dst = pe_tensor_data(out);
    if (dst != src && pe_tensor_nbytes(x)) memcpy(dst, src, pe_tensor_nbytes(x)); /* in place: nothing */
    return PE_OK;                                                                   /* XShape: no data */
}

/* ---- transpose2 --------------------------------------------------------- */

typedef struct {
    int r;                       /* rank after simplification */
    int64_t in_dims[PE_MAX_DIMS];
    int perm[PE_MAX_DIMS];       /* out axis j = in axis perm[j] */
} tperm;

/* Drops size-1 dims and merges output axes whose input axes are adjacent
 * and in order: e.g. [N, C, H, W] perm (0, 2, 3, 1) -> [N, C, H*W] perm (0, 2, 1). */
static void simplify(int r, const int64_t *xd, const int64_t *axis, tperm *t) {
    int newidx[PE_MAX_DIMS], nk = 0;
    int64_t d2[PE_MAX_DIMS];
    for (int a = 0; a < r; a++) {
        newidx[a] = xd[a] == 1 ? -1 : nk;
        if (xd[a] != 1) d2[nk++] = xd[a];
    }
    int p2[PE_MAX_DIMS], r2 = 0;
    for (int j = 0; j < r; j++) {
        int a = (int)(axis[j] < 0 ? axis[j] + r : axis[j]);
        if (newidx[a] >= 0) p2[r2++] = newidx[a];
    }
    /* groups in output order: first input axis and merged size */
    int gfirst[PE_MAX_DIMS], ng = 0;
    int64_t gsize[PE_MAX_DIMS];
    for (int j = 0; j < r2; j++) {
        if (ng && p2[j] == p2[j - 1] + 1) {
            gsize[ng - 1] *= d2[p2[j]];
        } else {
            gfirst[ng] = p2[j];
            gsize[ng] = d2[p2[j]];
            ng++;
        }
    }
    /* input order of the groups = order of their first input axes */
    t->r = ng;
    for (int g = 0; g < ng; g++) {
        int rank = 0;
        for (int h = 0; h < ng; h++) rank += gfirst[h] < gfirst[g];
        t->perm[g] = rank;
        t->in_dims[rank] = gsize[g];
    }
}

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
        _Pragma("omp parallel for num_threads(nt) schedule(static) if (total > 16 && bytes > PAR_BYTES)") \
        for (int64_t w = 0; w < total; w++) {                                                       \
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
        }                                                                                           \
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
    #pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)rows * row_bytes > PAR_BYTES)
    for (int64_t o = 0; o < rows; o++) {
        int64_t ib = 0, rem = o;
        for (int j = r - 2; j >= 0; j--) {
            ib += (rem % od[j]) * s[j];
            rem /= od[j];
        }
        memcpy(out + (size_t)o * row_bytes, in + (size_t)ib * es, row_bytes);
    }
}

/* x: [d0, ..., d(r-1)] -> out: [d(axis[0]), ..., d(axis[r-1])] */
pe_status pe_cpu_transpose2(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    size_t nbytes = pe_tensor_nbytes(x), es = pe_dtype_size(x->dtype);
    if (!nbytes) return PE_OK;
    int n;
    const int64_t *axis = pe_ctx_ints(ctx, "axis", &n);
    tperm t;
    simplify(x->ndim, x->dims, axis, &t);
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

/* ---- concat ------------------------------------------------------------- */

/* xs: [pre..., a_i, post...] -> out: [pre..., sum a_i, post...]
 * viewed as [outer, a_i * inner]: out row o = x_0 row o | x_1 row o | ... */
pe_status pe_cpu_concat(const pe_op_ctx *ctx) {
    int nx = pe_ctx_n_in(ctx, "X");
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    int r = out->ndim;
    int64_t axis = pe_ctx_int(ctx, "axis");
    if (axis < 0) axis += r;
    size_t es = pe_dtype_size(out->dtype);
    int64_t outer = pe_dims_prod(out->dims, 0, (int)axis);
    size_t row = (size_t)pe_dims_prod(out->dims, (int)axis, r) * es;
    char *od = pe_tensor_data(out);
    if (!row || !outer) return PE_OK;
    int nt = nthreads(ctx);
    size_t off = 0;
    for (int i = 0; i < nx; i++) {
        const pe_tensor *xi = pe_ctx_in_at(ctx, "X", i);
        size_t chunk = (size_t)pe_dims_prod(xi->dims, (int)axis, r) * es;
        const char *xd = pe_tensor_data(xi);
        if (!chunk) continue;
        if (outer == 1) {
            memcpy(od + off, xd, chunk);
        } else {
            #pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)outer * chunk > PAR_BYTES)
            for (int64_t o = 0; o < outer; o++) memcpy(od + (size_t)o * row + off, xd + (size_t)o * chunk, chunk);
        }
        off += chunk;
    }
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
    int nt = nthreads(ctx);
    switch (out->dtype) {
    case PE_DTYPE_FP32: {
        float f = (float)v, *p = d;
        #pragma omp parallel for num_threads(nt) schedule(static) if (n * 4 > PAR_BYTES)
        for (int64_t i = 0; i < n; i++) p[i] = f;
        break;
    }
    case PE_DTYPE_FP64: {
        double *p = d;
        #pragma omp parallel for num_threads(nt) schedule(static) if (n * 8 > PAR_BYTES)
        for (int64_t i = 0; i < n; i++) p[i] = v;
        break;
    }
    case PE_DTYPE_INT32: {
        int32_t c = is_int ? (int32_t)iv : (int32_t)v, *p = d;
        #pragma omp parallel for num_threads(nt) schedule(static) if (n * 4 > PAR_BYTES)
        for (int64_t i = 0; i < n; i++) p[i] = c;
        break;
    }
    case PE_DTYPE_INT64: {
        int64_t c = is_int ? iv : (int64_t)v, *p = d;
        #pragma omp parallel for num_threads(nt) schedule(static) if (n * 8 > PAR_BYTES)
        for (int64_t i = 0; i < n; i++) p[i] = c;
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

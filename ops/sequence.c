/* ops/sequence.c — shape inference of the sequence (LoD) ops, Paddle 1.x's
 * sequence_pool, sequence_softmax, sequence_expand, sequence_mask,
 * sequence_conv and their gradients (kernels: ops/cpu/sequence.c,
 * ops/cuda/sequence.cu).
 *
 * Their output rows come from the LoD, not from the dims: sequence_pool has
 * one row per sequence of X's last level, sequence_expand the rows of X's
 * sequences repeated as Y's sequences say. The LoD is tensor metadata,
 * known at run time (the feed carries it) and in the memory plan's shape
 * inference (it copies the feeds' LoDs; ops that keep rows pass it on), so
 * these sizes are exact there too, and a plan is cached per LoD. Each infer
 * sets its outputs' LoD itself (ctx->lod_set: no ShareLoD by rows):
 * sequence_pool drops X's last level, sequence_softmax keeps X's,
 * sequence_expand builds one level of the repeated X sequences (none when X
 * has none, as Paddle), sequence_conv keeps X's, the gradients take X's
 * (Filter@GRAD none).
 *
 * sequence_mask's columns are max(X) unless maxlen is given: a value, read
 * from X's data at run time. In the memory plan's inference X has no data;
 * Y is then [X dims, 0] — no bytes to plan — and the run sizes it.
 */
#include "ops/sequence.h"
#include "pe/device.h"

#include <stdlib.h>
#include <string.h>

pe_status pe_seqpool_type(const pe_op_ctx *ctx, int *type) {
    static const char *names[] = {"SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST"};
    const char *s = pe_ctx_string(ctx, "pooltype");
    for (int i = 0; i < 6; i++)
        if (!strcmp(s, names[i])) {
            *type = i;
            return PE_OK;
        }
    return pe_ctx_error(ctx, PE_ERR_INVALID, "attr pooltype = '%s' (expected SUM, AVERAGE, SQRT, MAX, LAST or FIRST)",
                        s);
}

pe_status pe_seq_last_level(const pe_op_ctx *ctx, const char *slot, const pe_tensor *t, const int64_t **off,
                            int64_t *n) {
    int levels = pe_tensor_lod_levels(t);
    if (!levels)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "input %s '%s' has no LoD: the op works on sequences (feed a LoDTensor, e.g. "
                            "fluid.create_lod_tensor, for a var declared with lod_level=1)",
                            slot, pe_ctx_in_name(ctx, slot, 0));
    *off = pe_tensor_lod(t, levels - 1, n);
    if (t->ndim < 1 || (*off)[*n - 1] != t->dims[0]) {
        char ds[160];
        return pe_ctx_error(ctx, PE_ERR_INVALID, "input %s '%s': its LoD ends at row %lld, but it has shape %s", slot,
                            pe_ctx_in_name(ctx, slot, 0), (long long)(*off)[*n - 1],
                            pe_dims_str(t->ndim, t->dims, ds, sizeof ds));
    }
    return PE_OK;
}

/* ---- sequence_pool ------------------------------------------------------ */

/* X: [N, D...] with LoD -> Out: [sequences of X's last level, D...],
 * MaxIndex: int32 like Out (MAX) or [0] */
pe_status pe_infer_sequence_pool(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    int type = 0;
    PE_CHECK(pe_seqpool_type(ctx, &type));
    if (!pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has dtype %s (expected float32 or float64)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    const int64_t *off;
    int64_t n;
    PE_CHECK(pe_seq_last_level(ctx, "X", x, &off, &n));
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, x->dims, sizeof dims);
    dims[0] = n - 1;
    PE_CHECK(pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, dims));
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    ctx->lod_set = true;
    int levels = pe_tensor_lod_levels(x);
    if (out) {
        pe_tensor_clear_lod(out);
        if (levels > 1) PE_CHECK(pe_tensor_set_lod(out, levels - 1, (const int64_t *const *)x->lod->offsets,
                                                   x->lod->n_offsets));
    }
    pe_tensor *mi = pe_ctx_out(ctx, "MaxIndex");
    if (mi) {
        int64_t zero = 0;
        if (type == PE_SEQPOOL_MAX) PE_CHECK(pe_infer_set_meta(ctx, mi, PE_DTYPE_INT32, x->ndim, dims));
        else PE_CHECK(pe_infer_set_meta(ctx, mi, PE_DTYPE_INT32, 1, &zero));
        pe_tensor_clear_lod(mi);
    }
    return PE_OK;
}

/* X (dims, LoD), MaxIndex (MAX), Out@GRAD: [sequences, D...] -> X@GRAD like X */
pe_status pe_infer_sequence_pool_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    int type = 0;
    PE_CHECK(pe_seqpool_type(ctx, &type));
    const int64_t *off;
    int64_t n;
    PE_CHECK(pe_seq_last_level(ctx, "X", x, &off, &n));
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, x->dims, sizeof dims);
    dims[0] = n - 1;
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, x->dtype, x->ndim, dims));
    if (type == PE_SEQPOOL_MAX) {
        pe_tensor *mi;
        PE_CHECK(pe_infer_need_in(ctx, "MaxIndex", &mi));
        if (mi->dtype != PE_DTYPE_INT32 || pe_tensor_numel(mi) != pe_tensor_numel(g))
            return pe_ctx_error(ctx, PE_ERR_INVALID, "MaxIndex '%s' is %s with %lld elements (expected int32, %lld)",
                                pe_ctx_in_name(ctx, "MaxIndex", 0), pe_dtype_name(mi->dtype),
                                (long long)pe_tensor_numel(mi), (long long)pe_tensor_numel(g));
    }
    PE_CHECK(pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims));
    ctx->lod_set = true;
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD");
    if (gx) pe_tensor_share_lod(gx, x);
    return PE_OK;
}

/* ---- sequence_softmax --------------------------------------------------- */

static pe_status check_softmax_x(pe_op_ctx *ctx, const pe_tensor *x) {
    if (!pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has dtype %s (expected float32 or float64)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    if (!(x->ndim == 1 || (x->ndim == 2 && x->dims[1] == 1))) {
        char ds[160];
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has shape %s (expected [N] or [N, 1]: one score per row)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dims_str(x->ndim, x->dims, ds, sizeof ds));
    }
    const int64_t *off;
    int64_t n;
    return pe_seq_last_level(ctx, "X", x, &off, &n);
}

/* X: [N] or [N, 1] with LoD -> Out: like X, softmax within each sequence */
pe_status pe_infer_sequence_softmax(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(check_softmax_x(ctx, x));
    PE_CHECK(pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, x->dims));
    ctx->lod_set = true;
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (out) pe_tensor_share_lod(out, x);
    return PE_OK;
}

/* X (LoD), Out, Out@GRAD -> X@GRAD like X */
pe_status pe_infer_sequence_softmax_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *o, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Out", &o));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    PE_CHECK(check_softmax_x(ctx, x));
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, x->dtype, x->ndim, x->dims));
    PE_CHECK(pe_infer_check_grad(ctx, "Out", o, x->dtype, x->ndim, x->dims));
    PE_CHECK(pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims));
    ctx->lod_set = true;
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD");
    if (gx) pe_tensor_share_lod(gx, x);
    return PE_OK;
}

/* ---- sequence_expand ---------------------------------------------------- */

pe_status pe_seq_expand_levels(const pe_op_ctx *ctx, const pe_tensor *x, const pe_tensor *y, const int64_t **y_off,
                               int64_t *n_y, const int64_t **x_off) {
    int ylev = pe_tensor_lod_levels(y);
    if (!ylev)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "input Y '%s' has no LoD: sequence_expand repeats X as Y's sequences say (feed Y as a "
                            "LoDTensor)", pe_ctx_in_name(ctx, "Y", 0));
    int64_t ref = pe_ctx_int(ctx, "ref_level");
    if (ref == -1) ref = ylev - 1;
    if (ref < 0 || ref >= ylev)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr ref_level = %lld, but Y '%s' has %d LoD levels (expected -1 or "
                            "0..%d)", (long long)pe_ctx_int(ctx, "ref_level"), pe_ctx_in_name(ctx, "Y", 0), ylev,
                            ylev - 1);
    *y_off = pe_tensor_lod(y, (int)ref, n_y);
    int xlev = pe_tensor_lod_levels(x);
    if (xlev > 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "input X '%s' has %d LoD levels (sequence_expand takes at most 1)",
                            pe_ctx_in_name(ctx, "X", 0), xlev);
    char ds[160];
    if (x->ndim < 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "input X '%s' has shape %s (expected rows: rank >= 1)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dims_str(x->ndim, x->dims, ds, sizeof ds));
    int64_t nx;
    *x_off = xlev ? pe_tensor_lod(x, 0, &nx) : NULL;
    int64_t x_seqs = xlev ? nx - 1 : x->dims[0];
    if (x_seqs != *n_y - 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "input X '%s' holds %lld %s, but level %lld of Y '%s' has %lld sequences (one repeat "
                            "count per X sequence)", pe_ctx_in_name(ctx, "X", 0), (long long)x_seqs,
                            xlev ? "sequences" : "rows", (long long)ref, pe_ctx_in_name(ctx, "Y", 0),
                            (long long)(*n_y - 1));
    if (xlev && (*x_off)[nx - 1] != x->dims[0])
        return pe_ctx_error(ctx, PE_ERR_INVALID, "input X '%s': its LoD ends at row %lld, but it has shape %s",
                            pe_ctx_in_name(ctx, "X", 0), (long long)(*x_off)[nx - 1],
                            pe_dims_str(x->ndim, x->dims, ds, sizeof ds));
    return PE_OK;
}

/* X: [N, D...] (LoD of at most 1 level), Y with LoD -> Out: [sum_i r_i * len_i, D...],
 * X's sequence i repeated r_i = Y's sequence i's length (level ref_level) times */
pe_status pe_infer_sequence_expand(pe_op_ctx *ctx) {
    pe_tensor *x, *y;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Y", &y));
    const int64_t *yo, *xo;
    int64_t ny;
    PE_CHECK(pe_seq_expand_levels(ctx, x, y, &yo, &ny, &xo));
    int64_t rows = 0;
    for (int64_t i = 0; i + 1 < ny; i++) rows += (yo[i + 1] - yo[i]) * (xo ? xo[i + 1] - xo[i] : 1);
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, x->dims, sizeof dims);
    dims[0] = rows;
    PE_CHECK(pe_infer_set_out(ctx, "Out", x->dtype, x->ndim, dims));
    ctx->lod_set = true;
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (!out) return PE_OK;
    pe_tensor_clear_lod(out);
    if (!xo) return PE_OK;
    int64_t m = 1;
    for (int64_t i = 0; i + 1 < ny; i++) m += yo[i + 1] - yo[i];
    int64_t *lod = malloc(sizeof *lod * (size_t)m);
    if (!lod) return pe_ctx_error(ctx, PE_ERR_NOMEM, "out of memory building Out's LoD (%lld offsets)", (long long)m);
    int64_t k = 0;
    lod[k++] = 0;
    for (int64_t i = 0; i + 1 < ny; i++)
        for (int64_t r = 0; r < yo[i + 1] - yo[i]; r++, k++) lod[k] = lod[k - 1] + (xo[i + 1] - xo[i]);
    const int64_t *lv[1] = {lod};
    pe_status st = pe_tensor_set_lod(out, 1, lv, &m);
    free(lod);
    return st;
}

/* X, Y (LoDs), Out@GRAD -> X@GRAD like X (the sum of each X sequence's copies) */
pe_status pe_infer_sequence_expand_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *y, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Y", &y));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    const int64_t *yo, *xo;
    int64_t ny;
    PE_CHECK(pe_seq_expand_levels(ctx, x, y, &yo, &ny, &xo));
    if (!pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has dtype %s (expected float32 or float64)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    int64_t rows = 0;
    for (int64_t i = 0; i + 1 < ny; i++) rows += (yo[i + 1] - yo[i]) * (xo ? xo[i + 1] - xo[i] : 1);
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, x->dims, sizeof dims);
    dims[0] = rows;
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, x->dtype, x->ndim, dims));
    PE_CHECK(pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims));
    ctx->lod_set = true;
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD");
    if (gx) pe_tensor_share_lod(gx, x);
    return PE_OK;
}

/* ---- sequence_mask ------------------------------------------------------ */

/* X: int lengths [d...] -> Y: [d..., maxlen] of out_dtype, Y[..., j] = j < X[...] */
pe_status pe_infer_sequence_mask(pe_op_ctx *ctx) {
    pe_tensor *x;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    if (x->dtype != PE_DTYPE_INT32 && x->dtype != PE_DTYPE_INT64)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has dtype %s (expected int32 or int64 lengths)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    int64_t odt = pe_ctx_int(ctx, "out_dtype");
    if (!pe_dtype_valid((int)odt) || odt == PE_DTYPE_BF16 || odt == PE_DTYPE_FP16)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr out_dtype = %lld is not a supported dtype", (long long)odt);
    if (x->ndim + 1 > PE_MAX_DIMS)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has rank %d: Y would pass %d dims",
                            pe_ctx_in_name(ctx, "X", 0), x->ndim, PE_MAX_DIMS);
    int64_t maxlen = pe_ctx_int(ctx, "maxlen");
    if (maxlen < 0) {
        /* max(X): a value; none to read in the memory plan's inference */
        maxlen = 0;
        int64_t n = pe_tensor_numel(x);
        if (n > 0 && pe_tensor_has_data(x)) {
            size_t es = pe_dtype_size(x->dtype);
            void *h = malloc((size_t)n * es);
            if (!h) return pe_ctx_error(ctx, PE_ERR_NOMEM, "out of memory reading X's lengths");
            pe_status st = pe_memcpy_places(h, pe_place_cpu(0), pe_tensor_data(x), x->buf->place, (size_t)n * es);
            if (st != PE_OK) {
                free(h);
                return pe_ctx_error(ctx, st, "reading X's lengths: %s", pe_last_error());
            }
            for (int64_t i = 0; i < n; i++) {
                int64_t v = x->dtype == PE_DTYPE_INT32 ? ((int32_t *)h)[i] : ((int64_t *)h)[i];
                if (v > maxlen) maxlen = v;
            }
            free(h);
        }
    }
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, x->dims, sizeof dims);
    dims[x->ndim] = maxlen;
    PE_CHECK(pe_infer_set_out(ctx, "Y", (pe_dtype)odt, x->ndim + 1, dims));
    ctx->lod_set = true;
    pe_tensor *y = pe_ctx_out(ctx, "Y");
    if (y) pe_tensor_clear_lod(y);
    return PE_OK;
}

/* ---- sequence_conv ------------------------------------------------------ */

pe_status pe_seqconv_geom_get(const pe_op_ctx *ctx, const pe_tensor *x, const pe_tensor *f, pe_seqconv_geom *g) {
    char ds[160];
    if (pe_ctx_bool(ctx, "paddingTrainable"))
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED,
                            "attr paddingTrainable = true (a trained PaddingData for the rows outside the "
                            "sequences of X '%s') is not supported; PE pads with zeros (paddingTrainable = false, "
                            "as fluid.layers.sequence_conv builds it)", pe_ctx_in_name(ctx, "X", 0));
    const int64_t stride = pe_ctx_int(ctx, "contextStride");
    if (stride != 1)
        return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED,
                            "attr contextStride = %lld for X '%s' (only 1 is supported, as in Paddle)",
                            (long long)stride, pe_ctx_in_name(ctx, "X", 0));
    g->len = pe_ctx_int(ctx, "contextLength");
    g->start = pe_ctx_int(ctx, "contextStart");
    if (g->len < 1)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr contextLength = %lld for X '%s' (expected >= 1)",
                            (long long)g->len, pe_ctx_in_name(ctx, "X", 0));
    if (!pe_dtype_is_float(x->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has dtype %s (expected float32 or float64)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dtype_name(x->dtype));
    if (x->ndim != 2)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "X '%s' has shape %s (expected [T, D]: one row per time step)",
                            pe_ctx_in_name(ctx, "X", 0), pe_dims_str(x->ndim, x->dims, ds, sizeof ds));
    PE_CHECK(pe_seq_last_level(ctx, "X", x, &g->off, &g->n_off));
    g->rows = x->dims[0];
    g->d = x->dims[1];
    if (f->dtype != x->dtype || f->ndim != 2 || f->dims[0] != g->len * g->d)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "Filter '%s' is %s %s (expected %s [contextLength * D, N] = [%lld, N] for X '%s' of "
                            "D = %lld and contextLength = %lld)", pe_ctx_in_name(ctx, "Filter", 0),
                            pe_dtype_name(f->dtype), pe_dims_str(f->ndim, f->dims, ds, sizeof ds),
                            pe_dtype_name(x->dtype), (long long)(g->len * g->d), pe_ctx_in_name(ctx, "X", 0),
                            (long long)g->d, (long long)g->len);
    g->n = f->dims[1];
    return PE_OK;
}

/* X [T, D] with LoD, Filter [contextLength * D, N] -> Out [T, N] with X's LoD */
pe_status pe_infer_sequence_conv(pe_op_ctx *ctx) {
    pe_tensor *x, *f;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Filter", &f));
    pe_seqconv_geom g;
    PE_CHECK(pe_seqconv_geom_get(ctx, x, f, &g));
    const int64_t dims[2] = {g.rows, g.n};
    PE_CHECK(pe_infer_set_out(ctx, "Out", x->dtype, 2, dims));
    ctx->lod_set = true;
    pe_tensor *out = pe_ctx_out(ctx, "Out");
    if (out) pe_tensor_share_lod(out, x);
    return PE_OK;
}

/* X, Filter, Out@GRAD [T, N] -> X@GRAD like X (its LoD), Filter@GRAD like Filter */
pe_status pe_infer_sequence_conv_grad(pe_op_ctx *ctx) {
    pe_tensor *x, *f, *g;
    PE_CHECK(pe_infer_need_in(ctx, "X", &x));
    PE_CHECK(pe_infer_need_in(ctx, "Filter", &f));
    PE_CHECK(pe_infer_need_in(ctx, "Out@GRAD", &g));
    pe_seqconv_geom sg;
    PE_CHECK(pe_seqconv_geom_get(ctx, x, f, &sg));
    const int64_t dims[2] = {sg.rows, sg.n};
    PE_CHECK(pe_infer_check_grad(ctx, "Out@GRAD", g, x->dtype, 2, dims));
    PE_CHECK(pe_infer_set_out(ctx, "X@GRAD", x->dtype, x->ndim, x->dims));
    PE_CHECK(pe_infer_set_out(ctx, "Filter@GRAD", f->dtype, f->ndim, f->dims));
    ctx->lod_set = true;
    pe_tensor *gx = pe_ctx_out(ctx, "X@GRAD"), *gf = pe_ctx_out(ctx, "Filter@GRAD");
    if (gx) pe_tensor_share_lod(gx, x);
    if (gf) pe_tensor_clear_lod(gf);
    return PE_OK;
}

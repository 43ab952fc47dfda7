/* ops/rnn.c — shape inference of the recurrent LoD ops, Paddle 1.x's lstm
 * (fluid.layers.dynamic_lstm) and gru (fluid.layers.dynamic_gru), their
 * gradients, and the step plan the kernels share (ops/rnn.h; kernels:
 * ops/cpu/rnn.c, ops/cuda/rnn.cu).
 *
 * lstm: Input [T, 4H] (X projected by an fc; gate columns {candidate,
 * input, forget, output}, Paddle's order), Weight [H, 4H] (the same
 * columns), Bias [1, 4H], or [1, 7H] with use_peepholes (then the
 * diagonal peephole weights W_ic, W_fc, W_oc follow the gate biases),
 * H0 / C0 [sequences, H] -> Hidden, Cell [T, H] with Input's LoD;
 * BatchGate [T, 4H] holds the activated gates, BatchCellPreAct [T, H]
 * cell_activation(Cell), both by X row (Paddle keeps them batch-reordered;
 * they are intermediates, read by lstm_grad only).
 *
 * gru: Input [T, 3H] (columns {update, reset, candidate}), Weight [H, 3H]
 * read as Paddle does: its first H*2H elements are the [H, 2H] update /
 * reset weight, the last H*H the [H, H] candidate weight; Bias [1, 3H],
 * H0 [sequences, H] -> Hidden [T, H] with Input's LoD; BatchGate [T, 3H]
 * (activated u, r, c), BatchResetHiddenPrev [T, H] (r * h_prev),
 * BatchHidden [T, H] (Hidden again), by X row. Hidden@GRAD only: a
 * gradient of no other output exists.
 *
 * The gradients' outputs take their forward input's meta (Input@GRAD its
 * LoD too); Hidden@GRAD / Cell@GRAD must match the forward outputs.
 */
#include "ops/rnn.h"

#include <stdlib.h>
#include <string.h>

pe_status pe_rnn_act(const pe_op_ctx *ctx, const char *name, int *act) {
    const char *s = pe_ctx_string(ctx, name);
    if (!strcmp(s, "sigmoid")) *act = PE_RNN_ACT_SIGMOID;
    else if (!strcmp(s, "tanh")) *act = PE_RNN_ACT_TANH;
    else if (!strcmp(s, "relu")) *act = PE_RNN_ACT_RELU;
    else if (!strcmp(s, "identity") || !strcmp(s, "linear") || !*s) *act = PE_RNN_ACT_IDENTITY;
    else
        return pe_ctx_error(ctx, PE_ERR_INVALID, "attr %s = '%s' (expected sigmoid, tanh, relu or identity)", name, s);
    return PE_OK;
}

void pe_rnn_plan_free(pe_rnn_plan *p) {
    free(p->step_off);
    free(p->row);
    memset(p, 0, sizeof *p);
}

pe_status pe_rnn_plan_make(const pe_op_ctx *ctx, const pe_tensor *x, bool reverse, pe_rnn_plan *p) {
    memset(p, 0, sizeof *p);
    int levels = pe_tensor_lod_levels(x);
    if (!levels)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "input Input '%s' has no LoD: the op runs over sequences (feed a LoDTensor, e.g. "
                            "fluid.create_lod_tensor, for a var declared with lod_level=1)",
                            pe_ctx_in_name(ctx, "Input", 0));
    int64_t n;
    const int64_t *off = pe_tensor_lod(x, levels - 1, &n);
    if (x->ndim < 1 || off[n - 1] != x->dims[0]) {
        char ds[160];
        return pe_ctx_error(ctx, PE_ERR_INVALID, "input Input '%s': its LoD ends at row %lld, but it has shape %s",
                            pe_ctx_in_name(ctx, "Input", 0), (long long)off[n - 1],
                            pe_dims_str(x->ndim, x->dims, ds, sizeof ds));
    }
    p->off = off;
    p->rows = x->dims[0];
    p->seqs = n - 1;
    for (int64_t s = 0; s < p->seqs; s++)
        if (off[s + 1] - off[s] > p->steps) p->steps = off[s + 1] - off[s];
    p->step_off = calloc((size_t)p->steps + 1, sizeof(int64_t));
    p->row = malloc(sizeof(int64_t) * 5 * (size_t)(p->rows ? p->rows : 1));
    if (!p->step_off || !p->row) {
        pe_rnn_plan_free(p);
        return pe_ctx_error(ctx, PE_ERR_NOMEM, "out of memory planning the steps of %lld rows", (long long)x->dims[0]);
    }
    p->seq = p->row + p->rows;
    p->prev = p->seq + p->rows;
    p->row_seq = p->prev + p->rows;
    p->row_prev = p->row_seq + p->rows;
    int64_t k = 0;
    for (int64_t t = 0; t < p->steps; t++) {
        p->step_off[t] = k;
        for (int64_t s = 0; s < p->seqs; s++) {
            const int64_t b = off[s], e = off[s + 1];
            if (e - b <= t) continue;
            const int64_t r = reverse ? e - 1 - t : b + t;
            p->row[k] = r;
            p->seq[k] = s;
            p->prev[k] = t == 0 ? -1 : reverse ? r + 1 : r - 1;
            p->row_seq[r] = s;
            p->row_prev[r] = p->prev[k];
            k++;
        }
    }
    p->step_off[p->steps] = k;
    return PE_OK;
}

/* ---- shared checks ---------------------------------------------------------- */

static pe_status need_float(pe_op_ctx *ctx, const char *slot, const pe_tensor *t, pe_dtype dt) {
    if (!pe_dtype_is_float(t->dtype) || t->dtype != dt)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' has dtype %s (expected %s, as Input)", slot,
                            pe_ctx_in_name(ctx, slot, 0), pe_dtype_name(t->dtype), pe_dtype_name(dt));
    return PE_OK;
}

static pe_status need_dims(pe_op_ctx *ctx, const char *slot, const pe_tensor *t, int64_t d0, int64_t d1,
                           const char *what) {
    if (t->ndim != 2 || t->dims[0] != d0 || t->dims[1] != d1) {
        char ds[160];
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s '%s' has shape %s (expected [%lld, %lld]: %s)", slot,
                            pe_ctx_in_name(ctx, slot, 0), pe_dims_str(t->ndim, t->dims, ds, sizeof ds),
                            (long long)d0, (long long)d1, what);
    }
    return PE_OK;
}

/* Input [T, gates * H] with LoD, Weight [H, gates * H]: *h = H, *seqs = sequences */
static pe_status check_rnn(pe_op_ctx *ctx, int gates, pe_tensor **x, pe_tensor **w, int64_t *h, int64_t *seqs) {
    PE_CHECK(pe_infer_need_in(ctx, "Input", x));
    PE_CHECK(pe_infer_need_in(ctx, "Weight", w));
    if (!pe_dtype_is_float((*x)->dtype))
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Input '%s' has dtype %s (expected float32 or float64)",
                            pe_ctx_in_name(ctx, "Input", 0), pe_dtype_name((*x)->dtype));
    char ds[160];
    if ((*x)->ndim != 2 || (*x)->dims[1] % gates)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "Input '%s' has shape %s (expected [T, %d * hidden size])",
                            pe_ctx_in_name(ctx, "Input", 0), pe_dims_str((*x)->ndim, (*x)->dims, ds, sizeof ds),
                            gates);
    *h = (*x)->dims[1] / gates;
    PE_CHECK(need_float(ctx, "Weight", *w, (*x)->dtype));
    PE_CHECK(need_dims(ctx, "Weight", *w, *h, gates * *h, "[hidden size, Input's columns]"));
    int levels = pe_tensor_lod_levels(*x);
    if (!levels)
        return pe_ctx_error(ctx, PE_ERR_INVALID,
                            "input Input '%s' has no LoD: the op runs over sequences (feed a LoDTensor, e.g. "
                            "fluid.create_lod_tensor, for a var declared with lod_level=1)",
                            pe_ctx_in_name(ctx, "Input", 0));
    int64_t n;
    const int64_t *off = pe_tensor_lod(*x, levels - 1, &n);
    if (off[n - 1] != (*x)->dims[0])
        return pe_ctx_error(ctx, PE_ERR_INVALID, "input Input '%s': its LoD ends at row %lld, but it has shape %s",
                            pe_ctx_in_name(ctx, "Input", 0), (long long)off[n - 1],
                            pe_dims_str((*x)->ndim, (*x)->dims, ds, sizeof ds));
    *seqs = n - 1;
    return PE_OK;
}

/* optional state input `slot` (H0, C0): [sequences, H] */
static pe_status check_state(pe_op_ctx *ctx, const char *slot, const pe_tensor *x, int64_t h, int64_t seqs) {
    const pe_tensor *t = pe_ctx_in(ctx, slot);
    if (!t) return PE_OK;
    PE_CHECK(need_float(ctx, slot, t, x->dtype));
    return need_dims(ctx, slot, t, seqs, h, "one row per sequence of Input");
}

static pe_status set_out(pe_op_ctx *ctx, const char *slot, pe_dtype dt, int64_t d0, int64_t d1, const pe_tensor *lod) {
    const int64_t dims[2] = {d0, d1};
    PE_CHECK(pe_infer_set_out(ctx, slot, dt, 2, dims));
    pe_tensor *o = pe_ctx_out(ctx, slot);
    if (o) {
        if (lod) pe_tensor_share_lod(o, lod);
        else pe_tensor_clear_lod(o);
    }
    return PE_OK;
}

/* the grad output `slot` (e.g. "Weight@GRAD") like forward input `in` */
static pe_status set_grad_like(pe_op_ctx *ctx, const char *slot, const char *in) {
    pe_tensor *o = pe_ctx_out(ctx, slot), *t = pe_ctx_in(ctx, in);
    if (!o) return PE_OK;
    if (!t)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s is asked for, but input %s is absent", slot, in);
    PE_CHECK(pe_infer_set_out(ctx, slot, t->dtype, t->ndim, t->dims));
    pe_tensor_share_lod(o, t);
    return PE_OK;
}

/* ---- lstm ------------------------------------------------------------------- */

static pe_status check_lstm(pe_op_ctx *ctx, pe_tensor **x, int64_t *h, int64_t *seqs) {
    pe_tensor *w, *b;
    PE_CHECK(check_rnn(ctx, 4, x, &w, h, seqs));
    PE_CHECK(pe_infer_need_in(ctx, "Bias", &b));
    PE_CHECK(need_float(ctx, "Bias", b, (*x)->dtype));
    const bool peep = pe_ctx_bool(ctx, "use_peepholes");
    PE_CHECK(need_dims(ctx, "Bias", b, 1, (peep ? 7 : 4) * *h,
                       peep ? "4 gate biases then the 3 peephole weights (use_peepholes)"
                            : "4 gate biases (use_peepholes false)"));
    PE_CHECK(check_state(ctx, "H0", *x, *h, *seqs));
    PE_CHECK(check_state(ctx, "C0", *x, *h, *seqs));
    int act;
    PE_CHECK(pe_rnn_act(ctx, "gate_activation", &act));
    PE_CHECK(pe_rnn_act(ctx, "cell_activation", &act));
    return pe_rnn_act(ctx, "candidate_activation", &act);
}

pe_status pe_infer_lstm(pe_op_ctx *ctx) {
    pe_tensor *x;
    int64_t h, seqs;
    PE_CHECK(check_lstm(ctx, &x, &h, &seqs));
    const int64_t t = x->dims[0];
    ctx->lod_set = true;
    PE_CHECK(set_out(ctx, "Hidden", x->dtype, t, h, x));
    PE_CHECK(set_out(ctx, "Cell", x->dtype, t, h, x));
    PE_CHECK(set_out(ctx, "BatchGate", x->dtype, t, 4 * h, NULL));
    return set_out(ctx, "BatchCellPreAct", x->dtype, t, h, NULL);
}

/* the forward outputs a grad op reads: `slot` [T, cols] */
static pe_status check_fwd_out(pe_op_ctx *ctx, const char *slot, const pe_tensor *x, int64_t cols) {
    pe_tensor *t;
    PE_CHECK(pe_infer_need_in(ctx, slot, &t));
    const int64_t dims[2] = {x->dims[0], cols};
    return pe_infer_check_grad(ctx, slot, t, x->dtype, 2, dims);
}

pe_status pe_infer_lstm_grad(pe_op_ctx *ctx) {
    pe_tensor *x;
    int64_t h, seqs;
    PE_CHECK(check_lstm(ctx, &x, &h, &seqs));
    PE_CHECK(check_fwd_out(ctx, "Hidden", x, h));
    PE_CHECK(check_fwd_out(ctx, "Cell", x, h));
    PE_CHECK(check_fwd_out(ctx, "BatchGate", x, 4 * h));
    PE_CHECK(check_fwd_out(ctx, "BatchCellPreAct", x, h));
    PE_CHECK(check_fwd_out(ctx, "Hidden@GRAD", x, h));
    if (pe_ctx_in(ctx, "Cell@GRAD")) PE_CHECK(check_fwd_out(ctx, "Cell@GRAD", x, h));
    ctx->lod_set = true;
    PE_CHECK(set_grad_like(ctx, "Input@GRAD", "Input"));
    PE_CHECK(set_grad_like(ctx, "Weight@GRAD", "Weight"));
    PE_CHECK(set_grad_like(ctx, "Bias@GRAD", "Bias"));
    PE_CHECK(set_grad_like(ctx, "H0@GRAD", "H0"));
    return set_grad_like(ctx, "C0@GRAD", "C0");
}

/* ---- gru -------------------------------------------------------------------- */

static pe_status check_gru(pe_op_ctx *ctx, pe_tensor **x, int64_t *h, int64_t *seqs) {
    pe_tensor *w;
    PE_CHECK(check_rnn(ctx, 3, x, &w, h, seqs));
    const pe_tensor *b = pe_ctx_in(ctx, "Bias");
    if (b) {
        PE_CHECK(need_float(ctx, "Bias", b, (*x)->dtype));
        PE_CHECK(need_dims(ctx, "Bias", b, 1, 3 * *h, "the update, reset and candidate biases"));
    }
    PE_CHECK(check_state(ctx, "H0", *x, *h, *seqs));
    int act;
    PE_CHECK(pe_rnn_act(ctx, "gate_activation", &act));
    return pe_rnn_act(ctx, "activation", &act);
}

pe_status pe_infer_gru(pe_op_ctx *ctx) {
    pe_tensor *x;
    int64_t h, seqs;
    PE_CHECK(check_gru(ctx, &x, &h, &seqs));
    const int64_t t = x->dims[0];
    ctx->lod_set = true;
    PE_CHECK(set_out(ctx, "Hidden", x->dtype, t, h, x));
    PE_CHECK(set_out(ctx, "BatchGate", x->dtype, t, 3 * h, NULL));
    PE_CHECK(set_out(ctx, "BatchResetHiddenPrev", x->dtype, t, h, NULL));
    return set_out(ctx, "BatchHidden", x->dtype, t, h, NULL);
}

pe_status pe_infer_gru_grad(pe_op_ctx *ctx) {
    pe_tensor *x;
    int64_t h, seqs;
    PE_CHECK(check_gru(ctx, &x, &h, &seqs));
    PE_CHECK(check_fwd_out(ctx, "Hidden", x, h));
    PE_CHECK(check_fwd_out(ctx, "BatchGate", x, 3 * h));
    PE_CHECK(check_fwd_out(ctx, "BatchResetHiddenPrev", x, h));
    PE_CHECK(check_fwd_out(ctx, "Hidden@GRAD", x, h));
    ctx->lod_set = true;
    PE_CHECK(set_grad_like(ctx, "Input@GRAD", "Input"));
    PE_CHECK(set_grad_like(ctx, "Weight@GRAD", "Weight"));
    PE_CHECK(set_grad_like(ctx, "Bias@GRAD", "Bias"));
    return set_grad_like(ctx, "H0@GRAD", "H0");
}

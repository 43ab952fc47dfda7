/* ops/cpu/rnn.c — CPU kernels of the recurrent LoD ops: lstm, gru and their
 * gradients (shape inference, slot layouts: ops/rnn.c; the plan: ops/rnn.h).
 *
 * Each sequence runs on its own, forked over threads by sequence when there
 * is enough work: a sequence writes only its own rows, so the result never
 * depends on the thread count. Per step and row the kernel does what the
 * CUDA kernels (ops/cuda/rnn.cu) do per thread, in the same order: double
 * arithmetic, sums in index order, values read back from the outputs where
 * a later phase needs them (Hidden, Cell, the gates, r * h_prev), so the
 * two agree. The weight and bias gradients sum over the rows in row order
 * after the steps.
 *
 * lstm, per row r of sequence s (previous row p; h_p, c_p from H0 / C0 at
 * the first step, zeros without them), gate columns {c~, i, f, o}:
 *   g = Input[r] + Bias[:4H] + h_p W
 *   c~ = cand(g_c); i = gate(g_i + c_p W_ic); f = gate(g_f + c_p W_fc)
 *   c = c~ i + c_p f;  o = gate(g_o + c W_oc);  h = o cell(c)
 * gru (columns {u, r, c}; Weight's first H*2H elements W_ur [H, 2H], then W_c [H, H]):
 *   [u, r] = gate(Input[r][:2H] + Bias[:2H] + h_p W_ur);  rh = r h_p
 *   c = act(Input[r][2H:] + Bias[2H:] + rh W_c)
 *   h = (1 - u) h_p + u c, or with origin_mode u h_p + (1 - u) c (Paddle's forms).
 * Activations: sigmoid 1 / (1 + exp(-x)), tanh, relu, identity; derivatives from
 * the activated value.
 */
#include "ops/cpu/par.h"
#include "ops/rnn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a float32 or float64 tensor's data, read and written as double */
typedef struct {
    void *p;
    bool f32;
} vw;

static inline vw view(const pe_tensor *t) {
    vw v = {t ? pe_tensor_data(t) : NULL, t && t->dtype == PE_DTYPE_FP32};
    return v;
}
static inline double ld(vw v, int64_t i) { return v.f32 ? (double)((const float *)v.p)[i] : ((const double *)v.p)[i]; }
static inline void st(vw v, int64_t i, double x) {
    if (v.f32) ((float *)v.p)[i] = (float)x;
    else ((double *)v.p)[i] = x;
}

static inline double act_f(int a, double x) {
    switch (a) {
    case PE_RNN_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case PE_RNN_ACT_TANH: return tanh(x);
    case PE_RNN_ACT_RELU: return x > 0 ? x : 0.0;
    default: return x;
    }
}
/* d act / d x at the activated value y */
static inline double act_d(int a, double y) {
    switch (a) {
    case PE_RNN_ACT_SIGMOID: return y * (1.0 - y);
    case PE_RNN_ACT_TANH: return 1.0 - y * y;
    case PE_RNN_ACT_RELU: return y > 0 ? 1.0 : 0.0;
    default: return 1.0;
    }
}

/* h_p[m] of a row: Hidden's previous row, H0's row of the sequence, or 0 */
static inline double hp_at(vw hid, vw h0, bool zero, int64_t p, int64_t s, int64_t H, int64_t m) {
    return zero ? 0.0 : p >= 0 ? ld(hid, p * H + m) : ld(h0, s * H + m);
}

/* X's sequence rows: step t of sequence [b, e) */
static inline int64_t row_at(bool rev, int64_t b, int64_t e, int64_t t) { return rev ? e - 1 - t : b + t; }

static pe_status nomem(const pe_op_ctx *ctx, int64_t n) {
    return pe_ctx_error(ctx, PE_ERR_NOMEM, "out of memory for %lld doubles of scratch", (long long)n);
}

/* ---- lstm ------------------------------------------------------------------- */

typedef struct {
    int64_t h, seqs;
    bool rev, peep;
    int ga, ca, na; /* gate, cell, candidate activations */
    const int64_t *off;
} lstm_cfg;

static pe_status lstm_cfg_get(const pe_op_ctx *ctx, const pe_tensor *x, lstm_cfg *c) {
    c->h = x->dims[1] / 4;
    c->rev = pe_ctx_bool(ctx, "is_reverse");
    c->peep = pe_ctx_bool(ctx, "use_peepholes");
    PE_CHECK(pe_rnn_act(ctx, "gate_activation", &c->ga));
    PE_CHECK(pe_rnn_act(ctx, "cell_activation", &c->ca));
    PE_CHECK(pe_rnn_act(ctx, "candidate_activation", &c->na));
    int levels = pe_tensor_lod_levels(x);
    if (!levels)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "input Input '%s' has no LoD", pe_ctx_in_name(ctx, "Input", 0));
    int64_t n;
    c->off = pe_tensor_lod(x, levels - 1, &n);
    c->seqs = n - 1;
    return PE_OK;
}

/* a [n] double copy of t's first n elements (NULL: out of memory) */
static double *to_double(vw v, int64_t n, int64_t extra) {
    double *d = malloc(sizeof(double) * (size_t)(n + extra > 0 ? n + extra : 1));
    if (d)
        for (int64_t i = 0; i < n; i++) d[i] = ld(v, i);
    return d;
}

/* by X row: its sequence (rs) and the previous step's row (rp, -1: the first) */
static int64_t *row_links(const int64_t *off, int64_t seqs, int64_t rows, bool rev) {
    int64_t *rs = malloc(sizeof(int64_t) * 2 * (size_t)(rows ? rows : 1));
    if (!rs) return NULL;
    int64_t *rp = rs + rows;
    for (int64_t s = 0; s < seqs; s++)
        for (int64_t t = 0; t < off[s + 1] - off[s]; t++) {
            const int64_t r = row_at(rev, off[s], off[s + 1], t);
            rs[r] = s;
            rp[r] = t ? (rev ? r + 1 : r - 1) : -1;
        }
    return rs;
}

/* dw[m * ldw + j] = sum over rows r, in order, of h(r)[m] * gr[r * G + j0 + j] (j < cols), where h(r)
 * is rh's row r when rh is given, else h_p of row r (Hidden's previous row, H0's row, or none: skipped) */
static void wgrad(const int64_t *rs, int64_t T, int64_t H, int64_t G, int64_t j0, int64_t cols, vw hid, vw h0,
                  vw rh, const double *gr, double *acc_all, vw dw, int64_t dw0, int64_t ldw, int nt) {
    const int64_t *rp = rs + T;
    PE_PAR_FOR(T * G * H >= PE_PAR_MIN && nt > 1, m, H, {
        double *acc = acc_all + m * cols;
        for (int64_t j = 0; j < cols; j++) acc[j] = 0;
        for (int64_t r = 0; r < T; r++) {
            double hv;
            if (rh.p) hv = ld(rh, r * H + m);
            else if (rp[r] >= 0) hv = ld(hid, rp[r] * H + m);
            else if (h0.p) hv = ld(h0, rs[r] * H + m);
            else continue;
            const double *g = gr + r * G + j0;
            for (int64_t j = 0; j < cols; j++) acc[j] += hv * g[j];
        }
        for (int64_t j = 0; j < cols; j++) st(dw, dw0 + m * ldw + j, acc[j]);
    });
}

/* db[j] = sum over rows, in order, of gr[r * G + j] */
static void bgrad(int64_t T, int64_t G, const double *gr, double *acc, vw db) {
    for (int64_t j = 0; j < G; j++) acc[j] = 0;
    for (int64_t r = 0; r < T; r++)
        for (int64_t j = 0; j < G; j++) acc[j] += gr[r * G + j];
    for (int64_t j = 0; j < G; j++) st(db, j, acc[j]);
}

pe_status pe_cpu_lstm(const pe_op_ctx *ctx) {
    const pe_tensor *xt = pe_ctx_in(ctx, "Input");
    lstm_cfg c;
    PE_CHECK(lstm_cfg_get(ctx, xt, &c));
    const vw x = view(xt), w = view(pe_ctx_in(ctx, "Weight")), b = view(pe_ctx_in(ctx, "Bias")),
             h0 = view(pe_ctx_in(ctx, "H0")), c0 = view(pe_ctx_in(ctx, "C0")), hid = view(pe_ctx_out(ctx, "Hidden")),
             cell = view(pe_ctx_out(ctx, "Cell")), bg = view(pe_ctx_out(ctx, "BatchGate")),
             bc = view(pe_ctx_out(ctx, "BatchCellPreAct"));
    const int64_t H = c.h, G = 4 * H;
    double *wd = to_double(w, H * G, c.seqs * G); /* W, then each sequence's gate row */
    if (!wd) return nomem(ctx, H * G + c.seqs * G);
    double *scr = wd + H * G;
    const int nt = pe_kernel_threads(ctx);
    PE_PAR_FOR(xt->dims[0] * G * H >= PE_PAR_MIN && nt > 1, s, c.seqs, {
        const int64_t sb = c.off[s], se = c.off[s + 1];
        double *g = scr + s * G;
        for (int64_t t = 0; t < se - sb; t++) {
            const int64_t r = row_at(c.rev, sb, se, t), p = t ? (c.rev ? r + 1 : r - 1) : -1;
            const bool zero_h = p < 0 && !h0.p, zero_c = p < 0 && !c0.p;
            /* g = Input[r] + Bias + h_p W, each column summed over m in order */
            for (int64_t j = 0; j < G; j++) g[j] = ld(x, r * G + j) + ld(b, j);
            if (!zero_h)
                for (int64_t m = 0; m < H; m++) {
                    const double hm = hp_at(hid, h0, false, p, s, H, m);
                    const double *wr = wd + m * G;
                    for (int64_t j = 0; j < G; j++) g[j] += hm * wr[j];
                }
            for (int64_t k = 0; k < H; k++) {
                const double cp = zero_c ? 0.0 : p >= 0 ? ld(cell, p * H + k) : ld(c0, s * H + k);
                const double cand = act_f(c.na, g[k]);
                const double ig = act_f(c.ga, c.peep ? g[H + k] + cp * ld(b, 4 * H + k) : g[H + k]);
                const double fg = act_f(c.ga, c.peep ? g[2 * H + k] + cp * ld(b, 5 * H + k) : g[2 * H + k]);
                const double cv = cand * ig + cp * fg;
                const double og = act_f(c.ga, c.peep ? g[3 * H + k] + cv * ld(b, 6 * H + k) : g[3 * H + k]);
                const double tc = act_f(c.ca, cv);
                st(bg, r * G + k, cand);
                st(bg, r * G + H + k, ig);
                st(bg, r * G + 2 * H + k, fg);
                st(bg, r * G + 3 * H + k, og);
                st(cell, r * H + k, cv);
                st(bc, r * H + k, tc);
                st(hid, r * H + k, og * tc);
            }
        }
    });
    free(wd);
    return PE_OK;
}

pe_status pe_cpu_lstm_grad(const pe_op_ctx *ctx) {
    const pe_tensor *xt = pe_ctx_in(ctx, "Input");
    lstm_cfg c;
    PE_CHECK(lstm_cfg_get(ctx, xt, &c));
    const vw w = view(pe_ctx_in(ctx, "Weight")), b = view(pe_ctx_in(ctx, "Bias")), h0 = view(pe_ctx_in(ctx, "H0")),
             c0 = view(pe_ctx_in(ctx, "C0")), hid = view(pe_ctx_in(ctx, "Hidden")), cell = view(pe_ctx_in(ctx, "Cell")),
             bg = view(pe_ctx_in(ctx, "BatchGate")), bc = view(pe_ctx_in(ctx, "BatchCellPreAct")),
             dhid = view(pe_ctx_in(ctx, "Hidden@GRAD")), dcell = view(pe_ctx_in(ctx, "Cell@GRAD")),
             dx = view(pe_ctx_out(ctx, "Input@GRAD")), dw = view(pe_ctx_out(ctx, "Weight@GRAD")),
             db = view(pe_ctx_out(ctx, "Bias@GRAD")), dh0 = view(pe_ctx_out(ctx, "H0@GRAD")),
             dc0 = view(pe_ctx_out(ctx, "C0@GRAD")), none = {NULL, false};
    const int64_t H = c.h, G = 4 * H, T = xt->dims[0];
    /* W; the pre-activation gradients [T, G]; the gradients reaching h_p, c_p [seqs, H] each;
     * the weight gradient's sums [H, G] */
    const int64_t extra = T * G + 2 * c.seqs * H + H * G + G;
    double *wd = to_double(w, H * G, extra);
    if (!wd) return nomem(ctx, H * G + extra);
    double *gr = wd + H * G, *dhr = gr + T * G, *dcr = dhr + c.seqs * H, *acc = dcr + c.seqs * H;
    memset(gr, 0, sizeof(double) * (size_t)(T * G + 2 * c.seqs * H));
    const int nt = pe_kernel_threads(ctx);
    PE_PAR_FOR(T * G * H >= PE_PAR_MIN && nt > 1, s, c.seqs, {
        const int64_t sb = c.off[s], se = c.off[s + 1];
        double *dh_s = dhr + s * H, *dc_s = dcr + s * H;
        for (int64_t t = se - sb - 1; t >= 0; t--) {
            const int64_t r = row_at(c.rev, sb, se, t), p = t ? (c.rev ? r + 1 : r - 1) : -1;
            const bool zero_c = p < 0 && !c0.p;
            double *gq = gr + r * G;
            for (int64_t k = 0; k < H; k++) {
                const double dh = ld(dhid, r * H + k) + dh_s[k];
                double dc = (dcell.p ? ld(dcell, r * H + k) : 0.0) + dc_s[k];
                const double cand = ld(bg, r * G + k), ig = ld(bg, r * G + H + k), fg = ld(bg, r * G + 2 * H + k),
                             og = ld(bg, r * G + 3 * H + k), tc = ld(bc, r * H + k);
                const double cp = zero_c ? 0.0 : p >= 0 ? ld(cell, p * H + k) : ld(c0, s * H + k);
                const double d_o = dh * tc * act_d(c.ga, og);
                dc += dh * og * act_d(c.ca, tc);
                if (c.peep) dc += d_o * ld(b, 6 * H + k);
                const double d_c = dc * ig * act_d(c.na, cand), d_i = dc * cand * act_d(c.ga, ig),
                             d_f = dc * cp * act_d(c.ga, fg);
                double dcp = dc * fg;
                if (c.peep) dcp += d_i * ld(b, 4 * H + k) + d_f * ld(b, 5 * H + k);
                dc_s[k] = dcp;
                gq[k] = d_c;
                gq[H + k] = d_i;
                gq[2 * H + k] = d_f;
                gq[3 * H + k] = d_o;
            }
            for (int64_t k = 0; k < H; k++) {
                const double *wr = wd + k * G;
                double a = 0;
                for (int64_t j = 0; j < G; j++) a += gq[j] * wr[j];
                dh_s[k] = a;
            }
        }
    });
    if (dx.p)
        for (int64_t i = 0; i < T * G; i++) st(dx, i, gr[i]);
    if (dh0.p)
        for (int64_t i = 0; i < c.seqs * H; i++) st(dh0, i, dhr[i]);
    if (dc0.p)
        for (int64_t i = 0; i < c.seqs * H; i++) st(dc0, i, dcr[i]);
    int64_t *rs = NULL;
    if (dw.p || db.p) {
        rs = row_links(c.off, c.seqs, T, c.rev);
        if (!rs) {
            free(wd);
            return nomem(ctx, 2 * T);
        }
    }
    if (dw.p) wgrad(rs, T, H, G, 0, G, hid, h0, none, gr, acc, dw, 0, G, nt);
    if (db.p) {
        bgrad(T, G, gr, acc, db);
        if (c.peep) {
            const int64_t *rp = rs + T;
            for (int64_t k = 0; k < H; k++) {
                double ai = 0, af = 0, ao = 0;
                for (int64_t r = 0; r < T; r++) {
                    const double cp = rp[r] >= 0 ? ld(cell, rp[r] * H + k) : c0.p ? ld(c0, rs[r] * H + k) : 0.0;
                    ai += gr[r * G + H + k] * cp;
                    af += gr[r * G + 2 * H + k] * cp;
                    ao += gr[r * G + 3 * H + k] * ld(cell, r * H + k);
                }
                st(db, 4 * H + k, ai);
                st(db, 5 * H + k, af);
                st(db, 6 * H + k, ao);
            }
        }
    }
    free(rs);
    free(wd);
    return PE_OK;
}

/* ---- gru -------------------------------------------------------------------- */

typedef struct {
    int64_t h, seqs;
    bool rev, origin;
    int ga, na; /* gate, candidate activations */
    const int64_t *off;
} gru_cfg;

static pe_status gru_cfg_get(const pe_op_ctx *ctx, const pe_tensor *x, gru_cfg *c) {
    c->h = x->dims[1] / 3;
    c->rev = pe_ctx_bool(ctx, "is_reverse");
    c->origin = pe_ctx_bool(ctx, "origin_mode");
    PE_CHECK(pe_rnn_act(ctx, "gate_activation", &c->ga));
    PE_CHECK(pe_rnn_act(ctx, "activation", &c->na));
    int levels = pe_tensor_lod_levels(x);
    if (!levels)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "input Input '%s' has no LoD", pe_ctx_in_name(ctx, "Input", 0));
    int64_t n;
    c->off = pe_tensor_lod(x, levels - 1, &n);
    c->seqs = n - 1;
    return PE_OK;
}

pe_status pe_cpu_gru(const pe_op_ctx *ctx) {
    const pe_tensor *xt = pe_ctx_in(ctx, "Input");
    gru_cfg c;
    PE_CHECK(gru_cfg_get(ctx, xt, &c));
    const vw x = view(xt), w = view(pe_ctx_in(ctx, "Weight")), b = view(pe_ctx_in(ctx, "Bias")),
             h0 = view(pe_ctx_in(ctx, "H0")), hid = view(pe_ctx_out(ctx, "Hidden")),
             bg = view(pe_ctx_out(ctx, "BatchGate")), brh = view(pe_ctx_out(ctx, "BatchResetHiddenPrev")),
             bh = view(pe_ctx_out(ctx, "BatchHidden"));
    const int64_t H = c.h, G = 3 * H, H2 = 2 * H, wc = H * H2; /* W_c's first element */
    double *wd = to_double(w, H * G, c.seqs * G); /* W, then each sequence's gate row */
    if (!wd) return nomem(ctx, H * G + c.seqs * G);
    double *scr = wd + H * G;
    const int nt = pe_kernel_threads(ctx);
    PE_PAR_FOR(xt->dims[0] * G * H >= PE_PAR_MIN && nt > 1, s, c.seqs, {
        const int64_t sb = c.off[s], se = c.off[s + 1];
        double *g = scr + s * G;
        for (int64_t t = 0; t < se - sb; t++) {
            const int64_t r = row_at(c.rev, sb, se, t), p = t ? (c.rev ? r + 1 : r - 1) : -1;
            const bool zero_h = p < 0 && !h0.p;
            for (int64_t j = 0; j < H2; j++) g[j] = ld(x, r * G + j) + (b.p ? ld(b, j) : 0.0);
            if (!zero_h)
                for (int64_t m = 0; m < H; m++) {
                    const double hm = hp_at(hid, h0, false, p, s, H, m);
                    const double *wr = wd + m * H2;
                    for (int64_t j = 0; j < H2; j++) g[j] += hm * wr[j];
                }
            for (int64_t k = 0; k < H; k++) {
                const double u = act_f(c.ga, g[k]), rg = act_f(c.ga, g[H + k]);
                st(bg, r * G + k, u);
                st(bg, r * G + H + k, rg);
                st(brh, r * H + k, rg * hp_at(hid, h0, zero_h, p, s, H, k));
            }
            for (int64_t j = 0; j < H; j++) g[H2 + j] = ld(x, r * G + H2 + j) + (b.p ? ld(b, H2 + j) : 0.0);
            if (!zero_h)
                for (int64_t m = 0; m < H; m++) {
                    const double rm = ld(brh, r * H + m);
                    const double *wr = wd + wc + m * H;
                    for (int64_t j = 0; j < H; j++) g[H2 + j] += rm * wr[j];
                }
            for (int64_t j = 0; j < H; j++) {
                const double cv = act_f(c.na, g[H2 + j]), u = ld(bg, r * G + j),
                             hp = hp_at(hid, h0, zero_h, p, s, H, j);
                const double hv = c.origin ? cv - u * cv + u * hp : hp - u * hp + u * cv;
                st(bg, r * G + H2 + j, cv);
                st(hid, r * H + j, hv);
                st(bh, r * H + j, hv);
            }
        }
    });
    free(wd);
    return PE_OK;
}

pe_status pe_cpu_gru_grad(const pe_op_ctx *ctx) {
    const pe_tensor *xt = pe_ctx_in(ctx, "Input");
    gru_cfg c;
    PE_CHECK(gru_cfg_get(ctx, xt, &c));
    const vw w = view(pe_ctx_in(ctx, "Weight")), h0 = view(pe_ctx_in(ctx, "H0")), hid = view(pe_ctx_in(ctx, "Hidden")),
             bg = view(pe_ctx_in(ctx, "BatchGate")), brh = view(pe_ctx_in(ctx, "BatchResetHiddenPrev")),
             dhid = view(pe_ctx_in(ctx, "Hidden@GRAD")), dx = view(pe_ctx_out(ctx, "Input@GRAD")),
             dw = view(pe_ctx_out(ctx, "Weight@GRAD")), db = view(pe_ctx_out(ctx, "Bias@GRAD")),
             dh0 = view(pe_ctx_out(ctx, "H0@GRAD")), none = {NULL, false};
    const int64_t H = c.h, G = 3 * H, H2 = 2 * H, wc = H * H2, T = xt->dims[0];
    const int64_t extra = T * G + 2 * c.seqs * H + H * G + G;
    double *wd = to_double(w, H * G, extra);
    if (!wd) return nomem(ctx, H * G + extra);
    double *gr = wd + H * G, *dhr = gr + T * G, *dhp = dhr + c.seqs * H, *acc = dhp + c.seqs * H;
    memset(gr, 0, sizeof(double) * (size_t)(T * G + 2 * c.seqs * H));
    const int nt = pe_kernel_threads(ctx);
    PE_PAR_FOR(T * G * H >= PE_PAR_MIN && nt > 1, s, c.seqs, {
        const int64_t sb = c.off[s], se = c.off[s + 1];
        double *dh_s = dhr + s * H, *dp_s = dhp + s * H;
        for (int64_t t = se - sb - 1; t >= 0; t--) {
            const int64_t r = row_at(c.rev, sb, se, t), p = t ? (c.rev ? r + 1 : r - 1) : -1;
            const bool zero_h = p < 0 && !h0.p;
            double *gq = gr + r * G;
            for (int64_t k = 0; k < H; k++) {
                const double dh = ld(dhid, r * H + k) + dh_s[k];
                const double u = ld(bg, r * G + k), cv = ld(bg, r * G + H2 + k),
                             hp = hp_at(hid, h0, zero_h, p, s, H, k);
                const double du = c.origin ? dh * (hp - cv) : dh * (cv - hp);
                const double dc = c.origin ? dh * (1.0 - u) : dh * u;
                dp_s[k] = c.origin ? dh * u : dh * (1.0 - u);
                gq[k] = du * act_d(c.ga, u);
                gq[H2 + k] = dc * act_d(c.na, cv);
            }
            for (int64_t k = 0; k < H; k++) {
                const double *wr = wd + wc + k * H;
                double drh = 0;
                for (int64_t j = 0; j < H; j++) drh += gq[H2 + j] * wr[j];
                const double rg = ld(bg, r * G + H + k);
                gq[H + k] = drh * hp_at(hid, h0, zero_h, p, s, H, k) * act_d(c.ga, rg);
                dp_s[k] += drh * rg;
            }
            for (int64_t k = 0; k < H; k++) {
                const double *wr = wd + k * H2;
                double a = dp_s[k];
                for (int64_t j = 0; j < H2; j++) a += gq[j] * wr[j];
                dh_s[k] = a;
            }
        }
    });
    if (dx.p)
        for (int64_t i = 0; i < T * G; i++) st(dx, i, gr[i]);
    if (dh0.p)
        for (int64_t i = 0; i < c.seqs * H; i++) st(dh0, i, dhr[i]);
    if (dw.p) {
        int64_t *rs = row_links(c.off, c.seqs, T, c.rev);
        if (!rs) {
            free(wd);
            return nomem(ctx, 2 * T);
        }
        wgrad(rs, T, H, G, 0, H2, hid, h0, none, gr, acc, dw, 0, H2, nt);
        wgrad(rs, T, H, G, H2, H, hid, h0, brh, gr, acc, dw, wc, H, nt);
        free(rs);
    }
    if (db.p) bgrad(T, G, gr, acc, db);
    free(wd);
    return PE_OK;
}

/* ops/cuda/rnn.cu — CUDA kernels of the recurrent LoD ops: lstm, gru and
 * their gradients, as the CPU kernels (ops/cpu/rnn.c) compute them.
 *
 * How: the host builds the step plan (ops/rnn.h: per step, the row, the
 * sequence and the previous row of every sequence still running) and one
 * device copy of it; then it loops over the steps and launches, per step,
 * kernels over that step's rows of all sequences, one thread per (row,
 * hidden unit) — lstm: one kernel forward, two backward; gru: two forward,
 * three backward. A thread does what the CPU kernel does for its element,
 * in the same order, in double, with products and sums rounded one by one
 * (__dmul_rn / __dadd_rn: no FMA contraction), reading back the stored
 * Hidden, Cell and gates as the CPU does. The gradients keep the
 * pre-activation gradients in double scratch [T, gates * H] and the
 * recurrent ones in [sequences, H]; the weight and bias gradients are one
 * thread per element summing over the rows in row order. No atomics: a
 * run repeats bit for bit.
 */
#include "ops/cuda/cuda_ops.h"
#include "ops/rnn.h"

namespace {

__device__ inline double M(double a, double b) { return __dmul_rn(a, b); }
__device__ inline double A(double a, double b) { return __dadd_rn(a, b); }
__device__ inline double S(double a, double b) { return __dsub_rn(a, b); }

__device__ inline double act_f(int a, double x) {
    switch (a) {
    case PE_RNN_ACT_SIGMOID: return 1.0 / A(1.0, exp(-x));
    case PE_RNN_ACT_TANH: return tanh(x);
    case PE_RNN_ACT_RELU: return x > 0 ? x : 0.0;
    default: return x;
    }
}
__device__ inline double act_d(int a, double y) {
    switch (a) {
    case PE_RNN_ACT_SIGMOID: return M(y, S(1.0, y));
    case PE_RNN_ACT_TANH: return S(1.0, M(y, y));
    case PE_RNN_ACT_RELU: return y > 0 ? 1.0 : 0.0;
    default: return 1.0;
    }
}

/* the step's entries: X row, sequence, previous row (-1: first step) */
struct step_rows {
    const int64_t *row, *seq, *prev;
};

struct lstm_args {
    int64_t h;
    bool peep;
    int ga, ca, na;
};

template <typename T>
__global__ void k_lstm_step(step_rows sr, int64_t n, lstm_args a, const T *x, const T *w, const T *b, const T *h0,
                            const T *c0, T *hid, T *cell, T *bg, T *bc) {
    const int64_t H = a.h, G = 4 * H;
    PE_CUDA_LOOP(idx, n * H) {
        const int64_t i = idx / H, k = idx % H, r = sr.row[i], s = sr.seq[i], p = sr.prev[i];
        const bool zero_h = p < 0 && !h0, zero_c = p < 0 && !c0;
        double g[4];
        for (int q = 0; q < 4; q++) {
            const int64_t j = q * H + k;
            double acc = A((double)x[r * G + j], (double)b[j]);
            if (!zero_h)
                for (int64_t m = 0; m < H; m++)
                    acc = A(acc, M(p >= 0 ? (double)hid[p * H + m] : (double)h0[s * H + m], (double)w[m * G + j]));
            g[q] = acc;
        }
        const double cp = zero_c ? 0.0 : p >= 0 ? (double)cell[p * H + k] : (double)c0[s * H + k];
        const double cand = act_f(a.na, g[0]);
        const double ig = act_f(a.ga, a.peep ? A(g[1], M(cp, (double)b[4 * H + k])) : g[1]);
        const double fg = act_f(a.ga, a.peep ? A(g[2], M(cp, (double)b[5 * H + k])) : g[2]);
        const double cv = A(M(cand, ig), M(cp, fg));
        const double og = act_f(a.ga, a.peep ? A(g[3], M(cv, (double)b[6 * H + k])) : g[3]);
        const double tc = act_f(a.ca, cv);
        bg[r * G + k] = (T)cand;
        bg[r * G + H + k] = (T)ig;
        bg[r * G + 2 * H + k] = (T)fg;
        bg[r * G + 3 * H + k] = (T)og;
        cell[r * H + k] = (T)cv;
        bc[r * H + k] = (T)tc;
        hid[r * H + k] = (T)M(og, tc);
    }
}

/* the pre-activation gradients of the step's rows (gr) and the cell gradient reaching c_p (dcr) */
template <typename T>
__global__ void k_lstm_grad_a(step_rows sr, int64_t n, lstm_args a, const T *b, const T *c0, const T *cell,
                              const T *bg, const T *bc, const T *dhid, const T *dcell, double *gr, double *dhr,
                              double *dcr) {
    const int64_t H = a.h, G = 4 * H;
    PE_CUDA_LOOP(idx, n * H) {
        const int64_t i = idx / H, k = idx % H, r = sr.row[i], s = sr.seq[i], p = sr.prev[i];
        const bool zero_c = p < 0 && !c0;
        const double dh = A((double)dhid[r * H + k], dhr[s * H + k]);
        double dc = A(dcell ? (double)dcell[r * H + k] : 0.0, dcr[s * H + k]);
        const double cand = bg[r * G + k], ig = bg[r * G + H + k], fg = bg[r * G + 2 * H + k],
                     og = bg[r * G + 3 * H + k], tc = bc[r * H + k];
        const double cp = zero_c ? 0.0 : p >= 0 ? (double)cell[p * H + k] : (double)c0[s * H + k];
        const double d_o = M(M(dh, tc), act_d(a.ga, og));
        dc = A(dc, M(M(dh, og), act_d(a.ca, tc)));
        if (a.peep) dc = A(dc, M(d_o, (double)b[6 * H + k]));
        const double d_c = M(M(dc, ig), act_d(a.na, cand)), d_i = M(M(dc, cand), act_d(a.ga, ig)),
                     d_f = M(M(dc, cp), act_d(a.ga, fg));
        double dcp = M(dc, fg);
        if (a.peep) dcp = A(dcp, A(M(d_i, (double)b[4 * H + k]), M(d_f, (double)b[5 * H + k])));
        dcr[s * H + k] = dcp;
        gr[r * G + k] = d_c;
        gr[r * G + H + k] = d_i;
        gr[r * G + 2 * H + k] = d_f;
        gr[r * G + 3 * H + k] = d_o;
    }
}

/* dhr[s, k] = sum_j gr[r, j] W[k, j] */
template <typename T>
__global__ void k_lstm_grad_b(step_rows sr, int64_t n, int64_t H, const T *w, const double *gr, double *dhr) {
    const int64_t G = 4 * H;
    PE_CUDA_LOOP(idx, n * H) {
        const int64_t i = idx / H, k = idx % H, r = sr.row[i], s = sr.seq[i];
        double acc = 0;
        for (int64_t j = 0; j < G; j++) acc = A(acc, M(gr[r * G + j], (double)w[k * G + j]));
        dhr[s * H + k] = acc;
    }
}

template <typename T> __global__ void k_store(const double *src, int64_t n, T *dst) {
    PE_CUDA_LOOP(i, n) dst[i] = (T)src[i];
}

/* by X row: its sequence and previous row */
struct row_links {
    const int64_t *seq, *prev;
};

/* dW[m, j] = sum over rows r of h_p(r)[m] gr[r, j0 + j], j < cols, into dw[m * ld + j]
 * (h_p from Hidden, H0 or zero; src_rh: from rh [T, H] instead) */
template <typename T>
__global__ void k_wgrad(row_links rl, int64_t rows, int64_t H, int64_t G, int64_t j0, int64_t cols, int64_t ld,
                        const T *hid, const T *h0, const T *rh, const double *gr, T *dw) {
    PE_CUDA_LOOP(idx, H * cols) {
        const int64_t m = idx / cols, j = idx % cols;
        double acc = 0;
        for (int64_t r = 0; r < rows; r++) {
            double hv;
            if (rh) hv = (double)rh[r * H + m];
            else if (rl.prev[r] >= 0) hv = (double)hid[rl.prev[r] * H + m];
            else if (h0) hv = (double)h0[rl.seq[r] * H + m];
            else continue;
            acc = A(acc, M(hv, gr[r * G + j0 + j]));
        }
        dw[m * ld + j] = (T)acc;
    }
}

/* dBias[j] = sum_r gr[r, j] (j < G); lstm peepholes: the 3H peephole gradients after */
template <typename T>
__global__ void k_bgrad(row_links rl, int64_t rows, int64_t H, int64_t G, bool peep, const T *cell, const T *c0,
                        const double *gr, T *db) {
    PE_CUDA_LOOP(j, G + (peep ? 3 * H : 0)) {
        double acc = 0;
        if (j < G) {
            for (int64_t r = 0; r < rows; r++) acc = A(acc, gr[r * G + j]);
        } else {
            const int64_t q = (j - G) / H, k = (j - G) % H; /* 0: W_ic, 1: W_fc, 2: W_oc */
            for (int64_t r = 0; r < rows; r++) {
                double cv;
                if (q == 2) cv = (double)cell[r * H + k];
                else if (rl.prev[r] >= 0) cv = (double)cell[rl.prev[r] * H + k];
                else cv = c0 ? (double)c0[rl.seq[r] * H + k] : 0.0;
                acc = A(acc, M(gr[r * G + (q + 1) * H + k], cv));
            }
        }
        db[j] = (T)acc;
    }
}

/* ---- gru ---- */

struct gru_args {
    int64_t h;
    bool origin;
    int ga, na;
};

template <typename T>
__global__ void k_gru_step_a(step_rows sr, int64_t n, gru_args a, const T *x, const T *w, const T *b, const T *h0,
                             const T *hid, T *bg, T *brh) {
    const int64_t H = a.h, G = 3 * H, H2 = 2 * H;
    PE_CUDA_LOOP(idx, n * H) {
        const int64_t i = idx / H, k = idx % H, r = sr.row[i], s = sr.seq[i], p = sr.prev[i];
        const bool zero_h = p < 0 && !h0;
        double gu = A((double)x[r * G + k], b ? (double)b[k] : 0.0);
        double gg = A((double)x[r * G + H + k], b ? (double)b[H + k] : 0.0);
        if (!zero_h)
            for (int64_t m = 0; m < H; m++) {
                const double hm = p >= 0 ? (double)hid[p * H + m] : (double)h0[s * H + m];
                gu = A(gu, M(hm, (double)w[m * H2 + k]));
                gg = A(gg, M(hm, (double)w[m * H2 + H + k]));
            }
        const double u = act_f(a.ga, gu), rg = act_f(a.ga, gg);
        const double hp = zero_h ? 0.0 : p >= 0 ? (double)hid[p * H + k] : (double)h0[s * H + k];
        bg[r * G + k] = (T)u;
        bg[r * G + H + k] = (T)rg;
        brh[r * H + k] = (T)M(rg, hp);
    }
}

template <typename T>
__global__ void k_gru_step_b(step_rows sr, int64_t n, gru_args a, const T *x, const T *w, const T *b, const T *h0,
                             T *hid, T *bg, const T *brh, T *bh) {
    const int64_t H = a.h, G = 3 * H, H2 = 2 * H, wc = H * H2;
    PE_CUDA_LOOP(idx, n * H) {
        const int64_t i = idx / H, j = idx % H, r = sr.row[i], s = sr.seq[i], p = sr.prev[i];
        const bool zero_h = p < 0 && !h0;
        double gc = A((double)x[r * G + H2 + j], b ? (double)b[H2 + j] : 0.0);
        if (!zero_h)
            for (int64_t m = 0; m < H; m++) gc = A(gc, M((double)brh[r * H + m], (double)w[wc + m * H + j]));
        const double cv = act_f(a.na, gc), u = bg[r * G + j];
        const double hp = zero_h ? 0.0 : p >= 0 ? (double)hid[p * H + j] : (double)h0[s * H + j];
        const double hv = a.origin ? A(S(cv, M(u, cv)), M(u, hp)) : A(S(hp, M(u, hp)), M(u, cv));
        bg[r * G + H2 + j] = (T)cv;
        hid[r * H + j] = (T)hv;
        bh[r * H + j] = (T)hv;
    }
}

#define GRU_HP_DEV (zero_h ? 0.0 : p >= 0 ? (double)hid[p * H + k] : (double)h0[s * H + k])

/* du, dc pre-activation gradients; dhp: the direct gradient reaching h_p */
template <typename T>
__global__ void k_gru_grad_a(step_rows sr, int64_t n, gru_args a, const T *h0, const T *hid, const T *bg,
                             const T *dhid, double *gr, const double *dhr, double *dhp) {
    const int64_t H = a.h, G = 3 * H, H2 = 2 * H;
    PE_CUDA_LOOP(idx, n * H) {
        const int64_t i = idx / H, k = idx % H, r = sr.row[i], s = sr.seq[i], p = sr.prev[i];
        const bool zero_h = p < 0 && !h0;
        const double dh = A((double)dhid[r * H + k], dhr[s * H + k]);
        const double u = bg[r * G + k], cv = bg[r * G + H2 + k], hp = GRU_HP_DEV;
        const double du = a.origin ? M(dh, S(hp, cv)) : M(dh, S(cv, hp));
        const double dc = a.origin ? M(dh, S(1.0, u)) : M(dh, u);
        dhp[s * H + k] = a.origin ? M(dh, u) : M(dh, S(1.0, u));
        gr[r * G + k] = M(du, act_d(a.ga, u));
        gr[r * G + H2 + k] = M(dc, act_d(a.na, cv));
    }
}

/* d(r h_p) through W_c: the reset gate's gradient and r's part of h_p's */
template <typename T>
__global__ void k_gru_grad_b(step_rows sr, int64_t n, gru_args a, const T *w, const T *h0, const T *hid, const T *bg,
                             double *gr, double *dhp) {
    const int64_t H = a.h, G = 3 * H, H2 = 2 * H, wc = H * H2;
    PE_CUDA_LOOP(idx, n * H) {
        const int64_t i = idx / H, k = idx % H, r = sr.row[i], s = sr.seq[i], p = sr.prev[i];
        const bool zero_h = p < 0 && !h0;
        double drh = 0;
        for (int64_t j = 0; j < H; j++) drh = A(drh, M(gr[r * G + H2 + j], (double)w[wc + k * H + j]));
        const double rg = bg[r * G + H + k];
        gr[r * G + H + k] = M(M(drh, GRU_HP_DEV), act_d(a.ga, rg));
        dhp[s * H + k] = A(dhp[s * H + k], M(drh, rg));
    }
}

/* dhr[s, k] = dhp[s, k] + sum_{j < 2H} gr[r, j] W_ur[k, j] */
template <typename T>
__global__ void k_gru_grad_c(step_rows sr, int64_t n, int64_t H, const T *w, const double *gr, const double *dhp,
                             double *dhr) {
    const int64_t G = 3 * H, H2 = 2 * H;
    PE_CUDA_LOOP(idx, n * H) {
        const int64_t i = idx / H, k = idx % H, r = sr.row[i], s = sr.seq[i];
        double acc = dhp[s * H + k];
        for (int64_t j = 0; j < H2; j++) acc = A(acc, M(gr[r * G + j], (double)w[k * H2 + j]));
        dhr[s * H + k] = acc;
    }
}

/* the step plan on the device (5 arrays of T entries: row, seq, prev by step; seq, prev by X row) */
struct dev_plan {
    pe_rnn_plan p;
    pe_cuda_temp mem;
    pe_status st = PE_OK;
    dev_plan(const pe_op_ctx *ctx, const pe_tensor *x, bool reverse, cudaStream_t s)
        : mem(ctx, sizeof(int64_t) * 5 * (size_t)(x->ndim ? (x->dims[0] ? x->dims[0] : 1) : 1)) {
        st = pe_rnn_plan_make(ctx, x, reverse, &p);
        if (st != PE_OK) return;
        const size_t bytes = sizeof(int64_t) * 5 * (size_t)(p.rows ? p.rows : 1);
        if (!mem.ok(bytes)) {
            st = PE_ERR_NOMEM;
            return;
        }
        if (p.rows)
            st = pe_cuda_check(ctx, cudaMemcpyAsync(mem.get(), p.row, sizeof(int64_t) * 5 * (size_t)p.rows,
                                                    cudaMemcpyHostToDevice, s),
                               "copying the step plan to the device");
    }
    ~dev_plan() { pe_rnn_plan_free(&p); }
    /* step t's entries on the device */
    step_rows step(int64_t t) const {
        const int64_t *d = mem.get<int64_t>(), o = p.step_off[t];
        return {d + o, d + p.rows + o, d + 2 * p.rows + o};
    }
    int64_t count(int64_t t) const { return p.step_off[t + 1] - p.step_off[t]; }
    row_links links() const {
        const int64_t *d = mem.get<int64_t>();
        return {d + 3 * p.rows, d + 4 * p.rows};
    }
};

template <typename T> const T *cin(const pe_op_ctx *ctx, const char *slot) {
    const pe_tensor *t = pe_ctx_in(ctx, slot);
    return t ? (const T *)pe_tensor_data(t) : nullptr;
}
template <typename T> T *cout(const pe_op_ctx *ctx, const char *slot) {
    pe_tensor *t = pe_ctx_out(ctx, slot);
    return t ? (T *)pe_tensor_data(t) : nullptr;
}

pe_status lstm_args_get(const pe_op_ctx *ctx, const pe_tensor *x, lstm_args *a) {
    a->h = x->dims[1] / 4;
    a->peep = pe_ctx_bool(ctx, "use_peepholes");
    PE_CHECK(pe_rnn_act(ctx, "gate_activation", &a->ga));
    PE_CHECK(pe_rnn_act(ctx, "cell_activation", &a->ca));
    return pe_rnn_act(ctx, "candidate_activation", &a->na);
}

pe_status gru_args_get(const pe_op_ctx *ctx, const pe_tensor *x, gru_args *a) {
    a->h = x->dims[1] / 3;
    a->origin = pe_ctx_bool(ctx, "origin_mode");
    PE_CHECK(pe_rnn_act(ctx, "gate_activation", &a->ga));
    return pe_rnn_act(ctx, "activation", &a->na);
}

template <typename T> pe_status lstm_fwd(const pe_op_ctx *ctx, const dev_plan &dp, const lstm_args &a, cudaStream_t s) {
    for (int64_t t = 0; t < dp.p.steps; t++) {
        const int64_t n = dp.count(t);
        k_lstm_step<T><<<pe_cuda_blocks(n * a.h), PE_CUDA_THREADS, 0, s>>>(
            dp.step(t), n, a, cin<T>(ctx, "Input"), cin<T>(ctx, "Weight"), cin<T>(ctx, "Bias"), cin<T>(ctx, "H0"),
            cin<T>(ctx, "C0"), cout<T>(ctx, "Hidden"), cout<T>(ctx, "Cell"), cout<T>(ctx, "BatchGate"),
            cout<T>(ctx, "BatchCellPreAct"));
        PE_CHECK(pe_cuda_check_launch(ctx));
    }
    return PE_OK;
}

template <typename T>
pe_status lstm_bwd(const pe_op_ctx *ctx, const dev_plan &dp, const lstm_args &a, double *gr, double *dhr,
                   double *dcr, cudaStream_t s) {
    const int64_t H = a.h, G = 4 * H, T_ = dp.p.rows, N = dp.p.seqs;
    const T *w = cin<T>(ctx, "Weight"), *b = cin<T>(ctx, "Bias"), *c0 = cin<T>(ctx, "C0"), *h0 = cin<T>(ctx, "H0"),
            *cell = cin<T>(ctx, "Cell"), *hid = cin<T>(ctx, "Hidden");
    for (int64_t t = dp.p.steps - 1; t >= 0; t--) {
        const int64_t n = dp.count(t);
        k_lstm_grad_a<T><<<pe_cuda_blocks(n * H), PE_CUDA_THREADS, 0, s>>>(
            dp.step(t), n, a, b, c0, cell, cin<T>(ctx, "BatchGate"), cin<T>(ctx, "BatchCellPreAct"),
            cin<T>(ctx, "Hidden@GRAD"), cin<T>(ctx, "Cell@GRAD"), gr, dhr, dcr);
        k_lstm_grad_b<T><<<pe_cuda_blocks(n * H), PE_CUDA_THREADS, 0, s>>>(dp.step(t), n, H, w, gr, dhr);
        PE_CHECK(pe_cuda_check_launch(ctx));
    }
    if (T *dx = cout<T>(ctx, "Input@GRAD")) k_store<T><<<pe_cuda_blocks(T_ * G), PE_CUDA_THREADS, 0, s>>>(gr, T_ * G, dx);
    if (T *d = cout<T>(ctx, "H0@GRAD")) k_store<T><<<pe_cuda_blocks(N * H), PE_CUDA_THREADS, 0, s>>>(dhr, N * H, d);
    if (T *d = cout<T>(ctx, "C0@GRAD")) k_store<T><<<pe_cuda_blocks(N * H), PE_CUDA_THREADS, 0, s>>>(dcr, N * H, d);
    if (T *dw = cout<T>(ctx, "Weight@GRAD"))
        k_wgrad<T><<<pe_cuda_blocks(H * G), PE_CUDA_THREADS, 0, s>>>(dp.links(), T_, H, G, 0, G, G, hid, h0, nullptr,
                                                                      gr, dw);
    if (T *db = cout<T>(ctx, "Bias@GRAD"))
        k_bgrad<T><<<pe_cuda_blocks(G + 3 * H), PE_CUDA_THREADS, 0, s>>>(dp.links(), T_, H, G, a.peep, cell, c0, gr,
                                                                          db);
    return pe_cuda_check_launch(ctx);
}

template <typename T> pe_status gru_fwd(const pe_op_ctx *ctx, const dev_plan &dp, const gru_args &a, cudaStream_t s) {
    const T *x = cin<T>(ctx, "Input"), *w = cin<T>(ctx, "Weight"), *b = cin<T>(ctx, "Bias"), *h0 = cin<T>(ctx, "H0");
    T *hid = cout<T>(ctx, "Hidden"), *bg = cout<T>(ctx, "BatchGate"), *brh = cout<T>(ctx, "BatchResetHiddenPrev"),
      *bh = cout<T>(ctx, "BatchHidden");
    for (int64_t t = 0; t < dp.p.steps; t++) {
        const int64_t n = dp.count(t);
        k_gru_step_a<T><<<pe_cuda_blocks(n * a.h), PE_CUDA_THREADS, 0, s>>>(dp.step(t), n, a, x, w, b, h0, hid, bg,
                                                                             brh);
        k_gru_step_b<T><<<pe_cuda_blocks(n * a.h), PE_CUDA_THREADS, 0, s>>>(dp.step(t), n, a, x, w, b, h0, hid, bg,
                                                                             brh, bh);
        PE_CHECK(pe_cuda_check_launch(ctx));
    }
    return PE_OK;
}

template <typename T>
pe_status gru_bwd(const pe_op_ctx *ctx, const dev_plan &dp, const gru_args &a, double *gr, double *dhr, double *dhp,
                  cudaStream_t s) {
    const int64_t H = a.h, G = 3 * H, T_ = dp.p.rows, N = dp.p.seqs;
    const T *w = cin<T>(ctx, "Weight"), *h0 = cin<T>(ctx, "H0"), *hid = cin<T>(ctx, "Hidden"),
            *bg = cin<T>(ctx, "BatchGate"), *brh = cin<T>(ctx, "BatchResetHiddenPrev"),
            *dhid = cin<T>(ctx, "Hidden@GRAD");
    for (int64_t t = dp.p.steps - 1; t >= 0; t--) {
        const int64_t n = dp.count(t);
        const unsigned bl = pe_cuda_blocks(n * H);
        k_gru_grad_a<T><<<bl, PE_CUDA_THREADS, 0, s>>>(dp.step(t), n, a, h0, hid, bg, dhid, gr, dhr, dhp);
        k_gru_grad_b<T><<<bl, PE_CUDA_THREADS, 0, s>>>(dp.step(t), n, a, w, h0, hid, bg, gr, dhp);
        k_gru_grad_c<T><<<bl, PE_CUDA_THREADS, 0, s>>>(dp.step(t), n, H, w, gr, dhp, dhr);
        PE_CHECK(pe_cuda_check_launch(ctx));
    }
    if (T *dx = cout<T>(ctx, "Input@GRAD")) k_store<T><<<pe_cuda_blocks(T_ * G), PE_CUDA_THREADS, 0, s>>>(gr, T_ * G, dx);
    if (T *d = cout<T>(ctx, "H0@GRAD")) k_store<T><<<pe_cuda_blocks(N * H), PE_CUDA_THREADS, 0, s>>>(dhr, N * H, d);
    if (T *dw = cout<T>(ctx, "Weight@GRAD")) {
        k_wgrad<T><<<pe_cuda_blocks(H * 2 * H), PE_CUDA_THREADS, 0, s>>>(dp.links(), T_, H, G, 0, 2 * H, 2 * H, hid,
                                                                          h0, nullptr, gr, dw);
        k_wgrad<T><<<pe_cuda_blocks(H * H), PE_CUDA_THREADS, 0, s>>>(dp.links(), T_, H, G, 2 * H, H, H, hid, h0, brh,
                                                                      gr, dw + 2 * H * H);
    }
    if (T *db = cout<T>(ctx, "Bias@GRAD"))
        k_bgrad<T><<<pe_cuda_blocks(G), PE_CUDA_THREADS, 0, s>>>(dp.links(), T_, H, G, false, nullptr, nullptr, gr, db);
    return pe_cuda_check_launch(ctx);
}

/* double scratch of n elements, zeroed */
pe_status zeroed(const pe_op_ctx *ctx, pe_cuda_temp &m, size_t n, cudaStream_t s) {
    if (!m.ok(n * sizeof(double))) return PE_ERR_NOMEM;
    if (!n) return PE_OK;
    return pe_cuda_check(ctx, cudaMemsetAsync(m.get(), 0, n * sizeof(double), s), "clearing the gradient scratch");
}

} // namespace

extern "C" {

pe_status pe_cuda_lstm(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    lstm_args a;
    PE_CHECK(lstm_args_get(ctx, x, &a));
    if (x->dims[0] == 0 || a.h == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_plan dp(ctx, x, pe_ctx_bool(ctx, "is_reverse"), s);
    if (dp.st != PE_OK) return dp.st;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "Input", T, PE_CHECK(lstm_fwd<T>(ctx, dp, a, s)));
    return PE_OK;
}

pe_status pe_cuda_lstm_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    lstm_args a;
    PE_CHECK(lstm_args_get(ctx, x, &a));
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_plan dp(ctx, x, pe_ctx_bool(ctx, "is_reverse"), s);
    if (dp.st != PE_OK) return dp.st;
    const size_t ng = (size_t)(dp.p.rows * 4 * a.h), ns = (size_t)(dp.p.seqs * a.h);
    pe_cuda_temp g(ctx, ng * sizeof(double)), dh(ctx, ns * sizeof(double)), dc(ctx, ns * sizeof(double));
    PE_CHECK(zeroed(ctx, g, ng, s));
    PE_CHECK(zeroed(ctx, dh, ns, s));
    PE_CHECK(zeroed(ctx, dc, ns, s));
    /* with no rows every gradient is a sum of nothing: zeros */
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "Input", T,
                        PE_CHECK(lstm_bwd<T>(ctx, dp, a, g.get<double>(), dh.get<double>(), dc.get<double>(), s)));
    return PE_OK;
}

pe_status pe_cuda_gru(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    gru_args a;
    PE_CHECK(gru_args_get(ctx, x, &a));
    if (x->dims[0] == 0 || a.h == 0) return PE_OK;
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_plan dp(ctx, x, pe_ctx_bool(ctx, "is_reverse"), s);
    if (dp.st != PE_OK) return dp.st;
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "Input", T, PE_CHECK(gru_fwd<T>(ctx, dp, a, s)));
    return PE_OK;
}

pe_status pe_cuda_gru_grad(const pe_op_ctx *ctx) {
    const pe_tensor *x = pe_ctx_in(ctx, "Input");
    PE_CHECK(pe_cuda_check_inputs(ctx));
    gru_args a;
    PE_CHECK(gru_args_get(ctx, x, &a));
    pe_cuda_device_scope dev(ctx->place.id);
    cudaStream_t s;
    PE_CHECK(pe_cuda_place_stream(ctx, dev, &s));
    dev_plan dp(ctx, x, pe_ctx_bool(ctx, "is_reverse"), s);
    if (dp.st != PE_OK) return dp.st;
    const size_t ng = (size_t)(dp.p.rows * 3 * a.h), ns = (size_t)(dp.p.seqs * a.h);
    pe_cuda_temp g(ctx, ng * sizeof(double)), dh(ctx, ns * sizeof(double)), dp2(ctx, ns * sizeof(double));
    PE_CHECK(zeroed(ctx, g, ng, s));
    PE_CHECK(zeroed(ctx, dh, ns, s));
    PE_CHECK(zeroed(ctx, dp2, ns, s));
    PE_CUDA_FLOAT_TYPES(ctx, x->dtype, "Input", T,
                        PE_CHECK(gru_bwd<T>(ctx, dp, a, g.get<double>(), dh.get<double>(), dp2.get<double>(), s)));
    return PE_OK;
}

} // extern "C"

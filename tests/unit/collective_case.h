/* tests/unit/collective_case.h — one program carrying every collective op
 * (ops/collective.c), run by a ParallelExecutor over a world of `world`
 * ranks, and what each rank must fetch (header-only; used by
 * test_collective_ops.c in one process and test_collective_mpi.c across
 * processes).
 *
 *     pe_program *p = cc_program(world, ROOT, REDUCE_ROOT);
 *     ... a ParallelExecutor over p: this process's n places are ranks g0 .. g0 + n - 1 ...
 *     cc_run(pe, g0, n, world, ROOT, REDUCE_ROOT, runs);  // feeds cc_input(g), checks every output
 *
 * Rank g's input is x_g[i] = ((7 i + 5 g) mod 11) - 5 + g / 4: distinct
 * per rank, with signs and ties, so max, min, prod and sum all differ.
 */
#ifndef PE_TEST_COLLECTIVE_CASE_H
#define PE_TEST_COLLECTIVE_CASE_H

#include "tests/unit/op_test_util.h"

enum { CC_ROWS = 2, CC_COLS = 3, CC_N = CC_ROWS * CC_COLS };

static inline double cc_x(int g, int i) { return (double)((7 * i + 5 * g) % 11) - 5.0 + g / 4.0; }
/* rank g's input of c_scatter: [world * CC_ROWS, CC_COLS] */
static inline double cc_z(int g, int i) { return 2.0 * cc_x(g + 3, i % CC_N) + i; }

static inline pe_tensor *cc_zinput(int g, int world) {
    double v[64 * CC_N];
    for (int i = 0; i < world * CC_N; i++) v[i] = cc_z(g, i);
    return tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){(int64_t)world * CC_ROWS, CC_COLS}, v);
}

static inline pe_tensor *cc_input(int g) {
    double v[CC_N];
    for (int i = 0; i < CC_N; i++) v[i] = cc_x(g, i);
    return tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){CC_ROWS, CC_COLS}, v);
}

static inline void cc_op(pe_program *p, const char *type, const char *x, const char *out, const char *attr, int v) {
    pe_op *op = pe_block_add_op(&p->blocks[0], type);
    assert_non_null(op);
    assert_int_equal(pe_op_add_input(op, "X", x), PE_OK);
    assert_int_equal(pe_op_add_output(op, "Out", out), PE_OK);
    if (attr) assert_int_equal(pe_op_set_int(op, attr, v), PE_OK);
}

static inline void cc_var(pe_program *p, const char *name, int64_t rows) {
    assert_non_null(pe_block_add_var(&p->blocks[0], name, PE_DTYPE_FP32, 2, (int64_t[]){rows, CC_COLS}));
}

/* out = scale * x */
static inline void cc_scale(pe_program *p, const char *out, double scale) {
    pe_op *sc = pe_block_add_op(&p->blocks[0], "scale");
    assert_non_null(sc);
    assert_int_equal(pe_op_add_input(sc, "X", "x"), PE_OK);
    assert_int_equal(pe_op_add_output(sc, "Out", out), PE_OK);
    assert_int_equal(pe_op_set_float(sc, "scale", scale), PE_OK);
}

/* The outputs, in the order cc_check reads them. */
static const char *const k_cc_fetch[] = {"sum", "max", "min", "prod", "bcast", "gathered", "reduced", "ident",
                                         "synced", "inplace", "rmin", "scat"};
enum { CC_N_FETCH = 12 };

/* x (fed) -> every collective; bcast: 2 x in place then c_broadcast from
 * rank `root`; gathered: c_allgather's Out read by an op; reduced:
 * c_reduce_sum to rank `reduce_root`; rmin: c_reduce_min to rank
 * world - 1 - reduce_root; scat: c_scatter of z (fed) from rank `root`;
 * inplace: x
 * copied (scale 1), then summed in place (c_allreduce_sum with Out == X:
 * a fed var is never written, graph/check.c). */
static inline pe_program *cc_program(int world, int root, int reduce_root) {
    pe_program *p = pe_program_new();
    assert_non_null(p);
    cc_var(p, "x", -1);
    const char *outs[] = {"sum", "max", "min", "prod", "bcast", "reduced", "ident", "synced", "inplace", "rmin"};
    for (int i = 0; i < 10; i++) cc_var(p, outs[i], -1);
    cc_var(p, "gather", -1);
    cc_var(p, "gathered", -1);
    cc_var(p, "z", -1);
    cc_var(p, "scat", -1);
    cc_op(p, "c_allreduce_sum", "x", "sum", "ring_id", 0);
    cc_op(p, "c_allreduce_max", "x", "max", NULL, 0);
    cc_op(p, "c_allreduce_min", "x", "min", NULL, 0);
    cc_op(p, "c_allreduce_prod", "x", "prod", NULL, 0);
    cc_scale(p, "bcast", 2.0);
    cc_op(p, "c_broadcast", "bcast", "bcast", "root", root);
    cc_op(p, "c_allgather", "x", "gather", "nranks", world);
    cc_op(p, "c_identity", "gather", "gathered", NULL, 0); /* an op reads what the gather wrote */
    cc_op(p, "c_reduce_sum", "x", "reduced", "root_id", reduce_root);
    cc_op(p, "c_reduce_min", "x", "rmin", "root_id", world - 1 - reduce_root);
    cc_op(p, "c_scatter", "z", "scat", "root", root);
    pe_op_set_int(&p->blocks[0].ops[p->blocks[0].n_ops - 1], "nranks", world);
    cc_op(p, "c_identity", "x", "ident", NULL, 0);
    cc_op(p, "c_sync_calc_stream", "sum", "synced", NULL, 0);
    cc_op(p, "c_sync_comm_stream", "synced", "synced", "ring_id", 0);
    cc_scale(p, "inplace", 1.0);
    cc_op(p, "c_allreduce_sum", "inplace", "inplace", NULL, 0); /* in place */
    if (pe_program_check(p, "collective_case.h") != PE_OK) fail_msg("%s", pe_last_error());
    return p;
}

static inline void cc_expect(const char *what, int g, const pe_tensor *t, int64_t off, double want, int64_t i) {
    double got = tu_get(t, off + i);
    if (fabs(got - want) > 1e-5 * fabs(want) + 1e-6)
        fail_msg("rank %d: %s[%lld] = %.9g, want %.9g", g, what, (long long)i, got, want);
}

/* out[k] = fetch k_cc_fetch[k] of this process merged over its places (row
 * block of place p at p * CC_ROWS, c_allgather's at p * world * CC_ROWS);
 * checks place p = rank g0 + p for p < n_places. */
static inline void cc_check(pe_tensor *const *out, int g0, int n_places, int world, int root, int reduce_root) {
    for (int p = 0; p < n_places; p++) {
        int g = g0 + p;
        int64_t off = (int64_t)p * CC_N;
        for (int i = 0; i < CC_N; i++) {
            double s = 0, mx = -1e300, mn = 1e300, pr = 1;
            for (int r = 0; r < world; r++) {
                double v = (float)cc_x(r, i);
                s += v;
                mx = v > mx ? v : mx;
                mn = v < mn ? v : mn;
                pr *= v;
            }
            cc_expect("c_allreduce_sum", g, out[0], off, s, i);
            cc_expect("c_allreduce_max", g, out[1], off, mx, i);
            cc_expect("c_allreduce_min", g, out[2], off, mn, i);
            cc_expect("c_allreduce_prod", g, out[3], off, pr, i);
            cc_expect("c_broadcast", g, out[4], off, 2.0 * (float)cc_x(root, i), i);
            cc_expect("c_reduce_sum", g, out[6], off, g == reduce_root ? s : (float)cc_x(g, i), i);
            cc_expect("c_identity", g, out[7], off, (float)cc_x(g, i), i);
            cc_expect("c_sync_*", g, out[8], off, s, i);
            cc_expect("c_allreduce_sum in place", g, out[9], off, s, i);
            cc_expect("c_reduce_min", g, out[10], off, g == world - 1 - reduce_root ? mn : (float)cc_x(g, i), i);
            cc_expect("c_scatter", g, out[11], off, cc_z(root, g * CC_N + i), i);
        }
        for (int r = 0; r < world; r++)
            for (int i = 0; i < CC_N; i++)
                cc_expect("c_allgather", g, out[5], (int64_t)p * world * CC_N + (int64_t)r * CC_N, (float)cc_x(r, i), i);
    }
    for (int k = 0; k < CC_N_FETCH; k++) {
        int64_t rows = (k == 5 ? world : 1) * (int64_t)n_places * CC_ROWS;
        tu_assert_dims(out[k], 2, (int64_t[]){rows, CC_COLS});
    }
}

/* Runs pe (n places: ranks g0 .. g0 + n - 1 of world) `runs` times, place
 * p fed cc_input(g0 + p), and checks every output of every place. */
static inline void cc_run(pe_parallel_executor *pe, int g0, int n, int world, int root, int reduce_root, int runs) {
    pe_tensor *x[8], *z[8];
    pe_feed f[8][2];
    const pe_feed *lists[8];
    int nf[8];
    for (int q = 0; q < n; q++) {
        x[q] = cc_input(g0 + q);
        z[q] = cc_zinput(g0 + q, world);
        f[q][0] = (pe_feed){"x", x[q]};
        f[q][1] = (pe_feed){"z", z[q]};
        lists[q] = f[q];
        nf[q] = 2;
    }
    pe_tensor *out[CC_N_FETCH];
    for (int k = 0; k < CC_N_FETCH; k++) out[k] = pe_tensor_new();
    for (int r = 0; r < runs; r++) {
        if (pe_run_list(pe, lists, nf, n, k_cc_fetch, CC_N_FETCH, true, out) != PE_OK)
            fail_msg("ranks %d..%d of %d, run %d: %s", g0, g0 + n - 1, world, r, pe_last_error());
        cc_check(out, g0, n, world, root, reduce_root);
    }
    /* the fed tensors are the caller's: an in-place collective never writes them */
    for (int q = 0; q < n; q++)
        for (int i = 0; i < CC_N; i++) assert_true(tu_get(x[q], i) == (float)cc_x(g0 + q, i));
    for (int k = 0; k < CC_N_FETCH; k++) pe_tensor_free(out[k]);
    for (int q = 0; q < n; q++) {
        pe_tensor_free(x[q]);
        pe_tensor_free(z[q]);
    }
}

#endif

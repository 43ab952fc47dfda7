/* tests/unit/test_parallel_executor.c — ParallelExecutor semantics on CPU
 * places (DESIGN.md §4): feed split, list feeds, fetch merge, persistables
 * fetched once, allreduce across places, error propagation without hangs,
 * dropped local scopes (on demand, and every num_iteration_per_drop_scope
 * runs with the allocator's bytes), share_vars_from, num_threads
 * independence, the automatic pool (none for one CPU place whose kernels
 * take several threads), strategy values out of range refused, pe_interrupt from
 * another thread stopping a run (both executors) that the next run
 * survives; pe_run_take handing fetched temporaries over. */
#include "tests/unit/op_test_util.h"

#include "executor/pe_internal.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pe_place g_places[8];

static void setup_places(void) {
    for (int i = 0; i < 8; i++) g_places[i] = pe_place_cpu(i);
}

static pe_var *decl(pe_program *p, const char *name, int ndim, const int64_t *dims) {
    pe_var *v = pe_block_add_var(&p->blocks[0], name, PE_DTYPE_FP32, ndim, dims);
    assert_non_null(v);
    return v;
}

/* y = scale(x, 2); s = mean(x) marked as the gradient of w (op_role_var), so
 * it is allreduced across places; w persistable [2]. */
static pe_program *make_prog(void) {
    pe_program *p = pe_program_new();
    decl(p, "x", 2, (int64_t[]){-1, 3});
    decl(p, "y", 2, (int64_t[]){-1, 3});
    decl(p, "loss", 1, (int64_t[]){1});
    decl(p, "w@GRAD", 1, (int64_t[]){1});
    pe_var *w = decl(p, "w", 1, (int64_t[]){2});
    w->persistable = true;
    w->is_parameter = true;
    pe_op *op = pe_block_add_op(&p->blocks[0], "scale");
    pe_op_add_input(op, "X", "x");
    pe_op_add_output(op, "Out", "y");
    pe_op_set_float(op, "scale", 2.0);
    op = pe_block_add_op(&p->blocks[0], "mean");
    pe_op_add_input(op, "X", "x");
    pe_op_add_output(op, "Out", "loss");
    op = pe_block_add_op(&p->blocks[0], "mean");
    pe_op_add_input(op, "X", "y");
    pe_op_add_output(op, "Out", "w@GRAD");
    pe_op_set_int(op, "op_role", PE_ROLE_BACKWARD);
    const char *rv[] = {"w", "w@GRAD"};
    pe_op_set_strings(op, "op_role_var", rv, 2);
    return p;
}

static pe_tensor *rows_tensor(int64_t rows) {
    double v[64 * 3];
    for (int i = 0; i < rows * 3; i++) v[i] = i + 1;
    return tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){rows, 3}, v);
}

static pe_parallel_executor *make_pe(pe_program *p, pe_scope *scope, int n, int threads) {
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.exec_strategy.num_threads = threads;
    pe_parallel_executor *pe = NULL;
    pe_status st = pe_parallel_executor_new(g_places, n, p, scope, &o, &pe);
    if (st != PE_OK) fail_msg("%s", pe_last_error());
    return pe;
}

static pe_scope *scope_with_w(void) {
    pe_scope *s = pe_scope_new(NULL);
    pe_tensor *w = pe_scope_var(s, "w");
    pe_tensor *src = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, (double[]){7, 8});
    pe_tensor_copy(w, src, pe_place_cpu(0));
    pe_tensor_free(src);
    return s;
}

/* pe_batch_shard: contiguous, in order, the last parts take the extra rows */
static void test_batch_shard(void **state) {
    (void)state;
    int64_t first;
    assert_int_equal(pe_batch_shard(3, 2, 0, &first), 1);
    assert_int_equal(first, 0);
    assert_int_equal(pe_batch_shard(3, 2, 1, &first), 2);
    assert_int_equal(first, 1);
    const int64_t want5on4[4] = {1, 1, 1, 2}, want10on4[4] = {2, 2, 3, 3};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pe_batch_shard(5, 4, i, NULL), want5on4[i]);
        assert_int_equal(pe_batch_shard(10, 4, i, NULL), want10on4[i]);
    }
    /* every (rows, n): the parts tile [0, rows), the rule t*base + max(0, t - (n - extra)) */
    for (int64_t rows = 0; rows < 40; rows++)
        for (int n = 1; n <= 9; n++) {
            int64_t next = 0, base = rows / n, extra = rows % n;
            for (int i = 0; i < n; i++) {
                int64_t c = pe_batch_shard(rows, n, i, &first);
                assert_int_equal(first, next);
                assert_int_equal(first, i * base + (i > n - extra ? i - (n - extra) : 0));
                assert_int_equal(c, base + (i >= n - extra));
                next += c;
            }
            assert_int_equal(next, rows);
        }
    assert_int_equal(pe_batch_shard(5, 4, 4, &first), 0); /* outside 0..n-1 */
    assert_int_equal(pe_batch_shard(5, 0, 0, NULL), 0);
}

static void test_feed_split_and_merge(void **state) {
    (void)state;
    pe_program *p = make_prog();
    pe_scope *scope = scope_with_w();
    pe_parallel_executor *pe = make_pe(p, scope, 4, 0);
    assert_int_equal(pe_device_count(pe), 4);
    pe_tensor *x = rows_tensor(5);
    pe_feed feed = {"x", x};
    const char *fetch[] = {"y", "loss", "w"};
    pe_tensor *out[3] = {pe_tensor_new(), pe_tensor_new(), pe_tensor_new()};
    assert_int_equal(pe_run(pe, &feed, 1, fetch, 3, true, out), PE_OK);
    /* per-sample var: the whole batch, in order */
    tu_assert_dims(out[0], 2, (int64_t[]){5, 3});
    for (int i = 0; i < 15; i++) assert_float_equal(tu_get(out[0], i), 2.0 * (i + 1), 0);
    /* per-place loss [1] -> [4]: rows split 1,1,1,2 (the last places take the extra rows) */
    tu_assert_dims(out[1], 1, (int64_t[]){4});
    tu_assert_close(out[1], (double[]){2, 5, 8, 12.5}, 4, 1e-6);
    /* a persistable comes back once */
    tu_assert_dims(out[2], 1, (int64_t[]){2});
    tu_assert_close(out[2], (double[]){7, 8}, 2, 0);
    /* unmerged: one per place */
    pe_tensor *per[4];
    for (int i = 0; i < 4; i++) per[i] = pe_tensor_new();
    assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, false, per), PE_OK);
    int64_t want_rows[4] = {1, 1, 1, 2};
    for (int i = 0; i < 4; i++) assert_int_equal(per[i]->dims[0], want_rows[i]);
    for (int i = 0; i < 4; i++) pe_tensor_free(per[i]);
    for (int i = 0; i < 3; i++) pe_tensor_free(out[i]);
    pe_tensor_free(x);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    pe_program_free(p);
}

static void test_too_few_rows_and_bad_fetch(void **state) {
    (void)state;
    pe_program *p = make_prog();
    pe_scope *scope = scope_with_w();
    pe_parallel_executor *pe = make_pe(p, scope, 4, 0);
    pe_tensor *x = rows_tensor(3);
    pe_feed feed = {"x", x};
    const char *fetch[] = {"y"};
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, true, &out), PE_ERR_INVALID);
    const char *m = pe_last_error();
    assert_non_null(strstr(m, "'x'"));
    assert_non_null(strstr(m, "3 rows"));
    assert_non_null(strstr(m, "4 places"));
    assert_non_null(strstr(m, "CPU_NUM"));
    const char *bad[] = {"no_such_var"};
    pe_tensor_free(x);
    x = rows_tensor(8);
    feed.tensor = x;
    assert_int_equal(pe_run(pe, &feed, 1, bad, 1, true, &out), PE_ERR_NOT_FOUND);
    assert_non_null(strstr(pe_last_error(), "no_such_var"));
    assert_non_null(strstr(pe_last_error(), "Likely reasons"));
    /* wrong dtype */
    pe_tensor *xi = tu_tensor(PE_DTYPE_INT64, 2, (int64_t[]){8, 3}, NULL);
    pe_feed fi = {"x", xi};
    assert_int_equal(pe_run(pe, &fi, 1, fetch, 1, true, &out), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "int64"));
    /* still usable */
    assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, true, &out), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){8, 3});
    pe_tensor_free(xi);
    pe_tensor_free(out);
    pe_tensor_free(x);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    pe_program_free(p);
}

static void test_list_feed(void **state) {
    (void)state;
    pe_program *p = make_prog();
    pe_scope *scope = scope_with_w();
    pe_parallel_executor *pe = make_pe(p, scope, 2, 0);
    pe_tensor *a = rows_tensor(1), *b = rows_tensor(3);
    pe_feed fa = {"x", a}, fb = {"x", b};
    const pe_feed *lists[2] = {&fa, &fb};
    int counts[2] = {1, 1};
    const char *fetch[] = {"y"};
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(pe_run_list(pe, lists, counts, 2, fetch, 1, true, &out), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){4, 3});
    assert_float_equal(tu_get(out, 3), 2.0, 0); /* first row of place 1 = b[0] */
    assert_int_equal(pe_run_list(pe, lists, counts, 1, fetch, 1, true, &out), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "2 places"));
    pe_tensor_free(a);
    pe_tensor_free(b);
    pe_tensor_free(out);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    pe_program_free(p);
}

/* The allreduced gradient is the same on every place: the sum of the
 * per-place means, summed in place order. */
static void test_allreduce_and_threads(void **state) {
    (void)state;
    pe_program *p = make_prog();
    pe_tensor *x = rows_tensor(10);
    pe_feed feed = {"x", x};
    const char *fetch[] = {"w@GRAD"};
    float first[4] = {0};
    int threads[3] = {1, 2, 8};
    for (int ti = 0; ti < 3; ti++) {
        pe_scope *scope = scope_with_w();
        pe_parallel_executor *pe = make_pe(p, scope, 4, threads[ti]);
        pe_tensor *per[4];
        for (int i = 0; i < 4; i++) per[i] = pe_tensor_new();
        assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, false, per), PE_OK);
        /* rows 2,2,3,3: means of y = 2*x over each piece */
        double m0 = 2 * (1 + 6) / 2.0, m1 = 2 * (7 + 12) / 2.0, m2 = 2 * (13 + 21) / 2.0, m3 = 2 * (22 + 30) / 2.0;
        for (int i = 0; i < 4; i++) {
            tu_assert_close(per[i], (double[]){m0 + m1 + m2 + m3}, 1, 1e-6);
            float v = *(float *)pe_tensor_data(per[i]);
            if (ti == 0) first[i] = v;
            else assert_memory_equal(&first[i], &v, sizeof v); /* bitwise across num_threads */
            pe_tensor_free(per[i]);
        }
        pe_parallel_executor_free(pe);
        pe_scope_free(scope);
    }
    pe_tensor_free(x);
    pe_program_free(p);
}

/* num_threads = 0 on CPU: one place whose kernels get more than one OpenMP
 * thread runs sequentially (no pool: each kernel's team already takes the
 * cores); one kernel thread, several places or an explicit num_threads
 * keep the pool. Every layout computes the same bits. */
static void test_automatic_pool(void **state) {
    (void)state;
    const int saved = omp_get_max_threads();
    pe_program *p = make_prog();
    pe_tensor *x = rows_tensor(10);
    pe_feed feed = {"x", x};
    const char *fetch[] = {"w@GRAD"};
    /* {places, OpenMP threads, num_threads, expect a pool} */
    const int cases[][4] = {{1, 2, 0, 0}, {1, 4, 0, 0}, {1, 1, 0, 1}, {1, 2, 1, 1}, {2, 2, 0, 1}, {2, 4, 0, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        omp_set_num_threads(cases[c][1]);
        pe_scope *scope = scope_with_w();
        pe_parallel_executor *pe = make_pe(p, scope, cases[c][0], cases[c][2]);
        assert_int_equal(pe->kernel_threads, cases[c][1] / cases[c][0]);
        if (cases[c][3]) assert_non_null(pe->sched);
        else assert_null(pe->sched);
        assert_int_equal(pe->sequential, !cases[c][3]);
        assert_false(pe->opt.build_strategy.enable_sequential_execution); /* the caller's options as given */
        pe_tensor *out[2] = {pe_tensor_new(), pe_tensor_new()};
        assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, false, out), PE_OK);
        /* the mean of y = 2 x over the place's rows, summed over the places */
        tu_assert_close(out[0], (double[]){cases[c][0] == 1 ? 2 * 15.5 : 2 * (8 + 23)}, 1, 1e-6);
        for (int i = 0; i < cases[c][0]; i++) pe_tensor_free(out[i]);
        if (cases[c][0] == 1) pe_tensor_free(out[1]);
        pe_parallel_executor_free(pe);
        pe_scope_free(scope);
    }
    omp_set_num_threads(saved);
    pe_tensor_free(x);
    pe_program_free(p);
}

/* reshape2 to a fixed [2, 3] fails on the places that get one row. */
static void test_error_on_one_place(void **state) {
    (void)state;
    pe_program *p = make_prog();
    decl(p, "r", 2, (int64_t[]){2, 3});
    pe_op *op = pe_block_add_op(&p->blocks[0], "reshape2");
    pe_op_add_input(op, "X", "y");
    pe_op_add_output(op, "Out", "r");
    pe_op_set_ints(op, "shape", (int64_t[]){2, 3}, 2);
    int threads[3] = {1, 2, 8};
    for (int ti = 0; ti < 3; ti++) {
        pe_scope *scope = scope_with_w();
        pe_parallel_executor *pe = make_pe(p, scope, 4, threads[ti]);
        pe_tensor *x = rows_tensor(5), *ok = rows_tensor(8);
        pe_feed feed = {"x", x};
        const char *fetch[] = {"r"};
        pe_tensor *out = pe_tensor_new();
        for (int rep = 0; rep < 3; rep++) {
            assert_int_not_equal(pe_run(pe, &feed, 1, fetch, 1, true, &out), PE_OK);
            assert_non_null(strstr(pe_last_error(), "reshape2"));
            assert_non_null(strstr(pe_last_error(), "cpu:"));
            feed.tensor = ok;
            assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, true, &out), PE_OK);
            tu_assert_dims(out, 2, (int64_t[]){8, 3});
            feed.tensor = x;
        }
        pe_tensor_free(out);
        pe_tensor_free(x);
        pe_tensor_free(ok);
        pe_parallel_executor_free(pe);
        pe_scope_free(scope);
    }
    pe_program_free(p);
}

/* A declaration the op contradicts (issue 16 item 4) is an error naming
 * the op, the var and both metas: in the single-place executor and on
 * every place of the parallel one (declared dims are a place's: its piece
 * of the batch, like a feed's). */
static void test_declared_meta_contradicted(void **state) {
    (void)state;
    pe_tensor *x = rows_tensor(8);
    pe_feed feed = {"x", x};
    const char *fetch[] = {"y"};
    for (int c = 0; c < 3; c++) {
        pe_program *p = make_prog();
        pe_var *y = pe_block_find_var(&p->blocks[0], "y");
        const char *want = NULL, *want1 = NULL;
        if (c == 0) { /* a fixed dim */
            y->dims[1] = 4;
            want = "op scale on cpu:0: output Out 'y' is float32 [8, 3], but the program declares it float32 [-1, 4]";
            want1 = "output Out 'y' is float32 [2, 3], but the program declares it float32 [-1, 4]";
        } else if (c == 1) { /* the dtype */
            y->dtype = PE_DTYPE_INT64;
            want = "output Out 'y' is float32 [8, 3], but the program declares it int64 [-1, 3]";
            want1 = "but the program declares it int64 [-1, 3]";
        } else { /* the rank; dims of 1 and -1 still match */
            y->ndim = 3;
            y->dims[2] = 2;
            want = "output Out 'y' is float32 [8, 3], but the program declares it float32 [-1, 3, 2]";
            want1 = "declares it float32 [-1, 3, 2]";
        }
        pe_tensor *out = pe_tensor_new();
        pe_scope *scope = scope_with_w();
        pe_executor *ex = pe_executor_new(pe_place_cpu(0));
        assert_int_equal(pe_executor_run(ex, p, 0, scope, &feed, 1, fetch, 1, &out), PE_ERR_INVALID);
        if (!strstr(pe_last_error(), want) || !strstr(pe_last_error(), "block 0 op 0"))
            fail_msg("case %d: %s", c, pe_last_error());
        pe_executor_free(ex);
        pe_parallel_executor *pe = make_pe(p, scope, 4, 2);
        assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, true, &out), PE_ERR_INVALID);
        if (!strstr(pe_last_error(), want1)) fail_msg("case %d, 4 places: %s", c, pe_last_error());
        pe_parallel_executor_free(pe);
        /* the same with the declaration made true runs */
        y->dtype = PE_DTYPE_FP32;
        y->ndim = 2;
        y->dims[1] = 3;
        ex = pe_executor_new(pe_place_cpu(0));
        assert_int_equal(pe_executor_run(ex, p, 0, scope, &feed, 1, fetch, 1, &out), PE_OK);
        y->dims[1] = 1;
        y->dims[0] = 8; /* [8, 1] vs [8, 3]: 1s are dropped only to match ranks, never a dim */
        pe_executor_drop_local_scope(ex);
        assert_int_equal(pe_executor_run(ex, p, 0, scope, &feed, 1, fetch, 1, &out), PE_ERR_INVALID);
        pe_executor_free(ex);
        pe_scope_free(scope);
        pe_tensor_free(out);
        pe_program_free(p);
    }
    /* An output written in place (a declared pair) cannot grow: b [3] +=
     * x [8, 3] would lose b's value; an error, not a reallocation. */
    pe_program *p = make_prog();
    decl(p, "b", 0, NULL);
    pe_op *op = pe_block_add_op(&p->blocks[0], "fill_constant");
    pe_op_add_output(op, "Out", "b");
    pe_op_set_longs(op, "shape", (int64_t[]){3}, 1);
    pe_op_set_float(op, "value", 1.0);
    op = pe_block_add_op(&p->blocks[0], "elementwise_add");
    pe_op_add_input(op, "X", "b");
    pe_op_add_input(op, "Y", "x");
    pe_op_add_output(op, "Out", "b");
    assert_int_equal(pe_program_check(p, "grow"), PE_OK);
    pe_scope *scope = scope_with_w();
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    pe_tensor *out = pe_tensor_new();
    const char *fb[] = {"b"};
    assert_int_equal(pe_executor_run(ex, p, 0, scope, &feed, 1, fb, 1, &out), PE_ERR_INVALID);
    if (!strstr(pe_last_error(), "op elementwise_add on cpu:0: output Out 'b' is also its input, and its inferred "
                                 "shape float32 [8, 3] needs 96 bytes where its input value has 12"))
        fail_msg("%s", pe_last_error());
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_tensor_free(out);
    pe_program_free(p);
    pe_tensor_free(x);
}

static void test_drop_scopes_and_flat_memory(void **state) {
    (void)state;
    pe_program *p = make_prog();
    pe_scope *scope = scope_with_w();
    pe_parallel_executor *pe = make_pe(p, scope, 2, 0);
    pe_tensor *x = rows_tensor(6);
    pe_feed feed = {"x", x};
    const char *fetch[] = {"y"};
    pe_tensor *a = pe_tensor_new(), *b = pe_tensor_new();
    assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, true, &a), PE_OK);
    size_t held = pe_local_exe_scopes_bytes(pe);
    assert_true(held > 0);
    /* the drop gives the bytes back to the allocator, not only PE's counter */
    int64_t kept[2], dropped[2];
    for (int pl = 0; pl < 2; pl++) kept[pl] = pe_alloc_get_stats(pe_place_cpu(pl)).bytes_in_use;
    pe_drop_local_exe_scopes(pe);
    assert_int_equal(pe_local_exe_scopes_bytes(pe), 0);
    for (int pl = 0; pl < 2; pl++) {
        dropped[pl] = pe_alloc_get_stats(pe_place_cpu(pl)).bytes_in_use;
        assert_true(dropped[pl] < kept[pl]); /* each place held some of it */
    }
    assert_true(dropped[0] + dropped[1] <= kept[0] + kept[1] - (int64_t)held);
    assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, true, &b), PE_OK);
    assert_memory_equal(pe_tensor_data(a), pe_tensor_data(b), pe_tensor_nbytes(a));
    /* 10,000 runs: bytes in use stay flat */
    int64_t base = pe_alloc_get_stats(pe_place_cpu(0)).bytes_in_use + pe_alloc_get_stats(pe_place_cpu(1)).bytes_in_use;
    for (int i = 0; i < 10000; i++) assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, true, &b), PE_OK);
    int64_t now = pe_alloc_get_stats(pe_place_cpu(0)).bytes_in_use + pe_alloc_get_stats(pe_place_cpu(1)).bytes_in_use;
    assert_true(now <= base);
    pe_tensor_free(a);
    pe_tensor_free(b);
    pe_tensor_free(x);
    pe_parallel_executor_free(pe);
    pe_scope_free(scope);
    pe_program_free(p);
}

/* pe_run_take on one CPU place: the fetched temporary's buffer moves to
 * the result (the local var keeps none, the next run computes into a new
 * one and leaves the first result alone); a persistable is copied; on two
 * places it is pe_run's merge. */
static void test_run_take(void **state) {
    (void)state;
    pe_program *p = make_prog();
    pe_scope *scope = scope_with_w();
    pe_parallel_executor *pe = make_pe(p, scope, 1, 0);
    pe_tensor *x = rows_tensor(2), *x2 = rows_tensor(3);
    pe_feed feed = {"x", x}, feed2 = {"x", x2};
    const char *fetch[] = {"y", "w"};
    pe_tensor *a[2] = {pe_tensor_new(), pe_tensor_new()}, *b[2] = {pe_tensor_new(), pe_tensor_new()};
    assert_int_equal(pe_run_take(pe, &feed, 1, fetch, 2, a), PE_OK);
    pe_tensor *y = pe_scope_find_var(pe->local[0], "y");
    assert_non_null(y);
    assert_null(y->buf);                     /* handed over */
    assert_int_equal(a[0]->buf->refcount, 1);
    tu_assert_close(a[0], (double[]){2, 4, 6, 8, 10, 12}, 6, 0);
    const pe_tensor *w = pe_scope_find_var(scope, "w");
    assert_ptr_not_equal(pe_tensor_data(a[1]), pe_tensor_data(w)); /* a persistable: copied */
    tu_assert_close(a[1], (double[]){7, 8}, 2, 0);
    assert_int_equal(pe_run_take(pe, &feed2, 1, fetch, 2, b), PE_OK);
    tu_assert_dims(b[0], 2, (int64_t[]){3, 3});
    tu_assert_close(b[0], (double[]){2, 4, 6, 8, 10, 12, 14, 16, 18}, 9, 0);
    tu_assert_dims(a[0], 2, (int64_t[]){2, 3});
    tu_assert_close(a[0], (double[]){2, 4, 6, 8, 10, 12}, 6, 0);
    /* pe_run after it copies again: the var keeps its buffer */
    assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, true, b), PE_OK);
    assert_non_null(pe_scope_find_var(pe->local[0], "y")->buf);
    for (int i = 0; i < 2; i++) {
        pe_tensor_free(a[i]);
        pe_tensor_free(b[i]);
    }
    pe_parallel_executor_free(pe);
    /* two places: the merge, as pe_run */
    pe = make_pe(p, scope, 2, 0);
    pe_tensor *m = pe_tensor_new();
    assert_int_equal(pe_run_take(pe, &feed2, 1, fetch, 1, &m), PE_OK);
    tu_assert_close(m, (double[]){2, 4, 6, 8, 10, 12, 14, 16, 18}, 9, 0);
    pe_tensor_free(m);
    pe_parallel_executor_free(pe);
    pe_tensor_free(x);
    pe_tensor_free(x2);
    pe_scope_free(scope);
    pe_program_free(p);
}

static void test_share_vars_from(void **state) {
    (void)state;
    pe_program *train = make_prog();
    pe_program *eval = pe_program_new();
    decl(eval, "x", 2, (int64_t[]){-1, 2});
    decl(eval, "z", 2, (int64_t[]){-1, 2});
    pe_var *w = decl(eval, "w", 1, (int64_t[]){2});
    w->persistable = true;
    pe_op *op = pe_block_add_op(&eval->blocks[0], "elementwise_add");
    pe_op_add_input(op, "X", "x");
    pe_op_add_input(op, "Y", "w");
    pe_op_add_output(op, "Out", "z");
    pe_scope *scope = scope_with_w();
    pe_parallel_executor *tr = make_pe(train, scope, 2, 0);
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.share_vars_from = tr;
    pe_parallel_executor *ev = NULL;
    assert_int_equal(pe_parallel_executor_new(g_places, 2, eval, scope, &o, &ev), PE_OK);
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){2, 2}, (double[]){0, 0, 1, 1});
    pe_feed feed = {"x", x};
    const char *fetch[] = {"z"};
    pe_tensor *out = pe_tensor_new();
    assert_int_equal(pe_run(ev, &feed, 1, fetch, 1, true, &out), PE_OK);
    tu_assert_close(out, (double[]){7, 8, 8, 9}, 4, 0);
    /* "training" updates each place's parameter; eval sees it, no copy */
    for (int pl = 0; pl < 2; pl++) {
        float *wd = pe_tensor_data(pe_scope_find_var(pe_place_scope(tr, pl), "w"));
        wd[0] = 100;
        wd[1] = 200;
    }
    assert_int_equal(pe_run(ev, &feed, 1, fetch, 1, true, &out), PE_OK);
    tu_assert_close(out, (double[]){100, 200, 101, 201}, 4, 0);
    assert_null(pe_scope_find_local_var(pe_place_scope(ev, 1), "w"));
    /* a source with another place count */
    pe_parallel_executor *bad = NULL;
    assert_int_equal(pe_parallel_executor_new(g_places, 3, eval, scope, &o, &bad), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "share_vars_from"));
    pe_tensor_free(out);
    pe_tensor_free(x);
    pe_parallel_executor_free(ev);
    pe_parallel_executor_free(tr);
    pe_scope_free(scope);
    pe_program_free(eval);
    pe_program_free(train);
}

/* A dict or list feed is a view of the caller's rows for its run (no
 * copy) and is gone after it: a later run that does not feed x fails naming
 * x instead of reading the caller's (possibly freed) memory; a fed var that
 * an op of the program writes is copied, so the caller's data is never
 * written. */
static void test_feed_lasts_for_its_run(void **state) {
    (void)state;
    pe_program *p = make_prog();
    /* z = scale(x) written back into x (an op writing the fed var) */
    pe_program *q = make_prog();
    pe_op *op = pe_block_add_op(&q->blocks[0], "scale");
    pe_op_add_input(op, "X", "x");
    pe_op_add_output(op, "Out", "x");
    pe_op_set_float(op, "scale", 10.0);
    for (int n = 1; n <= 2; n++) {
        pe_scope *scope = scope_with_w();
        pe_parallel_executor *pe = make_pe(p, scope, n, 0);
        pe_tensor *x = rows_tensor(4), *y = pe_tensor_new();
        pe_feed feed[] = {{"x", x}};
        const char *fetch[] = {"y"};
        assert_int_equal(pe_run(pe, feed, 1, fetch, 1, true, &y), PE_OK);
        assert_float_equal(((float *)pe_tensor_data(y))[11], 24.0, 0);
        pe_tensor_free(x); /* the executor keeps nothing of it */
        pe_status st = pe_run(pe, NULL, 0, fetch, 1, true, &y);
        assert_int_not_equal(st, PE_OK);
        if (!strstr(pe_last_error(), "'x'")) fail_msg("%d places: %s", n, pe_last_error());
        /* list feeds too */
        pe_tensor *parts[2] = {rows_tensor(2), rows_tensor(3)};
        pe_feed f0[] = {{"x", parts[0]}}, f1[] = {{"x", parts[1]}};
        const pe_feed *lists[] = {f0, f1};
        const int counts[] = {1, 1};
        assert_int_equal(pe_run_list(pe, lists, counts, n, fetch, 1, true, &y), PE_OK);
        assert_int_equal(y->dims[0], n == 1 ? 2 : 5);
        assert_int_not_equal(pe_run(pe, NULL, 0, fetch, 1, true, &y), PE_OK);
        pe_tensor_free(parts[0]);
        pe_tensor_free(parts[1]);
        pe_parallel_executor_free(pe);
        pe_scope_free(scope);
        /* the program that writes x: the caller's rows stay as they were */
        scope = scope_with_w();
        pe = make_pe(q, scope, n, 0);
        x = rows_tensor(4);
        const char *fx[] = {"x"};
        pe_feed fq[] = {{"x", x}};
        assert_int_equal(pe_run(pe, fq, 1, fx, 1, true, &y), PE_OK);
        assert_float_equal(((float *)pe_tensor_data(y))[11], 120.0, 0);
        assert_float_equal(((float *)pe_tensor_data(x))[11], 12.0, 0);
        pe_tensor_free(x);
        pe_tensor_free(y);
        pe_parallel_executor_free(pe);
        pe_scope_free(scope);
    }
    pe_program_free(p);
    pe_program_free(q);
}

static void test_cpu_num(void **state) {
    (void)state;
    setenv("CPU_NUM", "3", 1);
    assert_int_equal(pe_cpu_place_count(), 3);
    setenv("CPU_NUM", "zero", 1);
    assert_int_equal(pe_cpu_place_count(), -1);
    assert_non_null(strstr(pe_last_error(), "CPU_NUM"));
    unsetenv("CPU_NUM");
    assert_int_equal(pe_cpu_place_count(), 1);
}

/* Bytes the allocator holds on both places. */
static int64_t places_in_use(void) {
    return pe_alloc_get_stats(g_places[0]).bytes_in_use + pe_alloc_get_stats(g_places[1]).bytes_in_use;
}

/* num_iteration_per_drop_scope = k (1, 2, 3, 5): the local scopes are
 * dropped right after every k-th run and not after the others, and the
 * allocator's bytes in use fall by what they held; k = 0 never drops (12
 * runs, the bytes stay). */
static void test_drop_scope_every_k_runs(void **state) {
    (void)state;
    pe_program *p = make_prog();
    const int ks[] = {1, 2, 3, 5, 0};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        int k = ks[ki];
        pe_scope *scope = scope_with_w();
        pe_pe_options o;
        pe_pe_options_default(&o);
        o.exec_strategy.num_iteration_per_drop_scope = k;
        pe_parallel_executor *pe = NULL;
        assert_int_equal(pe_parallel_executor_new(g_places, 2, p, scope, &o, &pe), PE_OK);
        pe_tensor *x = rows_tensor(64);
        pe_feed feed = {"x", x};
        const char *fetch[] = {"loss"};
        pe_tensor *out = pe_tensor_new();
        int64_t before = places_in_use(), kept = 0;
        int drops = 0;
        for (int run = 1; run <= 12; run++) {
            assert_int_equal(pe_run(pe, &feed, 1, fetch, 1, true, &out), PE_OK);
            int64_t now = places_in_use();
            size_t held = pe_local_exe_scopes_bytes(pe);
            bool drop = k > 0 && run % k == 0;
            if (drop) {
                assert_int_equal(held, 0);
                /* what the previous runs held went back, on the allocator too */
                if (run > 1 && k > 1) assert_true(now <= kept - 64 * 3 * (int64_t)sizeof(float));
                assert_true(now <= before + 64 * (int64_t)sizeof(float)); /* at most the fetched copy */
                drops++;
            } else {
                if (held < 64 * 3 * sizeof(float)) /* y, on the places */
                    fail_msg("k=%d run %d: the local scopes hold %zu bytes, expected them kept", k, run, held);
                if (kept) assert_int_equal(now, kept); /* kept, nothing new allocated */
                kept = now;
            }
        }
        assert_int_equal(drops, k ? 12 / k : 0);
        pe_tensor_free(out);
        pe_tensor_free(x);
        pe_parallel_executor_free(pe);
        pe_scope_free(scope);
    }
    pe_program_free(p);
}

/* Strategy values out of range: pe_parallel_executor_new refuses them,
 * naming the field, the value and what is allowed; the bounds themselves
 * are accepted. */
static void test_invalid_strategy_values(void **state) {
    (void)state;
    pe_program *p = make_prog();
    pe_scope *scope = scope_with_w();
    enum { THREADS, DROP, PER_RUN, GRAD_MB, FIRST_MB, REDUCE, SCALE };
    const struct { int field; double v; const char *words; } cases[] = {
        {THREADS, -1, "ExecutionStrategy.num_threads = -1 is out of range: allowed 0 (automatic"},
        {THREADS, PE_MAX_NUM_THREADS + 1, "ExecutionStrategy.num_threads = 1025 is out of range"},
        {DROP, -1, "ExecutionStrategy.num_iteration_per_drop_scope = -1 is out of range: allowed 0 (never drop"},
        {PER_RUN, 0, "ExecutionStrategy.num_iteration_per_run = 0 is out of range: allowed a positive count"},
        {PER_RUN, -5, "ExecutionStrategy.num_iteration_per_run = -5 is out of range"},
        {GRAD_MB, NAN, "BuildStrategy.fuse_grad_size_in_MB = nan is out of range: allowed a finite size in MB "
                       "greater than 0"},
        {GRAD_MB, -1, "BuildStrategy.fuse_grad_size_in_MB = -1 is out of range"},
        {GRAD_MB, 0, "BuildStrategy.fuse_grad_size_in_MB = 0 is out of range"},
        {FIRST_MB, INFINITY, "BuildStrategy.fuse_first_grad_size_in_MB = inf is out of range"},
        {REDUCE, 2, "BuildStrategy.reduce_strategy = 2 is out of range: allowed 0 (all_reduce) or 1 (reduce)"},
        {SCALE, -1, "BuildStrategy.gradient_scale_strategy = -1 is out of range: allowed 0 (batch_share), "
                    "1 (coeff_num_device), 2 (one) or 3 (customized)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pe_pe_options o;
        pe_pe_options_default(&o);
        switch (cases[i].field) {
        case THREADS: o.exec_strategy.num_threads = (int)cases[i].v; break;
        case DROP: o.exec_strategy.num_iteration_per_drop_scope = (int)cases[i].v; break;
        case PER_RUN: o.exec_strategy.num_iteration_per_run = (int)cases[i].v; break;
        case GRAD_MB: o.build_strategy.fuse_grad_size_in_MB = cases[i].v; break;
        case FIRST_MB: o.build_strategy.fuse_first_grad_size_in_MB = cases[i].v; break;
        case REDUCE: o.build_strategy.reduce_strategy = (pe_reduce_strategy)(int)cases[i].v; break;
        default: o.build_strategy.gradient_scale_strategy = (pe_grad_scale)(int)cases[i].v; break;
        }
        pe_parallel_executor *pe = NULL;
        assert_int_equal(pe_parallel_executor_new(g_places, 2, p, scope, &o, &pe), PE_ERR_INVALID);
        assert_null(pe);
        if (!strstr(pe_last_error(), cases[i].words)) fail_msg("case %zu: %s", i, pe_last_error());
    }
    pe_pe_options o;
    pe_pe_options_default(&o);
    assert_int_equal(pe_pe_options_check(&o), PE_OK);
    o.exec_strategy.num_threads = PE_MAX_NUM_THREADS;
    o.exec_strategy.num_iteration_per_drop_scope = 0;
    o.build_strategy.reduce_strategy = PE_REDUCE_REDUCE;
    o.build_strategy.gradient_scale_strategy = PE_GRAD_SCALE_CUSTOMIZED;
    o.build_strategy.fuse_grad_size_in_MB = 1e-6;
    assert_int_equal(pe_pe_options_check(&o), PE_OK);
    pe_scope_free(scope);
    pe_program_free(p);
}

/* h0 = scale(x, 1), h1 = scale(h0, 1), ... h<n-1>: n ops, each a pass
 * over x (no change to the values). */
static pe_program *chain_prog(int n, int64_t cols) {
    pe_program *p = pe_program_new();
    decl(p, "x", 2, (int64_t[]){-1, cols});
    char in[32] = "x", out[32];
    for (int i = 0; i < n; i++) {
        snprintf(out, sizeof out, "h%d", i);
        decl(p, out, 2, (int64_t[]){-1, cols});
        pe_op *op = pe_block_add_op(&p->blocks[0], "scale");
        pe_op_add_input(op, "X", in);
        pe_op_add_output(op, "Out", out);
        pe_op_set_float(op, "scale", 1.0);
        memcpy(in, out, sizeof in);
    }
    return p;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *interrupt_after_20ms(void *arg) {
    (void)arg;
    nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
    pe_interrupt();
    return NULL;
}

/* A run of 3000 ops over a [512, 4096] feed (8 MiB) takes seconds; a
 * pe_interrupt from another thread 20 ms in stops it (PE_ERR_CANCELLED,
 * "run interrupted") long before, on 2 places and on the single-place
 * executor; the next run is whole and right; an interrupt made between
 * runs reaches no run. */
static void test_interrupt(void **state) {
    (void)state;
    const int n_ops = 3000;
    const int64_t rows = 512, cols = 4096;
    pe_program *p = chain_prog(n_ops, cols);
    pe_tensor *x = pe_tensor_new(), *small = pe_tensor_new();
    assert_int_equal(pe_tensor_resize(x, PE_DTYPE_FP32, 2, (int64_t[]){rows, cols}, pe_place_cpu(0)), PE_OK);
    assert_int_equal(pe_tensor_resize(small, PE_DTYPE_FP32, 2, (int64_t[]){2, cols}, pe_place_cpu(0)), PE_OK);
    for (int64_t i = 0; i < rows * cols; i++) ((float *)pe_tensor_data(x))[i] = (float)(i % 1000);
    for (int64_t i = 0; i < 2 * cols; i++) ((float *)pe_tensor_data(small))[i] = (float)i;
    char last[32];
    snprintf(last, sizeof last, "h%d", n_ops - 1);
    const char *fetch[] = {last};
    pe_tensor *out = pe_tensor_new();
    for (int places = 0; places <= 2; places += 2) { /* 0: the single-place executor */
        pe_scope *scope = pe_scope_new(NULL);
        pe_parallel_executor *pe = places ? make_pe(p, scope, places, 0) : NULL;
        pe_executor *ex = places ? NULL : pe_executor_new(pe_place_cpu(0));
        for (int rep = 0; rep < 2; rep++) {
            pe_feed feed = {"x", x};
            pthread_t t;
            assert_int_equal(pthread_create(&t, NULL, interrupt_after_20ms, NULL), 0);
            double t0 = now_s();
            pe_status st = pe ? pe_run(pe, &feed, 1, fetch, 1, true, &out)
                              : pe_executor_run(ex, p, 0, scope, &feed, 1, fetch, 1, &out);
            double took = now_s() - t0;
            pthread_join(t, NULL);
            assert_int_equal(st, PE_ERR_CANCELLED);
            if (!strstr(pe_last_error(), "run interrupted")) fail_msg("message '%s'", pe_last_error());
            /* a whole run is 3000 passes over 8 MiB: seconds */
            if (took > 1.0) fail_msg("%d places: the interrupted run took %.3f s", places, took);
            /* an interrupt between runs reaches no run: the next is whole */
            pe_interrupt();
            feed.tensor = small;
            st = pe ? pe_run(pe, &feed, 1, fetch, 1, true, &out)
                    : pe_executor_run(ex, p, 0, scope, &feed, 1, fetch, 1, &out);
            if (st != PE_OK) fail_msg("%s", pe_last_error());
            tu_assert_dims(out, 2, (int64_t[]){2, cols});
            for (int64_t i = 0; i < 2 * cols; i++) assert_true(((float *)pe_tensor_data(out))[i] == (float)i);
        }
        pe_parallel_executor_free(pe);
        pe_executor_free(ex);
        pe_scope_free(scope);
    }
    pe_tensor_free(out);
    pe_tensor_free(x);
    pe_tensor_free(small);
    pe_program_free(p);
}

int main(void) {
    setup_places();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_shard),
        cmocka_unit_test(test_feed_split_and_merge),
        cmocka_unit_test(test_too_few_rows_and_bad_fetch),
        cmocka_unit_test(test_list_feed),
        cmocka_unit_test(test_allreduce_and_threads),
        cmocka_unit_test(test_automatic_pool),
        cmocka_unit_test(test_error_on_one_place),
        cmocka_unit_test(test_declared_meta_contradicted),
        cmocka_unit_test(test_drop_scopes_and_flat_memory),
        cmocka_unit_test(test_run_take),
        cmocka_unit_test(test_share_vars_from),
        cmocka_unit_test(test_feed_lasts_for_its_run),
        cmocka_unit_test(test_cpu_num),
        cmocka_unit_test(test_drop_scope_every_k_runs),
        cmocka_unit_test(test_invalid_strategy_values),
        cmocka_unit_test(test_interrupt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

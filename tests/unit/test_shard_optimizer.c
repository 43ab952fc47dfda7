/* tests/unit/test_shard_optimizer.c — BuildStrategy.shard_optimizer.
 *
 * With it (the default on CPU places) each sgd / momentum / adam update runs
 * once, split into element ranges over the places, on parameters and
 * accumulators the places share. What must hold:
 * - every persistable var (parameters, velocities, moments, adam's beta
 *   powers, the learning rate) on every place is bitwise what the unsharded
 *   graph gives, on 2 and 3 places, for sgd, momentum and adam, in float32
 *   (the arithmetic per element is the op's own, so not even rounding may
 *   differ);
 * - the graph has shard handles instead of per-place optimizer ops and
 *   allreduces (fc_0.w: 784x64 elements, 3 shards on 3 places; biases: 1);
 * - places 1.. share place 0's storage of parameters and accumulators, but
 *   not adam's beta powers (each place advances its own);
 * - a fetched gradient comes back summed, as without sharding;
 * - feeding a parameter (a persistable feed is copied to every place, so
 *   the places stop sharing its storage) keeps training exact, and the
 *   next run shares it again; so does a value set into place 0's scope
 *   after construction (every place trains from it);
 * - inputs that do not fit the parameter are an error naming op and var.
 */
#include "tests/unit/models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define STEPS 4
#define ROWS 10 /* uneven on 3 places: 4, 3, 3 */

typedef struct {
    pe_scope *scope;
    pe_executor *ex;
    pe_parallel_executor *pe;
} trainer;

static void trainer_new(trainer *t, const tm_model *m, int places, bool shard, const char *dot) {
    t->scope = pe_scope_new(NULL);
    t->ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(t->ex, m->startup, 0, t->scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_place pl[3] = {pe_place_cpu(0), pe_place_cpu(1), pe_place_cpu(2)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    assert_true(o.build_strategy.shard_optimizer); /* the default */
    o.loss_name = "loss";
    o.build_strategy.shard_optimizer = shard;
    o.build_strategy.debug_graphviz_path = dot;
    if (pe_parallel_executor_new(pl, places, m->main, t->scope, &o, &t->pe) != PE_OK)
        fail_msg("places=%d shard=%d: %s", places, shard, pe_last_error());
}

static void trainer_free(trainer *t) {
    pe_parallel_executor_free(t->pe);
    pe_executor_free(t->ex);
    pe_scope_free(t->scope);
}

/* One step on batch `step`; extra feeds appended; fetches `fetch` (may be NULL). */
static void step(trainer *t, const tm_model *m, int s, const pe_feed *extra, int n_extra, const char *fetch,
                 pe_tensor *out) {
    pe_tensor *x, *y;
    tm_batch(m, s, ROWS, &x, &y);
    pe_feed feed[4] = {{m->input, x}, {"label", y}};
    for (int i = 0; i < n_extra; i++) feed[2 + i] = extra[i];
    const char *names[2] = {"loss", fetch};
    pe_tensor *outs[2] = {pe_tensor_new(), out};
    if (pe_run(t->pe, feed, 2 + n_extra, names, fetch ? 2 : 1, true, outs) != PE_OK)
        fail_msg("step %d: %s", s, pe_last_error());
    pe_tensor_free(outs[0]);
    pe_tensor_free(x);
    pe_tensor_free(y);
}

/* Every persistable var of the program, on every place, bitwise equal. */
static void assert_same_state(const tm_model *m, trainer *a, trainer *b, int places, const char *what) {
    const pe_block *blk = &m->main->blocks[0];
    int compared = 0;
    for (int i = 0; i < blk->n_vars; i++) {
        if (!blk->vars[i].persistable) continue;
        for (int p = 0; p < places; p++) {
            const pe_tensor *x = pe_scope_find_var(pe_place_scope(a->pe, p), blk->vars[i].name);
            const pe_tensor *y = pe_scope_find_var(pe_place_scope(b->pe, p), blk->vars[i].name);
            if (!x || !y || !x->buf || !y->buf) fail_msg("%s: '%s' missing on place %d", what, blk->vars[i].name, p);
            assert_int_equal(pe_tensor_nbytes(x), pe_tensor_nbytes(y));
            if (memcmp(pe_tensor_data(x), pe_tensor_data(y), pe_tensor_nbytes(x)) != 0)
                fail_msg("%s: '%s' on place %d differs from the unsharded run", what, blk->vars[i].name, p);
            compared++;
        }
    }
    assert_true(compared >= 6 * places);
}

static tm_model make_mlp(pe_optimizer_kind kind) {
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.0, true);
    tm_mlp(&m, 64, "relu", 32, "tanh");
    tm_minimize(&m, kind, kind == PE_OPT_ADAM ? 0.01 : 0.05, NULL, 0);
    return m;
}

static void test_bitwise_equal_to_unsharded(void **state) {
    (void)state;
    const pe_optimizer_kind kinds[] = {PE_OPT_SGD,     PE_OPT_MOMENTUM, PE_OPT_ADAM,  PE_OPT_ADAGRAD,
                                       PE_OPT_RMSPROP, PE_OPT_ADAMAX,   PE_OPT_ADAMW, PE_OPT_LAMB};
    const char *names[] = {"sgd", "momentum", "adam", "adagrad", "rmsprop", "adamax", "adamw", "lamb"};
    for (int k = 0; k < 8; k++) {
        tm_model m = make_mlp(kinds[k]);
        for (int places = 2; places <= 3; places++) {
            trainer off, on;
            trainer_new(&off, &m, places, false, NULL);
            trainer_new(&on, &m, places, true, NULL);
            for (int s = 0; s < STEPS; s++) {
                step(&off, &m, s, NULL, 0, NULL, NULL);
                step(&on, &m, s, NULL, 0, NULL, NULL);
            }
            char what[64];
            snprintf(what, sizeof what, "%s on %d places", names[k], places);
            assert_same_state(&m, &on, &off, places, what);
            trainer_free(&off);
            trainer_free(&on);
        }
        tm_model_free(&m);
    }
}

static int count_in_file(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static void test_graph_and_shared_storage(void **state) {
    (void)state;
    tm_model m = make_mlp(PE_OPT_ADAM);
    char dir[] = "/tmp/pe_shard_XXXXXX", dot[64], cmd[96];
    assert_non_null(mkdtemp(dir));
    snprintf(dot, sizeof dot, "%s/g.dot", dir);
    trainer t;
    trainer_new(&t, &m, 3, true, dot);
    step(&t, &m, 0, NULL, 0, NULL, NULL);
    /* 6 parameters: fc_0.w_0 (784x64 = 50176 elements) in 3 shards, the rest in 1 */
    assert_int_equal(count_in_file(dot, "allreduce + update (shard)"), 3 + 5);
    assert_int_equal(count_in_file(dot, "adam 1/3 of fc_0.w_0@GRAD"), 1);
    assert_int_equal(count_in_file(dot, "adam 3/3 of fc_0.w_0@GRAD"), 1);
    assert_int_equal(count_in_file(dot, "adam\\nplace"), 0);
    assert_int_equal(count_in_file(dot, "allreduce\\n"), 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    /* parameters and moments: one copy; beta powers: one per place, all advanced */
    const pe_block *blk = &m.main->blocks[0];
    int shared = 0, pows = 0;
    for (int i = 0; i < blk->n_vars; i++) {
        const pe_var *v = &blk->vars[i];
        if (!v->persistable || !strcmp(v->name, "learning_rate_0")) continue;
        const pe_tensor *t0 = pe_scope_find_var(pe_place_scope(t.pe, 0), v->name);
        bool pow = strstr(v->name, "beta") != NULL;
        for (int p = 1; p < 3; p++) {
            const pe_tensor *tp = pe_scope_find_var(pe_place_scope(t.pe, p), v->name);
            if (pow) {
                assert_ptr_not_equal(pe_tensor_data(tp), pe_tensor_data(t0));
                assert_memory_equal(pe_tensor_data(tp), pe_tensor_data(t0), pe_tensor_nbytes(t0));
                pows++;
            } else if (pe_tensor_data(tp) == pe_tensor_data(t0)) {
                shared++;
            } else {
                fail_msg("'%s' on place %d is a copy, not place 0's storage", v->name, p);
            }
        }
    }
    assert_int_equal(shared, 2 * 6 * 3); /* param, moment1, moment2 of 6 parameters on places 1, 2 */
    assert_int_equal(pows, 2 * 6 * 2);
    trainer_free(&t);
    tm_model_free(&m);
}

/* lamb's trust ratio needs the whole parameter: its updates are never
 * sharded (they run on every place after the allreduce), the other
 * optimizers' are. */
static void test_lamb_is_not_sharded(void **state) {
    (void)state;
    tm_model m = make_mlp(PE_OPT_LAMB);
    char dir[] = "/tmp/pe_shard_XXXXXX", dot[64], cmd[96];
    assert_non_null(mkdtemp(dir));
    snprintf(dot, sizeof dot, "%s/g.dot", dir);
    trainer t;
    trainer_new(&t, &m, 3, true, dot);
    step(&t, &m, 0, NULL, 0, NULL, NULL);
    assert_int_equal(count_in_file(dot, "(shard)"), 0);
    assert_int_equal(count_in_file(dot, "lamb 1/3"), 0);
    assert_int_equal(count_in_file(dot, "lamb\\nplace"), 6 * 3);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    trainer_free(&t);
    tm_model_free(&m);
}

/* Global-norm clipping rewrites every gradient in place after the
 * exchange, from the norm of all the summed gradients: a shard would sum
 * gradients the clip op has already read unsummed. So no update whose
 * gradient an optimize-role op rewrites is sharded (the allreduce runs
 * first), and the run equals the unsharded one bitwise. */
static void test_global_norm_clip_is_not_sharded(void **state) {
    (void)state;
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.0, true);
    tm_mlp(&m, 64, "relu", 32, "tanh");
    pe_optimizer opt;
    pe_optimizer_default(&opt, PE_OPT_MOMENTUM, 0.05);
    opt.clip_global_norm = 0.05; /* below the gradients' norm: every step clips */
    if (pe_optimizer_minimize(&opt, m.main, m.startup, "loss", NULL, 0, NULL, 0, NULL, 0, NULL, NULL) != PE_OK)
        fail_msg("minimize: %s", pe_last_error());
    char dir[] = "/tmp/pe_shard_XXXXXX", dot[64], cmd[96];
    assert_non_null(mkdtemp(dir));
    snprintf(dot, sizeof dot, "%s/g.dot", dir);
    for (int places = 2; places <= 3; places++) {
        trainer off, on;
        trainer_new(&off, &m, places, false, NULL);
        trainer_new(&on, &m, places, true, places == 3 ? dot : NULL);
        for (int s = 0; s < STEPS; s++) {
            step(&off, &m, s, NULL, 0, NULL, NULL);
            step(&on, &m, s, NULL, 0, NULL, NULL);
        }
        assert_same_state(&m, &on, &off, places, "momentum + clip_by_global_norm");
        trainer_free(&off);
        trainer_free(&on);
    }
    assert_int_equal(count_in_file(dot, "(shard)"), 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    tm_model_free(&m);
}

static void test_fetched_gradient_is_summed(void **state) {
    (void)state;
    tm_model m = make_mlp(PE_OPT_MOMENTUM);
    trainer off, on;
    trainer_new(&off, &m, 3, false, NULL);
    trainer_new(&on, &m, 3, true, NULL);
    pe_tensor *a = pe_tensor_new(), *b = pe_tensor_new();
    step(&off, &m, 0, NULL, 0, "fc_0.w_0@GRAD", a);
    step(&on, &m, 0, NULL, 0, "fc_0.w_0@GRAD", b);
    /* per-place values concatenated: each place's is the sum */
    assert_int_equal(a->dims[0], 3 * 784);
    assert_int_equal(pe_tensor_nbytes(a), pe_tensor_nbytes(b));
    assert_memory_equal(pe_tensor_data(a), pe_tensor_data(b), pe_tensor_nbytes(a));
    pe_tensor_free(a);
    pe_tensor_free(b);
    trainer_free(&off);
    trainer_free(&on);
    tm_model_free(&m);
}

static void test_fed_parameter_stays_exact(void **state) {
    (void)state;
    tm_model m = make_mlp(PE_OPT_MOMENTUM);
    trainer off, on;
    trainer_new(&off, &m, 3, false, NULL);
    trainer_new(&on, &m, 3, true, NULL);
    pe_tensor *w = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){64, 32}, NULL);
    for (int64_t i = 0; i < pe_tensor_numel(w); i++) ((float *)pe_tensor_data(w))[i] = (float)((i % 13) - 6) * 0.01f;
    for (int s = 0; s < STEPS; s++) {
        pe_feed extra = {"fc_1.w_0", w};
        step(&off, &m, s, &extra, s == 1, NULL, NULL);
        step(&on, &m, s, &extra, s == 1, NULL, NULL);
    }
    assert_same_state(&m, &on, &off, 3, "after feeding fc_1.w_0");
    /* the feed gave every place its own copy; the next run shared them again */
    for (int p = 1; p < 3; p++)
        assert_ptr_equal(pe_tensor_data(pe_scope_find_var(pe_place_scope(on.pe, p), "fc_1.w_0")),
                         pe_tensor_data(pe_scope_find_var(pe_place_scope(on.pe, 0), "fc_1.w_0")));
    pe_tensor_free(w);
    trainer_free(&off);
    trainer_free(&on);
    tm_model_free(&m);
}

/* A value set into the scope after construction (a checkpoint loaded into
 * place 0's scope replaces the shared buffer) reaches every place at the
 * next run: place 0's value is the parameter. */
static void test_value_set_after_construction(void **state) {
    (void)state;
    tm_model m = make_mlp(PE_OPT_MOMENTUM);
    pe_tensor *w = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){64, 32}, NULL);
    for (int64_t i = 0; i < pe_tensor_numel(w); i++) ((float *)pe_tensor_data(w))[i] = (float)(i % 7) * 0.05f;
    pe_tensor *got[2];
    for (int k = 0; k < 2; k++) { /* k = 0: 3 places, sharded; k = 1: one place, the reference */
        trainer t;
        trainer_new(&t, &m, k ? 1 : 3, true, NULL);
        step(&t, &m, 0, NULL, 0, NULL, NULL);
        pe_tensor *dst = pe_scope_find_var(pe_place_scope(t.pe, 0), "fc_1.w_0");
        const void *before = pe_tensor_data(dst);
        assert_int_equal(pe_tensor_copy(dst, w, pe_place_cpu(0)), PE_OK);
        if (!k) assert_ptr_not_equal(pe_tensor_data(dst), before); /* shared: the copy took a new buffer */
        got[k] = pe_tensor_new();
        step(&t, &m, 1, NULL, 0, "fc_1.w_0", got[k]); /* fetched after the step's update */
        for (int p = 1; p < (k ? 1 : 3); p++)
            assert_ptr_equal(pe_tensor_data(pe_scope_find_var(pe_place_scope(t.pe, p), "fc_1.w_0")),
                             pe_tensor_data(dst));
        trainer_free(&t);
    }
    /* every place trained from the value set (3 places vs 1: summation order only) */
    for (int64_t i = 0; i < pe_tensor_numel(got[0]); i++) {
        float a = ((float *)pe_tensor_data(got[0]))[i], b = ((float *)pe_tensor_data(got[1]))[i];
        if (fabsf(a - b) > 1e-5f + 1e-4f * fabsf(b)) fail_msg("fc_1.w_0[%lld]: 3 places %g, 1 place %g", (long long)i, a, b);
    }
    pe_tensor_free(got[0]);
    pe_tensor_free(got[1]);
    pe_tensor_free(w);
    tm_model_free(&m);
}

static void test_bad_accumulator_is_an_error(void **state) {
    (void)state;
    tm_model m = make_mlp(PE_OPT_MOMENTUM);
    trainer t;
    trainer_new(&t, &m, 2, true, NULL);
    step(&t, &m, 0, NULL, 0, NULL, NULL);
    /* a velocity of the wrong size (e.g. a checkpoint of another model) */
    pe_tensor *v = pe_scope_find_var(pe_place_scope(t.pe, 0), "fc_1.w_0_velocity_0");
    assert_non_null(v);
    assert_int_equal(pe_tensor_resize(v, PE_DTYPE_FP32, 1, (int64_t[]){7}, pe_place_cpu(0)), PE_OK);
    pe_tensor *x, *y;
    tm_batch(&m, 1, ROWS, &x, &y);
    pe_feed feed[2] = {{m.input, x}, {"label", y}};
    const char *fetch[] = {"loss"};
    pe_tensor *loss = pe_tensor_new();
    assert_int_not_equal(pe_run(t.pe, feed, 2, fetch, 1, true, &loss), PE_OK);
    const char *msg = pe_last_error();
    if (!strstr(msg, "momentum") || !strstr(msg, "fc_1.w_0_velocity_0")) fail_msg("message: %s", msg);
    pe_tensor_free(loss);
    pe_tensor_free(x);
    pe_tensor_free(y);
    trainer_free(&t);
    tm_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bitwise_equal_to_unsharded),
        cmocka_unit_test(test_lamb_is_not_sharded),
        cmocka_unit_test(test_global_norm_clip_is_not_sharded),
        cmocka_unit_test(test_graph_and_shared_storage),
        cmocka_unit_test(test_fetched_gradient_is_summed),
        cmocka_unit_test(test_fed_parameter_stays_exact),
        cmocka_unit_test(test_value_set_after_construction),
        cmocka_unit_test(test_bad_accumulator_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

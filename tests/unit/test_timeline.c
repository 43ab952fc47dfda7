/* tests/unit/test_timeline.c — the ParallelExecutor's timeline
 * (executor/timeline.c; ExecutionStrategy.timeline_path, PE_TIMELINE).
 *
 * The MLP (float32, momentum) trains STEPS steps on 2 places with the
 * timeline on; the trace file (read back with cJSON) must be well formed
 * Chrome trace-event JSON: process "trainer 0", named threads, and per step
 * every op handle of the graph exactly once on its place's track, every
 * collective once on each comm track it belongs to, each inside its step's
 * span on the "steps" track, and spans of one track in time order without
 * overlap (the viewers need proper nesting). Covered: the sharded optimizer
 * (default), per-var allreduce, fuse_all_reduce_ops buckets, collectives
 * completing later through work callbacks (a group over rank communicators,
 * as in test_pe_async_comm.c), and sequential execution. Off (no field, no
 * PE_TIMELINE) writes nothing and the flush is an error; PE_TIMELINE with a
 * directory names the file <dir>/timeline.rank0.json; PE_TIMELINE_MAX_EVENTS
 * caps the events and the file says so.
 */
#include "tests/unit/models.h"
#include "executor/pe_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum { PLACES = 2, STEPS = 3, ROWS = 12 };

typedef struct {
    bool shard;      /* shard_optimizer */
    bool buckets;    /* fuse_all_reduce_ops */
    bool ranks;      /* a group over rank communicators: collectives complete in callbacks */
    bool sequential; /* enable_sequential_execution */
} cfg;

static char g_dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pe_test_timeline.XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    DIR *d = opendir(g_dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    rmdir(g_dir);
    return 0;
}

static int count_files(void) {
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

typedef struct {
    tm_model m;
    pe_scope *scope;
    pe_executor *ex;
    pe_parallel_executor *pe;
} fixture;

/* f->pe: a built executor of the MLP with c's strategies (and the async
 * group), the timeline at `timeline_path` (NULL: PE_TIMELINE decides). */
static void make(fixture *f, const char *timeline_path, const cfg *c) {
    f->m = tm_model_new(PE_DTYPE_FP32, 0.0, false);
    tm_mlp(&f->m, 64, "relu", 32, "tanh");
    tm_minimize(&f->m, PE_OPT_MOMENTUM, 0.05, NULL, 0);
    f->scope = pe_scope_new(NULL);
    f->ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(f->ex, f->m.startup, 0, f->scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_place pl[PLACES] = {pe_place_cpu(0), pe_place_cpu(1)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    o.exec_strategy.num_threads = 3;
    o.exec_strategy.timeline_path = timeline_path;
    o.build_strategy.shard_optimizer = c->shard;
    o.build_strategy.fuse_all_reduce_ops = c->buckets;
    o.build_strategy.enable_sequential_execution = c->sequential;
    if (pe_parallel_executor_new(pl, PLACES, f->m.main, f->scope, &o, &f->pe) != PE_OK) fail_msg("%s", pe_last_error());
    if (c->ranks) {
        pe_comm *ranks[PLACES];
        assert_int_equal(pe_comm_inproc_world_new(PLACES, 1, ranks), PE_OK);
        pe_comm_group *g = pe_comm_group_new(ranks, PLACES);
        assert_non_null(g);
        assert_int_equal(pe_pe_replace_comm(f->pe, g), PE_OK);
    }
}

static void train(const tm_model *m, pe_parallel_executor *pe) {
    const char *fetch[] = {"loss"};
    pe_tensor *loss = pe_tensor_new();
    for (int s = 0; s < STEPS; s++) {
        pe_tensor *x, *y;
        tm_batch(m, s, ROWS, &x, &y);
        pe_feed feed[2] = {{m->input, x}, {"label", y}};
        if (pe_run(pe, feed, 2, fetch, 1, true, &loss) != PE_OK) fail_msg("step %d: %s", s, pe_last_error());
        pe_tensor_free(x);
        pe_tensor_free(y);
    }
    pe_tensor_free(loss);
}

static void done(fixture *f) {
    pe_parallel_executor_free(f->pe);
    pe_executor_free(f->ex);
    pe_scope_free(f->scope);
    tm_model_free(&f->m);
}

static cJSON *load(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("no timeline file '%s'", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    if (!j) fail_msg("'%s' is not JSON near: %.60s", path, cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "?");
    free(buf);
    return j;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("event without a number '%s'", k);
    return v->valuedouble;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(v)) fail_msg("event without a string '%s'", k);
    return v->valuestring;
}

enum { MAX_TID = 1 + (2 * PLACES + 1) * 100 };

/* Checks the trace of `pe` (its graph in use) after STEPS runs. */
static void check_trace(const cJSON *j, const pe_parallel_executor *pe) {
    const pe_ssa_graph *g = pe->g;
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(j, "traceEvents");
    assert_true(cJSON_IsArray(evs));
    char tname[MAX_TID][64];
    memset(tname, 0, sizeof tname);
    bool process_named = false;
    /* the step spans */
    double s0[STEPS], s1[STEPS];
    int n_steps = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        const char *ph = str(e, "ph");
        assert_int_equal((int)num(e, "pid"), 0);
        if (!strcmp(ph, "M")) {
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
            if (!strcmp(str(e, "name"), "process_name")) {
                assert_string_equal(str(args, "name"), "trainer 0");
                process_named = true;
            } else if (!strcmp(str(e, "name"), "thread_name")) {
                int tid = (int)num(e, "tid");
                assert_true(tid > 0 && tid < MAX_TID);
                snprintf(tname[tid], sizeof tname[tid], "%s", str(args, "name"));
            }
            continue;
        }
        assert_string_equal(ph, "X");
        assert_true(num(e, "dur") >= 0);
        if (!strcmp(str(e, "cat"), "step")) {
            int s = (int)num(cJSON_GetObjectItemCaseSensitive(e, "args"), "step");
            assert_int_equal(s, n_steps);
            s0[s] = num(e, "ts");
            s1[s] = s0[s] + num(e, "dur");
            n_steps++;
        }
    }
    assert_true(process_named);
    assert_int_equal(n_steps, STEPS);
    /* every handle's count per step and place, and the tracks */
    int *seen = calloc((size_t)g->n_h * STEPS * PLACES, sizeof *seen);
    double last_end[MAX_TID];
    for (int t = 0; t < MAX_TID; t++) last_end[t] = -1;
    cJSON_ArrayForEach(e, evs) {
        if (strcmp(str(e, "ph"), "X")) continue;
        int tid = (int)num(e, "tid");
        assert_true(tid > 0 && tid < MAX_TID);
        if (!tname[tid][0]) fail_msg("event on tid %d, which has no thread_name", tid);
        double ts = num(e, "ts"), end = ts + num(e, "dur");
        /* in time order, no overlap (1 ns of slack for the printed decimals) */
        if (ts + 1e-3 < last_end[tid]) fail_msg("'%s' at %.3f overlaps the span before it on '%s'", str(e, "name"), ts, tname[tid]);
        last_end[tid] = end;
        const char *cat = str(e, "cat");
        if (!strcmp(cat, "step")) {
            assert_string_equal(tname[tid], "steps");
            continue;
        }
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        int s = (int)num(args, "step");
        assert_true(s >= 0 && s < STEPS);
        if (ts + 1e-3 < s0[s] || end > s1[s] + 1e-3)
            fail_msg("'%s' [%.3f, %.3f] is outside step %d [%.3f, %.3f]", str(e, "name"), ts, end, s, s0[s], s1[s]);
        const char *place = str(args, "place");
        int p = place[4] - '0';
        assert_true(!strncmp(place, "cpu:", 4) && p >= 0 && p < PLACES);
        char want[64];
        int h = -1;
        if (!strcmp(cat, "op")) {
            snprintf(want, sizeof want, "place %d (cpu:%d)", p, p);
            int op = (int)num(args, "op");
            for (int k = 0; k < g->n_h && h < 0; k++)
                if (g->h[k].kind == PE_HANDLE_OP && g->h[k].place == p && g->h[k].op_idx == op) h = k;
            if (h < 0) fail_msg("op event '%s' (op %d, place %d) is no op handle of the graph", str(e, "name"), op, p);
            assert_string_equal(str(e, "name"), g->progs[p]->blocks[0].ops[op].type);
        } else {
            assert_string_equal(cat, "comm");
            snprintf(want, sizeof want, "comm place %d (cpu:%d)", p, p);
            const char *var = str(args, "var");
            const cJSON *shard = cJSON_GetObjectItemCaseSensitive(args, "shard");
            for (int k = 0; k < g->n_h && h < 0; k++) {
                const pe_handle *hd = &g->h[k];
                if (hd->kind == PE_HANDLE_OP || hd->kind == PE_HANDLE_JOIN || strcmp(hd->var, var)) continue;
                if (hd->kind == PE_HANDLE_OPT_SHARD && (!shard || hd->root != p)) continue;
                h = k;
            }
            if (h < 0) fail_msg("comm event '%s' of '%s' on place %d is no collective of the graph", str(e, "name"), var, p);
        }
        if (strncmp(tname[tid], want, strlen(want))) fail_msg("'%s' is on '%s', expected '%s'", str(e, "name"), tname[tid], want);
        seen[((size_t)h * STEPS + (size_t)s) * PLACES + (size_t)p]++;
    }
    /* once per step: op handles on their place, collectives on each place they span */
    int n_comm = 0;
    for (int h = 0; h < g->n_h; h++) {
        const pe_handle *hd = &g->h[h];
        n_comm += hd->kind != PE_HANDLE_OP && hd->kind != PE_HANDLE_JOIN;
        for (int s = 0; s < STEPS; s++)
            for (int p = 0; p < PLACES; p++) {
                int want = hd->kind == PE_HANDLE_OP ? hd->place == p
                           : hd->kind == PE_HANDLE_OPT_SHARD ? hd->root == p
                           : hd->kind != PE_HANDLE_JOIN;
                if (seen[((size_t)h * STEPS + (size_t)s) * PLACES + (size_t)p] != want)
                    fail_msg("handle %d (kind %d, %s) in step %d on place %d: %d events, expected %d", h, hd->kind,
                             hd->kind == PE_HANDLE_OP ? g->progs[hd->place]->blocks[0].ops[hd->op_idx].type : hd->var,
                             s, p, seen[((size_t)h * STEPS + (size_t)s) * PLACES + (size_t)p], want);
            }
    }
    assert_true(n_comm > 0);
    free(seen);
    const cJSON *other = cJSON_GetObjectItemCaseSensitive(j, "otherData");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(other, "capped")));
    assert_int_equal((int)num(other, "steps"), STEPS);
}

static void run_on(const cfg *c, const char *name) {
    char prefix[512], file[600];
    snprintf(prefix, sizeof prefix, "%s/%s", g_dir, name);
    snprintf(file, sizeof file, "%s.rank0.json", prefix);
    fixture f;
    make(&f, prefix, c);
    assert_string_equal(pe_pe_timeline_path(f.pe), file);
    train(&f.m, f.pe);
    assert_int_equal(pe_pe_write_timeline(f.pe, NULL), PE_OK);
    cJSON *j = load(file);
    check_trace(j, f.pe);
    cJSON_Delete(j);
    unlink(file);
    done(&f); /* writes it again at free */
    assert_int_equal(access(file, R_OK), 0);
    unlink(file);
}

static void test_sharded(void **state) {
    (void)state;
    run_on(&(cfg){.shard = true}, "sharded");
}

static void test_allreduce(void **state) {
    (void)state;
    run_on(&(cfg){0}, "allreduce");
}

static void test_buckets_async(void **state) {
    (void)state;
    run_on(&(cfg){.buckets = true, .ranks = true}, "buckets_async");
}

static void test_allreduce_async(void **state) {
    (void)state;
    run_on(&(cfg){.ranks = true}, "allreduce_async");
}

static void test_sequential(void **state) {
    (void)state;
    run_on(&(cfg){.sequential = true, .ranks = true}, "sequential");
}

static void test_off_writes_nothing(void **state) {
    (void)state;
    unsetenv("PE_TIMELINE");
    fixture f;
    make(&f, NULL, &(cfg){.shard = true});
    assert_null(f.pe->tl);
    assert_null(pe_pe_timeline_path(f.pe));
    train(&f.m, f.pe);
    assert_int_equal(pe_pe_write_timeline(f.pe, NULL), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "timeline is off"));
    done(&f);
    assert_int_equal(count_files(), 0);
}

static void test_env_dir_and_cap(void **state) {
    (void)state;
    char dir[300], file[400];
    snprintf(dir, sizeof dir, "%s/", g_dir);
    snprintf(file, sizeof file, "%s/timeline.rank0.json", g_dir);
    setenv("PE_TIMELINE", dir, 1);
    setenv("PE_TIMELINE_MAX_EVENTS", "10", 1);
    fixture f;
    make(&f, NULL, &(cfg){.shard = true});
    unsetenv("PE_TIMELINE");
    unsetenv("PE_TIMELINE_MAX_EVENTS");
    assert_string_equal(pe_pe_timeline_path(f.pe), file);
    train(&f.m, f.pe);
    done(&f);
    cJSON *j = load(file);
    const cJSON *other = cJSON_GetObjectItemCaseSensitive(j, "otherData");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(other, "capped")));
    assert_int_equal((int)num(other, "events"), 10);
    assert_true(num(other, "dropped") > 0);
    int n_x = 0;
    bool labelled = false;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "traceEvents")) {
        if (!strcmp(str(e, "ph"), "X")) n_x++;
        if (!strcmp(str(e, "name"), "process_labels"))
            labelled = strstr(str(cJSON_GetObjectItemCaseSensitive(e, "args"), "labels"), "capped at 10 events") != NULL;
    }
    assert_true(n_x >= 10); /* a collective of both places: one event, two spans */
    assert_true(labelled);
    cJSON_Delete(j);
    unlink(file);
}

static void test_file_names(void **state) {
    (void)state;
    char b[256];
    assert_int_equal(pe_timeline_file_name("/x/run", 0, 3, b, sizeof b), PE_OK);
    assert_string_equal(b, "/x/run.rank3.json");
    assert_int_equal(pe_timeline_file_name("/x/run.json", 2, 0, b, sizeof b), PE_OK);
    assert_string_equal(b, "/x/run.pe2.rank0.json");
    assert_int_equal(pe_timeline_file_name("/x/", 0, 1, b, sizeof b), PE_OK);
    assert_string_equal(b, "/x/timeline.rank1.json");
    assert_int_equal(pe_timeline_file_name("", 0, 1, b, sizeof b), PE_ERR_INVALID);
    assert_int_equal(pe_timeline_file_name("/x/run", 0, 1, b, 8), PE_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_names),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_allreduce),
        cmocka_unit_test(test_buckets_async),
        cmocka_unit_test(test_allreduce_async),
        cmocka_unit_test(test_sequential),
        cmocka_unit_test(test_off_writes_nothing),
        cmocka_unit_test(test_env_dir_and_cap),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

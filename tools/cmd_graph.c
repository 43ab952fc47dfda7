/* tools/cmd_graph.c — `pe graph`: the graph the ParallelExecutor would run,
 * as Graphviz DOT.
 *
 *     pe graph examples/mlp_train.pe --places cpu:2 \
 *         --strategy fuse_gemm_epilogue=1,fuse_all_optimizer_ops=1 -o mlp.dot --dump-dir passes/
 *     pass fuse_gemm_epilogue: 3 fused, 29 -> 19 ops
 *     pass fuse_all_optimizer_ops: 1 fused, 19 -> 14 ops
 *     pass multi_device: 14 ops -> 32 handles on 2 places
 *     wrote mlp.dot
 *
 * Runs the build passes exactly as pe_parallel_executor_new does
 * (pe_build_graph, pe/build.h) with the BuildStrategy switches given by
 * --strategy, writes the final multi-device SSA graph to -o, and with
 * --dump-dir one DOT file per pass (DIR/00_input.dot, DIR/01_<pass>.dot, ...:
 * program graphs with ops as boxes and vars as ellipses, then the SSA
 * graph). --loss names the loss var (as the executor's loss_name: kept, and
 * its gradient seed recognized) and --fetch protects a var from being fused
 * away, as a fetch does in the executor. One summary line per pass goes to
 * stdout.
 */
#include "tool.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct graph_args {
    const char *program, *out, *dump_dir, *loss;
    int n_places;
    pe_build_strategy bs;
    const char **fetch; /* [argc] */
    int n_fetch;
} graph_args;

static int parse_args(int argc, char **argv, graph_args *a) {
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v = NULL;
        int r;
        int prc;
        if (pe_tool_program_arg("graph", arg, &only_pos, &a->program, &prc)) {
            if (prc != PE_EXIT_OK) return prc;
            continue;
        }
#define SINGLE_FLAG(flag, field)                                                                  \
        if ((r = pe_tool_flag(argc, argv, &i, flag, &v)) != 0) {                                   \
            if (r < 0 || !*v) return pe_tool_usage_error("graph", "%s needs a value", flag);        \
            if (a->field) return pe_tool_usage_error("graph", "%s given twice", flag);              \
            a->field = v;                                                                          \
            continue;                                                                              \
        }
        SINGLE_FLAG("-o", out)
        SINGLE_FLAG("--out", out)
        SINGLE_FLAG("--dump-dir", dump_dir)
        SINGLE_FLAG("--loss", loss)
#undef SINGLE_FLAG
        if (pe_tool_places_flag("graph", argc, argv, &i, NULL, &a->n_places, &r) ||
            pe_tool_strategy_flag("graph", argc, argv, &i, &a->bs, &r)) {
            if (r != PE_EXIT_OK) return r;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--fetch", &v)) != 0) {
            if (r < 0 || !*v) return pe_tool_usage_error("graph", "--fetch needs a var NAME");
            a->fetch[a->n_fetch++] = v;
            continue;
        }
        return pe_tool_usage_error("graph", "unknown option '%s'", arg);
    }
    if (!a->program) return pe_tool_usage_error("graph", "missing PROGRAM");
    if (!a->out) return pe_tool_usage_error("graph", "missing -o OUT.dot");
    return PE_EXIT_OK;
}

static int make_dir(const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return pe_tool_fail("--dump-dir '%s': cannot create the directory: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return pe_tool_fail("--dump-dir '%s' is not a directory", dir);
    return PE_EXIT_OK;
}

int pe_cmd_graph(int argc, char **argv) {
    graph_args a;
    memset(&a, 0, sizeof a);
    a.n_places = 1;
    pe_pe_options defaults; /* the executor's BuildStrategy defaults */
    pe_pe_options_default(&defaults);
    a.bs = defaults.build_strategy;
    a.fetch = calloc((size_t)argc, sizeof *a.fetch);
    if (!a.fetch) return pe_tool_fail("out of memory");
    int rc = parse_args(argc, argv, &a);
    char prefix[4096];
    if (rc == PE_EXIT_OK && a.dump_dir) {
        size_t n = strlen(a.dump_dir);
        if (n + 2 > sizeof prefix) rc = pe_tool_fail("--dump-dir '%s': path too long", a.dump_dir);
        else {
            snprintf(prefix, sizeof prefix, "%s%s", a.dump_dir, a.dump_dir[n - 1] == '/' ? "" : "/");
            rc = make_dir(a.dump_dir);
        }
    }
    pe_program *p = NULL;
    if (rc == PE_EXIT_OK) {
        pe_status st = pe_program_load_file(a.program, &p);
        if (st != PE_OK) rc = pe_tool_fail_file(st, a.program);
    }
    if (rc == PE_EXIT_OK && a.loss && !pe_program_find_var(p, 0, a.loss))
        rc = pe_tool_fail("--loss '%s' is not a variable of block 0 of %s", a.loss, a.program);
    for (int i = 0; rc == PE_EXIT_OK && i < a.n_fetch; i++)
        if (!pe_program_find_var(p, 0, a.fetch[i]))
            rc = pe_tool_fail("--fetch '%s' is not a variable of block 0 of %s", a.fetch[i], a.program);
    if (rc == PE_EXIT_OK) {
        pe_build_opts bo = {.n_places = a.n_places, .loss_name = a.loss, .bs = &a.bs, .protect = a.fetch,
                            .n_protect = a.n_fetch, .dump_prefix = a.dump_dir ? prefix : NULL, .final_dot = a.out};
        pe_build_report res;
        pe_status st = pe_build_graph(p, &bo, &res);
        if (st != PE_OK) {
            rc = pe_tool_fail_status(st, "building the graph of %s", a.program);
        } else {
            for (int i = 0; i < res.n; i++) {
                const pe_build_pass_stat *s = &res.s[i];
                if (!strcmp(s->name, "multi_device"))
                    printf("pass %s: %d ops -> %d handles on %d place%s\n", s->name, s->ops_before, s->ops_after,
                           a.n_places, a.n_places > 1 ? "s" : "");
                else if (s->skipped)
                    printf("pass %s: not applied (see the warning)\n", s->name);
                else
                    printf("pass %s: %d fused, %d -> %d ops\n", s->name, s->n_fused, s->ops_before, s->ops_after);
            }
            if (a.dump_dir) printf("wrote per-pass graphs to %s\n", a.dump_dir);
            printf("wrote %s\n", a.out);
        }
    }
    pe_program_free(p);
    free(a.fetch);
    return rc;
}

/* tools/cmd_run.c — `pe run`: run block 0 of a program with .npy feeds.
 *
 *     pe run mlp.pe --startup mlp_infer_startup.pe --feed x=x.npy --fetch prob --out out/
 *
 * Steps, each failing with one "pe: error:" line that names the file, var
 * or op: parse the command line (usage errors first, before any file is
 * touched) -> load PROGRAM and the startup program -> run the startup
 * program into a fresh scope -> load --params -> check the persistables
 * against PROGRAM's declarations -> load every feed -> check
 * that every program input is fed -> (--backward LOSS: append the gradient
 * ops of LOSS) -> run block 0 on cpu:0, or on N CPU places through the
 * ParallelExecutor with --places cpu:N -> print a summary
 * of each fetch and write it to DIR/<file name>.npy -> --save. A feed
 * may carry a LoD (sequences): --lod NAME=0,2,5 gives its offsets, levels
 * separated by '/' (--lod x=0,1,2/0,2,5). Without
 * --fetch, an inference model's recorded fetch vars (program fetch_names,
 * from pe.static.save_inference_model) are fetched.
 *
 * Several processes (`mpirun -np N pe run`, or `--trainers N`:
 * tools/trainers.c): each trainer feeds its share of every non-persistable
 * feed to a ParallelExecutor with num_trainers = N, the fetches are
 * gathered from all trainers in trainer order, and trainer 0 alone prints
 * and writes the files.
 *
 * The "program input not fed" check walks block 0 once: a var that an op
 * reads before any op writes it must come from a feed (or, when persistable,
 * from --startup / --params). The executor would also fail (naming the op),
 * but this message tells a CLI user which flag is missing before anything
 * runs.
 */
#include "tool.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { SUMMARY_VALUES = 10 };

typedef struct feed_arg {
    char *name;         /* owned copy of NAME from NAME=FILE */
    const char *path;   /* points into argv */
    const char *lod;    /* --lod NAME=SPEC: SPEC, pointing into argv; NULL: none */
    pe_tensor *t;
} feed_arg;

typedef struct run_args {
    const char *program, *startup, *params, *save, *out_dir, *backward;
    int n_places;        /* 1 = the single-place executor */
    pe_place_kind place_kind; /* --places cpu:N or cuda:N */
    int trainers;        /* --trainers N (0: not given) */
    int n_trainers, trainer; /* this process's world: mpirun's or Paddle's env (tools/trainers.c) */
    int n_feeds, n_fetch;
    feed_arg *feeds;     /* [argc] */
    const char **fetch;  /* [argc], deduplicated */
} run_args;

/* ---- command line ------------------------------------------------------- */

/* "cpu", "cpu:0", "cpu:1" = one place; "cpu:N" = N CPU places run by the
 * ParallelExecutor (feeds split along axis 0, fetches concatenated); the
 * same for "cuda", "cuda:N" on the first N visible GPUs. */
static int parse_args(int argc, char **argv, run_args *a) {
    bool only_pos = false;
    const char *lods[64]; /* --lod values, matched to the feeds at the end */
    int n_lods = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v = NULL;
        int r;
        int prc;
        if (pe_tool_program_arg("run", arg, &only_pos, &a->program, &prc)) {
            if (prc != PE_EXIT_OK) return prc;
            continue;
        }
#define SINGLE_FLAG(flag, field)                                                                          \
        if ((r = pe_tool_flag(argc, argv, &i, flag, &v)) != 0) {                                           \
            if (r < 0) return pe_tool_usage_error("run", "%s needs a value", flag);                        \
            if (!*v) return pe_tool_usage_error("run", "%s needs a non-empty value", flag);                \
            if (a->field) return pe_tool_usage_error("run", "%s given twice", flag);                       \
            a->field = v;                                                                                  \
            continue;                                                                                      \
        }
        SINGLE_FLAG("--startup", startup)
        SINGLE_FLAG("--params", params)
        SINGLE_FLAG("--save", save)
        SINGLE_FLAG("--out", out_dir)
        SINGLE_FLAG("--backward", backward)
#undef SINGLE_FLAG
        if (pe_tool_trainers_flag("run", argc, argv, &i, &a->trainers, &r)) {
            if (r != PE_EXIT_OK) return r;
            continue;
        }
        if (pe_tool_places_flag("run", argc, argv, &i, &a->place_kind, &a->n_places, &r)) {
            if (r != PE_EXIT_OK) return r;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--feed", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error("run", "--feed needs a value NAME=FILE.npy");
            const char *eq = strchr(v, '=');
            if (!eq) return pe_tool_usage_error("run", "--feed '%s' is not NAME=FILE.npy", v);
            if (eq == v) return pe_tool_usage_error("run", "--feed '%s' has an empty NAME", v);
            if (!eq[1]) return pe_tool_usage_error("run", "--feed '%s' has an empty FILE", v);
            char *name = strndup(v, (size_t)(eq - v));
            if (!name) return pe_tool_fail("out of memory parsing --feed");
            for (int k = 0; k < a->n_feeds; k++)
                if (!strcmp(a->feeds[k].name, name)) {
                    int rc = pe_tool_usage_error("run", "--feed '%s' given twice", name);
                    free(name);
                    return rc;
                }
            a->feeds[a->n_feeds].name = name;
            a->feeds[a->n_feeds].path = eq + 1;
            a->n_feeds++;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--lod", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error("run", "--lod needs a value NAME=OFFSETS (0,2,5; levels split by /)");
            const char *eq = strchr(v, '=');
            if (!eq || eq == v || !eq[1]) return pe_tool_usage_error("run", "--lod '%s' is not NAME=OFFSETS", v);
            if (n_lods == 64) return pe_tool_usage_error("run", "more than 64 --lod flags");
            lods[n_lods++] = v;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--fetch", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error("run", "--fetch needs a var NAME");
            if (!*v) return pe_tool_usage_error("run", "--fetch needs a non-empty NAME");
            bool dup = false;
            for (int k = 0; k < a->n_fetch; k++) dup = dup || !strcmp(a->fetch[k], v);
            if (!dup) a->fetch[a->n_fetch++] = v;
            continue;
        }
        return pe_tool_usage_error("run", "unknown option '%s'", arg);
    }
    for (int l = 0; l < n_lods; l++) {
        const char *eq = strchr(lods[l], '=');
        feed_arg *f = NULL;
        for (int k = 0; k < a->n_feeds && !f; k++)
            if (strlen(a->feeds[k].name) == (size_t)(eq - lods[l]) && !strncmp(a->feeds[k].name, lods[l], (size_t)(eq - lods[l])))
                f = &a->feeds[k];
        if (!f) return pe_tool_usage_error("run", "--lod '%s' names no --feed", lods[l]);
        if (f->lod) return pe_tool_usage_error("run", "--lod for '%s' given twice", f->name);
        f->lod = eq + 1;
    }
    if (!a->program) return pe_tool_usage_error("run", "missing PROGRAM");
    if (!a->out_dir) a->out_dir = ".";
    if (a->n_places < 1) a->n_places = 1;
    return PE_EXIT_OK;
}

/* ---- --lod ---------------------------------------------------------------- */

/* f->t's LoD from f->lod ("0,2,5", levels split by '/'). */
static int set_feed_lod(feed_arg *f) {
    int64_t *offs[PE_MAX_LOD_LEVELS] = {0}, n[PE_MAX_LOD_LEVELS] = {0};
    int levels = 0, rc = PE_EXIT_OK;
    const char *p = f->lod;
    while (rc == PE_EXIT_OK) {
        if (levels == PE_MAX_LOD_LEVELS) {
            rc = pe_tool_fail("--lod %s=%s: more than %d levels", f->name, f->lod, PE_MAX_LOD_LEVELS);
            break;
        }
        size_t cap = strlen(p) / 2 + 2;
        if (!(offs[levels] = malloc(sizeof(int64_t) * cap))) {
            rc = pe_tool_fail("out of memory parsing --lod");
            break;
        }
        for (;;) {
            char *end;
            errno = 0;
            long long v = strtoll(p, &end, 10);
            if (end == p || errno) {
                rc = pe_tool_fail("--lod %s=%s: '%s' is not a list of offsets (0,2,5; levels split by /)", f->name,
                                  f->lod, p);
                break;
            }
            offs[levels][n[levels]++] = v;
            p = end;
            if (*p != ',') break;
            p++;
        }
        levels++;
        if (rc != PE_EXIT_OK || *p != '/') break;
        p++;
    }
    if (rc == PE_EXIT_OK && *p)
        rc = pe_tool_fail("--lod %s=%s: unexpected '%s'", f->name, f->lod, p);
    if (rc == PE_EXIT_OK) {
        pe_status st = pe_tensor_set_lod(f->t, levels, (const int64_t *const *)offs, n);
        if (st != PE_OK) rc = pe_tool_fail_status(st, "--lod %s=%s", f->name, f->lod);
    }
    for (int l = 0; l < PE_MAX_LOD_LEVELS; l++) free(offs[l]);
    return rc;
}

/* ---- fetch output file names -------------------------------------------- */

/* Var name -> file name: keep [A-Za-z0-9._-@], everything else becomes '_',
 * and a leading '.' becomes '_' (no hidden files, no "." or ".."). */
static void sanitize_name(const char *name, char *out, size_t n) {
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < n; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || c == '-' || c == '@';
        out[k] = ok && !(k == 0 && c == '.') ? c : '_';
        k++;
    }
    out[k] = '\0';
}

static int fetch_path(const run_args *a, int i, char *buf, size_t n) {
    char file[256];
    sanitize_name(a->fetch[i], file, sizeof file);
    int len = snprintf(buf, n, "%s%s%s.npy", a->out_dir,
                       a->out_dir[strlen(a->out_dir) - 1] == '/' ? "" : "/", file);
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

/* Two fetch names that map to one file would overwrite each other. */
static int check_fetch_paths(const run_args *a) {
    char p1[4096], p2[4096];
    for (int i = 0; i < a->n_fetch; i++) {
        if (fetch_path(a, i, p1, sizeof p1) != 0)
            return pe_tool_fail("fetch '%s': output path under '%s' is too long", a->fetch[i], a->out_dir);
        for (int j = 0; j < i; j++) {
            if (fetch_path(a, j, p2, sizeof p2) == 0 && !strcmp(p1, p2))
                return pe_tool_fail("fetches '%s' and '%s' would both be written to '%s' (names are "
                                    "sanitized for files); fetch them in separate runs",
                                    a->fetch[j], a->fetch[i], p1);
        }
    }
    return PE_EXIT_OK;
}

/* mkdir -p */
static int make_dirs(const char *dir) {
    char path[4096];
    size_t n = strlen(dir);
    if (n >= sizeof path) return pe_tool_fail("--out '%s': path too long", dir);
    memcpy(path, dir, n + 1);
    for (size_t k = 1; k <= n; k++) {
        if (path[k] != '/' && path[k] != '\0') continue;
        char saved = path[k];
        path[k] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return pe_tool_fail("--out '%s': cannot create directory '%s': %s", dir, path, strerror(errno));
        path[k] = saved;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return pe_tool_fail("--out '%s' is not a directory", dir);
    return PE_EXIT_OK;
}

/* ---- fetch summary ------------------------------------------------------ */

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
        float f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    } else {
        u = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double value_at(const pe_tensor *t, int64_t i) {
    const char *d = pe_tensor_data(t);
    switch (t->dtype) {
    case PE_DTYPE_FP32: return ((const float *)d)[i];
    case PE_DTYPE_FP64: return ((const double *)d)[i];
    case PE_DTYPE_INT32: return ((const int32_t *)d)[i];
    case PE_DTYPE_INT64: return (double)((const int64_t *)d)[i];
    case PE_DTYPE_UINT8: return ((const uint8_t *)d)[i];
    case PE_DTYPE_BOOL: return ((const uint8_t *)d)[i] != 0;
    case PE_DTYPE_FP16: return half_to_float(((const uint16_t *)d)[i]);
    case PE_DTYPE_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)d)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    default: return NAN;
    }
}

static void print_value(const pe_tensor *t, int64_t i) {
    if (t->dtype == PE_DTYPE_INT64)
        printf("%" PRId64, ((const int64_t *)pe_tensor_data(t))[i]);
    else if (t->dtype == PE_DTYPE_BOOL)
        printf("%s", value_at(t, i) != 0 ? "true" : "false");
    else
        printf("%.6g", value_at(t, i));
}

static void print_summary(const char *name, const pe_tensor *t, const char *path) {
    char shape[160];
    int64_t n = pe_tensor_numel(t);
    printf("%s: %s %s -> %s\n", name, pe_dtype_name(t->dtype), pe_dims_str(t->ndim, t->dims, shape, sizeof shape),
           path);
    if (n <= 0 || !pe_tensor_has_data(t)) return;
    printf("  [");
    int64_t shown = n < SUMMARY_VALUES ? n : SUMMARY_VALUES;
    for (int64_t i = 0; i < shown; i++) {
        if (i) printf(", ");
        print_value(t, i);
    }
    printf("%s]\n", shown < n ? ", ..." : "");
    if (shown == n) return;
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = value_at(t, i);
        if (!isfinite(v)) {
            nonfinite++;
            continue;
        }
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += v;
    }
    if (nonfinite < n)
        printf("  %" PRId64 " values: min %.6g, max %.6g, mean %.6g", n, lo, hi, sum / (double)(n - nonfinite));
    else
        printf("  %" PRId64 " values", n);
    if (nonfinite) printf(", %" PRId64 " not finite", nonfinite);
    printf("\n");
}

/* ---- the run ------------------------------------------------------------ */

static bool is_fed(const run_args *a, const char *name) {
    for (int k = 0; k < a->n_feeds; k++)
        if (!strcmp(a->feeds[k].name, name)) return true;
    return false;
}

/* Every var read before it is written must be fed, or be persistable and
 * already hold a value in scope (from the startup program or --params). */
static int check_inputs_fed(const run_args *a, const pe_program *prog, const pe_scope *scope) {
    const pe_block *b = &prog->blocks[0];
    char *written = calloc((size_t)(b->n_vars ? b->n_vars : 1), 1);
    if (!written) return pe_tool_fail("out of memory checking the feeds of '%s'", a->program);
    int rc = PE_EXIT_OK;
    for (int i = 0; i < b->n_ops && rc == PE_EXIT_OK; i++) {
        const pe_op *op = &b->ops[i];
        for (int s = 0; s < op->n_inputs && rc == PE_EXIT_OK; s++)
            for (int k = 0; k < op->inputs[s].n_args && rc == PE_EXIT_OK; k++) {
                const char *name = op->inputs[s].args[k];
                const pe_var *v = pe_block_find_var(b, name);
                if (!v || written[v - b->vars] || is_fed(a, name)) continue;
                const pe_tensor *t = pe_scope_find_var(scope, name);
                if (t && (pe_tensor_has_data(t) || pe_tensor_numel(t) == 0)) continue;
                if (v->persistable)
                    rc = pe_tool_fail("%s: persistable var '%s' (input %s of op %d %s) has no value: "
                                      "initialize it with --startup PROGRAM or --params CKPT%s",
                                      a->program, name, op->inputs[s].name, i, op->type,
                                      a->startup || a->params ? " (the ones given do not set it)" : "");
                else
                    rc = pe_tool_fail("%s: var '%s' (input %s of op %d %s) is never fed or computed: "
                                      "add --feed %s=FILE.npy",
                                      a->program, name, op->inputs[s].name, i, op->type, name);
            }
        for (int s = 0; s < op->n_outputs; s++)
            for (int k = 0; k < op->outputs[s].n_args; k++) {
                const pe_var *v = pe_block_find_var(b, op->outputs[s].args[k]);
                if (v) written[v - b->vars] = 1;
            }
    }
    free(written);
    return rc;
}

/* The values the startup program (or --params) put in scope must have the
 * dtype and shape PROGRAM declares for them (-1 matching any size): a
 * startup program written for another model would otherwise surface as a
 * confusing kernel error, or not at all. */
static int check_persistables(const run_args *a, const pe_program *prog, const pe_scope *scope) {
    const pe_block *b = &prog->blocks[0];
    for (int i = 0; i < b->n_vars; i++) {
        const pe_var *v = &b->vars[i];
        const pe_tensor *t = v->persistable ? pe_scope_find_var(scope, v->name) : NULL;
        if (!t || !pe_tensor_has_data(t)) continue;
        bool ok = t->dtype == v->dtype && t->ndim == v->ndim;
        for (int d = 0; ok && d < v->ndim; d++) ok = v->dims[d] < 0 || v->dims[d] == t->dims[d];
        if (ok) continue;
        char got[160], want[160];
        return pe_tool_fail("%s: persistable var '%s' holds %s %s after %s, the program declares %s %s", a->program,
                            v->name, pe_dtype_name(t->dtype), pe_dims_str(t->ndim, t->dims, got, sizeof got),
                            a->startup && a->params ? "--startup and --params" : a->startup ? "--startup" : "--params",
                            pe_dtype_name(v->dtype), pe_dims_str(v->ndim, v->dims, want, sizeof want));
    }
    return PE_EXIT_OK;
}

/* --backward LOSS: gradients of LOSS for every fed float var and every
 * parameter (fetch them as NAME@GRAD). */
static int append_backward(const run_args *a, pe_program *prog) {
    const pe_block *b = &prog->blocks[0];
    const char **inputs = calloc((size_t)b->n_vars + 1, sizeof *inputs);
    char **grads = calloc((size_t)b->n_vars + 1, sizeof *grads);
    int n = 0, rc = PE_EXIT_OK;
    if (!inputs || !grads) {
        free(inputs);
        free(grads);
        return pe_tool_fail_status(PE_ERR_NOMEM, "--backward");
    }
    for (int i = 0; i < b->n_vars; i++) {
        const pe_var *v = &b->vars[i];
        bool fl = v->dtype == PE_DTYPE_FP32 || v->dtype == PE_DTYPE_FP64;
        if (fl && !v->stop_gradient && (v->is_parameter || is_fed(a, v->name))) inputs[n++] = v->name;
    }
    const char *targets[] = {a->backward};
    pe_status st = pe_gradients(prog, targets, 1, inputs, n, grads);
    if (st != PE_OK) rc = pe_tool_fail_status(st, "--backward %s", a->backward);
    /* a fetched NAME@GRAD that the pass could not make: say why */
    for (int i = 0; rc == PE_EXIT_OK && i < a->n_fetch; i++) {
        const char *f = a->fetch[i];
        size_t len = strlen(f);
        if (len <= 5 || strcmp(f + len - 5, "@GRAD") != 0 || pe_block_find_var(b, f)) continue;
        char base[512];
        snprintf(base, sizeof base, "%.*s", (int)(len - 5), f);
        const pe_var *v = pe_block_find_var(b, base);
        if (v && v->stop_gradient)
            rc = pe_tool_fail("fetch '%s': --backward %s gives '%s' no gradient: it is stop_gradient (data vars "
                              "are, by default; declare it with stop_gradient=False)", f, a->backward, base);
        else if (v && !v->is_parameter && !is_fed(a, base))
            rc = pe_tool_fail("fetch '%s': --backward %s makes gradients of the parameters and the fed float vars "
                              "only; '%s' is neither", f, a->backward, base);
    }
    for (int i = 0; i < n; i++) free(grads[i]);
    free(grads);
    free(inputs);
    return rc;
}

/* ---- several trainers ----------------------------------------------------- */

/* This trainer's rows of every non-persistable feed (the last trainers take
 * the extra rows: pe_batch_shard); a persistable feed goes whole to each. */
static int shard_feeds(const run_args *a, const pe_program *prog, pe_feed *feeds, pe_tensor **views) {
    for (int i = 0; i < a->n_feeds; i++) {
        const pe_var *v = pe_block_find_var(&prog->blocks[0], feeds[i].name);
        const pe_tensor *t = feeds[i].tensor;
        if ((v && v->persistable) || t->ndim < 1) continue;
        if (t->lod)
            return pe_tool_fail("feed '%s' has a LoD (--lod): LoD feeds are not split across trainers; run one "
                                "trainer (its places split them by sequences)", feeds[i].name);
        int64_t rows = t->dims[0], first;
        if (rows < (int64_t)a->n_trainers * a->n_places)
            return pe_tool_fail("feed '%s' has %lld rows, fewer than the %d trainers x %d places: each place needs "
                                "at least one row", feeds[i].name, (long long)rows, a->n_trainers, a->n_places);
        int64_t mine = pe_batch_shard(rows, a->n_trainers, a->trainer, &first);
        pe_status st = pe_tool_rows_view(views[i], t, first, mine);
        if (st != PE_OK) return pe_tool_fail_status(st, "feed '%s'", feeds[i].name);
        feeds[i].tensor = views[i];
    }
    return PE_EXIT_OK;
}

/* A fetch of every trainer, concatenated along axis 0 in trainer order (a
 * persistable: trainer 0's, the same on all): each trainer's row count is
 * summed into a table, then each puts its rows at its offset of a zeroed
 * tensor of all rows and the tensors are summed (x + 0 = x). */
static int gather_fetch(const run_args *a, pe_parallel_executor *pe, const pe_program *prog, const char *name,
                        pe_tensor *t) {
    const pe_var *v = pe_block_find_var(&prog->blocks[0], name);
    if (v && v->persistable) return PE_EXIT_OK;
    int64_t *counts = calloc((size_t)a->n_trainers, sizeof *counts);
    if (!counts) return pe_tool_fail_status(PE_ERR_NOMEM, "fetch '%s'", name);
    int ndim = t->ndim ? t->ndim : 1;
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, t->dims, sizeof dims);
    if (!t->ndim) dims[0] = 1;
    counts[a->trainer] = dims[0];
    pe_status st = pe_trainers_allreduce(pe, counts, a->n_trainers, PE_DTYPE_INT64);
    int64_t before = 0, total = 0;
    for (int k = 0; k < a->n_trainers; k++) {
        before += k < a->trainer ? counts[k] : 0;
        total += counts[k];
    }
    free(counts);
    pe_tensor *all = st == PE_OK ? pe_tensor_new() : NULL;
    if (st == PE_OK && !all) st = PE_ERR_NOMEM;
    if (st == PE_OK) {
        int64_t gd[PE_MAX_DIMS];
        memcpy(gd, dims, sizeof gd);
        gd[0] = total;
        st = pe_tensor_resize(all, t->dtype, ndim, gd, pe_place_cpu(0));
    }
    if (st == PE_OK) {
        size_t row = (size_t)pe_dims_prod(dims, 1, ndim) * pe_dtype_size(t->dtype);
        memset(pe_tensor_data(all), 0, pe_tensor_nbytes(all));
        if (pe_tensor_nbytes(t))
            memcpy((char *)pe_tensor_data(all) + (size_t)before * row, pe_tensor_data(t), pe_tensor_nbytes(t));
        st = pe_trainers_allreduce(pe, pe_tensor_data(all), pe_tensor_numel(all), t->dtype);
    }
    if (st == PE_OK) st = pe_tensor_copy(t, all, pe_place_cpu(0));
    pe_tensor_free(all);
    if (st != PE_OK) return pe_tool_fail_status(st, "fetch '%s': gathering the %d trainers' rows", name, a->n_trainers);
    return PE_EXIT_OK;
}

static int run(const run_args *a) {
    int rc = PE_EXIT_FAIL;
    pe_status st;
    pe_program *prog = NULL, *startup = NULL;
    pe_scope *scope = NULL;
    pe_executor *ex = NULL;
    pe_feed *feeds = NULL;
    pe_tensor **out = NULL, **views = NULL;

    if ((rc = check_fetch_paths(a)) != PE_EXIT_OK) return rc;
    rc = PE_EXIT_FAIL;
    if ((st = pe_program_load_file(a->program, &prog)) != PE_OK) {
        rc = pe_tool_fail_file(st, a->program);
        goto done;
    }
    if (prog->n_blocks < 1) {
        rc = pe_tool_fail("%s: the program has no blocks", a->program);
        goto done;
    }
    /* An inference model (pe.static.save_inference_model) records its
     * fetch vars: without --fetch, those are fetched. */
    run_args with_fetch;
    if (!a->n_fetch && prog->n_fetch_names > 0) {
        with_fetch = *a;
        with_fetch.fetch = (const char **)prog->fetch_names;
        with_fetch.n_fetch = prog->n_fetch_names;
        a = &with_fetch;
        if ((rc = check_fetch_paths(a)) != PE_EXIT_OK) goto done;
        rc = PE_EXIT_FAIL;
    }
    if (a->startup && (st = pe_program_load_file(a->startup, &startup)) != PE_OK) {
        rc = pe_tool_fail_file(st, a->startup);
        goto done;
    }
    if (startup && startup->n_blocks < 1) {
        rc = pe_tool_fail("%s: the startup program has no blocks", a->startup);
        goto done;
    }
    scope = pe_scope_new(NULL);
    ex = scope ? pe_executor_new(a->place_kind == PE_PLACE_CUDA ? pe_place_cuda(0) : pe_place_cpu(0)) : NULL;
    feeds = calloc((size_t)a->n_feeds + 1, sizeof *feeds);
    out = calloc((size_t)a->n_fetch + 1, sizeof *out);
    views = calloc((size_t)a->n_feeds + 1, sizeof *views);
    bool views_ok = views != NULL;
    for (int i = 0; views && i < a->n_feeds; i++) views_ok = (views[i] = pe_tensor_new()) && views_ok;
    if (!scope || !ex || !feeds || !out || !views_ok) {
        rc = pe_tool_fail_status(PE_ERR_NOMEM, "setting up the run");
        goto done;
    }
    pe_tool_sigint_catch(true); /* Ctrl-C from here to the end of the run: exit 130 */
    if (startup && (st = pe_executor_run(ex, startup, 0, scope, NULL, 0, NULL, 0, NULL)) != PE_OK) {
        rc = pe_tool_fail_status(st, "startup program %s", a->startup);
        goto done;
    }
    if (a->params && (st = pe_checkpoint_load(a->params, prog, scope)) != PE_OK) {
        rc = pe_tool_fail_file(st, a->params);
        goto done;
    }
    if ((a->startup || a->params) && (rc = check_persistables(a, prog, scope)) != PE_EXIT_OK) goto done;
    rc = PE_EXIT_FAIL;
    for (int i = 0; i < a->n_feeds; i++) {
        feed_arg *f = &a->feeds[i];
        if (!(f->t = pe_tensor_new())) {
            rc = pe_tool_fail_status(PE_ERR_NOMEM, "feed '%s'", f->name);
            goto done;
        }
        if ((st = pe_npy_load(f->path, f->t)) != PE_OK) {
            rc = strstr(pe_last_error(), f->path) ? pe_tool_fail_status(st, "feed '%s'", f->name)
                                                  : pe_tool_fail_status(st, "feed '%s' (%s)", f->name, f->path);
            goto done;
        }
        if (f->lod && (rc = set_feed_lod(f)) != PE_EXIT_OK) goto done;
        rc = PE_EXIT_FAIL;
        feeds[i].name = f->name;
        feeds[i].tensor = f->t;
    }
    if (a->backward && (rc = append_backward(a, prog)) != PE_EXIT_OK) goto done;
    if ((rc = check_inputs_fed(a, prog, scope)) != PE_EXIT_OK) goto done;
    rc = PE_EXIT_FAIL;
    for (int i = 0; i < a->n_fetch; i++)
        if (!(out[i] = pe_tensor_new())) {
            rc = pe_tool_fail_status(PE_ERR_NOMEM, "fetch '%s'", a->fetch[i]);
            goto done;
        }
    if (a->n_trainers > 1 && (rc = shard_feeds(a, prog, feeds, views)) != PE_EXIT_OK) goto done;
    if (pe_tool_sigint) {
        rc = pe_tool_interrupted("%s: stopped before the run", a->program);
        goto done;
    }
    rc = PE_EXIT_FAIL;
    if (a->n_places > 1 || a->n_trainers > 1) {
        pe_place places[64];
        pe_tool_places_fill(a->place_kind, a->n_places, places);
        pe_pe_options o;
        pe_pe_options_default(&o);
        o.loss_name = a->backward;
        o.num_trainers = a->n_trainers;
        o.trainer_id = a->trainer;
        pe_parallel_executor *pe = NULL;
        st = pe_parallel_executor_new(places, a->n_places, prog, scope, &o, &pe);
        if (st == PE_OK) st = pe_run(pe, feeds, a->n_feeds, a->fetch, a->n_fetch, true, out);
        int grc = PE_EXIT_OK; /* several trainers: every trainer's rows of each fetch */
        for (int i = 0; st == PE_OK && a->n_trainers > 1 && i < a->n_fetch && grc == PE_EXIT_OK; i++)
            grc = gather_fetch(a, pe, prog, a->fetch[i], out[i]);
        pe_parallel_executor_free(pe);
        if (grc != PE_EXIT_OK) {
            rc = grc;
            goto done;
        }
    } else {
        st = pe_executor_run(ex, prog, 0, scope, feeds, a->n_feeds, a->fetch, a->n_fetch, out);
    }
    pe_tool_sigint_catch(false);
    if (st != PE_OK) {
        rc = pe_tool_fail_status(st, "%s", a->program);
        goto done;
    }
    if (pe_tool_sigint) { /* came as the run ended */
        rc = pe_tool_interrupted("%s: after the run; nothing written", a->program);
        goto done;
    }
    /* with several trainers, trainer 0 writes the files (every trainer holds the same values) */
    if (a->trainer > 0) {
        rc = PE_EXIT_OK;
        goto done;
    }
    if (a->n_fetch && (rc = make_dirs(a->out_dir)) != PE_EXIT_OK) goto done;
    rc = PE_EXIT_FAIL;
    for (int i = 0; i < a->n_fetch; i++) {
        char path[4096];
        fetch_path(a, i, path, sizeof path); /* length checked by check_fetch_paths */
        if ((st = pe_npy_save(path, out[i])) != PE_OK) {
            rc = pe_tool_fail_status(st, "fetch '%s'", a->fetch[i]);
            goto done;
        }
        print_summary(a->fetch[i], out[i], path);
    }
    if (!a->n_fetch) printf("ran %s (no --fetch given)\n", a->program);
    if (a->save) {
        if ((st = pe_checkpoint_save(a->save, prog, scope)) != PE_OK) {
            rc = pe_tool_fail_file(st, a->save);
            goto done;
        }
        printf("saved persistables to %s\n", a->save);
    }
    rc = PE_EXIT_OK;
done:
    pe_tool_sigint_catch(false);
    for (int i = 0; out && i < a->n_fetch; i++) pe_tensor_free(out[i]);
    free(out);
    for (int i = 0; views && i < a->n_feeds; i++) pe_tensor_free(views[i]);
    free(views);
    free(feeds);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_program_free(startup);
    pe_program_free(prog);
    return rc;
}

int pe_cmd_run(int argc, char **argv) {
    run_args a = {0};
    a.feeds = calloc((size_t)argc, sizeof *a.feeds);
    a.fetch = calloc((size_t)argc, sizeof *a.fetch);
    int rc;
    if (!a.feeds || !a.fetch)
        rc = pe_tool_fail("out of memory parsing the command line");
    else if ((rc = parse_args(argc, argv, &a)) == PE_EXIT_OK &&
             pe_tool_trainers_start("run", argc, argv, a.trainers, &a.n_trainers, &a.trainer, &rc))
        rc = run(&a);
    for (int i = 0; a.feeds && i < a.n_feeds; i++) {
        pe_tensor_free(a.feeds[i].t);
        free(a.feeds[i].name);
    }
    free(a.feeds);
    free(a.fetch);
    return pe_tool_trainer_exit(rc);
}

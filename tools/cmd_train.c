/* tools/cmd_train.c — `pe train`: turn a forward program into a training
 * program and train it on .npy batches.
 *
 *     pe train examples/mlp_forward.pe --startup examples/mlp_forward_startup.pe \
 *         --loss loss --optimizer momentum --lr 0.05 --momentum 0.9 \
 *         --data batches/ --steps 200 --log loss.npy --save trained.safetensors
 *
 * Steps, each failing with one "pe: error:" line: parse the command line
 * (usage errors first, before any file is touched) -> load PROGRAM (the
 * forward pass with its loss) and the startup program -> find the fed vars
 * (non-persistable vars some op reads before any op writes them) and count
 * the batches in DIR -> pe_optimizer_minimize (append_backward + optimizer
 * ops; accumulators and the learning rate go into the startup program) ->
 * run the startup program -> load --params -> for each step s (counted
 * from --first-step, 0 by default, so a resumed run reads on where the
 * previous one stopped): load batch s mod K (DIR/<var>_<k>.npy for every
 * fed var) and run the training
 * program once (the single-place executor, or the ParallelExecutor with
 * --places cpu:N), fetching the loss -> write --log, print the steady-state
 * time per step -> --save.
 *
 * Several processes (`mpirun -np N pe train`, or `--trainers N`, which
 * re-executes under mpirun: tools/trainers.c): the ParallelExecutor gets
 * num_trainers = N and trainer_id = the rank, each trainer feeds its share
 * of every batch (pe_batch_shard), the step's loss is the trainers' losses
 * weighted by their rows (pe_trainers_allreduce), and trainer 0 alone
 * prints and writes --log / --out / --save.
 *
 * Timing covers the training step only (pe_executor_run / pe_run: feed copy,
 * forward, backward, optimizer, fetch copy), not the .npy reads, so the
 * numbers measure the engine. The steady-state figure is the median over
 * the steps after the first three (which allocate buffers and warm caches),
 * in wall time and in the process's CPU time (all threads; on a shared
 * machine, the CPU time of a one-thread run is what the wall time would be
 * without the other load).
 */
#include "tool.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum { WARMUP_STEPS = 3, MAX_PLACES = 64, MAX_FED = 64 };

typedef struct train_args {
    const char *program, *startup, *loss, *data, *params, *save, *log, *out_dir, *timeline;
    pe_optimizer_kind kind;
    bool have_kind, lr_given, nesterov;
    double lr, momentum, beta1, beta2, epsilon, weight_decay, clip_norm;
    bool momentum_given, beta1_given, beta2_given, epsilon_given;
    long steps, first_step;
    bool steps_given;
    long print_every;
    int n_places;
    pe_place_kind place_kind;
    int trainers;             /* --trainers N (0: not given) */
    int n_trainers, trainer;  /* this process's world: mpirun's or Paddle's env (tools/trainers.c) */
    int n_fetch;
    const char **fetch; /* [argc], deduplicated */
} train_args;

/* ---- command line ------------------------------------------------------- */

#define USAGE_CMD "train"

static int parse_double(const char *flag, const char *v, double *out) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(d))
        return pe_tool_usage_error(USAGE_CMD, "%s '%s' is not a finite number", flag, v);
    *out = d;
    return PE_EXIT_OK;
}

static int parse_long(const char *flag, const char *v, long lo, long *out) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (!*v || *end || errno || n < lo)
        return pe_tool_usage_error(USAGE_CMD, "%s '%s' is not an integer >= %ld", flag, v, lo);
    *out = n;
    return PE_EXIT_OK;
}

static int parse_args(int argc, char **argv, train_args *a) {
    bool only_pos = false;
    a->print_every = 10;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v = NULL;
        int r, rc;
        int prc;
        if (pe_tool_program_arg(USAGE_CMD, arg, &only_pos, &a->program, &prc)) {
            if (prc != PE_EXIT_OK) return prc;
            continue;
        }
        if (!strcmp(arg, "--nesterov")) {
            a->nesterov = true;
            continue;
        }
#define STR_FLAG(flag, field)                                                                              \
        if ((r = pe_tool_flag(argc, argv, &i, flag, &v)) != 0) {                                            \
            if (r < 0) return pe_tool_usage_error(USAGE_CMD, "%s needs a value", flag);                     \
            if (!*v) return pe_tool_usage_error(USAGE_CMD, "%s needs a non-empty value", flag);             \
            if (a->field) return pe_tool_usage_error(USAGE_CMD, "%s given twice", flag);                    \
            a->field = v;                                                                                   \
            continue;                                                                                       \
        }
#define NUM_FLAG(flag, field, given)                                                                       \
        if ((r = pe_tool_flag(argc, argv, &i, flag, &v)) != 0) {                                            \
            if (r < 0) return pe_tool_usage_error(USAGE_CMD, "%s needs a value", flag);                     \
            if (a->given) return pe_tool_usage_error(USAGE_CMD, "%s given twice", flag);                    \
            if ((rc = parse_double(flag, v, &a->field)) != PE_EXIT_OK) return rc;                           \
            a->given = true;                                                                                \
            continue;                                                                                       \
        }
        STR_FLAG("--startup", startup)
        STR_FLAG("--loss", loss)
        STR_FLAG("--data", data)
        STR_FLAG("--params", params)
        STR_FLAG("--save", save)
        STR_FLAG("--log", log)
        STR_FLAG("--timeline", timeline)
        STR_FLAG("--out", out_dir)
        NUM_FLAG("--lr", lr, lr_given)
        NUM_FLAG("--momentum", momentum, momentum_given)
        NUM_FLAG("--beta1", beta1, beta1_given)
        NUM_FLAG("--beta2", beta2, beta2_given)
        NUM_FLAG("--epsilon", epsilon, epsilon_given)
        if ((r = pe_tool_flag(argc, argv, &i, "--weight-decay", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error(USAGE_CMD, "--weight-decay needs a value");
            if ((rc = parse_double("--weight-decay", v, &a->weight_decay)) != PE_EXIT_OK) return rc;
            if (a->weight_decay < 0) return pe_tool_usage_error(USAGE_CMD, "--weight-decay %s must be >= 0", v);
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--clip-norm", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error(USAGE_CMD, "--clip-norm needs a value");
            if ((rc = parse_double("--clip-norm", v, &a->clip_norm)) != PE_EXIT_OK) return rc;
            if (a->clip_norm < 0) return pe_tool_usage_error(USAGE_CMD, "--clip-norm %s must be >= 0 (0 = no clipping)", v);
            continue;
        }
#undef STR_FLAG
#undef NUM_FLAG
        if ((r = pe_tool_flag(argc, argv, &i, "--optimizer", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error(USAGE_CMD, "--optimizer needs a value: sgd, momentum or adam");
            if (a->have_kind) return pe_tool_usage_error(USAGE_CMD, "--optimizer given twice");
            if (!strcmp(v, "sgd")) a->kind = PE_OPT_SGD;
            else if (!strcmp(v, "momentum")) a->kind = PE_OPT_MOMENTUM;
            else if (!strcmp(v, "adam")) a->kind = PE_OPT_ADAM;
            else return pe_tool_usage_error(USAGE_CMD, "--optimizer '%s' is not one of sgd, momentum, adam", v);
            a->have_kind = true;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--steps", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error(USAGE_CMD, "--steps needs a value");
            if (a->steps_given) return pe_tool_usage_error(USAGE_CMD, "--steps given twice");
            if ((rc = parse_long("--steps", v, 0, &a->steps)) != PE_EXIT_OK) return rc;
            a->steps_given = true;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--first-step", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error(USAGE_CMD, "--first-step needs a value");
            if ((rc = parse_long("--first-step", v, 0, &a->first_step)) != PE_EXIT_OK) return rc;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--print-every", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error(USAGE_CMD, "--print-every needs a value");
            if ((rc = parse_long("--print-every", v, 0, &a->print_every)) != PE_EXIT_OK) return rc;
            continue;
        }
        if (pe_tool_trainers_flag(USAGE_CMD, argc, argv, &i, &a->trainers, &rc)) {
            if (rc != PE_EXIT_OK) return rc;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--places", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error(USAGE_CMD, "--places needs a value");
            if ((rc = pe_tool_parse_places(USAGE_CMD, v, &a->place_kind, &a->n_places)) != PE_EXIT_OK) return rc;
            continue;
        }
        if ((r = pe_tool_flag(argc, argv, &i, "--fetch", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error(USAGE_CMD, "--fetch needs a var NAME");
            if (!*v) return pe_tool_usage_error(USAGE_CMD, "--fetch needs a non-empty NAME");
            bool dup = false;
            for (int k = 0; k < a->n_fetch; k++) dup = dup || !strcmp(a->fetch[k], v);
            if (!dup) a->fetch[a->n_fetch++] = v;
            continue;
        }
        return pe_tool_usage_error(USAGE_CMD, "unknown option '%s'", arg);
    }
    if (!a->program) return pe_tool_usage_error(USAGE_CMD, "missing PROGRAM");
    if (!a->loss) return pe_tool_usage_error(USAGE_CMD, "missing --loss NAME (the var to minimize)");
    if (!a->have_kind) return pe_tool_usage_error(USAGE_CMD, "missing --optimizer sgd|momentum|adam");
    if (!a->steps_given) return pe_tool_usage_error(USAGE_CMD, "missing --steps N");
    if (a->steps > 0 && !a->data) return pe_tool_usage_error(USAGE_CMD, "missing --data DIR (needed when --steps > 0)");
    if (!a->startup && !a->params)
        return pe_tool_usage_error(USAGE_CMD, "nothing initializes the parameters: give --startup S or --params CKPT");
    if (a->kind != PE_OPT_MOMENTUM && (a->momentum_given || a->nesterov))
        return pe_tool_usage_error(USAGE_CMD, "%s applies to --optimizer momentum only",
                                   a->momentum_given ? "--momentum" : "--nesterov");
    if (a->kind != PE_OPT_ADAM && (a->beta1_given || a->beta2_given || a->epsilon_given))
        return pe_tool_usage_error(USAGE_CMD, "%s applies to --optimizer adam only",
                                   a->beta1_given ? "--beta1" : a->beta2_given ? "--beta2" : "--epsilon");
    if (a->lr_given && !(a->lr > 0)) return pe_tool_usage_error(USAGE_CMD, "--lr %g must be > 0", a->lr);
    if (a->first_step > LONG_MAX - a->steps)
        return pe_tool_usage_error(USAGE_CMD, "--first-step %ld + --steps %ld overflows the step count", a->first_step,
                                   a->steps);
    if (a->n_places < 1) a->n_places = 1;
    return PE_EXIT_OK;
}

/* ---- data --------------------------------------------------------------- */

/* Var name -> file name part, as `pe run` names fetch files: characters
 * other than [A-Za-z0-9._-@] become '_', and so does a leading '.'. */
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

static int join_path(char *buf, size_t n, const char *dir, const char *file, const char *suffix) {
    int len = snprintf(buf, n, "%s%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", file, suffix);
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

static int batch_path(const train_args *a, const char *var, long k, char *buf, size_t n) {
    char file[300], suffix[32];
    sanitize_name(var, file, sizeof file);
    snprintf(suffix, sizeof suffix, "_%ld.npy", k);
    return join_path(buf, n, a->data, file, suffix);
}

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The vars a step must feed: non-persistable vars of block 0 that an op
 * reads before any op writes them (the data and labels). */
static int find_fed_vars(const train_args *a, const pe_program *prog, const char **fed, int *n_fed) {
    const pe_block *b = &prog->blocks[0];
    char *written = calloc((size_t)(b->n_vars ? b->n_vars : 1), 1);
    if (!written) return pe_tool_fail("out of memory reading '%s'", a->program);
    *n_fed = 0;
    for (int i = 0; i < b->n_ops; i++) {
        const pe_op *op = &b->ops[i];
        for (int s = 0; s < op->n_inputs; s++)
            for (int k = 0; k < op->inputs[s].n_args; k++) {
                const pe_var *v = pe_block_find_var(b, op->inputs[s].args[k]);
                if (!v || v->persistable || written[v - b->vars]) continue;
                bool seen = false;
                for (int j = 0; j < *n_fed; j++) seen = seen || !strcmp(fed[j], v->name);
                if (seen) continue;
                if (*n_fed == MAX_FED) {
                    free(written);
                    return pe_tool_fail("%s: more than %d fed vars", a->program, MAX_FED);
                }
                fed[(*n_fed)++] = v->name;
            }
        for (int s = 0; s < op->n_outputs; s++)
            for (int k = 0; k < op->outputs[s].n_args; k++) {
                const pe_var *v = pe_block_find_var(b, op->outputs[s].args[k]);
                if (v) written[v - b->vars] = 1;
            }
    }
    free(written);
    return PE_EXIT_OK;
}

/* K = the number of complete batches DIR/<var>_0.npy ... _<K-1>.npy (every
 * fed var present), counting no further than the last step's index. */
static int count_batches(const train_args *a, const char *const *fed, int n_fed, long *n_batches) {
    char path[4096];
    struct stat sb;
    if (stat(a->data, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return pe_tool_fail("--data '%s' is not a directory", a->data);
    long k = 0;
    for (; k < a->first_step + a->steps; k++) {
        bool all = true;
        for (int j = 0; j < n_fed && all; j++) {
            if (batch_path(a, fed[j], k, path, sizeof path) != 0)
                return pe_tool_fail("--data '%s': batch file path too long", a->data);
            all = is_file(path);
        }
        if (!all) break;
    }
    if (k == 0) {
        for (int j = 0; j < n_fed; j++) {
            batch_path(a, fed[j], 0, path, sizeof path);
            if (!is_file(path))
                return pe_tool_fail("--data '%s': no batch 0: '%s' is missing (each fed var NAME of the program "
                                    "needs DIR/NAME_<k>.npy, k = 0, 1, ...)", a->data, path);
        }
    }
    *n_batches = k;
    return PE_EXIT_OK;
}

/* ---- helpers ------------------------------------------------------------ */

static double clock_sec(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double median(double *t, long n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static double tensor_mean(const pe_tensor *t) {
    int64_t n = pe_tensor_numel(t);
    if (n <= 0 || !pe_tensor_has_data(t)) return NAN;
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case PE_DTYPE_FP32: s += ((const float *)pe_tensor_data(t))[i]; break;
        case PE_DTYPE_FP64: s += ((const double *)pe_tensor_data(t))[i]; break;
        case PE_DTYPE_INT32: s += ((const int32_t *)pe_tensor_data(t))[i]; break;
        case PE_DTYPE_INT64: s += (double)((const int64_t *)pe_tensor_data(t))[i]; break;
        default: return NAN;
        }
    }
    return s / (double)n;
}

/* The loss of one step: one value per place; with several places the mean
 * weighted by each place's rows (= the mean over places when the batch
 * splits evenly, and the whole-batch mean loss when it does not). */
static double step_loss(const pe_tensor *t, int n_places, int64_t rows, bool *ok) {
    int64_t n = pe_tensor_numel(t);
    *ok = pe_tensor_has_data(t) && (t->dtype == PE_DTYPE_FP32 || t->dtype == PE_DTYPE_FP64) && n == n_places;
    if (!*ok) return NAN;
    double s = 0;
    for (int p = 0; p < n_places; p++) {
        int64_t r = pe_batch_shard(rows, n_places, p, NULL);
        double v = t->dtype == PE_DTYPE_FP32 ? ((const float *)pe_tensor_data(t))[p] : ((const double *)pe_tensor_data(t))[p];
        s += v * (n_places > 1 ? (double)r / (double)rows : 1.0);
    }
    return s;
}

static int make_dir(const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return pe_tool_fail("--out '%s': cannot create directory: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return pe_tool_fail("--out '%s' is not a directory", dir);
    return PE_EXIT_OK;
}

/* --params: a checkpoint written by `pe train` holds the training program's
 * persistables (parameters, optimizer state, learning rate) and resumes
 * exactly. With --startup, a checkpoint may lack the optimizer state (e.g.
 * one from `pe run --save`, or from `pe train` with another optimizer):
 * the vars it holds are loaded over what the startup program set, and it
 * must still hold every persistable of the forward program (the model).
 * Either way dtypes and shapes are checked and an unknown tensor is an
 * error (pe_checkpoint_load on a copy of the program in which the
 * optimizer vars the file lacks are not persistable). */
static int load_params(const train_args *a, const pe_program *train, const pe_program *fwd, pe_scope *scope) {
    pe_scope *probe = pe_scope_new(NULL);
    pe_program *view = pe_program_clone(train);
    if (!probe || !view) {
        pe_scope_free(probe);
        pe_program_free(view);
        return pe_tool_fail_status(PE_ERR_NOMEM, "--params %s", a->params);
    }
    int rc = PE_EXIT_OK;
    pe_status st = pe_safetensors_read(a->params, probe);
    if (st != PE_OK) rc = pe_tool_fail_file(st, a->params);
    pe_block *b = &view->blocks[0];
    for (int i = 0; rc == PE_EXIT_OK && a->startup && i < b->n_vars; i++) {
        pe_var *v = &b->vars[i];
        if (!v->persistable || pe_scope_find_var(probe, v->name)) continue;
        const pe_var *fv = pe_block_find_var(&fwd->blocks[0], v->name);
        if (fv && fv->persistable)
            rc = pe_tool_fail("%s: the checkpoint has no tensor '%s' (a persistable var of %s)", a->params, v->name,
                              a->program);
        v->persistable = false; /* optimizer state: keep the startup program's value */
    }
    if (rc == PE_EXIT_OK && (st = pe_checkpoint_load(a->params, view, scope)) != PE_OK) {
        const char *hint = !a->startup && strstr(pe_last_error(), "missing")
                               ? " (a checkpoint without the optimizer state needs --startup to initialize it)"
                           : strstr(pe_last_error(), "not a persistable var") || strstr(pe_last_error(), "not persistable vars")
                               ? " (saved with another --optimizer or model?)"
                               : NULL;
        if (hint && strstr(pe_last_error(), a->params))
            rc = pe_tool_fail("%s%s", pe_last_error(), hint);
        else if (hint)
            rc = pe_tool_fail("%s: %s%s", a->params, pe_last_error(), hint);
        else
            rc = pe_tool_fail_file(st, a->params);
    }
    pe_scope_free(probe);
    pe_program_free(view);
    return rc;
}

/* The learning-rate var the optimizer ops read (the first one's). */
static const char *find_lr_var(const pe_program *p) {
    const pe_block *b = &p->blocks[0];
    for (int i = 0; i < b->n_ops; i++) {
        const char *lr = pe_op_input1(&b->ops[i], "LearningRate");
        if (lr) return lr;
    }
    return NULL;
}

static int set_lr(const train_args *a, const pe_program *p, pe_scope *scope) {
    const char *name = find_lr_var(p);
    pe_tensor *t = name ? pe_scope_find_var(scope, name) : NULL;
    if (!t || !pe_tensor_has_data(t) || pe_tensor_numel(t) != 1)
        return pe_tool_fail("%s: learning-rate var '%s' has no value after --params", a->program, name ? name : "?");
    if (t->dtype == PE_DTYPE_FP32) ((float *)pe_tensor_data(t))[0] = (float)a->lr;
    else if (t->dtype == PE_DTYPE_FP64) ((double *)pe_tensor_data(t))[0] = a->lr;
    else return pe_tool_fail("%s: learning-rate var '%s' is %s, expected a float", a->program, name, pe_dtype_name(t->dtype));
    return PE_EXIT_OK;
}

/* ---- the run ------------------------------------------------------------ */

typedef struct train_state {
    pe_program *prog, *fwd, *startup;
    pe_scope *scope;
    pe_executor *ex;
    pe_parallel_executor *pe;
    const char *fed[MAX_FED];
    int n_fed;
    pe_tensor *batch[MAX_FED];
    pe_tensor *shard[MAX_FED]; /* with several trainers: this trainer's rows of batch[] */
    pe_feed feeds[MAX_FED];
    const char **fetch;  /* loss + --fetch */
    pe_tensor **out;
    double *losses, *times, *cpu;
} train_state;

static void state_free(train_state *s) {
    for (int i = 0; i < s->n_fed; i++) pe_tensor_free(s->batch[i]);
    for (int i = 0; i < s->n_fed; i++) pe_tensor_free(s->shard[i]);
    for (int i = 0; s->out && s->fetch && s->fetch[i]; i++) pe_tensor_free(s->out[i]);
    free(s->out);
    free(s->fetch);
    free(s->losses);
    free(s->times);
    free(s->cpu);
    pe_parallel_executor_free(s->pe);
    pe_executor_free(s->ex);
    pe_scope_free(s->scope);
    pe_program_free(s->startup);
    pe_program_free(s->fwd);
    pe_program_free(s->prog);
}

static int load_programs(const train_args *a, train_state *s) {
    pe_status st;
    if ((st = pe_program_load_file(a->program, &s->prog)) != PE_OK) return pe_tool_fail_file(st, a->program);
    if (s->prog->n_blocks < 1) return pe_tool_fail("%s: the program has no blocks", a->program);
    if (a->startup) {
        if ((st = pe_program_load_file(a->startup, &s->startup)) != PE_OK) return pe_tool_fail_file(st, a->startup);
        if (s->startup->n_blocks < 1) return pe_tool_fail("%s: the startup program has no blocks", a->startup);
    } else if (!(s->startup = pe_program_new())) {
        return pe_tool_fail_status(PE_ERR_NOMEM, "creating a startup program");
    }
    const pe_var *lv = pe_block_find_var(&s->prog->blocks[0], a->loss);
    if (!lv) return pe_tool_fail("%s: --loss '%s' is not a variable of block 0", a->program, a->loss);
    if (lv->dtype != PE_DTYPE_FP32 && lv->dtype != PE_DTYPE_FP64)
        return pe_tool_fail("%s: --loss '%s' is %s; the loss must be float32 or float64", a->program, a->loss,
                            pe_dtype_name(lv->dtype));
    int64_t numel = 1;
    for (int d = 0; d < lv->ndim; d++) numel *= lv->dims[d];
    if (numel != 1)
        return pe_tool_fail("%s: --loss '%s' must have one element (e.g. the output of mean), it is declared with %d "
                            "dims", a->program, a->loss, lv->ndim);
    for (int i = 0; i < a->n_fetch; i++)
        if (!pe_block_find_var(&s->prog->blocks[0], a->fetch[i]))
            return pe_tool_fail("%s: --fetch '%s' is not a variable of block 0", a->program, a->fetch[i]);
    if (!(s->fwd = pe_program_clone(s->prog))) return pe_tool_fail_status(PE_ERR_NOMEM, "copying the program");
    return PE_EXIT_OK;
}

static int build_training_program(const train_args *a, train_state *s) {
    pe_optimizer o;
    pe_optimizer_default(&o, a->kind, a->lr_given ? a->lr : a->kind == PE_OPT_ADAM ? 1e-3 : 1e-2);
    if (a->momentum_given) o.momentum = a->momentum;
    o.use_nesterov = a->nesterov;
    if (a->beta1_given) o.beta1 = a->beta1;
    if (a->beta2_given) o.beta2 = a->beta2;
    if (a->epsilon_given) o.epsilon = a->epsilon;
    o.weight_decay = a->weight_decay;
    o.clip_global_norm = a->clip_norm;
    pe_status st = pe_optimizer_minimize(&o, s->prog, s->startup, a->loss, NULL, 0, NULL, 0, NULL, 0, NULL, NULL);
    if (st != PE_OK) return pe_tool_fail_status(st, "%s: building the training program", a->program);
    return PE_EXIT_OK;
}

/* Loads batch k of every fed var into s->batch. */
static int load_batch(const train_args *a, train_state *s, long k, int64_t *rows) {
    char path[4096];
    for (int j = 0; j < s->n_fed; j++) {
        batch_path(a, s->fed[j], k, path, sizeof path);
        pe_status st = pe_npy_load(path, s->batch[j]);
        if (st != PE_OK) return pe_tool_fail_file(st, path);
        const pe_tensor *t = s->batch[j];
        const pe_var *v = pe_block_find_var(&s->fwd->blocks[0], s->fed[j]);
        bool match = v && t->dtype == v->dtype && t->ndim == v->ndim;
        for (int d = 0; match && d < v->ndim; d++) match = v->dims[d] < 0 || v->dims[d] == t->dims[d];
        if (!match) {
            char got[160], want[160];
            return pe_tool_fail("%s: %s %s, but %s declares '%s' as %s %s (-1 = any)", path, pe_dtype_name(t->dtype),
                                pe_dims_str(t->ndim, t->dims, got, sizeof got), a->program, s->fed[j],
                                v ? pe_dtype_name(v->dtype) : "?", v ? pe_dims_str(v->ndim, v->dims, want, sizeof want) : "?");
        }
        if (t->ndim < 1) return pe_tool_fail("%s: a batch must have a batch dimension (rank >= 1)", path);
        int64_t r = s->batch[j]->dims[0];
        if (j == 0) {
            *rows = r;
        } else if (r != *rows) {
            char p0[4096];
            batch_path(a, s->fed[0], k, p0, sizeof p0);
            return pe_tool_fail("batch %ld: '%s' has %lld rows, '%s' has %lld", k, path, (long long)r, p0,
                                (long long)*rows);
        }
        s->feeds[j].name = s->fed[j];
        s->feeds[j].tensor = s->batch[j];
    }
    return PE_EXIT_OK;
}

static int write_log(const train_args *a, const double *losses, long n) {
    pe_tensor *t = pe_tensor_new();
    int64_t dims[1] = {n};
    pe_status st = t ? pe_tensor_resize(t, PE_DTYPE_FP64, 1, dims, pe_place_cpu(0)) : PE_ERR_NOMEM;
    if (st == PE_OK && n) memcpy(pe_tensor_data(t), losses, (size_t)n * sizeof *losses);
    if (st == PE_OK) st = pe_npy_save(a->log, t);
    pe_tensor_free(t);
    if (st != PE_OK) return pe_tool_fail_status(st, "--log %s", a->log);
    return PE_EXIT_OK;
}

static int write_fetches(const train_args *a, const train_state *s) {
    if (!a->out_dir || !a->n_fetch) return PE_EXIT_OK;
    int rc = make_dir(a->out_dir);
    if (rc != PE_EXIT_OK) return rc;
    for (int i = 0; i < a->n_fetch; i++) {
        char file[300], path[4096];
        sanitize_name(a->fetch[i], file, sizeof file);
        if (join_path(path, sizeof path, a->out_dir, file, ".npy") != 0)
            return pe_tool_fail("--out '%s': path too long", a->out_dir);
        pe_status st = pe_npy_save(path, s->out[i + 1]);
        if (st != PE_OK) return pe_tool_fail_status(st, "fetch '%s'", a->fetch[i]);
        printf("%s: last step's value -> %s\n", a->fetch[i], path);
    }
    return PE_EXIT_OK;
}

static int train(const train_args *a) {
    train_state s = {0};
    if (a->timeline && a->n_places < 2 && a->n_trainers <= 1)
        return pe_tool_usage_error(USAGE_CMD, "--timeline records the ParallelExecutor: give --places cpu:N with N >= 2 "
                                   "(or train as several processes: --trainers N)");
    int rc = load_programs(a, &s);
    pe_status st;
    long n_batches = 0;
    if (rc != PE_EXIT_OK) goto done;
    /* names point into s.fwd, which minimize leaves alone */
    if ((rc = find_fed_vars(a, s.fwd, s.fed, &s.n_fed)) != PE_EXIT_OK) goto done;
    if (a->steps > 0) {
        if (s.n_fed == 0) {
            rc = pe_tool_fail("%s: the program reads no data var (every input is persistable); nothing to feed",
                              a->program);
            goto done;
        }
        if ((rc = count_batches(a, s.fed, s.n_fed, &n_batches)) != PE_EXIT_OK) goto done;
    }
    if ((rc = build_training_program(a, &s)) != PE_EXIT_OK) goto done;
    rc = PE_EXIT_FAIL;
    s.scope = pe_scope_new(NULL);
    s.ex = s.scope ? pe_executor_new(a->place_kind == PE_PLACE_CUDA ? pe_place_cuda(0) : pe_place_cpu(0)) : NULL;
    s.fetch = calloc((size_t)a->n_fetch + 2, sizeof *s.fetch);
    s.out = calloc((size_t)a->n_fetch + 2, sizeof *s.out);
    s.losses = calloc((size_t)a->steps + 1, sizeof *s.losses);
    s.times = calloc((size_t)a->steps + 1, sizeof *s.times);
    s.cpu = calloc((size_t)a->steps + 1, sizeof *s.cpu);
    if (!s.scope || !s.ex || !s.fetch || !s.out || !s.losses || !s.times || !s.cpu) {
        rc = pe_tool_fail_status(PE_ERR_NOMEM, "setting up the training run");
        goto done;
    }
    s.fetch[0] = a->loss;
    for (int i = 0; i < a->n_fetch; i++) s.fetch[i + 1] = a->fetch[i];
    int n_fetch = a->n_fetch + 1;
    for (int i = 0; i < n_fetch; i++)
        if (!(s.out[i] = pe_tensor_new())) {
            rc = pe_tool_fail_status(PE_ERR_NOMEM, "fetch '%s'", s.fetch[i]);
            goto done;
        }
    for (int j = 0; j < s.n_fed; j++)
        if (!(s.batch[j] = pe_tensor_new()) || !(s.shard[j] = pe_tensor_new())) {
            rc = pe_tool_fail_status(PE_ERR_NOMEM, "batch of '%s'", s.fed[j]);
            goto done;
        }
    pe_tool_sigint_catch(true); /* Ctrl-C from here to the last step: exit 130 */
    if (a->startup && (st = pe_executor_run(s.ex, s.startup, 0, s.scope, NULL, 0, NULL, 0, NULL)) != PE_OK) {
        rc = pe_tool_fail_status(st, "startup program %s", a->startup);
        goto done;
    }
    if (a->params) {
        if ((rc = load_params(a, s.prog, s.fwd, s.scope)) != PE_EXIT_OK) goto done;
        if (a->lr_given && (rc = set_lr(a, s.prog, s.scope)) != PE_EXIT_OK) goto done;
        rc = PE_EXIT_FAIL;
    }
    if ((a->n_places > 1 || a->n_trainers > 1) && a->steps > 0) {
        pe_place places[MAX_PLACES];
        pe_tool_places_fill(a->place_kind, a->n_places, places);
        pe_pe_options o;
        pe_pe_options_default(&o);
        o.loss_name = a->loss;
        o.num_trainers = a->n_trainers;
        o.trainer_id = a->trainer;
        o.exec_strategy.timeline_path = a->timeline;
        if ((st = pe_parallel_executor_new(places, a->n_places, s.prog, s.scope, &o, &s.pe)) != PE_OK) {
            rc = pe_tool_fail_status(st, "%s: building the ParallelExecutor on %d places", a->program, a->n_places);
            goto done;
        }
    }
    char trainers[48] = ""; /* "2 trainers x " */
    if (a->n_trainers > 1) snprintf(trainers, sizeof trainers, "%d trainers x ", a->n_trainers);
    if (a->steps > 0)
        printf("training %s: %s, %ld steps on %s%d place%s, %ld batch%s in %s\n", a->program,
               a->kind == PE_OPT_SGD ? "sgd" : a->kind == PE_OPT_MOMENTUM ? "momentum" : "adam", a->steps, trainers,
               a->n_places, a->n_places > 1 ? "s" : "", n_batches, n_batches == 1 ? "" : "es", a->data);
    double since_print = 0;
    int64_t samples_since = 0;
    long steps_since = 0;
    for (long step = 0; step < a->steps; step++) {
        if (pe_tool_sigint) {
            rc = pe_tool_interrupted("%s: stopped before step %ld; nothing saved", a->program, a->first_step + step + 1);
            goto done;
        }
        int64_t rows = 0;
        long batch = (a->first_step + step) % n_batches;
        if ((rc = load_batch(a, &s, batch, &rows)) != PE_EXIT_OK) goto done;
        rc = PE_EXIT_FAIL;
        if (rows < (int64_t)a->n_places * a->n_trainers) {
            if (a->n_trainers > 1)
                rc = pe_tool_fail("batch %ld has %lld rows, fewer than the %d trainers x %d places", batch,
                                  (long long)rows, a->n_trainers, a->n_places);
            else
                rc = pe_tool_fail("batch %ld has %lld rows, fewer than the %d places", batch, (long long)rows,
                                  a->n_places);
            goto done;
        }
        /* several trainers: each feeds its share of the batch (the last trainers take the extra rows) */
        int64_t first = 0, mine = a->n_trainers > 1 ? pe_batch_shard(rows, a->n_trainers, a->trainer, &first) : rows;
        for (int j = 0; j < s.n_fed && a->n_trainers > 1; j++) {
            if ((st = pe_tool_rows_view(s.shard[j], s.batch[j], first, mine)) != PE_OK) {
                rc = pe_tool_fail_status(st, "batch %ld of '%s'", batch, s.fed[j]);
                goto done;
            }
            s.feeds[j].tensor = s.shard[j];
        }
        double t0 = clock_sec(CLOCK_MONOTONIC), c0 = clock_sec(CLOCK_PROCESS_CPUTIME_ID);
        if (s.pe)
            st = pe_run(s.pe, s.feeds, s.n_fed, s.fetch, n_fetch, true, s.out);
        else
            st = pe_executor_run(s.ex, s.prog, 0, s.scope, s.feeds, s.n_fed, s.fetch, n_fetch, s.out);
        double dt = clock_sec(CLOCK_MONOTONIC) - t0;
        s.cpu[step] = clock_sec(CLOCK_PROCESS_CPUTIME_ID) - c0;
        if (st != PE_OK) {
            rc = pe_tool_fail_status(st, "%s: step %ld", a->program, a->first_step + step + 1);
            goto done;
        }
        bool ok;
        s.losses[step] = step_loss(s.out[0], a->n_places, mine, &ok);
        if (!ok) {
            char shape[160];
            rc = pe_tool_fail("%s: step %ld: loss '%s' came back as %s %s, expected one value per place", a->program,
                              a->first_step + step + 1, a->loss, pe_dtype_name(s.out[0]->dtype),
                              pe_dims_str(s.out[0]->ndim, s.out[0]->dims, shape, sizeof shape));
            goto done;
        }
        if (a->n_trainers > 1) { /* the whole batch's loss: the trainers' losses weighted by their rows */
            s.losses[step] *= (double)mine / (double)rows;
            if ((st = pe_trainers_allreduce(s.pe, &s.losses[step], 1, PE_DTYPE_FP64)) != PE_OK) {
                rc = pe_tool_fail_status(st, "%s: step %ld: the loss over the trainers", a->program,
                                         a->first_step + step + 1);
                goto done;
            }
        }
        s.times[step] = dt;
        since_print += dt;
        samples_since += rows;
        steps_since++;
        bool last = step == a->steps - 1;
        if (a->print_every > 0 && ((step + 1) % a->print_every == 0 || last || step == 0)) {
            printf("step %ld/%ld  loss %.6f  %.1f samples/s  %.3f ms/step", a->first_step + step + 1,
                   a->first_step + a->steps, s.losses[step],
                   since_print > 0 ? (double)samples_since / since_print : 0.0, 1e3 * since_print / (double)steps_since);
            for (int i = 1; i < n_fetch; i++) {
                double m[2] = {tensor_mean(s.out[i]), (double)pe_tensor_numel(s.out[i])};
                if (a->n_trainers > 1) { /* the mean over every trainer's values */
                    m[0] *= m[1];
                    if ((st = pe_trainers_allreduce(s.pe, m, 2, PE_DTYPE_FP64)) != PE_OK) {
                        rc = pe_tool_fail_status(st, "fetch '%s' over the trainers", s.fetch[i]);
                        goto done;
                    }
                    m[0] /= m[1];
                }
                printf("  %s %.6g", s.fetch[i], m[0]);
            }
            printf("\n");
            fflush(stdout);
            since_print = 0;
            samples_since = 0;
            steps_since = 0;
        }
    }
    pe_tool_sigint_catch(false);
    if (pe_tool_sigint) { /* came as the last step ended */
        rc = pe_tool_interrupted("%s: after the last step; nothing saved", a->program);
        goto done;
    }
    if (a->steps > 0) {
        long from = a->steps > WARMUP_STEPS ? WARMUP_STEPS : 0, n = a->steps - from;
        double med = median(s.times + from, n), cpu = median(s.cpu + from, n);
        printf("steady state: %.3f ms/step (median over steps %ld-%ld%s; CPU time %.3f ms/step)\n", 1e3 * med,
               a->first_step + from + 1, a->first_step + a->steps, from ? ", excluding the first 3" : "", 1e3 * cpu);
    }
    if (s.pe && a->timeline) { /* every trainer writes its own (PATH.rank<N>.json) */
        if ((st = pe_pe_write_timeline(s.pe, NULL)) != PE_OK) {
            rc = pe_tool_fail_status(st, "--timeline %s", a->timeline);
            goto done;
        }
        if (a->trainer == 0) printf("wrote the timeline to %s\n", pe_pe_timeline_path(s.pe));
    }
    /* with several trainers, trainer 0 writes the files (every trainer holds the same parameters) */
    if (a->trainer > 0) {
        rc = PE_EXIT_OK;
        goto done;
    }
    if (a->log && (rc = write_log(a, s.losses, a->steps)) != PE_EXIT_OK) goto done;
    if (a->log) printf("wrote the loss of each step to %s\n", a->log);
    if (a->steps > 0 && (rc = write_fetches(a, &s)) != PE_EXIT_OK) goto done;
    if (a->save) {
        if ((st = pe_checkpoint_save(a->save, s.prog, s.scope)) != PE_OK) {
            rc = pe_tool_fail_file(st, a->save);
            goto done;
        }
        printf("saved persistables to %s\n", a->save);
    }
    rc = PE_EXIT_OK;
done:
    pe_tool_sigint_catch(false);
    state_free(&s);
    return rc;
}

int pe_cmd_train(int argc, char **argv) {
    train_args a = {0};
    a.fetch = calloc((size_t)argc, sizeof *a.fetch);
    int rc;
    if (!a.fetch)
        rc = pe_tool_fail("out of memory parsing the command line");
    else if ((rc = parse_args(argc, argv, &a)) == PE_EXIT_OK &&
             pe_tool_trainers_start(USAGE_CMD, argc, argv, a.trainers, &a.n_trainers, &a.trainer, &rc))
        rc = train(&a);
    free(a.fetch);
    return pe_tool_trainer_exit(rc);
}

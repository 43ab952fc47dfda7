/* tools/pe.c — the `pe` command-line tool: dispatch, help, error output.
 *
 *     pe run examples/mlp_infer.pe --startup examples/mlp_infer_startup.pe \
 *            --feed x=x.npy --fetch prob --out results
 *     pe train examples/mlp_forward.pe --startup examples/mlp_forward_startup.pe \
 *            --loss loss --optimizer adam --data batches/ --steps 200
 *     pe pserver pserver0.pe --startup pserver0_startup.pe --endpoint 127.0.0.1:6174
 *     pe inspect examples/mlp_infer.json
 *     pe convert examples/mlp_infer.json /tmp/mlp_infer.pe
 *
 * Commands live in tools/cmd_<name>.c; this file holds the command table,
 * the help texts and the helpers that keep the exit-code contract of
 * tools/tool.h (one "pe: error:" line for a failure, never a signal): the
 * library's messages are flattened to a single line here, because a message
 * built from a hostile file may carry newlines or control characters.
 * Ctrl-C: while `pe run` / `pe train` run programs (pe_tool_sigint_catch),
 * a SIGINT handler (one shot: SA_RESETHAND, so a second Ctrl-C kills as
 * usual) calls pe_interrupt(), which stops the run in progress between ops;
 * the command then exits with 130 and one "pe: interrupted (Ctrl-C): ..."
 * line. Elsewhere Ctrl-C kills as usual.
 * On a CPU whose model OpenBLAS does not know (pe/ops.h,
 * pe_blas_coretype_hint), the tool starts itself again once with
 * OPENBLAS_CORETYPE set, before anything else.
 */
#include "tool.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RUN_USAGE                                                                              \
    "pe run PROGRAM [--startup S.pe] [--params CKPT] [--save CKPT] [--feed NAME=FILE.npy]... [--lod NAME=0,2,5]... " \
    "[--fetch NAME]... [--out DIR] [--places cpu:N|cuda:N] [--backward LOSS] [--trainers N]"

#define TRAIN_USAGE                                                                                      \
    "pe train PROGRAM --startup S.pe --loss NAME --optimizer sgd|momentum|adam [--lr F] [--momentum F] "   \
    "[--nesterov] [--beta1 F --beta2 F --epsilon F] [--weight-decay F] [--clip-norm F] --data DIR "       \
    "--steps N [--first-step S] [--places cpu:N|cuda:N] [--params CKPT] [--save CKPT] [--log FILE.npy] "        \
    "[--fetch NAME]... [--out DIR] [--print-every N] [--trainers N] [--timeline PATH]"

static const pe_tool_cmd k_cmds[] = {
    {"run", RUN_USAGE, "run block 0 of a program with .npy feeds, write fetches as .npy",
     "Loads PROGRAM (.pe or .json), creates a scope, runs the startup program if\n"
     "given, loads parameters from a checkpoint if given, runs block 0 of PROGRAM\n"
     "on cpu:0 with the feeds, prints a summary of every fetch on stdout and\n"
     "writes each one to DIR/NAME.npy.\n"
     "\n"
     "  --startup S.pe        startup program, run once first (initializes parameters)\n"
     "  --params CKPT         load persistables from a safetensors checkpoint\n"
     "                        (after the startup program)\n"
     "  --save CKPT           save persistables to a safetensors checkpoint after the run\n"
     "  --feed NAME=FILE.npy  feed var NAME from a .npy file (repeatable)\n"
     "  --fetch NAME          fetch var NAME after the run (repeatable; default: the\n"
     "                        fetch vars an inference model records)\n"
     "  --out DIR             directory for the fetched .npy files (default: .),\n"
     "                        created when missing. A fetch name is turned into a\n"
     "                        file name by replacing every character other than\n"
     "                        A-Z a-z 0-9 . _ - @ with '_' (\"fc_0/out\" ->\n"
     "                        \"fc_0_out.npy\"); a leading '.' also becomes '_'.\n"
     "  --places P            where to run: cpu, cpu:0 or cpu:1 (one CPU place), or\n"
     "                        cpu:N: N CPU places through the ParallelExecutor (feeds\n"
     "                        split along axis 0, fetches concatenated in place order);\n"
     "                        cuda or cuda:0 (the first GPU), cuda:N (the first N\n"
     "                        visible GPUs; CUDA_VISIBLE_DEVICES picks which)\n"
     "  --backward LOSS       append the gradient ops of LOSS first; every fed float var\n"
     "                        and every parameter gets NAME@GRAD, which can be fetched\n"
     "  --trainers N          run as N processes (re-executes under mpirun -np N; or start\n"
     "                        it with mpirun -np N pe run ...): each trainer feeds its share\n"
     "                        of every feed (the last trainers take the extra rows), the\n"
     "                        fetches are gathered in trainer order, trainer 0 prints and\n"
     "                        writes the files\n"
     "Flags take their value as the next argument or after '=' (--out=DIR).",
     pe_cmd_run},
    {"train", TRAIN_USAGE, "append backward + optimizer to a forward program and train it on .npy batches",
     "Loads PROGRAM (the forward pass, its loss var included), appends the gradient\n"
     "ops of --loss and one optimizer op per parameter (initial optimizer state goes\n"
     "into the startup program), runs the startup program, then runs N training\n"
     "steps, each on the batch DIR/<var>_<k>.npy of every fed var (k = step mod K,\n"
     "K = the number of complete batches in DIR: the files cycle). Prints progress\n"
     "lines (step, loss, samples/s) and the steady-state time per step (median,\n"
     "excluding the first 3 steps).\n"
     "\n"
     "  --startup S.pe        startup program (initializes parameters); run first\n"
     "  --loss NAME           the var to minimize (one element, e.g. a mean)\n"
     "  --optimizer KIND      sgd, momentum or adam\n"
     "  --lr F                learning rate (default 0.01; adam 0.001)\n"
     "  --momentum F          momentum coefficient (default 0.9); --nesterov\n"
     "  --beta1 F --beta2 F --epsilon F   adam (defaults 0.9, 0.999, 1e-8)\n"
     "  --weight-decay F      L2 coefficient (default 0)\n"
     "  --clip-norm F         clip gradients by global norm (default 0 = off)\n"
     "  --data DIR            batches: DIR/<var>_<k>.npy, k = 0, 1, ... (a fed var is a\n"
     "                        non-persistable var read before any op writes it;\n"
     "                        characters outside A-Z a-z 0-9 . _ - @ in its name become '_')\n"
     "  --steps N             training steps (0: only run the startup / load --params,\n"
     "                        e.g. to --save the initial parameters)\n"
     "  --first-step S        number of steps already done (resuming with --params): step\n"
     "                        s of this run reads batch (S + s) mod K (default 0)\n"
     "  --places P            cpu or cpu:1 (single-place executor), cpu:N (N places\n"
     "                        through the ParallelExecutor, each batch split along axis 0);\n"
     "                        cuda or cuda:N likewise on the first N visible GPUs\n"
     "  --params CKPT         load persistables from a safetensors checkpoint after the\n"
     "                        startup program (a checkpoint from pe train resumes the\n"
     "                        optimizer state too; one with the forward program's\n"
     "                        persistables only needs --startup for the optimizer state)\n"
     "  --save CKPT           save the training program's persistables at the end\n"
     "  --log FILE.npy        the loss of every step, float64 [N] (mean over places,\n"
     "                        weighted by each place's rows)\n"
     "  --fetch NAME          also fetch NAME each step; its mean is printed on the\n"
     "                        progress lines (repeatable)\n"
     "  --out DIR             write the last step's --fetch values to DIR/NAME.npy\n"
     "  --print-every N       progress line every N steps (default 10; 0 = none)\n"
     "  --trainers N          train as N processes (re-executes under mpirun -np N; or start\n"
     "                        it with mpirun -np N pe train ...): each trainer feeds its share\n"
     "                        of every batch (the last trainers take the extra rows), the\n"
     "                        gradients are summed over all; trainer 0 prints and writes the\n"
     "                        --log, --out and --save files\n"
     "  --timeline PATH       with --places cpu:N (N >= 2): record every op, collective\n"
     "                        and step and write a Chrome trace to PATH.rank0.json (PATH\n"
     "                        a directory: PATH/timeline.rank0.json) at the end\n"
     "Flags take their value as the next argument or after '=' (--lr=0.1).",
     pe_cmd_train},
    {"pserver", "pe pserver PROGRAM [--endpoint IP:PORT] [--startup S.pe] [--threads N]",
     "run a parameter-server program (listen_and_serv) until its trainers have left",
     "Loads PROGRAM, a pserver program written by DistributeTranspiler\n"
     "(t.get_pserver_program(endpoint), saved with pe.static.save_program), runs the\n"
     "startup program if given (t.get_startup_program(endpoint, program): it\n"
     "initializes the parameter blocks this server holds), and runs block 0: the\n"
     "server loop of its listen_and_serv op. Trainers (send / recv ops) connect to\n"
     "the endpoint; in sync mode each step's gradients are summed over the trainers,\n"
     "scaled by 1/trainers and the optimize blocks run. Returns when every trainer\n"
     "has left (exe.close()) or been lost: exit 0 when at least one left normally.\n"
     "\n"
     "  --endpoint IP:PORT    listen here instead of the endpoint saved in the program\n"
     "                        (the trainers' epmap must name the same address)\n"
     "  --startup S.pe        startup program, run once first\n"
     "  --threads N           threads for the gradient sums and the optimize blocks\n"
     "                        (default: all cores)\n"
     "Environment: PE_PS_TRAINER_WAIT (seconds a trainer may take to connect, 600).\n"
     "Ctrl-C stops the loop (exit 130).\n"
     "Flags take their value as the next argument or after '=' (--endpoint=IP:PORT).",
     pe_cmd_pserver},
    {"inspect", "pe inspect PROGRAM", "print blocks, ops, vars and the parameter count of a program",
     "Prints every block of PROGRAM (.pe or .json): its ops in order (index, type,\n"
     "inputs and outputs by slot, attrs), its vars (dtype, shape with -1 for an\n"
     "unknown dim, persistable / parameter flags), and the number of parameters\n"
     "(sum of the sizes of the parameter vars whose dims are all known) with the\n"
     "bytes they take.",
     pe_cmd_inspect},
    {"convert", "pe convert IN OUT", "convert a program between .json and .pe",
     "Loads IN (.pe or .json, decided by content), checks it, and saves it to OUT\n"
     "in the format given by OUT's extension: .json for the JSON text form, .pe for\n"
     "the binary flatbuffer. The output is written atomically.",
     pe_cmd_convert},
    {"graph", "pe graph PROGRAM -o OUT.dot [--places cpu:N] [--strategy KEY=VALUE,...] [--loss NAME] "
              "[--fetch NAME]... [--dump-dir DIR]",
     "write the graph the ParallelExecutor would run (after the build passes) as Graphviz DOT",
     "Runs the build passes on PROGRAM exactly as the ParallelExecutor does at\n"
     "construction (fusion passes, then the multi-device pass over N CPU places) and\n"
     "writes the final multi-device graph to OUT.dot. Prints one line per pass (ops\n"
     "fused, ops before and after).\n"
     "\n"
     "  -o, --out OUT.dot     the final graph (one node per op and place, plus the\n"
     "                        allreduce / reduce / broadcast / sharded-update nodes\n"
     "                        between places)\n"
     "  --places cpu:N        N CPU places (default cpu = 1)\n"
     "  --strategy K=V,...    BuildStrategy switches by Paddle's names: fuse_gemm_epilogue,\n"
     "                        fuse_elewise_add_act_ops, fuse_all_optimizer_ops (1/0),\n"
     "                        reduce_strategy=all_reduce|reduce,\n"
     "                        gradient_scale_strategy=batch_share|coeff_num_device|one|\n"
     "                        customized, shard_optimizer (default 1 on several places:\n"
     "                        sharded update nodes replace the per-place optimizer ops\n"
     "                        and their allreduces); also fuse_all_reduce_ops, enable_inplace,\n"
     "                        memory_optimize, enable_sequential_execution (accepted;\n"
     "                        they do not change the graph's ops), sync_batch_norm;\n"
     "                        Paddle's switches PE has no mapping for (fuse_bn_act_ops,\n"
     "                        nccl_comm_num, ...) only at their default values\n"
     "  --loss NAME           the loss var (the executor's loss_name)\n"
     "  --fetch NAME          keep NAME: no fusion removes it, as for a fetched var\n"
     "                        (repeatable)\n"
     "  --dump-dir DIR        also write DIR/00_input.dot (the program) and\n"
     "                        DIR/<nn>_<pass>.dot after each pass (program graphs: ops\n"
     "                        as boxes, vars as ellipses; then the multi-device graph)\n"
     "Render with Graphviz: dot -Tsvg OUT.dot > OUT.svg",
     pe_cmd_graph},
    {"plan", "pe plan PROGRAM --places cpu:N --batch B [--startup S.pe] [--fetch NAME]... [--loss NAME] "
             "[--strategy KEY=VALUE,...] [--no-inplace] [--no-reuse] [--activations] [--verbose]",
     "print the static memory plan of a program: temporaries' bytes per place without and with reuse",
     "Builds the graph the ParallelExecutor would run for PROGRAM on N CPU places (the\n"
     "build passes: the fusion passes --strategy turns on, then the multi-device pass),\n"
     "splits a batch of B rows over the places as the executor does (the last places\n"
     "take the extra rows) for every var read before any op writes it (axis 0 = -1),\n"
     "infers every temporary's shape and runs the memory planner (BuildStrategy\n"
     "enable_inplace and memory_optimize). Prints one line per place:\n"
     "  place=<i> peak_bytes_no_reuse=<n> peak_bytes_reuse=<n>\n"
     "the bytes of the non-persistable temporaries when each has its own buffer, and\n"
     "the size of the place's arena with the plan (fed, fetched and persistable vars\n"
     "are never in it), which also holds the ops' workspaces (the oneDNN scratch of\n"
     "conv2d, pool2d, batch_norm and their gradients, the K-split scratch of fc's\n"
     "and mul's large float32 products; live while the op runs).\n"
     "\n"
     "  --places cpu:N        N CPU places (cpu = cpu:1)\n"
     "  --batch B             rows per step, split over the places\n"
     "  --startup S.pe        run S first and take the persistables' shapes from it\n"
     "                        (default: their declarations)\n"
     "  --fetch NAME          NAME is fetched, so never reused (repeatable)\n"
     "  --loss NAME           the loss (kept by the fusion passes, scaled per place)\n"
     "  --strategy K=V,...    BuildStrategy fields as for 'pe graph'\n"
     "                        (fuse_gemm_epilogue=1,...); enable_inplace and\n"
     "                        memory_optimize are on unless set to 0\n"
     "  --no-inplace          no output written over its dying input (enable_inplace off)\n"
     "  --no-reuse            no bytes of dead temporaries reused (memory_optimize off)\n"
     "  --activations         leave the parameter gradients (op_role_var) out of both\n"
     "                        figures: activation memory only\n"
     "  --verbose             also list every planned var (offset, bytes, in-place) and op workspace",
     pe_cmd_plan},
};
static const int k_n_cmds = (int)(sizeof k_cmds / sizeof k_cmds[0]);

const pe_tool_cmd *pe_tool_find_cmd(const char *name) {
    for (int i = 0; i < k_n_cmds; i++)
        if (!strcmp(k_cmds[i].name, name)) return &k_cmds[i];
    return NULL;
}

void pe_tool_print_cmd_help(FILE *f, const pe_tool_cmd *c) {
    fprintf(f, "usage: %s\n\n%s\n\nExit codes: 0 success, 1 bad input or failed run "
               "(one 'pe: error:' line on stderr), 2 usage error.\n",
            c->usage, c->help);
}

static void print_main_help(FILE *f) {
    fprintf(f, "usage: pe COMMAND [ARGS]\n\n"
               "PE %s: run static-graph programs (.pe / .json) on the CPU.\n\nCommands:\n",
            PE_VERSION_STRING);
    for (int i = 0; i < k_n_cmds; i++) fprintf(f, "  %-9s %s\n", k_cmds[i].name, k_cmds[i].summary);
    fprintf(f, "\n"
               "  pe help COMMAND    help of one command (also: pe COMMAND --help)\n"
               "  pe --version       print the version\n"
               "\n"
               "Exit codes: 0 success, 1 bad input or failed run (one 'pe: error:' line on\n"
               "stderr), 2 usage error. Environment: PE_LOG_LEVEL=error|warn|info|debug.\n");
}

/* ---- error output ------------------------------------------------------- */

/* Writes "pe: error: " + msg as one line: control characters (newlines,
 * tabs, escape sequences from a hostile file) become spaces. */
static void print_line(const char *head, const char *msg) {
    char line[4096];
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && n + 1 < sizeof line; p++)
        line[n++] = (*p < 0x20 || *p == 0x7f) ? ' ' : (char)*p;
    while (n > 0 && line[n - 1] == ' ') n--;
    line[n] = '\0';
    if (pe_tool_trainers > 1)
        fprintf(stderr, "pe: %s: trainer %d of %d: %s\n", head, pe_tool_trainer, pe_tool_trainers,
                n ? line : "unknown failure");
    else
        fprintf(stderr, "pe: %s: %s\n", head, n ? line : "unknown failure");
}

static void print_error_line(const char *msg) { print_line("error", msg); }

volatile sig_atomic_t pe_tool_sigint;

static void on_sigint(int sig) {
    (void)sig;
    pe_tool_sigint = 1;
    pe_interrupt();
}

static void vprint_line(const char *head, const char *fmt, va_list ap) {
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    print_line(head, msg);
}

void pe_tool_sigint_catch(bool on) {
    static struct sigaction prev;
    static bool caught;
    if (on == caught) return;
    if (on) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint;
        sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C kills */
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGINT, &sa, &prev) != 0) return;
    } else {
        sigaction(SIGINT, &prev, NULL);
    }
    caught = on;
}

int pe_tool_interrupted(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprint_line("interrupted (Ctrl-C)", fmt, ap);
    va_end(ap);
    return PE_EXIT_INTERRUPTED;
}

int pe_tool_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprint_line("error", fmt, ap);
    va_end(ap);
    return PE_EXIT_FAIL;
}

int pe_tool_fail_status(pe_status st, const char *ctx_fmt, ...) {
    char ctx[1024] = "", msg[4096];
    if (ctx_fmt) {
        va_list ap;
        va_start(ap, ctx_fmt);
        vsnprintf(ctx, sizeof ctx, ctx_fmt, ap);
        va_end(ap);
    }
    const char *last = pe_last_error();
    if (!last[0]) last = pe_status_name(st);
    snprintf(msg, sizeof msg, "%s%s%s", ctx, ctx[0] ? ": " : "", last);
    if (st == PE_ERR_CANCELLED && pe_tool_sigint) return pe_tool_interrupted("%s", msg);
    print_error_line(msg);
    return PE_EXIT_FAIL;
}

int pe_tool_fail_file(pe_status st, const char *path) {
    if (strstr(pe_last_error(), path)) return pe_tool_fail_status(st, NULL);
    return pe_tool_fail_status(st, "%s", path);
}

int pe_tool_usage_error(const char *cmd, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_error_line(msg);
    const pe_tool_cmd *c = cmd ? pe_tool_find_cmd(cmd) : NULL;
    if (c)
        fprintf(stderr, "usage: %s\n(see 'pe help %s')\n", c->usage, c->name);
    else
        fprintf(stderr, "usage: pe COMMAND [ARGS]   (commands: run, train, pserver, inspect, convert, plan, graph; see 'pe --help')\n");
    return PE_EXIT_USAGE;
}

/* ---- flag parsing ------------------------------------------------------- */

bool pe_tool_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

bool pe_tool_is_flag(const char *arg) { return arg[0] == '-' && arg[1] != '\0'; }

bool pe_tool_program_arg(const char *cmd, const char *arg, bool *only_pos, const char **program, int *rc) {
    *rc = PE_EXIT_OK;
    if (!*only_pos && !strcmp(arg, "--")) {
        *only_pos = true;
        return true;
    }
    if (!*only_pos && pe_tool_is_flag(arg)) return false;
    if (*program) *rc = pe_tool_usage_error(cmd, "unexpected argument '%s' (one PROGRAM only)", arg);
    else *program = arg;
    return true;
}

int pe_tool_flag(int argc, char **argv, int *i, const char *name, const char **val) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    const char *next = *i + 1 < argc ? argv[*i + 1] : NULL;
    /* a negative number is a value (for the flag's own check to refuse), not the next flag */
    bool negative = next && next[0] == '-' && (isdigit((unsigned char)next[1]) || next[1] == '.');
    if (!next || (pe_tool_is_flag(next) && !negative)) return -1;
    *val = argv[++*i];
    return 1;
}

/* ---- main --------------------------------------------------------------- */

int main(int argc, char **argv) {
    /* OpenBLAS chose its kernels when it loaded, before main: on a CPU it
     * does not know (pe/ops.h), start again with the right ones, once */
    const char *core = getenv("OPENBLAS_CORETYPE") ? NULL : pe_blas_coretype_hint();
    if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0) execv("/proc/self/exe", argv); /* on failure: go on */
    if (argc < 2) return pe_tool_usage_error(NULL, "no command given");
    const char *cmd = argv[1];
    if (pe_tool_is_help(cmd)) {
        print_main_help(stdout);
        return PE_EXIT_OK;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("pe %s\n", PE_VERSION_STRING);
        return PE_EXIT_OK;
    }
    if (!strcmp(cmd, "help")) {
        if (argc == 2) {
            print_main_help(stdout);
            return PE_EXIT_OK;
        }
        if (argc > 3) return pe_tool_usage_error(NULL, "'pe help' takes one command name");
        const pe_tool_cmd *c = pe_tool_find_cmd(argv[2]);
        if (!c) return pe_tool_usage_error(NULL, "unknown command '%s'", argv[2]);
        pe_tool_print_cmd_help(stdout, c);
        return PE_EXIT_OK;
    }
    const pe_tool_cmd *c = pe_tool_find_cmd(cmd);
    if (!c) {
        if (pe_tool_is_flag(cmd)) return pe_tool_usage_error(NULL, "unknown option '%s'", cmd);
        return pe_tool_usage_error(NULL, "unknown command '%s'", cmd);
    }
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (pe_tool_is_help(argv[i])) {
            pe_tool_print_cmd_help(stdout, c);
            return PE_EXIT_OK;
        }
    }
    return c->fn(argc - 1, argv + 1);
}

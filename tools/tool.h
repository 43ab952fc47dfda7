/* tools/tool.h — shared pieces of the `pe` command-line tool.
 *
 * Every command is a function `int cmd(int argc, char **argv)` (argv[0] is
 * the command name) returning the process exit code:
 *
 *     PE_EXIT_OK     0  success
 *     PE_EXIT_FAIL   1  bad input or failed run: exactly one stderr line
 *                       "pe: error: <what and where>" (pe_tool_fail*)
 *     PE_EXIT_USAGE  2  bad command line: "pe: error: ..." plus a usage line
 *                       (pe_tool_usage_error)
 *     PE_EXIT_INTERRUPTED 130  Ctrl-C (SIGINT) while `run` / `train` run
 *                       programs (pe_tool_sigint_catch): the run in
 *                       progress stops between ops (pe_interrupt), the
 *                       command ends with one stderr line
 *                       "pe: interrupted (Ctrl-C): ..." (pe_tool_interrupted)
 *                       and writes nothing more; a second Ctrl-C kills the
 *                       process as usual
 *
 * Flags take their value as the next argument or after '=' (`--out DIR`,
 * `--out=DIR`); pe_tool_flag does that parsing for all commands.
 */
#ifndef PE_TOOLS_TOOL_H
#define PE_TOOLS_TOOL_H

#include <stdbool.h>
#include <stdio.h>

#include "pe/pe.h"

#include <signal.h>

enum { PE_EXIT_OK = 0, PE_EXIT_FAIL = 1, PE_EXIT_USAGE = 2, PE_EXIT_INTERRUPTED = 130 };

/* Set by the SIGINT handler (tools/pe.c), which also calls pe_interrupt():
 * a command checks it between steps and stops with pe_tool_interrupted. */
extern volatile sig_atomic_t pe_tool_sigint;
/* Installs (on) or removes (off: the previous disposition back) that
 * handler: around the part of a command that runs programs. Idempotent. */
void pe_tool_sigint_catch(bool on);
/* Prints "pe: interrupted (Ctrl-C): <fmt...>" as one line on stderr;
 * returns PE_EXIT_INTERRUPTED. pe_tool_fail_status calls it for a run
 * that returned PE_ERR_CANCELLED after Ctrl-C. */
int pe_tool_interrupted(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

typedef struct pe_tool_cmd {
    const char *name;
    const char *usage;    /* one line: "pe run PROGRAM [...]" */
    const char *summary;  /* one line for `pe --help` */
    const char *help;     /* the body of `pe help CMD` */
    int (*fn)(int argc, char **argv);
} pe_tool_cmd;

int pe_cmd_run(int argc, char **argv);
int pe_cmd_inspect(int argc, char **argv);
int pe_cmd_convert(int argc, char **argv);
int pe_cmd_graph(int argc, char **argv);
int pe_cmd_plan(int argc, char **argv);
int pe_cmd_train(int argc, char **argv);
int pe_cmd_pserver(int argc, char **argv);

/* The command table entry for name, or NULL. */
const pe_tool_cmd *pe_tool_find_cmd(const char *name);
/* Prints the full help of a command to f. */
void pe_tool_print_cmd_help(FILE *f, const pe_tool_cmd *c);

/* Prints "pe: error: <fmt...>" as one line on stderr; returns PE_EXIT_FAIL. */
int pe_tool_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Same with pe_last_error() appended: "pe: error: <ctx>: <last error>"
 * (ctx may be NULL); st names the failure when the message is empty. */
int pe_tool_fail_status(pe_status st, const char *ctx_fmt, ...) __attribute__((format(printf, 2, 3)));
/* For a failure about a file: like pe_tool_fail_status, prefixed with
 * "<path>: " unless the library's message already names the path. */
int pe_tool_fail_file(pe_status st, const char *path);
/* Prints "pe: error: <fmt...>" and the command's usage line on stderr;
 * returns PE_EXIT_USAGE. cmd may be NULL (top-level usage). */
int pe_tool_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Flag parsing. Returns 1 when argv[*i] is flag `name` with a value
 * (`name VALUE` advances *i past VALUE; `name=VALUE`), 0 when argv[*i] is
 * not that flag, -1 when the value is missing (end of argv, or the next
 * argument is itself a flag). */
int pe_tool_flag(int argc, char **argv, int *i, const char *name, const char **val);
/* True for "-h" and "--help". */
bool pe_tool_is_help(const char *arg);
/* True when arg looks like a flag ("-x", "--x"), i.e. not a positional. */
bool pe_tool_is_flag(const char *arg);
/* The PROGRAM argument of an argument loop: "--" ends the flags (*only_pos),
 * and a non-flag argument (any after "--") is the one PROGRAM (*program).
 * Returns true when `arg` was taken (then *rc is PE_EXIT_OK, or the usage
 * error's exit code when a second PROGRAM was given); false for a flag. */
bool pe_tool_program_arg(const char *cmd, const char *arg, bool *only_pos, const char **program, int *rc);

/* ---- trainer processes (tools/trainers.c) ----
 * This process's trainer world, set by pe_tool_world: pe_tool_trainers
 * processes (1 = this one alone), this one pe_tool_trainer. */
extern int pe_tool_trainer, pe_tool_trainers;
/* Reads the world from the environment (OMPI_COMM_WORLD_SIZE / _RANK under
 * mpirun, else PADDLE_TRAINERS_NUM / PADDLE_TRAINER_ID; neither: 1 process)
 * into *n, *rank and the globals above; on every trainer but 0 stdout goes
 * to /dev/null. PE_EXIT_OK, or PE_EXIT_FAIL for a malformed variable. */
int pe_tool_world(int *n, int *rank);
/* --trainers N (1..1024) as a step of an argument loop, like
 * pe_tool_places_flag; *n must be 0 before (given twice is a usage error). */
bool pe_tool_trainers_flag(const char *cmd, int argc, char **argv, int *i, int *n, int *rc);
/* The start of a command that can run as trainers, after its flags are
 * parsed: reads the world (pe_tool_world) into *n, *rank; then --trainers N
 * (`trainers`, 0 = not given) with N > 1 in a plain process re-executes
 * under mpirun (pe_tool_mpirun), and under mpirun N must equal the world.
 * True: run the command here (*rc PE_EXIT_OK); false: exit with *rc. */
bool pe_tool_trainers_start(const char *cmd, int argc, char **argv, int trainers, int *n, int *rank, int *rc);
/* Replaces this process by `mpirun --oversubscribe -np n <this pe> cmd
 * <argv[1..] without --trainers>` (root allowed when we are root), so the
 * job's exit status is mpirun's. Returns only on failure (mpirun missing,
 * exec failed, no MPI in this build): PE_EXIT_FAIL with one error line. */
int pe_tool_mpirun(const char *cmd, int argc, char **argv, int n);
/* The exit code of a command: a failing trainer of several ends here with
 * _exit(rc) (no MPI_Finalize handshake with ranks still in a collective;
 * mpirun then stops the job); otherwise returns rc. */
int pe_tool_trainer_exit(int rc);
/* dst = a view of rows [first, first + count) of src (shares its buffer). */
pe_status pe_tool_rows_view(pe_tensor *dst, const pe_tensor *src, int64_t first, int64_t count);

/* --strategy "KEY=VALUE,...": BuildStrategy fields by Paddle's names
 * (fuse_gemm_epilogue=1, memory_optimize=0, reduce_strategy=reduce, ...)
 * into *bs (fields not named keep their value). Usage errors name `cmd`;
 * returns PE_EXIT_OK or PE_EXIT_USAGE. (tools/args.c, like the rest below) */
int pe_tool_parse_strategy(const char *cmd, const char *spec, pe_build_strategy *bs);
/* --places "cpu" | "cpu:0" (1 place) | "cpu:N" (N places, 1..64), or
 * "cuda" | "cuda:0" (cuda:0) | "cuda:N" (the first N visible GPUs, 1..64;
 * CUDA_VISIBLE_DEVICES picks which) into *kind and *n_places. kind NULL: the
 * command takes CPU places only (CUDA is a usage error naming cmd). Returns
 * PE_EXIT_OK or PE_EXIT_USAGE (a usage error naming cmd). */
int pe_tool_parse_places(const char *cmd, const char *v, pe_place_kind *kind, int *n_places);
/* places[0..n) of `kind`: cpu:0..n-1 or cuda:0..n-1. */
void pe_tool_places_fill(pe_place_kind kind, int n, pe_place *places);
/* A step of a command's argument loop: false when argv[*i] is not the flag;
 * else true with its value parsed (into *n_places / *bs; it may follow as
 * the next argument or after '=') and *rc PE_EXIT_OK or PE_EXIT_USAGE:
 *     if (pe_tool_places_flag("graph", argc, argv, &i, NULL, &a->n_places, &rc)) {
 *         if (rc != PE_EXIT_OK) return rc;
 *         continue;
 *     } */
bool pe_tool_places_flag(const char *cmd, int argc, char **argv, int *i, pe_place_kind *kind, int *n_places,
                         int *rc);
bool pe_tool_strategy_flag(const char *cmd, int argc, char **argv, int *i, pe_build_strategy *bs, int *rc);

#endif

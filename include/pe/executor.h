/* pe/executor.h — the single-place executor.
 *
 *     pe_scope *scope = pe_scope_new(NULL);
 *     pe_executor *ex = pe_executor_new(pe_place_cpu(0));
 *     pe_executor_run(ex, startup, 0, scope, NULL, 0, NULL, 0, NULL);   // init params
 *     pe_feed feed = {"x", x_tensor};
 *     const char *fetch[] = {"prob"};
 *     pe_tensor *out[1] = {pe_tensor_new()};
 *     if (pe_executor_run(ex, main, 0, scope, &feed, 1, fetch, 1, out) != PE_OK)
 *         fprintf(stderr, "%s\n", pe_last_error());
 *     ...
 *     pe_tensor_free(out[0]); pe_executor_free(ex); pe_scope_free(scope);
 *
 * Runs a block's ops in program order against a scope. Persistable vars
 * (parameters, optimizer state) live in the given scope; temporaries live
 * in a local child scope the executor keeps per scope and reuses across
 * runs (so steady-state runs do not allocate). Feeds are checked against the
 * program's var declarations (name, dtype, rank, fixed dims) and copied in;
 * fetches are copied out.
 */
#ifndef PE_EXECUTOR_H
#define PE_EXECUTOR_H

#include "pe/program.h"
#include "pe/scope.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

typedef struct pe_feed {
    const char *name;
    const pe_tensor *tensor;   /* borrowed */
} pe_feed;

typedef struct pe_executor pe_executor;

/* Owned by caller. NULL + message when the place is unusable. */
pe_executor *pe_executor_new(pe_place place);
void pe_executor_free(pe_executor *ex); /* accepts NULL */

/* Runs block `block_idx` of prog. prog and scope are borrowed and must stay
 * alive (and prog unchanged) while the executor caches them; fetch_out[i]
 * are caller-owned tensors that receive copies of the fetched vars (on CPU).
 * Errors name the op, var and place. */
pe_status pe_executor_run(pe_executor *ex, const pe_program *prog, int block_idx, pe_scope *scope,
                          const pe_feed *feeds, int n_feeds, const char *const *fetch, int n_fetch,
                          pe_tensor **fetch_out);

/* Threads each kernel may use (default: all cores). */
void pe_executor_set_num_threads(pe_executor *ex, int n);
/* Checks every floating-point output of every op for NaN / Inf after its
 * kernel; the first fails the run naming the op, place, output and element
 * (default: FLAGS_check_nan_inf=1 in the environment, else off). */
void pe_executor_set_check_nan_inf(pe_executor *ex, bool on);
/* Frees the local scope of temporaries. */
void pe_executor_drop_local_scope(pe_executor *ex);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

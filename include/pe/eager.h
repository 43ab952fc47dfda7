/* pe/eager.h — eager mode's two entry points: run one op of the registry on
 * tensors (no program, no scope), and ask an op's grad maker which backward
 * ops differentiate one forward op (for a tape).
 *
 *     int add = pe_op_type_find("elementwise_add");     // once per op type
 *     pe_tensor *x = ..., *y = ..., *out = pe_tensor_new();
 *     const char *xn = "x", *yn = "y";
 *     pe_eager_args in[] = {{"X", 1, &x, &xn}, {"Y", 1, &y, &yn}};
 *     pe_eager_args o[] = {{"Out", 1, &out, NULL}};
 *     if (pe_eager_run(add, in, 2, o, 1, NULL, 0, pe_place_cpu(0), 1, 0) != PE_OK)
 *         fprintf(stderr, "%s\n", pe_last_error());
 *
 * pe_eager_run is the static engine's own path for one op — infer (the
 * op's shape and dtype checks), allocate the outputs on the place, the
 * place's kernel (pe_op_run) — on a context filled straight from the
 * given tensors: the same kernels give the same bits as a program that
 * runs the op. Errors name the op, the slot and the arg's name.
 *
 * pe_eager_grad_ops runs the op's grad maker (ops/ops.def) on a program
 * holding only the forward op and returns the backward ops it appends.
 * Names in them: forward vars by their own names; the gradient of forward
 * output v is "v@GRAD" (the caller supplies it: zeros where no gradient
 * reached v); the k-th gradient contribution to forward input v is
 * "v@GRAD" for k = 0 and "v@GRAD@RENAME@k" after (the caller sums them).
 * Any other name is an intermediate of the backward ops themselves.
 */
#ifndef PE_EAGER_H
#define PE_EAGER_H

#include "pe/program.h"
#include "pe/tensor.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* The args of one slot. */
typedef struct pe_eager_args {
    const char *slot;          /* the registry's slot name ("X", "Out") */
    int n;                     /* number of args */
    pe_tensor *const *t;       /* n tensors (borrowed); NULL = an absent arg (PE_EMPTY_VAR) */
    const char *const *names;  /* n names for messages, or NULL ("<slot>:<k>") */
} pe_eager_args;

/* Runs op type `op` (pe_op_type_find) on place with num_threads OpenMP
 * threads (<= 0: omp_get_max_threads(), as the executors): inputs `ins` (tensors holding values on place), outputs `outs`
 * (caller-owned tensors, resized here; fresh ones, or written in place:
 * output arg k of slot Out may be input arg k of slot In when ops.def
 * declares In>Out in place (ParamOut = Param: the optimizer ops update
 * their state in place, as in a program); any other aliasing is refused),
 * attrs (registry defaults for the others; each must be an attr of the op
 * or a common one, with the registry's type). seed is the random ops'
 * program seed (pe_op_ctx.program_seed). Slots are checked against the
 * registry (unknown slot, arity, a required slot absent): PE_ERR_INVALID
 * naming the op and the slot. */
pe_status pe_eager_run(int op, const pe_eager_args *ins, int n_ins, const pe_eager_args *outs, int n_outs,
                       const pe_attr *attrs, int n_attrs, pe_place place, int num_threads, uint64_t seed);

/* A prepared op: the slot layout and attrs of pe_eager_run checked and
 * resolved once (and the attrs copied), then run many times with only the
 * per-call checks (arity-one args present, aliasing, places). The eager
 * Python API keeps one per op type, slot layout and attrs it runs often:
 * the same kernels and bits as pe_eager_run, without its per-call lookups.
 *
 *     pe_eager_args in[] = {{"X", 1, NULL, NULL}, {"Y", 1, NULL, NULL}};  // layout: t NULL
 *     pe_eager_args o[] = {{"Out", 1, NULL, NULL}};
 *     pe_eager_prep *add;
 *     pe_eager_prepare(pe_op_type_find("elementwise_add"), in, 2, o, 1, NULL, 0, &add);
 *     pe_tensor *xy[] = {x, y}, *res[] = {out};
 *     pe_eager_run_prepared(add, xy, res, pe_place_cpu(0), 1, 0);
 *     pe_eager_prep_free(add);
 *
 * Owned by the caller (pe_eager_prep_free); read-only once made, so one
 * prep may run on several threads at once. */
typedef struct pe_eager_prep pe_eager_prep;

/* ins / outs give the layout (slot and n of each; t and names are ignored
 * when t is NULL); attrs are copied. Errors as pe_eager_run's. */
pe_status pe_eager_prepare(int op, const pe_eager_args *ins, int n_ins, const pe_eager_args *outs, int n_outs,
                           const pe_attr *attrs, int n_attrs, pe_eager_prep **out);
/* ins: the input args in the layout's order (slot by slot, n each; NULL =
 * an absent arg), outs likewise (caller-owned, fresh or in place as in
 * pe_eager_run). Messages name args "<slot>:<k>". */
pe_status pe_eager_run_prepared(const pe_eager_prep *p, pe_tensor *const *ins, pe_tensor *const *outs,
                                pe_place place, int num_threads, uint64_t seed);
void pe_eager_prep_free(pe_eager_prep *p);
/* The number of input (outputs false) or output args of the layout. */
int pe_eager_prep_arity(const pe_eager_prep *p, bool outputs);
/* The op type's name ("" for NULL). */
const char *pe_eager_prep_op(const pe_eager_prep *p);

/* A var of the forward op given to pe_eager_grad_ops. */
typedef struct pe_eager_var {
    const char *name;
    pe_dtype dtype;
    int ndim;
    const int64_t *dims;
    bool needs_grad;           /* inputs: a gradient is wanted for it */
} pe_eager_var;

/* The backward ops of forward op `fwd` (its type, slots, attrs), made by the
 * op's grad maker: appended to block 0 of *out, a new program owned by the
 * caller (pe_program_free) holding them (in run order) and the
 * declarations of every var they use. vars: every var fwd names (dtype and
 * dims; needs_grad for those whose gradient is wanted). An op without a
 * grad maker: PE_ERR_UNSUPPORTED naming it. */
pe_status pe_eager_grad_ops(const pe_op *fwd, const pe_eager_var *vars, int n_vars, pe_program **out);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

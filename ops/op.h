/* ops/op.h — the op registry and the kernel contract (internal to PE).
 *
 * ops/ops.def is the single list of op types (X-macros: PE_OP, one line per
 * op, and PE_OPT, the optimizer facts). From it this header generates the
 * declarations of every infer/kernel function, the registry table and the
 * dispatch: a new op is one line in ops.def plus its functions, never a
 * second hand-kept list.
 *
 * Kernel contract:
 *
 *     // x: [N, D] -> out: [N, D]
 *     pe_status pe_cpu_relu(const pe_op_ctx *ctx) {
 *         const pe_tensor *x = pe_ctx_in(ctx, "X");
 *         pe_tensor *out = pe_ctx_out(ctx, "Out");      // already sized by infer
 *         ...
 *     }
 *
 * `infer` runs first and sets every output's dtype and dims
 * (pe_tensor_set_meta) from the inputs and attrs, failing with a message that
 * names the op and the var when shapes do not fit. The executor then
 * allocates the outputs on ctx->place and calls the kernel for that place
 * kind. Kernels may use ctx->num_threads OpenMP threads and must not allocate
 * from the system allocator in the steady state.
 *
 * The context is all an infer function or kernel sees: the op's tensors and
 * var names by slot, its attrs through the typed accessors (pe_ctx_int ...
 * pe_ctx_strings), the op type as ctx->info->name, the place, and the place's
 * runtime services (ctx->svc: stream, library handles, transport; ctx->workspace;
 * filled by the executor). It holds no pointer to the graph's op, so a
 * context can be made from something other than a program (a remote request,
 * a replayed trace), and kernels cannot depend on the graph around them.
 *
 * Every per-op fact (slots, attrs, in-place pairs, how the gradient is made,
 * which optimizer slots are per element, the merged partner of an optimizer
 * op) is a column or table of ops.def, documented there, parsed once into
 * pe_op_info; passes and executors ask the registry instead of keeping their
 * own lists of op types or slot names.
 *
 * Slot spec strings (ops.def): space-separated slot names, with a suffix
 * "?" = dispensable (0 or 1 arg), "*" = duplicable (1 or more), "*?" = any.
 * Attr spec strings: space-separated `name:type=default` (type one of int
 * float string bool long ints floats strings bools longs block; list
 * defaults are comma-separated, possibly empty); `name:type` without "="
 * is a required attr.
 */
#ifndef PE_OPS_OP_H
#define PE_OPS_OP_H

#include "pe/program.h"
#include "pe/scope.h"
#include "pe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PE_MAX_SLOTS 12 /* lstm_grad reads 11 input slots */
#define PE_MAX_ATTRS 24

typedef struct pe_op_info pe_op_info;
typedef struct pe_op_ctx pe_op_ctx;
struct pe_grad_ctx; /* defined in ops/grad_ctx.h (driven by passes/backward.c) */
struct pe_comm;     /* runtime/comm/comm.h */

typedef pe_status (*pe_infer_fn)(pe_op_ctx *ctx);
typedef pe_status (*pe_kernel_fn)(const pe_op_ctx *ctx);
typedef pe_status (*pe_grad_fn)(struct pe_grad_ctx *g);
/* The bytes of scratch a kernel needs for one call with ctx's shapes (ctx
 * holds meta-only tensors: dims and dtype, no data; *bytes = 0: none).
 * The memory plan sizes each op's workspace with it and places it in the
 * place's arena (executor/memory_plan/); the executor hands it to the
 * kernel as ctx->workspace. */
typedef pe_status (*pe_workspace_fn)(const pe_op_ctx *ctx, size_t *bytes);

enum { PE_ARITY_ONE = 0, PE_ARITY_OPTIONAL, PE_ARITY_MANY, PE_ARITY_ANY };

typedef struct pe_slot_info {
    const char *name;
    int arity;
} pe_slot_info;

typedef struct pe_attr_info {
    const char *name;
    pe_attr_type type;
    bool required;
    pe_attr def;          /* default value (when !required) */
} pe_attr_info;

struct pe_op_info {
    int id;                           /* index in the registry (PE_OP_<name>) */
    const char *name;
    int n_inputs;  pe_slot_info inputs[PE_MAX_SLOTS];
    int n_outputs; pe_slot_info outputs[PE_MAX_SLOTS];
    int n_attrs;   pe_attr_info attrs[PE_MAX_ATTRS];
    int n_inplace; int inplace[PE_MAX_SLOTS][2]; /* (input slot, output slot) */
    bool no_buffer[PE_MAX_SLOTS];     /* input slots whose data the kernel never reads (dims/dtype only) */
    pe_infer_fn infer;
    pe_grad_fn grad;                  /* NULL: not differentiable */
    pe_kernel_fn kernels[PE_PLACE_KIND_COUNT];
    pe_workspace_fn workspace[PE_PLACE_KIND_COUNT]; /* NULL: the kernel needs no workspace */
    /* PE_GRAD_WIRE: the grad op and its wiring, in call order (grad = pe_grad_wired) */
    int grad_op_id;                   /* -1 unless the gradient is wired */
    int n_grad_wire;
    struct { int kind; const char *fslot, *gslot; } grad_wire[2 * PE_MAX_SLOTS]; /* kind: PE_WIRE_* */
    /* optimizer facts (ops.def PE_OPT; -1 and 0 for every other op) */
    int merged_id;                    /* sgd: PE_OP_merged_sgd, the op over n parameters */
    int fused_from_id;                /* merged_sgd: PE_OP_sgd, the op type it merges */
    unsigned elem_in_mask;            /* bit i: inputs[i] holds one value per parameter element */
    unsigned elem_out_mask;           /* bit i: outputs[i] likewise */
    int n_elem_pairs; int elem_pairs[PE_MAX_SLOTS][2]; /* per-element (input, output) updated in place */
    unsigned shared_in_mask;          /* bit i: members of the merged op may share inputs[i] */
};

/* How PE_GRAD_WIRE wires one slot of the grad op (ops/grad.h functions). */
enum { PE_WIRE_FWD_INPUT = 0, PE_WIRE_FWD_OUTPUT, PE_WIRE_OUT_GRAD, PE_WIRE_IN_GRAD };

/* ---- generated declarations and op ids -------------------------------- */

#define PE_CUDA(fn) fn
#define PE_NO_CUDA pe_cuda_none
#define PE_GRAD(fn) fn
#define PE_NO_GRAD pe_grad_none
#define PE_GRAD_WIRE(type, ins, outs) pe_grad_wired
/* cpu column "PE_CPU_WS(kernel, ws)": a kernel with a workspace function
 * (pe_workspace_fn); declared here as "pe_status ws(...); pe_status kernel(...)". */
#define PE_CPU_WS(fn, ws) ws(const pe_op_ctx *ctx, size_t *bytes); pe_status fn
#define PE_OP(name, ins, outs, attrs, infer, grad, inplace, cpu, cuda) \
    pe_status infer(pe_op_ctx *ctx);                                    \
    pe_status cpu(const pe_op_ctx *ctx);                                \
    pe_status cuda(const pe_op_ctx *ctx);                               \
    pe_status grad(struct pe_grad_ctx *g);
#include "ops/ops.def"
#undef PE_OP
#undef PE_CPU_WS
#undef PE_CUDA
#undef PE_NO_CUDA
#undef PE_GRAD
#undef PE_NO_GRAD
#undef PE_GRAD_WIRE

typedef enum pe_op_id {
#define PE_OP(name, ...) PE_OP_##name,
#include "ops/ops.def"
#undef PE_OP
    PE_OP_COUNT
} pe_op_id;

/* ---- registry ---------------------------------------------------------- */

/* Parses ops.def specs once (thread-safe). Borrowed; NULL when unknown. */
const pe_op_info *pe_op_info_find(const char *type);
const pe_op_info *pe_op_info_get(int id);
int pe_op_info_count(void);
int pe_op_info_input_index(const pe_op_info *info, const char *slot);
int pe_op_info_output_index(const pe_op_info *info, const char *slot);
const pe_attr_info *pe_op_info_attr(const pe_op_info *info, const char *name);
/* Attrs every op may carry (op_role, op_role_var, op_namescope, ...). */
const pe_attr_info *pe_common_attr(const char *name);
/* PE_OP_<type>, or -1 when `type` is not registered: passes test op types
 * with it (`pe_op_type_id(op->type) == PE_OP_sgd`), never with strcmp. */
int pe_op_type_id(const char *type);

/* Optimizer facts (ops.def PE_OPT), by slot index; false for other ops. */
static inline bool pe_op_info_elem_input(const pe_op_info *info, int slot) {
    return slot >= 0 && slot < PE_MAX_SLOTS && (info->elem_in_mask >> slot & 1u);
}
static inline bool pe_op_info_elem_output(const pe_op_info *info, int slot) {
    return slot >= 0 && slot < PE_MAX_SLOTS && (info->elem_out_mask >> slot & 1u);
}
static inline bool pe_op_info_shared_input(const pe_op_info *info, int slot) {
    return slot >= 0 && slot < PE_MAX_SLOTS && (info->shared_in_mask >> slot & 1u);
}
/* An optimizer op over one parameter (sgd, momentum, adam: one with a merged form). */
static inline bool pe_op_info_is_optimizer(const pe_op_info *info) { return info && info->merged_id >= 0; }
/* The hyperparameter attrs of an optimizer op or its merged form (mu, beta1,
 * beta2, epsilon, decay, momentum: whichever it has), checked alike for
 * both by their infer functions (ops/optimizer.c). */
pe_status pe_optimizer_check_attrs(const pe_op_ctx *ctx);
/* A merged optimizer op (merged_sgd, ...: one made from an optimizer op). */
static inline bool pe_op_info_is_merged(const pe_op_info *info) { return info && info->fused_from_id >= 0; }

/* ---- op context -------------------------------------------------------- */

/* Runtime services of one place, for the kernels that need them. The
 * executor fills one per place when it makes the place's op contexts (today
 * only `comm`: the CPU kernels need no stream or handle, and the CUDA
 * kernels, finding stream / blas / dnn NULL, use their device's one stream
 * and handles: pe_cuda_stream, pe_cuda_blas, pe_cuda_dnn); a kernel must
 * accept NULL for each. The services are the executor's, borrowed by the
 * context. */
typedef struct pe_place_services {
    void *stream;                           /* cudaStream_t of the place's compute stream */
    void *blas;                             /* cublasHandle_t bound to `stream` */
    void *dnn;                              /* cudnnHandle_t bound to `stream` */
    struct pe_comm *comm;                   /* transport for ops that talk to other places */
} pe_place_services;

/* What a kernel or infer function sees of one op: its tensors, attrs and
 * place, never the graph (the pe_op it was made from is not kept). Made by
 * pe_op_ctx_init; the executor keeps one per op and place. */
struct pe_op_ctx {
    const pe_op_info *info;                 /* the op type: info->name, slots, attrs */
    pe_place place;
    const pe_place_services *svc;           /* borrowed; NULL where the executor gives none */
    int num_threads;                        /* OpenMP threads the kernel may use */
    uint64_t program_seed;                  /* Program.random_seed, for random ops */
    void *workspace;                        /* the op's planned scratch (info->workspace sized it for
                                             * these shapes and num_threads), or NULL: no plan; the
                                             * kernel then finds scratch itself (oneDNN's pool) */
    size_t workspace_bytes;
    int n_in[PE_MAX_SLOTS];                 /* per info->inputs[i] */
    pe_tensor **in[PE_MAX_SLOTS];
    const char **in_names[PE_MAX_SLOTS];
    int n_out[PE_MAX_SLOTS];
    pe_tensor **out[PE_MAX_SLOTS];
    const char **out_names[PE_MAX_SLOTS];
    const pe_attr *attrs[PE_MAX_ATTRS];     /* per info->attrs[i]: op's or default */
    void *storage;                          /* owned arrays behind in/out */
    const pe_var **out_decl;                /* owned; per output arg in slot order, its declaration
                                             * (NULL: none); NULL: not checked (pe_op_ctx_declare) */
    bool lod_set;                           /* set by an infer that gave its outputs their LoD itself
                                             * (sequence ops): pe_op_infer then shares none */
};

/* Resolves op's inputs (found in scope or its parents) and outputs (created
 * in `scope` when not found in it or a parent) and its attrs (op's own or the
 * registry default; pointers into `op`, which must outlive the context).
 * ctx->svc starts NULL. Fails naming the op and var when an input is missing.
 * `ctx` owns internal arrays: pe_op_ctx_release. */
pe_status pe_op_ctx_init(pe_op_ctx *ctx, const pe_op *op, pe_scope *scope, pe_place place);
void pe_op_ctx_release(pe_op_ctx *ctx);
/* From now on pe_op_run checks each output's inferred dtype and dims against
 * its declaration in block `block_idx` of prog (or an ancestor block), which
 * must outlive the context: an error when they contradict each other
 * (pe_var_meta_agrees). The executors call it for every op they run. */
pe_status pe_op_ctx_declare(pe_op_ctx *ctx, const pe_op *op, const pe_program *prog, int block_idx);
/* Whether inferred dtype dt and dims (ndim, dims) agree with declaration v:
 * the same dtype, and dims that match once dims of 1 are dropped from both
 * ([1] is [], [N, 1] is [N]), a declared -1 matching any size. A declared
 * rank of 0 matches any shape: builders (Paddle's and pe's Python layers)
 * leave a temporary's shape empty when they do not know it. */
bool pe_var_meta_agrees(const pe_var *v, pe_dtype dt, int ndim, const int64_t *dims);
/* info->infer with the LoD rule: outputs that are not also inputs lose the
 * LoD of an earlier run; an infer that sets its outputs' LoD itself
 * (sequence ops) says so with ctx->lod_set; otherwise an output left
 * without one whose rows equal those of the first input that
 * has a LoD shares that LoD (Paddle's ShareLoD of X to Out: fc, elementwise,
 * activations, lookup_table keep the sequences); an output that is also an
 * input (written in place) keeps its own. Used by pe_op_run and the
 * memory plan's shape inference. */
pe_status pe_op_infer(pe_op_ctx *ctx);
/* infer (pe_op_infer) -> allocate outputs on ctx->place -> kernel. Errors name op and place. */
pe_status pe_op_run(pe_op_ctx *ctx);

/* Accessors (slot names must exist in the registry spec; PE_ASSERT otherwise).
 * An arg named PE_EMPTY_VAR (or a missing optional slot) gives NULL. */
pe_tensor *pe_ctx_in(const pe_op_ctx *ctx, const char *slot);       /* first arg or NULL */
pe_tensor *pe_ctx_in_at(const pe_op_ctx *ctx, const char *slot, int k);
int pe_ctx_n_in(const pe_op_ctx *ctx, const char *slot);
pe_tensor *pe_ctx_out(const pe_op_ctx *ctx, const char *slot);      /* first arg or NULL */
pe_tensor *pe_ctx_out_at(const pe_op_ctx *ctx, const char *slot, int k);
int pe_ctx_n_out(const pe_op_ctx *ctx, const char *slot);
const char *pe_ctx_in_name(const pe_op_ctx *ctx, const char *slot, int k);
const char *pe_ctx_out_name(const pe_op_ctx *ctx, const char *slot, int k);

int64_t pe_ctx_int(const pe_op_ctx *ctx, const char *name);    /* INT, LONG, BOOL */
double pe_ctx_float(const pe_op_ctx *ctx, const char *name);
bool pe_ctx_bool(const pe_op_ctx *ctx, const char *name);
const char *pe_ctx_string(const pe_op_ctx *ctx, const char *name);
/* List attrs: returns element pointer and count in *n. */
const int64_t *pe_ctx_ints(const pe_op_ctx *ctx, const char *name, int *n);
const double *pe_ctx_floats(const pe_op_ctx *ctx, const char *name, int *n);
const char *const *pe_ctx_strings(const pe_op_ctx *ctx, const char *name, int *n);

/* Error helper for infer/kernels: "op <type> (output '<var>') on <place>: <msg>"
 * (type: ctx->info->name; var: the first arg of the first output slot given). */
pe_status pe_ctx_error(const pe_op_ctx *ctx, pe_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Common infer: every output in `out_slot` gets the meta of input `in_slot`. */
pe_status pe_infer_same(pe_op_ctx *ctx, const char *in_slot, const char *out_slot);

/* ---- helpers for the op families' infer functions (ops/registry.c) ---- */

static inline bool pe_dtype_is_float(pe_dtype dt) { return dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64; }
static inline bool pe_dtype_is_num(pe_dtype dt) {
    return pe_dtype_is_float(dt) || dt == PE_DTYPE_INT32 || dt == PE_DTYPE_INT64;
}

/* *t = first arg of input `slot`; "input <slot> is required but absent" when missing. */
pe_status pe_infer_need_in(pe_op_ctx *ctx, const char *slot, pe_tensor **t);
/* Every present arg of output `slot` gets dtype/dims; a failure names the slot and var. */
pe_status pe_infer_set_out(pe_op_ctx *ctx, const char *slot, pe_dtype dt, int ndim, const int64_t *dims);
/* pe_tensor_set_meta(t, ...) with its failure reported through pe_ctx_error. */
pe_status pe_infer_set_meta(pe_op_ctx *ctx, pe_tensor *t, pe_dtype dt, int ndim, const int64_t *dims);
/* Gradient input `slot` (g, may be NULL: "<slot> must be given") must have the
 * forward output's dtype and dims: "<slot> '<var>' is ...; the forward output is ...". */
pe_status pe_infer_check_grad(const pe_op_ctx *ctx, const char *slot, const pe_tensor *g, pe_dtype dt, int ndim,
                              const int64_t *dims);

#ifdef __cplusplus
}
#endif
#endif

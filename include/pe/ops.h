/* pe/ops.h — what the op registry (ops/ops.def) knows about each op type:
 * its input and output slots, its attrs with their types and defaults,
 * whether it has a gradient and kernels per device kind.
 *
 *     for (int i = 0; i < pe_op_type_count(); i++) {
 *         pe_op_desc d;
 *         pe_op_type_get(i, &d);
 *         printf("%s:", d.name);
 *         for (int k = 0; k < d.n_inputs; k++) {
 *             pe_op_slot_desc s;
 *             pe_op_type_input(i, k, &s);
 *             printf(" %s%s", s.name, s.arity == PE_SLOT_MANY ? "*" : "");
 *         }
 *         printf("\n");
 *     }
 *     pe_op_attr_desc a;
 *     if (pe_op_type_find_attr(pe_op_type_find("scale"), "scale", &a)) ...   // a.type, a.def
 *
 * Read-only and thread-safe. Every string and attr value is borrowed from
 * the registry and lives as long as the process. Op types are numbered
 * 0..pe_op_type_count()-1 in ops.def order.
 */
#ifndef PE_OPS_H
#define PE_OPS_H

#include "pe/program.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* How many args a slot takes. */
typedef enum pe_slot_arity {
    PE_SLOT_ONE = 0,  /* exactly one */
    PE_SLOT_OPTIONAL, /* 0 or 1 (dispensable) */
    PE_SLOT_MANY,     /* 1 or more (duplicable) */
    PE_SLOT_ANY       /* 0 or more */
} pe_slot_arity;

typedef struct pe_op_desc {
    const char *name;
    int n_inputs, n_outputs, n_attrs;
    bool has_grad;        /* a grad maker: append_backward can differentiate it */
    bool has_cpu_kernel;
    bool has_cuda_kernel;
} pe_op_desc;

typedef struct pe_op_slot_desc {
    const char *name;
    pe_slot_arity arity;
} pe_op_slot_desc;

typedef struct pe_op_attr_desc {
    const char *name;
    pe_attr_type type;
    bool required;
    const pe_attr *def;   /* the default value (when !required) */
} pe_op_attr_desc;

int pe_op_type_count(void);
/* Index of op type `type`, or -1 when the registry has no such type. */
int pe_op_type_find(const char *type);
/* The getters return false (leaving *out untouched) for an index out of range. */
bool pe_op_type_get(int op, pe_op_desc *out);
bool pe_op_type_input(int op, int k, pe_op_slot_desc *out);  /* 0 <= k < n_inputs */
bool pe_op_type_output(int op, int k, pe_op_slot_desc *out); /* 0 <= k < n_outputs */
bool pe_op_type_attr(int op, int k, pe_op_attr_desc *out);   /* 0 <= k < n_attrs */
/* Attr `name` of op type `op` (its own attrs only), false when it has none. */
bool pe_op_type_find_attr(int op, const char *name, pe_op_attr_desc *out);
/* The attrs every op may carry (op_role, op_role_var, op_namescope,
 * op_callstack, op_device, ...): false when `name` is none of them. */
bool pe_op_common_attr(const char *name, pe_op_attr_desc *out);
/* Whether input slot in_k's k-th arg may name the same var as output slot
 * out_k's k-th arg (ops.def's in-place pairs "In>Out": ParamOut = Param,
 * MeanOut = Mean, sum's Out = X[0]); false for every other pair. */
bool pe_op_type_inplace(int op, int in_k, int out_k);
/* Whether the kernels of op type `op` read the data of input slot in_k:
 * false for ops.def's "-In" slots (only the dims and dtype are read, as
 * elementwise_add_grad's X and Y) and for an index out of range. */
bool pe_op_type_reads_input(int op, int in_k);

/* OpenBLAS, which runs the CPU kernels' GEMMs (ops/cpu/gemm.c). Its
 * DYNAMIC_ARCH build picks its kernels by CPU model when it loads, and a
 * model newer than the build gets its generic ones (Debian bookworm's
 * 0.3.21 runs "Prescott" kernels on Intel Sapphire / Emerald / Granite
 * Rapids: GEMMs 4.5x slower). pe_blas_core: the kernels it runs
 * ("SkylakeX", "Haswell", "Prescott", ...). pe_blas_coretype_hint: the
 * OPENBLAS_CORETYPE worth setting on this CPU before OpenBLAS loads —
 * "SkylakeX" (AVX-512) or "Haswell" (AVX2) on those Intel models (family 6,
 * models 143, 207, 173, 174), else NULL. The `pe` tool starts itself again
 * with it when it is unset; pe's Python package sets it at import. Static
 * strings. */
const char *pe_blas_core(void);
const char *pe_blas_coretype_hint(void);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

/* ops/op_describe.c — the registry's public queries (pe/ops.h), and the
 * op lookup the graph stage's semantic check uses (graph/op_lookup.h).
 *
 * What: read-only views of the pe_op_info entries that ops/registry.c
 * parses from ops/ops.def — slots with their arity, attrs with type,
 * required flag and default, grad maker and kernels present — for callers
 * that must not see the registry's internals (the Python extension, tools),
 * and the same functions as a pe_op_lookup table for graph/check.c.
 *
 * How: the table is installed into the graph stage by a constructor, so
 * every program load checks op types against the registry without the graph
 * depending on a later stage. Static linking keeps an archive member only
 * when something references it; CMakeLists.txt adds
 * --undefined=pe_ops_op_lookup to every link of the ops stage, so this
 * object (and its constructor) is always linked.
 */
#include "pe/ops.h"
#include "graph/op_lookup.h"
#include "ops/op.h"

_Static_assert((int)PE_SLOT_ONE == (int)PE_ARITY_ONE && (int)PE_SLOT_OPTIONAL == (int)PE_ARITY_OPTIONAL &&
                   (int)PE_SLOT_MANY == (int)PE_ARITY_MANY && (int)PE_SLOT_ANY == (int)PE_ARITY_ANY,
               "pe/ops.h's slot arities are ops/op.h's");

int pe_op_type_count(void) { return pe_op_info_count(); }

int pe_op_type_find(const char *type) {
    const pe_op_info *info = type ? pe_op_info_find(type) : NULL;
    return info ? info->id : -1;
}

bool pe_op_type_get(int op, pe_op_desc *out) {
    const pe_op_info *info = pe_op_info_get(op);
    if (!info) return false;
    *out = (pe_op_desc){.name = info->name,
                        .n_inputs = info->n_inputs,
                        .n_outputs = info->n_outputs,
                        .n_attrs = info->n_attrs,
                        .has_grad = info->grad != NULL,
                        .has_cpu_kernel = info->kernels[PE_PLACE_CPU] != NULL,
                        .has_cuda_kernel = info->kernels[PE_PLACE_CUDA] != NULL};
    return true;
}

static bool slot_desc(const pe_slot_info *s, int n, int k, pe_op_slot_desc *out) {
    if (k < 0 || k >= n) return false;
    *out = (pe_op_slot_desc){s[k].name, (pe_slot_arity)s[k].arity};
    return true;
}

bool pe_op_type_input(int op, int k, pe_op_slot_desc *out) {
    const pe_op_info *info = pe_op_info_get(op);
    return info && slot_desc(info->inputs, info->n_inputs, k, out);
}

bool pe_op_type_output(int op, int k, pe_op_slot_desc *out) {
    const pe_op_info *info = pe_op_info_get(op);
    return info && slot_desc(info->outputs, info->n_outputs, k, out);
}

static void attr_desc(const pe_attr_info *a, pe_op_attr_desc *out) {
    *out = (pe_op_attr_desc){a->name, a->type, a->required, &a->def};
}

bool pe_op_type_attr(int op, int k, pe_op_attr_desc *out) {
    const pe_op_info *info = pe_op_info_get(op);
    if (!info || k < 0 || k >= info->n_attrs) return false;
    attr_desc(&info->attrs[k], out);
    return true;
}

bool pe_op_type_find_attr(int op, const char *name, pe_op_attr_desc *out) {
    const pe_op_info *info = pe_op_info_get(op);
    const pe_attr_info *a = info && name ? pe_op_info_attr(info, name) : NULL;
    if (!a) return false;
    attr_desc(a, out);
    return true;
}

bool pe_op_common_attr(const char *name, pe_op_attr_desc *out) {
    const pe_attr_info *a = name ? pe_common_attr(name) : NULL;
    if (!a) return false;
    attr_desc(a, out);
    return true;
}

bool pe_op_type_inplace(int op, int in_k, int out_k) {
    const pe_op_info *info = pe_op_info_get(op);
    for (int k = 0; info && k < info->n_inplace; k++)
        if (info->inplace[k][0] == in_k && info->inplace[k][1] == out_k) return true;
    return false;
}

bool pe_op_type_reads_input(int op, int in_k) {
    const pe_op_info *info = pe_op_info_get(op);
    return info && in_k >= 0 && in_k < info->n_inputs && !info->no_buffer[in_k];
}

/* ---- the graph stage's view -------------------------------------------- */

const pe_op_lookup pe_ops_op_lookup = {
    .find = pe_op_type_find,
    .get = pe_op_type_get,
    .input = pe_op_type_input,
    .output = pe_op_type_output,
    .attr = pe_op_type_attr,
    .find_attr = pe_op_type_find_attr,
    .common_attr = pe_op_common_attr,
    .inplace = pe_op_type_inplace,
};

__attribute__((constructor)) static void install_op_lookup(void) { pe_graph_set_op_lookup(&pe_ops_op_lookup); }

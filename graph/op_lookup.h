/* graph/op_lookup.h — how the graph stage sees the op registry (internal).
 *
 *     // ops/op_describe.c, at load time (a constructor):
 *     pe_graph_set_op_lookup(&pe_ops_op_lookup);
 *     // graph/check.c:
 *     const pe_op_lookup *l = pe_graph_op_lookup();
 *     int op = l->find("mul");              // -1: unknown type
 *
 * The registry (ops/ops.def) belongs to a later stage than the program IR,
 * so the graph cannot call it: the ops stage installs this table of its
 * pe/ops.h queries instead, from a constructor in ops/op_describe.c that
 * every link of the ops stage keeps (CMakeLists.txt: --undefined). Without
 * the ops stage linked, pe_program_check fails naming the missing registry.
 */
#ifndef PE_GRAPH_OP_LOOKUP_H
#define PE_GRAPH_OP_LOOKUP_H

#include "pe/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_op_lookup {
    int (*find)(const char *type);
    bool (*get)(int op, pe_op_desc *out);
    bool (*input)(int op, int k, pe_op_slot_desc *out);
    bool (*output)(int op, int k, pe_op_slot_desc *out);
    bool (*attr)(int op, int k, pe_op_attr_desc *out);
    bool (*find_attr)(int op, const char *name, pe_op_attr_desc *out);
    bool (*common_attr)(const char *name, pe_op_attr_desc *out);
    bool (*inplace)(int op, int in_k, int out_k);
} pe_op_lookup;

/* l is borrowed and must live as long as the process; NULL uninstalls. */
void pe_graph_set_op_lookup(const pe_op_lookup *l);
const pe_op_lookup *pe_graph_op_lookup(void); /* NULL when none is installed */

#ifdef __cplusplus
}
#endif
#endif

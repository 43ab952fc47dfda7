/* graph/program_dot.h — a program block as a Graphviz DOT graph (internal).
 *
 *     pe_program_write_dot(prog, "before.dot", "fuse_gemm_epilogue: before");
 *     // dot -Tsvg before.dot > before.svg
 *
 * Ops are boxes labelled "<index> <type>", vars are ellipses labelled with
 * their name and dims (persistables filled grey); an edge var -> op is an
 * input, op -> var an output. The pass manager writes one such file before
 * and after each program-level pass (debug_graphviz_path, `pe graph
 * --dump-dir`); the multi-device SSA graph has its own writer
 * (pe_ssa_graph_write_dot in graph/ssa_graph.h).
 */
#ifndef PE_GRAPH_PROGRAM_DOT_H
#define PE_GRAPH_PROGRAM_DOT_H

#include "pe/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes block 0 of p to path (atomically). title (may be NULL) becomes
 * the graph label. */
pe_status pe_program_write_dot(const pe_program *p, const char *path, const char *title);

#ifdef __cplusplus
}
#endif
#endif

/* passes/multi_device.h — builds the multi-device SSA graph (internal). */
#ifndef PE_PASSES_MULTI_DEVICE_H
#define PE_PASSES_MULTI_DEVICE_H

#include "graph/ssa_graph.h"
#include "pe/strategy.h"

/* Replicates block 0 of prog on n_places, inserts the gradient collectives
 * found through op_role_var, and records the loss-gradient seed op.
 * *out owned by the caller (pe_ssa_graph_free). */
pe_status pe_multi_device_build(const pe_program *prog, int n_places, const char *loss_name,
                                const pe_build_strategy *bs, pe_ssa_graph **out);

/* shard_optimizer: the (input, output) slot pairs of sgd / momentum / adam
 * that hold one element per parameter element and are updated in place
 * (Param, Velocity, Moment1, Moment2). Grad is read per element too; every
 * other slot (LearningRate, Beta1Pow, ...) is whole. The pass decides what
 * to shard with them, the executor splits the kernel's tensors with them. */
#define PE_OPT_ELEM_PAIRS 4
extern const char *const pe_opt_elem_pairs[PE_OPT_ELEM_PAIRS][2];
/* True when slot `name` of an optimizer op is per element (an input of
 * pe_opt_elem_pairs or Grad when `out` is false; an output when true). */
bool pe_opt_elem_slot(const char *name, bool out);

#endif

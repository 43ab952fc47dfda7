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
/* The same for n_places places in each of n_trainers processes, this
 * being trainer trainer_id (this process's places, global ranks
 * trainer_id * n_places + place; the gradients are exchanged when the
 * world has more than one place, also with one place here). The reduce
 * strategy picks each parameter's owner among the global ranks: REDUCE /
 * BCAST handles get the owner's global rank (world_root) and its place
 * here (root, -1 when another trainer owns it). */
pe_status pe_multi_device_build_world(const pe_program *prog, int n_places, int n_trainers, int trainer_id,
                                      const char *loss_name, const pe_build_strategy *bs, pe_ssa_graph **out);

/* shard_optimizer decides what it can shard with the optimizer facts of the
 * op registry (ops/ops.def PE_OPT: pe_op_info.elem_pairs, elem_in_mask ...),
 * as the executor does to split the kernel's tensors. */

#endif

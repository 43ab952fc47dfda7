/* passes/fuse.h — the program-level fusion passes and the graph helpers
 * they share (internal; run by passes/pass_manager.c).
 *
 *     pe_fuse_opts fo = {.protect = &names};       // fetch targets, loss
 *     int n = 0;
 *     PE_CHECK(pe_fuse_fc(prog, &fo, &n));        // n patterns fused
 *
 * Every pass edits block 0 of `p` in place (the pass manager's clone of the
 * user's program) and fuses a pattern only when it is safe:
 *  - each intermediate var the fused op no longer produces is written by one
 *    member op, read only by member ops, read by no other block, and is
 *    neither persistable nor protected (fetch targets, the loss);
 *  - the fused op takes the position of the last member, so every member
 *    moves past the other ops up to there: none of those may write a var
 *    the member reads or writes, nor read a var it writes
 *    (pe_fuse_can_merge).
 * Intermediates are dropped from the block's var list, so a fetch of one of
 * them is noticed (the executor rebuilds with it protected). Fused ops carry
 * op_role of their members and the concatenated op_role_var pairs, so the
 * multi-device pass still finds every parameter gradient.
 */
#ifndef PE_PASSES_FUSE_H
#define PE_PASSES_FUSE_H

#include "graph/strmap.h"
#include "ops/op.h"
#include "pe/program.h"

typedef struct pe_fuse_opts {
    const pe_strmap *protect;  /* var names that must stay (values unused); may be NULL */
} pe_fuse_opts;

/* mul + elementwise_add (bias on the last axis) [+ relu|sigmoid|tanh] -> fc,
 * and mul_grad + elementwise_add_grad [+ act_grad] -> fc_grad
 * (BuildStrategy.fuse_gemm_epilogue). */
pe_status pe_fuse_fc(pe_program *p, const pe_fuse_opts *o, int *n_fused);
/* elementwise_add + relu|sigmoid|tanh -> fused_elemwise_activation, and the
 * grads -> fused_elemwise_activation_grad (fuse_elewise_add_act_ops). */
pe_status pe_fuse_elewise_add_act(pe_program *p, const pe_fuse_opts *o, int *n_fused);
/* conv2d / depthwise_conv2d / pool2d (+ grads) float32 chains and the
 * activations / bias adds / sums between them -> data_format NHWC, transposes
 * at the edges (BuildStrategy.conv_nhwc, CPU places; passes/conv_nhwc.c). */
pe_status pe_conv_nhwc(pe_program *p, const pe_fuse_opts *o, int *n_fused);
/* conv2d / depthwise_conv2d + a bias elementwise_add on the channel axis
 * (+ their grads) -> the conv op with its Bias input (and Bias@GRAD)
 * (BuildStrategy.fuse_conv_bias, CPU places; passes/fuse_conv_bias.c). */
pe_status pe_fuse_conv_bias(pe_program *p, const pe_fuse_opts *o, int *n_fused);
/* sgd / momentum / adam ops with equal attrs and dtype -> one merged_sgd /
 * merged_momentum / merged_adam op each (fuse_all_optimizer_ops). */
pe_status pe_fuse_all_optimizer_ops(pe_program *p, const pe_fuse_opts *o, int *n_fused);

/* ---- shared helpers (passes/fuse_util.c) -------------------------------- */

/* Readers and writers of every var of block 0 (op indices, ascending, each
 * op once) and whether another block mentions the var. */
typedef struct pe_var_uses {
    int *readers, n_readers;
    int *writers, n_writers;
    bool foreign;
} pe_var_uses;

typedef struct pe_use_index {
    pe_strmap map;        /* name (borrowed from the program) -> index */
    pe_var_uses *u;
    int n, cap;
} pe_use_index;

pe_status pe_uses_build(const pe_program *p, pe_use_index *ix);
void pe_uses_free(pe_use_index *ix);
/* NULL when no op mentions the var. */
const pe_var_uses *pe_uses_get(const pe_use_index *ix, const char *name);

/* True when `name` may disappear: written exactly by one member, read only
 * by members, not mentioned by another block, not persistable, not
 * protected. members: op indices of the pattern. */
bool pe_fuse_is_intermediate(const pe_program *p, const pe_use_index *ix, const pe_fuse_opts *o, const char *name,
                             const int *members, int n_members);
/* True when replacing the members by one op at the position of the last
 * member keeps every other op's view: each member moves past the non-member
 * ops after it (up to the last member), so none of those may write a var
 * the member reads or writes, nor read a var it writes. (The fused op reads
 * and writes a subset of what its members do.) */
bool pe_fuse_can_merge(const pe_block *b, const int *members, int n_members);
/* Inserts a new op of `type` right after the last member and removes the
 * members; returns the new op through *out (valid until the block changes)
 * and its index through *pos. members need not be sorted. The caller fills
 * the op after this call, so it must copy any strings it still needs from
 * the members first. */
pe_status pe_fuse_replace(pe_block *b, int *members, int n_members, const char *type, pe_op **out, int *pos);
/* Removes var `name` from block 0's declarations (no-op when absent). */
void pe_fuse_drop_var(pe_program *p, const char *name);
/* op_role of op (forward when absent). */
int pe_fuse_op_role(const pe_op *op);
/* The arg of a one-arg slot, NULL when absent, empty or PE_EMPTY_VAR. */
const char *pe_fuse_arg(const pe_slot *s);
const char *pe_fuse_in(const pe_op *op, const char *slot);
const char *pe_fuse_out(const pe_op *op, const char *slot);
/* An int attr (default when absent). */
int64_t pe_fuse_attr_int(const pe_op *op, const char *name, int64_t def);
/* The one reader of `var` of op type `type_id` (PE_OP_<name>) whose input
 * slot `slot` is `var`; -1 when there is none or more than one. */
int pe_fuse_reader_of(const pe_block *b, const pe_use_index *ix, const char *var, int type_id, const char *slot);
/* True for the activations the fused kernels implement (relu, sigmoid, tanh:
 * ops/cpu/fused_act.h), by op id. */
bool pe_fuse_is_act(int type_id);

/* The loop of a pattern-fusion pass: find the first op i where match(p,
 * uses, o, i, m) holds (m: the pass's match struct, m_size bytes, zeroed
 * before each search), apply(p, m), rebuild the uses, repeat until nothing
 * matches; *n_fused counts the patterns. Errors of apply are wrapped with
 * "<pass> pass". */
typedef bool (*pe_fuse_match_fn)(const pe_program *p, const pe_use_index *ix, const pe_fuse_opts *o, int i, void *m);
typedef pe_status (*pe_fuse_apply_fn)(pe_program *p, const void *m);
pe_status pe_fuse_each(pe_program *p, const pe_fuse_opts *o, const char *pass, pe_fuse_match_fn match,
                       pe_fuse_apply_fn apply, void *m, size_t m_size, int *n_fused);

/* A growable list of owned strings (names copied out of ops before the
 * block is edited). */
typedef struct pe_strlist {
    char **s;
    int n, cap;
} pe_strlist;
pe_status pe_strlist_add(pe_strlist *l, const char *s); /* s may be NULL: stored as NULL */
void pe_strlist_free(pe_strlist *l);

#endif

/* ops/rnn.h — what the recurrent LoD ops' infer functions and kernels share
 * (ops/rnn.c, ops/cpu/rnn.c, ops/cuda/rnn.cu): Paddle 1.x's lstm and gru.
 *
 * Each sequence of X's last LoD level is run on its own, step by step (in
 * row order, or backwards with is_reverse), with the state starting at
 * H0 / C0's row of the sequence (zeros without them). Paddle runs the same
 * steps on a batch-reordered copy; the results are the same.
 *
 * The step plan (pe_rnn_plan) lists the rows by step: step t holds the row
 * of every sequence longer than t, in sequence order, with the sequence and
 * the row of the previous step (-1: the first step, the state is H0 / C0).
 * The CUDA kernels launch once per step over a step's rows; the CPU kernels
 * walk the same rows per sequence. Both compute in double and round what
 * they store (and later read back: Hidden, Cell, the gates) to the dtype,
 * so the two agree.
 */
#ifndef PE_OPS_RNN_H
#define PE_OPS_RNN_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Paddle's activation names (math/detail/activation_functions.h) */
enum { PE_RNN_ACT_SIGMOID = 0, PE_RNN_ACT_TANH, PE_RNN_ACT_RELU, PE_RNN_ACT_IDENTITY };

/* Attr `name` as PE_RNN_ACT_*: sigmoid, tanh, relu, identity ("linear" and
 * "" too, as Paddle), or an error naming the attr and its value. */
pe_status pe_rnn_act(const pe_op_ctx *ctx, const char *name, int *act);

typedef struct pe_rnn_plan {
    int64_t rows;      /* T: X's rows */
    int64_t seqs;      /* sequences of X's last level */
    int64_t steps;     /* the longest sequence's length */
    int64_t *step_off; /* [steps + 1]: step t's entries are [step_off[t], step_off[t + 1]) */
    int64_t *row;      /* [rows], by step: the X row */
    int64_t *seq;      /* [rows], by step: its sequence */
    int64_t *prev;     /* [rows], by step: the row of the sequence's previous step, or -1 */
    int64_t *row_seq;  /* [rows], by X row: its sequence */
    int64_t *row_prev; /* [rows], by X row: the previous step's row, or -1 */
    const int64_t *off; /* the LoD level (borrowed from X) */
} pe_rnn_plan;

/* The plan of X's (slot "Input") last LoD level, is_reverse from the attr.
 * Errors name the op and X. pe_rnn_plan_free releases it (also a failed one). */
pe_status pe_rnn_plan_make(const pe_op_ctx *ctx, const pe_tensor *x, bool reverse, pe_rnn_plan *p);
void pe_rnn_plan_free(pe_rnn_plan *p);

#ifdef __cplusplus
}
#endif
#endif

/* executor/nan_inf.h — FLAGS_check_nan_inf: the checks both executors make
 * after an op or a collective when the switch is on (internal; implemented
 * in executor/nan_inf.c; the scan itself is runtime/nan_inf.c), so a NaN is
 * reported with the same words by pe_executor_run and pe_run:
 *
 *     op 12 (log) on cpu:1: output Out 'log_0.tmp' has NaN at element 3 (FLAGS_check_nan_inf)
 *
 *     if (ex->check_nan_inf) PE_CHECK(pe_nan_inf_check_op(&ctx, op_idx));
 */
#ifndef PE_EXECUTOR_NAN_INF_H
#define PE_EXECUTOR_NAN_INF_H

#include "ops/op.h"

/* Elements [b, e) of t (e < 0: to the end), written on `place` as output
 * `slot` (NULL: none) `name` by op `op_idx` of type `who` (op_idx < 0: by
 * `who`, e.g. "allreduce"). The message is only made for a value found. */
pe_status pe_nan_inf_check(const pe_tensor *t, int64_t b, int64_t e, int op_idx, const char *who, pe_place place,
                           const char *slot, const char *name);
/* Every output of the op context of op `op_idx` of its block, slot by slot. */
pe_status pe_nan_inf_check_op(const pe_op_ctx *ctx, int op_idx);

#endif

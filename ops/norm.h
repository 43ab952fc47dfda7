/* ops/norm.h — group_norm / instance_norm geometry shared by shape
 * inference (ops/norm.c) and the CPU kernels (ops/cpu/norm.c) (internal).
 *
 *     pe_gnorm_geom g;
 *     PE_CHECK(pe_gnorm_geom_get(ctx, &g));   // X viewed as [N, groups, C/groups * S]
 */
#ifndef PE_OPS_NORM_H
#define PE_OPS_NORM_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pe_gnorm_geom {
    int64_t n, c, s;     /* X: [N, C, S] (S: the product of the dims after C, 1 for rank 2) */
    int64_t groups;      /* group_norm: attr groups (>= 1); instance_norm: C (0 when C is) */
    double eps;
    bool instance;       /* instance_norm(_grad): statistics [N * C], the variance saved as 1 / sqrt(var + eps) */
} pe_gnorm_geom;

/* Validates X (rank >= 2, float), Scale? / Bias? ([C]), groups, epsilon. */
pe_status pe_gnorm_geom_get(const pe_op_ctx *ctx, pe_gnorm_geom *g);

#ifdef __cplusplus
}
#endif

#endif

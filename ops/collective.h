/* ops/collective.h — what a collective op of a program (c_allreduce_sum,
 * c_broadcast, c_allgather, ...) asks of the places (internal), shared by
 * its shape inference (ops/collective.c), the multi-device pass, which
 * turns it into a collective handle of the graph (passes/multi_device.c),
 * and the executor, which runs that handle (executor/grad_buckets.c).
 *
 *     pe_collective c;
 *     if (pe_collective_of(op, &c) && c.kind != PE_COLLECTIVE_LOCAL) ... // a handle over the places
 *     PE_CHECK(pe_collective_check(op, world));   // ring_id 0, root and nranks fit the world
 */
#ifndef PE_OPS_COLLECTIVE_H
#define PE_OPS_COLLECTIVE_H

#include "pe/program.h"
#include "runtime/comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pe_collective_kind {
    PE_COLLECTIVE_LOCAL = 0,  /* c_identity, c_sync_calc_stream, c_sync_comm_stream: Out = X */
    PE_COLLECTIVE_ALLREDUCE,  /* c_allreduce_sum/max/min/prod: Out on every rank = red over ranks */
    PE_COLLECTIVE_BROADCAST,  /* c_broadcast: Out on every rank = X of rank `root` */
    PE_COLLECTIVE_REDUCE,     /* c_reduce_sum/max/min/prod: Out of rank root_id = red over ranks; elsewhere Out = X */
    PE_COLLECTIVE_ALLGATHER,  /* c_allgather: Out = every rank's X along axis 0, in rank order */
    PE_COLLECTIVE_SCATTER,    /* c_scatter: Out of rank r = rows chunk r of X of rank `root` (nranks chunks) */
} pe_collective_kind;

typedef struct pe_collective {
    pe_collective_kind kind;
    pe_red red;  /* ALLREDUCE, REDUCE */
    int root;    /* BROADCAST, SCATTER (attr root), REDUCE (attr root_id): a global rank */
    int nranks;  /* ALLGATHER, SCATTER (attr nranks) */
} pe_collective;

/* True when op is one of the collective ops; *c says what it does. */
bool pe_collective_of(const pe_op *op, pe_collective *c);
/* op (a collective op) against a world of `world` ranks (places x trainers):
 * ring_id must be 0, roots in 0..world-1, c_allgather's nranks == world.
 * The error names the op and the attr. */
pe_status pe_collective_check(const pe_op *op, int world);

#ifdef __cplusplus
}
#endif
#endif

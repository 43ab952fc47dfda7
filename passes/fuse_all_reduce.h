/* passes/fuse_all_reduce.h — gradient buckets for fuse_all_reduce_ops
 * (internal; used by the multi-device pass). */
#ifndef PE_PASSES_FUSE_ALL_REDUCE_H
#define PE_PASSES_FUSE_ALL_REDUCE_H

#include "pe/program.h"

typedef struct pe_grad_info {
    const char *grad;   /* borrowed */
    int64_t bytes;      /* -1: shape not fully known, never bucketed */
    pe_dtype dtype;
} pe_grad_info;

/* Assigns each of the n gradients (in the order the backward pass produces
 * them) a bucket: consecutive gradients of one dtype, the first bucket up to
 * first_cap bytes, the others up to cap bytes (a gradient larger than a cap
 * gets a bucket of its own). bucket[i] = -1 for gradients left alone (unknown
 * shape). Returns the number of buckets. */
int pe_fuse_all_reduce_plan(const pe_grad_info *grads, int n, int64_t first_cap, int64_t cap, int *bucket);

#endif

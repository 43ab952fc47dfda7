/* passes/fuse_all_reduce.c — fuse_all_reduce_ops: gradient buckets.
 *
 * The multi-device pass lists the parameter gradients in the order the
 * backward pass produces them (last layers first) and asks this planner for
 * buckets: runs of consecutive same-dtype gradients up to a byte capacity.
 * Each bucket becomes one ALLREDUCE_FUSED handle that depends on all of its
 * gradients' producers, so it starts as soon as its last gradient is ready
 * while the backward pass goes on; the executor lays each bucket out
 * contiguously per place (the gradients become views into it, still
 * addressable by name) and reduces it with one collective call.
 *
 * Why a small first bucket: the first gradients ready are the last layers';
 * a small bucket for them starts communication early (PyTorch DDP does the
 * same with its 1 MB first bucket), the 25 MB buckets after it amortize the
 * per-call cost.
 */
#include "passes/fuse_all_reduce.h"

int pe_fuse_all_reduce_plan(const pe_grad_info *grads, int n, int64_t first_cap, int64_t cap, int *bucket) {
    int n_buckets = 0, cur = -1;
    int64_t used = 0;
    pe_dtype dt = PE_DTYPE_FP32;
    for (int i = 0; i < n; i++) {
        if (grads[i].bytes < 0) {
            bucket[i] = -1;
            continue;
        }
        int64_t limit = cur == 0 ? first_cap : cap;
        if (cur < 0 || grads[i].dtype != dt || (used > 0 && used + grads[i].bytes > limit)) {
            cur = n_buckets++;
            used = 0;
            dt = grads[i].dtype;
        }
        bucket[i] = cur;
        used += grads[i].bytes;
    }
    return n_buckets;
}

/* tests/unit/replicas.h — "every place holds the same parameters", checked
 * so that it can fail (header-only).
 *
 *     for (int p = 1; p < places; p++)
 *         for (int i = 0; i < n_params; i++) tu_assert_replica(pe, p, params[i]);
 *
 * Comparing place p's tensor with place 0's proves nothing when both are
 * one buffer, which is the design under BuildStrategy.shard_optimizer (CPU
 * places, default on): the places share one copy of the parameters and
 * their moments (executor/opt_shard.c). So the check first asks the
 * executor which it is: state it says is sharded must BE one buffer (place
 * p's data pointer is place 0's); anything else must be a distinct buffer
 * (a replica the collectives keep in sync) holding the same bytes.
 */
#ifndef PE_TEST_REPLICAS_H
#define PE_TEST_REPLICAS_H

#include "tests/unit/op_test_util.h"
#include "executor/pe_internal.h"

/* Asserts place p's `name` against place 0's as described above; returns
 * true when it is the shared buffer, false when an equal replica. */
static inline bool tu_assert_replica(pe_parallel_executor *pe, int p, const char *name) {
    const pe_tensor *t0 = pe_scope_find_var(pe_place_scope(pe, 0), name);
    const pe_tensor *tp = pe_scope_find_var(pe_place_scope(pe, p), name);
    if (!t0 || !tp) fail_msg("'%s' is missing on place %d", name, t0 ? p : 0);
    bool shared = pe_pe_is_sharded_state(pe, name);
    if (shared) {
        if (pe_tensor_data(tp) != pe_tensor_data(t0))
            fail_msg("'%s' is sharded state but place %d holds its own copy, not place 0's buffer", name, p);
        return true;
    }
    if (pe_tensor_data(tp) == pe_tensor_data(t0))
        fail_msg("'%s' on place %d is place 0's buffer: comparing them would compare memory with itself", name, p);
    assert_int_equal(pe_tensor_nbytes(tp), pe_tensor_nbytes(t0));
    assert_memory_equal(pe_tensor_data(tp), pe_tensor_data(t0), pe_tensor_nbytes(t0));
    return false;
}

#endif

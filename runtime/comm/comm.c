/* runtime/comm/comm.c — picks the collective backend for a set of places.
 *
 *     pe_comm *c = pe_comm_new_for_places(places, n, threads);
 *
 * All CPU places share one address space: the in-process backend
 * (runtime/comm/inproc.c). Two or more CUDA places: NCCL
 * (runtime/comm/nccl.cu), one communicator per device, when PE was built
 * with CUDA and NCCL. A single place of any kind: the in-process backend,
 * whose collectives over one place are no-ops that never read the buffer.
 * Anything else (mixed kinds, a device twice, a device that is not
 * visible, a build without NCCL) gets NULL and a message naming the place
 * and the reason, so the executor fails at construction instead of at the
 * first gradient. A multi-process backend (MPI) will be chosen here too.
 */
#include "runtime/comm/comm.h"
#include "runtime/internal.h"

pe_comm *pe_comm_new_for_places(const pe_place *places, int n, int threads) {
    char pb[32], qb[32];
    if (!places || n < 1 || n > PE_MAX_PLACES) {
        pe_error(PE_ERR_INVALID, "collectives need 1..%d places (got %d%s)", PE_MAX_PLACES, n,
                 places ? "" : ", places is NULL");
        return NULL;
    }
    for (int i = 1; i < n; i++)
        if (places[i].kind != places[0].kind) {
            pe_error(PE_ERR_UNSUPPORTED,
                     "collectives across %s and %s: all places of one executor must be of one kind",
                     pe_place_str(places[0], pb, sizeof pb), pe_place_str(places[i], qb, sizeof qb));
            return NULL;
        }
    if (places[0].kind != PE_PLACE_CPU && places[0].kind != PE_PLACE_CUDA) {
        pe_error(PE_ERR_INVALID, "collectives on place kind %d: not a CPU or CUDA place", (int)places[0].kind);
        return NULL;
    }
    /* One place moves no data (the in-process backend never touches the
     * buffer then), so a single GPU needs neither NCCL nor a communicator. */
    if (places[0].kind == PE_PLACE_CPU || n == 1) return pe_comm_inproc_new(n, threads);
#ifdef PE_WITH_CUDA
    int visible = pe_cuda_device_count();
    int devices[PE_MAX_PLACES];
    for (int i = 0; i < n; i++) {
        if (places[i].id < 0 || places[i].id >= visible) {
            pe_error(PE_ERR_INVALID, "collectives on %s: %d CUDA device(s) visible%s",
                     pe_place_str(places[i], pb, sizeof pb), visible,
                     visible == 0 ? " (no GPU or no CUDA driver on this machine)" : "");
            return NULL;
        }
        for (int j = 0; j < i; j++)
            if (places[j].id == places[i].id) {
                pe_error(PE_ERR_INVALID, "collectives on %s: places %d and %d are the same GPU (NCCL needs one "
                         "rank per device)", pe_place_str(places[i], pb, sizeof pb), j, i);
                return NULL;
            }
        devices[i] = places[i].id;
    }
#ifdef PE_WITH_NCCL
    (void)threads;
    return pe_comm_nccl_new(devices, n);
#else
    (void)threads;
    (void)devices;
    pe_error(PE_ERR_UNSUPPORTED, "collectives on %s: PE was built without NCCL (nccl.h / libnccl not found "
             "under the CUDA toolkit)", pe_place_str(places[0], pb, sizeof pb));
    return NULL;
#endif
#else
    (void)threads;
    pe_error(PE_ERR_UNSUPPORTED, "collectives on %s: PE was built without CUDA",
             pe_place_str(places[0], pb, sizeof pb));
    return NULL;
#endif
}

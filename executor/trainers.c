/* executor/trainers.c — a ParallelExecutor across processes
 * (num_trainers > 1, Paddle's collective / nccl2 mode on CPU processes).
 *
 * The world is num_trainers processes x the places of each: the places'
 * collectives are the two-level composition (runtime/comm/hier.c) over one
 * MPI rank per process (runtime/comm/mpi.c), global rank = trainer x places
 * + place. Sums are in a fixed order (places of a process, then processes),
 * so a given layout is bitwise repeatable run to run.
 *
 * At construction every trainer checks, with one allgather, that all agree
 * on the world (num_trainers, its own trainer_id = its MPI rank, the place
 * count, a hash of the program): a disagreement is the same error on every
 * rank, never a hang. Then the persistables are broadcast from trainer 0,
 * place 0, so trainers started with different seeds end identical.
 *
 * Each run: the row counts of every place of every trainer are summed (the
 * loss gradient's scale is a share of the global batch). MPI needs every
 * rank to issue its collectives in the same order, whatever order their
 * gradients become ready in: at construction the collective handles are
 * chained along one topological order of the graph, the same in every
 * process (pe_pe_chain_collectives), so the scheduler issues them in that
 * order and no thread waits for a turn.
 *
 * The reduce strategy spans the trainers: each parameter's owner is a
 * global rank (passes/multi_device.c balances bytes over all of them), its
 * gradient is reduced there (hier.c: places, then processes), only the
 * owner's optimizer runs, and the owner broadcasts the parameter and the
 * optimizer's state, so every trainer's scope holds current values.
 *
 * The sharded optimizer spans them too when BuildStrategy.shard_across_trainers
 * is set (executor/opt_shard.c: one reduce-scatter over every rank, the
 * trainer's shards, one all-gather); by default it is off across trainers
 * (two chained collectives per update cost more than the update).
 *
 * CUDA places: the collectives are one NCCL world over every trainer's
 * GPUs (nccl_world; the NCCL id goes from trainer 0 over MPI), not the
 * two-level composition.
 */
#include "executor/pe_internal.h"

#include <stdlib.h>
#include <string.h>

#define TAG_WORLD 0x7e5701ull /* the construction's checks */
#define TAG_SUM 0x7e5703ull   /* pe_trainers_allreduce: each run's rows, metrics between runs */

/* FNV-1a over block 0: op types and slots, var names, dtypes and dims. */
__attribute__((unused)) static uint64_t program_hash(const pe_program *p) {
    uint64_t h = 0xcbf29ce484222325ull;
#define MIX(ptr, n)                                                                                                    \
    for (size_t i_ = 0; i_ < (size_t)(n); i_++) h = (h ^ ((const unsigned char *)(ptr))[i_]) * 0x100000001b3ull
    const pe_block *b = &p->blocks[0];
    for (int i = 0; i < b->n_vars; i++) {
        MIX(b->vars[i].name, strlen(b->vars[i].name) + 1);
        MIX(&b->vars[i].dtype, sizeof b->vars[i].dtype);
        MIX(b->vars[i].dims, sizeof(int64_t) * (size_t)b->vars[i].ndim);
    }
    for (int i = 0; i < b->n_ops; i++) {
        MIX(b->ops[i].type, strlen(b->ops[i].type) + 1);
        for (int s = 0; s < b->ops[i].n_inputs; s++)
            for (int k = 0; k < b->ops[i].inputs[s].n_args; k++)
                MIX(b->ops[i].inputs[s].args[k], strlen(b->ops[i].inputs[s].args[k]) + 1);
        for (int s = 0; s < b->ops[i].n_outputs; s++)
            for (int k = 0; k < b->ops[i].outputs[s].n_args; k++)
                MIX(b->ops[i].outputs[s].args[k], strlen(b->ops[i].outputs[s].args[k]) + 1);
    }
#undef MIX
    return h;
}

/* Every trainer's view of the world (all: [R][4], allgathered), compared on
 * every trainer. Pure and outside PE_WITH_MPI: the values are other
 * processes' bytes, and tests/fuzz/fuzz_trainers_world.c runs it on any. */
pe_status pe_pe_check_trainers(const int64_t *all, int R) {
    if (!all || R < 1)
        return pe_error(PE_ERR_INTERNAL, "ParallelExecutor: checking the trainers: no views (%d processes)", R);
    pe_status st = PE_OK;
    for (int r = 0; r < R && st == PE_OK; r++) {
        const int64_t *v = &all[r * 4];
        if (v[0] != R)
            st = pe_error(PE_ERR_INVALID, "ParallelExecutor: trainer %lld (MPI rank %d) says num_trainers=%lld, but "
                          "%d processes were launched", (long long)v[1], r, (long long)v[0], R);
        else if (v[1] != r)
            st = pe_error(PE_ERR_INVALID, "ParallelExecutor: MPI rank %d says trainer_id=%lld: each process's "
                          "trainer_id must be its rank (0..%d)", r, (long long)v[1], R - 1);
        else if (v[2] != all[2])
            st = pe_error(PE_ERR_INVALID, "ParallelExecutor: trainer %d has %lld places, trainer 0 has %lld: every "
                          "trainer needs the same places", r, (long long)v[2], (long long)all[2]);
        else if (v[3] != all[3])
            st = pe_error(PE_ERR_INVALID, "ParallelExecutor: trainer %d runs another program than trainer 0 (the "
                          "programs' hashes differ): every trainer must build the same program", r);
    }
    return st;
}

#ifdef PE_WITH_MPI
/* Waits for *wp, a collective of the MPI communicator started with status st;
 * the work's message joins `what` on failure. */
static pe_status outer_wait(pe_status st, pe_work **wp, const char *what) {
    if (st != PE_OK) return pe_error_wrap(st, "%s", what);
    pe_work *w = *wp; /* read after the call that set it (the arguments' order is unspecified) */
    st = pe_work_wait(w);
    if (st != PE_OK) pe_error(st, "%s: %s", what, pe_work_message(w));
    pe_work_free(w);
    return st;
}

/* Every trainer's view of the world, compared on every trainer. */
static pe_status check_world(pe_parallel_executor *pe, pe_comm *outer) {
    int R = pe_comm_size(outer);
    int64_t mine[4] = {pe->opt.num_trainers, pe->opt.trainer_id, pe->n, (int64_t)(program_hash(pe->prog) >> 1)};
    int64_t *all = calloc((size_t)R * 4, sizeof *all);
    if (!all) return pe_error(PE_ERR_NOMEM, "out of memory checking the trainers");
    pe_work *w;
    pe_status st = outer_wait(pe_comm_allgather(outer, mine, all, 4, PE_DTYPE_INT64, TAG_WORLD, &w), &w,
                              "ParallelExecutor: checking the trainers");
    if (st == PE_OK) st = pe_pe_check_trainers(all, R);
    free(all);
    return st;
}
#endif

#if defined(PE_WITH_MPI) && defined(PE_WITH_NCCL)
#define TAG_NCCL_ID 0x7e5702ull
/* CUDA places across processes: one NCCL world of every trainer's GPUs,
 * global rank = trainer x places + place (Paddle's gen_nccl_id, over MPI):
 * trainer 0 makes the unique id and broadcasts it with its status, so a
 * failure there is an error on every trainer; then each trainer's GPUs join
 * together. NCCL sums in its own fixed ring/tree order. */
static pe_status nccl_world(pe_parallel_executor *pe) {
    struct {
        pe_nccl_id id;
        int32_t ok;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (pe->opt.trainer_id == 0) msg.ok = pe_nccl_get_id(&msg.id) == PE_OK;
    pe_work *w;
    PE_CHECK(outer_wait(pe_comm_broadcast(pe->outer, &msg, (int64_t)sizeof msg, PE_DTYPE_UINT8, 0, TAG_NCCL_ID, &w),
                        &w, "ParallelExecutor: sending the NCCL id"));
    if (!msg.ok)
        return pe_error(PE_ERR_DEVICE, "ParallelExecutor: trainer 0 could not make the NCCL unique id%s",
                        pe->opt.trainer_id == 0 ? " (above)" : " (see trainer 0's log)");
    int devices[PE_MAX_PLACES];
    pe_comm *ranks[PE_MAX_PLACES];
    for (int p = 0; p < pe->n; p++) devices[p] = pe->places[p].id;
    PE_CHECK(pe_comm_nccl_ranks_new(&msg.id, pe->opt.trainer_id * pe->n, pe->n, pe->opt.num_trainers * pe->n,
                                    devices, ranks));
    if (!(pe->comm = pe_comm_group_new(ranks, pe->n)))
        return pe_error_wrap(PE_ERR_NOMEM, "ParallelExecutor: NCCL collectives across %d trainers",
                             pe->opt.num_trainers);
    return PE_OK;
}
#endif

pe_status pe_pe_make_comm(pe_parallel_executor *pe) {
    char pb[32];
    if (pe->opt.num_trainers <= 1) {
        if (!(pe->comm = pe_comm_new_for_places(pe->places, pe->n, pe->kernel_threads)))
            return pe_error_wrap(PE_ERR_UNSUPPORTED, "ParallelExecutor: collectives for %s",
                                 pe_place_str(pe->places[0], pb, sizeof pb));
        return PE_OK;
    }
#ifndef PE_WITH_MPI
    return pe_error(PE_ERR_UNSUPPORTED, "ParallelExecutor: num_trainers=%d needs the MPI backend; PE was built "
                    "without MPI (libopenmpi-dev: scripts/setup.sh, -DPE_WITH_MPI=ON)", pe->opt.num_trainers);
#else
    PE_CHECK(pe_comm_mpi_new(&pe->outer));
    PE_CHECK(check_world(pe, pe->outer));
    if (pe->places[0].kind == PE_PLACE_CUDA) {
#ifdef PE_WITH_NCCL
        return nccl_world(pe);
#else
        return pe_error(PE_ERR_UNSUPPORTED, "ParallelExecutor: num_trainers=%d on %s needs NCCL; PE was built "
                        "without it", pe->opt.num_trainers, pe_place_str(pe->places[0], pb, sizeof pb));
#endif
    }
    pe_comm *ranks[PE_MAX_PLACES];
    PE_CHECK(pe_comm_hier_new(pe->outer, pe->n, pe->kernel_threads, ranks));
    if (!(pe->comm = pe_comm_group_new(ranks, pe->n)))
        return pe_error_wrap(PE_ERR_NOMEM, "ParallelExecutor: collectives across %d trainers", pe->opt.num_trainers);
    return PE_OK;
#endif
}

void pe_pe_free_comm(pe_parallel_executor *pe) {
    pe_group_free(pe->comm);
    pe->comm = NULL;
    pe_comm_free(pe->outer);
    pe->outer = NULL;
}

int pe_pe_world_places(const pe_parallel_executor *pe) {
    return pe->n * (pe->opt.num_trainers > 1 ? pe->opt.num_trainers : 1);
}

/* ---- construction: the persistables of trainer 0 ------------------------- */

pe_status pe_pe_broadcast_from_trainer0(pe_parallel_executor *pe) {
    if (pe->opt.num_trainers <= 1 || pe->opt.share_vars_from) return PE_OK;
    const pe_block *b = &pe->prog->blocks[0];
    for (int i = 0; i < b->n_vars; i++) {
        const pe_var *v = &b->vars[i];
        if (!v->persistable) continue;
        const pe_tensor *t0 = pe_scope_find_var(pe->place_scope[0], v->name);
        if (!t0 || !t0->buf) continue; /* created by the program itself, on every trainer alike */
        void *bufs[PE_MAX_PLACES];
        for (int p = 0; p < pe->n; p++) {
            const pe_tensor *t = pe_scope_find_var(pe->place_scope[p], v->name);
            if (!t || !t->buf || pe_tensor_numel(t) != pe_tensor_numel(t0) || t->dtype != t0->dtype)
                return pe_error(PE_ERR_INVALID, "ParallelExecutor: persistable '%s' differs between the places of "
                                "trainer %d before the broadcast from trainer 0", v->name, pe->opt.trainer_id);
            bufs[p] = pe_tensor_data(t);
        }
        /* every trainer holds it (the same startup program ran on each) */
        pe_status st = pe_group_broadcast(pe->comm, bufs, pe_tensor_numel(t0), t0->dtype, 0);
        if (st != PE_OK) return pe_error_wrap(st, "ParallelExecutor: broadcasting '%s' from trainer 0", v->name);
    }
    return PE_OK;
}

/* ---- each run ------------------------------------------------------------ */

pe_status pe_pe_global_rows(pe_parallel_executor *pe, int64_t *total) {
    int64_t local = 0;
    for (int p = 0; p < pe->n; p++) local += pe->rows[p];
    *total = local;
    /* before this run issues any collective of its own */
    return pe_trainers_allreduce(pe, total, 1, PE_DTYPE_INT64);
}

pe_status pe_trainers_allreduce(pe_parallel_executor *pe, void *buf, int64_t count, pe_dtype dt) {
    if (!pe || (!buf && count > 0) || count < 0)
        return pe_error(PE_ERR_INVALID, "pe_trainers_allreduce: no executor, or no buffer for %lld values",
                        (long long)count);
    if (pe->opt.num_trainers <= 1 || count == 0) return PE_OK;
    /* over the processes' MPI communicator: host memory on every kind of
     * place, one value per trainer, summed in trainer order */
#ifdef PE_WITH_MPI
    pe_work *w;
    return outer_wait(pe_comm_allreduce(pe->outer, buf, count, dt, TAG_SUM, &w), &w,
                      "summing values over the trainers");
#else
    (void)dt;
    return pe_error(PE_ERR_INTERNAL, "num_trainers > 1 without MPI");
#endif
}

/* The collectives of g chained in one fixed order: a topological order of
 * the graph that takes the lowest-numbered ready handle first (Kahn's
 * algorithm with a min-heap), the same in every process that built the same
 * program; collective k+1 waits for collective k. Chaining along a
 * topological order never makes a cycle (pe_ssa_graph_topo_order, the
 * order sequential execution runs). Communication still overlaps the
 * backward pass; the collectives run one after another, as one MPI
 * progress thread would run them anyway. */
pe_status pe_pe_chain_collectives(pe_ssa_graph *g) {
    const int n = g->n_h;
    int *order = malloc(sizeof *order * (size_t)(n ? n : 1));
    if (!order) return pe_error(PE_ERR_NOMEM, "out of memory ordering the collectives");
    /* the order of the graph as built: an edge added below goes from a
     * handle earlier in it to a later one, so it leaves the order as it is */
    pe_status st = pe_ssa_graph_topo_order(g, order);
    for (int i = 0, prev = -1; st == PE_OK && i < n; i++) {
        const int h = order[i];
        const pe_handle_kind k = g->h[h].kind;
        if (k == PE_HANDLE_ALLREDUCE || k == PE_HANDLE_REDUCE || k == PE_HANDLE_BCAST || k == PE_HANDLE_ALLREDUCE_FUSED ||
            k == PE_HANDLE_SHARD_SUM || k == PE_HANDLE_SHARD_GATHER || k == PE_HANDLE_ALLGATHER ||
            k == PE_HANDLE_SCATTER) {
            if (prev >= 0 && pe_ssa_graph_add_edge(g, prev, h) != 0) st = pe_error(PE_ERR_NOMEM, "out of memory");
            prev = h;
        }
    }
    free(order);
    return st;
}

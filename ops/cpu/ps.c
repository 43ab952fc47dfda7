/* ops/cpu/ps.c — the trainer's parameter-server ops: send, recv,
 * send_barrier, fetch_barrier (Paddle's DistributeTranspiler pserver
 * mode). Each is one round trip through the process's pserver client
 * (runtime/transport/): all requests of the op go out at once, to every
 * endpoint, then the op waits for every reply, so a step costs one
 * latency per op, not per var. A pserver that refuses (an unknown var, a
 * shape it did not declare) or goes away is this op's error, naming the
 * endpoint and the var.
 *
 * listen_and_serv is not a kernel's job (a kernel never runs other
 * blocks): the Executor runs the server loop (executor/pserver.c) when a
 * block holds it. Its kernel only says so, for a runner that is not the
 * Executor (the ParallelExecutor refuses such programs before).
 */
#include "ops/op.h"
#include "runtime/transport/transport.h"

#include <stdlib.h>

static pe_status client(const pe_op_ctx *ctx, pe_ps_client **c) {
    int64_t tid = pe_ctx_int(ctx, "trainer_id");
    if (tid < 0 || tid > 1000000)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "trainer_id %lld is not a trainer id", (long long)tid);
    pe_status st = pe_ps_client_get((int)tid, c);
    return st == PE_OK ? PE_OK : pe_ctx_error(ctx, st, "%s", pe_last_error());
}

/* epmap (one endpoint per var) and the names the pserver knows them by */
static pe_status var_map(const pe_op_ctx *ctx, const char *slot, bool out, const char *names_attr, int *n,
                         const char *const **eps, const char ***names) {
    int ne = 0, nn = 0;
    *n = out ? pe_ctx_n_out(ctx, slot) : pe_ctx_n_in(ctx, slot);
    *eps = pe_ctx_strings(ctx, "epmap", &ne);
    const char *const *given = pe_ctx_strings(ctx, names_attr, &nn);
    if (ne != *n)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "epmap has %d endpoints for %d vars %s (one per var)", ne, *n, slot);
    if (nn != 0 && nn != *n)
        return pe_ctx_error(ctx, PE_ERR_INVALID, "%s has %d names for %d vars %s (one per var, or none)", names_attr,
                            nn, *n, slot);
    *names = malloc(sizeof **names * (size_t)(*n ? *n : 1));
    if (!*names) return pe_ctx_error(ctx, PE_ERR_NOMEM, "out of memory");
    for (int k = 0; k < *n; k++)
        (*names)[k] = nn ? given[k] : out ? pe_ctx_out_name(ctx, slot, k) : pe_ctx_in_name(ctx, slot, k);
    return PE_OK;
}

/* X[i] -> pserver epmap[i] as send_varnames[i] (default X[i]'s name) */
pe_status pe_cpu_send(const pe_op_ctx *ctx) {
    pe_ps_client *c;
    int n;
    const char *const *eps;
    const char **names;
    PE_CHECK(client(ctx, &c));
    PE_CHECK(var_map(ctx, "X", false, "send_varnames", &n, &eps, &names));
    const pe_tensor **ts = malloc(sizeof *ts * (size_t)(n ? n : 1));
    pe_status st = ts ? PE_OK : PE_ERR_NOMEM;
    for (int k = 0; ts && k < n; k++) ts[k] = pe_ctx_in_at(ctx, "X", k);
    if (st == PE_OK) st = pe_ps_send(c, n, eps, names, ts);
    if (st != PE_OK) st = pe_ctx_error(ctx, st, "%s", st == PE_ERR_NOMEM && !ts ? "out of memory" : pe_last_error());
    free(ts);
    free(names);
    return st;
}

/* Out[i] <- var varnames[i] (default Out[i]'s name) of pserver epmap[i] */
pe_status pe_cpu_recv(const pe_op_ctx *ctx) {
    pe_ps_client *c;
    int n;
    const char *const *eps;
    const char **names;
    PE_CHECK(client(ctx, &c));
    PE_CHECK(var_map(ctx, "Out", true, "varnames", &n, &eps, &names));
    pe_tensor **outs = malloc(sizeof *outs * (size_t)(n ? n : 1));
    pe_status st = outs ? PE_OK : pe_ctx_error(ctx, PE_ERR_NOMEM, "out of memory");
    for (int k = 0; outs && k < n; k++) outs[k] = pe_ctx_out_at(ctx, "Out", k);
    if (st == PE_OK && (st = pe_ps_get(c, n, eps, names, outs, ctx->place)) != PE_OK)
        st = pe_ctx_error(ctx, st, "%s", pe_last_error());
    /* what arrived must be what the trainer program declares */
    for (int k = 0; st == PE_OK && k < n; k++) {
        const pe_var *v = ctx->out_decl ? ctx->out_decl[k] : NULL;
        const pe_tensor *t = outs[k];
        if (v && !pe_var_meta_agrees(v, t->dtype, t->ndim, t->dims)) {
            char a[128], b[128];
            st = pe_ctx_error(ctx, PE_ERR_INVALID, "pserver %s sent '%s' as %s %s, but the program declares '%s' %s %s",
                              eps[k], names[k], pe_dtype_name(t->dtype), pe_dims_str(t->ndim, t->dims, a, sizeof a),
                              v->name, pe_dtype_name(v->dtype), pe_dims_str(v->ndim, v->dims, b, sizeof b));
        }
    }
    free(outs);
    free(names);
    return st;
}

static pe_status barrier(const pe_op_ctx *ctx, int type) {
    pe_ps_client *c;
    int n = 0;
    const char *const *eps = pe_ctx_strings(ctx, "endpoints", &n);
    PE_CHECK(client(ctx, &c));
    pe_status st = pe_ps_barrier(c, type, n, eps);
    return st == PE_OK ? PE_OK : pe_ctx_error(ctx, st, "%s", pe_last_error());
}

pe_status pe_cpu_send_barrier(const pe_op_ctx *ctx) { return barrier(ctx, PE_PS_SEND_BARRIER); }
pe_status pe_cpu_fetch_barrier(const pe_op_ctx *ctx) { return barrier(ctx, PE_PS_FETCH_BARRIER); }

pe_status pe_cpu_listen_and_serv(const pe_op_ctx *ctx) {
    return pe_ctx_error(ctx, PE_ERR_UNSUPPORTED, "listen_and_serv (the pserver loop at %s) runs under the single-place "
                        "Executor (fluid.Executor(place).run(pserver_program), `pe pserver`), not as a kernel of "
                        "another runner", pe_ctx_string(ctx, "endpoint"));
}

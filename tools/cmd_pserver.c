/* tools/cmd_pserver.c — `pe pserver`: run a saved parameter-server program.
 *
 *     pe pserver pserver0.pe --startup pserver0_startup.pe --endpoint 127.0.0.1:6174
 *
 * What: loads a pserver program written by the DistributeTranspiler
 * (t.get_pserver_program(ep), saved with pe.static.save_program), runs its
 * startup program (t.get_startup_program(ep, prog)) into a fresh scope,
 * optionally rebinds the endpoint of its listen_and_serv op, and runs
 * block 0 with pe_executor_run: the executor sees listen_and_serv and runs
 * the server loop (executor/pserver.c) until every trainer has left
 * (exe.close() / pe_ps_trainer_close) or been lost.
 * How: the same steps and error contract as `pe run` (tools/tool.h): usage
 * errors before any file is read, one "pe: error:" line naming the file or
 * endpoint otherwise, 130 after Ctrl-C (pe_interrupt stops the loop). The
 * server loop itself logs "pserver EP: listening (...)" and "pserver EP:
 * done after N steps (...)" on stderr.
 * Why: a pserver needs no Python: the program file and its startup are all
 * it runs, so a cluster can start its servers from the CLI.
 */
#include "tool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct pserver_args {
    const char *program, *startup, *endpoint;
    int threads; /* 0: the executor's default (all cores) */
} pserver_args;

static int parse_args(int argc, char **argv, pserver_args *a) {
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v = NULL;
        int r, prc;
        if (pe_tool_program_arg("pserver", arg, &only_pos, &a->program, &prc)) {
            if (prc != PE_EXIT_OK) return prc;
            continue;
        }
#define SINGLE_FLAG(flag, field)                                                                      \
        if ((r = pe_tool_flag(argc, argv, &i, flag, &v)) != 0) {                                       \
            if (r < 0) return pe_tool_usage_error("pserver", "%s needs a value", flag);                \
            if (!*v) return pe_tool_usage_error("pserver", "%s needs a non-empty value", flag);        \
            if (a->field) return pe_tool_usage_error("pserver", "%s given twice", flag);               \
            a->field = v;                                                                              \
            continue;                                                                                  \
        }
        SINGLE_FLAG("--startup", startup)
        SINGLE_FLAG("--endpoint", endpoint)
#undef SINGLE_FLAG
        if ((r = pe_tool_flag(argc, argv, &i, "--threads", &v)) != 0) {
            if (r < 0) return pe_tool_usage_error("pserver", "--threads needs a value N");
            char *end;
            errno = 0;
            long n = strtol(v, &end, 10);
            if (!*v || *end || errno || n < 1 || n > 1024)
                return pe_tool_usage_error("pserver", "--threads '%s' is not a thread count from 1 to 1024", v);
            a->threads = (int)n;
            continue;
        }
        return pe_tool_usage_error("pserver", "unknown option '%s'", arg);
    }
    if (!a->program) return pe_tool_usage_error("pserver", "missing PROGRAM");
    if (a->endpoint) {
        /* "host:port": the transport checks the host; the port must be there. */
        const char *colon = strrchr(a->endpoint, ':');
        char *end;
        errno = 0;
        long port = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || colon == a->endpoint || !colon[1] || *end || errno || port < 1 || port > 65535)
            return pe_tool_usage_error("pserver", "--endpoint '%s' is not IP:PORT (e.g. 127.0.0.1:6174)",
                                       a->endpoint);
    }
    return PE_EXIT_OK;
}

static pe_op *find_listen_and_serv(pe_program *p) {
    if (p->n_blocks < 1) return NULL;
    pe_block *b = &p->blocks[0];
    for (int i = 0; i < b->n_ops; i++)
        if (!strcmp(b->ops[i].type, "listen_and_serv")) return &b->ops[i];
    return NULL;
}

int pe_cmd_pserver(int argc, char **argv) {
    pserver_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc != PE_EXIT_OK) return rc;

    pe_program *prog = NULL, *startup = NULL;
    pe_scope *scope = NULL;
    pe_executor *ex = NULL;
    pe_status st;
    if ((st = pe_program_load_file(a.program, &prog)) != PE_OK) return pe_tool_fail_file(st, a.program);
    pe_op *ls = find_listen_and_serv(prog);
    if (!ls) {
        rc = pe_tool_fail("%s: not a pserver program: block 0 has no listen_and_serv op (save the program "
                          "of DistributeTranspiler.get_pserver_program(endpoint))", a.program);
        goto done;
    }
    if (a.endpoint && pe_op_set_string(ls, "endpoint", a.endpoint) != PE_OK) {
        rc = pe_tool_fail_status(PE_ERR_NOMEM, "%s: setting the endpoint", a.program);
        goto done;
    }
    const pe_attr *ep = pe_op_attr(ls, "endpoint");
    if (!ep || ep->type != PE_ATTR_STRING || !ep->s || !ep->s[0]) {
        rc = pe_tool_fail("%s: listen_and_serv has no endpoint; give one with --endpoint IP:PORT", a.program);
        goto done;
    }
    if (a.startup && (st = pe_program_load_file(a.startup, &startup)) != PE_OK) {
        rc = pe_tool_fail_file(st, a.startup);
        goto done;
    }
    if (startup && startup->n_blocks < 1) {
        rc = pe_tool_fail("%s: the startup program has no blocks", a.startup);
        goto done;
    }
    scope = pe_scope_new(NULL);
    ex = scope ? pe_executor_new(pe_place_cpu(0)) : NULL;
    if (!ex) {
        rc = pe_tool_fail_status(PE_ERR_NOMEM, "creating the scope and executor");
        goto done;
    }
    if (a.threads > 0) pe_executor_set_num_threads(ex, a.threads);
    pe_tool_sigint_catch(true); /* Ctrl-C: the server loop stops, exit 130 */
    if (startup && (st = pe_executor_run(ex, startup, 0, scope, NULL, 0, NULL, 0, NULL)) != PE_OK) {
        rc = pe_tool_fail_status(st, "startup program %s", a.startup);
        goto done;
    }
    if ((st = pe_executor_run(ex, prog, 0, scope, NULL, 0, NULL, 0, NULL)) != PE_OK) {
        rc = pe_tool_fail_status(st, "%s", a.program);
        goto done;
    }
    if (pe_tool_sigint) {
        rc = pe_tool_interrupted("%s: the server loop on %s stopped", a.program, ep->s);
        goto done;
    }
done:
    pe_tool_sigint_catch(false);
    pe_executor_free(ex);
    pe_scope_free(scope);
    pe_program_free(startup);
    pe_program_free(prog);
    return rc;
}

/* executor/pserver.h — the parameter server's loop (executor/pserver.c),
 * run by the single-place Executor for a block holding listen_and_serv
 * (internal to executor/). */
#ifndef PE_EXECUTOR_PSERVER_H
#define PE_EXECUTOR_PSERVER_H

#include "pe/executor.h"

/* Serves until every trainer has left or been lost. op is the block's
 * listen_and_serv; its optimize blocks run on `place` against `scope`,
 * with up to `threads` threads. Errors name the endpoint. */
pe_status pe_pserver_serve(pe_place place, int threads, const pe_program *prog, int block_idx, pe_scope *scope,
                           const pe_op *op);

#endif

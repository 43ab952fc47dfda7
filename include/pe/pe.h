/* pe/pe.h — the whole public C API of PE.
 *
 *     #include <pe/pe.h>
 *
 *     pe_program *startup, *main;
 *     pe_program_load_file("examples/mlp_infer_startup.pe", &startup);
 *     pe_program_load_file("examples/mlp_infer.pe", &main);
 *     pe_scope *scope = pe_scope_new(NULL);
 *     pe_executor *ex = pe_executor_new(pe_place_cpu(0));
 *     pe_executor_run(ex, startup, 0, scope, NULL, 0, NULL, 0, NULL);
 *     pe_tensor *x = pe_tensor_new();
 *     pe_npy_load("x.npy", x);
 *     pe_feed feed = {"x", x};
 *     const char *fetch[] = {"prob"};
 *     pe_tensor *prob = pe_tensor_new();
 *     if (pe_executor_run(ex, main, 0, scope, &feed, 1, fetch, 1, &prob) != PE_OK)
 *         fprintf(stderr, "pe: error: %s\n", pe_last_error());
 *
 * Every function that can fail returns pe_status and leaves a message in
 * pe_last_error(). Ownership is noted next to each function.
 */
#ifndef PE_PE_H
#define PE_PE_H

#include "pe/status.h"
#include "pe/dtype.h"
#include "pe/tensor.h"
#include "pe/scope.h"
#include "pe/npy.h"
#include "pe/program.h"
#include "pe/executor.h"
#include "pe/checkpoint.h"
#include "pe/passes.h"
#include "pe/strategy.h"
#include "pe/parallel_executor.h"
#include "pe/optimizer.h"
#include "pe/device.h"
#include "pe/ops.h"
#include "pe/build.h"
#include "pe/plan.h"
#include "pe/world.h"
#include "pe/interrupt.h"
#include "pe/pserver.h"
#include "pe/eager.h"

#define PE_VERSION_STRING "0.1.0"

#endif

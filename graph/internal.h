/* graph/internal.h — graph pieces shared inside PE, not public API. */
#ifndef PE_GRAPH_INTERNAL_H
#define PE_GRAPH_INTERNAL_H

#include "pe/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* pe_program_load_buffer without the final pe_program_check: the buffer is
 * still verified (flatbuffers Verifier) and decoded with every structural
 * check (enum ranges, dims count, strings), so the IR is safe to walk, but
 * op types, slots, attrs and vars are not matched against the registry.
 * For tools that must show a program the checker rejects, and for tests of
 * the format itself. *out owned by the caller. */
pe_status pe_program_load_buffer_unchecked(const void *data, size_t size, const char *what,
                                           pe_program **out);

/* Rebuilds block b's name -> var index (graph/program.c) after its vars
 * were written directly (the loader fills the var array in one go). */
void pe_block_reindex(pe_block *b);

#ifdef __cplusplus
}
#endif
#endif

/* runtime/safetensors_internal.h — buffer entry point of the safetensors
 * reader (runtime/safetensors.c), for the libFuzzer target
 * tests/fuzz/fuzz_safetensors.c and tests. Not public API.
 */
#ifndef PE_RUNTIME_SAFETENSORS_INTERNAL_H
#define PE_RUNTIME_SAFETENSORS_INTERNAL_H

#include "pe/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Validates a whole safetensors image (data, size: borrowed) and reads every
 * tensor into scope, as pe_safetensors_read does for a file. `what` names
 * the source in messages. Nothing is added to scope unless the whole image
 * is valid. */
pe_status pe_safetensors_read_buffer(const void *data, size_t size, const char *what, pe_scope *scope);

#ifdef __cplusplus
}
#endif
#endif

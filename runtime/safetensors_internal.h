/* runtime/safetensors_internal.h — the safetensors reader's internal entry
 * points (runtime/safetensors.c). Not public API.
 *
 *     pe_safetensors_file *f;
 *     PE_CHECK(pe_safetensors_open("ckpt.safetensors", &f));   // whole file validated
 *     for (int i = 0; i < pe_safetensors_count(f); i++) {
 *         pe_safetensors_entry e = pe_safetensors_entry_at(f, i); // name, dtype, shape
 *         ... pe_safetensors_load(f, i, tensor) ...
 *     }
 *     pe_safetensors_close(f);
 *
 * The buffer reader is for the libFuzzer target tests/fuzz/fuzz_safetensors.c
 * and tests; the opened file is what graph/checkpoint.c checks against a
 * program before loading anything.
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

/* An opened, validated safetensors file. */
typedef struct pe_safetensors_file pe_safetensors_file;

typedef struct pe_safetensors_entry {
    const char *name;      /* borrowed from the file (valid until close) */
    pe_dtype dtype;
    int ndim;
    const int64_t *dims;   /* borrowed from the file */
} pe_safetensors_entry;

/* Reads and validates the whole file (errors as pe_safetensors_read's).
 * path is borrowed: it names the file in later messages, so it must outlive
 * *out (owned by the caller: pe_safetensors_close). */
pe_status pe_safetensors_open(const char *path, pe_safetensors_file **out);
void pe_safetensors_close(pe_safetensors_file *f); /* accepts NULL */
int pe_safetensors_count(const pe_safetensors_file *f);
pe_safetensors_entry pe_safetensors_entry_at(const pe_safetensors_file *f, int i); /* 0 <= i < count */
int pe_safetensors_find(const pe_safetensors_file *f, const char *name);        /* index, or -1 */
/* Copies entry i into t (resized; t keeps its place when it has storage).
 * Errors name the file and the tensor. */
pe_status pe_safetensors_load(const pe_safetensors_file *f, int i, pe_tensor *t);

#ifdef __cplusplus
}
#endif
#endif

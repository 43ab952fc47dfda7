/* pe/checkpoint.h — checkpoints of persistables in the safetensors format.
 *
 *     if (pe_checkpoint_save("ckpt.safetensors", main, scope) != PE_OK) ...
 *     if (pe_checkpoint_load("ckpt.safetensors", main, scope) != PE_OK)
 *         fprintf(stderr, "%s\n", pe_last_error());   // names file, var, mismatch
 *
 * The file is plain safetensors (8-byte little-endian header length, JSON
 * header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}},
 * "__metadata__" allowed, then the raw little-endian data), so PyTorch and
 * numpy users read it with their own tools. Saving is atomic (a fresh
 * temporary file, fsync, rename): a crash while saving leaves the previous
 * file intact, and a save that cannot write every tensor is refused before
 * anything is written.
 * Loading checks the header (JSON, offsets in bounds, non-overlapping, sizes
 * = numel * dtype size), and the dtype and shape of every persistable var of
 * block 0 of the program against the file, naming any mismatch.
 */
#ifndef PE_CHECKPOINT_H
#define PE_CHECKPOINT_H

#include "pe/program.h"
#include "pe/scope.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* Saves every persistable var of prog's block 0 from scope (borrowed). A
 * persistable var absent from the scope (and its parents), without data, or
 * not of the declared dtype and shape is an error naming each such var (up
 * to 12, then a count); nothing is written then and the file at path keeps
 * its old bytes. */
pe_status pe_checkpoint_save(const char *path, const pe_program *prog, const pe_scope *scope);
/* Loads every persistable var of prog's block 0 from path into scope (vars
 * created in scope when absent). A var missing from the file, an extra
 * tensor, or a dtype/shape mismatch is an error naming the var. */
pe_status pe_checkpoint_load(const char *path, const pe_program *prog, pe_scope *scope);
/* Flags of pe_checkpoint_load_ex. IGNORE_EXTRA: tensors of the file that
 * are not persistable vars of the program (a training checkpoint's
 * optimizer moments, learning rate, ... loaded into an inference clone) are
 * skipped instead of refused; a persistable missing from the file is still
 * an error naming it. */
enum { PE_CHECKPOINT_IGNORE_EXTRA = 1 };
pe_status pe_checkpoint_load_ex(const char *path, const pe_program *prog, pe_scope *scope, unsigned flags);

/* Lower level: read every tensor of a safetensors file into scope, and
 * write named tensors of a scope (every name must be in scope with data:
 * otherwise an error listing them, and nothing is written). */
pe_status pe_safetensors_read(const char *path, pe_scope *scope);
pe_status pe_safetensors_write(const char *path, const pe_scope *scope, const char *const *names, int n);
/* The same with the header's "__metadata__" (string -> string; readers
 * such as safetensors' safe_open().metadata() see it). Writing: n_meta
 * pairs meta[2i] = key, meta[2i + 1] = value (borrowed; valid UTF-8; a key
 * given twice, or PE's own "producer", is refused). Reading: the value of
 * `key` in *value (malloc'd, owned by the caller: free()), NULL when the
 * file has none; key NULL reads the tensors alone. */
pe_status pe_safetensors_write_meta(const char *path, const pe_scope *scope, const char *const *names, int n,
                                    const char *const *meta, int n_meta);
pe_status pe_safetensors_read_meta(const char *path, pe_scope *scope, const char *key, char **value);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

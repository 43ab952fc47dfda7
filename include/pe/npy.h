/* pe/npy.h — numpy .npy files (format versions 1.0, 2.0, 3.0).
 *
 *     pe_tensor *x = pe_tensor_new();
 *     if (pe_npy_load("x.npy", x) != PE_OK) puts(pe_last_error());
 *     pe_npy_save("y.npy", x);
 *
 * Reads C-order, little-endian (or byte-order-free) arrays of PE's dtypes
 * (<f4 <f8 <i4 <i8 |u1 |b1 <f2). Anything else — Fortran order, big endian,
 * object arrays, a header that lies about the size — is a clear PE_ERR_FORMAT
 * naming the file and the problem. Writes version 1.0 (2.0 if the header
 * needs it).
 */
#ifndef PE_NPY_H
#define PE_NPY_H

#include "pe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* Loads into `out` (resized, CPU place 0). `what` names the source in
 * messages (a path, "<buffer>"). */
pe_status pe_npy_load(const char *path, pe_tensor *out);
pe_status pe_npy_load_buffer(const void *data, size_t size, const char *what, pe_tensor *out);
/* Writes t (must be on CPU) atomically (a fresh temporary, fsync, rename:
 * docs/guide.md §7). A tensor without its data (never set, or a buffer
 * smaller than its shape) is an error, and a file at path keeps its bytes. */
pe_status pe_npy_save(const char *path, const pe_tensor *t);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

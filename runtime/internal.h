/* runtime/internal.h — runtime pieces shared inside PE, not public API. */
#ifndef PE_RUNTIME_INTERNAL_H
#define PE_RUNTIME_INTERNAL_H

#include "pe/device.h"
#include "pe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PE_MAX_PLACES: pe/device.h */

/* CUDA runtime seam (runtime/cuda/). Only defined when PE_WITH_CUDA. */
#ifdef PE_WITH_CUDA
void *pe_cuda_malloc(int device, size_t bytes);          /* NULL + message on failure */
void pe_cuda_free(int device, void *ptr);
pe_status pe_cuda_memcpy(void *dst, pe_place dst_place, const void *src, pe_place src_place, size_t bytes);
/* pe_cuda_device_count: pe/device.h */
void *pe_cuda_stream(int device);   /* cudaStream_t of the place (non-blocking); NULL + message when unusable */
pe_status pe_cuda_sync(int device);
/* Per-device library handles (runtime/cuda/handles.cu), bound to the place's
 * stream and created on first use; NULL + message on failure. The cuBLAS
 * handle runs without TF32 unless PE_CUDA_TF32=1 (float32 GEMMs then match
 * the CPU up to summation order). A cuDNN handle must not be used by two
 * threads at once: hold pe_cuda_dnn_lock(device) from the first call on it
 * to the last (independent ops of one place run on several threads). */
void *pe_cuda_blas(int device); /* cublasHandle_t */
void *pe_cuda_dnn(int device);  /* cudnnHandle_t */
void pe_cuda_dnn_lock(int device);
void pe_cuda_dnn_unlock(int device);
#endif

/* pe_memcpy_places (copies bytes between any two places): pe/device.h */

/* Why t's data cannot be read (to write it to a file), or NULL when it can:
 * "no data (never initialized?)", or "a buffer of N bytes where <dtype>
 * <shape> needs M". A tensor of
 * 0 elements needs no buffer. The reason is written into buf (n bytes). */
const char *pe_tensor_data_problem(const pe_tensor *t, char *buf, size_t n);

/* A list of names for one error message: "'a' (why), 'b' (why) and 3 more".
 * Keeps the first PE_NAMELIST_SHOWN, counts all. Zero-initialize it. */
#define PE_NAMELIST_SHOWN 12
typedef struct pe_namelist {
    char text[1200];
    size_t len;
    int n;          /* names added */
    int shown;      /* names in text */
} pe_namelist;
void pe_namelist_add(pe_namelist *l, const char *name, const char *why);
/* The list (borrowed from l, valid until the next add). */
const char *pe_namelist_str(pe_namelist *l);

/* Reads a whole file into a malloc'ed buffer (caller frees). Errors name the path. */
pe_status pe_read_file(const char *path, void **data, size_t *size);
/* Writes atomically: a new temporary "<path>.tmp.<pid>.<6 random letters or
 * digits>" created with O_EXCL | O_NOFOLLOW (never a planted name), given
 * the mode of the file it replaces (a new file: 0666 & ~umask), fsync,
 * rename over path, fsync of the directory. Removes the temporaries of path
 * left by processes that no longer exist. path either holds the old bytes
 * or all of the new ones; on error the old file is untouched. Errors name
 * the path and the system's reason. Rules: runtime/alloc.c. */
pe_status pe_write_file_atomic(const char *path, const void *data, size_t size);
/* Tests only: when set, gives the random part of the temporary's name of
 * each attempt (suffix: 6 letters or digits), so a test can plant files at
 * every name a save will try. */
extern void (*pe_tmp_suffix_hook)(int attempt, char suffix[7]);

/* NaN / Inf checks (runtime/nan_inf.c). */
typedef enum pe_nonfinite { PE_FINITE = 0, PE_NAN, PE_POS_INF, PE_NEG_INF } pe_nonfinite;
/* The first NaN or infinity of n host values of dtype dt (float32, float64,
 * float16, bfloat16; other dtypes: PE_FINITE); *index set when found. */
pe_nonfinite pe_find_nonfinite(const void *data, pe_dtype dt, int64_t n, int64_t *index);
/* The same over elements [b, e) of t (e < 0: to the end; any place: copied
 * to the host first). *kind = PE_FINITE when there is none or t is empty;
 * *index is t's element index. Fails only when the copy does. */
pe_status pe_tensor_find_nonfinite(const pe_tensor *t, int64_t b, int64_t e, int64_t *index, pe_nonfinite *kind);
const char *pe_nonfinite_name(pe_nonfinite k); /* "NaN", "+Inf", "-Inf" */
/* FLAGS_check_nan_inf=1 (or true) in the environment, read once. */
bool pe_flag_check_nan_inf(void);

/* The interrupt request (pe/interrupt.h, runtime/interrupt.c): a run notes
 * pe_interrupt_mark() at its start and stops once pe_interrupted_since(mark)
 * (a relaxed atomic load: cheap enough to check before every op), returning
 * pe_interrupted_error() (PE_ERR_CANCELLED, "run interrupted ..."). */
unsigned pe_interrupt_mark(void);
bool pe_interrupted_since(unsigned mark);
pe_status pe_interrupted_error(void);

/* runtime/env.c: CLOCK_MONOTONIC in seconds; the number in environment
 * variable `name` when it parses whole and lies in [lo, hi], else dflt. */
double pe_now_s(void);
double pe_env_number(const char *name, double dflt, double lo, double hi);

#ifdef __cplusplus
}
#endif
#endif

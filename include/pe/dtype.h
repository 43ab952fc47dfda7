/* pe/dtype.h — element types and places.
 *
 *     size_t sz = pe_dtype_size(PE_DTYPE_FP32);          // 4
 *     pe_place p = pe_place_cpu(0);
 */
#ifndef PE_DTYPE_H
#define PE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* Values are stable: they are stored in program files. */
typedef enum pe_dtype {
    PE_DTYPE_FP32 = 0,
    PE_DTYPE_FP64,
    PE_DTYPE_INT32,
    PE_DTYPE_INT64,
    PE_DTYPE_UINT8,
    PE_DTYPE_BOOL,
    PE_DTYPE_FP16,  /* storage only */
    PE_DTYPE_BF16,  /* storage only */
    PE_DTYPE_COUNT
} pe_dtype;

size_t pe_dtype_size(pe_dtype dt);
/* "float32", "float64", "int32", "int64", "uint8", "bool", "float16", "bfloat16". */
const char *pe_dtype_name(pe_dtype dt);
/* Accepts the names above and Paddle's aliases ("fp32", "float", "int", ...).
 * Returns false for an unknown name. */
bool pe_dtype_from_name(const char *name, pe_dtype *out);
bool pe_dtype_valid(int v);

typedef enum pe_place_kind { PE_PLACE_CPU = 0, PE_PLACE_CUDA, PE_PLACE_KIND_COUNT } pe_place_kind;

typedef struct pe_place {
    pe_place_kind kind;
    int id;
} pe_place;

static inline pe_place pe_place_cpu(int id) { pe_place p = {PE_PLACE_CPU, id}; return p; }
static inline pe_place pe_place_cuda(int id) { pe_place p = {PE_PLACE_CUDA, id}; return p; }
static inline bool pe_place_eq(pe_place a, pe_place b) { return a.kind == b.kind && a.id == b.id; }
/* Writes "cpu:0" / "cuda:1" into buf (at least 16 bytes); returns buf. */
char *pe_place_str(pe_place p, char *buf, size_t n);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

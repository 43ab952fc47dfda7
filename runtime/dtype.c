/* runtime/dtype.c — dtype sizes and names, place names. */
#include "pe/dtype.h"

#include <stdio.h>
#include <string.h>

static const struct { const char *name; size_t size; } k_dtypes[PE_DTYPE_COUNT] = {
    [PE_DTYPE_FP32] = {"float32", 4}, [PE_DTYPE_FP64] = {"float64", 8},
    [PE_DTYPE_INT32] = {"int32", 4},  [PE_DTYPE_INT64] = {"int64", 8},
    [PE_DTYPE_UINT8] = {"uint8", 1},  [PE_DTYPE_BOOL] = {"bool", 1},
    [PE_DTYPE_FP16] = {"float16", 2}, [PE_DTYPE_BF16] = {"bfloat16", 2},
};

bool pe_dtype_valid(int v) { return v >= 0 && v < PE_DTYPE_COUNT; }

size_t pe_dtype_size(pe_dtype dt) { return pe_dtype_valid((int)dt) ? k_dtypes[dt].size : 0; }

const char *pe_dtype_name(pe_dtype dt) { return pe_dtype_valid((int)dt) ? k_dtypes[dt].name : "invalid"; }

bool pe_dtype_from_name(const char *name, pe_dtype *out) {
    static const struct { const char *alias; pe_dtype dt; } aliases[] = {
        {"fp32", PE_DTYPE_FP32}, {"float", PE_DTYPE_FP32}, {"fp64", PE_DTYPE_FP64},
        {"double", PE_DTYPE_FP64}, {"int", PE_DTYPE_INT32}, {"long", PE_DTYPE_INT64},
        {"fp16", PE_DTYPE_FP16}, {"half", PE_DTYPE_FP16}, {"bf16", PE_DTYPE_BF16},
    };
    if (!name) return false;
    for (int i = 0; i < PE_DTYPE_COUNT; i++)
        if (!strcmp(name, k_dtypes[i].name)) { *out = (pe_dtype)i; return true; }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(name, aliases[i].alias)) { *out = aliases[i].dt; return true; }
    return false;
}

char *pe_place_str(pe_place p, char *buf, size_t n) {
    snprintf(buf, n, "%s:%d", p.kind == PE_PLACE_CUDA ? "cuda" : "cpu", p.id);
    return buf;
}

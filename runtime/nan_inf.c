/* runtime/nan_inf.c — the first NaN or infinity of a floating-point tensor,
 * and the FLAGS_check_nan_inf environment switch (read once).
 *
 * How: the values are tested by their bits (exponent all ones), not with
 * isnan/isinf, so the test holds whatever floating-point flags the library
 * is built with, and float16 / bfloat16 (storage-only dtypes here) are
 * tested the same way. The scan goes block by block: a branch-free pass
 * over a block says whether it holds a non-finite value (the compiler
 * vectorises it), and only such a block is searched element by element.
 * A tensor on another place is copied to the host first.
 *
 * Why here: both executors check every op's outputs with it when
 * FLAGS_check_nan_inf / ExecutionStrategy.check_nan_inf is on
 * (executor/nan_inf.c formats the message); it only reads tensors.
 */
#include "runtime/internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BLOCK 1024

/* The index of the first element of x[0, n) whose bits under `mask` are all
 * ones (a NaN or an infinity), or -1. One function per width. */
#define FIND_FIRST(name, type)                                                   \
    static int64_t name(const type *x, int64_t n, type mask) {                   \
        for (int64_t b = 0; b < n; b += BLOCK) {                                 \
            int64_t e = b + BLOCK < n ? b + BLOCK : n;                           \
            int any = 0;                                                         \
            for (int64_t i = b; i < e; i++) any |= (x[i] & mask) == mask;        \
            if (!any) continue;                                                  \
            for (int64_t i = b; i < e; i++)                                      \
                if ((x[i] & mask) == mask) return i;                             \
        }                                                                        \
        return -1;                                                               \
    }
FIND_FIRST(find16, uint16_t)
FIND_FIRST(find32, uint32_t)
FIND_FIRST(find64, uint64_t)

pe_nonfinite pe_find_nonfinite(const void *data, pe_dtype dt, int64_t n, int64_t *index) {
    int64_t i;
    bool nan, neg;
    switch (dt) {
    case PE_DTYPE_FP32: {
        const uint32_t *x = data;
        if ((i = find32(x, n, 0x7f800000u)) < 0) return PE_FINITE;
        nan = x[i] & 0x007fffffu, neg = x[i] >> 31;
        break;
    }
    case PE_DTYPE_FP64: {
        const uint64_t *x = data;
        if ((i = find64(x, n, 0x7ff0000000000000ull)) < 0) return PE_FINITE;
        nan = x[i] & 0x000fffffffffffffull, neg = x[i] >> 63;
        break;
    }
    case PE_DTYPE_FP16:
    case PE_DTYPE_BF16: {
        const uint16_t *x = data;
        const uint16_t exp = dt == PE_DTYPE_FP16 ? 0x7c00 : 0x7f80;
        if ((i = find16(x, n, exp)) < 0) return PE_FINITE;
        nan = x[i] & (uint16_t)(0x7fff & ~exp), neg = x[i] >> 15;
        break;
    }
    default: return PE_FINITE; /* integers and bools have no NaN */
    }
    *index = i;
    return nan ? PE_NAN : neg ? PE_NEG_INF : PE_POS_INF;
}

const char *pe_nonfinite_name(pe_nonfinite k) {
    static const char *const names[] = {"no NaN or Inf", "NaN", "+Inf", "-Inf"};
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "?";
}

pe_status pe_tensor_find_nonfinite(const pe_tensor *t, int64_t b, int64_t e, int64_t *index, pe_nonfinite *kind) {
    *kind = PE_FINITE;
    int64_t n = pe_tensor_numel(t);
    if (e < 0 || e > n) e = n;
    if (!t->buf || b >= e) return PE_OK;
    if (t->dtype != PE_DTYPE_FP32 && t->dtype != PE_DTYPE_FP64 && t->dtype != PE_DTYPE_FP16 &&
        t->dtype != PE_DTYPE_BF16)
        return PE_OK;
    size_t es = pe_dtype_size(t->dtype);
    const char *data = (const char *)pe_tensor_data(t) + (size_t)b * es;
    void *host = NULL;
    if (t->buf->place.kind != PE_PLACE_CPU) {
        size_t bytes = (size_t)(e - b) * es;
        if (!(host = malloc(bytes)))
            return pe_error(PE_ERR_NOMEM, "out of memory copying %zu bytes to the host to check them for NaN/Inf", bytes);
        pe_status st = pe_memcpy_places(host, pe_place_cpu(0), data, t->buf->place, bytes);
        if (st != PE_OK) {
            free(host);
            return st;
        }
        data = host;
    }
    int64_t i;
    *kind = pe_find_nonfinite(data, t->dtype, e - b, &i);
    if (*kind != PE_FINITE) *index = b + i;
    free(host);
    return PE_OK;
}

/* ---- FLAGS_check_nan_inf -------------------------------------------------- */

static bool g_check_nan_inf;
static pthread_once_t g_check_once = PTHREAD_ONCE_INIT;

static void check_nan_inf_from_env(void) {
    const char *e = getenv("FLAGS_check_nan_inf");
    if (!e || !*e || !strcmp(e, "0") || !strcasecmp(e, "false")) return;
    if (!strcmp(e, "1") || !strcasecmp(e, "true")) g_check_nan_inf = true;
    else pe_log(PE_LOG_WARN, "FLAGS_check_nan_inf='%s' is not 0, 1, true or false: the check stays off", e);
}

bool pe_flag_check_nan_inf(void) {
    pthread_once(&g_check_once, check_nan_inf_from_env);
    return g_check_nan_inf;
}

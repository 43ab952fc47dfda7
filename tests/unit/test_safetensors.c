/* tests/unit/test_safetensors.c — safetensors files and checkpoints
 * (runtime/safetensors.c; checkpoints: graph/checkpoint.c).
 *
 * A fixture built byte by byte in Python (tests/data/safetensors/) is read
 * and checked against recomputed values; every dtype round-trips bitwise;
 * hostile headers, every truncation and random bit flips give errors without
 * crash or leak; checkpoint/program mismatches name file, var and problem;
 * a child SIGKILLed in the middle of pe_checkpoint_save leaves the
 * previous checkpoint bitwise intact (and its temporary is removed by the
 * next save); a save that cannot write every persistable (absent from the
 * scope, without data, too small a buffer) is refused, naming each one, and
 * leaves the old file byte-identical.
 */
#include "tests/unit/op_test_util.h"
#include "runtime/safetensors_internal.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char g_tmpdir[256];

static void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_tmpdir, name); }

static void fixture_path(char *buf, size_t n) {
    const char *s = getenv("PE_SOURCE_DIR");
    snprintf(buf, n, "%s/tests/data/safetensors/fixture.safetensors", s && *s ? s : ".");
}

static unsigned char *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

static size_t bytes_in_use(void) { return (size_t)pe_alloc_get_stats(pe_place_cpu(0)).bytes_in_use; }

static float half_to_float(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? INFINITY : ldexpf((float)(m + 1024), e - 25);
    return s ? -v : v;
}

static float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static const pe_tensor *need_var(const pe_scope *s, const char *name, pe_dtype dt, int ndim, const int64_t *dims) {
    const pe_tensor *t = pe_scope_find_var(s, name);
    if (!t) fail_msg("var %s missing", name);
    assert_int_equal(t->dtype, dt);
    assert_int_equal(t->ndim, ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(t->dims[i], dims[i]);
    return t;
}

/* ---- the hand-built fixture -------------------------------------------- */

static void test_read_fixture(void **state) {
    (void)state;
    char p[512];
    fixture_path(p, sizeof p);
    pe_scope *s = pe_scope_new(NULL);
    if (pe_safetensors_read(p, s) != PE_OK) fail_msg("%s", pe_last_error());
    assert_int_equal(pe_scope_size(s), 8); /* "__metadata__" is not a tensor */

    const pe_tensor *t = need_var(s, "weight", PE_DTYPE_FP32, 2, (int64_t[]){2, 3});
    for (int i = 0; i < 6; i++) assert_true(((float *)pe_tensor_data(t))[i] == ((float)i - 2.5f) * 0.75f);
    t = need_var(s, "bias", PE_DTYPE_FP64, 1, (int64_t[]){3});
    for (int i = 0; i < 3; i++) assert_true(((double *)pe_tensor_data(t))[i] == i / 8.0 - 1);
    t = need_var(s, "step", PE_DTYPE_INT64, 0, NULL);
    assert_true(*(int64_t *)pe_tensor_data(t) == INT64_C(1234567890123));
    t = need_var(s, "ids", PE_DTYPE_INT32, 2, (int64_t[]){2, 2});
    for (int i = 0; i < 4; i++) assert_int_equal(((int32_t *)pe_tensor_data(t))[i], i * 1000003 - 6000000);
    t = need_var(s, "pixels", PE_DTYPE_UINT8, 1, (int64_t[]){5});
    for (int i = 0; i < 5; i++) assert_int_equal(((uint8_t *)pe_tensor_data(t))[i], i * 50);
    t = need_var(s, "mask", PE_DTYPE_BOOL, 1, (int64_t[]){4});
    for (int i = 0; i < 4; i++) assert_int_equal(((uint8_t *)pe_tensor_data(t))[i], i % 3 == 0);
    t = need_var(s, "half", PE_DTYPE_FP16, 2, (int64_t[]){2, 2});
    for (int i = 0; i < 4; i++) assert_true(half_to_float(((uint16_t *)pe_tensor_data(t))[i]) == i / 4.0f - 1);
    t = need_var(s, "bhalf", PE_DTYPE_BF16, 1, (int64_t[]){3});
    static const float bh[3] = {1.0f, -2.5f, 0.15625f};
    for (int i = 0; i < 3; i++) assert_true(bf16_to_float(((uint16_t *)pe_tensor_data(t))[i]) == bh[i]);
    pe_scope_free(s);
}

/* ---- round trip ---------------------------------------------------------- */

static void fill_random(pe_tensor *t, uint32_t *seed) {
    unsigned char *p = pe_tensor_data(t);
    for (size_t i = 0; i < pe_tensor_nbytes(t); i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = t->dtype == PE_DTYPE_BOOL ? (*seed >> 31) : (unsigned char)(*seed >> 24);
    }
}

static void test_roundtrip_bitwise(void **state) {
    (void)state;
    static const struct { const char *name; pe_dtype dt; int ndim; int64_t dims[8]; } vars[] = {
        {"f32", PE_DTYPE_FP32, 2, {17, 3}}, {"f64", PE_DTYPE_FP64, 1, {9}},
        {"i32", PE_DTYPE_INT32, 3, {2, 2, 2}}, {"i64", PE_DTYPE_INT64, 0, {0}},
        {"u8", PE_DTYPE_UINT8, 1, {13}}, {"bool", PE_DTYPE_BOOL, 2, {3, 3}},
        {"f16", PE_DTYPE_FP16, 1, {5}}, {"bf16", PE_DTYPE_BF16, 1, {7}},
        {"empty", PE_DTYPE_FP32, 2, {0, 4}}, {"rank8", PE_DTYPE_UINT8, 8, {1, 2, 1, 2, 1, 2, 1, 2}},
        {"w\"eird\\ name\n", PE_DTYPE_FP32, 1, {2}}, {"fc_0.w_0@GRAD/\xc3\xa9", PE_DTYPE_FP32, 1, {1}},
    };
    enum { NV = sizeof vars / sizeof vars[0] };
    size_t base = bytes_in_use();
    pe_scope *s = pe_scope_new(NULL);
    const char *names[NV];
    uint32_t seed = 777;
    for (int i = 0; i < NV; i++) {
        pe_tensor *t = pe_scope_var(s, vars[i].name);
        assert_int_equal(pe_tensor_resize(t, vars[i].dt, vars[i].ndim, vars[i].dims, pe_place_cpu(0)), PE_OK);
        fill_random(t, &seed);
        names[i] = vars[i].name;
    }
    char p1[512], p2[512];
    tmp_path(p1, sizeof p1, "rt1.safetensors");
    tmp_path(p2, sizeof p2, "rt2.safetensors");
    if (pe_safetensors_write(p1, s, names, NV) != PE_OK) fail_msg("%s", pe_last_error());
    pe_scope *r = pe_scope_new(NULL);
    if (pe_safetensors_read(p1, r) != PE_OK) fail_msg("%s", pe_last_error());
    assert_int_equal(pe_scope_size(r), NV);
    for (int i = 0; i < NV; i++) {
        const pe_tensor *a = pe_scope_find_var(s, names[i]);
        const pe_tensor *b = need_var(r, names[i], a->dtype, a->ndim, a->dims);
        assert_int_equal(pe_tensor_nbytes(b), pe_tensor_nbytes(a));
        if (pe_tensor_nbytes(a)) assert_memory_equal(pe_tensor_data(a), pe_tensor_data(b), pe_tensor_nbytes(a));
    }
    /* Writing what was read gives the same file, byte for byte. */
    assert_int_equal(pe_safetensors_write(p2, r, names, NV), PE_OK);
    size_t n1, n2;
    unsigned char *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    /* The data starts 8-byte aligned (header padded as the reference writer does). */
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | b1[i];
    assert_int_equal(hl % 8, 0);
    free(b1);
    free(b2);
    unlink(p1);
    unlink(p2);
    pe_scope_free(r);
    pe_scope_free(s);
    assert_int_equal(bytes_in_use(), base);
}

static void test_write_errors(void **state) {
    (void)state;
    pe_scope *s = pe_scope_new(NULL);
    pe_tensor *t = pe_scope_var(s, "a");
    assert_int_equal(pe_tensor_resize(t, PE_DTYPE_FP32, 1, (int64_t[]){2}, pe_place_cpu(0)), PE_OK);
    pe_tensor *u = pe_scope_var(s, "nodata");
    assert_int_equal(pe_tensor_set_meta(u, PE_DTYPE_FP32, 1, (int64_t[]){2}), PE_OK);
    char p[512];
    tmp_path(p, sizeof p, "bad.safetensors");
    assert_int_equal(pe_safetensors_write(p, s, (const char *[]){"a", "zz"}, 2), PE_ERR_NOT_FOUND);
    assert_non_null(strstr(pe_last_error(), "'zz'"));
    assert_int_equal(pe_safetensors_write(p, s, (const char *[]){"a", "a"}, 2), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "twice"));
    assert_int_equal(pe_safetensors_write(p, s, (const char *[]){"nodata"}, 1), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "no data"));
    assert_int_equal(pe_safetensors_write(p, s, (const char *[]){"__metadata__"}, 1), PE_ERR_INVALID);
    assert_int_equal(pe_safetensors_write(p, s, (const char *[]){"bad\xff"}, 1), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "tensor name 'bad\xff' is not valid UTF-8 (at byte 3)"));
    /* The reader's rule: an empty or an over-long name is refused here too,
     * not written for the reader to refuse. */
    assert_int_equal(pe_safetensors_write(p, s, (const char *[]){""}, 1), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "tensor name '' is empty"));
    char long_name[4098];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    assert_int_equal(pe_safetensors_write(p, s, (const char *[]){long_name}, 1), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "has 4097 bytes (at most 4096)"));
    assert_int_equal(access(p, F_OK), -1); /* nothing was written */
    tmp_path(p, sizeof p, "no/dir/x.safetensors");
    assert_int_equal(pe_safetensors_write(p, s, (const char *[]){"a"}, 1), PE_ERR_IO);
    assert_non_null(strstr(pe_last_error(), "no/dir/x.safetensors"));
    assert_int_equal(pe_safetensors_read(p, s), PE_ERR_IO);
    pe_scope_free(s);
}

/* The header's "__metadata__": written beside PE's "producer" (escaped as
 * JSON), read back by key; absent keys give NULL; bad keys refused. */
static void test_metadata(void **state) {
    (void)state;
    pe_scope *s = pe_scope_new(NULL);
    pe_tensor *t = pe_scope_var(s, "a");
    assert_int_equal(pe_tensor_resize(t, PE_DTYPE_FP32, 1, (int64_t[]){3}, pe_place_cpu(0)), PE_OK);
    char p[512];
    tmp_path(p, sizeof p, "meta.safetensors");
    const char *meta[] = {"pe.objects", "{\"epoch\": 3, \"q\": \"a\\\"b\"}\n\x01", "format", "pt"};
    if (pe_safetensors_write_meta(p, s, (const char *[]){"a"}, 1, meta, 2) != PE_OK) fail_msg("%s", pe_last_error());
    pe_scope *r = pe_scope_new(NULL);
    char *v = NULL;
    if (pe_safetensors_read_meta(p, r, "pe.objects", &v) != PE_OK) fail_msg("%s", pe_last_error());
    assert_non_null(v);
    assert_string_equal(v, meta[1]);
    free(v);
    need_var(r, "a", PE_DTYPE_FP32, 1, (int64_t[]){3});
    assert_int_equal(pe_safetensors_read_meta(p, r, "format", &v), PE_OK);
    assert_string_equal(v, "pt");
    free(v);
    assert_int_equal(pe_safetensors_read_meta(p, r, "absent", &v), PE_OK);
    assert_null(v);
    assert_int_equal(pe_safetensors_read_meta(p, r, "producer", &v), PE_OK);
    assert_string_equal(v, "pe");
    free(v);
    pe_scope_free(r);
    /* refused, nothing written */
    unlink(p);
    assert_int_equal(pe_safetensors_write_meta(p, s, (const char *[]){"a"}, 1, (const char *[]){"producer", "x"}, 1),
                     PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "metadata key 'producer' is PE's own"));
    assert_int_equal(pe_safetensors_write_meta(p, s, (const char *[]){"a"}, 1,
                                               (const char *[]){"k", "1", "j", "2", "k", "3"}, 3), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "metadata key 'k' is given twice"));
    assert_int_equal(pe_safetensors_write_meta(p, s, (const char *[]){"a"}, 1, (const char *[]){"k", "bad\xff"}, 1),
                     PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "metadata value of 'k' is not valid UTF-8"));
    assert_int_equal(pe_safetensors_write_meta(p, s, (const char *[]){"a"}, 1, (const char *[]){"k", NULL}, 1),
                     PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "metadata value of 'k' is NULL"));
    assert_int_equal(access(p, F_OK), -1);
    pe_scope_free(s);
}

/* ---- hostile input -------------------------------------------------------- */

/* Header length + header text + dlen data bytes (value 1, valid BOOL).
 * hlen_override >= 0 replaces the length field. Caller frees. */
static unsigned char *mk_st(const char *header, long long hlen_override, size_t dlen, size_t *size) {
    size_t hl = strlen(header), n = 8 + hl + dlen;
    unsigned char *b = malloc(n + 1);
    assert_non_null(b);
    uint64_t len = hlen_override >= 0 ? (uint64_t)hlen_override : hl;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(len >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, 1, dlen);
    *size = n;
    return b;
}

#define E(name, dt, shape, b, e) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_hostile_headers(void **state) {
    (void)state;
    static const struct { const char *h; size_t dlen; pe_status want; const char *needle; } cases[] = {
        {"{" E("a", "F32", "[2]", 0, 8) "}", 8, PE_OK, NULL},
        {"{" E("a", "F32", "[2]", 0, 8) "}   ", 8, PE_OK, NULL},
        {"{}", 0, PE_OK, NULL},
        {"{\"__metadata__\":{\"k\":\"v\"}," E("a", "BOOL", "[3]", 0, 3) "}", 3, PE_OK, NULL},
        {"{" E("a", "U8", "[0]", 0, 0) "," E("b", "U8", "[]", 0, 1) "}", 1, PE_OK, NULL},
        {"{" E("a", "F32", "[2]", 0, 8) "," E("b", "I64", "[1]", 8, 16) "}", 16, PE_OK, NULL},
        {"{" E("b", "I64", "[1]", 8, 16) "," E("a", "F32", "[2]", 0, 8) "}", 16, PE_OK, NULL},
        {"{" E("a", "F32", "[2.0]", 0, 8) "}", 8, PE_OK, NULL},
        {"[1,2]", 0, PE_ERR_FORMAT, "must start with '{'"},
        {"", 0, PE_ERR_FORMAT, "must start with '{'"},
        {"{\"a\":}", 0, PE_ERR_FORMAT, "not valid JSON"},
        {"{\"a\":{}", 0, PE_ERR_FORMAT, "not valid JSON"},
        {"{} {}", 0, PE_ERR_FORMAT, "bytes after the JSON object"},
        {"{\"\xff\":1}", 0, PE_ERR_FORMAT, "UTF-8"},
        {"{\"\xc0\xaf\":1}", 0, PE_ERR_FORMAT, "UTF-8"},
        {"{\"a\":1}", 0, PE_ERR_FORMAT, "tensor 'a': entry is not a JSON object"},
        {"{" E("a", "I8", "[2]", 0, 2) "}", 2, PE_ERR_FORMAT, "unsupported dtype 'I8'"},
        {"{" E("a", "F8_E4M3", "[2]", 0, 2) "}", 2, PE_ERR_FORMAT, "unsupported dtype"},
        {"{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, PE_ERR_FORMAT, "dtype is not a string"},
        {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, PE_ERR_FORMAT, "missing 'dtype'"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, PE_ERR_FORMAT, "missing 'shape'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, PE_ERR_FORMAT, "missing 'data_offsets'"},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, PE_ERR_FORMAT, "twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, PE_ERR_FORMAT, "unexpected key 'x'"},
        {"{" E("a", "F32", "2", 0, 8) "}", 8, PE_ERR_FORMAT, "shape is not a list"},
        {"{" E("a", "F32", "[-2]", 0, 8) "}", 8, PE_ERR_FORMAT, "shape[0] is not a non-negative integer"},
        {"{" E("a", "F32", "[1, 2.5]", 0, 8) "}", 8, PE_ERR_FORMAT, "shape[1]"},
        {"{" E("a", "F32", "[1e300]", 0, 8) "}", 8, PE_ERR_FORMAT, "shape[0]"},
        {"{" E("a", "F32", "[\"2\"]", 0, 8) "}", 8, PE_ERR_FORMAT, "shape[0]"},
        {"{" E("a", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4, PE_ERR_FORMAT, "more than 8 dimensions"},
        {"{" E("a", "F32", "[4294967296,4294967296]", 0, 8) "}", 8, PE_ERR_FORMAT, "invalid shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, PE_ERR_FORMAT, "pair"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8, PE_ERR_FORMAT, "pair"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{}}}", 8, PE_ERR_FORMAT, "pair"},
        {"{" E("a", "F32", "[2]", 8, 0) "}", 8, PE_ERR_FORMAT, "end before they begin"},
        {"{" E("a", "F32", "[2]", 0, 8) "}", 7, PE_ERR_FORMAT, "run past the end of the data (7 bytes)"},
        {"{" E("a", "F32", "[2]", 0, 9007199254740992) "}", 8, PE_ERR_FORMAT, "run past the end"},
        {"{" E("a", "F32", "[2]", 0, 8) "}", 9, PE_ERR_FORMAT, "1 trailing bytes"},
        {"{" E("a", "F32", "[2]", 0, 12) "}", 12, PE_ERR_FORMAT, "hold 12 bytes but shape [2] of F32 needs 8"},
        {"{" E("a", "F32", "[2]", 4, 12) "}", 12, PE_ERR_FORMAT, "leave a gap"},
        {"{" E("a", "F32", "[2]", 0, 8) "," E("b", "F32", "[2]", 4, 12) "}", 12, PE_ERR_FORMAT, "overlap"},
        {"{" E("a", "F32", "[2]", 0, 8) "," E("b", "F32", "[2]", 0, 8) "}", 8, PE_ERR_FORMAT, "overlap"},
        {"{" E("a", "F32", "[2]", 0, 8) "," E("a", "F32", "[2]", 8, 16) "}", 16, PE_ERR_FORMAT, "names 'a' twice"},
        {"{\"__metadata__\":[]}", 0, PE_ERR_FORMAT, "\"__metadata__\" is not a JSON object"},
        {"{\"__metadata__\":{\"k\":1}}", 0, PE_ERR_FORMAT, "value of 'k' is not a string"},
        {"{" E("", "F32", "[2]", 0, 8) "}", 8, PE_ERR_FORMAT, "tensor name '' is empty"},
        /* names that cannot come back as they went in: a NUL (cJSON would
         * hand back "a"), in a value too (a dtype "F32\0junk" read as F32) */
        {"{" E("a\\u0000b", "F32", "[2]", 0, 8) "}", 8, PE_ERR_FORMAT, "escaped NUL (\\u0000) at header byte 3"},
        {"{" E("a", "F32\\u0000junk", "[2]", 0, 8) "}", 8, PE_ERR_FORMAT, "escaped NUL"},
        {"{\"__metadata__\":{\"k\":\"v\\u0000w\"}}", 0, PE_ERR_FORMAT, "escaped NUL"},
        {"{" E("a\\\\u0000", "F32", "[2]", 0, 8) "}", 8, PE_OK, NULL}, /* "a\\u0000": a backslash, no NUL */
        {"{" E("a\\nb\\u0001", "F32", "[2]", 0, 8) "}", 8, PE_OK, NULL}, /* control characters come back */
    };
    size_t base = bytes_in_use();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        unsigned char *b = mk_st(cases[i].h, -1, cases[i].dlen, &n);
        pe_scope *s = pe_scope_new(NULL);
        pe_status st = pe_safetensors_read_buffer(b, n, "hostile.safetensors", s);
        if (st != cases[i].want)
            fail_msg("case %zu %s: got %s (%s)", i, cases[i].h, pe_status_name(st), pe_last_error());
        if (st != PE_OK) {
            const char *msg = pe_last_error();
            if (!strstr(msg, "hostile.safetensors") || !strstr(msg, cases[i].needle))
                fail_msg("case %zu: message '%s' lacks the file name or '%s'", i, msg, cases[i].needle);
            assert_int_equal(pe_scope_size(s), 0); /* nothing half-loaded */
        }
        pe_scope_free(s);
        free(b);
    }
    /* BOOL bytes other than 0/1, header length fields that lie. */
    size_t n;
    pe_scope *s = pe_scope_new(NULL);
    unsigned char *b = mk_st("{" E("m", "BOOL", "[3]", 0, 3) "}", -1, 3, &n);
    b[n - 1] = 7;
    assert_int_equal(pe_safetensors_read_buffer(b, n, "x", s), PE_ERR_FORMAT);
    assert_non_null(strstr(pe_last_error(), "BOOL element 2 has byte value 7"));
    free(b);
    b = mk_st("{}", 1000, 0, &n);
    assert_int_equal(pe_safetensors_read_buffer(b, n, "x", s), PE_ERR_FORMAT);
    assert_non_null(strstr(pe_last_error(), "header length 1000 runs past the end"));
    free(b);
    b = mk_st("{}", 100000001, 0, &n);
    assert_int_equal(pe_safetensors_read_buffer(b, n, "x", s), PE_ERR_FORMAT);
    assert_non_null(strstr(pe_last_error(), "above the 100000000-byte limit"));
    free(b);
    b = mk_st("{}", (long long)0x7fffffffffffffffLL, 0, &n);
    assert_int_equal(pe_safetensors_read_buffer(b, n, "x", s), PE_ERR_FORMAT);
    free(b);
    assert_int_equal(pe_safetensors_read_buffer("\x02\0\0", 3, "x", s), PE_ERR_FORMAT);
    assert_non_null(strstr(pe_last_error(), "shorter than the 8-byte header length"));
    assert_int_equal(pe_scope_size(s), 0);
    pe_scope_free(s);
    assert_int_equal(bytes_in_use(), base);
}

static void test_every_truncation_and_bit_flips(void **state) {
    (void)state;
    char p[512];
    fixture_path(p, sizeof p);
    size_t n;
    unsigned char *full = slurp(p, &n);
    size_t base = bytes_in_use();
    for (size_t len = 0; len < n; len++) {
        unsigned char *b = malloc(len ? len : 1);
        memcpy(b, full, len);
        pe_scope *s = pe_scope_new(NULL);
        pe_status st = pe_safetensors_read_buffer(b, len, "cut.safetensors", s);
        if (st != PE_ERR_FORMAT) fail_msg("cut to %zu of %zu bytes: %s", len, n, pe_status_name(st));
        assert_int_equal(pe_scope_size(s), 0);
        pe_scope_free(s);
        free(b);
    }
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    int ok = 0, bad = 0;
    for (int iter = 0; iter < 20000; iter++) {
        unsigned char *b = malloc(n);
        memcpy(b, full, n);
        for (int k = 0; k < 1 + iter % 3; k++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            size_t bit = (size_t)(rng % (n * 8));
            b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        }
        pe_scope *s = pe_scope_new(NULL);
        pe_status st = pe_safetensors_read_buffer(b, n, "flip.safetensors", s);
        if (st == PE_OK) ok++;
        else if (st == PE_ERR_FORMAT) { bad++; assert_int_equal(pe_scope_size(s), 0); }
        else fail_msg("%s: %s", pe_status_name(st), pe_last_error());
        pe_scope_free(s);
        free(b);
    }
    assert_true(ok > 100);
    assert_true(bad > 100);
    free(full);
    assert_int_equal(bytes_in_use(), base);
}

/* ---- checkpoints ------------------------------------------------------------ */

static pe_var *add_var(pe_program *p, const char *name, pe_dtype dt, int ndim, const int64_t *dims, bool persist) {
    pe_var *v = pe_block_add_var(&p->blocks[0], name, dt, ndim, dims);
    assert_non_null(v);
    v->persistable = persist;
    return v;
}

/* w: fp32 [3, 2], b: fp32 [2], step: int64 [1] persistable; x: fp32 [-1, 3] not. */
static pe_program *mk_program(void) {
    pe_program *p = pe_program_new();
    add_var(p, "x", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3}, false);
    add_var(p, "w", PE_DTYPE_FP32, 2, (int64_t[]){3, 2}, true);
    add_var(p, "b", PE_DTYPE_FP32, 1, (int64_t[]){2}, true);
    add_var(p, "step", PE_DTYPE_INT64, 1, (int64_t[]){1}, true);
    return p;
}

static pe_scope *mk_scope(uint32_t seed) {
    pe_scope *s = pe_scope_new(NULL);
    static const struct { const char *n; pe_dtype dt; int nd; int64_t d[2]; } v[] = {
        {"x", PE_DTYPE_FP32, 2, {4, 3}}, {"w", PE_DTYPE_FP32, 2, {3, 2}},
        {"b", PE_DTYPE_FP32, 1, {2}}, {"step", PE_DTYPE_INT64, 1, {1}},
    };
    for (int i = 0; i < 4; i++) {
        pe_tensor *t = pe_scope_var(s, v[i].n);
        assert_int_equal(pe_tensor_resize(t, v[i].dt, v[i].nd, v[i].d, pe_place_cpu(0)), PE_OK);
        fill_random(t, &seed);
    }
    return s;
}

static void assert_same_var(const pe_scope *a, const pe_scope *b, const char *name) {
    const pe_tensor *x = pe_scope_find_var(a, name), *y = pe_scope_find_var(b, name);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(x->dtype, y->dtype);
    assert_int_equal(x->ndim, y->ndim);
    assert_int_equal(pe_tensor_nbytes(x), pe_tensor_nbytes(y));
    assert_memory_equal(pe_tensor_data(x), pe_tensor_data(y), pe_tensor_nbytes(x));
}

static void expect_load_error(const char *path, const pe_program *p, pe_status want, const char *n1, const char *n2) {
    pe_scope *s = mk_scope(99);
    pe_scope *ref = mk_scope(99);
    pe_status st = pe_checkpoint_load(path, p, s);
    if (st != want) fail_msg("expected %s, got %s (%s)", pe_status_name(want), pe_status_name(st), pe_last_error());
    const char *msg = pe_last_error();
    if (!strstr(msg, path) || !strstr(msg, n1) || (n2 && !strstr(msg, n2)))
        fail_msg("message '%s' lacks the file, '%s' or '%s'", msg, n1, n2 ? n2 : "");
    /* A refused checkpoint changes nothing in the scope. */
    assert_same_var(s, ref, "w");
    assert_same_var(s, ref, "b");
    pe_scope_free(s);
    pe_scope_free(ref);
}

static void test_checkpoint_roundtrip_and_mismatches(void **state) {
    (void)state;
    char path[512];
    tmp_path(path, sizeof path, "ckpt.safetensors");
    pe_program *p = mk_program();
    pe_scope *s = mk_scope(1);
    if (pe_checkpoint_save(path, p, s) != PE_OK) fail_msg("%s", pe_last_error());

    /* Only the persistables are saved; loading creates them in an empty scope. */
    pe_scope *r = pe_scope_new(NULL);
    if (pe_checkpoint_load(path, p, r) != PE_OK) fail_msg("%s", pe_last_error());
    assert_int_equal(pe_scope_size(r), 3);
    assert_null(pe_scope_find_var(r, "x"));
    assert_same_var(s, r, "w");
    assert_same_var(s, r, "b");
    assert_same_var(s, r, "step");
    pe_scope_free(r);

    /* Loading into a scope that has the vars overwrites them in place. */
    r = mk_scope(2);
    assert_int_equal(pe_checkpoint_load(path, p, r), PE_OK);
    assert_same_var(s, r, "w");
    pe_scope_free(r);

    /* Program dims of -1 match any size. */
    pe_program *q = mk_program();
    pe_block_find_var(&q->blocks[0], "w")->dims[0] = -1;
    r = pe_scope_new(NULL);
    assert_int_equal(pe_checkpoint_load(path, q, r), PE_OK);
    pe_scope_free(r);
    pe_program_free(q);

    /* A persistable var missing from the file. */
    q = mk_program();
    add_var(q, "moment", PE_DTYPE_FP32, 1, (int64_t[]){2}, true);
    expect_load_error(path, q, PE_ERR_NOT_FOUND, "'moment'", "missing");
    pe_program_free(q);
    /* Wrong dtype. */
    q = mk_program();
    pe_block_find_var(&q->blocks[0], "b")->dtype = PE_DTYPE_FP64;
    expect_load_error(path, q, PE_ERR_INVALID, "'b'", "float64");
    pe_program_free(q);
    /* Wrong shape: different dims, different rank. */
    q = mk_program();
    pe_block_find_var(&q->blocks[0], "w")->dims[0] = 2;
    expect_load_error(path, q, PE_ERR_INVALID, "'w'", "[2, 2]");
    pe_program_free(q);
    q = mk_program();
    pe_var *v = pe_block_find_var(&q->blocks[0], "b");
    v->ndim = 2;
    v->dims[1] = 1;
    expect_load_error(path, q, PE_ERR_INVALID, "'b'", "shape [2]");
    pe_program_free(q);
    /* A tensor of the file the program does not hold as persistable. */
    q = mk_program();
    pe_block_find_var(&q->blocks[0], "step")->persistable = false;
    expect_load_error(path, q, PE_ERR_INVALID, "'step'", "non-persistable");
    /* PE_CHECKPOINT_IGNORE_EXTRA skips it (an inference clone of a training
     * program), loading the rest. */
    r = pe_scope_new(NULL);
    assert_int_equal(pe_checkpoint_load_ex(path, q, r, PE_CHECKPOINT_IGNORE_EXTRA), PE_OK);
    assert_int_equal(pe_scope_size(r), 2);
    assert_null(pe_scope_find_var(r, "step"));
    assert_same_var(s, r, "w");
    pe_scope_free(r);
    pe_program_free(q);
    /* Several tensors the program lacks: all named; a missing var is still an error with the flag. */
    q = pe_program_new();
    add_var(q, "x", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3}, false);
    add_var(q, "w", PE_DTYPE_FP32, 2, (int64_t[]){3, 2}, true);
    expect_load_error(path, q, PE_ERR_INVALID, "2 tensors of the checkpoint are not persistable vars", "'step'");
    assert_non_null(strstr(pe_last_error(), "'b'"));
    add_var(q, "moment", PE_DTYPE_FP32, 1, (int64_t[]){2}, true);
    r = pe_scope_new(NULL);
    assert_int_equal(pe_checkpoint_load_ex(path, q, r, PE_CHECKPOINT_IGNORE_EXTRA), PE_ERR_NOT_FOUND);
    assert_non_null(strstr(pe_last_error(), "'moment'"));
    assert_int_equal(pe_scope_size(r), 0);
    assert_int_equal(pe_checkpoint_load_ex(path, q, r, 2), PE_ERR_INVALID);
    pe_scope_free(r);
    pe_program_free(q);
    /* A corrupt file. */
    char bad[512];
    tmp_path(bad, sizeof bad, "corrupt.safetensors");
    FILE *f = fopen(bad, "wb");
    fwrite("\x05\0\0\0\0\0\0\0{\"a\":", 1, 13, f);
    fclose(f);
    expect_load_error(bad, p, PE_ERR_FORMAT, "not valid JSON", NULL);
    unlink(bad);

    /* Saving a scope whose tensor disagrees with the program is refused. */
    pe_tensor *w = pe_scope_find_var(s, "w");
    assert_int_equal(pe_tensor_resize(w, PE_DTYPE_FP32, 2, (int64_t[]){2, 3}, pe_place_cpu(0)), PE_OK);
    tmp_path(bad, sizeof bad, "refused.safetensors");
    assert_int_equal(pe_checkpoint_save(bad, p, s), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "'w'"));
    assert_int_equal(access(bad, F_OK), -1);

    unlink(path);
    pe_scope_free(s);
    pe_program_free(p);
}

/* The temporary "<path>.tmp.<pid>.XXXXXX" of process pid, into out; false when there is none. */
static bool find_tmp(const char *path, pid_t pid, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s.tmp.%ld.", slash + 1, (long)pid);
    DIR *d = opendir(g_tmpdir);
    assert_non_null(d);
    struct dirent *e;
    bool found = false;
    while (!found && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix)) && strlen(e->d_name) == strlen(prefix) + 6) {
            snprintf(out, n, "%s/%s", g_tmpdir, e->d_name);
            found = true;
        }
    closedir(d);
    return found;
}

/* A child saving a large checkpoint is SIGKILLed while it writes; the
 * previous checkpoint must still be there, bitwise identical. */
static void test_checkpoint_atomic_under_sigkill(void **state) {
    (void)state;
    enum { N = 32 << 20 }; /* 32M floats = 128 MB */
    char path[512];
    tmp_path(path, sizeof path, "big.safetensors");
    pe_program *p = pe_program_new();
    add_var(p, "big", PE_DTYPE_FP32, 1, (int64_t[]){N}, true);
    pe_scope *s = pe_scope_new(NULL);
    pe_tensor *t = pe_scope_var(s, "big");
    assert_int_equal(pe_tensor_resize(t, PE_DTYPE_FP32, 1, (int64_t[]){N}, pe_place_cpu(0)), PE_OK);
    float *x = pe_tensor_data(t);
    for (int i = 0; i < N; i++) x[i] = (float)i * 0.5f;
    if (pe_checkpoint_save(path, p, s) != PE_OK) fail_msg("%s", pe_last_error());
    size_t old_n;
    unsigned char *old = slurp(path, &old_n);

    bool killed_mid_write = false;
    char tmp[600] = "";
    for (int attempt = 0; attempt < 5 && !killed_mid_write; attempt++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            for (int i = 0; i < N; i++) x[i] = -1.0f;
            _exit(pe_checkpoint_save(path, p, s) == PE_OK ? 0 : 1);
        }
        /* Wait until the child's temporary file has some but not all bytes. */
        struct timespec nap = {0, 20000};
        for (int spin = 0; spin < 2000000; spin++) {
            struct stat sb;
            if (find_tmp(path, pid, tmp, sizeof tmp) && stat(tmp, &sb) == 0 && sb.st_size > 0 &&
                (size_t)sb.st_size < old_n) {
                kill(pid, SIGKILL);
                killed_mid_write = true;
                print_message("killed the saving child with %lld of %zu bytes written (attempt %d)\n",
                              (long long)sb.st_size, old_n, attempt + 1);
                break;
            }
            int wst;
            if (waitpid(pid, &wst, WNOHANG) == pid) { pid = -1; break; } /* finished first */
            nanosleep(&nap, NULL);
        }
        if (pid > 0) {
            int wst;
            assert_int_equal(waitpid(pid, &wst, 0), pid);
            if (killed_mid_write) {
                assert_true(WIFSIGNALED(wst));
                assert_int_equal(WTERMSIG(wst), SIGKILL);
            }
        }
        if (!killed_mid_write) {
            /* The child won the race and replaced the file: start again from the old one. */
            for (int i = 0; i < N; i++) x[i] = (float)i * 0.5f;
            assert_int_equal(pe_checkpoint_save(path, p, s), PE_OK);
        }
    }
    if (!killed_mid_write) fail_msg("could not SIGKILL the child while it was writing (5 attempts)");

    size_t now_n;
    unsigned char *now = slurp(path, &now_n);
    assert_int_equal(now_n, old_n);
    assert_memory_equal(now, old, old_n);
    pe_scope *r = pe_scope_new(NULL);
    if (pe_checkpoint_load(path, p, r) != PE_OK) fail_msg("%s", pe_last_error());
    assert_same_var(s, r, "big");
    pe_scope_free(r);
    /* The dead child's temporary is still there; the next save removes it. */
    assert_int_equal(access(tmp, F_OK), 0);
    assert_int_equal(pe_checkpoint_save(path, p, s), PE_OK);
    if (access(tmp, F_OK) == 0) fail_msg("the next save left the dead child's temporary %s", tmp);
    free(now);
    free(old);
    unlink(path);
    pe_scope_free(s);
    pe_program_free(p);
}

/* A save that cannot write every persistable is refused before anything is
 * written: each such var is named (absent, no data, a buffer too small for
 * its shape, a mismatch), the old file keeps its bytes and no temporary is
 * left; pe_safetensors_write lists every name it cannot write the same way. */
static void expect_refused(const char *path, const unsigned char *old, size_t old_n, pe_status got,
                           pe_status want, const char *const *names) {
    if (got != want) fail_msg("expected %s, got %s (%s)", pe_status_name(want), pe_status_name(got), pe_last_error());
    const char *msg = pe_last_error();
    if (!strstr(msg, path)) fail_msg("message '%s' does not name %s", msg, path);
    for (int i = 0; names[i]; i++)
        if (!strstr(msg, names[i])) fail_msg("message '%s' does not name %s", msg, names[i]);
    size_t now_n;
    unsigned char *now = slurp(path, &now_n);
    assert_int_equal(now_n, old_n);
    assert_memory_equal(now, old, old_n);
    free(now);
    char tmp[600];
    assert_false(find_tmp(path, getpid(), tmp, sizeof tmp));
}

static void test_save_refuses_incomplete(void **state) {
    (void)state;
    char path[512];
    tmp_path(path, sizeof path, "keep.safetensors");
    pe_program *p = mk_program();
    add_var(p, "moment", PE_DTYPE_FP32, 1, (int64_t[]){2}, true);
    add_var(p, "lr", PE_DTYPE_FP32, 1, (int64_t[]){1}, true);
    pe_scope *s = mk_scope(7);
    assert_int_equal(pe_tensor_resize(pe_scope_var(s, "moment"), PE_DTYPE_FP32, 1, (int64_t[]){2}, pe_place_cpu(0)),
                     PE_OK);
    assert_int_equal(pe_tensor_resize(pe_scope_var(s, "lr"), PE_DTYPE_FP32, 1, (int64_t[]){1}, pe_place_cpu(0)),
                     PE_OK);
    if (pe_checkpoint_save(path, p, s) != PE_OK) fail_msg("%s", pe_last_error());
    size_t old_n;
    unsigned char *old = slurp(path, &old_n);

    /* Two persistables absent from the scope: both named, NOT_FOUND. */
    assert_true(pe_scope_erase_var(s, "moment"));
    assert_true(pe_scope_erase_var(s, "lr"));
    expect_refused(path, old, old_n, pe_checkpoint_save(path, p, s), PE_ERR_NOT_FOUND,
                   (const char *[]){"'moment' (not in the scope)", "'lr' (not in the scope)", "2 of the 5", NULL});
    /* Every persistable absent (an empty scope). */
    pe_scope *empty = pe_scope_new(NULL);
    expect_refused(path, old, old_n, pe_checkpoint_save(path, p, empty), PE_ERR_NOT_FOUND,
                   (const char *[]){"'w'", "'b'", "'step'", "'moment'", "'lr'", "5 of the 5", NULL});
    /* In the scope without a value, with too small a buffer, and a mismatch, next to an absent one. */
    pe_scope_var(s, "moment");
    assert_int_equal(pe_tensor_set_meta(pe_scope_find_var(s, "b"), PE_DTYPE_FP32, 1, (int64_t[]){64}), PE_OK);
    pe_tensor *step = pe_scope_find_var(s, "step");
    assert_int_equal(pe_tensor_resize(step, PE_DTYPE_FP32, 1, (int64_t[]){1}, pe_place_cpu(0)), PE_OK);
    expect_refused(path, old, old_n, pe_checkpoint_save(path, p, s), PE_ERR_INVALID,
                   (const char *[]){"'moment' (no data", "'lr' (not in the scope)", "'b' (a buffer of 8 bytes where float32 [64] needs 256)",
                                    "'step' (holds float32 [1] but the program declares int64 [1])", NULL});
    /* Many absent: the first 12 named, the rest counted. */
    pe_program *q = pe_program_new();
    for (int i = 0; i < 40; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "absent_%d", i);
        add_var(q, nm, PE_DTYPE_FP32, 1, (int64_t[]){1}, true);
    }
    expect_refused(path, old, old_n, pe_checkpoint_save(path, q, s), PE_ERR_NOT_FOUND,
                   (const char *[]){"'absent_0'", "'absent_11'", "and 28 more", NULL});
    assert_null(strstr(pe_last_error(), "'absent_12'"));
    pe_program_free(q);
    /* The raw writer: every name it cannot write, nothing written. */
    expect_refused(path, old, old_n, pe_safetensors_write(path, s, (const char *[]){"w", "zz", "moment", "yy"}, 4),
                   PE_ERR_INVALID, (const char *[]){"'zz' (not in the scope)", "'yy'", "'moment' (no data", NULL});
    expect_refused(path, old, old_n, pe_safetensors_write(path, empty, (const char *[]){"w", "b"}, 2),
                   PE_ERR_NOT_FOUND, (const char *[]){"'w'", "'b'", NULL});

    /* A complete save still round-trips. */
    pe_scope_free(s);
    s = mk_scope(8);
    assert_int_equal(pe_tensor_resize(pe_scope_var(s, "moment"), PE_DTYPE_FP32, 1, (int64_t[]){2}, pe_place_cpu(0)),
                     PE_OK);
    assert_int_equal(pe_tensor_resize(pe_scope_var(s, "lr"), PE_DTYPE_FP32, 1, (int64_t[]){1}, pe_place_cpu(0)),
                     PE_OK);
    if (pe_checkpoint_save(path, p, s) != PE_OK) fail_msg("%s", pe_last_error());
    pe_scope *r = pe_scope_new(NULL);
    if (pe_checkpoint_load(path, p, r) != PE_OK) fail_msg("%s", pe_last_error());
    assert_same_var(s, r, "w");
    assert_same_var(s, r, "b");
    assert_same_var(s, r, "step");
    pe_scope_free(r);
    pe_scope_free(empty);
    pe_scope_free(s);
    pe_program_free(p);
    free(old);
    unlink(path);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/pe_test_st.XXXXXX");
    return mkdtemp(g_tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return rmdir(g_tmpdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_fixture),
        cmocka_unit_test(test_roundtrip_bitwise),
        cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_hostile_headers),
        cmocka_unit_test(test_every_truncation_and_bit_flips),
        cmocka_unit_test(test_checkpoint_roundtrip_and_mismatches),
        cmocka_unit_test(test_checkpoint_atomic_under_sigkill),
        cmocka_unit_test(test_save_refuses_incomplete),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

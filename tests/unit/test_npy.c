/* tests/unit/test_npy.c — .npy reading and writing (runtime/npy.c).
 *
 * Files written by numpy (tests/data/npy/, made by make_fixtures.py) are read
 * and checked against values recomputed here; PE's own output is compared
 * byte for byte with numpy's; then every hostile header the parser must
 * refuse, every truncation of valid files and seeded random bit flips — each
 * an error (never a crash), the destination tensor untouched, no bytes
 * leaked from PE's allocator (LeakSanitizer covers malloc in the ASan build);
 * a save refused for a tensor without its data leaves the old file as it was.
 */
#include "tests/unit/op_test_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

static char g_tmpdir[256];

static const char *src_dir(void) {
    const char *s = getenv("PE_SOURCE_DIR");
    return s && *s ? s : ".";
}

static void fixture_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/tests/data/npy/%s", src_dir(), name);
}

static void tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_tmpdir, name);
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

/* IEEE half -> float, written independently of any PE code. */
static float half_to_float(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m + 1024), e - 25);
    return s ? -v : v;
}

static void assert_dims(const pe_tensor *t, pe_dtype dt, int ndim, const int64_t *dims) {
    assert_int_equal(t->dtype, dt);
    assert_int_equal(t->ndim, ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(t->dims[i], dims[i]);
}

static pe_tensor *load_fixture(const char *name) {
    char p[512];
    fixture_path(p, sizeof p, name);
    pe_tensor *t = pe_tensor_new();
    pe_status st = pe_npy_load(p, t);
    if (st != PE_OK) fail_msg("loading %s: %s", name, pe_last_error());
    return t;
}

/* ---- files written by numpy -------------------------------------------- */

static void test_numpy_fixtures(void **state) {
    (void)state;
    pe_tensor *t = load_fixture("f4.npy");
    assert_dims(t, PE_DTYPE_FP32, 2, (int64_t[]){2, 3});
    for (int i = 0; i < 6; i++) assert_true(((float *)pe_tensor_data(t))[i] == ((float)i - 2.5f) * 0.75f);
    pe_tensor_free(t);

    t = load_fixture("f8.npy");
    assert_dims(t, PE_DTYPE_FP64, 3, (int64_t[]){2, 3, 4});
    for (int i = 0; i < 24; i++) assert_true(((double *)pe_tensor_data(t))[i] == i / 8.0 - 1);
    pe_tensor_free(t);

    t = load_fixture("i4.npy");
    assert_dims(t, PE_DTYPE_INT32, 2, (int64_t[]){3, 4});
    for (int i = 0; i < 12; i++) assert_int_equal(((int32_t *)pe_tensor_data(t))[i], i * 1000003 - 6000000);
    pe_tensor_free(t);

    t = load_fixture("i8.npy");
    assert_dims(t, PE_DTYPE_INT64, 1, (int64_t[]){5});
    for (int i = 0; i < 5; i++)
        assert_true(((int64_t *)pe_tensor_data(t))[i] == (int64_t)(i - 2) * INT64_C(1000000000000));
    pe_tensor_free(t);

    t = load_fixture("u1.npy");
    assert_dims(t, PE_DTYPE_UINT8, 2, (int64_t[]){16, 16});
    for (int i = 0; i < 256; i++) assert_int_equal(((uint8_t *)pe_tensor_data(t))[i], i);
    pe_tensor_free(t);

    t = load_fixture("b1.npy");
    assert_dims(t, PE_DTYPE_BOOL, 1, (int64_t[]){7});
    for (int i = 0; i < 7; i++) assert_int_equal(((uint8_t *)pe_tensor_data(t))[i], i % 3 == 0);
    pe_tensor_free(t);

    t = load_fixture("f2.npy");
    assert_dims(t, PE_DTYPE_FP16, 3, (int64_t[]){2, 2, 2});
    for (int i = 0; i < 8; i++)
        assert_true(half_to_float(((uint16_t *)pe_tensor_data(t))[i]) == i / 4.0f - 1);
    pe_tensor_free(t);

    t = load_fixture("scalar_f8.npy");
    assert_dims(t, PE_DTYPE_FP64, 0, NULL);
    assert_true(*(double *)pe_tensor_data(t) == 3.25);
    pe_tensor_free(t);

    t = load_fixture("empty_f4.npy");
    assert_dims(t, PE_DTYPE_FP32, 2, (int64_t[]){0, 3});
    pe_tensor_free(t);

    t = load_fixture("rank8_u1.npy");
    assert_dims(t, PE_DTYPE_UINT8, 8, (int64_t[]){2, 2, 2, 2, 2, 2, 2, 2});
    for (int i = 0; i < 256; i++) assert_int_equal(((uint8_t *)pe_tensor_data(t))[i], i);
    pe_tensor_free(t);

    /* Format 2.0 (4-byte header length) and 3.0 (utf-8 header). */
    t = load_fixture("v2_f4.npy");
    assert_dims(t, PE_DTYPE_FP32, 2, (int64_t[]){3, 2});
    for (int i = 0; i < 6; i++) assert_true(((float *)pe_tensor_data(t))[i] == (float)i);
    pe_tensor_free(t);

    t = load_fixture("v3_i8.npy");
    assert_dims(t, PE_DTYPE_INT64, 1, (int64_t[]){4});
    for (int i = 0; i < 4; i++) assert_true(((int64_t *)pe_tensor_data(t))[i] == -3 * i);
    pe_tensor_free(t);
}

/* Valid numpy files PE refuses, each with a message naming file and problem. */
static void test_numpy_files_refused(void **state) {
    (void)state;
    static const struct { const char *file, *needle; } cases[] = {
        {"fortran_f4.npy", "Fortran-order"},
        {"bigendian_f4.npy", "big-endian"},
        {"complex_c8.npy", "unsupported dtype descr '<c8'"},
        {"structured.npy", "structured dtypes"},
        {"object.npy", "object arrays"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char p[512];
        fixture_path(p, sizeof p, cases[i].file);
        pe_tensor *t = pe_tensor_new();
        assert_int_equal(pe_npy_load(p, t), PE_ERR_FORMAT);
        const char *msg = pe_last_error();
        if (!strstr(msg, cases[i].needle) || !strstr(msg, cases[i].file))
            fail_msg("%s: message '%s' lacks '%s' or the file name", cases[i].file, msg, cases[i].needle);
        assert_false(pe_tensor_has_data(t));
        pe_tensor_free(t);
    }
}

/* ---- writing ------------------------------------------------------------ */

/* PE's output for the fixture arrays is byte-identical to np.save's. */
static void test_bytes_match_numpy(void **state) {
    (void)state;
    static const char *names[] = {"f4.npy", "f8.npy", "i4.npy", "i8.npy", "u1.npy", "b1.npy",
                                  "f2.npy", "scalar_f8.npy", "empty_f4.npy", "rank8_u1.npy"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        pe_tensor *t = load_fixture(names[i]);
        char out[512], ref[512];
        tmp_path(out, sizeof out, names[i]);
        fixture_path(ref, sizeof ref, names[i]);
        assert_int_equal(pe_npy_save(out, t), PE_OK);
        size_t na, nb;
        unsigned char *a = slurp(out, &na), *b = slurp(ref, &nb);
        if (na != nb || memcmp(a, b, na) != 0)
            fail_msg("%s: PE wrote %zu bytes that differ from numpy's %zu", names[i], na, nb);
        assert_int_equal(na % 64, (pe_tensor_nbytes(t)) % 64); /* data starts 64-aligned */
        free(a);
        free(b);
        pe_tensor_free(t);
        unlink(out);
    }
}

static void test_roundtrip_every_dtype(void **state) {
    (void)state;
    static const pe_dtype dts[] = {PE_DTYPE_FP32, PE_DTYPE_FP64, PE_DTYPE_INT32, PE_DTYPE_INT64,
                                   PE_DTYPE_UINT8, PE_DTYPE_BOOL, PE_DTYPE_FP16};
    static const struct { int ndim; int64_t dims[8]; } shapes[] = {
        {0, {0}}, {1, {1}}, {1, {37}}, {2, {5, 0}}, {3, {2, 3, 5}}, {8, {1, 2, 1, 3, 1, 2, 1, 2}},
    };
    uint32_t seed = 12345;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            pe_tensor *t = pe_tensor_new(), *u = pe_tensor_new();
            assert_int_equal(pe_tensor_resize(t, dts[d], shapes[s].ndim, shapes[s].dims, pe_place_cpu(0)), PE_OK);
            unsigned char *p = pe_tensor_data(t);
            for (size_t i = 0; i < pe_tensor_nbytes(t); i++) {
                seed = seed * 1664525u + 1013904223u;
                p[i] = dts[d] == PE_DTYPE_BOOL ? (seed >> 31) : (unsigned char)(seed >> 24);
            }
            char path[512];
            tmp_path(path, sizeof path, "rt.npy");
            assert_int_equal(pe_npy_save(path, t), PE_OK);
            assert_int_equal(pe_npy_load(path, u), PE_OK);
            assert_dims(u, dts[d], t->ndim, t->dims);
            assert_int_equal(pe_tensor_nbytes(u), pe_tensor_nbytes(t));
            if (pe_tensor_nbytes(t)) assert_memory_equal(pe_tensor_data(u), pe_tensor_data(t), pe_tensor_nbytes(t));
            unlink(path);
            pe_tensor_free(t);
            pe_tensor_free(u);
        }
    }
}

static void test_save_errors(void **state) {
    (void)state;
    char path[512];
    pe_tensor *t = pe_tensor_new();
    assert_int_equal(pe_tensor_resize(t, PE_DTYPE_BF16, 1, (int64_t[]){3}, pe_place_cpu(0)), PE_OK);
    tmp_path(path, sizeof path, "bf16.npy");
    assert_int_equal(pe_npy_save(path, t), PE_ERR_UNSUPPORTED);
    assert_non_null(strstr(pe_last_error(), "bfloat16"));
    assert_int_equal(access(path, F_OK), -1);

    assert_int_equal(pe_tensor_set_meta(t, PE_DTYPE_FP32, 1, (int64_t[]){4}), PE_OK);
    pe_tensor_clear(t);
    assert_int_equal(pe_npy_save(path, t), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "no data"));

    assert_int_equal(pe_tensor_resize(t, PE_DTYPE_FP32, 1, (int64_t[]){4}, pe_place_cpu(0)), PE_OK);
    tmp_path(path, sizeof path, "no/such/dir/x.npy");
    assert_int_equal(pe_npy_save(path, t), PE_ERR_IO);
    assert_non_null(strstr(pe_last_error(), "no/such/dir/x.npy"));

    assert_int_equal(pe_npy_load(path, t), PE_ERR_IO);
    assert_non_null(strstr(pe_last_error(), "no/such/dir/x.npy"));
    assert_int_equal(pe_npy_load(g_tmpdir, t), PE_ERR_IO); /* a directory */
    pe_tensor_free(t);
}

/* A save that cannot write the tensor's data (never set, a view emptied to
 * no memory, a buffer smaller than the shape) is refused, and a good file at
 * the path keeps its bytes; nothing past a buffer is read. */
static void test_refused_save_keeps_old_file(void **state) {
    (void)state;
    char path[512];
    tmp_path(path, sizeof path, "keep.npy");
    pe_tensor *t = pe_tensor_new();
    assert_int_equal(pe_tensor_resize(t, PE_DTYPE_FP32, 1, (int64_t[]){4}, pe_place_cpu(0)), PE_OK);
    memset(pe_tensor_data(t), 0x3f, 16);
    assert_int_equal(pe_npy_save(path, t), PE_OK);
    size_t old_n, now_n;
    unsigned char *old = slurp(path, &old_n);

    pe_tensor *unset = pe_tensor_new(); /* a fresh scope var: fp32 scalar, no storage */
    pe_tensor *view = pe_tensor_new();
    view->buf = pe_buffer_wrap(pe_place_cpu(0), NULL, 0); /* a feed view after its run */
    pe_tensor *small = pe_tensor_new();
    assert_int_equal(pe_tensor_resize(small, PE_DTYPE_FP32, 1, (int64_t[]){2}, pe_place_cpu(0)), PE_OK);
    assert_int_equal(pe_tensor_set_meta(small, PE_DTYPE_FP32, 1, (int64_t[]){1000}), PE_OK);
    pe_tensor *cases[] = {unset, view, small};
    const char *why[] = {"no data", "no data", "has a buffer of 8 bytes where float32 [1000] needs 4000"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pe_npy_save(path, cases[i]), PE_ERR_INVALID);
        if (!strstr(pe_last_error(), path) || !strstr(pe_last_error(), why[i]))
            fail_msg("message '%s' lacks the path or '%s'", pe_last_error(), why[i]);
        unsigned char *now = slurp(path, &now_n);
        assert_int_equal(now_n, old_n);
        assert_memory_equal(now, old, old_n);
        free(now);
        pe_tensor_free(cases[i]);
    }
    /* A tensor of 0 elements needs no storage. */
    pe_tensor *zero = pe_tensor_new();
    assert_int_equal(pe_tensor_set_meta(zero, PE_DTYPE_FP32, 2, (int64_t[]){0, 3}), PE_OK);
    assert_int_equal(pe_npy_save(path, zero), PE_OK);
    pe_tensor *back = pe_tensor_new();
    assert_int_equal(pe_npy_load(path, back), PE_OK);
    assert_int_equal(pe_tensor_numel(back), 0);
    pe_tensor_free(back);
    pe_tensor_free(zero);
    pe_tensor_free(t);
    free(old);
    unlink(path);
}

/* ---- hostile input ------------------------------------------------------ */

/* Builds a file: magic, version major.minor, header length (2 or 4 bytes by
 * version, or `hlen_override` when >= 0), the header text, then `dlen` bytes
 * of data (0x01 so bool data is valid). Caller frees. */
static unsigned char *mk_npy(int major, int minor, const char *header, long hlen_override, size_t dlen,
                             size_t *size) {
    size_t hl = strlen(header), pre = major >= 2 ? 12 : 10;
    size_t n = pre + hl + dlen;
    unsigned char *b = malloc(n + 1);
    assert_non_null(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = (unsigned char)minor;
    uint64_t len = hlen_override >= 0 ? (uint64_t)hlen_override : hl;
    for (size_t i = 0; i < pre - 8; i++) b[8 + i] = (unsigned char)(len >> (8 * i));
    memcpy(b + pre, header, hl);
    memset(b + pre + hl, 1, dlen);
    *size = n;
    return b;
}

static size_t bytes_in_use(void) { return (size_t)pe_alloc_get_stats(pe_place_cpu(0)).bytes_in_use; }

typedef struct {
    const char *header;
    size_t dlen;
    pe_status want;
    const char *needle; /* substring of the message (errors) */
} hdr_case;

#define H(descr, fortran, shape) "{'descr': '" descr "', 'fortran_order': " fortran ", 'shape': " shape ", }\n"

static void test_hostile_headers(void **state) {
    (void)state;
    static const hdr_case cases[] = {
        /* accepted variants */
        {H("<f4", "False", "(2, 3)"), 24, PE_OK, NULL},
        {"{'shape':(2,3),'fortran_order':False,'descr':'<f4'}", 24, PE_OK, NULL},
        {"{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (2L, 1L)}", 16, PE_OK, NULL},
        {H("|u1", "False", "(4,)"), 4, PE_OK, NULL},
        {H("=u1", "False", "(4,)"), 4, PE_OK, NULL},
        {H("u1", "False", "(4,)"), 4, PE_OK, NULL},
        {H("|b1", "False", "()"), 1, PE_OK, NULL},
        {H("<f4", "True", "(5,)"), 20, PE_OK, NULL},     /* 1-D: same layout */
        {H("<f4", "True", "(1, 5, 1)"), 20, PE_OK, NULL},
        /* refused */
        {H("<f4", "True", "(2, 3)"), 24, PE_ERR_FORMAT, "Fortran-order"},
        {H(">f8", "False", "(2,)"), 16, PE_ERR_FORMAT, "big-endian"},
        {H("=f4", "False", "(2,)"), 8, PE_ERR_FORMAT, "byte order"},
        {H("|f4", "False", "(2,)"), 8, PE_ERR_FORMAT, "byte order"},
        {H("f4", "False", "(2,)"), 8, PE_ERR_FORMAT, "byte order"},
        {H("|O", "False", "(2,)"), 16, PE_ERR_FORMAT, "object arrays"},
        {H("<c16", "False", "(2,)"), 32, PE_ERR_FORMAT, "unsupported dtype descr '<c16'"},
        {H("<U3", "False", "(2,)"), 24, PE_ERR_FORMAT, "unsupported dtype descr"},
        {H("", "False", "(2,)"), 8, PE_ERR_FORMAT, "unsupported dtype descr ''"},
        {"[1, 2, 3]", 0, PE_ERR_FORMAT, "not a dict"},
        {"", 0, PE_ERR_FORMAT, "not a dict"},
        {"{'descr': '<f4', 'fortran_order': False}", 0, PE_ERR_FORMAT, "missing key 'shape'"},
        {"{'descr': '<f4', 'shape': (1,)}", 4, PE_ERR_FORMAT, "missing key 'fortran_order'"},
        {"{'fortran_order': False, 'shape': (1,)}", 4, PE_ERR_FORMAT, "missing key 'descr'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", 4, PE_ERR_FORMAT, "twice"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}", 4, PE_ERR_FORMAT, "unexpected key 'x'"},
        {"{'descr': '<f4', 'fortran_order': false, 'shape': ()}", 4, PE_ERR_FORMAT, "True or False"},
        {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': ()}", 4, PE_ERR_FORMAT, "True/False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", 8, PE_ERR_FORMAT, "shape tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", 8, PE_ERR_FORMAT, "one-element"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}", 8, PE_ERR_FORMAT, "integer dimension"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3}", 24, PE_ERR_FORMAT, "shape tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", 8, PE_ERR_FORMAT, "after the header dict"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8, PE_ERR_FORMAT, "end of the header"},
        {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", 8, PE_ERR_FORMAT, "header offset"},
        {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}", 8, PE_ERR_FORMAT, "no escapes"},
        {"{'descr': '<f\xc3\xa9" "4', 'fortran_order': False, 'shape': (2,)}", 8, PE_ERR_FORMAT, "ASCII"},
        {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", 8, PE_ERR_FORMAT, "':' after a key"},
        {"{descr: '<f4'}", 0, PE_ERR_FORMAT, "quoted string"},
        {"{'descr': '<f4' 'fortran_order': False}", 0, PE_ERR_FORMAT, "',' or '}'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': ('2',)}", 8, PE_ERR_FORMAT, "integer dimension"},
        {H("<f4", "False", "(-1, 3)"), 0, PE_ERR_FORMAT, "negative dimension at axis 0"},
        {H("<f4", "False", "(3, -2)"), 0, PE_ERR_FORMAT, "negative dimension at axis 1"},
        {H("<f4", "False", "(99999999999999999999,)"), 0, PE_ERR_FORMAT, "does not fit in 64 bits"},
        {H("<f4", "False", "(4294967296, 4294967296)"), 0, PE_ERR_FORMAT, "too large"},
        {H("<f8", "False", "(2305843009213693952,)"), 0, PE_ERR_FORMAT, "too large"},
        {H("<f4", "False", "(7, 0)"), 0, PE_OK, NULL}, /* zero elements */
        {H("<f4", "False", "(9223372036854775807, 0)"), 0, PE_ERR_FORMAT, "not a valid tensor shape"},
        {H("<f4", "False", "(1000000000000,)"), 8, PE_ERR_FORMAT, "shorter than the header says"},
        {H("<f4", "False", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), 4, PE_ERR_FORMAT, "more than 8 dimensions"},
        {H("<f4", "False", "(2, 3)"), 23, PE_ERR_FORMAT, "shorter than the header says"},
        {H("<f4", "False", "(2, 3)"), 0, PE_ERR_FORMAT, "needs 24 bytes, the file has 0"},
        {H("<f4", "False", "(2, 3)"), 25, PE_ERR_FORMAT, "longer than the header says"},
        {H("<f4", "False", "()"), 5, PE_ERR_FORMAT, "1 trailing bytes"},
    };
    size_t base = bytes_in_use();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int major = 1; major <= 3; major++) {
            size_t n;
            unsigned char *b = mk_npy(major, 0, cases[i].header, -1, cases[i].dlen, &n);
            pe_tensor *t = pe_tensor_new();
            pe_status st = pe_npy_load_buffer(b, n, "hostile.npy", t);
            if (st != cases[i].want)
                fail_msg("case %zu (v%d) %s: got %s (%s)", i, major, cases[i].header, pe_status_name(st),
                         pe_last_error());
            if (st != PE_OK) {
                const char *msg = pe_last_error();
                if (!strstr(msg, "hostile.npy") || !strstr(msg, cases[i].needle))
                    fail_msg("case %zu: message '%s' lacks the file name or '%s'", i, msg, cases[i].needle);
                assert_false(pe_tensor_has_data(t));
            } else {
                assert_int_equal(pe_tensor_nbytes(t), cases[i].dlen);
            }
            pe_tensor_free(t);
            free(b);
        }
    }
    assert_int_equal(bytes_in_use(), base);
}

/* Preamble damage: magic, version, header length. */
static void test_hostile_preamble(void **state) {
    (void)state;
    const char *hdr = H("<f4", "False", "(2,)");
    size_t n;
    pe_tensor *t = pe_tensor_new();
    unsigned char *b = mk_npy(1, 0, hdr, -1, 8, &n);
    assert_int_equal(pe_npy_load_buffer(b, n, "p.npy", t), PE_OK);

    b[1] = 'n';
    assert_int_equal(pe_npy_load_buffer(b, n, "p.npy", t), PE_ERR_FORMAT);
    assert_non_null(strstr(pe_last_error(), "bad magic"));
    free(b);

    static const int versions[][2] = {{0, 0}, {1, 1}, {2, 1}, {4, 0}, {255, 255}};
    for (size_t i = 0; i < 5; i++) {
        b = mk_npy(versions[i][0], versions[i][1], hdr, -1, 8, &n);
        assert_int_equal(pe_npy_load_buffer(b, n, "p.npy", t), PE_ERR_FORMAT);
        assert_non_null(strstr(pe_last_error(), "unsupported .npy format version"));
        free(b);
    }
    /* Header length beyond the file, for the 2-byte and 4-byte fields. */
    b = mk_npy(1, 0, hdr, 65535, 8, &n);
    assert_int_equal(pe_npy_load_buffer(b, n, "p.npy", t), PE_ERR_FORMAT);
    assert_non_null(strstr(pe_last_error(), "header length 65535 runs past the end"));
    free(b);
    b = mk_npy(2, 0, hdr, 0xffffffffL, 8, &n);
    assert_int_equal(pe_npy_load_buffer(b, n, "p.npy", t), PE_ERR_FORMAT);
    assert_non_null(strstr(pe_last_error(), "runs past the end"));
    free(b);
    /* Header length short of the dict: the dict is cut. */
    b = mk_npy(1, 0, hdr, 20, 8, &n);
    assert_int_equal(pe_npy_load_buffer(b, n, "p.npy", t), PE_ERR_FORMAT);
    free(b);
    /* bool bytes other than 0/1. */
    b = mk_npy(1, 0, H("|b1", "False", "(3,)"), -1, 3, &n);
    b[n - 2] = 2;
    assert_int_equal(pe_npy_load_buffer(b, n, "p.npy", t), PE_ERR_FORMAT);
    assert_non_null(strstr(pe_last_error(), "bool element 1 has byte value 2"));
    free(b);
    assert_int_equal(pe_npy_load_buffer(NULL, 0, NULL, t), PE_ERR_FORMAT);
    assert_non_null(strstr(pe_last_error(), "<buffer>"));
    /* The successful first load is still what t holds. */
    assert_dims(t, PE_DTYPE_FP32, 1, (int64_t[]){2});
    pe_tensor_free(t);
}

/* A failed load leaves a tensor that had data exactly as it was. */
static void test_failed_load_keeps_output(void **state) {
    (void)state;
    pe_tensor *t = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){3}, (double[]){7, 8, 9});
    void *p = pe_tensor_data(t);
    size_t n;
    unsigned char *b = mk_npy(1, 0, H("<f4", "False", "(5,)"), -1, 19, &n);
    assert_int_equal(pe_npy_load_buffer(b, n, "keep.npy", t), PE_ERR_FORMAT);
    assert_ptr_equal(pe_tensor_data(t), p);
    tu_assert_close(t, (double[]){7, 8, 9}, 3, 0);
    free(b);
    pe_tensor_free(t);
}

static const char *k_valid_files[] = {"f4.npy", "f8.npy", "b1.npy", "scalar_f8.npy", "empty_f4.npy",
                                      "v2_f4.npy", "v3_i8.npy", "rank8_u1.npy"};

/* Every strict prefix of a valid file is an error. */
static void test_every_truncation(void **state) {
    (void)state;
    size_t base = bytes_in_use();
    for (size_t f = 0; f < sizeof k_valid_files / sizeof k_valid_files[0]; f++) {
        char p[512];
        fixture_path(p, sizeof p, k_valid_files[f]);
        size_t n;
        unsigned char *full = slurp(p, &n);
        pe_tensor *t = pe_tensor_new();
        assert_int_equal(pe_npy_load_buffer(full, n, k_valid_files[f], t), PE_OK);
        pe_tensor_free(t);
        for (size_t len = 0; len < n; len++) {
            /* A fresh allocation of exactly len bytes, so ASan sees any overread. */
            unsigned char *b = malloc(len ? len : 1);
            memcpy(b, full, len);
            t = pe_tensor_new();
            pe_status st = pe_npy_load_buffer(b, len, k_valid_files[f], t);
            if (st != PE_ERR_FORMAT)
                fail_msg("%s cut to %zu of %zu bytes: %s", k_valid_files[f], len, n, pe_status_name(st));
            assert_false(pe_tensor_has_data(t));
            pe_tensor_free(t);
            free(b);
        }
        free(full);
    }
    assert_int_equal(bytes_in_use(), base);
}

/* Seeded random bit flips: an error or a self-consistent tensor. */
static void test_random_bit_flips(void **state) {
    (void)state;
    size_t base = bytes_in_use();
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int ok = 0, bad = 0;
    for (size_t f = 0; f < sizeof k_valid_files / sizeof k_valid_files[0]; f++) {
        char p[512];
        fixture_path(p, sizeof p, k_valid_files[f]);
        size_t n;
        unsigned char *full = slurp(p, &n);
        for (int iter = 0; iter < 3000; iter++) {
            unsigned char *b = malloc(n);
            memcpy(b, full, n);
            int flips = 1 + iter % 4;
            /* Half the iterations aim at the preamble and header, where parsing happens. */
            size_t span = iter % 2 ? n : (n < 128 ? n : 128);
            for (int k = 0; k < flips; k++) {
                rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                size_t bit = (size_t)(rng % (span * 8));
                b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
            }
            pe_tensor *t = pe_tensor_new();
            pe_status st = pe_npy_load_buffer(b, n, k_valid_files[f], t);
            if (st == PE_OK) {
                ok++;
                size_t nb = pe_tensor_nbytes(t);
                assert_true(nb <= n);
                if (nb) assert_memory_equal(pe_tensor_data(t), b + n - nb, nb);
            } else {
                bad++;
                if (st != PE_ERR_FORMAT) fail_msg("%s: %s: %s", k_valid_files[f], pe_status_name(st), pe_last_error());
                assert_false(pe_tensor_has_data(t));
                assert_true(strlen(pe_last_error()) > 0);
            }
            pe_tensor_free(t);
            free(b);
        }
        free(full);
    }
    /* Both outcomes happen: flips in the data load, flips in the header fail. */
    assert_true(ok > 100);
    assert_true(bad > 100);
    assert_int_equal(bytes_in_use(), base);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/pe_test_npy.XXXXXX");
    return mkdtemp(g_tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return rmdir(g_tmpdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numpy_fixtures),
        cmocka_unit_test(test_numpy_files_refused),
        cmocka_unit_test(test_bytes_match_numpy),
        cmocka_unit_test(test_roundtrip_every_dtype),
        cmocka_unit_test(test_save_errors),
        cmocka_unit_test(test_refused_save_keeps_old_file),
        cmocka_unit_test(test_hostile_headers),
        cmocka_unit_test(test_hostile_preamble),
        cmocka_unit_test(test_failed_load_keeps_output),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_random_bit_flips),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

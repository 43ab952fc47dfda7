/* runtime/npy.c — numpy .npy files (format versions 1.0, 2.0 and 3.0).
 *
 * What: reads C-order little-endian arrays of PE's dtypes into tensors and
 * writes tensors as files numpy reads (byte-identical to np.save's output).
 *
 * How: the header is a tiny Python dict literal
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * parsed here by a strict, bounds-checked recursive-descent reader that knows
 * exactly the literals numpy writes (strings, True/False, tuples of ints).
 * Everything is validated — magic, version, header length, keys, dtype,
 * shape, data length — before `out` is touched, so a failed load leaves the
 * destination tensor as it was and never allocates more than the file holds.
 *
 * Why by hand: the format is fixed and tiny, a general Python-literal parser
 * would accept far more than numpy ever writes, and every byte of a hostile
 * file must be checked (this parser is a libFuzzer target: tests/fuzz/).
 */
#include "pe/npy.h"
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
/* np.lib.format.GROWTH_AXIS_MAX_DIGITS: numpy pads the header with spare
 * room so the first axis can grow in place; we do the same to match it. */
#define NPY_GROWTH_DIGITS 21
#define NPY_MAX_DESCR 32

/* ---- dtype descriptors ------------------------------------------------- */

static const struct {
    char kind;       /* numpy type character */
    int size;        /* item size in bytes */
    pe_dtype dt;
} k_npy_types[] = {
    {'f', 4, PE_DTYPE_FP32}, {'f', 8, PE_DTYPE_FP64}, {'i', 4, PE_DTYPE_INT32},
    {'i', 8, PE_DTYPE_INT64}, {'u', 1, PE_DTYPE_UINT8}, {'b', 1, PE_DTYPE_BOOL},
    {'f', 2, PE_DTYPE_FP16},
};
#define NPY_N_TYPES (int)(sizeof k_npy_types / sizeof k_npy_types[0])

/* Maps a descr string ("<f4") to a dtype. Byte order '<' is required for
 * multi-byte types; one-byte types accept any order mark ('|', '<', '>', '=')
 * or none, since their byte order is meaningless. '>' on a multi-byte type is
 * big endian; '=' and '|' on one are ambiguous (native order of the machine
 * that wrote the file) and refused. */
static pe_status npy_parse_descr(const char *descr, const char *what, pe_dtype *out) {
    const char *p = descr;
    char order = 0;
    if (*p == '<' || *p == '>' || *p == '=' || *p == '|') order = *p++;
    if (*p == 'O' && (p[1] == '\0' || !strcmp(p + 1, "8") || !strcmp(p + 1, "4")))
        return pe_error(PE_ERR_FORMAT, "%s: object arrays (descr '%s') are not supported: "
                        "PE reads plain numeric arrays only", what, descr);
    char kind = *p;
    int size = 0;
    if (kind && p[1] >= '1' && p[1] <= '9' && p[2] == '\0') size = p[1] - '0';
    for (int i = 0; i < NPY_N_TYPES && size; i++) {
        if (k_npy_types[i].kind != kind || k_npy_types[i].size != size) continue;
        if (size > 1 && order == '>')
            return pe_error(PE_ERR_FORMAT, "%s: big-endian data (descr '%s') is not supported: "
                            "PE reads little-endian ('<') files; convert with "
                            "a.astype(a.dtype.newbyteorder('<'))", what, descr);
        if (size > 1 && order != '<')
            return pe_error(PE_ERR_FORMAT, "%s: descr '%s' does not say the byte order of a "
                            "%d-byte type; expected '<%c%d'", what, descr, size, kind, size);
        *out = k_npy_types[i].dt;
        return PE_OK;
    }
    return pe_error(PE_ERR_FORMAT, "%s: unsupported dtype descr '%s' (PE reads <f4 <f8 <i4 <i8 "
                    "|u1 |b1 <f2)", what, descr);
}

static const char *npy_descr_of(pe_dtype dt) {
    switch (dt) {
    case PE_DTYPE_FP32: return "<f4";
    case PE_DTYPE_FP64: return "<f8";
    case PE_DTYPE_INT32: return "<i4";
    case PE_DTYPE_INT64: return "<i8";
    case PE_DTYPE_UINT8: return "|u1";
    case PE_DTYPE_BOOL: return "|b1";
    case PE_DTYPE_FP16: return "<f2";
    default: return NULL;
    }
}

/* ---- header dict parser ------------------------------------------------ */

typedef struct {
    const char *s, *end;  /* header text [s, end) */
    const char *what;     /* source name for messages */
    const char *begin;    /* start of the header, for offsets in messages */
} npy_lexer;

static pe_status npy_syntax(const npy_lexer *lx, const char *expected) {
    if (lx->s >= lx->end)
        return pe_error(PE_ERR_FORMAT, "%s: bad .npy header: expected %s at header offset %ld, "
                        "found the end of the header", lx->what, expected, (long)(lx->s - lx->begin));
    unsigned char c = (unsigned char)*lx->s;
    if (c >= 0x20 && c < 0x7f)
        return pe_error(PE_ERR_FORMAT, "%s: bad .npy header: expected %s at header offset %ld, "
                        "found '%c'", lx->what, expected, (long)(lx->s - lx->begin), c);
    return pe_error(PE_ERR_FORMAT, "%s: bad .npy header: expected %s at header offset %ld, "
                    "found byte 0x%02x", lx->what, expected, (long)(lx->s - lx->begin), c);
}

static void npy_skip_ws(npy_lexer *lx) {
    while (lx->s < lx->end && (*lx->s == ' ' || *lx->s == '\t' || *lx->s == '\n' || *lx->s == '\r'))
        lx->s++;
}

/* Consumes c (after whitespace) if present. */
static bool npy_accept(npy_lexer *lx, char c) {
    npy_skip_ws(lx);
    if (lx->s < lx->end && *lx->s == c) {
        lx->s++;
        return true;
    }
    return false;
}

/* A quoted string without escapes (numpy never writes any) into buf. */
static pe_status npy_string(npy_lexer *lx, char *buf, size_t cap) {
    npy_skip_ws(lx);
    if (lx->s >= lx->end || (*lx->s != '\'' && *lx->s != '"')) return npy_syntax(lx, "a quoted string");
    char q = *lx->s++;
    size_t n = 0;
    while (lx->s < lx->end && *lx->s != q) {
        unsigned char c = (unsigned char)*lx->s;
        if (c == '\\' || c < 0x20 || c > 0x7e)
            return npy_syntax(lx, "a plain ASCII string character (no escapes or control bytes)");
        if (n + 1 >= cap)
            return pe_error(PE_ERR_FORMAT, "%s: bad .npy header: string at header offset %ld is "
                            "longer than %zu bytes", lx->what, (long)(lx->s - lx->begin), cap - 1);
        buf[n++] = (char)c;
        lx->s++;
    }
    if (lx->s >= lx->end) return npy_syntax(lx, "the closing quote of a string");
    lx->s++;
    buf[n] = '\0';
    return PE_OK;
}

/* True or False. */
static pe_status npy_bool(npy_lexer *lx, bool *out) {
    npy_skip_ws(lx);
    size_t left = (size_t)(lx->end - lx->s);
    if (left >= 4 && !memcmp(lx->s, "True", 4)) {
        lx->s += 4;
        *out = true;
    } else if (left >= 5 && !memcmp(lx->s, "False", 5)) {
        lx->s += 5;
        *out = false;
    } else {
        return npy_syntax(lx, "True or False");
    }
    if (lx->s < lx->end && (*lx->s == '_' || (*lx->s >= 'a' && *lx->s <= 'z') ||
                            (*lx->s >= 'A' && *lx->s <= 'Z') || (*lx->s >= '0' && *lx->s <= '9')))
        return npy_syntax(lx, "the end of True/False");
    return PE_OK;
}

/* A non-negative decimal dimension (Python 2 files may carry an 'L' suffix). */
static pe_status npy_dim(npy_lexer *lx, int axis, int64_t *out) {
    npy_skip_ws(lx);
    bool neg = false;
    if (lx->s < lx->end && (*lx->s == '-' || *lx->s == '+')) neg = *lx->s++ == '-';
    if (lx->s >= lx->end || *lx->s < '0' || *lx->s > '9') return npy_syntax(lx, "an integer dimension");
    int64_t v = 0;
    bool huge = false;
    while (lx->s < lx->end && *lx->s >= '0' && *lx->s <= '9') {
        int d = *lx->s++ - '0';
        if (v > (INT64_MAX - d) / 10) huge = true;
        else v = v * 10 + d;
    }
    if (lx->s < lx->end && (*lx->s == 'L' || *lx->s == 'l')) lx->s++;
    if (neg && (v != 0 || huge))
        return pe_error(PE_ERR_FORMAT, "%s: bad .npy header: shape has a negative dimension at axis %d",
                        lx->what, axis);
    if (huge)
        return pe_error(PE_ERR_FORMAT, "%s: bad .npy header: dimension at axis %d does not fit in "
                        "64 bits", lx->what, axis);
    *out = v;
    return PE_OK;
}

/* A tuple of dimensions: (), (3,), (2, 3) with an optional trailing comma. */
static pe_status npy_shape(npy_lexer *lx, int *ndim, int64_t *dims) {
    if (!npy_accept(lx, '(')) return npy_syntax(lx, "'(' starting the shape tuple");
    int n = 0;
    if (npy_accept(lx, ')')) {
        *ndim = 0;
        return PE_OK;
    }
    for (;;) {
        int64_t d = 0;
        if (n >= PE_MAX_DIMS)
            return pe_error(PE_ERR_FORMAT, "%s: shape has more than %d dimensions (PE's maximum rank)",
                            lx->what, PE_MAX_DIMS);
        PE_CHECK(npy_dim(lx, n, &d));
        dims[n++] = d;
        bool comma = npy_accept(lx, ',');
        if (npy_accept(lx, ')')) {
            /* (3) is a parenthesised int, not a tuple: numpy needs "(3,)". */
            if (n == 1 && !comma)
                return pe_error(PE_ERR_FORMAT, "%s: bad .npy header: shape (%lld) at header offset %ld is a number "
                                "in parentheses, not a tuple (a one-element shape is written (%lld,))", lx->what,
                                (long long)d, (long)(lx->s - 1 - lx->begin), (long long)d);
            break;
        }
        if (!comma) return npy_syntax(lx, "',' or ')' in the shape tuple");
    }
    *ndim = n;
    return PE_OK;
}

typedef struct {
    char descr[NPY_MAX_DESCR];
    bool fortran;
    int ndim;
    int64_t dims[PE_MAX_DIMS];
} npy_header;

/* Parses {'descr': ..., 'fortran_order': ..., 'shape': ...} (any key order,
 * optional trailing comma, each key exactly once, no other keys). */
static pe_status npy_parse_dict(npy_lexer *lx, npy_header *h) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    npy_skip_ws(lx);
    if (!npy_accept(lx, '{'))
        return pe_error(PE_ERR_FORMAT, "%s: bad .npy header: it is not a dict literal (does not "
                        "start with '{')", lx->what);
    while (!npy_accept(lx, '}')) {
        char key[32];
        PE_CHECK(npy_string(lx, key, sizeof key));
        if (!npy_accept(lx, ':')) return npy_syntax(lx, "':' after a key");
        bool *seen;
        if (!strcmp(key, "descr")) {
            seen = &have_descr;
            npy_skip_ws(lx);
            if (lx->s < lx->end && *lx->s == '[')
                return pe_error(PE_ERR_FORMAT, "%s: structured dtypes (descr is a list) are not "
                                "supported: PE reads plain numeric arrays only", lx->what);
            PE_CHECK(npy_string(lx, h->descr, sizeof h->descr));
        } else if (!strcmp(key, "fortran_order")) {
            seen = &have_fortran;
            PE_CHECK(npy_bool(lx, &h->fortran));
        } else if (!strcmp(key, "shape")) {
            seen = &have_shape;
            PE_CHECK(npy_shape(lx, &h->ndim, h->dims));
        } else {
            return pe_error(PE_ERR_FORMAT, "%s: bad .npy header: unexpected key '%s' (expected "
                            "'descr', 'fortran_order' and 'shape')", lx->what, key);
        }
        if (*seen)
            return pe_error(PE_ERR_FORMAT, "%s: bad .npy header: key '%s' appears twice", lx->what, key);
        *seen = true;
        if (npy_accept(lx, ',')) continue;
        if (npy_accept(lx, '}')) break;
        return npy_syntax(lx, "',' or '}' in the header dict");
    }
    npy_skip_ws(lx);
    if (lx->s != lx->end) return npy_syntax(lx, "only whitespace after the header dict");
    const char *missing = !have_descr ? "descr" : !have_fortran ? "fortran_order" : !have_shape ? "shape" : NULL;
    if (missing)
        return pe_error(PE_ERR_FORMAT, "%s: bad .npy header: missing key '%s'", lx->what, missing);
    return PE_OK;
}

/* ---- load -------------------------------------------------------------- */

static uint32_t npy_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

pe_status pe_npy_load_buffer(const void *data, size_t size, const char *what, pe_tensor *out) {
    const unsigned char *b = data;
    if (!what) what = "<buffer>";
    if (!out || (!data && size)) return pe_error(PE_ERR_INVALID, "%s: pe_npy_load_buffer: NULL argument", what);
    if (size < NPY_MAGIC_LEN || memcmp(b, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return pe_error(PE_ERR_FORMAT, "%s: not a .npy file (bad magic: expected \\x93NUMPY)", what);
    if (size < 10)
        return pe_error(PE_ERR_FORMAT, "%s: truncated .npy file (%zu bytes, shorter than the "
                        "fixed preamble)", what, size);
    int major = b[6], minor = b[7];
    size_t hlen, hstart;
    if (major == 1 && minor == 0) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        hstart = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (size < 12)
            return pe_error(PE_ERR_FORMAT, "%s: truncated .npy file (%zu bytes, shorter than the "
                            "version %d.0 preamble)", what, size, major);
        hlen = npy_le32(b + 8);
        hstart = 12;
    } else {
        return pe_error(PE_ERR_FORMAT, "%s: unsupported .npy format version %d.%d (PE reads 1.0, "
                        "2.0 and 3.0)", what, major, minor);
    }
    if (hlen > size - hstart)
        return pe_error(PE_ERR_FORMAT, "%s: .npy header length %zu runs past the end of the file "
                        "(%zu bytes after the preamble)", what, hlen, size - hstart);
    /* Versions 1.0 and 2.0 are latin-1, 3.0 is utf-8; the keys and values
     * numpy writes for plain dtypes are ASCII either way, and the parser
     * refuses any other byte outside strings. */
    npy_lexer lx = {(const char *)b + hstart, (const char *)b + hstart + hlen, what,
                    (const char *)b + hstart};
    npy_header h;
    memset(&h, 0, sizeof h);
    PE_CHECK(npy_parse_dict(&lx, &h));

    pe_dtype dt = PE_DTYPE_FP32;
    PE_CHECK(npy_parse_descr(h.descr, what, &dt));
    int64_t big = 0; /* number of axes longer than 1 */
    for (int i = 0; i < h.ndim; i++) big += h.dims[i] > 1;
    if (h.fortran && big > 1)
        return pe_error(PE_ERR_FORMAT, "%s: Fortran-order (column-major) data is not supported: "
                        "save a C-contiguous array (np.ascontiguousarray)", what);

    char sb[200];
    size_t itemsize = pe_dtype_size(dt), nbytes = itemsize;
    bool overflow = false;
    for (int i = 0; i < h.ndim; i++) {
        if (h.dims[i] == 0) {
            nbytes = 0;
            overflow = false;
            break;
        }
        if (!overflow && __builtin_mul_overflow(nbytes, (size_t)h.dims[i], &nbytes)) overflow = true;
    }
    size_t have = size - hstart - hlen;
    if (overflow)
        return pe_error(PE_ERR_FORMAT, "%s: shape %s of %s is too large (its byte size overflows)",
                        what, pe_dims_str(h.ndim, h.dims, sb, sizeof sb), pe_dtype_name(dt));
    if (have < nbytes)
        return pe_error(PE_ERR_FORMAT, "%s: data is shorter than the header says: shape %s of %s "
                        "needs %zu bytes, the file has %zu", what,
                        pe_dims_str(h.ndim, h.dims, sb, sizeof sb), pe_dtype_name(dt), nbytes, have);
    if (have > nbytes)
        return pe_error(PE_ERR_FORMAT, "%s: data is longer than the header says: shape %s of %s "
                        "needs %zu bytes, the file has %zu (%zu trailing bytes)", what,
                        pe_dims_str(h.ndim, h.dims, sb, sizeof sb), pe_dtype_name(dt), nbytes, have,
                        have - nbytes);
    /* The tensor's own limits (elements per tensor), checked without storage. */
    pe_tensor meta;
    memset(&meta, 0, sizeof meta);
    if (pe_tensor_set_meta(&meta, dt, h.ndim, h.dims) != PE_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", pe_last_error());
        return pe_error(PE_ERR_FORMAT, "%s: shape %s is not a valid tensor shape: %s", what,
                        pe_dims_str(h.ndim, h.dims, sb, sizeof sb), why);
    }
    const unsigned char *payload = b + hstart + hlen;
    if (dt == PE_DTYPE_BOOL) {
        for (size_t i = 0; i < nbytes; i++)
            if (payload[i] > 1)
                return pe_error(PE_ERR_FORMAT, "%s: bool element %zu has byte value %u (expected 0 or 1)",
                                what, i, payload[i]);
    }
    pe_status st = pe_tensor_resize(out, dt, h.ndim, h.dims, pe_place_cpu(0));
    if (st != PE_OK) return pe_error_wrap(st, "%s", what);
    if (nbytes) memcpy(pe_tensor_data(out), payload, nbytes);
    return PE_OK;
}

pe_status pe_npy_load(const char *path, pe_tensor *out) {
    void *data;
    size_t size;
    if (!path || !out) return pe_error(PE_ERR_INVALID, "pe_npy_load: NULL argument");
    PE_CHECK(pe_read_file(path, &data, &size));
    pe_status st = pe_npy_load_buffer(data, size, path, out);
    free(data);
    return st;
}

/* ---- save -------------------------------------------------------------- */

pe_status pe_npy_save(const char *path, const pe_tensor *t) {
    if (!path || !t) return pe_error(PE_ERR_INVALID, "pe_npy_save: NULL argument");
    const char *descr = npy_descr_of(t->dtype);
    if (!descr)
        return pe_error(PE_ERR_UNSUPPORTED, "cannot save '%s': dtype %s has no .npy equivalent",
                        path, pe_dtype_name(t->dtype));
    if (t->ndim < 0 || t->ndim > PE_MAX_DIMS)
        return pe_error(PE_ERR_INVALID, "cannot save '%s': tensor rank %d is invalid", path, t->ndim);
    size_t nbytes = pe_tensor_nbytes(t);
    char why[320];
    if (pe_tensor_data_problem(t, why, sizeof why))
        return pe_error(PE_ERR_INVALID, "cannot save '%s': the tensor has %s", path, why);

    /* Header text exactly as numpy's _write_array_header builds it: sorted
     * keys, repr() values, spare spaces for growing axis 0, newline-terminated
     * and padded so the data starts at a multiple of 64 bytes. */
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    char first[32] = "";
    for (int i = 0; i < t->ndim; i++) {
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)t->dims[i]);
        if (i == 0) memcpy(first, num, sizeof num);
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%s", i ? ", " : "", num);
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", t->ndim == 1 ? "," : "");
    if (t->ndim > 0) {
        int pad = NPY_GROWTH_DIGITS - (int)strlen(first);
        for (int i = 0; i < pad; i++) dict[n++] = ' ';
    }
    size_t text = (size_t)n + 1; /* + '\n' */
    int major = 1;
    size_t pre = 10, padlen = NPY_ALIGN - (pre + text) % NPY_ALIGN;
    if (text + padlen > 65535) { /* the 2-byte length of version 1.0 is too small */
        major = 2;
        pre = 12;
        padlen = NPY_ALIGN - (pre + text) % NPY_ALIGN;
    }
    size_t hlen = text + padlen;
    size_t total = pre + hlen + nbytes;
    unsigned char *buf = malloc(total);
    if (!buf) return pe_error(PE_ERR_NOMEM, "out of memory saving '%s' (%zu bytes)", path, total);
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, dict, (size_t)n);
    memset(buf + pre + n, ' ', padlen);
    buf[pre + hlen - 1] = '\n';
    pe_status st = PE_OK;
    if (nbytes) st = pe_memcpy_places(buf + pre + hlen, pe_place_cpu(0), pe_tensor_data(t), t->place, nbytes);
    if (st == PE_OK) st = pe_write_file_atomic(path, buf, total);
    free(buf);
    return st;
}

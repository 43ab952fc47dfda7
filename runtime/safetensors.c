/* runtime/safetensors.c — safetensors files.
 *
 * What: reads and writes the safetensors format (8-byte little-endian header
 * length N, N bytes of UTF-8 JSON {"name": {"dtype", "shape",
 * "data_offsets"}, "__metadata__": {..}}, then the raw little-endian data):
 * whole files into and out of a scope, and an opened file's entries one by
 * one (pe_safetensors_open), on which graph/checkpoint.c builds
 * pe_checkpoint_save/load (a file tied to the persistable vars of a
 * program's block 0 — a program is the graph stage's, not the runtime's).
 *
 * How: the whole image is validated before any scope is touched — header
 * length within the file and below 100 MB, UTF-8, one JSON object (cJSON),
 * each entry's dtype, shape and offsets; sorted by offset, the tensors must
 * tile the data buffer exactly (start at 0, no gap, no overlap, each
 * end - begin = numel * dtype size, the last ending at the end of the file),
 * as the reference Rust implementation requires. Saving first checks that
 * every named var is in the scope with its data (else an error listing
 * each one, and nothing is written), builds the image in memory and hands
 * it to pe_write_file_atomic (a fresh temporary, fsync, rename), so a crash
 * mid-save leaves the previous file intact.
 *
 * Why this format: PyTorch and numpy users read and write it with their own
 * tools; it holds raw data with no code execution on load (unlike pickle).
 */
#include "pe/checkpoint.h"
#include "runtime/internal.h"
#include "runtime/safetensors_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER 100000000u /* the Rust implementation's limit */
#define ST_MAX_INT 9007199254740992.0 /* 2^53: integers exact in a JSON double */
#define ST_MAX_NAME 4096 /* bytes in a tensor name */

static const struct { const char *name; pe_dtype dt; } k_st_dtypes[] = {
    {"F32", PE_DTYPE_FP32}, {"F64", PE_DTYPE_FP64}, {"I32", PE_DTYPE_INT32},
    {"I64", PE_DTYPE_INT64}, {"U8", PE_DTYPE_UINT8}, {"BOOL", PE_DTYPE_BOOL},
    {"F16", PE_DTYPE_FP16}, {"BF16", PE_DTYPE_BF16},
};
#define ST_N_DTYPES (int)(sizeof k_st_dtypes / sizeof k_st_dtypes[0])

static const char *st_dtype_name(pe_dtype dt) {
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (k_st_dtypes[i].dt == dt) return k_st_dtypes[i].name;
    return NULL;
}

/* Strict UTF-8 check (no overlongs, no surrogates, <= U+10FFFF). */
static bool st_utf8_valid(const unsigned char *s, size_t n, size_t *bad) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned min;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { len = 2; min = 0x80; c &= 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; min = 0x800; c &= 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; min = 0x10000; c &= 0x07; }
        else { *bad = i; return false; }
        if (n - i < len) { *bad = i; return false; }
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) { *bad = i; return false; }
            c = c << 6 | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) { *bad = i; return false; }
        i += len;
    }
    return true;
}

/* Why s (n bytes) cannot be a tensor name, or NULL when it can. A name must
 * come back from a file exactly as it went in: 1..ST_MAX_NAME bytes of valid
 * UTF-8 (control characters are fine: JSON escapes them, and they come back).
 * A NUL cannot be in one: it would cut the name short in every C string it
 * passes through (cJSON decodes "a\u0000b" to "a"), so the reader refuses an
 * escaped NUL (st_find_escaped_nul) and a writer's C string cannot hold one.
 * The reader and the writer apply the same rule. */
static const char *st_name_problem(const char *s, size_t n, char *why, size_t wn) {
    size_t bad;
    if (n == 0) return "is empty";
    if (n > ST_MAX_NAME) {
        snprintf(why, wn, "has %zu bytes (at most %d)", n, ST_MAX_NAME);
        return why;
    }
    if (!st_utf8_valid((const unsigned char *)s, n, &bad)) {
        snprintf(why, wn, "is not valid UTF-8 (at byte %zu)", bad);
        return why;
    }
    return NULL;
}

/* Offset of the first JSON escape \u0000 in text (n bytes), or n: a string
 * holding it, a name or a value (a dtype "F32\u0000x"), would be read
 * truncated at the NUL. A backslash only occurs in JSON strings, and each
 * escape is skipped whole, so "\\u0000" (an escaped backslash, then
 * u0000) is no NUL. */
static size_t st_find_escaped_nul(const char *text, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (text[i] != '\\') continue;
        if (text[i + 1] == 'u' && i + 5 < n && text[i + 2] == '0' && text[i + 3] == '0' && text[i + 4] == '0' &&
            text[i + 5] == '0')
            return i;
        i++; /* the escaped character */
    }
    return n;
}

/* ---- parsing ------------------------------------------------------------ */

typedef struct {
    const char *name;      /* borrowed from the cJSON tree */
    pe_dtype dt;
    int ndim;
    int64_t dims[PE_MAX_DIMS];
    uint64_t begin, end;   /* offsets into the data buffer */
} st_entry;

typedef struct {
    cJSON *root;
    st_entry *e;           /* sorted by offset after parsing */
    int n;
    const unsigned char *data; /* the data buffer (borrowed) */
    uint64_t data_size;
} st_file;

static void st_file_free(st_file *f) {
    cJSON_Delete(f->root);
    free(f->e);
    memset(f, 0, sizeof *f);
}

/* A JSON number that is an integer in [0, 2^53]. */
static bool st_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_INT) || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

static pe_status st_parse_entry(const cJSON *j, const char *what, st_entry *e) {
    const char *nm = j->string;
    if (!cJSON_IsObject(j))
        return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': entry is not a JSON object", what, nm);
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *k = j->child; k; k = k->next) {
        const cJSON **slot = !strcmp(k->string, "dtype") ? &dtype : !strcmp(k->string, "shape") ? &shape
                           : !strcmp(k->string, "data_offsets") ? &offs : NULL;
        if (!slot)
            return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': unexpected key '%s' (expected dtype, shape, "
                            "data_offsets)", what, nm, k->string);
        if (*slot) return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': key '%s' appears twice", what, nm, k->string);
        *slot = k;
    }
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offs ? "data_offsets" : NULL;
    if (missing) return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': missing '%s'", what, nm, missing);

    if (!cJSON_IsString(dtype))
        return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': dtype is not a string", what, nm);
    int di = 0;
    while (di < ST_N_DTYPES && strcmp(dtype->valuestring, k_st_dtypes[di].name)) di++;
    if (di == ST_N_DTYPES)
        return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': unsupported dtype '%.32s' (PE reads F32 F64 I32 "
                        "I64 U8 BOOL F16 BF16)", what, nm, dtype->valuestring);
    e->dt = k_st_dtypes[di].dt;

    if (!cJSON_IsArray(shape))
        return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': shape is not a list", what, nm);
    int nd = 0;
    for (const cJSON *d = shape->child; d; d = d->next, nd++) {
        uint64_t v;
        if (nd >= PE_MAX_DIMS)
            return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': shape has more than %d dimensions", what, nm,
                            PE_MAX_DIMS);
        if (!st_uint(d, &v))
            return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", what,
                            nm, nd);
        e->dims[nd] = (int64_t)v;
    }
    e->ndim = nd;
    pe_tensor meta;
    memset(&meta, 0, sizeof meta);
    if (pe_tensor_set_meta(&meta, e->dt, e->ndim, e->dims) != PE_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", pe_last_error());
        return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': invalid shape: %s", what, nm, why);
    }

    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !st_uint(offs->child, &e->begin) ||
        !st_uint(offs->child->next, &e->end))
        return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': data_offsets is not a pair of non-negative "
                        "integers [begin, end]", what, nm);
    if (e->end < e->begin)
        return pe_error(PE_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin",
                        what, nm, (unsigned long long)e->begin, (unsigned long long)e->end);
    e->name = nm;
    return PE_OK;
}

static int st_cmp_offset(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int st_cmp_name_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static pe_status st_check_metadata(const cJSON *m, const char *what) {
    if (!cJSON_IsObject(m))
        return pe_error(PE_ERR_FORMAT, "%s: \"__metadata__\" is not a JSON object", what);
    for (const cJSON *k = m->child; k; k = k->next)
        if (!cJSON_IsString(k))
            return pe_error(PE_ERR_FORMAT, "%s: \"__metadata__\" value of '%s' is not a string", what, k->string);
    return PE_OK;
}

/* Validates the whole image; on success f owns the cJSON tree and entries. */
static pe_status st_parse(const unsigned char *b, size_t size, const char *what, st_file *f) {
    memset(f, 0, sizeof *f);
    if (size < 8)
        return pe_error(PE_ERR_FORMAT, "%s: truncated safetensors file (%zu bytes, shorter than the 8-byte "
                        "header length)", what, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    if (n > ST_MAX_HEADER)
        return pe_error(PE_ERR_FORMAT, "%s: safetensors header length %llu is above the %u-byte limit", what,
                        (unsigned long long)n, ST_MAX_HEADER);
    if (n > size - 8)
        return pe_error(PE_ERR_FORMAT, "%s: safetensors header length %llu runs past the end of the file "
                        "(%zu bytes after the length field)", what, (unsigned long long)n, size - 8);
    if (n < 2 || b[8] != '{')
        return pe_error(PE_ERR_FORMAT, "%s: safetensors header is not a JSON object (it must start with "
                        "'{')", what);
    size_t bad;
    if (!st_utf8_valid(b + 8, (size_t)n, &bad))
        return pe_error(PE_ERR_FORMAT, "%s: safetensors header is not valid UTF-8 (at header byte %zu)",
                        what, bad);
    /* A raw NUL is no JSON (a string must escape its control characters), and
     * cJSON would end the string holding it there, reading "w\0x" as "w". */
    const uint8_t *raw_nul = memchr(b + 8, 0, (size_t)n);
    if (raw_nul)
        return pe_error(PE_ERR_FORMAT, "%s: safetensors header has a NUL byte at header byte %zu: a name or value "
                        "holding a NUL cannot be read without cutting it short", what, (size_t)(raw_nul - (b + 8)));
    /* cJSON gets a NUL-terminated copy: no read can pass the header. */
    char *text = malloc((size_t)n + 1);
    if (!text) return pe_error(PE_ERR_NOMEM, "%s: out of memory for a %llu-byte header", what,
                               (unsigned long long)n);
    memcpy(text, b + 8, (size_t)n);
    text[n] = '\0';
    size_t nul = st_find_escaped_nul(text, (size_t)n);
    if (nul < (size_t)n) {
        free(text);
        return pe_error(PE_ERR_FORMAT, "%s: safetensors header has an escaped NUL (\\u0000) at header byte %zu: a "
                        "name or value holding a NUL cannot be read without cutting it short", what, nul);
    }
    const char *end = NULL;
    f->root = cJSON_ParseWithLengthOpts(text, (size_t)n, &end, 0);
    size_t at = end ? (size_t)(end - text) : 0;
    if (!f->root) {
        free(text);
        return pe_error(PE_ERR_FORMAT, "%s: safetensors header is not valid JSON (error near header byte %zu)",
                        what, at);
    }
    while (at < n && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r')) at++;
    free(text);
    pe_status st = PE_OK;
    if (at != n) {
        st = pe_error(PE_ERR_FORMAT, "%s: safetensors header has bytes after the JSON object (header byte "
                      "%zu)", what, at);
        goto fail;
    }
    if (!cJSON_IsObject(f->root)) {
        st = pe_error(PE_ERR_FORMAT, "%s: safetensors header is not a JSON object", what);
        goto fail;
    }
    int count = cJSON_GetArraySize(f->root);
    f->e = calloc(count ? (size_t)count : 1, sizeof *f->e);
    const char **names = calloc(count ? (size_t)count : 1, sizeof *names);
    if (!f->e || !names) {
        free(names);
        st = pe_error(PE_ERR_NOMEM, "%s: out of memory for %d header entries", what, count);
        goto fail;
    }
    int nn = 0;
    char why[128];
    const char *bad_name;
    for (const cJSON *j = f->root->child; j; j = j->next) {
        names[nn++] = j->string;
        if (!strcmp(j->string, "__metadata__")) {
            st = st_check_metadata(j, what);
        } else if ((bad_name = st_name_problem(j->string, strlen(j->string), why, sizeof why))) {
            st = pe_error(PE_ERR_FORMAT, "%s: tensor name '%.200s%s' %s", what, j->string,
                          strlen(j->string) > 200 ? "..." : "", bad_name);
        } else {
            st = st_parse_entry(j, what, &f->e[f->n]);
            if (st == PE_OK) f->n++;
        }
        if (st != PE_OK) break;
    }
    if (st == PE_OK) {
        qsort(names, (size_t)nn, sizeof *names, st_cmp_name_ptr);
        for (int i = 1; i < nn && st == PE_OK; i++)
            if (!strcmp(names[i - 1], names[i]))
                st = pe_error(PE_ERR_FORMAT, "%s: safetensors header names '%s' twice", what, names[i]);
    }
    free(names);
    if (st != PE_OK) goto fail;

    f->data = b + 8 + n;
    f->data_size = size - 8 - n;
    qsort(f->e, (size_t)f->n, sizeof *f->e, st_cmp_offset);
    uint64_t pos = 0;
    char sb[200];
    for (int i = 0; i < f->n; i++) {
        st_entry *e = &f->e[i];
        if (e->end > f->data_size) {
            st = pe_error(PE_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the "
                          "data (%llu bytes)", what, e->name, (unsigned long long)e->begin,
                          (unsigned long long)e->end, (unsigned long long)f->data_size);
            goto fail;
        }
        if (e->begin != pos) {
            st = pe_error(PE_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] %s the previous tensor's "
                          "data (ending at %llu): tensors must be contiguous and non-overlapping", what, e->name,
                          (unsigned long long)e->begin, (unsigned long long)e->end,
                          e->begin < pos ? "overlap" : "leave a gap after", (unsigned long long)pos);
            goto fail;
        }
        uint64_t need = (uint64_t)pe_dims_prod(e->dims, 0, e->ndim) * pe_dtype_size(e->dt);
        if (e->end - e->begin != need) {
            st = pe_error(PE_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape "
                          "%s of %s needs %llu", what, e->name, (unsigned long long)e->begin,
                          (unsigned long long)e->end, (unsigned long long)(e->end - e->begin),
                          pe_dims_str(e->ndim, e->dims, sb, sizeof sb), st_dtype_name(e->dt),
                          (unsigned long long)need);
            goto fail;
        }
        if (e->dt == PE_DTYPE_BOOL) {
            for (uint64_t k = e->begin; k < e->end; k++)
                if (f->data[k] > 1) {
                    st = pe_error(PE_ERR_FORMAT, "%s: tensor '%s': BOOL element %llu has byte value %u "
                                  "(expected 0 or 1)", what, e->name, (unsigned long long)(k - e->begin),
                                  f->data[k]);
                    goto fail;
                }
        }
        pos = e->end;
    }
    if (pos != f->data_size) {
        st = pe_error(PE_ERR_FORMAT, "%s: the data buffer has %llu bytes but the tensors cover %llu (%llu "
                      "trailing bytes)", what, (unsigned long long)f->data_size, (unsigned long long)pos,
                      (unsigned long long)(f->data_size - pos));
        goto fail;
    }
    return PE_OK;
fail:
    st_file_free(f);
    return st;
}

static const st_entry *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name)) return &f->e[i];
    return NULL;
}

/* Copies an entry into t, keeping t's place when it already has storage. */
static pe_status st_load_entry(const st_file *f, const st_entry *e, pe_tensor *t, const char *what) {
    pe_place place = t->buf ? t->place : pe_place_cpu(0);
    pe_status st = pe_tensor_resize(t, e->dt, e->ndim, e->dims, place);
    if (st == PE_OK && e->end > e->begin)
        st = pe_memcpy_places(pe_tensor_data(t), place, f->data + e->begin, pe_place_cpu(0),
                              (size_t)(e->end - e->begin));
    if (st != PE_OK) return pe_error_wrap(st, "%s: loading tensor '%s'", what, e->name);
    return PE_OK;
}

/* Reads every tensor of a validated image into scope and, when key is
 * given, a malloc'd copy of its "__metadata__" value into *value (NULL
 * when the file has none). */
static pe_status st_read(const void *data, size_t size, const char *what, pe_scope *scope, const char *key,
                         char **value) {
    st_file f;
    PE_CHECK(st_parse(data, size, what, &f));
    pe_status st = PE_OK;
    for (int i = 0; i < f.n && st == PE_OK; i++) {
        pe_tensor *t = pe_scope_var(scope, f.e[i].name);
        st = t ? st_load_entry(&f, &f.e[i], t, what)
               : pe_error(PE_ERR_NOMEM, "%s: out of memory creating var '%s'", what, f.e[i].name);
    }
    if (st == PE_OK && key) {
        /* st_parse checked that "__metadata__" is an object of strings */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f.root, "__metadata__"),
                                                          key);
        if (v && !(*value = strdup(v->valuestring)))
            st = pe_error(PE_ERR_NOMEM, "%s: out of memory for metadata '%s'", what, key);
    }
    st_file_free(&f);
    return st;
}

pe_status pe_safetensors_read_buffer(const void *data, size_t size, const char *what, pe_scope *scope) {
    if (!what) what = "<buffer>";
    if ((!data && size) || !scope)
        return pe_error(PE_ERR_INVALID, "%s: pe_safetensors_read_buffer: NULL argument", what);
    return st_read(data, size, what, scope, NULL, NULL);
}

pe_status pe_safetensors_read_meta(const char *path, pe_scope *scope, const char *key, char **value) {
    if (value) *value = NULL;
    if (!path || !scope || (key && !value)) return pe_error(PE_ERR_INVALID, "pe_safetensors_read: NULL argument");
    void *data;
    size_t size;
    PE_CHECK(pe_read_file(path, &data, &size));
    pe_status st = st_read(data, size, path, scope, key, value);
    free(data);
    return st;
}

pe_status pe_safetensors_read(const char *path, pe_scope *scope) {
    return pe_safetensors_read_meta(path, scope, NULL, NULL);
}

/* ---- writing ------------------------------------------------------------ */

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} st_buf;

static void st_put(st_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) { b->oom = true; return; }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void st_puts(st_buf *b, const char *s) { st_put(b, s, strlen(s)); }

/* A JSON string literal (s is valid UTF-8, checked by the caller). */
static void st_put_json_string(st_buf *b, const char *s) {
    st_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; st_put(b, esc, 2); }
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); st_put(b, esc, 6); }
        else st_put(b, (const char *)&c, 1);
    }
    st_put(b, "\"", 1);
}

/* key is one of the first k metadata keys. */
static bool st_meta_listed(const char *const *meta, int k, const char *key) {
    for (int i = 0; i < k; i++)
        if (!strcmp(meta[2 * i], key)) return true;
    return false;
}

pe_status pe_safetensors_write(const char *path, const pe_scope *scope, const char *const *names, int n) {
    return pe_safetensors_write_meta(path, scope, names, n, NULL, 0);
}

pe_status pe_safetensors_write_meta(const char *path, const pe_scope *scope, const char *const *names, int n,
                                    const char *const *meta, int n_meta) {
    if (!path || !scope || (n && !names) || n < 0 || n_meta < 0 || (n_meta && !meta))
        return pe_error(PE_ERR_INVALID, "pe_safetensors_write: bad argument");
    for (int i = 0; i < 2 * n_meta; i++) {
        size_t bad;
        const char *s = meta[i], *k = meta[i & ~1];
        const char *why = !s ? "NULL" : !st_utf8_valid((const unsigned char *)s, strlen(s), &bad) ? "not valid UTF-8"
                                                                                              : NULL;
        if (why && i % 2 == 0)
            return pe_error(PE_ERR_INVALID, "cannot save '%s': metadata key %d is %s", path, i / 2, why);
        if (why) return pe_error(PE_ERR_INVALID, "cannot save '%s': metadata value of '%.100s' is %s", path, k, why);
        if (i % 2 == 0 && (!strcmp(s, "producer") || (i && st_meta_listed(meta, i / 2, s))))
            return pe_error(PE_ERR_INVALID, "cannot save '%s': metadata key '%.100s' is %s", path, s,
                            !strcmp(s, "producer") ? "PE's own (\"producer\": \"pe\")" : "given twice");
    }
    const pe_tensor **ts = calloc(n ? (size_t)n : 1, sizeof *ts);
    if (!ts) return pe_error(PE_ERR_NOMEM, "cannot save '%s': out of memory", path);
    pe_status st = PE_OK;
    st_buf h = {0};
    unsigned char *img = NULL;
    uint64_t off = 0;
    char num[96], whybuf[320];
    pe_namelist unwritable = {0};
    int n_absent = 0;

    st_puts(&h, "{\"__metadata__\":{\"producer\":\"pe\"");
    for (int i = 0; i < n_meta; i++) {
        st_puts(&h, ",");
        st_put_json_string(&h, meta[2 * i]);
        st_puts(&h, ":");
        st_put_json_string(&h, meta[2 * i + 1]);
    }
    st_puts(&h, "}");
    for (int i = 0; i < n; i++) {
        const char *nm = names[i];
        const char *bad = !nm ? "is NULL"
                          : !strcmp(nm, "__metadata__") ? "is the header's metadata key"
                                                        : st_name_problem(nm, strlen(nm), whybuf, sizeof whybuf);
        if (bad) {
            st = pe_error(PE_ERR_INVALID, "cannot save '%s': tensor name '%.200s%s' %s", path, nm ? nm : "",
                          nm && strlen(nm) > 200 ? "..." : "", bad);
            goto done;
        }
        for (int k = 0; k < i; k++)
            if (!strcmp(names[k], nm)) {
                st = pe_error(PE_ERR_INVALID, "cannot save '%s': tensor '%s' is listed twice", path, nm);
                goto done;
            }
        /* Every var that cannot be written is listed; nothing is written then. */
        const pe_tensor *t = pe_scope_find_var(scope, nm);
        if (!t) {
            pe_namelist_add(&unwritable, nm, "not in the scope");
            n_absent++;
            continue;
        }
        const char *dname = st_dtype_name(t->dtype);
        size_t nb = pe_tensor_nbytes(t);
        if (!dname || t->ndim < 0 || t->ndim > PE_MAX_DIMS) {
            st = pe_error(PE_ERR_INVALID, "cannot save '%s': var '%s' has an invalid dtype or rank", path, nm);
            goto done;
        }
        const char *why = pe_tensor_data_problem(t, whybuf, sizeof whybuf);
        if (why) {
            pe_namelist_add(&unwritable, nm, why);
            continue;
        }
        ts[i] = t;
        st_puts(&h, ",");
        st_put_json_string(&h, nm);
        st_puts(&h, ":{\"dtype\":\"");
        st_puts(&h, dname);
        st_puts(&h, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->dims[d]);
            st_puts(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + nb));
        st_puts(&h, num);
        off += nb;
    }
    if (unwritable.n) {
        st = pe_error(n_absent == unwritable.n ? PE_ERR_NOT_FOUND : PE_ERR_INVALID, "cannot save '%s': %d of the "
                      "%d vars to write cannot be: %s; nothing was written", path, unwritable.n, n,
                      pe_namelist_str(&unwritable));
        goto done;
    }
    st_puts(&h, "}");
    /* Pad with spaces so the data starts 8-byte aligned, as the reference writer does. */
    while (!h.oom && h.n % 8) st_puts(&h, " ");
    if (h.oom) {
        st = pe_error(PE_ERR_NOMEM, "cannot save '%s': out of memory building the header", path);
        goto done;
    }
    size_t total = 8 + h.n + (size_t)off;
    img = malloc(total);
    if (!img) {
        st = pe_error(PE_ERR_NOMEM, "cannot save '%s': out of memory (%zu bytes)", path, total);
        goto done;
    }
    for (int i = 0; i < 8; i++) img[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    memcpy(img + 8, h.s, h.n);
    size_t at = 8 + h.n;
    for (int i = 0; i < n && st == PE_OK; i++) {
        size_t nb = pe_tensor_nbytes(ts[i]);
        if (nb) st = pe_memcpy_places(img + at, pe_place_cpu(0), pe_tensor_data(ts[i]), ts[i]->place, nb);
        if (st != PE_OK) pe_error_wrap(st, "cannot save '%s': var '%s'", path, names[i]);
        at += nb;
    }
    if (st == PE_OK) st = pe_write_file_atomic(path, img, total);
done:
    free(img);
    free(h.s);
    free(ts);
    return st;
}

/* ---- an opened file: entries for a later stage (graph/checkpoint.c) ---- */

struct pe_safetensors_file {
    void *data;            /* the whole image (owned) */
    const char *path;      /* borrowed from the caller of open: names the file in messages */
    st_file f;
};

pe_status pe_safetensors_open(const char *path, pe_safetensors_file **out) {
    *out = NULL;
    void *data;
    size_t size;
    PE_CHECK(pe_read_file(path, &data, &size));
    pe_safetensors_file *sf = calloc(1, sizeof *sf);
    if (!sf) {
        free(data);
        return pe_error(PE_ERR_NOMEM, "%s: out of memory", path);
    }
    pe_status st = st_parse(data, size, path, &sf->f);
    if (st != PE_OK) {
        free(data);
        free(sf);
        return st;
    }
    sf->data = data;
    sf->path = path;
    *out = sf;
    return PE_OK;
}

void pe_safetensors_close(pe_safetensors_file *sf) {
    if (!sf) return;
    st_file_free(&sf->f);
    free(sf->data);
    free(sf);
}

int pe_safetensors_count(const pe_safetensors_file *sf) { return sf->f.n; }

pe_safetensors_entry pe_safetensors_entry_at(const pe_safetensors_file *sf, int i) {
    const st_entry *e = &sf->f.e[i];
    return (pe_safetensors_entry){e->name, e->dt, e->ndim, e->dims};
}

int pe_safetensors_find(const pe_safetensors_file *sf, const char *name) {
    const st_entry *e = st_find(&sf->f, name);
    return e ? (int)(e - sf->f.e) : -1;
}

pe_status pe_safetensors_load(const pe_safetensors_file *sf, int i, pe_tensor *t) {
    return st_load_entry(&sf->f, &sf->f.e[i], t, sf->path);
}

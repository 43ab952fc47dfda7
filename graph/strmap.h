/* graph/strmap.h — a small open-addressing map from borrowed strings to
 * ints, for the graph passes (thousands of var names; no deletion). */
#ifndef PE_GRAPH_STRMAP_H
#define PE_GRAPH_STRMAP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct pe_strmap {
    const char **keys;   /* borrowed; NULL = empty */
    int *vals;
    int cap, n;
} pe_strmap;

static inline uint64_t pe_strmap_hash(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static inline void pe_strmap_free(pe_strmap *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* Returns the value of key or -1. */
static inline int pe_strmap_get(const pe_strmap *m, const char *key) {
    if (!m->cap) return -1;
    int mask = m->cap - 1;
    for (int i = (int)(pe_strmap_hash(key) & (uint64_t)mask);; i = (i + 1) & mask) {
        if (!m->keys[i]) return -1;
        if (!strcmp(m->keys[i], key)) return m->vals[i];
    }
}

/* Sets key -> val (key borrowed). Returns 0, or -1 on allocation failure. */
static inline int pe_strmap_put(pe_strmap *m, const char *key, int val) {
    if ((m->n + 1) * 2 > m->cap) {
        int ncap = m->cap ? m->cap * 2 : 64;
        const char **nk = calloc((size_t)ncap, sizeof *nk);
        int *nv = calloc((size_t)ncap, sizeof *nv);
        if (!nk || !nv) { free(nk); free(nv); return -1; }
        for (int i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            int j = (int)(pe_strmap_hash(m->keys[i]) & (uint64_t)(ncap - 1));
            while (nk[j]) j = (j + 1) & (ncap - 1);
            nk[j] = m->keys[i];
            nv[j] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        m->keys = nk;
        m->vals = nv;
        m->cap = ncap;
    }
    int mask = m->cap - 1;
    int i = (int)(pe_strmap_hash(key) & (uint64_t)mask);
    while (m->keys[i] && strcmp(m->keys[i], key)) i = (i + 1) & mask;
    if (!m->keys[i]) { m->keys[i] = key; m->n++; }
    m->vals[i] = val;
    return 0;
}

#endif

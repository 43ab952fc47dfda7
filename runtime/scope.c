/* runtime/scope.c — scopes: an open-addressing hash map name -> tensor,
 * and a parent pointer.
 *
 * Variables are owned by the scope that created them; lookups walk up the
 * parent chain. The map never shrinks; erase leaves a tombstone.
 */
#include "pe/scope.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;          /* NULL = empty, (char*)1 = tombstone */
    pe_tensor *t;
} slot_t;

struct pe_scope {
    pe_scope *parent;
    slot_t *slots;
    int cap;             /* power of two */
    int used;            /* live + tombstones */
    int n;               /* live */
};

#define TOMB ((char *)1)

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

pe_scope *pe_scope_new(pe_scope *parent) {
    pe_scope *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->parent = parent;
    s->cap = 16;
    s->slots = calloc((size_t)s->cap, sizeof *s->slots);
    if (!s->slots) { free(s); return NULL; }
    return s;
}

void pe_scope_clear(pe_scope *s) {
    if (!s) return;
    for (int i = 0; i < s->cap; i++) {
        if (s->slots[i].name && s->slots[i].name != TOMB) {
            free(s->slots[i].name);
            pe_tensor_free(s->slots[i].t);
        }
        s->slots[i].name = NULL;
        s->slots[i].t = NULL;
    }
    s->used = s->n = 0;
}

void pe_scope_free(pe_scope *s) {
    if (!s) return;
    pe_scope_clear(s);
    free(s->slots);
    free(s);
}

static int find_slot(const pe_scope *s, const char *name) {
    uint64_t h = hash_str(name);
    int mask = s->cap - 1;
    for (int i = (int)(h & (uint64_t)mask), k = 0; k < s->cap; i = (i + 1) & mask, k++) {
        const char *n = s->slots[i].name;
        if (!n) return -1;
        if (n != TOMB && !strcmp(n, name)) return i;
    }
    return -1;
}

pe_tensor *pe_scope_find_local_var(const pe_scope *s, const char *name) {
    int i = find_slot(s, name);
    return i < 0 ? NULL : s->slots[i].t;
}

pe_tensor *pe_scope_find_var(const pe_scope *s, const char *name) {
    for (; s; s = s->parent) {
        pe_tensor *t = pe_scope_find_local_var(s, name);
        if (t) return t;
    }
    return NULL;
}

static int grow(pe_scope *s) {
    int ncap = s->cap * 2;
    slot_t *ns = calloc((size_t)ncap, sizeof *ns);
    if (!ns) return -1;
    for (int i = 0; i < s->cap; i++) {
        char *n = s->slots[i].name;
        if (!n || n == TOMB) continue;
        int j = (int)(hash_str(n) & (uint64_t)(ncap - 1));
        while (ns[j].name) j = (j + 1) & (ncap - 1);
        ns[j] = s->slots[i];
    }
    free(s->slots);
    s->slots = ns;
    s->cap = ncap;
    s->used = s->n;
    return 0;
}

pe_tensor *pe_scope_var(pe_scope *s, const char *name) {
    pe_tensor *t = pe_scope_find_local_var(s, name);
    if (t) return t;
    if ((s->used + 1) * 4 > s->cap * 3 && grow(s) != 0) return NULL;
    t = pe_tensor_new();
    char *copy = strdup(name);
    if (!t || !copy) { pe_tensor_free(t); free(copy); return NULL; }
    int mask = s->cap - 1;
    int i = (int)(hash_str(name) & (uint64_t)mask);
    while (s->slots[i].name && s->slots[i].name != TOMB) i = (i + 1) & mask;
    if (!s->slots[i].name) s->used++;
    s->slots[i].name = copy;
    s->slots[i].t = t;
    s->n++;
    return t;
}

bool pe_scope_erase_var(pe_scope *s, const char *name) {
    int i = find_slot(s, name);
    if (i < 0) return false;
    free(s->slots[i].name);
    pe_tensor_free(s->slots[i].t);
    s->slots[i].name = TOMB;
    s->slots[i].t = NULL;
    s->n--;
    return true;
}

pe_scope *pe_scope_parent(const pe_scope *s) { return s->parent; }

int pe_scope_size(const pe_scope *s) { return s->n; }

const char *pe_scope_var_name(const pe_scope *s, int idx) {
    for (int i = 0, k = 0; i < s->cap; i++) {
        const char *n = s->slots[i].name;
        if (!n || n == TOMB) continue;
        if (k++ == idx) return n;
    }
    return NULL;
}

int pe_scope_var_names(const pe_scope *s, const char **names, int cap) {
    int k = 0;
    for (int i = 0; i < s->cap && k < cap; i++) {
        const char *n = s->slots[i].name;
        if (n && n != TOMB) names[k++] = n;
    }
    return k;
}

size_t pe_scope_bytes(const pe_scope *s) {
    size_t total = 0;
    for (int i = 0; i < s->cap; i++) {
        const char *n = s->slots[i].name;
        if (!n || n == TOMB || !s->slots[i].t->buf || s->slots[i].t->buf->external) continue;
        total += s->slots[i].t->buf->bytes;
    }
    return total;
}

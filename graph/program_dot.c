/* graph/program_dot.c — block 0 of a program as Graphviz DOT.
 *
 * How: one node per op (box) and one per var name (ellipse), edges from
 * every input var to the op and from the op to every output var. A var
 * written in place (an optimizer's ParamOut = Param) gets an edge each way,
 * which DOT draws as a small cycle — that is what the program does. Names
 * are escaped for DOT's quoted strings (a program file may hold any bytes).
 * The text is built in memory and written atomically, so a reader never
 * sees half a graph.
 */
#include "graph/program_dot.h"
#include "graph/strmap.h"
#include "runtime/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *buf;
    size_t n, cap;
    bool oom;
} sbuf;

static void emit(sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(sbuf *s, const char *fmt, ...) {
    if (s->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int r = vsnprintf(s->buf + s->n, s->cap - s->n, fmt, ap);
        va_end(ap);
        if (r < 0) { s->oom = true; return; }
        if (s->n + (size_t)r < s->cap) { s->n += (size_t)r; return; }
        size_t cap = (s->cap + (size_t)r) * 2;
        char *nb = realloc(s->buf, cap);
        if (!nb) { s->oom = true; return; }
        s->buf = nb;
        s->cap = cap;
    }
}

/* DOT quoted-string body: '"' and '\' escaped, control bytes dropped. */
static void emit_escaped(sbuf *s, const char *str) {
    for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
        if (*p == '"' || *p == '\\') emit(s, "\\%c", *p);
        else if (*p >= 0x20 && *p != 0x7f) emit(s, "%c", *p);
    }
}

/* Node id of var `name`, declaring the node on first sight. */
static int var_node(sbuf *s, pe_strmap *ids, const pe_block *b, const char *name) {
    int id = pe_strmap_get(ids, name);
    if (id >= 0) return id;
    id = ids->n;
    if (pe_strmap_put(ids, name, id) != 0) { s->oom = true; return -1; }
    const pe_var *v = pe_block_find_var(b, name);
    emit(s, "  v%d [shape=ellipse, label=\"", id);
    emit_escaped(s, name);
    if (v) {
        char db[128];
        emit(s, "\\n%s %s\"", pe_dtype_name(v->dtype), pe_dims_str(v->ndim, v->dims, db, sizeof db));
        if (v->persistable) emit(s, ", style=filled, fillcolor=lightgrey");
    } else {
        emit(s, "\"");
    }
    emit(s, "];\n");
    return id;
}

pe_status pe_program_write_dot(const pe_program *p, const char *path, const char *title) {
    if (!p || p->n_blocks < 1 || !path) return pe_error(PE_ERR_INVALID, "program DOT: no program or path");
    const pe_block *b = &p->blocks[0];
    sbuf s = {0};
    pe_strmap ids = {0};
    emit(&s, "digraph pe_program {\n  rankdir=TB;\n  node [fontsize=10];\n");
    if (title) {
        emit(&s, "  label=\"");
        emit_escaped(&s, title);
        emit(&s, "\";\n  labelloc=t;\n");
    }
    for (int i = 0; i < b->n_ops && !s.oom; i++) {
        const pe_op *op = &b->ops[i];
        emit(&s, "  op%d [shape=box, style=filled, fillcolor=\"#ffe8c0\", label=\"%d ", i, i);
        emit_escaped(&s, op->type);
        emit(&s, "\"];\n");
        for (int k = 0; k < op->n_inputs; k++)
            for (int a = 0; a < op->inputs[k].n_args; a++) {
                const char *name = op->inputs[k].args[a];
                if (!strcmp(name, PE_EMPTY_VAR)) continue;
                int v = var_node(&s, &ids, b, name);
                if (v >= 0) emit(&s, "  v%d -> op%d;\n", v, i);
            }
        for (int k = 0; k < op->n_outputs; k++)
            for (int a = 0; a < op->outputs[k].n_args; a++) {
                const char *name = op->outputs[k].args[a];
                if (!strcmp(name, PE_EMPTY_VAR)) continue;
                int v = var_node(&s, &ids, b, name);
                if (v >= 0) emit(&s, "  op%d -> v%d;\n", i, v);
            }
    }
    emit(&s, "}\n");
    pe_strmap_free(&ids);
    if (s.oom) {
        free(s.buf);
        return pe_error(PE_ERR_NOMEM, "program DOT: out of memory writing '%s'", path);
    }
    pe_status st = pe_write_file_atomic(path, s.buf, s.n);
    free(s.buf);
    return st;
}

/* tools/cmd_inspect.c — `pe inspect PROGRAM`: a readable listing of a program.
 *
 * For every block: its ops in order (index, type, "Slot=[args]" inputs ->
 * outputs, attrs as name=value with long lists and strings shortened) and
 * its vars in a table (name, dtype, shape with -1 for unknown dims,
 * persistable / parameter / stop_gradient flags). Ends with the parameter
 * count: the sum of numel over is_parameter vars whose dims are all known,
 * and their bytes. Sizes are computed with overflow checks because the dims
 * come from a file.
 */
#include "tool.h"

#include <inttypes.h>
#include <string.h>

enum { MAX_LIST_SHOWN = 8, MAX_STRING_SHOWN = 48 };

static void print_string(const char *s) {
    size_t n = strlen(s);
    if (n <= MAX_STRING_SHOWN)
        printf("\"%s\"", s);
    else
        printf("\"%.*s...\"(%zu chars)", MAX_STRING_SHOWN, s, n);
}

static void print_attr(const pe_attr *a) {
    printf("%s=", a->name);
    switch (a->type) {
    case PE_ATTR_INT:
    case PE_ATTR_LONG: printf("%" PRId64, a->i); return;
    case PE_ATTR_FLOAT: printf("%g", a->f); return;
    case PE_ATTR_BOOL: printf("%s", a->i ? "true" : "false"); return;
    case PE_ATTR_STRING: print_string(a->s ? a->s : ""); return;
    case PE_ATTR_BLOCK: printf("block#%" PRId64, a->i); return;
    default: break;
    }
    printf("[");
    int shown = a->n < MAX_LIST_SHOWN ? a->n : MAX_LIST_SHOWN;
    for (int k = 0; k < shown; k++) {
        if (k) printf(",");
        switch (a->type) {
        case PE_ATTR_INTS:
        case PE_ATTR_LONGS: printf("%" PRId64, a->ints[k]); break;
        case PE_ATTR_BOOLS: printf("%s", a->ints[k] ? "true" : "false"); break;
        case PE_ATTR_FLOATS: printf("%g", a->floats[k]); break;
        case PE_ATTR_STRINGS: print_string(a->strings[k] ? a->strings[k] : ""); break;
        default: printf("?"); break;
        }
    }
    if (shown < a->n) printf(",...(%d items)", a->n);
    printf("]");
}

static void print_slots(const pe_slot *slots, int n) {
    for (int s = 0; s < n; s++) {
        printf("%s%s=[", s ? " " : "", slots[s].name);
        for (int k = 0; k < slots[s].n_args; k++) printf("%s%s", k ? ", " : "", slots[s].args[k]);
        printf("]");
    }
}

static void print_op(int idx, const pe_op *op, int type_w) {
    printf("    %3d  %-*s  ", idx, type_w, op->type);
    print_slots(op->inputs, op->n_inputs);
    printf(" -> ");
    print_slots(op->outputs, op->n_outputs);
    if (op->n_attrs) {
        printf("  {");
        for (int k = 0; k < op->n_attrs; k++) {
            if (k) printf(", ");
            print_attr(&op->attrs[k]);
        }
        printf("}");
    }
    printf("\n");
}

/* numel of a var with all dims known; false when a dim is unknown (<0) or
 * the product overflows. */
static bool var_numel(const pe_var *v, int64_t *numel) {
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++) {
        if (v->dims[d] < 0 || __builtin_mul_overflow(n, v->dims[d], &n)) return false;
    }
    *numel = n;
    return true;
}

static int clamp_width(size_t w, int lo, int hi) {
    return w < (size_t)lo ? lo : w > (size_t)hi ? hi : (int)w;
}

int pe_cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && !strcmp(a, "--")) {
            only_pos = true;
            continue;
        }
        if (!only_pos && pe_tool_is_flag(a)) return pe_tool_usage_error("inspect", "unknown option '%s'", a);
        if (path) return pe_tool_usage_error("inspect", "unexpected argument '%s'", a);
        path = a;
    }
    if (!path) return pe_tool_usage_error("inspect", "missing PROGRAM");

    pe_program *p = NULL;
    pe_status st = pe_program_load_file(path, &p);
    if (st != PE_OK) return pe_tool_fail_file(st, path);

    printf("program %s: version %d, random_seed %" PRId64 ", %d block%s\n", path, (int)p->version,
           p->random_seed, p->n_blocks, p->n_blocks == 1 ? "" : "s");
    for (int k = 0; k < 2; k++) { /* an inference model's recorded feed / fetch vars */
        int n = k ? p->n_fetch_names : p->n_feed_names;
        char **v = k ? p->fetch_names : p->feed_names;
        if (!n) continue;
        printf("inference model %s:", k ? "fetch" : "feed");
        for (int i = 0; i < n; i++) printf(" %s", v[i]);
        printf("\n");
    }
    int64_t n_params = 0, param_bytes = 0;
    int n_param_vars = 0, n_unknown = 0;
    bool overflow = false;
    for (int b = 0; b < p->n_blocks; b++) {
        const pe_block *blk = &p->blocks[b];
        printf("\nblock %d (parent %d): %d op%s, %d var%s\n", blk->idx, blk->parent_idx, blk->n_ops,
               blk->n_ops == 1 ? "" : "s", blk->n_vars, blk->n_vars == 1 ? "" : "s");
        size_t type_w = 0, name_w = 4;
        for (int i = 0; i < blk->n_ops; i++)
            if (strlen(blk->ops[i].type) > type_w) type_w = strlen(blk->ops[i].type);
        for (int i = 0; i < blk->n_vars; i++)
            if (strlen(blk->vars[i].name) > name_w) name_w = strlen(blk->vars[i].name);
        if (blk->n_ops) printf("  ops:\n");
        for (int i = 0; i < blk->n_ops; i++) print_op(i, &blk->ops[i], clamp_width(type_w, 1, 32));
        if (blk->n_vars) printf("  vars:\n    %-*s  %-8s  %-20s  flags\n", clamp_width(name_w, 4, 48), "name",
                                "dtype", "shape");
        for (int i = 0; i < blk->n_vars; i++) {
            const pe_var *v = &blk->vars[i];
            char shape[160];
            pe_dims_str(v->ndim, v->dims, shape, sizeof shape);
            char flags[64];
            snprintf(flags, sizeof flags, "%s%s%s", v->persistable ? " persistable" : "",
                     v->is_parameter ? " parameter" : "", v->stop_gradient ? " stop_gradient" : "");
            if (flags[0])
                printf("    %-*s  %-8s  %-20s %s\n", clamp_width(name_w, 4, 48), v->name, pe_dtype_name(v->dtype),
                       shape, flags);
            else
                printf("    %-*s  %-8s  %s\n", clamp_width(name_w, 4, 48), v->name, pe_dtype_name(v->dtype), shape);
            if (!v->is_parameter) continue;
            int64_t numel, bytes;
            if (!var_numel(v, &numel)) {
                n_unknown++;
                continue;
            }
            n_param_vars++;
            if (__builtin_mul_overflow(numel, (int64_t)pe_dtype_size(v->dtype), &bytes) ||
                __builtin_add_overflow(n_params, numel, &n_params) ||
                __builtin_add_overflow(param_bytes, bytes, &param_bytes))
                overflow = true;
        }
    }
    if (overflow)
        printf("\nparameters: too many to count (the sizes overflow 64 bits) in %d var%s\n", n_param_vars,
               n_param_vars == 1 ? "" : "s");
    else
        printf("\nparameters: %" PRId64 " in %d var%s, %" PRId64 " bytes (%.2f MiB)\n", n_params, n_param_vars,
               n_param_vars == 1 ? "" : "s", param_bytes, (double)param_bytes / (1024.0 * 1024.0));
    if (n_unknown)
        printf("            (%d parameter var%s with unknown dims not counted)\n", n_unknown,
               n_unknown == 1 ? "" : "s");
    pe_program_free(p);
    return PE_EXIT_OK;
}

/* tools/args.c — command-line values several `pe` commands take alike.
 *
 * What: --places (a CPU place list) and --strategy (BuildStrategy fields by
 * Paddle's names, the library's table pe_strategy_fields; Paddle's switches
 * PE has nothing for at their defaults only), each as a value parser and as a flag step for a
 * command's argument loop (tools/tool.h).
 * How: values are checked completely; a bad one prints "pe: error: ..." and
 * the command's usage line (pe_tool_usage_error) and yields PE_EXIT_USAGE.
 * Why: pe graph, pe plan and pe run parsed the same flags with their own
 * copies; one parser gives them the same accepted forms and messages.
 */
#include "tool.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int parse_bool(const char *cmd, const char *key, const char *v, bool *out) {
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "on") || !strcasecmp(v, "yes")) *out = true;
    else if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "off") || !strcasecmp(v, "no")) *out = false;
    else return pe_tool_usage_error(cmd, "--strategy %s=%s: the value must be 1/0 (true/false, on/off)", key, v);
    return PE_EXIT_OK;
}

/* One build-strategy field of the library's table (pe_strategy_fields). */
static int parse_field(const char *cmd, const pe_strategy_field *f, const char *v, pe_build_strategy *bs) {
    void *p = pe_strategy_field_ptr(f, NULL, bs);
    switch (f->kind) {
    case PE_FIELD_BOOL: return parse_bool(cmd, f->name, v, p);
    case PE_FIELD_DOUBLE: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (!*v || *end || errno) return pe_tool_usage_error(cmd, "--strategy %s=%s: the value must be a number", f->name, v);
        *(double *)p = x; /* range: pe_pe_options_check names it */
        return PE_EXIT_OK;
    }
    case PE_FIELD_ENUM:
        for (int i = 0; i < f->n_names; i++)
            if (!strcmp(v, f->names[i])) {
                *(int *)p = i;
                return PE_EXIT_OK;
            }
        if (!strcmp(f->name, "reduce_strategy") && !strcmp(v, "allreduce")) { /* Paddle's enum spelling */
            *(int *)p = PE_REDUCE_ALL_REDUCE;
            return PE_EXIT_OK;
        }
        char allowed[256];
        pe_strategy_field_names(f, allowed, sizeof allowed);
        return pe_tool_usage_error(cmd, "--strategy %s=%s: %s", f->name, v, allowed);
    case PE_FIELD_INT: break; /* no build-strategy field is an int */
    }
    return pe_tool_usage_error(cmd, "--strategy %s: not a field the command line sets", f->name);
}

/* One of Paddle's switches PE has nothing for (pe_strategy_refused_fields):
 * the default only, refused in the Python setter's words. */
static int parse_refused(const char *cmd, const pe_strategy_refused *rf, const char *v) {
    bool is_default;
    const char *shown = v; /* as the Python setter prints the value */
    if (rf->boolean) {
        bool b;
        int rc = parse_bool(cmd, rf->name, v, &b);
        if (rc != PE_EXIT_OK) return rc;
        is_default = b == (rf->dflt != 0);
        shown = b ? "True" : "False";
    } else {
        char *end;
        long x = strtol(v, &end, 10);
        if (!*v || *end) return pe_tool_usage_error(cmd, "--strategy %s=%s: the value must be an int", rf->name, v);
        is_default = x == rf->dflt;
    }
    if (is_default) return PE_EXIT_OK;
    return pe_tool_usage_error(cmd, "--strategy %s=%s: BuildStrategy.%s = %s is not supported: %s", rf->name, v,
                               rf->name, shown, rf->why);
}

/* The usage error for a key no table knows, listing the build fields. */
static int unknown_key(const char *cmd, const char *key) {
    char known[1024];
    size_t len = 0;
    for (const pe_strategy_field *k = pe_strategy_fields; k->name && len < sizeof known; k++)
        if (k->build) {
            int r = snprintf(known + len, sizeof known - len, "%s%s", len ? ", " : "", k->name);
            if (r > 0) len += (size_t)r;
        }
    return pe_tool_usage_error(cmd, "--strategy: unknown key '%s' (%s; Paddle's other switches at their default "
                               "values)", key, known);
}

/* "k=v,k=v": BuildStrategy fields by Paddle's names (tools/tool.h). */
int pe_tool_parse_strategy(const char *cmd, const char *spec, pe_build_strategy *bs) {
    char buf[1024];
    if (strlen(spec) >= sizeof buf) return pe_tool_usage_error(cmd, "--strategy value is too long");
    strcpy(buf, spec);
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq || eq == item) return pe_tool_usage_error(cmd, "--strategy item '%s' is not KEY=VALUE", item);
        *eq = '\0';
        const char *key = item, *v = eq + 1;
        const pe_strategy_field *f = pe_strategy_field_find(key);
        const pe_strategy_refused *rf = pe_strategy_refused_fields;
        while (rf->name && (!rf->build || strcmp(rf->name, key))) rf++;
        bool ignored;
        int rc;
        if (f && f->build) rc = parse_field(cmd, f, v, bs);
        else if (rf->name) rc = parse_refused(cmd, rf, v);
        else if (!strcmp(key, "use_hierarchical_allreduce")) /* either value: PE's collectives across trainers */
            rc = parse_bool(cmd, key, v, &ignored);            /* are always two-level (runtime/comm/hier.c) */
        else rc = unknown_key(cmd, key);
        if (rc != PE_EXIT_OK) return rc;
    }
    pe_pe_options o; /* the values' ranges, as the executor checks them */
    pe_pe_options_default(&o);
    o.build_strategy = *bs;
    if (pe_pe_options_check(&o) != PE_OK) return pe_tool_usage_error(cmd, "--strategy %s: %s", spec, pe_last_error());
    return PE_EXIT_OK;
}

/* "PREFIX" or "PREFIX:N": the count (PREFIX and PREFIX:0 are one place). */
static bool parse_count(const char *v, const char *prefix, int *n) {
    size_t k = strlen(prefix);
    if (strncmp(v, prefix, k)) return false;
    if (!v[k]) {
        *n = 1;
        return true;
    }
    if (v[k] != ':' || !v[k + 1]) return false;
    char *end;
    errno = 0;
    long c = strtol(v + k + 1, &end, 10);
    if (*end || errno || c < 0 || c > 64) return false;
    *n = c == 0 ? 1 : (int)c;
    return true;
}

int pe_tool_parse_places(const char *cmd, const char *v, pe_place_kind *kind, int *n_places) {
    if (parse_count(v, "cpu", n_places)) {
        if (kind) *kind = PE_PLACE_CPU;
        return PE_EXIT_OK;
    }
    if (parse_count(v, "cuda", n_places) || parse_count(v, "gpu", n_places)) {
        if (!kind)
            return pe_tool_usage_error(cmd, "--places %s: 'pe %s' takes CPU places only (cpu or cpu:N)", v, cmd);
        *kind = PE_PLACE_CUDA;
        return PE_EXIT_OK;
    }
    return pe_tool_usage_error(cmd,
                               "--places '%s' is not a place list: use cpu, cpu:0 or cpu:N, or cuda, cuda:0 or cuda:N "
                               "(the first N visible GPUs), with N from 1 to 64",
                               v);
}

void pe_tool_places_fill(pe_place_kind kind, int n, pe_place *places) {
    for (int i = 0; i < n; i++) places[i] = kind == PE_PLACE_CUDA ? pe_place_cuda(i) : pe_place_cpu(i);
}

bool pe_tool_places_flag(const char *cmd, int argc, char **argv, int *i, pe_place_kind *kind, int *n_places,
                         int *rc) {
    const char *v = NULL;
    int r = pe_tool_flag(argc, argv, i, "--places", &v);
    if (r == 0) return false;
    *rc = r < 0 ? pe_tool_usage_error(cmd, "--places needs a value (cpu:N or cuda:N)")
                : pe_tool_parse_places(cmd, v, kind, n_places);
    return true;
}

bool pe_tool_strategy_flag(const char *cmd, int argc, char **argv, int *i, pe_build_strategy *bs, int *rc) {
    const char *v = NULL;
    int r = pe_tool_flag(argc, argv, i, "--strategy", &v);
    if (r == 0) return false;
    *rc = r < 0 || !*v ? pe_tool_usage_error(cmd, "--strategy needs KEY=VALUE[,KEY=VALUE...]")
                       : pe_tool_parse_strategy(cmd, v, bs);
    return true;
}

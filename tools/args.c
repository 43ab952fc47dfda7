/* tools/args.c — command-line values several `pe` commands take alike.
 *
 * What: --places (a CPU place list) and --strategy (BuildStrategy fields by
 * Paddle's names), each as a value parser and as a flag step for a
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

/* "k=v,k=v": BuildStrategy fields by Paddle's names (tools/tool.h). */
int pe_tool_parse_strategy(const char *cmd, const char *spec, pe_build_strategy *bs) {
    static const struct {
        const char *name;
        size_t off;
    } k_bools[] = {
        {"fuse_gemm_epilogue", offsetof(pe_build_strategy, fuse_gemm_epilogue)},
        {"fuse_elewise_add_act_ops", offsetof(pe_build_strategy, fuse_elewise_add_act_ops)},
        {"fuse_all_optimizer_ops", offsetof(pe_build_strategy, fuse_all_optimizer_ops)},
        {"fuse_all_reduce_ops", offsetof(pe_build_strategy, fuse_all_reduce_ops)},
        {"enable_inplace", offsetof(pe_build_strategy, enable_inplace)},
        {"memory_optimize", offsetof(pe_build_strategy, memory_optimize)},
        {"enable_sequential_execution", offsetof(pe_build_strategy, enable_sequential_execution)},
        {"shard_optimizer", offsetof(pe_build_strategy, shard_optimizer)},
        {"shard_across_trainers", offsetof(pe_build_strategy, shard_across_trainers)},
    };
    char buf[1024];
    if (strlen(spec) >= sizeof buf) return pe_tool_usage_error(cmd, "--strategy value is too long");
    strcpy(buf, spec);
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq || eq == item) return pe_tool_usage_error(cmd, "--strategy item '%s' is not KEY=VALUE", item);
        *eq = '\0';
        const char *key = item, *v = eq + 1;
        bool done = false;
        for (size_t i = 0; i < sizeof k_bools / sizeof k_bools[0] && !done; i++)
            if (!strcmp(key, k_bools[i].name)) {
                int rc = parse_bool(cmd, key, v, (bool *)((char *)bs + k_bools[i].off));
                if (rc != PE_EXIT_OK) return rc;
                done = true;
            }
        if (done) continue;
        if (!strcmp(key, "reduce_strategy")) {
            if (!strcmp(v, "all_reduce") || !strcmp(v, "allreduce")) bs->reduce_strategy = PE_REDUCE_ALL_REDUCE;
            else if (!strcmp(v, "reduce")) bs->reduce_strategy = PE_REDUCE_REDUCE;
            else return pe_tool_usage_error(cmd, "--strategy reduce_strategy=%s: all_reduce or reduce", v);
        } else if (!strcmp(key, "gradient_scale_strategy")) {
            if (!strcmp(v, "batch_share")) bs->gradient_scale_strategy = PE_GRAD_SCALE_BATCH_SHARE;
            else if (!strcmp(v, "coeff_num_device")) bs->gradient_scale_strategy = PE_GRAD_SCALE_COEFF_NUM_DEVICE;
            else if (!strcmp(v, "one")) bs->gradient_scale_strategy = PE_GRAD_SCALE_ONE;
            else if (!strcmp(v, "customized")) bs->gradient_scale_strategy = PE_GRAD_SCALE_CUSTOMIZED;
            else
                return pe_tool_usage_error(cmd, "--strategy gradient_scale_strategy=%s: batch_share, "
                                           "coeff_num_device, one or customized", v);
        } else {
            return pe_tool_usage_error(cmd, "--strategy: unknown key '%s' (fuse_gemm_epilogue, "
                                       "fuse_elewise_add_act_ops, fuse_all_optimizer_ops, fuse_all_reduce_ops, "
                                       "enable_inplace, memory_optimize, enable_sequential_execution, "
                                       "shard_optimizer, shard_across_trainers, reduce_strategy, gradient_scale_strategy)", key);
        }
    }
    return PE_EXIT_OK;
}

int pe_tool_parse_places(const char *cmd, const char *v, int *n_places) {
    if (!strcmp(v, "cpu") || !strcmp(v, "cpu:0")) {
        *n_places = 1;
        return PE_EXIT_OK;
    }
    if (!strncmp(v, "cpu:", 4)) {
        char *end;
        errno = 0;
        long n = strtol(v + 4, &end, 10);
        if (v[4] && !*end && !errno && n >= 1 && n <= 64) {
            *n_places = (int)n;
            return PE_EXIT_OK;
        }
    }
    if (!strncmp(v, "cuda", 4) || !strncmp(v, "gpu", 3))
        return pe_tool_usage_error(cmd, "--places %s: CUDA places are not supported by 'pe %s' yet (use cpu:N)", v, cmd);
    return pe_tool_usage_error(cmd, "--places '%s' is not a place list: use cpu, cpu:0, or cpu:N with N from 1 to 64",
                               v);
}

bool pe_tool_places_flag(const char *cmd, int argc, char **argv, int *i, int *n_places, int *rc) {
    const char *v = NULL;
    int r = pe_tool_flag(argc, argv, i, "--places", &v);
    if (r == 0) return false;
    *rc = r < 0 ? pe_tool_usage_error(cmd, "--places needs a value (cpu:N)") : pe_tool_parse_places(cmd, v, n_places);
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

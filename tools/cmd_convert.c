/* tools/cmd_convert.c — `pe convert IN OUT`: program .json <-> .pe.
 *
 * Loads IN with the verifying loader (format decided by content), then saves
 * with pe_program_save_file, which picks the format from OUT's extension.
 * Only .json and .pe are accepted as output extensions, so a typo such as
 * "out.jsn" is a usage error instead of a silently binary file.
 */
#include "tool.h"

#include <string.h>

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && !strcmp(s + n - m, suffix);
}

int pe_cmd_convert(int argc, char **argv) {
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0;
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && !strcmp(a, "--")) {
            only_pos = true;
            continue;
        }
        if (!only_pos && pe_tool_is_flag(a)) return pe_tool_usage_error("convert", "unknown option '%s'", a);
        if (n_pos == 2) return pe_tool_usage_error("convert", "unexpected argument '%s'", a);
        pos[n_pos++] = a;
    }
    if (n_pos < 2)
        return pe_tool_usage_error("convert", n_pos == 0 ? "missing input and output files" : "missing output file");
    const char *in = pos[0], *out = pos[1];
    if (!ends_with(out, ".json") && !ends_with(out, ".pe"))
        return pe_tool_usage_error("convert", "output '%s' must end with .json or .pe", out);

    pe_program *p = NULL;
    pe_status st = pe_program_load_file(in, &p);
    if (st != PE_OK) return pe_tool_fail_file(st, in);
    st = pe_program_save_file(p, out);
    pe_program_free(p);
    if (st != PE_OK) return pe_tool_fail_status(st, "saving '%s'", out);
    printf("%s -> %s (%s)\n", in, out, ends_with(out, ".json") ? "JSON" : "binary .pe");
    return PE_EXIT_OK;
}

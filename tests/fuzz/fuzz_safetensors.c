/* tests/fuzz/fuzz_safetensors.c — libFuzzer target for the safetensors
 * reader (pe_safetensors_read_buffer, runtime/safetensors.c).
 *
 * Any input must either load every tensor of a valid image into the scope or
 * fail with a message and leave the scope empty — never a crash, an
 * out-of-bounds read (ASan) or a leak (LeakSanitizer). Build and run: see
 * docs/fuzzing.md.
 */
#include "pe/checkpoint.h"
#include "runtime/safetensors_internal.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pe_scope *s = pe_scope_new(NULL);
    if (!s) return 0;
    pe_status st = pe_safetensors_read_buffer(data, size, "fuzz.safetensors", s);
    if (st != PE_OK && (pe_scope_size(s) != 0 || pe_last_error()[0] == '\0')) abort();
    if (st == PE_OK) {
        /* Every tensor fits in the input. */
        size_t total = 0;
        int n = pe_scope_size(s);
        const char **names = malloc(sizeof *names * (size_t)(n > 0 ? n : 1));
        if (!names) abort();
        if (pe_scope_var_names(s, names, n) != n) abort();
        for (int i = 0; i < n; i++) total += pe_tensor_nbytes(pe_scope_find_local_var(s, names[i]));
        free(names);
        if (total > size) abort();
    }
    pe_scope_free(s);
    return 0;
}

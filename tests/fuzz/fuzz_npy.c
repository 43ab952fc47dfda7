/* tests/fuzz/fuzz_npy.c — libFuzzer target for the .npy reader
 * (pe_npy_load_buffer, runtime/npy.c).
 *
 * Any input must give PE_OK with a tensor whose byte size matches the data
 * that followed the header, or an error with a message — never a crash, an
 * out-of-bounds read (ASan) or a leak (LeakSanitizer). Build and run: see
 * docs/fuzzing.md.
 */
#include "pe/npy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pe_tensor *t = pe_tensor_new();
    if (!t) return 0;
    pe_status st = pe_npy_load_buffer(data, size, "fuzz.npy", t);
    if (st == PE_OK) {
        /* The payload is the tail of the input: check it was copied exactly. */
        size_t nb = pe_tensor_nbytes(t);
        if (nb > size || (nb && memcmp(pe_tensor_data(t), data + size - nb, nb) != 0)) abort();
    } else if (pe_last_error()[0] == '\0') {
        abort(); /* every failure carries a message */
    }
    pe_tensor_free(t);
    return 0;
}

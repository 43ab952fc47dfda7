/* tests/fuzz/fuzz_program.c — libFuzzer target for the program loader
 * (graph/program_io.cc + graph/check.c): any bytes, binary or JSON, through
 * pe_program_load_buffer. Seed corpus: tests/fuzz/corpus/program/.
 *
 * Beyond "no crash, no leak" it checks one invariant: a program that loads
 * also saves, in both forms, and loads again. A violation aborts, so the
 * fuzzer reports it like a crash.
 */
#include "pe/program.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pe_program *p = NULL;
    if (pe_program_load_buffer(data, size, "fuzz", &p) != PE_OK) {
        if (p) abort(); /* a failed load leaves *out NULL */
        return 0;
    }
    void *buf = NULL;
    size_t n = 0;
    char *json = NULL;
    pe_program *q = NULL, *r = NULL;
    if (pe_program_to_buffer(p, &buf, &n) != PE_OK) abort();
    if (pe_program_load_buffer(buf, n, "fuzz-resaved.pe", &q) != PE_OK) abort();
    if (pe_program_to_json(p, &json) != PE_OK) abort();
    if (pe_program_load_json(json, strlen(json), "fuzz-resaved.json", &r) != PE_OK) abort();
    if (q->n_blocks != p->n_blocks || r->n_blocks != p->n_blocks) abort();
    free(buf);
    free(json);
    pe_program_free(q);
    pe_program_free(r);
    pe_program_free(p);
    return 0;
}

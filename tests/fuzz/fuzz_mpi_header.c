/* tests/fuzz/fuzz_mpi_header.c — libFuzzer target for the check of the MPI
 * collective headers (runtime/comm/mpi_header.c): the bytes every other rank
 * sends before a collective's data, so a hostile or foreign peer controls
 * them. Seed corpus: tests/fuzz/corpus/mpi_header/.
 *
 * Input: byte 0 picks the rank count (1 + b % 8) and, in bit 7, whether
 * every header gets PE's magic (so most runs reach the comparisons); the
 * rest fills the headers in order, zero-padded.
 *
 * Invariants (a violation aborts, which libFuzzer reports as a crash): the
 * status is PE_OK or a valid error status; the reason is terminated, printable
 * and present exactly when the status is an error; PE_OK only when every
 * header has the magic, status PE_OK and the same call as rank 0; the headers
 * are not written.
 */
#include "runtime/comm/mpi_header.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int n = 1 + data[0] % MAX_RANKS;
    int magic = data[0] & 0x80;
    pe_mpi_header all[MAX_RANKS], copy[MAX_RANKS];
    memset(all, 0, sizeof all);
    size_t take = size - 1 < sizeof all ? size - 1 : sizeof all;
    memcpy(all, data + 1, take);
    if (magic)
        for (int q = 0; q < n; q++) all[q].d[7] = PE_MPI_DESC_MAGIC;
    memcpy(copy, all, sizeof all);

    char why[PE_MPI_WHY_SIZE + 8];
    memset(why, 'x', sizeof why);
    pe_status st = pe_mpi_headers_check(all, n, why, PE_MPI_WHY_SIZE);
    if ((int)st < 0 || st >= PE_STATUS_COUNT) abort();
    if (memcmp(copy, all, sizeof all)) abort();
    if (memcmp(why + PE_MPI_WHY_SIZE, "xxxxxxxx", 8)) abort(); /* wrote past size */
    size_t len = strnlen(why, PE_MPI_WHY_SIZE);
    if (len == PE_MPI_WHY_SIZE) abort(); /* unterminated */
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)why[i] < 0x20 || why[i] == 0x7f) abort();
    if ((st == PE_OK) != (len == 0)) abort();
    if (st == PE_OK)
        for (int q = 0; q < n; q++) {
            const int64_t *d = all[q].d, *f = all[0].d;
            if (d[7] != PE_MPI_DESC_MAGIC || d[5] != PE_OK) abort();
            if (d[0] != f[0] || d[1] != f[1] || d[2] != f[2] || d[3] != f[3] || d[4] != f[4] || d[6] != f[6])
                abort();
        }
    return 0;
}

/* tests/fuzz/fuzz_trainers_world.c — libFuzzer target for the check of the
 * trainers' views that a ParallelExecutor across processes allgathers at
 * construction (pe_pe_check_trainers, executor/trainers.c): four int64s from
 * every process, so another process controls them. Seed corpus:
 * tests/fuzz/corpus/trainers_world/.
 *
 * Input: byte 0 picks the process count R (1 + b % 16); the rest fills the
 * R x 4 int64s, zero-padded; when bit 7 of byte 0 is set each row's first
 * two values become R and its rank (a consistent world), so most runs reach
 * the place and program comparisons.
 *
 * Invariants (a violation aborts): the status is PE_OK or PE_ERR_INVALID; an
 * error leaves a message; PE_OK exactly when every row is (R, its rank,
 * row 0's places, row 0's hash).
 */
#include "executor/pe_internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_R 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int R = 1 + data[0] % MAX_R;
    int64_t all[MAX_R * 4];
    memset(all, 0, sizeof all);
    size_t take = size - 1 < sizeof all ? size - 1 : sizeof all;
    memcpy(all, data + 1, take);
    if (data[0] & 0x80)
        for (int r = 0; r < R; r++) {
            all[r * 4] = R;
            all[r * 4 + 1] = r;
        }
    bool agree = true;
    for (int r = 0; r < R; r++) {
        const int64_t *v = &all[r * 4];
        if (v[0] != R || v[1] != r || v[2] != all[2] || v[3] != all[3]) agree = false;
    }
    pe_clear_error();
    pe_status st = pe_pe_check_trainers(all, R);
    if (st != PE_OK && st != PE_ERR_INVALID) abort();
    if ((st == PE_OK) != agree) abort();
    if (st != PE_OK && !pe_last_error()[0]) abort();
    return 0;
}

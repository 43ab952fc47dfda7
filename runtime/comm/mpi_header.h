/* runtime/comm/mpi_header.h — the header every rank of an MPI collective
 * sends before any data (runtime/comm/mpi.c), and the check of all of them.
 *
 *     pe_mpi_header all[n];                       // from MPI_Iallgather
 *     char why[PE_MPI_WHY_SIZE];
 *     pe_status st = pe_mpi_headers_check(all, n, why, sizeof why);
 *     if (st != PE_OK) fail the collective on this rank with (st, why);
 *
 * The headers come from other processes, so the check treats them as
 * hostile bytes: any content gives PE_OK or a valid error status with a
 * message, never a crash, an out-of-range status or an unterminated read.
 * It is pure (no MPI, no globals) so tests/fuzz/fuzz_mpi_header.c runs it
 * on any bytes; it is compiled in every build.
 */
#ifndef PE_RUNTIME_COMM_MPI_HEADER_H
#define PE_RUNTIME_COMM_MPI_HEADER_H

#include "pe/status.h"

#include <stddef.h>
#include <stdint.h>

#define PE_MPI_DESC_N 8
#define PE_MPI_DESC_MSG 192
#define PE_MPI_DESC_MAGIC 0x50456d7069ll /* "PEmpi" */
#define PE_MPI_WHY_SIZE 400
/* d[1] = op + PE_MPI_RED_SHIFT * reduction (pe_red) for allreduce, reduce
 * and reduce_scatter; the op alone for the others */
#define PE_MPI_RED_SHIFT 16

/* A rank's call as every rank sees it: d = tag, op, dtype, count, root,
 * this rank's own-check status, hash of the per-rank counts, magic; msg =
 * the end of its own-check message (NUL-terminated when it comes from PE,
 * but read as at most PE_MPI_DESC_MSG bytes). Sent as bytes (ranks of one
 * machine architecture). */
typedef struct {
    int64_t d[PE_MPI_DESC_N];
    char msg[PE_MPI_DESC_MSG];
} pe_mpi_header;

/* Compares the n headers (all: [n], borrowed, not written; n >= 1). PE_OK
 * when every rank made the same call and passed its own checks; otherwise
 * the status the collective fails with (PE_ERR_INVALID for differing calls,
 * PE_ERR_INTERNAL for a header that is not PE's, the failing rank's status
 * when it is a valid error status, else PE_ERR_INTERNAL) and, in why
 * (borrowed, size bytes, always terminated), the reason naming the rank.
 * Does not touch pe_last_error(). */
pe_status pe_mpi_headers_check(const pe_mpi_header *all, int n, char *why, size_t size);

#endif

/* runtime/comm/mpi_header.c — the check of every rank's MPI collective header
 * (mpi_header.h).
 *
 * What: rank q's header may be anything (another MPI collective's bytes, a
 * different PE build, a hostile peer), so every field is range-checked
 * before it is used: op and dtype are only named through the bounds-checked
 * pe_coll_name / pe_dtype_name, the peer's status is reported only when it is
 * a valid error status (an int64 that truncates to PE_OK must not let the
 * collective run), and its message is read within PE_MPI_DESC_MSG bytes with
 * control bytes replaced, so a peer cannot write escape sequences into logs.
 *
 * Why apart from mpi.c: pure (no MPI), so a libFuzzer target runs it.
 */
#include "runtime/comm/mpi_header.h"
#include "runtime/comm/comm.h"

#include <stdio.h>

/* The peer's message, at most PE_MPI_DESC_MSG bytes up to its NUL, printable. */
static void peer_text(const char *msg, char *out) {
    size_t i = 0;
    for (; i < PE_MPI_DESC_MSG - 1 && msg[i]; i++) {
        unsigned char ch = (unsigned char)msg[i];
        out[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    out[i] = '\0';
}

/* The peer's status as this process reports it: a valid error status or
 * PE_ERR_INTERNAL. */
static pe_status peer_status(int64_t s) {
    return s > PE_OK && s < PE_STATUS_COUNT ? (pe_status)s : PE_ERR_INTERNAL;
}

/* d[1]: the op, and the reduction above it (PE_MPI_RED_SHIFT) */
static pe_coll coll_of(int64_t v) {
    if (v < 0 || v / PE_MPI_RED_SHIFT >= PE_RED_COUNT) return PE_COLL_COUNT;
    v %= PE_MPI_RED_SHIFT;
    return v < PE_COLL_COUNT ? (pe_coll)v : PE_COLL_COUNT;
}
static pe_red red_of(int64_t v) {
    v = v >= 0 ? v / PE_MPI_RED_SHIFT : -1;
    return v >= 0 && v < PE_RED_COUNT ? (pe_red)v : PE_RED_COUNT;
}
static pe_dtype dtype_of(int64_t v) { return v >= 0 && v < PE_DTYPE_COUNT ? (pe_dtype)v : PE_DTYPE_COUNT; }

pe_status pe_mpi_headers_check(const pe_mpi_header *all, int n, char *why, size_t size) {
    char text[PE_MPI_DESC_MSG], what[PE_MPI_WHY_SIZE];
    if (size) why[0] = '\0';
    if (!all || n < 1) {
        snprintf(why, size, "no headers to check (%d ranks)", n);
        return PE_ERR_INTERNAL;
    }
    for (int q = 0; q < n; q++) {
        const int64_t *d = all[q].d;
        if (d[7] != PE_MPI_DESC_MAGIC) {
            snprintf(why, size, "rank %d sent a header that is not PE's (another MPI collective on this "
                     "communicator?)", q);
            return PE_ERR_INTERNAL;
        }
        if (d[5] == PE_OK) continue;
        peer_text(all[q].msg, text);
        if (d[5] > PE_OK && d[5] < PE_STATUS_COUNT)
            snprintf(why, size, "rank %d failed its call: %s", q, text[0] ? text : pe_status_name((pe_status)d[5]));
        else
            snprintf(why, size, "rank %d failed its call with status %lld, which is not a PE status%s%s", q,
                     (long long)d[5], text[0] ? ": " : "", text);
        return peer_status(d[5]);
    }
    const int64_t *f = all[0].d;
    for (int q = 1; q < n; q++) {
        const int64_t *d = all[q].d;
        if (d[0] != f[0])
            snprintf(what, sizeof what, "rank %d issued tag %llu (%s) where rank 0 issued tag %llu (%s): the ranks "
                     "must issue their collectives on an MPI communicator in the same order", q,
                     (unsigned long long)d[0], pe_coll_name(coll_of(d[1])), (unsigned long long)f[0],
                     pe_coll_name(coll_of(f[1])));
        else if (coll_of(d[1]) != coll_of(f[1]) || coll_of(d[1]) == PE_COLL_COUNT)
            snprintf(what, sizeof what, "rank %d called %s, rank 0 called %s", q, pe_coll_name(coll_of(d[1])),
                     pe_coll_name(coll_of(f[1])));
        else if (d[1] != f[1])
            snprintf(what, sizeof what, "rank %d passed reduction %s, rank 0 %s", q, pe_red_name(red_of(d[1])),
                     pe_red_name(red_of(f[1])));
        else if (d[2] != f[2])
            snprintf(what, sizeof what, "rank %d passed dtype %s, rank 0 %s", q, pe_dtype_name(dtype_of(d[2])),
                     pe_dtype_name(dtype_of(f[2])));
        else if (d[4] != f[4])
            snprintf(what, sizeof what, "rank %d passed root %lld, rank 0 root %lld", q, (long long)d[4],
                     (long long)f[4]);
        else if (d[3] != f[3])
            snprintf(what, sizeof what, "rank %d passed %lld elements, rank 0 %lld", q, (long long)d[3],
                     (long long)f[3]);
        else if (d[6] != f[6])
            snprintf(what, sizeof what, "rank %d passed other per-rank counts than rank 0", q);
        else
            continue;
        snprintf(why, size, "the ranks' calls differ: %s", what);
        return PE_ERR_INVALID;
    }
    return PE_OK;
}

/* tests/unit/test_mpi_header.c — the check of every rank's MPI collective
 * header (runtime/comm/mpi_header.c), without MPI: other processes' bytes,
 * so hostile values must give a valid error, never a run or a crash.
 *
 * Cases: agreeing calls pass; each differing field names the rank and the
 * field; a rank's own failure is reported with its status and message; a
 * status that truncates to PE_OK (2^32) or is not a PE status (-1, 99)
 * fails as PE_ERR_INTERNAL (the inline check before it let 2^32 run); the
 * peer's control bytes never reach the message; an unterminated message is
 * read within its 192 bytes; out-of-range op and dtype are named safely; a
 * header without the magic is refused. The fuzz target
 * tests/fuzz/fuzz_mpi_header.c checks the same invariants on any bytes.
 */
#include "tests/unit/op_test_util.h"
#include "runtime/comm/mpi_header.h"

static pe_mpi_header hdr(int64_t tag, int64_t op, int64_t count, int64_t st, const char *msg) {
    pe_mpi_header h;
    memset(&h, 0, sizeof h);
    int64_t d[PE_MPI_DESC_N] = {tag, op, 0, count, 0, st, 0, PE_MPI_DESC_MAGIC};
    memcpy(h.d, d, sizeof d);
    if (msg) snprintf(h.msg, sizeof h.msg, "%s", msg);
    return h;
}

static pe_status check(const pe_mpi_header *all, int n, char *why) {
    return pe_mpi_headers_check(all, n, why, PE_MPI_WHY_SIZE);
}

static void test_agree_and_differ(void **state) {
    (void)state;
    char why[PE_MPI_WHY_SIZE];
    pe_mpi_header all[3] = {hdr(5, 0, 100, 0, NULL), hdr(5, 0, 100, 0, NULL), hdr(5, 0, 100, 0, NULL)};
    assert_int_equal(check(all, 3, why), PE_OK);
    assert_string_equal(why, "");
    all[2].d[3] = 99;
    assert_int_equal(check(all, 3, why), PE_ERR_INVALID);
    assert_string_equal(why, "the ranks' calls differ: rank 2 passed 99 elements, rank 0 100");
    all[2] = hdr(6, 2, 100, 0, NULL);
    assert_int_equal(check(all, 3, why), PE_ERR_INVALID);
    assert_non_null(strstr(why, "rank 2 issued tag 6 (broadcast) where rank 0 issued tag 5 (allreduce)"));
    all[2] = hdr(5, 1 << 30, 100, 0, NULL); /* op out of range: named, not indexed */
    all[2].d[2] = -7;
    assert_int_equal(check(all, 3, why), PE_ERR_INVALID);
    assert_non_null(strstr(why, "rank 2 called collective, rank 0 called allreduce"));
    all[2].d[7] = 0;
    assert_int_equal(check(all, 3, why), PE_ERR_INTERNAL);
    assert_non_null(strstr(why, "rank 2 sent a header that is not PE's"));
}

static void test_peer_failures(void **state) {
    (void)state;
    char why[PE_MPI_WHY_SIZE];
    pe_mpi_header all[2] = {hdr(5, 0, 100, 0, NULL), hdr(5, 0, 100, PE_ERR_INVALID, "allreduce: root 7 of 2")};
    assert_int_equal(check(all, 2, why), PE_ERR_INVALID);
    assert_string_equal(why, "rank 1 failed its call: allreduce: root 7 of 2");
    all[1] = hdr(5, 0, 100, PE_ERR_NOMEM, NULL);
    assert_int_equal(check(all, 2, why), PE_ERR_NOMEM);
    assert_string_equal(why, "rank 1 failed its call: PE_ERR_NOMEM");
    /* statuses that are not PE's: 2^32 would truncate to PE_OK */
    const int64_t bad[] = {(int64_t)1 << 32, -1, 99, INT64_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        all[1] = hdr(5, 0, 100, bad[i], "hostile");
        assert_int_equal(check(all, 2, why), PE_ERR_INTERNAL);
        assert_non_null(strstr(why, "which is not a PE status: hostile"));
    }
    /* control bytes replaced; an unterminated message read within its bytes */
    all[1] = hdr(5, 0, 100, PE_ERR_IO, "\x1b[2Jgone\nnext\x7f");
    assert_int_equal(check(all, 2, why), PE_ERR_IO);
    assert_string_equal(why, "rank 1 failed its call: ?[2Jgone?next?");
    all[1] = hdr(5, 0, 100, PE_ERR_IO, NULL);
    memset(all[1].msg, 'A', sizeof all[1].msg);
    assert_int_equal(check(all, 2, why), PE_ERR_IO);
    assert_int_equal(strlen(why), strlen("rank 1 failed its call: ") + PE_MPI_DESC_MSG - 1);
    assert_int_equal(all[1].msg[PE_MPI_DESC_MSG - 1], 'A'); /* not written */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agree_and_differ),
        cmocka_unit_test(test_peer_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

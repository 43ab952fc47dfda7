/* tests/unit/test_cuda_places.c — CUDA places that cannot be used fail
 * cleanly; runs on every machine, GPU or not (the GPU tests are
 * test_cuda.c, skipped as a whole where there is no GPU).
 *
 * An unusable CUDA place (no GPU, a build without CUDA, or an id past the
 * visible devices) gives clear errors naming the place from the executor,
 * the allocator, tensors and copies, and changes no accounting.
 */
#include "tests/unit/gpu_skip.h"
#include "runtime/internal.h"

#include <string.h>

static void test_cuda_unusable_place_errors(void **state) {
    (void)state;
    int n = tu_gpu_count();
    assert_true(n >= 0);
    assert_int_equal(tu_gpu_count(), n); /* stable */
    if (n == 0) printf("test_cuda: %s: checking that CUDA places fail with clear errors\n", TU_NO_GPU_REASON);
    pe_place bad = pe_place_cuda(n); /* always past the visible devices */
    char name[32];
    snprintf(name, sizeof name, "cuda:%d", n);

    pe_clear_error();
    pe_executor *ex = pe_executor_new(bad);
    assert_null(ex);
    if (!strstr(pe_last_error(), name)) fail_msg("executor error does not name %s: '%s'", name, pe_last_error());
    pe_clear_error();
    assert_null(pe_executor_new(pe_place_cuda(-1)));
    assert_non_null(strstr(pe_last_error(), "cuda:-1"));

    pe_alloc_stats s0 = pe_alloc_get_stats(bad);
    pe_clear_error();
    assert_null(pe_place_alloc(bad, 256));
    if (!strstr(pe_last_error(), name)) fail_msg("alloc error does not name %s: '%s'", name, pe_last_error());
    pe_alloc_stats s1 = pe_alloc_get_stats(bad);
    assert_int_equal(s1.bytes_in_use, s0.bytes_in_use);
    assert_int_equal(s1.n_allocs, s0.n_allocs);

    pe_tensor *t = pe_tensor_new();
    assert_int_not_equal(pe_tensor_resize(t, PE_DTYPE_FP32, 1, (int64_t[]){4}, bad), PE_OK);
    assert_false(pe_tensor_has_data(t));
    pe_tensor *h = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){3}, (double[]){1, 2, 3});
    pe_clear_error();
    assert_int_not_equal(pe_tensor_copy(t, h, bad), PE_OK);
    assert_true(strlen(pe_last_error()) > 0);
    float buf[3] = {0};
    pe_clear_error();
    assert_int_not_equal(pe_memcpy_places(buf, pe_place_cpu(0), pe_tensor_data(h), bad, sizeof buf), PE_OK);
    assert_true(strlen(pe_last_error()) > 0);
#ifdef PE_WITH_CUDA
    pe_clear_error();
    assert_null(pe_cuda_stream(n));
    assert_non_null(strstr(pe_last_error(), name));
    assert_int_not_equal(pe_cuda_sync(n), PE_OK);
    assert_null(pe_cuda_malloc(n, 64));
    assert_non_null(strstr(pe_last_error(), name));
    pe_cuda_free(n, NULL); /* NULL is a no-op, like free() */
#endif
    pe_tensor_free(h);
    pe_tensor_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_unusable_place_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

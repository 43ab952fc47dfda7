/* tests/unit/test_runtime.c — tensors, buffers, allocator accounting, scopes,
 * status messages. */
#include "tests/unit/op_test_util.h"

#include <string.h>

static void test_tensor_resize_reuses_buffer(void **state) {
    (void)state;
    pe_tensor *t = pe_tensor_new();
    int64_t d1[2] = {4, 8};
    assert_int_equal(pe_tensor_resize(t, PE_DTYPE_FP32, 2, d1, pe_place_cpu(0)), PE_OK);
    assert_int_equal(pe_tensor_nbytes(t), 128);
    assert_int_equal((uintptr_t)pe_tensor_data(t) % 64, 0);
    void *p = pe_tensor_data(t);
    pe_alloc_stats before = pe_alloc_get_stats(pe_place_cpu(0));
    int64_t d2[1] = {16};
    assert_int_equal(pe_tensor_resize(t, PE_DTYPE_FP32, 1, d2, pe_place_cpu(0)), PE_OK);
    assert_ptr_equal(pe_tensor_data(t), p);
    pe_alloc_stats after = pe_alloc_get_stats(pe_place_cpu(0));
    assert_int_equal(after.n_allocs, before.n_allocs);
    pe_tensor_free(t);
}

static void test_tensor_share_and_detach(void **state) {
    (void)state;
    pe_tensor *a = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){3}, (double[]){1, 2, 3});
    pe_tensor *b = pe_tensor_new();
    pe_tensor_share(b, a);
    assert_ptr_equal(pe_tensor_data(a), pe_tensor_data(b));
    assert_int_equal(a->buf->refcount, 2);
    /* Resizing a shared tensor detaches it instead of changing a's data. */
    assert_int_equal(pe_tensor_resize(b, PE_DTYPE_FP32, 1, (int64_t[]){3}, pe_place_cpu(0)), PE_OK);
    assert_ptr_not_equal(pe_tensor_data(a), pe_tensor_data(b));
    assert_int_equal(a->buf->refcount, 1);
    pe_tensor *c = pe_tensor_new();
    assert_int_equal(pe_tensor_copy(c, a, pe_place_cpu(0)), PE_OK);
    tu_assert_close(c, (double[]){1, 2, 3}, 3, 0);
    pe_tensor_free(a);
    pe_tensor_free(b);
    pe_tensor_free(c);
}

static void test_alloc_accounting(void **state) {
    (void)state;
    pe_place p = pe_place_cpu(7);
    pe_alloc_reset_peak(p);
    pe_alloc_stats s0 = pe_alloc_get_stats(p);
    void *a = pe_place_alloc(p, 1000);
    void *b = pe_place_alloc(p, 24);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal((uintptr_t)a % 64, 0);
    pe_alloc_stats s1 = pe_alloc_get_stats(p);
    assert_int_equal(s1.bytes_in_use - s0.bytes_in_use, 1024);
    pe_place_free(p, a, 1000);
    pe_alloc_stats s2 = pe_alloc_get_stats(p);
    assert_int_equal(s2.bytes_in_use - s0.bytes_in_use, 24);
    assert_int_equal(s2.peak_bytes - s0.bytes_in_use, 1024);
    pe_place_free(p, b, 24);
}

/* The CPU memory budget: every CPU place's allocations together; a request
 * that would pass it fails naming the budget and what is in use, and what
 * is freed can be allocated again. */
static void test_memory_budget(void **state) {
    (void)state;
    int64_t base = pe_alloc_cpu_bytes();
    pe_alloc_set_budget(base + (1 << 20));
    assert_int_equal(pe_alloc_budget(), base + (1 << 20));
    void *a = pe_place_alloc(pe_place_cpu(0), 600 << 10);
    assert_non_null(a);
    assert_int_equal(pe_alloc_cpu_bytes(), base + (600 << 10));
    void *b = pe_place_alloc(pe_place_cpu(1), 600 << 10); /* another place, the same budget */
    assert_null(b);
    assert_non_null(strstr(pe_last_error(), "memory budget"));
    assert_non_null(strstr(pe_last_error(), "cpu:1"));
    assert_non_null(strstr(pe_last_error(), "PE_MAX_MEMORY"));
    assert_int_equal(pe_alloc_cpu_bytes(), base + (600 << 10)); /* the refused request holds nothing */
    pe_place_free(pe_place_cpu(0), a, 600 << 10);
    b = pe_place_alloc(pe_place_cpu(1), 600 << 10);
    assert_non_null(b);
    pe_place_free(pe_place_cpu(1), b, 600 << 10);
    assert_int_equal(pe_alloc_cpu_bytes(), base);
    pe_tensor *t = pe_tensor_new();
    int64_t dims[2] = {1024, 1024}; /* 4 MiB of fp32 */
    assert_int_equal(pe_tensor_resize(t, PE_DTYPE_FP32, 2, dims, pe_place_cpu(0)), PE_ERR_NOMEM);
    pe_tensor_free(t);
    pe_alloc_set_budget(0); /* back to PE_MAX_MEMORY / the default */
    assert_true(pe_alloc_budget() > (1 << 20));
}

static void test_bad_meta(void **state) {
    (void)state;
    pe_tensor *t = pe_tensor_new();
    assert_int_equal(pe_tensor_set_meta(t, PE_DTYPE_FP32, 9, (int64_t[9]){0}), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "rank 9"));
    assert_int_equal(pe_tensor_set_meta(t, PE_DTYPE_FP32, 1, (int64_t[]){-2}), PE_ERR_INVALID);
    assert_int_equal(pe_tensor_set_meta(t, PE_DTYPE_COUNT, 0, NULL), PE_ERR_INVALID);
    pe_tensor_free(t);
}

static void test_scope_parent_chain(void **state) {
    (void)state;
    pe_scope *g = pe_scope_new(NULL);
    pe_scope *l = pe_scope_new(g);
    pe_tensor *w = pe_scope_var(g, "w");
    assert_non_null(w);
    assert_ptr_equal(pe_scope_var(g, "w"), w);
    assert_ptr_equal(pe_scope_find_var(l, "w"), w);
    assert_null(pe_scope_find_local_var(l, "w"));
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "t%d", i);
        assert_non_null(pe_scope_var(l, name));
    }
    assert_int_equal(pe_scope_size(l), 1000);
    assert_non_null(pe_scope_find_var(l, "t999"));
    assert_true(pe_scope_erase_var(l, "t500"));
    assert_null(pe_scope_find_var(l, "t500"));
    assert_false(pe_scope_erase_var(l, "t500"));
    assert_int_equal(pe_scope_size(l), 999);
    assert_int_equal(pe_tensor_resize(pe_scope_var(l, "t1"), PE_DTYPE_FP64, 1, (int64_t[]){10}, pe_place_cpu(0)), PE_OK);
    assert_int_equal(pe_scope_bytes(l), 80);
    pe_scope_clear(l);
    assert_int_equal(pe_scope_bytes(l), 0);
    pe_scope_free(l);
    pe_scope_free(g);
}

static void test_status_messages(void **state) {
    (void)state;
    assert_int_equal(pe_error(PE_ERR_INVALID, "var '%s' is bad", "x"), PE_ERR_INVALID);
    assert_string_equal(pe_last_error(), "var 'x' is bad");
    pe_error_wrap(PE_ERR_INVALID, "op %s", "relu");
    assert_string_equal(pe_last_error(), "op relu: var 'x' is bad");
    assert_string_equal(pe_status_name(PE_ERR_FORMAT), "PE_ERR_FORMAT");
    pe_dtype dt;
    assert_true(pe_dtype_from_name("float32", &dt));
    assert_int_equal(dt, PE_DTYPE_FP32);
    assert_true(pe_dtype_from_name("int64", &dt));
    assert_int_equal(dt, PE_DTYPE_INT64);
    assert_false(pe_dtype_from_name("complex64", &dt));
    assert_int_equal(pe_dtype_size(PE_DTYPE_BF16), 2);
}

/* LoD: set (copied, validated), shared by share/copy, cleared, checked
 * against the rows. */
static void test_tensor_lod(void **state) {
    (void)state;
    pe_tensor *a = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){5, 2}, (double[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    assert_int_equal(pe_tensor_lod_levels(a), 0);
    assert_int_equal(pe_tensor_check_lod(a, "a"), PE_OK);
    int64_t top[] = {0, 1, 2}, bottom[] = {0, 2, 5};
    const int64_t *lv[] = {top, bottom};
    int64_t n[] = {3, 3};
    assert_int_equal(pe_tensor_set_lod(a, 2, lv, n), PE_OK);
    bottom[1] = 99; /* copied: the caller's array is not kept */
    int64_t k;
    const int64_t *o = pe_tensor_lod(a, 1, &k);
    assert_int_equal(k, 3);
    assert_int_equal(o[1], 2);
    assert_int_equal(o[2], 5);
    assert_int_equal(pe_tensor_check_lod(a, "a"), PE_OK);
    assert_null(pe_tensor_lod(a, 2, &k));
    assert_int_equal(k, 0);

    pe_tensor *b = pe_tensor_new(), *c = pe_tensor_new();
    pe_tensor_share(b, a);
    assert_ptr_equal(b->lod, a->lod);
    assert_int_equal(pe_tensor_copy(c, a, pe_place_cpu(0)), PE_OK);
    assert_true(pe_lod_equal(c->lod, a->lod));
    assert_int_equal(pe_tensor_lod_hash(c), pe_tensor_lod_hash(a));
    /* a plain tensor copied over c takes its (no) LoD */
    pe_tensor *plain = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2}, (double[]){1, 2});
    assert_int_equal(pe_tensor_copy(c, plain, pe_place_cpu(0)), PE_OK);
    assert_null(c->lod);
    assert_int_equal(pe_tensor_lod_hash(c), 0);
    /* b keeps the shared LoD after a drops its own */
    pe_tensor_clear_lod(a);
    assert_null(a->lod);
    assert_int_equal(pe_tensor_lod_levels(b), 2);

    /* invalid LoDs are refused, the tensor unchanged */
    int64_t bad_start[] = {1, 5}, bad_dec[] = {0, 3, 2, 5}, top2[] = {0, 3};
    assert_int_equal(pe_tensor_set_lod(a, 1, (const int64_t *[]){bad_start}, (int64_t[]){2}), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "starts at 1"));
    assert_int_equal(pe_tensor_set_lod(a, 1, (const int64_t *[]){bad_dec}, (int64_t[]){4}), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "decreases"));
    assert_int_equal(pe_tensor_set_lod(a, 2, (const int64_t *[]){top2, bottom}, (int64_t[]){2, 3}), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "sequences of the level below"));
    assert_null(a->lod);
    /* rows: the last level must end at dims[0] */
    int64_t short_lod[] = {0, 2, 4};
    assert_int_equal(pe_tensor_set_lod(a, 1, (const int64_t *[]){short_lod}, (int64_t[]){3}), PE_OK);
    assert_int_equal(pe_tensor_check_lod(a, "feed 'x'"), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), "feed 'x': its LoD's last level ends at 4, but the tensor has 5 rows"));
    assert_int_equal(pe_tensor_set_lod(a, 0, NULL, NULL), PE_OK);
    assert_null(a->lod);
    pe_tensor_free(a);
    pe_tensor_free(b);
    pe_tensor_free(c);
    pe_tensor_free(plain);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_resize_reuses_buffer),
        cmocka_unit_test(test_tensor_share_and_detach),
        cmocka_unit_test(test_alloc_accounting),
        cmocka_unit_test(test_memory_budget),
        cmocka_unit_test(test_bad_meta),
        cmocka_unit_test(test_scope_parent_chain),
        cmocka_unit_test(test_status_messages),
        cmocka_unit_test(test_tensor_lod),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

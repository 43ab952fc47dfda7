/* tests/unit/test_block_cache.c — the caching allocator's bookkeeping
 * (runtime/block_cache.c), on the CPU: the raw allocator is malloc behind a
 * counter, so every GPU build's allocator logic is checked where no GPU is.
 *
 * - size classes: 512 B steps up to 1 MiB, 1 MiB steps above;
 * - a freed block serves the next request of its class (no raw allocation),
 *   and a training-like loop of the same sizes allocates nothing raw after
 *   its first step; stats (held, in use, cached, hits) add up;
 * - large requests take a cached block at most 1/8 + 1 MiB larger, never a
 *   much larger one; small ones only their own class;
 * - a failing raw allocator makes the cache release its blocks and retry;
 * - release() returns every cached byte; destroy() every block;
 * - a foreign or double free is refused, not corrupting the cache;
 * - many threads allocating and freeing at once keep the counts exact.
 */
#include "runtime/block_cache.h"
#include "runtime/internal.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

typedef struct raw {
    int allocs, frees;
    size_t live;
    int fail_above;   /* > 0: raw allocations fail while live + bytes exceeds this */
} raw;

static void *raw_alloc(void *ctx, size_t bytes) {
    raw *r = ctx;
    if (r->fail_above > 0 && r->live + bytes > (size_t)r->fail_above) {
        pe_error(PE_ERR_NOMEM, "test: raw allocator full");
        return NULL;
    }
    void *p = malloc(bytes);
    if (p) {
        __atomic_add_fetch(&r->allocs, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&r->live, bytes, __ATOMIC_RELAXED);
    }
    return p;
}

static void raw_free(void *ctx, void *p, size_t bytes) {
    raw *r = ctx;
    __atomic_add_fetch(&r->frees, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&r->live, bytes, __ATOMIC_RELAXED);
    free(p);
}

static void test_round(void **state) {
    (void)state;
    assert_int_equal(pe_block_cache_round(0), 512);
    assert_int_equal(pe_block_cache_round(1), 512);
    assert_int_equal(pe_block_cache_round(512), 512);
    assert_int_equal(pe_block_cache_round(513), 1024);
    assert_int_equal(pe_block_cache_round(1 << 20), 1 << 20);
    assert_int_equal(pe_block_cache_round((1 << 20) + 1), 2 << 20);
    assert_int_equal(pe_block_cache_round((size_t)-1), 0); /* too large */
}

static void test_reuse_and_stats(void **state) {
    (void)state;
    raw r = {0};
    pe_block_cache *c = pe_block_cache_new(raw_alloc, raw_free, &r, "test:0");
    assert_non_null(c);
    void *a = pe_block_cache_alloc(c, 1000);
    void *b = pe_block_cache_alloc(c, 3 << 20);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(r.allocs, 2);
    pe_block_cache_stats s = pe_block_cache_get_stats(c);
    assert_int_equal(s.in_use, 1024 + (3 << 20));
    assert_int_equal(s.held, s.in_use);
    assert_int_equal(s.cached, 0);
    pe_block_cache_free(c, a);
    pe_block_cache_free(c, b);
    s = pe_block_cache_get_stats(c);
    assert_int_equal(s.in_use, 0);
    assert_int_equal(s.cached, 1024 + (3 << 20));
    /* the same classes come back without a raw allocation */
    void *a2 = pe_block_cache_alloc(c, 600);
    void *b2 = pe_block_cache_alloc(c, (3 << 20) - 5);
    assert_ptr_equal(a2, a);
    assert_ptr_equal(b2, b);
    assert_int_equal(r.allocs, 2);
    s = pe_block_cache_get_stats(c);
    assert_int_equal(s.hits, 2);
    assert_int_equal(s.raw_allocs, 2);
    /* a training-like loop: the same sizes each step, nothing raw after step 1 */
    pe_block_cache_free(c, a2);
    pe_block_cache_free(c, b2);
    size_t sizes[] = {4096, 100, 7 << 20, 100, 33333, 1 << 20};
    void *p[6];
    int after_first = 0;
    for (int step = 0; step < 5; step++) {
        for (int i = 0; i < 6; i++) assert_non_null(p[i] = pe_block_cache_alloc(c, sizes[i]));
        for (int i = 5; i >= 0; i--) pe_block_cache_free(c, p[i]);
        if (step == 0) after_first = r.allocs;
    }
    assert_int_equal(r.allocs, after_first);
    s = pe_block_cache_get_stats(c);
    assert_int_equal(s.held, s.cached);
    assert_int_equal(s.held, r.live);
    assert_true(s.peak_held >= s.held);
    /* release gives every cached byte back */
    assert_int_equal(pe_block_cache_release(c), s.cached);
    assert_int_equal(r.live, 0);
    assert_int_equal(r.frees, r.allocs);
    pe_block_cache_destroy(c);
}

static void test_fit_rules(void **state) {
    (void)state;
    raw r = {0};
    pe_block_cache *c = pe_block_cache_new(raw_alloc, raw_free, &r, "test:0");
    void *big = pe_block_cache_alloc(c, 64 << 20);
    void *small = pe_block_cache_alloc(c, 2048);
    pe_block_cache_free(c, big);
    pe_block_cache_free(c, small);
    /* a 1 MiB request must not take the 64 MiB block, a 1 KiB one not the 2 KiB block */
    void *x = pe_block_cache_alloc(c, 1 << 20);
    void *y = pe_block_cache_alloc(c, 1024);
    assert_ptr_not_equal(x, big);
    assert_ptr_not_equal(y, small);
    assert_int_equal(r.allocs, 4);
    /* 60 MiB may take the 64 MiB block (within 1/8 + 1 MiB) */
    void *z = pe_block_cache_alloc(c, 60 << 20);
    assert_ptr_equal(z, big);
    pe_block_cache_free(c, x);
    pe_block_cache_free(c, y);
    pe_block_cache_free(c, z);
    pe_block_cache_destroy(c);
    assert_int_equal(r.live, 0);
}

static void test_retry_after_release(void **state) {
    (void)state;
    raw r = {.fail_above = 10 << 20};
    pe_block_cache *c = pe_block_cache_new(raw_alloc, raw_free, &r, "test:0");
    void *a = pe_block_cache_alloc(c, 8 << 20);
    assert_non_null(a);
    pe_block_cache_free(c, a); /* cached: 8 MiB of the 10 the "device" has */
    void *b = pe_block_cache_alloc(c, 4 << 20); /* does not fit beside it: released, retried */
    assert_non_null(b);
    pe_block_cache_stats s = pe_block_cache_get_stats(c);
    assert_int_equal(s.cached, 0);
    assert_int_equal(s.held, 4 << 20);
    void *d = pe_block_cache_alloc(c, 9 << 20); /* cannot fit at all: NULL with the raw message */
    assert_null(d);
    assert_non_null(strstr(pe_last_error(), "raw allocator full"));
    pe_block_cache_free(c, b);
    pe_block_cache_destroy(c);
    assert_int_equal(r.live, 0);
}

static void test_foreign_and_double_free(void **state) {
    (void)state;
    raw r = {0};
    pe_block_cache *c = pe_block_cache_new(raw_alloc, raw_free, &r, "test:0");
    int local;
    void *a = pe_block_cache_alloc(c, 100);
    pe_block_cache_free(c, &local); /* logged, ignored */
    pe_block_cache_free(c, a);
    pe_block_cache_free(c, a); /* double free: logged, ignored */
    pe_block_cache_free(c, NULL);
    pe_block_cache_stats s = pe_block_cache_get_stats(c);
    assert_int_equal(s.cached, 512);
    assert_int_equal(s.in_use, 0);
    /* the block is handed out once only */
    void *b = pe_block_cache_alloc(c, 100), *d = pe_block_cache_alloc(c, 100);
    assert_ptr_equal(b, a);
    assert_ptr_not_equal(d, a);
    pe_block_cache_free(c, b);
    pe_block_cache_free(c, d);
    pe_block_cache_destroy(c);
    assert_int_equal(r.live, 0);
}

/* Many live blocks: the pointer table grows and keeps every entry. */
static void test_many_live_blocks(void **state) {
    (void)state;
    raw r = {0};
    pe_block_cache *c = pe_block_cache_new(raw_alloc, raw_free, &r, "test:0");
    enum { N = 5000 };
    void **p = calloc(N, sizeof *p);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) assert_non_null(p[i] = pe_block_cache_alloc(c, (size_t)(i % 37 + 1) * 300));
        for (int i = 0; i < N; i += 2) pe_block_cache_free(c, p[i]);
        for (int i = 1; i < N; i += 2) pe_block_cache_free(c, p[i]);
    }
    pe_block_cache_stats s = pe_block_cache_get_stats(c);
    assert_int_equal(s.in_use, 0);
    assert_int_equal(s.raw_allocs, N);
    free(p);
    pe_block_cache_destroy(c);
    assert_int_equal(r.live, 0);
}

static pe_block_cache *g_c;

static void *churn(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *held[16] = {0};
    for (int i = 0; i < 20000; i++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)(seed >> 16) % 16;
        if (held[k]) {
            pe_block_cache_free(g_c, held[k]);
            held[k] = NULL;
        } else {
            held[k] = pe_block_cache_alloc(g_c, (size_t)((seed >> 8) % 5000) + 1);
            if (held[k]) ((char *)held[k])[0] = (char)k;
        }
    }
    for (int k = 0; k < 16; k++) pe_block_cache_free(g_c, held[k]);
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    raw r = {0};
    g_c = pe_block_cache_new(raw_alloc, raw_free, &r, "test:0");
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    pe_block_cache_stats s = pe_block_cache_get_stats(g_c);
    assert_int_equal(s.in_use, 0);
    assert_int_equal(s.held, s.cached);
    assert_int_equal(s.held, r.live);
    pe_block_cache_destroy(g_c);
    assert_int_equal(r.live, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round),
        cmocka_unit_test(test_reuse_and_stats),
        cmocka_unit_test(test_fit_rules),
        cmocka_unit_test(test_retry_after_release),
        cmocka_unit_test(test_foreign_and_double_free),
        cmocka_unit_test(test_many_live_blocks),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

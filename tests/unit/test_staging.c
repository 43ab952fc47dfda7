/* tests/unit/test_staging.c — the pinned staging ring (runtime/staging.c) on
 * the CPU, over a fake device stream that performs its copies LATE: a copy
 * is only queued by copy_async and happens when a later wait() reaches the
 * event recorded after it (as a GPU's DMA may). So a ring that let the host
 * overwrite a chunk whose copy had not run, or read a chunk before its copy
 * ran, produces wrong bytes here and the test fails.
 *
 * - to_device returns with the copy still queued (asynchronous), the source
 *   may be overwritten at once, and a later read-back sees the fed bytes;
 * - copies larger than the ring (many chunks, odd sizes) arrive intact in
 *   both directions; a pipelined to_host keeps at most `slots` in flight;
 * - pinned chunks are allocated once and reused; stats add up;
 * - a failing pinned allocation or copy is an error naming the ring;
 * - destroy drains queued copies first; drain makes every copy complete;
 * - threads feeding the same ring interleave without losing bytes.
 */
#include "runtime/staging.h"
#include "runtime/internal.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

/* The fake stream: a FIFO of copies and event records. */
typedef struct qop {
    void *dst;
    const void *src;
    size_t n;
    int *ev; /* non-NULL: an event record */
} qop;

typedef struct fake {
    pthread_mutex_t mu;
    qop q[4096];
    int head, tail;
    int allocs, frees, events, max_pending_copies;
    int fail_alloc, fail_copy;
} fake;

static int pending_copies(fake *f) {
    int c = 0;
    for (int i = f->head; i < f->tail; i++) c += f->q[i].ev == NULL;
    return c;
}

static void *f_alloc(void *ctx, size_t bytes) {
    fake *f = ctx;
    if (f->fail_alloc) {
        pe_error(PE_ERR_NOMEM, "test: no pinned memory");
        return NULL;
    }
    f->allocs++;
    return malloc(bytes);
}
static void f_free(void *ctx, void *p) {
    ((fake *)ctx)->frees++;
    free(p);
}
static void *f_event_new(void *ctx) {
    ((fake *)ctx)->events++;
    return calloc(1, sizeof(int));
}
static void f_event_free(void *ctx, void *ev) {
    ((fake *)ctx)->events--;
    free(ev);
}
static pe_status f_copy(void *ctx, void *dst, const void *src, size_t n, int to_device) {
    fake *f = ctx;
    (void)to_device;
    if (f->fail_copy) return pe_error(PE_ERR_DEVICE, "test: copy failed");
    pthread_mutex_lock(&f->mu);
    f->q[f->tail++] = (qop){dst, src, n, NULL};
    int p = pending_copies(f);
    if (p > f->max_pending_copies) f->max_pending_copies = p;
    pthread_mutex_unlock(&f->mu);
    return PE_OK;
}
static pe_status f_record(void *ctx, void *ev) {
    fake *f = ctx;
    pthread_mutex_lock(&f->mu);
    *(int *)ev = 0;
    f->q[f->tail++] = (qop){NULL, NULL, 0, ev};
    pthread_mutex_unlock(&f->mu);
    return PE_OK;
}
/* Runs the queue up to the newest record of ev. */
static pe_status f_wait(void *ctx, void *ev) {
    fake *f = ctx;
    pthread_mutex_lock(&f->mu);
    int last = -1;
    for (int i = f->head; i < f->tail; i++)
        if (f->q[i].ev == ev) last = i;
    for (int i = f->head; i <= last; i++) {
        if (f->q[i].ev) *f->q[i].ev = 1;
        else memcpy(f->q[i].dst, f->q[i].src, f->q[i].n);
    }
    if (last >= 0) f->head = last + 1;
    if (f->head == f->tail) f->head = f->tail = 0;
    pthread_mutex_unlock(&f->mu);
    return PE_OK;
}

static const pe_staging_ops OPS = {f_alloc, f_free, f_event_new, f_event_free, f_copy, f_record, f_wait};

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
}

static void test_async_to_device(void **state) {
    (void)state;
    fake f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    pe_staging *s = pe_staging_new(&OPS, &f, 64, 2, "test:0");
    assert_non_null(s);
    unsigned char src[40], dev[40] = {0}, back[40] = {0}, want[40];
    fill(src, sizeof src, 1);
    memcpy(want, src, sizeof src);
    assert_int_equal(pe_staging_to_device(s, dev, src, sizeof src), PE_OK);
    memset(src, 0xEE, sizeof src);         /* the caller may reuse its buffer at once */
    assert_int_equal(dev[0], 0);           /* the copy is still queued */
    assert_int_equal(pe_staging_to_host(s, back, dev, sizeof back), PE_OK);
    assert_memory_equal(back, want, sizeof want);
    assert_memory_equal(dev, want, sizeof want);
    pe_staging_destroy(s);
    assert_int_equal(f.allocs, f.frees);
    assert_int_equal(f.events, 0);
}

static void test_many_chunks(void **state) {
    (void)state;
    fake f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    pe_staging *s = pe_staging_new(&OPS, &f, 100, 3, "test:0");
    size_t sizes[] = {1, 99, 100, 101, 299, 300, 301, 1234, 7};
    for (unsigned k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        unsigned char *src = malloc(n), *dev = calloc(1, n), *back = calloc(1, n), *want = malloc(n);
        fill(src, n, k + 3);
        memcpy(want, src, n);
        assert_int_equal(pe_staging_to_device(s, dev, src, n), PE_OK);
        fill(src, n, k + 100);
        assert_int_equal(pe_staging_to_host(s, back, dev, n), PE_OK);
        assert_memory_equal(back, want, n);
        free(src), free(dev), free(back), free(want);
    }
    assert_true(f.max_pending_copies <= 3); /* never more copies in flight than slots */
    pe_staging_stats st = pe_staging_get_stats(s);
    assert_int_equal(st.pinned, 300);
    assert_int_equal(f.allocs, 3); /* chunks made once, reused */
    size_t total = 0;
    for (unsigned k = 0; k < sizeof sizes / sizeof *sizes; k++) total += sizes[k];
    assert_int_equal(st.to_device_bytes, total);
    assert_int_equal(st.to_host_bytes, total);
    assert_true(st.waits > 0);
    pe_staging_destroy(s);
    assert_int_equal(f.frees, 3);
}

static void test_back_to_back_feeds(void **state) {
    (void)state;
    /* Many feeds to different device buffers with no read-back between:
     * every chunk must be copied before the host reuses it. */
    fake f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    pe_staging *s = pe_staging_new(&OPS, &f, 16, 2, "test:0");
    unsigned char dev[10][50], src[50], want[10][50];
    for (int k = 0; k < 10; k++) {
        fill(src, 50, (unsigned)k + 7);
        memcpy(want[k], src, 50);
        assert_int_equal(pe_staging_to_device(s, dev[k], src, 50), PE_OK);
    }
    assert_int_equal(pe_staging_drain(s), PE_OK);
    for (int k = 0; k < 10; k++) assert_memory_equal(dev[k], want[k], 50);
    pe_staging_destroy(s);
}

static void test_errors(void **state) {
    (void)state;
    fake f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    assert_null(pe_staging_new(&OPS, &f, 0, 2, "test:0"));
    assert_non_null(strstr(pe_last_error(), "test:0"));
    assert_null(pe_staging_new(&OPS, &f, 8, 65, "test:0"));
    pe_staging *s = pe_staging_new(&OPS, &f, 8, 2, "cuda:5");
    unsigned char buf[20] = {0}, dev[20];
    f.fail_alloc = 1;
    assert_int_equal(pe_staging_to_device(s, dev, buf, sizeof buf), PE_ERR_NOMEM);
    assert_non_null(strstr(pe_last_error(), "cuda:5"));
    assert_non_null(strstr(pe_last_error(), "pinned"));
    f.fail_alloc = 0;
    f.fail_copy = 1;
    assert_int_equal(pe_staging_to_host(s, buf, dev, sizeof buf), PE_ERR_DEVICE);
    assert_non_null(strstr(pe_last_error(), "device-to-host"));
    f.fail_copy = 0;
    assert_int_equal(pe_staging_to_device(s, dev, buf, sizeof buf), PE_OK);
    pe_staging_destroy(s); /* drains the queued copy */
    assert_memory_equal(dev, buf, sizeof buf);
    assert_int_equal(f.allocs, f.frees);
}

static pe_staging *g_s;
static fake g_f = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *feeder(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    unsigned char src[333], dev[333], back[333], want[333];
    for (int it = 0; it < 50; it++) {
        fill(src, sizeof src, seed * 1000 + (unsigned)it);
        memcpy(want, src, sizeof src);
        if (pe_staging_to_device(g_s, dev, src, sizeof src) != PE_OK) return (void *)1;
        memset(src, 0, sizeof src);
        if (pe_staging_to_host(g_s, back, dev, sizeof back) != PE_OK) return (void *)1;
        if (memcmp(back, want, sizeof want)) return (void *)1;
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    g_s = pe_staging_new(&OPS, &g_f, 64, 4, "test:0");
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, feeder, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        assert_null(r);
    }
    pe_staging_destroy(g_s);
    assert_int_equal(g_f.allocs, g_f.frees);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_async_to_device),
        cmocka_unit_test(test_many_chunks),
        cmocka_unit_test(test_back_to_back_feeds),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

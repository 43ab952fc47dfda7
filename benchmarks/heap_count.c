/* benchmarks/heap_count.c — the whole process's heap, counted: live bytes,
 * their peak and the allocating calls, for bench_memory and
 * tests/unit/test_heap.c (linked in) and for PyTorch's side
 * (LD_PRELOAD=build/lib/libpe_heap_count.so, read with ctypes).
 *
 *     int64_t live = pe_heap_live(), peak;
 *     pe_heap_reset_peak();                 // peak := live
 *     ... run ...
 *     peak = pe_heap_peak();
 *
 * How: malloc, calloc, realloc, free and the aligned allocators are defined
 * here (with pvalloc, valloc and reallocarray, so that no glibc entry point
 * allocates behind the counter) and forward to glibc's own (__libc_malloc,
 * ...); each allocation adds malloc_usable_size of its block to a live
 * counter and raises the peak, each free subtracts it. Every heap allocation of the process is seen —
 * the framework's tensors, oneDNN's and OpenBLAS's buffers, the C++ and
 * OpenMP runtimes — whoever makes it; memory mapped directly with mmap (not
 * through malloc) is not. Usable sizes include malloc's rounding (8-16 bytes
 * per block), not its headers.
 *
 * Why: a framework's own counters see only what goes through its allocator;
 * comparing two frameworks by them compares what each chooses to count.
 */
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

int64_t pe_heap_live(void);
int64_t pe_heap_peak(void);
int64_t pe_heap_calls(void);
int64_t pe_heap_big_calls(void);
void pe_heap_reset_peak(void);

#define PE_HEAP_BIG 4096 /* pe_heap_big_calls counts requests of at least this */

static _Atomic int64_t g_live, g_peak, g_calls, g_big;

static void *counted(void *p, size_t n) {
    if (!p) return p;
    if (n >= PE_HEAP_BIG) atomic_fetch_add_explicit(&g_big, 1, memory_order_relaxed);
    int64_t now = atomic_fetch_add_explicit(&g_live, (int64_t)malloc_usable_size(p), memory_order_relaxed) +
                  (int64_t)malloc_usable_size(p);
    atomic_fetch_add_explicit(&g_calls, 1, memory_order_relaxed);
    int64_t pk = atomic_load_explicit(&g_peak, memory_order_relaxed);
    while (now > pk && !atomic_compare_exchange_weak_explicit(&g_peak, &pk, now, memory_order_relaxed,
                                                              memory_order_relaxed)) {}
    return p;
}

void *malloc(size_t n) { return counted(__libc_malloc(n), n); }
void *calloc(size_t k, size_t n) { return counted(__libc_calloc(k, n), k * n); }
void free(void *p) {
    if (p) atomic_fetch_sub_explicit(&g_live, (int64_t)malloc_usable_size(p), memory_order_relaxed);
    __libc_free(p);
}
void *realloc(void *p, size_t n) {
    if (!p) return malloc(n);
    if (!n) {
        free(p);
        return NULL;
    }
    int64_t old = (int64_t)malloc_usable_size(p);
    void *q = __libc_realloc(p, n);
    if (q) atomic_fetch_sub_explicit(&g_live, old, memory_order_relaxed);
    return q ? counted(q, n) : q;
}
void *memalign(size_t a, size_t n) { return counted(__libc_memalign(a, n), n); }
void *aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    void *p = memalign(a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
void *valloc(size_t n) { return memalign(4096, n); }
void *pvalloc(size_t n) { return memalign(4096, (n + 4095) / 4096 * 4096); }
void *reallocarray(void *p, size_t k, size_t n) {
    if (n && k > SIZE_MAX / n) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, k * n);
}

int64_t pe_heap_live(void) { return atomic_load(&g_live); }
int64_t pe_heap_peak(void) { return atomic_load(&g_peak); }
int64_t pe_heap_calls(void) { return atomic_load(&g_calls); }
int64_t pe_heap_big_calls(void) { return atomic_load(&g_big); }
void pe_heap_reset_peak(void) { atomic_store(&g_peak, atomic_load(&g_live)); }

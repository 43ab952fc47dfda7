/* benchmarks/bench_util.h — what every benchmark program needs: a monotonic
 * clock, the median of a sample, and the one-line failure report.
 *
 *     double t0 = bench_now();  ...  t[i] = bench_now() - t0;
 *     double m = bench_median(t, n);           // sorts t
 *     if (pe_run(...) != PE_OK) return bench_die("pe_run");
 */
#ifndef PE_BENCH_UTIL_H
#define PE_BENCH_UTIL_H

#include "pe/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* v[n / 2] after sorting v in place. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    return v[n / 2];
}

/* "<program>: <what>: <PE's last error>" on stderr; returns 1 (the exit code). */
static inline int bench_die(const char *what) {
    fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, pe_last_error());
    return 1;
}

#endif

/* runtime/env.c — two small services the runtime's long waits share: a
 * monotonic clock in seconds and a number read from the environment (the
 * MPI backend's PE_MPI_* and the parameter server's PE_PS_* knobs). */
#include "runtime/internal.h"

#include <stdlib.h>
#include <time.h>

double pe_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double pe_env_number(const char *name, double dflt, double lo, double hi) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    double v = strtod(s, &end);
    return *end || !(v >= lo && v <= hi) ? dflt : v;
}

/* runtime/alloc.c — place allocators with byte accounting, and whole-file
 * reads and atomic writes.
 *
 * CPU memory is 64-byte aligned (cache line / AVX-512) and counted per place:
 * bytes in use, peak, and the number of system allocations, which tests use
 * to show that steady-state runs do not allocate. All CPU places together
 * stay within a memory budget (pe_alloc_budget: PE_MAX_MEMORY, default 80%
 * of the machine's or the cgroup's memory): a request that would pass it
 * fails before any memory is touched, so a program with absurd sizes is an
 * error, not a machine driven into swap or the OOM killer. CUDA memory goes through
 * runtime/cuda/ when PE is built with CUDA.
 *
 * Every file PE writes (.npy, safetensors, programs, DOT) goes through
 * pe_write_file_atomic: a fresh temporary in the target's directory that no
 * planted name can redirect, renamed over the target once it is complete
 * and on disk (the rules are at its definition below).
 */
#include "runtime/internal.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>

typedef struct {
    _Atomic int64_t in_use, peak, n_allocs, n_frees;
} place_stats;

static place_stats g_stats[PE_PLACE_KIND_COUNT][PE_MAX_PLACES];

static place_stats *stats_of(pe_place p) {
    int id = p.id < 0 ? 0 : (p.id >= PE_MAX_PLACES ? PE_MAX_PLACES - 1 : p.id);
    return &g_stats[p.kind == PE_PLACE_CUDA ? PE_PLACE_CUDA : PE_PLACE_CPU][id];
}

static void account(pe_place p, int64_t delta) {
    place_stats *s = stats_of(p);
    int64_t now = atomic_fetch_add(&s->in_use, delta) + delta;
    if (delta > 0) {
        atomic_fetch_add(&s->n_allocs, 1);
        int64_t pk = atomic_load(&s->peak);
        while (now > pk && !atomic_compare_exchange_weak(&s->peak, &pk, now)) {}
    } else {
        atomic_fetch_add(&s->n_frees, 1);
    }
}

/* ---- the CPU memory budget ---------------------------------------------- */

static _Atomic int64_t g_cpu_total; /* bytes held by every CPU place */
static _Atomic int64_t g_budget;    /* 0: not decided yet */
static _Atomic int64_t g_budget_set; /* pe_alloc_set_budget's value, 0 = none */

static int64_t phys_bytes(void) {
    return (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGESIZE);
}

/* The cgroup's memory limit (v2 memory.max, v1 limit_in_bytes), 0 = none. */
static int64_t cgroup_limit(void) {
    static const char *const files[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        FILE *f = fopen(files[i], "r");
        if (!f) continue;
        char buf[64] = {0};
        bool ok = fgets(buf, sizeof buf, f) != NULL;
        fclose(f);
        char *end;
        long long v = ok ? strtoll(buf, &end, 10) : 0;
        if (ok && end != buf && v > 0) return (int64_t)v;
    }
    return 0;
}

/* "123", "64K", "512M", "8G", "1T" (powers of 1024) or "50%" of the
 * machine's memory; -1 when s is not one of those. */
static int64_t parse_size(const char *s, int64_t phys) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0)) return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    case '%': mul = (double)phys / 100.0; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    double b = v * mul;
    return b >= 9.2e18 ? INT64_MAX : (int64_t)b;
}

int64_t pe_alloc_budget(void) {
    int64_t b = atomic_load(&g_budget_set);
    if (b > 0) return b;
    b = atomic_load(&g_budget);
    if (b > 0) return b;
    int64_t phys = phys_bytes(), cg = cgroup_limit(), mem = cg > 0 && cg < phys ? cg : phys;
    b = mem / 10 * 8;
    const char *env = getenv("PE_MAX_MEMORY");
    if (env && *env) {
        int64_t v = parse_size(env, phys);
        if (v > 0)
            b = v;
        else
            pe_log(PE_LOG_WARN, "PE_MAX_MEMORY=%s is not a size (bytes, or with K, M, G, T, or a %% of the "
                   "machine's memory): using the default, %lld bytes (80%% of %s)", env, (long long)b,
                   mem == phys ? "the machine's memory" : "the cgroup's memory limit");
    }
    int64_t zero = 0;
    atomic_compare_exchange_strong(&g_budget, &zero, b);
    return atomic_load(&g_budget);
}

void pe_alloc_set_budget(int64_t bytes) { atomic_store(&g_budget_set, bytes > 0 ? bytes : 0); }

int64_t pe_alloc_cpu_bytes(void) { return atomic_load(&g_cpu_total); }

void *pe_place_alloc(pe_place place, size_t bytes) {
    char pb[32];
    size_t n = bytes ? bytes : 1;
    void *p = NULL;
    if (place.kind == PE_PLACE_CPU) {
        /* A request beyond the budget (a hostile program's shape, a batch
         * too large for the machine) is refused here, before the C
         * allocator (or a sanitizer's) sees it. */
        int64_t budget = pe_alloc_budget();
        int64_t want = bytes > (size_t)INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)bytes;
        int64_t now = atomic_fetch_add(&g_cpu_total, want) + want;
        if (now > budget || bytes > SIZE_MAX - 64) {
            atomic_fetch_sub(&g_cpu_total, want);
            pe_error(PE_ERR_NOMEM, "cannot allocate %zu bytes on %s: PE's memory budget is %lld bytes and %lld are "
                     "in use (PE_MAX_MEMORY sets the budget; default 80%% of the machine's memory)", bytes,
                     pe_place_str(place, pb, sizeof pb), (long long)budget, (long long)(now - want));
            return NULL;
        }
        n = (n + 63) & ~(size_t)63;
        p = aligned_alloc(64, n);
        if (!p) {
            atomic_fetch_sub(&g_cpu_total, want);
            pe_error(PE_ERR_NOMEM, "out of memory allocating %zu bytes on %s", bytes,
                     pe_place_str(place, pb, sizeof pb));
            return NULL;
        }
    } else {
#ifdef PE_WITH_CUDA
        p = pe_cuda_malloc(place.id, n);
        if (!p) return NULL;
#else
        pe_error(PE_ERR_UNSUPPORTED, "cannot allocate on %s: PE was built without CUDA",
                 pe_place_str(place, pb, sizeof pb));
        return NULL;
#endif
    }
    account(place, (int64_t)bytes);
    return p;
}

void pe_place_free(pe_place place, void *ptr, size_t bytes) {
    if (!ptr) return;
    if (place.kind == PE_PLACE_CPU) {
        free(ptr);
        atomic_fetch_sub(&g_cpu_total, bytes > (size_t)INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)bytes);
    } else {
#ifdef PE_WITH_CUDA
        pe_cuda_free(place.id, ptr);
#endif
    }
    account(place, -(int64_t)bytes);
}

pe_alloc_stats pe_alloc_get_stats(pe_place place) {
    place_stats *s = stats_of(place);
    pe_alloc_stats r = {atomic_load(&s->in_use), atomic_load(&s->peak),
                        atomic_load(&s->n_allocs), atomic_load(&s->n_frees)};
    return r;
}

void pe_alloc_reset_peak(pe_place place) {
    place_stats *s = stats_of(place);
    atomic_store(&s->peak, atomic_load(&s->in_use));
}

pe_status pe_memcpy_places(void *dst, pe_place dst_place, const void *src, pe_place src_place, size_t bytes) {
    if (!bytes) return PE_OK;
    if (dst_place.kind == PE_PLACE_CPU && src_place.kind == PE_PLACE_CPU) {
        memcpy(dst, src, bytes);
        return PE_OK;
    }
#ifdef PE_WITH_CUDA
    return pe_cuda_memcpy(dst, dst_place, src, src_place, bytes);
#else
    return pe_error(PE_ERR_UNSUPPORTED, "cannot copy to/from a CUDA place: PE was built without CUDA");
#endif
}

/* ---- files ------------------------------------------------------------ */

pe_status pe_read_file(const char *path, void **data, size_t *size) {
    *data = NULL;
    *size = 0;
    /* O_NONBLOCK: opening a FIFO without a writer would wait forever; it is
     * refused below like any other file that is not regular */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return pe_error(PE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return pe_error(PE_ERR_IO, "'%s' is not a regular file", path);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return pe_error(PE_ERR_IO, "cannot open '%s': %s", path, strerror(e));
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return pe_error(PE_ERR_NOMEM, "out of memory reading '%s' (%zu bytes)", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int err = ferror(f);
    fclose(f);
    if (got != n || err) {
        free(buf);
        return pe_error(PE_ERR_IO, "short read on '%s' (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = '\0';
    *data = buf;
    *size = n;
    return PE_OK;
}

/* ---- atomic file writes ------------------------------------------------
 *
 * pe_write_file_atomic(path) never writes through a name someone else could
 * have prepared, and never leaves path half-written:
 *
 * - The directory of path is opened once; every later step is relative to
 *   it (openat, fchmod, renameat, unlinkat, fsync of the directory).
 * - The data goes to a new temporary "<base>.tmp.<pid>.<6 letters or
 *   digits>" created with O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600: a name
 *   that exists — a planted symlink included — is never opened (another
 *   random name is tried, TMP_ATTEMPTS in all).
 * - Mode: an existing regular file at path keeps its permission bits; a new
 *   file gets 0666 & ~umask, as open(2) or fopen would create it (umask from
 *   /proc/self/status: umask(2) cannot be read without setting it, which
 *   would race with other threads; 022 when /proc is unavailable).
 * - write, fchmod, fsync, close, renameat over path (a symlink at path is
 *   replaced, never followed), fsync of the directory.
 * - A killed save leaves its temporary behind. Every save first removes the
 *   temporaries of the same target whose process is gone: regular files of
 *   this user named exactly "<base>.tmp.<pid>.<6 letters or digits>" (or
 *   "<base>.tmp.<pid>", the name older versions used) where pid is not this
 *   process and kill(pid, 0) fails with ESRCH. A live process's temporary
 *   (another user's process: EPERM) is never touched. Pids are those of
 *   this machine's pid namespace: do not save one path from two machines.
 */
#define TMP_RAND 6
#define TMP_ATTEMPTS 100

void (*pe_tmp_suffix_hook)(int attempt, char suffix[TMP_RAND + 1]);

static const char k_tmp_alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

static void tmp_suffix(int attempt, char out[TMP_RAND + 1]) {
    if (pe_tmp_suffix_hook) {
        pe_tmp_suffix_hook(attempt, out);
        out[TMP_RAND] = '\0';
        return;
    }
    static _Atomic uint64_t counter;
    unsigned char r[TMP_RAND];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15u ^ atomic_fetch_add(&counter, 1) ^
                     (uint64_t)getpid() << 32;
        for (int i = 0; i < TMP_RAND; i++, x >>= 8) r[i] = (unsigned char)x;
    }
    for (int i = 0; i < TMP_RAND; i++) out[i] = k_tmp_alnum[r[i] % (sizeof k_tmp_alnum - 1)];
    out[TMP_RAND] = '\0';
}

static mode_t process_umask(void) {
    unsigned m = 022;
    FILE *f = fopen("/proc/self/status", "re");
    if (!f) return (mode_t)m;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Umask: %o", &m) == 1) break;
    fclose(f);
    return (mode_t)(m & 0777);
}

/* The pid of a temporary of `base` ("<base>.tmp.<pid>.<TMP_RAND alnum>" or
 * "<base>.tmp.<pid>"), or -1 when name is anything else. */
static long tmp_owner(const char *name, const char *base) {
    size_t blen = strlen(base);
    if (strncmp(name, base, blen) || strncmp(name + blen, ".tmp.", 5)) return -1;
    const char *p = name + blen + 5;
    if (*p < '1' || *p > '9') return -1;
    long pid = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        if ((pid = pid * 10 + (*p - '0')) > INT32_MAX) return -1;
    if (!*p) return pid;
    if (*p++ != '.') return -1;
    for (int i = 0; i < TMP_RAND; i++, p++)
        if (!*p || !strchr(k_tmp_alnum, *p)) return -1;
    return *p ? -1 : pid;
}

/* Best effort: a temporary that cannot be removed does not stop the save. */
static void remove_stale_temporaries(int dfd, const char *base) {
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    pid_t self = getpid();
    uid_t me = geteuid();
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = tmp_owner(e->d_name, base);
        struct stat sb;
        if (pid <= 0 || pid == (long)self) continue;
        if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != me)
            continue;
        if (kill((pid_t)pid, 0) == -1 && errno == ESRCH) unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

static pe_status write_all(int fd, const void *data, size_t size, const char *tmp) {
    const char *p = data;
    while (size) {
        ssize_t w = write(fd, p, size);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return pe_error(PE_ERR_IO, "write to '%s' failed: %s", tmp, strerror(errno));
        p += w;
        size -= (size_t)w;
    }
    return PE_OK;
}

pe_status pe_write_file_atomic(const char *path, const void *data, size_t size) {
    if (!path || (!data && size)) return pe_error(PE_ERR_INVALID, "pe_write_file_atomic: NULL argument");
    char dir[4096], tmp[4096];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    if (strlen(path) + 32 >= sizeof tmp) return pe_error(PE_ERR_INVALID, "path too long: '%s'", path);
    if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
        return pe_error(PE_ERR_INVALID, "cannot write '%s': the path names a directory, not a file", path);
    memcpy(dir, slash ? path : ".", dlen);
    dir[dlen] = '\0';
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return pe_error(PE_ERR_IO, "cannot write '%s': cannot open its directory '%s': %s", path, dir, strerror(errno));
    remove_stale_temporaries(dfd, base);

    struct stat old;
    mode_t mode = fstatat(dfd, base, &old, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(old.st_mode)
                      ? (old.st_mode & 0777) : (0666 & ~process_umask());
    int fd = -1, err = 0;
    char suffix[TMP_RAND + 1];
    const char *tbase = tmp; /* the temporary's name inside dir */
    for (int attempt = 0; attempt < TMP_ATTEMPTS && fd < 0; attempt++) {
        tmp_suffix(attempt, suffix);
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%s", path, (long)getpid(), suffix);
        tbase = tmp + (slash ? (size_t)(slash - path) + 1 : 0);
        fd = openat(dfd, tbase, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        err = errno;
        if (fd < 0 && err != EEXIST) break;
    }
    if (fd < 0) {
        close(dfd);
        return pe_error(PE_ERR_IO, "cannot create a temporary file for '%s' (last tried '%s'): %s", path, tmp,
                        strerror(err));
    }
    pe_status st = write_all(fd, data, size, tmp);
    if (st == PE_OK && fchmod(fd, mode) != 0)
        st = pe_error(PE_ERR_IO, "cannot set the mode of '%s' to %03o: %s", tmp, (unsigned)mode, strerror(errno));
    if (st == PE_OK && fsync(fd) != 0)
        st = pe_error(PE_ERR_IO, "cannot flush '%s': %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == PE_OK)
        st = pe_error(PE_ERR_IO, "cannot flush '%s': %s", tmp, strerror(errno));
    if (st == PE_OK && renameat(dfd, tbase, dfd, base) != 0)
        st = pe_error(PE_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (st != PE_OK) {
        unlinkat(dfd, tbase, 0);
    } else if (fsync(dfd) != 0 && errno != EINVAL) { /* EINVAL: the file system cannot sync a directory */
        st = pe_error(PE_ERR_IO, "wrote '%s' but cannot sync its directory '%s': %s", path, dir, strerror(errno));
    }
    close(dfd);
    return st;
}

/* tests/unit/test_atomic_write.c — pe_write_file_atomic (runtime/alloc.c),
 * the one writer under every .npy, safetensors, program and DOT file.
 *
 * A symlink planted at any name a save tries (the test fixes the random part
 * of the names through pe_tmp_suffix_hook and plants at every one), at the
 * old predictable name "<path>.tmp.<pid>" or at path itself is never written
 * through; temporaries of dead processes are removed by the next save while
 * a live process's and every file off the exact pattern stay; the file gets
 * the old file's mode, or 0666 & ~umask; two threads and two processes
 * saving one path leave one complete file, and a reader never sees a partial
 * one; errors name the path and the system's reason.
 */
#include "tests/unit/op_test_util.h"
#include "runtime/internal.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char g_dir[256];

static void in_dir(char *buf, size_t n, const char *name) { snprintf(buf, n, "%.255s/%.200s", g_dir, name); }

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

/* The whole file as a NUL-terminated string (caller frees); NULL when absent. */
static char *get(const char *path, size_t *n) {
    void *d;
    size_t sz;
    if (pe_read_file(path, &d, &sz) != PE_OK) return NULL;
    if (n) *n = sz;
    return d;
}

static void assert_file(const char *path, const char *text) {
    char *s = get(path, NULL);
    if (!s) fail_msg("%s is missing", path);
    if (strcmp(s, text)) fail_msg("%s holds '%.40s', expected '%.40s'", path, s, text);
    free(s);
}

/* Entries of the test directory whose name starts with prefix. */
static int count_prefixed(const char *prefix) {
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/* Removes every entry of the test directory. */
static void empty_dir(void) {
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    struct dirent *e;
    char p[600];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            in_dir(p, sizeof p, e->d_name);
            unlink(p);
        }
    closedir(d);
}

static void fixed_suffix(int attempt, char suffix[7]) { snprintf(suffix, 7, "T%05d", attempt); }

static void test_symlinks_are_not_followed(void **state) {
    (void)state;
    char path[512], victim[512], absent[512], link[600];
    in_dir(path, sizeof path, "model.safetensors");
    in_dir(victim, sizeof victim, "victim");
    in_dir(absent, sizeof absent, "created_through_a_link");
    put(victim, "precious");
    put(path, "old");

    /* The old predictable name, with the real random names. */
    snprintf(link, sizeof link, "%s.tmp.%ld", path, (long)getpid());
    assert_int_equal(symlink(victim, link), 0);
    if (pe_write_file_atomic(path, "new1", 4) != PE_OK) fail_msg("%s", pe_last_error());
    assert_file(path, "new1");
    assert_file(victim, "precious");

    /* Every name the save will try but the last: links to the victim and
     * dangling links (O_CREAT without O_EXCL would create their target). */
    pe_tmp_suffix_hook = fixed_suffix;
    for (int k = 0; k < 99; k++) {
        snprintf(link, sizeof link, "%s.tmp.%ld.T%05d", path, (long)getpid(), k);
        assert_int_equal(symlink(k % 2 ? victim : absent, link), 0);
    }
    if (pe_write_file_atomic(path, "new2", 4) != PE_OK) fail_msg("%s", pe_last_error());
    assert_file(path, "new2");
    assert_file(victim, "precious");
    assert_int_equal(access(absent, F_OK), -1);

    /* Every name taken: refused, naming the path and the reason; nothing changed. */
    snprintf(link, sizeof link, "%s.tmp.%ld.T%05d", path, (long)getpid(), 99);
    assert_int_equal(symlink(victim, link), 0);
    assert_int_equal(pe_write_file_atomic(path, "new3", 4), PE_ERR_IO);
    assert_non_null(strstr(pe_last_error(), path));
    assert_non_null(strstr(pe_last_error(), strerror(EEXIST)));
    assert_file(path, "new2");
    assert_file(victim, "precious");
    assert_int_equal(access(absent, F_OK), -1);
    pe_tmp_suffix_hook = NULL;

    /* A symlink at path itself is replaced by the file, its target untouched. */
    unlink(path);
    assert_int_equal(symlink(victim, path), 0);
    if (pe_write_file_atomic(path, "new4", 4) != PE_OK) fail_msg("%s", pe_last_error());
    struct stat sb;
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    assert_file(path, "new4");
    assert_file(victim, "precious");
    empty_dir();
}

/* A pid that no longer exists (a child that has exited and been reaped). */
static pid_t dead_pid(void) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(kill(pid, 0), -1);
    return pid;
}

static void test_stale_temporaries(void **state) {
    (void)state;
    char path[512], victim[512], name[600];
    in_dir(path, sizeof path, "m.npy");
    in_dir(victim, sizeof victim, "victim");
    put(victim, "precious");
    pid_t dead = dead_pid();
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t alive = fork(); /* kept alive until the test closes the pipe */
    assert_true(alive >= 0);
    if (alive == 0) {
        char c;
        close(fds[1]);
        _exit((int)read(fds[0], &c, 1));
    }
    close(fds[0]);
    static const struct { const char *fmt; int who; bool removed; } k[] = {
        {"m.npy.tmp.%ld.abcDE1", 0, true},     /* a dead process's temporary */
        {"m.npy.tmp.%ld", 0, true},            /* the same, as older versions named it */
        {"m.npy.tmp.%ld.abcDE1", 1, false},    /* the test's parent: alive */
        {"m.npy.tmp.%ld.abcDE2", 2, false},    /* a child kept alive */
        {"m.npy.tmp.%ld.abcDE3", 3, false},    /* this process: another thread may be writing it */
        {"m.npy.tmp.%ld.abc", 0, false},       /* off the pattern: */
        {"m.npy.tmp.%ld.abcDE1.bak", 0, false},
        {"m.npy.tmp.%ld.abc-E1", 0, false},
        {"m.npy.tmp.0%ld.abcDE1", 0, false},
        {"m.npy.tmp.%ldx", 0, false},
        {"n.npy.tmp.%ld.abcDE1", 0, false},    /* another target */
        {"xm.npy.tmp.%ld.abcDE1", 0, false},
        {"m.npyx.tmp.%ld.abcDE1", 0, false},
    };
    enum { N = (int)(sizeof k / sizeof k[0]) };
    long who[4] = {(long)dead, (long)getppid(), (long)alive, (long)getpid()};
    char paths[N][600];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, k[i].fmt, who[k[i].who]);
        in_dir(paths[i], sizeof paths[i], name);
        put(paths[i], "partial");
    }
    /* A symlink on the pattern of a dead pid is not a temporary PE wrote. */
    char link[600];
    snprintf(link, sizeof link, "%s.tmp.%ld.abcDE9", path, (long)dead);
    assert_int_equal(symlink(victim, link), 0);

    if (pe_write_file_atomic(path, "data", 4) != PE_OK) fail_msg("%s", pe_last_error());
    assert_file(path, "data");
    for (int i = 0; i < N; i++)
        if ((access(paths[i], F_OK) != 0) != k[i].removed)
            fail_msg("%s was %s", paths[i], k[i].removed ? "kept" : "removed");
    struct stat sb;
    assert_int_equal(lstat(link, &sb), 0);
    assert_file(victim, "precious");

    close(fds[1]);
    int st;
    assert_int_equal(waitpid(alive, &st, 0), alive);
    empty_dir();
}

static mode_t mode_of(const char *path) {
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return sb.st_mode & 07777;
}

static void test_mode(void **state) {
    (void)state;
    char path[512];
    in_dir(path, sizeof path, "p.pe");
    mode_t old = umask(022);
    assert_int_equal(pe_write_file_atomic(path, "a", 1), PE_OK);
    assert_int_equal(mode_of(path), 0644); /* new: 0666 & ~umask */
    unlink(path);
    umask(077);
    assert_int_equal(pe_write_file_atomic(path, "a", 1), PE_OK);
    assert_int_equal(mode_of(path), 0600);
    umask(022);
    assert_int_equal(chmod(path, 0640), 0);
    assert_int_equal(pe_write_file_atomic(path, "b", 1), PE_OK);
    assert_int_equal(mode_of(path), 0640); /* replaced: the old file's mode */
    umask(old);
    empty_dir();
}

/* ---- concurrent saves --------------------------------------------------- */

enum { ROUNDS = 40, SIZE_A = 200000, SIZE_B = 3000 };
static char *g_a, *g_b;
static char g_path[512];
static _Atomic int g_writers, g_failed_saves, g_partial_reads;

/* Threads count failures; the test thread asserts (cmocka's checks are not for other threads). */
static void *writer(void *arg) {
    const char *text = arg;
    for (int i = 0; i < ROUNDS; i++)
        if (pe_write_file_atomic(g_path, text, strlen(text)) != PE_OK) {
            fprintf(stderr, "save failed: %s\n", pe_last_error());
            g_failed_saves++;
        }
    g_writers--;
    return NULL;
}

/* Every read while the writers run sees all of one version. */
static void *reader(void *arg) {
    (void)arg;
    int reads = 0;
    while (g_writers > 0 || reads == 0) {
        size_t n;
        char *s = get(g_path, &n);
        if (!s) continue;
        if (strcmp(s, g_a) && strcmp(s, g_b)) {
            fprintf(stderr, "a reader saw a partial file (%zu bytes)\n", n);
            g_partial_reads++;
        }
        free(s);
        reads++;
    }
    return NULL;
}

static void test_concurrent_saves(void **state) {
    (void)state;
    g_a = malloc(SIZE_A + 1);
    g_b = malloc(SIZE_B + 1);
    assert_true(g_a && g_b);
    memset(g_a, 'a', SIZE_A);
    g_a[SIZE_A] = '\0';
    memset(g_b, 'b', SIZE_B);
    g_b[SIZE_B] = '\0';
    in_dir(g_path, sizeof g_path, "c.safetensors");
    assert_int_equal(pe_write_file_atomic(g_path, g_b, SIZE_B), PE_OK);

    /* Two threads of one process. */
    pthread_t ta, tb, tr;
    g_writers = 2;
    assert_int_equal(pthread_create(&tr, NULL, reader, NULL), 0);
    assert_int_equal(pthread_create(&ta, NULL, writer, g_a), 0);
    assert_int_equal(pthread_create(&tb, NULL, writer, g_b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_join(tr, NULL);
    assert_int_equal(g_failed_saves, 0);
    assert_int_equal(g_partial_reads, 0);
    char *s = get(g_path, NULL);
    assert_true(!strcmp(s, g_a) || !strcmp(s, g_b));
    free(s);
    assert_int_equal(count_prefixed("c.safetensors.tmp."), 0);

    /* Two processes. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < ROUNDS; i++)
            if (pe_write_file_atomic(g_path, g_a, SIZE_A) != PE_OK) _exit(1);
        _exit(0);
    }
    g_writers = 1;
    assert_int_equal(pthread_create(&tr, NULL, reader, NULL), 0);
    writer(g_b);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    pthread_join(tr, NULL);
    assert_int_equal(g_failed_saves, 0);
    assert_int_equal(g_partial_reads, 0);
    s = get(g_path, NULL);
    assert_true(!strcmp(s, g_a) || !strcmp(s, g_b));
    free(s);
    assert_int_equal(count_prefixed("c.safetensors.tmp."), 0);
    free(g_a);
    free(g_b);
    empty_dir();
}

static void test_errors_name_the_path(void **state) {
    (void)state;
    char path[512];
    in_dir(path, sizeof path, "no/such/dir/x.npy");
    assert_int_equal(pe_write_file_atomic(path, "a", 1), PE_ERR_IO);
    assert_non_null(strstr(pe_last_error(), path));
    assert_non_null(strstr(pe_last_error(), strerror(ENOENT)));
    in_dir(path, sizeof path, "adir/");
    assert_int_equal(pe_write_file_atomic(path, "a", 1), PE_ERR_INVALID);
    assert_non_null(strstr(pe_last_error(), path));
    /* A directory at the target: the rename fails, no temporary stays. */
    in_dir(path, sizeof path, "adir");
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(pe_write_file_atomic(path, "a", 1), PE_ERR_IO);
    assert_non_null(strstr(pe_last_error(), path));
    assert_non_null(strstr(pe_last_error(), strerror(EISDIR)));
    assert_int_equal(count_prefixed("adir.tmp."), 0);
    rmdir(path);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pe_test_aw.XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return rmdir(g_dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_symlinks_are_not_followed),
        cmocka_unit_test(test_stale_temporaries),
        cmocka_unit_test(test_mode),
        cmocka_unit_test(test_concurrent_saves),
        cmocka_unit_test(test_errors_name_the_path),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

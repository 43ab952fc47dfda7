/* tools/trainers.c — `pe train` and `pe run` as several trainer processes.
 *
 *     mpirun -np 2 pe train PROGRAM ...     each rank: num_trainers 2, trainer_id = its rank
 *     pe train PROGRAM ... --trainers 2     the same: re-executes itself under mpirun
 *
 * What: the trainer world of this process (Open MPI's OMPI_COMM_WORLD_SIZE /
 * _RANK, else Paddle's PADDLE_TRAINERS_NUM / PADDLE_TRAINER_ID), the
 * --trainers N flag, the re-execution under `mpirun --oversubscribe -np N`,
 * quiet ranks (stdout of every trainer but 0 goes to /dev/null; errors
 * still reach stderr, prefixed "trainer K of N:" by pe.c), and a view of a
 * trainer's rows of a global batch (pe_batch_shard, the executor's rule).
 * How: --trainers is parsed with the other flags, so a usage error is
 * reported once, by the parent, before mpirun starts; the parent then
 * replaces itself by mpirun (execv), whose exit status is the job's. A rank
 * that fails leaves with _exit (pe_tool_trainer_exit): no MPI_Finalize,
 * whose handshake would wait for ranks still inside a collective; mpirun
 * sees a rank end without it and stops the job.
 * Why here: train and run share all of it, and cmd_train.c / cmd_run.c
 * keep their own job (the executor does the communication: num_trainers).
 */
#include "tool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int pe_tool_trainer = 0, pe_tool_trainers = 1;

enum { MAX_TRAINERS = 1024 };

/* The int value of environment variable `name`; false when unset or empty. */
static bool env_int(const char *name, long *out, bool *bad) {
    const char *v = getenv(name);
    if (!v || !*v) return false;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    *bad = *end || errno || n < 0 || n > 1 << 20;
    *out = n;
    return true;
}

int pe_tool_world(int *n, int *rank) {
    static const char *const k_pairs[][2] = {{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
                                              {"PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ID"}};
    *n = 1;
    *rank = 0;
    for (size_t k = 0; k < sizeof k_pairs / sizeof k_pairs[0]; k++) {
        long size, r = 0;
        bool bad = false, bad_r = false;
        if (!env_int(k_pairs[k][0], &size, &bad)) continue;
        if (bad || size < 1)
            return pe_tool_fail("environment: %s='%s' is not a process count >= 1", k_pairs[k][0],
                                getenv(k_pairs[k][0]));
        if (!env_int(k_pairs[k][1], &r, &bad_r) && size > 1)
            return pe_tool_fail("environment: %s=%ld but %s is not set", k_pairs[k][0], size, k_pairs[k][1]);
        if (bad_r || r >= size)
            return pe_tool_fail("environment: %s='%s' is not a rank in 0..%ld (%s=%ld)", k_pairs[k][1],
                                getenv(k_pairs[k][1]), size - 1, k_pairs[k][0], size);
        *n = (int)size;
        *rank = (int)r;
        break;
    }
    pe_tool_trainers = *n;
    pe_tool_trainer = *rank;
    if (*n > 1 && *rank > 0 && !freopen("/dev/null", "w", stdout))
        return pe_tool_fail("trainer %d: cannot silence stdout: %s", *rank, strerror(errno));
    return PE_EXIT_OK;
}

bool pe_tool_trainers_flag(const char *cmd, int argc, char **argv, int *i, int *n, int *rc) {
    const char *v = NULL;
    int r = pe_tool_flag(argc, argv, i, "--trainers", &v);
    if (r == 0) return false;
    *rc = PE_EXIT_OK;
    if (r < 0) {
        *rc = pe_tool_usage_error(cmd, "--trainers needs a value (the number of processes)");
        return true;
    }
    char *end;
    errno = 0;
    long t = strtol(v, &end, 10);
    if (!*v || *end || errno || t < 1 || t > MAX_TRAINERS)
        *rc = pe_tool_usage_error(cmd, "--trainers '%s' is not a process count from 1 to %d", v, MAX_TRAINERS);
    else if (*n)
        *rc = pe_tool_usage_error(cmd, "--trainers given twice");
    else
        *n = (int)t;
    return true;
}

/* The first executable `name` on PATH into buf; false when there is none. */
__attribute__((unused)) static bool find_on_path(const char *name, char *buf, size_t n) {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path; *p;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        int k = snprintf(buf, n, "%.*s/%s", (int)len, len ? p : ".", name);
        struct stat sb;
        if (k > 0 && (size_t)k < n && stat(buf, &sb) == 0 && S_ISREG(sb.st_mode) && access(buf, X_OK) == 0)
            return true;
        p += len + (colon ? 1 : 0);
    }
    return false;
}

int pe_tool_mpirun(const char *cmd, int argc, char **argv, int n) {
#ifndef PE_WITH_MPI
    (void)cmd;
    (void)argc;
    (void)argv;
    return pe_tool_fail("--trainers %d: this pe was built without MPI (libopenmpi-dev: scripts/setup.sh, "
                        "-DPE_WITH_MPI=ON)", n);
#else
    char mpirun[4096], self[4096];
    if (!find_on_path("mpirun", mpirun, sizeof mpirun))
        return pe_tool_fail("--trainers %d: mpirun is not on PATH (Open MPI's openmpi-bin: scripts/setup.sh); "
                            "or start the processes yourself: mpirun -np %d pe %s ...", n, n, cmd);
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0 || (size_t)k >= sizeof self - 1)
        return pe_tool_fail("--trainers %d: cannot find this program's path (/proc/self/exe): %s", n, strerror(errno));
    self[k] = '\0';
    char np[16];
    snprintf(np, sizeof np, "%d", n);
    /* mpirun --oversubscribe -np N SELF CMD ARGS (without --trainers) */
    char **av = calloc((size_t)argc + 8, sizeof *av);
    if (!av) return pe_tool_fail("out of memory starting mpirun");
    int m = 0;
    av[m++] = mpirun;
    av[m++] = "--oversubscribe";
    av[m++] = "-np";
    av[m++] = np;
    av[m++] = self;
    av[m++] = (char *)cmd;
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!only_pos && !strcmp(argv[i], "--")) only_pos = true;
        if (!only_pos && pe_tool_flag(argc, argv, &i, "--trainers", &v) != 0) continue;
        av[m++] = argv[i];
    }
    av[m] = NULL;
    if (geteuid() == 0) { /* Open MPI refuses root unless told */
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    }
    fflush(NULL);
    execv(mpirun, av);
    int e = errno;
    free(av);
    return pe_tool_fail("--trainers %d: cannot start %s: %s", n, mpirun, strerror(e));
#endif
}

bool pe_tool_trainers_start(const char *cmd, int argc, char **argv, int trainers, int *n, int *rank, int *rc) {
    if ((*rc = pe_tool_world(n, rank)) != PE_EXIT_OK) return false;
    if (trainers > 1 && *n == 1) {
        *rc = pe_tool_mpirun(cmd, argc, argv, trainers); /* returns on failure only */
        return false;
    }
    if (trainers && trainers != *n) {
        *rc = pe_tool_usage_error(cmd, "--trainers %d, but this process is one of %d trainers already (mpirun -np "
                                  "%d): give --trainers to a plain `pe %s` only", trainers, *n, *n, cmd);
        return false;
    }
    return true;
}

int pe_tool_trainer_exit(int rc) {
    if (rc != PE_EXIT_OK && pe_tool_trainers > 1) {
        fflush(NULL);
        _exit(rc);
    }
    return rc;
}

pe_status pe_tool_rows_view(pe_tensor *dst, const pe_tensor *src, int64_t first, int64_t count) {
    if (src->ndim < 1 || first < 0 || count < 0 || first + count > src->dims[0])
        return pe_error(PE_ERR_INVALID, "rows %lld..%lld of a tensor of %lld rows", (long long)first,
                        (long long)(first + count), (long long)(src->ndim ? src->dims[0] : 0));
    int64_t dims[PE_MAX_DIMS];
    memcpy(dims, src->dims, sizeof dims);
    dims[0] = count;
    pe_tensor_share(dst, src);
    dst->offset += (size_t)first * (size_t)pe_dims_prod(src->dims, 1, src->ndim) * pe_dtype_size(src->dtype);
    return pe_tensor_set_meta(dst, src->dtype, src->ndim, dims);
}

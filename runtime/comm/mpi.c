/* runtime/comm/mpi.c — collectives between processes over MPI (Open MPI on
 * CPU clusters): one rank per process, behind the rank API of comm.h.
 *
 *     pe_comm *c;
 *     if (pe_comm_mpi_new(&c) != PE_OK) return error;   // rank/size of MPI_COMM_WORLD
 *     pe_comm_allreduce(c, grad, n, PE_DTYPE_FP32, tag, &w);  ...  pe_work_wait(w);
 *     pe_comm_hier_new(c, places, threads, ranks);     // places of this process on top
 *
 * What: allreduce, reduce, broadcast, allgather, reduce_scatter(v) and
 * barrier, non-blocking: a call queues the collective and returns a work;
 * ONE progress thread per communicator issues MPI's non-blocking calls in
 * queue order, polls them (MPI_Testsome) and completes the works, so
 * callbacks run on that thread. It sleeps on a condition variable while
 * nothing is queued (a call wakes it at once), and polls without sleeping
 * while a collective moves over MPI (Open MPI's non-blocking collectives
 * advance only inside MPI_Test*; a 10 us sleep lasts ~60 us with the
 * kernel's timer slack and stalled every rank's next copy); only when
 * nothing has moved for 2 ms (a late peer) does it back off to short
 * sleeps (progress_main). Through the one-machine window (below) it
 * sleeps on a bell the other ranks ring instead. Every MPI call is made
 * there (constructor and free aside), which needs MPI_THREAD_SERIALIZED;
 * PE asks for
 * MPI_THREAD_MULTIPLE when it initializes MPI itself (so the program may
 * call MPI too) and refuses a level below SERIALIZED.
 *
 * How: each collective starts with a header: every rank's (tag, op, dtype,
 * count, root, counts hash, own-check error and the end of its message;
 * runtime/comm/mpi_header.h), exchanged with an MPI_Iallgather. All ranks
 * see the same headers, so they take the same decision (the check,
 * pe_mpi_headers_check, treats them as hostile bytes and is fuzzed): when
 * a rank failed its own checks (bad root, bad dtype) or the calls differ
 * (another count, another op, another tag: the ranks issued in different
 * orders), every rank's work fails with a message naming the rank and the
 * difference, and no data moves; nobody waits forever for a call that
 * never comes. Then the data, in chunks of PE_MPI_CHUNK_BYTES (default 4
 * MiB), at most `window` chunks holding scratch at once:
 *   sums (reduce, reduce_scatter; allreduce across machines): an
 *     MPI_Ialltoallv gives each rank every other rank's piece of its part
 *     of the chunk (allreduce and reduce work in place, so a rank's own
 *     piece is not sent to itself: it is read where it is); the rank sums
 *     them in rank order 0, 1, ..., N-1, the first two straight into the
 *     result (pe_comm_combine_to, then pe_comm_combine, one element at a
 *     time: a sum, or max / min / prod; no copy of its own piece or of the
 *     first one, which at 2 ranks were a third of the bytes moved);
 *     then allreduce shares the sums (MPI_Iallgatherv, in place) and reduce
 *     gathers them at the root (MPI_Igatherv). Bandwidth is the ring's
 *     (each byte sent about twice), and every element is summed once, by
 *     its owner, in one fixed order: results are bitwise repeatable, equal
 *     on every rank, and equal to the sequential sum in rank order for any
 *     rank count and any MPI algorithm. (MPI_Iallreduce with a
 *     non-commutative user op keeps the rank order but MPI may associate
 *     freely — Open MPI's binomial tree computes (a0+a1)+(a2+a3) — so floats
 *     would not match the sequential sum from 4 ranks on.)
 *   broadcast: MPI_Ibcast of each chunk; allgather: MPI_Iallgather of each
 *     rank's piece of the chunk into scratch, then copied to its place;
 *     barrier: MPI_Ibarrier.
 * MPI pairs the collectives of a communicator by issue order, so the
 * headers, the first data step and the second data step each run on their
 * own duplicate of the communicator, and each is issued strictly in queue
 * order: every rank issues the same sequence on each, whatever the timing.
 * Data moves as MPI_BYTE, so MPI never reduces anything.
 *
 * One machine: when every rank runs on this machine (MPI_Comm_split_type
 * says so, and no rank's PE_MPI_SHM is 0), the constructor makes a shared
 * window (MPI_Win_allocate_shared; shm_setup), one segment per rank:
 * counters, a ring of SHM_SLOTS headers, chunk_bytes of data. Then
 *   headers go through the ring (shm_headers): a rank writes op seq's
 *     header into its slot seq % SHM_SLOTS once every rank has read that
 *     slot's last one, and reads the op's headers once every rank has
 *     posted; the same bytes and the same check as above, without MPI's
 *     latency (~1-3 us less per collective here);
 *   allreduce goes through the segments, in three phases per chunk
 *     (shm_advance): each rank copies the other ranks' parts of its buffer
 *     into its segment; when all have, each sums its own part in rank
 *     order, from its buffer and the others' segments, into its buffer
 *     (the same sums in the same order as above), and publishes the sum in
 *     its segment; when all have, each copies the others' sums out. A
 *     segment is written again only when every rank has finished reading
 *     it. One plain memcpy per byte moved, where a transfer between
 *     processes of one machine in Open MPI (vader, CMA) pins pages and
 *     copies at well under half of memcpy's speed (measured here: 512 KB
 *     in ~90 us, memcpy ~35 us).
 *   Each phase ends with a step counter in the rank's segment (C11
 *   release store; the others acquire-load it: the window is plain shared
 *   memory); the progress thread moves on as the counters allow, so calls
 *   stay non-blocking, and the timeout covers a rank that never gets
 *   there. Waiting on the others here, the progress thread polls the
 *   counters for SHM_SPIN_S (30 us) without yielding, then sleeps on its
 *   segment's bell, a futex word that each rank bumps (FUTEX_WAKE when
 *   the owner sleeps) after it moves a counter, as a submission does for
 *   its own rank; the sleep lasts 1 ms at most, for the timeout and
 *   submissions' sake. Polling or yielding through the wait for a rank
 *   still computing held cores it needed: 2 ranks on 2 cores with one more
 *   busy process took 40 ms an MLP step, 4-5 ms sleeping (a yield can cost
 *   a whole time slice there). The header still comes first: every rank
 *   counts the window's steps alike only because every rank's call matched. Other collectives,
 *   and machines without the window, use MPI as above.
 *
 * Order: as with NCCL, the ranks' calls on one communicator must be issued
 * in the same order (the tag must still match; a mismatch is reported, see
 * above). Errors: the communicators return MPI errors (MPI_ERRORS_RETURN);
 * an MPI error, or no progress for PE_MPI_TIMEOUT seconds (default 600)
 * while a collective is pending, fails every pending work with a message
 * (MPI_Error_string, or what was pending) and leaves the communicator
 * unusable: MPI cannot cancel a started collective, so its buffers may still
 * be written; the process should exit. When a peer process dies, Open MPI
 * (4.x) ends the whole job itself ("mpirun noticed that process rank 1 ...
 * exited on signal 9"; measured here: about 2 s after the kill, every
 * process gone, mpirun's exit status non-zero): an error, not a hang.
 * Callbacks run on the progress thread: they must not wait on works or
 * free the communicator. MPI_Finalize: at process exit (atexit), once, and only when
 * PE initialized MPI and no communicator is left; every pe_comm must be
 * freed before exit (free waits for the queued collectives), and, as MPI
 * asks of MPI_Comm_free, by every rank in the same order: freeing the
 * shared window (MPI_Win_free) waits for the other ranks of this machine.
 */
#include "runtime/comm/comm.h"
#include "runtime/comm/mpi_header.h"
#include "runtime/internal.h"

#include <mpi.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DESC_N PE_MPI_DESC_N
#define DESC_MSG PE_MPI_DESC_MSG
#define DESC_MAGIC PE_MPI_DESC_MAGIC
#define DEFAULT_CHUNK (4 << 20)
#define DEFAULT_WINDOW 4
#define DEFAULT_TIMEOUT_S 600.0
#define SPIN_S 0.002 /* progress_main */
#define TIMER_SLACK_NS 1000UL /* the progress thread's: its short naps last what they ask (the default is 50 us) */
#define SHM_SPIN_S 30e-6 /* progress_main: polling the window before sleeping on the bell */
#define SHM_NAP_NS 1000000 /* progress_main: the longest sleep on the bell (timeouts still checked) */
/* A shared segment: SHM_HEAD bytes of counters (shm_flag: the three step
 * counters, headers posted, headers read; then the bell, shm_bell), SHM_SLOTS
 * headers, then the data. */
#define SHM_HEAD 512
#define SHM_SLOTS 16
#define SHM_DATA (SHM_HEAD + SHM_SLOTS * (int)sizeof(pe_mpi_header))
#define SHM_ALIGN 64 /* a segment's start: shm_flag's alignment (one cache line each) */
enum { F_COPIED, F_SUMMED, F_READ, F_HDR_POSTED, F_HDR_READ, N_FLAGS };
#define SHM_TILE (32 << 10) /* bytes summed at a time (shm_advance) */

enum { LANE_HDR, LANE_A, LANE_B, N_LANES };

typedef struct mpi_comm mpi_comm;

typedef pe_mpi_header header; /* runtime/comm/mpi_header.h */
typedef struct mpi_op mpi_op;

/* One chunk of an op: its first data step on LANE_A, a second on LANE_B
 * for allreduce and reduce. */
typedef struct chunk {
    struct chunk *next; /* LANE_B queue */
    mpi_op *op;
    int64_t j;          /* chunk index */
    int64_t b, m;       /* elements [b, b+m) of the buffer (allreduce, reduce, broadcast) */
    int64_t part;       /* elements of this rank's piece */
    char *scratch;
    int *cnt;           /* [4n]: send counts, send displs, recv counts, recv displs (bytes) */
    bool a_done;
} chunk;

struct mpi_op {
    mpi_op *next;
    pe_work *w;
    pe_coll_args a;     /* a.counts: the copy below */
    int64_t *counts;    /* reduce_scatter: [n] per rank, then [n + 1] offsets */
    header hdr;
    header *all;        /* [n] every rank's header */
    bool hdr_done, checked;
    bool hdr_posted;    /* in this rank's segment (shm_headers) */
    int64_t seq;        /* 1, 2, ...: the op's place in the queue, the same on every rank */
    bool shm;           /* an allreduce over the node's shared memory (shm_advance) */
    pe_status st;
    char msg[400];
    int64_t n_chunks, next_chunk, chunks_left;
};

typedef struct {
    MPI_Request req;
    int lane;
    void *owner; /* mpi_op (header) or chunk */
} active;

struct mpi_comm {
    pe_comm base;
    MPI_Comm lane[N_LANES];
    pthread_t thread;
    pthread_mutex_t mu; /* the submit queue and the flags */
    pthread_cond_t cv;
    mpi_op *sub_head, *sub_tail; /* submitted, not yet taken */
    bool stop;
    _Atomic int broken;
    char broken_msg[400];
    /* progress thread only */
    mpi_op *ops_head, *ops_tail; /* taken, in queue order */
    mpi_op *a_cur;               /* next op whose chunks go to LANE_A */
    chunk *b_head, *b_tail;
    active *act;
    int n_act, cap_act;
    MPI_Request *reqs;
    int *idx;
    int alive; /* chunks holding scratch */
    int64_t chunk_bytes;
    int window;
    double timeout_s, last_progress;
    /* every rank on this node: allreduce through shared memory (shm_setup) */
    MPI_Win win;      /* MPI_WIN_NULL when not */
    char **seg;       /* [n] rank q's segment: counters, headers, then chunk_bytes of data */
    int64_t seq;      /* ops taken */
    int hdr_waiting;  /* ops whose headers are not all read yet (shm_headers) */
    int64_t shm_step; /* steps (chunks) started, the same count on every rank */
    int shm_phase;    /* of the chunk at a_cur: 0 copy in, 1 sum, 2 copy out */
};

/* The counters at the head of rank q's segment, each on its own cache
 * line: done[f] = the last step whose phase f this rank finished. */
typedef struct {
    _Alignas(64) _Atomic int64_t v;
} shm_flag;
/* After the counters: rank q's bell, a futex word every other rank bumps
 * (and wakes, when q sleeps on it) after it moves a counter, and after a
 * submission by q's own compute threads; q's progress thread sleeps on it
 * while it waits for the others (progress_main). */
typedef struct {
    _Alignas(64) _Atomic uint32_t bell;
    _Atomic uint32_t sleeping;
} shm_bell;
_Static_assert(N_FLAGS * sizeof(shm_flag) + sizeof(shm_bell) <= SHM_HEAD,
               "SHM_HEAD holds the counters and the bell");

/* ---- MPI itself: init once, finalize at exit ------------------------------------- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_live;         /* pe_comms alive */
static bool g_we_init;     /* PE called MPI_Init_thread */
static int g_level = -1;

static void finalize_at_exit(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    pthread_mutex_lock(&g_mu);
    int live = g_live;
    pthread_mutex_unlock(&g_mu);
    if (!fin && live == 0) MPI_Finalize();
}

static const char *mpi_err_str(int code, char *buf) {
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", code);
    return buf;
}

/* Under g_mu. */
static pe_status mpi_init_once(void) {
    int inited = 0, fin = 0;
    MPI_Finalized(&fin);
    if (fin) return pe_error(PE_ERR_UNSUPPORTED, "mpi: MPI was finalized already in this process");
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &g_level);
        if (rc != MPI_SUCCESS) {
            char e[MPI_MAX_ERROR_STRING];
            return pe_error(PE_ERR_IO, "mpi: MPI_Init_thread failed: %s", mpi_err_str(rc, e));
        }
        g_we_init = true;
        atexit(finalize_at_exit);
    } else if (g_level < 0) {
        MPI_Query_thread(&g_level);
    }
    if (g_level < MPI_THREAD_SERIALIZED)
        return pe_error(PE_ERR_UNSUPPORTED, "mpi: MPI provides thread level %d; PE's progress thread needs "
                        "MPI_THREAD_SERIALIZED (initialize MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...))",
                        g_level);
    if (g_level < MPI_THREAD_MULTIPLE && g_live > 0)
        return pe_error(PE_ERR_UNSUPPORTED, "mpi: MPI provides MPI_THREAD_SERIALIZED only: one PE communicator at "
                        "a time (MPI_THREAD_MULTIPLE allows more)");
    return PE_OK;
}

/* ---- helpers ---------------------------------------------------------------------- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void fail_op(mpi_op *op, pe_status st, const char *msg) {
    if (op->st != PE_OK) return;
    op->st = st;
    snprintf(op->msg, sizeof op->msg, "%s", msg);
}

static void push_active(mpi_comm *m, MPI_Request r, int lane, void *owner) {
    if (m->n_act == m->cap_act) {
        int cap = m->cap_act ? 2 * m->cap_act : 16;
        active *a = realloc(m->act, sizeof *a * (size_t)cap);
        MPI_Request *q = realloc(m->reqs, sizeof *q * (size_t)cap);
        int *ix = realloc(m->idx, sizeof *ix * (size_t)cap);
        if (a) m->act = a;
        if (q) m->reqs = q;
        if (ix) m->idx = ix;
        PE_ASSERT(a && q && ix); /* a few dozen entries at most */
        m->cap_act = cap;
    }
    m->act[m->n_act++] = (active){r, lane, owner};
    m->last_progress = pe_now_s();
}

static void chunk_free(chunk *k) {
    free(k->scratch);
    free(k->cnt);
    free(k);
}

/* Every pending work fails with msg; the communicator is unusable after. */
static void fail_all(mpi_comm *m, const char *msg) {
    pthread_mutex_lock(&m->mu);
    if (!atomic_load(&m->broken)) snprintf(m->broken_msg, sizeof m->broken_msg, "%s", msg);
    atomic_store(&m->broken, 1);
    if (m->sub_head) {
        if (m->ops_tail) m->ops_tail->next = m->sub_head;
        else m->ops_head = m->sub_head;
        m->ops_tail = m->sub_tail;
        m->sub_head = m->sub_tail = NULL;
    }
    pthread_mutex_unlock(&m->mu);
    /* The requests stay with MPI (a started collective cannot be
     * cancelled), and so do their buffers: headers, chunks and scratch are
     * left allocated, since MPI may still write them. */
    m->n_act = 0;
    m->b_head = m->b_tail = NULL;
    m->alive = 0;
    char desc[192], full[sizeof m->broken_msg + 256];
    while (m->ops_head) {
        mpi_op *op = m->ops_head;
        m->ops_head = op->next;
        snprintf(full, sizeof full, "%s: %s", pe_coll_desc(&m->base, &op->a, desc, sizeof desc), msg);
        pe_work_complete(op->w, PE_ERR_IO, full);
    }
    m->ops_tail = NULL;
    m->a_cur = NULL;
    m->hdr_waiting = 0;
}

static bool mpi_failed(mpi_comm *m, int rc, const char *what) {
    if (rc == MPI_SUCCESS) return false;
    char e[MPI_MAX_ERROR_STRING], msg[MPI_MAX_ERROR_STRING + 128];
    snprintf(msg, sizeof msg, "%s failed: %s (the communicator is unusable now)", what, mpi_err_str(rc, e));
    fail_all(m, msg);
    return true;
}

/* ---- the header: every rank's call, checked by all alike ----------------------------- */

static uint64_t hash_counts(const int64_t *c, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint64_t)c[i]) * 1099511628211ull;
    return h;
}

/* Sets op->st/msg when the ranks' headers say the collective cannot run
 * (pe_mpi_headers_check: the headers are other processes' bytes). */
static void check_headers(mpi_comm *m, mpi_op *op) {
    char why[PE_MPI_WHY_SIZE];
    pe_status st = pe_mpi_headers_check(op->all, m->base.size, why, sizeof why);
    if (st != PE_OK) fail_op(op, st, why);
}

/* After the header: how many chunks (0: nothing moves). */
static void plan_chunks(mpi_comm *m, mpi_op *op) {
    op->checked = true;
    check_headers(m, op);
    if (op->st != PE_OK || op->a.err != PE_OK) {
        op->n_chunks = 0;
        return;
    }
    const pe_coll_args *a = &op->a;
    int64_t es = (int64_t)pe_dtype_size(a->dt);
    switch (a->op) {
    case PE_COLL_BARRIER: op->n_chunks = 1; break;
    case PE_COLL_ALLGATHER:
    case PE_COLL_REDUCE_SCATTER: op->n_chunks = a->total > 0 ? ceil_div(a->total * es, m->chunk_bytes) : 0; break;
    default: op->n_chunks = a->count > 0 ? ceil_div(a->count, m->chunk_bytes / es) : 0; break;
    }
    /* every rank takes the same path: the headers matched, and the window
     * exists on all ranks or on none (shm_setup) */
    op->shm = a->op == PE_COLL_ALLREDUCE && m->win != MPI_WIN_NULL;
    op->chunks_left = op->shm ? 0 : op->n_chunks;
}

/* ---- data steps -------------------------------------------------------------------- */

/* The first step of chunk j of op (LANE_A); NULL + failed comm on MPI errors. */
static chunk *issue_a(mpi_comm *m, mpi_op *op, int64_t j) {
    const pe_coll_args *a = &op->a;
    int n = m->base.size, me = m->base.rank;
    int64_t es = (int64_t)pe_dtype_size(a->dt), K = op->n_chunks;
    chunk *k = calloc(1, sizeof *k);
    int *cnt = k ? calloc((size_t)(4 * n), sizeof *cnt) : NULL;
    if (!cnt) {
        free(k);
        fail_all(m, "out of memory for an MPI chunk");
        return NULL;
    }
    k->op = op;
    k->j = j;
    k->cnt = cnt;
    int *sc = cnt, *sd = cnt + n, *rc = cnt + 2 * n, *rd = cnt + 3 * n;
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Comm cm = m->lane[LANE_A];
    int rcode = MPI_SUCCESS;
    const char *what = "";
    switch (a->op) {
    case PE_COLL_ALLREDUCE:
    case PE_COLL_REDUCE:
    case PE_COLL_REDUCE_SCATTER: {
        /* piece of rank q of this chunk: elements [lo(q), lo(q) + sz(q)) of send */
        size_t send_bytes = 0;
        const char *send = a->recv;
        for (int q = 0; q < n; q++) {
            int64_t lo, hi;
            if (a->op == PE_COLL_REDUCE_SCATTER) {
                lo = op->counts[n + q] + op->counts[q] * j / K;
                hi = op->counts[n + q] + op->counts[q] * (j + 1) / K;
            } else {
                int64_t ch = m->chunk_bytes / es;
                k->b = j * ch;
                k->m = (k->b + ch < a->count ? k->b + ch : a->count) - k->b;
                lo = k->b + k->m * q / n;
                hi = k->b + k->m * (q + 1) / n;
            }
            if (q == me) k->part = hi - lo;
            sc[q] = (int)((hi - lo) * es);
            sd[q] = (int)send_bytes;
            send_bytes += (size_t)sc[q];
        }
        bool pack = a->op == PE_COLL_REDUCE_SCATTER;
        size_t part_bytes = (size_t)(k->part * es);
        /* scratch: [packed send] [n pieces received] [the sum (reduce, not root)] */
        k->scratch = malloc((pack ? send_bytes : 0) + part_bytes * (size_t)(n + 1) + 1);
        if (!k->scratch) {
            free(cnt);
            free(k);
            fail_all(m, "out of memory for an MPI chunk");
            return NULL;
        }
        if (pack) {
            char *p = k->scratch;
            for (int q = 0; q < n; q++) {
                int64_t lo = op->counts[n + q] + op->counts[q] * j / K;
                memcpy(p + sd[q], (const char *)a->send + lo * es, (size_t)sc[q]);
            }
            send = k->scratch;
        } else {
            send = (const char *)a->recv + k->b * es;
        }
        char *recv = k->scratch + (pack ? send_bytes : 0);
        for (int q = 0; q < n; q++) {
            rc[q] = (int)part_bytes;
            rd[q] = (int)(part_bytes * (size_t)q);
        }
        if (!pack) sc[me] = rc[me] = 0; /* in place: this rank's own piece stays where it is (finish_a) */
        what = "MPI_Ialltoallv";
        rcode = MPI_Ialltoallv(send, sc, sd, MPI_BYTE, recv, rc, rd, MPI_BYTE, cm, &r);
    } break;
    case PE_COLL_ALLGATHER: {
        int64_t lo = a->count * j / K, hi = a->count * (j + 1) / K;
        k->b = lo;
        k->part = hi - lo;
        k->scratch = malloc((size_t)(k->part * es) * (size_t)n + 1);
        if (!k->scratch) {
            free(cnt);
            free(k);
            fail_all(m, "out of memory for an MPI chunk");
            return NULL;
        }
        what = "MPI_Iallgather";
        int bytes = (int)(k->part * es);
        rcode = MPI_Iallgather((const char *)a->send + lo * es, bytes, MPI_BYTE, k->scratch, bytes, MPI_BYTE, cm, &r);
    } break;
    case PE_COLL_BROADCAST: {
        int64_t ch = m->chunk_bytes / es;
        k->b = j * ch;
        k->m = (k->b + ch < a->count ? k->b + ch : a->count) - k->b;
        what = "MPI_Ibcast";
        rcode = MPI_Ibcast((char *)a->recv + k->b * es, (int)(k->m * es), MPI_BYTE, a->root, cm, &r);
    } break;
    default:
        what = "MPI_Ibarrier";
        rcode = MPI_Ibarrier(cm, &r);
        break;
    }
    if (rcode != MPI_SUCCESS) {
        free(k->scratch);
        free(cnt);
        free(k);
        mpi_failed(m, rcode, what);
        return NULL;
    }
    m->alive++;
    push_active(m, r, LANE_A, k);
    if (a->op == PE_COLL_ALLREDUCE || a->op == PE_COLL_REDUCE) {
        if (m->b_tail) m->b_tail->next = k;
        else m->b_head = k;
        m->b_tail = k;
    }
    return k;
}

/* The first step of k is done: sum or unpack. */
static void finish_a(mpi_comm *m, chunk *k) {
    mpi_op *op = k->op;
    const pe_coll_args *a = &op->a;
    int n = m->base.size, me = m->base.rank;
    int64_t es = (int64_t)pe_dtype_size(a->dt);
    size_t part_bytes = (size_t)(k->part * es);
    switch (a->op) {
    case PE_COLL_ALLREDUCE:
    case PE_COLL_REDUCE:
    case PE_COLL_REDUCE_SCATTER: {
        size_t packed = 0;
        if (a->op == PE_COLL_REDUCE_SCATTER)
            for (int q = 0; q < n; q++) packed += (size_t)k->cnt[q];
        char *pieces = k->scratch + packed; /* rank q's piece of this rank's part: pieces + q * part_bytes */
        char *own = pieces + part_bytes * (size_t)me; /* this rank's */
        char *dst;
        if (a->op == PE_COLL_REDUCE_SCATTER) {
            dst = (char *)a->recv + (op->counts[me] * k->j / op->n_chunks) * es;
        } else { /* allreduce, reduce: this rank's piece was not sent, it is in place */
            char *mine = (char *)a->recv + (k->b + k->m * me / n) * es;
            dst = a->op == PE_COLL_REDUCE && me != a->root ? k->scratch + part_bytes * (size_t)n : mine;
            if (dst == mine && me >= 2) memcpy(own, mine, part_bytes); /* the first sum would overwrite it */
            else own = mine;
        }
#define PIECE(q) ((q) == me ? own : pieces + part_bytes * (size_t)(q))
        /* rank order: ((p0 + p1) + p2) + ..., the first sum straight into dst */
        if (n == 1) memmove(dst, own, part_bytes);
        else if (dst == PIECE(0)) pe_comm_combine(dst, PIECE(1), k->part, a->dt, a->red); /* rank 0, in place */
        else pe_comm_combine_to(dst, PIECE(0), PIECE(1), k->part, a->dt, a->red);
        for (int q = 2; q < n; q++) pe_comm_combine(dst, PIECE(q), k->part, a->dt, a->red);
#undef PIECE
    } break;
    case PE_COLL_ALLGATHER:
        for (int q = 0; q < n; q++)
            memmove((char *)a->recv + (q * a->count + k->b) * es, k->scratch + part_bytes * (size_t)q, part_bytes);
        break;
    default: break;
    }
}

/* The second step of k (LANE_B): share (allreduce) or gather (reduce) the sums. */
static bool issue_b(mpi_comm *m, chunk *k) {
    const pe_coll_args *a = &k->op->a;
    int n = m->base.size, me = m->base.rank;
    int64_t es = (int64_t)pe_dtype_size(a->dt);
    int *rc = k->cnt + 2 * n, *rd = k->cnt + 3 * n;
    for (int q = 0; q < n; q++) {
        int64_t lo = k->m * q / n, hi = k->m * (q + 1) / n;
        rc[q] = (int)((hi - lo) * es);
        rd[q] = (int)(lo * es);
    }
    char *base = (char *)a->recv + k->b * es;
    MPI_Request r = MPI_REQUEST_NULL;
    int rcode;
    if (a->op == PE_COLL_ALLREDUCE)
        rcode = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, base, rc, rd, MPI_BYTE, m->lane[LANE_B], &r);
    else if (me == a->root)
        rcode = MPI_Igatherv(MPI_IN_PLACE, 0, MPI_BYTE, base, rc, rd, MPI_BYTE, a->root, m->lane[LANE_B], &r);
    else
        rcode = MPI_Igatherv(k->scratch + (size_t)(k->part * es) * (size_t)n, rc[me], MPI_BYTE, NULL, NULL, NULL,
                             MPI_BYTE, a->root, m->lane[LANE_B], &r);
    if (mpi_failed(m, rcode, a->op == PE_COLL_ALLREDUCE ? "MPI_Iallgatherv" : "MPI_Igatherv")) return false;
    push_active(m, r, LANE_B, k);
    return true;
}

static void chunk_done(mpi_comm *m, chunk *k) {
    k->op->chunks_left--;
    m->alive--;
    chunk_free(k);
}

/* ---- the progress thread ---------------------------------------------------------------- */

static bool issue_header(mpi_comm *m, mpi_op *op) {
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_Iallgather(&op->hdr, (int)sizeof(header), MPI_BYTE, op->all, (int)sizeof(header), MPI_BYTE,
                            m->lane[LANE_HDR], &r);
    if (mpi_failed(m, rc, "MPI_Iallgather (the header)")) return false;
    push_active(m, r, LANE_HDR, op);
    return true;
}

/* ---- allreduce through the node's shared memory ------------------------------------------- */

static shm_flag *shm_flags(mpi_comm *m, int q) { return (shm_flag *)m->seg[q]; }
static shm_bell *shm_bell_of(mpi_comm *m, int q) { return (shm_bell *)(m->seg[q] + N_FLAGS * sizeof(shm_flag)); }

/* Bumps bell b and wakes its rank if it sleeps there. seq_cst on both
 * sides (Dekker): either the sleeper's futex sees the new value, or the
 * ringer sees `sleeping`. The window is shared memory between processes:
 * a shared (not FUTEX_PRIVATE) futex. */
static void bell_ring(shm_bell *b) {
    atomic_fetch_add(&b->bell, 1);
    if (atomic_load(&b->sleeping)) syscall(SYS_futex, &b->bell, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Publishes v as this rank's counter f (release: what the counter vouches
 * for is visible first) and rings every other rank, which may sleep on it. */
static void shm_post(mpi_comm *m, int f, int64_t v) {
    atomic_store_explicit(&shm_flags(m, m->base.rank)[f].v, v, memory_order_release);
    for (int q = 0; q < m->base.size; q++)
        if (q != m->base.rank) bell_ring(shm_bell_of(m, q));
}

/* Sleeps on this rank's bell while it still reads `seen`, SHM_NAP_NS at most. */
static void bell_sleep(mpi_comm *m, uint32_t seen) {
    shm_bell *b = shm_bell_of(m, m->base.rank);
    struct timespec ts = {0, SHM_NAP_NS};
    atomic_store(&b->sleeping, 1);
    if (atomic_load(&b->bell) == seen) syscall(SYS_futex, &b->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
    atomic_store(&b->sleeping, 0);
}

/* Every rank finished phase f of step s. */
static bool shm_all_at(mpi_comm *m, int f, int64_t s) {
    for (int q = 0; q < m->base.size; q++)
        if (atomic_load_explicit(&shm_flags(m, q)[f].v, memory_order_acquire) < s) return false;
    return true;
}

static void shm_done(mpi_comm *m, int f) {
    shm_post(m, f, m->shm_step);
    m->shm_phase = (f + 1) % 3;
    m->last_progress = pe_now_s();
}

/* Moves the allreduce op (at a_cur, headers checked) as far as the other
 * ranks allow, one chunk (step) at a time: 0) copy the other ranks' parts
 * of the chunk into this rank's segment, 1) when every rank has, sum this
 * rank's part in rank order from its own buffer and the others' segments,
 * into its buffer, and publish the sum in its segment, 2) when every rank
 * has, copy the others' sums out of their segments. A segment is written
 * again only when every rank finished reading it (phase 2 of the step
 * before). true when anything moved. */
static bool shm_advance(mpi_comm *m, mpi_op *op) {
    const pe_coll_args *a = &op->a;
    int n = m->base.size, me = m->base.rank;
    int64_t es = (int64_t)pe_dtype_size(a->dt), ch = m->chunk_bytes / es;
    int64_t b = op->next_chunk * ch, cm = (b + ch < a->count ? b + ch : a->count) - b;
    char *buf = (char *)a->recv + b * es, *mine = m->seg[me] + SHM_DATA;
#define LO(q) (cm * (q) / n)
#define BYTES(q) ((size_t)((LO((q) + 1) - LO(q)) * es))
    bool did = false;
    while (op->next_chunk < op->n_chunks) {
        if (m->shm_phase == 0) {
            if (!shm_all_at(m, F_READ, m->shm_step)) break;
            m->shm_step++;
            for (int q = 0; q < n; q++)
                if (q != me) memcpy(mine + LO(q) * es, buf + LO(q) * es, BYTES(q));
            shm_done(m, F_COPIED);
        } else if (m->shm_phase == 1) {
            if (!shm_all_at(m, F_COPIED, m->shm_step)) break;
            /* in tiles, so the copy into the segment reads the sums from cache */
            int64_t part = LO(me + 1) - LO(me), tile = SHM_TILE / es;
            for (int64_t t = 0; t < part; t += tile) {
                int64_t tm = part - t < tile ? part - t : tile, off = (LO(me) + t) * es;
                char *dst = buf + off, *own = dst;
                if (me >= 2) { /* the first sum would overwrite it before its turn */
                    own = mine + off;
                    memcpy(own, dst, (size_t)(tm * es));
                }
#define PIECE(q) ((q) == me ? own : m->seg[q] + SHM_DATA + off)
                /* rank order: ((p0 + p1) + p2) + ... */
                if (me == 0) pe_comm_combine(dst, PIECE(1), tm, a->dt, a->red);
                else pe_comm_combine_to(dst, PIECE(0), PIECE(1), tm, a->dt, a->red);
                for (int q = 2; q < n; q++) pe_comm_combine(dst, PIECE(q), tm, a->dt, a->red);
#undef PIECE
                memcpy(mine + off, dst, (size_t)(tm * es));
            }
            shm_done(m, F_SUMMED);
        } else {
            if (!shm_all_at(m, F_SUMMED, m->shm_step)) break;
            for (int q = 0; q < n; q++)
                if (q != me) memcpy(buf + LO(q) * es, m->seg[q] + SHM_DATA + LO(q) * es, BYTES(q));
            shm_done(m, F_READ);
            op->next_chunk++;
            did = true;
            b = op->next_chunk * ch;
            cm = (b + ch < a->count ? b + ch : a->count) - b;
            buf = (char *)a->recv + b * es;
            continue;
        }
        did = true;
    }
#undef LO
#undef BYTES
    return did;
}

/* Headers through the window, in queue order: op seq goes to slot seq %
 * SHM_SLOTS of this rank's segment once every rank has read that slot's
 * last header (F_HDR_READ >= seq - SHM_SLOTS), then F_HDR_POSTED = seq;
 * when every rank has posted seq, the op's headers are copied out and
 * checked as MPI's would be (pe_mpi_headers_check: still other processes'
 * bytes), then F_HDR_READ = seq. The same as the MPI_Iallgather on
 * LANE_HDR, without MPI's latency. true when anything moved. */
static bool shm_headers(mpi_comm *m) {
    int n = m->base.size, me = m->base.rank;
    bool did = false;
    for (mpi_op *op = m->ops_head; op && m->hdr_waiting > 0; op = op->next) {
        if (op->hdr_done) continue;
        if (!op->hdr_posted) {
            if (!shm_all_at(m, F_HDR_READ, op->seq - SHM_SLOTS)) break;
            memcpy(m->seg[me] + SHM_HEAD + (op->seq % SHM_SLOTS) * (int64_t)sizeof(header), &op->hdr, sizeof(header));
            shm_post(m, F_HDR_POSTED, op->seq);
            op->hdr_posted = true;
            m->last_progress = pe_now_s();
            did = true;
        }
        if (!shm_all_at(m, F_HDR_POSTED, op->seq)) break;
        for (int q = 0; q < n; q++)
            memcpy(&op->all[q], m->seg[q] + SHM_HEAD + (op->seq % SHM_SLOTS) * (int64_t)sizeof(header), sizeof(header));
        shm_post(m, F_HDR_READ, op->seq);
        op->hdr_done = true;
        m->hdr_waiting--;
        m->last_progress = pe_now_s();
        did = true;
    }
    return did;
}

/* An allreduce through shared memory, or a header, waits for the other ranks. */
static bool shm_waiting(mpi_comm *m) {
    mpi_op *op = m->a_cur;
    return m->hdr_waiting > 0 || (op && op->checked && op->shm && op->next_chunk < op->n_chunks);
}

/* Issues whatever may go now, in queue order on each lane. */
static bool issue_ready(mpi_comm *m) {
    bool did = false;
    while (m->a_cur && m->a_cur->hdr_done) {
        mpi_op *op = m->a_cur;
        if (!op->checked) plan_chunks(m, op);
        if (op->shm) {
            did |= shm_advance(m, op);
            if (op->next_chunk < op->n_chunks) break;
            m->a_cur = op->next;
            continue;
        }
        if (op->next_chunk < op->n_chunks) {
            if (m->alive >= m->window) break;
            if (!issue_a(m, op, op->next_chunk)) return true;
            op->next_chunk++;
            did = true;
            continue;
        }
        m->a_cur = op->next;
    }
    while (m->b_head && m->b_head->a_done) {
        chunk *k = m->b_head;
        m->b_head = k->next;
        if (!m->b_head) m->b_tail = NULL;
        if (!issue_b(m, k)) return true;
        did = true;
    }
    return did;
}

/* Completes the ops that are done (any order: each its own work). */
static void complete_done(mpi_comm *m) {
    mpi_op **pp = &m->ops_head, *prev = NULL;
    while (*pp) {
        mpi_op *op = *pp;
        if (!(op->checked && op->next_chunk == op->n_chunks && op->chunks_left == 0)) {
            prev = op;
            pp = &op->next;
            continue;
        }
        *pp = op->next;
        if (m->ops_tail == op) m->ops_tail = prev;
        if (m->a_cur == op) m->a_cur = op->next;
        char desc[192], full[sizeof op->msg + 200];
        if (op->st != PE_OK)
            snprintf(full, sizeof full, "%s: %s", pe_coll_desc(&m->base, &op->a, desc, sizeof desc), op->msg);
        pe_work_complete(op->w, op->st, op->st != PE_OK ? full : NULL);
        free(op->counts);
        free(op->all);
        free(op);
    }
}

/* Polls the requests in flight; true when any completed. */
static bool poll_active(mpi_comm *m) {
    if (m->n_act == 0) return false;
    for (int i = 0; i < m->n_act; i++) m->reqs[i] = m->act[i].req;
    int outcount = 0;
    int rc = MPI_Testsome(m->n_act, m->reqs, &outcount, m->idx, MPI_STATUSES_IGNORE);
    if (mpi_failed(m, rc, "MPI_Testsome")) return true;
    if (outcount == MPI_UNDEFINED || outcount == 0) return false;
    for (int i = 0; i < outcount; i++) {
        active *ac = &m->act[m->idx[i]];
        ac->req = MPI_REQUEST_NULL;
        if (ac->lane == LANE_HDR) {
            ((mpi_op *)ac->owner)->hdr_done = true;
        } else if (ac->lane == LANE_A) {
            chunk *k = ac->owner;
            finish_a(m, k);
            k->a_done = true;
            if (k->op->a.op != PE_COLL_ALLREDUCE && k->op->a.op != PE_COLL_REDUCE) chunk_done(m, k);
        } else {
            chunk_done(m, ac->owner);
        }
    }
    int w = 0;
    for (int i = 0; i < m->n_act; i++)
        if (m->act[i].req != MPI_REQUEST_NULL) m->act[w++] = m->act[i];
    m->n_act = w;
    m->last_progress = pe_now_s();
    return true;
}

static void *progress_main(void *arg) {
    mpi_comm *m = arg;
    int idle = 0;
    const bool shm = m->win != MPI_WIN_NULL;
    /* This thread's naps (below) are 10-100 us: with the default 50 us of
     * timer slack a 10 us nap lasted ~60, and 2 ranks across two hosts
     * that share 2 cores with one busy process took 33-36 ms an MLP step
     * instead of 11-12 (docs/benchmarks.md). Best effort: an error leaves
     * the default. */
    (void)prctl(PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0);
    for (;;) {
        /* read before anything is looked at: a ring after this ends the sleep below at once */
        const uint32_t bell = shm ? atomic_load(&shm_bell_of(m, m->base.rank)->bell) : 0;
        pthread_mutex_lock(&m->mu);
        while (!m->sub_head && !m->ops_head && !m->stop) pthread_cond_wait(&m->cv, &m->mu);
        mpi_op *got = m->sub_head;
        m->sub_head = m->sub_tail = NULL;
        bool stop = m->stop;
        pthread_mutex_unlock(&m->mu);
        if (!got && !m->ops_head && stop) break;
        bool did = false;
        while (got) {
            mpi_op *op = got;
            got = op->next;
            op->next = NULL;
            if (m->ops_tail) m->ops_tail->next = op;
            else m->ops_head = op;
            m->ops_tail = op;
            if (!m->a_cur) m->a_cur = op;
            if (atomic_load(&m->broken)) continue;
            op->seq = ++m->seq;
            if (m->win != MPI_WIN_NULL) m->hdr_waiting++; /* shm_headers */
            else issue_header(m, op);
            did = true;
        }
        if (atomic_load(&m->broken)) {
            fail_all(m, m->broken_msg);
            continue;
        }
        did |= poll_active(m);
        if (m->hdr_waiting > 0 && !atomic_load(&m->broken)) did |= shm_headers(m);
        if (!atomic_load(&m->broken)) did |= issue_ready(m);
        complete_done(m);
        if (did) {
            idle = 0;
            continue;
        }
        if ((m->n_act > 0 || shm_waiting(m)) && pe_now_s() - m->last_progress > m->timeout_s) {
            char msg[300];
            snprintf(msg, sizeof msg, "no progress for %.0f s (PE_MPI_TIMEOUT): a peer process has died or has "
                     "not issued this collective; the communicator is unusable now", m->timeout_s);
            fail_all(m, msg);
            continue;
        }
        /* Nothing moved. Within SPIN_S of the last progress of a collective
         * in flight, poll again at once, only yielding the core: the peers'
         * next step is usually microseconds away, and a sleep stalls every
         * rank's next copy (2 ranks, 4 MB, with the default timer slack's
         * ~60 us naps: PE / MPI_Allreduce 1.2-1.3 -> 1.04). Past that a
         * peer is late (still computing, or never issuing the call): yield
         * a while, then nap (10, later 100 us, as asked: TIMER_SLACK_NS)
         * not to eat a core that it may need. */
        bool moving = m->n_act > 0 || shm_waiting(m);
        if (shm && m->n_act == 0 && moving) {
            /* Waiting on the other ranks of this machine alone. Poll for
             * SHM_SPIN_S (they are usually microseconds away), without
             * sched_yield: on a machine with more runnable threads than
             * cores a yield can cost a whole time slice, and a thread that
             * polls holds its share of a core that the others may need
             * (2 ranks on 2 cores and one more busy process: 40 ms a step
             * instead of 4). Then sleep on the bell: the rank that moves
             * next wakes this one. */
            if (pe_now_s() - m->last_progress >= SHM_SPIN_S) bell_sleep(m, bell);
            continue;
        }
        bool fresh = moving && pe_now_s() - m->last_progress < SPIN_S;
        if (fresh || ++idle < 64) {
            sched_yield();
        } else {
            struct timespec ts = {0, (idle < 256 ? 10 : 100) * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* ---- the rank API ---------------------------------------------------------------------- */

static pe_status mpi_start(pe_comm *c, const pe_coll_args *a, pe_work **out) {
    mpi_comm *m = (mpi_comm *)c;
    int n = c->size;
    char desc[192];
    if (atomic_load(&m->broken)) {
        pthread_mutex_lock(&m->mu);
        pe_status st = pe_error(PE_ERR_IO, "%s: %s", pe_coll_desc(c, a, desc, sizeof desc), m->broken_msg);
        pthread_mutex_unlock(&m->mu);
        return st;
    }
    mpi_op *op = calloc(1, sizeof *op);
    header *all = op ? calloc((size_t)n, sizeof *all) : NULL;
    pe_work *w = all ? pe_work_new(NULL) : NULL;
    int64_t *counts = NULL;
    if (w && a->op == PE_COLL_REDUCE_SCATTER && a->err == PE_OK) {
        counts = malloc(sizeof *counts * (size_t)(2 * n + 1));
        if (counts) {
            memcpy(counts, a->counts, sizeof *counts * (size_t)n);
            counts[n] = 0;
            for (int q = 0; q < n; q++) counts[n + q + 1] = counts[n + q] + counts[q];
        }
    }
    if (!w || (a->op == PE_COLL_REDUCE_SCATTER && a->err == PE_OK && !counts)) {
        free(op);
        free(all);
        free(counts);
        if (w) { /* both references: it never runs */
            pe_work_free(w);
            pe_work_free(w);
        }
        return pe_error(PE_ERR_NOMEM, "%s: out of memory", pe_coll_desc(c, a, desc, sizeof desc));
    }
    op->w = w;
    op->a = *a;
    op->a.counts = counts;
    op->a.err_msg = NULL;
    op->counts = counts;
    op->all = all;
    int64_t cnt = a->op == PE_COLL_REDUCE_SCATTER ? a->total : a->count; /* allgather: per rank */
    /* d[1]: the op and, for the reductions, how they combine */
    int64_t d[DESC_N] = {(int64_t)a->tag, (int64_t)a->op + PE_MPI_RED_SHIFT * (int64_t)a->red, a->dt, cnt, a->root,
                         a->err, counts ? (int64_t)hash_counts(counts, n) : 0, DESC_MAGIC};
    if (a->op != PE_COLL_ALLREDUCE && a->op != PE_COLL_REDUCE && a->op != PE_COLL_REDUCE_SCATTER) d[1] = a->op;
    if (a->op == PE_COLL_BARRIER) d[2] = d[3] = d[4] = 0;
    if (a->op == PE_COLL_ALLREDUCE || a->op == PE_COLL_ALLGATHER || a->op == PE_COLL_REDUCE_SCATTER) d[4] = 0;
    memcpy(op->hdr.d, d, sizeof d);
    if (a->err != PE_OK && a->err_msg) { /* its end: the reason */
        size_t len = strlen(a->err_msg), keep = DESC_MSG - 1;
        snprintf(op->hdr.msg, DESC_MSG, "%s%s", len > keep ? "..." : "", a->err_msg + (len > keep ? len - keep + 3 : 0));
    }
    *out = w;
    pthread_mutex_lock(&m->mu);
    if (m->sub_tail) m->sub_tail->next = op;
    else m->sub_head = op;
    m->sub_tail = op;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (m->win != MPI_WIN_NULL) bell_ring(shm_bell_of(m, m->base.rank)); /* it may sleep on the bell */
    return PE_OK;
}

static void mpi_free(pe_comm *c) {
    mpi_comm *m = (mpi_comm *)c;
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL); /* after the queued collectives (or the timeout) */
    if (m->win != MPI_WIN_NULL) MPI_Win_free(&m->win);
    free(m->seg);
    for (int l = 0; l < N_LANES; l++) MPI_Comm_free(&m->lane[l]);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m->act);
    free(m->reqs);
    free(m->idx);
    free(m);
    pthread_mutex_lock(&g_mu);
    g_live--;
    pthread_mutex_unlock(&g_mu);
}

static const pe_comm_ops k_mpi_ops = {"mpi", mpi_start, NULL, NULL, mpi_free};

/* When every rank runs on this node (and no rank's PE_MPI_SHM is 0): a shared
 * window of SHM_DATA + chunk_bytes per rank for the headers and the allreduce. All ranks
 * take the same decision (an MPI_Allreduce of the outcome); on any failure
 * the MPI path serves, as across nodes. Collective: in the constructor. */
static void shm_setup(mpi_comm *m) {
    m->win = MPI_WIN_NULL;
    int n = m->base.size;
    if (n < 2) return;
    /* every rank asks for it with the same segment size, or none uses it */
    bool want = pe_env_number("PE_MPI_SHM", 1, 0, 1) != 0;
    long long v[2] = {want ? m->chunk_bytes : -1, want ? -m->chunk_bytes : -1}, lo[2];
    if (MPI_Allreduce(v, lo, 2, MPI_LONG_LONG, MPI_MIN, m->lane[0]) != MPI_SUCCESS || lo[0] < 0 || lo[0] != -lo[1])
        return;
    int all = 0;
    MPI_Comm node = MPI_COMM_NULL;
    int ok = MPI_Comm_split_type(m->lane[0], MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS;
    int node_n = 0;
    if (ok) MPI_Comm_size(node, &node_n);
    MPI_Win win = MPI_WIN_NULL;
    if (ok && node_n == n) { /* then every rank is in `node`: it allocates with all of them */
        char *base = NULL;
        MPI_Info info;
        MPI_Info_create(&info);
        MPI_Info_set(info, "alloc_shared_noncontig", "true");
        /* + SHM_ALIGN: MPI aligns a rank's segment to no more than 8 or 16
         * bytes (alloc_shared_noncontig packs them in one mapping); each is
         * used from its first 64-byte boundary, which lies at the same
         * offset in every process (the mappings are page-aligned) */
        ok = MPI_Win_allocate_shared((MPI_Aint)(SHM_DATA + m->chunk_bytes + SHM_ALIGN), 1, info, node, &base, &win) ==
             MPI_SUCCESS;
        MPI_Info_free(&info);
        if (ok) MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
        m->seg = ok ? calloc((size_t)n, sizeof *m->seg) : NULL;
        ok = ok && m->seg;
        for (int q = 0; ok && q < n; q++) {
            MPI_Aint size = 0;
            int disp = 0;
            char *p = NULL;
            ok = MPI_Win_shared_query(win, q, &size, &disp, &p) == MPI_SUCCESS &&
                 size >= (MPI_Aint)(SHM_DATA + m->chunk_bytes + SHM_ALIGN);
            m->seg[q] = (char *)(((uintptr_t)p + SHM_ALIGN - 1) & ~(uintptr_t)(SHM_ALIGN - 1));
        }
        if (ok) {
            for (int f = 0; f < N_FLAGS; f++) atomic_store(&shm_flags(m, m->base.rank)[f].v, 0);
            shm_bell *b = shm_bell_of(m, m->base.rank);
            atomic_store(&b->bell, 0);
            atomic_store(&b->sleeping, 0);
        }
    } else {
        ok = 0;
    }
    /* also orders the counters' zeroing before any rank's first step */
    if (MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, m->lane[0]) != MPI_SUCCESS) all = 0;
    if (!all) {
        if (win != MPI_WIN_NULL) MPI_Win_free(&win); /* every rank allocated, or the allocation failed on all */
        free(m->seg);
        m->seg = NULL;
    }
    m->win = all ? win : MPI_WIN_NULL;
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
}

pe_status pe_comm_mpi_new(pe_comm **out) {
    if (!out) return pe_error(PE_ERR_INVALID, "mpi: out is NULL");
    *out = NULL;
    pthread_mutex_lock(&g_mu);
    pe_status st = mpi_init_once();
    if (st != PE_OK) {
        pthread_mutex_unlock(&g_mu);
        return st;
    }
    mpi_comm *m = calloc(1, sizeof *m);
    if (!m) {
        pthread_mutex_unlock(&g_mu);
        return pe_error(PE_ERR_NOMEM, "mpi: out of memory for a communicator");
    }
    int rc = MPI_SUCCESS, l = 0;
    for (; l < N_LANES && rc == MPI_SUCCESS; l++) {
        rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->lane[l]);
        if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(m->lane[l], MPI_ERRORS_RETURN);
    }
    if (rc != MPI_SUCCESS) {
        for (int q = 0; q < l - 1; q++) MPI_Comm_free(&m->lane[q]);
        free(m);
        pthread_mutex_unlock(&g_mu);
        char e[MPI_MAX_ERROR_STRING];
        return pe_error(PE_ERR_IO, "mpi: MPI_Comm_dup of MPI_COMM_WORLD failed: %s", mpi_err_str(rc, e));
    }
    MPI_Comm_rank(m->lane[0], &m->base.rank);
    MPI_Comm_size(m->lane[0], &m->base.size);
    m->base.ops = &k_mpi_ops;
    m->chunk_bytes = (int64_t)pe_env_number("PE_MPI_CHUNK_BYTES", DEFAULT_CHUNK, 4096, 256.0 * (1 << 20));
    m->chunk_bytes &= ~(int64_t)7; /* whole elements of every dtype */
    m->window = (int)pe_env_number("PE_MPI_WINDOW", DEFAULT_WINDOW, 1, 64);
    m->timeout_s = pe_env_number("PE_MPI_TIMEOUT", DEFAULT_TIMEOUT_S, 0.1, 1e9);
    m->last_progress = pe_now_s();
    shm_setup(m);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    if (pthread_create(&m->thread, NULL, progress_main, m) != 0) {
        if (m->win != MPI_WIN_NULL) MPI_Win_free(&m->win);
        free(m->seg);
        for (int q = 0; q < N_LANES; q++) MPI_Comm_free(&m->lane[q]);
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
        free(m);
        pthread_mutex_unlock(&g_mu);
        return pe_error(PE_ERR_NOMEM, "mpi: cannot start the progress thread");
    }
    g_live++;
    pthread_mutex_unlock(&g_mu);
    *out = &m->base;
    return PE_OK;
}

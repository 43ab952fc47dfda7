/* executor/timeline.c — what each thread of a ParallelExecutor did when, as
 * a Chrome trace-event file (open it in https://ui.perfetto.dev or
 * chrome://tracing).
 *
 * Recording: a handle's start and end (CLOCK_MONOTONIC ns) go into one
 * array allocated at construction, at the index an atomic counter hands
 * out: no lock, no allocation, no string copy while a run is going on —
 * an event is the graph, the handle, the step and the two times (32
 * bytes). Past the cap (PE_TIMELINE_MAX_EVENTS, default 2^18 events: 8 MiB
 * of address space of which only the used part is touched, and a file of
 * about 40 MB, ~150 bytes an event, which Perfetto and chrome://tracing
 * still open) events are counted, not kept; the file says so ("capped" in
 * the process's labels and otherData). With the timeline off the executor
 * holds no recorder and pays one branch per run and per asynchronous
 * collective; on, two clock reads and an atomic add per handle (~0.1 us).
 *
 * Writing (at executor free and on pe_pe_write_timeline): op handles go on
 * "place N" tracks (name = op type, args = first output var, place, step),
 * collectives on "comm place N" (issue to completion: a collective spanning
 * every place appears on each place's comm track; an optimizer shard,
 * which sums its range of the gradient and updates it, on its place's),
 * runs on "steps". The scheduler's pool is shared by the places, so two
 * ops of one place can run at once: events of a track are sorted by start
 * and laid out greedily on lanes ("place 0", "place 0 #2", ...) so that
 * every trace thread holds properly nested (here: disjoint) "X" spans, as
 * the viewers need. pid = trainer rank, tid = 1 + track * 100 + lane.
 * Times are absolute CLOCK_MONOTONIC microseconds, so files of ranks on one
 * machine can be shown together.
 *
 * Why names at write time: a run must not pay for strings; the graph (and
 * its op types and var names) lives as long as the executor.
 */
#include "executor/timeline.h"

#include "runtime/internal.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct tl_event {
    int64_t t0, t1;
    const pe_ssa_graph *g; /* NULL: a step (h = 1 when it succeeded) */
    int32_t h;
    int32_t step;
} tl_event;

struct pe_timeline {
    char path[4096];
    int rank;
    int n_places;
    pe_place places[PE_MAX_PLACES];
    tl_event *ev;
    int64_t cap;
    _Atomic int64_t n;     /* events handed out (may exceed cap: the rest were dropped) */
    _Atomic int32_t step;  /* the step the handles now running belong to */
};

pe_status pe_timeline_file_name(const char *prefix, int instance, int rank, char *buf, size_t n) {
    size_t len = strlen(prefix);
    struct stat sb;
    char tag[24] = "";
    if (instance > 0) snprintf(tag, sizeof tag, ".pe%d", instance);
    int w;
    if (len && (prefix[len - 1] == '/' || (stat(prefix, &sb) == 0 && S_ISDIR(sb.st_mode))))
        w = snprintf(buf, n, "%s%stimeline%s.rank%d.json", prefix, prefix[len - 1] == '/' ? "" : "/", tag, rank);
    else if (len > 5 && !strcmp(prefix + len - 5, ".json"))
        w = snprintf(buf, n, "%.*s%s.rank%d.json", (int)(len - 5), prefix, tag, rank);
    else
        w = snprintf(buf, n, "%s%s.rank%d.json", prefix, tag, rank);
    if (!len || w < 0 || (size_t)w >= n)
        return pe_error(PE_ERR_INVALID, "timeline path '%s': %s", prefix,
                        len ? "too long" : "empty (give a directory or a path prefix)");
    return PE_OK;
}

static int64_t max_events_from_env(void) {
    const char *e = getenv("PE_TIMELINE_MAX_EVENTS");
    if (!e || !*e) return PE_TIMELINE_DEFAULT_MAX_EVENTS;
    char *end;
    long long v = strtoll(e, &end, 10);
    if (*end || v < 1 || v > (1ll << 30)) {
        pe_log(PE_LOG_WARN, "PE_TIMELINE_MAX_EVENTS='%s' is not a count from 1 to 2^30: using %d", e,
               PE_TIMELINE_DEFAULT_MAX_EVENTS);
        return PE_TIMELINE_DEFAULT_MAX_EVENTS;
    }
    return v;
}

pe_status pe_timeline_new(const char *prefix, int instance, int rank, int n_places, const pe_place *places, int64_t max_events,
                          pe_timeline **out) {
    *out = NULL;
    pe_timeline *tl = calloc(1, sizeof *tl);
    if (!tl) return pe_error(PE_ERR_NOMEM, "out of memory creating the timeline");
    pe_status st = pe_timeline_file_name(prefix, instance, rank, tl->path, sizeof tl->path);
    if (st != PE_OK) {
        free(tl);
        return st;
    }
    tl->rank = rank;
    tl->n_places = n_places;
    memcpy(tl->places, places, sizeof *places * (size_t)n_places);
    tl->cap = max_events > 0 ? max_events : max_events_from_env();
    tl->ev = calloc((size_t)tl->cap, sizeof *tl->ev);
    if (!tl->ev) {
        long long cap = (long long)tl->cap;
        free(tl);
        return pe_error(PE_ERR_NOMEM, "out of memory for a timeline of %lld events (PE_TIMELINE_MAX_EVENTS)", cap);
    }
    *out = tl;
    return PE_OK;
}

void pe_timeline_free(pe_timeline *tl) {
    if (!tl) return;
    free(tl->ev);
    free(tl);
}

const char *pe_timeline_path(const pe_timeline *tl) { return tl->path; }
int64_t pe_timeline_steps(const pe_timeline *tl) { return atomic_load(&tl->step); }

static void add(pe_timeline *tl, const pe_ssa_graph *g, int32_t h, int32_t step, int64_t t0, int64_t t1) {
    int64_t i = atomic_fetch_add_explicit(&tl->n, 1, memory_order_relaxed);
    if (i < tl->cap) tl->ev[i] = (tl_event){t0, t1, g, h, step};
}

void pe_timeline_handle(pe_timeline *tl, const pe_ssa_graph *g, int h, int64_t t0, int64_t t1) {
    if (g->h[h].kind == PE_HANDLE_JOIN) return;
    add(tl, g, h, atomic_load_explicit(&tl->step, memory_order_relaxed), t0, t1);
}

void pe_timeline_step(pe_timeline *tl, int64_t t0, int64_t t1, bool ok) {
    add(tl, NULL, ok, atomic_load_explicit(&tl->step, memory_order_relaxed), t0, t1);
    atomic_fetch_add_explicit(&tl->step, 1, memory_order_relaxed);
}

/* ---- writing ------------------------------------------------------------ */

enum { TRACK_STEPS = 0, MAX_LANES = 64 };
static int track_ops(int p) { return 1 + 2 * p; }
static int track_comm(int p) { return 2 + 2 * p; }
static int tid_of(int track, int lane) { return 1 + track * 100 + lane; }

typedef struct tl_rec {
    int64_t t0, t1;
    const tl_event *e;
    int track, lane, place;
} tl_rec;

static int rec_cmp(const void *a, const void *b) {
    const tl_rec *x = a, *y = b;
    if (x->track != y->track) return x->track < y->track ? -1 : 1;
    if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
    if (x->t1 != y->t1) return x->t1 > y->t1 ? -1 : 1;
    return x->place - y->place;
}

static void put_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* microseconds with 3 decimals, from ns, without a rounding step */
static void put_us(FILE *f, int64_t ns) {
    if (ns < 0) {
        fputc('-', f);
        ns = -ns;
    }
    fprintf(f, "%" PRId64 ".%03d", ns / 1000, (int)(ns % 1000));
}

static const char *coll_name(pe_handle_kind k) {
    switch (k) {
    case PE_HANDLE_ALLREDUCE: return "allreduce";
    case PE_HANDLE_REDUCE: return "reduce";
    case PE_HANDLE_BCAST: return "broadcast";
    case PE_HANDLE_ALLREDUCE_FUSED: return "allreduce_bucket";
    case PE_HANDLE_ALLGATHER: return "allgather";
    case PE_HANDLE_SCATTER: return "scatter";
    default: return "collective";
    }
}

static void put_event(FILE *f, const pe_timeline *tl, const tl_rec *r) {
    const tl_event *e = r->e;
    char pb[32];
    fprintf(f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", tl->rank, tid_of(r->track, r->lane));
    put_us(f, r->t0);
    fputs(",\"dur\":", f);
    put_us(f, r->t1 - r->t0);
    if (!e->g) {
        fprintf(f, ",\"cat\":\"step\",\"name\":\"step %d\",\"args\":{\"step\":%d,\"ok\":%s}}", e->step, e->step,
                e->h ? "true" : "false");
        return;
    }
    const pe_handle *hd = &e->g->h[e->h];
    pe_place_str(tl->places[r->place], pb, sizeof pb);
    if (hd->kind == PE_HANDLE_OP) {
        const pe_op *op = &e->g->progs[hd->place]->blocks[0].ops[hd->op_idx];
        fputs(",\"cat\":\"op\",\"name\":", f);
        put_json_str(f, op->type);
        fputs(",\"args\":{\"out\":", f);
        put_json_str(f, op->n_outputs && op->outputs[0].n_args ? op->outputs[0].args[0] : "");
        fprintf(f, ",\"op\":%d", hd->op_idx);
    } else if (hd->kind == PE_HANDLE_OPT_SHARD) {
        const pe_op *op = &e->g->progs[hd->root]->blocks[0].ops[hd->op_idx];
        fprintf(f, ",\"cat\":\"comm\",\"name\":");
        put_json_str(f, op->type);
        fputs(",\"args\":{\"var\":", f);
        put_json_str(f, hd->var ? hd->var : "");
        fprintf(f, ",\"shard\":\"%d/%d\"", hd->root, hd->n_shards);
    } else {
        /* a program's collective op (c_allreduce_max, ...) goes by its type */
        fputs(",\"cat\":\"comm\",\"name\":", f);
        put_json_str(f, pe_handle_is_program_collective(hd) ? e->g->progs[0]->blocks[0].ops[hd->op_idx].type
                                                            : coll_name(hd->kind));
        fputs(",\"args\":{\"var\":", f);
        put_json_str(f, hd->var ? hd->var : "");
        if (hd->kind == PE_HANDLE_ALLGATHER || hd->kind == PE_HANDLE_SCATTER) {
            fputs(",\"out\":", f);
            put_json_str(f, hd->vars[0]);
        }
        if (hd->kind == PE_HANDLE_ALLREDUCE_FUSED)
            fprintf(f, ",\"vars\":%d,\"bytes\":%" PRId64, hd->n_vars, hd->bucket_bytes);
        if (hd->kind == PE_HANDLE_REDUCE || hd->kind == PE_HANDLE_BCAST) fprintf(f, ",\"root\":%d", hd->root);
    }
    fprintf(f, ",\"place\":\"%s\",\"step\":%d}}", pb, e->step);
}

static void put_thread(FILE *f, const pe_timeline *tl, int track, int lane) {
    char name[64], pb[32];
    int p = (track - 1) / 2;
    if (track == TRACK_STEPS) snprintf(name, sizeof name, "steps");
    else snprintf(name, sizeof name, "%splace %d (%s)", track % 2 ? "" : "comm ", p,
                  pe_place_str(tl->places[p], pb, sizeof pb));
    if (lane) snprintf(name + strlen(name), sizeof name - strlen(name), " #%d", lane + 1);
    int tid = tid_of(track, lane);
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}}", tl->rank,
            tid, name);
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%d}}",
            tl->rank, tid, tid);
}

/* The records of the kept events: one per track an event goes on. */
static tl_rec *expand(const pe_timeline *tl, int64_t kept, int64_t *n_out) {
    int64_t n = 0;
    for (int64_t i = 0; i < kept; i++) {
        const tl_event *e = &tl->ev[i];
        const pe_handle *hd = e->g ? &e->g->h[e->h] : NULL;
        n += hd && hd->kind != PE_HANDLE_OP && hd->kind != PE_HANDLE_OPT_SHARD ? tl->n_places : 1;
    }
    tl_rec *r = malloc(sizeof *r * (size_t)(n ? n : 1));
    if (!r) return NULL;
    int64_t k = 0;
    for (int64_t i = 0; i < kept; i++) {
        const tl_event *e = &tl->ev[i];
        const pe_handle *hd = e->g ? &e->g->h[e->h] : NULL;
        tl_rec base = {e->t0, e->t1 > e->t0 ? e->t1 : e->t0, e, TRACK_STEPS, 0, 0};
        if (!hd) {
            r[k++] = base;
        } else if (hd->kind == PE_HANDLE_OP || hd->kind == PE_HANDLE_OPT_SHARD) {
            base.place = hd->kind == PE_HANDLE_OP ? hd->place : hd->root;
            base.track = hd->kind == PE_HANDLE_OP ? track_ops(base.place) : track_comm(base.place);
            r[k++] = base;
        } else {
            for (int p = 0; p < tl->n_places; p++) {
                base.place = p;
                base.track = track_comm(p);
                r[k++] = base;
            }
        }
    }
    *n_out = n;
    return r;
}

pe_status pe_timeline_write(pe_timeline *tl, const char *path) {
    if (!path) path = tl->path;
    const int64_t n_all = atomic_load(&tl->n), kept = n_all < tl->cap ? n_all : tl->cap;
    int64_t n = 0;
    tl_rec *r = expand(tl, kept, &n);
    if (!r) return pe_error(PE_ERR_NOMEM, "out of memory writing the timeline '%s'", path);
    qsort(r, (size_t)n, sizeof *r, rec_cmp);
    /* lanes: each record on the first lane of its track that is free by its start */
    int64_t lane_end[MAX_LANES];
    int n_lanes = 0;
    uint8_t used[2 * PE_MAX_PLACES + 1][MAX_LANES] = {{0}};
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || r[i].track != r[i - 1].track) n_lanes = 0;
        int l = 0;
        while (l < n_lanes && lane_end[l] > r[i].t0) l++;
        if (l == MAX_LANES) l = MAX_LANES - 1; /* more overlap than lanes: the last lane nests badly */
        if (l == n_lanes) n_lanes++;
        lane_end[l] = r[i].t1;
        r[i].lane = l;
        used[r[i].track][l] = 1;
    }
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (!f) {
        free(r);
        return pe_error(PE_ERR_NOMEM, "out of memory writing the timeline '%s'", path);
    }
    const int64_t dropped = n_all - kept;
    fprintf(f, "{\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":"
            "\"trainer %d\"}}", tl->rank, tl->rank);
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}}",
            tl->rank, tl->rank);
    if (dropped)
        fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_labels\",\"args\":{\"labels\":\"timeline "
                "capped at %" PRId64 " events (PE_TIMELINE_MAX_EVENTS): the last %" PRId64 " were not kept\"}}",
                tl->rank, tl->cap, dropped);
    for (int t = 0; t <= 2 * tl->n_places; t++)
        for (int l = 0; l < MAX_LANES; l++)
            if (used[t][l] || (l == 0 && (t == TRACK_STEPS || t % 2))) put_thread(f, tl, t, l);
    for (int64_t i = 0; i < n; i++) put_event(f, tl, &r[i]);
    fprintf(f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"rank\":%d,\"places\":%d,\"steps\":%d,"
            "\"events\":%" PRId64 ",\"dropped\":%" PRId64 ",\"max_events\":%" PRId64 ",\"capped\":%s,"
            "\"clock\":\"CLOCK_MONOTONIC\"}}\n",
            tl->rank, tl->n_places, atomic_load(&tl->step), kept, dropped, tl->cap, dropped ? "true" : "false");
    free(r);
    bool bad = ferror(f);
    if (fclose(f) || bad) {
        free(buf);
        return pe_error(PE_ERR_NOMEM, "out of memory writing the timeline '%s'", path);
    }
    pe_status st = pe_write_file_atomic(path, buf, size);
    free(buf);
    return st == PE_OK ? PE_OK : pe_error_wrap(st, "writing the timeline");
}

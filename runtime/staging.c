/* runtime/staging.c — the pinned staging ring (runtime/staging.h).
 *
 * Slot i holds a chunk and an event; `busy` means a copy through the chunk
 * was issued and its event recorded but not yet waited for. Before the host
 * touches a busy chunk it waits on the event. to_device walks the ring from
 * `next` and leaves the last chunks busy (the point: the caller returns while
 * they fly); to_host keeps up to `slots` chunk copies in flight and drains
 * them in order into the destination.
 */
#include "runtime/staging.h"
#include "runtime/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    void *buf;
    void *ev;
    int busy;
} slot;

struct pe_staging {
    pthread_mutex_t mu;
    const pe_staging_ops *ops;
    void *ctx;
    size_t chunk;
    int n, next;
    slot s[64];
    pe_staging_stats st;
    char name[32];
};

pe_staging *pe_staging_new(const pe_staging_ops *ops, void *ctx, size_t chunk, int slots, const char *name) {
    if (!ops || !chunk || slots < 1 || slots > 64) {
        pe_error(PE_ERR_INVALID, "staging ring %s: chunk %zu bytes and %d slots (expected chunk > 0, 1..64 slots)",
                 name ? name : "?", chunk, slots);
        return NULL;
    }
    pe_staging *s = calloc(1, sizeof *s);
    if (!s) {
        pe_error(PE_ERR_NOMEM, "cannot make the staging ring of %s", name ? name : "?");
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->ops = ops;
    s->ctx = ctx;
    s->chunk = chunk;
    s->n = slots;
    snprintf(s->name, sizeof s->name, "%s", name ? name : "?");
    return s;
}

/* Slot i ready for the host: allocated, and no copy through it in flight. */
static pe_status slot_ready(pe_staging *s, int i) {
    slot *sl = &s->s[i];
    if (sl->busy) {
        s->st.waits++;
        sl->busy = 0;
        pe_status st = s->ops->wait(s->ctx, sl->ev);
        if (st != PE_OK) return pe_error_wrap(st, "%s: waiting for a staged copy", s->name);
    }
    if (!sl->buf) {
        sl->buf = s->ops->host_alloc(s->ctx, s->chunk);
        if (!sl->buf) return pe_error_wrap(PE_ERR_NOMEM, "%s: pinned staging chunk of %zu bytes", s->name, s->chunk);
        s->st.pinned += s->chunk;
    }
    if (!sl->ev) {
        sl->ev = s->ops->event_new(s->ctx);
        if (!sl->ev) return pe_error_wrap(PE_ERR_DEVICE, "%s: event for a staging chunk", s->name);
    }
    return PE_OK;
}

/* Queue one chunk copy through slot i and mark it in flight. */
static pe_status issue(pe_staging *s, int i, void *dst, const void *src, size_t n, int to_device) {
    pe_status st = s->ops->copy_async(s->ctx, dst, src, n, to_device);
    if (st == PE_OK) st = s->ops->record(s->ctx, s->s[i].ev);
    if (st != PE_OK)
        return pe_error_wrap(st, "%s: staged %s copy of %zu bytes", s->name, to_device ? "host-to-device" : "device-to-host",
                             n);
    s->s[i].busy = 1;
    s->st.chunks++;
    return PE_OK;
}

pe_status pe_staging_to_device(pe_staging *s, void *dst, const void *src, size_t bytes) {
    pe_status st = PE_OK;
    pthread_mutex_lock(&s->mu);
    for (size_t off = 0; off < bytes && st == PE_OK; off += s->chunk) {
        size_t n = bytes - off < s->chunk ? bytes - off : s->chunk;
        int i = s->next;
        st = slot_ready(s, i);
        if (st != PE_OK) break;
        memcpy(s->s[i].buf, (const char *)src + off, n);
        st = issue(s, i, (char *)dst + off, s->s[i].buf, n, 1);
        s->next = (i + 1) % s->n;
    }
    if (st == PE_OK) s->st.to_device_bytes += bytes;
    pthread_mutex_unlock(&s->mu);
    return st;
}

pe_status pe_staging_to_host(pe_staging *s, void *dst, const void *src, size_t bytes) {
    pe_status st = PE_OK;
    pthread_mutex_lock(&s->mu);
    size_t nchunks = (bytes + s->chunk - 1) / s->chunk, issued = 0, done = 0;
    int base = s->next;
    while (done < nchunks && st == PE_OK) {
        /* Keep up to n chunk copies in flight. */
        while (issued < nchunks && issued - done < (size_t)s->n && st == PE_OK) {
            int i = (int)((base + issued) % (size_t)s->n);
            size_t off = issued * s->chunk, n = bytes - off < s->chunk ? bytes - off : s->chunk;
            st = slot_ready(s, i);
            if (st == PE_OK) st = issue(s, i, s->s[i].buf, (const char *)src + off, n, 0);
            issued++;
        }
        if (st != PE_OK) break;
        int i = (int)((base + done) % (size_t)s->n);
        size_t off = done * s->chunk, n = bytes - off < s->chunk ? bytes - off : s->chunk;
        st = slot_ready(s, i); /* waits for this chunk's copy */
        if (st == PE_OK) memcpy((char *)dst + off, s->s[i].buf, n);
        done++;
    }
    if (st == PE_OK) s->st.to_host_bytes += bytes;
    s->next = (int)((base + issued) % (size_t)s->n);
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Waits for every busy slot; the first failure is returned, all are waited. */
static pe_status drain_locked(pe_staging *s) {
    pe_status first = PE_OK;
    for (int i = 0; i < s->n; i++) {
        if (!s->s[i].busy) continue;
        s->s[i].busy = 0;
        pe_status st = s->ops->wait(s->ctx, s->s[i].ev);
        if (st != PE_OK && first == PE_OK) first = pe_error_wrap(st, "%s: waiting for a staged copy", s->name);
    }
    return first;
}

pe_status pe_staging_drain(pe_staging *s) {
    pthread_mutex_lock(&s->mu);
    pe_status st = drain_locked(s);
    pthread_mutex_unlock(&s->mu);
    return st;
}

void pe_staging_destroy(pe_staging *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    if (drain_locked(s) != PE_OK) pe_log(PE_LOG_ERROR, "%s", pe_last_error());
    for (int i = 0; i < s->n; i++) {
        if (s->s[i].buf) s->ops->host_free(s->ctx, s->s[i].buf);
        if (s->s[i].ev) s->ops->event_free(s->ctx, s->s[i].ev);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

pe_staging_stats pe_staging_get_stats(pe_staging *s) {
    pthread_mutex_lock(&s->mu);
    pe_staging_stats st = s->st;
    pthread_mutex_unlock(&s->mu);
    return st;
}

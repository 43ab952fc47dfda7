/* runtime/transport/zmq.c — the parameter server's sockets on ZeroMQ: the
 * trainer's client (one DEALER per pserver) and the pserver's ROUTER.
 *
 * Client: one per process (Paddle's RPC client singleton), made by the
 * first send/recv/barrier op and freed by pe_ps_trainer_close
 * (exe.close()). Requests carry a sequence number; a call sends all of its
 * requests first (to every endpoint at once), then waits for their replies,
 * polling each DEALER and its socket monitor: a pserver whose connection
 * closes (its process died) or whose heartbeats stop is an error naming
 * the endpoint within the heartbeat timeout, and that connection is closed
 * (its queued messages dropped) so a later call fails at once; Ctrl-C
 * (pe_interrupt) ends a wait within a poll round (100 ms). Tensors go
 * out zero-copy: the data frame points into the tensor's buffer, which is
 * retained until ZeroMQ releases the frame.
 *
 * Server: one ROUTER; the socket monitor reports accepted and closed
 * connections by file descriptor, and each request's ZMQ_SRCFD says which
 * connection carried it, so a closed connection is reported as the loss of
 * the trainer that spoke on it (PE_PS_EV_LOST). Malformed input (wrong
 * frame count, a header msg.c rejects, a data frame that disagrees with the
 * header, a trainer id that changes on one connection) is answered with
 * ERROR and reported as PE_PS_EV_BAD; the server keeps serving. A VALUE
 * reply is copied, or sent zero-copy from the retained tensor buffer when
 * the caller vouches the tensor stays unchanged (sync mode). Closing waits
 * for the trainers to hang up first (pe_ps_server_drain), so the last ACKs
 * are not dropped by linger 0.
 */
#include "runtime/transport/transport.h"

#ifdef PE_WITH_ZMQ

#include "runtime/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define HB_IVL_MS 500
#define HB_TIMEOUT_MS 2000
#define MAX_CONNS 256

static void set_heartbeat(void *sock) {
    int ivl = HB_IVL_MS, to = HB_TIMEOUT_MS, ttl = HB_TIMEOUT_MS, linger = 0;
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TIMEOUT, &to, sizeof to);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TTL, &ttl, sizeof ttl);
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
}

/* "ip:port" -> "tcp://ip:port"; checks the shape (a clear error, not ZeroMQ's EINVAL). */
static pe_status tcp_addr(const char *ep, char *out, size_t n, bool allow_zero) {
    const char *colon = ep ? strrchr(ep, ':') : NULL;
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon == ep || !colon[1] || *end || port < (allow_zero ? 0 : 1) || port > 65535 ||
        strlen(ep) > 200)
        return pe_error(PE_ERR_INVALID, "endpoint '%s' is not ip:port (port 1..65535%s)", ep ? ep : "(null)",
                        allow_zero ? ", or 0 for any free port" : "");
    snprintf(out, n, "tcp://%s", ep);
    return PE_OK;
}

/* Reads one monitor event: *ev = event id, *val = its value (an fd for
 * ACCEPTED / CONNECTED / DISCONNECTED). false when none is waiting. */
static bool read_monitor(void *mon, int *ev, int *val) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return false;
    }
    const unsigned char *d = zmq_msg_data(&m);
    bool ok = zmq_msg_size(&m) >= 6;
    if (ok) {
        uint16_t e;
        uint32_t v;
        memcpy(&e, d, 2);
        memcpy(&v, d + 2, 4);
        *ev = e, *val = (int)v;
    }
    int more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    while (more) { /* the endpoint frame */
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, mon, 0) < 0) more = 0;
        else more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    return ok;
}

static void *g_ctx;
static pthread_once_t g_ctx_once = PTHREAD_ONCE_INIT;
static void make_ctx(void) { g_ctx = zmq_ctx_new(); }
static void *ctx_get(void) {
    pthread_once(&g_ctx_once, make_ctx);
    return g_ctx;
}
static int g_mon_id; /* monitor inproc names; under the caller's lock */
static pthread_mutex_t g_mon_mu = PTHREAD_MUTEX_INITIALIZER;

/* A PAIR socket receiving `sock`'s monitor events. */
static void *monitor_of(void *sock, int events) {
    char addr[64];
    pthread_mutex_lock(&g_mon_mu);
    snprintf(addr, sizeof addr, "inproc://pe-ps-monitor-%d", g_mon_id++);
    pthread_mutex_unlock(&g_mon_mu);
    if (zmq_socket_monitor(sock, addr, events) != 0) return NULL;
    void *mon = zmq_socket(ctx_get(), ZMQ_PAIR);
    if (!mon) return NULL;
    int linger = 0;
    zmq_setsockopt(mon, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(mon, addr) != 0) {
        zmq_close(mon);
        return NULL;
    }
    return mon;
}

static int send_frame(void *sock, const void *data, size_t n, int flags) {
    return zmq_send(sock, data, n, flags) < 0 ? -1 : 0;
}

/* ======================================================================
 * client
 * ====================================================================== */

typedef struct conn {
    char ep[208];
    void *sock, *mon;
    bool up;              /* connected now */
    bool was_up;          /* has been connected */
    char dead[256];       /* non-empty: closed for good, why */
    double first_use;     /* when the first request went out */
} conn;

struct pe_ps_client {
    int trainer_id;
    uint32_t seq;
    int n;
    conn conns[MAX_CONNS];
};

static pe_ps_client *g_client;
static pthread_mutex_t g_client_mu = PTHREAD_MUTEX_INITIALIZER;

pe_status pe_ps_client_get(int trainer_id, pe_ps_client **out) {
    pthread_mutex_lock(&g_client_mu);
    pe_status st = PE_OK;
    if (!g_client) {
        if (!ctx_get()) st = pe_error(PE_ERR_INTERNAL, "ZeroMQ: cannot make a context: %s", zmq_strerror(errno));
        else if (!(g_client = calloc(1, sizeof *g_client))) st = pe_error(PE_ERR_NOMEM, "out of memory (pserver client)");
        else g_client->trainer_id = trainer_id;
    } else if (g_client->trainer_id != trainer_id) {
        st = pe_error(PE_ERR_INVALID, "this process already talks to the pservers as trainer %d; an op says trainer %d "
                      "(one trainer per process: check the trainer_id given to DistributeTranspiler.transpile)",
                      g_client->trainer_id, trainer_id);
    }
    *out = st == PE_OK ? g_client : NULL;
    pthread_mutex_unlock(&g_client_mu);
    return st;
}

static void conn_kill(conn *k, const char *why) {
    if (!k->dead[0]) snprintf(k->dead, sizeof k->dead, "%s", why);
    if (k->sock) zmq_socket_monitor(k->sock, NULL, 0); /* see pe_ps_server_free */
    if (k->mon) zmq_close(k->mon);
    if (k->sock) zmq_close(k->sock);
    k->mon = k->sock = NULL;
    k->up = false;
}

static pe_status conn_of(pe_ps_client *c, const char *ep, conn **out) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->conns[i].ep, ep)) {
            conn *k = &c->conns[i];
            if (k->dead[0])
                return pe_error(PE_ERR_IO, "pserver %s: %s (trainer %d gave up on it)", ep, k->dead, c->trainer_id);
            *out = k;
            return PE_OK;
        }
    if (c->n == MAX_CONNS) return pe_error(PE_ERR_INVALID, "more than %d pserver endpoints", MAX_CONNS);
    char addr[256];
    PE_CHECK(tcp_addr(ep, addr, sizeof addr, false));
    conn *k = &c->conns[c->n];
    memset(k, 0, sizeof *k);
    snprintf(k->ep, sizeof k->ep, "%s", ep);
    k->sock = zmq_socket(ctx_get(), ZMQ_DEALER);
    if (!k->sock) return pe_error(PE_ERR_INTERNAL, "ZeroMQ: cannot make a socket for pserver %s: %s", ep, zmq_strerror(errno));
    set_heartbeat(k->sock);
    /* no high-water mark on the requests either: a SEND of a var over
     * ~500 MiB is more than the default 1000 frames (parts of PE_PS_PART),
     * and a DEALER at its mark blocks in zmq_send, forever if the pserver
     * has died meanwhile. The queued parts are the tensor's own buffer
     * (zero-copy), and wait_all notices a dead pserver. */
    int hwm = 0;
    zmq_setsockopt(k->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    int ivl = 100, ivl_max = 1000;
    zmq_setsockopt(k->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(k->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max);
    k->mon = monitor_of(k->sock, ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED);
    if (!k->mon || zmq_connect(k->sock, addr) != 0) {
        pe_status st = pe_error(PE_ERR_INVALID, "cannot connect to pserver %s: %s", ep, zmq_strerror(errno));
        conn_kill(k, "connect failed");
        return st;
    }
    k->first_use = pe_now_s();
    c->n++;
    *out = k;
    return PE_OK;
}

static void free_retained(void *data, void *hint) {
    (void)data;
    pe_buffer_release((pe_buffer *)hint);
}

/* The last frame: len bytes at part of t's buffer, which ZeroMQ holds (a
 * reference) until sent. 0, -1 (send failed: errno) or -2 (no memory). */
static int send_shared(void *sock, const char *part, size_t len, const pe_tensor *t) {
    zmq_msg_t m;
    pe_buffer_retain(t->buf);
    if (zmq_msg_init_data(&m, (void *)part, len, free_retained, t->buf) != 0) {
        pe_buffer_release(t->buf);
        return -2;
    }
    if (zmq_msg_send(&m, sock, 0) < 0) {
        zmq_msg_close(&m);
        return -1;
    }
    return 0;
}

/* Sends h's message on sock, both ways: a routing-id frame first when peer
 * (the ROUTER's reply), the header frame, then the data: text (an ERROR's,
 * text_len bytes) or t's bytes as one message per part of at most
 * PE_PS_PART (transport.h; every part gets h's header with its offset),
 * zero-copy when share, else copied. On a failure h->offset is the part
 * that failed. 0, -1 (a send failed: errno) or -2 (no memory). */
static int send_msg(void *sock, const void *peer, size_t peer_len, pe_ps_hdr *h, const pe_tensor *t,
                    const char *text, size_t text_len, bool share) {
    do {
        unsigned char buf[PE_PS_MAX_MSG];
        const size_t n = pe_ps_hdr_encode(h, buf);
        const uint64_t len = pe_ps_frame_bytes(h);
        if ((peer && send_frame(sock, peer, peer_len, ZMQ_SNDMORE) != 0) ||
            send_frame(sock, buf, n, len ? ZMQ_SNDMORE : 0) != 0)
            return -1;
        if (len && text) return send_frame(sock, text, text_len, 0);
        const char *part = len ? (const char *)pe_tensor_data(t) + h->offset : NULL;
        const int rc = !part ? 0 : share ? send_shared(sock, part, len, t) : send_frame(sock, part, len, 0);
        if (rc != 0) return rc;
        h->offset += len;
    } while (t && h->offset < h->nbytes);
    return 0;
}

/* Sends one request; t (may be NULL) goes as zero-copy data frames, one
 * message per part, all with the request's sequence number. */
static pe_status conn_send(pe_ps_client *c, conn *k, int type, const char *name, const pe_tensor *t, uint32_t *seq) {
    pe_ps_hdr h;
    memset(&h, 0, sizeof h);
    h.type = type;
    h.trainer_id = c->trainer_id;
    h.seq = *seq = ++c->seq;
    snprintf(h.name, sizeof h.name, "%s", name ? name : "");
    if (t) PE_CHECK(pe_ps_hdr_set_tensor(&h, t));
    if (h.nbytes > (uint64_t)PE_PS_MAX_DATA)
        return pe_error(PE_ERR_INVALID, "pserver %s: var '%s' is %llu bytes; one message carries at most %lld "
                        "(split it into blocks: DistributeTranspiler's slice_var_up)", k->ep, h.name,
                        (unsigned long long)h.nbytes, (long long)PE_PS_MAX_DATA);
    const int rc = send_msg(k->sock, NULL, 0, &h, t, NULL, 0, true);
    if (rc == -2) return pe_error(PE_ERR_NOMEM, "pserver %s: out of memory sending '%s'", k->ep, h.name);
    if (rc != 0)
        return pe_error(PE_ERR_IO, "pserver %s: sending %s '%s': %s", k->ep, pe_ps_type_name(type), h.name,
                        zmq_strerror(errno));
    return PE_OK;
}

/* One pending reply. */
typedef struct pending {
    conn *k;
    uint32_t seq;
    const char *what;     /* "SEND 'w@GRAD'" for messages */
    pe_tensor *out;       /* GET: receives the value */
    const char *name;
    pe_place place;
    bool done;
    uint64_t got;         /* GET: bytes of the value received so far (it comes in parts) */
} pending;

/* Whether a later part's header describes the tensor its first part made. */
static bool same_meta(const pe_ps_hdr *h, const pe_tensor *t) {
    if (h->dtype != t->dtype || h->ndim != t->ndim) return false;
    for (int i = 0; i < h->ndim; i++)
        if (h->dims[i] != t->dims[i]) return false;
    return true;
}

static pe_status take_reply(pe_ps_client *c, conn *k, pending *p, int np) {
    zmq_msg_t frames[3];
    int nf = 0, more = 1;
    pe_status st = PE_OK;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, k->sock, 0) < 0) {
            zmq_msg_close(&m);
            st = pe_error(PE_ERR_IO, "pserver %s: receiving a reply: %s", k->ep, zmq_strerror(errno));
            break;
        }
        more = zmq_msg_more(&m);
        if (nf < 3) frames[nf++] = m;
        else zmq_msg_close(&m);
    }
    pe_ps_hdr h;
    if (st == PE_OK && (nf < 1 || nf > 2))
        st = pe_error(PE_ERR_IO, "pserver %s: a reply of %d frames (1 or 2 expected)", k->ep, nf);
    if (st == PE_OK) st = pe_ps_hdr_decode(zmq_msg_data(&frames[0]), zmq_msg_size(&frames[0]), &h);
    if (st == PE_OK && h.type != PE_PS_ACK && h.type != PE_PS_VALUE && h.type != PE_PS_ERROR)
        st = pe_error(PE_ERR_IO, "pserver %s: sent a %s, not a reply", k->ep, pe_ps_type_name(h.type));
    pending *q = NULL;
    for (int i = 0; st == PE_OK && i < np; i++)
        if (p[i].k == k && p[i].seq == h.seq && !p[i].done) q = &p[i];
    if (st == PE_OK && !q)
        st = pe_error(PE_ERR_IO, "pserver %s: a reply to request %u, which trainer %d is not waiting for", k->ep,
                      h.seq, c->trainer_id);
    size_t dlen = nf == 2 ? zmq_msg_size(&frames[1]) : 0;
    if (st == PE_OK && dlen != pe_ps_frame_bytes(&h))
        st = pe_error(PE_ERR_IO, "pserver %s: reply header announces %llu data bytes, %zu came", k->ep,
                      (unsigned long long)pe_ps_frame_bytes(&h), dlen);
    if (st == PE_OK && h.type == PE_PS_ERROR) {
        st = pe_error(PE_ERR_INVALID, "pserver %s refused %s: %.*s", k->ep, q->what, (int)dlen,
                      dlen ? (const char *)zmq_msg_data(&frames[1]) : "");
        q->done = true;
        for (int i = 0; i < nf; i++) zmq_msg_close(&frames[i]);
        return st; /* the connection is fine: not killed */
    }
    if (st == PE_OK && q->out) {
        if (h.type != PE_PS_VALUE)
            st = pe_error(PE_ERR_IO, "pserver %s: answered %s with %s, not a value", k->ep, q->what,
                          pe_ps_type_name(h.type));
        else if (strcmp(h.name, q->name))
            st = pe_error(PE_ERR_IO, "pserver %s: answered GET '%s' with '%s'", k->ep, q->name, h.name);
        else if (h.offset != q->got)
            st = pe_error(PE_ERR_IO, "pserver %s: sent the part of '%s' at byte %llu where byte %llu was next",
                          k->ep, h.name, (unsigned long long)h.offset, (unsigned long long)q->got);
        else if (h.offset == 0)
            st = pe_tensor_resize(q->out, h.dtype, h.ndim, h.dims, q->place);
        else if (!same_meta(&h, q->out))
            st = pe_error(PE_ERR_IO, "pserver %s: the part of '%s' at byte %llu gives another dtype or shape than "
                          "its first", k->ep, h.name, (unsigned long long)h.offset);
        if (st == PE_OK && dlen) memcpy((char *)pe_tensor_data(q->out) + h.offset, zmq_msg_data(&frames[1]), dlen);
        q->got = h.offset + dlen;
    } else if (st == PE_OK && h.type != PE_PS_ACK) {
        st = pe_error(PE_ERR_IO, "pserver %s: answered %s with %s", k->ep, q->what, pe_ps_type_name(h.type));
    }
    if (q) q->done = st != PE_OK || !q->out || q->got >= h.nbytes;
    for (int i = 0; i < nf; i++) zmq_msg_close(&frames[i]);
    if (st != PE_OK) conn_kill(k, "it broke the protocol");
    return st;
}

/* Waits for every pending reply. */
static pe_status wait_all(pe_ps_client *c, pending *p, int np, double reply_to) {
    const double connect_to = pe_env_number("PE_PS_CONNECT_TIMEOUT", 60, 1e-3, 1e9);
    if (reply_to <= 0) reply_to = pe_env_number("PE_PS_TIMEOUT", 3600, 1e-3, 1e9);
    const double t0 = pe_now_s();
    const unsigned mark = pe_interrupt_mark();
    conn *ks[MAX_CONNS];
    int nk = 0;
    for (int i = 0; i < np; i++) {
        bool seen = false;
        for (int j = 0; j < nk; j++) seen |= ks[j] == p[i].k;
        if (!seen) ks[nk++] = p[i].k;
    }
    zmq_pollitem_t items[2 * MAX_CONNS];
    for (;;) {
        int left = 0;
        for (int i = 0; i < np; i++) left += !p[i].done;
        if (!left) return PE_OK;
        if (pe_interrupted_since(mark)) {
            /* Ctrl-C: its replies cannot be matched later either */
            for (int i = 0; i < np; i++)
                if (!p[i].done && p[i].k->sock) conn_kill(p[i].k, "a request on it was interrupted (Ctrl-C)");
            return pe_interrupted_error();
        }
        for (int j = 0; j < nk; j++) {
            items[2 * j] = (zmq_pollitem_t){ks[j]->sock, 0, ZMQ_POLLIN, 0};
            items[2 * j + 1] = (zmq_pollitem_t){ks[j]->mon, 0, ZMQ_POLLIN, 0};
        }
        if (zmq_poll(items, 2 * nk, 100) < 0 && errno != EINTR)
            return pe_error(PE_ERR_IO, "trainer %d: polling the pserver connections: %s", c->trainer_id,
                            zmq_strerror(errno));
        pe_status first = PE_OK;
        for (int j = 0; j < nk; j++) {
            conn *k = ks[j];
            if (!k->sock) continue;
            while (items[2 * j].revents & ZMQ_POLLIN) {
                pe_status st = take_reply(c, k, p, np);
                if (st != PE_OK && first == PE_OK) first = st;
                if (!k->sock) break;
                int ev = 0;
                size_t sz = sizeof ev;
                zmq_getsockopt(k->sock, ZMQ_EVENTS, &ev, &sz);
                if (!(ev & ZMQ_POLLIN)) break;
            }
            if (!k->sock) continue;
            int ev, val;
            while (read_monitor(k->mon, &ev, &val)) {
                if (ev == ZMQ_EVENT_CONNECTED) k->up = k->was_up = true;
                else if (ev == ZMQ_EVENT_DISCONNECTED) k->up = false;
            }
            bool waiting = false;
            for (int i = 0; i < np; i++) waiting |= p[i].k == k && !p[i].done;
            if (!waiting) continue;
            char why[256] = "";
            if (k->was_up && !k->up)
                snprintf(why, sizeof why, "the connection closed (the pserver process ended, or its host stopped "
                         "answering heartbeats for %d ms)", HB_TIMEOUT_MS);
            else if (!k->was_up && pe_now_s() - k->first_use > connect_to)
                snprintf(why, sizeof why, "no pserver is listening there: waited %.0f s (PE_PS_CONNECT_TIMEOUT)",
                         connect_to);
            else if (pe_now_s() - t0 > reply_to)
                snprintf(why, sizeof why, "no reply within %.0f s (PE_PS_TIMEOUT)", reply_to);
            if (why[0]) {
                const char *what = "a request";
                for (int i = 0; i < np; i++)
                    if (p[i].k == k && !p[i].done) what = p[i].what, p[i].done = true;
                pe_status st = pe_error(PE_ERR_IO, "pserver %s: %s while trainer %d waited for %s", k->ep, why,
                                        c->trainer_id, what);
                conn_kill(k, why);
                if (first == PE_OK) first = st;
            }
        }
        if (first != PE_OK) {
            /* drop this call's other replies: they cannot be matched later */
            for (int i = 0; i < np; i++)
                if (!p[i].done && p[i].k->sock) conn_kill(p[i].k, "an earlier request on it failed");
            return first;
        }
    }
}

#define CLIENT_LOCK pthread_mutex_lock(&g_client_mu)
#define CLIENT_UNLOCK pthread_mutex_unlock(&g_client_mu)

static pe_status request_all(pe_ps_client *c, int n, int type, const char *const *eps, const char *const *names,
                             const pe_tensor *const *tensors, pe_tensor **outs, pe_place place, double reply_to) {
    if (n <= 0) return PE_OK;
    pending *p = calloc((size_t)n, sizeof *p);
    char (*what)[PE_PS_MAX_NAME + 32] = calloc((size_t)n, sizeof *what);
    if (!p || !what) {
        free(p), free(what);
        return pe_error(PE_ERR_NOMEM, "out of memory (pserver requests)");
    }
    pe_status st = PE_OK;
    int np = 0;
    for (int i = 0; i < n && st == PE_OK; i++) {
        conn *k;
        st = conn_of(c, eps[i], &k);
        if (st != PE_OK) break;
        const char *name = names ? names[i] : "";
        if (names) snprintf(what[i], sizeof what[i], "%s '%s'", pe_ps_type_name(type), name);
        else snprintf(what[i], sizeof what[i], "%s", pe_ps_type_name(type));
        p[np] = (pending){k, 0, what[i], outs ? outs[i] : NULL, name, place, false, 0};
        st = conn_send(c, k, type, name, tensors ? tensors[i] : NULL, &p[np].seq);
        if (st == PE_OK) np++;
        else conn_kill(k, "a send failed");
    }
    if (st == PE_OK) st = wait_all(c, p, np, reply_to);
    else
        for (int i = 0; i < np; i++) conn_kill(p[i].k, "an earlier request on it failed");
    free(p);
    free(what);
    return st;
}

pe_status pe_ps_send(pe_ps_client *c, int n, const char *const *eps, const char *const *names,
                     const pe_tensor *const *tensors) {
    for (int i = 0; i < n; i++)
        if (!tensors[i]->buf && pe_tensor_numel(tensors[i]))
            return pe_error(PE_ERR_INVALID, "send to pserver %s: var '%s' has no value", eps[i], names[i]);
    CLIENT_LOCK;
    pe_status st = request_all(c, n, PE_PS_SEND, eps, names, tensors, NULL, pe_place_cpu(0), 0);
    CLIENT_UNLOCK;
    return st;
}

pe_status pe_ps_get(pe_ps_client *c, int n, const char *const *eps, const char *const *names, pe_tensor **outs,
                    pe_place place) {
    CLIENT_LOCK;
    pe_status st = request_all(c, n, PE_PS_GET, eps, names, NULL, outs, place, 0);
    CLIENT_UNLOCK;
    return st;
}

pe_status pe_ps_barrier(pe_ps_client *c, int type, int n, const char *const *eps) {
    CLIENT_LOCK;
    pe_status st = request_all(c, n, type, eps, NULL, NULL, NULL, pe_place_cpu(0), 0);
    CLIENT_UNLOCK;
    return st;
}

pe_status pe_ps_trainer_close(void) {
    CLIENT_LOCK;
    pe_ps_client *c = g_client;
    pe_status st = PE_OK;
    if (c) {
        /* COMPLETE to every live connection, acknowledged within 5 s */
        const char *eps[MAX_CONNS];
        int n = 0;
        for (int i = 0; i < c->n; i++)
            if (!c->conns[i].dead[0] && c->conns[i].was_up) eps[n++] = c->conns[i].ep;
        st = request_all(c, n, PE_PS_COMPLETE, eps, NULL, NULL, NULL, pe_place_cpu(0), 5);
        for (int i = 0; i < c->n; i++) conn_kill(&c->conns[i], "closed");
        if (st != PE_OK) st = pe_error_wrap(st, "trainer %d leaving (exe.close())", c->trainer_id);
        free(c);
        g_client = NULL;
    }
    CLIENT_UNLOCK;
    return st;
}

/* ======================================================================
 * server
 * ====================================================================== */

struct pe_ps_server {
    void *sock, *mon;
    char ep[208];
    int n_fd;
    struct { int fd, trainer; } fds[4 * MAX_CONNS];
    int n_lost;                 /* trainers whose connection closed, not yet reported */
    int lost[4 * MAX_CONNS];
};

static int *fd_trainer(pe_ps_server *s, int fd, bool add);
static void fd_drop(pe_ps_server *s, int fd);

/* Takes every pending monitor event: connections accepted and closed; a
 * closed one that carried a trainer is queued for PE_PS_EV_LOST. */
static void monitor_step(pe_ps_server *s) {
    int ev_id, val;
    while (read_monitor(s->mon, &ev_id, &val)) {
        if (ev_id == ZMQ_EVENT_ACCEPTED) {
            /* Not reset: requests are read first, so this connection's
             * first request may have been taken (and its trainer noted)
             * before this event; a reused fd's old entry was dropped by
             * its DISCONNECTED, which the monitor reports before. */
            fd_trainer(s, val, true);
        } else if (ev_id == ZMQ_EVENT_DISCONNECTED) {
            int *tr = fd_trainer(s, val, false);
            int t = tr ? *tr : -1;
            fd_drop(s, val);
            if (t >= 0 && s->n_lost < (int)(sizeof s->lost / sizeof s->lost[0])) s->lost[s->n_lost++] = t;
        }
    }
}

pe_ps_server *pe_ps_server_new(const char *endpoint, char *bound, size_t bound_size) {
    char addr[256];
    if (tcp_addr(endpoint, addr, sizeof addr, true) != PE_OK) return NULL;
    if (!ctx_get()) {
        pe_error(PE_ERR_INTERNAL, "ZeroMQ: cannot make a context: %s", zmq_strerror(errno));
        return NULL;
    }
    pe_ps_server *s = calloc(1, sizeof *s);
    if (!s) {
        pe_error(PE_ERR_NOMEM, "out of memory (pserver %s)", endpoint);
        return NULL;
    }
    /* ZeroMQ's wildcard port is "*", not 0 */
    const char *colon = strrchr(addr, ':');
    if (!strcmp(colon, ":0")) snprintf(addr + (colon - addr), sizeof addr - (size_t)(colon - addr), ":*");
    s->sock = zmq_socket(ctx_get(), ZMQ_ROUTER);
    if (!s->sock) {
        pe_error(PE_ERR_INTERNAL, "ZeroMQ: cannot make a socket for pserver %s: %s", endpoint, zmq_strerror(errno));
        free(s);
        return NULL;
    }
    set_heartbeat(s->sock);
    /* no high-water mark on the replies: a ROUTER drops what would go over
     * it, and a trainer's GETs of a few large vars are thousands of VALUE
     * parts at once (they share the vars' buffers; their number is bounded by
     * the requests) */
    int hwm = 0;
    zmq_setsockopt(s->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    int64_t max_msg = PE_PS_MAX_DATA;
    zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
    s->mon = monitor_of(s->sock, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED);
    if (!s->mon || zmq_bind(s->sock, addr) != 0) {
        int e = errno;
        pe_error(e == EADDRINUSE ? PE_ERR_IO : PE_ERR_INVALID, "pserver cannot listen on %s: %s%s", endpoint,
                 zmq_strerror(e), e == EADDRINUSE ? " (another process holds the port)" : "");
        pe_ps_server_free(s);
        return NULL;
    }
    char last[256] = "";
    size_t ln = sizeof last;
    zmq_getsockopt(s->sock, ZMQ_LAST_ENDPOINT, last, &ln);
    snprintf(s->ep, sizeof s->ep, "%.200s", strncmp(last, "tcp://", 6) ? endpoint : last + 6);
    if (bound) snprintf(bound, bound_size, "%s", s->ep);
    return s;
}

void pe_ps_server_free(pe_ps_server *s) {
    if (!s) return;
    /* The monitor is stopped before either socket is closed. Closing the
     * PAIR that reads a socket's events first (libzmq 4.3.4) stalled the
     * context's I/O thread, apparently on that socket's closing events with
     * their reader gone: a closed ROUTER kept its port ("Address already in
     * use" for a new server on the endpoint, even 0.5 s later), a closed
     * connection stayed in CLOSE-WAIT, and a new client never connected to
     * a listening server ("no pserver is listening"). */
    if (s->sock) zmq_socket_monitor(s->sock, NULL, 0);
    if (s->mon) zmq_close(s->mon);
    if (s->sock) zmq_close(s->sock);
    free(s);
}

static int *fd_trainer(pe_ps_server *s, int fd, bool add) {
    for (int i = 0; i < s->n_fd; i++)
        if (s->fds[i].fd == fd) return &s->fds[i].trainer;
    if (!add || s->n_fd == (int)(sizeof s->fds / sizeof s->fds[0])) return NULL;
    s->fds[s->n_fd].fd = fd;
    s->fds[s->n_fd].trainer = -1;
    return &s->fds[s->n_fd++].trainer;
}

/* The fd of another connection that carries trainer t, or -1. */
static int fd_of_trainer(const pe_ps_server *s, int t, int fd) {
    for (int i = 0; i < s->n_fd; i++)
        if (s->fds[i].fd != fd && s->fds[i].trainer == t) return s->fds[i].fd;
    return -1;
}

static void fd_drop(pe_ps_server *s, int fd) {
    for (int i = 0; i < s->n_fd; i++)
        if (s->fds[i].fd == fd) {
            s->fds[i] = s->fds[--s->n_fd];
            return;
        }
}

/* A send to trainer ev's peer failed (errno): what, naming the var when a
 * value's data frame (name) was being sent. */
static pe_status reply_failed(const pe_ps_server *s, const pe_ps_event *ev, const char *name) {
    if (name)
        return pe_error(PE_ERR_IO, "pserver %s: sending '%s' to trainer %d: %s", s->ep, name, ev->hdr.trainer_id,
                        zmq_strerror(errno));
    return pe_error(PE_ERR_IO, "pserver %s: replying to trainer %d: %s", s->ep, ev->hdr.trainer_id,
                    zmq_strerror(errno));
}

/* share: t's buffer goes as zero-copy data frames (retained until ZeroMQ
 * has sent them); else it is copied (the scope's tensor may change with the
 * next update). A VALUE goes in parts (send_msg). */
static pe_status reply_t(pe_ps_server *s, const pe_ps_event *ev, int type, const char *name, const pe_tensor *t,
                         const char *text, bool share) {
    pe_ps_hdr h;
    memset(&h, 0, sizeof h);
    h.type = type;
    h.trainer_id = ev->hdr.trainer_id;
    h.seq = ev->hdr.seq;
    snprintf(h.name, sizeof h.name, "%s", name ? name : "");
    if (t) PE_CHECK(pe_ps_hdr_set_tensor(&h, t));
    const size_t tl = text ? strnlen(text, 65536) : 0;
    if (text) h.nbytes = tl;
    const int rc = send_msg(s->sock, ev->peer, ev->peer_len, &h, t, text, tl, share);
    if (rc == -2) return pe_error(PE_ERR_NOMEM, "pserver %s: out of memory sending '%s'", s->ep, h.name);
    return rc ? reply_failed(s, ev, t ? h.name : NULL) : PE_OK;
}

static pe_status reply(pe_ps_server *s, const pe_ps_event *ev, int type, const char *name, const pe_tensor *t,
                       const char *text) {
    return reply_t(s, ev, type, name, t, text, false);
}

pe_status pe_ps_reply_ack(pe_ps_server *s, const pe_ps_event *ev) { return reply(s, ev, PE_PS_ACK, "", NULL, NULL); }
pe_status pe_ps_reply_value(pe_ps_server *s, const pe_ps_event *ev, const pe_tensor *t) {
    return reply(s, ev, PE_PS_VALUE, ev->hdr.name, t, NULL);
}
pe_status pe_ps_reply_value_shared(pe_ps_server *s, const pe_ps_event *ev, const pe_tensor *t) {
    return reply_t(s, ev, PE_PS_VALUE, ev->hdr.name, t, NULL, true);
}
pe_status pe_ps_reply_error(pe_ps_server *s, const pe_ps_event *ev, const char *msg) {
    return reply(s, ev, PE_PS_ERROR, "", NULL, msg);
}

void pe_ps_event_release(pe_ps_event *ev) {
    if (ev->msg_) {
        zmq_msg_close(ev->msg_);
        free(ev->msg_);
    }
    ev->msg_ = NULL;
    ev->data = NULL;
}

/* One message from the ROUTER into ev (REQUEST or BAD). */
static void take_request(pe_ps_server *s, pe_ps_event *ev) {
    zmq_msg_t frames[3];
    int nf = 0, more = 1, fd = -1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s->sock, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (nf == 1) fd = zmq_msg_get(&m, ZMQ_SRCFD);
        if (nf < 3) frames[nf++] = m;
        else {
            zmq_msg_close(&m);
            nf++;
        }
    }
    int kept = nf < 3 ? nf : 3;
    ev->kind = PE_PS_EV_BAD;
    if (kept >= 1) {
        ev->peer_len = zmq_msg_size(&frames[0]) < sizeof ev->peer ? zmq_msg_size(&frames[0]) : sizeof ev->peer;
        memcpy(ev->peer, zmq_msg_data(&frames[0]), ev->peer_len);
    }
    pe_status st = PE_OK;
    if (nf < 2 || nf > 3)
        st = pe_error(PE_ERR_INVALID, "a message of %d frames (a header and at most one data frame expected)",
                      nf - 1);
    if (st == PE_OK) st = pe_ps_hdr_decode(zmq_msg_data(&frames[1]), zmq_msg_size(&frames[1]), &ev->hdr);
    if (st == PE_OK && ev->hdr.type >= PE_PS_ACK)
        st = pe_error(PE_ERR_INVALID, "a %s message: a pserver takes requests only", pe_ps_type_name(ev->hdr.type));
    size_t dlen = nf == 3 ? zmq_msg_size(&frames[2]) : 0;
    if (st == PE_OK && dlen != pe_ps_frame_bytes(&ev->hdr))
        st = pe_error(PE_ERR_INVALID, "%s '%s': the header announces %llu data bytes, the data frame has %zu",
                      pe_ps_type_name(ev->hdr.type), ev->hdr.name,
                      (unsigned long long)pe_ps_frame_bytes(&ev->hdr), dlen);
    if (st == PE_OK && fd >= 0) {
        int *tr = fd_trainer(s, fd, true);
        if (tr && *tr >= 0 && *tr != ev->hdr.trainer_id) {
            /* the fd may be a closed connection's, reused: its DISCONNECTED
             * is already in the monitor (reported before the fd is freed) */
            monitor_step(s);
            tr = fd_trainer(s, fd, true);
        }
        if (tr && *tr >= 0 && *tr != ev->hdr.trainer_id)
            st = pe_error(PE_ERR_INVALID, "trainer %d spoke as trainer %d before on this connection",
                          ev->hdr.trainer_id, *tr);
        if (st == PE_OK && tr && *tr < 0) {
            /* a new connection: its trainer id must not be live on another one
             * (closed ones are dropped by their DISCONNECTED, taken first) */
            int other = fd_of_trainer(s, ev->hdr.trainer_id, fd);
            if (other >= 0) {
                monitor_step(s);
                tr = fd_trainer(s, fd, true);
                other = fd_of_trainer(s, ev->hdr.trainer_id, fd);
            }
            if (other >= 0)
                st = pe_error(PE_ERR_INVALID, "trainer %d is already connected to this pserver on another connection: "
                              "two trainer processes with the same trainer id (PADDLE_TRAINER_ID)?",
                              ev->hdr.trainer_id);
        }
        if (st == PE_OK && tr) *tr = ev->hdr.trainer_id;
    }
    if (st != PE_OK) {
        snprintf(ev->error, sizeof ev->error, "%s", pe_last_error());
        if (kept >= 1) reply(s, ev, PE_PS_ERROR, "", NULL, ev->error);
        for (int i = 0; i < kept; i++) zmq_msg_close(&frames[i]);
        return;
    }
    ev->kind = PE_PS_EV_REQUEST;
    zmq_msg_close(&frames[0]);
    zmq_msg_close(&frames[1]);
    if (nf == 3) {
        /* kept until released: the data is summed in place (zero-copy); a
         * small message's data may sit unaligned inside the zmq_msg_t. The
         * sums read it as float / double: 8-byte alignment is all they need
         * (a large message's data follows libzmq's 40-byte header in its
         * malloc block, so it is 8- but not 16-aligned: requiring 16 copied
         * every large gradient once more) */
        zmq_msg_t *held = malloc(sizeof *held);
        if (held && ((uintptr_t)zmq_msg_data(&frames[2]) % 8) == 0) {
            *held = frames[2];
            ev->msg_ = held;
            ev->data = zmq_msg_data(held);
        } else if (held && zmq_msg_init_size(held, dlen) == 0) {
            memcpy(zmq_msg_data(held), zmq_msg_data(&frames[2]), dlen);
            zmq_msg_close(&frames[2]);
            ev->msg_ = held;
            ev->data = zmq_msg_data(held);
        } else {
            free(held);
            zmq_msg_close(&frames[2]);
            ev->kind = PE_PS_EV_BAD;
            snprintf(ev->error, sizeof ev->error, "out of memory holding '%.300s' from trainer %d", ev->hdr.name,
                     ev->hdr.trainer_id);
            reply(s, ev, PE_PS_ERROR, "", NULL, ev->error);
        }
    }
}

void pe_ps_server_drain(pe_ps_server *s, int timeout_ms) {
    if (!s || !s->mon) return;
    const double end = pe_now_s() + 1e-3 * timeout_ms;
    for (;;) {
        int open = 0;
        for (int i = 0; i < s->n_fd; i++) open += s->fds[i].trainer >= 0;
        const double left = end - pe_now_s();
        if (!open || left <= 0) return;
        zmq_pollitem_t it = {s->mon, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, (long)(1e3 * left) + 1) < 0 && errno != EINTR) return;
        int ev_id, val;
        while (read_monitor(s->mon, &ev_id, &val))
            if (ev_id == ZMQ_EVENT_DISCONNECTED) fd_drop(s, val);
    }
}

pe_status pe_ps_server_poll(pe_ps_server *s, int timeout_ms, pe_ps_event *ev) {
    memset(ev, 0, sizeof *ev);
    zmq_pollitem_t items[2] = {{s->sock, 0, ZMQ_POLLIN, 0}, {s->mon, 0, ZMQ_POLLIN, 0}};
    /* requests first: a trainer's last message is handled before its connection's close */
    for (int round = 0; round < 2; round++) {
        if (s->n_lost) break;
        int ready = zmq_poll(items, 2, round ? timeout_ms : 0);
        if (ready < 0 && errno != EINTR)
            return pe_error(PE_ERR_IO, "pserver %s: poll: %s", s->ep, zmq_strerror(errno));
        if (ready <= 0) continue;
        if (items[0].revents & ZMQ_POLLIN) {
            take_request(s, ev);
            return PE_OK;
        }
        monitor_step(s);
    }
    if (s->n_lost) {
        ev->kind = PE_PS_EV_LOST;
        ev->hdr.trainer_id = s->lost[0];
        memmove(s->lost, s->lost + 1, sizeof s->lost[0] * (size_t)--s->n_lost);
        return PE_OK;
    }
    ev->kind = PE_PS_EV_NONE;
    return PE_OK;
}

#else /* !PE_WITH_ZMQ */

#define NO_ZMQ pe_error(PE_ERR_UNSUPPORTED, "parameter-server transport: PE was built without ZeroMQ " \
                        "(scripts/setup.sh installs libzmq3-dev; cmake -DPE_WITH_ZMQ=ON)")
pe_status pe_ps_client_get(int trainer_id, pe_ps_client **out) {
    (void)trainer_id;
    *out = NULL;
    return NO_ZMQ;
}
pe_status pe_ps_send(pe_ps_client *c, int n, const char *const *eps, const char *const *names,
                     const pe_tensor *const *tensors) {
    (void)c, (void)n, (void)eps, (void)names, (void)tensors;
    return NO_ZMQ;
}
pe_status pe_ps_get(pe_ps_client *c, int n, const char *const *eps, const char *const *names, pe_tensor **outs,
                    pe_place place) {
    (void)c, (void)n, (void)eps, (void)names, (void)outs, (void)place;
    return NO_ZMQ;
}
pe_status pe_ps_barrier(pe_ps_client *c, int type, int n, const char *const *eps) {
    (void)c, (void)type, (void)n, (void)eps;
    return NO_ZMQ;
}
pe_status pe_ps_trainer_close(void) { return PE_OK; }
pe_ps_server *pe_ps_server_new(const char *endpoint, char *bound, size_t bound_size) {
    (void)endpoint, (void)bound, (void)bound_size;
    NO_ZMQ;
    return NULL;
}
void pe_ps_server_drain(pe_ps_server *s, int timeout_ms) { (void)s, (void)timeout_ms; }
void pe_ps_server_free(pe_ps_server *s) { (void)s; }
pe_status pe_ps_server_poll(pe_ps_server *s, int timeout_ms, pe_ps_event *ev) {
    (void)s, (void)timeout_ms, (void)ev;
    return NO_ZMQ;
}
void pe_ps_event_release(pe_ps_event *ev) { (void)ev; }
pe_status pe_ps_reply_ack(pe_ps_server *s, const pe_ps_event *ev) {
    (void)s, (void)ev;
    return NO_ZMQ;
}
pe_status pe_ps_reply_value(pe_ps_server *s, const pe_ps_event *ev, const pe_tensor *t) {
    (void)s, (void)ev, (void)t;
    return NO_ZMQ;
}
pe_status pe_ps_reply_value_shared(pe_ps_server *s, const pe_ps_event *ev, const pe_tensor *t) {
    (void)s, (void)ev, (void)t;
    return NO_ZMQ;
}
pe_status pe_ps_reply_error(pe_ps_server *s, const pe_ps_event *ev, const char *msg) {
    (void)s, (void)ev, (void)msg;
    return NO_ZMQ;
}
#endif

/* runtime/transport/transport.h — the parameter server's messages over
 * ZeroMQ (internal to PE).
 *
 *     // trainer side (ops/cpu/ps.c): one client per process, made on first use
 *     pe_ps_client *c;
 *     PE_CHECK(pe_ps_client_get(trainer_id, &c));
 *     PE_CHECK(pe_ps_send(c, n, eps, names, tensors));      // waits for each receipt
 *     PE_CHECK(pe_ps_barrier(c, PE_PS_SEND_BARRIER, n_eps, eps));
 *     PE_CHECK(pe_ps_get(c, n, eps, names, outs, place));
 *     ...
 *     pe_ps_trainer_close();                                // COMPLETE to every pserver (exe.close())
 *
 *     // server side (executor/pserver.c)
 *     pe_ps_server *s = pe_ps_server_new("127.0.0.1:6174", bound, sizeof bound);
 *     pe_ps_event ev;
 *     while (...) { pe_ps_server_poll(s, 200, &ev); ... pe_ps_reply_ack(s, &ev); pe_ps_event_release(&ev); }
 *
 * Wire format (msg.c, no ZeroMQ in it, so it is fuzzed on its own): every
 * message is one header frame — magic "PEPS", version, type, trainer id,
 * sequence number, dtype, rank, dims, data length, part offset, name — and
 * for tensor messages one data frame with the raw bytes (sent zero-copy:
 * ZeroMQ reads the tensor's buffer; pe_ps_send waits until it is done with
 * it). A SEND or VALUE of more than PE_PS_PART bytes comes as several
 * such messages, one per part, in order, all with the request's sequence
 * number; a SEND is answered once, after its last part. A
 * ROUTER socket at the pserver; one DEALER per (trainer process, pserver).
 * Replies: ACK, VALUE (GET's tensor) or ERROR (the server's message, which
 * the trainer raises naming the endpoint).
 *
 * Liveness: ZeroMQ heartbeats (ZMQ_HEARTBEAT_IVL / _TIMEOUT, 500 ms / 2 s)
 * on both ends and socket monitors: a peer whose process dies closes its
 * TCP connection at once, one that stops answering is dropped by the
 * heartbeat within 2 s. A trainer waiting for a pserver that has gone
 * raises naming the endpoint; the pserver sees a PE_PS_EV_LOST event
 * for the trainer. Before its first connection a trainer waits for a
 * pserver up to PE_PS_CONNECT_TIMEOUT seconds (default 60: trainers may
 * start before the pservers); no reply is awaited longer than
 * PE_PS_TIMEOUT seconds (default 3600) even from a live pserver.
 *
 * Built with PE_WITH_ZMQ; without it every call fails with
 * PE_ERR_UNSUPPORTED naming the missing library.
 */
#ifndef PE_RUNTIME_TRANSPORT_H
#define PE_RUNTIME_TRANSPORT_H

#include "pe/pserver.h"
#include "pe/status.h"
#include "pe/tensor.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PE_PS_MAGIC 0x53504550u  /* "PEPS" little-endian */
#define PE_PS_VERSION 3
#define PE_PS_MAX_NAME 1024
#define PE_PS_MAX_DIMS 8
#define PE_PS_MAX_MSG (1024 + 104)  /* header frame bound: fixed part + name */
/* A SEND or VALUE larger than this goes as several messages, each one
 * header and one data frame of at most PE_PS_PART bytes, in order (offsets
 * 0, PART, 2 PART, ...). ZeroMQ hands a message to the receiver only once
 * all of it has arrived, into one fresh buffer of its size: a 40 MB
 * parameter in one piece landed in memory the kernel had to map and zero
 * each time (glibc maps allocations over 32 MB anew), then was copied into
 * the tensor after the whole transfer. In parts, each is copied into the
 * tensor (VALUE) or summed over the trainers (SEND, sync mode) as it
 * arrives, while the next is on the wire, through buffers glibc reuses. */
#define PE_PS_PART ((uint64_t)1 << 20)
/* Largest data frame (16 GiB). The pserver's ROUTER refuses (drops the
 * connection of) a peer announcing a larger frame before allocating it: the
 * port is open to anyone, and a stray or hostile peer's length prefix
 * (garbage read as a ZMTP 1.0 frame: up to 2^63 bytes) would otherwise be
 * handed to malloc. pe_ps_send refuses a larger tensor with an error. */
#define PE_PS_MAX_DATA ((int64_t)1 << 34)

typedef enum pe_ps_type {
    /* requests (trainer -> pserver) */
    PE_PS_SEND = 1,          /* name + tensor: a gradient (block) */
    PE_PS_GET = 2,           /* name: a persistable var's value */
    PE_PS_SEND_BARRIER = 3,  /* this trainer sent all of this step's gradients */
    PE_PS_FETCH_BARRIER = 4, /* this trainer fetched all parameters */
    PE_PS_COMPLETE = 5,      /* this trainer leaves (exe.close()) */
    /* replies (pserver -> trainer) */
    PE_PS_ACK = 16,
    PE_PS_VALUE = 17,        /* name + tensor */
    PE_PS_ERROR = 18,        /* data frame: the message (text) */
} pe_ps_type;

const char *pe_ps_type_name(int type); /* "SEND", ...; "?" */

/* The decoded header frame. */
typedef struct pe_ps_hdr {
    int type;
    int trainer_id;
    uint32_t seq;
    pe_dtype dtype;
    int ndim;
    int64_t dims[PE_PS_MAX_DIMS];
    uint64_t nbytes;            /* bytes of the tensor (SEND, VALUE) or the text (ERROR); 0: none */
    uint64_t offset;            /* SEND, VALUE: where this message's data frame starts in the tensor's
                                   bytes (a multiple of PE_PS_PART); 0 for every other type */
    char name[PE_PS_MAX_NAME + 1];
} pe_ps_hdr;

/* Encodes h into buf (>= PE_PS_MAX_MSG bytes); returns the length. */
size_t pe_ps_hdr_encode(const pe_ps_hdr *h, unsigned char *buf);
/* Decodes and validates a header frame of `len` bytes: magic, version, a
 * known type, name length and characters, dtype, rank, dims >= 0 and
 * nbytes = numel x dtype size for tensor messages (no overflow). Errors
 * say what was wrong ("header frame of 7 bytes is shorter than ..."). */
pe_status pe_ps_hdr_decode(const void *buf, size_t len, pe_ps_hdr *h);
/* h's tensor meta from t (dtype, dims, nbytes). */
pe_status pe_ps_hdr_set_tensor(pe_ps_hdr *h, const pe_tensor *t);
/* Bytes of the data frame that goes with a decoded header: for a SEND or
 * VALUE the part at h->offset (at most PE_PS_PART), for an ERROR nbytes. */
uint64_t pe_ps_frame_bytes(const pe_ps_hdr *h);

/* ---- trainer side --------------------------------------------------- */

typedef struct pe_ps_client pe_ps_client;

/* The process's client for trainer `trainer_id` (made on first use;
 * borrowed, lives until pe_ps_trainer_close). A second trainer id in
 * the same process is an error. */
pe_status pe_ps_client_get(int trainer_id, pe_ps_client **out);
/* Sends tensors[i] as var names[i] to endpoint eps[i] ("ip:port"), all at
 * once (in parts, zero-copy), then waits for every receipt. */
pe_status pe_ps_send(pe_ps_client *c, int n, const char *const *eps, const char *const *names,
                     const pe_tensor *const *tensors);
/* Fetches var names[i] from eps[i] into outs[i] (resized on place). */
pe_status pe_ps_get(pe_ps_client *c, int n, const char *const *eps, const char *const *names, pe_tensor **outs,
                    pe_place place);
/* PE_PS_SEND_BARRIER or PE_PS_FETCH_BARRIER to each endpoint; waits for every reply. */
pe_status pe_ps_barrier(pe_ps_client *c, int type, int n, const char *const *eps);
/* pe_ps_trainer_close (pe/pserver.h): COMPLETE to every pserver this
 * process reached (each acknowledged within 5 s), then the client is freed. */

/* ---- server side ---------------------------------------------------- */

typedef struct pe_ps_server pe_ps_server;

typedef enum pe_ps_ev_kind {
    PE_PS_EV_NONE = 0,      /* timeout: nothing arrived */
    PE_PS_EV_REQUEST,       /* a valid request: ev->hdr, ev->data */
    PE_PS_EV_LOST,          /* a connection that carried trainer ev->hdr.trainer_id closed or timed out */
    PE_PS_EV_BAD,           /* a malformed message (answered with ERROR already; ev->error says what) */
} pe_ps_ev_kind;

typedef struct pe_ps_event {
    pe_ps_ev_kind kind;
    pe_ps_hdr hdr;
    const void *data;               /* the data frame (nbytes), valid until pe_ps_event_release */
    unsigned char peer[256];        /* ROUTER routing id of the sender */
    size_t peer_len;
    char error[512];
    void *msg_;                     /* internal: the held data frame */
} pe_ps_event;

/* Binds a ROUTER at endpoint "ip:port" (port 0: a free port). `bound`
 * receives "ip:port" as bound. NULL + message naming the endpoint (port in
 * use, bad address). */
pe_ps_server *pe_ps_server_new(const char *endpoint, char *bound, size_t bound_size);
void pe_ps_server_free(pe_ps_server *s); /* accepts NULL */
/* Waits up to timeout_ms until every connection that carried a trainer has
 * closed (a trainer closes its own once COMPLETE is acknowledged): the
 * socket's linger is 0, so freeing it at once could drop the last ACKs. */
void pe_ps_server_drain(pe_ps_server *s, int timeout_ms);
/* Waits up to timeout_ms for one event. */
pe_status pe_ps_server_poll(pe_ps_server *s, int timeout_ms, pe_ps_event *ev);
void pe_ps_event_release(pe_ps_event *ev);
/* Replies to the request in ev. */
pe_status pe_ps_reply_ack(pe_ps_server *s, const pe_ps_event *ev);
pe_status pe_ps_reply_value(pe_ps_server *s, const pe_ps_event *ev, const pe_tensor *t);
/* The same without copying t: ZeroMQ sends from t's buffer (retained), so
 * t must not change until the trainer has the value. Sync mode guarantees
 * that: a trainer's GETs are answered before its next barrier, and the next
 * update waits for every live trainer's barrier. */
pe_status pe_ps_reply_value_shared(pe_ps_server *s, const pe_ps_event *ev, const pe_tensor *t);
pe_status pe_ps_reply_error(pe_ps_server *s, const pe_ps_event *ev, const char *msg);


#ifdef __cplusplus
}
#endif
#endif

/* tests/unit/test_transport.c — the parameter server's transport
 * (runtime/transport: msg.c's header codec, zmq.c's client and server) and
 * the pserver loop (executor/pserver.c) over loopback TCP, in one process.
 *
 * Cases: the header codec round-trips every message type and names the
 * problem in every rejection; a trainer client talks to a server driven by
 * a thread of this test (SEND of fp32 / fp64 / int64 / empty / 8 MB
 * tensors, GET resizing its output, an ERROR reply raised naming the
 * endpoint, barriers); a second trainer id, an endpoint that is not
 * ip:port and a port in use are refused; malformed messages from a raw
 * DEALER (short header, bad magic, missing data frame, 4 frames, a reply
 * as a request) are answered with ERROR and reported as PE_PS_EV_BAD while
 * the server keeps serving, and a raw TCP peer sending garbage does not
 * disturb it; a client fails within ~3 s naming the endpoint when its
 * pserver goes away mid-call, or when none listens (PE_PS_CONNECT_TIMEOUT),
 * and succeeds when the pserver starts late; a server freed right after its
 * last ACK still delivers it, and its port binds again; a connection that
 * spoke as trainer 3 is reported lost as trainer 3, also when its request
 * was read before its connection's ACCEPTED event; a listen_and_serv
 * program run by pe_executor_run on a thread applies SGD to the mean of two
 * trainers' gradients, bit for bit as float32 arithmetic in trainer order
 * (90,300 elements: the sum's tiles on 2 threads; trainer 0: the client;
 * trainer 1: a raw DEALER),
 * refuses a gradient of the wrong shape, and returns PE_OK once both have
 * left.
 *
 * The client is a process singleton (pe_ps_client_get), so every test ends
 * with pe_ps_trainer_close. Every wait is bounded. Skipped (77) when PE was
 * built without ZeroMQ.
 */
#include "tests/unit/op_test_util.h"
#include "runtime/transport/transport.h"

#include <stdlib.h>

#ifdef PE_WITH_ZMQ

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

#define assert_has(s, sub) \
    do { \
        if (!strstr((s), (sub))) fail_msg("'%s' lacks '%s'", (s), (sub)); \
    } while (0)

/* ======================================================================
 * header codec
 * ====================================================================== */

static pe_ps_hdr tensor_hdr(int type, const char *name, pe_dtype dt, int ndim, const int64_t *dims) {
    pe_ps_hdr h;
    memset(&h, 0, sizeof h);
    h.type = type;
    h.trainer_id = 7;
    h.seq = 0xdeadbeefu;
    h.dtype = dt;
    h.ndim = ndim;
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) h.dims[i] = dims[i], n *= (uint64_t)dims[i];
    h.nbytes = n * pe_dtype_size(dt);
    snprintf(h.name, sizeof h.name, "%s", name);
    return h;
}

static void test_hdr_round_trip(void **state) {
    (void)state;
    const int types[] = {PE_PS_SEND, PE_PS_GET, PE_PS_SEND_BARRIER, PE_PS_FETCH_BARRIER,
                         PE_PS_COMPLETE, PE_PS_ACK, PE_PS_VALUE, PE_PS_ERROR};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        pe_ps_hdr h, d;
        if (types[k] == PE_PS_SEND || types[k] == PE_PS_VALUE)
            h = tensor_hdr(types[k], "fc_0.w_0@GRAD.block1", PE_DTYPE_FP64, 3, (int64_t[]){2, 0, 5});
        else
            h = tensor_hdr(types[k], types[k] == PE_PS_GET ? "fc_0.w_0" : "", PE_DTYPE_FP32, 0, NULL);
        if (types[k] != PE_PS_SEND && types[k] != PE_PS_VALUE) {
            h.dtype = 0, h.nbytes = 0;
            if (types[k] == PE_PS_ERROR) h.nbytes = 300; /* the message's length */
        }
        unsigned char buf[PE_PS_MAX_MSG];
        size_t n = pe_ps_hdr_encode(&h, buf);
        assert_int_equal(n, 104 + strlen(h.name));
        if (pe_ps_hdr_decode(buf, n, &d) != PE_OK) fail_msg("%s: %s", pe_ps_type_name(types[k]), pe_last_error());
        assert_int_equal(d.type, h.type);
        assert_int_equal(d.trainer_id, 7);
        assert_int_equal(d.seq, 0xdeadbeefu);
        assert_int_equal(d.nbytes, h.nbytes);
        assert_string_equal(d.name, h.name);
        assert_string_not_equal(pe_ps_type_name(types[k]), "?");
        if (types[k] == PE_PS_SEND || types[k] == PE_PS_VALUE) {
            assert_int_equal(d.dtype, PE_DTYPE_FP64);
            assert_int_equal(d.ndim, 3);
            assert_memory_equal(d.dims, h.dims, sizeof d.dims);
        }
    }
    /* a name of exactly the bound, every dtype */
    pe_ps_hdr h = tensor_hdr(PE_PS_SEND, "", PE_DTYPE_INT64, 2, (int64_t[]){3, 4}), d;
    memset(h.name, 'n', PE_PS_MAX_NAME);
    h.name[PE_PS_MAX_NAME] = 0;
    unsigned char buf[PE_PS_MAX_MSG];
    size_t n = pe_ps_hdr_encode(&h, buf);
    assert_int_equal(n, 104 + PE_PS_MAX_NAME);
    assert_int_equal(pe_ps_hdr_decode(buf, n, &d), PE_OK);
    assert_int_equal(strlen(d.name), PE_PS_MAX_NAME);
    for (int dt = 0; dt < PE_DTYPE_COUNT; dt++) {
        h = tensor_hdr(PE_PS_VALUE, "v", (pe_dtype)dt, 1, (int64_t[]){5});
        n = pe_ps_hdr_encode(&h, buf);
        assert_int_equal(pe_ps_hdr_decode(buf, n, &d), PE_OK);
        assert_int_equal(d.dtype, dt);
        assert_int_equal(d.nbytes, 5 * pe_dtype_size((pe_dtype)dt));
    }
    /* a VALUE's parts: offsets round-trip; the frame of each is a part, the last the rest */
    h = tensor_hdr(PE_PS_VALUE, "v", PE_DTYPE_FP32, 2, (int64_t[]){3, (int64_t)(PE_PS_PART / 4) + 5});
    const uint64_t want_len[] = {PE_PS_PART, PE_PS_PART, PE_PS_PART, 60};
    for (int part = 0; part < 4; part++) {
        h.offset = (uint64_t)part * PE_PS_PART;
        n = pe_ps_hdr_encode(&h, buf);
        assert_int_equal(pe_ps_hdr_decode(buf, n, &d), PE_OK);
        assert_int_equal(d.offset, h.offset);
        assert_int_equal(d.nbytes, 3 * PE_PS_PART + 60);
        assert_int_equal(pe_ps_frame_bytes(&d), want_len[part]);
    }
    h = tensor_hdr(PE_PS_SEND, "g", PE_DTYPE_FP32, 1, (int64_t[]){(int64_t)PE_PS_PART}); /* 4 parts' worth */
    assert_int_equal(pe_ps_frame_bytes(&h), PE_PS_PART);                                  /* a SEND's too */
    h.offset = 3 * PE_PS_PART;
    n = pe_ps_hdr_encode(&h, buf);
    assert_int_equal(pe_ps_hdr_decode(buf, n, &d), PE_OK);
    assert_int_equal(d.offset, 3 * PE_PS_PART);
    pe_ps_hdr er = tensor_hdr(PE_PS_ERROR, "", PE_DTYPE_FP32, 0, NULL);
    er.nbytes = 2 * PE_PS_PART; /* not a tensor: its frame is nbytes */
    assert_int_equal(pe_ps_frame_bytes(&er), 2 * PE_PS_PART);
    /* pe_ps_hdr_set_tensor: meta from a tensor; rank 9 is refused */
    pe_tensor *t = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){3, 2}, NULL);
    h = tensor_hdr(PE_PS_SEND, "x", PE_DTYPE_INT64, 0, NULL);
    assert_int_equal(pe_ps_hdr_set_tensor(&h, t), PE_OK);
    assert_int_equal(h.dtype, PE_DTYPE_FP32);
    assert_int_equal(h.nbytes, 24);
    assert_int_equal(h.dims[1], 2);
    pe_tensor_free(t);
}

/* Encodes h, lets `edit` change the bytes, decodes: must fail naming `want`. */
static void expect_reject(const pe_ps_hdr *h, void (*edit)(unsigned char *, size_t *), const char *want,
                          const char *want2) {
    unsigned char buf[PE_PS_MAX_MSG + 64];
    memset(buf, 0, sizeof buf);
    size_t n = pe_ps_hdr_encode(h, buf);
    if (edit) edit(buf, &n);
    pe_ps_hdr d;
    pe_status st = pe_ps_hdr_decode(buf, n, &d);
    if (st == PE_OK) fail_msg("decoded; expected an error naming '%s'", want);
    assert_int_equal(st, PE_ERR_INVALID);
    assert_has(pe_last_error(), want);
    if (want2) assert_has(pe_last_error(), want2);
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void e_short(unsigned char *b, size_t *n) { (void)b, *n = 7; }
static void e_magic(unsigned char *b, size_t *n) { (void)n, b[0] = 'X'; }
static void e_version(unsigned char *b, size_t *n) { (void)n, b[4] = 1; }
static void e_type(unsigned char *b, size_t *n) { (void)n, b[6] = 9; }
static void e_type_hi(unsigned char *b, size_t *n) { (void)n, b[7] = 1; }
static void e_tid(unsigned char *b, size_t *n) { (void)n, put32(b + 8, 0x80000000u); }
static void e_name_long(unsigned char *b, size_t *n) {
    memset(b + 104, 'a', PE_PS_MAX_NAME + 1);
    *n = 104 + PE_PS_MAX_NAME + 1;
}
static void e_name_ctrl(unsigned char *b, size_t *n) { (void)n, b[104 + 2] = '\n'; }
static void e_name_hi(unsigned char *b, size_t *n) { (void)n, b[104] = 0xc3; }
static void e_name_nul(unsigned char *b, size_t *n) { (void)n, b[104 + 1] = 0; }
static void e_dtype(unsigned char *b, size_t *n) { (void)n, put32(b + 16, 200); }
static void e_rank(unsigned char *b, size_t *n) { (void)n, put32(b + 20, 9); }
static void e_dim_neg(unsigned char *b, size_t *n) { (void)n, put64(b + 24, (uint64_t)-1); }
static void e_dims_overflow(unsigned char *b, size_t *n) {
    (void)n;
    put32(b + 20, 3);
    put64(b + 24, (uint64_t)1 << 40);
    put64(b + 32, (uint64_t)1 << 40);
    put64(b + 40, 1);
}
static void e_bytes_overflow(unsigned char *b, size_t *n) { /* numel fits, x 8 bytes does not */
    (void)n;
    put32(b + 20, 2);
    put64(b + 24, (uint64_t)1 << 31);
    put64(b + 32, (uint64_t)1 << 31);
}
static void e_nbytes(unsigned char *b, size_t *n) { (void)n, put64(b + 88, 13); }
static void e_nbytes100(unsigned char *b, size_t *n) { (void)n, put64(b + 88, 100); }
static void e_error_long(unsigned char *b, size_t *n) { (void)n, put64(b + 88, 65537); }
static void e_offset5(unsigned char *b, size_t *n) { (void)n, put64(b + 96, 5); }
static void e_offset_end(unsigned char *b, size_t *n) { (void)n, put64(b + 96, 3 * PE_PS_PART); }

static void test_hdr_rejects(void **state) {
    (void)state;
    pe_ps_hdr s = tensor_hdr(PE_PS_SEND, "w@GRAD", PE_DTYPE_FP64, 2, (int64_t[]){4, 3});
    pe_ps_hdr b = tensor_hdr(PE_PS_SEND_BARRIER, "", PE_DTYPE_FP32, 0, NULL);
    b.nbytes = 0;
    pe_ps_hdr g = b;
    g.type = PE_PS_GET;
    snprintf(g.name, sizeof g.name, "w");
    pe_ps_hdr e = b;
    e.type = PE_PS_ERROR;
    expect_reject(&s, e_short, "header frame of 7 bytes is shorter than the 104-byte fixed part", NULL);
    expect_reject(&s, e_magic, "does not start with \"PEPS\"", "bytes 58 45 50 53");
    expect_reject(&s, e_version, "protocol version 1, this PE speaks 3", NULL);
    expect_reject(&s, e_type, "unknown message type 9", NULL);
    expect_reject(&s, e_type_hi, "unknown message type 257", NULL);
    expect_reject(&s, e_tid, "trainer id 2147483648 is negative", NULL);
    expect_reject(&s, e_name_long, "var name of 1025 bytes (at most 1024)", NULL);
    expect_reject(&s, e_name_ctrl, "non-printable byte 0x0a at 2", NULL);
    expect_reject(&s, e_name_hi, "non-printable byte 0xc3 at 0", NULL);
    expect_reject(&s, e_name_nul, "non-printable byte 0x00 at 1", NULL);
    pe_ps_hdr noname = s;
    noname.name[0] = 0;
    expect_reject(&noname, NULL, "SEND without a var name", NULL);
    pe_ps_hdr g0 = g;
    g0.name[0] = 0;
    expect_reject(&g0, NULL, "GET without a var name", NULL);
    pe_ps_hdr v0 = s;
    v0.type = PE_PS_VALUE, v0.name[0] = 0;
    expect_reject(&v0, NULL, "VALUE without a var name", NULL);
    expect_reject(&s, e_dtype, "SEND 'w@GRAD': dtype code 200 is not a PE dtype", NULL);
    expect_reject(&s, e_rank, "SEND 'w@GRAD': rank 9 (at most 8)", NULL);
    expect_reject(&s, e_dim_neg, "SEND 'w@GRAD': dim 0 is -1", NULL);
    expect_reject(&s, e_dims_overflow, "the dims overflow 64 bits", NULL);
    expect_reject(&s, e_bytes_overflow, "does not match float64 dims of 4611686018427387904 elements", NULL);
    expect_reject(&s, e_nbytes, "data length 13 bytes does not match float64 dims of 12 elements", NULL);
    expect_reject(&b, e_nbytes100, "SEND_BARRIER '' announces a 100-byte data frame; it carries none", NULL);
    expect_reject(&g, e_nbytes100, "GET 'w' announces a 100-byte data frame", NULL);
    pe_ps_hdr ack = b;
    ack.type = PE_PS_ACK;
    expect_reject(&ack, e_nbytes100, "ACK '' announces a 100-byte data frame", NULL);
    expect_reject(&e, e_error_long, "ERROR message of 65537 bytes (at most 65536)", NULL);
    /* part offsets: a SEND's or VALUE's only, multiples of PE_PS_PART inside the tensor */
    expect_reject(&s, e_offset5, "SEND 'w@GRAD': part offset 5 is not a multiple of 1048576 below its 96 bytes", NULL);
    expect_reject(&g, e_offset5, "GET 'w' has a part offset of 5; only a SEND or a VALUE comes in parts", NULL);
    expect_reject(&b, e_offset5, "SEND_BARRIER '' has a part offset of 5", NULL);
    pe_ps_hdr v = tensor_hdr(PE_PS_VALUE, "w", PE_DTYPE_FP32, 1, (int64_t[]){(int64_t)(3 * PE_PS_PART / 4)});
    expect_reject(&v, e_offset5, "VALUE 'w': part offset 5 is not a multiple of 1048576 below its 3145728 bytes",
                  NULL);
    expect_reject(&v, e_offset_end, "VALUE 'w': part offset 3145728 is not a multiple", NULL);
    /* the fixed part alone with a NULL-free buffer of odd sizes */
    unsigned char zero[200] = {0};
    pe_ps_hdr d;
    for (size_t n = 0; n < sizeof zero; n++) assert_int_equal(pe_ps_hdr_decode(zero, n, &d), PE_ERR_INVALID);
}

/* ======================================================================
 * a server driven by a thread of this test
 * ====================================================================== */

typedef struct srv_thread {
    pe_ps_server *s;
    char ep[256];
    pthread_t th;
    pthread_mutex_t mu;
    int stop;             /* under mu */
    int die_on_barrier;   /* SEND_BARRIER: free the server without replying */
    int die_after_complete; /* COMPLETE: reply, then free the server at once (as the pserver loop does) */
    int start_delay_ms;   /* bind the server only after this (port of ep) */
    /* what came (under mu) */
    int n_requests, n_bad, n_lost, n_complete, n_barriers;
    int n_parts;          /* messages of the last SEND (one per part) */
    pe_ps_hdr last;
    unsigned char *last_data;
    size_t last_len;
    char last_bad[512];
    pe_tensor *value;     /* GET 'w''s answer (copied) */
    pe_tensor *shared;    /* GET 'big''s answer (zero-copy) */
} srv_thread;

static void *srv_main(void *arg) {
    srv_thread *t = arg;
    if (t->start_delay_ms) {
        sleep_ms(t->start_delay_ms);
        t->s = pe_ps_server_new(t->ep, NULL, 0);
        if (!t->s) fprintf(stderr, "late server: %s\n", pe_last_error());
    }
    const double t0 = now_s();
    while (t->s && now_s() - t0 < 60) { /* bounded: no test runs this long */
        pthread_mutex_lock(&t->mu);
        int stop = t->stop;
        pthread_mutex_unlock(&t->mu);
        if (stop) break;
        pe_ps_event ev;
        if (pe_ps_server_poll(t->s, 20, &ev) != PE_OK) {
            fprintf(stderr, "poll: %s\n", pe_last_error());
            break;
        }
        pthread_mutex_lock(&t->mu);
        bool die = false;
        /* a SEND's parts are put together; it is one request, answered after its last part */
        const uint64_t flen = ev.kind == PE_PS_EV_REQUEST ? pe_ps_frame_bytes(&ev.hdr) : 0;
        const bool whole = ev.hdr.type != PE_PS_SEND || ev.hdr.offset + flen >= ev.hdr.nbytes;
        if (ev.kind == PE_PS_EV_REQUEST && ev.hdr.offset == 0) {
            t->last = ev.hdr;
            free(t->last_data);
            t->last_data = ev.hdr.nbytes ? malloc(ev.hdr.nbytes) : NULL;
            t->last_len = ev.hdr.nbytes;
            t->n_parts = 0;
        }
        if (ev.kind == PE_PS_EV_REQUEST) {
            if (flen && t->last_data && ev.hdr.offset + flen <= t->last_len)
                memcpy(t->last_data + ev.hdr.offset, ev.data, flen);
            t->n_parts++;
        }
        if (ev.kind == PE_PS_EV_REQUEST && whole) {
            t->n_requests++;
            switch (ev.hdr.type) {
            case PE_PS_SEND:
                if (!strcmp(ev.hdr.name, "refused")) pe_ps_reply_error(t->s, &ev, "no gradient 'refused' here");
                else pe_ps_reply_ack(t->s, &ev);
                break;
            case PE_PS_GET:
                if (t->value && !strcmp(ev.hdr.name, "w")) pe_ps_reply_value(t->s, &ev, t->value);
                else if (t->shared && !strcmp(ev.hdr.name, "big")) pe_ps_reply_value_shared(t->s, &ev, t->shared);
                else pe_ps_reply_error(t->s, &ev, "has no var");
                break;
            case PE_PS_SEND_BARRIER:
                t->n_barriers++;
                if (t->die_on_barrier) die = true;
                else pe_ps_reply_ack(t->s, &ev);
                break;
            case PE_PS_COMPLETE:
                t->n_complete++;
                pe_ps_reply_ack(t->s, &ev);
                die = t->die_after_complete;
                break;
            default: t->n_barriers++; pe_ps_reply_ack(t->s, &ev); break;
            }
        } else if (ev.kind == PE_PS_EV_BAD) {
            t->n_bad++;
            snprintf(t->last_bad, sizeof t->last_bad, "%s", ev.error);
        } else if (ev.kind == PE_PS_EV_LOST) {
            t->n_lost++;
        }
        pthread_mutex_unlock(&t->mu);
        pe_ps_event_release(&ev);
        if (die) break;
    }
    pe_ps_server_free(t->s);
    t->s = NULL;
    return NULL;
}

static srv_thread *srv_start(const char *ep, int delay_ms) {
    srv_thread *t = calloc(1, sizeof *t);
    assert_non_null(t);
    pthread_mutex_init(&t->mu, NULL);
    t->start_delay_ms = delay_ms;
    if (!delay_ms) {
        t->s = pe_ps_server_new(ep, t->ep, sizeof t->ep);
        if (!t->s) fail_msg("%s", pe_last_error());
    } else {
        snprintf(t->ep, sizeof t->ep, "%s", ep);
    }
    return t;
}
static void srv_run(srv_thread *t) { assert_int_equal(pthread_create(&t->th, NULL, srv_main, t), 0); }
static void srv_stop(srv_thread *t) {
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->th, NULL);
    free(t->last_data);
    pe_tensor_free(t->value);
    pe_tensor_free(t->shared);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* A free loopback port: bind on port 0, read it back, let it go. */
static void free_endpoint(char *ep, size_t n) {
    pe_ps_server *s = pe_ps_server_new("127.0.0.1:0", ep, n);
    if (!s) fail_msg("%s", pe_last_error());
    pe_ps_server_free(s);
    sleep_ms(100); /* zmq_close is asynchronous: the port is let go shortly after */
}

static void close_client(void) {
    if (pe_ps_trainer_close() != PE_OK) fail_msg("pe_ps_trainer_close: %s", pe_last_error());
}

/* ---- client <-> server ---------------------------------------------- */

static void send_one(pe_ps_client *c, srv_thread *t, const char *name, pe_tensor *x) {
    const char *eps[1] = {t->ep}, *names[1] = {name};
    const pe_tensor *ts[1] = {x};
    if (pe_ps_send(c, 1, eps, names, ts) != PE_OK) fail_msg("send '%s': %s", name, pe_last_error());
    pthread_mutex_lock(&t->mu);
    assert_int_equal(t->last.type, PE_PS_SEND);
    assert_string_equal(t->last.name, name);
    assert_int_equal(t->last.trainer_id, 0);
    assert_int_equal(t->last.dtype, x->dtype);
    assert_int_equal(t->last.ndim, x->ndim);
    for (int i = 0; i < x->ndim; i++) assert_int_equal(t->last.dims[i], x->dims[i]);
    assert_int_equal(t->last_len, pe_tensor_nbytes(x));
    if (t->last_len) assert_memory_equal(t->last_data, pe_tensor_data(x), t->last_len);
    pthread_mutex_unlock(&t->mu);
}

static void test_client_server(void **state) {
    (void)state;
    char bound[256];
    srv_thread *t = srv_start("127.0.0.1:0", 0);
    snprintf(bound, sizeof bound, "%s", t->ep);
    assert_has(bound, "127.0.0.1:");
    assert_int_not_equal(atoi(strrchr(bound, ':') + 1), 0);
    t->value = tu_tensor(PE_DTYPE_FP64, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6.5});
    srv_run(t);

    pe_ps_client *c, *c2;
    assert_int_equal(pe_ps_client_get(0, &c), PE_OK);
    assert_int_equal(pe_ps_client_get(0, &c2), PE_OK);
    assert_ptr_equal(c, c2);
    /* one trainer per process */
    assert_int_equal(pe_ps_client_get(1, &c2), PE_ERR_INVALID);
    assert_null(c2);
    tu_assert_error_has("already talks to the pservers as trainer 0", "an op says trainer 1", NULL);

    pe_tensor *f32 = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){4, 3}, (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -12});
    pe_tensor *f64 = tu_tensor(PE_DTYPE_FP64, 1, (int64_t[]){3}, (double[]){0.1, -1e300, 3});
    pe_tensor *i64 = tu_tensor(PE_DTYPE_INT64, 1, (int64_t[]){2}, (double[]){-5, 1e15});
    pe_tensor *empty = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){0, 7}, NULL);
    pe_tensor *big = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){2 * 1024 * 1024}, NULL); /* 8 MB */
    float *bd = pe_tensor_data(big);
    for (int64_t i = 0; i < pe_tensor_numel(big); i++) bd[i] = (float)(i % 1000) * 0.5f;
    send_one(c, t, "w@GRAD", f32);
    send_one(c, t, "d@GRAD", f64);
    send_one(c, t, "ids", i64);
    send_one(c, t, "empty@GRAD", empty);
    send_one(c, t, "big@GRAD", big);
    pthread_mutex_lock(&t->mu);
    assert_int_equal(t->n_parts, 8); /* 8 MB: 8 parts of PE_PS_PART, one reply */
    pthread_mutex_unlock(&t->mu);

    /* several at once to one endpoint: every receipt awaited */
    const char *eps3[3] = {t->ep, t->ep, t->ep}, *names3[3] = {"a", "b", "c"};
    const pe_tensor *ts3[3] = {f32, f64, i64};
    pthread_mutex_lock(&t->mu);
    int before = t->n_requests;
    pthread_mutex_unlock(&t->mu);
    assert_int_equal(pe_ps_send(c, 3, eps3, names3, ts3), PE_OK);
    pthread_mutex_lock(&t->mu);
    assert_int_equal(t->n_requests, before + 3);
    pthread_mutex_unlock(&t->mu);

    /* GET: the value arrives, the output resized to it */
    const char *eps[1] = {t->ep}, *wn[1] = {"w"};
    pe_tensor *out = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){1}, NULL);
    assert_int_equal(pe_ps_get(c, 1, eps, wn, &out, pe_place_cpu(0)), PE_OK);
    tu_assert_dims(out, 2, (int64_t[]){2, 3});
    assert_int_equal(out->dtype, PE_DTYPE_FP64);
    tu_assert_close(out, (double[]){1, 2, 3, 4, 5, 6.5}, 6, 0);

    /* values of several parts (transport.h: PE_PS_PART), copied and zero-copy,
     * a whole number of parts and not; with a one-part one in the same call */
    const int64_t part_numel[] = {(int64_t)(2 * PE_PS_PART / 4), (int64_t)(3 * PE_PS_PART / 4) + 333};
    for (int k = 0; k < 2; k++) {
        pe_tensor *v = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){part_numel[k] / 3, 3}, NULL);
        float *vd = pe_tensor_data(v);
        for (int64_t i = 0; i < pe_tensor_numel(v); i++) vd[i] = (float)i * 0.25f - 7.0f;
        pthread_mutex_lock(&t->mu);
        pe_tensor *copied = tu_tensor(v->dtype, v->ndim, v->dims, NULL);
        assert_non_null(copied);
        memcpy(pe_tensor_data(copied), vd, pe_tensor_nbytes(v));
        pe_tensor_free(t->value), pe_tensor_free(t->shared);
        t->value = copied, t->shared = v;
        pthread_mutex_unlock(&t->mu);
        const char *eps2[3] = {t->ep, t->ep, t->ep}, *names2[3] = {"big", "w", "big"};
        pe_tensor *outs[3] = {tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){1}, NULL), out,
                              tu_tensor(PE_DTYPE_INT64, 1, (int64_t[]){9}, NULL)};
        if (pe_ps_get(c, 3, eps2, names2, outs, pe_place_cpu(0)) != PE_OK) fail_msg("GET: %s", pe_last_error());
        for (int j = 0; j < 3; j++) {
            tu_assert_dims(outs[j], 2, v->dims);
            assert_int_equal(outs[j]->dtype, PE_DTYPE_FP32);
            assert_memory_equal(pe_tensor_data(outs[j]), vd, pe_tensor_nbytes(v));
        }
        pe_tensor_free(outs[0]), pe_tensor_free(outs[2]);
    }

    /* an ERROR reply: the client's error names the endpoint and the server's text */
    const char *rn[1] = {"refused"};
    const pe_tensor *rt[1] = {f32};
    assert_int_equal(pe_ps_send(c, 1, eps, rn, rt), PE_ERR_INVALID);
    char want[600];
    snprintf(want, sizeof want, "pserver %.256s refused SEND 'refused': no gradient 'refused' here", t->ep);
    tu_assert_error_has(want, NULL, NULL);
    const char *nn[1] = {"nothing"};
    assert_int_equal(pe_ps_get(c, 1, eps, nn, &out, pe_place_cpu(0)), PE_ERR_INVALID);
    tu_assert_error_has(t->ep, "GET 'nothing': has no var", NULL);
    /* ... and the connection still serves */
    assert_int_equal(pe_ps_barrier(c, PE_PS_SEND_BARRIER, 1, eps), PE_OK);
    assert_int_equal(pe_ps_barrier(c, PE_PS_FETCH_BARRIER, 1, eps), PE_OK);
    const char *eps2[2] = {t->ep, t->ep};
    assert_int_equal(pe_ps_barrier(c, PE_PS_SEND_BARRIER, 2, eps2), PE_OK);
    pthread_mutex_lock(&t->mu);
    assert_int_equal(t->n_barriers, 4);
    assert_int_equal(t->n_bad, 0);
    pthread_mutex_unlock(&t->mu);

    /* an endpoint that is not ip:port */
    const char *badeps[] = {"127.0.0.1", "127.0.0.1:", ":6174", "127.0.0.1:65536", "127.0.0.1:0", "host:12x"};
    for (size_t i = 0; i < sizeof badeps / sizeof badeps[0]; i++) {
        const char *be[1] = {badeps[i]};
        assert_int_equal(pe_ps_barrier(c, PE_PS_SEND_BARRIER, 1, be), PE_ERR_INVALID);
        tu_assert_error_has("is not ip:port", badeps[i], NULL);
    }
    assert_null(pe_ps_server_new("localhost", NULL, 0));
    tu_assert_error_has("endpoint 'localhost' is not ip:port", NULL, NULL);
    assert_null(pe_ps_server_new("127.0.0.1:99999", NULL, 0));
    tu_assert_error_has("'127.0.0.1:99999' is not ip:port", NULL, NULL);
    /* port in use */
    assert_null(pe_ps_server_new(t->ep, NULL, 0));
    tu_assert_error_has("pserver cannot listen on", t->ep, "in use");

    /* a freed server lets its port go: a new one binds it (the next test's) */
    pe_ps_server *s2 = pe_ps_server_new("127.0.0.1:0", NULL, 0);
    assert_non_null(s2);
    char ep2[256];
    free_endpoint(ep2, sizeof ep2);
    for (int rep = 0; rep < 10; rep++) {
        pe_ps_server *s3 = pe_ps_server_new(ep2, NULL, 0);
        if (!s3) fail_msg("repetition %d: %s", rep, pe_last_error());
        pe_ps_server_free(s3);
        sleep_ms(100);
    }
    pe_ps_server_free(s2);

    close_client(); /* COMPLETE to the server */
    pthread_mutex_lock(&t->mu);
    assert_int_equal(t->n_complete, 1);
    pthread_mutex_unlock(&t->mu);
    assert_int_equal(pe_ps_trainer_close(), PE_OK); /* idempotent */
    /* a new client may take another trainer id */
    assert_int_equal(pe_ps_client_get(1, &c), PE_OK);
    close_client();
    srv_stop(t);
    pe_tensor_free(f32), pe_tensor_free(f64), pe_tensor_free(i64), pe_tensor_free(empty), pe_tensor_free(big);
    pe_tensor_free(out);
}

/* ---- liveness --------------------------------------------------------- */

static void test_pserver_goes_away(void **state) {
    (void)state;
    srv_thread *t = srv_start("127.0.0.1:0", 0);
    t->die_on_barrier = 1;
    srv_run(t);
    pe_ps_client *c;
    assert_int_equal(pe_ps_client_get(0, &c), PE_OK);
    const char *eps[1] = {t->ep};
    const double t0 = now_s();
    assert_int_equal(pe_ps_barrier(c, PE_PS_SEND_BARRIER, 1, eps), PE_ERR_IO);
    const double dt = now_s() - t0;
    if (dt > 3.5) fail_msg("the client noticed after %.1f s", dt);
    char want[600];
    snprintf(want, sizeof want, "pserver %.256s: the connection closed", t->ep);
    tu_assert_error_has(want, "while trainer 0 waited for SEND_BARRIER", NULL);
    /* a later call to that endpoint fails at once */
    assert_int_equal(pe_ps_barrier(c, PE_PS_FETCH_BARRIER, 1, eps), PE_ERR_IO);
    tu_assert_error_has(t->ep, "gave up on it", NULL);
    close_client();
    srv_stop(t);
}

/* The pserver loop frees its server right after acknowledging the last
 * COMPLETE: that ACK must still reach the trainer (pe_ps_trainer_close
 * returns PE_OK). */
static void test_last_ack_delivered(void **state) {
    (void)state;
    for (int rep = 0; rep < 20; rep++) {
        srv_thread *t = srv_start("127.0.0.1:0", 0);
        t->die_after_complete = 1;
        srv_run(t);
        pe_ps_client *c;
        assert_int_equal(pe_ps_client_get(0, &c), PE_OK);
        const char *eps[1] = {t->ep};
        if (pe_ps_barrier(c, PE_PS_SEND_BARRIER, 1, eps) != PE_OK) fail_msg("%s", pe_last_error());
        if (pe_ps_trainer_close() != PE_OK) fail_msg("repetition %d: %s", rep, pe_last_error());
        srv_stop(t);
    }
}

static void test_connect_timeout(void **state) {
    (void)state;
    setenv("PE_PS_CONNECT_TIMEOUT", "1", 1);
    char ep[256];
    free_endpoint(ep, sizeof ep);
    pe_ps_client *c;
    assert_int_equal(pe_ps_client_get(0, &c), PE_OK);
    const char *eps[1] = {ep};
    double t0 = now_s();
    assert_int_equal(pe_ps_barrier(c, PE_PS_SEND_BARRIER, 1, eps), PE_ERR_IO);
    double dt = now_s() - t0;
    if (dt > 2.5 || dt < 0.9) fail_msg("gave up after %.1f s with PE_PS_CONNECT_TIMEOUT=1", dt);
    tu_assert_error_has(ep, "no pserver is listening there: waited 1 s (PE_PS_CONNECT_TIMEOUT)", NULL);
    close_client();

    /* a pserver that starts 0.5 s after the trainer's first request */
    free_endpoint(ep, sizeof ep);
    srv_thread *t = srv_start(ep, 500);
    srv_run(t);
    assert_int_equal(pe_ps_client_get(0, &c), PE_OK);
    t0 = now_s();
    if (pe_ps_barrier(c, PE_PS_SEND_BARRIER, 1, eps) != PE_OK) fail_msg("%s", pe_last_error());
    dt = now_s() - t0;
    if (dt < 0.4) fail_msg("answered after %.2f s, before the server started", dt);
    close_client();
    srv_stop(t);
    unsetenv("PE_PS_CONNECT_TIMEOUT");
}

/* ======================================================================
 * malformed input, driven from this thread (no server thread)
 * ====================================================================== */

/* Polls s until an event other than NONE, for up to 5 s. */
static void poll_event(pe_ps_server *s, pe_ps_event *ev) {
    const double t0 = now_s();
    while (now_s() - t0 < 5) {
        if (pe_ps_server_poll(s, 50, ev) != PE_OK) fail_msg("%s", pe_last_error());
        if (ev->kind != PE_PS_EV_NONE) return;
    }
    fail_msg("no event within 5 s");
}

static void *raw_dealer(void *ctx, const char *ep) {
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    assert_non_null(d);
    int linger = 0, rcv = 5000;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(d, ZMQ_RCVTIMEO, &rcv, sizeof rcv);
    char addr[300];
    snprintf(addr, sizeof addr, "tcp://%s", ep);
    assert_int_equal(zmq_connect(d, addr), 0);
    return d;
}

/* Sends frames[0..n) (lens) from d. */
static void raw_send(void *d, int n, const void *const *frames, const size_t *lens) {
    for (int i = 0; i < n; i++) assert_true(zmq_send(d, frames[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0) >= 0);
}

/* Receives one reply on d: its header (and the ERROR text into text). */
static void raw_reply(void *d, pe_ps_hdr *h, char *text, size_t n) {
    unsigned char buf[PE_PS_MAX_MSG];
    int r = zmq_recv(d, buf, sizeof buf, 0);
    if (r < 0) fail_msg("no reply: %s", zmq_strerror(zmq_errno()));
    assert_int_equal(pe_ps_hdr_decode(buf, (size_t)r, h), PE_OK);
    int more = 0;
    size_t sz = sizeof more;
    zmq_getsockopt(d, ZMQ_RCVMORE, &more, &sz);
    text[0] = 0;
    if (more) {
        int m = zmq_recv(d, text, n - 1, 0);
        assert_true(m >= 0);
        text[(size_t)m < n - 1 ? (size_t)m : n - 1] = 0;
    }
}

static size_t enc(unsigned char *buf, int type, int tid, const char *name, int ndim, const int64_t *dims) {
    pe_ps_hdr h = tensor_hdr(type, name, PE_DTYPE_FP32, ndim, dims);
    h.trainer_id = tid;
    h.seq = 42;
    if (type != PE_PS_SEND && type != PE_PS_VALUE) h.nbytes = 0;
    return pe_ps_hdr_encode(&h, buf);
}

/* A SEND part of a float32 tensor of dims [2] from trainer tid. */
static size_t enc_part(unsigned char *buf, int tid, uint32_t seq, const char *name, const int64_t *dims,
                       uint64_t offset) {
    pe_ps_hdr h = tensor_hdr(PE_PS_SEND, name, PE_DTYPE_FP32, 2, dims);
    h.trainer_id = tid;
    h.seq = seq;
    h.offset = offset;
    return pe_ps_hdr_encode(&h, buf);
}

/* A bad message from d: BAD naming `want`, and an ERROR reply with it. */
static void expect_bad(pe_ps_server *s, void *d, int n, const void *const *frames, const size_t *lens,
                       const char *want) {
    raw_send(d, n, frames, lens);
    pe_ps_event ev;
    poll_event(s, &ev);
    if (ev.kind != PE_PS_EV_BAD) fail_msg("event %d, not BAD, for a message that should say '%s'", ev.kind, want);
    assert_has(ev.error, want);
    pe_ps_event_release(&ev);
    pe_ps_hdr h;
    char text[1024];
    raw_reply(d, &h, text, sizeof text);
    assert_int_equal(h.type, PE_PS_ERROR);
    assert_has(text, want);
}

/* A well-formed SEND_BARRIER from d is served. */
static void expect_served(pe_ps_server *s, void *d, int tid) {
    unsigned char hb[PE_PS_MAX_MSG];
    const void *f[1] = {hb};
    size_t l[1] = {enc(hb, PE_PS_SEND_BARRIER, tid, "", 0, NULL)};
    raw_send(d, 1, f, l);
    pe_ps_event ev;
    poll_event(s, &ev);
    if (ev.kind != PE_PS_EV_REQUEST) fail_msg("event %d (%s), not the request", ev.kind, ev.error);
    assert_int_equal(ev.hdr.type, PE_PS_SEND_BARRIER);
    assert_int_equal(ev.hdr.trainer_id, tid);
    assert_int_equal(pe_ps_reply_ack(s, &ev), PE_OK);
    pe_ps_event_release(&ev);
    pe_ps_hdr h;
    char text[64];
    raw_reply(d, &h, text, sizeof text);
    assert_int_equal(h.type, PE_PS_ACK);
    assert_int_equal(h.seq, 42);
}

static void test_malformed_input(void **state) {
    (void)state;
    char ep[256];
    pe_ps_server *s = pe_ps_server_new("127.0.0.1:0", ep, sizeof ep);
    if (!s) fail_msg("%s", pe_last_error());
    void *ctx = zmq_ctx_new();
    void *d = raw_dealer(ctx, ep);
    unsigned char hb[PE_PS_MAX_MSG], data[128] = {0};

    size_t n = enc(hb, PE_PS_SEND_BARRIER, 0, "", 0, NULL);
    expect_bad(s, d, 1, (const void *[]){hb}, (size_t[]){7}, "header frame of 7 bytes is shorter");
    expect_served(s, d, 0);
    hb[0] = 'Q';
    expect_bad(s, d, 1, (const void *[]){hb}, (size_t[]){n}, "does not start with \"PEPS\"");
    n = enc(hb, PE_PS_SEND, 0, "g", 1, (int64_t[]){25}); /* 100 data bytes announced */
    expect_bad(s, d, 1, (const void *[]){hb}, (size_t[]){n},
               "SEND 'g': the header announces 100 data bytes, the data frame has 0");
    expect_bad(s, d, 2, (const void *[]){hb, data}, (size_t[]){n, 99}, "announces 100 data bytes, the data frame has 99");
    expect_bad(s, d, 4, (const void *[]){hb, data, data, data}, (size_t[]){n, 100, 1, 1},
               "a message of 4 frames (a header and at most one data frame expected)");
    n = enc(hb, PE_PS_ACK, 0, "", 0, NULL);
    expect_bad(s, d, 1, (const void *[]){hb}, (size_t[]){n}, "a ACK message: a pserver takes requests only");
    n = enc(hb, PE_PS_GET, 0, "", 0, NULL);
    expect_bad(s, d, 1, (const void *[]){hb}, (size_t[]){n}, "GET without a var name");
    expect_bad(s, d, 1, (const void *[]){""}, (size_t[]){0}, "header frame of 0 bytes");
    /* one connection, one trainer id */
    expect_served(s, d, 0);
    n = enc(hb, PE_PS_SEND_BARRIER, 1, "", 0, NULL);
    expect_bad(s, d, 1, (const void *[]){hb}, (size_t[]){n}, "trainer 1 spoke as trainer 0 before on this connection");
    /* a valid SEND with data still works */
    n = enc(hb, PE_PS_SEND, 0, "g", 1, (int64_t[]){25});
    raw_send(d, 2, (const void *[]){hb, data}, (size_t[]){n, 100});
    pe_ps_event ev;
    poll_event(s, &ev);
    assert_int_equal(ev.kind, PE_PS_EV_REQUEST);
    assert_int_equal(ev.hdr.nbytes, 100);
    assert_non_null(ev.data);
    assert_memory_equal(ev.data, data, 100);
    assert_int_equal(pe_ps_reply_ack(s, &ev), PE_OK);
    pe_ps_event_release(&ev);
    pe_ps_hdr h;
    char text[64];
    raw_reply(d, &h, text, sizeof text);
    assert_int_equal(h.type, PE_PS_ACK);

    /* a raw TCP peer writing garbage (not ZMTP): dropped by ZeroMQ */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(strrchr(ep, ':') + 1));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 7 + 3);
    memcpy(junk, "GET / HTTP/1.1\r\n\r\n", 18);
    ssize_t w = write(fd, junk, sizeof junk);
    (void)w;
    const double t0 = now_s();
    while (now_s() - t0 < 0.5) { /* only NONE (or BAD: never a request, never LOST) */
        assert_int_equal(pe_ps_server_poll(s, 50, &ev), PE_OK);
        if (ev.kind == PE_PS_EV_REQUEST || ev.kind == PE_PS_EV_LOST) fail_msg("garbage made event %d", ev.kind);
        pe_ps_event_release(&ev);
    }
    close(fd);
    expect_served(s, d, 0);

    zmq_close(d);
    zmq_ctx_term(ctx);
    pe_ps_server_free(s);
}

/* A connection that spoke as trainer 3 closes: LOST, trainer 3. */
/* ---- a pserver that breaks the parts rule -------------------------------- */

typedef struct fake_pserver {
    void *sock;           /* a bound ROUTER, used by the thread only */
    int mode;             /* 0: the first part at the second's offset; 1: a second part of another shape */
} fake_pserver;

static void *fake_main(void *arg) {
    fake_pserver *f = arg;
    unsigned char id[256], hb[PE_PS_MAX_MSG];
    int idn = zmq_recv(f->sock, id, sizeof id, 0), hn = idn > 0 ? zmq_recv(f->sock, hb, sizeof hb, 0) : -1;
    pe_ps_hdr g;
    if (hn < 0 || pe_ps_hdr_decode(hb, (size_t)hn, &g) != PE_OK || g.type != PE_PS_GET) return NULL;
    const int64_t rows = (int64_t)(2 * PE_PS_PART / 4);
    pe_ps_hdr v = tensor_hdr(PE_PS_VALUE, g.name, PE_DTYPE_FP32, 1, &rows);
    v.trainer_id = g.trainer_id, v.seq = g.seq;
    char *data = calloc(1, PE_PS_PART);
    for (int part = f->mode == 0 ? 1 : 0; part < 2 && data; part++) {
        v.offset = (uint64_t)part * PE_PS_PART;
        if (f->mode == 1 && part == 1) v.ndim = 2, v.dims[0] = rows / 2, v.dims[1] = 2; /* the same bytes */
        const size_t n = pe_ps_hdr_encode(&v, hb);
        zmq_send(f->sock, id, (size_t)idn, ZMQ_SNDMORE);
        zmq_send(f->sock, hb, n, ZMQ_SNDMORE);
        zmq_send(f->sock, data, PE_PS_PART, 0);
    }
    free(data);
    sleep_ms(300); /* let the parts go out before the socket closes (linger 0) */
    return NULL;
}

static void test_bad_parts(void **state) {
    (void)state;
    const char *want[2] = {"at byte 1048576 where byte 0 was next",
                           "the part of 'w' at byte 1048576 gives another dtype or shape than its first"};
    for (int mode = 0; mode < 2; mode++) {
        void *ctx = zmq_ctx_new();
        fake_pserver f = {zmq_socket(ctx, ZMQ_ROUTER), mode};
        int linger = 0, rcv = 5000;
        zmq_setsockopt(f.sock, ZMQ_LINGER, &linger, sizeof linger);
        zmq_setsockopt(f.sock, ZMQ_RCVTIMEO, &rcv, sizeof rcv);
        assert_int_equal(zmq_bind(f.sock, "tcp://127.0.0.1:*"), 0);
        char last[256];
        size_t ln = sizeof last;
        zmq_getsockopt(f.sock, ZMQ_LAST_ENDPOINT, last, &ln);
        const char *ep = last + 6; /* after "tcp://" */
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, fake_main, &f), 0);
        pe_ps_client *c;
        assert_int_equal(pe_ps_client_get(0, &c), PE_OK);
        const char *eps[1] = {ep}, *names[1] = {"w"};
        pe_tensor *out = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){1}, NULL);
        assert_int_equal(pe_ps_get(c, 1, eps, names, &out, pe_place_cpu(0)), PE_ERR_IO);
        tu_assert_error_has(ep, want[mode], NULL);
        pthread_join(th, NULL);
        close_client();
        pe_tensor_free(out);
        zmq_close(f.sock);
        zmq_ctx_term(ctx);
    }
}

static void test_lost_trainer(void **state) {
    (void)state;
    char ep[256];
    pe_ps_server *s = pe_ps_server_new("127.0.0.1:0", ep, sizeof ep);
    if (!s) fail_msg("%s", pe_last_error());
    void *ctx = zmq_ctx_new();
    void *d = raw_dealer(ctx, ep);
    expect_served(s, d, 3);
    zmq_close(d);
    pe_ps_event ev;
    poll_event(s, &ev);
    assert_int_equal(ev.kind, PE_PS_EV_LOST);
    assert_int_equal(ev.hdr.trainer_id, 3);
    /* the same when the server was not polling while the trainer connected
     * and spoke: its request and its connection's ACCEPTED event wait
     * together, and the request is read first */
    d = raw_dealer(ctx, ep);
    unsigned char hb[PE_PS_MAX_MSG];
    size_t n = enc(hb, PE_PS_SEND_BARRIER, 3, "", 0, NULL);
    raw_send(d, 1, (const void *[]){hb}, (size_t[]){n});
    sleep_ms(300);
    poll_event(s, &ev);
    assert_int_equal(ev.kind, PE_PS_EV_REQUEST);
    assert_int_equal(ev.hdr.trainer_id, 3);
    assert_int_equal(pe_ps_reply_ack(s, &ev), PE_OK);
    pe_ps_event_release(&ev);
    zmq_close(d);
    poll_event(s, &ev);
    assert_int_equal(ev.kind, PE_PS_EV_LOST);
    assert_int_equal(ev.hdr.trainer_id, 3);
    /* a connection that never said who it is closes: nothing */
    d = raw_dealer(ctx, ep);
    sleep_ms(200);
    zmq_close(d);
    const double t0 = now_s();
    while (now_s() - t0 < 0.5) {
        assert_int_equal(pe_ps_server_poll(s, 50, &ev), PE_OK);
        assert_int_equal(ev.kind, PE_PS_EV_NONE);
    }
    zmq_ctx_term(ctx);
    pe_ps_server_free(s);
}

/* ======================================================================
 * the pserver loop: listen_and_serv run by pe_executor_run
 * ====================================================================== */

typedef struct loop_run {
    pe_program *p;
    pe_scope *scope;
    pe_status st;
    char err[1024];
} loop_run;

static void *loop_main(void *arg) {
    loop_run *r = arg;
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
#ifndef __SANITIZE_THREAD__ /* libgomp is not built for TSan: its handoffs read as races there */
    pe_executor_set_num_threads(ex, 2); /* the sum's threaded path whatever OMP_NUM_THREADS says */
#endif
    r->st = pe_executor_run(ex, r->p, 0, r->scope, NULL, 0, NULL, 0, NULL);
    if (r->st != PE_OK) snprintf(r->err, sizeof r->err, "%s", pe_last_error());
    pe_executor_free(ex);
    return NULL;
}

/* A pserver program serving w [dims] (float32) with sgd on w@GRAD (lr in
 * the var "lr") from `fanin` trainers at ep. */
static pe_program *sgd_pserver_program(const char *ep, const int64_t *wd, int fanin) {
    pe_program *p = pe_program_new();
    pe_var *w = pe_block_add_var(&p->blocks[0], "w", PE_DTYPE_FP32, 2, wd);
    w->persistable = w->is_parameter = true;
    pe_block_add_var(&p->blocks[0], "w@GRAD", PE_DTYPE_FP32, 2, wd);
    pe_var *lr = pe_block_add_var(&p->blocks[0], "lr", PE_DTYPE_FP32, 1, (int64_t[]){1});
    lr->persistable = true;
    pe_block *b1 = pe_program_add_block(p, 0);
    assert_non_null(b1);
    pe_op *op = pe_block_add_op(&p->blocks[1], "sgd");
    pe_op_add_input(op, "Param", "w");
    pe_op_add_input(op, "Grad", "w@GRAD");
    pe_op_add_input(op, "LearningRate", "lr");
    pe_op_add_output(op, "ParamOut", "w");
    op = pe_block_add_op(&p->blocks[0], "listen_and_serv");
    pe_op_set_string(op, "endpoint", ep);
    pe_op_set_int(op, "Fanin", fanin);
    pe_op_set_ints(op, "optimize_blocks", (int64_t[]){1}, 1);
    const char *g2b[1] = {"w@GRAD:1"};
    pe_op_set_strings(op, "grad_to_block_id", g2b, 1);
    return p;
}

/* A pserver loop on a thread at a free endpoint ep (eps: the list of it)
 * serving w [wd] = sin(i * 0.37) with lr 0.5 from 2 trainers; trainer 0 is
 * this process's client (trainer 1 is the test's raw DEALER). The trainers'
 * gradients: gt0 = cos(i * 1.3) / 3, gt1 = sin(i * 0.11) / 7. */
typedef struct loop_fixture {
    char ep[256];
    const char *eps[1];
    loop_run r;
    pthread_t th;
    pe_ps_client *c;
    pe_tensor *wt, *lt, *gt0, *gt1;
} loop_fixture;

static void loop_start(loop_fixture *f, const int64_t *wd) {
    const int64_t n = wd[0] * wd[1];
    double *w0 = malloc((size_t)n * sizeof *w0), *g0 = malloc((size_t)n * sizeof *g0);
    double *g1 = malloc((size_t)n * sizeof *g1);
    assert_true(w0 && g0 && g1);
    for (int64_t i = 0; i < n; i++) w0[i] = sin(i * 0.37), g0[i] = cos(i * 1.3) / 3, g1[i] = sin(i * 0.11) / 7;
    free_endpoint(f->ep, sizeof f->ep);
    f->eps[0] = f->ep;
    f->r = (loop_run){sgd_pserver_program(f->ep, wd, 2), pe_scope_new(NULL), PE_OK, ""};
    f->wt = tu_tensor(PE_DTYPE_FP32, 2, wd, w0), f->lt = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){1}, (double[]){0.5});
    f->gt0 = tu_tensor(PE_DTYPE_FP32, 2, wd, g0), f->gt1 = tu_tensor(PE_DTYPE_FP32, 2, wd, g1);
    free(w0), free(g0), free(g1);
    assert_int_equal(pe_tensor_copy(pe_scope_var(f->r.scope, "w"), f->wt, pe_place_cpu(0)), PE_OK);
    assert_int_equal(pe_tensor_copy(pe_scope_var(f->r.scope, "lr"), f->lt, pe_place_cpu(0)), PE_OK);
    assert_int_equal(pthread_create(&f->th, NULL, loop_main, &f->r), 0);
    setenv("PE_PS_CONNECT_TIMEOUT", "20", 1);
    assert_int_equal(pe_ps_client_get(0, &f->c), PE_OK);
}

/* Trainer 0 leaves; the loop (whose other trainer is gone) must have ended
 * with PE_OK holding w = want (n floats). */
static void loop_end(loop_fixture *f, const float *want, int64_t n) {
    close_client();
    pthread_join(f->th, NULL);
    if (f->r.st != PE_OK) fail_msg("the pserver loop: %s", f->r.err);
    if (memcmp(pe_tensor_data(pe_scope_find_var(f->r.scope, "w")), want, (size_t)n * sizeof *want))
        fail_msg("the pserver's w is not the value it served");
    unsetenv("PE_PS_CONNECT_TIMEOUT");
    pe_tensor_free(f->wt), pe_tensor_free(f->lt), pe_tensor_free(f->gt0), pe_tensor_free(f->gt1);
    pe_scope_free(f->r.scope);
    pe_program_free(f->r.p);
}

/* w[0..n) -= 0.5 * the gradient the pserver applies: the mean of a and b
 * (b NULL: a alone), rounded as the kernels round (float32, no FMA). */
static void sgd_expect(float *w, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        volatile float g = b ? (a[i] + b[i]) * 0.5f : a[i], step = 0.5f * g;
        w[i] -= step;
    }
}

static void test_pserver_loop(void **state) {
    (void)state;
    /* 360,600 elements: two parts on the wire (PE_PS_PART), 88 whole tiles of
     * the pserver's sum and a partial one, on 2 threads */
    enum { N = 600 * 601 };
    const int64_t wd[2] = {600, 601};
    loop_fixture f;
    loop_start(&f, wd);
    pe_ps_client *c = f.c;
    const char *ep = f.ep, **eps = f.eps, *gn[1] = {"w@GRAD"}, *wn[1] = {"w"};
    pe_tensor *gt0 = f.gt0, *gt1 = f.gt1, *wt = f.wt;
    const char *g1b = pe_tensor_data(gt1);
    const size_t last = N * sizeof(float) - PE_PS_PART; /* bytes of the second part */
    /* trainer 1's first part, then trainer 0's gradient, then trainer 1's
     * second part: the loop sums each part once both trainers' are in */
    void *ctx = zmq_ctx_new();
    void *d = raw_dealer(ctx, ep);
    unsigned char hb[PE_PS_MAX_MSG];
    size_t n = enc_part(hb, 1, 42, "w@GRAD", wd, 0);
    raw_send(d, 2, (const void *[]){hb, g1b}, (size_t[]){n, PE_PS_PART});
    const pe_tensor *ts[1] = {gt0};
    if (pe_ps_send(c, 1, eps, gn, ts) != PE_OK) fail_msg("%s", pe_last_error());
    /* a gradient with the wrong shape is refused by the loop */
    pe_tensor *wrong = tu_tensor(PE_DTYPE_FP32, 1, (int64_t[]){5}, NULL);
    ts[0] = wrong;
    assert_int_equal(pe_ps_send(c, 1, eps, gn, ts), PE_ERR_INVALID);
    tu_assert_error_has("declares float32 [600, 601]", ep, NULL);
    n = enc_part(hb, 1, 42, "w@GRAD", wd, PE_PS_PART);
    raw_send(d, 2, (const void *[]){hb, g1b + PE_PS_PART}, (size_t[]){n, last});
    pe_ps_hdr h;
    char text[1024];
    raw_reply(d, &h, text, sizeof text); /* one reply for the two parts */
    if (h.type != PE_PS_ACK || h.seq != 42) fail_msg("trainer 1's SEND: %s", text);
    n = enc(hb, PE_PS_SEND_BARRIER, 1, "", 0, NULL);
    raw_send(d, 1, (const void *[]){hb}, (size_t[]){n});
    /* trainer 0's barrier: the step runs when both are in */
    if (pe_ps_barrier(c, PE_PS_SEND_BARRIER, 1, eps) != PE_OK) fail_msg("%s", pe_last_error());
    raw_reply(d, &h, text, sizeof text);
    assert_int_equal(h.type, PE_PS_ACK);
    pe_tensor *got = pe_tensor_new();
    if (pe_ps_get(c, 1, eps, wn, &got, pe_place_cpu(0)) != PE_OK) fail_msg("%s", pe_last_error());
    /* sgd on the mean, in float32 as the kernels run it: the same bits */
    float *want = malloc(N * sizeof *want);
    assert_non_null(want);
    const float *f0 = pe_tensor_data(gt0), *f1 = pe_tensor_data(gt1);
    memcpy(want, pe_tensor_data(wt), N * sizeof *want);
    sgd_expect(want, f0, f1, N);
    tu_assert_dims(got, 2, wd);
    if (memcmp(pe_tensor_data(got), want, N * sizeof *want)) fail_msg("the update is not sgd on the mean, bit for bit");
    assert_int_equal(pe_ps_barrier(c, PE_PS_FETCH_BARRIER, 1, eps), PE_OK);

    /* step 2: both gradients in before any barrier: the update runs then
     * (a GET sees it at once), and the barriers do not run it again */
    n = enc_part(hb, 1, 45, "w@GRAD", wd, 0);
    raw_send(d, 2, (const void *[]){hb, g1b}, (size_t[]){n, PE_PS_PART});
    n = enc_part(hb, 1, 45, "w@GRAD", wd, PE_PS_PART);
    raw_send(d, 2, (const void *[]){hb, g1b + PE_PS_PART}, (size_t[]){n, last});
    raw_reply(d, &h, text, sizeof text);
    if (h.type != PE_PS_ACK || h.seq != 45) fail_msg("trainer 1's SEND in step 2: %s", text);
    ts[0] = gt0;
    if (pe_ps_send(c, 1, eps, gn, ts) != PE_OK) fail_msg("%s", pe_last_error());
    sgd_expect(want, f0, f1, N);
    if (pe_ps_get(c, 1, eps, wn, &got, pe_place_cpu(0)) != PE_OK) fail_msg("%s", pe_last_error());
    if (memcmp(pe_tensor_data(got), want, N * sizeof *want))
        fail_msg("step 2: the update did not run once both gradients were in");
    n = enc(hb, PE_PS_SEND_BARRIER, 1, "", 0, NULL);
    raw_send(d, 1, (const void *[]){hb}, (size_t[]){n});
    if (pe_ps_barrier(c, PE_PS_SEND_BARRIER, 1, eps) != PE_OK) fail_msg("%s", pe_last_error());
    raw_reply(d, &h, text, sizeof text);
    assert_int_equal(h.type, PE_PS_ACK);
    if (pe_ps_get(c, 1, eps, wn, &got, pe_place_cpu(0)) != PE_OK) fail_msg("%s", pe_last_error());
    if (memcmp(pe_tensor_data(got), want, N * sizeof *want)) fail_msg("step 2: the barriers ran the update again");
    assert_int_equal(pe_ps_barrier(c, PE_PS_FETCH_BARRIER, 1, eps), PE_OK);

    /* step 3: trainer 1's first part is summed with trainer 0's gradient,
     * then trainer 1 breaks the parts rule (refused once; the rest of that
     * SEND is dropped unanswered) and is lost: the step is trainer 0's
     * gradient alone, the part summed ahead redone */
    ts[0] = gt0;
    if (pe_ps_send(c, 1, eps, gn, ts) != PE_OK) fail_msg("%s", pe_last_error());
    n = enc_part(hb, 1, 50, "w@GRAD", wd, 0);
    raw_send(d, 2, (const void *[]){hb, g1b}, (size_t[]){n, PE_PS_PART});
    n = enc_part(hb, 1, 51, "w@GRAD", wd, PE_PS_PART); /* the second part under another request */
    raw_send(d, 2, (const void *[]){hb, g1b + PE_PS_PART}, (size_t[]){n, last});
    raw_reply(d, &h, text, sizeof text);
    assert_int_equal(h.type, PE_PS_ERROR);
    assert_int_equal(h.seq, 51);
    assert_has(text, "trainer 1 sent the part of gradient 'w@GRAD' at byte 1048576 (request 51) where another part "
               "was next");
    raw_send(d, 2, (const void *[]){hb, g1b + PE_PS_PART}, (size_t[]){n, last}); /* again: no reply */
    n = enc(hb, PE_PS_FETCH_BARRIER, 1, "", 0, NULL);
    raw_send(d, 1, (const void *[]){hb}, (size_t[]){n});
    raw_reply(d, &h, text, sizeof text);
    if (h.type != PE_PS_ACK) fail_msg("the reply after the dropped part: %s %s", pe_ps_type_name(h.type), text);
    zmq_close(d); /* lost */
    if (pe_ps_barrier(c, PE_PS_SEND_BARRIER, 1, eps) != PE_OK) fail_msg("%s", pe_last_error());
    if (pe_ps_get(c, 1, eps, wn, &got, pe_place_cpu(0)) != PE_OK) fail_msg("%s", pe_last_error());
    sgd_expect(want, f0, NULL, N);
    if (memcmp(pe_tensor_data(got), want, N * sizeof *want))
        fail_msg("step 3 is not sgd on trainer 0's gradient alone, bit for bit");
    assert_int_equal(pe_ps_barrier(c, PE_PS_FETCH_BARRIER, 1, eps), PE_OK);
    /* trainer 0 leaves (trainer 1 was lost): the loop returns PE_OK */
    loop_end(&f, want, N);
    zmq_ctx_term(ctx);
    pe_tensor_free(wrong), pe_tensor_free(got);
    free(want);
}

/* Sync mode's rule for update ahead (guide §5): once every live trainer's
 * gradients of a block are in, the block runs, and that update is the
 * step's. A trainer lost after it still counts in it: the barriers neither
 * redo the step without it nor apply it twice. The next step is the
 * survivor's gradient alone. */
static void test_pserver_lost_after_update(void **state) {
    (void)state;
    enum { N = 12 };
    const int64_t wd[2] = {3, 4};
    loop_fixture f;
    loop_start(&f, wd);
    pe_ps_client *c = f.c;
    const char **eps = f.eps, *gn[1] = {"w@GRAD"}, *wn[1] = {"w"};
    pe_tensor *gt0 = f.gt0, *gt1 = f.gt1;
    float want[N], after[N];
    memcpy(want, pe_tensor_data(f.wt), sizeof want);
    sgd_expect(want, pe_tensor_data(gt0), pe_tensor_data(gt1), N);
    memcpy(after, want, sizeof after);
    sgd_expect(after, pe_tensor_data(gt0), NULL, N);
    void *ctx = zmq_ctx_new();
    void *d = raw_dealer(ctx, f.ep);
    unsigned char hb[PE_PS_MAX_MSG];
    size_t n = enc_part(hb, 1, 60, "w@GRAD", wd, 0);
    raw_send(d, 2, (const void *[]){hb, pe_tensor_data(gt1)}, (size_t[]){n, N * sizeof(float)});
    pe_ps_hdr h;
    char text[1024];
    raw_reply(d, &h, text, sizeof text);
    if (h.type != PE_PS_ACK || h.seq != 60) fail_msg("trainer 1's SEND: %s", text);
    const pe_tensor *ts[1] = {gt0};
    if (pe_ps_send(c, 1, eps, gn, ts) != PE_OK) fail_msg("%s", pe_last_error());
    pe_tensor *got = pe_tensor_new();
    if (pe_ps_get(c, 1, eps, wn, &got, pe_place_cpu(0)) != PE_OK) fail_msg("%s", pe_last_error());
    if (memcmp(pe_tensor_data(got), want, sizeof want)) fail_msg("the update did not run once both gradients were in");
    zmq_close(d); /* trainer 1 is lost before its barrier */
    if (pe_ps_barrier(c, PE_PS_SEND_BARRIER, 1, eps) != PE_OK) fail_msg("%s", pe_last_error());
    if (pe_ps_get(c, 1, eps, wn, &got, pe_place_cpu(0)) != PE_OK) fail_msg("%s", pe_last_error());
    if (memcmp(pe_tensor_data(got), want, sizeof want))
        fail_msg("the step updated ahead was redone or undone when trainer 1 was lost");
    assert_int_equal(pe_ps_barrier(c, PE_PS_FETCH_BARRIER, 1, eps), PE_OK);
    /* the next step: trainer 0 alone */
    if (pe_ps_send(c, 1, eps, gn, ts) != PE_OK) fail_msg("%s", pe_last_error());
    if (pe_ps_barrier(c, PE_PS_SEND_BARRIER, 1, eps) != PE_OK) fail_msg("%s", pe_last_error());
    if (pe_ps_get(c, 1, eps, wn, &got, pe_place_cpu(0)) != PE_OK) fail_msg("%s", pe_last_error());
    if (memcmp(pe_tensor_data(got), after, sizeof after)) fail_msg("the step after the loss is not trainer 0's alone");
    assert_int_equal(pe_ps_barrier(c, PE_PS_FETCH_BARRIER, 1, eps), PE_OK);
    loop_end(&f, after, N);
    zmq_ctx_term(ctx);
    pe_tensor_free(got);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdr_round_trip),
        cmocka_unit_test(test_hdr_rejects),
        cmocka_unit_test(test_client_server),
        cmocka_unit_test(test_malformed_input),
        cmocka_unit_test(test_bad_parts),
        cmocka_unit_test(test_lost_trainer),
        cmocka_unit_test(test_pserver_goes_away),
        cmocka_unit_test(test_last_ack_delivered),
        cmocka_unit_test(test_connect_timeout),
        cmocka_unit_test(test_pserver_loop),
        cmocka_unit_test(test_pserver_lost_after_update),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

int main(void) {
    fprintf(stderr, "test_transport: PE was built without ZeroMQ; skipped\n");
    return 77;
}

#endif

/* runtime/transport/msg.c — the parameter server's header frame: encode,
 * decode and validate (no ZeroMQ here, so the decoder is fuzzed alone).
 *
 * Layout, little-endian, fixed part 104 bytes then the name:
 *
 *     off  size  field
 *       0     4  magic "PEPS"
 *       4     2  version (3)
 *       6     2  type (pe_ps_type)
 *       8     4  trainer id (int32, >= 0)
 *      12     4  sequence number
 *      16     4  dtype (pe_dtype; tensor messages only)
 *      20     4  rank (0..8)
 *      24    64  dims (8 x int64; unused ones 0)
 *      88     8  data length (the whole tensor's bytes; ERROR: the text's)
 *      96     8  part offset (SEND, VALUE: a multiple of PE_PS_PART below
 *                the data length, or 0; every other type: 0)
 *     104     n  name (n = frame length - 104, <= 1024; printable ASCII)
 *
 * A decoder trusts nothing: every field is range-checked, the data length
 * must equal numel x dtype size for SEND / VALUE (no overflow), and an error
 * says which field was wrong and its value. The data frame that follows
 * carries pe_ps_frame_bytes(h): a SEND's or VALUE's part (at most
 * PE_PS_PART bytes from the offset), an ERROR's whole text.
 */
#include "runtime/transport/transport.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXED 104

const char *pe_ps_type_name(int type) {
    switch (type) {
    case PE_PS_SEND: return "SEND";
    case PE_PS_GET: return "GET";
    case PE_PS_SEND_BARRIER: return "SEND_BARRIER";
    case PE_PS_FETCH_BARRIER: return "FETCH_BARRIER";
    case PE_PS_COMPLETE: return "COMPLETE";
    case PE_PS_ACK: return "ACK";
    case PE_PS_VALUE: return "VALUE";
    case PE_PS_ERROR: return "ERROR";
    default: return "?";
    }
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

size_t pe_ps_hdr_encode(const pe_ps_hdr *h, unsigned char *buf) {
    size_t n = strnlen(h->name, PE_PS_MAX_NAME);
    memset(buf, 0, FIXED);
    put32(buf, PE_PS_MAGIC);
    buf[4] = PE_PS_VERSION & 0xff, buf[5] = PE_PS_VERSION >> 8;
    buf[6] = (unsigned char)(h->type & 0xff), buf[7] = (unsigned char)(h->type >> 8);
    put32(buf + 8, (uint32_t)h->trainer_id);
    put32(buf + 12, h->seq);
    put32(buf + 16, (uint32_t)h->dtype);
    put32(buf + 20, (uint32_t)h->ndim);
    for (int i = 0; i < h->ndim && i < PE_PS_MAX_DIMS; i++) put64(buf + 24 + 8 * i, (uint64_t)h->dims[i]);
    put64(buf + 88, h->nbytes);
    put64(buf + 96, h->offset);
    memcpy(buf + FIXED, h->name, n);
    return FIXED + n;
}

static bool has_tensor(int type) { return type == PE_PS_SEND || type == PE_PS_VALUE; }

pe_status pe_ps_hdr_decode(const void *buf, size_t len, pe_ps_hdr *h) {
    const unsigned char *p = buf;
    memset(h, 0, sizeof *h);
    if (len < FIXED)
        return pe_error(PE_ERR_INVALID, "header frame of %zu bytes is shorter than the %d-byte fixed part", len,
                        FIXED);
    if (get32(p) != PE_PS_MAGIC)
        return pe_error(PE_ERR_INVALID, "header frame does not start with \"PEPS\" (bytes %02x %02x %02x %02x): "
                        "not a PE parameter-server message", p[0], p[1], p[2], p[3]);
    unsigned version = p[4] | (unsigned)p[5] << 8;
    if (version != PE_PS_VERSION)
        return pe_error(PE_ERR_INVALID, "protocol version %u, this PE speaks %d", version, PE_PS_VERSION);
    h->type = p[6] | p[7] << 8;
    if (!strcmp(pe_ps_type_name(h->type), "?"))
        return pe_error(PE_ERR_INVALID, "unknown message type %d", h->type);
    uint32_t tid = get32(p + 8);
    if (tid > INT32_MAX) return pe_error(PE_ERR_INVALID, "%s: trainer id %u is negative", pe_ps_type_name(h->type), tid);
    h->trainer_id = (int)tid;
    h->seq = get32(p + 12);
    uint32_t dt = get32(p + 16), nd = get32(p + 20);
    h->nbytes = get64(p + 88);
    h->offset = get64(p + 96);
    size_t n = len - FIXED;
    if (n > PE_PS_MAX_NAME)
        return pe_error(PE_ERR_INVALID, "%s: var name of %zu bytes (at most %d)", pe_ps_type_name(h->type), n,
                        PE_PS_MAX_NAME);
    for (size_t i = 0; i < n; i++)
        if (p[FIXED + i] < 0x20 || p[FIXED + i] > 0x7e)
            return pe_error(PE_ERR_INVALID, "%s: var name has a non-printable byte 0x%02x at %zu",
                            pe_ps_type_name(h->type), p[FIXED + i], i);
    memcpy(h->name, p + FIXED, n);
    h->name[n] = 0;
    if ((h->type == PE_PS_SEND || h->type == PE_PS_GET || h->type == PE_PS_VALUE) && n == 0)
        return pe_error(PE_ERR_INVALID, "%s without a var name", pe_ps_type_name(h->type));
    if (!has_tensor(h->type) && h->offset != 0)
        return pe_error(PE_ERR_INVALID, "%s '%s' has a part offset of %llu; only a SEND or a VALUE comes in parts",
                        pe_ps_type_name(h->type), h->name, (unsigned long long)h->offset);
    if (!has_tensor(h->type)) {
        if (h->type != PE_PS_ERROR && h->nbytes != 0)
            return pe_error(PE_ERR_INVALID, "%s '%s' announces a %llu-byte data frame; it carries none",
                            pe_ps_type_name(h->type), h->name, (unsigned long long)h->nbytes);
        if (h->nbytes > 65536)
            return pe_error(PE_ERR_INVALID, "ERROR message of %llu bytes (at most 65536)",
                            (unsigned long long)h->nbytes);
        return PE_OK;
    }
    if (dt >= PE_DTYPE_COUNT)
        return pe_error(PE_ERR_INVALID, "%s '%s': dtype code %u is not a PE dtype", pe_ps_type_name(h->type), h->name,
                        dt);
    if (nd > PE_PS_MAX_DIMS)
        return pe_error(PE_ERR_INVALID, "%s '%s': rank %u (at most %d)", pe_ps_type_name(h->type), h->name, nd,
                        PE_PS_MAX_DIMS);
    h->dtype = (pe_dtype)dt;
    h->ndim = (int)nd;
    uint64_t numel = 1;
    for (int i = 0; i < h->ndim; i++) {
        uint64_t d = get64(p + 24 + 8 * i);
        if (d > (uint64_t)INT64_MAX / 2)
            return pe_error(PE_ERR_INVALID, "%s '%s': dim %d is %lld", pe_ps_type_name(h->type), h->name, i,
                            (long long)d);
        h->dims[i] = (int64_t)d;
        if (d && numel > UINT64_MAX / d)
            return pe_error(PE_ERR_INVALID, "%s '%s': the dims overflow 64 bits", pe_ps_type_name(h->type), h->name);
        numel *= d;
    }
    size_t es = pe_dtype_size(h->dtype);
    if (numel > UINT64_MAX / es || numel * es != h->nbytes)
        return pe_error(PE_ERR_INVALID, "%s '%s': data length %llu bytes does not match %s dims of %llu elements",
                        pe_ps_type_name(h->type), h->name, (unsigned long long)h->nbytes, pe_dtype_name(h->dtype),
                        (unsigned long long)numel);
    if (h->offset % PE_PS_PART || (h->offset && h->offset >= h->nbytes))
        return pe_error(PE_ERR_INVALID, "%s '%s': part offset %llu is not a multiple of %llu below its %llu bytes",
                        pe_ps_type_name(h->type), h->name, (unsigned long long)h->offset,
                        (unsigned long long)PE_PS_PART, (unsigned long long)h->nbytes);
    return PE_OK;
}

uint64_t pe_ps_frame_bytes(const pe_ps_hdr *h) {
    if (!has_tensor(h->type)) return h->nbytes;
    const uint64_t left = h->nbytes - h->offset;
    return left < PE_PS_PART ? left : PE_PS_PART;
}

pe_status pe_ps_hdr_set_tensor(pe_ps_hdr *h, const pe_tensor *t) {
    if (t->ndim > PE_PS_MAX_DIMS)
        return pe_error(PE_ERR_INVALID, "var '%s' has rank %d (at most %d over the wire)", h->name, t->ndim,
                        PE_PS_MAX_DIMS);
    h->dtype = t->dtype;
    h->ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) h->dims[i] = t->dims[i];
    h->nbytes = pe_tensor_nbytes(t);
    return PE_OK;
}


/* tests/fuzz/fuzz_ps_header.c — libFuzzer target for the parameter
 * server's header frame (runtime/transport/msg.c): the first frame of every
 * message a trainer or a pserver receives, so whoever reaches the port
 * controls it. Seed corpus: tests/fuzz/corpus/ps_header/.
 *
 * Input: the frame's bytes as received.
 *
 * Invariants (a violation aborts, which libFuzzer reports as a crash): the
 * status is PE_OK or PE_ERR_INVALID with a printable message; what decodes
 * has a known type, a trainer id >= 0, a terminated printable name of at
 * most PE_PS_MAX_NAME bytes, and for SEND / VALUE a PE dtype, a rank <= 8,
 * dims >= 0 and nbytes = numel x dtype size; a part offset only on a SEND or VALUE,
 * a multiple of PE_PS_PART inside its bytes, the part's frame inside them
 * too; re-encoding it gives the input
 * back byte for byte, except the bytes decode does not read (dims past the
 * rank; dtype, rank and dims of a message without a tensor), which encode
 * zeroes; and decoding that again gives the same header.
 */
#include "runtime/transport/transport.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool has_tensor(int type) { return type == PE_PS_SEND || type == PE_PS_VALUE; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pe_ps_hdr h, h2;
    pe_status st = pe_ps_hdr_decode(data, size, &h);
    if (st != PE_OK) {
        if (st != PE_ERR_INVALID) abort();
        const char *m = pe_last_error();
        size_t len = strlen(m);
        if (!len) abort();
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)m[i] < 0x20 || m[i] == 0x7f) abort();
        return 0;
    }
    if (!strcmp(pe_ps_type_name(h.type), "?") || h.trainer_id < 0) abort();
    size_t n = strnlen(h.name, sizeof h.name);
    if (n > PE_PS_MAX_NAME || n != size - 104) abort();
    for (size_t i = 0; i < n; i++)
        if (h.name[i] < 0x20 || h.name[i] > 0x7e) abort();
    if (has_tensor(h.type)) {
        if ((int)h.dtype < 0 || h.dtype >= PE_DTYPE_COUNT || h.ndim < 0 || h.ndim > PE_PS_MAX_DIMS) abort();
        unsigned __int128 numel = 1;
        for (int i = 0; i < h.ndim; i++) {
            if (h.dims[i] < 0) abort();
            numel *= (unsigned __int128)h.dims[i];
        }
        if (numel * pe_dtype_size(h.dtype) != h.nbytes) abort();
    } else if (h.type != PE_PS_ERROR ? h.nbytes != 0 : h.nbytes > 65536) {
        abort();
    }
    /* a part: a whole one, or the tensor's last bytes */
    const uint64_t f = pe_ps_frame_bytes(&h);
    const bool tensor = h.type == PE_PS_SEND || h.type == PE_PS_VALUE;
    if (!tensor ? h.offset != 0 || f != h.nbytes
                : h.offset % PE_PS_PART || (h.offset && h.offset >= h.nbytes) || f > PE_PS_PART ||
                      (f != PE_PS_PART && h.offset + f != h.nbytes) || h.offset + f > h.nbytes)
        abort();

    /* re-encoded: the input's bytes, except those the decoder does not read
     * (dims past the rank; dtype / rank / dims of a message without a
     * tensor), which encode writes as 0 */
    unsigned char buf[PE_PS_MAX_MSG];
    size_t m = pe_ps_hdr_encode(&h, buf);
    if (m != size) abort();
    size_t read_to = has_tensor(h.type) ? 24 + 8 * (size_t)h.ndim : 16;
    if (memcmp(buf, data, read_to) || memcmp(buf + 88, data + 88, size - 88)) abort();
    for (size_t i = read_to; i < 88; i++)
        if (buf[i]) abort();
    if (pe_ps_hdr_decode(buf, m, &h2) != PE_OK) abort();
    if (memcmp(&h, &h2, sizeof h)) abort();
    return 0;
}

/* graph/program_io.cc — loading and saving programs: the .pe flatbuffer and
 * its JSON text form (schema graph/program.fbs), behind the C API of
 * pe/program.h.
 *
 * How: a binary load runs the flatbuffers Verifier over the whole buffer
 * before any field is read, then copies the buffer into the C IR
 * (graph/program.c structs), checking what the Verifier cannot (enum ranges,
 * dims count, NUL bytes in names, fields that do not belong to an attr's
 * type, and a memory budget against data shared many times), then runs
 * pe_program_check (graph/check.c). A JSON load hands the text to
 * flatbuffers' own Parser (the schema text is embedded at build time,
 * generated/program_schema.h), which builds a binary buffer that then takes
 * the binary path, Verifier included. Saving builds the flatbuffer from the
 * IR; the JSON form is flatbuffers' mini-reflection text generator over that
 * buffer, with two changes: doubles are printed exactly (the stock generator
 * prints 12 fixed decimals, so 1e-13 would become 0) and Vars, Slots and
 * Attrs go on one line each so a program reads like a listing.
 *
 * Why C++: Debian ships no C runtime for flatbuffers, so this is PE's one
 * C++ file. Every entry point catches all exceptions (std::bad_alloc from the
 * builder or the parser): nothing but a pe_status crosses into C.
 */
#include "graph/internal.h"
#include "pe/program.h"
#include "runtime/internal.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>
#include <flatbuffers/idl.h>
#include <flatbuffers/minireflect.h>

#include "program_generated.h"
#include "program_schema.h"

namespace fb = pe::fb;

/* The schema enums are the C enums, value for value (stored in files). */
#define PE_SAME(a, b) (static_cast<int>(a) == static_cast<int>(b))
static_assert(PE_SAME(fb::DType_FP32, PE_DTYPE_FP32) && PE_SAME(fb::DType_FP64, PE_DTYPE_FP64) &&
                  PE_SAME(fb::DType_INT32, PE_DTYPE_INT32) && PE_SAME(fb::DType_INT64, PE_DTYPE_INT64) &&
                  PE_SAME(fb::DType_UINT8, PE_DTYPE_UINT8) && PE_SAME(fb::DType_BOOL, PE_DTYPE_BOOL) &&
                  PE_SAME(fb::DType_FP16, PE_DTYPE_FP16) && PE_SAME(fb::DType_BF16, PE_DTYPE_BF16) &&
                  PE_SAME(fb::DType_MAX + 1, PE_DTYPE_COUNT),
              "program.fbs DType must equal pe_dtype");
static_assert(PE_SAME(fb::AttrType_INT, PE_ATTR_INT) && PE_SAME(fb::AttrType_FLOAT, PE_ATTR_FLOAT) &&
                  PE_SAME(fb::AttrType_STRING, PE_ATTR_STRING) && PE_SAME(fb::AttrType_BOOL, PE_ATTR_BOOL) &&
                  PE_SAME(fb::AttrType_LONG, PE_ATTR_LONG) && PE_SAME(fb::AttrType_INTS, PE_ATTR_INTS) &&
                  PE_SAME(fb::AttrType_FLOATS, PE_ATTR_FLOATS) && PE_SAME(fb::AttrType_STRINGS, PE_ATTR_STRINGS) &&
                  PE_SAME(fb::AttrType_BOOLS, PE_ATTR_BOOLS) && PE_SAME(fb::AttrType_LONGS, PE_ATTR_LONGS) &&
                  PE_SAME(fb::AttrType_BLOCK, PE_ATTR_BLOCK) && PE_SAME(fb::AttrType_MAX + 1, PE_ATTR_TYPE_COUNT),
              "program.fbs AttrType must equal pe_attr_type");
#undef PE_SAME

namespace {

const int kMaxDims = 8;

/* Element k of a scalar vector. The Verifier checks a vector's length word
 * (4-byte aligned) but not that 8-byte elements are 8-byte aligned, so a
 * hostile buffer can misalign them: read through memcpy. */
template <typename T> T scalar_at(const flatbuffers::Vector<T> *v, int k) {
    T x;
    memcpy(&x, v->Data() + (size_t)k * sizeof(T), sizeof(T));
    return flatbuffers::EndianScalar(x);
}

const char *name_or(const char *what) { return what && *what ? what : "<buffer>"; }

/* ======================= decoding: flatbuffer -> C IR ==================== */

/* Copies a verified flatbuffer into a pe_program. Every allocation is
 * charged against `budget`: a buffer of N bytes legitimately decodes to a
 * few times N, but offsets may point many times at the same string or
 * vector, and without a bound a few kilobytes could ask for gigabytes. */
class Decoder {
  public:
    Decoder(const char *what, size_t size) : what_(what), budget_(size * 64 + (1u << 20)) {}

    pe_status program(const fb::Program *fp, pe_program **out) {
        pe_program *p = static_cast<pe_program *>(calloc(1, sizeof *p));
        if (!p) return pe_error(PE_ERR_NOMEM, "%s: out of memory decoding the program", what_);
        pe_status st = fill_program(fp, p);
        if (st != PE_OK) {
            pe_program_free(p);
            return st;
        }
        *out = p;
        return PE_OK;
    }

  private:
    const char *what_;
    size_t budget_;
    /* Current position, for messages. */
    int block_ = -1, op_ = -1;
    const char *op_type_ = "";

    void *alloc(size_t n, size_t elem, pe_status *st) {
        if (n == 0) return nullptr;
        if (elem && n > budget_ / elem) {
            *st = pe_error(PE_ERR_FORMAT,
                           "'%s' is not a PE program: it expands to more than %zu bytes in memory "
                           "(data referenced many times over)",
                           what_, budget_);
            return nullptr;
        }
        budget_ -= n * elem;
        void *m = calloc(n, elem);
        if (!m) *st = pe_error(PE_ERR_NOMEM, "%s: out of memory decoding the program", what_);
        return m;
    }

    /* Prefix naming the current block / op, e.g. "mlp.pe: block 0 op 3 (mul)". */
    std::string where() const {
        char buf[64];
        std::string s = what_;
        if (block_ >= 0) {
            snprintf(buf, sizeof buf, ": block %d", block_);
            s += buf;
        }
        if (op_ >= 0) {
            snprintf(buf, sizeof buf, " op %d", op_);
            s += buf;
            s += " (";
            s += op_type_;
            s += ")";
        }
        return s;
    }

    /* Copies a string; a missing one is an error naming `field`. */
    pe_status str(const flatbuffers::String *s, const char *field, char **out) {
        if (!s) return pe_error(PE_ERR_FORMAT, "%s: %s is missing", where().c_str(), field);
        if (memchr(s->c_str(), 0, s->size()))
            return pe_error(PE_ERR_FORMAT, "%s: %s contains a NUL byte", where().c_str(), field);
        pe_status st = PE_OK;
        char *c = static_cast<char *>(alloc(s->size() + 1, 1, &st));
        if (!c) return st;
        memcpy(c, s->c_str(), s->size());
        c[s->size()] = '\0';
        *out = c;
        return PE_OK;
    }

    pe_status count(flatbuffers::uoffset_t n, const char *field, int *out) {
        if (n > (flatbuffers::uoffset_t)(INT32_MAX / 2))
            return pe_error(PE_ERR_FORMAT, "%s: %s has %u entries", where().c_str(), field, (unsigned)n);
        *out = (int)n;
        return PE_OK;
    }

    pe_status fill_program(const fb::Program *fp, pe_program *p) {
        p->version = fp->version();
        p->random_seed = fp->random_seed();
        const auto *blocks = fp->blocks();
        if (!blocks || blocks->size() == 0)
            return pe_error(PE_ERR_FORMAT, "'%s' is not a PE program: it has no blocks", what_);
        int n = 0;
        PE_CHECK(count(blocks->size(), "the block list", &n));
        pe_status st = PE_OK;
        p->blocks = static_cast<pe_block *>(alloc((size_t)n, sizeof(pe_block), &st));
        if (!p->blocks) return st;
        p->n_blocks = n;
        for (int b = 0; b < n; b++) {
            block_ = b;
            const fb::Block *fb_block = blocks->Get((flatbuffers::uoffset_t)b);
            if (!fb_block) return pe_error(PE_ERR_FORMAT, "%s is missing", where().c_str());
            PE_CHECK(fill_block(fb_block, &p->blocks[b]));
        }
        block_ = -1;
        PE_CHECK(fill_names(fp->feed_names(), "the feed name list", &p->feed_names, &p->n_feed_names));
        return fill_names(fp->fetch_names(), "the fetch name list", &p->fetch_names, &p->n_fetch_names);
    }

    /* feed_names / fetch_names (absent = none). */
    pe_status fill_names(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>> *v, const char *field,
                         char ***out, int *n_out) {
        if (!v || v->size() == 0) return PE_OK;
        int n = 0;
        PE_CHECK(count(v->size(), field, &n));
        pe_status st = PE_OK;
        *out = static_cast<char **>(alloc((size_t)n, sizeof(char *), &st));
        if (!*out) return st;
        *n_out = n;
        for (int i = 0; i < n; i++) PE_CHECK(str(v->Get((flatbuffers::uoffset_t)i), field, &(*out)[i]));
        return PE_OK;
    }

    pe_status fill_block(const fb::Block *fbb, pe_block *b) {
        b->idx = fbb->idx();
        b->parent_idx = fbb->parent_idx();
        pe_status st = PE_OK;
        if (const auto *vars = fbb->vars()) {
            int n = 0;
            PE_CHECK(count(vars->size(), "the var list", &n));
            b->vars = static_cast<pe_var *>(alloc((size_t)n, sizeof(pe_var), &st));
            if (n && !b->vars) return st;
            b->n_vars = b->cap_vars = n;
            for (int i = 0; i < n; i++) PE_CHECK(fill_var(vars->Get((flatbuffers::uoffset_t)i), i, &b->vars[i]));
            pe_block_reindex(b);
        }
        if (const auto *ops = fbb->ops()) {
            int n = 0;
            PE_CHECK(count(ops->size(), "the op list", &n));
            b->ops = static_cast<pe_op *>(alloc((size_t)n, sizeof(pe_op), &st));
            if (n && !b->ops) return st;
            b->n_ops = b->cap_ops = n;
            for (int i = 0; i < n; i++) {
                op_ = i;
                op_type_ = "";
                PE_CHECK(fill_op(ops->Get((flatbuffers::uoffset_t)i), &b->ops[i]));
            }
            op_ = -1;
        }
        return PE_OK;
    }

    pe_status fill_var(const fb::Var *fv, int i, pe_var *v) {
        char field[48];
        snprintf(field, sizeof field, "the name of var %d", i);
        if (!fv) return pe_error(PE_ERR_FORMAT, "%s: var %d is missing", where().c_str(), i);
        PE_CHECK(str(fv->name(), field, &v->name));
        int dt = (int)fv->dtype();
        if (!pe_dtype_valid(dt))
            return pe_error(PE_ERR_FORMAT, "%s: var '%s' has dtype %d, which is not a PE dtype (0..%d)",
                            where().c_str(), v->name, dt, PE_DTYPE_COUNT - 1);
        v->dtype = (pe_dtype)dt;
        if (const auto *dims = fv->dims()) {
            if (dims->size() > (flatbuffers::uoffset_t)kMaxDims)
                return pe_error(PE_ERR_FORMAT, "%s: var '%s' has %u dims (at most %d)", where().c_str(),
                                v->name, (unsigned)dims->size(), kMaxDims);
            v->ndim = (int)dims->size();
            for (int k = 0; k < v->ndim; k++) v->dims[k] = scalar_at(dims, k);
        }
        v->persistable = fv->persistable();
        v->is_parameter = fv->is_parameter();
        v->stop_gradient = fv->stop_gradient();
        return PE_OK;
    }

    pe_status fill_slots(const flatbuffers::Vector<flatbuffers::Offset<fb::Slot>> *slots, const char *dir,
                         pe_slot **out, int *n_out) {
        if (!slots) return PE_OK;
        int n = 0;
        PE_CHECK(count(slots->size(), dir, &n));
        pe_status st = PE_OK;
        *out = static_cast<pe_slot *>(alloc((size_t)n, sizeof(pe_slot), &st));
        if (n && !*out) return st;
        *n_out = n;
        char field[96];
        for (int i = 0; i < n; i++) {
            const fb::Slot *fs = slots->Get((flatbuffers::uoffset_t)i);
            pe_slot *s = &(*out)[i];
            snprintf(field, sizeof field, "the name of %s slot %d", dir, i);
            if (!fs) return pe_error(PE_ERR_FORMAT, "%s: %s slot %d is missing", where().c_str(), dir, i);
            PE_CHECK(str(fs->name(), field, &s->name));
            const auto *args = fs->args();
            if (!args) continue;
            int na = 0;
            PE_CHECK(count(args->size(), "a slot", &na));
            s->args = static_cast<char **>(alloc((size_t)na, sizeof(char *), &st));
            if (na && !s->args) return st;
            s->n_args = na;
            for (int k = 0; k < na; k++) {
                snprintf(field, sizeof field, "%s %s arg %d", dir, s->name, k);
                PE_CHECK(str(args->Get((flatbuffers::uoffset_t)k), field, &s->args[k]));
            }
        }
        return PE_OK;
    }

    pe_status fill_op(const fb::Op *fo, pe_op *op) {
        if (!fo) return pe_error(PE_ERR_FORMAT, "%s is missing", where().c_str());
        PE_CHECK(str(fo->type(), "the op type", &op->type));
        op_type_ = op->type;
        PE_CHECK(fill_slots(fo->inputs(), "input", &op->inputs, &op->n_inputs));
        PE_CHECK(fill_slots(fo->outputs(), "output", &op->outputs, &op->n_outputs));
        const auto *attrs = fo->attrs();
        if (!attrs) return PE_OK;
        int n = 0;
        PE_CHECK(count(attrs->size(), "the attr list", &n));
        pe_status st = PE_OK;
        op->attrs = static_cast<pe_attr *>(alloc((size_t)n, sizeof(pe_attr), &st));
        if (n && !op->attrs) return st;
        op->n_attrs = n;
        for (int i = 0; i < n; i++) {
            const fb::Attr *fa = attrs->Get((flatbuffers::uoffset_t)i);
            if (!fa) return pe_error(PE_ERR_FORMAT, "%s: attr %d is missing", where().c_str(), i);
            PE_CHECK(fill_attr(fa, i, &op->attrs[i]));
        }
        return PE_OK;
    }

    /* Which value field each attr type uses (the rest must be unset). */
    static const char *value_field(pe_attr_type t) {
        switch (t) {
        case PE_ATTR_INT: case PE_ATTR_LONG: return "i";
        case PE_ATTR_FLOAT: return "f";
        case PE_ATTR_STRING: return "s";
        case PE_ATTR_BOOL: return "b";
        case PE_ATTR_BLOCK: return "block_idx";
        case PE_ATTR_INTS: case PE_ATTR_LONGS: return "ints";
        case PE_ATTR_FLOATS: return "floats";
        case PE_ATTR_STRINGS: return "strings";
        case PE_ATTR_BOOLS: return "bools";
        default: return "?";
        }
    }

    pe_status fill_attr(const fb::Attr *fa, int i, pe_attr *a) {
        char field[48];
        snprintf(field, sizeof field, "the name of attr %d", i);
        PE_CHECK(str(fa->name(), field, &a->name));
        int t = (int)fa->type();
        if (t < 0 || t >= PE_ATTR_TYPE_COUNT)
            return pe_error(PE_ERR_FORMAT, "%s: attr '%s' has type %d, which is not an attr type (0..%d)",
                            where().c_str(), a->name, t, PE_ATTR_TYPE_COUNT - 1);
        a->type = (pe_attr_type)t;
        /* A field set that the type does not read is a mistake in the file
         * (e.g. an INT attr written with "f"): report it, do not drop it. */
        const char *want = value_field(a->type);
        struct { const char *name; bool set; } fields[] = {
            {"i", fa->i() != 0},
            {"f", fa->f() != 0.0 || std::isnan(fa->f())},
            {"s", fa->s() != nullptr},
            {"b", fa->b()},
            {"block_idx", fa->block_idx() != 0},
            {"ints", fa->ints() != nullptr},
            {"floats", fa->floats() != nullptr},
            {"strings", fa->strings() != nullptr},
            {"bools", fa->bools() != nullptr},
        };
        for (const auto &f : fields)
            if (f.set && strcmp(f.name, want))
                return pe_error(PE_ERR_FORMAT, "%s: attr '%s' of type %s sets field '%s' (a %s attr keeps its value in '%s')",
                                where().c_str(), a->name, pe_attr_type_name(a->type), f.name,
                                pe_attr_type_name(a->type), want);
        pe_status st = PE_OK;
        switch (a->type) {
        case PE_ATTR_INT: case PE_ATTR_LONG: a->i = fa->i(); break;
        case PE_ATTR_FLOAT: a->f = fa->f(); break;
        case PE_ATTR_BOOL: a->i = fa->b() ? 1 : 0; break;
        case PE_ATTR_BLOCK: a->i = fa->block_idx(); break;
        case PE_ATTR_STRING:
            if (fa->s()) {
                snprintf(field, sizeof field, "the value of attr '%.16s'", a->name);
                PE_CHECK(str(fa->s(), field, &a->s));
            } else {
                a->s = static_cast<char *>(alloc(1, 1, &st));
                if (!a->s) return st;
            }
            break;
        case PE_ATTR_INTS: case PE_ATTR_LONGS: case PE_ATTR_BOOLS: {
            /* The IR always holds an array (n + 1 elements, as the builder does). */
            const auto *iv = fa->ints();
            const auto *bv = fa->bools();
            flatbuffers::uoffset_t n = a->type == PE_ATTR_BOOLS ? (bv ? bv->size() : 0) : (iv ? iv->size() : 0);
            PE_CHECK(count(n, "a list attr", &a->n));
            a->ints = static_cast<int64_t *>(alloc((size_t)a->n + 1, sizeof(int64_t), &st));
            if (!a->ints) return st;
            for (int k = 0; k < a->n; k++)
                a->ints[k] = a->type == PE_ATTR_BOOLS ? (scalar_at(bv, k) != 0) : scalar_at(iv, k);
            break;
        }
        case PE_ATTR_FLOATS: {
            const auto *fv = fa->floats();
            PE_CHECK(count(fv ? fv->size() : 0, "a list attr", &a->n));
            a->floats = static_cast<double *>(alloc((size_t)a->n + 1, sizeof(double), &st));
            if (!a->floats) return st;
            for (int k = 0; k < a->n; k++) a->floats[k] = scalar_at(fv, k);
            break;
        }
        case PE_ATTR_STRINGS: {
            const auto *sv = fa->strings();
            PE_CHECK(count(sv ? sv->size() : 0, "a list attr", &a->n));
            a->strings = static_cast<char **>(alloc((size_t)a->n + 1, sizeof(char *), &st));
            if (!a->strings) return st;
            for (int k = 0; k < a->n; k++) {
                snprintf(field, sizeof field, "element %d of attr '%.16s'", k, a->name);
                PE_CHECK(str(sv->Get((flatbuffers::uoffset_t)k), field, &a->strings[k]));
            }
            break;
        }
        default: break;
        }
        return PE_OK;
    }
};

/* Verifies and decodes a binary program (no semantic check). */
pe_status decode_binary(const void *data, size_t size, const char *what, pe_program **out) {
    if (size < 8 || !fb::ProgramBufferHasIdentifier(data))
        return pe_error(PE_ERR_FORMAT, "'%s' is not a PE program: no \"PEPG\" file identifier", what);
    if (size >= FLATBUFFERS_MAX_BUFFER_SIZE)
        return pe_error(PE_ERR_FORMAT, "'%s' is not a PE program: %zu bytes is larger than a flatbuffer can be",
                        what, size);
    /* A finished flatbuffer is padded to its largest alignment (at least 4).
     * The Verifier does not look at the zero padding after the last string,
     * so without this a file cut by 1-3 bytes would still load. */
    if (size % 4)
        return pe_error(PE_ERR_FORMAT,
                        "'%s' is not a PE program: %zu bytes is not a whole number of 4-byte words "
                        "(truncated .pe data)",
                        what, size);
    /* Flatbuffers read scalars in place: give them an 8-byte aligned copy
     * when the caller's buffer is not. */
    const uint8_t *buf = static_cast<const uint8_t *>(data);
    std::unique_ptr<uint64_t[]> copy;
    if (reinterpret_cast<uintptr_t>(buf) % 8) {
        copy.reset(new uint64_t[size / 8 + 1]);
        memcpy(copy.get(), data, size);
        buf = reinterpret_cast<const uint8_t *>(copy.get());
    }
    /* Depth: Program > blocks > Block > ops > Op > attrs > Attr > strings is
     * 8 deep. Tables: every table takes at least 4 bytes of the buffer, so a
     * valid file has at most size/4 of them; more means tables are shared to
     * make verification (and decoding) blow up. */
    flatbuffers::Verifier::Options opts;
    opts.max_depth = 16;
    opts.max_tables = (flatbuffers::uoffset_t)(size / 4 + 16);
    opts.check_alignment = true;
    flatbuffers::Verifier verifier(buf, size, opts);
    if (!fb::VerifyProgramBuffer(verifier))
        return pe_error(PE_ERR_FORMAT,
                        "'%s' is not a PE program: the flatbuffers verifier rejects it (truncated or "
                        "corrupt .pe data)",
                        what);
    Decoder dec(what, size);
    return dec.program(fb::GetProgram(buf), out);
}

/* Parses JSON text with flatbuffers' own parser into a binary buffer and
 * decodes that. */
pe_status decode_json(const char *text, size_t size, const char *what, pe_program **out) {
    const void *nul = memchr(text, 0, size);
    if (nul)
        return pe_error(PE_ERR_FORMAT, "'%s' is not a PE program: the JSON text has a NUL byte at offset %zu", what,
                        (size_t)(static_cast<const char *>(nul) - text));
    std::string json(text, size);
    flatbuffers::IDLOptions opts;
    opts.allow_non_utf8 = true; /* names are bytes to PE; the writer uses \xNN for non-UTF-8 */
    flatbuffers::Parser parser(opts);
    if (!parser.Parse(k_program_fbs, nullptr, "program.fbs"))
        return pe_error(PE_ERR_INTERNAL, "graph/program.fbs does not parse: %s", parser.error_.c_str());
    if (!parser.ParseJson(json.c_str(), what)) {
        std::string msg = parser.error_;
        while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.pop_back();
        for (char &c : msg)
            if (c == '\n' || c == '\r') c = ' ';
        return pe_error(PE_ERR_FORMAT, "'%s' is not a valid PE program (JSON): %s", what, msg.c_str());
    }
    return decode_binary(parser.builder_.GetBufferPointer(), parser.builder_.GetSize(), what, out);
}

pe_status finish(pe_status st, pe_program *p, const char *what, bool check, pe_program **out) {
    if (st == PE_OK && check) st = pe_program_check(p, what);
    if (st != PE_OK) {
        pe_program_free(p);
        return st;
    }
    *out = p;
    return PE_OK;
}

/* Content sniffing: PEPG identifier = binary, first non-space '{' = JSON. */
pe_status load_any(const void *data, size_t size, const char *what, bool check, pe_program **out) {
    if (!out) return pe_error(PE_ERR_INVALID, "pe_program_load: out is NULL");
    *out = nullptr;
    what = name_or(what);
    if (!data && size) return pe_error(PE_ERR_INVALID, "pe_program_load '%s': data is NULL", what);
    const char *c = static_cast<const char *>(data);
    pe_program *p = nullptr;
    pe_status st;
    if (size >= 8 && fb::ProgramBufferHasIdentifier(data)) {
        st = decode_binary(data, size, what, &p);
    } else {
        size_t i = 0;
        if (size >= 3 && !memcmp(c, "\xEF\xBB\xBF", 3)) i = 3; /* UTF-8 byte order mark */
        while (i < size && (c[i] == ' ' || c[i] == '\t' || c[i] == '\n' || c[i] == '\r')) i++;
        if (i == size)
            return pe_error(PE_ERR_FORMAT, "'%s' is not a PE program: it is empty", what);
        if (c[i] != '{')
            return pe_error(PE_ERR_FORMAT,
                            "'%s' is not a PE program: neither a .pe flatbuffer (no \"PEPG\" identifier) nor "
                            "JSON (does not start with '{')",
                            what);
        st = decode_json(c + i, size - i, what, &p);
    }
    return finish(st, p, what, check, out);
}

/* ======================= encoding: C IR -> flatbuffer ==================== */

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

/* The int in a C enum field. C code may store any int there (the checker
 * reports it); loading an out-of-range enum in C++ is undefined, so read the
 * bytes. */
template <typename E> int enum_value(const E &e) {
    static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
    int v;
    memcpy(&v, &e, sizeof v);
    return v;
}

/* Checks that the IR can be represented (names present, enums in range) and
 * estimates the buffer size: a flatbuffer cannot exceed 2 GiB. */
pe_status validate_for_save(const pe_program *p) {
    if (!p) return pe_error(PE_ERR_INVALID, "cannot save a NULL program");
    if (p->n_blocks < 0 || (p->n_blocks && !p->blocks))
        return pe_error(PE_ERR_INVALID, "cannot save the program: bad block list");
    double est = 64;
    for (int bi = 0; bi < p->n_blocks; bi++) {
        const pe_block *b = &p->blocks[bi];
        if (b->n_vars < 0 || b->n_ops < 0 || (b->n_vars && !b->vars) || (b->n_ops && !b->ops))
            return pe_error(PE_ERR_INVALID, "cannot save the program: block %d has a bad var or op list", bi);
        for (int i = 0; i < b->n_vars; i++) {
            const pe_var *v = &b->vars[i];
            if (!v->name) return pe_error(PE_ERR_INVALID, "cannot save the program: block %d var %d has no name", bi, i);
            int dt = enum_value(v->dtype);
            if (!pe_dtype_valid(dt) || v->ndim < 0 || v->ndim > kMaxDims)
                return pe_error(PE_ERR_INVALID, "cannot save the program: block %d var '%s' has dtype %d and %d dims",
                                bi, v->name, dt, v->ndim);
            est += 96 + (double)strlen(v->name) + 8.0 * v->ndim;
        }
        for (int i = 0; i < b->n_ops; i++) {
            const pe_op *op = &b->ops[i];
            if (!op->type) return pe_error(PE_ERR_INVALID, "cannot save the program: block %d op %d has no type", bi, i);
            est += 64 + (double)strlen(op->type);
            const pe_slot *lists[2] = {op->inputs, op->outputs};
            const int ns[2] = {op->n_inputs, op->n_outputs};
            for (int d = 0; d < 2; d++) {
                if (ns[d] < 0 || (ns[d] && !lists[d]))
                    return pe_error(PE_ERR_INVALID, "cannot save the program: block %d op %d (%s) has a bad slot list",
                                    bi, i, op->type);
                for (int s = 0; s < ns[d]; s++) {
                    const pe_slot *sl = &lists[d][s];
                    if (!sl->name || sl->n_args < 0 || (sl->n_args && !sl->args))
                        return pe_error(PE_ERR_INVALID, "cannot save the program: block %d op %d (%s) has a bad slot",
                                        bi, i, op->type);
                    est += 32 + (double)strlen(sl->name);
                    for (int k = 0; k < sl->n_args; k++) {
                        if (!sl->args[k])
                            return pe_error(PE_ERR_INVALID,
                                            "cannot save the program: block %d op %d (%s) slot %s arg %d is NULL", bi,
                                            i, op->type, sl->name, k);
                        est += 16 + (double)strlen(sl->args[k]);
                    }
                }
            }
            if (op->n_attrs < 0 || (op->n_attrs && !op->attrs))
                return pe_error(PE_ERR_INVALID, "cannot save the program: block %d op %d (%s) has a bad attr list", bi,
                                i, op->type);
            for (int k = 0; k < op->n_attrs; k++) {
                const pe_attr *a = &op->attrs[k];
                int t = enum_value(a->type);
                if (t < 0 || t >= PE_ATTR_TYPE_COUNT)
                    return pe_error(PE_ERR_INVALID, "cannot save the program: block %d op %d (%s) attr %d has type %d",
                                    bi, i, op->type, k, t);
                bool list = a->type == PE_ATTR_INTS || a->type == PE_ATTR_LONGS || a->type == PE_ATTR_BOOLS ||
                            a->type == PE_ATTR_FLOATS || a->type == PE_ATTR_STRINGS;
                bool ok = a->name != nullptr;
                if (ok && list) {
                    const void *arr = a->type == PE_ATTR_FLOATS ? (const void *)a->floats
                                      : a->type == PE_ATTR_STRINGS ? (const void *)a->strings
                                                                   : (const void *)a->ints;
                    ok = a->n >= 0 && (a->n == 0 || arr);
                    for (int e = 0; ok && a->type == PE_ATTR_STRINGS && e < a->n; e++) {
                        ok = a->strings[e] != nullptr;
                        if (ok) est += 8 + (double)strlen(a->strings[e]);
                    }
                    est += 8.0 * (a->n > 0 ? a->n : 0);
                }
                if (!ok)
                    return pe_error(PE_ERR_INVALID, "cannot save the program: block %d op %d (%s) attr %d ('%s') is malformed",
                                    bi, i, op->type, k, a->name ? a->name : "");
                est += 48 + (double)strlen(a->name) + (a->s ? (double)strlen(a->s) : 0);
            }
        }
    }
    if (est > (double)(1u << 30))
        return pe_error(PE_ERR_UNSUPPORTED, "cannot save the program: about %.0f MB is more than the .pe format holds",
                        est / 1e6);
    return PE_OK;
}

Offset<flatbuffers::Vector<Offset<fb::Slot>>> encode_slots(FlatBufferBuilder &fbb, const pe_slot *slots, int n) {
    std::vector<Offset<fb::Slot>> v;
    v.reserve((size_t)n);
    for (int s = 0; s < n; s++) {
        std::vector<Offset<flatbuffers::String>> args;
        args.reserve((size_t)slots[s].n_args);
        for (int k = 0; k < slots[s].n_args; k++) args.push_back(fbb.CreateSharedString(slots[s].args[k]));
        auto name = fbb.CreateSharedString(slots[s].name);
        auto av = fbb.CreateVector(args);
        fb::SlotBuilder sb(fbb);
        sb.add_name(name);
        sb.add_args(av);
        v.push_back(sb.Finish());
    }
    return fbb.CreateVector(v);
}

Offset<fb::Attr> encode_attr(FlatBufferBuilder &fbb, const pe_attr *a) {
    auto name = fbb.CreateSharedString(a->name);
    Offset<flatbuffers::String> s;
    Offset<flatbuffers::Vector<int64_t>> ints;
    Offset<flatbuffers::Vector<double>> floats;
    Offset<flatbuffers::Vector<Offset<flatbuffers::String>>> strings;
    Offset<flatbuffers::Vector<uint8_t>> bools;
    switch (a->type) {
    case PE_ATTR_STRING: s = fbb.CreateString(a->s ? a->s : ""); break;
    case PE_ATTR_INTS: case PE_ATTR_LONGS: ints = fbb.CreateVector(a->ints, (size_t)a->n); break;
    case PE_ATTR_FLOATS: floats = fbb.CreateVector(a->floats, (size_t)a->n); break;
    case PE_ATTR_BOOLS: {
        std::vector<uint8_t> b((size_t)a->n);
        for (int k = 0; k < a->n; k++) b[(size_t)k] = a->ints[k] != 0;
        bools = fbb.CreateVector(b);
        break;
    }
    case PE_ATTR_STRINGS: {
        std::vector<Offset<flatbuffers::String>> v;
        for (int k = 0; k < a->n; k++) v.push_back(fbb.CreateString(a->strings[k]));
        strings = fbb.CreateVector(v);
        break;
    }
    default: break;
    }
    /* The builder forces defaults (see encode): only the fields of the type
     * are added, so each attr shows its type and value in the JSON form. */
    fb::AttrBuilder ab(fbb);
    ab.add_name(name);
    ab.add_type(static_cast<fb::AttrType>(a->type));
    switch (a->type) {
    case PE_ATTR_INT: case PE_ATTR_LONG: ab.add_i(a->i); break;
    case PE_ATTR_FLOAT: ab.add_f(a->f); break;
    case PE_ATTR_BOOL: ab.add_b(a->i != 0); break;
    case PE_ATTR_BLOCK: ab.add_block_idx((int32_t)a->i); break;
    case PE_ATTR_STRING: ab.add_s(s); break;
    case PE_ATTR_INTS: case PE_ATTR_LONGS: ab.add_ints(ints); break;
    case PE_ATTR_FLOATS: ab.add_floats(floats); break;
    case PE_ATTR_BOOLS: ab.add_bools(bools); break;
    case PE_ATTR_STRINGS: ab.add_strings(strings); break;
    default: break;
    }
    return ab.Finish();
}

/* Builds the finished flatbuffer of p into fbb (p already validated). */
void encode(FlatBufferBuilder &fbb, const pe_program *p) {
    /* Every field added explicitly is stored, even at its default, so the
     * JSON form spells out dtype, idx, parent_idx and attr values. Optional
     * flags are simply not added when false. */
    fbb.ForceDefaults(true);
    std::vector<Offset<fb::Block>> blocks;
    for (int bi = 0; bi < p->n_blocks; bi++) {
        const pe_block *b = &p->blocks[bi];
        std::vector<Offset<fb::Var>> vars;
        vars.reserve((size_t)b->n_vars);
        for (int i = 0; i < b->n_vars; i++) {
            const pe_var *v = &b->vars[i];
            auto name = fbb.CreateSharedString(v->name);
            auto dims = fbb.CreateVector(v->dims, (size_t)v->ndim);
            fb::VarBuilder vb(fbb);
            vb.add_name(name);
            vb.add_dtype(static_cast<fb::DType>(v->dtype));
            vb.add_dims(dims);
            if (v->persistable) vb.add_persistable(true);
            if (v->is_parameter) vb.add_is_parameter(true);
            if (v->stop_gradient) vb.add_stop_gradient(true);
            vars.push_back(vb.Finish());
        }
        std::vector<Offset<fb::Op>> ops;
        ops.reserve((size_t)b->n_ops);
        for (int i = 0; i < b->n_ops; i++) {
            const pe_op *op = &b->ops[i];
            auto type = fbb.CreateSharedString(op->type);
            auto ins = encode_slots(fbb, op->inputs, op->n_inputs);
            auto outs = encode_slots(fbb, op->outputs, op->n_outputs);
            std::vector<Offset<fb::Attr>> attrs;
            for (int k = 0; k < op->n_attrs; k++) attrs.push_back(encode_attr(fbb, &op->attrs[k]));
            auto av = fbb.CreateVector(attrs);
            fb::OpBuilder ob(fbb);
            ob.add_type(type);
            ob.add_inputs(ins);
            ob.add_outputs(outs);
            ob.add_attrs(av);
            ops.push_back(ob.Finish());
        }
        auto vv = fbb.CreateVector(vars);
        auto ov = fbb.CreateVector(ops);
        fb::BlockBuilder bb(fbb);
        bb.add_idx(b->idx);
        bb.add_parent_idx(b->parent_idx);
        bb.add_vars(vv);
        bb.add_ops(ov);
        blocks.push_back(bb.Finish());
    }
    auto bv = fbb.CreateVector(blocks);
    Offset<flatbuffers::Vector<Offset<flatbuffers::String>>> feeds, fetches;
    if (p->n_feed_names) {
        std::vector<Offset<flatbuffers::String>> v;
        for (int k = 0; k < p->n_feed_names; k++) v.push_back(fbb.CreateString(p->feed_names[k]));
        feeds = fbb.CreateVector(v);
    }
    if (p->n_fetch_names) {
        std::vector<Offset<flatbuffers::String>> v;
        for (int k = 0; k < p->n_fetch_names; k++) v.push_back(fbb.CreateString(p->fetch_names[k]));
        fetches = fbb.CreateVector(v);
    }
    fb::ProgramBuilder pb(fbb);
    pb.add_version(p->version);
    pb.add_random_seed(p->random_seed);
    pb.add_blocks(bv);
    if (p->n_feed_names) pb.add_feed_names(feeds);
    if (p->n_fetch_names) pb.add_fetch_names(fetches);
    fb::FinishProgramBuffer(fbb, pb.Finish());
}

/* ---- JSON text from a buffer: flatbuffers' mini-reflection printer ------ */

/* Shortest decimal that reads back to the same double; nan/inf spelled the
 * way flatbuffers' parser reads them. */
std::string double_text(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, nullptr) == x) break;
    }
    std::string s = buf;
    /* Keep it visibly a float: "1" -> "1.0" (not needed by the parser, but
     * readers of the JSON see a FLOAT). */
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

class JsonPrinter : public flatbuffers::ToStringVisitor {
  public:
    JsonPrinter() : ToStringVisitor("\n", true, "  ", true) {}

    void Field(size_t field_idx, size_t set_idx, flatbuffers::ElementaryType type, bool is_vector,
               const flatbuffers::TypeTable *type_table, const char *name, const uint8_t *val) override {
        ToStringVisitor::Field(field_idx, set_idx, type, is_vector, type_table, name, val);
        pending_type_ = type;
        pending_ref_ = type_table;
    }
    void StartSequence() override {
        if (compact_ > 0 || (!vecs_.empty() && vecs_.back().compact_elems)) {
            if (compact_++ == 0) {
                saved_d_ = d;
                saved_in_ = in;
                d = " ";
                in = "";
            }
        }
        ToStringVisitor::StartSequence();
    }
    void EndSequence() override {
        ToStringVisitor::EndSequence();
        if (compact_ > 0 && --compact_ == 0) {
            d = saved_d_;
            in = saved_in_;
        }
    }
    void StartVector() override {
        bool tables = pending_type_ == flatbuffers::ET_SEQUENCE;
        bool compact_elems = tables && (pending_ref_ == fb::VarTypeTable() || pending_ref_ == fb::SlotTypeTable() ||
                                        pending_ref_ == fb::AttrTypeTable());
        vecs_.push_back({tables && compact_ == 0, compact_elems, 0, s.size() + 1});
        vector_delimited = vecs_.back().delimited;
        ToStringVisitor::StartVector();
    }
    void Element(size_t i, flatbuffers::ElementaryType type, const flatbuffers::TypeTable *type_table,
                 const uint8_t *val) override {
        vector_delimited = vecs_.back().delimited;
        vecs_.back().n++;
        ToStringVisitor::Element(i, type, type_table, val);
    }
    void EndVector() override {
        const Vec &v = vecs_.back();
        if (v.n == 0) { /* "[]", not "[ ]" or "[\n  \n]" */
            s.resize(v.open);
            s += "]";
            if (v.delimited) indent_level--;
        } else {
            vector_delimited = v.delimited;
            ToStringVisitor::EndVector();
        }
        vecs_.pop_back();
    }
    void Double(double x) override { s += double_text(x); }
    /* JSON string: UTF-8 as is (readable names), control characters as
     * \uXXXX, bytes that are not UTF-8 as \xNN (flatbuffers' parser reads
     * that back; PE names are bytes). */
    void String(const flatbuffers::String *str) override {
        const char *p = str->c_str();
        size_t n = str->size();
        s += '"';
        for (size_t i = 0; i < n;) {
            unsigned char c = (unsigned char)p[i];
            char esc[8];
            switch (c) {
            case '"': s += "\\\""; i++; continue;
            case '\\': s += "\\\\"; i++; continue;
            case '\n': s += "\\n"; i++; continue;
            case '\t': s += "\\t"; i++; continue;
            case '\r': s += "\\r"; i++; continue;
            default: break;
            }
            if (c < 0x20 || c == 0x7f) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                s += esc;
                i++;
            } else if (c < 0x80) {
                s += (char)c;
                i++;
            } else {
                const char *q = p + i;
                /* FromUTF8 reads at most 4 bytes: copy so it cannot run past the end. */
                char tmp[5] = {0};
                memcpy(tmp, q, n - i < 4 ? n - i : 4);
                const char *t = tmp;
                if (flatbuffers::FromUTF8(&t) >= 0 && (size_t)(t - tmp) <= n - i) {
                    s.append(q, (size_t)(t - tmp));
                    i += (size_t)(t - tmp);
                } else {
                    snprintf(esc, sizeof esc, "\\x%02x", c);
                    s += esc;
                    i++;
                }
            }
        }
        s += '"';
    }

  private:
    struct Vec {
        bool delimited;     /* one element per line */
        bool compact_elems; /* elements are one-line tables */
        size_t n;           /* elements so far */
        size_t open;        /* length of s just after the '[' */
    };
    std::vector<Vec> vecs_;
    int compact_ = 0;
    std::string saved_d_, saved_in_;
    flatbuffers::ElementaryType pending_type_ = flatbuffers::ET_BOOL;
    const flatbuffers::TypeTable *pending_ref_ = nullptr;
};

pe_status to_buffer(const pe_program *p, void **data, size_t *size) {
    PE_CHECK(validate_for_save(p));
    FlatBufferBuilder fbb(4096);
    encode(fbb, p);
    void *m = malloc(fbb.GetSize() ? fbb.GetSize() : 1);
    if (!m) return pe_error(PE_ERR_NOMEM, "out of memory serializing the program (%u bytes)", (unsigned)fbb.GetSize());
    memcpy(m, fbb.GetBufferPointer(), fbb.GetSize());
    *data = m;
    *size = fbb.GetSize();
    return PE_OK;
}

pe_status to_json(const pe_program *p, std::string *text) {
    PE_CHECK(validate_for_save(p));
    FlatBufferBuilder fbb(4096);
    encode(fbb, p);
    JsonPrinter printer;
    flatbuffers::IterateFlatBuffer(fbb.GetBufferPointer(), fb::ProgramTypeTable(), &printer);
    *text = std::move(printer.s);
    *text += "\n";
    return PE_OK;
}

bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Runs f, turning any escaping C++ exception into a pe_status. */
template <typename F> pe_status guarded(const char *what, F f) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        return pe_error(PE_ERR_NOMEM, "%s: out of memory", what);
    } catch (const std::exception &e) {
        return pe_error(PE_ERR_INTERNAL, "%s: unexpected C++ exception: %s", what, e.what());
    } catch (...) {
        return pe_error(PE_ERR_INTERNAL, "%s: unexpected C++ exception", what);
    }
}

} // namespace

/* ============================== C API ===================================== */

extern "C" {

pe_status pe_program_load_buffer(const void *data, size_t size, const char *what, pe_program **out) {
    return guarded(name_or(what), [&] { return load_any(data, size, what, true, out); });
}

pe_status pe_program_load_buffer_unchecked(const void *data, size_t size, const char *what, pe_program **out) {
    return guarded(name_or(what), [&] { return load_any(data, size, what, false, out); });
}

pe_status pe_program_load_json(const char *text, size_t size, const char *what, pe_program **out) {
    return guarded(name_or(what), [&]() -> pe_status {
        if (!out) return pe_error(PE_ERR_INVALID, "pe_program_load_json: out is NULL");
        *out = nullptr;
        if (!text && size) return pe_error(PE_ERR_INVALID, "pe_program_load_json: text is NULL");
        const char *w = name_or(what);
        pe_program *p = nullptr;
        pe_status st = decode_json(text ? text : "", size, w, &p);
        return finish(st, p, w, true, out);
    });
}

pe_status pe_program_load_file(const char *path, pe_program **out) {
    if (!out) return pe_error(PE_ERR_INVALID, "pe_program_load_file: out is NULL");
    *out = nullptr;
    if (!path) return pe_error(PE_ERR_INVALID, "pe_program_load_file: path is NULL");
    void *data = nullptr;
    size_t size = 0;
    PE_CHECK(pe_read_file(path, &data, &size));
    pe_status st = pe_program_load_buffer(data, size, path, out);
    free(data);
    return st;
}

pe_status pe_program_to_buffer(const pe_program *p, void **data, size_t *size) {
    if (!data || !size) return pe_error(PE_ERR_INVALID, "pe_program_to_buffer: NULL output pointer");
    *data = nullptr;
    *size = 0;
    return guarded("serializing the program", [&] { return to_buffer(p, data, size); });
}

pe_status pe_program_to_json(const pe_program *p, char **json) {
    if (!json) return pe_error(PE_ERR_INVALID, "pe_program_to_json: NULL output pointer");
    *json = nullptr;
    return guarded("writing the program as JSON", [&]() -> pe_status {
        std::string text;
        PE_CHECK(to_json(p, &text));
        char *m = static_cast<char *>(malloc(text.size() + 1));
        if (!m) return pe_error(PE_ERR_NOMEM, "out of memory writing the program as JSON");
        memcpy(m, text.c_str(), text.size() + 1);
        *json = m;
        return PE_OK;
    });
}

pe_status pe_program_save_file(const pe_program *p, const char *path) {
    if (!path) return pe_error(PE_ERR_INVALID, "pe_program_save_file: path is NULL");
    return guarded(path, [&]() -> pe_status {
        pe_status st;
        if (ends_with(path, ".json")) {
            std::string text;
            st = to_json(p, &text);
            if (st == PE_OK) st = pe_write_file_atomic(path, text.data(), text.size());
        } else {
            FlatBufferBuilder fbb(4096);
            st = validate_for_save(p);
            if (st == PE_OK) {
                encode(fbb, p);
                st = pe_write_file_atomic(path, fbb.GetBufferPointer(), fbb.GetSize());
            }
        }
        if (st != PE_OK) return pe_error_wrap(st, "saving program '%s'", path);
        return PE_OK;
    });
}

} /* extern "C" */

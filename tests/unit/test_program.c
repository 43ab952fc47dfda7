/* tests/unit/test_program.c — the program format (graph/program.fbs,
 * graph/program_io.cc) and the semantic checker (graph/check.c).
 *
 * Round trips through the binary and JSON forms must give back the same IR
 * (every field, doubles bit for bit where the format allows); every checker
 * rule has one failing case whose message must name the place; and hostile
 * bytes (each truncation of a valid file, seeded bit flips, random bytes,
 * broken JSON) must give an error, never a crash, with nothing leaked (this
 * test also runs in the ASan build).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "graph/internal.h"
#include "pe/program.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- building programs ------------------------------------------------- */

static pe_var *var(pe_block *b, const char *name, pe_dtype dt, int ndim, const int64_t *dims) {
    pe_var *v = pe_block_add_var(b, name, dt, ndim, dims);
    assert_non_null(v);
    return v;
}

static pe_op *op2(pe_block *b, const char *type, const char *in_slot, const char *in, const char *out_slot,
                  const char *out) {
    pe_op *op = pe_block_add_op(b, type);
    assert_non_null(op);
    if (in_slot) assert_int_equal(pe_op_add_input(op, in_slot, in), PE_OK);
    if (out_slot) assert_int_equal(pe_op_add_output(op, out_slot, out), PE_OK);
    return op;
}

/* A valid two-block program: an MLP layer in block 0 and a sub-block that
 * reads a var of its parent. Every op is known and every var declared. */
static pe_program *build_mlp(void) {
    pe_program *p = pe_program_new();
    assert_non_null(p);
    p->random_seed = 1234567890123ll;
    p->version = 1;
    pe_block *b = &p->blocks[0];
    var(b, "x", PE_DTYPE_FP32, 2, (int64_t[]){-1, 4});
    pe_var *w = var(b, "fc_0.w_0", PE_DTYPE_FP32, 2, (int64_t[]){4, 3});
    w->persistable = w->is_parameter = true;
    pe_var *bias = var(b, "fc_0.b_0", PE_DTYPE_FP32, 1, (int64_t[]){3});
    bias->persistable = bias->is_parameter = true;
    var(b, "fc_0.tmp_0", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3});
    var(b, "fc_0.tmp_1", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3});
    var(b, "prob", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3})->stop_gradient = true;
    var(b, "total", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3});
    var(b, "one", PE_DTYPE_FP32, 0, NULL);
    var(b, "label", PE_DTYPE_INT64, 2, (int64_t[]){-1, 1});
    var(b, "pooled", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3});

    pe_op *op = op2(b, "mul", "X", "x", "Out", "fc_0.tmp_0"); /* op 0 */
    assert_int_equal(pe_op_add_input(op, "Y", "fc_0.w_0"), PE_OK);
    assert_int_equal(pe_op_set_int(op, "x_num_col_dims", 1), PE_OK);
    assert_int_equal(pe_op_set_int(op, "op_role", PE_ROLE_FORWARD), PE_OK);
    assert_int_equal(pe_op_set_strings(op, "op_role_var", (const char *[]){"fc_0.w_0", "fc_0.w_0@GRAD"}, 2), PE_OK);
    op = op2(b, "elementwise_add", "X", "fc_0.tmp_0", "Out", "fc_0.tmp_1"); /* op 1 */
    assert_int_equal(pe_op_add_input(op, "Y", "fc_0.b_0"), PE_OK);
    assert_int_equal(pe_op_set_int(op, "axis", 1), PE_OK);
    op2(b, "relu", "X", "fc_0.tmp_1", "Out", "fc_0.tmp_1"); /* op 2, in place */
    op = op2(b, "softmax", "X", "fc_0.tmp_1", "Out", "prob"); /* op 3 */
    assert_int_equal(pe_op_set_int(op, "axis", -1), PE_OK);
    assert_int_equal(pe_op_set_string(op, "op_namescope", "/fc_0/"), PE_OK);
    op = op2(b, "fill_constant", NULL, NULL, "Out", "one"); /* op 4 */
    assert_int_equal(pe_op_set_longs(op, "shape", NULL, 0), PE_OK);
    assert_int_equal(pe_op_set_float(op, "value", 1.0), PE_OK);
    assert_int_equal(pe_op_set_bool(op, "force_cpu", true), PE_OK);
    op = op2(b, "sum", "X", "prob", "Out", "total"); /* op 5 */
    assert_int_equal(pe_op_add_input(op, "X", "fc_0.tmp_1"), PE_OK);
    assert_int_equal(pe_op_add_input(op, "X", PE_EMPTY_VAR), PE_OK);
    op = op2(b, "pool2d", "X", "total", "Out", "pooled"); /* op 6: ints + strings */
    assert_int_equal(pe_op_set_ints(op, "ksize", (int64_t[]){2, 2}, 2), PE_OK);
    assert_int_equal(pe_op_set_string(op, "pooling_type", "avg"), PE_OK);

    pe_block *sub = pe_program_add_block(p, 0);
    assert_non_null(sub);
    var(sub, "scaled", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3});
    op = op2(sub, "scale", "X", "prob", "Out", "scaled"); /* "prob" lives in block 0 */
    assert_int_equal(pe_op_set_float(op, "scale", 0.1), PE_OK);
    assert_int_equal(pe_op_set_float(op, "bias", 1e-13), PE_OK);
    return p;
}

/* ---- structural equality ----------------------------------------------- */

static bool same_double(double a, double b, bool bits) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return bits ? !memcmp(&a, &b, sizeof a) : a == b;
}

static void assert_slots_equal(const pe_slot *a, int na, const pe_slot *b, int nb) {
    assert_int_equal(na, nb);
    for (int s = 0; s < na; s++) {
        assert_string_equal(a[s].name, b[s].name);
        assert_int_equal(a[s].n_args, b[s].n_args);
        for (int k = 0; k < a[s].n_args; k++) assert_string_equal(a[s].args[k], b[s].args[k]);
    }
}

/* `bits`: doubles equal bit for bit (binary form); the JSON form keeps
 * every value but may turn -0.0 into 0.0 (the parser drops a field equal to
 * its default). */
static void assert_programs_equal(const pe_program *a, const pe_program *b, bool bits) {
    assert_int_equal(a->version, b->version);
    assert_true(a->random_seed == b->random_seed);
    assert_int_equal(a->n_blocks, b->n_blocks);
    for (int bi = 0; bi < a->n_blocks; bi++) {
        const pe_block *x = &a->blocks[bi], *y = &b->blocks[bi];
        assert_int_equal(x->idx, y->idx);
        assert_int_equal(x->parent_idx, y->parent_idx);
        assert_int_equal(x->n_vars, y->n_vars);
        for (int i = 0; i < x->n_vars; i++) {
            const pe_var *u = &x->vars[i], *v = &y->vars[i];
            assert_string_equal(u->name, v->name);
            assert_int_equal(u->dtype, v->dtype);
            assert_int_equal(u->ndim, v->ndim);
            for (int d = 0; d < u->ndim; d++) assert_true(u->dims[d] == v->dims[d]);
            assert_int_equal(u->persistable, v->persistable);
            assert_int_equal(u->is_parameter, v->is_parameter);
            assert_int_equal(u->stop_gradient, v->stop_gradient);
        }
        assert_int_equal(x->n_ops, y->n_ops);
        for (int i = 0; i < x->n_ops; i++) {
            const pe_op *o = &x->ops[i], *q = &y->ops[i];
            assert_string_equal(o->type, q->type);
            assert_slots_equal(o->inputs, o->n_inputs, q->inputs, q->n_inputs);
            assert_slots_equal(o->outputs, o->n_outputs, q->outputs, q->n_outputs);
            assert_int_equal(o->n_attrs, q->n_attrs);
            for (int k = 0; k < o->n_attrs; k++) {
                const pe_attr *s = &o->attrs[k], *t = &q->attrs[k];
                assert_string_equal(s->name, t->name);
                assert_int_equal(s->type, t->type);
                switch (s->type) {
                case PE_ATTR_INT: case PE_ATTR_LONG: case PE_ATTR_BOOL: case PE_ATTR_BLOCK:
                    assert_true(s->i == t->i);
                    break;
                case PE_ATTR_FLOAT: assert_true(same_double(s->f, t->f, bits)); break;
                case PE_ATTR_STRING: assert_string_equal(s->s, t->s); break;
                case PE_ATTR_INTS: case PE_ATTR_LONGS: case PE_ATTR_BOOLS:
                    assert_int_equal(s->n, t->n);
                    for (int e = 0; e < s->n; e++) assert_true(s->ints[e] == t->ints[e]);
                    break;
                case PE_ATTR_FLOATS:
                    assert_int_equal(s->n, t->n);
                    for (int e = 0; e < s->n; e++) assert_true(same_double(s->floats[e], t->floats[e], bits));
                    break;
                case PE_ATTR_STRINGS:
                    assert_int_equal(s->n, t->n);
                    for (int e = 0; e < s->n; e++) assert_string_equal(s->strings[e], t->strings[e]);
                    break;
                default: fail_msg("attr type %d", (int)s->type);
                }
            }
        }
    }
}

static void *to_buffer(const pe_program *p, size_t *size) {
    void *data = NULL;
    assert_int_equal(pe_program_to_buffer(p, &data, size), PE_OK);
    assert_non_null(data);
    return data;
}

/* ---- round trips ------------------------------------------------------- */

static void test_roundtrip_binary(void **state) {
    (void)state;
    pe_program *p = build_mlp();
    assert_int_equal(pe_program_check(p, "mlp"), PE_OK);
    size_t n = 0;
    void *buf = to_buffer(p, &n);
    assert_true(n % 8 == 0);
    assert_memory_equal((char *)buf + 4, "PEPG", 4);
    pe_program *q = NULL;
    assert_int_equal(pe_program_load_buffer(buf, n, "mlp.pe", &q), PE_OK);
    assert_programs_equal(p, q, true);
    /* Deterministic: the same IR gives the same bytes. */
    size_t n2 = 0;
    void *buf2 = to_buffer(q, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(buf, buf2, n);
    /* A misaligned copy of the buffer loads the same. */
    char *odd = malloc(n + 1);
    memcpy(odd + 1, buf, n);
    pe_program *r = NULL;
    assert_int_equal(pe_program_load_buffer(odd + 1, n, "odd", &r), PE_OK);
    assert_programs_equal(p, r, true);
    free(odd);
    free(buf);
    free(buf2);
    pe_program_free(p);
    pe_program_free(q);
    pe_program_free(r);
}

static void test_roundtrip_json(void **state) {
    (void)state;
    pe_program *p = build_mlp();
    char *json = NULL;
    assert_int_equal(pe_program_to_json(p, &json), PE_OK);
    /* Readable: enums by name, one var per line. */
    assert_non_null(strstr(json, "{ \"name\": \"fc_0.w_0\", \"dtype\": \"FP32\", \"dims\": [ 4, 3 ], "
                                 "\"persistable\": true, \"is_parameter\": true }"));
    assert_non_null(strstr(json, "\"type\": \"FLOAT\", \"f\": 1e-13"));
    assert_non_null(strstr(json, "\"parent_idx\": -1"));
    pe_program *q = NULL;
    assert_int_equal(pe_program_load_json(json, strlen(json), "mlp.json", &q), PE_OK);
    assert_programs_equal(p, q, true);
    char *json2 = NULL;
    assert_int_equal(pe_program_to_json(q, &json2), PE_OK);
    assert_string_equal(json, json2);
    /* load_buffer sniffs JSON too, with leading white space. */
    size_t len = strlen(json);
    char *padded = malloc(len + 3);
    memcpy(padded, " \n\t", 3);
    memcpy(padded + 3, json, len);
    pe_program *r = NULL;
    assert_int_equal(pe_program_load_buffer(padded, len + 3, "padded.json", &r), PE_OK);
    assert_programs_equal(p, r, true);
    free(padded);
    free(json);
    free(json2);
    pe_program_free(p);
    pe_program_free(q);
    pe_program_free(r);
}

/* An inference model's feed / fetch names survive .pe, JSON and clone;
 * names that are not vars of block 0 are refused, on set and on load. */
static void test_feed_fetch_names(void **state) {
    (void)state;
    pe_program *p = build_mlp();
    const char *feeds[] = {"fc_0.w_0"}, *fetches[] = {"fc_0.b_0", "fc_0.w_0"}, *bad[] = {"nope"};
    assert_int_equal(pe_program_set_io(p, bad, 1, fetches, 2), PE_ERR_NOT_FOUND);
    assert_non_null(strstr(pe_last_error(), "feed var 'nope'"));
    assert_int_equal(p->n_feed_names, 0);
    assert_int_equal(pe_program_set_io(p, feeds, 1, fetches, 2), PE_OK);
    size_t n = 0;
    void *buf = to_buffer(p, &n);
    pe_program *q = NULL;
    assert_int_equal(pe_program_load_buffer(buf, n, "io.pe", &q), PE_OK);
    char *json = NULL;
    assert_int_equal(pe_program_to_json(q, &json), PE_OK);
    assert_non_null(strstr(json, "\"fetch_names\": [ \"fc_0.b_0\", \"fc_0.w_0\" ]"));
    pe_program *r = NULL;
    assert_int_equal(pe_program_load_json(json, strlen(json), "io.json", &r), PE_OK);
    pe_program *c = pe_program_clone(r);
    assert_non_null(c);
    const pe_program *all[] = {q, r, c};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(all[k]->n_feed_names, 1);
        assert_string_equal(all[k]->feed_names[0], "fc_0.w_0");
        assert_int_equal(all[k]->n_fetch_names, 2);
        assert_string_equal(all[k]->fetch_names[0], "fc_0.b_0");
        assert_string_equal(all[k]->fetch_names[1], "fc_0.w_0");
    }
    /* a file naming a var it lacks is refused on load */
    char *at = strstr(json, "\"fc_0.b_0\", \"fc_0.w_0\" ]");
    assert_non_null(at);
    memcpy(at + 1, "zz_0", 4);
    pe_program *bad_p = NULL;
    assert_int_not_equal(pe_program_load_json(json, strlen(json), "bad.json", &bad_p), PE_OK);
    assert_non_null(strstr(pe_last_error(), "fetch name 'zz_0.b_0'"));
    /* a program without names writes none */
    pe_program *plain = build_mlp();
    char *pj = NULL;
    assert_int_equal(pe_program_to_json(plain, &pj), PE_OK);
    assert_null(strstr(pj, "feed_names"));
    free(pj);
    pe_program_free(plain);
    free(json);
    free(buf);
    pe_program_free(c);
    pe_program_free(r);
    pe_program_free(q);
    pe_program_free(p);
}

/* A hand-written program in the JSON form other tools (scripts/pe_json.py)
 * emit: field names quoted, defaults left out, enums by name. */
static const char k_hand_json[] =
    "{\"version\": 1, \"random_seed\": 7, \"blocks\": [{\"idx\": 0, \"parent_idx\": -1,\n"
    " \"vars\": [{\"name\": \"x\", \"dtype\": \"FP32\", \"dims\": [-1, 4]},\n"
    "          {\"name\": \"y\", \"dtype\": \"FP32\", \"dims\": [-1, 4], \"stop_gradient\": true}],\n"
    " \"ops\": [{\"type\": \"scale\", \"inputs\": [{\"name\": \"X\", \"args\": [\"x\"]}],\n"
    "          \"outputs\": [{\"name\": \"Out\", \"args\": [\"y\"]}],\n"
    "          \"attrs\": [{\"name\": \"scale\", \"type\": \"FLOAT\", \"f\": 2.5},\n"
    "                    {\"name\": \"bias_after_scale\", \"type\": \"BOOL\", \"b\": false}]}]}]}\n";

static void test_hand_written_json(void **state) {
    (void)state;
    pe_program *p = NULL;
    assert_int_equal(pe_program_load_json(k_hand_json, strlen(k_hand_json), "hand.json", &p), PE_OK);
    assert_int_equal(p->version, 1);
    assert_true(p->random_seed == 7);
    const pe_block *b = &p->blocks[0];
    assert_int_equal(b->n_vars, 2);
    assert_int_equal(b->vars[0].ndim, 2);
    assert_true(b->vars[0].dims[0] == -1 && b->vars[0].dims[1] == 4);
    assert_true(b->vars[1].stop_gradient);
    assert_string_equal(b->ops[0].type, "scale");
    const pe_attr *a = pe_op_attr(&b->ops[0], "scale");
    assert_non_null(a);
    assert_int_equal(a->type, PE_ATTR_FLOAT);
    assert_true(a->f == 2.5);
    a = pe_op_attr(&b->ops[0], "bias_after_scale");
    assert_int_equal(a->type, PE_ATTR_BOOL);
    assert_true(a->i == 0);
    pe_program_free(p);
}

/* Every attr type and awkward values, through both forms. Not every type
 * has an op using it in ops.def, so this goes around the checker. */
static pe_program *build_all_attrs(void) {
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    var(b, "x\xc3\xa9\n\"\\\x01", PE_DTYPE_BF16, 8, (int64_t[]){-1, 0, 1, 2, 3, 4, 5, INT64_MAX});
    var(b, "bad\xff\xfeutf8", PE_DTYPE_BOOL, 0, NULL);
    for (int dt = 0; dt < PE_DTYPE_COUNT; dt++) {
        char name[16];
        snprintf(name, sizeof name, "v%d", dt);
        var(b, name, (pe_dtype)dt, 1, (int64_t[]){dt});
    }
    pe_op *op = pe_block_add_op(b, "anything");
    assert_int_equal(pe_op_set_int(op, "int", -7), PE_OK);
    assert_int_equal(pe_op_set_long(op, "long", INT64_MIN), PE_OK);
    assert_int_equal(pe_op_set_float(op, "tiny", 1e-300), PE_OK);
    assert_int_equal(pe_op_set_float(op, "denormal", 4.9e-324), PE_OK);
    assert_int_equal(pe_op_set_float(op, "third", 1.0 / 3.0), PE_OK);
    assert_int_equal(pe_op_set_float(op, "max", DBL_MAX), PE_OK);
    assert_int_equal(pe_op_set_float(op, "nan", NAN), PE_OK);
    assert_int_equal(pe_op_set_float(op, "ninf", -INFINITY), PE_OK);
    assert_int_equal(pe_op_set_float(op, "negzero", -0.0), PE_OK);
    assert_int_equal(pe_op_set_string(op, "string", "tab\there \"quoted\" \\ \xe2\x82\xac \x7f"), PE_OK);
    assert_int_equal(pe_op_set_string(op, "empty", ""), PE_OK);
    assert_int_equal(pe_op_set_bool(op, "bool", true), PE_OK);
    assert_int_equal(pe_op_set_block(op, "block", 0), PE_OK);
    assert_int_equal(pe_op_set_ints(op, "ints", (int64_t[]){INT64_MIN, -1, 0, INT64_MAX}, 4), PE_OK);
    assert_int_equal(pe_op_set_longs(op, "longs", (int64_t[]){5}, 1), PE_OK);
    assert_int_equal(pe_op_set_bools(op, "bools", (int64_t[]){1, 0, 1}, 3), PE_OK);
    assert_int_equal(pe_op_set_floats(op, "floats", (double[]){0.1, -2.5e-20, 3e300, 1.0}, 4), PE_OK);
    assert_int_equal(pe_op_set_floats(op, "nofloats", NULL, 0), PE_OK);
    assert_int_equal(pe_op_set_strings(op, "strings", (const char *[]){"a", "", "b c"}, 3), PE_OK);
    assert_int_equal(pe_op_add_input(op, "In", "x\xc3\xa9\n\"\\\x01"), PE_OK);
    assert_int_equal(pe_op_add_input(op, "Empty", NULL), PE_OK);
    pe_block *sub = pe_program_add_block(p, 0);
    pe_block_add_op(sub, "nested");
    return p;
}

static void test_all_attr_types(void **state) {
    (void)state;
    pe_program *p = build_all_attrs();
    size_t n = 0;
    void *buf = to_buffer(p, &n);
    pe_program *q = NULL;
    assert_int_equal(pe_program_load_buffer_unchecked(buf, n, "attrs.pe", &q), PE_OK);
    assert_programs_equal(p, q, true);
    assert_true(signbit(pe_op_attr(&q->blocks[0].ops[0], "negzero")->f));
    /* The checked load rejects it: the first var's name holds a line break
     * (and the op type is not in the registry). */
    pe_program *r = NULL;
    assert_int_not_equal(pe_program_load_buffer(buf, n, "attrs.pe", &r), PE_OK);
    assert_null(r);
    assert_non_null(strstr(pe_last_error(), "attrs.pe: block 0 var 0: its name has control character 0x0a at byte 3"));

    char *json = NULL;
    assert_int_equal(pe_program_to_json(p, &json), PE_OK);
    pe_program *j = NULL;
    if (pe_program_load_buffer_unchecked(json, strlen(json), "attrs.json", &j) != PE_OK)
        fail_msg("%s\n%s", pe_last_error(), json);
    assert_programs_equal(p, j, false);
    char *json2 = NULL;
    assert_int_equal(pe_program_to_json(j, &json2), PE_OK);
    pe_program *j2 = NULL;
    assert_int_equal(pe_program_load_buffer_unchecked(json2, strlen(json2), "attrs2.json", &j2), PE_OK);
    assert_programs_equal(j, j2, true);
    free(buf);
    free(json);
    free(json2);
    pe_program_free(p);
    pe_program_free(q);
    pe_program_free(j);
    pe_program_free(j2);
}

static void test_files(void **state) {
    (void)state;
    char dir[] = "/tmp/pe_test_program_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char pe_path[128], json_path[128], odd_path[128];
    snprintf(pe_path, sizeof pe_path, "%s/mlp.pe", dir);
    snprintf(json_path, sizeof json_path, "%s/mlp.json", dir);
    snprintf(odd_path, sizeof odd_path, "%s/binary.json", dir);
    pe_program *p = build_mlp();
    assert_int_equal(pe_program_save_file(p, pe_path), PE_OK);
    assert_int_equal(pe_program_save_file(p, json_path), PE_OK);
    char head[8] = {0};
    FILE *f = fopen(json_path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(head, 1, 1, f), 1);
    fclose(f);
    assert_int_equal(head[0], '{');
    f = fopen(pe_path, "rb");
    assert_int_equal(fread(head, 1, 8, f), 8);
    fclose(f);
    assert_memory_equal(head + 4, "PEPG", 4);
    pe_program *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(pe_program_load_file(pe_path, &a), PE_OK);
    assert_int_equal(pe_program_load_file(json_path, &b), PE_OK);
    assert_programs_equal(p, a, true);
    assert_programs_equal(p, b, true);
    /* Loading goes by content, not by name. */
    assert_int_equal(rename(pe_path, odd_path), 0);
    assert_int_equal(pe_program_load_file(odd_path, &c), PE_OK);
    assert_programs_equal(p, c, true);
    /* A missing file is an error naming it. */
    pe_program *d = NULL;
    assert_int_not_equal(pe_program_load_file(pe_path, &d), PE_OK);
    assert_null(d);
    assert_non_null(strstr(pe_last_error(), pe_path));
    /* Saving into a missing directory fails and names the path. */
    char bad[160];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.pe", dir);
    assert_int_not_equal(pe_program_save_file(p, bad), PE_OK);
    assert_non_null(strstr(pe_last_error(), bad));
    unlink(odd_path);
    unlink(json_path);
    rmdir(dir);
    pe_program_free(p);
    pe_program_free(a);
    pe_program_free(b);
    pe_program_free(c);
}

/* ---- the checker: one case per rule ------------------------------------ */

static pe_op *op_at(pe_program *p, int b, int i) { return &p->blocks[b].ops[i]; }

/* Appends a slot without merging into an existing one of the same name. */
static void add_raw_slot(pe_op *op, bool input, const char *name, const char *arg) {
    pe_slot **slots = input ? &op->inputs : &op->outputs;
    int *n = input ? &op->n_inputs : &op->n_outputs;
    *slots = realloc(*slots, sizeof **slots * (size_t)(*n + 1));
    pe_slot *s = &(*slots)[(*n)++];
    s->name = strdup(name);
    s->n_args = 1;
    s->args = malloc(sizeof *s->args);
    s->args[0] = strdup(arg);
}

static void m_unknown_op(pe_program *p) {
    free(op_at(p, 0, 1)->type);
    op_at(p, 0, 1)->type = strdup("elementwise_addd");
}
static void m_unknown_input_slot(pe_program *p) { pe_op_add_input(op_at(p, 0, 0), "Z", "x"); }
static void m_unknown_output_slot(pe_program *p) { pe_op_add_output(op_at(p, 0, 3), "Outt", "prob"); }
static void m_one_two_args(pe_program *p) { pe_op_add_input(op_at(p, 0, 0), "X", "x"); }
static void m_optional_two_args(pe_program *p) {
    pe_op *op = op2(&p->blocks[0], "reshape2", "X", "prob", "Out", "total");
    pe_op_add_output(op, "XShape", "one");
    pe_op_add_output(op, "XShape", "label");
}
static void m_many_empty(pe_program *p) {
    pe_op *op = pe_block_add_op(&p->blocks[0], "concat");
    pe_op_add_input(op, "X", NULL); /* the slot, no args */
    pe_op_add_output(op, "Out", "total");
}
static void m_missing_input(pe_program *p) { op2(&p->blocks[0], "mul", "X", "x", "Out", "total"); }
static void m_missing_output(pe_program *p) { op2(&p->blocks[0], "relu", "X", "x", NULL, NULL); }
static void m_empty_in_one(pe_program *p) { op2(&p->blocks[0], "relu", "X", PE_EMPTY_VAR, "Out", "total"); }
static void m_duplicate_slot(pe_program *p) { add_raw_slot(op_at(p, 0, 2), true, "X", "fc_0.tmp_1"); }
static void m_undeclared_input(pe_program *p) {
    pe_op *op = op_at(p, 0, 3);
    free(op->inputs[0].args[0]);
    op->inputs[0].args[0] = strdup("fc_0.tmp");
}
static void m_undeclared_output(pe_program *p) { op2(&p->blocks[0], "relu", "X", "x", "Out", "nowhere"); }
static void m_child_var_in_parent(pe_program *p) { op2(&p->blocks[0], "relu", "X", "scaled", "Out", "total"); }
static void m_unknown_attr(pe_program *p) { pe_op_set_float(op_at(p, 0, 3), "temperature", 2.0); }
static void m_attr_wrong_type(pe_program *p) { pe_op_set_float(op_at(p, 0, 0), "x_num_col_dims", 1.0); }
static void m_bool_as_int(pe_program *p) {
    pe_op *op = op2(&p->blocks[0], "matmul", "X", "x", "Out", "total");
    pe_op_add_input(op, "Y", "fc_0.w_0");
    pe_op_set_int(op, "transpose_X", 1);
}
static void m_missing_required_attr(pe_program *p) { op2(&p->blocks[0], "cast", "X", "label", "Out", "total"); }
static void m_duplicate_attr(pe_program *p) {
    pe_op *op = op_at(p, 0, 3);
    op->attrs = realloc(op->attrs, sizeof *op->attrs * (size_t)(op->n_attrs + 1));
    pe_attr *a = &op->attrs[op->n_attrs++];
    memset(a, 0, sizeof *a);
    a->name = strdup("axis");
    a->type = PE_ATTR_INT;
    a->i = 1;
}
static void m_bad_dtype(pe_program *p) { p->blocks[0].vars[3].dtype = (pe_dtype)42; }
static void m_too_many_dims(pe_program *p) { p->blocks[0].vars[3].ndim = 9; }
static void m_bad_dim(pe_program *p) { p->blocks[0].vars[0].dims[1] = -2; }
static void m_duplicate_var(pe_program *p) {
    pe_block *b = &p->blocks[1];
    pe_var *v = var(b, "scaled2", PE_DTYPE_FP32, 0, NULL);
    v->name[6] = '\0'; /* now "scaled", like var 0 of the block */
}
static void m_empty_var_name(pe_program *p) { p->blocks[1].vars[0].name[0] = '\0'; }
static void m_block_idx(pe_program *p) { p->blocks[1].idx = 5; }
static void m_parent_self(pe_program *p) { p->blocks[1].parent_idx = 1; }
static void m_global_parent(pe_program *p) { p->blocks[0].parent_idx = 0; }
static void m_block_attr_range(pe_program *p) { pe_op_set_block(op_at(p, 0, 0), "sub_block", 7); }
static void m_read_before_write(pe_program *p) {
    /* op 0 now reads fc_0.tmp_1, which op 2 (elementwise_add) writes first. */
    pe_op *op = pe_block_insert_op(&p->blocks[0], 0, "relu");
    pe_op_add_input(op, "X", "fc_0.tmp_1");
    pe_op_add_output(op, "Out", "total");
}
static void m_no_type(pe_program *p) {
    free(op_at(p, 0, 2)->type);
    op_at(p, 0, 2)->type = NULL;
}

/* Aliasing: an output naming an input outside ops.def's in-place pairs. */
static void m_alias_undeclared(pe_program *p) {
    /* softmax_with_cross_entropy with Softmax = Logits: the kernel would
     * overwrite the logits while it still reads them (a wrong loss) */
    pe_op *op = op2(&p->blocks[0], "softmax_with_cross_entropy", "Logits", "fc_0.tmp_1", "Softmax", "fc_0.tmp_1");
    pe_op_add_input(op, "Label", "label");
    pe_op_add_output(op, "Loss", "total");
}
static void m_alias_other_slot(pe_program *p) {
    pe_op *op = op2(&p->blocks[0], "elementwise_add", "X", "prob", "Out", "total");
    pe_op_add_input(op, "Y", "total"); /* X>Out is declared, Y>Out is not */
}
static void m_alias_other_arg(pe_program *p) {
    pe_op *op = op2(&p->blocks[0], "sum", "X", "prob", "Out", "total");
    pe_op_add_input(op, "X", "total"); /* X>Out pairs X[0] with Out, not X[1] */
}
static void m_alias_both_inputs(pe_program *p) {
    pe_op *op = op2(&p->blocks[0], "elementwise_mul", "X", "total", "Out", "total");
    pe_op_add_input(op, "Y", "total"); /* X is the partner, Y is not */
}
static void m_output_twice_slots(pe_program *p) {
    pe_op *op = op2(&p->blocks[0], "layer_norm", "X", "total", "Y", "pooled");
    pe_op_add_output(op, "Mean", "one");
    pe_op_add_output(op, "Variance", "one");
}
static void m_output_twice_args(pe_program *p) {
    pe_op *op = op2(&p->blocks[0], "split", "X", "total", "Out", "pooled");
    pe_op_add_output(op, "Out", "prob");
    pe_op_add_output(op, "Out", "pooled");
}

typedef struct check_case {
    const char *name;
    void (*mutate)(pe_program *);
    const char *expect; /* substring of the message */
} check_case;

static const check_case k_cases[] = {
    {"unknown op", m_unknown_op, "t.pe: block 0 op 1 (elementwise_addd): unknown op type 'elementwise_addd'"},
    {"unknown input slot", m_unknown_input_slot, "t.pe: block 0 op 0 (mul): mul has no input slot 'Z' (its inputs: X, Y)"},
    {"unknown output slot", m_unknown_output_slot, "block 0 op 3 (softmax): softmax has no output slot 'Outt'"},
    {"ONE slot with 2 args", m_one_two_args, "block 0 op 0 (mul): input X takes exactly one var, got 2"},
    {"OPTIONAL slot with 2 args", m_optional_two_args, "block 0 op 7 (reshape2): output XShape takes at most one var, got 2"},
    {"MANY slot empty", m_many_empty, "block 0 op 7 (concat): input X takes one or more vars, got 0"},
    {"missing input", m_missing_input, "block 0 op 7 (mul): required input Y is missing"},
    {"missing output", m_missing_output, "block 0 op 7 (relu): required output Out is missing"},
    {"@EMPTY@ in a ONE slot", m_empty_in_one, "block 0 op 7 (relu): input X is required, but its arg is @EMPTY@"},
    {"duplicate slot", m_duplicate_slot, "block 0 op 2 (relu): input slot X appears twice"},
    {"undeclared input", m_undeclared_input, "t.pe: block 0 op 3 (softmax): input X 'fc_0.tmp' is not a declared variable"},
    {"undeclared output", m_undeclared_output, "block 0 op 7 (relu): output Out 'nowhere' is not a declared variable"},
    {"child var in parent", m_child_var_in_parent, "block 0 op 7 (relu): input X 'scaled' is not a declared variable"},
    {"unknown attr", m_unknown_attr, "block 0 op 3 (softmax): 'temperature' is not an attr of softmax (its attrs: axis;"},
    {"attr of wrong type", m_attr_wrong_type, "block 0 op 0 (mul): attr 'x_num_col_dims' is float, but mul expects int"},
    {"bool given as int", m_bool_as_int, "block 0 op 7 (matmul): attr 'transpose_X' is int, but matmul expects bool"},
    {"required attr missing", m_missing_required_attr, "block 0 op 7 (cast): required attr 'out_dtype' (int) is missing"},
    {"duplicate attr", m_duplicate_attr, "block 0 op 3 (softmax): attr 'axis' appears twice"},
    {"invalid dtype", m_bad_dtype, "t.pe: block 0: var 'fc_0.tmp_0' has invalid dtype 42"},
    {"too many dims", m_too_many_dims, "block 0: var 'fc_0.tmp_0' has 9 dims (0..8 allowed)"},
    {"dim below -1", m_bad_dim, "block 0: var 'x' has dim 1 = -2"},
    {"duplicate var", m_duplicate_var, "block 1: var 'scaled' is declared twice (vars 0 and 1)"},
    {"empty var name", m_empty_var_name, "block 1 var 0 has an empty name"},
    {"block idx", m_block_idx, "t.pe: block 1 says its idx is 5"},
    {"parent is itself", m_parent_self, "block 1 has parent_idx 1 (it must be an earlier block, 0..0)"},
    {"global block parent", m_global_parent, "block 0 has parent_idx 0"},
    {"block attr out of range", m_block_attr_range, "block 0 op 0 (mul): attr 'sub_block' refers to block 7, but the program has 2 blocks"},
    {"read before write", m_read_before_write,
     "t.pe: block 0 op 0 (relu): input X 'fc_0.tmp_1' is read before it is written: the first op writing it is op 2 (elementwise_add)"},
    {"op without type", m_no_type, "t.pe: block 0 op 2 has no type"},
    {"undeclared alias", m_alias_undeclared,
     "t.pe: block 0 op 7 (softmax_with_cross_entropy): output Softmax 'fc_0.tmp_1' is also its input Logits, but "
     "softmax_with_cross_entropy does not declare Logits>Softmax in place (its in-place pairs: none)"},
    {"alias of an undeclared slot", m_alias_other_slot,
     "block 0 op 7 (elementwise_add): output Out 'total' is also its input Y, but elementwise_add does not declare "
     "Y>Out in place (its in-place pairs: X>Out)"},
    {"alias of another arg", m_alias_other_arg,
     "block 0 op 7 (sum): output Out arg 0 'total' is input X arg 1: X>Out is in place only arg by arg"},
    {"alias of a partner and another input", m_alias_both_inputs,
     "block 0 op 7 (elementwise_mul): output Out 'total' is also its input Y"},
    {"output in two slots", m_output_twice_slots, "block 0 op 7 (layer_norm): outputs Mean and Variance both name 'one'"},
    {"output twice in a slot", m_output_twice_args, "block 0 op 7 (split): output Out names 'pooled' twice (args 0 and 2)"},
};

static void test_checker_errors(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof k_cases / sizeof k_cases[0]; c++) {
        pe_program *p = build_mlp();
        k_cases[c].mutate(p);
        pe_status st = pe_program_check(p, "t.pe");
        if (st == PE_OK || !strstr(pe_last_error(), k_cases[c].expect))
            fail_msg("case '%s': status %s, message '%s', expected '%s'", k_cases[c].name, pe_status_name(st),
                     pe_last_error(), k_cases[c].expect);
        /* The same program through the format: the load runs the checker
         * (or the format cannot even hold it, e.g. 9 dims). */
        void *buf = NULL;
        size_t n = 0;
        if (pe_program_to_buffer(p, &buf, &n) == PE_OK) {
            pe_program *q = NULL;
            st = pe_program_load_buffer(buf, n, "t.pe", &q);
            assert_null(q);
            if (st == PE_OK || !strstr(pe_last_error(), k_cases[c].expect))
                fail_msg("case '%s' after save/load: status %s, message '%s'", k_cases[c].name, pe_status_name(st),
                         pe_last_error());
            free(buf);
        }
        pe_program_free(p);
    }
}

static void test_checker_accepts(void **state) {
    (void)state;
    pe_program *p = build_mlp();
    pe_block *b = &p->blocks[0];
    /* INT for a long attr and INTS for a longs attr are interchangeable. */
    pe_op *op = op2(b, "arg_max", "X", "prob", "Out", "label");
    assert_int_equal(pe_op_set_int(op, "axis", 1), PE_OK);
    op = op2(b, "fill_constant", NULL, NULL, "Out", "one");
    assert_int_equal(pe_op_set_ints(op, "shape", (int64_t[]){1}, 1), PE_OK);
    /* An optional slot (XShape) left out. build_mlp already has @EMPTY@ in
     * sum's duplicable X and an in-place relu. */
    op2(b, "reshape2", "X", "prob", "Out", "total");
    /* A persistable var read before a later op writes it (optimizer-style
     * update) is state across runs, not a cycle. */
    op = op2(b, "scale", "X", "fc_0.tmp_1", "Out", "fc_0.w_0");
    /* Declared in-place pairs: sum's X[0] = Out (the autodiff pass's grad
     * accumulation), batch_norm's MeanOut = Mean and VarianceOut = Variance,
     * an optimizer's ParamOut = Param. */
    pe_op *ip = op2(b, "sum", "X", "total", "Out", "total");
    assert_int_equal(pe_op_add_input(ip, "X", "prob"), PE_OK);
    ip = op2(b, "batch_norm", "X", "total", "Y", "pooled");
    assert_int_equal(pe_op_add_input(ip, "Scale", "fc_0.w_0"), PE_OK);
    assert_int_equal(pe_op_add_input(ip, "Bias", "fc_0.w_0"), PE_OK);
    assert_int_equal(pe_op_add_input(ip, "Mean", "fc_0.b_0"), PE_OK);
    assert_int_equal(pe_op_add_input(ip, "Variance", "one"), PE_OK);
    assert_int_equal(pe_op_add_output(ip, "MeanOut", "fc_0.b_0"), PE_OK);
    assert_int_equal(pe_op_add_output(ip, "VarianceOut", "one"), PE_OK);
    /* "x" is a feed: no op writes it. */
    assert_int_equal(pe_program_check(p, "ok.pe"), PE_OK);
    /* Block attrs may name another block. */
    assert_int_equal(pe_op_set_block(op, "sub_block", 1), PE_OK);
    assert_int_not_equal(pe_program_check(p, "ok.pe"), PE_OK); /* scale has no such attr */
    assert_non_null(strstr(pe_last_error(), "'sub_block' is not an attr of scale"));
    pe_program_free(p);

    p = pe_program_new();
    p->n_blocks = 0;
    assert_int_not_equal(pe_program_check(p, NULL), PE_OK);
    assert_non_null(strstr(pe_last_error(), "program: the program has no blocks"));
    p->n_blocks = 1;
    pe_program_free(p);
}

/* ---- format errors ----------------------------------------------------- */

static void expect_load_error(const void *data, size_t n, const char *expect) {
    pe_program *p = (pe_program *)(uintptr_t)1;
    pe_status st = pe_program_load_buffer(data, n, "bad.pe", &p);
    assert_null(p);
    if (st == PE_OK || (expect && !strstr(pe_last_error(), expect)))
        fail_msg("expected an error containing '%s', got %s: '%s'", expect ? expect : "", pe_status_name(st),
                 pe_last_error());
}

static void test_not_a_program(void **state) {
    (void)state;
    expect_load_error("", 0, "'bad.pe' is not a PE program: it is empty");
    expect_load_error("   \n", 4, "is empty");
    expect_load_error("hello world", 11, "'bad.pe' is not a PE program: neither a .pe flatbuffer");
    expect_load_error("\0\0\0\0PEPG", 8, "'bad.pe' is not a PE program: the flatbuffers verifier rejects it");
    expect_load_error("\0\0\0\0PEPG\0", 9, "not a whole number of 4-byte words");
    expect_load_error("{", 1, "'bad.pe' is not a valid PE program (JSON):");
    expect_load_error("{\"blocks\": []}", 14, "'bad.pe' is not a PE program: it has no blocks");
    expect_load_error("{}", 2, "it has no blocks");
    expect_load_error("{\"blocks\": [{}], \"bogus\": 1}", 28, "bogus");
    static const char nul_json[] = "{\"blocks\": [{\"vars\": []}]}\0 trailing";
    expect_load_error(nul_json, sizeof nul_json - 1, "NUL byte at offset 26");
    /* Semantic errors found while decoding, before the checker. */
    static const char *const bad[][2] = {
        {"{\"blocks\": [{\"vars\": [{\"name\": \"x\", \"dims\": [1,2,3,4,5,6,7,8,9]}]}]}", "block 0: var 'x' has 9 dims (at most 8)"},
        {"{\"blocks\": [{\"vars\": [{\"name\": \"x\", \"dtype\": 12}]}]}", "var 'x' has dtype 12"},
        {"{\"blocks\": [{\"vars\": [{\"name\": \"x\", \"dtype\": \"FP99\"}]}]}", "FP99"},
        {"{\"blocks\": [{\"vars\": [{\"dtype\": \"FP32\"}]}]}", "required field is missing: name"},
        {"{\"blocks\": [{\"ops\": [{\"type\": \"relu\", \"attrs\": [{\"name\": \"a\", \"type\": \"INT\", \"f\": 1.5}]}]}]}",
         "block 0 op 0 (relu): attr 'a' of type int sets field 'f' (a int attr keeps its value in 'i')"},
        {"{\"blocks\": [{\"ops\": [{\"type\": \"relu\", \"attrs\": [{\"name\": \"a\", \"type\": 99}]}]}]}", "attr 'a' has type 99"},
        {"{\"blocks\": [{\"vars\": [{\"name\": \"a\\u0000b\"}]}]}", "contains a NUL byte"},
        {"{\"blocks\": [{\"vars\": [{\"name\": \"x\", \"dims\": [1.5]}]}]}", NULL},
        {"{\"blocks\": [{\"vars\": [{\"name\": \"x\", \"dims\": \"1\"}]}]}", NULL},
        {"{\"blocks\": [{\"vars\": [{\"name\": \"x\", \"dims\": [99999999999999999999]}]}]}", NULL},
        {"{\"blocks\": [{\"idx\": 0}], \"blocks\": [{\"idx\": 0}]}", NULL},
        {"{\"blocks\": [{\"idx\": 0}]} {\"blocks\": []}", NULL},
        {"{\"blocks\": [{\"idx\": 0}]} table Evil {}", NULL},
        {"{\"blocks\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect_load_error(bad[i][0], strlen(bad[i][0]), bad[i][1]);
}

/* ---- hostile bytes ------------------------------------------------------ */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { /* xorshift64*, seeded: the same cases every run */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ull;
}

/* Loads must fail, or give a program that passes the checker. */
static bool try_load(const void *data, size_t n) {
    pe_program *p = NULL;
    pe_status st = pe_program_load_buffer(data, n, "fuzz.pe", &p);
    if (st != PE_OK) {
        assert_null(p);
        assert_true(strlen(pe_last_error()) > 0);
        return false;
    }
    assert_non_null(p);
    assert_int_equal(pe_program_check(p, "fuzz.pe"), PE_OK);
    pe_program_free(p);
    return true;
}

static void test_truncations(void **state) {
    (void)state;
    pe_program *p = build_mlp();
    size_t n = 0;
    void *buf = to_buffer(p, &n);
    char *json = NULL;
    assert_int_equal(pe_program_to_json(p, &json), PE_OK);
    /* Every cut of the binary fails: the end of a flatbuffer is the first
     * object written, which some offset reaches. */
    for (size_t len = 0; len < n; len++) {
        void *cut = malloc(len ? len : 1);
        memcpy(cut, buf, len);
        if (try_load(cut, len)) fail_msg("binary cut to %zu of %zu bytes loaded", len, n);
        free(cut);
    }
    /* Every cut of the JSON before its closing brace fails. */
    size_t jlen = (size_t)(strrchr(json, '}') - json) + 1;
    for (size_t len = 0; len < jlen; len++) {
        char *cut = malloc(len ? len : 1);
        memcpy(cut, json, len);
        if (try_load(cut, len)) fail_msg("JSON cut to %zu of %zu bytes loaded", len, jlen);
        free(cut);
    }
    free(buf);
    free(json);
    pe_program_free(p);
}

static void test_bit_flips(void **state) {
    (void)state;
    pe_program *p = build_mlp();
    size_t n = 0;
    unsigned char *buf = to_buffer(p, &n);
    char *json = NULL;
    assert_int_equal(pe_program_to_json(p, &json), PE_OK);
    size_t jn = strlen(json);
    unsigned char *work = malloc(n > jn ? n : jn);
    int rejected = 0, trials = 3000;
    for (int t = 0; t < trials; t++) {
        memcpy(work, buf, n);
        int flips = 1 + (int)(rnd() % 4);
        for (int f = 0; f < flips; f++) {
            uint64_t r = rnd();
            work[r % n] ^= (unsigned char)(1u << ((r >> 32) % 8));
        }
        rejected += !try_load(work, n);
    }
    /* Most flips break the structure or a name; some only change a value
     * (a dim, an attr, a shared var name everywhere at once) and load. */
    assert_true(rejected > trials / 2);
    for (int t = 0; t < 1000; t++) {
        memcpy(work, json, jn);
        uint64_t r = rnd();
        work[r % jn] ^= (unsigned char)(1u << ((r >> 32) % 8));
        try_load(work, jn);
    }
    free(work);
    free(buf);
    free(json);
    pe_program_free(p);
}

/* The per-block name index (graph/program.c): finding agrees with a linear
 * search after adds, a duplicate add, removals (later vars move down),
 * re-adds, a clone and a load (whose index is built in one go). */
static void check_index(const pe_block *b, int n_expected) {
    assert_int_equal(b->n_vars, n_expected);
    for (int i = 0; i < b->n_vars; i++) assert_ptr_equal(pe_block_find_var(b, b->vars[i].name), &b->vars[i]);
}

static void test_var_index(void **state) {
    (void)state;
    enum { N = 5000 };
    pe_program *p = pe_program_new();
    pe_block *b = &p->blocks[0];
    char name[32];
    int64_t d[1] = {3};
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "v%d", i);
        assert_non_null(pe_block_add_var(b, name, PE_DTYPE_FP32, 1, d));
    }
    check_index(b, N);
    assert_null(pe_block_add_var(b, "v17", PE_DTYPE_FP32, 1, d)); /* exists */
    assert_null(pe_block_find_var(b, "v5000"));
    assert_true(pe_block_remove_var(b, "v0"));
    assert_true(pe_block_remove_var(b, "v2500"));
    assert_false(pe_block_remove_var(b, "v2500"));
    assert_null(pe_block_find_var(b, "v0"));
    assert_null(pe_block_find_var(b, "v2500"));
    assert_string_equal(b->vars[0].name, "v1");
    check_index(b, N - 2);
    assert_non_null(pe_block_add_var(b, "v2500", PE_DTYPE_FP64, 1, d)); /* back, at the end */
    assert_int_equal(pe_block_find_var(b, "v2500")->dtype, PE_DTYPE_FP64);
    check_index(b, N - 1);
    pe_program *c = pe_program_clone(p);
    assert_non_null(c);
    check_index(&c->blocks[0], N - 1);
    assert_ptr_not_equal(pe_block_find_var(&c->blocks[0], "v9"), pe_block_find_var(b, "v9"));
    void *buf;
    size_t size;
    assert_int_equal(pe_program_to_buffer(p, &buf, &size), PE_OK);
    pe_program *l = NULL;
    assert_int_equal(pe_program_load_buffer_unchecked(buf, size, "index", &l), PE_OK);
    check_index(&l->blocks[0], N - 1);
    assert_null(pe_block_find_var(&l->blocks[0], "v0"));
    assert_non_null(pe_block_add_var(&l->blocks[0], "v0", PE_DTYPE_FP32, 1, d));
    check_index(&l->blocks[0], N);
    free(buf);
    pe_program_free(l);
    pe_program_free(c);
    pe_program_free(p);
}

static void test_random_bytes(void **state) {
    (void)state;
    unsigned char buf[4096];
    for (int t = 0; t < 3000; t++) {
        size_t n = (size_t)(rnd() % sizeof buf) & ~(size_t)3;
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)rnd();
        if (t % 3 == 0 && n >= 8) memcpy(buf + 4, "PEPG", 4); /* get past the identifier */
        if (t % 3 == 1 && n >= 1) buf[0] = '{';                /* into the JSON parser */
        if (t % 3 == 2 && n >= 8) {                           /* a root offset that lands inside */
            memcpy(buf + 4, "PEPG", 4);
            uint32_t root = (uint32_t)(8 + rnd() % (n - 7)) & ~3u;
            memcpy(buf, &root, 4);
        }
        if (try_load(buf, n)) fail_msg("random buffer %d (%zu bytes) loaded", t, n);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_binary),
        cmocka_unit_test(test_roundtrip_json),
        cmocka_unit_test(test_feed_fetch_names),
        cmocka_unit_test(test_hand_written_json),
        cmocka_unit_test(test_all_attr_types),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_checker_errors),
        cmocka_unit_test(test_checker_accepts),
        cmocka_unit_test(test_not_a_program),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_bit_flips),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_var_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

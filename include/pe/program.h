/* pe/program.h — the program IR: Program -> Block[] -> Var[] + Op[].
 *
 *     pe_program *p = NULL;
 *     if (pe_program_load_file("examples/mlp_infer.pe", &p) != PE_OK)   // .pe or .json
 *         fprintf(stderr, "%s\n", pe_last_error());
 *     pe_block *b = &p->blocks[0];
 *     for (int i = 0; i < b->n_ops; i++) printf("%s\n", b->ops[i].type);
 *     pe_program_save_file(p, "copy.json");                             // by extension
 *     pe_program_free(p);
 *
 * A mirror of Paddle's framework.proto. On disk it is a flatbuffer
 * (graph/program.fbs, file identifier "PEPG", extension .pe) or the JSON text
 * form of the same schema. Every load verifies the buffer with the
 * flatbuffers Verifier and then runs pe_program_check (known op types,
 * declared vars, attr types, slot arity, dims, no cycles).
 *
 * In memory the IR is plain C structs that own all their strings and arrays;
 * build or edit them with the pe_block_* / pe_op_* helpers below, which keep
 * the ownership rules.
 */
#ifndef PE_PROGRAM_H
#define PE_PROGRAM_H

#include "pe/dtype.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* Values are stable: stored in program files. */
typedef enum pe_attr_type {
    PE_ATTR_INT = 0, PE_ATTR_FLOAT, PE_ATTR_STRING, PE_ATTR_BOOL, PE_ATTR_LONG,
    PE_ATTR_INTS, PE_ATTR_FLOATS, PE_ATTR_STRINGS, PE_ATTR_BOOLS, PE_ATTR_LONGS,
    PE_ATTR_BLOCK,
    PE_ATTR_TYPE_COUNT
} pe_attr_type;

const char *pe_attr_type_name(pe_attr_type t); /* "int", "float", ..., "block" */

typedef struct pe_attr {
    char *name;
    pe_attr_type type;
    int64_t i;          /* INT, LONG, BOOL (0/1), BLOCK (block index) */
    double f;           /* FLOAT */
    char *s;            /* STRING */
    int n;              /* element count of list types */
    int64_t *ints;      /* INTS, LONGS, BOOLS */
    double *floats;     /* FLOATS */
    char **strings;     /* STRINGS */
} pe_attr;

typedef struct pe_slot {
    char *name;         /* "X", "Out" */
    int n_args;
    char **args;        /* var names */
} pe_slot;

/* Placeholder arg of a duplicable slot meaning "no var here" (e.g. a
 * gradient that is not needed). Kernels see a NULL tensor for it. */
#define PE_EMPTY_VAR "@EMPTY@"
/* Suffix of gradient var names: the gradient of "w" is "w@GRAD". */
#define PE_GRAD_SUFFIX "@GRAD"

/* op_role values, as Paddle's OpRole. */
enum { PE_ROLE_FORWARD = 0, PE_ROLE_BACKWARD = 1, PE_ROLE_OPTIMIZE = 2,
       PE_ROLE_LOSS = 256 };

typedef struct pe_op {
    char *type;
    int n_inputs;  pe_slot *inputs;
    int n_outputs; pe_slot *outputs;
    int n_attrs;   pe_attr *attrs;
} pe_op;

typedef struct pe_var {
    char *name;
    pe_dtype dtype;
    int ndim;
    int64_t dims[8];    /* -1 = unknown (batch) */
    bool persistable;
    bool is_parameter;
    bool stop_gradient;
    bool channels_last; /* a build pass (conv_nhwc) stores this 4-D var [N, H, W, C] though the program
                         * declares it [N, C, H, W]; never set in a program as written or saved */
} pe_var;

typedef struct pe_block {
    int idx;
    int parent_idx;     /* -1 for the global block */
    int n_vars, cap_vars;
    pe_var *vars;
    int n_ops, cap_ops;
    pe_op *ops;
    struct pe_var_index *index; /* private to graph/program.c: name -> var, kept by the functions below */
} pe_block;

typedef struct pe_program {
    int n_blocks;
    pe_block *blocks;
    int64_t random_seed;
    int32_t version;
    /* An inference model's feed and fetch vars (block 0), owned; 0 / NULL
     * for other programs. Set with pe_program_set_io. */
    int n_feed_names;  char **feed_names;
    int n_fetch_names; char **fetch_names;
} pe_program;

/* ---- load / save -------------------------------------------------------- */

/* Loads a .pe (binary) or .json (text) file — decided by content: a buffer
 * carrying the "PEPG" identifier is binary, anything starting with '{' is
 * JSON. Verified and checked. *out is owned by the caller (pe_program_free). */
pe_status pe_program_load_file(const char *path, pe_program **out);
/* `what` names the source in error messages. */
pe_status pe_program_load_buffer(const void *data, size_t size, const char *what, pe_program **out);
pe_status pe_program_load_json(const char *text, size_t size, const char *what, pe_program **out);
/* Saves as JSON when path ends with ".json", else binary. Atomic (temp+rename). */
pe_status pe_program_save_file(const pe_program *p, const char *path);
/* Serializes to a malloc'ed buffer owned by the caller (free()). */
pe_status pe_program_to_buffer(const pe_program *p, void **data, size_t *size);
/* Serializes to a malloc'ed NUL-terminated JSON string owned by the caller. */
pe_status pe_program_to_json(const pe_program *p, char **json);

/* Semantic check (run by every load). `what` names the source in messages. */
pe_status pe_program_check(const pe_program *p, const char *what);

/* ---- building and editing ----------------------------------------------- */

/* New program with one empty global block. Owned by caller. */
pe_program *pe_program_new(void);
void pe_program_free(pe_program *p); /* accepts NULL */
pe_program *pe_program_clone(const pe_program *p);
/* Records an inference model's feed and fetch var names (copied; replacing
 * the old lists). The names must be vars of block 0 (checked here and by
 * every load). */
pe_status pe_program_set_io(pe_program *p, const char *const *feeds, int n_feeds, const char *const *fetches,
                            int n_fetches);
/* Appends a block with the given parent; returns it (borrowed) or NULL. */
pe_block *pe_program_add_block(pe_program *p, int parent_idx);

/* Finds a var by name in block b (not parents). Borrowed or NULL. */
pe_var *pe_block_find_var(const pe_block *b, const char *name);
/* Finds a var in block idx of p, then in its ancestors. */
pe_var *pe_program_find_var(const pe_program *p, int block_idx, const char *name);
/* Appends a var (name copied); returns it (borrowed; pointer valid until the
 * next add) or NULL if the name exists or on allocation failure. */
pe_var *pe_block_add_var(pe_block *b, const char *name, pe_dtype dt, int ndim, const int64_t *dims);
/* Removes var `name` from b (later vars move down one); false if absent. */
bool pe_block_remove_var(pe_block *b, const char *name);
/* Appends an op of `type` (copied); borrowed pointer valid until the next add. */
pe_op *pe_block_add_op(pe_block *b, const char *type);
/* Inserts an op at position pos (0..n_ops). */
pe_op *pe_block_insert_op(pe_block *b, int pos, const char *type);
void pe_block_remove_op(pe_block *b, int pos);

/* Adds arg to slot (creating the slot). Strings are copied. */
pe_status pe_op_add_input(pe_op *op, const char *slot, const char *arg);
pe_status pe_op_add_output(pe_op *op, const char *slot, const char *arg);
const pe_slot *pe_op_input(const pe_op *op, const char *slot);   /* NULL if absent */
const pe_slot *pe_op_output(const pe_op *op, const char *slot);
/* First arg of a slot or NULL. */
const char *pe_op_input1(const pe_op *op, const char *slot);
const char *pe_op_output1(const pe_op *op, const char *slot);

const pe_attr *pe_op_attr(const pe_op *op, const char *name); /* NULL if absent */
/* Setters replace an existing attr of the same name. */
pe_status pe_op_set_int(pe_op *op, const char *name, int64_t v);
pe_status pe_op_set_long(pe_op *op, const char *name, int64_t v);
pe_status pe_op_set_float(pe_op *op, const char *name, double v);
pe_status pe_op_set_bool(pe_op *op, const char *name, bool v);
pe_status pe_op_set_string(pe_op *op, const char *name, const char *v);
pe_status pe_op_set_block(pe_op *op, const char *name, int block_idx);
pe_status pe_op_set_ints(pe_op *op, const char *name, const int64_t *v, int n);
pe_status pe_op_set_longs(pe_op *op, const char *name, const int64_t *v, int n);
pe_status pe_op_set_bools(pe_op *op, const char *name, const int64_t *v, int n);
pe_status pe_op_set_floats(pe_op *op, const char *name, const double *v, int n);
pe_status pe_op_set_strings(pe_op *op, const char *name, const char *const *v, int n);
/* Deep copy of an attr value into op (replacing). */
pe_status pe_op_set_attr(pe_op *op, const pe_attr *a);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

/* graph/checkpoint.c — checkpoints of persistables (pe/checkpoint.h):
 * pe_checkpoint_save/load tie a safetensors file to the persistable vars of
 * a program's block 0.
 *
 * How: saving checks that every persistable var of the program is in the
 * scope, holds data, and has the dtype and shape the program declares; if
 * any is not, the save is refused with the list of them and nothing is
 * written (a partial file, or one the same program could not load back,
 * would replace a good checkpoint). Then it writes them all with
 * pe_safetensors_write (atomic: the old file stays until the new one is
 * complete). Loading opens and validates the whole file
 * (pe_safetensors_open), checks that every persistable var is in it with the
 * declared dtype and shape and that every tensor of the file is one of
 * them, and only then loads the tensors into the scope — so a mismatch
 * leaves the scope untouched.
 *
 * Why here: it walks a program, which the graph stage owns; the file format
 * itself stays in the runtime (runtime/safetensors.c).
 */
#include "pe/checkpoint.h"
#include "runtime/internal.h"
#include "runtime/safetensors_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* Shape of a tensor against a program var: same rank, equal dims where the
 * program's is not -1. */
static bool shape_fits(const pe_var *v, int ndim, const int64_t *dims) {
    if (v->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (v->dims[i] != -1 && v->dims[i] != dims[i]) return false;
    return true;
}

pe_status pe_checkpoint_save(const char *path, const pe_program *prog, const pe_scope *scope) {
    if (!path || !prog || !scope || prog->n_blocks < 1)
        return pe_error(PE_ERR_INVALID, "pe_checkpoint_save: bad argument");
    const pe_block *b = &prog->blocks[0];
    const char **names = calloc(b->n_vars ? (size_t)b->n_vars : 1, sizeof *names);
    if (!names) return pe_error(PE_ERR_NOMEM, "cannot save '%s': out of memory", path);
    int n = 0, n_persist = 0, n_absent = 0;
    char s1[200], s2[200], why[512];
    pe_namelist bad = {0};
    /* Every persistable var must be written: one that is absent, has no
     * value, or that the same program could not load back is listed, and
     * then nothing is written. */
    for (int i = 0; i < b->n_vars; i++) {
        const pe_var *v = &b->vars[i];
        if (!v->persistable) continue;
        n_persist++;
        const pe_tensor *t = pe_scope_find_var(scope, v->name);
        if (!t) {
            pe_namelist_add(&bad, v->name, "not in the scope");
            n_absent++;
        } else if (pe_tensor_data_problem(t, why, sizeof why)) {
            pe_namelist_add(&bad, v->name, why);
        } else if (t->dtype != v->dtype || !shape_fits(v, t->ndim, t->dims)) {
            snprintf(why, sizeof why, "holds %s %s but the program declares %s %s", pe_dtype_name(t->dtype),
                     pe_dims_str(t->ndim, t->dims, s1, sizeof s1), pe_dtype_name(v->dtype),
                     pe_dims_str(v->ndim, v->dims, s2, sizeof s2));
            pe_namelist_add(&bad, v->name, why);
        } else {
            names[n++] = v->name;
        }
    }
    pe_status st = bad.n
        ? pe_error(n_absent == bad.n ? PE_ERR_NOT_FOUND : PE_ERR_INVALID, "cannot save '%s': %d of the %d "
                   "persistable vars of the program (block 0) cannot be written from the scope (%d vars of its "
                   "own%s): %s; nothing was written (run the startup program or load a checkpoint into this "
                   "scope first)", path, bad.n, n_persist, pe_scope_size(scope),
                   pe_scope_parent(scope) ? ", and its parents'" : "", pe_namelist_str(&bad))
        : pe_safetensors_write(path, scope, names, n);
    free(names);
    return st;
}

pe_status pe_checkpoint_load(const char *path, const pe_program *prog, pe_scope *scope) {
    return pe_checkpoint_load_ex(path, prog, scope, 0);
}

pe_status pe_checkpoint_load_ex(const char *path, const pe_program *prog, pe_scope *scope, unsigned flags) {
    if (!path || !prog || !scope || prog->n_blocks < 1 || (flags & ~(unsigned)PE_CHECKPOINT_IGNORE_EXTRA))
        return pe_error(PE_ERR_INVALID, "pe_checkpoint_load: bad argument");
    bool ignore_extra = (flags & PE_CHECKPOINT_IGNORE_EXTRA) != 0;
    pe_safetensors_file *f;
    PE_CHECK(pe_safetensors_open(path, &f));
    pe_status st = PE_OK;
    const pe_block *b = &prog->blocks[0];
    char s1[200], s2[200];
    /* Every persistable var is in the file with the declared dtype and shape ... */
    for (int i = 0; i < b->n_vars && st == PE_OK; i++) {
        const pe_var *v = &b->vars[i];
        if (!v->persistable) continue;
        int k = pe_safetensors_find(f, v->name);
        pe_safetensors_entry e = k >= 0 ? pe_safetensors_entry_at(f, k) : (pe_safetensors_entry){0};
        if (k < 0)
            st = pe_error(PE_ERR_NOT_FOUND, "%s: persistable var '%s' of the program is missing from the "
                          "checkpoint", path, v->name);
        else if (e.dtype != v->dtype)
            st = pe_error(PE_ERR_INVALID, "%s: var '%s': the checkpoint holds %s, the program declares %s",
                          path, v->name, pe_dtype_name(e.dtype), pe_dtype_name(v->dtype));
        else if (!shape_fits(v, e.ndim, e.dims))
            st = pe_error(PE_ERR_INVALID, "%s: var '%s': the checkpoint holds shape %s, the program declares %s",
                          path, v->name, pe_dims_str(e.ndim, e.dims, s1, sizeof s1),
                          pe_dims_str(v->ndim, v->dims, s2, sizeof s2));
    }
    /* ... and every tensor of the file is one of them (or, with
     * PE_CHECKPOINT_IGNORE_EXTRA, the others are skipped). */
    int n = pe_safetensors_count(f);
    pe_namelist extra = {0};
    const char *first = NULL;
    bool first_declared = false;
    for (int i = 0; i < n && st == PE_OK && !ignore_extra; i++) {
        const char *name = pe_safetensors_entry_at(f, i).name;
        const pe_var *v = pe_block_find_var(b, name);
        if (v && v->persistable) continue;
        if (!first) {
            first = name;
            first_declared = v != NULL;
        }
        pe_namelist_add(&extra, name, v ? "non-persistable in the program" : NULL);
    }
    if (st == PE_OK && extra.n == 1)
        st = pe_error(PE_ERR_INVALID, "%s: tensor '%s' of the checkpoint is not a persistable var of the "
                      "program%s", path, first, first_declared ? " (the program declares it non-persistable)" : "");
    else if (st == PE_OK && extra.n > 1)
        st = pe_error(PE_ERR_INVALID, "%s: %d tensors of the checkpoint are not persistable vars of the program: "
                      "%s", path, extra.n, pe_namelist_str(&extra));
    for (int i = 0; i < n && st == PE_OK; i++) {
        const char *name = pe_safetensors_entry_at(f, i).name;
        const pe_var *v = pe_block_find_var(b, name);
        if (!v || !v->persistable) continue; /* only reached with ignore_extra */
        pe_tensor *t = pe_scope_var(scope, name);
        st = t ? pe_safetensors_load(f, i, t)
               : pe_error(PE_ERR_NOMEM, "%s: out of memory creating var '%s'", path, name);
    }
    pe_safetensors_close(f);
    return st;
}

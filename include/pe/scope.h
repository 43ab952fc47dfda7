/* pe/scope.h — scopes: name -> variable, with a parent chain.
 *
 *     pe_scope *g = pe_scope_new(NULL);
 *     pe_tensor *w = pe_scope_var(g, "fc_0.w_0");        // created if absent
 *     pe_scope *local = pe_scope_new(g);
 *     pe_tensor *same = pe_scope_find_var(local, "fc_0.w_0"); // found in parent
 *     pe_scope_free(local); pe_scope_free(g);
 *
 * A variable is a pe_tensor owned by the scope that created it. Lookups walk
 * up the parent chain; creation always happens in the scope given. A child
 * must be freed before its parent (the parent does not own children).
 */
#ifndef PE_SCOPE_H
#define PE_SCOPE_H

#include "pe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

typedef struct pe_scope pe_scope;

/* parent is borrowed and must outlive the new scope. Owned by caller. */
pe_scope *pe_scope_new(pe_scope *parent);
void pe_scope_free(pe_scope *s); /* accepts NULL; frees all its variables */

/* Finds `name` in s or its ancestors; NULL when absent. Borrowed. */
pe_tensor *pe_scope_find_var(const pe_scope *s, const char *name);
/* Finds `name` in s only (not ancestors). Borrowed. */
pe_tensor *pe_scope_find_local_var(const pe_scope *s, const char *name);
/* Returns the variable in s (not ancestors), creating an empty one if absent.
 * Borrowed; NULL only on allocation failure. */
pe_tensor *pe_scope_var(pe_scope *s, const char *name);
/* Removes and frees a variable of s; returns false when absent. */
bool pe_scope_erase_var(pe_scope *s, const char *name);
pe_scope *pe_scope_parent(const pe_scope *s);

int pe_scope_size(const pe_scope *s);
/* i-th variable name of s (table order, stable while s is unchanged), borrowed.
 * O(table size) per call: to list them all, use pe_scope_var_names. */
const char *pe_scope_var_name(const pe_scope *s, int i);
/* Writes the names of s's variables (table order, borrowed: valid while s is
 * unchanged) into names[0 .. cap) in one pass; returns how many it wrote,
 * min(pe_scope_size(s), cap). */
int pe_scope_var_names(const pe_scope *s, const char **names, int cap);
/* Bytes of storage this scope's own variables hold (views of memory owned
 * elsewhere — a memory-plan arena, a caller's fed array — are not counted). */
size_t pe_scope_bytes(const pe_scope *s);
/* Frees all variables of s (the scope stays usable). */
void pe_scope_clear(pe_scope *s);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

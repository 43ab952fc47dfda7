/* executor/feed_fetch.h — the checks of feeds and fetches both executors
 * make (internal; implemented in executor/feed_fetch.c), so a wrong feed is
 * reported with the same words by pe_executor_run and pe_run.
 *
 *     const pe_var *v;
 *     PE_CHECK(pe_feed_check_decl(prog, 0, &feed, &v));          // declared, has data, dtype
 *     PE_CHECK(pe_feed_check_piece(v, feed.name, t->ndim, t->dims, -1));  // rank, fixed dims
 */
#ifndef PE_EXECUTOR_FEED_FETCH_H
#define PE_EXECUTOR_FEED_FETCH_H

#include "pe/executor.h"

/* The feed names a var of block `block` (*out, borrowed) and has data of its dtype. */
pe_status pe_feed_check_decl(const pe_program *prog, int block, const pe_feed *f, const pe_var **out);
/* A (per-place) piece of a feed against the declaration: rank and the fixed
 * dims; place < 0 (the single-place executor) leaves the place out of the
 * message. */
pe_status pe_feed_check_piece(const pe_var *v, const char *name, int ndim, const int64_t *dims, int place);
/* Every fetch names a var of block `block`; `hint` ends the message. */
pe_status pe_fetch_check_names(const pe_program *prog, int block, const char *const *fetch, int n_fetch,
                               const char *hint);
/* *out (borrowed) = the fetched var's value in s; `where` (e.g. " on cpu:1",
 * or "") names the place in the error. */
pe_status pe_fetch_value(const pe_scope *s, const char *name, const char *where, const pe_tensor **out);

#endif

/* pe/status.h — error reporting and logging.
 *
 * Every fallible PE function returns a pe_status. On failure it also records
 * a one-line, human-readable message (what went wrong and where: op, var,
 * place, file) in a thread-local buffer readable with pe_last_error().
 *
 *     pe_status st = pe_program_load_file("mlp.pe", &prog);
 *     if (st != PE_OK) fprintf(stderr, "pe: error: %s\n", pe_last_error());
 *
 * Library code never calls exit(); PE_ASSERT guards internal invariants only.
 */
#ifndef PE_STATUS_H
#define PE_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif
/* The public API: exported from libpe.so, which is built with
 * -fvisibility=hidden (everything else in the library stays internal). */
#pragma GCC visibility push(default)

typedef enum pe_status {
    PE_OK = 0,
    PE_ERR_INVALID,     /* bad argument, bad program, bad feed */
    PE_ERR_NOT_FOUND,   /* missing var, file, op type */
    PE_ERR_IO,          /* read/write failure */
    PE_ERR_FORMAT,      /* corrupt or unsupported file content */
    PE_ERR_NOMEM,       /* allocation failure */
    PE_ERR_UNSUPPORTED, /* valid request this build cannot serve */
    PE_ERR_DEVICE,      /* CUDA / oneDNN / BLAS runtime failure */
    PE_ERR_CANCELLED,   /* run cancelled: another place failed, or pe_interrupt */
    PE_ERR_INTERNAL,    /* invariant broken: a bug in PE */
    PE_STATUS_COUNT
} pe_status;

/* Name of a status code ("PE_ERR_INVALID"). Borrowed static string. */
const char *pe_status_name(pe_status st);

/* Message of the last failure on this thread. Borrowed; valid until the next
 * PE call on this thread that fails. Empty string when there is none. */
const char *pe_last_error(void);

/* Record a failure message (printf-style) and return st, so callers write
 * `return pe_error(PE_ERR_INVALID, "op %s: ...", ...)`. */
pe_status pe_error(pe_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepend context to the current message: "ctx: <old message>". Returns st. */
pe_status pe_error_wrap(pe_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void pe_clear_error(void);

/* Logging. Level from PE_LOG_LEVEL (error|warn|info|debug), default warn. */
typedef enum pe_log_level { PE_LOG_ERROR = 0, PE_LOG_WARN, PE_LOG_INFO, PE_LOG_DEBUG } pe_log_level;
void pe_log(pe_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pe_log_set_level(pe_log_level lvl);
pe_log_level pe_log_get_level(void);

#define PE_CHECK(expr) do { pe_status pe__st = (expr); if (pe__st != PE_OK) return pe__st; } while (0)

/* Internal invariant. Aborts with file:line — only for bugs, never for input. */
void pe_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define PE_ASSERT(x) do { if (!(x)) pe_assert_fail(#x, __FILE__, __LINE__); } while (0)

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

/* runtime/status.c — pe_status names, the thread-local last-error message,
 * and leveled logging to stderr.
 *
 * The message lives in a fixed thread-local buffer so that recording an
 * error never allocates (it may happen on an out-of-memory path) and
 * concurrent places never overwrite each other's messages.
 */
#include "pe/status.h"
#include "runtime/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>

#define PE_ERR_MSG_MAX 2048

static _Thread_local char tl_msg[PE_ERR_MSG_MAX];

static const char *const k_status_names[PE_STATUS_COUNT] = {
    "PE_OK", "PE_ERR_INVALID", "PE_ERR_NOT_FOUND", "PE_ERR_IO", "PE_ERR_FORMAT",
    "PE_ERR_NOMEM", "PE_ERR_UNSUPPORTED", "PE_ERR_DEVICE", "PE_ERR_CANCELLED",
    "PE_ERR_INTERNAL",
};

const char *pe_status_name(pe_status st) {
    if ((int)st < 0 || st >= PE_STATUS_COUNT) return "PE_ERR_UNKNOWN";
    return k_status_names[st];
}

const char *pe_last_error(void) { return tl_msg; }

void pe_clear_error(void) { tl_msg[0] = '\0'; }

pe_status pe_error(pe_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
    va_end(ap);
    return st;
}

pe_status pe_error_wrap(pe_status st, const char *fmt, ...) {
    char prefix[512], old[PE_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tl_msg, sizeof old);
    size_t n = strlen(prefix);
    if (n + 2 >= sizeof tl_msg) n = sizeof tl_msg - 3;
    memcpy(tl_msg, prefix, n);
    memcpy(tl_msg + n, ": ", 2);
    size_t rest = sizeof tl_msg - n - 3;
    size_t m = strnlen(old, rest);
    memcpy(tl_msg + n + 2, old, m);
    tl_msg[n + 2 + m] = '\0';
    return st;
}

/* ---- name lists for messages ---------------------------------------------- */

void pe_namelist_add(pe_namelist *l, const char *name, const char *why) {
    l->n++;
    if (l->shown >= PE_NAMELIST_SHOWN || l->len >= sizeof l->text - 1) return;
    int k = snprintf(l->text + l->len, sizeof l->text - l->len, "%s'%s'%s%s%s", l->shown ? ", " : "", name,
                     why ? " (" : "", why ? why : "", why ? ")" : "");
    if (k < 0 || (size_t)k >= sizeof l->text - l->len) {
        l->text[l->len] = '\0'; /* a name that does not fit is counted, not cut */
        return;
    }
    l->len += (size_t)k;
    l->shown++;
}

const char *pe_namelist_str(pe_namelist *l) {
    if (l->n > l->shown && l->len < sizeof l->text)
        snprintf(l->text + l->len, sizeof l->text - l->len, "%s%d more", l->shown ? " and " : "",
                 l->n - l->shown);
    return l->text;
}

/* ---- logging ------------------------------------------------------------ */

static pe_log_level g_level = PE_LOG_WARN;
static pthread_once_t g_level_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;

static void level_from_env(void) {
    const char *e = getenv("PE_LOG_LEVEL");
    if (!e) return;
    if (!strcasecmp(e, "error")) g_level = PE_LOG_ERROR;
    else if (!strcasecmp(e, "warn") || !strcasecmp(e, "warning")) g_level = PE_LOG_WARN;
    else if (!strcasecmp(e, "info")) g_level = PE_LOG_INFO;
    else if (!strcasecmp(e, "debug")) g_level = PE_LOG_DEBUG;
}

pe_log_level pe_log_get_level(void) {
    pthread_once(&g_level_once, level_from_env);
    return g_level;
}

void pe_log_set_level(pe_log_level lvl) {
    pthread_once(&g_level_once, level_from_env);
    g_level = lvl;
}

void pe_log(pe_log_level lvl, const char *fmt, ...) {
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if (lvl > pe_log_get_level()) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_log_mu);
    fprintf(stderr, "pe: %s: %s\n", names[lvl], line);
    pthread_mutex_unlock(&g_log_mu);
}

void pe_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "pe: internal error: assertion `%s` failed at %s:%d\n", expr, file, line);
    abort();
}

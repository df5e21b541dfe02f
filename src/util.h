/* SPDX-License-Identifier: Apache-2.0 */
/* util.h — internal helpers every module uses: error reporting, checked allocation, strings. */
#ifndef KLJIT_UTIL_H
#define KLJIT_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "kljit_experimental.h" /* the library defines both headers' functions */

#if defined(__GNUC__)
#define KLJIT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KLJIT_PRINTF(a, b)
#endif

/* Sets the thread-local last error to the formatted message and returns `status`, so a failing
 * path reads `return err_set(KLJIT_ERR_INVALID_ARGUMENT, "vocab = %lld ...", v);`. */
kljit_status err_set(kljit_status status, const char *fmt, ...) KLJIT_PRINTF(2, 3);
kljit_status err_setv(kljit_status status, const char *fmt, va_list ap);
/* Prepends context to the current message: "plan_create: " + old message. Returns status. */
kljit_status err_prefix(kljit_status status, const char *fmt, ...) KLJIT_PRINTF(2, 3);
void err_clear(void);

/* The unknown tail of a caller's struct from a newer kljit.h: its struct_size `n` at most
 * KLJIT_STRUCT_SIZE_MAX (else KLJIT_ERR_INVALID_ARGUMENT, nothing read past `known` bytes), and
 * bytes [known, n) zero (else KLJIT_ERR_UNSUPPORTED: a field this library lacks is in use).
 * `what` names the argument in messages ("problem", "args", "options"). */
kljit_status util_struct_tail(const void *user, size_t known, size_t n, const char *who,
                              const char *what);

/* A growable NUL-terminated byte buffer (used for rendered sources, keys, descriptions). */
typedef struct strbuf {
  char *data;
  size_t len;
  size_t cap;
} strbuf;
kljit_status sb_append(strbuf *sb, const char *bytes, size_t n);
kljit_status sb_printf(strbuf *sb, const char *fmt, ...) KLJIT_PRINTF(2, 3);
void sb_free(strbuf *sb);

/* Debug log, only when KLJIT_LOG=1 is set in the environment (to stderr). */
void util_log(const char *fmt, ...) KLJIT_PRINTF(1, 2);

/* Lowercase hex of n bytes into out (2 n characters and a NUL). */
void util_hex(const uint8_t *bytes, size_t n, char *out);

/* Monotonic clock in seconds. */
double util_now(void);

#endif

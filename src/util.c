/* SPDX-License-Identifier: Apache-2.0 */
/* util.c — thread-local error message, string buffer, logging knob, clock. */
#include "util.h"
#include "env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ERR_CAP = 16384 };
static _Thread_local char err_msg[ERR_CAP];

kljit_status err_setv(kljit_status status, const char *fmt, va_list ap) {
  vsnprintf(err_msg, sizeof err_msg, fmt, ap);
  return status;
}

kljit_status err_set(kljit_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_setv(status, fmt, ap);
  va_end(ap);
  return status;
}

kljit_status err_prefix(kljit_status status, const char *fmt, ...) {
  char old[ERR_CAP];
  memcpy(old, err_msg, sizeof old);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err_msg, sizeof err_msg, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof err_msg)
    snprintf(err_msg + n, sizeof err_msg - (size_t)n, "%s", old);
  return status;
}

void err_clear(void) { err_msg[0] = '\0'; }

kljit_status util_struct_tail(const void *user, size_t known, size_t n, const char *who,
                              const char *what) {
  if (n > KLJIT_STRUCT_SIZE_MAX)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: %s->struct_size = %zu is larger than any kljit struct "
                   "(KLJIT_STRUCT_SIZE_MAX = %d): initialize it with its _INIT macro",
                   who, what, n, KLJIT_STRUCT_SIZE_MAX);
  for (size_t i = known; i < n; i++)
    if (((const unsigned char *)user)[i])
      return err_set(KLJIT_ERR_UNSUPPORTED,
                     "%s: %s->struct_size = %zu and byte %zu is set: a field newer than this "
                     "library's (%zu bytes) is in use", who, what, n, i, known);
  return KLJIT_SUCCESS;
}

const char *kljit_last_error(void) { return err_msg; }

kljit_status sb_append(strbuf *sb, const char *bytes, size_t n) {
  if (sb->len + n + 1 > sb->cap) {
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + n + 1) cap *= 2;
    char *p = realloc(sb->data, cap);
    if (!p) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory (%zu bytes)", cap);
    sb->data = p;
    sb->cap = cap;
  }
  memcpy(sb->data + sb->len, bytes, n);
  sb->len += n;
  sb->data[sb->len] = '\0';
  return KLJIT_SUCCESS;
}

kljit_status sb_printf(strbuf *sb, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return err_set(KLJIT_ERR_INTERNAL, "sb_printf: bad format");
  if ((size_t)n < sizeof small) return sb_append(sb, small, (size_t)n);
  char *big = malloc((size_t)n + 1);
  if (!big) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  kljit_status st = sb_append(sb, big, (size_t)n);
  free(big);
  return st;
}

void sb_free(strbuf *sb) {
  free(sb->data);
  sb->data = NULL;
  sb->len = sb->cap = 0;
}

void util_log(const char *fmt, ...) {
  const char *e = env_text(ENV_LOG);
  if (!e || strcmp(e, "1") != 0) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("kljit: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

double util_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void util_hex(const uint8_t *bytes, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * n] = '\0';
}

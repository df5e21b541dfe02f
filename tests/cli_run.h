/* SPDX-License-Identifier: Apache-2.0 */
/* cli_run.h — running the built `kljit` (its path in KLJIT_CLI) from a test as a script would:
 * its exit code and its output, plus the small file helpers the CLI tests share. */
#ifndef KLJIT_TEST_CLI_RUN_H
#define KLJIT_TEST_CLI_RUN_H

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cache.h"
#include "harness.h"

enum { OUT_CAP = 1 << 17 };
static char out[OUT_CAP]; /* the last run's stdout and stderr */

static inline int vcli(int seconds, const char *fmt, va_list ap) {
  const char *const exe = getenv("KLJIT_CLI");
  if (!exe) {
    fprintf(stderr, "KLJIT_CLI is not set\n");
    return -1;
  }
  char args[4096], cmd[8192], limit[64] = "";
  vsnprintf(args, sizeof args, fmt, ap);
  if (seconds > 0) snprintf(limit, sizeof limit, "timeout -k 5 %d ", seconds);
  snprintf(cmd, sizeof cmd, "%s'%s' %s 2>&1", limit, exe, args);
  FILE *const p = popen(cmd, "r");
  if (!p) return -1;
  const size_t n = fread(out, 1, OUT_CAP - 1, p);
  out[n] = '\0';
  const int status = pclose(p);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  fprintf(stderr, "$ kljit %s -> %d\n%s", args, rc, out);
  return rc;
}

/* Runs `kljit <args>` with stdout and stderr into `out`; returns its exit code (-1: no exit). */
static inline int cli(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int cli(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int rc = vcli(0, fmt, ap);
  va_end(ap);
  return rc;
}

/* The same, killed after `seconds` (exit code 124: it hung). */
static inline int cli_within(int seconds, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline int cli_within(int seconds, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const int rc = vcli(seconds, fmt, ap);
  va_end(ap);
  return rc;
}

static inline int count_kjc(const char *dir) {
  DIR *const d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += cache_name_classify(e->d_name) == CACHE_NAME_ENTRY;
  closedir(d);
  return n;
}

static inline int file_exists(const char *dir, const char *name) {
  char path[PATH_MAX];
  th_path_in(path, dir, name);
  struct stat st;
  return lstat(path, &st) == 0;
}

static inline int write_file(const char *dir, const char *name, const char *text) {
  char path[PATH_MAX];
  th_path_in(path, dir, name);
  FILE *const f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  return fclose(f);
}

/* A small problem: two modules per arch, about half a second of NVRTC each. */
#define SMALL "V=1000,H=64"

#endif

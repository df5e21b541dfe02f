/* SPDX-License-Identifier: Apache-2.0 */
/* cli_run.h — runs the built `kljit` (its path in KLJIT_CLI) as a script would, for the CLI
 * tests (unit_cli.c, unit_cli_shape.c): its stdout and stderr land in cli_out, the exit code
 * is returned. */
#ifndef KLJIT_CLI_RUN_H
#define KLJIT_CLI_RUN_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

enum { CLI_OUT_CAP = 1 << 17 };
static char cli_out[CLI_OUT_CAP];

/* Runs `kljit <args>` with stdout and stderr into cli_out; returns its exit code (-1: none). */
static int cli(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int cli(const char *fmt, ...) {
  const char *const exe = getenv("KLJIT_CLI");
  if (!exe) {
    fprintf(stderr, "KLJIT_CLI is not set\n");
    return -1;
  }
  char args[4096], cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", exe, args);
  FILE *const p = popen(cmd, "r");
  if (!p) return -1;
  const size_t n = fread(cli_out, 1, CLI_OUT_CAP - 1, p);
  cli_out[n] = '\0';
  const int status = pclose(p);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  fprintf(stderr, "$ kljit %s -> %d\n%s", args, rc, cli_out);
  return rc;
}

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* env.c — every environment variable kljit reads, and the one place that reads them.
 *
 *   variable               sets                                   default
 *   KLJIT_CACHE_DIR        options.cache_dir: the writable cache  $XDG_CACHE_HOME/kljit, else
 *                                                                 ~/.cache/kljit
 *   KLJIT_CACHE_PATH       options.cache_path: read-only caches   none
 *   KLJIT_CACHE_DISABLE=1  options.flags |= CACHE_DISABLE         cache on
 *   KLJIT_CACHE_TRUSTED_OWNERS  owners (users, uids) whose cache  root and the current user
 *                          entries and directories are read      only
 *   KLJIT_ROW_KERNEL       options.row_kernel (two_pass, cluster) two_pass
 *   KLJIT_CHUNK_ROWS       options.chunk_rows                     the planner's choice
 *   KLJIT_TUNE_ROWS        options.tune_rows                      8192
 *   KLJIT_TUNE_BUDGET_S    options.tune_budget_s                  30
 *   KLJIT_DEBUG_SKIP_GEMMS=1 options.flags |= DEBUG_SKIP_GEMMS    off (a benchmark hook:
 *                          kljit_experimental.h)
 *   KLJIT_GEMM             options.gemm (jit, cublas), or a list  KLJIT_GEMM_DEFAULT
 *                          of <kind>:<backend> (a ':' in it):
 *                          options.gemm_choice (include/kljit.h)
 *   KLJIT_DX_SPLIT         options.dx_split (0..64)               0: the planner's
 *   KLJIT_TEMPLATE_DIR     templates read from disk (development) the embedded ones
 *   KLJIT_DUMP_DIR         rendered sources and NVRTC logs        not written
 *   KLJIT_LOG=1            log lines on stderr                    off
 *   KLJIT_WISDOM           the user wisdom file                   $XDG_STATE_HOME/kljit/wisdom,
 *                                                                 else ~/.local/state/kljit/wisdom
 *   KLJIT_SYSTEM_WISDOM    the system wisdom file                 /etc/kljit/wisdom
 * (XDG_CACHE_HOME, XDG_STATE_HOME and HOME only locate the default directories.) The defaults
 * of the options are KLJIT_CONTEXT_OPTIONS_INIT (kljit.h), what planning without a context
 * uses whatever the environment says.
 * A value outside what a variable takes (env_bad) is never read as its default: the option
 * becomes a value the options' checks refuse (-1), kljit_context_create (without options)
 * refuses it by name before anything else (env_context_bad), the context-free entry points
 * refuse a bad value of what they do read (the cache's and the log's: env_cache_bad), and
 * `kljit info` names it (kljit_env_check).
 */
#include "env.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const NAMES[ENV_COUNT] = {
    [ENV_CACHE_DIR] = "KLJIT_CACHE_DIR",       [ENV_CACHE_PATH] = "KLJIT_CACHE_PATH",
    [ENV_CACHE_DISABLE] = "KLJIT_CACHE_DISABLE", [ENV_XDG_CACHE_HOME] = "XDG_CACHE_HOME",
    [ENV_XDG_STATE_HOME] = "XDG_STATE_HOME",
    [ENV_HOME] = "HOME",                       [ENV_ROW_KERNEL] = "KLJIT_ROW_KERNEL",
    [ENV_CHUNK_ROWS] = "KLJIT_CHUNK_ROWS",     [ENV_TUNE_ROWS] = "KLJIT_TUNE_ROWS",
    [ENV_TUNE_BUDGET_S] = "KLJIT_TUNE_BUDGET_S", [ENV_DEBUG_SKIP_GEMMS] = "KLJIT_DEBUG_SKIP_GEMMS",
    [ENV_TEMPLATE_DIR] = "KLJIT_TEMPLATE_DIR", [ENV_DUMP_DIR] = "KLJIT_DUMP_DIR",
    [ENV_LOG] = "KLJIT_LOG",                   [ENV_WISDOM] = "KLJIT_WISDOM",
    [ENV_SYSTEM_WISDOM] = "KLJIT_SYSTEM_WISDOM", [ENV_GEMM] = "KLJIT_GEMM",
    [ENV_DX_SPLIT] = "KLJIT_DX_SPLIT", [ENV_CACHE_TRUSTED_OWNERS] = "KLJIT_CACHE_TRUSTED_OWNERS"};

const char *env_text(env_var v) {
  return v >= 0 && v < ENV_COUNT ? getenv(NAMES[v]) : NULL;
}

const char *env_name(env_var v) {
  return v >= 0 && v < ENV_COUNT ? NAMES[v] : "?";
}

/* An integer in [lo, hi], blanks around it allowed: 1 with *out, else 0. */
static int parse_int(const char *e, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  const long long v = strtoll(e, &end, 10);
  while (*end == ' ' || *end == '\t') end++;
  if (end == e || *end || errno || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

static int parse_real(const char *e, double lo, double hi, double *out) {
  char *end;
  const double v = strtod(e, &end);
  while (*end == ' ' || *end == '\t') end++;
  if (end == e || *end || !(v > lo && v < hi)) return 0;
  *out = v;
  return 1;
}

/* The context option a set variable's text means, or -1 (refused where it is used: a typo must
 * never silently become the default). */
static int flag_value(env_var v) {
  const char *e = env_text(v);
  return !e || !*e || !strcmp(e, "0") ? 0 : !strcmp(e, "1") ? 1 : -1;
}

int env_bad(env_var v, char *why, size_t cap) {
  const char *e = env_text(v);
  if (!e || !*e) return 0;
  const char *want = NULL;
  long long n;
  double d;
  switch (v) {
    case ENV_CACHE_DISABLE: case ENV_DEBUG_SKIP_GEMMS: case ENV_LOG:
      if (flag_value(v) < 0) want = "1 (on), or 0 or unset (off)";
      break;
    case ENV_ROW_KERNEL:
      if (strcmp(e, "two_pass") && strcmp(e, "cluster")) want = "two_pass (the default) or cluster";
      break;
    case ENV_CHUNK_ROWS:
      if (!parse_int(e, 0, INT32_MAX, &n)) want = "rows in [1, 2^31), or 0 for the planner's";
      break;
    case ENV_TUNE_ROWS:
      if (!parse_int(e, 1, INT32_MAX, &n)) want = "tokens in [1, 2^31) (default 8192)";
      break;
    case ENV_TUNE_BUDGET_S:
      if (!parse_real(e, 0, 1e6, &d)) want = "seconds in (0, 1e6) (default 30)";
      break;
    case ENV_GEMM:
      /* a list (a ':' in it) is read, and refused naming its item, by kljit_context_create */
      if (strcmp(e, "jit") && strcmp(e, "cublas") && !strchr(e, ':'))
        want = "jit, cublas or a list <logits|dx|dw|all>:<backend>,... (unset: the default)";
      break;
    case ENV_DX_SPLIT:
      if (!parse_int(e, 0, 64, &n)) want = "slices in [1, 64], or 0 for the planner's";
      break;
    default:
      break;
  }
  if (want) snprintf(why, cap, "%s=%s: want %s", NAMES[v], e, want);
  return want != NULL;
}

int env_cache_bad(char *why, size_t cap) {
  return env_bad(ENV_CACHE_DISABLE, why, cap) || env_bad(ENV_LOG, why, cap);
}

int env_context_bad(char *why, size_t cap) {
  static const env_var checked[] = {ENV_CACHE_DISABLE, ENV_DEBUG_SKIP_GEMMS, ENV_LOG,
                                    ENV_ROW_KERNEL,    ENV_CHUNK_ROWS,       ENV_TUNE_ROWS,
                                    ENV_TUNE_BUDGET_S, ENV_GEMM,             ENV_DX_SPLIT};
  for (size_t i = 0; i < sizeof checked / sizeof checked[0]; i++)
    if (env_bad(checked[i], why, cap)) return 1;
  return 0;
}

void env_each_kljit(void (*fn)(const char *name, const char *value, int known, void *user),
                    void *user) {
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "KLJIT_", 6) != 0) continue;
    const char *const eq = strchr(*e, '=');
    if (!eq) continue;
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
    int known = 0;
    for (int v = 0; v < ENV_COUNT && !known; v++) known = !strcmp(NAMES[v], name);
    fn(name, eq + 1, known, user);
  }
}

void env_context_defaults(kljit_context_options *o) {
  const kljit_context_options init = KLJIT_CONTEXT_OPTIONS_INIT;
  *o = init;
  const char *dir = env_text(ENV_CACHE_DIR), *path = env_text(ENV_CACHE_PATH);
  o->cache_dir = dir && *dir ? dir : NULL;
  o->cache_path = path && *path ? path : NULL;
  if (flag_value(ENV_CACHE_DISABLE) == 1) o->flags |= KLJIT_CONTEXT_CACHE_DISABLE;
  if (flag_value(ENV_DEBUG_SKIP_GEMMS) == 1) o->flags |= KLJIT_CONTEXT_DEBUG_SKIP_GEMMS;
  /* a typo must not silently mean the default: what env_bad refuses becomes a value the
   * options' checks refuse (-1), with the variable's text in their message */
  char why[512];
  const char *rk = env_text(ENV_ROW_KERNEL);
  o->row_kernel = env_bad(ENV_ROW_KERNEL, why, sizeof why) ? (kljit_row_kernel)-1
                  : rk && !strcmp(rk, "cluster")          ? KLJIT_ROW_KERNEL_CLUSTER
                                                          : KLJIT_ROW_KERNEL_TWO_PASS;
  const char *e = env_text(ENV_CHUNK_ROWS);
  long long n = 0;
  o->chunk_rows = env_bad(ENV_CHUNK_ROWS, why, sizeof why) ? -1
                  : e && *e && parse_int(e, 0, INT32_MAX, &n) ? n
                                                               : 0;
  e = env_text(ENV_TUNE_ROWS);
  o->tune_rows = env_bad(ENV_TUNE_ROWS, why, sizeof why) ? -1
                 : e && *e && parse_int(e, 1, INT32_MAX, &n) ? n
                                                              : 8192;
  e = env_text(ENV_TUNE_BUDGET_S);
  double s = 30.0;
  if (env_bad(ENV_TUNE_BUDGET_S, why, sizeof why))
    s = -1.0;
  else if (e && *e)
    parse_real(e, 0, 1e6, &s);
  o->tune_budget_s = s;
  e = env_text(ENV_GEMM);
  const int list = e && strchr(e, ':');
  o->gemm = !e || !*e || list        ? KLJIT_GEMM_DEFAULT
            : !strcmp(e, "jit")      ? KLJIT_GEMM_JIT
            : !strcmp(e, "cublas")   ? KLJIT_GEMM_CUBLAS
                                     : (kljit_gemm)-1;
  o->gemm_choice = list ? e : NULL; /* read (and refused when bad) at kljit_context_create */
  e = env_text(ENV_DX_SPLIT);
  o->dx_split = env_bad(ENV_DX_SPLIT, why, sizeof why) ? -1
                : e && *e && parse_int(e, 0, 64, &n) ? (int32_t)n
                                                      : 0;
}

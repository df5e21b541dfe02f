/* SPDX-License-Identifier: Apache-2.0 */
/* env.c — every environment variable kljit reads, and the one place that reads them.
 *
 *   variable               sets                                   default
 *   KLJIT_CACHE_DIR        options.cache_dir: the writable cache  $XDG_CACHE_HOME/kljit, else
 *                                                                 ~/.cache/kljit
 *   KLJIT_CACHE_PATH       options.cache_path: read-only caches   none
 *   KLJIT_CACHE_DISABLE=1  options.flags |= CACHE_DISABLE         cache on
 *   KLJIT_ROW_KERNEL       options.row_kernel (two_pass, cluster) two_pass
 *   KLJIT_CHUNK_ROWS       options.chunk_rows                     the planner's choice
 *   KLJIT_TUNE_ROWS        options.tune_rows                      8192
 *   KLJIT_TUNE_BUDGET_S    options.tune_budget_s                  30
 *   KLJIT_DEBUG_SKIP_GEMMS=1 options.flags |= DEBUG_SKIP_GEMMS    off
 *   KLJIT_GEMM             options.gemm (jit, cublas), or a list  KLJIT_GEMM_DEFAULT
 *                          of <kind>:<backend> (a ':' in it):
 *                          options.gemm_choice (include/kljit.h);
 *                          another value: gemm -1, refused where
 *                          it is used
 *   KLJIT_DX_SPLIT         options.dx_split (a number; another    0: the planner's
 *                          value: -1, refused where it is used)
 *   KLJIT_TEMPLATE_DIR     templates read from disk (development) the embedded ones
 *   KLJIT_DUMP_DIR         rendered sources and NVRTC logs        not written
 *   KLJIT_LOG=1            log lines on stderr                    off
 *   KLJIT_WISDOM           the user wisdom file                   $XDG_STATE_HOME/kljit/wisdom,
 *                                                                 else ~/.local/state/kljit/wisdom
 *   KLJIT_SYSTEM_WISDOM    the system wisdom file                 /etc/kljit/wisdom
 * (XDG_CACHE_HOME, XDG_STATE_HOME and HOME only locate the default directories.)
 */
#include "env.h"

#include <stdlib.h>
#include <string.h>

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
    [ENV_DX_SPLIT] = "KLJIT_DX_SPLIT"};

const char *env_text(env_var v) {
  return v >= 0 && v < ENV_COUNT ? getenv(NAMES[v]) : NULL;
}

static int is_one(env_var v) {
  const char *e = env_text(v);
  return e && strcmp(e, "1") == 0;
}

void env_context_defaults(kljit_context_options *o) {
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  const char *dir = env_text(ENV_CACHE_DIR), *path = env_text(ENV_CACHE_PATH);
  o->cache_dir = dir && *dir ? dir : NULL;
  o->cache_path = path && *path ? path : NULL;
  if (is_one(ENV_CACHE_DISABLE)) o->flags |= KLJIT_CONTEXT_CACHE_DISABLE;
  if (is_one(ENV_DEBUG_SKIP_GEMMS)) o->flags |= KLJIT_CONTEXT_DEBUG_SKIP_GEMMS;
  const char *rk = env_text(ENV_ROW_KERNEL);
  o->row_kernel = rk && strcmp(rk, "cluster") == 0 ? KLJIT_ROW_KERNEL_CLUSTER
                                                   : KLJIT_ROW_KERNEL_TWO_PASS;
  const char *e = env_text(ENV_CHUNK_ROWS);
  const long long chunk = e ? atoll(e) : 0;
  o->chunk_rows = chunk > 0 ? chunk : 0;
  e = env_text(ENV_TUNE_ROWS);
  const long long n = e ? atoll(e) : 0;
  o->tune_rows = n >= 1 && n <= INT32_MAX ? (int64_t)n : 8192;
  e = env_text(ENV_TUNE_BUDGET_S);
  const double s = e ? atof(e) : 0.0;
  o->tune_budget_s = s > 0 && s < 1e6 ? s : 30.0;
  /* a typo must not silently mean cuBLASLt: -1 is refused with the variable's text */
  e = env_text(ENV_GEMM);
  const int list = e && strchr(e, ':');
  o->gemm = !e || !*e || list        ? KLJIT_GEMM_DEFAULT
            : !strcmp(e, "jit")      ? KLJIT_GEMM_JIT
            : !strcmp(e, "cublas")   ? KLJIT_GEMM_CUBLAS
                                     : (kljit_gemm)-1;
  o->gemm_choice = list ? e : NULL; /* read (and refused when bad) at kljit_context_create */
  e = env_text(ENV_DX_SPLIT);
  char *end = NULL;
  const long split = e && *e ? strtol(e, &end, 10) : 0;
  o->dx_split = e && *e && (*end || split < 0 || split > 64) ? -1 : (int32_t)split;
}

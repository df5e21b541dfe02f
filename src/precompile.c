/* precompile.c — kljit_precompile: a plan's kernels into a cache directory, without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit.h"
#include "nvrtc_compile.h"
#include "problem.h"

kljit_status kljit_precompile(const kljit_problem *problem, int arch, const char *cache_dir,
                              int *compiled) {
  const char *who = "kljit_precompile";
  if (compiled) *compiled = 0;
  kljit_status st = prob_validate(problem, who);
  if (st != KLJIT_SUCCESS) return st;
  char arch_text[16];
  snprintf(arch_text, sizeof arch_text, "%d", arch);
  if (!nvrtc_parse_arch(arch_text))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: arch = %d, must be a real architecture of sm_80 or newer (80, 86, 89, "
                   "90, ...)", who, arch);
  cache_config cfg;
  memset(&cfg, 0, sizeof cfg);
  if (cache_dir) {
    if (!*cache_dir) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: cache_dir is empty", who);
    if (!(cfg.rw_dir = strdup(cache_dir)))
      return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  } else if ((st = cache_config_from_env(&cfg))) {
    return st;
  }
  if (cfg.disabled || !cfg.rw_dir) {
    cache_config_free(&cfg);
    return err_set(KLJIT_ERR_CACHE, "%s: no writable kernel cache (KLJIT_CACHE_DISABLE is set, "
                   "or neither KLJIT_CACHE_DIR, XDG_CACHE_HOME nor HOME is): pass cache_dir", who);
  }
  const prob_tuning tune = prob_estimate(problem, 0, arch);
  prob_geometry g;
  st = prob_geometry_make(problem, &tune, &g);
  const kspec *specs[] = {&g.rows, &g.helpers};
  for (int i = 0; i < 2 && st == KLJIT_SUCCESS; i++) {
    jit_bin bin;
    st = jit_build(specs[i], arch, &cfg, &bin);
    if (st != KLJIT_SUCCESS) break;
    if (bin.source == CACHE_MISS && compiled) ++*compiled;
    jit_bin_free(&bin);
  }
  cache_config_free(&cfg);
  if (st != KLJIT_SUCCESS) err_prefix(st, "%s: ", who);
  return st;
}

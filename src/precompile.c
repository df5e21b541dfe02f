/* precompile.c — kljit_precompile: a plan's kernels into a cache directory, without a GPU.
 * Thread-safe for any mix of problems and archs: rendering has its own Lua state per call,
 * NVRTC programs are per call, and cache stores are atomic renames (src/cache.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit.h"
#include "problem.h"

kljit_status kljit_precompile_v2(const kljit_problem *problem, int arch, const char *cache_dir,
                                 uint32_t flags, kljit_module_callback done, void *user) {
  const char *who = "kljit_precompile";
  kljit_status st = prob_validate(problem, who);
  if (st == KLJIT_SUCCESS) st = jit_precompile_check(who, arch, cache_dir, flags);
  if (st != KLJIT_SUCCESS) return st;
  cache_config cfg;
  if ((st = jit_precompile_config(cache_dir, &cfg)) != KLJIT_SUCCESS)
    return err_prefix(st, "%s: ", who);
  const prob_tuning tune = prob_estimate(problem, 0, arch);
  prob_geometry g;
  st = prob_geometry_make(problem, &tune, &g);
  if (st == KLJIT_SUCCESS) {
    const kspec specs[] = {g.rows, g.helpers};
    st = jit_precompile_all(specs, sizeof specs / sizeof specs[0], arch, &cfg, flags, done, user);
  }
  cache_config_free(&cfg);
  if (st != KLJIT_SUCCESS) err_prefix(st, "%s: ", who);
  return st;
}

static void count_compiled(const kljit_module_report *m, void *user) {
  if (m->compiled) ++*(int *)user;
}

kljit_status kljit_precompile(const kljit_problem *problem, int arch, const char *cache_dir,
                              int *compiled) {
  int n = 0;
  const kljit_status st = kljit_precompile_v2(problem, arch, cache_dir, 0, count_compiled, &n);
  if (compiled) *compiled = st == KLJIT_SUCCESS ? n : 0;
  return st;
}

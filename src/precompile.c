/* SPDX-License-Identifier: Apache-2.0 */
/* precompile.c — kljit_precompile: a plan's kernels into a cache directory, without a GPU.
 * Thread-safe for any mix of problems and archs: rendering has its own Lua state per call,
 * NVRTC programs are per call, and cache stores are atomic renames (src/cache.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit.h"
#include "recipe.h"

kljit_status kljit_precompile(const kljit_problem *problem, int arch, const char *cache_dir,
                              uint32_t flags, kljit_module_callback done, void *user) {
  err_clear();
  const char *who = "kljit_precompile";
  kljit_problem pb;
  kljit_status st = prob_import(problem, who, &pb);
  problem = &pb;
  if (st == KLJIT_SUCCESS) st = jit_precompile_check(who, arch, cache_dir, flags);
  if (st != KLJIT_SUCCESS) return st;
  cache_config cfg;
  if ((st = jit_precompile_config(cache_dir, &cfg)) != KLJIT_SUCCESS)
    return err_prefix(st, "%s: ", who);
  /* the heuristic plan of a context with the default options, whatever the environment says */
  const kljit_context_options opt = KLJIT_CONTEXT_OPTIONS_INIT;
  recipe r;
  st = recipe_make(problem, NULL, &opt, arch, 0, &r);
  if (st == KLJIT_SUCCESS) {
    const kspec *m[RECIPE_MAX_MODULES];
    kspec all[RECIPE_MAX_MODULES];
    const int count = recipe_modules(&r, m);
    for (int i = 0; i < count; i++) all[i] = *m[i];
    st = jit_precompile_all(all, (size_t)count, arch, &cfg, flags, done, user);
  }
  cache_config_free(&cfg);
  if (st != KLJIT_SUCCESS) err_prefix(st, "%s: ", who);
  return st;
}

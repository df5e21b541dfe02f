/* SPDX-License-Identifier: Apache-2.0 */
/* precompile.c — kljit_precompile: a plan's kernels into a cache directory, without a GPU.
 * Thread-safe for any mix of problems and archs: rendering has its own Lua state per call,
 * NVRTC programs are per call, and cache stores are atomic renames (src/cache.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_sm90.h"
#include "jit.h"
#include "problem.h"

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
  const prob_tuning tune = prob_estimate(problem, 0, arch);
  prob_geometry g;
  st = prob_geometry_make(problem, &tune, &g);
  kspec gemm[JGEMM_SLOTS];
  const kspec *specs[JGEMM_PLAN_MODULES];
  const int count = st == KLJIT_SUCCESS ? jgemm_plan_modules(problem, &g, arch, gemm, specs) : 0;
  if (count < 0) st = KLJIT_ERR_INVALID_ARGUMENT;
  if (st == KLJIT_SUCCESS) {
    kspec all[JGEMM_PLAN_MODULES];
    for (int i = 0; i < count; i++) all[i] = *specs[i];
    st = jit_precompile_all(all, (size_t)count, arch, &cfg, flags, done, user);
  }
  cache_config_free(&cfg);
  if (st != KLJIT_SUCCESS) err_prefix(st, "%s: ", who);
  return st;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* read_only_hits.h — whether a plan would load every module of a problem from a read-only
 * cache (KLJIT_CACHE_PATH, a precompiled cluster cache) and compile nothing: the modules a plan
 * builds (recipe_make_on with the default options, on a GPU of each device class of the arch:
 * the rows, the helpers and, on sm_90, the generated logits GEMM) through jit_build
 * with the environment's cache, as kljit_plan_create does, without a GPU. */
#ifndef KLJIT_TEST_READ_ONLY_HITS_H
#define KLJIT_TEST_READ_ONLY_HITS_H

#include "cache.h"
#include "harness.h"
#include "jit.h"
#include "recipe.h"

/* TH_PASS when, for each of the n archs and each of its device classes (recipe_device_classes),
 * every module of pb's plan is CACHE_HIT_READONLY with no compile; sm_count as the plan's GPU
 * reports it (0: unknown). */
static inline int th_plan_modules_hit_read_only(const kljit_problem *pb, const int *archs, int n,
                                                int sm_count) {
  cache_config cfg;
  TH_OK(cache_config_from_env(&cfg));
  int r = TH_PASS;
  recipe_device dev[2];
  for (int j = 0; j < 2 * n && r == TH_PASS; j++) {
    const int i = j / 2;
    if (j % 2 >= recipe_device_classes(archs[i], dev)) continue;
    dev[j % 2].sm_count = sm_count;
    const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
    recipe rc;
    const kspec *specs[RECIPE_MAX_MODULES];
    int mods = 0;
    if (recipe_make_on(pb, NULL, &o, &dev[j % 2], &rc) != KLJIT_SUCCESS ||
        (mods = recipe_modules(&rc, specs)) < 3)
      r = TH_FAIL;
    for (int k = 0; k < mods && r == TH_PASS; k++) {
      jit_bin bin;
      if (jit_build(specs[k], archs[i], &cfg, &bin) != KLJIT_SUCCESS) {
        fprintf(stderr, "jit_build: %s\n", kljit_last_error());
        r = TH_FAIL;
        break;
      }
      if (bin.source != CACHE_HIT_READONLY || bin.compile_ms != 0.0) {
        fprintf(stderr, "sm_%d module %s: not a read-only cache hit (source %d)\n", archs[i],
                bin.name, (int)bin.source);
        r = TH_FAIL;
      }
      jit_bin_free(&bin);
    }
  }
  cache_config_free(&cfg);
  return r;
}

#endif

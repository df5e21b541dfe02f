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

/* TH_PASS when every module of pb's plan on the GPU `dev` is CACHE_HIT_READONLY with no
 * compile. */
static inline int th_device_modules_hit_read_only(const kljit_problem *pb,
                                                  const recipe_device *dev,
                                                  const cache_config *cfg) {
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  recipe rc;
  const kspec *specs[RECIPE_MAX_MODULES];
  int mods = 0;
  if (recipe_make_on(pb, NULL, &o, dev, &rc) != KLJIT_SUCCESS ||
      (mods = recipe_modules(&rc, specs)) < 3)
    return TH_FAIL;
  for (int k = 0; k < mods; k++) {
    jit_bin bin;
    if (jit_build(specs[k], dev->arch, cfg, &bin) != KLJIT_SUCCESS) {
      fprintf(stderr, "jit_build: %s\n", kljit_last_error());
      return TH_FAIL;
    }
    const int hit = bin.source == CACHE_HIT_READONLY && bin.compile_ms == 0.0;
    if (!hit)
      fprintf(stderr, "sm_%d module %s: not a read-only cache hit (source %d)\n", dev->arch,
              bin.name, (int)bin.source);
    jit_bin_free(&bin);
    if (!hit) return TH_FAIL;
  }
  return TH_PASS;
}

/* TH_PASS when, for each of the n archs and each of its device classes (recipe_device_classes),
 * every module of pb's plan is CACHE_HIT_READONLY with no compile; sm_count as the plan's GPU
 * reports it (0: unknown). */
static inline int th_plan_modules_hit_read_only(const kljit_problem *pb, const int *archs, int n,
                                                int sm_count) {
  cache_config cfg;
  TH_OK(cache_config_from_env(&cfg));
  int r = TH_PASS;
  for (int i = 0; i < n && r == TH_PASS; i++) {
    recipe_device dev[2];
    const int classes = recipe_device_classes(archs[i], dev);
    for (int c = 0; c < classes && r == TH_PASS; c++) {
      dev[c].sm_count = sm_count;
      r = th_device_modules_hit_read_only(pb, &dev[c], &cfg);
    }
  }
  cache_config_free(&cfg);
  return r;
}

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* precompile.c — kljit_precompile: the heuristic plans' kernels (one per device class of the
 * arch, precompile.h) into a cache directory, without a GPU; the module list both precompiles
 * share.
 * Thread-safe for any mix of problems and archs: rendering has its own Lua state per call,
 * NVRTC programs are per call, and cache stores are atomic renames (src/cache.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit.h"
#include "precompile.h"

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
  /* the heuristic plans of a context with the default options, whatever the environment says */
  precompile_list list = {0};
  st = precompile_list_add(&list, problem, NULL, arch);
  if (st == KLJIT_SUCCESS) st = jit_precompile_all(list.k, list.n, arch, &cfg, flags, done, user);
  precompile_list_free(&list);
  cache_config_free(&cfg);
  if (st != KLJIT_SUCCESS) err_prefix(st, "%s: ", who);
  return st;
}

void precompile_list_free(precompile_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->text[i]);
  free(l->k), free(l->text);
  memset(l, 0, sizeof *l);
}

/* Appends r's modules that l does not hold yet. */
static kljit_status add_recipe(precompile_list *l, const recipe *r) {
  const kspec *specs[RECIPE_MAX_MODULES];
  const int count = recipe_modules(r, specs);
  kljit_status st = KLJIT_SUCCESS;
  for (int i = 0; i < count && st == KLJIT_SUCCESS; i++) {
    kspec_key key;
    strbuf text = {0};
    if (kspec_key_of(specs[i], &key) != 0)
      return err_set(KLJIT_ERR_INTERNAL, "a %s spec's key is over %d bytes",
                     kspec_template(specs[i]), KSPEC_KEY_MAX);
    if ((st = sb_append(&text, key.text, key.len)) != KLJIT_SUCCESS) break;
    int seen = 0;
    for (size_t j = 0; j < l->n && !seen; j++) seen = !strcmp(l->text[j], text.data);
    if (seen) {
      sb_free(&text);
      continue;
    }
    if (l->n == l->cap) {
      const size_t cap = l->cap ? 2 * l->cap : 16;
      kspec *k = realloc(l->k, cap * sizeof *k);
      if (k) l->k = k;
      char **tx = k ? realloc(l->text, cap * sizeof *tx) : NULL;
      if (tx) l->text = tx;
      if (!k || !tx) {
        sb_free(&text);
        return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
      }
      l->cap = cap;
    }
    l->k[l->n] = *specs[i]; /* its strings are static literals (recipe.h) */
    l->text[l->n++] = text.data;
  }
  return st;
}

kljit_status precompile_list_add(precompile_list *l, const kljit_problem *pb,
                                 const prob_tuning *t, int arch) {
  const kljit_context_options opt = KLJIT_CONTEXT_OPTIONS_INIT;
  recipe_device dev[2];
  const int classes = recipe_device_classes(arch, dev);
  kljit_status st = KLJIT_SUCCESS;
  for (int c = 0; c < classes && st == KLJIT_SUCCESS; c++) {
    recipe r;
    st = recipe_make_on(pb, t, &opt, &dev[c], &r);
    if (st == KLJIT_SUCCESS) st = add_recipe(l, &r);
  }
  return st;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* wisdom_precompile.c — kljit_precompile_wisdom: the modules of every plan a wisdom file leads
 * to, compiled for one architecture into a kernel cache, without a GPU.
 *
 * For each entry: the problem it was tuned for (key + extra fields) with the heuristic tuning
 * for sm_<arch> (what a GPU without matching wisdom plans), and, when the entry was tuned on an
 * sm_<arch> GPU, its own tuning. Plans share modules (the helpers, often the heuristic rows):
 * the distinct specs are collected first, so each module is built and reported once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_sm90.h"
#include "jit.h"
#include "jit_memo.h"
#include "wisdom.h"

typedef struct spec_list {
  kspec *k;
  char **text; /* jit_memo_spec_text: equal texts, equal modules */
  size_t n, cap;
} spec_list;

static void spec_list_free(spec_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->text[i]);
  free(l->k), free(l->text);
  memset(l, 0, sizeof *l);
}

/* Appends the plan's modules (jgemm_plan_modules) unless already listed. */
static kljit_status add_plan(spec_list *l, const kljit_problem *pb, const prob_tuning *t,
                             int arch) {
  prob_geometry g;
  kljit_status st = prob_geometry_make(pb, t, &g);
  kspec gemm[JGEMM_SLOTS];
  const kspec *specs[JGEMM_PLAN_MODULES];
  const int count = st == KLJIT_SUCCESS ? jgemm_plan_modules(pb, &g, arch, gemm, specs) : 0;
  if (count < 0) st = KLJIT_ERR_INVALID_ARGUMENT;
  for (int i = 0; i < count && st == KLJIT_SUCCESS; i++) {
    strbuf text = {0};
    if ((st = jit_memo_spec_text(specs[i], arch, &text)) != KLJIT_SUCCESS) break;
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
    l->k[l->n] = *specs[i]; /* its strings are static literals (prob_geometry_make) */
    l->text[l->n++] = text.data;
  }
  return st;
}

kljit_status kljit_precompile_wisdom(const char *wisdom_file, int arch, const char *cache_dir,
                                     uint32_t flags, kljit_module_callback done, void *user) {
  err_clear();
  const char *who = "kljit_precompile_wisdom";
  if (!wisdom_file || !*wisdom_file)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: wisdom_file is %s", who,
                   wisdom_file ? "empty" : "NULL");
  kljit_status st = jit_precompile_check(who, arch, cache_dir, flags);
  if (st != KLJIT_SUCCESS) return st;
  wisdom_set set;
  st = wisdom_read_file(wisdom_file, &set, NULL);
  if (st != KLJIT_SUCCESS) return err_prefix(st, "%s: ", who);
  spec_list list = {0};
  for (size_t i = 0; i < set.n && st == KLJIT_SUCCESS; i++) {
    const wisdom_entry *e = &set.e[i];
    kljit_problem pb;
    if ((st = wisdom_entry_problem(e, &pb)) != KLJIT_SUCCESS) break;
    const prob_tuning heur = prob_estimate(&pb, 0, arch);
    st = add_plan(&list, &pb, &heur, arch);
    if (st == KLJIT_SUCCESS && e->arch == arch) st = add_plan(&list, &pb, &e->tune, arch);
  }
  wisdom_set_free(&set);
  cache_config cfg;
  memset(&cfg, 0, sizeof cfg);
  if (st == KLJIT_SUCCESS) st = jit_precompile_config(cache_dir, &cfg);
  if (st == KLJIT_SUCCESS) st = jit_precompile_all(list.k, list.n, arch, &cfg, flags, done, user);
  cache_config_free(&cfg);
  spec_list_free(&list);
  if (st != KLJIT_SUCCESS) return err_prefix(st, "%s: ", who);
  err_clear();
  return KLJIT_SUCCESS;
}

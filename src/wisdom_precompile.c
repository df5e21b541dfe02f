/* SPDX-License-Identifier: Apache-2.0 */
/* wisdom_precompile.c — kljit_precompile_wisdom: the modules of every plan a wisdom file leads
 * to, compiled for one architecture into a kernel cache, without a GPU.
 *
 * For each entry: the problem it was tuned for (key + extra fields) with the heuristic tuning
 * for sm_<arch> (what a GPU without matching wisdom plans), and, when the entry was tuned on an
 * sm_<arch> GPU, its own tuning, each for every device class of sm_<arch>
 * (recipe_device_classes). Plans share modules (the helpers, often the heuristic rows): the
 * distinct specs are collected first (precompile_list_add), so each module is built and
 * reported once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit.h"
#include "precompile.h"
#include "wisdom.h"

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
  precompile_list list = {0};
  for (size_t i = 0; i < set.n && st == KLJIT_SUCCESS; i++) {
    const wisdom_entry *e = &set.e[i];
    kljit_problem pb;
    if ((st = wisdom_entry_problem(e, &pb)) != KLJIT_SUCCESS) break;
    st = precompile_list_add(&list, &pb, NULL, arch);
    if (st == KLJIT_SUCCESS && e->arch == arch)
      st = precompile_list_add(&list, &pb, &e->tune, arch);
  }
  wisdom_set_free(&set);
  cache_config cfg;
  memset(&cfg, 0, sizeof cfg);
  if (st == KLJIT_SUCCESS) st = jit_precompile_config(cache_dir, &cfg);
  if (st == KLJIT_SUCCESS) st = jit_precompile_all(list.k, list.n, arch, &cfg, flags, done, user);
  cache_config_free(&cfg);
  precompile_list_free(&list);
  if (st != KLJIT_SUCCESS) return err_prefix(st, "%s: ", who);
  err_clear();
  return KLJIT_SUCCESS;
}

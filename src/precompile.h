/* SPDX-License-Identifier: Apache-2.0 */
/* precompile.h — the distinct modules of the plans a precompile covers (kljit_precompile,
 * kljit_precompile_wisdom): a list of specs keyed by their text, each module once. A precompile
 * knows no GPU, so a problem's plan is listed for every device class of sm_<arch> whose
 * heuristics differ (recipe_device_classes). */
#ifndef KLJIT_PRECOMPILE_H
#define KLJIT_PRECOMPILE_H

#include "recipe.h"

typedef struct precompile_list {
  kspec *k;
  char **text; /* kspec_key_of: equal keys, equal modules */
  size_t n, cap;
} precompile_list;

/* Appends the modules of the plans of `pb` with tuning t (NULL: the heuristics) on each device
 * class of sm_<arch>, with a context of the default options, unless already listed. */
kljit_status precompile_list_add(precompile_list *l, const kljit_problem *pb,
                                 const prob_tuning *t, int arch);
void precompile_list_free(precompile_list *l);

#endif

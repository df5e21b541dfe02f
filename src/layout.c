/* SPDX-License-Identifier: Apache-2.0 */
/* layout.c — the layout of a problem's records without a plan: what the modules its plans load
 * declare (their manifests, src/kiface.h), for the tuner's buffers and kljit_problem_layout.
 *
 * Records do not depend on the tuning a plan takes (threads, split, the cluster variant): the
 * templates declare them from the loss alone, and kiface_layout_of makes every module of a
 * plan agree. The heuristic tuning's modules are asked; a plan's own layout (plan.c, from the
 * manifests it loaded) is the one its executes use.
 */
#include "layout.h"

#include <stdio.h>
#include <string.h>

#include "jit.h"
#include "recipe.h"

/* The recipe of (pb, t) on sm_80 (two-pass rows) with the options' defaults, not the
 * environment's (records do not depend on options); t NULL: the heuristics'. */
static kljit_status recipe_of(const kljit_problem *pb, const prob_tuning *t, recipe *r) {
  kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  o.row_kernel = KLJIT_ROW_KERNEL_TWO_PASS;
  return recipe_make(pb, t, &o, 80, 0, r);
}

kljit_status layout_of_problem(const kljit_problem *pb, const prob_tuning *t,
                               kiface_layout *out) {
  recipe r;
  kljit_status st = recipe_of(pb, t, &r);
  const kspec *specs[] = {&r.geom.rows, &r.geom.helpers};
  return st == KLJIT_SUCCESS ? jit_layout(specs, 2, out) : st;
}

/* The slot names of record `name` in the manifest of `k`, blank-separated, into out. */
static kljit_status slot_names(const kspec *k, const char *name, char *out, size_t cap) {
  strbuf text = {0};
  kiface_manifest m;
  kljit_status st = jit_manifest(k, &text);
  if (st == KLJIT_SUCCESS) st = kiface_parse(text.data, kspec_template(k), &m);
  sb_free(&text);
  if (st != KLJIT_SUCCESS) return st;
  const kiface_record *r = kiface_record_find(&m, name);
  size_t n = 0;
  out[0] = '\0';
  for (int i = 0; r && i < r->nslots; i++) {
    const int w = snprintf(out + n, cap - n, "%s%s", i ? " " : "", r->slot[i]);
    if (w < 0 || (size_t)w >= cap - n)
      return err_set(KLJIT_ERR_INTERNAL, "record %s: its slot names exceed %zu bytes", name,
                     cap - 1);
    n += (size_t)w;
  }
  return KLJIT_SUCCESS;
}

kljit_status kljit_problem_layout(const kljit_problem *problem, kljit_layout *out) {
  err_clear();
  const char *who = "kljit_problem_layout";
  if (!out) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: out is NULL", who);
  if (out->struct_size < sizeof *out)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: out->struct_size = %zu, below the %zu bytes of kljit_layout (set it to "
                   "sizeof(kljit_layout))", who, out->struct_size, sizeof *out);
  kljit_problem pb;
  kljit_status st = prob_import(problem, who, &pb);
  if (st != KLJIT_SUCCESS) return st;
  recipe rc;
  kiface_layout l;
  kljit_layout r;
  memset(&r, 0, sizeof r);
  st = recipe_of(&pb, NULL, &rc);
  const prob_geometry *g = &rc.geom;
  if (st == KLJIT_SUCCESS) st = layout_of_problem(&pb, &rc.geom.tune, &l);
  if (st == KLJIT_SUCCESS)
    st = slot_names(&g->rows, "part", r.record_slots, sizeof r.record_slots);
  if (st == KLJIT_SUCCESS)
    st = slot_names(&g->rows, "rowstat", r.saved_row_slots, sizeof r.saved_row_slots);
  if (st != KLJIT_SUCCESS) return err_prefix(st, "%s: ", who);
  r.struct_size = out->struct_size;
  r.header_floats = l.hdr, r.saved_row_floats = l.rowstat, r.record_floats = l.part;
  memcpy(out, &r, sizeof r);
  return KLJIT_SUCCESS;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* kiface.c — kernel manifests: parsing, checking against the kargs roles, marshalling. */
#include "kiface.h"

#include <stdio.h>
#include <string.h>

typedef struct role_info {
  const char *name;
  kiface_kind kind;
  size_t offset;
} role_info;

#define KIFACE_KIND_ptr KIFACE_PTR
#define KIFACE_KIND_i32 KIFACE_I32
#define KIFACE_KIND_i64 KIFACE_I64
#define KIFACE_KIND_f32 KIFACE_F32
#define KIFACE_ROLE_(role, kind) {#role, KIFACE_KIND_##kind, offsetof(kargs, role)},
static const role_info ROLES[] = {KIFACE_ROLES(KIFACE_ROLE_)};
#undef KIFACE_ROLE_
enum { N_ROLES = sizeof ROLES / sizeof ROLES[0] };

static const char *const STEPS[KSTEP_COUNT] = {
    [KSTEP_STATS] = "stats",       [KSTEP_FUSED] = "fused",   [KSTEP_FORWARD] = "forward",
    [KSTEP_BACKWARD] = "backward", [KSTEP_CHECK] = "check",   [KSTEP_MERGE] = "merge",
    [KSTEP_SUMS] = "sums",
    [KSTEP_SETUP] = "setup",       [KSTEP_FINISH_LOSS] = "finish_loss",
    [KSTEP_COLSUM] = "colsum",     [KSTEP_CONVERT] = "convert", [KSTEP_SCALE] = "scale"};

static const char *const KINDS[] = {[KIFACE_PTR] = "ptr", [KIFACE_I32] = "i32",
                                    [KIFACE_I64] = "i64", [KIFACE_F32] = "f32"};

const char *kiface_step_name(kiface_step s) {
  return s >= 0 && s < KSTEP_COUNT ? STEPS[s] : "?";
}
int kiface_role_count(void) { return N_ROLES; }
const char *kiface_role_name(int i) { return i >= 0 && i < N_ROLES ? ROLES[i].name : "?"; }
kiface_kind kiface_role_kind(int i) { return i >= 0 && i < N_ROLES ? ROLES[i].kind : 0; }
const char *kiface_kind_name(kiface_kind k) {
  return k >= KIFACE_PTR && k <= KIFACE_F32 ? KINDS[k] : "?";
}

/* The next blank-separated word of *s (within the line), copied into w; 0 at the line's end. */
static int next_word(const char **s, char *w, size_t cap) {
  const char *p = *s;
  while (*p == ' ') p++;
  size_t n = 0;
  while (p[n] && p[n] != ' ' && p[n] != '\n') n++;
  *s = p + n;
  if (n == 0 || n >= cap) return n == 0 ? 0 : -1;
  memcpy(w, p, n);
  w[n] = '\0';
  return 1;
}

static int lookup(const char *const *names, int n, const char *w) {
  for (int i = 0; i < n; i++)
    if (names[i] && strcmp(names[i], w) == 0) return i;
  return -1;
}

static kljit_status parse_arg(const char *module, kiface_kernel *k, const char *w) {
  const int pos = k->nargs;
  const char *colon = strchr(w, ':');
  if (!colon)
    return err_set(KLJIT_ERR_TEMPLATE, "%s: kernel %s, argument %d ('%s'): not role:kind",
                   module, k->name, pos, w);
  char role[64];
  snprintf(role, sizeof role, "%.*s", (int)(colon - w), w);
  int r = -1;
  for (int i = 0; i < N_ROLES && r < 0; i++)
    if (strcmp(ROLES[i].name, role) == 0) r = i;
  if (r < 0)
    return err_set(KLJIT_ERR_TEMPLATE,
                   "%s: kernel %s, argument %d (%s): no such role in kargs (src/kiface.h)",
                   module, k->name, pos, role);
  const int kind = lookup(KINDS, (int)(sizeof KINDS / sizeof KINDS[0]), colon + 1);
  if (kind != (int)ROLES[r].kind)
    return err_set(KLJIT_ERR_TEMPLATE,
                   "%s: kernel %s, argument %d (%s): declared %s, but kargs.%s is %s", module,
                   k->name, pos, role, colon + 1, role, KINDS[ROLES[r].kind]);
  if (k->nargs == KIFACE_MAX_ARGS)
    return err_set(KLJIT_ERR_TEMPLATE, "%s: kernel %s has more than %d arguments", module,
                   k->name, KIFACE_MAX_ARGS);
  k->role[k->nargs++] = r;
  return KLJIT_SUCCESS;
}

kljit_status kiface_parse(const char *text, const char *module, kiface_manifest *out) {
  memset(out, 0, sizeof *out);
  for (const char *line = text ? text : ""; *line;) {
    const char *s = line;
    char w[128];
    if (out->n == KIFACE_MAX_KERNELS)
      return err_set(KLJIT_ERR_TEMPLATE, "%s: more than %d kernels in the manifest", module,
                     KIFACE_MAX_KERNELS);
    kiface_kernel *k = &out->kernel[out->n];
    if (next_word(&s, k->name, sizeof k->name) != 1 || next_word(&s, w, sizeof w) != 1)
      return err_set(KLJIT_ERR_TEMPLATE, "%s: manifest line %d is not '<kernel> <step> ...'",
                     module, out->n + 1);
    const int step = lookup(STEPS, KSTEP_COUNT, w);
    if (step < 0)
      return err_set(KLJIT_ERR_TEMPLATE, "%s: kernel %s has an unknown step '%s'", module,
                     k->name, w);
    if (kiface_find(out, (kiface_step)step))
      return err_set(KLJIT_ERR_TEMPLATE, "%s: two kernels for step %s (%s and %s)", module, w,
                     kiface_find(out, (kiface_step)step)->name, k->name);
    k->step = (kiface_step)step;
    int got;
    while ((got = next_word(&s, w, sizeof w)) == 1) {
      kljit_status st = parse_arg(module, k, w);
      if (st != KLJIT_SUCCESS) return st;
    }
    if (got < 0)
      return err_set(KLJIT_ERR_TEMPLATE, "%s: kernel %s: an argument word is too long", module,
                     k->name);
    out->n++;
    line = *s ? s + 1 : s;
  }
  return KLJIT_SUCCESS;
}

const kiface_kernel *kiface_find(const kiface_manifest *m, kiface_step step) {
  for (int i = 0; i < m->n; i++)
    if (m->kernel[i].step == step) return &m->kernel[i];
  return NULL;
}

/* The manifest line of kernel `name` in text, as (start, length); NULL when absent. */
static const char *find_line(const char *text, const char *name, size_t *len) {
  const size_t n = strlen(name);
  for (const char *l = text; l && *l;) {
    const char *nl = strchr(l, '\n');
    const size_t ll = nl ? (size_t)(nl - l) : strlen(l);
    if (ll > n && strncmp(l, name, n) == 0 && l[n] == ' ') {
      *len = ll;
      return l;
    }
    l = nl ? nl + 1 : NULL;
  }
  return NULL;
}

/* Word i (0: the kernel name) of a line, as "%.*s" pieces. */
static void word_at(const char *l, size_t ll, int i, const char **w, int *wn) {
  const char *p = l, *end = l + ll;
  for (;;) {
    while (p < end && *p == ' ') p++;
    const char *q = p;
    while (q < end && *q != ' ') q++;
    if (i-- == 0 || p == end) {
      *w = p;
      *wn = (int)(q - p);
      return;
    }
    p = q;
  }
}

kljit_status kiface_compare(const char *expected, const char *stored, const char *module) {
  expected = expected ? expected : "";
  stored = stored ? stored : "";
  if (strcmp(expected, stored) == 0) return KLJIT_SUCCESS;
  /* every kernel of either side, named by the first difference on its line */
  for (int side = 0; side < 2; side++) {
    const char *a = side ? stored : expected, *b = side ? expected : stored;
    for (const char *l = a; *l;) {
      const char *nl = strchr(l, '\n');
      const size_t ll = nl ? (size_t)(nl - l) : strlen(l);
      char name[64];
      const char *w;
      int wn;
      word_at(l, ll, 0, &w, &wn);
      snprintf(name, sizeof name, "%.*s", wn, w);
      size_t ol = 0;
      const char *o = find_line(b, name, &ol);
      if (!o)
        return err_set(KLJIT_ERR_CACHE,
                       "%s: refusing the cached module: kernel %s is %s the cached manifest "
                       "but %s this build's template", module, name, side ? "in" : "not in",
                       side ? "not in" : "in");
      for (int i = 1;; i++) {
        const char *x, *y;
        int xn, yn;
        word_at(l, ll, i, &x, &xn);
        word_at(o, ol, i, &y, &yn);
        if (xn == 0 && yn == 0) break;
        if (xn != yn || strncmp(x, y, (size_t)xn) != 0) {
          const char *e = side ? y : x, *c = side ? x : y;
          const int en = side ? yn : xn, cn = side ? xn : yn;
          if (i == 1)
            return err_set(KLJIT_ERR_CACHE,
                           "%s: refusing the cached module: kernel %s is for step '%.*s' in "
                           "the cached manifest, '%.*s' in this build's template", module, name,
                           cn, c, en, e);
          return err_set(KLJIT_ERR_CACHE,
                         "%s: refusing the cached module: kernel %s, argument %d is '%.*s' in "
                         "the cached manifest, '%.*s' in this build's template", module, name,
                         i - 2, cn ? cn : 6, cn ? c : "absent", en ? en : 6, en ? e : "absent");
        }
      }
      l = nl ? nl + 1 : l + ll;
    }
  }
  /* same kernels, same words: the texts differ in order or spacing only */
  return err_set(KLJIT_ERR_CACHE,
                 "%s: refusing the cached module: its manifest lists the kernels differently",
                 module);
}

int kiface_marshal(const kiface_kernel *k, const kargs *a, void *params[KIFACE_MAX_ARGS]) {
  for (int i = 0; i < k->nargs; i++)
    params[i] = (char *)(uintptr_t)a + ROLES[k->role[i]].offset;
  return k->nargs;
}

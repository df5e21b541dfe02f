/* SPDX-License-Identifier: Apache-2.0 */
/* kiface.c — kernel manifests: parsing, checking against the kargs roles and against a cached
 * module's, marshalling, and the records' layout of a plan. */
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
#define KIFACE_KIND_tmap KIFACE_TMAP
#define KIFACE_ROLE_(role, kind) {#role, KIFACE_KIND_##kind, offsetof(kargs, role)},
static const role_info ROLES[] = {KIFACE_ROLES(KIFACE_ROLE_)};
#undef KIFACE_ROLE_
enum { N_ROLES = sizeof ROLES / sizeof ROLES[0] };

static const char *const STEPS[KSTEP_COUNT] = {
    [KSTEP_STATS] = "stats",       [KSTEP_FUSED] = "fused",   [KSTEP_FORWARD] = "forward",
    [KSTEP_BACKWARD] = "backward", [KSTEP_CHECK] = "check",   [KSTEP_MERGE] = "merge",
    [KSTEP_SUMS] = "sums",
    [KSTEP_SETUP] = "setup",       [KSTEP_FINISH_LOSS] = "finish_loss",
    [KSTEP_COLSUM] = "colsum",     [KSTEP_CONVERT] = "convert", [KSTEP_SCALE] = "scale",
    [KSTEP_GEMM] = "gemm"};

static const char *const KINDS[] = {[KIFACE_PTR] = "ptr", [KIFACE_I32] = "i32",
                                    [KIFACE_I64] = "i64", [KIFACE_F32] = "f32",
                                    [KIFACE_TMAP] = "tmap"};

/* The manifest word that starts a record's line (a kernel may not be named so). */
static const char RECORD[] = "record";

const char *kiface_step_name(kiface_step s) {
  return s >= 0 && s < KSTEP_COUNT ? STEPS[s] : "?";
}
const char *kiface_role_name(int i) { return i >= 0 && i < N_ROLES ? ROLES[i].name : "?"; }
kiface_kind kiface_role_kind(int i) { return i >= 0 && i < N_ROLES ? ROLES[i].kind : 0; }
const char *kiface_kind_name(kiface_kind k) {
  return k >= KIFACE_PTR && k <= KIFACE_TMAP ? KINDS[k] : "?";
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

/* A decimal count in [0, max] (no sign, no spaces), else -1. */
static long long count_of(const char *w, long long max) {
  if (!*w) return -1;
  long long v = 0;
  for (const char *p = w; *p; p++) {
    if (*p < '0' || *p > '9' || v > max / 10) return -1;
    v = v * 10 + (*p - '0');
  }
  return v <= max ? v : -1;
}

/* threads=, cluster= or smem= of a kernel's line. */
static kljit_status parse_attr(const char *module, kiface_kernel *k, const char *w) {
  static const struct {
    const char *key;
    size_t off;
    long long max;
  } attrs[] = {{"threads", offsetof(kiface_kernel, threads), 1024},
               {"cluster", offsetof(kiface_kernel, cluster), 16},
               {"smem", offsetof(kiface_kernel, smem), 1 << 20}};
  const char *eq = strchr(w, '=');
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    if (strlen(attrs[i].key) != (size_t)(eq - w) || strncmp(w, attrs[i].key, (size_t)(eq - w)))
      continue;
    const long long v = count_of(eq + 1, attrs[i].max);
    if (v < 0)
      return err_set(KLJIT_ERR_TEMPLATE, "%s: kernel %s: '%s' is not %s=<0..%lld>", module,
                     k->name, w, attrs[i].key, attrs[i].max);
    *(unsigned *)((char *)k + attrs[i].off) = (unsigned)v;
    return KLJIT_SUCCESS;
  }
  return err_set(KLJIT_ERR_TEMPLATE, "%s: kernel %s: unknown launch attribute '%s' (threads, "
                 "cluster or smem)", module, k->name, w);
}

static kljit_status parse_arg(const char *module, kiface_kernel *k, const char *w) {
  const int pos = k->nargs;
  if (strchr(w, '=')) return parse_attr(module, k, w);
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

/* "record <name> <floats> <slot> ..." after its first word (s points past "record"). */
static kljit_status parse_record(const char *module, const char *s, kiface_manifest *out) {
  if (out->nrec == KIFACE_MAX_RECORDS)
    return err_set(KLJIT_ERR_TEMPLATE, "%s: more than %d records in the manifest", module,
                   KIFACE_MAX_RECORDS);
  kiface_record *r = &out->record[out->nrec];
  char w[64];
  if (next_word(&s, r->name, sizeof r->name) != 1 || next_word(&s, w, sizeof w) != 1)
    return err_set(KLJIT_ERR_TEMPLATE, "%s: a record line is not 'record <name> <floats> ...'",
                   module);
  if (kiface_record_find(out, r->name))
    return err_set(KLJIT_ERR_TEMPLATE, "%s: record %s is declared twice", module, r->name);
  const long long floats = count_of(w, 1 << 16);
  if (floats < 1)
    return err_set(KLJIT_ERR_TEMPLATE, "%s: record %s: '%s' is not a count of floats", module,
                   r->name, w);
  r->floats = (int)floats;
  int got;
  while ((got = next_word(&s, w, sizeof w)) == 1) {
    if (r->nslots == KIFACE_MAX_SLOTS || r->nslots == r->floats || strlen(w) >= sizeof r->slot[0])
      return err_set(KLJIT_ERR_TEMPLATE, "%s: record %s: slot '%s' is past its %d floats, the "
                     "%d slots a record may name, or too long", module, r->name, w, r->floats,
                     KIFACE_MAX_SLOTS);
    for (int i = 0; i < r->nslots; i++)
      if (strcmp(r->slot[i], w) == 0)
        return err_set(KLJIT_ERR_TEMPLATE, "%s: record %s names slot %s twice", module,
                       r->name, w);
    memcpy(r->slot[r->nslots++], w, strlen(w) + 1); /* fits: its length was checked above */
  }
  if (got < 0)
    return err_set(KLJIT_ERR_TEMPLATE, "%s: record %s: a slot name is too long", module,
                   r->name);
  out->nrec++;
  return KLJIT_SUCCESS;
}

kljit_status kiface_parse(const char *text, const char *module, kiface_manifest *out) {
  memset(out, 0, sizeof *out);
  for (const char *line = text ? text : ""; *line;) {
    const char *s = line;
    char w[128];
    kljit_status st = KLJIT_SUCCESS;
    const char *after_first = s;
    if (next_word(&after_first, w, sizeof w) == 1 && strcmp(w, RECORD) == 0) {
      st = parse_record(module, after_first, out);
      if (st != KLJIT_SUCCESS) return st;
      const char *nl = strchr(line, '\n');
      line = nl ? nl + 1 : line + strlen(line);
      continue;
    }
    if (out->n == KIFACE_MAX_KERNELS)
      return err_set(KLJIT_ERR_TEMPLATE, "%s: more than %d kernels in the manifest", module,
                     KIFACE_MAX_KERNELS);
    kiface_kernel *k = &out->kernel[out->n];
    if (next_word(&s, k->name, sizeof k->name) != 1 || next_word(&s, w, sizeof w) != 1)
      return err_set(KLJIT_ERR_TEMPLATE, "%s: manifest line %d is not '<kernel> <step> ...'",
                     module, out->n + out->nrec + 1);
    const int step = lookup(STEPS, KSTEP_COUNT, w);
    if (step < 0)
      return err_set(KLJIT_ERR_TEMPLATE, "%s: kernel %s has an unknown step '%s'", module,
                     k->name, w);
    if (kiface_find(out, (kiface_step)step))
      return err_set(KLJIT_ERR_TEMPLATE, "%s: two kernels for step %s (%s and %s)", module, w,
                     kiface_find(out, (kiface_step)step)->name, k->name);
    k->step = (kiface_step)step;
    int got = 0;
    while (st == KLJIT_SUCCESS && (got = next_word(&s, w, sizeof w)) == 1)
      st = parse_arg(module, k, w);
    if (st != KLJIT_SUCCESS) return st;
    if (got < 0)
      return err_set(KLJIT_ERR_TEMPLATE, "%s: kernel %s: an argument word is too long", module,
                     k->name);
    if (k->threads == 0)
      return err_set(KLJIT_ERR_TEMPLATE, "%s: kernel %s declares no block size (threads=)",
                     module, k->name);
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

const kiface_record *kiface_record_find(const kiface_manifest *m, const char *name) {
  for (int i = 0; i < m->nrec; i++)
    if (strcmp(m->record[i].name, name) == 0) return &m->record[i];
  return NULL;
}

/* Word i (0: the first) of a line, as "%.*s" pieces; empty past the line's end. */
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

/* The words that name a line: 1 for a kernel's (its name), 2 for a record's ("record" and the
 * record's name). */
static int key_words(const char *l, size_t ll) {
  const char *w;
  int wn;
  word_at(l, ll, 0, &w, &wn);
  return wn == (int)strlen(RECORD) && strncmp(w, RECORD, (size_t)wn) == 0 ? 2 : 1;
}

/* The line of text named as line `l` is (its key words equal), as (start, length); NULL when
 * absent. */
static const char *find_line(const char *text, const char *l, size_t ll, size_t *len) {
  const int keys = key_words(l, ll);
  for (const char *o = text; o && *o;) {
    const char *nl = strchr(o, '\n');
    const size_t ol = nl ? (size_t)(nl - o) : strlen(o);
    int same = key_words(o, ol) == keys;
    for (int i = 0; i < keys && same; i++) {
      const char *x, *y;
      int xn, yn;
      word_at(l, ll, i, &x, &xn);
      word_at(o, ol, i, &y, &yn);
      same = xn == yn && strncmp(x, y, (size_t)xn) == 0;
    }
    if (same) {
      *len = ol;
      return o;
    }
    o = nl ? nl + 1 : NULL;
  }
  return NULL;
}

/* The refusal for word i of a line that differs: cached word c, this build's e (either may be
 * absent, length 0). `line` is the template's line (or the cached one where the template has
 * none of its words past i). */
static kljit_status differs(const char *module, const char *line, size_t ll, int i,
                            const char *c, int cn, const char *e, int en) {
  const char *n0, *n1;
  int n0n, n1n;
  word_at(line, ll, 0, &n0, &n0n);
  word_at(line, ll, 1, &n1, &n1n);
  const int attr = (cn && memchr(c, '=', (size_t)cn)) || (en && memchr(e, '=', (size_t)en));
  const char *cv = cn ? c : "absent", *ev = en ? e : "absent";
  cn = cn ? cn : 6, en = en ? en : 6;
  const char *pre = "refusing the cached module:";
  if (key_words(line, ll) == 2) {
    if (i == 2)
      return err_set(KLJIT_ERR_CACHE, "%s: %s record %.*s is %.*s floats in the cached "
                     "manifest, %.*s in this build's template", module, pre, n1n, n1, cn, cv,
                     en, ev);
    return err_set(KLJIT_ERR_CACHE, "%s: %s record %.*s, slot %d is '%.*s' in the cached "
                   "manifest, '%.*s' in this build's template", module, pre, n1n, n1, i - 3,
                   cn, cv, en, ev);
  }
  if (i == 1)
    return err_set(KLJIT_ERR_CACHE, "%s: %s kernel %.*s is for step '%.*s' in the cached "
                   "manifest, '%.*s' in this build's template", module, pre, n0n, n0, cn, cv,
                   en, ev);
  /* launch attributes (threads=...) and arguments (role:kind) share the words after the step;
   * an argument is numbered among the arguments only */
  int arg = 0;
  for (int j = 2; j < i; j++) {
    const char *w;
    int wn;
    word_at(line, ll, j, &w, &wn);
    arg += memchr(w, '=', (size_t)wn) == NULL;
  }
  if (attr)
    return err_set(KLJIT_ERR_CACHE, "%s: %s kernel %.*s, launch '%.*s' in the cached manifest, "
                   "'%.*s' in this build's template", module, pre, n0n, n0, cn, cv, en, ev);
  return err_set(KLJIT_ERR_CACHE, "%s: %s kernel %.*s, argument %d is '%.*s' in the cached "
                 "manifest, '%.*s' in this build's template", module, pre, n0n, n0, arg, cn,
                 cv, en, ev);
}

kljit_status kiface_compare(const char *expected, const char *stored, const char *module) {
  expected = expected ? expected : "";
  stored = stored ? stored : "";
  if (strcmp(expected, stored) == 0) return KLJIT_SUCCESS;
  /* every line of either side, named by the first difference on it */
  for (int side = 0; side < 2; side++) {
    const char *a = side ? stored : expected, *b = side ? expected : stored;
    for (const char *l = a; *l;) {
      const char *nl = strchr(l, '\n');
      const size_t ll = nl ? (size_t)(nl - l) : strlen(l);
      const int keys = key_words(l, ll);
      const char *w;
      int wn;
      word_at(l, ll, keys - 1, &w, &wn);
      size_t ol = 0;
      const char *o = find_line(b, l, ll, &ol);
      if (!o)
        return err_set(KLJIT_ERR_CACHE,
                       "%s: refusing the cached module: %s %.*s is %s the cached manifest "
                       "but %s this build's template", module, keys == 2 ? "record" : "kernel",
                       wn, w, side ? "in" : "not in", side ? "not in" : "in");
      for (int i = keys;; i++) {
        const char *x, *y;
        int xn, yn;
        word_at(l, ll, i, &x, &xn);
        word_at(o, ol, i, &y, &yn);
        if (xn == 0 && yn == 0) break;
        if (xn != yn || strncmp(x, y, (size_t)xn) != 0)
          return side ? differs(module, o, ol, i, x, xn, y, yn)
                      : differs(module, l, ll, i, y, yn, x, xn);
      }
      l = nl ? nl + 1 : l + ll;
    }
  }
  /* same lines, same words: the texts differ in order or spacing only */
  return err_set(KLJIT_ERR_CACHE,
                 "%s: refusing the cached module: its manifest lists the kernels differently",
                 module);
}

int kiface_marshal(const kiface_kernel *k, const kargs *a, void *params[KIFACE_MAX_ARGS]) {
  for (int i = 0; i < k->nargs; i++)
    params[i] = (char *)(uintptr_t)a + ROLES[k->role[i]].offset;
  return k->nargs;
}

static int same_record(const kiface_record *a, const kiface_record *b) {
  if (a->floats != b->floats || a->nslots != b->nslots) return 0;
  for (int i = 0; i < a->nslots; i++)
    if (strcmp(a->slot[i], b->slot[i])) return 0;
  return 1;
}

/* A record's slot names, blank-separated, into out (cap: KIFACE_MAX_SLOTS * 17 holds any). */
static const char *slot_list(const kiface_record *r, char *out, size_t cap) {
  size_t n = 0;
  out[0] = '\0';
  for (int i = 0; i < r->nslots && n < cap; i++)
    n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? " " : "", r->slot[i]);
  return out;
}

kljit_status kiface_layout_of(const kiface_manifest *const *m, const char *const *names, int n,
                              kiface_layout *out) {
  static const struct {
    const char *name;
    size_t off;
  } recs[] = {
#define KIFACE_LAYOUT_ENTRY_(rec) {#rec, offsetof(kiface_layout, rec)},
      KIFACE_RECORDS(KIFACE_LAYOUT_ENTRY_)
#undef KIFACE_LAYOUT_ENTRY_
  };
  memset(out, 0, sizeof *out);
  for (size_t r = 0; r < sizeof recs / sizeof recs[0]; r++) {
    const kiface_record *first = NULL;
    int from = -1;
    for (int i = 0; i < n; i++) {
      const kiface_record *rec = kiface_record_find(m[i], recs[r].name);
      if (!rec) continue;
      if (first && !same_record(first, rec)) {
        char a[KIFACE_MAX_SLOTS * 17], b[KIFACE_MAX_SLOTS * 17];
        return err_set(KLJIT_ERR_TEMPLATE, "record %s: module %s declares %d floats {%s}, "
                       "module %s %d floats {%s}; every module must declare it alike",
                       recs[r].name, names[from], first->floats, slot_list(first, a, sizeof a),
                       names[i], rec->floats, slot_list(rec, b, sizeof b));
      }
      if (!first) first = rec, from = i;
    }
    if (!first)
      return err_set(KLJIT_ERR_TEMPLATE, "no module of the plan (%s%s%s) declares record %s, "
                     "which the library sizes buffers by (KIFACE_RECORDS, src/kiface.h)",
                     n > 0 ? names[0] : "", n > 1 ? ", " : "", n > 1 ? names[1] : "",
                     recs[r].name);
    *(int *)((char *)out + recs[r].off) = first->floats;
  }
  return KLJIT_SUCCESS;
}

int64_t kiface_saved_floats(const kiface_layout *l, int64_t rows) {
  return (int64_t)l->hdr + (int64_t)l->rowstat * rows;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* gemm_algo.c — tuned cuBLASLt algorithms: their wisdom text and their place in a tuning. */
#include "gemm_algo.h"

#include "cublaslt.h"
#include "gemm.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const KINDS[] = {"logits", "dx", "dw"}; /* by gemm_kind */

/* The flags of a variant's text, in their order, and what each sets (gemm_algo.h). */
static const struct {
  char letter;
  int tweak; /* a KSPEC_GEMM_* bit; 0: the schedule (p) or the epilogue (s) */
} FLAGS[] = {{'p', 0}, {'s', 0}, {'w', KSPEC_GEMM_ARRIVE_WARP}, {'c', KSPEC_GEMM_STREAM_C},
             {'a', KSPEC_GEMM_L2_KEEP_A}, {'b', KSPEC_GEMM_L2_KEEP_B}, {'r', KSPEC_GEMM_PROMOTE},
             {'e', 0}, {'d', KSPEC_GEMM_DYNAMIC}, {'t', KSPEC_GEMM_MASS_WARPS}};
enum { NFLAGS = sizeof FLAGS / sizeof FLAGS[0] };

static int has_flag(const prob_gemm_choice *c, int i) {
  return FLAGS[i].letter == 'p'   ? c->schedule == 'p'
         : FLAGS[i].letter == 's' ? c->epilogue == 's'
         : FLAGS[i].letter == 'e' ? c->e16 != 0
                                  : (c->tweaks & FLAGS[i].tweak) != 0;
}

void gemm_algo_jit_text(const prob_gemm_choice *c, char out[GEMM_ALGO_JIT_TEXT_MAX]) {
  int at = snprintf(out, GEMM_ALGO_JIT_TEXT_MAX, "%d.%d.%d.%c.%d", c->bn, c->consumers,
                    c->stages, c->raster, c->cluster);
  int any = 0;
  for (int i = 0; i < NFLAGS && at < GEMM_ALGO_JIT_TEXT_MAX - 2; i++)
    if (has_flag(c, i)) {
      if (!any) out[at++] = '.', any = 1;
      out[at++] = FLAGS[i].letter, out[at] = 0;
    }
}

int gemm_algo_jit_parse(const char *s, prob_gemm_choice *c) {
  int bn = 0, cons = 0, stages = 0, cl = 0, used = 0;
  char r = 0;
  if (sscanf(s, "%d.%d.%d.%c.%d%n", &bn, &cons, &stages, &r, &cl, &used) != 5) return -1;
  const char *f = s + used;
  int pp = 0, staged = 0, tweaks = 0, e16 = 0;
  if (*f == '.') { /* flags, in FLAGS' order, at least one; a and b exclusive */
    f++;
    const char *start = f;
    for (int i = 0; i < NFLAGS; i++)
      if (*f == FLAGS[i].letter) {
        pp |= FLAGS[i].letter == 'p', staged |= FLAGS[i].letter == 's';
        e16 |= FLAGS[i].letter == 'e';
        tweaks |= FLAGS[i].tweak, f++;
      }
    if (f == start || (tweaks & KSPEC_GEMM_L2_KEEP_A && tweaks & KSPEC_GEMM_L2_KEEP_B)) return -1;
  }
  if (*f) return -1;
  /* the template validates the rest when it renders */
  if (bn < 8 || bn > 256 || cons < 1 || cons > 3 || stages < 2 || stages > 8) return -1;
  if ((r != 'm' && r != 'n' && r != 'g') || (cl != 1 && cl != 2)) return -1;
  c->jit = 1, c->bn = bn, c->consumers = cons, c->stages = stages, c->raster = r, c->cluster = cl;
  c->schedule = pp ? 'p' : 'c', c->epilogue = staged ? 's' : 'd', c->tweaks = tweaks;
  c->e16 = e16;
  c->used = 1;
  return 0;
}

void gemm_algo_text(const prob_gemm_choice *c, char out[GEMM_ALGO_TEXT_MAX]) {
  const char *kind = c->kind >= 0 && c->kind < 3 ? KINDS[c->kind] : "?";
  int at = snprintf(out, GEMM_ALGO_TEXT_MAX, "%s:%lld:%s:", kind, (long long)c->n,
                    c->beta_zero ? "b0" : "b1");
  if (c->lt_version)
    at += snprintf(out + at, (size_t)(GEMM_ALGO_TEXT_MAX - at), "lt%" PRIu64 ":", c->lt_version);
  if (c->jit) {
    char v[GEMM_ALGO_JIT_TEXT_MAX];
    gemm_algo_jit_text(c, v);
    snprintf(out + at, (size_t)(GEMM_ALGO_TEXT_MAX - at), "jit:%s", v);
    return;
  }
  for (int i = 0; i < PROB_GEMM_ALGO_WORDS && at > 0 && at < GEMM_ALGO_TEXT_MAX; i++)
    at += snprintf(out + at, (size_t)(GEMM_ALGO_TEXT_MAX - at), "%016" PRIx64, c->algo[i]);
}

static int hex_word(const char *s, uint64_t *out) {
  uint64_t v = 0;
  for (int i = 0; i < 16; i++) {
    const char ch = s[i];
    const int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v << 4 | (uint64_t)d;
  }
  *out = v;
  return 0;
}

/* A generated choice of c->kind from its variant text; E16 (flag e) is the logits GEMM's. */
static int jit_of_kind(const char *s, prob_gemm_choice *c) {
  if (gemm_algo_jit_parse(s, c)) return -1;
  return c->e16 && c->kind != GEMM_LOGITS ? -1 : 0;
}

int gemm_algo_parse(const char *text, prob_gemm_choice *c) {
  memset(c, 0, sizeof *c);
  const char *colon = strchr(text, ':');
  if (!colon) return -1;
  c->kind = -1;
  for (int k = 0; k < 3; k++)
    if ((size_t)(colon - text) == strlen(KINDS[k]) && !strncmp(text, KINDS[k], strlen(KINDS[k])))
      c->kind = k;
  if (c->kind < 0) return -1;
  char *end;
  const char *s = colon + 1;
  if (*s < '1' || *s > '9') return -1;
  const long long n = strtoll(s, &end, 10);
  if (*end != ':' || n < 1 || n > INT32_MAX) return -1;
  c->n = n, s = end + 1;
  if (strncmp(s, "b0:", 3) && strncmp(s, "b1:", 3)) return -1;
  c->beta_zero = s[1] == '0', s += 3;
  if (!strncmp(s, "jit:", 4)) return jit_of_kind(s + 4, c); /* unversioned */
  if (strncmp(s, "lt", 2) || s[2] < '1' || s[2] > '9') return -1;
  c->lt_version = strtoull(s + 2, &end, 10);
  if (*end != ':') return -1;
  s = end + 1;
  if (!strncmp(s, "jit:", 4)) return jit_of_kind(s + 4, c);
  if (strlen(s) != 16 * PROB_GEMM_ALGO_WORDS) return -1;
  for (int i = 0; i < PROB_GEMM_ALGO_WORDS; i++)
    if (hex_word(s + 16 * i, &c->algo[i])) return -1;
  c->used = 1;
  return 0;
}

int gemm_algo_add(prob_tuning *t, const prob_gemm_choice *c) {
  prob_gemm_choice *free_slot = NULL;
  for (int i = 0; i < PROB_GEMM_CHOICES; i++) {
    prob_gemm_choice *s = &t->gemm[i];
    if (s->used && s->kind == c->kind && s->n == c->n && s->beta_zero == c->beta_zero) {
      *s = *c;
      return 0;
    }
    if (!s->used && !free_slot) free_slot = s;
  }
  if (!free_slot) return -1;
  *free_slot = *c;
  return 0;
}

uint64_t gemm_algo_lt_version(void) {
  const cublaslt_table *lt;
  if (cublaslt_get(&lt) != KLJIT_SUCCESS) {
    err_clear();
    return 0;
  }
  return (uint64_t)lt->cublasLtGetVersion();
}

int gemm_algo_find(const prob_tuning *t, int kind, int64_t n, cublasLtMatmulAlgo_t *algo,
                   int *stale) {
  const uint64_t running = gemm_algo_lt_version();
  const prob_gemm_choice *found = NULL;
  *stale = 0;
  for (int i = 0; i < PROB_GEMM_CHOICES; i++) {
    const prob_gemm_choice *c = &t->gemm[i];
    if (!c->used || c->jit || c->kind != kind || c->n != n) continue; /* jit: jgemm_pick */
    if (c->lt_version != running) {
      ++*stale;
      continue;
    }
    /* dW's accumulating choice (beta 1) serves the most chunks: it wins over the first's */
    if (!found || !c->beta_zero) found = c;
  }
  if (found) memcpy(algo->data, found->algo, sizeof algo->data);
  return found != NULL;
}

const prob_gemm_choice *gemm_algo_jit(const prob_tuning *t, int kind, int beta_zero) {
  for (int i = 0; i < PROB_GEMM_CHOICES; i++) {
    const prob_gemm_choice *c = &t->gemm[i];
    if (c->used && c->jit && c->kind == kind && (kind != GEMM_DW || c->beta_zero == beta_zero))
      return c;
  }
  return NULL;
}

int gemm_algo_has_lt(const prob_tuning *t, int kind) {
  for (int i = 0; i < PROB_GEMM_CHOICES; i++)
    if (t->gemm[i].used && !t->gemm[i].jit && t->gemm[i].kind == kind) return 1;
  return 0;
}

int gemm_algo_drop_stale(prob_tuning *t) {
  int dropped = 0;
  /* the version asked once, and only of a versioned choice: loading cuBLASLt costs a process
   * half a second (cublaslt.h), which a tuning without one (precompile, wisdom files) never
   * pays */
  uint64_t running = 0;
  for (int i = 0; i < PROB_GEMM_CHOICES; i++) {
    prob_gemm_choice *c = &t->gemm[i];
    if (!c->used || !c->jit || !c->lt_version) continue;
    if (!running) running = gemm_algo_lt_version();
    if (running && c->lt_version != running) memset(c, 0, sizeof *c), dropped++;
  }
  return dropped;
}

/* ---- the options' backends ---------------------------------------------------------------- */

/* One item "<kind>:<backend>" of options->gemm_choice (its text up to `end`) into out. */
static int select_item(const char *s, const char *end, gemm_select out[3]) {
  const char *colon = memchr(s, ':', (size_t)(end - s));
  if (!colon) return -1;
  const size_t kl = (size_t)(colon - s);
  int first = -1, last = -1;
  for (int k = 0; k < 3; k++)
    if (kl == strlen(KINDS[k]) && !strncmp(s, KINDS[k], kl)) first = last = k;
  if (kl == 3 && !strncmp(s, "all", 3)) first = 0, last = 2;
  if (first < 0) return -1;
  char b[64];
  const size_t bl = (size_t)(end - colon - 1);
  if (bl >= sizeof b) return -1;
  memcpy(b, colon + 1, bl), b[bl] = 0;
  gemm_select g;
  memset(&g, 0, sizeof g);
  g.lt_index = -1;
  /* the logits GEMM's statistics epilogue (".stats"), or that and its fp16 scores (E16)
   * (".e16"): a jit backend of the logits item only */
  for (int e = 0; e < 2; e++) {
    const char *suffix = e ? ".e16" : ".stats";
    const size_t sl = strlen(suffix);
    if (bl > sl && !strcmp(b + bl - sl, suffix)) {
      if (first != GEMM_LOGITS || last != GEMM_LOGITS) return -1;
      b[bl - sl] = 0, g.stats = 1, g.e16 = e;
      if (strcmp(b, "jit") && strncmp(b, "jit.", 4)) return -1;
      break;
    }
  }
  if (!strcmp(b, "default")) {
    g.backend = GEMM_BACKEND_DEFAULT;
  } else if (!strcmp(b, "cublas")) {
    g.backend = GEMM_BACKEND_CUBLAS;
  } else if (!strncmp(b, "cublas.", 7)) {
    char *e;
    const long k = strtol(b + 7, &e, 10);
    if (e == b + 7 || *e || k < 0 || k > 15) return -1; /* gemm_candidates lists 16 at most */
    g.backend = GEMM_BACKEND_CUBLAS, g.lt_index = (int)k;
  } else if (!strcmp(b, "jit")) {
    g.backend = GEMM_BACKEND_JIT;
  } else if (!strncmp(b, "jit.", 4)) {
    if (gemm_algo_jit_parse(b + 4, &g.choice)) return -1;
    /* E16 (flag e) is the logits GEMM's */
    if (g.choice.e16 && (first != GEMM_LOGITS || last != GEMM_LOGITS)) return -1;
    g.backend = GEMM_BACKEND_JIT, g.variant = 1;
  } else {
    return -1;
  }
  for (int k = first; k <= last; k++) out[k] = g;
  return 0;
}

kljit_status gemm_algo_select(const kljit_context_options *o, gemm_select out[3]) {
  if (o->gemm != KLJIT_GEMM_DEFAULT && o->gemm != KLJIT_GEMM_JIT && o->gemm != KLJIT_GEMM_CUBLAS) {
    /* -1 is what env.c makes of a bad KLJIT_GEMM (kljit_context_create names its text) */
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "options->gemm = %d: must be KLJIT_GEMM_DEFAULT, KLJIT_GEMM_JIT (jit), "
                   "KLJIT_GEMM_CUBLAS (cublas), or KLJIT_GEMM a list of "
                   "<logits|dx|dw|all>:<backend> items", (int)o->gemm);
  }
  for (int k = 0; k < 3; k++) {
    memset(&out[k], 0, sizeof out[k]);
    out[k].lt_index = -1;
    out[k].backend = o->gemm == KLJIT_GEMM_JIT      ? GEMM_BACKEND_JIT
                     : o->gemm == KLJIT_GEMM_CUBLAS ? GEMM_BACKEND_CUBLAS
                                                    : GEMM_BACKEND_DEFAULT;
  }
  const char *s = o->gemm_choice;
  while (s && *s) { /* an empty item (",," or a trailing comma) is refused too */
    const char *end = strchr(s, ',');
    if (!end) end = s + strlen(s);
    if (select_item(s, end, out) || (*end && !end[1]))
      return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                     "options->gemm_choice (KLJIT_GEMM) = \"%s\": cannot read \"%.*s\": items "
                     "are <logits|dx|dw|all>:<default|cublas|cublas.<k>|jit|jit.<BN>.<CONSUMERS>."
                     "<STAGES>.<m|n|g>.<CLUSTER>[.<flags: p, s, w, c, a|b, e, in order>]>, "
                     "comma-separated; logits' jit backends may end in .stats or .e16",
                     o->gemm_choice, (int)(end - s), s);
    s = *end ? end + 1 : end;
  }
  return KLJIT_SUCCESS;
}

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

void gemm_algo_text(const prob_gemm_choice *c, char out[GEMM_ALGO_TEXT_MAX]) {
  const char *kind = c->kind >= 0 && c->kind < 3 ? KINDS[c->kind] : "?";
  int at = snprintf(out, GEMM_ALGO_TEXT_MAX, "%s:%lld:%s:", kind, (long long)c->n,
                    c->beta_zero ? "b0" : "b1");
  if (c->jit) {
    snprintf(out + at, (size_t)(GEMM_ALGO_TEXT_MAX - at), "jit:%d.%d.%d.%c.%d%s", c->bn,
             c->consumers, c->stages, c->raster, c->cluster, c->schedule == 'p' ? ".p" : "");
    return;
  }
  at += snprintf(out + at, (size_t)(GEMM_ALGO_TEXT_MAX - at), "lt%" PRIu64 ":", c->lt_version);
  for (int i = 0; i < PROB_GEMM_ALGO_WORDS && at > 0 && at < GEMM_ALGO_TEXT_MAX; i++)
    at += snprintf(out + at, (size_t)(GEMM_ALGO_TEXT_MAX - at), "%016" PRIx64, c->algo[i]);
}

/* "jit:BN.CONSUMERS.STAGES.RASTER.CLUSTER[.p]" (.p: the pingpong schedule; the template
 * validates the rest when it renders). */
static int parse_jit(const char *s, prob_gemm_choice *c) {
  int bn = 0, cons = 0, stages = 0, cl = 0, used = 0;
  char r = 0;
  if (sscanf(s, "jit:%d.%d.%d.%c.%d%n", &bn, &cons, &stages, &r, &cl, &used) != 5) return -1;
  const int pp = !strcmp(s + used, ".p");
  if (s[used] && !pp) return -1;
  if (bn < 8 || bn > 256 || cons < 1 || cons > 2 || stages < 2 || stages > 8) return -1;
  if ((r != 'm' && r != 'n' && r != 'g') || (cl != 1 && cl != 2)) return -1;
  c->jit = 1, c->bn = bn, c->consumers = cons, c->stages = stages, c->raster = r, c->cluster = cl;
  c->schedule = pp ? 'p' : 'c', c->used = 1;
  return 0;
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
  if (!strncmp(s, "jit:", 4)) return c->kind == 0 ? parse_jit(s, c) : -1; /* logits only */
  if (strncmp(s, "lt", 2) || s[2] < '1' || s[2] > '9') return -1;
  c->lt_version = strtoull(s + 2, &end, 10);
  if (*end != ':') return -1;
  s = end + 1;
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

int gemm_algo_find(const prob_tuning *t, int kind, int64_t n, cublasLtMatmulAlgo_t *algo,
                   int *stale) {
  const uint64_t running = (uint64_t)cublaslt_loaded()->cublasLtGetVersion();
  const prob_gemm_choice *found = NULL;
  *stale = 0;
  for (int i = 0; i < PROB_GEMM_CHOICES; i++) {
    const prob_gemm_choice *c = &t->gemm[i];
    /* jit: a generated variant (the recipe's engine for the slot) */
    if (!c->used || c->jit || c->kind != kind || c->n != n) continue;
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

const prob_gemm_choice *gemm_algo_generated(const prob_tuning *t, int kind) {
  for (int i = 0; i < PROB_GEMM_CHOICES; i++)
    if (t->gemm[i].used && t->gemm[i].jit && t->gemm[i].kind == kind) return &t->gemm[i];
  return NULL;
}

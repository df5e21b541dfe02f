/* SPDX-License-Identifier: Apache-2.0 */
/* tune.c — choosing a tuning without a GPU: the candidate configurations a tuner tries, and the
 * choice between wisdom and the heuristics by rigor. The timing is in tune_measure.c, the entry
 * points that put them together in planner.c.
 */
#include "tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_algo.h"
#include "recipe.h"

void tune_describe(const prob_tuning *t, char *out, size_t cap) {
  if (t->cluster)
    snprintf(out, cap, "cluster=%d threads=%d nv=%d chunk_rows=%lld", t->cluster, t->threads, t->nv,
             (long long)t->chunk_rows);
  else
    snprintf(out, cap, "threads=%d split=%d chunk_rows=%lld", t->threads, t->split,
             (long long)t->chunk_rows);
}

/* ---- candidates -------------------------------------------------------------------------- */

/* The generated variants tried for each GEMM (gemm_algo_jit_text), the kind's default first:
 * the tile shapes, schedules, clusters and epilogues measured closest to cuBLASLt in
 * bench/RESULTS.md (issue 16), a handful per GEMM so that a tune stays within its budget. The
 * logits GEMM's E16 (flag e: the chunk as fp16 scores, docs/architecture.md) is tried too,
 * where the problem is in its scope (tune_takes_e16): it passed its GPU suite
 * (gpu.fused_e16.*, bench/RESULTS.md runs 71-74) and was 0.96-1.05x the default's call by shape
 * there, which is what a per-shape choice is for; on E16's own tile (RECIPE_E16_TILE) and on
 * the 128 x 128 pingpong tile in clusters of 2 (W's tiles multicast; the H100's E16 over a
 * large W before run 113). */
enum { JIT_TRY_MAX = 6 };
static const char *const JIT_TRIES[3][JIT_TRY_MAX] = {
    {"256.2.4.m.1", "256.2.4.g.1", "128.2.6.g.1.p", "256.2.4.g.1.s", RECIPE_E16_TILE "e",
     "128.2.6.g.2.pe"},                                                              /* logits */
    {"256.2.4.g.1", "256.2.4.m.1", "128.2.6.g.1.p", "256.2.4.g.2", NULL, NULL},      /* dX */
    {"256.2.4.g.1.s", "256.2.4.g.1", "128.2.6.g.1.ps", "256.2.4.g.2.s", NULL, NULL}, /* dW */
};

const char *tune_jit_try(int kind, int i) {
  return kind >= 0 && kind < 3 && i >= 0 && i < JIT_TRY_MAX ? JIT_TRIES[kind][i] : NULL;
}

int tune_takes_e16(const kljit_problem *pb, const kljit_context_options *opt, int arch,
                   const prob_tuning *t) {
  recipe r;
  return recipe_make(pb, t, opt, arch, 0, &r) == KLJIT_SUCCESS && r.geom.e16;
}

static int native_16bit_logits(const kljit_problem *pb) {
  return (pb->flags & KLJIT_FLAG_NATIVE_LOGITS) && pb->input_dtype != KLJIT_FP32;
}

/* Does a two-pass split give each block enough work? A block whose threads mostly idle is never
 * the fastest: not worth a compile. (Whether the template accepts the split at all is its own
 * rule: usable.) */
static int split_works(const kljit_problem *pb, int split, int threads) {
  const int64_t vec = native_16bit_logits(pb) ? 8 : 4;
  const int64_t seg = (pb->vocab + split * vec - 1) / (split * vec) * vec;
  return seg * 2 >= threads * vec;
}

/* A candidate is what its plan would build as given (not replaced: a shard's cluster tuning is
 * not a candidate) and what the templates accept. */
static int usable(const kljit_problem *pb, const kljit_context_options *opt, int arch,
                  const prob_tuning *t) {
  recipe r;
  const int ok =
      recipe_make(pb, t, opt, arch, 0, &r) == KLJIT_SUCCESS && !r.replaced && !recipe_check(&r);
  if (!ok) err_clear();
  return ok;
}

static int same(const prob_tuning *a, const prob_tuning *b) {
  return a->chunk_rows == b->chunk_rows && a->threads == b->threads && a->split == b->split &&
         a->cluster == b->cluster && a->nv == b->nv;
}

/* What a stage's candidates are checked against: the problem, the context's options, the arch. */
typedef struct cand_ctx {
  const kljit_problem *pb;
  const kljit_context_options *opt;
  int arch;
} cand_ctx;

/* Appends t unless present or unusable. */
static void add(const cand_ctx *cc, const prob_tuning *t, prob_tuning *out, int *n, int cap) {
  if (*n >= cap || !usable(cc->pb, cc->opt, cc->arch, t)) return;
  for (int i = 0; i < *n; i++)
    if (same(&out[i], t)) return;
  out[(*n)++] = *t;
}

/* The two-pass split the heuristic would take (~16K columns per block). */
static int default_split(const kljit_problem *pb, const prob_tuning *base) {
  if (!base->cluster) return base->split;
  const int64_t s = (pb->vocab + 16383) / 16384;
  return (int)(s < 1 ? 1 : s > 16 ? 16 : s);
}

static void shapes(const cand_ctx *cc, kljit_plan_rigor rigor, const prob_tuning *base,
                   prob_tuning *out, int *n, int cap) {
  const kljit_problem *pb = cc->pb;
  add(cc, base, out, n, cap);
  const int exhaustive = rigor == KLJIT_PLAN_EXHAUSTIVE;
  const int most = pb->teacher == KLJIT_TEACHER_SPARSE_TOPK ? 64 : exhaustive ? 32 : 16;
  const int s0 = default_split(pb, base);
  static const int few_threads[] = {256, 512}, all_threads[] = {128, 256, 512, 1024};
  const int *threads = exhaustive ? all_threads : few_threads;
  const int n_threads = exhaustive ? 4 : 2;
  int splits[16], n_splits = 0;
  if (exhaustive) {
    for (int s = 1; s <= most; s *= 2) splits[n_splits++] = s;
    splits[n_splits++] = s0;
  } else {
    splits[n_splits++] = s0, splits[n_splits++] = s0 / 2, splits[n_splits++] = s0 * 2;
  }
  for (int ti = 0; ti < n_threads; ti++)
    for (int si = 0; si < n_splits; si++) {
      if (splits[si] < 1 || splits[si] > most || !split_works(pb, splits[si], threads[ti]))
        continue;
      prob_tuning t = *base;
      t.cluster = 0, t.nv = 1, t.threads = threads[ti], t.split = splits[si];
      add(cc, &t, out, n, cap);
    }
}

static void chunks(const cand_ctx *cc, kljit_plan_rigor rigor, const prob_tuning *base,
                   int64_t rows, prob_tuning *out, int *n, int cap) {
  const int64_t r0 = base->chunk_rows, most = wisdom_bucket(rows);
  int64_t sizes[16];
  int k = 0;
  if (rigor == KLJIT_PLAN_EXHAUSTIVE) {
    for (int64_t r = 512; r <= 32768; r *= 2) sizes[k++] = r;
    sizes[k++] = r0 / 2, sizes[k++] = 2 * r0;
  } else {
    sizes[k++] = r0 / 2, sizes[k++] = 2 * r0, sizes[k++] = 4 * r0;
  }
  for (int i = 0; i < k; i++) {
    const int64_t r = sizes[i] / 256 * 256;
    if (r < 256 || r == r0 || (r > most && r0 >= most)) continue;
    prob_tuning t = *base;
    t.chunk_rows = r > most ? most : r; /* a chunk past the token count is the token count */
    if (t.chunk_rows != r0) add(cc, &t, out, n, cap);
  }
}

/* The sm_90 one-pass variant (prob_cluster_tuning, the heuristics' own shape), and with
 * EXHAUSTIVE also at half the chunk. */
static void clusters(const cand_ctx *cc, kljit_plan_rigor rigor, const prob_tuning *base,
                     prob_tuning *out, int *n, int cap) {
  prob_tuning t = *base;
  if (!prob_cluster_tuning(cc->pb, cc->arch, &t)) return;
  add(cc, &t, out, n, cap);
  if (rigor == KLJIT_PLAN_EXHAUSTIVE && base->chunk_rows >= 512) {
    prob_tuning half = t;
    half.chunk_rows = base->chunk_rows / 2 / 256 * 256;
    add(cc, &half, out, n, cap);
  }
}

int tune_candidates(const kljit_problem *pb, const kljit_context_options *opt, int arch,
                    kljit_plan_rigor rigor, tune_stage stage, const prob_tuning *base, int64_t rows,
                    prob_tuning *out, int cap) {
  const cand_ctx cc = {pb, opt, arch};
  int n = 0;
  if (stage == TUNE_SHAPES) shapes(&cc, rigor, base, out, &n, cap);
  if (stage == TUNE_CHUNKS) chunks(&cc, rigor, base, rows, out, &n, cap);
  if (stage == TUNE_CLUSTER) clusters(&cc, rigor, base, out, &n, cap);
  return n;
}

/* ---- choosing ---------------------------------------------------------------------------- */

void tune_chunk_override(const kljit_context_options *opt, prob_tuning *t) {
  if (opt->chunk_rows > 0) t->chunk_rows = opt->chunk_rows;
}

kljit_status tune_choose(const kljit_problem *pb, kljit_plan_rigor rigor, const char *gpu, int arch,
                         int sms, const kljit_context_options *opt, prob_tuning *out,
                         tune_source *src, wisdom_entry *used) {
  char key[WISDOM_PROBLEM_MAX];
  wisdom_problem_key(pb, key);
  const int64_t bucket = wisdom_bucket(opt->tune_rows);
  const int measured = rigor == KLJIT_PLAN_MEASURE || rigor == KLJIT_PLAN_EXHAUSTIVE;
  /* MEASURE and EXHAUSTIVE reuse only what was measured as hard for the bucket they would tune
   * (FFTW: higher rigor serves lower); ESTIMATE and WISDOM_ONLY take the nearest bucket. */
  int found = wisdom_lookup(gpu, arch, sms, key, bucket,
                            measured ? WISDOM_EXACT_BUCKET : WISDOM_NEAREST_BUCKET,
                            measured ? rigor : KLJIT_PLAN_ESTIMATE, used);
  /* the key does not name the divergence: a cluster choice, tuned for the forward KL, does not
   * apply to the reverse KL or the JSD, which have two-pass rows only */
  if (found && used->tune.cluster && prob_divergence_rows(pb)) found = 0;
  if (found) {
    *out = used->tune;
    *src = TUNE_FROM_WISDOM;
    /* a generated GEMM chosen for beating another cuBLASLt version was not measured against
     * this one: its GEMM takes the heuristic's backend (planning asks no library itself) */
    if (gemm_algo_drop_stale(out)) util_log("wisdom: a generated GEMM choice tuned against "
                                             "another cuBLASLt version is not taken");
    tune_chunk_override(opt, out);
    return KLJIT_SUCCESS;
  }
  if (rigor == KLJIT_PLAN_WISDOM_ONLY)
    return err_set(KLJIT_ERR_NO_WISDOM,
                   "KLJIT_PLAN_WISDOM_ONLY: no wisdom for gpu=\"%s\" arch=sm_%d sms=%d kljit=%s "
                   "%s (any token bucket); tune it (kljit tune, or KLJIT_PLAN_MEASURE) or import "
                   "a wisdom file (kljit_wisdom_import_file, KLJIT_WISDOM)",
                   gpu, arch, sms, KLJIT_VERSION_STRING, key);
  *out = prob_estimate(pb, arch, opt);
  *src = measured ? TUNE_NEEDED : TUNE_FROM_HEURISTIC;
  return KLJIT_SUCCESS;
}

void tune_entry_key(const kljit_context *ctx, const kljit_problem *pb, int64_t rows,
                    wisdom_entry *e) {
  memset(e, 0, sizeof *e);
  snprintf(e->gpu, sizeof e->gpu, "%s", ctx->gpu_name);
  for (char *c = e->gpu; *c; c++) /* as wisdom_add stores it */
    if (*c == '"' || (unsigned char)*c < 0x20 || *c == 0x7f) *c = '_';
  e->arch = ctx->arch, e->sms = ctx->sm_count;
  wisdom_problem_key(pb, e->problem);
  wisdom_problem_extra(pb, e->extra);
  e->bucket = wisdom_bucket(rows);
}


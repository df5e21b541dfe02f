/* SPDX-License-Identifier: Apache-2.0 */
/* problem.c — problem validation, heuristic tuning, the chunk of a call, workspace layout. */
#include "problem.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "kiface.h"

enum {
  MAX_VOCAB = KLJIT_MAX_VOCAB,
  MAX_HIDDEN = KLJIT_MAX_HIDDEN,
  MAX_TOPK = KLJIT_MAX_TOPK,
  MAX_SHARDS = 1024
};

int64_t prob_vocab_total(const kljit_problem *pb) {
  return pb->vocab_total ? pb->vocab_total : pb->vocab;
}

int prob_sharded(const kljit_problem *pb) {
  return pb->shards > 1 || (pb->vocab_total != 0 && pb->vocab_total != pb->vocab);
}

static int is_float(kljit_dtype dt) {
  return dt == KLJIT_FP32 || dt == KLJIT_FP16 || dt == KLJIT_BF16;
}

int prob_temperature_ok(double t) {
  return t >= KLJIT_TEMPERATURE_MIN && t <= KLJIT_TEMPERATURE_MAX; /* false for NaN */
}

#define BAD(...) err_set(KLJIT_ERR_INVALID_ARGUMENT, __VA_ARGS__)
#define UNSUP(...) err_set(KLJIT_ERR_UNSUPPORTED, __VA_ARGS__)

int64_t prob_teacher_vocab(const kljit_problem *pb) {
  return pb->teacher_vocab ? pb->teacher_vocab : pb->vocab;
}

int64_t prob_teacher_ld(const kljit_problem *pb) {
  return pb->teacher_ld ? pb->teacher_ld : prob_teacher_vocab(pb);
}

int prob_is_forward_kl(const kljit_problem *pb) {
  return pb->divergence == KLJIT_DIVERGENCE_FORWARD_KL ||
         (pb->divergence == KLJIT_DIVERGENCE_JSD && pb->beta == 0.0) ||
         (pb->divergence == KLJIT_DIVERGENCE_SKEW_FORWARD_KL && pb->skew_alpha == 0.0);
}

const char *prob_divergence_rows(const kljit_problem *pb) {
  if (prob_is_forward_kl(pb)) return NULL;
  switch (pb->divergence) {
  case KLJIT_DIVERGENCE_JSD: return pb->beta == 1.0 ? "reverse" : "jsd";
  case KLJIT_DIVERGENCE_TVD: return "tvd";
  case KLJIT_DIVERGENCE_SKEW_FORWARD_KL: return "skew_forward";
  case KLJIT_DIVERGENCE_SKEW_REVERSE_KL: return pb->skew_alpha == 0.0 ? "reverse" : "skew_reverse";
  default: return "reverse";
  }
}

/* A divergence in messages. */
static const char *divergence_text(kljit_divergence d) {
  switch (d) {
  case KLJIT_DIVERGENCE_REVERSE_KL: return "reverse KL";
  case KLJIT_DIVERGENCE_JSD: return "JSD";
  case KLJIT_DIVERGENCE_TVD: return "TVD";
  case KLJIT_DIVERGENCE_SKEW_FORWARD_KL: return "skew forward KL";
  case KLJIT_DIVERGENCE_SKEW_REVERSE_KL: return "skew reverse KL";
  default: return "forward KL";
  }
}

static int is_skew(kljit_divergence d) {
  return d == KLJIT_DIVERGENCE_SKEW_FORWARD_KL || d == KLJIT_DIVERGENCE_SKEW_REVERSE_KL;
}

static int teacher_has_logits(kljit_teacher_form t) {
  return t == KLJIT_TEACHER_DENSE_LOGITS || t == KLJIT_TEACHER_DENSE_HIDDEN;
}

/* 0 (off) or a cap in [MIN_SOFTCAP, MAX_SOFTCAP]: the kernels compute c tanh(z * (1/c)) with
 * both as fp32 literals, which needs c well inside fp32's range (1/c overflows below ~2.9e-39).
 * The weights are fp32 literals too. The CLI states the same ranges. */
static const double MIN_SOFTCAP = 1e-6, MAX_SOFTCAP = 1e6, MAX_WEIGHT = 1e6;
static int softcap_ok(double c) { return c == 0.0 || (c >= MIN_SOFTCAP && c <= MAX_SOFTCAP); }

static int weight_ok(double w) { return w >= 0.0 && w <= MAX_WEIGHT; }

/* The z-loss's lambda: PaLM's is 1e-4; a bound keeps 2 lambda lse(z') a normal fp32 number. */
static const double MAX_Z_LOSS = 1e6;

/* The loss-family fields (divergence, weights, softcaps, padded and online teachers): each
 * value in range, and the combinations whose math is defined. */
static kljit_status validate_family(const kljit_problem *pb, const char *who) {
  if (pb->divergence < KLJIT_DIVERGENCE_FORWARD_KL ||
      pb->divergence > KLJIT_DIVERGENCE_SKEW_REVERSE_KL)
    return BAD("%s: divergence = %d is not a kljit_divergence", who, (int)pb->divergence);
  if (pb->divergence == KLJIT_DIVERGENCE_JSD && !(pb->beta >= 0.0 && pb->beta <= 1.0))
    return BAD("%s: beta = %g, must be in [0, 1] for KLJIT_DIVERGENCE_JSD", who, pb->beta);
  if (pb->divergence != KLJIT_DIVERGENCE_JSD && pb->beta != 0.0)
    return BAD("%s: beta = %g is set but only KLJIT_DIVERGENCE_JSD takes a beta (leave it 0)",
               who, pb->beta);
  if (is_skew(pb->divergence) && !(pb->skew_alpha >= 0.0 && pb->skew_alpha < 1.0))
    return BAD("%s: skew_alpha = %g, must be in [0, 1) for the %s (at 1 the loss would be 0 "
               "for every input)", who, pb->skew_alpha, divergence_text(pb->divergence));
  if (!is_skew(pb->divergence) && pb->skew_alpha != 0.0)
    return BAD("%s: skew_alpha = %g is set but only KLJIT_DIVERGENCE_SKEW_FORWARD_KL and "
               "SKEW_REVERSE_KL take it (leave it 0)", who, pb->skew_alpha);
  if (!weight_ok(pb->hard_weight))
    return BAD("%s: hard_weight = %g, must be in [0, %g]", who, pb->hard_weight, MAX_WEIGHT);
  if (!weight_ok(pb->soft_weight))
    return BAD("%s: soft_weight = %g, must be in [0, %g]", who, pb->soft_weight, MAX_WEIGHT);
  if (pb->hard_weight == 0.0 && pb->soft_weight == 0.0)
    return BAD("%s: hard_weight = soft_weight = 0: the loss would be 0 for every input", who);
  if (!(pb->label_smoothing >= 0.0 && pb->label_smoothing <= 1.0))
    return BAD("%s: label_smoothing = %g, must be in [0, 1]", who, pb->label_smoothing);
  if (!(pb->z_loss >= 0.0 && pb->z_loss <= MAX_Z_LOSS))
    return BAD("%s: z_loss = %g, must be in [0, %g]", who, pb->z_loss, MAX_Z_LOSS);
  if (pb->hard_weight == 0.0 && (pb->label_smoothing != 0.0 || pb->z_loss != 0.0))
    return BAD("%s: %s = %g is set but hard_weight = 0: label smoothing and the z-loss belong to "
               "the hard-label CE term, which is off", who,
               pb->label_smoothing != 0.0 ? "label_smoothing" : "z_loss",
               pb->label_smoothing != 0.0 ? pb->label_smoothing : pb->z_loss);
  if (!softcap_ok(pb->softcap))
    return BAD("%s: softcap = %g, must be 0 (off) or in [%g, %g]", who, pb->softcap,
               MIN_SOFTCAP, MAX_SOFTCAP);
  if (!softcap_ok(pb->teacher_softcap))
    return BAD("%s: teacher_softcap = %g, must be 0 (off) or in [%g, %g]", who,
               pb->teacher_softcap, MIN_SOFTCAP, MAX_SOFTCAP);
  if (pb->teacher_softcap != 0.0 && !teacher_has_logits(pb->teacher))
    return BAD("%s: teacher_softcap = %g caps teacher logits: the teacher form must be "
               "KLJIT_TEACHER_DENSE_LOGITS or KLJIT_TEACHER_DENSE_HIDDEN", who,
               pb->teacher_softcap);
  const int sparse = pb->teacher == KLJIT_TEACHER_SPARSE_TOPK;
  if (sparse && !prob_is_forward_kl(pb) && pb->tail == KLJIT_TAIL_NONE)
    return UNSUP("%s: the sparse teacher with KLJIT_TAIL_NONE takes the forward KL only: the "
                 "%s weighs p at every column where q > 0, p is unknown off the support, "
                 "and TAIL_NONE's loss (floor M log M) compares no two distributions; "
                 "KLJIT_TAIL_BUCKET (the support and the tail) and KLJIT_TAIL_RENORM (the "
                 "support renormalized) give it categories to compare", who,
                 divergence_text(pb->divergence));
  if (pb->teacher_vocab != 0 &&
      (pb->teacher_vocab < pb->vocab || pb->teacher_vocab > MAX_VOCAB))
    return BAD("%s: teacher_vocab = %lld, must be 0 (= vocab) or in [vocab, %d] = [%lld, %d]",
               who, (long long)pb->teacher_vocab, MAX_VOCAB, (long long)pb->vocab, MAX_VOCAB);
  if (pb->teacher_ld != 0 &&
      (pb->teacher_ld < prob_teacher_vocab(pb) || pb->teacher_ld > 2 * (int64_t)MAX_VOCAB))
    return BAD("%s: teacher_ld = %lld, must be 0 (= teacher_vocab) or in [teacher_vocab, %d] "
               "= [%lld, %d]", who, (long long)pb->teacher_ld, 2 * MAX_VOCAB,
               (long long)prob_teacher_vocab(pb), 2 * MAX_VOCAB);
  if (sparse && (pb->teacher_vocab != 0 || pb->teacher_ld != 0))
    return UNSUP("%s: teacher_vocab / teacher_ld describe a dense teacher's rows; the sparse "
                 "teacher's ids index the student vocabulary (ids >= vocab are skipped)", who);
  if (prob_sharded(pb) && (pb->teacher_vocab != 0 || pb->teacher_ld != 0))
    return UNSUP("%s: a sharded head takes its teacher columns as a contiguous [N, vocab] "
                 "array: teacher_vocab / teacher_ld are for unsharded problems", who);
  if (pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN) {
    if (pb->teacher_hidden < 1 || pb->teacher_hidden > MAX_HIDDEN)
      return BAD("%s: teacher_hidden = %lld, must be in [1, %d] for KLJIT_TEACHER_DENSE_HIDDEN",
                 who, (long long)pb->teacher_hidden, MAX_HIDDEN);
    if (pb->teacher_ld != 0)
      return BAD("%s: teacher_ld = %lld: the online teacher's logits never leave the chunk "
                 "buffer, they have no caller-side stride (leave it 0)", who,
                 (long long)pb->teacher_ld);
  } else {
    if (pb->teacher_hidden != 0)
      return BAD("%s: teacher_hidden = %lld is set but the teacher form is not "
                 "KLJIT_TEACHER_DENSE_HIDDEN (leave it 0)", who, (long long)pb->teacher_hidden);
    if (pb->flags & KLJIT_FLAG_TEACHER_BIAS)
      return BAD("%s: KLJIT_FLAG_TEACHER_BIAS is set but the teacher form is not "
                 "KLJIT_TEACHER_DENSE_HIDDEN", who);
  }
  return KLJIT_SUCCESS;
}

kljit_status prob_import(const kljit_problem *user, const char *who, kljit_problem *out) {
  if (!user) return BAD("%s: problem is NULL", who);
  const size_t n = user->struct_size;
  if (n < KLJIT_PROBLEM_MIN_SIZE)
    return BAD("%s: problem->struct_size = %zu, below the %zu bytes of the first released "
               "kljit_problem (initialize it with KLJIT_PROBLEM_INIT)", who, n,
               (size_t)KLJIT_PROBLEM_MIN_SIZE);
  /* a newer caller's struct: what this library does not know must be left at zero */
  const kljit_status tail = util_struct_tail(user, sizeof *out, n, who, "problem");
  if (tail != KLJIT_SUCCESS) return tail;
  const kljit_problem defaults = KLJIT_PROBLEM_INIT;
  *out = defaults;
  memcpy(out, user, n < sizeof *out ? n : sizeof *out);
  out->struct_size = sizeof *out;
  return prob_validate(out, who);
}

kljit_status prob_validate(const kljit_problem *pb, const char *who) {
  if (!pb) return BAD("%s: problem is NULL", who);
  if (pb->struct_size != sizeof(kljit_problem))
    return BAD("%s: problem->struct_size = %zu, this library's kljit_problem is %zu bytes "
               "(initialize it with KLJIT_PROBLEM_INIT)", who, pb->struct_size,
               sizeof(kljit_problem));
  if (pb->hidden < 1 || pb->hidden > MAX_HIDDEN)
    return BAD("%s: hidden = %lld, must be in [1, %d]", who, (long long)pb->hidden, MAX_HIDDEN);
  if (pb->vocab < 2 || pb->vocab > MAX_VOCAB)
    return BAD("%s: vocab = %lld, must be in [2, %d]", who, (long long)pb->vocab, MAX_VOCAB);
  if (!is_float(pb->input_dtype))
    return BAD("%s: input_dtype = %d, must be KLJIT_FP32, KLJIT_FP16 or KLJIT_BF16", who,
               (int)pb->input_dtype);
  if (!is_float(pb->weight_dtype))
    return BAD("%s: weight_dtype = %d, must be KLJIT_FP32, KLJIT_FP16 or KLJIT_BF16", who,
               (int)pb->weight_dtype);
  if (pb->weight_dtype != pb->input_dtype)
    return err_set(KLJIT_ERR_UNSUPPORTED,
                   "%s: input_dtype %s with weight_dtype %s: the GEMMs need one dtype for both",
                   who, names_dtype(pb->input_dtype), names_dtype(pb->weight_dtype));
  if (!is_float(pb->teacher_dtype))
    return BAD("%s: teacher_dtype = %d, must be KLJIT_FP32, KLJIT_FP16 or KLJIT_BF16", who,
               (int)pb->teacher_dtype);
  if (pb->teacher < KLJIT_TEACHER_DENSE_PROBS || pb->teacher > KLJIT_TEACHER_DENSE_HIDDEN)
    return BAD("%s: teacher = %d is not a kljit_teacher_form", who, (int)pb->teacher);
  if (pb->vocab_total != 0) {
    if (pb->vocab_total < 2 || pb->vocab_total > MAX_VOCAB)
      return BAD("%s: vocab_total = %lld, must be 0 (unsharded) or in [2, %d]", who,
                 (long long)pb->vocab_total, MAX_VOCAB);
    if (pb->vocab_offset < 0)
      return BAD("%s: vocab_offset = %lld, must be >= 0", who, (long long)pb->vocab_offset);
    /* vocab_total - vocab cannot overflow (both are in [2, 2^24]); vocab_offset + vocab can */
    if (pb->vocab_offset > pb->vocab_total - pb->vocab)
      return BAD("%s: vocab_offset + vocab = %lld + %lld = %llu exceeds vocab_total = %lld", who,
                 (long long)pb->vocab_offset, (long long)pb->vocab,
                 (unsigned long long)pb->vocab_offset + (unsigned long long)pb->vocab,
                 (long long)pb->vocab_total);
  } else if (pb->vocab_offset != 0) {
    return BAD("%s: vocab_offset = %lld, must be 0 when vocab_total = 0 (unsharded)", who,
               (long long)pb->vocab_offset);
  }
  if (pb->shards < 1 || pb->shards > MAX_SHARDS)
    return BAD("%s: shards = %d, must be in [1, %d]", who, (int)pb->shards, MAX_SHARDS);
  if (pb->shards > 1 && pb->vocab_total == 0)
    return BAD("%s: shards = %d needs vocab_total (the global vocabulary size), got 0", who,
               (int)pb->shards);
  if (pb->teacher == KLJIT_TEACHER_SPARSE_TOPK) {
    /* ids are global: K is bounded by the whole vocabulary, not the shard */
    const int64_t vt = prob_vocab_total(pb);
    const int64_t kmax = vt < MAX_TOPK ? vt : MAX_TOPK;
    if (pb->topk < 1 || pb->topk > kmax)
      return BAD("%s: topk = %d, must be in [1, min(vocab_total or vocab, %d)] = [1, %lld]", who,
                 pb->topk, MAX_TOPK, (long long)kmax);
    if (pb->topk_id_dtype != KLJIT_INT32 && pb->topk_id_dtype != KLJIT_INT64)
      return BAD("%s: topk_id_dtype = %d, must be KLJIT_INT32 or KLJIT_INT64", who,
                 (int)pb->topk_id_dtype);
    if (pb->topk_values != KLJIT_TOPK_PROBS && pb->topk_values != KLJIT_TOPK_LOGPROBS)
      return BAD("%s: topk_values = %d is not a kljit_topk_values", who, (int)pb->topk_values);
    if (pb->tail < KLJIT_TAIL_NONE || pb->tail > KLJIT_TAIL_BUCKET)
      return BAD("%s: tail = %d is not a kljit_tail", who, (int)pb->tail);
  }
  if (pb->temperature_mode != KLJIT_TEMPERATURE_CONSTANT &&
      pb->temperature_mode != KLJIT_TEMPERATURE_RUNTIME)
    return BAD("%s: temperature_mode = %d is not a kljit_temperature_mode", who,
               (int)pb->temperature_mode);
  if (pb->temperature_mode == KLJIT_TEMPERATURE_CONSTANT && !prob_temperature_ok(pb->temperature))
    return BAD("%s: temperature = %g, must be in [%g, %g] (T, 1/T, T^2 and 1/T^2 must be normal "
               "fp32 numbers in the kernels)", who, pb->temperature, KLJIT_TEMPERATURE_MIN,
               KLJIT_TEMPERATURE_MAX);
  if (pb->teacher_temperature != 0 && !prob_temperature_ok(pb->teacher_temperature))
    return BAD("%s: teacher_temperature = %g, must be 0 (same as temperature) or in [%g, %g]",
               who, pb->teacher_temperature, KLJIT_TEMPERATURE_MIN, KLJIT_TEMPERATURE_MAX);
  if (pb->reduction < KLJIT_REDUCTION_SUM || pb->reduction > KLJIT_REDUCTION_NONE)
    return BAD("%s: reduction = %d is not a kljit_reduction", who, (int)pb->reduction);
  if (pb->label_dtype != KLJIT_INT32 && pb->label_dtype != KLJIT_INT64)
    return BAD("%s: label_dtype = %d, must be KLJIT_INT32 or KLJIT_INT64", who,
               (int)pb->label_dtype);
  if (!(pb->eps >= 1e-30 && pb->eps < 1e-3))
    return BAD("%s: eps = %g, must be in [1e-30, 1e-3)", who, pb->eps);
  if (pb->grad_weight_dtype != KLJIT_FP32 && pb->grad_weight_dtype != pb->weight_dtype)
    return BAD("%s: grad_weight_dtype = %s, must be KLJIT_FP32 or weight_dtype (%s)", who,
               names_dtype(pb->grad_weight_dtype), names_dtype(pb->weight_dtype));
  if (pb->grad_weight_accum != KLJIT_ACCUM_FP32 &&
      pb->grad_weight_accum != KLJIT_ACCUM_OUTPUT_DTYPE &&
      pb->grad_weight_accum != KLJIT_ACCUM_AUTO)
    return BAD("%s: grad_weight_accum = %d is not a kljit_grad_weight_accum", who,
               (int)pb->grad_weight_accum);
  const uint32_t known = KLJIT_FLAG_BIAS | KLJIT_FLAG_SCALE_T_SQUARED | KLJIT_FLAG_NATIVE_LOGITS |
                         KLJIT_FLAG_ALLOW_TF32 | KLJIT_FLAG_CHECK_INPUTS |
                         KLJIT_FLAG_TEACHER_BIAS | KLJIT_FLAG_ROW_WEIGHTS |
                         KLJIT_FLAG_PRECISE_ACCUMULATION;
  if (pb->flags & ~known)
    return BAD("%s: flags = 0x%x has unknown bits 0x%x", who, pb->flags, pb->flags & ~known);
  /* every valid loss family has row kernels (the sparse teacher's limits are its math's:
   * validate_family refuses TAIL_NONE with any divergence but the forward KL) */
  return validate_family(pb, who);
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Default chunk budget: the chunk buffers (logits, G) stay within this many bytes. */
static const double CHUNK_BUDGET = 1.0 * (1 << 30);

int prob_native_logits(const kljit_problem *pb) {
  return (pb->flags & KLJIT_FLAG_NATIVE_LOGITS) || pb->input_dtype == KLJIT_FP32;
}

/* Chunk bytes per row: the logits (G overwrites them in place), the pass-1 partials and, for
 * the online teacher, its fp32 logits. The partials are counted at the largest record a
 * template may declare (KIFACE_MAX_SLOTS floats): the heuristics render no template, and the
 * workspace itself is laid out by the records the plan's modules declare. */
static size_t chunk_row_bytes(const kljit_problem *pb, int64_t ld, const prob_tuning *t) {
  const size_t z = prob_native_logits(pb) ? names_dtype_size(pb->input_dtype) : 4;
  const size_t zt = pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN ? (size_t)ld * 4 : 0;
  return (size_t)ld * z + (size_t)t->split * KIFACE_MAX_SLOTS * sizeof(float) + zt;
}

/* Registers per thread allow 32 fp32 values of z (and as many of p) in the cluster variant. */
enum { CLUSTER_THREADS = 256, CLUSTER_VALUES = 32, CLUSTER_MAX = 16 };

int prob_cluster_tuning(const kljit_problem *pb, int arch, prob_tuning *t) {
  /* sharded plans merge their row statistics across ranks: two-pass rows only (the reverse KL
   * and the JSD sum their row total S from the registers, over the cluster) */
  if (arch < 90 || pb->teacher == KLJIT_TEACHER_SPARSE_TOPK || prob_sharded(pb)) return 0;
  const int vec = prob_native_logits(pb) && pb->input_dtype != KLJIT_FP32 ? 8 : 4;
  /* 256 threads per block (two blocks per SM); 512 when a row needs more than 16 blocks */
  const int64_t per_block = (int64_t)CLUSTER_THREADS * CLUSTER_VALUES;
  if (pb->vocab > 2 * CLUSTER_MAX * per_block) return 0; /* a row held in a cluster's registers */
  const int wide = pb->vocab > CLUSTER_MAX * per_block;
  const int64_t block_values = wide ? 2 * per_block : per_block;
  int c = 1;
  while ((int64_t)c * block_values < pb->vocab) c *= 2;
  t->cluster = t->split = c;
  t->nv = CLUSTER_VALUES / vec;
  /* a single-block row needs only as many threads as its vectors */
  int64_t th = (pb->vocab + (int64_t)t->nv * vec - 1) / ((int64_t)t->nv * vec);
  th = (th + 31) / 32 * 32;
  t->threads = c > 1 ? (int)(wide ? 2 * CLUSTER_THREADS : CLUSTER_THREADS)
                     : (int)(th < 64 ? 64 : th);
  return 1;
}

prob_tuning prob_estimate(const kljit_problem *pb, int arch, const kljit_context_options *opt) {
  prob_tuning t;
  memset(&t, 0, sizeof t);
  /* The cluster variant reads every byte once but, as measured on the H200 (bench/RESULTS.md),
   * runs its rows at half the copy bandwidth, while the two-pass variant runs at the copy
   * bandwidth: it is opt-in, KLJIT_ROW_KERNEL_CLUSTER (KLJIT_ROW_KERNEL=cluster, README). */
  if (!(opt->row_kernel == KLJIT_ROW_KERNEL_CLUSTER && prob_cluster_tuning(pb, arch, &t))) {
    t.threads = 256;
    t.nv = 1;
    /* ~16K columns per block: enough rows x blocks to fill the GPU at any chunk size. The
     * sparse rows allow more blocks per row: their BUCKET tail keeps a bitmap of the segment
     * in shared memory (at most 2^18 columns, 32 KiB). */
    int64_t split = (pb->vocab + 16383) / 16384;
    const int64_t most = pb->teacher == KLJIT_TEACHER_SPARSE_TOPK ? 64 : 16;
    t.split = (int)(split < 1 ? 1 : split > most ? most : split);
  }
  const int64_t ld = round_up(pb->vocab, 8);
  int64_t r = (int64_t)(CHUNK_BUDGET / (double)chunk_row_bytes(pb, ld, &t));
  r = r / 256 * 256;
  t.chunk_rows = r < 256 ? 256 : r > 8192 ? 8192 : r;
  /* the options' chunk size (KLJIT_CHUNK_ROWS: tests, experiments) */
  if (opt->chunk_rows > 0) t.chunk_rows = opt->chunk_rows;
  return t;
}

/* The tuning's chunk, capped at chunk_eighths / 8 of the call's rows rounded up to 256. */
static int64_t capped_chunk(const prob_geometry *g, int64_t rows) {
  if (!g->chunk_eighths) return g->tune.chunk_rows;
  const int64_t e = g->chunk_eighths;
  int64_t cap = ((rows * e + 7) / 8 + 255) / 256 * 256;
  return g->tune.chunk_rows < cap ? g->tune.chunk_rows : cap;
}

/* A call of `rows` rows with KLJIT_ACCUM_AUTO keeps a 16-bit dW in its own dtype over at most
 * KLJIT_ACCUM_AUTO_MAX_CHUNKS chunks of the capped chunk (each adds one rounding of dW), and
 * beyond that takes the fp32 buffer: a long call's many chunks would round dW too often. */
int prob_dw_in_workspace(const prob_geometry *g, int64_t rows) {
  if (!g->dw_auto) return g->dw_workspace;
  const int64_t chunk = capped_chunk(g, rows);
  return (rows + chunk - 1) / chunk > KLJIT_ACCUM_AUTO_MAX_CHUNKS;
}

/* The chunk's fp32 logits are most of the workspace: capped at 3/8 of the call's rows (three
 * chunks: 3/8, 3/8, 2/8), they take at most about 1.5 N V bytes, under the 2 N V that Liger's
 * chunked loss was measured to hold beyond the gradients for the same call (bench/RESULTS.md),
 * so a short call is not the fatter one; the online teacher's two fp32 buffers a row, capped at
 * an eighth, take N V bytes. Each chunk re-reads and rewrites the 16-bit dW (4 V H bytes): three
 * chunks of 3/8 took 0.957-0.981x the time of four of a quarter at the four shorter dense shapes
 * (the binding's plan, runs 63-64; 8192 x 4096 x 128256 keeps the tuning's 2048-row chunk),
 * while 2816-row chunks (a third of 8192, rounded up to 256) were slower than 2048-row ones. Long calls keep the tuned chunk (the cap only bites below
 * 8 / chunk_eighths x chunk_rows tokens); where dW accumulates in fp32 or the context's options
 * set the chunk size (chunk_rows, KLJIT_CHUNK_ROWS), g->chunk_eighths is 0 (recipe.c) and the
 * tuning's chunk is kept; so it is for
 * a call whose AUTO dW takes the fp32 buffer. The binding asks this rule
 * (kljit_plan_chunk_rows) rather than mirroring it. */
int64_t prob_chunk_rows(const prob_geometry *g, int64_t rows) {
  return g->dw_auto && prob_dw_in_workspace(g, rows) ? g->tune.chunk_rows : capped_chunk(g, rows);
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

prob_workspace prob_workspace_layout(const kljit_problem *pb, const prob_geometry *g,
                                     const kiface_layout *lay, kljit_mode mode, int64_t rows) {
  prob_workspace w;
  memset(&w, 0, sizeof w);
  const int64_t chunk = prob_chunk_rows(g, rows);
  const int64_t r = rows < chunk ? rows : chunk;
  const size_t zsize = names_dtype_size(g->logit);
  const int grads = mode != KLJIT_MODE_FORWARD;
  size_t off = 0;
  const size_t rec = (size_t)lay->part * sizeof(float); /* a record of the rows module */
  /* hdr (kl_setup): fused keeps it here; two-phase keeps it at the start of `saved` */
  w.hdr = off, off += mode == KLJIT_MODE_FUSED ? align256((size_t)lay->hdr * sizeof(float)) : 0;
  w.lossp = off, off += mode != KLJIT_MODE_BACKWARD
                            ? align256((size_t)rows * (size_t)g->tune.split * 4) : 0;
  /* the CE's loss partials, laid out as lossp's (geometry's hard_parts) */
  w.lossh = off, off += mode != KLJIT_MODE_BACKWARD && g->hard_parts
                            ? align256((size_t)rows * (size_t)g->tune.split * 4) : 0;
  /* pass 1's records: SPLIT a row, or one per column tile of the logits GEMM that writes them */
  const size_t recs = g->stats_tiles ? (size_t)g->stats_tiles : (size_t)g->tune.split;
  w.part = off, off += mode != KLJIT_MODE_BACKWARD
                           && !g->tune.cluster
                           ? align256((size_t)r * recs * rec) : 0;
  w.z = off, off += align256((size_t)r * (size_t)g->ld * zsize);
  /* the online teacher's logits of the chunk (fp32, LD apart) */
  w.zt = off, off += pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN
                         ? align256((size_t)r * (size_t)g->ld * 4) : 0;
  w.g = w.z; /* G overwrites the logits in place (recipe.c) */
  w.dw = off, off += grads && prob_dw_in_workspace(g, rows)
                         ? align256((size_t)pb->vocab * (size_t)pb->hidden * 4) : 0;
  w.db = off, off += grads && (pb->flags & KLJIT_FLAG_BIAS) ? align256((size_t)pb->vocab * 4) : 0;
  /* the fp32 sum of a split dX GEMM's slices, one chunk's rows */
  w.dxacc = off, off += grads && g->dx_split > 1
                            ? align256((size_t)r * (size_t)pb->hidden * 4) : 0;
  w.check = off, off += (pb->flags & KLJIT_FLAG_CHECK_INPUTS) && mode != KLJIT_MODE_BACKWARD
                             ? 256 : 0;
  /* kljit_fused_nccl: this rank's records, then the gathered [shards][rows] */
  w.stats = off, off += mode == KLJIT_MODE_FUSED && pb->shards > 1
                            ? align256((size_t)(1 + pb->shards) * (size_t)rows * rec) : 0;
  /* the tile counter the dynamic GEMMs share (one launch at a time on the call's stream; the
   * call zeroes it, each launch leaves it zero) */
  w.sched = off, off += g->tile_counter ? 256 : 0;
  w.lt = off, w.lt_size = GEMM_WORKSPACE_BYTES, off += w.lt_size;
  w.total = off;
  return w;
}

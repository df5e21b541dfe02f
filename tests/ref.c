/* SPDX-License-Identifier: Apache-2.0 */
/* ref.c — the double-precision CPU reference for the fused linear + KL loss (see ref.h).
 *
 * Per kept row i (labels NULL or labels[i] != ignore_index):
 *   z = x_i W^T + b,  s = z / T,  log q = s - lse(s)                       (z: [V])
 *   dense:   l = sum_v p_v (log max(p_v, eps) - log q_v),   dl/ds = sum(p) q - p
 *   sparse:  support ids[i, 0..K), M = sum_k p_k,
 *     NONE    l = sum_k p_k (log max(p_k, eps) - log q_{id_k}),   dl/ds = M q - p (on S)
 *     RENORM  p <- p / M, then NONE with M = 1; M = 0 gives l = 0 and dl/ds = 0
 *     BUCKET  NONE + t log(t / (1 - Q_S)),  t = 1 - M,  Q_S = sum_k q_{id_k}
 *             dl/ds_v = M q_v - p_v + t/(1-Q_S) * q_v (c_v - Q_S)   (c_v: occurrences of v)
 *             i.e. q_v - p_v on S and q_v (M - t Q_S / (1 - Q_S)) off S without duplicates.
 *   (dense, other divergences: REVERSE_KL l = sum q (log q - log p), dl/ds = q (log q - log p
 *   - l); JSD(beta) with m = beta p + (1 - beta) q, l = beta sum p (log p - log m) + (1 - beta)
 *   sum q (log q - log m), dl/ds = q (g - sum q g), g = (1 - beta)(log q - log m); beta = 0 and
 *   1 take the forward and reverse KL; log p is log max(p, eps) throughout; TVD l = 1/2 sum
 *   |p - q|, g = sign(q - p) / 2 (0 at p = q); SKEW_FORWARD_KL(a) m = a p + (1 - a) q, l = sum
 *   p (log p - log m), g = -(1 - a) p / m; SKEW_REVERSE_KL(a) m = a q + (1 - a) p, l = sum q
 *   (log q - log m), g = log(q / m) - a q / m; a = 0 takes the forward and reverse KL)
 *   sparse, the reverse KL, the JSD, TVD and the skew KLs (kljit.h): dense-from-sparse, the
 *   dense divergence of the category distributions P, Q (BUCKET: S and the tail, P_tail =
 *   max(1 - M, 0), Q_tail = 1 - Q_S, no tail category when S covers V; RENORM: S with P = p /
 *   M, Q = q / Q_S; M = 0: nothing), then dl/ds_v = Q'_v (g_c(v) - E) with Q'_v = q_v (BUCKET:
 *   on S and, with the tail's g, off S) or q_v / Q_S (RENORM, on S; 0 off S), E = sum_c Q_c
 *   g_c. Distinct ids only.
 *   softcap c: z' = c tanh(z / c) replaces z everywhere (s = z' / T), dz'/dz = 1 / cosh^2(z / c)
 *   CE = lse(z') - (1 - ls) z'_y - ls / V sum_v z'_v + zl lse(z')^2 (y = labels[i]),
 *   dCE/dz'_v = (1 + 2 zl lse(z')) softmax(z')_v - (1 - ls) [v = y] - ls / V
 *   row_loss[i] = w_i (ws * t2 * l + wh * CE),  t2 = T^2 with KLJIT_FLAG_SCALE_T_SQUARED, else
 *   1, w_i the row weight (1 without)
 *   loss = c * sum_i row_loss[i],  c = 1 (SUM, NONE), 1/kept (BATCHMEAN), 1/(kept V) (MEAN);
 *   loss_soft and loss_hard the same sums of the two terms
 *   G[i,v] = dL/dz_v = g_i c w_i (ws t2 / T dl/ds_v + wh dCE/dz'_v) dz'/dz_v
 *   dx = G W,  dw = G^T X,  db = sum_i G[i,:]
 *   Teachers: dense rows lie teacher_ld apart and only their first V columns count (padded
 *   teachers); DENSE_HIDDEN computes zt = xt Wt^T + bt for those columns, then as DENSE_LOGITS;
 *   teacher_softcap caps zt before the teacher temperature.
 *
 * Choices the contract leaves open, made here and documented for the GPU side:
 *   - Duplicate ids in a sparse row: every occurrence is its own term (of M, of sum p log p, of
 *     sum p log q and of Q_S). Nothing is merged; checked mode on the GPU reports duplicates.
 *   - "Kept" depends on the labels alone: a RENORM row with M = 0 still counts in BATCHMEAN's
 *     and MEAN's denominator, it just adds 0 to the loss and to G.
 *   - BUCKET: when t = 1 - M <= 0 (all mass on S, or rounding pushed M past 1) the ghost term
 *     is 0, and so is its gradient (M does not depend on s). When the distinct ids cover the
 *     whole vocabulary there is no tail to bucket: 1 - Q_S is 0 and t is the teacher's
 *     rounding error, so the term is dropped as well (this keeps K = V equal to dense).
 *   - LOGPROBS values: log max(p, eps) is computed as max(log p, log eps), so a given -inf is
 *     p = 0 and contributes nothing; the given log p is used directly above eps.
 *   - The sparse reverse KL, JSD, TVD and skew KLs refuse a row with duplicate ids (kljit
 *     leaves them unspecified) and TAIL_NONE (kljit refuses it).
 *
 * Numerics: logits by double dot products with four partial sums, log-sum-exp with the maximum
 * subtracted, the V- and K-long sums in long double. 1 - Q_S is summed over the vocabulary
 * outside S in log space, not computed as 1 - Q_S, so a nearly complete support keeps its
 * relative precision. Rows go in blocks (see ref_block_rows) that change no bit of the result.
 *
 * Errors: invalid inputs are refused before any output is written. The one failure found
 * later (BUCKET with duplicate ids whose 1 - Q_S is not positive) leaves outputs partial.
 */
#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_dtype.h"

static int ref_fail(const char *msg, long long value) {
  fprintf(stderr, "ref_compute: %s (%lld)\n", msg, value);
  return 1;
}

static int ref_failf(const char *msg, double value) {
  fprintf(stderr, "ref_compute: %s (%g)\n", msg, value);
  return 1;
}

/* x . w over H with four independent partial sums: a fixed order (deterministic), shorter
 * dependency chains (the oracle runs on large shapes too) and a little less rounding error. */
static double ref_dot(const double *a, const double *b, int64_t n) {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    acc[0] += a[j] * b[j];
    acc[1] += a[j + 1] * b[j + 1];
    acc[2] += a[j + 2] * b[j + 2];
    acc[3] += a[j + 3] * b[j + 3];
  }
  for (; j < n; j++) acc[j & 3] += a[j] * b[j];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* log sum_v exp(s_v) with the maximum subtracted; -inf for an empty or all -inf input. */
static double ref_lse(const double *s, int64_t n) {
  double mx = -INFINITY;
  for (int64_t v = 0; v < n; v++)
    if (s[v] > mx) mx = s[v];
  if (mx == -INFINITY) return -INFINITY;
  long double sum = 0.0L;
  for (int64_t v = 0; v < n; v++) sum += (long double)exp(s[v] - mx);
  return mx + (double)logl(sum);
}

/* The divergences that are the forward KL (JSD at beta 0, the skew forward KL at alpha 0) and
 * the reverse KL (JSD at beta 1, the skew reverse KL at alpha 0): the teacher's mass and the
 * category sums take their own forms. */
static int ref_is_forward(const kljit_problem *pb) {
  const kljit_divergence div = pb->divergence;
  return div == KLJIT_DIVERGENCE_FORWARD_KL || (div == KLJIT_DIVERGENCE_JSD && pb->beta == 0.0) ||
         (div == KLJIT_DIVERGENCE_SKEW_FORWARD_KL && pb->skew_alpha == 0.0);
}
static int ref_is_reverse(const kljit_problem *pb) {
  const kljit_divergence div = pb->divergence;
  return div == KLJIT_DIVERGENCE_REVERSE_KL || (div == KLJIT_DIVERGENCE_JSD && pb->beta == 1.0) ||
         (div == KLJIT_DIVERGENCE_SKEW_REVERSE_KL && pb->skew_alpha == 0.0);
}

static int ref_validate(const ref_inputs *in, const ref_outputs *out) {
  if (!in || !out) return ref_fail("in and out must not be NULL", 0);
  const kljit_problem *pb = in->pb;
  if (!pb) return ref_fail("in->pb must not be NULL", 0);
  if (in->rows < 0) return ref_fail("rows must be >= 0", (long long)in->rows);
  if (pb->hidden < 1) return ref_fail("hidden must be >= 1", (long long)pb->hidden);
  if (pb->vocab < 1) return ref_fail("vocab must be >= 1", (long long)pb->vocab);
  if (in->rows > 0 && (!in->x || !in->w)) return ref_fail("x and w must not be NULL", 0);
  if ((pb->flags & KLJIT_FLAG_BIAS) && !in->b)
    return ref_fail("KLJIT_FLAG_BIAS is set but b is NULL", 0);
  if (!(pb->flags & KLJIT_FLAG_BIAS) && in->b)
    return ref_fail("b is given but KLJIT_FLAG_BIAS is not set", 0);
  double T = pb->temperature;
  if (pb->temperature_mode == KLJIT_TEMPERATURE_RUNTIME) {
    T = in->temperature;
  } else if (pb->temperature_mode != KLJIT_TEMPERATURE_CONSTANT) {
    return ref_fail("unknown temperature_mode", (long long)pb->temperature_mode);
  }
  if (!(T > 0.0) || !isfinite(T)) return ref_failf("temperature must be > 0 and finite", T);
  if (!(pb->eps > 0.0) || !isfinite(pb->eps)) return ref_failf("eps must be > 0", pb->eps);
  switch (pb->reduction) {
    case KLJIT_REDUCTION_SUM:
    case KLJIT_REDUCTION_BATCHMEAN:
    case KLJIT_REDUCTION_MEAN:
    case KLJIT_REDUCTION_NONE: break;
    default: return ref_fail("unknown reduction", (long long)pb->reduction);
  }
  if (pb->divergence < KLJIT_DIVERGENCE_FORWARD_KL ||
      pb->divergence > KLJIT_DIVERGENCE_SKEW_REVERSE_KL)
    return ref_fail("unknown divergence", (long long)pb->divergence);
  if (pb->divergence == KLJIT_DIVERGENCE_JSD && !(pb->beta >= 0.0 && pb->beta <= 1.0))
    return ref_failf("JSD beta must be in [0, 1]", pb->beta);
  if (!(pb->skew_alpha >= 0.0 && pb->skew_alpha < 1.0))
    return ref_failf("skew_alpha must be in [0, 1)", pb->skew_alpha);
  if (!(pb->label_smoothing >= 0.0 && pb->label_smoothing <= 1.0))
    return ref_failf("label_smoothing must be in [0, 1]", pb->label_smoothing);
  if (!(pb->z_loss >= 0.0) || !isfinite(pb->z_loss))
    return ref_failf("z_loss must be >= 0 and finite", pb->z_loss);
  if (!(pb->hard_weight >= 0.0) || !(pb->soft_weight >= 0.0))
    return ref_failf("hard_weight and soft_weight must be >= 0", pb->hard_weight);
  if (!(pb->softcap >= 0.0) || !(pb->teacher_softcap >= 0.0))
    return ref_failf("softcaps must be >= 0", pb->softcap);
  if (pb->hard_weight != 0.0) {
    if (in->rows > 0 && !in->labels) return ref_fail("hard_weight needs labels", 0);
    for (int64_t i = 0; i < in->rows; i++)
      if (in->labels[i] != pb->ignore_index && (in->labels[i] < 0 || in->labels[i] >= pb->vocab))
        return ref_fail("a kept row's label lies outside [0, vocab)", (long long)in->labels[i]);
  }
  const int64_t vt = pb->teacher_vocab ? pb->teacher_vocab : pb->vocab;
  if (vt < pb->vocab) return ref_fail("teacher_vocab must be >= vocab", (long long)vt);
  if (pb->teacher_ld != 0 && pb->teacher_ld < vt)
    return ref_fail("teacher_ld must be >= teacher_vocab", (long long)pb->teacher_ld);
  if (pb->teacher != KLJIT_TEACHER_SPARSE_TOPK && pb->teacher != KLJIT_TEACHER_DENSE_LOGITS &&
      pb->teacher != KLJIT_TEACHER_DENSE_HIDDEN && pb->teacher_softcap != 0.0)
    return ref_failf("teacher_softcap needs teacher logits", pb->teacher_softcap);
  switch (pb->teacher) {
    case KLJIT_TEACHER_DENSE_HIDDEN:
      if (pb->teacher_hidden < 1)
        return ref_fail("teacher_hidden must be >= 1", (long long)pb->teacher_hidden);
      if (in->rows > 0 && (!in->teacher_x || !in->teacher_w))
        return ref_fail("teacher_x and teacher_w must not be NULL", 0);
      if (!(pb->flags & KLJIT_FLAG_TEACHER_BIAS) != !in->teacher_b)
        return ref_fail("teacher_b must be given exactly with KLJIT_FLAG_TEACHER_BIAS", 0);
      if (!(pb->teacher_temperature >= 0.0) || !isfinite(pb->teacher_temperature))
        return ref_failf("teacher_temperature must be >= 0 and finite", pb->teacher_temperature);
      break;
    case KLJIT_TEACHER_DENSE_LOGITS:
      if (!(pb->teacher_temperature >= 0.0) || !isfinite(pb->teacher_temperature))
        return ref_failf("teacher_temperature must be >= 0 and finite", pb->teacher_temperature);
      /* fall through */
    case KLJIT_TEACHER_DENSE_PROBS:
    case KLJIT_TEACHER_DENSE_LOGPROBS:
      if (in->rows > 0 && !in->teacher) return ref_fail("dense teacher is NULL", 0);
      break;
    case KLJIT_TEACHER_SPARSE_TOPK:
      if (pb->topk < 1) return ref_fail("topk must be >= 1", (long long)pb->topk);
      if (!ref_is_forward(pb) && pb->tail == KLJIT_TAIL_NONE)
        return ref_fail("TAIL_NONE takes the forward KL only", (long long)pb->divergence);
      if (in->rows > 0 && (!in->ids || !in->vals)) return ref_fail("ids or vals is NULL", 0);
      if (pb->topk_values != KLJIT_TOPK_PROBS && pb->topk_values != KLJIT_TOPK_LOGPROBS)
        return ref_fail("unknown topk_values", (long long)pb->topk_values);
      if (pb->tail != KLJIT_TAIL_NONE && pb->tail != KLJIT_TAIL_RENORM &&
          pb->tail != KLJIT_TAIL_BUCKET)
        return ref_fail("unknown tail", (long long)pb->tail);
      /* Ignored rows are never read, so only kept rows need valid ids. */
      for (int64_t i = 0; i < in->rows; i++) {
        if (in->labels && in->labels[i] == pb->ignore_index) continue;
        for (int64_t k = 0; k < pb->topk; k++) {
          const int64_t id = in->ids[i * pb->topk + k];
          if (id < 0 || id >= pb->vocab)
            return ref_fail("a sparse id lies outside [0, vocab)", (long long)id);
        }
      }
      break;
    default: return ref_fail("unknown teacher form", (long long)pb->teacher);
  }
  return 0;
}

/* Scratch of one row: V-long student vectors, K-long teacher terms, per-id counts (dl/ds goes
 * to the caller's ds). */
typedef struct ref_row {
  double *logq; /* [V] z, then s, then log q in place */
  double *q;    /* [V] */
  double *zc;   /* [V] z' (the softcapped logits) */
  double *dc;   /* [V] dz'/dz */
  double *p;    /* [V] dense teacher probabilities */
  double *lp;   /* [V] log max(p, eps) */
  double *tz;   /* [V] the online teacher's logits (DENSE_HIDDEN) */
  double *tp;   /* [V] teacher log-probs (DENSE_LOGITS), scratch (BUCKET) */
  double *pk;   /* [K] teacher probabilities on the support */
  double *lpk;  /* [K] log max(p, eps) on the support */
  double *cat;  /* [5 (K + 1)] the sparse divergences' categories: P, log P, Q, log Q, g - E */
  int32_t *cnt; /* [V] occurrences of each id in the row (BUCKET) */
} ref_row;

/* c tanh(x / c) for a cap c > 0, x itself for c = 0 (no cap). */
static double ref_softcap(double x, double c) { return c > 0.0 ? c * tanh(x / c) : x; }

/* Dense teacher row t (its first V columns) into r->p and r->lp = log max(p, eps). */
static void ref_teacher_dense(const kljit_problem *pb, const double *t, double T,
                              const ref_row *r) {
  const int64_t V = pb->vocab;
  const double log_eps = log(pb->eps);
  const double *lt = t; /* log p for LOGPROBS and the logits forms */
  if (pb->teacher == KLJIT_TEACHER_DENSE_LOGITS || pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN) {
    const double Tt = pb->teacher_temperature > 0.0 ? pb->teacher_temperature : T;
    for (int64_t v = 0; v < V; v++) r->tp[v] = ref_softcap(t[v], pb->teacher_softcap) / Tt;
    const double lse_t = ref_lse(r->tp, V);
    for (int64_t v = 0; v < V; v++) r->tp[v] -= lse_t;
    lt = r->tp;
  }
  for (int64_t v = 0; v < V; v++) {
    if (pb->teacher == KLJIT_TEACHER_DENSE_PROBS) {
      r->p[v] = t[v];
      r->lp[v] = log(t[v] > pb->eps ? t[v] : pb->eps);
    } else {
      r->p[v] = exp(lt[v]);
      r->lp[v] = lt[v] > log_eps ? lt[v] : log_eps;
    }
  }
}

/* The divergence D of two distributions over n categories (P, log max(P, eps); Q, log Q): the
 * reverse KL (ref_is_reverse), else pb's TVD, skew KLs (pb->skew_alpha) or JSD(beta); and in
 * ge each g_c - E, g = dD/dQ: log Q - log P (+ 1, which cancels) for the reverse KL, (1 - beta)
 * log(Q / m) for the JSD, sign(Q - P) / 2 for TVD, -(1 - a) P / m for the skew forward KL,
 * log(Q / m) - a Q / m (+ 1) for the skew reverse KL; E = sum Q g. dD/ds for scores s whose
 * softmax gives Q is then Q (g - E).
 * g_c - E is formed as (g_c - g_r) + sum_c' Q_c' (g_r - g_c') about the category r of the
 * largest Q: g_r - E itself would be a difference of two numbers near g_r where Q_r is near 1,
 * and in fp64 the top-K tail's Q_r = 1 - 1e-13 (logits of std 12) carries 1e-15 of the row's
 * lse: a 1e-2 error in g - E that the kernels' fp32 does not make (they sum the same way). */
static double ref_div_categories(const kljit_problem *pb, int64_t n, const double *P,
                                 const double *lP, const double *Q, const double *lQ,
                                 double *ge) {
  const kljit_divergence div = pb->divergence;
  const double a = pb->skew_alpha, beta = pb->beta;
  const int reverse = ref_is_reverse(pb);
  long double l = 0.0L, sum_a = 0.0L;
  int64_t r = 0; /* the reference category: the largest Q */
  for (int64_t c = 0; c < n; c++) {
    const double q = Q[c], p = P[c];
    double g;
    if (reverse) {
      g = lQ[c] - lP[c];
      if (q != 0.0) l += (long double)q * g;
    } else if (div == KLJIT_DIVERGENCE_TVD) {
      g = q > p ? 0.5 : q < p ? -0.5 : 0.0;
      l += 0.5L * fabsl((long double)q - p);
    } else if (div == KLJIT_DIVERGENCE_SKEW_FORWARD_KL) {
      const double m = a * p + (1.0 - a) * q;
      g = m > 0.0 ? -(1.0 - a) * p / m : 0.0;
      if (p != 0.0) l += (long double)p * (lP[c] - log(m));
    } else if (div == KLJIT_DIVERGENCE_SKEW_REVERSE_KL) {
      const double m = a * q + (1.0 - a) * p, logm = log(m);
      g = q != 0.0 ? lQ[c] - logm - a * q / m : 0.0; /* q > 0 makes m > 0 */
      if (q != 0.0) l += (long double)q * (lQ[c] - logm);
    } else {
      const double m = beta * p + (1.0 - beta) * q;
      const double logm = log(m);
      g = m > 0.0 ? (1.0 - beta) * (lQ[c] - logm) : 0.0;
      if (p != 0.0) l += (long double)(beta * p) * (lP[c] - logm);
      if (q != 0.0) l += (long double)((1.0 - beta) * q) * (lQ[c] - logm);
    }
    ge[c] = g;
    if (q > Q[r]) r = c;
  }
  for (int64_t c = 0; c < n; c++) sum_a += (long double)Q[c] * ((long double)ge[r] - ge[c]);
  const double gr = n > 0 ? ge[r] : 0.0;
  for (int64_t c = 0; c < n; c++) ge[c] = (double)(((long double)ge[c] - gr) + sum_a);
  return (double)l;
}

/* The divergence of a dense row (teacher in r->p, r->lp; student in r->q, r->logq): loss l
 * and ds = dl/ds. */
static double ref_row_dense(const kljit_problem *pb, const ref_row *r, double *ds) {
  const int64_t V = pb->vocab;
  long double l = 0.0L;
  if (ref_is_forward(pb)) {
    long double sum_p = 0.0L;
    for (int64_t v = 0; v < V; v++) {
      ds[v] = -r->p[v];
      sum_p += r->p[v];
      if (r->p[v] != 0.0) l += (long double)r->p[v] * (r->lp[v] - r->logq[v]); /* 0 log 0 */
    }
    for (int64_t v = 0; v < V; v++) ds[v] += (double)sum_p * r->q[v];
    return (double)l;
  }
  const double d = ref_div_categories(pb, V, r->p, r->lp, r->q, r->logq, ds);
  for (int64_t v = 0; v < V; v++) ds[v] *= r->q[v];
  return d;
}

/* The sparse reverse KL, JSD, TVD and skew KLs, dense-from-sparse (the header): r->pk, r->lpk
 * hold the support's p and log max(p, eps) as given, M their sum. */
static int ref_row_sparse_div(const kljit_problem *pb, const int64_t *ids, const double *vals,
                              const ref_row *r, int64_t row, long double M, double *ds,
                              double *l_out) {
  const int64_t V = pb->vocab, K = pb->topk;
  const double log_eps = log(pb->eps);
  double *P = r->cat, *lP = P + (K + 1), *Q = lP + (K + 1), *lQ = Q + (K + 1);
  double *ge = lQ + (K + 1);
  memset(r->cnt, 0, (size_t)V * sizeof *r->cnt);
  for (int64_t k = 0; k < K; k++)
    if (r->cnt[ids[k]]++)
      return ref_fail("the sparse reverse KL / JSD: a duplicate id in this row", (long long)row);
  memset(ds, 0, (size_t)V * sizeof *ds);
  *l_out = 0.0;
  int64_t off = 0; /* log q of the columns off S, for log(1 - Q_S) */
  for (int64_t v = 0; v < V; v++)
    if (!r->cnt[v]) r->tp[off++] = r->logq[v];
  for (int64_t k = 0; k < K; k++) r->tp[off + k] = r->logq[ids[k]]; /* log q on S, after */
  int64_t n = K;
  if (pb->tail == KLJIT_TAIL_RENORM) {
    if (M == 0.0L) return 0; /* nothing, as the forward KL's RENORM */
    const double m = (double)M, log_m = log(m);
    const double log_qs = ref_lse(r->tp + off, K); /* log Q_S over the support itself */
    for (int64_t k = 0; k < K; k++) {
      P[k] = r->pk[k] / m;
      const double lp = pb->topk_values == KLJIT_TOPK_PROBS ? log(P[k] > pb->eps ? P[k] : pb->eps)
                                                            : vals[k] - log_m;
      lP[k] = lp > log_eps ? lp : log_eps;
      lQ[k] = r->logq[ids[k]] - log_qs;
      Q[k] = exp(lQ[k]);
    }
  } else { /* BUCKET: S, and the tail where a column lies off S */
    for (int64_t k = 0; k < K; k++) {
      P[k] = r->pk[k], lP[k] = r->lpk[k];
      Q[k] = r->q[ids[k]], lQ[k] = r->logq[ids[k]];
    }
    if (off > 0) {
      const double t = (double)(1.0L - M);
      P[K] = t > 0.0 ? t : 0.0;
      lP[K] = P[K] > pb->eps ? log(P[K]) : log_eps;
      lQ[K] = ref_lse(r->tp, off); /* log(1 - Q_S), summed off S */
      Q[K] = exp(lQ[K]);
      n = K + 1;
    }
  }
  *l_out = ref_div_categories(pb, n, P, lP, Q, lQ, ge);
  for (int64_t k = 0; k < K; k++) ds[ids[k]] = Q[k] * ge[k];
  if (n == K + 1)
    for (int64_t v = 0; v < V; v++)
      if (!r->cnt[v]) ds[v] = r->q[v] * ge[K];
  return 0;
}

/* Sparse teacher row ids[K], vals[K]: loss *l and ds. Nonzero when the row cannot be computed. */
static int ref_row_sparse(const kljit_problem *pb, const int64_t *ids, const double *vals,
                          const ref_row *r, int64_t row, double *ds, double *l_out) {
  const int64_t V = pb->vocab, K = pb->topk;
  const double log_eps = log(pb->eps);
  long double M = 0.0L;
  for (int64_t k = 0; k < K; k++) {
    if (pb->topk_values == KLJIT_TOPK_PROBS) {
      r->pk[k] = vals[k];
      r->lpk[k] = log(vals[k] > pb->eps ? vals[k] : pb->eps);
    } else {
      r->pk[k] = exp(vals[k]);
      r->lpk[k] = vals[k] > log_eps ? vals[k] : log_eps;
    }
    M += r->pk[k];
  }
  if (!ref_is_forward(pb)) return ref_row_sparse_div(pb, ids, vals, r, row, M, ds, l_out);
  if (pb->tail == KLJIT_TAIL_RENORM) {
    if (M == 0.0L) {
      memset(ds, 0, (size_t)V * sizeof *ds);
      *l_out = 0.0;
      return 0;
    }
    const double m = (double)M, log_m = log(m);
    for (int64_t k = 0; k < K; k++) {
      r->pk[k] /= m;
      if (pb->topk_values == KLJIT_TOPK_PROBS) {
        r->lpk[k] = log(r->pk[k] > pb->eps ? r->pk[k] : pb->eps);
      } else {
        const double lp = vals[k] - log_m;
        r->lpk[k] = lp > log_eps ? lp : log_eps;
      }
    }
    M = 1.0L;
  }
  long double l = 0.0L;
  for (int64_t v = 0; v < V; v++) ds[v] = (double)M * r->q[v];
  for (int64_t k = 0; k < K; k++) {
    ds[ids[k]] -= r->pk[k];
    if (r->pk[k] != 0.0) l += (long double)r->pk[k] * (r->lpk[k] - r->logq[ids[k]]);
  }
  if (pb->tail == KLJIT_TAIL_BUCKET) {
    const double t = (double)(1.0L - M);
    memset(r->cnt, 0, (size_t)V * sizeof *r->cnt);
    long double Q = 0.0L;
    for (int64_t k = 0; k < K; k++) {
      r->cnt[ids[k]]++;
      Q += r->q[ids[k]];
    }
    /* 1 - Q_S = (q mass off S) - (extra occurrences of duplicated ids), the first part as a
     * log-sum-exp of log q over the ids outside S rather than as 1 - (a sum close to 1). */
    int64_t off = 0, dup = 0;
    long double dup_q = 0.0L;
    for (int64_t v = 0; v < V; v++) {
      if (r->cnt[v] == 0) r->tp[off++] = r->logq[v];
      if (r->cnt[v] > 1) {
        dup++;
        dup_q += (long double)(r->cnt[v] - 1) * r->q[v];
      }
    }
    if (t > 0.0 && off > 0) {
      double log_1mq = ref_lse(r->tp, off); /* log sum_{v not in S} q_v */
      double one_minus_q = exp(log_1mq);
      if (dup > 0) {
        one_minus_q = (double)((long double)one_minus_q - dup_q);
        if (!(one_minus_q > 0.0))
          return ref_fail("BUCKET: 1 - Q_S <= 0 (duplicate ids in this row)", (long long)row);
        log_1mq = log(one_minus_q);
      }
      l += (long double)t * (log(t) - log_1mq);
      const double ratio = exp(log(t) - log_1mq); /* t / (1 - Q_S) */
      /* d(1 - Q_S)/ds_v = -q_v (c_v - Q_S); for c_v >= 1 write c_v - Q_S as (c_v - 1) +
       * (1 - Q_S) so a nearly complete support loses no digits. */
      for (int64_t v = 0; v < V; v++) {
        const double f = r->cnt[v] == 0 ? -(double)Q : (double)(r->cnt[v] - 1) + one_minus_q;
        ds[v] += ratio * r->q[v] * f;
      }
    }
  }
  *l_out = (double)l;
  return 0;
}

/* Rows go through in blocks of RB: each W row (and dW row) is then streamed once per block
 * rather than once per row, which is what makes the oracle usable at V ~ 1.5e5. */
enum { REF_MAX_BLOCK_ROWS = 16 };
static int64_t ref_block_rows(int64_t V, int64_t asked) {
  /* Two RB x V double buffers of at most 64 MiB, unless the caller asks. */
  const int64_t rb = asked > 0 ? asked : ((int64_t)1 << 22) / V;
  return rb < 1 ? 1 : rb > REF_MAX_BLOCK_ROWS ? REF_MAX_BLOCK_ROWS : rb;
}

int ref_compute(const ref_inputs *in, ref_outputs *out) {
  if (ref_validate(in, out)) return 1;
  const kljit_problem *pb = in->pb;
  const int64_t N = in->rows, H = pb->hidden, V = pb->vocab;
  const int64_t RB = ref_block_rows(V, in->block_rows);
  const int64_t K = pb->teacher == KLJIT_TEACHER_SPARSE_TOPK ? pb->topk : 0;
  const double T =
      pb->temperature_mode == KLJIT_TEMPERATURE_RUNTIME ? in->temperature : pb->temperature;
  const double t2 = (pb->flags & KLJIT_FLAG_SCALE_T_SQUARED) ? T * T : 1.0;
  const int none = pb->reduction == KLJIT_REDUCTION_NONE;

  int64_t kept = 0;
  for (int64_t i = 0; i < N; i++)
    if (!in->labels || in->labels[i] != pb->ignore_index) kept++;
  /* kept = 0 makes every row ignored, so c is never used; 0 keeps it finite anyway. */
  double c = 1.0;
  if (pb->reduction == KLJIT_REDUCTION_BATCHMEAN) c = kept ? 1.0 / (double)kept : 0.0;
  if (pb->reduction == KLJIT_REDUCTION_MEAN) c = kept ? 1.0 / ((double)kept * (double)V) : 0.0;

  const double ws = pb->soft_weight, wh = pb->hard_weight;
  const int64_t Ht = pb->teacher_hidden;
  const int64_t tld = pb->teacher_ld     ? pb->teacher_ld
                      : pb->teacher_vocab ? pb->teacher_vocab
                                          : V;
  double *zb = malloc((size_t)(RB * V) * sizeof(double)); /* z, then log q: [RB,V] */
  double *gb = malloc((size_t)(RB * V) * sizeof(double)); /* dl/ds, then G:  [RB,V] */
  ref_row r;
  r.q = malloc((size_t)V * sizeof(double));
  r.tp = malloc((size_t)V * sizeof(double));
  r.zc = malloc((size_t)V * sizeof(double));
  r.dc = malloc((size_t)V * sizeof(double));
  r.p = malloc((size_t)V * sizeof(double));
  r.lp = malloc((size_t)V * sizeof(double));
  r.tz = malloc((size_t)V * sizeof(double));
  r.cnt = malloc((size_t)V * sizeof(int32_t));
  r.pk = malloc((size_t)(K ? K : 1) * sizeof(double));
  r.lpk = malloc((size_t)(K ? K : 1) * sizeof(double));
  r.cat = malloc((size_t)(5 * (K + 1)) * sizeof(double));
  int rc = 0;
  if (!zb || !gb || !r.q || !r.tp || !r.cnt || !r.pk || !r.lpk || !r.zc || !r.dc || !r.p ||
      !r.lp || !r.tz || !r.cat)
    rc = ref_fail("out of host memory for V", (long long)V);

  if (rc == 0 && out->dw) memset(out->dw, 0, (size_t)(V * H) * sizeof(double));
  if (rc == 0 && out->db) memset(out->db, 0, (size_t)V * sizeof(double));
  if (rc == 0 && out->dx) memset(out->dx, 0, (size_t)(N * H) * sizeof(double));
  long double total = 0.0L, total_soft = 0.0L, total_hard = 0.0L;
  int keep[REF_MAX_BLOCK_ROWS];
  for (int64_t i0 = 0; i0 < N && rc == 0; i0 += RB) {
    const int64_t nb = N - i0 < RB ? N - i0 : RB;
    for (int64_t k = 0; k < nb; k++)
      keep[k] = !in->labels || in->labels[i0 + k] != pb->ignore_index;
    /* z = x W^T + b for the block, W row by W row. */
    for (int64_t v = 0; v < V; v++) {
      const double *w_v = in->w + v * H;
      const double b_v = in->b ? in->b[v] : 0.0;
      for (int64_t k = 0; k < nb; k++)
        if (keep[k]) zb[k * V + v] = ref_dot(in->x + (i0 + k) * H, w_v, H) + b_v;
    }
    for (int64_t k = 0; k < nb && rc == 0; k++) {
      const int64_t i = i0 + k;
      double *G = gb + k * V;
      if (!keep[k]) {
        if (out->row_loss) out->row_loss[i] = 0.0;
        memset(G, 0, (size_t)V * sizeof(double));
        continue;
      }
      r.logq = zb + k * V;
      const double cap = pb->softcap;
      for (int64_t v = 0; v < V; v++) {
        const double z = r.logq[v], ch = cap > 0.0 ? cosh(z / cap) : 1.0;
        r.zc[v] = ref_softcap(z, cap);
        r.dc[v] = 1.0 / (ch * ch);
        r.logq[v] = r.zc[v] / T;
      }
      const double lse = ref_lse(r.logq, V);
      for (int64_t v = 0; v < V; v++) {
        r.logq[v] -= lse;
        r.q[v] = exp(r.logq[v]);
      }
      double l = 0.0;
      if (K) {
        rc = ref_row_sparse(pb, in->ids + i * K, in->vals + i * K, &r, i, G, &l);
      } else {
        const double *t = in->teacher ? in->teacher + i * tld : NULL;
        if (pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN) { /* the columns [0, V) of zt */
          const double *xt = in->teacher_x + i * Ht;
          for (int64_t v = 0; v < V; v++)
            r.tz[v] = ref_dot(xt, in->teacher_w + v * Ht, Ht) + (in->teacher_b ? in->teacher_b[v]
                                                                               : 0.0);
          t = r.tz;
        }
        ref_teacher_dense(pb, t, T, &r);
        l = ref_row_dense(pb, &r, G);
      }
      /* CE on z' at temperature 1 (label smoothing ls, z-loss zl); its softmax only where it
       * is weighted */
      double ce = 0.0, lse1 = 0.0;
      const double ls = pb->label_smoothing, zl = pb->z_loss;
      const int64_t y = wh != 0.0 ? in->labels[i] : -1;
      if (wh != 0.0) {
        lse1 = ref_lse(r.zc, V);
        long double zsum = 0.0L;
        for (int64_t v = 0; v < V; v++) zsum += r.zc[v];
        ce = lse1 - (1.0 - ls) * r.zc[y] - ls / (double)V * (double)zsum + zl * lse1 * lse1;
      }
      const double wr = in->row_weights ? in->row_weights[i] : 1.0;
      const double soft = wr * ws * t2 * l, hard = wr * wh * ce;
      const double row_loss = soft + hard;
      if (out->row_loss) out->row_loss[i] = row_loss;
      total += row_loss;
      total_soft += soft, total_hard += hard;
      double g = 1.0;
      if (in->grad_output) g = none ? in->grad_output[i] : in->grad_output[0];
      const double gs = g * c * wr * ws * t2 / T, gh = g * c * wr * wh;
      const double gz = 1.0 + 2.0 * zl * lse1, gu = ls / (double)V;
      for (int64_t v = 0; v < V; v++) {
        double d = gs * G[v];
        if (wh != 0.0) d += gh * (gz * exp(r.zc[v] - lse1) - (v == y ? 1.0 - ls : 0.0) - gu);
        G[v] = d * r.dc[v];
      }
    }
    if (rc) break;
    if (out->dlogits) memcpy(out->dlogits + i0 * V, gb, (size_t)(nb * V) * sizeof(double));
    /* dx = G W, dW = G^T X, db = column sums of G, again W row by W row. */
    for (int64_t v = 0; v < V; v++) {
      const double *w_v = in->w + v * H;
      double *dw_v = out->dw ? out->dw + v * H : NULL;
      for (int64_t k = 0; k < nb; k++) {
        const double gv = gb[k * V + v];
        if (out->db) out->db[v] += gv;
        if (gv == 0.0) continue;
        const double *x_i = in->x + (i0 + k) * H;
        double *dx_i = out->dx ? out->dx + (i0 + k) * H : NULL;
        if (dx_i)
          for (int64_t j = 0; j < H; j++) dx_i[j] += gv * w_v[j];
        if (dw_v)
          for (int64_t j = 0; j < H; j++) dw_v[j] += gv * x_i[j];
      }
    }
  }
  free(zb), free(gb), free(r.q), free(r.tp), free(r.cnt), free(r.pk), free(r.lpk);
  free(r.zc), free(r.dc), free(r.p), free(r.lp), free(r.tz), free(r.cat);
  if (rc) return rc;
  out->loss = (double)(c * total);
  out->loss_soft = (double)(c * total_soft);
  out->loss_hard = (double)(c * total_hard);
  out->rows_kept = kept;
  return 0;
}

/* ---- inputs for the TVD tests ------------------------------------------------------------ */

/* The value of dtype `dt` next to x (x rounded to dt) in direction dir (+1 or -1); dir 0: x
 * rounded to dt. */
static double ref_step(double x, kljit_dtype dt, int dir) {
  double buf;
  host_store(&buf, dt, 0, x);
  const double from = host_load(&buf, dt, 0);
  if (!dir) return from;
  const double rel = dt == KLJIT_FP32 ? 0x1p-24 : dt == KLJIT_FP16 ? 0x1p-11 : 0x1p-8;
  for (double d = fabs(from) > 0.0 ? fabs(from) * rel : 0x1p-149; d < INFINITY; d *= 2.0) {
    host_store(&buf, dt, 0, from + dir * d);
    const double to = host_load(&buf, dt, 0);
    if (to != from) return to;
  }
  return from;
}

/* log p_v of the dense teacher row t at column v given the row's lse (the logits forms), as
 * ref_teacher_dense computes it before the eps floor. */
static double ref_logp(const kljit_problem *pb, double tv, double T, double lse_t) {
  if (pb->teacher == KLJIT_TEACHER_DENSE_PROBS) return log(tv);
  if (pb->teacher == KLJIT_TEACHER_DENSE_LOGPROBS) return tv;
  const double Tt = pb->teacher_temperature > 0.0 ? pb->teacher_temperature : T;
  return ref_softcap(tv, pb->teacher_softcap) / Tt - lse_t;
}

int64_t ref_separate_ties(const ref_inputs *in, double *teacher, kljit_dtype dtype,
                          double margin) {
  ref_outputs none;
  memset(&none, 0, sizeof none);
  if (ref_validate(in, &none)) return -1;
  const kljit_problem *pb = in->pb;
  if (pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN || pb->teacher == KLJIT_TEACHER_SPARSE_TOPK) {
    ref_fail("ref_separate_ties takes the dense array forms only", pb->teacher);
    return -1;
  }
  const int64_t V = pb->vocab, H = pb->hidden;
  const int64_t tld = pb->teacher_ld ? pb->teacher_ld : pb->teacher_vocab ? pb->teacher_vocab : V;
  const double T =
      pb->temperature_mode == KLJIT_TEMPERATURE_RUNTIME ? in->temperature : pb->temperature;
  const double Tt = pb->teacher_temperature > 0.0 ? pb->teacher_temperature : T;
  double *logq = malloc((size_t)V * sizeof(double)), *tp = malloc((size_t)V * sizeof(double));
  if (!logq || !tp) {
    free(logq), free(tp);
    ref_fail("out of host memory for V", (long long)V);
    return -1;
  }
  int64_t left = 0;
  for (int64_t i = 0; i < in->rows; i++) {
    if (in->labels && in->labels[i] == pb->ignore_index) continue;
    for (int64_t v = 0; v < V; v++) {
      const double z = ref_dot(in->x + i * H, in->w + v * H, H) + (in->b ? in->b[v] : 0.0);
      logq[v] = ref_softcap(z, pb->softcap) / T;
    }
    const double lse = ref_lse(logq, V);
    for (int64_t v = 0; v < V; v++) logq[v] -= lse;
    double *t = teacher + i * tld;
    /* a few passes: moving one logit moves the row's lse, which every column sees */
    int64_t close = 0;
    for (int pass = 0; pass < 8; pass++) {
      double lse_t = 0.0;
      if (pb->teacher == KLJIT_TEACHER_DENSE_LOGITS) {
        for (int64_t v = 0; v < V; v++) tp[v] = ref_softcap(t[v], pb->teacher_softcap) / Tt;
        lse_t = ref_lse(tp, V);
      }
      close = 0;
      for (int64_t v = 0; v < V; v++) {
        double lp = ref_logp(pb, t[v], T, lse_t);
        if (!(lp > -INFINITY) || fabs(lp - logq[v]) >= margin) continue;
        close++;
        const int dir = lp >= logq[v] ? 1 : -1; /* away from q, on p's side */
        /* the value whose log p is 2 margins from log q (the logits by the local slope of
         * the cap; the lse held), then whole steps of the dtype until it is a margin away */
        const double want = logq[v] + 2.0 * dir * margin;
        double x = pb->teacher == KLJIT_TEACHER_DENSE_PROBS      ? exp(want)
                   : pb->teacher == KLJIT_TEACHER_DENSE_LOGPROBS ? want
                                                                 : t[v];
        if (pb->teacher == KLJIT_TEACHER_DENSE_LOGITS) {
          const double c = pb->teacher_softcap, th = c > 0.0 ? tanh(t[v] / c) : 0.0;
          x += (want - lp) * Tt / fmax(1.0 - th * th, 1e-3);
        }
        x = ref_step(x, dtype, 0);
        for (int k = 0; k < 64 && fabs(ref_logp(pb, x, T, lse_t) - logq[v]) < 1.5 * margin; k++)
          x = ref_step(x, dtype, dir);
        t[v] = x;
      }
      if (!close) break;
    }
    left += close;
  }
  free(logq), free(tp);
  return left;
}

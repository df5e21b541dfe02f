/* SPDX-License-Identifier: Apache-2.0 */
/* unit_ref.c — tests of the CPU reference (the oracle of every GPU test) and of host_dtype.
 *
 * The reference is checked against things that do not share its code: values derived by hand
 * in closed form, central finite differences of its own loss (every gradient, every teacher
 * form and tail mode, with and without bias, ignored rows, T != 1, all reductions), identities
 * between forms that describe the same distribution, and the fp16/bf16 rounding rules.
 * Shapes are small (N <= 6, H <= 8, V <= 8) so that every case runs in milliseconds.
 * One executable per area (the harness convention) makes this file longer than most; the
 * host_dtype cases at the end are the natural piece to split off if it grows further.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "host_dtype.h"
#include "ref.h"

/* MAXTLD: a padded teacher's row stride; MAXHT: the online teacher's hidden size. */
enum { MAXN = 6, MAXH = 8, MAXV = 8, MAXK = 8, MAXTLD = 12, MAXHT = 4 };

/* One small problem with every input the reference may read. */
typedef struct prob {
  kljit_problem pb;
  int64_t n;
  double x[MAXN * MAXH], w[MAXV * MAXH], b[MAXV];
  double teacher[MAXN * MAXTLD];
  double tx[MAXN * MAXHT], tw[MAXTLD * MAXHT], tb[MAXTLD]; /* DENSE_HIDDEN */
  int64_t ids[MAXN * MAXK];
  double vals[MAXN * MAXK];
  int64_t labels[MAXN];
  double gout[MAXN];
  double rw[MAXN]; /* row weights, with has_rw */
  int has_labels, has_gout, has_rw;
  double runtime_t;
  int64_t block_rows;
} prob;

typedef struct result {
  double loss, soft, hard; /* the loss and its two parts */
  int64_t kept;
  double row_loss[MAXN], dx[MAXN * MAXH], dw[MAXV * MAXH], db[MAXV], dl[MAXN * MAXV];
} result;

static void prob_init(prob *p, int64_t n, int64_t h, int64_t v, kljit_teacher_form form) {
  memset(p, 0, sizeof *p);
  p->pb = (kljit_problem)KLJIT_PROBLEM_INIT;
  p->pb.hidden = h;
  p->pb.vocab = v;
  p->pb.teacher = form;
  p->pb.reduction = KLJIT_REDUCTION_SUM;
  p->n = n;
  p->runtime_t = 1.0;
}

/* Runs the reference with every output requested, all poisoned first (all-ones bytes are a NaN
 * double) so an output the reference forgets to write cannot pass as a stale zero. */
static int run(const prob *p, result *r) {
  memset(r, 0xff, sizeof *r);
  const ref_inputs in = {
      .pb = &p->pb, .rows = p->n, .x = p->x, .w = p->w,
      .b = (p->pb.flags & KLJIT_FLAG_BIAS) ? p->b : NULL,
      .labels = p->has_labels ? p->labels : NULL, .teacher = p->teacher, .ids = p->ids,
      .vals = p->vals, .temperature = p->runtime_t, .grad_output = p->has_gout ? p->gout : NULL,
      .block_rows = p->block_rows, .teacher_x = p->tx, .teacher_w = p->tw,
      .teacher_b = (p->pb.flags & KLJIT_FLAG_TEACHER_BIAS) ? p->tb : NULL,
      .row_weights = p->has_rw ? p->rw : NULL};
  ref_outputs out = {.loss = NAN, .row_loss = r->row_loss, .dx = r->dx, .dw = r->dw,
                     .db = r->db, .dlogits = r->dl, .rows_kept = -1};
  const int rc = ref_compute(&in, &out);
  r->loss = out.loss;
  r->soft = out.loss_soft, r->hard = out.loss_hard;
  r->kept = out.rows_kept;
  return rc;
}

/* got[i] ~ k * want[i] for i < n; prints the first mismatch. */
static int near_arr(const char *what, const double *got, const double *want, int64_t n, double k,
                    double atol, double rtol) {
  for (int64_t i = 0; i < n; i++) {
    const double w = k * want[i];
    if (!(fabs(got[i] - w) <= atol + rtol * fabs(w))) {
      fprintf(stderr, "%s[%lld] = %.17g, want %.17g (atol %g, rtol %g)\n", what, (long long)i,
              got[i], w, atol, rtol);
      return 0;
    }
  }
  return 1;
}

/* a = (k_loss loss, k_row row_loss, k_grad gradients) of b, over the used parts. */
static int same_result(const prob *p, const result *a, const result *b, double k_loss,
                       double k_row, double k_grad, double rtol) {
  const int64_t n = p->n, h = p->pb.hidden, v = p->pb.vocab;
  /* atol: values that are 0 by the math come out as rounding noise of O(1e-16) terms. */
  const double atol = 1e-14;
  return near_arr("loss", &a->loss, &b->loss, 1, k_loss, atol, rtol) &&
         near_arr("row_loss", a->row_loss, b->row_loss, n, k_row, atol, rtol) &&
         near_arr("dx", a->dx, b->dx, n * h, k_grad, atol, rtol) &&
         near_arr("dw", a->dw, b->dw, v * h, k_grad, atol, rtol) &&
         near_arr("db", a->db, b->db, v, k_grad, atol, rtol) &&
         near_arr("dlogits", a->dl, b->dl, n * v, k_grad, atol, rtol);
}

/* ---- random inputs ---------------------------------------------------------------------- */

static void fill_normal(double *a, int64_t n, double sd, host_rng *g) {
  for (int64_t i = 0; i < n; i++) a[i] = sd * host_normal(g);
}

/* softmax(z / t) of one row into p, and its log into lp (either may be NULL). */
static void softmax_row(const double *z, int64_t v, double t, double *p, double *lp) {
  double mx = -INFINITY, sum = 0.0;
  for (int64_t j = 0; j < v; j++) mx = fmax(mx, z[j] / t);
  for (int64_t j = 0; j < v; j++) sum += exp(z[j] / t - mx);
  for (int64_t j = 0; j < v; j++) {
    if (p) p[j] = exp(z[j] / t - mx) / sum;
    if (lp) lp[j] = z[j] / t - mx - log(sum);
  }
}

/* K distinct ids (a random permutation's prefix) with probabilities of total mass `mass`. */
static void sparse_row(int64_t v, int64_t k, double mass, host_rng *g, int64_t *ids, double *pv) {
  int64_t perm[MAXV];
  for (int64_t j = 0; j < v; j++) perm[j] = j;
  for (int64_t j = v - 1; j > 0; j--) {
    const int64_t r = (int64_t)(host_uniform(g) * (double)(j + 1));
    const int64_t t = perm[j];
    perm[j] = perm[r];
    perm[r] = t;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < k; j++) {
    ids[j] = perm[j];
    pv[j] = 0.05 + host_uniform(g);
    sum += pv[j];
  }
  for (int64_t j = 0; j < k; j++) pv[j] *= mass / sum;
}

/* The columns and the row stride of the dense teacher (kljit.h: teacher_vocab, teacher_ld). */
static int64_t teacher_cols(const kljit_problem *pb) {
  return pb->teacher_vocab ? pb->teacher_vocab : pb->vocab;
}
static int64_t teacher_ld(const kljit_problem *pb) {
  return pb->teacher_ld ? pb->teacher_ld : teacher_cols(pb);
}

/* Random x, W, b and a teacher in p->pb.teacher's form. The dense teacher has a zero (or -inf)
 * entry and, for PROBS, a row whose mass is 0.8; the sparse teacher has a zero value in row 0
 * and a duplicated id in the last row, so those paths are differentiated too. A padded dense
 * teacher's columns past V hold values that would dominate the row if they were read. */
static void fill_problem(prob *p, host_rng *g) {
  const int64_t n = p->n, h = p->pb.hidden, v = p->pb.vocab, k = p->pb.topk;
  const int64_t ld = teacher_ld(&p->pb);
  fill_normal(p->x, n * h, 1.0, g);
  fill_normal(p->w, v * h, 0.5, g);
  fill_normal(p->b, v, 0.5, g);
  for (int64_t i = 0; i < n; i++) {
    double *t = p->teacher + i * ld;
    for (int64_t j = v; j < ld; j++)
      t[j] = p->pb.teacher == KLJIT_TEACHER_DENSE_PROBS ? 0.9 : 40.0;
    switch (p->pb.teacher) {
      case KLJIT_TEACHER_DENSE_LOGITS: fill_normal(t, v, 1.5, g); break;
      case KLJIT_TEACHER_DENSE_HIDDEN: {
        const int64_t ht = p->pb.teacher_hidden, vt = teacher_cols(&p->pb);
        fill_normal(p->tx + i * ht, ht, 1.0, g);
        if (i == 0) {
          fill_normal(p->tw, vt * ht, 0.8, g);
          fill_normal(p->tb, vt, 0.5, g);
        }
        break;
      }
      case KLJIT_TEACHER_DENSE_PROBS: {
        double z[MAXV];
        fill_normal(z, v, 1.5, g);
        softmax_row(z, v, 1.0, t, NULL);
        if (i == 0) t[1] = 0.0;
        if (i == 2)
          for (int64_t j = 0; j < v; j++) t[j] *= 0.8;
        break;
      }
      case KLJIT_TEACHER_DENSE_LOGPROBS: {
        double z[MAXV];
        fill_normal(z, v, 1.5, g);
        softmax_row(z, v, 1.0, NULL, t);
        if (i == 0) t[1] = -INFINITY;
        break;
      }
      case KLJIT_TEACHER_SPARSE_TOPK: {
        double pv[MAXK];
        sparse_row(v, k, 0.55 + 0.4 * host_uniform(g), g, p->ids + i * k, pv);
        if (i == 0) pv[k - 1] = 0.0;
        if (i == n - 1 && k > 1) p->ids[i * k + 1] = p->ids[i * k];
        for (int64_t j = 0; j < k; j++)
          p->vals[i * k + j] = p->pb.topk_values == KLJIT_TOPK_PROBS ? pv[j] : log(pv[j]);
        break;
      }
    }
  }
}

/* ---- finite differences ----------------------------------------------------------------- */

/* The scalar whose gradient the reference returns: g * loss, or sum_i g_i row_loss_i (NONE). */
static double objective(const prob *p) {
  result r;
  if (run(p, &r)) return NAN;
  if (p->pb.reduction != KLJIT_REDUCTION_NONE) return (p->has_gout ? p->gout[0] : 1.0) * r.loss;
  double s = 0.0;
  for (int64_t i = 0; i < p->n; i++) s += (p->has_gout ? p->gout[i] : 1.0) * r.row_loss[i];
  return s;
}

/* Central differences of objective() wrt every element of a[0..n), against the analytic d.
 * Step 1e-6: the truncation error (h^2/6 f''' ~ 1e-13) and the cancellation error
 * (eps |f| / h ~ 1e-10 for |f| ~ 1) are both far below the tolerance. Tolerance 1e-6 relative
 * plus 1e-8 absolute: the absolute part covers gradients that are ~0, where only that
 * cancellation noise is left; a wrong formula is off by far more than either. */
static int fd_check(prob *p, double *a, int64_t n, const double *d, const char *what,
                    const char *label) {
  const double h = 1e-6;
  for (int64_t j = 0; j < n; j++) {
    const double saved = a[j];
    a[j] = saved + h;
    const double fp = objective(p);
    a[j] = saved - h;
    const double fm = objective(p);
    a[j] = saved;
    const double fd = (fp - fm) / (2.0 * h);
    if (!(fabs(fd - d[j]) <= 1e-8 + 1e-6 * fabs(d[j]))) {
      fprintf(stderr, "%s: %s[%lld] = %.12g, finite difference %.12g\n", label, what,
              (long long)j, d[j], fd);
      return 0;
    }
  }
  return 1;
}

static int check_gradients(prob *p, const char *label) {
  const int64_t n = p->n, h = p->pb.hidden, v = p->pb.vocab;
  result r;
  if (run(p, &r)) {
    fprintf(stderr, "%s: ref_compute failed\n", label);
    return 0;
  }
  if (!fd_check(p, p->x, n * h, r.dx, "dx", label)) return 0;
  if (!fd_check(p, p->w, v * h, r.dw, "dw", label)) return 0;
  if ((p->pb.flags & KLJIT_FLAG_BIAS) && !fd_check(p, p->b, v, r.db, "db", label)) return 0;
  /* dlogits is the G the others are built from: db = column sums of G, dx = G W. */
  for (int64_t c = 0; c < v; c++) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += r.dl[i * v + c];
    if (!near_arr("db vs sum of dlogits", &r.db[c], &s, 1, 1.0, 1e-15, 1e-12)) return 0;
  }
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < h; j++) {
      double s = 0.0;
      for (int64_t c = 0; c < v; c++) s += r.dl[i * v + c] * p->w[c * h + j];
      if (!near_arr("dx vs dlogits W", &r.dx[i * h + j], &s, 1, 1.0, 1e-15, 1e-12)) return 0;
    }
  if (!isfinite(r.loss)) fprintf(stderr, "%s: loss %g\n", label, r.loss);
  return isfinite(r.loss);
}

/* Every combination of bias, reduction and temperature setup for one teacher form / tail:
 *   setup 0: T = 1, no labels;
 *   setup 1: T = 1.7 with T^2 scaling, row 1 ignored (ignore_index -100), DENSE_LOGITS with
 *            teacher_temperature 0 (= T);
 *   setup 2: runtime T = 0.6 (the plan's 3.0 must be ignored), ignore_index 3 on rows 0, 2. */
static int fd_sweep(kljit_teacher_form form, kljit_tail tail, kljit_topk_values values) {
  static const kljit_reduction reds[4] = {KLJIT_REDUCTION_SUM, KLJIT_REDUCTION_BATCHMEAN,
                                          KLJIT_REDUCTION_MEAN, KLJIT_REDUCTION_NONE};
  for (int bias = 0; bias < 2; bias++)
    for (int ri = 0; ri < 4; ri++)
      for (int setup = 0; setup < 3; setup++) {
        prob p;
        prob_init(&p, 4, 5, 7, form);
        p.pb.topk = 4;
        p.pb.tail = tail;
        p.pb.topk_values = values;
        p.pb.reduction = reds[ri];
        p.pb.teacher_temperature = 1.3;
        if (bias) p.pb.flags |= KLJIT_FLAG_BIAS;
        host_rng g = {(uint64_t)(1000 * form + 100 * tail + 10 * values + 4 * setup + ri)};
        fill_problem(&p, &g);
        p.has_gout = 1;
        p.gout[0] = 0.7;
        if (reds[ri] == KLJIT_REDUCTION_NONE)
          for (int64_t i = 0; i < p.n; i++) p.gout[i] = 3.0 * host_uniform(&g) - 1.0;
        if (setup == 1) {
          p.pb.temperature = 1.7;
          p.pb.flags |= KLJIT_FLAG_SCALE_T_SQUARED;
          p.pb.teacher_temperature = 0.0;
          p.has_labels = 1;
          for (int64_t i = 0; i < p.n; i++) p.labels[i] = i == 1 ? -100 : i;
        } else if (setup == 2) {
          p.pb.temperature_mode = KLJIT_TEMPERATURE_RUNTIME;
          p.pb.temperature = 3.0;
          p.runtime_t = 0.6;
          p.pb.ignore_index = 3;
          p.has_labels = 1;
          for (int64_t i = 0; i < p.n; i++) p.labels[i] = (i == 0 || i == 2) ? 3 : -100;
        }
        char label[128];
        snprintf(label, sizeof label, "form %d tail %d values %d bias %d reduction %d setup %d",
                 form, tail, values, bias, reds[ri], setup);
        if (!check_gradients(&p, label)) return TH_FAIL;
      }
  return TH_PASS;
}

static int gradients_match_finite_differences_dense_probs(void) {
  return fd_sweep(KLJIT_TEACHER_DENSE_PROBS, KLJIT_TAIL_NONE, KLJIT_TOPK_PROBS);
}
static int gradients_match_finite_differences_dense_logprobs(void) {
  return fd_sweep(KLJIT_TEACHER_DENSE_LOGPROBS, KLJIT_TAIL_NONE, KLJIT_TOPK_PROBS);
}
static int gradients_match_finite_differences_dense_logits(void) {
  return fd_sweep(KLJIT_TEACHER_DENSE_LOGITS, KLJIT_TAIL_NONE, KLJIT_TOPK_PROBS);
}
static int gradients_match_finite_differences_sparse_tail_none(void) {
  return fd_sweep(KLJIT_TEACHER_SPARSE_TOPK, KLJIT_TAIL_NONE, KLJIT_TOPK_PROBS);
}
static int gradients_match_finite_differences_sparse_tail_renorm(void) {
  return fd_sweep(KLJIT_TEACHER_SPARSE_TOPK, KLJIT_TAIL_RENORM, KLJIT_TOPK_PROBS);
}
static int gradients_match_finite_differences_sparse_tail_bucket(void) {
  return fd_sweep(KLJIT_TEACHER_SPARSE_TOPK, KLJIT_TAIL_BUCKET, KLJIT_TOPK_PROBS);
}
static int gradients_match_finite_differences_sparse_logprob_values(void) {
  const kljit_tail tails[3] = {KLJIT_TAIL_NONE, KLJIT_TAIL_RENORM, KLJIT_TAIL_BUCKET};
  for (int t = 0; t < 3; t++)
    if (fd_sweep(KLJIT_TEACHER_SPARSE_TOPK, tails[t], KLJIT_TOPK_LOGPROBS) != TH_PASS)
      return TH_FAIL;
  return TH_PASS;
}

/* ---- closed forms ----------------------------------------------------------------------- */

/* W = 0, b = 0: q = 1/V whatever x is, so a one-hot teacher costs -log(1/V) = log V per row and
 * G[i,v] = 1/V - [v = y_i] (SUM, T = 1). */
static int one_hot_teacher_with_uniform_logits_costs_log_v(void) {
  prob p;
  prob_init(&p, 3, 2, 5, KLJIT_TEACHER_DENSE_PROBS);
  p.pb.flags |= KLJIT_FLAG_BIAS;
  host_rng g = {7};
  fill_normal(p.x, 6, 1.0, &g);
  const int64_t y[3] = {4, 0, 4};
  for (int i = 0; i < 3; i++) p.teacher[i * 5 + y[i]] = 1.0;
  result r;
  TH_CHECK(run(&p, &r) == 0);
  /* 1e-15 relative: a few roundings of O(1) doubles separate the two sides. */
  TH_NEAR(r.loss, 3.0 * log(5.0), 0, 1e-15);
  for (int i = 0; i < 3; i++) TH_NEAR(r.row_loss[i], log(5.0), 0, 1e-15);
  for (int v = 0; v < 5; v++) {
    double db = 0.0, dw[2] = {0.0, 0.0};
    for (int i = 0; i < 3; i++) {
      const double gv = 0.2 - (v == y[i]);
      TH_NEAR(r.dl[i * 5 + v], gv, 1e-16, 1e-15);
      db += gv;
      dw[0] += gv * p.x[i * 2];
      dw[1] += gv * p.x[i * 2 + 1];
    }
    TH_NEAR(r.db[v], db, 1e-15, 1e-14);
    TH_NEAR(r.dw[v * 2], dw[0], 1e-15, 1e-14);
    TH_NEAR(r.dw[v * 2 + 1], dw[1], 1e-15, 1e-14);
  }
  for (int j = 0; j < 6; j++) TH_CHECK(r.dx[j] == 0.0); /* dx = G W and W = 0 */
  p.pb.reduction = KLJIT_REDUCTION_BATCHMEAN;
  TH_CHECK(run(&p, &r) == 0);
  TH_NEAR(r.loss, log(5.0), 0, 1e-15);
  return TH_PASS;
}

/* Teacher = student = uniform: KL 0 and no gradient at all. */
static int uniform_teacher_with_uniform_logits_costs_zero(void) {
  prob p;
  prob_init(&p, 2, 3, 6, KLJIT_TEACHER_DENSE_PROBS);
  host_rng g = {8};
  fill_normal(p.x, 6, 1.0, &g);
  for (int j = 0; j < 12; j++) p.teacher[j] = 1.0 / 6.0;
  result r;
  TH_CHECK(run(&p, &r) == 0);
  /* 1e-15: the sum of six (1/6)(log(1/6) - log(1/6)) terms, each exact or one ulp off. */
  TH_NEAR(r.loss, 0.0, 1e-15, 0);
  for (int j = 0; j < 12; j++) TH_NEAR(r.dl[j], 0.0, 1e-16, 0);
  for (int j = 0; j < 18; j++) TH_NEAR(r.dw[j], 0.0, 1e-15, 0);
  return TH_PASS;
}

/* Two classes, H = 1, x = 1, z = (a, 0), p = (1/4, 3/4). With s = z/T = (log 3, 0),
 * q = (3/4, 1/4) and l = 1/4 log(1/3) + 3/4 log 3 = (1/2) log 3; dl/ds = q - p = (1/2, -1/2),
 * G = (q - p)/T, dx = G W = a G_0, dw = G x = G. T = 1 takes a = log 3, T = 2 takes a = 2 log 3
 * (G = (1/4, -1/4)); T^2 multiplies the loss and G by 4. */
static int two_class(double T, int runtime, int t_squared) {
  prob p;
  prob_init(&p, 1, 1, 2, KLJIT_TEACHER_DENSE_PROBS);
  p.x[0] = 1.0;
  p.w[0] = T * log(3.0);
  p.w[1] = 0.0;
  p.teacher[0] = 0.25;
  p.teacher[1] = 0.75;
  if (runtime) {
    p.pb.temperature_mode = KLJIT_TEMPERATURE_RUNTIME;
    p.pb.temperature = 1.0;
    p.runtime_t = T;
  } else {
    p.pb.temperature = T;
  }
  if (t_squared) p.pb.flags |= KLJIT_FLAG_SCALE_T_SQUARED;
  const double k = t_squared ? T * T : 1.0;
  result r;
  TH_CHECK(run(&p, &r) == 0);
  /* 1e-14 relative: log 3 and the exponentials carry a few ulps each. */
  TH_NEAR(r.loss, k * 0.5 * log(3.0), 0, 1e-14);
  TH_NEAR(r.dl[0], k * 0.5 / T, 1e-15, 1e-14);
  TH_NEAR(r.dl[1], -k * 0.5 / T, 1e-15, 1e-14);
  TH_NEAR(r.dx[0], k * 0.5 / T * T * log(3.0), 1e-15, 1e-14);
  TH_NEAR(r.dw[0], k * 0.5 / T, 1e-15, 1e-14);
  TH_NEAR(r.dw[1], -k * 0.5 / T, 1e-15, 1e-14);
  return TH_PASS;
}

static int two_class_problem_matches_hand_values_at_t1_and_t2(void) {
  /* (T, runtime temperature, T^2 flag) */
  const int bad = two_class(1.0, 0, 0) || two_class(2.0, 0, 0) || two_class(2.0, 0, 1) ||
                  two_class(2.0, 1, 0) || two_class(2.0, 1, 1);
  return bad ? TH_FAIL : TH_PASS;
}

/* Teacher logits zt with p = softmax(zt / Tt) = (1/4, 3/4) in the two-class problem above:
 * Tt = 1 with zt = (0, log 3); Tt = 0 means T, so with T = 2 zt = (0, 2 log 3). */
static int dense_teacher_logits_use_the_teacher_temperature_or_t(void) {
  for (int c = 0; c < 2; c++) {
    prob p;
    prob_init(&p, 1, 1, 2, KLJIT_TEACHER_DENSE_LOGITS);
    const double T = c == 0 ? 1.0 : 2.0;
    p.pb.temperature = T;
    p.pb.teacher_temperature = c == 0 ? 1.0 : 0.0;
    p.x[0] = 1.0;
    p.w[0] = T * log(3.0);
    p.teacher[0] = 0.0;
    p.teacher[1] = T * log(3.0);
    result r;
    TH_CHECK(run(&p, &r) == 0);
    TH_NEAR(r.loss, 0.5 * log(3.0), 0, 1e-14); /* as two_class */
  }
  return TH_PASS;
}

/* Every row ignored: loss 0, rows_kept 0 and every gradient exactly 0 (not NaN from 0/0), for
 * each reduction and for a dense and a sparse teacher, even with garbage in those rows. */
static int all_rows_ignored_gives_zero_loss_and_gradients(void) {
  const kljit_reduction reds[4] = {KLJIT_REDUCTION_SUM, KLJIT_REDUCTION_BATCHMEAN,
                                   KLJIT_REDUCTION_MEAN, KLJIT_REDUCTION_NONE};
  for (int form = 0; form < 2; form++)
    for (int ri = 0; ri < 4; ri++) {
      prob p;
      prob_init(&p, 3, 4, 6,
                form ? KLJIT_TEACHER_SPARSE_TOPK : KLJIT_TEACHER_DENSE_PROBS);
      p.pb.topk = 3;
      p.pb.tail = KLJIT_TAIL_BUCKET;
      p.pb.reduction = reds[ri];
      p.pb.flags |= KLJIT_FLAG_BIAS;
      host_rng g = {(uint64_t)(50 + ri)};
      fill_problem(&p, &g);
      p.has_labels = 1;
      for (int i = 0; i < 3; i++) p.labels[i] = -100;
      p.ids[0] = -1, p.teacher[0] = NAN; /* ignored rows are never read */
      result r;
      TH_CHECK(run(&p, &r) == 0);
      TH_CHECK(r.loss == 0.0 && r.kept == 0);
      for (int j = 0; j < 3; j++) TH_CHECK(r.row_loss[j] == 0.0);
      for (int j = 0; j < 3 * 4; j++) TH_CHECK(r.dx[j] == 0.0);
      for (int j = 0; j < 6 * 4; j++) TH_CHECK(r.dw[j] == 0.0);
      for (int j = 0; j < 6; j++) TH_CHECK(r.db[j] == 0.0);
      for (int j = 0; j < 3 * 6; j++) TH_CHECK(r.dl[j] == 0.0);
    }
  return TH_PASS;
}

/* p = (0, 1/2, 1/2, 0) against q = 1/4: l = log(1/2) + log 4 = log 2, finite (0 log 0 = 0),
 * given as probabilities, as log-probabilities with -inf, and as a sparse row with a 0 value. */
static int zero_teacher_probabilities_contribute_zero_log_zero(void) {
  for (int form = 0; form < 3; form++) {
    prob p;
    prob_init(&p, 1, 1, 4,
              form == 0   ? KLJIT_TEACHER_DENSE_PROBS
              : form == 1 ? KLJIT_TEACHER_DENSE_LOGPROBS
                          : KLJIT_TEACHER_SPARSE_TOPK);
    p.x[0] = 1.0;
    const double pt[4] = {0.0, 0.5, 0.5, 0.0};
    for (int v = 0; v < 4; v++) p.teacher[v] = form == 1 ? log(pt[v]) : pt[v];
    p.pb.topk = 3;
    p.ids[0] = 1, p.ids[1] = 3, p.ids[2] = 2;
    p.vals[0] = 0.5, p.vals[1] = 0.0, p.vals[2] = 0.5;
    result r;
    TH_CHECK(run(&p, &r) == 0);
    TH_NEAR(r.loss, log(2.0), 0, 1e-15);
    for (int v = 0; v < 4; v++) TH_NEAR(r.dl[v], 0.25 - pt[v], 1e-16, 1e-15);
  }
  return TH_PASS;
}

/* eps floors p inside the log only: p = (1e-5, 1 - 1e-5) with eps = 1e-3 against q = 1/2
 * gives l = 1e-5 log(1e-3) + (1 - 1e-5) log(1 - 1e-5) + log 2, in all four representations. */
static int teacher_probabilities_below_eps_are_floored_inside_the_log(void) {
  const double pt[2] = {1e-5, 1.0 - 1e-5};
  const double want = pt[0] * log(1e-3) + pt[1] * log(pt[1]) + log(2.0);
  for (int c = 0; c < 4; c++) {
    prob p;
    prob_init(&p, 1, 1, 2, c < 2 ? KLJIT_TEACHER_DENSE_PROBS : KLJIT_TEACHER_SPARSE_TOPK);
    if (c == 1) p.pb.teacher = KLJIT_TEACHER_DENSE_LOGPROBS;
    p.pb.eps = 1e-3;
    p.pb.topk = 2;
    p.pb.topk_values = c == 3 ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
    p.x[0] = 1.0;
    for (int v = 0; v < 2; v++) {
      const double t = (c == 1 || c == 3) ? log(pt[v]) : pt[v];
      p.teacher[v] = t;
      p.ids[v] = v;
      p.vals[v] = t;
    }
    result r;
    TH_CHECK(run(&p, &r) == 0);
    TH_NEAR(r.loss, want, 0, 1e-14); /* a few roundings; the floor itself moves it by 5e-5 */
  }
  return TH_PASS;
}

/* Same rows, four reductions: SUM = kept BATCHMEAN = kept V MEAN = NONE's sum of row losses,
 * the same for the gradients (NONE with grad_output NULL = ones), row losses unchanged. */
static int reductions_agree_up_to_their_scale(void) {
  result r[4];
  prob p;
  const kljit_reduction reds[4] = {KLJIT_REDUCTION_SUM, KLJIT_REDUCTION_BATCHMEAN,
                                   KLJIT_REDUCTION_MEAN, KLJIT_REDUCTION_NONE};
  for (int ri = 0; ri < 4; ri++) {
    prob_init(&p, 4, 3, 7, KLJIT_TEACHER_DENSE_LOGITS);
    p.pb.reduction = reds[ri];
    p.pb.temperature = 1.5;
    host_rng g = {11};
    fill_problem(&p, &g);
    p.has_labels = 1;
    for (int i = 0; i < 4; i++) p.labels[i] = i == 2 ? -100 : 1;
    TH_CHECK(run(&p, &r[ri]) == 0);
    TH_CHECK(r[ri].kept == 3);
  }
  /* 1e-13: one extra division or multiplication by 3 or 21 on each side. */
  TH_CHECK(same_result(&p, &r[0], &r[1], 3.0, 1.0, 3.0, 1e-13));
  TH_CHECK(same_result(&p, &r[0], &r[2], 21.0, 1.0, 21.0, 1e-13));
  TH_CHECK(same_result(&p, &r[0], &r[3], 1.0, 1.0, 1.0, 1e-13));
  TH_CHECK(r[0].row_loss[2] == 0.0);
  return TH_PASS;
}

/* The reference walks rows in blocks; the block size changes no bit of any output (the sums
 * over rows run in row order either way), here across blocks of 1, 2, 4 and automatic. */
static int results_do_not_depend_on_the_block_size(void) {
  result r[4];
  prob p;
  prob_init(&p, 5, 3, 6, KLJIT_TEACHER_SPARSE_TOPK);
  p.pb.topk = 2;
  p.pb.tail = KLJIT_TAIL_BUCKET;
  p.pb.flags = KLJIT_FLAG_BIAS;
  host_rng g = {13};
  fill_problem(&p, &g);
  p.has_labels = 1;
  for (int i = 0; i < 5; i++) p.labels[i] = i == 1 ? -100 : 0;
  const int64_t blocks[4] = {1, 2, 4, 0};
  for (int b = 0; b < 4; b++) {
    p.block_rows = blocks[b];
    TH_CHECK(run(&p, &r[b]) == 0);
  }
  const size_t d = sizeof(double);
  for (int b = 1; b < 4; b++) {
    TH_CHECK(r[b].loss == r[0].loss);
    TH_CHECK(memcmp(r[b].row_loss, r[0].row_loss, 5 * d) == 0);
    TH_CHECK(memcmp(r[b].dx, r[0].dx, 5 * 3 * d) == 0);
    TH_CHECK(memcmp(r[b].dw, r[0].dw, 6 * 3 * d) == 0);
    TH_CHECK(memcmp(r[b].db, r[0].db, 6 * d) == 0);
    TH_CHECK(memcmp(r[b].dl, r[0].dl, 5 * 6 * d) == 0);
  }
  return TH_PASS;
}

/* KLJIT_FLAG_SCALE_T_SQUARED multiplies the loss, each row loss and every gradient by T^2. */
static int t_squared_flag_scales_loss_and_gradients(void) {
  result r[2];
  prob p;
  for (int f = 0; f < 2; f++) {
    prob_init(&p, 3, 4, 6, KLJIT_TEACHER_SPARSE_TOPK);
    p.pb.topk = 3;
    p.pb.tail = KLJIT_TAIL_BUCKET;
    p.pb.temperature = 2.5;
    p.pb.flags = KLJIT_FLAG_BIAS | (f ? KLJIT_FLAG_SCALE_T_SQUARED : 0u);
    host_rng g = {12};
    fill_problem(&p, &g);
    TH_CHECK(run(&p, &r[f]) == 0);
  }
  TH_CHECK(same_result(&p, &r[1], &r[0], 6.25, 6.25, 6.25, 1e-14)); /* one more rounding */
  return TH_PASS;
}

/* ---- identities between forms ----------------------------------------------------------- */

/* A problem in `form` whose teacher is dense teacher logits zt at temperature tt, converted. */
static void dense_pair(prob *p, kljit_teacher_form form, const prob *src, double tt) {
  *p = *src;
  p->pb.teacher = form;
  const int64_t v = p->pb.vocab;
  for (int64_t i = 0; i < p->n; i++) {
    double *t = p->teacher + i * v;
    if (form == KLJIT_TEACHER_DENSE_PROBS) softmax_row(src->teacher + i * v, v, tt, t, NULL);
    if (form == KLJIT_TEACHER_DENSE_LOGPROBS) softmax_row(src->teacher + i * v, v, tt, NULL, t);
  }
}

static int dense_probs_logprobs_and_logits_agree(void) {
  prob lg, pr, lp;
  prob_init(&lg, 4, 5, 7, KLJIT_TEACHER_DENSE_LOGITS);
  lg.pb.temperature = 1.3;
  lg.pb.teacher_temperature = 0.8;
  lg.pb.flags = KLJIT_FLAG_BIAS | KLJIT_FLAG_SCALE_T_SQUARED;
  lg.pb.reduction = KLJIT_REDUCTION_BATCHMEAN;
  host_rng g = {21};
  fill_problem(&lg, &g);
  dense_pair(&pr, KLJIT_TEACHER_DENSE_PROBS, &lg, 0.8);
  dense_pair(&lp, KLJIT_TEACHER_DENSE_LOGPROBS, &lg, 0.8);
  result a, b, c;
  TH_CHECK(run(&lg, &a) == 0 && run(&pr, &b) == 0 && run(&lp, &c) == 0);
  /* 1e-12: p reaches the reference through different exp/log roundings (~1e-16 each), and the
   * KL is a difference of O(1) terms that can cancel to O(1e-2). */
  TH_CHECK(same_result(&lg, &a, &b, 1, 1, 1, 1e-12));
  TH_CHECK(same_result(&lg, &a, &c, 1, 1, 1, 1e-12));
  return TH_PASS;
}

/* Sparse rows over V = 7 with K ids and a dense-probs twin: the dense row holds p on the
 * support (divided by M when `renorm`) and 0 elsewhere. */
static void sparse_and_dense(prob *sp, prob *de, int64_t k, double mass, kljit_tail tail,
                             int renorm, uint64_t seed) {
  prob_init(sp, 4, 5, 7, KLJIT_TEACHER_SPARSE_TOPK);
  sp->pb.topk = (int32_t)k;
  sp->pb.tail = tail;
  sp->pb.temperature = 1.4;
  sp->pb.flags = KLJIT_FLAG_BIAS;
  host_rng g = {seed};
  fill_problem(sp, &g);
  for (int64_t i = 0; i < sp->n; i++) sparse_row(7, k, mass, &g, sp->ids + i * k, sp->vals + i * k);
  *de = *sp;
  de->pb.teacher = KLJIT_TEACHER_DENSE_PROBS;
  memset(de->teacher, 0, sizeof de->teacher);
  for (int64_t i = 0; i < sp->n; i++) {
    double m = 0.0;
    for (int64_t j = 0; j < k; j++) m += sp->vals[i * k + j];
    for (int64_t j = 0; j < k; j++)
      de->teacher[i * 7 + sp->ids[i * k + j]] = sp->vals[i * k + j] / (renorm ? m : 1.0);
  }
}

/* The sparse problem against its dense twin (or, with `vs_tail_none`, against itself with
 * TAIL_NONE). 1e-12: both sides sum the same terms in another order (and RENORM divides by an
 * M that rounds differently), O(1e-16) each. */
static int sparse_identity(int64_t k, double mass, kljit_tail tail, int renorm, int vs_tail_none,
                           uint64_t seed) {
  prob sp, de;
  result a, b;
  sparse_and_dense(&sp, &de, k, mass, tail, renorm, seed);
  if (vs_tail_none) de = sp, de.pb.tail = KLJIT_TAIL_NONE;
  TH_CHECK(run(&sp, &a) == 0 && run(&de, &b) == 0);
  TH_CHECK(same_result(&sp, &a, &b, 1, 1, 1, 1e-12));
  return TH_PASS;
}

static int sparse_tail_none_with_full_support_equals_dense_probs(void) {
  return sparse_identity(7, 0.9, KLJIT_TAIL_NONE, 0, 0, 31); /* M = 0.9: sum p != 1 too */
}
static int sparse_tail_none_equals_dense_probs_padded_with_zeros(void) {
  return sparse_identity(3, 0.7, KLJIT_TAIL_NONE, 0, 0, 32);
}
static int sparse_tail_renorm_with_full_support_equals_tail_none_at_mass_one(void) {
  return sparse_identity(7, 1.0, KLJIT_TAIL_RENORM, 0, 1, 33);
}
static int sparse_tail_renorm_equals_dense_probs_of_the_renormalized_teacher(void) {
  return sparse_identity(3, 0.6, KLJIT_TAIL_RENORM, 1, 0, 34);
}
static int sparse_tail_bucket_with_full_support_equals_dense(void) {
  return sparse_identity(7, 1.0, KLJIT_TAIL_BUCKET, 0, 0, 35);
}

/* BUCKET is the KL between the coarsened distributions (p_S, 1 - M) and (q_S, 1 - Q_S), here
 * computed independently: W = I so z = x, q = softmax(x / T) by hand. G = (dl/ds) / T with
 * dl/ds = q - p on S and q (M - (1 - M) Q_S / (1 - Q_S)) off S. */
static int sparse_tail_bucket_is_the_kl_of_the_coarsened_distributions(void) {
  prob p;
  prob_init(&p, 1, 7, 7, KLJIT_TEACHER_SPARSE_TOPK);
  p.pb.topk = 3;
  p.pb.tail = KLJIT_TAIL_BUCKET;
  p.pb.temperature = 1.5;
  host_rng g = {41};
  fill_normal(p.x, 7, 2.0, &g);
  for (int v = 0; v < 7; v++) p.w[v * 7 + v] = 1.0;
  sparse_row(7, 3, 0.7, &g, p.ids, p.vals);
  double q[7], Q = 0.0, l = 0.0, on[7] = {0};
  softmax_row(p.x, 7, 1.5, q, NULL);
  for (int k = 0; k < 3; k++) {
    Q += q[p.ids[k]];
    l += p.vals[k] * log(p.vals[k] / q[p.ids[k]]);
    on[p.ids[k]] = p.vals[k] + 1.0; /* marks S; p_v + 1 keeps the value */
  }
  l += 0.3 * log(0.3 / (1.0 - Q));
  result r;
  TH_CHECK(run(&p, &r) == 0);
  /* 1e-12: 1 - Q and 1 - M cancel a little; everything else is a few roundings. */
  TH_NEAR(r.loss, l, 0, 1e-12);
  for (int v = 0; v < 7; v++) {
    const double ds = on[v] ? q[v] - (on[v] - 1.0) : q[v] * (0.7 - 0.3 * Q / (1.0 - Q));
    TH_NEAR(r.dl[v], ds / 1.5, 1e-15, 1e-12);
  }
  return TH_PASS;
}

/* Duplicate ids are separate terms: ids (1, 1) with (0.2, 0.3) against q = 1/3 gives
 * l = 0.2 log 0.2 + 0.3 log 0.3 + 0.5 log 3, not the merged 0.5 log 0.5 + 0.5 log 3. */
static int sparse_duplicate_ids_count_each_occurrence(void) {
  prob p;
  prob_init(&p, 1, 1, 3, KLJIT_TEACHER_SPARSE_TOPK);
  p.pb.topk = 2;
  p.x[0] = 1.0;
  p.ids[0] = 1, p.ids[1] = 1;
  p.vals[0] = 0.2, p.vals[1] = 0.3;
  result r;
  TH_CHECK(run(&p, &r) == 0);
  TH_NEAR(r.loss, 0.2 * log(0.2) + 0.3 * log(0.3) + 0.5 * log(3.0), 0, 1e-14);
  TH_NEAR(r.dl[0], 0.5 / 3.0, 1e-16, 1e-14); /* M q - p with M = 0.5 */
  TH_NEAR(r.dl[1], 0.5 / 3.0 - 0.5, 1e-16, 1e-14);
  return TH_PASS;
}

/* RENORM with M = 0: the row adds nothing to the loss or the gradients, yet it is a kept row
 * (its label is not ignore_index), so BATCHMEAN still divides by 2. */
static int renorm_row_with_zero_mass_contributes_nothing(void) {
  prob p;
  prob_init(&p, 2, 3, 5, KLJIT_TEACHER_SPARSE_TOPK);
  p.pb.topk = 2;
  p.pb.tail = KLJIT_TAIL_RENORM;
  p.pb.reduction = KLJIT_REDUCTION_BATCHMEAN;
  host_rng g = {51};
  fill_problem(&p, &g);
  p.vals[0] = 0.0, p.vals[1] = 0.0;
  result r;
  TH_CHECK(run(&p, &r) == 0);
  TH_CHECK(r.kept == 2 && r.row_loss[0] == 0.0);
  TH_CHECK(isfinite(r.row_loss[1]) && r.row_loss[1] != 0.0);
  TH_NEAR(r.loss, r.row_loss[1] / 2.0, 0, 1e-15);
  for (int j = 0; j < 5; j++) TH_CHECK(r.dl[j] == 0.0);
  for (int j = 0; j < 3; j++) TH_CHECK(r.dx[j] == 0.0);
  return TH_PASS;
}

/* The reference refuses what it cannot compute instead of returning garbage. */
static int ref_rejects_invalid_inputs(void) {
  prob p;
  result r;
  prob_init(&p, 2, 3, 5, KLJIT_TEACHER_SPARSE_TOPK);
  p.pb.topk = 2;
  host_rng g = {61};
  fill_problem(&p, &g);
  TH_CHECK(run(&p, &r) == 0); /* the baseline is valid */
  fprintf(stderr, "(the messages below are expected)\n");
  ref_outputs out = {0};
  TH_CHECK(ref_compute(NULL, &out) != 0);
  prob q = p;
  q.ids[3] = 5; /* == V */
  TH_CHECK(run(&q, &r) != 0);
  q = p, q.pb.tail = (kljit_tail)0;
  TH_CHECK(run(&q, &r) != 0);
  q = p, q.pb.topk_values = (kljit_topk_values)9;
  TH_CHECK(run(&q, &r) != 0);
  q = p, q.pb.teacher = (kljit_teacher_form)99;
  TH_CHECK(run(&q, &r) != 0);
  q = p, q.pb.reduction = (kljit_reduction)0;
  TH_CHECK(run(&q, &r) != 0);
  q = p, q.pb.temperature = 0.0;
  TH_CHECK(run(&q, &r) != 0);
  q = p, q.pb.temperature_mode = KLJIT_TEMPERATURE_RUNTIME, q.runtime_t = -1.0;
  TH_CHECK(run(&q, &r) != 0);
  q = p, q.pb.flags |= KLJIT_FLAG_BIAS, q.pb.eps = 0.0;
  TH_CHECK(run(&q, &r) != 0);
  /* A bias flag without a bias: run() passes b only with the flag, so call directly. */
  q = p, q.pb.flags |= KLJIT_FLAG_BIAS;
  const ref_inputs in = {.pb = &q.pb, .rows = 2, .x = p.x, .w = p.w, .ids = p.ids,
                         .vals = p.vals};
  TH_CHECK(ref_compute(&in, &out) != 0);
  /* the loss families: divergences the sparse support cannot define, CE without labels or with
   * a label outside [0, V), beta outside [0, 1], a teacher softcap on probabilities */
  q = p, q.pb.divergence = KLJIT_DIVERGENCE_REVERSE_KL;
  TH_CHECK(run(&q, &r) != 0);
  q = p, q.pb.divergence = KLJIT_DIVERGENCE_JSD, q.pb.beta = 0.5;
  TH_CHECK(run(&q, &r) != 0); /* TAIL_NONE takes the forward KL only */
  q.pb.tail = KLJIT_TAIL_BUCKET;
  q.ids[3] = (q.ids[2] + 1) % 5; /* the last row's duplicate (fill_problem) undone */
  TH_CHECK(run(&q, &r) == 0);
  q.ids[1] = q.ids[0]; /* a duplicate id: unspecified for the JSD */
  TH_CHECK(run(&q, &r) != 0);
  q = p, q.pb.divergence = KLJIT_DIVERGENCE_SKEW_FORWARD_KL, q.pb.skew_alpha = 0.3;
  TH_CHECK(run(&q, &r) != 0); /* TAIL_NONE: no skew KL either */
  q.pb.tail = KLJIT_TAIL_RENORM;
  q.ids[3] = (q.ids[2] + 1) % 5;
  TH_CHECK(run(&q, &r) == 0);
  q = p, q.pb.hard_weight = 1.0;
  TH_CHECK(run(&q, &r) != 0);
  q.has_labels = 1, q.labels[0] = 0, q.labels[1] = 5; /* == V */
  TH_CHECK(run(&q, &r) != 0);
  q.labels[1] = -100; /* ignored: never read */
  TH_CHECK(run(&q, &r) == 0);
  prob d;
  prob_init(&d, 2, 3, 5, KLJIT_TEACHER_DENSE_PROBS);
  fill_problem(&d, &g);
  TH_CHECK(run(&d, &r) == 0);
  prob e = d;
  e.pb.divergence = KLJIT_DIVERGENCE_JSD, e.pb.beta = 1.5;
  TH_CHECK(run(&e, &r) != 0);
  e = d, e.pb.teacher_softcap = 10.0;
  TH_CHECK(run(&e, &r) != 0);
  e = d, e.pb.teacher_vocab = 4; /* < V */
  TH_CHECK(run(&e, &r) != 0);
  e = d, e.pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN; /* teacher_hidden 0 */
  TH_CHECK(run(&e, &r) != 0);
  return TH_PASS;
}

/* ---- the loss families: divergences, CE mixing, softcaps, padded and online teachers ----- */

/* A divergence and its beta (JSD only). */
typedef struct family {
  kljit_divergence div;
  double beta;
} family;

/* Issue 29's additions: the skew KLs' alpha, label smoothing and z-loss on the CE (which
 * fd_family's setups 1 and 3 mix in), row weights. */
typedef struct extras {
  double alpha, ls, zl;
  int weights;
} extras;

/* Finite differences of one dense or sparse form under one divergence, in four setups:
 *   0: the divergence alone, T = 1, SUM, bias;
 *   1: T = 1.7 with T^2, BATCHMEAN, CE mixing (hard 0.6, soft 0.8) with row 1 ignored, student
 *      softcap 2 and, for teacher logits, teacher softcap 1.5 (caps small enough that tanh
 *      bends the logits of these inputs);
 *   2: runtime T = 0.6, NONE with per-row upstream gradients, a padded teacher (dense forms);
 *   3: MEAN, CE alone (soft weight 0), softcap 1. */
static int fd_family_all(kljit_teacher_form form, family f, extras x, kljit_tail tail,
                         kljit_topk_values values) {
  const int sparse = form == KLJIT_TEACHER_SPARSE_TOPK;
  for (int setup = 0; setup < 4; setup++) {
    prob p;
    prob_init(&p, 4, 5, 7, form);
    p.pb.divergence = f.div, p.pb.beta = f.beta, p.pb.skew_alpha = x.alpha;
    p.pb.label_smoothing = x.ls, p.pb.z_loss = x.zl;
    p.pb.topk = 4;
    p.pb.tail = tail;
    p.pb.topk_values = values;
    p.pb.teacher_temperature = 1.3;
    p.pb.teacher_hidden = form == KLJIT_TEACHER_DENSE_HIDDEN ? 3 : 0;
    if (form == KLJIT_TEACHER_DENSE_HIDDEN) p.pb.flags |= KLJIT_FLAG_TEACHER_BIAS;
    const int logits = form == KLJIT_TEACHER_DENSE_LOGITS || form == KLJIT_TEACHER_DENSE_HIDDEN;
    p.has_labels = 1;
    for (int64_t i = 0; i < p.n; i++) p.labels[i] = (3 * i + 1) % 7;
    if (setup == 0) p.pb.flags |= KLJIT_FLAG_BIAS;
    if (setup == 1) {
      p.pb.temperature = 1.7;
      p.pb.flags |= KLJIT_FLAG_SCALE_T_SQUARED;
      p.pb.reduction = KLJIT_REDUCTION_BATCHMEAN;
      p.pb.hard_weight = 0.6, p.pb.soft_weight = 0.8;
      p.pb.softcap = 2.0;
      if (logits) p.pb.teacher_softcap = 1.5;
      p.labels[1] = -100;
    } else if (setup == 2) {
      p.pb.temperature_mode = KLJIT_TEMPERATURE_RUNTIME;
      p.pb.temperature = 3.0;
      p.runtime_t = 0.6;
      p.pb.reduction = KLJIT_REDUCTION_NONE;
      if (!sparse) p.pb.teacher_vocab = 9;
      if (!sparse && form != KLJIT_TEACHER_DENSE_HIDDEN) p.pb.teacher_ld = 11;
    } else if (setup == 3) {
      p.pb.reduction = KLJIT_REDUCTION_MEAN;
      p.pb.hard_weight = 1.0, p.pb.soft_weight = 0.0;
      p.pb.softcap = 1.0;
    }
    host_rng g = {(uint64_t)(7000 + 100 * form + 10 * f.div + setup + 1000 * tail)};
    fill_problem(&p, &g);
    if (x.weights) { /* one row of weight 0 (it still counts as kept) */
      p.has_rw = 1;
      for (int64_t i = 0; i < p.n; i++) p.rw[i] = i == 2 ? 0.0 : 0.25 + 1.5 * host_uniform(&g);
    }
    if (sparse && f.div != KLJIT_DIVERGENCE_FORWARD_KL) { /* distinct ids: no duplicate row */
      double *vals = p.vals + (p.n - 1) * 4;
      sparse_row(7, 4, 0.8, &g, p.ids + (p.n - 1) * 4, vals);
      for (int64_t j = 0; values == KLJIT_TOPK_LOGPROBS && j < 4; j++) vals[j] = log(vals[j]);
    }
    p.has_gout = 1;
    p.gout[0] = 0.7;
    if (p.pb.reduction == KLJIT_REDUCTION_NONE)
      for (int64_t i = 0; i < p.n; i++) p.gout[i] = 3.0 * host_uniform(&g) - 1.0;
    char label[192];
    snprintf(label, sizeof label,
             "form %d tail %d values %d divergence %d beta %g alpha %g ls %g zl %g weights %d "
             "setup %d", form, tail, values, f.div, f.beta, x.alpha, x.ls, x.zl, x.weights,
             setup);
    if (!check_gradients(&p, label)) return TH_FAIL;
  }
  return TH_PASS;
}

static int fd_family_x(kljit_teacher_form form, family f, extras x) {
  return fd_family_all(form, f, x, KLJIT_TAIL_BUCKET, KLJIT_TOPK_PROBS);
}

static int fd_family_tail(kljit_teacher_form form, family f, kljit_tail tail,
                          kljit_topk_values values) {
  const extras none = {0.0, 0.0, 0.0, 0};
  return fd_family_all(form, f, none, tail, values);
}

static int fd_family(kljit_teacher_form form, family f) {
  return fd_family_tail(form, f, KLJIT_TAIL_BUCKET, KLJIT_TOPK_PROBS);
}

static int gradients_match_finite_differences_for_every_divergence_and_dense_form(void) {
  const family fams[4] = {{KLJIT_DIVERGENCE_FORWARD_KL, 0.0},
                          {KLJIT_DIVERGENCE_REVERSE_KL, 0.0},
                          {KLJIT_DIVERGENCE_JSD, 0.3},
                          {KLJIT_DIVERGENCE_JSD, 0.9}};
  const kljit_teacher_form forms[4] = {KLJIT_TEACHER_DENSE_PROBS, KLJIT_TEACHER_DENSE_LOGPROBS,
                                       KLJIT_TEACHER_DENSE_LOGITS, KLJIT_TEACHER_DENSE_HIDDEN};
  for (int fi = 0; fi < 4; fi++)
    for (int d = 0; d < 4; d++)
      if (fd_family(forms[fi], fams[d]) != TH_PASS) return TH_FAIL;
  return TH_PASS;
}

static int gradients_match_finite_differences_for_the_sparse_teacher_with_ce_and_softcap(void) {
  const family fwd = {KLJIT_DIVERGENCE_FORWARD_KL, 0.0};
  return fd_family(KLJIT_TEACHER_SPARSE_TOPK, fwd);
}

/* ---- the top-K teacher's reverse KL and JSD (issue 29): K + 1 categories or renormalized --- */

/* Finite differences of the sparse reverse KL, JSD and TVD, both tails and value forms,
 * through the four setups of fd_family (CE mixing, softcaps, T, every reduction; a zero value
 * in row 0). */
static int gradients_match_finite_differences_for_the_sparse_reverse_kl_and_jsd(void) {
  const family fams[4] = {{KLJIT_DIVERGENCE_REVERSE_KL, 0.0},
                          {KLJIT_DIVERGENCE_JSD, 0.3},
                          {KLJIT_DIVERGENCE_JSD, 0.9},
                          {KLJIT_DIVERGENCE_TVD, 0.0}};
  const kljit_tail tails[2] = {KLJIT_TAIL_BUCKET, KLJIT_TAIL_RENORM};
  for (int t = 0; t < 2; t++)
    for (int v = 0; v < 2; v++)
      for (int d = 0; d < 4; d++)
        if (fd_family_tail(KLJIT_TEACHER_SPARSE_TOPK, fams[d], tails[t],
                           v ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS) != TH_PASS)
          return TH_FAIL;
  return TH_PASS;
}

/* With the whole vocabulary on the support there is no tail category: BUCKET is the dense
 * divergence of p as given (mass 0.9 here) and RENORM that of p / M (Q_S = 1), every row, loss
 * and gradient. 1e-12: the same terms summed in another order. */
static int sparse_reverse_kl_and_jsd_with_full_support_equal_dense(void) {
  const family fams[2] = {{KLJIT_DIVERGENCE_REVERSE_KL, 0.0}, {KLJIT_DIVERGENCE_JSD, 0.4}};
  for (int tail = 0; tail < 2; tail++)
    for (int d = 0; d < 2; d++) {
      prob sp, de;
      const int renorm = tail == 1;
      sparse_and_dense(&sp, &de, 7, 0.9, renorm ? KLJIT_TAIL_RENORM : KLJIT_TAIL_BUCKET,
                       renorm, (uint64_t)(300 + 10 * tail + d));
      sp.pb.divergence = de.pb.divergence = fams[d].div;
      sp.pb.beta = de.pb.beta = fams[d].beta;
      result a, b;
      TH_CHECK(run(&sp, &a) == 0 && run(&de, &b) == 0);
      TH_CHECK(same_result(&sp, &a, &b, 1, 1, 1, 1e-12));
    }
  return TH_PASS;
}

/* The categories by hand: W = I, so z = x and q = softmax(x / T); support ids[3] of mass 0.7.
 * BUCKET compares (p_S, 0.3) with (q_S, 1 - Q_S), RENORM p_S / 0.7 with q_S / Q_S; then D and
 * G = (dD/ds) / T with dD/ds_v = Q'_v (g_c(v) - E) (kljit.h), against the reference, for the
 * divergence div with its parameter a (the JSD's beta, the skew KLs' alpha): the reverse KL
 * (g = log(Q / P)), the JSD (g = (1 - b) log(Q / m), m = b P + (1 - b) Q), TVD (g = sign(Q - P)
 * / 2), the skew forward KL (D = sum P log(P / m), m = a P + (1 - a) Q, g = -(1 - a) P / m) and
 * the skew reverse KL (D = sum Q log(Q / m), m = a Q + (1 - a) P, g = log(Q / m) - a Q / m). */
static int categories_by_hand(kljit_divergence div, double a, int tail, uint64_t seed) {
  prob p;
  prob_init(&p, 1, 7, 7, KLJIT_TEACHER_SPARSE_TOPK);
  p.pb.topk = 3;
  p.pb.tail = tail ? KLJIT_TAIL_RENORM : KLJIT_TAIL_BUCKET;
  p.pb.temperature = 1.5;
  p.pb.divergence = div;
  if (div == KLJIT_DIVERGENCE_JSD) p.pb.beta = a;
  else if (div == KLJIT_DIVERGENCE_SKEW_FORWARD_KL || div == KLJIT_DIVERGENCE_SKEW_REVERSE_KL)
    p.pb.skew_alpha = a;
  host_rng g = {seed};
  fill_normal(p.x, 7, 2.0, &g);
  for (int v = 0; v < 7; v++) p.w[v * 7 + v] = 1.0;
  sparse_row(7, 3, 0.7, &g, p.ids, p.vals);
  double q[7], Qs = 0.0;
  softmax_row(p.x, 7, 1.5, q, NULL);
  for (int k = 0; k < 3; k++) Qs += q[p.ids[k]];
  /* categories: 0..2 the support, 3 the tail (BUCKET only) */
  double P[4], Q[4], gc[4], D = 0.0, E = 0.0;
  const int n = tail ? 3 : 4;
  for (int k = 0; k < 3; k++) {
    P[k] = tail ? p.vals[k] / 0.7 : p.vals[k];
    Q[k] = tail ? q[p.ids[k]] / Qs : q[p.ids[k]];
  }
  P[3] = 0.3, Q[3] = 1.0 - Qs;
  for (int c = 0; c < n; c++) {
    if (div == KLJIT_DIVERGENCE_TVD) {
      gc[c] = Q[c] > P[c] ? 0.5 : Q[c] < P[c] ? -0.5 : 0.0;
      D += 0.5 * fabs(P[c] - Q[c]);
    } else if (div == KLJIT_DIVERGENCE_REVERSE_KL) {
      gc[c] = log(Q[c] / P[c]);
      D += Q[c] * gc[c];
    } else if (div == KLJIT_DIVERGENCE_JSD) {
      const double m = a * P[c] + (1 - a) * Q[c];
      gc[c] = (1 - a) * log(Q[c] / m);
      D += a * P[c] * log(P[c] / m) + (1 - a) * Q[c] * log(Q[c] / m);
    } else if (div == KLJIT_DIVERGENCE_SKEW_FORWARD_KL) {
      const double m = a * P[c] + (1 - a) * Q[c];
      gc[c] = -(1 - a) * P[c] / m;
      D += P[c] * log(P[c] / m);
    } else {
      const double m = a * Q[c] + (1 - a) * P[c];
      gc[c] = log(Q[c] / m) - a * Q[c] / m;
      D += Q[c] * log(Q[c] / m);
    }
    E += Q[c] * gc[c];
  }
  result r;
  TH_CHECK(run(&p, &r) == 0);
  /* 1e-11: 1 - Q_S and 0.3 = 1 - 0.7 cancel a little; the rest is a few roundings */
  TH_NEAR(r.loss, D, 0, 1e-11);
  for (int v = 0; v < 7; v++) {
    int on = -1;
    for (int k = 0; k < 3; k++)
      if (p.ids[k] == v) on = k;
    const double ds = on >= 0 ? Q[on] * (gc[on] - E) : tail ? 0.0 : q[v] * (gc[3] - E);
    TH_NEAR(r.dl[v], ds / 1.5, 1e-15, 1e-11);
  }
  return TH_PASS;
}

/* The reverse KL, the JSD(0.35) and TVD of the categories (categories_by_hand). */
static int sparse_reverse_kl_jsd_and_tvd_are_the_divergences_of_the_categories(void) {
  static const kljit_divergence divs[3] = {KLJIT_DIVERGENCE_REVERSE_KL, KLJIT_DIVERGENCE_JSD,
                                           KLJIT_DIVERGENCE_TVD};
  for (int tail = 0; tail < 2; tail++)
    for (int d = 0; d < 3; d++)
      if (categories_by_hand(divs[d], d == 1 ? 0.35 : 0.0, tail, (uint64_t)(43 + 3 * tail + d)) !=
          TH_PASS)
        return TH_FAIL;
  return TH_PASS;
}

/* The JSD's end points on the top-K teacher: beta = 1 is the reverse KL exactly; as beta -> 0,
 * JSD / beta tends to KL(P || Q) over the same categories, which for BUCKET is the forward KL's
 * BUCKET loss, and for RENORM the forward KL's RENORM loss plus log Q_S (the forward KL keeps q
 * over the whole vocabulary, kljit.h): at beta = 1e-5 within 1e-3. */
static int sparse_jsd_end_points_are_the_category_kls(void) {
  for (int tail = 0; tail < 2; tail++) {
    prob p;
    prob_init(&p, 3, 4, 7, KLJIT_TEACHER_SPARSE_TOPK);
    p.pb.topk = 3;
    p.pb.tail = tail ? KLJIT_TAIL_RENORM : KLJIT_TAIL_BUCKET;
    host_rng g = {(uint64_t)(91 + tail)};
    fill_problem(&p, &g);
    for (int64_t i = 0; i < p.n; i++) sparse_row(7, 3, 0.75, &g, p.ids + i * 3, p.vals + i * 3);
    result rev, j1, fwd, near;
    p.pb.divergence = KLJIT_DIVERGENCE_REVERSE_KL;
    TH_CHECK(run(&p, &rev) == 0);
    p.pb.divergence = KLJIT_DIVERGENCE_JSD, p.pb.beta = 1.0;
    TH_CHECK(run(&p, &j1) == 0);
    TH_CHECK(same_result(&p, &j1, &rev, 1.0, 1.0, 1.0, 0.0));
    p.pb.divergence = KLJIT_DIVERGENCE_FORWARD_KL, p.pb.beta = 0.0;
    TH_CHECK(run(&p, &fwd) == 0);
    p.pb.divergence = KLJIT_DIVERGENCE_JSD, p.pb.beta = 1e-5;
    TH_CHECK(run(&p, &near) == 0);
    TH_CHECK(fwd.loss > 1e-2); /* a real divergence, so the relative bound means something */
    if (tail == 0) {
      /* the loss element by element; G (whence dX, dW) as a whole: elements that nearly
       * cancel (|G| ~ 1e-3 of its norm) carry the O(beta) error relative to the norm */
      TH_CHECK(near_arr("loss", &near.loss, &fwd.loss, 1, 1e-5, 0, 1e-3));
      TH_CHECK(near_arr("row_loss", near.row_loss, fwd.row_loss, p.n, 1e-5, 0, 1e-3));
      double diff = 0.0, norm = 0.0;
      for (int64_t j = 0; j < p.n * 7; j++) {
        diff += (near.dl[j] - 1e-5 * fwd.dl[j]) * (near.dl[j] - 1e-5 * fwd.dl[j]);
        norm += 1e-10 * fwd.dl[j] * fwd.dl[j];
      }
      printf("BUCKET: JSD(1e-5) / 1e-5 against the forward KL: G relative error %.2e\n",
             sqrt(diff / norm));
      TH_CHECK(sqrt(diff / norm) <= 1e-3);
      continue;
    }
    /* RENORM: row by row, JSD / beta - forward = log Q_S, Q_S from z = W x by hand */
    for (int64_t i = 0; i < p.n; i++) {
      double z[MAXV], q[MAXV], qs = 0.0;
      for (int64_t v = 0; v < 7; v++) {
        z[v] = 0.0;
        for (int64_t j = 0; j < 4; j++) z[v] += p.x[i * 4 + j] * p.w[v * 4 + j];
      }
      softmax_row(z, 7, 1.0, q, NULL);
      for (int k = 0; k < 3; k++) qs += q[p.ids[i * 3 + k]];
      TH_NEAR(near.row_loss[i] / 1e-5, fwd.row_loss[i] + log(qs), 0, 1e-3);
    }
  }
  return TH_PASS;
}

/* The two-class problem of two_class(): p = (1/4, 3/4), q = (3/4, 1/4). By hand,
 * KL(q || p) = 3/4 log 3 + 1/4 log(1/3) = (1/2) log 3; with beta = 1/2, m = (1/2, 1/2) and
 * JSD = 1/2 KL(p || m) + 1/2 KL(q || m) = 1/4 log(1/2) + 3/4 log(3/2) (the two KLs are equal
 * by symmetry). dD/ds_0 = q_0 (g_0 - sum q g) with g = dD/dq: for the reverse KL
 * g = log(q / p) = (log 3, -log 3), sum q g = (1/2) log 3, so dD/ds_0 = 3/4 * (1/2) log 3. */
static int two_class_reverse_kl_and_jsd_match_hand_values(void) {
  for (int c = 0; c < 2; c++) {
    prob p;
    prob_init(&p, 1, 1, 2, KLJIT_TEACHER_DENSE_PROBS);
    p.x[0] = 1.0;
    p.w[0] = log(3.0);
    p.teacher[0] = 0.25;
    p.teacher[1] = 0.75;
    p.pb.divergence = c == 0 ? KLJIT_DIVERGENCE_REVERSE_KL : KLJIT_DIVERGENCE_JSD;
    p.pb.beta = c == 0 ? 0.0 : 0.5;
    result r;
    TH_CHECK(run(&p, &r) == 0);
    if (c == 0) {
      TH_NEAR(r.loss, 0.5 * log(3.0), 0, 1e-14);
      TH_NEAR(r.dl[0], 0.375 * log(3.0), 1e-15, 1e-14);
      TH_NEAR(r.dl[1], -0.375 * log(3.0), 1e-15, 1e-14);
    } else {
      TH_NEAR(r.loss, 0.25 * log(0.5) + 0.75 * log(1.5), 0, 1e-14);
      /* g = (1/2) log(q / m) = (1/2)(log(3/2), log(1/2)); dD/ds_0 = q_0 q_1 (g_0 - g_1) */
      TH_NEAR(r.dl[0], 0.1875 * 0.5 * log(3.0), 1e-15, 1e-14);
    }
  }
  return TH_PASS;
}

/* beta = 0 and 1 are the forward and reverse KL exactly (the Liger/TRL end points), and they
 * are the limits of JSD / beta and JSD / (1 - beta), loss and gradients: at a distance 1e-5
 * from the end point the scaled JSD is within 1e-3 of the KL (the error is O(beta)). */
static int jsd_tends_to_the_forward_and_reverse_kl_at_its_end_points(void) {
  for (int end = 0; end < 2; end++) {
    prob p;
    prob_init(&p, 3, 4, 6, KLJIT_TEACHER_DENSE_LOGITS);
    host_rng g = {(uint64_t)(81 + end)};
    fill_problem(&p, &g);
    result kl, at, near;
    p.pb.divergence = end ? KLJIT_DIVERGENCE_REVERSE_KL : KLJIT_DIVERGENCE_FORWARD_KL;
    TH_CHECK(run(&p, &kl) == 0);
    p.pb.divergence = KLJIT_DIVERGENCE_JSD;
    p.pb.beta = end;
    TH_CHECK(run(&p, &at) == 0);
    TH_CHECK(same_result(&p, &at, &kl, 1.0, 1.0, 1.0, 0.0));
    const double d = 1e-5;
    p.pb.beta = end ? 1.0 - d : d;
    TH_CHECK(run(&p, &near) == 0);
    TH_CHECK(kl.loss > 1e-2); /* a real divergence, so the relative bound means something */
    const double k = 1.0 / d;
    if (!same_result(&p, &near, &kl, 1.0 / k, 1.0 / k, 1.0 / k, 1e-3)) return TH_FAIL;
  }
  return TH_PASS;
}

/* With soft weight 0 and T = 1 the CE on labels is the forward KL against a one-hot teacher on
 * the label, loss and gradients; ignored rows drop out of both, and the weights are linear:
 * hard h, soft s gives h CE + s KL. */
static int hard_label_ce_is_the_forward_kl_of_a_one_hot_teacher_and_mixes_linearly(void) {
  prob ce, hot, kl, mix;
  prob_init(&ce, 4, 3, 6, KLJIT_TEACHER_DENSE_PROBS);
  ce.pb.flags |= KLJIT_FLAG_BIAS;
  ce.pb.reduction = KLJIT_REDUCTION_BATCHMEAN;
  host_rng g = {91};
  fill_problem(&ce, &g);
  kl = ce;
  ce.has_labels = 1;
  for (int i = 0; i < 4; i++) ce.labels[i] = i == 2 ? -100 : (5 * i + 2) % 6;
  hot = ce;
  memset(hot.teacher, 0, sizeof hot.teacher);
  for (int i = 0; i < 4; i++)
    if (i != 2) hot.teacher[i * 6 + ce.labels[i]] = 1.0;
  ce.pb.hard_weight = 1.0, ce.pb.soft_weight = 0.0;
  result rc, rh, rk, rm;
  TH_CHECK(run(&ce, &rc) == 0 && run(&hot, &rh) == 0);
  TH_CHECK(same_result(&ce, &rc, &rh, 1.0, 1.0, 1.0, 1e-13));
  TH_CHECK(rc.kept == 3 && rc.row_loss[2] == 0.0);
  kl.has_labels = 1;
  memcpy(kl.labels, ce.labels, sizeof kl.labels);
  mix = kl;
  mix.pb.hard_weight = 0.25, mix.pb.soft_weight = 2.0;
  TH_CHECK(run(&kl, &rk) == 0 && run(&mix, &rm) == 0);
  TH_NEAR(rm.loss, 0.25 * rc.loss + 2.0 * rk.loss, 0, 1e-13);
  for (int j = 0; j < 6 * 3; j++) TH_NEAR(rm.dw[j], 0.25 * rc.dw[j] + 2.0 * rk.dw[j], 1e-15, 1e-12);
  for (int j = 0; j < 4 * 3; j++) TH_NEAR(rm.dx[j], 0.25 * rc.dx[j] + 2.0 * rk.dx[j], 1e-15, 1e-12);
  return TH_PASS;
}

/* A teacher softcap c on logits zt is the plain logits form given c tanh(zt / c); a student
 * softcap of 1e6 is no cap at all to within (z / c)^2 ~ 1e-10; and logits up to |z| = 100 with
 * a cap of 30 stay finite, every |z'| <= 30, with gradients damped where tanh saturates. */
static int softcaps_cap_the_logits_before_the_temperature(void) {
  prob a;
  prob_init(&a, 3, 4, 6, KLJIT_TEACHER_DENSE_LOGITS);
  a.pb.temperature = 2.0;
  host_rng g = {93};
  fill_problem(&a, &g);
  for (int j = 0; j < 3 * 6; j++) a.teacher[j] *= 20.0; /* |zt| up to ~100 */
  prob b = a;
  a.pb.teacher_softcap = 30.0;
  for (int j = 0; j < 3 * 6; j++) b.teacher[j] = 30.0 * tanh(b.teacher[j] / 30.0);
  result ra, rb;
  TH_CHECK(run(&a, &ra) == 0 && run(&b, &rb) == 0);
  TH_CHECK(same_result(&a, &ra, &rb, 1.0, 1.0, 1.0, 1e-13));

  prob c = b;
  c.pb.softcap = 1e6;
  result rc;
  TH_CHECK(run(&c, &rc) == 0);
  TH_CHECK(same_result(&c, &rc, &rb, 1.0, 1.0, 1.0, 1e-8));

  prob big = b;
  for (int j = 0; j < 6 * 4; j++) big.w[j] *= 60.0; /* student logits of tens to ~100 */
  big.pb.softcap = 30.0;
  result rz;
  TH_CHECK(run(&big, &rz) == 0);
  TH_CHECK(isfinite(rz.loss) && rz.loss > 0.0);
  double zmax = 0.0;
  for (int i = 0; i < 3; i++)
    for (int v = 0; v < 6; v++) {
      double z = 0.0;
      for (int j = 0; j < 4; j++) z += big.x[i * 4 + j] * big.w[v * 4 + j];
      zmax = fmax(zmax, fabs(z));
      TH_CHECK(isfinite(rz.dl[i * 6 + v]));
    }
  TH_CHECK(zmax > 60.0);
  return check_gradients(&big, "softcap 30 with |z| up to 100") ? TH_PASS : TH_FAIL;
}

/* A padded teacher (teacher_vocab 10, teacher_ld 11 around V = 6) gives exactly the result of
 * its first V columns passed unpadded: the padding, which fill_problem makes large, is never
 * read, not even by the logits form's softmax. */
static int padded_teacher_columns_are_excluded(void) {
  const kljit_teacher_form forms[3] = {KLJIT_TEACHER_DENSE_PROBS, KLJIT_TEACHER_DENSE_LOGPROBS,
                                       KLJIT_TEACHER_DENSE_LOGITS};
  for (int fi = 0; fi < 3; fi++) {
    prob pad, flat;
    prob_init(&pad, 3, 4, 6, forms[fi]);
    pad.pb.teacher_vocab = 10, pad.pb.teacher_ld = 11;
    pad.pb.divergence = KLJIT_DIVERGENCE_JSD, pad.pb.beta = 0.4;
    host_rng g = {(uint64_t)(95 + fi)};
    fill_problem(&pad, &g);
    TH_CHECK(pad.teacher[11 + 7] != 0.0); /* row 1's padding is set */
    flat = pad;
    flat.pb.teacher_vocab = 0, flat.pb.teacher_ld = 0;
    for (int i = 0; i < 3; i++)
      memcpy(flat.teacher + i * 6, pad.teacher + i * 11, 6 * sizeof(double));
    result rp, rf;
    TH_CHECK(run(&pad, &rp) == 0 && run(&flat, &rf) == 0);
    TH_CHECK(same_result(&pad, &rp, &rf, 1.0, 1.0, 1.0, 0.0));
  }
  return TH_PASS;
}

/* The online teacher is the logits form of its head's logits zt = xt Wt^T + bt, of which only
 * the first V of Vt columns count. */
static int online_teacher_equals_the_logits_form_of_its_head(void) {
  prob on, off;
  prob_init(&on, 3, 4, 6, KLJIT_TEACHER_DENSE_HIDDEN);
  on.pb.teacher_hidden = 3, on.pb.teacher_vocab = 8;
  on.pb.flags |= KLJIT_FLAG_TEACHER_BIAS;
  on.pb.teacher_temperature = 1.5, on.pb.teacher_softcap = 4.0;
  on.pb.divergence = KLJIT_DIVERGENCE_REVERSE_KL;
  host_rng g = {99};
  fill_problem(&on, &g);
  off = on;
  off.pb.teacher = KLJIT_TEACHER_DENSE_LOGITS;
  off.pb.teacher_hidden = 0, off.pb.teacher_vocab = 0;
  off.pb.flags &= ~(uint32_t)KLJIT_FLAG_TEACHER_BIAS;
  for (int i = 0; i < 3; i++)
    for (int v = 0; v < 6; v++) {
      double z = on.tb[v];
      for (int j = 0; j < 3; j++) z += on.tx[i * 3 + j] * on.tw[v * 3 + j];
      off.teacher[i * 6 + v] = z;
    }
  result ron, roff;
  TH_CHECK(run(&on, &ron) == 0 && run(&off, &roff) == 0);
  /* 1e-13: the head's dot product runs in another order than the loop above */
  TH_CHECK(same_result(&on, &ron, &roff, 1.0, 1.0, 1.0, 1e-13));
  return TH_PASS;
}

/* ---- issue 29: TVD, the skew KLs, row weights, label smoothing, z-loss ------------------- */

/* TVD and the skew KLs (two alphas each) in every dense form, through fd_family's setups (CE
 * mixing, softcaps, T^2, padded teachers, every reduction). */
static int gradients_match_finite_differences_for_tvd_and_the_skew_kls(void) {
  const struct {
    family f;
    extras x;
  } fams[5] = {{{KLJIT_DIVERGENCE_TVD, 0.0}, {0.0, 0.0, 0.0, 0}},
               {{KLJIT_DIVERGENCE_SKEW_FORWARD_KL, 0.0}, {0.1, 0.0, 0.0, 0}},
               {{KLJIT_DIVERGENCE_SKEW_FORWARD_KL, 0.0}, {0.6, 0.0, 0.0, 0}},
               {{KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0.0}, {0.1, 0.0, 0.0, 0}},
               {{KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0.0}, {0.7, 0.0, 0.0, 0}}};
  const kljit_teacher_form forms[4] = {KLJIT_TEACHER_DENSE_PROBS, KLJIT_TEACHER_DENSE_LOGPROBS,
                                       KLJIT_TEACHER_DENSE_LOGITS, KLJIT_TEACHER_DENSE_HIDDEN};
  for (int fi = 0; fi < 4; fi++)
    for (int d = 0; d < 5; d++)
      if (fd_family_x(forms[fi], fams[d].f, fams[d].x) != TH_PASS) return TH_FAIL;
  return TH_PASS;
}

/* Row weights (one of them 0) on every setup, label smoothing and the z-loss on the setups with
 * CE, under divergences of each kind of gradient (sum(p) q - p; q (g - sum q g)). */
static int gradients_match_finite_differences_with_row_weights_label_smoothing_and_z_loss(void) {
  const struct {
    family f;
    extras x;
  } fams[4] = {{{KLJIT_DIVERGENCE_FORWARD_KL, 0.0}, {0.0, 0.1, 0.05, 1}},
               {{KLJIT_DIVERGENCE_JSD, 0.5}, {0.0, 1.0, 0.0, 1}},
               {{KLJIT_DIVERGENCE_TVD, 0.0}, {0.0, 0.3, 0.2, 1}},
               {{KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0.0}, {0.2, 0.0, 0.1, 1}}};
  const kljit_teacher_form forms[2] = {KLJIT_TEACHER_DENSE_PROBS, KLJIT_TEACHER_DENSE_LOGITS};
  for (int fi = 0; fi < 2; fi++)
    for (int d = 0; d < 4; d++)
      if (fd_family_x(forms[fi], fams[d].f, fams[d].x) != TH_PASS) return TH_FAIL;
  return TH_PASS;
}

/* Row weights (one of them 0) with the sparse teacher: the forward KL over every tail, the
 * reverse KL and the JSD over both category tails, both value forms, on fd_family's setups
 * (CE mixing, softcaps, T, every reduction). */
static int gradients_match_finite_differences_for_the_sparse_teacher_with_row_weights(void) {
  const family fams[3] = {{KLJIT_DIVERGENCE_FORWARD_KL, 0.0},
                          {KLJIT_DIVERGENCE_REVERSE_KL, 0.0},
                          {KLJIT_DIVERGENCE_JSD, 0.4}};
  const kljit_tail tails[3] = {KLJIT_TAIL_NONE, KLJIT_TAIL_BUCKET, KLJIT_TAIL_RENORM};
  const extras w = {0.0, 0.0, 0.0, 1};
  for (int d = 0; d < 3; d++)
    for (int t = d ? 1 : 0; t < 3; t++)
      for (int v = 0; v < 2; v++)
        if (fd_family_all(KLJIT_TEACHER_SPARSE_TOPK, fams[d], w, tails[t],
                          v ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS) != TH_PASS)
          return TH_FAIL;
  return TH_PASS;
}

/* two_class()'s p = (1/4, 3/4) and q = (3/4, 1/4) by hand. TVD = 1/2 (1/2 + 1/2) = 1/2, g =
 * (1/2, -1/2), sum q g = 1/4: dD/ds = (3/4 (1/2 - 1/4), 1/4 (-1/2 - 1/4)) = (3/16, -3/16). With
 * a = 1/2 both skew mixtures are m = (1/2, 1/2): the skew forward KL is 1/4 log(1/2) + 3/4
 * log(3/2) with g = -(1/2) p / m = (-1/4, -3/4); the skew reverse KL is 3/4 log(3/2) + 1/4
 * log(1/2) with g = log(q / m) - q / (2m) = (log(3/2) - 3/4, log(1/2) - 1/4). For two classes
 * dD/ds_0 = q_0 (g_0 - sum q g) = q_0 q_1 (g_0 - g_1) = -dD/ds_1. */
static int two_class_tvd_and_skew_kls_match_hand_values(void) {
  const kljit_divergence divs[3] = {KLJIT_DIVERGENCE_TVD, KLJIT_DIVERGENCE_SKEW_FORWARD_KL,
                                    KLJIT_DIVERGENCE_SKEW_REVERSE_KL};
  const double loss[3] = {0.5, 0.25 * log(0.5) + 0.75 * log(1.5),
                          0.75 * log(1.5) + 0.25 * log(0.5)};
  const double dg[3] = {1.0, 0.5, log(3.0) - 0.5}; /* g_0 - g_1 */
  for (int c = 0; c < 3; c++) {
    prob p;
    prob_init(&p, 1, 1, 2, KLJIT_TEACHER_DENSE_PROBS);
    p.x[0] = 1.0;
    p.w[0] = log(3.0);
    p.teacher[0] = 0.25;
    p.teacher[1] = 0.75;
    p.pb.divergence = divs[c];
    p.pb.skew_alpha = c ? 0.5 : 0.0;
    result r;
    TH_CHECK(run(&p, &r) == 0);
    TH_NEAR(r.loss, loss[c], 0, 1e-14);
    TH_NEAR(r.dl[0], 0.1875 * dg[c], 1e-15, 1e-14);
    TH_NEAR(r.dl[1], -0.1875 * dg[c], 1e-15, 1e-14);
  }
  return TH_PASS;
}

/* Alpha 0 is the forward and reverse KL exactly; near 1 the mixture is the divergence's first
 * argument and D vanishes like (1 - alpha)^2; in between the skew forward KL lies in
 * [0, -log(alpha) sum p] (m >= alpha p). TVD lies in [0, 1] for rows that sum to 1 and obeys
 * Pinsker's inequality TVD <= sqrt(KL / 2) row by row. */
static int skew_kls_end_points_and_bounds_and_pinsker_for_tvd(void) {
  for (int rev = 0; rev < 2; rev++) {
    prob p;
    prob_init(&p, 3, 4, 6, KLJIT_TEACHER_DENSE_LOGITS);
    host_rng g = {(uint64_t)(131 + rev)};
    fill_problem(&p, &g);
    result kl, at, near, tv;
    p.pb.divergence = rev ? KLJIT_DIVERGENCE_REVERSE_KL : KLJIT_DIVERGENCE_FORWARD_KL;
    TH_CHECK(run(&p, &kl) == 0);
    p.pb.divergence = rev ? KLJIT_DIVERGENCE_SKEW_REVERSE_KL : KLJIT_DIVERGENCE_SKEW_FORWARD_KL;
    p.pb.skew_alpha = 0.0;
    TH_CHECK(run(&p, &at) == 0);
    TH_CHECK(same_result(&p, &at, &kl, 1.0, 1.0, 1.0, 0.0));
    p.pb.skew_alpha = 1.0 - 1e-4;
    TH_CHECK(run(&p, &near) == 0);
    TH_CHECK(kl.loss > 1e-2 && fabs(near.loss) < 1e-7 * kl.loss);
    for (double a = 0.05; a < 1.0; a += 0.3) {
      p.pb.skew_alpha = a;
      TH_CHECK(run(&p, &at) == 0);
      for (int64_t i = 0; i < p.n; i++)
        TH_CHECK(at.row_loss[i] >= 0.0 && (rev || at.row_loss[i] <= -log(a) * (1.0 + 1e-12)));
    }
    p.pb.divergence = KLJIT_DIVERGENCE_TVD, p.pb.skew_alpha = 0.0;
    TH_CHECK(run(&p, &tv) == 0);
    for (int64_t i = 0; i < p.n && !rev; i++)
      TH_CHECK(tv.row_loss[i] > 0.0 && tv.row_loss[i] <= 1.0 &&
               tv.row_loss[i] <= sqrt(kl.row_loss[i] / 2.0));
  }
  return TH_PASS;
}

/* Label smoothing ls = 1 is the cross-entropy against the uniform target: the forward KL of a
 * uniform teacher plus its entropy log V, gradients equal; and the CE is linear in ls, loss and
 * gradients. */
static int label_smoothing_interpolates_the_label_and_the_uniform_target(void) {
  prob ce, uni;
  prob_init(&ce, 4, 3, 6, KLJIT_TEACHER_DENSE_PROBS);
  ce.pb.flags |= KLJIT_FLAG_BIAS;
  ce.pb.reduction = KLJIT_REDUCTION_BATCHMEAN;
  host_rng g = {141};
  fill_problem(&ce, &g);
  ce.has_labels = 1;
  for (int i = 0; i < 4; i++) ce.labels[i] = i == 1 ? -100 : (5 * i + 2) % 6;
  uni = ce;
  for (int j = 0; j < 4 * 6; j++) uni.teacher[j] = 1.0 / 6.0;
  ce.pb.hard_weight = 1.0, ce.pb.soft_weight = 0.0;
  result r0, r1, rh, ru;
  TH_CHECK(run(&ce, &r0) == 0);
  ce.pb.label_smoothing = 1.0;
  TH_CHECK(run(&ce, &r1) == 0 && run(&uni, &ru) == 0);
  for (int i = 0; i < 4; i++)
    TH_NEAR(r1.row_loss[i], i == 1 ? 0.0 : ru.row_loss[i] + log(6.0), 1e-15, 1e-13);
  TH_CHECK(near_arr("dlogits", r1.dl, ru.dl, 4 * 6, 1.0, 1e-15, 1e-12));
  ce.pb.label_smoothing = 0.3;
  TH_CHECK(run(&ce, &rh) == 0);
  TH_NEAR(rh.loss, 0.7 * r0.loss + 0.3 * r1.loss, 0, 1e-13);
  TH_NEAR(rh.hard, rh.loss, 0, 0); /* CE alone: all of it is the hard part */
  TH_CHECK(rh.soft == 0.0);
  for (int j = 0; j < 4 * 6; j++) TH_NEAR(rh.dl[j], 0.7 * r0.dl[j] + 0.3 * r1.dl[j], 1e-15, 1e-12);
  return TH_PASS;
}

/* With W = 0 the logits are the bias, so lse(z') = lse(b) on every row: the z-loss adds
 * wh zl lse(b)^2 to each kept row, c times it to the loss and its hard part, nothing to the
 * soft part. */
static int z_loss_adds_lambda_times_the_squared_lse_to_the_hard_part(void) {
  prob p;
  prob_init(&p, 3, 2, 5, KLJIT_TEACHER_DENSE_LOGPROBS);
  host_rng g = {151};
  fill_problem(&p, &g);
  memset(p.w, 0, sizeof p.w);
  p.pb.flags |= KLJIT_FLAG_BIAS;
  p.pb.reduction = KLJIT_REDUCTION_BATCHMEAN;
  p.pb.hard_weight = 0.5, p.pb.soft_weight = 2.0;
  p.has_labels = 1;
  p.labels[0] = 1, p.labels[1] = -100, p.labels[2] = 4;
  result r0, rz;
  TH_CHECK(run(&p, &r0) == 0);
  p.pb.z_loss = 0.25;
  TH_CHECK(run(&p, &rz) == 0);
  double mx = -INFINITY, sum = 0.0;
  for (int v = 0; v < 5; v++) mx = fmax(mx, p.b[v]);
  for (int v = 0; v < 5; v++) sum += exp(p.b[v] - mx);
  const double lse = mx + log(sum), add = 0.5 * 0.25 * lse * lse;
  TH_NEAR(rz.row_loss[0], r0.row_loss[0] + add, 1e-15, 1e-13);
  TH_CHECK(rz.row_loss[1] == 0.0);
  TH_NEAR(rz.loss, r0.loss + add, 1e-15, 1e-13); /* 2 kept rows, c = 1/2 */
  TH_NEAR(rz.hard, r0.hard + add, 1e-15, 1e-13);
  TH_NEAR(rz.soft, r0.soft, 0, 0);
  TH_NEAR(rz.soft + rz.hard, rz.loss, 1e-15, 1e-14);
  return TH_PASS;
}

/* Row weights multiply each row's loss and gradient and leave the divisor alone: BATCHMEAN of
 * weighted rows is (1 / kept) sum_i w_i l_i, a weight-0 row still counted in kept; with every
 * weight 1 nothing changes; the parts scale like the loss. */
static int row_weights_scale_rows_but_not_the_divisor(void) {
  prob p;
  prob_init(&p, 5, 3, 6, KLJIT_TEACHER_DENSE_LOGITS);
  host_rng g = {161};
  fill_problem(&p, &g);
  p.pb.reduction = KLJIT_REDUCTION_BATCHMEAN;
  p.pb.divergence = KLJIT_DIVERGENCE_TVD;
  p.pb.hard_weight = 0.3;
  p.has_labels = 1;
  for (int i = 0; i < 5; i++) p.labels[i] = i == 3 ? -100 : i;
  result r1, rw, ones;
  TH_CHECK(run(&p, &r1) == 0);
  p.has_rw = 1;
  for (int i = 0; i < 5; i++) p.rw[i] = 1.0;
  TH_CHECK(run(&p, &ones) == 0);
  TH_CHECK(same_result(&p, &ones, &r1, 1.0, 1.0, 1.0, 0.0));
  const double w[5] = {2.0, 0.0, 0.5, 7.0, 1.25}; /* row 3 is ignored */
  memcpy(p.rw, w, sizeof w);
  TH_CHECK(run(&p, &rw) == 0);
  TH_CHECK(rw.kept == 4);
  double sum = 0.0, soft = 0.0;
  for (int i = 0; i < 5; i++) {
    TH_NEAR(rw.row_loss[i], i == 3 ? 0.0 : w[i] * r1.row_loss[i], 0, 1e-14);
    for (int v = 0; v < 6; v++)
      TH_NEAR(rw.dl[i * 6 + v], i == 3 ? 0.0 : w[i] * r1.dl[i * 6 + v], 1e-16, 1e-13);
    if (i != 3) sum += rw.row_loss[i];
  }
  TH_NEAR(rw.loss, sum / 4.0, 0, 1e-14);
  TH_NEAR(rw.soft + rw.hard, rw.loss, 1e-15, 1e-14);
  /* the soft part alone, from a run without the CE */
  p.pb.hard_weight = 0.0;
  result rs;
  TH_CHECK(run(&p, &rs) == 0);
  soft = rs.loss;
  TH_NEAR(rw.soft, soft, 1e-15, 1e-13);
  TH_CHECK(rs.hard == 0.0);
  return TH_PASS;
}

/* ---- issue 29's last items for the top-K teacher: the skew KLs, the CE's extras ----------- */

/* Finite differences of the top-K skew KLs (two alphas each, one with row weights, one with the
 * CE's label smoothing and z-loss) over both category tails and value forms, and of the CE's
 * label smoothing and z-loss with the top-K teacher over every tail, on fd_family's setups
 * (setups 1 and 3 mix in the CE; CE alone in 3). */
static int gradients_match_finite_differences_for_the_sparse_skew_kls_and_ce_extras(void) {
  const struct {
    family f;
    extras x;
  } skews[4] = {{{KLJIT_DIVERGENCE_SKEW_FORWARD_KL, 0.0}, {0.2, 0.0, 0.0, 0}},
                {{KLJIT_DIVERGENCE_SKEW_FORWARD_KL, 0.0}, {0.7, 0.0, 0.0, 1}},
                {{KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0.0}, {0.1, 0.0, 0.0, 0}},
                {{KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0.0}, {0.6, 0.1, 0.05, 0}}};
  const kljit_tail tails[3] = {KLJIT_TAIL_BUCKET, KLJIT_TAIL_RENORM, KLJIT_TAIL_NONE};
  for (int t = 0; t < 2; t++)
    for (int v = 0; v < 2; v++)
      for (int d = 0; d < 4; d++)
        if (fd_family_all(KLJIT_TEACHER_SPARSE_TOPK, skews[d].f, skews[d].x, tails[t],
                          v ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS) != TH_PASS)
          return TH_FAIL;
  const family fwd = {KLJIT_DIVERGENCE_FORWARD_KL, 0.0}, jsd = {KLJIT_DIVERGENCE_JSD, 0.5};
  const extras ce = {0.0, 0.2, 0.03, 0}, ce1 = {0.0, 1.0, 0.0, 1};
  for (int t = 0; t < 3; t++)
    if (fd_family_all(KLJIT_TEACHER_SPARSE_TOPK, fwd, ce, tails[t], KLJIT_TOPK_PROBS) != TH_PASS)
      return TH_FAIL;
  return fd_family_all(KLJIT_TEACHER_SPARSE_TOPK, jsd, ce1, KLJIT_TAIL_BUCKET,
                       KLJIT_TOPK_LOGPROBS);
}

/* The top-K skew KLs of the categories (categories_by_hand): the skew forward KL(0.3) and the
 * skew reverse KL(0.4). */
static int sparse_skew_kls_are_the_divergences_of_the_categories(void) {
  static const kljit_divergence divs[2] = {KLJIT_DIVERGENCE_SKEW_FORWARD_KL,
                                           KLJIT_DIVERGENCE_SKEW_REVERSE_KL};
  for (int tail = 0; tail < 2; tail++)
    for (int d = 0; d < 2; d++)
      if (categories_by_hand(divs[d], d ? 0.4 : 0.3, tail, (uint64_t)(53 + 3 * tail + d)) !=
          TH_PASS)
        return TH_FAIL;
  return TH_PASS;
}

/* ref_separate_ties, the GPU tests' helper for TVD: planted ties p_v = q_v (two columns a row
 * for the probability forms, one for the logits form, whose other columns move with it) end at
 * least the margin apart in log space, in every dtype the teacher is stored in, checked here
 * with this file's own softmax; a second call finds nothing to move. */
static int tvd_ties_are_moved_a_margin_apart_in_every_dense_form_and_dtype(void) {
  const kljit_teacher_form forms[3] = {KLJIT_TEACHER_DENSE_PROBS, KLJIT_TEACHER_DENSE_LOGPROBS,
                                       KLJIT_TEACHER_DENSE_LOGITS};
  const kljit_dtype dts[3] = {KLJIT_FP32, KLJIT_BF16, KLJIT_FP16};
  const double margin = 1e-3;
  for (int fi = 0; fi < 3; fi++)
    for (int di = 0; di < 3; di++) {
      prob p;
      prob_init(&p, 4, 5, 8, forms[fi]);
      p.pb.divergence = KLJIT_DIVERGENCE_TVD;
      p.pb.temperature = 1.5, p.pb.teacher_temperature = 0.8;
      p.pb.flags |= KLJIT_FLAG_BIAS;
      host_rng g = {(uint64_t)(171 + 3 * fi + di)};
      fill_problem(&p, &g);
      p.has_labels = 1;
      for (int i = 0; i < 4; i++) p.labels[i] = i == 2 ? -100 : 0;
      double logq[4][8], z[8];
      for (int i = 0; i < 4; i++) {
        for (int v = 0; v < 8; v++) {
          z[v] = p.b[v];
          for (int j = 0; j < 5; j++) z[v] += p.x[i * 5 + j] * p.w[v * 5 + j];
        }
        softmax_row(z, 8, 1.5, NULL, logq[i]);
        double *t = p.teacher + i * 8;
        for (int v = 0; v < 8; v++) { /* the stored dtype's values, as on a device */
          uint32_t buf = 0;
          host_store(&buf, dts[di], 0, t[v]);
          t[v] = host_load(&buf, dts[di], 0);
        }
        if (forms[fi] == KLJIT_TEACHER_DENSE_LOGITS) { /* p_3 = q_3: e^{t_3/Tt} = q R / (1 - q) */
          double r = 0.0;
          for (int v = 0; v < 8; v++) r += v == 3 ? 0.0 : exp(t[v] / 0.8);
          t[3] = 0.8 * (logq[i][3] + log(r) - log1p(-exp(logq[i][3])));
        } else {
          for (int v = 1; v < 3; v++)
            t[v] = forms[fi] == KLJIT_TEACHER_DENSE_PROBS ? exp(logq[i][v]) : logq[i][v];
        }
      }
      const ref_inputs in = {.pb = &p.pb, .rows = p.n, .x = p.x, .w = p.w, .b = p.b,
                             .labels = p.labels, .teacher = p.teacher};
      double before[4 * 8];
      memcpy(before, p.teacher, sizeof before);
      TH_CHECK(ref_separate_ties(&in, p.teacher, dts[di], margin) == 0);
      TH_CHECK(memcmp(before, p.teacher, sizeof before) != 0); /* the planted ties moved */
      for (int i = 0; i < 4; i++) {
        if (i == 2) continue; /* an ignored row is left as it is */
        double lp[8];
        const double *t = p.teacher + i * 8;
        if (forms[fi] == KLJIT_TEACHER_DENSE_LOGITS) softmax_row(t, 8, 0.8, NULL, lp);
        for (int v = 0; v < 8; v++) {
          if (forms[fi] != KLJIT_TEACHER_DENSE_LOGITS)
            lp[v] = forms[fi] == KLJIT_TEACHER_DENSE_PROBS ? log(t[v]) : t[v];
          uint32_t buf = 0; /* still a value of the dtype */
          host_store(&buf, dts[di], 0, t[v]);
          TH_CHECK(host_load(&buf, dts[di], 0) == t[v]);
          if (lp[v] > -INFINITY && !(fabs(lp[v] - logq[i][v]) >= margin)) {
            fprintf(stderr, "form %d dtype %d row %d column %d: |log p - log q| = %g\n",
                    forms[fi], dts[di], i, v, fabs(lp[v] - logq[i][v]));
            return TH_FAIL;
          }
        }
      }
      memcpy(before, p.teacher, sizeof before);
      TH_CHECK(ref_separate_ties(&in, p.teacher, dts[di], margin) == 0);
      TH_CHECK(memcmp(before, p.teacher, sizeof before) == 0);
    }
  return TH_PASS;
}

/* ---- host_dtype ------------------------------------------------------------------------- */

static int host_bf16_and_fp16_round_trip_every_representable_value(void) {
  for (uint32_t h = 0; h < 0x10000u; h++) {
    const float fb = host_bf16_to_f32((uint16_t)h), fh = host_f16_to_f32((uint16_t)h);
    if (!isnan(fb)) TH_CHECK(host_f32_to_bf16(fb) == h);
    if (!isnan(fh)) TH_CHECK(host_f32_to_f16(fh) == h);
  }
  TH_CHECK(host_f16_to_f32(0x0001u) == ldexpf(1.0f, -24)); /* smallest subnormal */
  TH_CHECK(host_f16_to_f32(0x7bffu) == 65504.0f);
  TH_CHECK(host_bf16_to_f32(0x3f80u) == 1.0f);
  return TH_PASS;
}

static int host_bf16_and_fp16_round_ties_to_even(void) {
  /* bf16 keeps 7 fraction bits: 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7. */
  TH_CHECK(host_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80u);
  TH_CHECK(host_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82u);
  TH_CHECK(host_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81u);
  /* fp16 keeps 10: the same at 2^-11, and in the subnormals, where the grid is 2^-24. */
  TH_CHECK(host_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00u);
  TH_CHECK(host_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02u);
  TH_CHECK(host_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01u);
  TH_CHECK(host_f32_to_f16(0x1p-25f) == 0x0000u);
  TH_CHECK(host_f32_to_f16(3 * 0x1p-25f) == 0x0002u);
  TH_CHECK(host_f32_to_f16(0x1p-25f + 0x1p-40f) == 0x0001u);
  TH_CHECK(host_f32_to_f16(-3 * 0x1p-25f) == 0x8002u);
  /* host_store rounds a double once: 1 + 2^-11 + 2^-40 is above the tie, so it rounds up,
   * where narrowing to float first would land on the tie and go down to 1. */
  uint16_t h[2];
  host_store(h, KLJIT_FP16, 0, 1.0 + 0x1p-11 + 0x1p-40);
  host_store(h, KLJIT_BF16, 1, 1.0 + 0x1p-8 + 0x1p-40);
  TH_CHECK(h[0] == 0x3c01u && h[1] == 0x3f81u);
  return TH_PASS;
}

static int host_nan_stays_nan_and_fp16_overflows_to_infinity(void) {
  /* A NaN with payload only in the low bits would truncate to bf16 Inf. */
  const uint32_t nan_bits[3] = {0x7fc00000u, 0x7f800001u, 0xff800100u};
  for (int i = 0; i < 3; i++) {
    float f;
    memcpy(&f, &nan_bits[i], sizeof f);
    TH_CHECK(isnan(host_bf16_to_f32(host_f32_to_bf16(f))));
    TH_CHECK(isnan(host_f16_to_f32(host_f32_to_f16(f))));
  }
  TH_CHECK(isnan(host_load((uint16_t[]){host_f32_to_f16(NAN)}, KLJIT_FP16, 0)));
  TH_CHECK(host_f32_to_f16(65504.0f) == 0x7bffu);
  TH_CHECK(host_f32_to_f16(65519.0f) == 0x7bffu); /* below the tie at 65520 */
  TH_CHECK(host_f32_to_f16(65520.0f) == 0x7c00u); /* the tie, 65504 is odd: up to Inf */
  TH_CHECK(host_f32_to_f16(1e6f) == 0x7c00u && host_f32_to_f16(-1e6f) == 0xfc00u);
  TH_CHECK(host_f32_to_f16(INFINITY) == 0x7c00u);
  TH_CHECK(host_f32_to_bf16(3.4028235e38f) == 0x7f80u); /* FLT_MAX rounds up to Inf */
  return TH_PASS;
}

static int host_store_and_load_round_trip_every_dtype(void) {
  const kljit_dtype dts[5] = {KLJIT_FP32, KLJIT_FP16, KLJIT_BF16, KLJIT_INT32, KLJIT_INT64};
  const double vals[4] = {-100.0, 0.0, 3.0, 1024.0}; /* exact in every dtype */
  for (int d = 0; d < 5; d++) {
    unsigned char buf[4 * 8];
    TH_CHECK(host_dtype_size(dts[d]) == (dts[d] == KLJIT_FP16 || dts[d] == KLJIT_BF16 ? 2u
                                         : dts[d] == KLJIT_INT64                      ? 8u
                                                                                      : 4u));
    for (size_t i = 0; i < 4; i++) host_store(buf, dts[d], i, vals[i]);
    for (size_t i = 0; i < 4; i++) TH_CHECK(host_load(buf, dts[d], i) == vals[i]);
  }
  float f[1];
  host_store(f, KLJIT_FP32, 0, 0.1);
  TH_CHECK(host_load(f, KLJIT_FP32, 0) == (double)0.1f);
  return TH_PASS;
}

static int host_rng_is_deterministic_and_well_spread(void) {
  host_rng a = {5}, b = {5}, c = {6};
  int differs = 0;
  double sum = 0.0, sum2 = 0.0, umin = 1.0, umax = 0.0;
  const int n = 20000;
  for (int i = 0; i < n; i++) {
    const double u = host_uniform(&a);
    TH_CHECK(u == host_uniform(&b));
    differs |= u != host_uniform(&c);
    TH_CHECK(u >= 0.0 && u < 1.0);
    umin = fmin(umin, u), umax = fmax(umax, u);
    const double z = host_normal(&a);
    TH_CHECK(z == host_normal(&b) && isfinite(z));
    sum += z, sum2 += z * z;
  }
  TH_CHECK(differs && umin < 1e-3 && umax > 1.0 - 1e-3);
  /* 0.05: five standard errors of the mean and of the variance over 20000 samples. */
  TH_NEAR(sum / n, 0.0, 0.05, 0);
  TH_NEAR(sum2 / n, 1.0, 0.05, 0);
  return TH_PASS;
}

/* The case name is the function name, so CTest names and code grep alike. */
#define CASE(fn) {#fn, fn}
static const th_case cases[] = {
    CASE(one_hot_teacher_with_uniform_logits_costs_log_v),
    CASE(uniform_teacher_with_uniform_logits_costs_zero),
    CASE(two_class_problem_matches_hand_values_at_t1_and_t2),
    CASE(dense_teacher_logits_use_the_teacher_temperature_or_t),
    CASE(all_rows_ignored_gives_zero_loss_and_gradients),
    CASE(zero_teacher_probabilities_contribute_zero_log_zero),
    CASE(teacher_probabilities_below_eps_are_floored_inside_the_log),
    CASE(reductions_agree_up_to_their_scale),
    CASE(results_do_not_depend_on_the_block_size),
    CASE(t_squared_flag_scales_loss_and_gradients),
    CASE(gradients_match_finite_differences_dense_probs),
    CASE(gradients_match_finite_differences_dense_logprobs),
    CASE(gradients_match_finite_differences_dense_logits),
    CASE(gradients_match_finite_differences_sparse_tail_none),
    CASE(gradients_match_finite_differences_sparse_tail_renorm),
    CASE(gradients_match_finite_differences_sparse_tail_bucket),
    CASE(gradients_match_finite_differences_sparse_logprob_values),
    CASE(dense_probs_logprobs_and_logits_agree),
    CASE(sparse_tail_none_with_full_support_equals_dense_probs),
    CASE(sparse_tail_none_equals_dense_probs_padded_with_zeros),
    CASE(sparse_tail_renorm_with_full_support_equals_tail_none_at_mass_one),
    CASE(sparse_tail_renorm_equals_dense_probs_of_the_renormalized_teacher),
    CASE(sparse_tail_bucket_with_full_support_equals_dense),
    CASE(sparse_tail_bucket_is_the_kl_of_the_coarsened_distributions),
    CASE(sparse_duplicate_ids_count_each_occurrence),
    CASE(renorm_row_with_zero_mass_contributes_nothing),
    CASE(gradients_match_finite_differences_for_every_divergence_and_dense_form),
    CASE(gradients_match_finite_differences_for_the_sparse_teacher_with_ce_and_softcap),
    CASE(gradients_match_finite_differences_for_the_sparse_reverse_kl_and_jsd),
    CASE(sparse_reverse_kl_and_jsd_with_full_support_equal_dense),
    CASE(sparse_reverse_kl_jsd_and_tvd_are_the_divergences_of_the_categories),
    CASE(sparse_jsd_end_points_are_the_category_kls),
    CASE(two_class_reverse_kl_and_jsd_match_hand_values),
    CASE(jsd_tends_to_the_forward_and_reverse_kl_at_its_end_points),
    CASE(hard_label_ce_is_the_forward_kl_of_a_one_hot_teacher_and_mixes_linearly),
    CASE(softcaps_cap_the_logits_before_the_temperature),
    CASE(padded_teacher_columns_are_excluded),
    CASE(online_teacher_equals_the_logits_form_of_its_head),
    CASE(gradients_match_finite_differences_for_tvd_and_the_skew_kls),
    CASE(gradients_match_finite_differences_with_row_weights_label_smoothing_and_z_loss),
    CASE(two_class_tvd_and_skew_kls_match_hand_values),
    CASE(skew_kls_end_points_and_bounds_and_pinsker_for_tvd),
    CASE(label_smoothing_interpolates_the_label_and_the_uniform_target),
    CASE(z_loss_adds_lambda_times_the_squared_lse_to_the_hard_part),
    CASE(row_weights_scale_rows_but_not_the_divisor),
    CASE(gradients_match_finite_differences_for_the_sparse_teacher_with_row_weights),
    CASE(gradients_match_finite_differences_for_the_sparse_skew_kls_and_ce_extras),
    CASE(sparse_skew_kls_are_the_divergences_of_the_categories),
    CASE(tvd_ties_are_moved_a_margin_apart_in_every_dense_form_and_dtype),
    CASE(ref_rejects_invalid_inputs),
    CASE(host_bf16_and_fp16_round_trip_every_representable_value),
    CASE(host_bf16_and_fp16_round_ties_to_even),
    CASE(host_nan_stays_nan_and_fp16_overflows_to_infinity),
    CASE(host_store_and_load_round_trip_every_dtype),
    CASE(host_rng_is_deterministic_and_well_spread),
};

TH_MAIN(cases)

/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_shard.c — vocabulary-parallel tensor parallelism on ONE GPU, without NCCL (issue 7).
 *
 * For tp = 2, 3, 4, 8 and V = 1001 (divisible by none of them), a problem runs unsharded
 * (kljit_fused) and as tp shards through the split API: shard r holds global ids
 * [r V / tp, (r + 1) V / tp) — its rows of W, its bias slice, its dense teacher columns as a
 * contiguous [N, V_r] array; sparse ids stay global. kljit_shard_stats runs for every shard, the
 * test gathers the records into [tp][N][R] (R: kljit_problem_layout's record_floats; device ->
 * host -> device: the all-gather),
 * kljit_shard_finish runs per shard, and the test sums the shards' losses and dX (the
 * all-reduce) and concatenates dW and db. Both results are compared with the fp64 reference
 * (tests/ref.h) and with each other: fp32 inputs, loss relative 1e-5, gradients relative
 * Frobenius 1e-5. Skips (77) without a GPU. One case plans the shards with KLJIT_PLAN_MEASURE
 * (the tuner times each shard's split calls) instead of KLJIT_PLAN_ESTIMATE.
 * The loss families (issue 19) on shards: the reverse KL and the JSD take the second round
 * (kljit_shard_sums, then the records gathered again), CE mixing the label's logit from its
 * own shard and lse(z') from the records, the online teacher its head's rows of the shard;
 * teacher logits and student scores at standard deviation 3 to 4, softcapped in one case.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "harness.h"
#include "kljit_experimental.h"
#include "ref.h"

static kljit_context *the_ctx;
static kljit_plan_rigor shard_rigor = KLJIT_PLAN_ESTIMATE; /* how run_tp plans the shards */

/* Issue 29's fields of the case run_case runs (set around it, as shard_rigor): the skew KLs'
 * alpha, the CE's label smoothing and z-loss, row weights (every 7th row 0), and the per-row
 * loss and the loss's parts asked for (each rank writes its part; the test sums them, the
 * all-reduce kljit_fused_nccl does). */
static struct extras29 {
  double alpha, ls, zl;
  int rw, outputs;
} x29;

typedef struct scase {
  const char *name;
  kljit_teacher_form form;
  kljit_reduction red;
  kljit_tail tail;
  kljit_topk_values values;
  int labels; /* 0 none, 1 every fifth row ignored, 2 all ignored */
  int bias;
  double T, TT; /* TT: teacher temperature of DENSE_LOGITS (0: same as T) */
  int k;        /* sparse K (global ids) */
  /* the loss families (0: the plain forward KL) */
  kljit_divergence div;
  double beta, hard, soft, cap; /* soft is used where hard != 0 (else 1) */
  int online;   /* the online teacher: the teacher is x_t W_t^T, Ht = TH */
} scase;

enum { N = 37, H = 64, V = 1001, TH = 48 };
#define PLAIN KLJIT_DIVERGENCE_FORWARD_KL, 0.0, 0.0, 0.0, 0.0, 0 /* no loss-family field */
static const double TOL = 1e-5;

/* Host inputs of one case (fp32-exact doubles). */
typedef struct inputs {
  double *x, *w, *b, *teacher, *vals, *xt, *wt, *rw;
  int64_t *labels, *ids;
} inputs;

static void make_inputs(const scase *c, inputs *in) {
  host_rng rng = {0x5eed0000u + (uint64_t)c->form * 131 + (uint64_t)c->tail * 7};
  in->x = malloc(sizeof(double) * N * H);
  in->w = malloc(sizeof(double) * V * H);
  in->b = malloc(sizeof(double) * V);
  in->teacher = malloc(sizeof(double) * N * V);
  in->vals = malloc(sizeof(double) * N * (c->k ? c->k : 1));
  in->labels = malloc(sizeof(int64_t) * N);
  in->ids = malloc(sizeof(int64_t) * N * (c->k ? c->k : 1));
  for (int i = 0; i < N * H; i++) in->x[i] = (double)(float)host_normal(&rng);
  for (int i = 0; i < V * H; i++) in->w[i] = (double)(float)(0.3 * host_normal(&rng));
  for (int i = 0; i < V; i++) in->b[i] = (double)(float)(0.5 * host_normal(&rng));
  in->rw = malloc(sizeof(double) * N);
  host_rng rw_rng = {0x29}; /* its own stream: the other inputs are drawn as before */
  for (int i = 0; i < N; i++)
    in->rw[i] = i % 7 == 3 ? 0.0 : (double)(float)(2.0 * host_uniform(&rw_rng));
  in->xt = malloc(sizeof(double) * N * TH);
  in->wt = malloc(sizeof(double) * V * TH);
  for (int i = 0; i < N * TH; i++) in->xt[i] = (double)(float)host_normal(&rng);
  for (int i = 0; i < V * TH; i++) in->wt[i] = (double)(float)(0.5 * host_normal(&rng));
  for (int r = 0; r < N; r++) {
    /* CE mixing: labels spread over every shard (plain cases: 1, as before) */
    const int64_t y = c->hard != 0.0 ? (int64_t)((r * 389 + 17) % V) : 1;
    in->labels[r] = c->labels == 2 || (c->labels == 1 && r % 5 == 2) ? -100 : y;
    double *t = in->teacher + (size_t)r * V;
    if (c->form == KLJIT_TEACHER_DENSE_LOGITS) {
      const double sd = c->div || c->hard != 0.0 ? 3.5 : 2.0;
      for (int v = 0; v < V; v++) t[v] = (double)(float)(sd * host_normal(&rng));
    } else {
      double s = 0;
      for (int v = 0; v < V; v++) s += t[v] = exp(1.5 * host_normal(&rng));
      for (int v = 0; v < V; v++) t[v] = (double)(float)(t[v] / s);
    }
  }
  if (c->form != KLJIT_TEACHER_SPARSE_TOPK) return;
  int perm[V];
  for (int r = 0; r < N; r++) {
    for (int v = 0; v < V; v++) perm[v] = v;
    for (int j = 0; j < c->k; j++) { /* K distinct global ids, spread over every shard */
      const int pick = j + (int)(host_uniform(&rng) * (V - j));
      const int tmp = perm[j];
      perm[j] = perm[pick], perm[pick] = tmp;
    }
    double s = 0, u[1024];
    for (int j = 0; j < c->k; j++) s += u[j] = 0.05 + host_uniform(&rng);
    const double mass = c->tail == KLJIT_TAIL_RENORM ? 1.7 : 0.4 + 0.5 * host_uniform(&rng);
    for (int j = 0; j < c->k; j++) {
      const double p = (double)(float)(u[j] / s * mass);
      in->ids[(size_t)r * c->k + j] = perm[j];
      in->vals[(size_t)r * c->k + j] = c->values == KLJIT_TOPK_LOGPROBS ? (double)(float)log(p) : p;
    }
  }
}

static void free_inputs(inputs *in) {
  free(in->x), free(in->w), free(in->b), free(in->teacher), free(in->vals), free(in->labels);
  free(in->ids), free(in->xt), free(in->wt), free(in->rw);
}

static kljit_problem base_problem(const scase *c) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = H, pb.vocab = V;
  pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = KLJIT_FP32;
  pb.grad_weight_dtype = KLJIT_FP32;
  pb.teacher = c->form, pb.reduction = c->red, pb.temperature = c->T;
  pb.teacher_temperature = c->TT;
  pb.label_dtype = KLJIT_INT64;
  if (c->bias) pb.flags |= KLJIT_FLAG_BIAS;
  if (c->form == KLJIT_TEACHER_SPARSE_TOPK) {
    pb.topk = c->k, pb.topk_id_dtype = KLJIT_INT64, pb.topk_values = c->values;
    pb.tail = c->tail;
  }
  pb.divergence = c->div, pb.beta = c->beta, pb.softcap = c->cap;
  if (c->hard != 0.0) pb.hard_weight = c->hard, pb.soft_weight = c->soft;
  if (c->online) pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = TH;
  pb.skew_alpha = x29.alpha, pb.label_smoothing = x29.ls, pb.z_loss = x29.zl;
  if (x29.rw) pb.flags |= KLJIT_FLAG_ROW_WEIGHTS;
  return pb;
}

/* Device buffers of one plan's call. */
typedef struct dev {
  gbuf x, w, b, lab, t, ids, vals, loss, dx, dw, db, ws, xt, wt, rw, rl, parts;
} dev;

static void dev_free(dev *d) {
  gbuf *all[] = {&d->x,  &d->w,  &d->b,  &d->lab, &d->t,  &d->ids, &d->vals, &d->loss, &d->dx,
                 &d->dw, &d->db, &d->ws, &d->xt,  &d->wt, &d->rw,  &d->rl,   &d->parts};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]->ptr) gbuf_free(all[i]);
}

/* Uploads the inputs of shard [off, off + v) (the whole vocabulary: off = 0, v = V) and
 * allocates its outputs; fills `a`. */
static int dev_setup(const scase *c, const inputs *in, const kljit_plan *plan, int64_t off,
                     int64_t v, dev *d, kljit_args *a) {
  memset(d, 0, sizeof *d);
  size_t ws = 0;
  if (kljit_plan_workspace_size(plan, KLJIT_MODE_FUSED, N, &ws)) return 1;
  double *t = malloc(sizeof(double) * N * v);
  for (int r = 0; r < N; r++)
    memcpy(t + (size_t)r * v, in->teacher + (size_t)r * V + off, sizeof(double) * v);
  double *lab = malloc(sizeof(double) * N), *ids = NULL;
  for (int r = 0; r < N; r++) lab[r] = (double)in->labels[r];
  const int sparse = c->form == KLJIT_TEACHER_SPARSE_TOPK;
  const size_t nk = (size_t)N * (c->k ? c->k : 1);
  int fail = gbuf_alloc(&d->x, KLJIT_FP32, N * H) | gbuf_upload(&d->x, in->x, NULL);
  fail |= gbuf_alloc(&d->w, KLJIT_FP32, v * H) | gbuf_upload(&d->w, in->w + off * H, NULL);
  if (c->bias) fail |= gbuf_alloc(&d->b, KLJIT_FP32, v) | gbuf_upload(&d->b, in->b + off, NULL);
  fail |= gbuf_alloc(&d->lab, KLJIT_INT64, N) | gbuf_upload(&d->lab, lab, NULL);
  if (c->online) { /* the teacher head's rows of the shard, the same teacher input */
    fail |= gbuf_alloc(&d->xt, KLJIT_FP32, N * TH) | gbuf_upload(&d->xt, in->xt, NULL);
    fail |= gbuf_alloc(&d->wt, KLJIT_FP32, v * TH) | gbuf_upload(&d->wt, in->wt + off * TH, NULL);
  } else if (sparse) {
    ids = malloc(sizeof(double) * nk);
    for (size_t i = 0; i < nk; i++) ids[i] = (double)in->ids[i];
    fail |= gbuf_alloc(&d->ids, KLJIT_INT64, nk) | gbuf_upload(&d->ids, ids, NULL);
    fail |= gbuf_alloc(&d->vals, KLJIT_FP32, nk) | gbuf_upload(&d->vals, in->vals, NULL);
  } else {
    fail |= gbuf_alloc(&d->t, KLJIT_FP32, N * v) | gbuf_upload(&d->t, t, NULL);
  }
  fail |= gbuf_alloc(&d->loss, KLJIT_FP32, 1) | gbuf_poison(&d->loss);
  fail |= gbuf_alloc(&d->dx, KLJIT_FP32, N * H) | gbuf_poison(&d->dx);
  fail |= gbuf_alloc(&d->dw, KLJIT_FP32, v * H) | gbuf_poison(&d->dw);
  if (c->bias) fail |= gbuf_alloc(&d->db, KLJIT_FP32, v) | gbuf_poison(&d->db);
  fail |= gbuf_alloc(&d->ws, KLJIT_INT32, ws / 4 + 64);
  if (x29.rw) fail |= gbuf_alloc(&d->rw, KLJIT_FP32, N) | gbuf_upload(&d->rw, in->rw, NULL);
  if (x29.outputs)
    fail |= gbuf_alloc(&d->rl, KLJIT_FP32, N) | gbuf_poison(&d->rl) |
            gbuf_alloc(&d->parts, KLJIT_FP32, 2) | gbuf_poison(&d->parts);
  free(t), free(lab), free(ids);
  kljit_args init = KLJIT_ARGS_INIT;
  *a = init;
  a->rows = N, a->input = d->x.ptr, a->weight = d->w.ptr, a->bias = d->b.ptr;
  a->labels = d->lab.ptr;
  if (c->online)
    a->teacher_input = d->xt.ptr, a->teacher_weight = d->wt.ptr;
  else if (sparse)
    a->teacher_ids = d->ids.ptr, a->teacher_values = d->vals.ptr;
  else
    a->teacher = d->t.ptr;
  a->loss = d->loss.ptr, a->grad_input = d->dx.ptr, a->grad_weight = d->dw.ptr;
  a->grad_bias = d->db.ptr, a->workspace = d->ws.ptr, a->workspace_size = ws;
  a->row_weights = d->rw.ptr, a->row_loss = d->rl.ptr, a->loss_parts = d->parts.ptr;
  return fail;
}

/* Host results: loss, dX, dW, db; with x29.outputs the per-row loss and the parts. */
typedef struct result {
  double loss, dx[N * H], dw[V * H], db[V], row_loss[N], parts[2];
} result;

static double rel(double a, double b) {
  return a == b ? 0.0 : fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1e-30);
}

/* a vs b within TOL; prints one line. */
static int compare(const char *what, const result *a, const result *b, int bias) {
  const double el = rel(a->loss, b->loss), ex = rel_frobenius(a->dx, b->dx, N * H);
  const double ew = rel_frobenius(a->dw, b->dw, (size_t)V * H);
  const double eb = bias ? rel_frobenius(a->db, b->db, V) : 0.0;
  /* the per-row loss against max(|l_i|, 1), as gpu_case.h's; the parts as the loss */
  double er = 0.0, ep = 0.0, ma;
  if (x29.outputs) {
    max_errors(a->row_loss, b->row_loss, N, 1.0, &ma, &er);
    ep = fmax(rel(a->parts[0], b->parts[0]), rel(a->parts[1], b->parts[1]));
  }
  const int ok = el <= TOL && ex <= TOL && ew <= TOL && eb <= TOL && er <= TOL && ep <= TOL;
  printf("    %-22s loss %.9g vs %.9g rel %.1e; dX %.1e dW %.1e db %.1e", what, a->loss, b->loss,
         el, ex, ew, eb);
  if (x29.outputs) printf("; row loss %.1e parts %.1e", er, ep);
  printf(" %s\n", ok ? "ok" : "FAIL");
  return ok;
}

static int run_tp(const scase *c, const inputs *in, int tp, const result *ref,
                  const result *unsharded, result *out) {
  kljit_plan **plans = calloc((size_t)tp, sizeof *plans);
  dev *devs = calloc((size_t)tp, sizeof *devs);
  kljit_args *args = calloc((size_t)tp, sizeof *args);
  gbuf *stats = calloc((size_t)tp, sizeof *stats);
  gbuf all;
  memset(&all, 0, sizeof all);
  /* R floats a record: the templates' declaration, as the library reports it */
  kljit_layout lay;
  memset(&lay, 0, sizeof lay);
  lay.struct_size = sizeof lay;
  kljit_problem pb0 = base_problem(c);
  pb0.vocab = V / tp, pb0.vocab_total = V, pb0.vocab_offset = 0, pb0.shards = tp;
  const int lay_ok = kljit_problem_layout(&pb0, &lay) == KLJIT_SUCCESS && lay.record_floats > 0;
  if (!lay_ok) fprintf(stderr, "kljit_problem_layout: %s\n", kljit_last_error());
  const size_t R = lay_ok ? (size_t)lay.record_floats : 1;
  double *host_all = malloc(sizeof(double) * (size_t)tp * N * R);
  int fail = !plans || !devs || !args || !stats || !host_all || !lay_ok;
  memset(out, 0, sizeof *out);
  for (int r = 0; r < tp && !fail; r++) {
    const int64_t off = (int64_t)r * V / tp, v = (int64_t)(r + 1) * V / tp - off;
    kljit_problem pb = base_problem(c);
    pb.vocab = v, pb.vocab_total = V, pb.vocab_offset = off, pb.shards = tp;
    kljit_status st = kljit_plan_create(the_ctx, &pb, shard_rigor, &plans[r]);
    if (st) fprintf(stderr, "shard %d plan: %s\n", r, kljit_last_error());
    if (!st && shard_rigor == KLJIT_PLAN_MEASURE && r == 0) {
      printf("tp=%d shard 0, measured plan:\n%s", tp, kljit_plan_describe(plans[r]));
      fail |= strstr(kljit_plan_describe(plans[r]), "(measure") == NULL;
    }
    fail |= st != KLJIT_SUCCESS || dev_setup(c, in, plans[r], off, v, &devs[r], &args[r]);
    size_t bytes = 0;
    fail |= fail || kljit_plan_shard_stats_size(plans[r], N, &bytes) != KLJIT_SUCCESS ||
            bytes != (size_t)N * R * sizeof(float) || gbuf_alloc(&stats[r], KLJIT_FP32, N * R) ||
            gbuf_poison(&stats[r]);
    if (!fail && (st = kljit_shard_stats(plans[r], NULL, &args[r], stats[r].ptr)))
      fprintf(stderr, "shard %d stats: %s\n", r, kljit_last_error()), fail = 1;
    /* the all-gather: shard r's records at all + r N R */
    fail |= fail || gbuf_download(&stats[r], host_all + (size_t)r * N * R);
  }
  fail |=
      fail || gbuf_alloc(&all, KLJIT_FP32, (size_t)tp * N * R) || gbuf_upload(&all, host_all, NULL);
  int rounds = 0;
  fail |= fail || kljit_plan_shard_rounds(plans[0], &rounds) != KLJIT_SUCCESS;
  /* two rounds exactly where the gradient needs S: every divergence but the forward KL (JSD
   * with beta = 0 and the skew forward KL with alpha = 0 are the forward KL) */
  const int fwd = c->div == KLJIT_DIVERGENCE_FORWARD_KL ||
                  (c->div == KLJIT_DIVERGENCE_JSD && c->beta == 0.0) ||
                  (c->div == KLJIT_DIVERGENCE_SKEW_FORWARD_KL && x29.alpha == 0.0);
  const int want_rounds = fwd ? 1 : 2;
  if (!fail && rounds != want_rounds)
    fprintf(stderr, "kljit_plan_shard_rounds: %d, want %d\n", rounds, want_rounds), fail = 1;
  if (rounds == 2) { /* each shard's part of S into slot S of its records, gathered again */
    for (int r = 0; r < tp && !fail; r++) {
      kljit_status st = kljit_shard_sums(plans[r], NULL, &args[r], all.ptr, tp, stats[r].ptr);
      if (st) fprintf(stderr, "shard %d sums: %s\n", r, kljit_last_error()), fail = 1;
      fail |= fail || gbuf_download(&stats[r], host_all + (size_t)r * N * R);
    }
    fail |= fail || gbuf_upload(&all, host_all, NULL);
  }
  for (int r = 0; r < tp && !fail; r++) {
    const int64_t off = (int64_t)r * V / tp, v = (int64_t)(r + 1) * V / tp - off;
    kljit_status st = kljit_shard_finish(plans[r], NULL, &args[r], all.ptr, tp);
    if (st) fprintf(stderr, "shard %d finish: %s\n", r, kljit_last_error()), fail = 1;
    double loss = 0, *dx = malloc(sizeof(double) * N * H), rl[N], parts[2] = {0, 0};
    fail |= fail || gbuf_download(&devs[r].loss, &loss) || gbuf_download(&devs[r].dx, dx) ||
            gbuf_download(&devs[r].dw, out->dw + off * H) ||
            (c->bias && gbuf_download(&devs[r].db, out->db + off));
    fail |= fail || (x29.outputs && (gbuf_download(&devs[r].rl, rl) ||
                                     gbuf_download(&devs[r].parts, parts)));
    /* the all-reduce of the loss and dX (and of the optional outputs) */
    out->loss += loss;
    for (int i = 0; i < N * H; i++) out->dx[i] += dx[i];
    for (int i = 0; i < N && x29.outputs && !fail; i++) out->row_loss[i] += rl[i];
    if (x29.outputs && !fail) out->parts[0] += parts[0], out->parts[1] += parts[1];
    free(dx);
    (void)v;
  }
  int ok = !fail;
  if (ok) {
    char what[32];
    snprintf(what, sizeof what, "tp=%d vs fp64 ref", tp);
    ok = compare(what, out, ref, c->bias);
    snprintf(what, sizeof what, "tp=%d vs unsharded", tp);
    ok = compare(what, out, unsharded, c->bias) && ok;
  }
  for (int r = 0; r < tp; r++) {
    if (devs) dev_free(&devs[r]);
    if (stats && stats[r].ptr) gbuf_free(&stats[r]);
    if (plans) kljit_plan_destroy(plans[r]);
  }
  if (all.ptr) gbuf_free(&all);
  free(plans), free(devs), free(args), free(stats), free(host_all);
  return ok;
}

static int run_case(const scase *c) {
  int rc = gpu_test_context(&the_ctx);
  if (rc != TH_PASS) return rc;
  inputs in;
  make_inputs(c, &in);
  const kljit_problem pb = base_problem(c);
  result *ref = calloc(1, sizeof *ref), *uns = calloc(1, sizeof *uns);
  result *sh = calloc(1, sizeof *sh);
  TH_CHECK(ref && uns && sh);
  /* the fp64 reference */
  ref_inputs ri;
  memset(&ri, 0, sizeof ri);
  ri.pb = &pb, ri.rows = N, ri.x = in.x, ri.w = in.w, ri.b = c->bias ? in.b : NULL;
  ri.labels = in.labels, ri.teacher = in.teacher, ri.ids = in.ids, ri.vals = in.vals;
  if (c->online) ri.teacher = NULL, ri.teacher_x = in.xt, ri.teacher_w = in.wt;
  ri.temperature = c->T;
  ri.row_weights = x29.rw ? in.rw : NULL;
  if (c->div == KLJIT_DIVERGENCE_TVD && !c->online) /* fp32 teacher values: see gpu_case.h */
    TH_CHECK(ref_separate_ties(&ri, in.teacher, KLJIT_FP32, 1e-3) == 0);
  ref_outputs ro;
  memset(&ro, 0, sizeof ro);
  ro.dx = ref->dx, ro.dw = ref->dw, ro.db = c->bias ? ref->db : NULL, ro.row_loss = ref->row_loss;
  TH_CHECK(ref_compute(&ri, &ro) == 0);
  ref->loss = ro.loss;
  ref->parts[0] = ro.loss_soft, ref->parts[1] = ro.loss_hard;
  /* unsharded kljit_fused */
  kljit_plan *plan = NULL;
  TH_OK(kljit_plan_create(the_ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan));
  dev d;
  kljit_args a;
  TH_CHECK(dev_setup(c, &in, plan, 0, V, &d, &a) == 0);
  TH_OK(kljit_fused(plan, NULL, &a));
  TH_CHECK(gbuf_download(&d.loss, &uns->loss) == 0 && gbuf_download(&d.dx, uns->dx) == 0 &&
           gbuf_download(&d.dw, uns->dw) == 0 && (!c->bias || gbuf_download(&d.db, uns->db) == 0));
  TH_CHECK(!x29.outputs ||
           (gbuf_download(&d.rl, uns->row_loss) == 0 && gbuf_download(&d.parts, uns->parts) == 0));
  dev_free(&d);
  kljit_plan_destroy(plan);
  printf("%s (N=%d H=%d V=%d, %lld rows kept)\n", c->name, N, H, V, (long long)ro.rows_kept);
  int ok = compare("unsharded vs fp64 ref", uns, ref, c->bias);
  static const int TPS[] = {2, 3, 4, 8};
  for (size_t i = 0; i < sizeof TPS / sizeof TPS[0]; i++)
    ok = run_tp(c, &in, TPS[i], ref, uns, sh) && ok;
  free(ref), free(uns), free(sh);
  free_inputs(&in);
  return ok ? TH_PASS : TH_FAIL;
}

static int dense_probs_batchmean_with_ignored_rows(void) {
  const scase c = {"dense probs, batchmean, bias, ignored rows",
                   KLJIT_TEACHER_DENSE_PROBS,
                   KLJIT_REDUCTION_BATCHMEAN,
                   KLJIT_TAIL_NONE,
                   KLJIT_TOPK_PROBS,
                   1,
                   1,
                   1.0,
                   0,
                   0, PLAIN};
  return run_case(&c);
}

static int dense_logits_own_teacher_temperature_mean(void) {
  const scase c = {"dense logits, TT = 2, T = 1.5, mean",
                   KLJIT_TEACHER_DENSE_LOGITS,
                   KLJIT_REDUCTION_MEAN,
                   KLJIT_TAIL_NONE,
                   KLJIT_TOPK_PROBS,
                   1,
                   1,
                   1.5,
                   2.0,
                   0, PLAIN};
  return run_case(&c);
}

static int sparse_tail_none_batchmean(void) {
  /* K = 200 exceeds every shard's vocabulary at tp = 8 (125 or 126) */
  const scase c = {"sparse NONE, K = 200, batchmean",
                   KLJIT_TEACHER_SPARSE_TOPK,
                   KLJIT_REDUCTION_BATCHMEAN,
                   KLJIT_TAIL_NONE,
                   KLJIT_TOPK_PROBS,
                   1,
                   0,
                   1.0,
                   0,
                   200, PLAIN};
  return run_case(&c);
}

static int sparse_tail_bucket_mean(void) {
  const scase c = {"sparse BUCKET, K = 50, mean, bias",
                   KLJIT_TEACHER_SPARSE_TOPK,
                   KLJIT_REDUCTION_MEAN,
                   KLJIT_TAIL_BUCKET,
                   KLJIT_TOPK_PROBS,
                   1,
                   1,
                   0.7,
                   0,
                   50, PLAIN};
  return run_case(&c);
}

static int sparse_tail_renorm_logprobs(void) {
  const scase c = {"sparse RENORM log-probs, K = 64",
                   KLJIT_TEACHER_SPARSE_TOPK,
                   KLJIT_REDUCTION_BATCHMEAN,
                   KLJIT_TAIL_RENORM,
                   KLJIT_TOPK_LOGPROBS,
                   0,
                   1,
                   2.0,
                   0,
                   64, PLAIN};
  return run_case(&c);
}

static int all_rows_ignored_gives_zero(void) {
  const scase c = {"sparse BUCKET, every row ignored",
                   KLJIT_TEACHER_SPARSE_TOPK,
                   KLJIT_REDUCTION_BATCHMEAN,
                   KLJIT_TAIL_BUCKET,
                   KLJIT_TOPK_PROBS,
                   2,
                   1,
                   1.0,
                   0,
                   30, PLAIN};
  return run_case(&c);
}

/* The loss families on shards (the fields after k: div, beta, hard, soft, cap, online). */
static int reverse_kl_with_ce_mixing(void) {
  const scase c = {"reverse KL, CE 0.4 + soft 0.8, dense probs, bias, ignored rows",
                   KLJIT_TEACHER_DENSE_PROBS, KLJIT_REDUCTION_BATCHMEAN, KLJIT_TAIL_NONE,
                   KLJIT_TOPK_PROBS, 1, 1, 1.0, 0, 0,
                   KLJIT_DIVERGENCE_REVERSE_KL, 0.0, 0.4, 0.8, 0.0, 0};
  return run_case(&c);
}

static int jsd_logits_own_temperature_mean(void) {
  const scase c = {"JSD 0.3, dense logits, TT = 2, T = 1.5, mean, softcap 20",
                   KLJIT_TEACHER_DENSE_LOGITS, KLJIT_REDUCTION_MEAN, KLJIT_TAIL_NONE,
                   KLJIT_TOPK_PROBS, 1, 1, 1.5, 2.0, 0,
                   KLJIT_DIVERGENCE_JSD, 0.3, 0.0, 0.0, 20.0, 0};
  return run_case(&c);
}

static int jsd_with_ce_online_teacher(void) {
  const scase c = {"JSD 0.5 + CE 0.5 (soft 0.5), online teacher, T = 2, sum",
                   KLJIT_TEACHER_DENSE_LOGITS, KLJIT_REDUCTION_SUM, KLJIT_TAIL_NONE,
                   KLJIT_TOPK_PROBS, 1, 0, 2.0, 0, 0,
                   KLJIT_DIVERGENCE_JSD, 0.5, 0.5, 0.5, 0.0, 1};
  return run_case(&c);
}

static int forward_kl_ce_online_teacher(void) {
  const scase c = {"forward KL + CE 1 (soft 0.5), online teacher, bias, batchmean",
                   KLJIT_TEACHER_DENSE_LOGITS, KLJIT_REDUCTION_BATCHMEAN, KLJIT_TAIL_NONE,
                   KLJIT_TOPK_PROBS, 1, 1, 1.0, 0, 0,
                   KLJIT_DIVERGENCE_FORWARD_KL, 0.0, 1.0, 0.5, 0.0, 1};
  return run_case(&c);
}

/* The shards tuned on the GPU (KLJIT_PLAN_MEASURE, private wisdom files, a short budget). */
static int measured_in(const char *dir) {
  th_private_wisdom(dir);
  setenv("KLJIT_TUNE_BUDGET_S", "2", 1), setenv("KLJIT_TUNE_ROWS", "512", 1);
  shard_rigor = KLJIT_PLAN_MEASURE;
  const scase c = {"dense probs, batchmean, bias, ignored rows; shards tuned (MEASURE)",
                   KLJIT_TEACHER_DENSE_PROBS, KLJIT_REDUCTION_BATCHMEAN, KLJIT_TAIL_NONE,
                   KLJIT_TOPK_PROBS, 1, 1, 1.0, 0, 0, PLAIN};
  const int rc = run_case(&c);
  shard_rigor = KLJIT_PLAN_ESTIMATE;
  return rc;
}
static int measured_shard_plans_match(void) {
  return th_in_tmpdir("gpu-shard", measured_in);
}

/* The sparse teacher with CE mixing and a softcap on shards: the label's logit on its shard,
 * lse(z') from the records. */
static int sparse_with_ce_and_softcap(void) {
  const scase c = {"sparse BUCKET, K = 50, CE 0.5 + soft 0.5, softcap 5",
                   KLJIT_TEACHER_SPARSE_TOPK, KLJIT_REDUCTION_BATCHMEAN, KLJIT_TAIL_BUCKET,
                   KLJIT_TOPK_PROBS, 1, 1, 1.0, 0, 50,
                   KLJIT_DIVERGENCE_FORWARD_KL, 0.0, 0.5, 0.5, 5.0, 0};
  return run_case(&c);
}

/* Issue 29: the top-K teacher's reverse KL and JSD on shards: the second round sums Q g over
 * each shard's support (kl_sparse_sums), the tail category is global (M and Q_tail from every
 * record) and counted on the first shard, RENORM's log Q_S from the support's own (max,
 * sum-exp) merged over the shards. */
static int sparse_reverse_kl_bucket_with_ce(void) {
  const scase c = {"sparse reverse KL, BUCKET, K = 50, CE 0.5 + soft 0.5, bias, mean",
                   KLJIT_TEACHER_SPARSE_TOPK, KLJIT_REDUCTION_MEAN, KLJIT_TAIL_BUCKET,
                   KLJIT_TOPK_PROBS, 1, 1, 1.0, 0, 50,
                   KLJIT_DIVERGENCE_REVERSE_KL, 0.0, 0.5, 0.5, 0.0, 0};
  return run_case(&c);
}

static int sparse_jsd_renorm_logprobs(void) {
  const scase c = {"sparse JSD 0.4, RENORM log-probs, K = 64, T = 1.5, softcap 8",
                   KLJIT_TEACHER_SPARSE_TOPK, KLJIT_REDUCTION_BATCHMEAN, KLJIT_TAIL_RENORM,
                   KLJIT_TOPK_LOGPROBS, 1, 0, 1.5, 0, 64,
                   KLJIT_DIVERGENCE_JSD, 0.4, 0.0, 0.0, 8.0, 0};
  return run_case(&c);
}

static int sparse_jsd_bucket_k_above_a_shard(void) {
  /* K = 200 exceeds every shard's vocabulary at tp = 8 */
  const scase c = {"sparse JSD 0.7, BUCKET, K = 200, sum",
                   KLJIT_TEACHER_SPARSE_TOPK, KLJIT_REDUCTION_SUM, KLJIT_TAIL_BUCKET,
                   KLJIT_TOPK_PROBS, 0, 1, 1.0, 0, 200,
                   KLJIT_DIVERGENCE_JSD, 0.7, 0.0, 0.0, 0.0, 0};
  return run_case(&c);
}

/* The tuner times a reverse-KL shard's three calls (stats, sums, finish). */
static int reverse_measured_in(const char *dir) {
  th_private_wisdom(dir);
  setenv("KLJIT_TUNE_BUDGET_S", "2", 1), setenv("KLJIT_TUNE_ROWS", "512", 1);
  shard_rigor = KLJIT_PLAN_MEASURE;
  const scase c = {"reverse KL, dense logits; shards tuned (MEASURE)",
                   KLJIT_TEACHER_DENSE_LOGITS, KLJIT_REDUCTION_BATCHMEAN, KLJIT_TAIL_NONE,
                   KLJIT_TOPK_PROBS, 1, 1, 1.0, 0, 0,
                   KLJIT_DIVERGENCE_REVERSE_KL, 0.0, 0.0, 0.0, 0.0, 0};
  const int rc = run_case(&c);
  shard_rigor = KLJIT_PLAN_ESTIMATE;
  return rc;
}
static int reverse_kl_measured_shards(void) {
  return th_in_tmpdir("gpu-shard-rev", reverse_measured_in);
}

/* Issue 29 on shards: TVD and the skew KLs take the second round (S over the whole vocabulary),
 * row weights scale each rank's rows, the CE's label smoothing spreads over the global
 * vocabulary (each rank its columns' share) and its z-loss comes with lse(z') from the first
 * shard, and each rank's per-row loss and parts sum to the unsharded call's. */
/* Issue 29's cases: a case and its extras, run by index (the table keeps them side by side). */
static const struct {
  scase c;
  struct extras29 x;
} CASES29[7] = {
    {{"TVD, dense probs, row weights, row loss and parts, bias, ignored rows",
      KLJIT_TEACHER_DENSE_PROBS, KLJIT_REDUCTION_BATCHMEAN, KLJIT_TAIL_NONE, KLJIT_TOPK_PROBS, 1,
      1, 1.0, 0, 0, KLJIT_DIVERGENCE_TVD, 0.0, 0.0, 0.0, 0.0, 0},
     {0.0, 0.0, 0.0, 1, 1}},
    {{"TVD, dense logits, TT = 2, T = 1.5, mean, CE 0.5 smoothed 0.1 + soft 0.5",
      KLJIT_TEACHER_DENSE_LOGITS, KLJIT_REDUCTION_MEAN, KLJIT_TAIL_NONE, KLJIT_TOPK_PROBS, 1, 1,
      1.5, 2.0, 0, KLJIT_DIVERGENCE_TVD, 0.0, 0.5, 0.5, 0.0, 0},
     {0.0, 0.1, 0.0, 0, 1}},
    {{"skew forward KL 0.2, dense logits, CE 0.5 (smoothed 0.1, z-loss 1e-3), cap 20",
      KLJIT_TEACHER_DENSE_LOGITS, KLJIT_REDUCTION_BATCHMEAN, KLJIT_TAIL_NONE, KLJIT_TOPK_PROBS,
      1, 0, 1.0, 0, 0, KLJIT_DIVERGENCE_SKEW_FORWARD_KL, 0.0, 0.5, 0.5, 20.0, 0},
     {0.2, 0.1, 1e-3, 0, 1}},
    {{"skew reverse KL 0.3, online teacher, T = 2, sum, row weights, CE 0.4 z-loss",
      KLJIT_TEACHER_DENSE_LOGITS, KLJIT_REDUCTION_SUM, KLJIT_TAIL_NONE, KLJIT_TOPK_PROBS, 1, 1,
      2.0, 0, 0, KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0.0, 0.4, 0.8, 0.0, 1},
     {0.3, 0.0, 1e-2, 1, 1}},
    /* the top-K teacher (issue 29's last items): the skew KLs over its categories (E's sum over
     * S in the second round, as the JSD's), its CE smoothed over the global vocabulary (each
     * shard's sum of z' in its records) with the z-loss, and the loss's parts */
    {{"sparse skew forward KL 0.25, BUCKET, K = 50, batchmean, bias",
      KLJIT_TEACHER_SPARSE_TOPK, KLJIT_REDUCTION_BATCHMEAN, KLJIT_TAIL_BUCKET, KLJIT_TOPK_PROBS,
      1, 1, 1.0, 0, 50, KLJIT_DIVERGENCE_SKEW_FORWARD_KL, 0.0, 0.0, 0.0, 0.0, 0},
     {0.25, 0.0, 0.0, 0, 0}},
    {{"sparse skew reverse KL 0.6, RENORM log-probs, K = 64, T = 1.5, CE 0.5 (smoothed 0.1, "
      "z-loss 1e-3), parts",
      KLJIT_TEACHER_SPARSE_TOPK, KLJIT_REDUCTION_MEAN, KLJIT_TAIL_RENORM, KLJIT_TOPK_LOGPROBS, 1,
      0, 1.5, 0, 64, KLJIT_DIVERGENCE_SKEW_REVERSE_KL, 0.0, 0.5, 0.5, 0.0, 0},
     {0.6, 0.1, 1e-3, 0, 1}},
    {{"sparse forward KL, NONE, K = 200, sum, CE 0.5 (smoothed 0.2, z-loss 1e-2), cap 6, row "
      "weights, parts",
      KLJIT_TEACHER_SPARSE_TOPK, KLJIT_REDUCTION_SUM, KLJIT_TAIL_NONE, KLJIT_TOPK_PROBS, 1, 1,
      1.0, 0, 200, KLJIT_DIVERGENCE_FORWARD_KL, 0.0, 0.5, 0.7, 6.0, 0},
     {0.0, 0.2, 1e-2, 1, 1}},
};

static int run29(int i) {
  x29 = CASES29[i].x;
  const int rc = run_case(&CASES29[i].c);
  memset(&x29, 0, sizeof x29);
  return rc;
}
static int tvd_with_row_weights_and_outputs(void) { return run29(0); }
static int tvd_logits_with_smoothed_ce(void) { return run29(1); }
static int skew_forward_kl_with_ce_extras_and_softcap(void) { return run29(2); }
static int skew_reverse_kl_online_teacher_with_row_weights(void) { return run29(3); }
static int sparse_skew_forward_kl_bucket(void) { return run29(4); }
static int sparse_skew_reverse_kl_renorm_with_ce_extras_and_parts(void) { return run29(5); }
static int sparse_ce_extras_with_row_weights_and_parts(void) { return run29(6); }

static const th_case cases[] = {
    {"dense_probs_batchmean_with_ignored_rows", dense_probs_batchmean_with_ignored_rows},
    {"dense_logits_own_teacher_temperature_mean", dense_logits_own_teacher_temperature_mean},
    {"sparse_tail_none_batchmean", sparse_tail_none_batchmean},
    {"sparse_tail_bucket_mean", sparse_tail_bucket_mean},
    {"sparse_tail_renorm_logprobs", sparse_tail_renorm_logprobs},
    {"all_rows_ignored_gives_zero", all_rows_ignored_gives_zero},
    {"measured_shard_plans_match", measured_shard_plans_match},
    {"reverse_kl_with_ce_mixing", reverse_kl_with_ce_mixing},
    {"jsd_logits_own_temperature_mean", jsd_logits_own_temperature_mean},
    {"jsd_with_ce_online_teacher", jsd_with_ce_online_teacher},
    {"forward_kl_ce_online_teacher", forward_kl_ce_online_teacher},
    {"reverse_kl_measured_shards", reverse_kl_measured_shards},
    {"sparse_with_ce_and_softcap", sparse_with_ce_and_softcap},
    {"tvd_with_row_weights_and_outputs", tvd_with_row_weights_and_outputs},
    {"tvd_logits_with_smoothed_ce", tvd_logits_with_smoothed_ce},
    {"skew_forward_kl_with_ce_extras_and_softcap", skew_forward_kl_with_ce_extras_and_softcap},
    {"skew_reverse_kl_online_teacher_with_row_weights",
     skew_reverse_kl_online_teacher_with_row_weights},
    {"sparse_reverse_kl_bucket_with_ce", sparse_reverse_kl_bucket_with_ce},
    {"sparse_jsd_renorm_logprobs", sparse_jsd_renorm_logprobs},
    {"sparse_jsd_bucket_k_above_a_shard", sparse_jsd_bucket_k_above_a_shard},
    {"sparse_skew_forward_kl_bucket", sparse_skew_forward_kl_bucket},
    {"sparse_skew_reverse_kl_renorm_with_ce_extras_and_parts",
     sparse_skew_reverse_kl_renorm_with_ce_extras_and_parts},
    {"sparse_ce_extras_with_row_weights_and_parts", sparse_ce_extras_with_row_weights_and_parts},
};
TH_MAIN(cases)

/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_methods.c — dense_unfused, chunked_forward, kljit_fused and kljit_two_phase.
 *
 * dense_unfused      z = X W^T [N, V] whole; one row kernel writes the loss per row and
 *                    G [N, V]; dX = G W, dW = G^T X. A sparse teacher is first expanded to a
 *                    dense [N, V] (zeros off the top-K), as a framework's dense loss needs.
 *                    Memory beyond the inputs: N V (4 + 2) bytes (fp32 z, bf16 G) + teacher.
 * chunked_forward    forward: per chunk of R rows, z_c = X_c W^T [R, V], then the row kernel
 *                    keeps q = softmax(z_c) in a full [N, V] buffer (what autograd keeps for a
 *                    chunked forward) and the loss per row; backward: G = m q - p in place
 *                    over q, dX = G W and dW = G^T X over all N rows. Memory: R V 4 + N V 2.
 * kljit_fused        kljit_fused: loss, dX, dW in one call (3 GEMMs per chunk).
 * kljit_two_phase    kljit_forward, then kljit_backward with dloss = 1 (4 GEMMs per chunk).
 *
 * The baselines store G (and chunked_forward its q) times a power of two, gscale, undone by
 * the GEMMs' alpha, which also applies batchmean's 1/N: in fp16, q ~ 1/V and (m q - p) / N
 * would sit in the subnormals. gscale is 1 for bf16 and fp32.
 */
#include "matrix_methods.h"

#include <stdlib.h>
#include <string.h>

#include "matrix_kernels.h"

/* chunked_forward's chunk for --chunk-sizes auto. */
enum { MX_CHUNKED_FORWARD_AUTO = 4096 };

static double grad_scale(const mx_run *r) {
  if (r->dt != KLJIT_FP16) return 1.0;
  double s = 1.0;
  /* typical |G| ~ 1/V lands near 1/128; |G| <= 1 times s <= 2^15 stays below 65504 */
  while (s * 128 <= (double)r->vocab && s < 32768) s *= 2;
  return s;
}

static int kljit_fail(mx_run *r, kljit_status st, const char *call) {
  return mx_fail(r, "%s: %s (%s)", call, kljit_status_string(st), kljit_last_error());
}

static int kljit_setup(mx_run *r, mx_state *s) {
  const mx_options *o = r->o;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = r->hidden, pb.vocab = r->vocab;
  pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = r->dt;
  if (o->teacher == MX_TEACHER_SPARSE) {
    pb.teacher = KLJIT_TEACHER_SPARSE_TOPK;
    pb.topk = o->topk;
    pb.topk_id_dtype = KLJIT_INT64;
    pb.topk_values = KLJIT_TOPK_PROBS;
    pb.tail = KLJIT_TAIL_NONE;
  }
  if (o->logits == MX_LOGITS_NATIVE) pb.flags |= KLJIT_FLAG_NATIVE_LOGITS;
  kljit_status st = kljit_context_create(&s->ctx, 0, NULL);
  if (st) return kljit_fail(r, st, "kljit_context_create");
  st = kljit_plan_create(s->ctx, &pb, KLJIT_PLAN_ESTIMATE, &s->plan);
  if (st) return kljit_fail(r, st, "kljit_plan_create");

  const char *cr = strstr(kljit_plan_describe(s->plan), "chunk_rows=");
  s->chunk = cr ? atoll(cr + strlen("chunk_rows=")) : 0;

  size_t ws = 0, ws_b = 0, saved = 0;
  const int two = r->e.method == MX_KLJIT_TWO_PHASE;
  st =
      kljit_plan_workspace_size(s->plan, two ? KLJIT_MODE_FORWARD : KLJIT_MODE_FUSED, r->rows, &ws);
  if (!st && two) st = kljit_plan_workspace_size(s->plan, KLJIT_MODE_BACKWARD, r->rows, &ws_b);
  if (!st && two) st = kljit_plan_saved_size(s->plan, r->rows, &saved);
  if (st) return kljit_fail(r, st, "kljit_plan_workspace_size");
  if (ws_b > ws) ws = ws_b;

  kljit_args *a = &s->args;
  *a = (kljit_args)KLJIT_ARGS_INIT;
  a->rows = r->rows, a->input = r->x, a->weight = r->w;
  a->teacher = r->teacher, a->teacher_ids = r->ids, a->teacher_values = r->vals;
  a->loss = r->loss, a->grad_input = r->dx, a->grad_weight = r->dw;
  a->workspace_size = ws;
  if (mx_alloc(r, &a->workspace, ws ? ws : 256, "kljit workspace")) return 1;
  if (two) {
    void *gout;
    const float one = 1.0f;
    if (mx_alloc(r, (void **)&a->saved, saved ? saved : 16, "kljit saved statistics") ||
        mx_alloc(r, &gout, sizeof one, "grad_output") ||
        mx_cuda(r, cudaMemcpy(gout, &one, sizeof one, cudaMemcpyHostToDevice), "grad_output"))
      return 1;
    a->grad_output = gout;
  }
  return 0;
}

int mx_method_setup(mx_run *r, mx_state *s) {
  memset(s, 0, sizeof *s);
  s->gscale = grad_scale(r);
  const size_t nv = (size_t)r->rows * r->ld;
  switch (r->e.method) {
    case MX_DENSE_UNFUSED:
      s->chunk = r->rows;
      if (mx_blas_handle(r) || mx_alloc(r, &s->z, nv * r->zes, "logits [N, V]") ||
          mx_alloc(r, &s->g, nv * r->es, "logits gradient [N, V]") ||
          mx_alloc(r, (void **)&s->row_loss, (size_t)r->rows * 4, "row losses"))
        return 1;
      if (r->ids && mx_alloc(r, &s->dense, (size_t)r->rows * r->vocab * r->es,
                             "sparse teacher expanded to [N, V]"))
        return 1;
      return 0;
    case MX_CHUNKED_FORWARD:
      s->chunk = r->e.chunk > 0 ? r->e.chunk : MX_CHUNKED_FORWARD_AUTO;
      if (s->chunk > r->rows) s->chunk = r->rows;
      if (mx_blas_handle(r) ||
          mx_alloc(r, &s->z, (size_t)s->chunk * r->ld * r->zes, "chunk logits [R, V]") ||
          mx_alloc(r, &s->q, nv * r->es, "softmax kept for backward [N, V]") ||
          mx_alloc(r, (void **)&s->row_loss, (size_t)r->rows * 4, "row losses") ||
          mx_alloc(r, (void **)&s->row_mass, (size_t)r->rows * 4, "row masses"))
        return 1;
      return 0;
    case MX_KLJIT_FUSED:
    case MX_KLJIT_TWO_PHASE:
      return kljit_setup(r, s);
    default:
      return mx_fail(r, "unknown method %d", (int)r->e.method);
  }
}

/* The row kernel's arguments for rows [row0, row0 + n) of the shared teacher. */
static mxk_rows rows_args(const mx_run *r, const mx_state *s, int64_t row0, int64_t n) {
  mxk_rows a;
  memset(&a, 0, sizeof a);
  a.zdt = r->zdt, a.ldz = r->ld, a.dt = r->dt;
  a.rows = n, a.vocab = r->vocab, a.eps = r->eps, a.gscale = s->gscale;
  a.k = r->o->topk;
  if (r->teacher) a.teacher = (const char *)r->teacher + (size_t)row0 * r->vocab * r->es;
  if (r->ids) {
    a.ids = r->ids + row0 * a.k;
    a.vals = (const char *)r->vals + (size_t)row0 * a.k * r->es;
  }
  a.row_loss = s->row_loss + row0;
  a.row_mass = s->row_mass ? s->row_mass + row0 : NULL;
  return a;
}

static int step_unfused(mx_run *r, mx_state *s) {
  mxk_rows a = rows_args(r, s, 0, r->rows);
  if (s->dense) {
    if (mx_cuda(r, mxk_expand_topk(s->dense, r->dt, r->ids, r->vals, r->rows, r->o->topk, r->vocab),
                "expand the sparse teacher"))
      return 1;
    a.teacher = s->dense, a.ids = NULL, a.vals = NULL;
  }
  a.z = s->z, a.out = s->g, a.ldo = r->ld, a.out_kind = MXK_OUT_GRAD;
  const float alpha = (float)(1.0 / ((double)r->rows * s->gscale));
  return mx_gemm_logits(r, 0, r->rows, s->z) ||
         mx_cuda(r, mxk_rows_loss(&a), "row kernel (loss and gradient)") ||
         mx_cuda(r, mxk_sum_rows(s->row_loss, r->rows, 1.0 / r->rows, r->loss), "loss sum") ||
         mx_gemm_dx(r, 0, r->rows, s->g, r->ld, alpha) ||
         mx_gemm_dw(r, 0, r->rows, s->g, r->ld, alpha, 0.0f);
}

static int step_chunked_forward(mx_run *r, mx_state *s) {
  for (int64_t row0 = 0; row0 < r->rows; row0 += s->chunk) {
    const int64_t n = r->rows - row0 < s->chunk ? r->rows - row0 : s->chunk;
    mxk_rows a = rows_args(r, s, row0, n);
    a.z = s->z, a.out_kind = MXK_OUT_PROBS, a.ldo = r->ld;
    a.out = (char *)s->q + (size_t)row0 * r->ld * r->es;
    if (mx_gemm_logits(r, row0, n, s->z) ||
        mx_cuda(r, mxk_rows_loss(&a), "row kernel (loss and softmax)"))
      return 1;
  }
  const mxk_rows all = rows_args(r, s, 0, r->rows);
  const float alpha = (float)(1.0 / ((double)r->rows * s->gscale));
  return mx_cuda(r, mxk_sum_rows(s->row_loss, r->rows, 1.0 / r->rows, r->loss), "loss sum") ||
         mx_cuda(r, mxk_grad_from_probs(s->q, r->ld, &all, s->row_mass), "backward kernel") ||
         mx_gemm_dx(r, 0, r->rows, s->q, r->ld, alpha) ||
         mx_gemm_dw(r, 0, r->rows, s->q, r->ld, alpha, 0.0f);
}

int mx_method_step(mx_run *r, mx_state *s) {
  kljit_status st;
  switch (r->e.method) {
    case MX_DENSE_UNFUSED:
      return step_unfused(r, s);
    case MX_CHUNKED_FORWARD:
      return step_chunked_forward(r, s);
    case MX_KLJIT_FUSED:
      st = kljit_fused(s->plan, NULL, &s->args);
      return st ? kljit_fail(r, st, "kljit_fused") : 0;
    case MX_KLJIT_TWO_PHASE:
      st = kljit_forward(s->plan, NULL, &s->args);
      if (st) return kljit_fail(r, st, "kljit_forward");
      st = kljit_backward(s->plan, NULL, &s->args);
      return st ? kljit_fail(r, st, "kljit_backward") : 0;
    default:
      return mx_fail(r, "unknown method %d", (int)r->e.method);
  }
}

void mx_method_teardown(mx_run *r, mx_state *s) {
  (void)r;
  kljit_plan_destroy(s->plan);
  kljit_context_destroy(s->ctx);
  s->plan = NULL, s->ctx = NULL;
}

void mx_method_floor(const mx_run *r, const mx_state *s, mx_floor *f) {
  memset(f, 0, sizeof *f);
  const int64_t chunk = s->chunk > 0 ? s->chunk : r->rows;
  switch (r->e.method) {
    case MX_DENSE_UNFUSED:
      f->bwd_chunk = r->rows, f->bwd_logits = 1;
      break;
    case MX_CHUNKED_FORWARD:
      f->fwd_chunk = chunk, f->bwd_chunk = r->rows;
      break;
    case MX_KLJIT_FUSED:
      f->bwd_chunk = chunk, f->bwd_logits = 1;
      break;
    default:
      f->fwd_chunk = f->bwd_chunk = chunk, f->bwd_logits = 1;
      break;
  }
}

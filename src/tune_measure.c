/* SPDX-License-Identifier: Apache-2.0 */
/* tune_measure.c — timing candidate configurations on the GPU (KLJIT_PLAN_MEASURE,
 * KLJIT_PLAN_EXHAUSTIVE, kljit_tune).
 *
 * What one timing is: a plan built with the candidate's tuning (plan_create_tuned) runs one
 * kljit_fused call over `rows` tokens (kljit_forward + kljit_backward for REDUCTION_NONE, which
 * has no fused mode; for a vocabulary shard, kljit_shard_stats + kljit_shard_finish on records
 * of every rank that are this rank's, replicated once: the collective between them is the
 * caller's and is not timed), on kljit's own stream and buffers: random non-zero inputs of the
 * problem's dtypes (a host tile repeated on the device), outputs and workspace that nobody
 * else reads. One warm-up call (it also picks the cuBLASLt algorithms), then repeats, each
 * after a 256 MiB memset that flushes the L2, timed with CUDA events; the median counts. A
 * candidate whose first repeat is 25% slower than the best so far stops there.
 *
 * The search (tune.h): SHAPES, then CHUNKS around the best shape, then the sm_90 CLUSTER
 * variants. The heuristic choice is timed first, always, with at least 3 repeats; the others
 * run while the time budget lasts (compiles count). A challenger must beat the best by 1% to
 * replace it, so noise does not move the choice away from the heuristic.
 *
 * Then the winner's GEMMs, each in the call (tune_gemms): for each GEMM of the chunk loop, the
 * top 8 algorithms of cuBLASLt's heuristic and a few generated variants, each a tuning that
 * differs in that GEMM alone, timed as the whole call like the candidates above (its outputs
 * checked against the reference call's first); one 1% faster is kept in the tuning
 * (prob_gemm_choice, stored with the entry); then the chunk sizes again. The entry's ms is the
 * winner's call.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune_measure.h"

#include "cublaslt.h"
#include "gemm_algo.h"
#include "host_dtype.h"
#include "jit.h"
#include "layout.h"

enum { FLUSH_BYTES = 256 << 20, TILE = 1 << 20, DESC = 192 };

typedef struct bench {
  kljit_context *ctx;
  const drv_table *d;
  const kljit_problem *pb;
  kljit_plan_rigor rigor;
  int64_t rows;
  int two_phase; /* REDUCTION_NONE: forward + backward */
  CUstream stream;
  CUevent ev[2];
  CUdeviceptr x, w, b, t, ids, vals, loss, dx, dw, db, saved, gout, ws, flush;
  CUdeviceptr lab; /* labels (all 0), for the CE a hard_weight asks for */
  CUdeviceptr tx, tw, tb; /* the online teacher's hidden states, head and bias (DENSE_HIDDEN) */
  CUdeviceptr all; /* sharded: [shards][rows] records for kljit_shard_finish */
  kiface_layout lay; /* the records' floats the problem's modules declare */
  int all_ready;   /* the other ranks' slots hold (this rank's) records */
  size_t ws_bytes;
  kljit_args a;
  /* progress */
  kljit_tune_callback cb;
  void *user;
  kljit_tune_progress pr;
  char cur[DESC], best_text[DESC];
  prob_tuning best;
  double best_ms, t0, budget;
  int have_best;
  /* the GEMM stage: each candidate's call checked against the reference call's outputs */
  int check;
  float ref_loss, *ref_dx, *ref_dw;
} bench;

#define DRV(b, call, what) drv_check((b)->d, (b)->d->call, what)

/* ---- random inputs ----------------------------------------------------------------------- */

static uint64_t next_random(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Copies host bytes to the start of dst, then doubles them until `bytes` are filled. */
static kljit_status replicate(bench *b, CUdeviceptr dst, const void *host, size_t tile,
                              size_t bytes) {
  kljit_status st = DRV(b, cuMemcpyHtoD(dst, host, tile < bytes ? tile : bytes), "cuMemcpyHtoD");
  for (size_t done = tile; st == KLJIT_SUCCESS && done < bytes; done *= 2)
    st = DRV(b, cuMemcpyDtoD(dst + done, dst, done < bytes - done ? done : bytes - done),
             "cuMemcpyDtoD");
  return st;
}

/* count values of dtype dt, uniform in [lo, hi), a tile of TILE values repeated. */
static kljit_status fill(bench *b, CUdeviceptr dst, size_t count, kljit_dtype dt, double lo,
                         double hi, uint64_t seed) {
  const size_t es = names_dtype_size(dt), n = count < TILE ? count : TILE;
  unsigned char *h = malloc(n * es);
  if (!h) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  for (size_t i = 0; i < n; i++) {
    const float v = (float)(lo + (hi - lo) * (double)(next_random(&seed) >> 11) * 0x1p-53);
    if (dt == KLJIT_FP32)
      memcpy(h + 4 * i, &v, 4);
    else {
      const uint16_t x = dt == KLJIT_BF16 ? host_f32_to_bf16(v) : host_f32_to_f16(v);
      memcpy(h + 2 * i, &x, 2);
    }
  }
  const kljit_status st = replicate(b, dst, h, n * es, count * es);
  free(h);
  return st;
}

/* Sparse teacher ids: K distinct ids per row (stride V/K, a per-row offset). */
static kljit_status fill_ids(bench *b) {
  const kljit_problem *pb = b->pb;
  const size_t k = (size_t)pb->topk, n = (size_t)b->rows * k;
  const int wide = pb->topk_id_dtype == KLJIT_INT64;
  unsigned char *h = malloc(n * (wide ? 8 : 4));
  if (!h) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  const int64_t stride = pb->vocab / (int64_t)k;
  for (size_t r = 0; r < (size_t)b->rows; r++)
    for (size_t j = 0; j < k; j++) {
      const int64_t id = (int64_t)j * stride + (int64_t)(r * 7919 % (size_t)stride);
      const int32_t id32 = (int32_t)id;
      if (wide)
        memcpy(h + 8 * (r * k + j), &id, 8);
      else
        memcpy(h + 4 * (r * k + j), &id32, 4);
    }
  const kljit_status st = replicate(b, b->ids, h, n * (wide ? 8 : 4), n * (wide ? 8 : 4));
  free(h);
  return st;
}

/* ---- buffers ----------------------------------------------------------------------------- */

static size_t up(size_t x) {
  return (x + 255) & ~(size_t)255;
}

/* Bytes of every buffer but the workspace, for `rows` tokens. */
static size_t fixed_bytes(const bench *b, int64_t rows) {
  const kljit_problem *pb = b->pb;
  const size_t n = (size_t)rows, v = (size_t)pb->vocab, h = (size_t)pb->hidden;
  const size_t in = names_dtype_size(pb->input_dtype), gw = names_dtype_size(pb->grad_weight_dtype);
  const size_t td = names_dtype_size(pb->teacher_dtype);
  const int bias = (pb->flags & KLJIT_FLAG_BIAS) != 0;
  size_t s = 2 * up(n * h * in) + up(v * h * in) + up(v * h * gw) + FLUSH_BYTES;
  if (bias) s += up(v * in) + up(v * gw);
  if (pb->teacher == KLJIT_TEACHER_SPARSE_TOPK)
    s += up(n * (size_t)pb->topk * (names_dtype_size(pb->topk_id_dtype) + td));
  else if (pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN)
    s += up((n + v) * (size_t)pb->teacher_hidden * td) + up(v * td);
  else
    s += up(n * (size_t)prob_teacher_ld(pb) * td);
  s += 3 * up(n * 4 + (size_t)kiface_saved_floats(&b->lay, rows) * 4); /* loss, saved, gout */
  if (pb->hard_weight != 0.0) s += up(n * 8);
  if (prob_sharded(pb)) s += up(n * (size_t)b->lay.part * 4 * (size_t)pb->shards);
  return s;
}

/* Workspace bytes of a plan of geometry g for `rows` tokens (fused; two-phase: the larger of
 * forward and backward), its records as the heuristic plan's modules declare them (b->lay). */
static size_t plan_ws(const bench *b, const prob_geometry *g, int64_t rows) {
  if (!b->two_phase) return prob_workspace_layout(b->pb, g, &b->lay, KLJIT_MODE_FUSED, rows).total;
  const size_t f = prob_workspace_layout(b->pb, g, &b->lay, KLJIT_MODE_FORWARD, rows).total;
  const size_t k = prob_workspace_layout(b->pb, g, &b->lay, KLJIT_MODE_BACKWARD, rows).total;
  return f > k ? f : k;
}

static kljit_status alloc(bench *b, CUdeviceptr *p, size_t bytes) {
  return DRV(b, cuMemAlloc(p, bytes ? bytes : 256), "cuMemAlloc (tuning buffers)");
}

static void free_all(bench *b) {
  CUdeviceptr *all[] = {&b->x,  &b->w,  &b->b,  &b->t,     &b->ids,  &b->vals, &b->loss,
                        &b->dx, &b->dw, &b->db, &b->saved, &b->gout, &b->ws,   &b->flush,
                        &b->all, &b->lab, &b->tx, &b->tw, &b->tb};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (*all[i]) b->d->cuMemFree(*all[i]), *all[i] = 0;
  for (int i = 0; i < 2; i++)
    if (b->ev[i]) b->d->cuEventDestroy(b->ev[i]), b->ev[i] = NULL;
  if (b->stream) b->d->cuStreamDestroy(b->stream), b->stream = NULL;
}

/* Fewer tokens than asked when the GPU's free memory is short (halving, down to 256), for the
 * plans of the heuristic tuning. */
static kljit_status pick_rows(bench *b, const prob_tuning *heur, int64_t asked) {
  recipe r;
  const recipe_device dev = plan_device(b->ctx);
  kljit_status st = recipe_make_on(b->pb, heur, &b->ctx->opt, &dev, &r);
  if (st != KLJIT_SUCCESS) return st;
  size_t free_b = 0, total = 0;
  st = DRV(b, cuMemGetInfo(&free_b, &total), "cuMemGetInfo");
  if (st != KLJIT_SUCCESS) return st;
  const double room = 0.85 * (double)free_b;
  int64_t n = asked;
  while (n > 256 &&
         (double)(fixed_bytes(b, n) + 2 * plan_ws(b, &r.geom, n)) > room)
    n /= 2;
  const size_t need = fixed_bytes(b, n) + plan_ws(b, &r.geom, n);
  if ((double)need > room)
    return err_set(KLJIT_ERR_UNSUPPORTED,
                   "not enough free GPU memory to tune: %.2f GiB needed at %lld tokens, %.2f GiB "
                   "free",
                   need / 1073741824.0, (long long)n, free_b / 1073741824.0);
  if (n < asked)
    util_log("tune: %lld tokens instead of %lld (GPU memory)", (long long)n, (long long)asked);
  b->rows = n;
  return KLJIT_SUCCESS;
}

static kljit_status setup(bench *b) {
  const kljit_problem *pb = b->pb;
  const size_t n = (size_t)b->rows, v = (size_t)pb->vocab, h = (size_t)pb->hidden;
  const kljit_dtype in = pb->input_dtype, gw = pb->grad_weight_dtype, td = pb->teacher_dtype;
  const size_t ins = names_dtype_size(in), tds = names_dtype_size(td);
  const int bias = (pb->flags & KLJIT_FLAG_BIAS) != 0;
  const int sparse = pb->teacher == KLJIT_TEACHER_SPARSE_TOPK;
  kljit_status st = DRV(b, cuStreamCreate(&b->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  for (int i = 0; i < 2 && st == KLJIT_SUCCESS; i++)
    st = DRV(b, cuEventCreate(&b->ev[i], CU_EVENT_DEFAULT), "cuEventCreate");
  if (st == KLJIT_SUCCESS) st = alloc(b, &b->x, n * h * ins);
  if (st == KLJIT_SUCCESS) st = alloc(b, &b->w, v * h * ins);
  if (st == KLJIT_SUCCESS) st = alloc(b, &b->dx, n * h * ins);
  if (st == KLJIT_SUCCESS) st = alloc(b, &b->dw, v * h * names_dtype_size(gw));
  if (st == KLJIT_SUCCESS && bias) st = alloc(b, &b->b, v * ins);
  if (st == KLJIT_SUCCESS && bias) st = alloc(b, &b->db, v * names_dtype_size(gw));
  if (st == KLJIT_SUCCESS && sparse)
    st = alloc(b, &b->ids, n * (size_t)pb->topk * names_dtype_size(pb->topk_id_dtype));
  if (st == KLJIT_SUCCESS && sparse) st = alloc(b, &b->vals, n * (size_t)pb->topk * tds);
  const size_t tld = (size_t)prob_teacher_ld(pb); /* a padded teacher's rows */
  const int hidden = pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN;
  const size_t ht = (size_t)pb->teacher_hidden;
  if (st == KLJIT_SUCCESS && !sparse && !hidden) st = alloc(b, &b->t, n * tld * tds);
  if (st == KLJIT_SUCCESS && hidden) st = alloc(b, &b->tx, n * ht * tds);
  if (st == KLJIT_SUCCESS && hidden) st = alloc(b, &b->tw, v * ht * tds);
  const int tbias = (pb->flags & KLJIT_FLAG_TEACHER_BIAS) != 0;
  if (st == KLJIT_SUCCESS && tbias) st = alloc(b, &b->tb, v * tds);
  if (st == KLJIT_SUCCESS) st = alloc(b, &b->loss, n * 4);
  if (st == KLJIT_SUCCESS)
    st = alloc(b, &b->saved, (size_t)kiface_saved_floats(&b->lay, b->rows) * 4);
  if (st == KLJIT_SUCCESS && pb->hard_weight != 0.0) st = alloc(b, &b->lab, n * 8);
  if (st == KLJIT_SUCCESS) st = alloc(b, &b->gout, n * 4);
  if (st == KLJIT_SUCCESS) st = alloc(b, &b->flush, FLUSH_BYTES);
  if (st == KLJIT_SUCCESS && prob_sharded(pb))
    st = alloc(b, &b->all, n * (size_t)b->lay.part * 4 * (size_t)pb->shards);
  if (st != KLJIT_SUCCESS) return st;
  /* inputs: |z| of order 0.1; a teacher of the right form with every entry non-zero */
  const double lv = log(1.0 / (double)v), k = sparse ? (double)pb->topk : 1.0;
  if (st == KLJIT_SUCCESS) st = fill(b, b->x, n * h, in, -0.1, 0.1, 1);
  if (st == KLJIT_SUCCESS) st = fill(b, b->w, v * h, in, -0.1, 0.1, 2);
  if (st == KLJIT_SUCCESS && bias) st = fill(b, b->b, v, in, -0.1, 0.1, 3);
  if (st == KLJIT_SUCCESS && hidden) st = fill(b, b->tx, n * ht, td, -0.1, 0.1, 6);
  if (st == KLJIT_SUCCESS && hidden) st = fill(b, b->tw, v * ht, td, -0.1, 0.1, 7);
  if (st == KLJIT_SUCCESS && tbias) st = fill(b, b->tb, v, td, -0.1, 0.1, 8);
  if (st == KLJIT_SUCCESS && !sparse && !hidden)
    st = pb->teacher == KLJIT_TEACHER_DENSE_PROBS ? fill(b, b->t, n * tld, td, 0.5 / v, 1.5 / v, 4)
         : pb->teacher == KLJIT_TEACHER_DENSE_LOGPROBS
             ? fill(b, b->t, n * tld, td, lv - .5, lv + .5, 4)
             : fill(b, b->t, n * tld, td, -4.0, 4.0, 4);
  if (st == KLJIT_SUCCESS && b->lab) /* label 0 on every row */
    st = DRV(b, cuMemsetD8Async(b->lab, 0, n * 8, b->stream), "cuMemsetD8Async");
  if (st == KLJIT_SUCCESS && sparse) st = fill_ids(b);
  if (st == KLJIT_SUCCESS && sparse) /* 90% of the mass on the support: a tail for BUCKET */
    st = pb->topk_values == KLJIT_TOPK_PROBS
             ? fill(b, b->vals, n * (size_t)pb->topk, td, 0.45 / k, 0.9 / k, 5)
             : fill(b, b->vals, n * (size_t)pb->topk, td, log(0.45 / k), log(0.9 / k), 5);
  if (st == KLJIT_SUCCESS) /* upstream gradient 1.0f of the two-phase backward */
    st = DRV(b, cuMemsetD32Async(b->gout, 0x3f800000u, n, b->stream), "cuMemsetD32Async");
  if (st == KLJIT_SUCCESS) st = DRV(b, cuStreamSynchronize(b->stream), "cuStreamSynchronize");

  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = b->rows;
  a.input = (void *)(uintptr_t)b->x, a.weight = (void *)(uintptr_t)b->w;
  a.bias = bias ? (void *)(uintptr_t)b->b : NULL;
  a.labels = b->lab ? (const void *)(uintptr_t)b->lab : NULL;
  a.teacher = sparse || hidden ? NULL : (void *)(uintptr_t)b->t;
  a.teacher_input = hidden ? (const void *)(uintptr_t)b->tx : NULL;
  a.teacher_weight = hidden ? (const void *)(uintptr_t)b->tw : NULL;
  a.teacher_bias = tbias ? (const void *)(uintptr_t)b->tb : NULL;
  a.teacher_ids = sparse ? (void *)(uintptr_t)b->ids : NULL;
  a.teacher_values = sparse ? (void *)(uintptr_t)b->vals : NULL;
  a.temperature = pb->temperature > 0 ? pb->temperature : 1.0;
  a.loss = (float *)(uintptr_t)b->loss;
  a.grad_input = (void *)(uintptr_t)b->dx, a.grad_weight = (void *)(uintptr_t)b->dw;
  a.grad_bias = bias ? (void *)(uintptr_t)b->db : NULL;
  a.saved = (float *)(uintptr_t)b->saved, a.grad_output = (const float *)(uintptr_t)b->gout;
  /* row weights of 1 (the upstream gradient's buffer holds n ones) */
  if (pb->flags & KLJIT_FLAG_ROW_WEIGHTS) a.row_weights = (const float *)(uintptr_t)b->gout;
  b->a = a;
  return st;
}

/* ---- timing ------------------------------------------------------------------------------ */

/* A shard's step without its collective: this rank's records go to slot 0; the other slots get
 * a copy of them once (finite, plausible records: the merge costs the same whatever they hold). */
static kljit_status sharded_call(bench *b, const kljit_plan *plan) {
  void *s = (void *)b->stream;
  float *all = (float *)(uintptr_t)b->all;
  kljit_status st = kljit_shard_stats(plan, s, &b->a, all);
  if (st == KLJIT_SUCCESS && !b->all_ready) {
    const size_t bytes = (size_t)b->rows * (size_t)b->lay.part * 4;
    st = DRV(b, cuStreamSynchronize(b->stream), "cuStreamSynchronize");
    for (int k = 1; k < b->pb->shards && st == KLJIT_SUCCESS; k++)
      st = DRV(b, cuMemcpyDtoD(b->all + (size_t)k * bytes, b->all, bytes), "cuMemcpyDtoD");
    /* device-to-device copies run on the legacy stream without waiting for the host */
    if (st == KLJIT_SUCCESS) st = DRV(b, cuStreamSynchronize(NULL), "cuStreamSynchronize");
    b->all_ready = st == KLJIT_SUCCESS;
  }
  /* REVERSE_KL, JSD: the second round's pass (slot S of slot 0's records; the copies keep
   * theirs, NaN: the timing does not depend on S) */
  if (st == KLJIT_SUCCESS) st = kljit_shard_sums(plan, s, &b->a, all, b->pb->shards, all);
  return st == KLJIT_SUCCESS ? kljit_shard_finish(plan, s, &b->a, all, b->pb->shards) : st;
}

static kljit_status call(bench *b, const kljit_plan *plan) {
  void *s = (void *)b->stream;
  if (prob_sharded(b->pb)) return sharded_call(b, plan);
  if (!b->two_phase) return kljit_fused(plan, s, &b->a);
  kljit_status st = kljit_forward(plan, s, &b->a);
  return st == KLJIT_SUCCESS ? kljit_backward(plan, s, &b->a) : st;
}

static kljit_status timed_call(bench *b, const kljit_plan *plan, int flush_value, float *ms) {
  kljit_status st =
      DRV(b, cuMemsetD8Async(b->flush, (unsigned char)flush_value, FLUSH_BYTES, b->stream),
          "cuMemsetD8Async (L2 flush)");
  if (st == KLJIT_SUCCESS) st = DRV(b, cuEventRecord(b->ev[0], b->stream), "cuEventRecord");
  if (st == KLJIT_SUCCESS) st = call(b, plan);
  if (st == KLJIT_SUCCESS) st = DRV(b, cuEventRecord(b->ev[1], b->stream), "cuEventRecord");
  if (st == KLJIT_SUCCESS) st = DRV(b, cuEventSynchronize(b->ev[1]), "cuEventSynchronize");
  if (st == KLJIT_SUCCESS)
    st = DRV(b, cuEventElapsedTime(ms, b->ev[0], b->ev[1]), "cuEventElapsedTime");
  return st;
}

static int cmp_float(const void *x, const void *y) {
  const float a = *(const float *)x, c = *(const float *)y;
  return (a > c) - (a < c);
}

static kljit_status agrees(bench *b, int *ok);

/* Median time of one candidate; *usable = 0 when it cannot run here (refused at plan time,
 * too much workspace, a launch the GPU rejects) and the context is still healthy. */
static kljit_status time_candidate(bench *b, const prob_tuning *t, int first, double *ms,
                                   int *usable) {
  *usable = 0, *ms = -1;
  kljit_plan *plan = NULL;
  kljit_status st = plan_create_tuned(b->ctx, b->pb, t, "tuning candidate", util_now(), &plan);
  if (st != KLJIT_SUCCESS && !first &&
      (st == KLJIT_ERR_UNSUPPORTED || st == KLJIT_ERR_COMPILE || st == KLJIT_ERR_CUDA ||
       st == KLJIT_ERR_INVALID_ARGUMENT)) {
    util_log("tune: skipping %s: %s", b->cur, kljit_last_error());
    err_clear(); /* refused by its template, NVRTC or the module loader: not a candidate here */
    return KLJIT_SUCCESS;
  }
  if (st != KLJIT_SUCCESS) return st;
  if (memcmp(&plan->layout, &b->lay, sizeof b->lay)) { /* the buffers were sized by b->lay */
    kljit_plan_destroy(plan);
    return err_set(KLJIT_ERR_INTERNAL, "tuning candidate %s declares other records than the "
                   "heuristic plan's", b->cur);
  }
  const size_t need = plan_ws(b, &plan->rec.geom, b->rows);
  if (need > b->ws_bytes) {
    if (b->ws) b->d->cuMemFree(b->ws), b->ws = 0, b->ws_bytes = 0;
    if (b->d->cuMemAlloc(&b->ws, need) == CUDA_SUCCESS)
      b->ws_bytes = need;
    else
      b->ws = 0;
  }
  if (!b->ws) { /* this chunk size does not fit next to the problem's buffers */
    kljit_plan_destroy(plan);
    if (first) return err_set(KLJIT_ERR_UNSUPPORTED, "no GPU memory for the tuning workspace");
    return KLJIT_SUCCESS;
  }
  b->a.workspace = (void *)(uintptr_t)b->ws, b->a.workspace_size = b->ws_bytes;
  const double w0 = util_now();
  st = call(b, plan); /* warm-up: also picks the cuBLASLt algorithms */
  if (st == KLJIT_SUCCESS) st = DRV(b, cuStreamSynchronize(b->stream), "cuStreamSynchronize");
  const double warm = util_now() - w0;
  int right = 1;
  if (st == KLJIT_SUCCESS && b->check) st = agrees(b, &right);
  if (st == KLJIT_SUCCESS && !right) {
    kljit_plan_destroy(plan);
    return KLJIT_SUCCESS; /* a wrong kernel is never timed */
  }
  if (st != KLJIT_SUCCESS) {
    kljit_plan_destroy(plan);
    /* a launch the GPU refuses spoils only this candidate; a sticky error spoils the context */
    if (first || b->d->cuStreamSynchronize(b->stream) != CUDA_SUCCESS) return st;
    err_clear();
    return KLJIT_SUCCESS;
  }
  int reps = b->rigor == KLJIT_PLAN_EXHAUSTIVE ? 7 : 5;
  const double left = b->budget - (util_now() - b->t0);
  if (warm * reps > left) reps = (int)(left / (warm > 1e-6 ? warm : 1e-6));
  if (reps < (first ? 3 : 1)) reps = first ? 3 : 1;
  float times[8];
  int done = 0;
  for (int r = 0; r < reps && st == KLJIT_SUCCESS; r++) {
    st = timed_call(b, plan, r + 1, &times[done]);
    if (st != KLJIT_SUCCESS) break;
    done++;
    if (r == 0 && b->have_best && times[0] > 1.25 * b->best_ms) break; /* cannot win */
  }
  kljit_plan_destroy(plan);
  if (st != KLJIT_SUCCESS) return st;
  qsort(times, (size_t)done, sizeof times[0], cmp_float);
  *ms = done % 2 ? times[done / 2] : 0.5 * (times[done / 2 - 1] + times[done / 2]);
  *usable = 1;
  return KLJIT_SUCCESS;
}

static void report(bench *b, kljit_tune_event ev, double ms) {
  if (!b->cb) return;
  b->pr.event = ev;
  b->pr.candidate = b->cur;
  b->pr.candidate_ms = ms;
  b->pr.best = b->have_best ? b->best_text : "";
  b->pr.best_ms = b->have_best ? b->best_ms : 0;
  b->pr.rows = b->rows;
  b->pr.elapsed_s = util_now() - b->t0;
  b->pr.budget_s = b->budget;
  b->cb(&b->pr, b->user);
}

/* tune_describe, and the tuning's GEMM choices (" dx=jit.256.2.4.g.1 logits=lt.3f2a..."). */
static void describe(const prob_tuning *t, char *out, size_t cap) {
  static const char *const kinds[] = {"logits", "dx", "dw"};
  tune_describe(t, out, cap);
  for (int i = 0; i < PROB_GEMM_CHOICES; i++) {
    const prob_gemm_choice *c = &t->gemm[i];
    const size_t at = strlen(out);
    if (!c->used || c->kind < 0 || c->kind > 2 || (c->kind == GEMM_DW && c->jit && c->beta_zero))
      continue;
    char v[GEMM_ALGO_JIT_TEXT_MAX];
    if (c->jit) gemm_algo_jit_text(c, v);
    else /* an algorithm is opaque: a short digest of its words tells candidates apart */
      snprintf(v, sizeof v, "%08llx",
               (unsigned long long)((c->algo[0] ^ c->algo[1] ^ c->algo[2]) & 0xffffffffu));
    snprintf(out + at, cap - at, " %s=%s%s", kinds[c->kind], c->jit ? "jit." : "cublas#", v);
  }
}

/* Times a stage's candidates; the heuristic (first of all) is always timed. */
static kljit_status run_stage(bench *b, const prob_tuning *cands, int n) {
  for (int i = 0; i < n; i++) {
    const int first = !b->have_best;
    if (!first && util_now() - b->t0 >= b->budget) break;
    b->pr.index++;
    if (b->pr.index > b->pr.count) b->pr.count = b->pr.index;
    describe(&cands[i], b->cur, sizeof b->cur);
    report(b, KLJIT_TUNE_CANDIDATE, 0);
    double ms;
    int ok;
    const kljit_status st = time_candidate(b, &cands[i], first, &ms, &ok);
    if (st != KLJIT_SUCCESS) return err_prefix(st, "timing %s: ", b->cur);
    if (ok && (first || ms < 0.99 * b->best_ms)) {
      b->best = cands[i], b->best_ms = ms, b->have_best = 1;
      memcpy(b->best_text, b->cur, sizeof b->cur);
    }
    if (first) b->pr.heuristic_ms = ms;
    report(b, KLJIT_TUNE_TIMED, ok ? ms : -1);
  }
  return KLJIT_SUCCESS;
}

/* ---- the GEMMs, in the call -------------------------------------------------------------- */

enum { GEMM_CANDIDATES = 8, SAMPLE_ROWS = 4 };

/* Rows of a [rows, cols] device output of dtype dt as floats: the first and the last SAMPLE_ROWS
 * (a wrong tile, row or k-block of a GEMM shows there as an error of the order of the values). */
static kljit_status sample(bench *b, CUdeviceptr p, int64_t rows, int64_t cols, kljit_dtype dt,
                           float *out) {
  const size_t es = names_dtype_size(dt), per = (size_t)(SAMPLE_ROWS * cols);
  const int64_t last = rows > SAMPLE_ROWS ? rows - SAMPLE_ROWS : 0;
  unsigned char *h = malloc(2 * per * es);
  if (!h) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  kljit_status st = DRV(b, cuMemcpyDtoHAsync(h, p, per * es, b->stream), "cuMemcpyDtoHAsync");
  if (st == KLJIT_SUCCESS)
    st = DRV(b, cuMemcpyDtoHAsync(h + per * es, p + (size_t)(last * cols) * es, per * es,
                                  b->stream), "cuMemcpyDtoHAsync");
  if (st == KLJIT_SUCCESS) st = DRV(b, cuStreamSynchronize(b->stream), "cuStreamSynchronize");
  for (size_t i = 0; st == KLJIT_SUCCESS && i < 2 * per; i++) {
    uint16_t v;
    if (dt == KLJIT_FP32) memcpy(&out[i], h + 4 * i, 4);
    else memcpy(&v, h + 2 * i, 2), out[i] = dt == KLJIT_BF16 ? host_bf16_to_f32(v)
                                                             : host_f16_to_f32(v);
  }
  free(h);
  return st;
}

/* The loss and the first and last rows of dX and dW of the call just made (b->rows >=
 * SAMPLE_ROWS: pick_rows keeps 256 at least). */
static kljit_status sample_call(bench *b, float *loss, float *dx, float *dw) {
  const kljit_problem *pb = b->pb;
  kljit_status st = DRV(b, cuStreamSynchronize(b->stream), "cuStreamSynchronize");
  if (st == KLJIT_SUCCESS)
    st = DRV(b, cuMemcpyDtoHAsync(loss, b->loss, 4, b->stream), "cuMemcpyDtoHAsync");
  if (st == KLJIT_SUCCESS) st = sample(b, b->dx, b->rows, pb->hidden, pb->input_dtype, dx);
  if (st == KLJIT_SUCCESS)
    st = sample(b, b->dw, pb->vocab, pb->hidden, pb->grad_weight_dtype, dw);
  return st;
}

static double rel_diff(const float *a, const float *r, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)a[i] - r[i];
    num += d * d, den += (double)r[i] * r[i];
  }
  return isfinite(num) ? sqrt(num / (den > 0 ? den : 1e-300)) : INFINITY;
}

/* Whether the call just made agrees with the reference call (b->ref_*: the tuning before the
 * GEMM stage): a GEMM of another backend rounds differently, by far less than these bounds
 * (relative Frobenius error of the sampled rows: 16-bit outputs 2e-2, fp32 1e-3; the loss
 * 1e-3); a wrong kernel errs by the order of the values. */
static kljit_status agrees(bench *b, int *ok) {
  const kljit_problem *pb = b->pb;
  const size_t nx = (size_t)(2 * SAMPLE_ROWS * pb->hidden);
  float loss = 0, *dx = malloc(nx * sizeof *dx), *dw = malloc(nx * sizeof *dw);
  kljit_status st = dx && dw ? sample_call(b, &loss, dx, dw)
                             : err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  if (st == KLJIT_SUCCESS) {
    const double ex = rel_diff(dx, b->ref_dx, nx), ew = rel_diff(dw, b->ref_dw, nx);
    const double el = fabs((double)loss - b->ref_loss) / fmax(fabs((double)b->ref_loss), 1e-30);
    const double tw = pb->grad_weight_dtype == KLJIT_FP32 ? 1e-3 : 2e-2;
    *ok = ex <= 2e-2 && ew <= tw && el <= 1e-3;
    if (!*ok)
      util_log("tune: %s disagrees with the reference call (loss %.2e, dX %.2e, dW %.2e): "
               "skipped", b->cur, el, ex, ew);
  }
  free(dx), free(dw);
  return st;
}

/* A candidate tuning: base with the GEMM choice c for its kind (dW: for both of its chunks). */
static prob_tuning with_choice(const prob_tuning *base, const prob_gemm_choice *c) {
  prob_tuning t = *base;
  prob_gemm_choice x = *c;
  gemm_algo_add(&t, &x);
  if (c->kind == GEMM_DW && c->jit) x.beta_zero = !c->beta_zero, gemm_algo_add(&t, &x);
  return t;
}

/* The candidates of one GEMM kind around base: cuBLASLt's top GEMM_CANDIDATES algorithms for the
 * full chunk (when the tokens fill one) and the generated variants of tune_jit_try (where the family
 * applies), as far as the context's options let the kind choose (KLJIT_GEMM=cublas: algorithms
 * only; jit: variants only). */
static kljit_status gemm_candidates_of(bench *b, const kljit_plan *plan, gemm_kind kind,
                                       const prob_tuning *base, prob_tuning *out, int *count) {
  const gemm_backend forced = b->ctx->gemm_sel[kind].backend;
  const int unfit = jgemm_unfit(b->pb, b->ctx->arch) != NULL;
  /* KLJIT_FLAG_PRECISE_ACCUMULATION promotes a generated logits GEMM only: where the family
   * serves, cuBLASLt's logits algorithms are not offered, so tuning never trades the precision
   * asked for for speed */
  const int precise = kind == GEMM_LOGITS && (b->pb->flags & KLJIT_FLAG_PRECISE_ACCUMULATION);
  const uint64_t lt = gemm_algo_lt_version();
  /* the plan's chunk: the tuning's, or twice it where the logits GEMM has E16 (recipe.c) */
  const int64_t n = plan->rec.gemm[kind].rows;
  *count = 0;
  prob_gemm_choice c;
  memset(&c, 0, sizeof c);
  c.used = 1, c.kind = (int)kind, c.n = n, c.lt_version = lt;
  /* dW: the choice the accumulating chunks take where there are any (gemm_algo_find) */
  c.beta_zero = kind != GEMM_DW || b->rows <= n;
  if (forced != GEMM_BACKEND_JIT && b->rows >= n && !(precise && !unfit)) {
    cublasLtMatmulAlgo_t cand[GEMM_CANDIDATES];
    int got = 0;
    const prob_workspace w =
        prob_workspace_layout(b->pb, &plan->rec.geom, &plan->layout, KLJIT_MODE_FUSED, b->rows);
    kljit_status st = gemm_candidates(b->ctx->lt, &plan->rec.gemm[kind].types,
                                      &plan->rec.gemm[kind].shape, kind, n, w.lt_size, cand,
                                      GEMM_CANDIDATES, &got);
    if (st != KLJIT_SUCCESS) return st;
    for (int i = 0; i < got; i++) {
      memcpy(c.algo, cand[i].data, sizeof c.algo);
      out[(*count)++] = with_choice(base, &c);
    }
  }
  if (forced == GEMM_BACKEND_CUBLAS || unfit) return KLJIT_SUCCESS;
  /* the options' E16 (logits:jit.e16) is in every logits plan timed: stored with it */
  const int opt_e16 = kind == GEMM_LOGITS && b->ctx->gemm_sel[GEMM_LOGITS].e16;
  /* under the flag every generated logits try runs as its one promoted shape (recipe.c): one
   * try with E16 and one without are all it can tell apart, and the base's own generated
   * logits GEMM is one of the two, timed already */
  int shape_tried[2] = {0, 0};
  const recipe_gemm *own = &plan->rec.gemm[GEMM_LOGITS];
  if (precise && own->engine == RECIPE_GENERATED) shape_tried[own->variant.stats.e16 != 0] = 1;
  for (int i = 0; tune_jit_try(kind, i); i++) {
    prob_gemm_choice j = c;
    if (gemm_algo_jit_parse(tune_jit_try(kind, i), &j)) continue;
    /* a try with E16 of its own: under the options' E16 it is its variant's try again */
    const int own_e16 = j.e16;
    if (own_e16 && opt_e16) continue;
    if (opt_e16) j.e16 = 1;
    j.beta_zero = kind != GEMM_DW ? 1 : 0;
    const prob_tuning t = with_choice(base, &j);
    if (own_e16 && !tune_takes_e16(b->pb, &b->ctx->opt, b->ctx->arch, &t)) continue;
    if (precise && shape_tried[j.e16]++) continue;
    out[(*count)++] = t;
  }
  return KLJIT_SUCCESS;
}

/* The GEMMs, in the call (after the row kernels' search): for each GEMM kind (dW, dX, logits),
 * every candidate of gemm_candidates_of timed as the whole fused call (time_candidate, after a
 * warm-up call whose outputs must agree with the reference call's) against the best so far,
 * kept when 1% faster (run_stage); then the chunk sizes again with the GEMMs chosen (a chunk
 * size changes every GEMM's shape). cuBLASLt's algorithms are tuned for one chunk size: those
 * of another are dropped when the chunk changes. */
static kljit_status tune_gemms(bench *b) {
  kljit_plan *plan = NULL;
  kljit_status st = plan_create_tuned(b->ctx, b->pb, &b->best, "GEMM tuning", util_now(), &plan);
  if (st != KLJIT_SUCCESS) return st;
  const size_t nx = (size_t)(2 * SAMPLE_ROWS * b->pb->hidden);
  b->ref_dx = malloc(nx * sizeof(float)), b->ref_dw = malloc(nx * sizeof(float));
  if (!b->ref_dx || !b->ref_dw) st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  if (st == KLJIT_SUCCESS && plan_ws(b, &plan->rec.geom, b->rows) > b->ws_bytes)
    st = err_set(KLJIT_ERR_INTERNAL, "GEMM tuning: the winner's workspace is not allocated");
  b->a.workspace = (void *)(uintptr_t)b->ws, b->a.workspace_size = b->ws_bytes;
  if (st == KLJIT_SUCCESS) st = call(b, plan);
  if (st == KLJIT_SUCCESS) st = sample_call(b, &b->ref_loss, b->ref_dx, b->ref_dw);
  b->check = st == KLJIT_SUCCESS;
  prob_tuning *c = malloc(TUNE_MAX_CANDIDATES * sizeof *c);
  if (!c && st == KLJIT_SUCCESS) st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  /* dW first, then dX, then the logits GEMM: where the budget cuts the stage, the GEMM measured
   * slowest in the call (dW, beta 1: bench/RESULTS.md) has been tuned */
  for (int k = GEMM_DW; k >= GEMM_LOGITS && st == KLJIT_SUCCESS; k--) {
    int n = 0;
    st = gemm_candidates_of(b, plan, (gemm_kind)k, &b->best, c, &n);
    if (st == KLJIT_SUCCESS) st = run_stage(b, c, n);
  }
  kljit_plan_destroy(plan);
  const int64_t before = b->best.chunk_rows;
  if (st == KLJIT_SUCCESS) {
    const int n = tune_candidates(b->pb, &b->ctx->opt, b->ctx->arch, b->rigor, TUNE_CHUNKS,
                                  &b->best, b->rows,
                                  c, TUNE_MAX_CANDIDATES);
    st = run_stage(b, c, n);
  }
  for (int i = 0; i < PROB_GEMM_CHOICES && b->best.chunk_rows != before; i++)
    if (b->best.gemm[i].used && !b->best.gemm[i].jit)
      memset(&b->best.gemm[i], 0, sizeof b->best.gemm[i]);
  b->check = 0;
  free(c);
  return st;
}

kljit_status tune_measure(kljit_context *ctx, const kljit_problem *pb, int64_t rows,
                          kljit_plan_rigor rigor, kljit_tune_callback cb, void *user,
                          wisdom_entry *winner) {
  bench b;
  memset(&b, 0, sizeof b);
  b.ctx = ctx, b.d = ctx->drv, b.pb = pb, b.rigor = rigor, b.cb = cb, b.user = user;
  b.two_phase = pb->reduction == KLJIT_REDUCTION_NONE;
  b.pr.struct_size = sizeof b.pr;
  b.t0 = util_now(), b.budget = ctx->opt.tune_budget_s;
  const prob_tuning heur = prob_estimate(pb, ctx->arch, &ctx->opt);
  /* the records' sizes of every candidate's plan (they depend on the loss, not the tuning) */
  kljit_status st = layout_of_problem(pb, &heur, &b.lay);
  if (st == KLJIT_SUCCESS) st = ctx_enter(ctx);
  if (st != KLJIT_SUCCESS) return st;
  st = pick_rows(&b, &heur, rows);
  if (st == KLJIT_SUCCESS) st = setup(&b);
  prob_tuning *c = malloc(TUNE_MAX_CANDIDATES * sizeof *c);
  if (!c && st == KLJIT_SUCCESS) st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  if (st == KLJIT_SUCCESS) { /* planned count: later stages are sized around the heuristic */
    for (int s = TUNE_SHAPES; s <= TUNE_CLUSTER; s++)
      b.pr.count += tune_candidates(pb, &ctx->opt, ctx->arch, rigor, (tune_stage)s, &heur,
                                    b.rows, c, TUNE_MAX_CANDIDATES);
  }
  for (int s = TUNE_SHAPES; s <= TUNE_CLUSTER && st == KLJIT_SUCCESS; s++) {
    const int n = tune_candidates(pb, &ctx->opt, ctx->arch, rigor, (tune_stage)s,
                                  s == TUNE_SHAPES ? &heur : &b.best, b.rows, c,
                                  TUNE_MAX_CANDIDATES);
    st = run_stage(&b, c, n);
  }
  free(c);
  if (st == KLJIT_SUCCESS) st = tune_gemms(&b);
  free(b.ref_dx), free(b.ref_dw);
  free_all(&b);
  ctx_leave(ctx);
  if (st != KLJIT_SUCCESS) return st;
  tune_entry_key(ctx, pb, rows, winner);
  winner->tune = b.best;
  winner->rigor = rigor;
  winner->rows = b.rows;
  winner->ms = b.best_ms;
  memcpy(b.cur, b.best_text, sizeof b.cur);
  report(&b, KLJIT_TUNE_FINISHED, b.best_ms);
  util_log("tune: %s won, %.3f ms (heuristic %.3f ms) at %lld tokens, %.1f s", b.best_text,
           b.best_ms, b.pr.heuristic_ms, (long long)b.rows, util_now() - b.t0);
  return KLJIT_SUCCESS;
}

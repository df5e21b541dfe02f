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
 * Then the winner's GEMMs: for each GEMM of its chunk loop, the top 8 algorithms of cuBLASLt's
 * heuristic are timed alone (one warm-up, median of 5, L2 flushed); one that beats the
 * heuristic's first by 1% is kept in the tuning (prob_gemm_choice, stored with the entry). The
 * entry's ms stays the fused time measured with the heuristic's algorithms.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune_measure.h"

#include "cublaslt.h"
#include "gemm_algo.h"
#include "host_dtype.h"
#include "jit.h"

enum { FLUSH_BYTES = 256 << 20, TILE = 1 << 20, DESC = 96 };

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
  CUdeviceptr all; /* sharded: [shards][rows][8] records for kljit_shard_finish */
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
static size_t fixed_bytes(const kljit_problem *pb, int64_t rows) {
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
  s += 3 * up(n * 4 + (size_t)plan_saved_floats(pb, rows) * 4); /* loss, saved, grad_output */
  if (pb->hard_weight != 0.0) s += up(n * 8);
  if (prob_sharded(pb)) s += up(n * 32 * (size_t)pb->shards);
  return s;
}

static size_t plan_ws(const kljit_problem *pb, const prob_tuning *t, int64_t rows, int two) {
  prob_geometry g;
  if (prob_geometry_make(pb, t, &g) != KLJIT_SUCCESS) return 0;
  if (!two) return prob_workspace_layout(pb, &g, KLJIT_MODE_FUSED, rows).total;
  const size_t f = prob_workspace_layout(pb, &g, KLJIT_MODE_FORWARD, rows).total;
  const size_t k = prob_workspace_layout(pb, &g, KLJIT_MODE_BACKWARD, rows).total;
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

/* Fewer tokens than asked when the GPU's free memory is short (halving, down to 256). */
static kljit_status pick_rows(bench *b, const prob_tuning *heur, int64_t asked) {
  size_t free_b = 0, total = 0;
  kljit_status st = DRV(b, cuMemGetInfo(&free_b, &total), "cuMemGetInfo");
  if (st != KLJIT_SUCCESS) return st;
  const double room = 0.85 * (double)free_b;
  int64_t n = asked;
  while (n > 256 &&
         (double)(fixed_bytes(b->pb, n) + 2 * plan_ws(b->pb, heur, n, b->two_phase)) > room)
    n /= 2;
  const size_t need = fixed_bytes(b->pb, n) + plan_ws(b->pb, heur, n, b->two_phase);
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
  if (st == KLJIT_SUCCESS) st = alloc(b, &b->saved, (size_t)plan_saved_floats(pb, b->rows) * 4);
  if (st == KLJIT_SUCCESS && pb->hard_weight != 0.0) st = alloc(b, &b->lab, n * 8);
  if (st == KLJIT_SUCCESS) st = alloc(b, &b->gout, n * 4);
  if (st == KLJIT_SUCCESS) st = alloc(b, &b->flush, FLUSH_BYTES);
  if (st == KLJIT_SUCCESS && prob_sharded(pb))
    st = alloc(b, &b->all, n * 32 * (size_t)pb->shards);
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
    const size_t bytes = (size_t)b->rows * 32;
    st = DRV(b, cuStreamSynchronize(b->stream), "cuStreamSynchronize");
    for (int k = 1; k < b->pb->shards && st == KLJIT_SUCCESS; k++)
      st = DRV(b, cuMemcpyDtoD(b->all + (size_t)k * bytes, b->all, bytes), "cuMemcpyDtoD");
    /* device-to-device copies run on the legacy stream without waiting for the host */
    if (st == KLJIT_SUCCESS) st = DRV(b, cuStreamSynchronize(NULL), "cuStreamSynchronize");
    b->all_ready = st == KLJIT_SUCCESS;
  }
  /* REVERSE_KL, JSD: the second round's pass (slot 7 of slot 0's records; the copies keep
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
  const size_t need = plan_ws(b->pb, t, b->rows, b->two_phase);
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

/* Times a stage's candidates; the heuristic (first of all) is always timed. */
static kljit_status run_stage(bench *b, const prob_tuning *cands, int n) {
  for (int i = 0; i < n; i++) {
    const int first = !b->have_best;
    if (!first && util_now() - b->t0 >= b->budget) break;
    b->pr.index++;
    if (b->pr.index > b->pr.count) b->pr.count = b->pr.index;
    tune_describe(&cands[i], b->cur, sizeof b->cur);
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

/* ---- cuBLASLt algorithms ------------------------------------------------------------------ */

enum { GEMM_CANDIDATES = 8, GEMM_REPS = 5 };

/* One GEMM of the chunk loop as the tuner runs it: a cuBLASLt algorithm (op: an operation
 * prepared with it) or a generated kernel (fn, variant v; the logits GEMM only). x and y are
 * gemm_run's operands (logits: W, then the chunk's X). */
typedef struct gemm_launch {
  const kljit_plan *plan;
  const gemm_op *op;
  CUfunction fn;
  const jgemm_variant *v;
  gemm_kind kind;
  int64_t n;
  float beta;
  const void *x, *y;
  void *out, *lt_ws;
  size_t lt_size;
} gemm_launch;

static kljit_status launch(bench *b, const gemm_launch *g) {
  if (!g->fn)
    return gemm_run(b->ctx->lt, g->op, g->n, g->x, g->y, g->out, 1.0f, g->beta, g->lt_ws,
                    g->lt_size, (void *)b->stream);
  const int64_t h = b->pb->hidden;
  const jgemm_args a = {g->y, g->x, g->out, g->n, b->pb->vocab, h, h, h, g->plan->geom.ld, 1.0f};
  return jgemm_launch(b->d, g->fn, g->v, b->ctx->sm_count, &a, b->stream);
}

/* Median time of one GEMM launch; *ok = 0 when cuBLASLt refuses to run the algorithm. */
static kljit_status time_gemm(bench *b, const gemm_launch *g, double *ms, int *ok) {
  *ok = 0;
  float times[GEMM_REPS];
  kljit_status st = KLJIT_SUCCESS;
  for (int r = -1; r < GEMM_REPS && st == KLJIT_SUCCESS; r++) { /* r = -1: warm-up */
    st = DRV(b, cuMemsetD8Async(b->flush, (unsigned char)(r + 2), FLUSH_BYTES, b->stream),
             "cuMemsetD8Async (L2 flush)");
    if (st == KLJIT_SUCCESS) st = DRV(b, cuEventRecord(b->ev[0], b->stream), "cuEventRecord");
    if (st == KLJIT_SUCCESS) {
      st = launch(b, g);
      if (st == KLJIT_ERR_CUBLAS && r < 0) { /* this algorithm does not run here: skip it */
        util_log("tune: a cuBLASLt candidate refused: %s", kljit_last_error());
        err_clear();
        return KLJIT_SUCCESS;
      }
    }
    if (st == KLJIT_SUCCESS) st = DRV(b, cuEventRecord(b->ev[1], b->stream), "cuEventRecord");
    if (st == KLJIT_SUCCESS) st = DRV(b, cuEventSynchronize(b->ev[1]), "cuEventSynchronize");
    float t = 0;
    if (st == KLJIT_SUCCESS)
      st = DRV(b, cuEventElapsedTime(&t, b->ev[0], b->ev[1]), "cuEventElapsedTime");
    if (st == KLJIT_SUCCESS && r >= 0) times[r] = t, *ok = r + 1 == GEMM_REPS;
  }
  if (st != KLJIT_SUCCESS || !*ok) return st;
  qsort(times, GEMM_REPS, sizeof times[0], cmp_float);
  *ms = times[GEMM_REPS / 2];
  return KLJIT_SUCCESS;
}

/* Times the heuristic's top GEMM_CANDIDATES algorithms for one GEMM of the chunk loop and adds
 * the winner to *t when it beats the heuristic's own first choice by 1% (as the row search). */
static kljit_status tune_gemm(bench *b, const kljit_plan *plan, gemm_kind kind, int64_t n,
                              float beta, const void *x, const void *y, void *out, void *lt_ws,
                              size_t lt_size, prob_tuning *t, double *best_out) {
  static const char *const names[] = {"logits", "dX", "dW"};
  cublasLtMatmulAlgo_t cand[GEMM_CANDIDATES];
  int count = 0, best = -1;
  const gemm_types *ty = &plan->gemm[kind].types;
  const gemm_shape *sh = &plan->gemm[kind].shape;
  kljit_status st = gemm_candidates(b->ctx->lt, ty, sh, kind, n, lt_size, cand, GEMM_CANDIDATES,
                                    &count);
  double best_ms = 0, heur_ms = 0;
  for (int i = 0; i < count && st == KLJIT_SUCCESS; i++) {
    double ms = 0;
    int ok = 0;
    gemm_op op;
    st = gemm_prepare(b->ctx->lt, ty, sh, kind, n, lt_size, &cand[i], &op);
    const gemm_launch g = {plan, &op, NULL, NULL, kind, n, beta, x, y, out, lt_ws, lt_size};
    if (st == KLJIT_SUCCESS) st = time_gemm(b, &g, &ms, &ok);
    gemm_destroy(&op);
    if (st != KLJIT_SUCCESS || !ok) continue;
    util_log("tune: %s GEMM (%lld rows, beta %g) cuBLASLt candidate %d: %.3f ms", names[kind],
             (long long)n, beta, i, ms);
    if (i == 0) heur_ms = ms;
    if (best < 0 || ms < 0.99 * best_ms) best = i, best_ms = ms;
  }
  if (st != KLJIT_SUCCESS) return st;
  util_log("tune: %s GEMM (%lld rows, beta %g): candidate %d of %d, %.3f ms (heuristic %.3f ms)",
           names[kind], (long long)n, beta, best, count, best_ms, heur_ms);
  *best_out = best >= 0 ? best_ms : 0;
  if (best <= 0) return KLJIT_SUCCESS; /* the heuristic's choice is what runs untuned anyway */
  prob_gemm_choice c;
  memset(&c, 0, sizeof c);
  c.used = 1, c.kind = (int)kind, c.n = n, c.beta_zero = beta == 0.0f;
  c.lt_version = (uint64_t)cublaslt_loaded()->cublasLtGetVersion();
  memcpy(c.algo, cand[best].data, sizeof c.algo);
  gemm_algo_add(t, &c);
  return KLJIT_SUCCESS;
}

/* ---- the generated logits GEMM (KLJIT_GEMM=jit) ---- */

/* The first and last rows of a chunk's logits as floats (n_rows x ld each end). */
static kljit_status sample_rows(bench *b, const kljit_plan *plan, const void *z, int64_t n,
                                float *out, int64_t rows) {
  const int64_t ld = plan->geom.ld;
  const int f32 = plan->gemm[GEMM_LOGITS].types.logits == CUDA_R_32F;
  const int bf16 = plan->pb.input_dtype == KLJIT_BF16;
  const size_t es = f32 ? 4 : 2, per = (size_t)(rows * ld);
  unsigned char *h = malloc(2 * per * es);
  if (!h) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  const CUdeviceptr d = (CUdeviceptr)(uintptr_t)z;
  kljit_status st = DRV(b, cuMemcpyDtoHAsync(h, d, per * es, b->stream), "cuMemcpyDtoHAsync");
  if (st == KLJIT_SUCCESS)
    st = DRV(b, cuMemcpyDtoHAsync(h + per * es, d + (size_t)(n - rows) * (size_t)ld * es,
                                  per * es, b->stream), "cuMemcpyDtoHAsync");
  if (st == KLJIT_SUCCESS) st = DRV(b, cuStreamSynchronize(b->stream), "cuStreamSynchronize");
  for (size_t i = 0; st == KLJIT_SUCCESS && i < 2 * per; i++) {
    uint16_t v16;
    if (f32) memcpy(&out[i], h + 4 * i, 4);
    else memcpy(&v16, h + 2 * i, 2), out[i] = bf16 ? host_bf16_to_f32(v16) : host_f16_to_f32(v16);
  }
  free(h);
  return st;
}

/* Each variant of a short list: loaded, its output checked against cuBLASLt's (in z when this
 * is called) on the chunk's first and last rows, timed; the fastest is kept in *t when it beats
 * cuBLASLt's best (lt_ms) by 1%, and then the tuning's plans run it (jgemm_choose). */
static kljit_status tune_jit_logits(bench *b, const kljit_plan *plan, int64_t n, const void *w,
                                    const void *x, void *z, double lt_ms, prob_tuning *t) {
  jgemm_variant base;
  if (jgemm_mode(&b->ctx->opt) != JGEMM_JIT ||
      !jgemm_applies(b->pb, b->ctx->arch, plan->geom.logit, &base))
    return KLJIT_SUCCESS;
  static const struct {
    int bn, consumers, stages;
    char raster;
    int cluster;
    char schedule;
  } tries[] = {
      {256, 2, 4, 'm', 1, 'c'}, {256, 2, 4, 'g', 1, 'c'}, {128, 2, 6, 'g', 1, 'c'},
      {256, 2, 4, 'g', 2, 'c'}, {256, 2, 4, 'm', 2, 'c'}, {128, 2, 6, 'g', 1, 'p'},
      {256, 1, 5, 'g', 1, 'p'}, {128, 2, 6, 'g', 2, 'p'}};
  const int64_t rows = n < 8 ? n : 8, ld = plan->geom.ld;
  const size_t count = (size_t)(2 * rows * ld);
  float *ref = malloc(count * sizeof *ref), *got = malloc(count * sizeof *got);
  kljit_status st = ref && got ? sample_rows(b, plan, z, n, ref, rows)
                               : err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  const double tol = plan->gemm[GEMM_LOGITS].types.logits == CUDA_R_32F ? 1e-4 : 1e-2; /* rel. Frobenius */
  double best_ms = lt_ms;
  int best = -1;
  for (size_t i = 0; i < sizeof tries / sizeof tries[0] && st == KLJIT_SUCCESS; i++) {
    jgemm_variant v = base;
    v.bn = tries[i].bn, v.consumers = tries[i].consumers, v.stages = tries[i].stages;
    v.raster = tries[i].raster, v.cluster = tries[i].cluster, v.schedule = tries[i].schedule;
    const kspec k = jgemm_spec(&v);
    jit_bin bin;
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    st = jit_build(&k, b->ctx->arch, &b->ctx->cache, &bin);
    if (st != KLJIT_SUCCESS) break;
    st = jgemm_check_manifest(bin.manifest.data, bin.name);
    if (st == KLJIT_SUCCESS)
      st = DRV(b, cuModuleLoadData(&mod, bin.cubin.data), "cuModuleLoadData (GEMM)");
    jit_bin_free(&bin);
    if (st == KLJIT_SUCCESS) st = DRV(b, cuModuleGetFunction(&fn, mod, "kl_gemm"), "kl_gemm");
    if (st == KLJIT_SUCCESS) st = jgemm_prepare(b->d, fn, &v);
    const gemm_launch g = {plan, NULL, fn, &v, GEMM_LOGITS, n, 0.0f, w, x, z, NULL, 0};
    if (st == KLJIT_SUCCESS) st = DRV(b, cuMemsetD8Async((CUdeviceptr)(uintptr_t)z, 0xff,
                                                         (size_t)(n * ld) * (plan->gemm[GEMM_LOGITS].types.logits
                                                         == CUDA_R_32F ? 4 : 2), b->stream),
                                      "cuMemsetD8Async (poison)");
    if (st == KLJIT_SUCCESS) st = launch(b, &g);
    if (st == KLJIT_SUCCESS) st = sample_rows(b, plan, z, n, got, rows);
    double num = 0, den = 0;
    for (size_t e = 0; st == KLJIT_SUCCESS && e < count; e++) {
      if ((int64_t)(e % (size_t)ld) >= b->pb->vocab) continue; /* padding */
      const double d = (double)got[e] - ref[e];
      num += d * d, den += (double)ref[e] * ref[e];
    }
    const int right = st == KLJIT_SUCCESS && isfinite(num) && num <= tol * tol * den;
    char what[64];
    jgemm_describe(&v, what, sizeof what);
    double ms = 0;
    int ok = 0;
    if (right) st = time_gemm(b, &g, &ms, &ok);
    else if (st == KLJIT_SUCCESS)
      util_log("tune: generated logits GEMM %s disagrees with cuBLASLt (rel %.3g): skipped", what,
               den > 0 ? sqrt(num / den) : INFINITY);
    if (mod) b->d->cuModuleUnload(mod);
    if (st != KLJIT_SUCCESS || !ok) continue;
    util_log("tune: logits GEMM (%lld rows) generated %s: %.3f ms (cuBLASLt best %.3f ms)",
             (long long)n, what, ms, lt_ms);
    if (ms < 0.99 * best_ms) best = (int)i, best_ms = ms;
  }
  free(ref), free(got);
  if (st != KLJIT_SUCCESS || best < 0) return st;
  prob_gemm_choice c;
  memset(&c, 0, sizeof c);
  c.used = 1, c.kind = GEMM_LOGITS, c.n = n, c.beta_zero = 1, c.jit = 1;
  c.bn = tries[best].bn, c.consumers = tries[best].consumers, c.stages = tries[best].stages;
  c.raster = tries[best].raster, c.cluster = tries[best].cluster;
  c.schedule = tries[best].schedule;
  gemm_algo_add(t, &c);
  return KLJIT_SUCCESS;
}

/* The GEMMs of the winner's first chunks (logits, dX, dW starting and accumulating; the
 * two-phase backward recomputes the same logits GEMM), on the tuner's buffers after one call
 * of the plan has filled Z/G with real values. A last, shorter chunk keeps the heuristic. */
static kljit_status tune_gemms(bench *b, prob_tuning *t) {
  kljit_plan *plan = NULL;
  kljit_status st = plan_create_tuned(b->ctx, b->pb, t, "GEMM tuning", util_now(), &plan);
  if (st != KLJIT_SUCCESS) return st;
  if (plan_ws(b->pb, t, b->rows, b->two_phase) > b->ws_bytes)
    st = err_set(KLJIT_ERR_INTERNAL, "GEMM tuning: the winner's workspace is not allocated");
  b->a.workspace = (void *)(uintptr_t)b->ws, b->a.workspace_size = b->ws_bytes;
  if (st == KLJIT_SUCCESS) st = call(b, plan);
  if (st == KLJIT_SUCCESS) st = DRV(b, cuStreamSynchronize(b->stream), "cuStreamSynchronize");
  const prob_workspace w = prob_workspace_layout(
      b->pb, &plan->geom, b->two_phase ? KLJIT_MODE_BACKWARD : KLJIT_MODE_FUSED, b->rows);
  char *ws = (char *)(uintptr_t)b->ws;
  const void *x = (const void *)(uintptr_t)b->x, *wt = (const void *)(uintptr_t)b->w;
  void *dw = plan->geom.dw_workspace ? (void *)(ws + w.dw) : (void *)(uintptr_t)b->dw;
  const int64_t r = t->chunk_rows, n = b->rows < r ? b->rows : r;
  double lt_ms = 0, unused;
  /* dX and dW first: the logits GEMM's output (a cuBLASLt candidate's) is then the reference
   * the generated kernels are checked against, and G holds its values for the others */
  if (st == KLJIT_SUCCESS)
    st = tune_gemm(b, plan, GEMM_DX, n, 0.0f, wt, ws + w.g, (void *)(uintptr_t)b->dx, ws + w.lt,
                   w.lt_size, t, &unused);
  if (st == KLJIT_SUCCESS)
    st = tune_gemm(b, plan, GEMM_DW, n, 0.0f, x, ws + w.g, dw, ws + w.lt, w.lt_size, t, &unused);
  if (st == KLJIT_SUCCESS && b->rows > r)
    st = tune_gemm(b, plan, GEMM_DW, n, 1.0f, x, ws + w.g, dw, ws + w.lt, w.lt_size, t, &unused);
  if (st == KLJIT_SUCCESS)
    st = tune_gemm(b, plan, GEMM_LOGITS, n, 0.0f, wt, x, ws + w.z, ws + w.lt, w.lt_size, t,
                   &lt_ms);
  if (st == KLJIT_SUCCESS && lt_ms > 0)
    st = tune_jit_logits(b, plan, n, wt, x, ws + w.z, lt_ms, t);
  kljit_plan_destroy(plan);
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
  const prob_tuning heur = prob_estimate_opt(pb, ctx->sm_count, ctx->arch, &ctx->opt);
  kljit_status st = ctx_enter(ctx);
  if (st != KLJIT_SUCCESS) return st;
  st = pick_rows(&b, &heur, rows);
  if (st == KLJIT_SUCCESS) st = setup(&b);
  prob_tuning *c = malloc(TUNE_MAX_CANDIDATES * sizeof *c);
  if (!c && st == KLJIT_SUCCESS) st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  if (st == KLJIT_SUCCESS) { /* planned count: later stages are sized around the heuristic */
    for (int s = TUNE_SHAPES; s <= TUNE_CLUSTER; s++)
      b.pr.count += tune_candidates(pb, ctx->arch, rigor, (tune_stage)s, &heur, b.rows, c,
                                    TUNE_MAX_CANDIDATES);
  }
  for (int s = TUNE_SHAPES; s <= TUNE_CLUSTER && st == KLJIT_SUCCESS; s++) {
    const int n =
        tune_candidates(pb, ctx->arch, rigor, (tune_stage)s, s == TUNE_SHAPES ? &heur : &b.best,
                        b.rows, c, TUNE_MAX_CANDIDATES);
    st = run_stage(&b, c, n);
  }
  if (st == KLJIT_SUCCESS) st = tune_gemms(&b, &b.best);
  free(c);
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

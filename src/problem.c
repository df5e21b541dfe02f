/* problem.c — problem validation, heuristic tuning, geometry, workspace layout. */
#include "problem.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"

enum { MAX_VOCAB = 1 << 24, MAX_HIDDEN = 1 << 20, MAX_TOPK = 1024, MAX_SHARDS = 1024 };

int64_t prob_vocab_total(const kljit_problem *pb) {
  return pb->vocab_total ? pb->vocab_total : pb->vocab;
}

int prob_sharded(const kljit_problem *pb) {
  return pb->shards > 1 || (pb->vocab_total != 0 && pb->vocab_total != pb->vocab);
}

static int is_float(kljit_dtype dt) {
  return dt == KLJIT_FP32 || dt == KLJIT_FP16 || dt == KLJIT_BF16;
}

const char *prob_dtype_tag(kljit_dtype dt) {
  return dt == KLJIT_FP32 ? "f32" : dt == KLJIT_FP16 ? "f16" : "bf16";
}

size_t prob_dtype_size(kljit_dtype dt) {
  switch (dt) {
  case KLJIT_FP32: case KLJIT_INT32: return 4;
  case KLJIT_FP16: case KLJIT_BF16: return 2;
  case KLJIT_INT64: return 8;
  }
  return 0;
}

const char *prob_dtype_name(kljit_dtype dt) {
  switch (dt) {
  case KLJIT_FP32: return "FP32";
  case KLJIT_FP16: return "FP16";
  case KLJIT_BF16: return "BF16";
  case KLJIT_INT32: return "INT32";
  case KLJIT_INT64: return "INT64";
  }
  return "unknown";
}

int prob_temperature_ok(double t) {
  return t >= KLJIT_TEMPERATURE_MIN && t <= KLJIT_TEMPERATURE_MAX; /* false for NaN */
}

#define BAD(...) err_set(KLJIT_ERR_INVALID_ARGUMENT, __VA_ARGS__)

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
                   who, prob_dtype_name(pb->input_dtype), prob_dtype_name(pb->weight_dtype));
  if (!is_float(pb->teacher_dtype))
    return BAD("%s: teacher_dtype = %d, must be KLJIT_FP32, KLJIT_FP16 or KLJIT_BF16", who,
               (int)pb->teacher_dtype);
  if (pb->teacher < KLJIT_TEACHER_DENSE_PROBS || pb->teacher > KLJIT_TEACHER_SPARSE_TOPK)
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
               prob_dtype_name(pb->grad_weight_dtype), prob_dtype_name(pb->weight_dtype));
  if (pb->grad_weight_accum != KLJIT_ACCUM_FP32 &&
      pb->grad_weight_accum != KLJIT_ACCUM_OUTPUT_DTYPE)
    return BAD("%s: grad_weight_accum = %d is not a kljit_grad_weight_accum", who,
               (int)pb->grad_weight_accum);
  const uint32_t known = KLJIT_FLAG_BIAS | KLJIT_FLAG_SCALE_T_SQUARED | KLJIT_FLAG_NATIVE_LOGITS |
                         KLJIT_FLAG_ALLOW_TF32 | KLJIT_FLAG_CHECK_INPUTS;
  if (pb->flags & ~known)
    return BAD("%s: flags = 0x%x has unknown bits 0x%x", who, pb->flags, pb->flags & ~known);
  return KLJIT_SUCCESS;
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Default chunk budget: the chunk buffers (logits, G) stay within this many bytes. */
static const double CHUNK_BUDGET = 1.0 * (1 << 30);

static int native_logits(const kljit_problem *pb) {
  return (pb->flags & KLJIT_FLAG_NATIVE_LOGITS) || pb->input_dtype == KLJIT_FP32;
}

/* Chunk bytes per row: the logits (G overwrites them in place) and the pass-1 partials. */
static size_t chunk_row_bytes(const kljit_problem *pb, int64_t ld, const prob_tuning *t) {
  const size_t z = native_logits(pb) ? prob_dtype_size(pb->input_dtype) : 4;
  return (size_t)ld * z + (size_t)t->split * 32;
}

/* Registers per thread allow 32 fp32 values of z (and as many of p) in the cluster variant. */
enum { CLUSTER_THREADS = 256, CLUSTER_VALUES = 32, CLUSTER_MAX = 16 };

prob_tuning prob_estimate(const kljit_problem *pb, int sm_count, int arch) {
  (void)sm_count;
  prob_tuning t;
  memset(&t, 0, sizeof t);
  const int vec = native_logits(pb) && pb->input_dtype != KLJIT_FP32 ? 8 : 4;
  /* The cluster variant reads every byte once but, as measured on the H200 (bench/RESULTS.md),
   * runs its rows at half the copy bandwidth, while the two-pass variant runs at the copy
   * bandwidth: it is opt-in, KLJIT_ROW_KERNEL=cluster (README). */
  const char *variant = getenv("KLJIT_ROW_KERNEL");
  /* sharded plans merge their row statistics across ranks: two-pass rows only */
  const int allow = variant && strcmp(variant, "cluster") == 0 &&
                    pb->teacher != KLJIT_TEACHER_SPARSE_TOPK && !prob_sharded(pb);
  /* 256 threads per block (two blocks per SM); 512 when a row needs more than 16 blocks */
  const int64_t per_block = (int64_t)CLUSTER_THREADS * CLUSTER_VALUES;
  if (allow && arch >= 90 && pb->vocab <= 2 * CLUSTER_MAX * per_block) {
    const int wide = pb->vocab > CLUSTER_MAX * per_block;
    const int64_t block_values = wide ? 2 * per_block : per_block;
    int c = 1;
    while ((int64_t)c * block_values < pb->vocab) c *= 2;
    t.cluster = t.split = c;
    t.nv = CLUSTER_VALUES / vec;
    /* a single-block row needs only as many threads as its vectors */
    int64_t th = (pb->vocab + (int64_t)t.nv * vec - 1) / ((int64_t)t.nv * vec);
    th = (th + 31) / 32 * 32;
    t.threads = c > 1 ? (int)(wide ? 2 * CLUSTER_THREADS : CLUSTER_THREADS)
                      : (int)(th < 64 ? 64 : th);
  } else {
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
  /* Debug/test override of the chunk size (documented in the README). */
  const char *e = getenv("KLJIT_CHUNK_ROWS");
  if (e && atoll(e) > 0) t.chunk_rows = atoll(e);
  return t;
}

kljit_status prob_geometry_make(const kljit_problem *pb, const prob_tuning *tune,
                                prob_geometry *g) {
  memset(g, 0, sizeof *g);
  if (tune->chunk_rows < 1 || tune->threads < 64 || tune->threads > 1024 ||
      tune->threads % 32 || tune->split < 1 || tune->split > 64 ||
      (tune->cluster && tune->cluster != tune->split) || tune->nv < 1)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "tuning chunk_rows=%lld threads=%d split=%d is out of range",
                   (long long)tune->chunk_rows, tune->threads, tune->split);
  if (tune->cluster && prob_sharded(pb))
    return err_set(KLJIT_ERR_UNSUPPORTED,
                   "a sharded problem (vocab_total = %lld, shards = %d) has no cluster row "
                   "kernels: its row statistics are merged across ranks",
                   (long long)pb->vocab_total, (int)pb->shards);
  g->tune = *tune;
  g->ld = round_up(pb->vocab, 8);
  const int native = native_logits(pb);
  g->grad = prob_dtype_tag(pb->input_dtype);
  g->logit = native ? g->grad : "f32";
  /* same dtype: G replaces z element by element; else 16-bit G over the fp32 row, made safe by
   * the cluster barrier or by the one-block-per-row pass 2 (INPLACE) */
  g->grad_in_place = 1;
  g->ldg = native ? g->ld : 2 * g->ld;
  const int sparse = pb->teacher == KLJIT_TEACHER_SPARSE_TOPK;
  g->p2_split = (!native && !tune->cluster) || sparse ? 1 : tune->split;
  g->dw_workspace = pb->grad_weight_dtype != KLJIT_FP32 &&
                    pb->grad_weight_accum == KLJIT_ACCUM_FP32;
  const char *teacher = pb->teacher == KLJIT_TEACHER_DENSE_PROBS      ? "probs"
                        : pb->teacher == KLJIT_TEACHER_DENSE_LOGPROBS ? "logprobs"
                                                                      : "logits";
  const char *tmode = pb->temperature_mode == KLJIT_TEMPERATURE_CONSTANT ? "const" : "runtime";
  const char *reds[] = {"", "sum", "batchmean", "mean", "none"};

  kspec *r = &g->rows;
  r->family = KSPEC_DENSE_ROWS;
  r->v = pb->vocab, r->ld = g->ld;
  r->threads = tune->threads, r->split = tune->split;
  r->cluster = tune->cluster, r->nv = tune->nv, r->ldg = g->ldg;
  r->inplace = !native && !tune->cluster;
  r->logit = g->logit, r->grad = g->grad;
  r->tdt = prob_dtype_tag(pb->teacher_dtype);
  r->bdt = prob_dtype_tag(pb->weight_dtype);
  r->out = "f32";
  r->teacher = teacher;
  r->reduction = reds[pb->reduction];
  r->tmode = tmode;
  r->bias = (pb->flags & KLJIT_FLAG_BIAS) != 0;
  r->t2 = (pb->flags & KLJIT_FLAG_SCALE_T_SQUARED) != 0;
  r->tt_same = pb->teacher_temperature == 0;
  r->t = pb->temperature, r->tt = pb->teacher_temperature, r->eps = pb->eps;
  r->check = (pb->flags & KLJIT_FLAG_CHECK_INPUTS) != 0;
  r->vtot = prob_vocab_total(pb);
  r->offset = pb->vocab_offset;
  if (sparse) { /* one pass-2 block per row (it gathers the support), two-pass only */
    if (tune->cluster)
      return err_set(KLJIT_ERR_UNSUPPORTED, "the sparse teacher has no cluster row kernels");
    r->family = KSPEC_SPARSE_ROWS;
    r->cluster = 0, r->nv = 1;
    r->teacher = "sparse";
    r->topk = pb->topk;
    r->idt = pb->topk_id_dtype == KLJIT_INT32 ? "i32" : "i64";
    r->values = pb->topk_values == KLJIT_TOPK_PROBS ? "probs" : "logprobs";
    r->tail = pb->tail == KLJIT_TAIL_NONE ? "none" : pb->tail == KLJIT_TAIL_RENORM ? "renorm"
                                                                                   : "bucket";
  }

  kspec *h = &g->helpers;
  *h = *r;
  h->family = KSPEC_HELPERS;
  h->check = 0;
  h->out = prob_dtype_tag(pb->grad_weight_dtype);
  return KLJIT_SUCCESS;
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

prob_workspace prob_workspace_layout(const kljit_problem *pb, const prob_geometry *g,
                                     kljit_mode mode, int64_t rows) {
  prob_workspace w;
  memset(&w, 0, sizeof w);
  const int64_t r = rows < g->tune.chunk_rows ? rows : g->tune.chunk_rows;
  const size_t zsize = strcmp(g->logit, "f32") == 0 ? 4 : 2;
  const size_t gsize = prob_dtype_size(pb->input_dtype);
  const int grads = mode != KLJIT_MODE_FORWARD;
  size_t off = 0;
  /* hdr (kl_setup): fused keeps it here; two-phase keeps it at the start of `saved` */
  w.hdr = off, off += mode == KLJIT_MODE_FUSED ? 256 : 0;
  w.lossp = off, off += mode != KLJIT_MODE_BACKWARD
                            ? align256((size_t)rows * (size_t)g->tune.split * 4) : 0;
  w.part = off, off += mode != KLJIT_MODE_BACKWARD
                           && !g->tune.cluster
                           ? align256((size_t)r * (size_t)g->tune.split * 32) : 0;
  w.z = off, off += align256((size_t)r * (size_t)g->ld * zsize);
  w.g = g->grad_in_place || !grads ? w.z : off;
  off += g->grad_in_place || !grads ? 0 : align256((size_t)r * (size_t)g->ld * gsize);
  w.dw = off, off += grads && g->dw_workspace
                         ? align256((size_t)pb->vocab * (size_t)pb->hidden * 4) : 0;
  w.db = off, off += grads && (pb->flags & KLJIT_FLAG_BIAS) ? align256((size_t)pb->vocab * 4) : 0;
  w.check = off, off += (pb->flags & KLJIT_FLAG_CHECK_INPUTS) && mode != KLJIT_MODE_BACKWARD
                             ? 256 : 0;
  /* kljit_fused_nccl: this rank's records, then the gathered [shards][rows][8] */
  w.stats = off, off += mode == KLJIT_MODE_FUSED && pb->shards > 1
                            ? align256((size_t)(1 + pb->shards) * (size_t)rows * 32) : 0;
  w.lt = off, w.lt_size = GEMM_WORKSPACE_BYTES, off += w.lt_size;
  w.total = off;
  return w;
}

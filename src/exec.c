/* SPDX-License-Identifier: Apache-2.0 */
/* exec.c — the chunk loops of the two execution modes, and their argument validation.
 *
 * Fused (gradient in forward), per chunk of R rows:
 *   logits GEMM -> kl_<form>_stats -> kl_<form>_fused (loss partials, G) -> dX GEMM -> dW GEMM
 *   (-> kl_colsum for db); then kl_finish_loss and the fp32 -> output conversions.
 * Two-phase: forward = logits GEMM -> stats -> kl_<form>_forward (row statistics into `saved`);
 * backward = logits GEMM -> kl_<form>_backward (G from saved statistics) -> dX -> dW.
 * <form> is dense or sparse (the rows module of the plan; same launch shapes, the sparse
 * kernels take ids and values where the dense ones take the teacher).
 * Everything is enqueued on the caller's stream; nothing allocates. Nothing synchronizes except
 * checked mode (KLJIT_FLAG_CHECK_INPUTS), which reads its verdict back before any output is
 * written (exec_check.c). Every kernel takes its arguments from one kargs (exec_call.k), filled
 * once per call and per chunk, by the roles of its manifest (plan_launch): nothing here knows a
 * kernel's argument order.
 */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "exec_check.h"

typedef struct exec_call exec_call;

/* The GEMMs of one chunk step (exec_gemms: which, on the chunk at row0 of n rows; `first`: the
 * chunk that starts dW). */
typedef enum exec_gemm { EXEC_LOGITS, EXEC_DX, EXEC_DW } exec_gemm;
typedef kljit_status (*exec_gemms)(exec_call *c, exec_gemm which, long long row0, int64_t n,
                                   int first);

/* One call's constants, shared by the loops. */
struct exec_call {
  const kljit_plan *p;
  const kljit_args *a;
  void *stream;
  char *ws;
  prob_workspace w;
  float *hdr, *rowstat;
  int labels_is64;
  long long ignore;
  size_t in_sz;
  exec_gemms gemms;     /* the call's GEMM runner: plan_gemms, or no_gemms (run_mode) */
  int dw_ws;            /* dW accumulates in the workspace's fp32 buffer (prob_dw_in_workspace) */
  float gmult, galpha; /* G is stored times gmult (fp16 range); the GEMMs undo it (galpha) */
  float *stats_out;    /* kljit_shard_stats: merged per-row records (part) out, [rows] */
  jgemm_epi epi;       /* the logits GEMM's statistics epilogue (geometry's stats_tiles): the
                        * teacher, the chunk's records (NULL in backward: none), row0 */
  const float *all;    /* kljit_shard_finish: the shards' records [nrec][rows] */
                       /* both: kljit_shard_sums (slot S of stats_out from all) */
  kargs k;             /* every kernel argument of the call, by role (src/kiface.h) */
};

static kljit_status check_ptr(const kljit_plan *p, const char *who, const char *name,
                              const void *ptr, size_t align) {
  if (!ptr) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: args->%s is NULL", who, name);
  if ((uintptr_t)ptr % align)
    return err_set(KLJIT_ERR_MISALIGNED, "%s: args->%s = %p is not %zu-byte aligned", who, name,
                   ptr, align);
  unsigned int type = 0;
  CUresult r = p->ctx->drv->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                  (CUdeviceptr)(uintptr_t)ptr);
  if (r != CUDA_SUCCESS)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: args->%s = %p is not memory the CUDA driver knows (a host pointer?)", who,
                   name, ptr);
  return KLJIT_SUCCESS;
}

static kljit_status check_absent(const char *who, const char *name, const void *ptr,
                                 const char *why) {
  if (ptr)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: args->%s must be NULL %s", who, name, why);
  return KLJIT_SUCCESS;
}

#define TRY(x)                                  \
  do {                                          \
    kljit_status try_st_ = (x);                 \
    if (try_st_ != KLJIT_SUCCESS) return try_st_; \
  } while (0)

/* Whether the caller's kljit_args reaches `field` (older, shorter structs do not). */
#define ARGS_HAS(a, field) \
  ((a)->struct_size >= offsetof(kljit_args, field) + sizeof((a)->field))

/* The gradient scale of a fused or backward call: 1 for older callers and for 0. */
static double args_grad_scale(const kljit_args *a) {
  return ARGS_HAS(a, grad_scale) && a->grad_scale != 0 ? a->grad_scale : 1.0;
}

/* The online teacher's pointers of `a`, NULL in a struct too short to have them. */
static const void *teacher_input_of(const kljit_args *a) {
  return ARGS_HAS(a, teacher_input) ? a->teacher_input : NULL;
}
static const void *teacher_weight_of(const kljit_args *a) {
  return ARGS_HAS(a, teacher_weight) ? a->teacher_weight : NULL;
}
static const void *teacher_bias_of(const kljit_args *a) {
  return ARGS_HAS(a, teacher_bias) ? a->teacher_bias : NULL;
}
static const double *divisor_of(const kljit_args *a) {
  return ARGS_HAS(a, divisor) ? a->divisor : NULL;
}

/* The row weights and the optional outputs of `a`, NULL in a struct too short to have them. */
static const float *row_weights_of(const kljit_args *a) {
  return ARGS_HAS(a, row_weights) ? a->row_weights : NULL;
}
static float *row_loss_of(const kljit_args *a) {
  return ARGS_HAS(a, row_loss) ? a->row_loss : NULL;
}
static float *loss_parts_of(const kljit_args *a) {
  return ARGS_HAS(a, loss_parts) ? a->loss_parts : NULL;
}

/* What every entry point taking kljit_args checks first: the struct's size, flags within
 * `known`, and a row count in [1, 2^31). */
static kljit_status check_args_head(const kljit_args *a, uint32_t known, const char *who) {
  if (a->struct_size < KLJIT_ARGS_MIN_SIZE)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: args->struct_size = %zu, below the %zu bytes of the first released "
                   "kljit_args (initialize it with KLJIT_ARGS_INIT)", who, a->struct_size,
                   (size_t)KLJIT_ARGS_MIN_SIZE);
  /* a newer caller's struct: what this library does not know must be left at zero */
  TRY(util_struct_tail(a, sizeof(kljit_args), a->struct_size, who, "args"));
  /* the scale becomes the GEMMs' fp32 alpha: a double past fp32's normal range is inf or 0 */
  if (ARGS_HAS(a, grad_scale) && a->grad_scale != 0 &&
      !(a->grad_scale >= FLT_MIN && a->grad_scale <= FLT_MAX))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: args->grad_scale = %g, must be a normal fp32 value in [%g, %g] (or 0 "
                   "for 1)", who, a->grad_scale, (double)FLT_MIN, (double)FLT_MAX);
  if (a->flags & ~known)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: args->flags = 0x%x has unknown bits 0x%x",
                   who, a->flags, a->flags & ~known);
  if (a->rows < 1 || a->rows > INT32_MAX)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: args->rows = %lld, must be in [1, 2^31)",
                   who, (long long)a->rows);
  return KLJIT_SUCCESS;
}

/* stats_only: kljit_shard_stats (fused-mode workspace; no loss or gradient outputs). */
/* *w: the call's workspace layout, computed once here for the checks and the loops. */
static kljit_status validate(const kljit_plan *p, const kljit_args *a, kljit_mode mode,
                             int stats_only, const char *who, prob_workspace *w) {
  if (!p) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: plan is NULL", who);
  if (!a) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: args is NULL", who);
  const kljit_problem *pb = &p->pb;
  TRY(check_args_head(a, KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT | KLJIT_EXEC_NO_GRAD_INPUT |
                             KLJIT_EXEC_NO_GRAD_WEIGHT, who));
  if (mode == KLJIT_MODE_FUSED && pb->reduction == KLJIT_REDUCTION_NONE)
    return err_set(KLJIT_ERR_UNSUPPORTED,
                   "%s: reduction NONE needs the two-phase mode (kljit_forward, kljit_backward): "
                   "the fused mode has no per-row upstream gradient", who);
  if (pb->temperature_mode == KLJIT_TEMPERATURE_RUNTIME && mode != KLJIT_MODE_BACKWARD &&
      !prob_temperature_ok(a->temperature))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: args->temperature = %g, must be in [%g, %g]",
                   who, a->temperature, KLJIT_TEMPERATURE_MIN, KLJIT_TEMPERATURE_MAX);
  const size_t in_sz = names_dtype_size(pb->input_dtype);
  TRY(check_ptr(p, who, "input", a->input, 16));
  TRY(check_ptr(p, who, "weight", a->weight, 16));
  if (pb->flags & KLJIT_FLAG_BIAS)
    TRY(check_ptr(p, who, "bias", a->bias, in_sz));
  else
    TRY(check_absent(who, "bias", a->bias, "without KLJIT_FLAG_BIAS"));
  if (!(pb->flags & KLJIT_FLAG_TEACHER_BIAS))
    TRY(check_absent(who, "teacher_bias", teacher_bias_of(a), "without KLJIT_FLAG_TEACHER_BIAS"));
  if (pb->flags & KLJIT_FLAG_ROW_WEIGHTS)
    TRY(check_ptr(p, who, "row_weights", row_weights_of(a), 4));
  else
    TRY(check_absent(who, "row_weights", row_weights_of(a), "without KLJIT_FLAG_ROW_WEIGHTS"));
  if (a->labels) TRY(check_ptr(p, who, "labels", a->labels, names_dtype_size(pb->label_dtype)));
  if (!a->labels && pb->hard_weight != 0.0)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: labels is NULL but hard_weight = %g: the "
                   "hard-label CE needs them", who, pb->hard_weight);
  if (pb->teacher == KLJIT_TEACHER_SPARSE_TOPK) {
    TRY(check_absent(who, "teacher", a->teacher, "with the sparse teacher (teacher_ids, "
                     "teacher_values)"));
    TRY(check_ptr(p, who, "teacher_ids", a->teacher_ids, names_dtype_size(pb->topk_id_dtype)));
    TRY(check_ptr(p, who, "teacher_values", a->teacher_values,
                  names_dtype_size(pb->teacher_dtype)));
  } else if (pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN) {
    TRY(check_absent(who, "teacher", a->teacher, "with the online teacher (teacher_input, "
                     "teacher_weight)"));
    TRY(check_ptr(p, who, "teacher_input", teacher_input_of(a), 16));
    TRY(check_ptr(p, who, "teacher_weight", teacher_weight_of(a), 16));
    if (pb->flags & KLJIT_FLAG_TEACHER_BIAS)
      TRY(check_ptr(p, who, "teacher_bias", teacher_bias_of(a),
                    names_dtype_size(pb->teacher_dtype)));
    TRY(check_absent(who, "teacher_ids", a->teacher_ids, "with a dense teacher"));
    TRY(check_absent(who, "teacher_values", a->teacher_values, "with a dense teacher"));
  } else {
    TRY(check_ptr(p, who, "teacher", a->teacher, 16));
    TRY(check_absent(who, "teacher_ids", a->teacher_ids, "with a dense teacher"));
    TRY(check_absent(who, "teacher_values", a->teacher_values, "with a dense teacher"));
  }
  if (divisor_of(a) && mode != KLJIT_MODE_BACKWARD) {
    if (pb->reduction != KLJIT_REDUCTION_BATCHMEAN && pb->reduction != KLJIT_REDUCTION_MEAN)
      return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                     "%s: args->divisor is set but the reduction is %s: only batchmean and mean "
                     "divide", who, names_reduction(pb->reduction));
    TRY(check_ptr(p, who, "divisor", divisor_of(a), 8));
  }
  const int grads = mode != KLJIT_MODE_FORWARD && !stats_only;
  if (mode != KLJIT_MODE_BACKWARD && !stats_only) {
    TRY(check_ptr(p, who, "loss", a->loss, 4));
    if (row_loss_of(a)) TRY(check_ptr(p, who, "row_loss", row_loss_of(a), 4));
    if (loss_parts_of(a)) TRY(check_ptr(p, who, "loss_parts", loss_parts_of(a), 4));
  }
  if (mode != KLJIT_MODE_FUSED) TRY(check_ptr(p, who, "saved", a->saved, 4));
  if (mode == KLJIT_MODE_BACKWARD) TRY(check_ptr(p, who, "grad_output", a->grad_output, 4));
  const int want_dx = grads && !(a->flags & KLJIT_EXEC_NO_GRAD_INPUT);
  const int want_dw = grads && !(a->flags & KLJIT_EXEC_NO_GRAD_WEIGHT);
  if (want_dx) TRY(check_ptr(p, who, "grad_input", a->grad_input, 16));
  if (want_dw) TRY(check_ptr(p, who, "grad_weight", a->grad_weight, 16));
  if (want_dw && (pb->flags & KLJIT_FLAG_BIAS))
    TRY(check_ptr(p, who, "grad_bias", a->grad_bias, names_dtype_size(pb->grad_weight_dtype)));
  *w = prob_workspace_layout(pb, &p->rec.geom, &p->layout, mode, a->rows);
  const size_t need = w->total;
  if (a->workspace_size < need)
    return err_set(KLJIT_ERR_WORKSPACE_TOO_SMALL,
                   "%s: args->workspace_size = %zu, this call needs %zu bytes "
                   "(kljit_plan_workspace_size)", who, a->workspace_size, need);
  TRY(check_ptr(p, who, "workspace", a->workspace, 256));
  return KLJIT_SUCCESS;
}

static kljit_status run_setup(exec_call *c) {
  return plan_launch(c->p, KSTEP_SETUP, 1, 1, &c->k, c->stream);
}

/* The workspace's tile counter pair where a generated GEMM of the plan claims its tiles from it
 * (TILES dynamic), else NULL. */
static uint32_t *tile_counter(const exec_call *c) {
  return c->p->rec.geom.tile_counter ? (uint32_t *)(void *)(c->ws + c->w.sched) : NULL;
}

/* Those GEMMs find the pair zero: each launch leaves it so, and the call zeroes it once, the
 * workspace being the caller's memory. */
static kljit_status zero_tile_counter(exec_call *c) {
  uint32_t *sched = tile_counter(c);
  if (!sched) return KLJIT_SUCCESS;
  const drv_table *d = c->p->ctx->drv;
  return drv_check(d, d->cuMemsetD32Async((CUdeviceptr)(uintptr_t)sched, 0, 2,
                                          (CUstream)c->stream),
                   "cuMemsetD32Async (the GEMMs' tile counter)");
}

/* ---- the GEMMs of a chunk ------------------------------------------------------------------ */

/* One GEMM of the chunk loop by its recipe slot's engine: the generated kernel where the recipe
 * chose one (its beta compiled in), else cuBLASLt. a, b: gemm_run's operands. TMA's rules hold
 * for every generated slot: X, W, the gradients and the workspace are 16-byte aligned (validate)
 * and H is a multiple of 8 (jgemm_unfit), so chunk and slice offsets keep them. */
static kljit_status gemm_slot(exec_call *c, recipe_slot s, int64_t n, const void *a,
                              const void *b, void *out, float alpha, float beta) {
  const kljit_plan *p = c->p;
  if (p->jgemm[s].k.fn)
    return plan_jgemm_launch(p->ctx, &p->jgemm[s], &p->rec.gemm[s], n, a, b, out, alpha,
                             s == RECIPE_LOGITS ? &c->epi : NULL, tile_counter(c), c->stream);
  return gemm_run(p->ctx->lt, &p->gemm[s], n, a, b, out, alpha, beta, c->ws + c->w.lt,
                  c->w.lt_size, c->stream);
}

/* The online teacher's logits of the chunk, which the row kernels read (TCHUNK). */
static kljit_status run_teacher(exec_call *c, long long row0, int64_t n) {
  const kljit_plan *p = c->p;
  const size_t tsz = names_dtype_size(p->pb.teacher_dtype);
  const char *xt = (const char *)teacher_input_of(c->a) +
                   (size_t)row0 * (size_t)p->pb.teacher_hidden * tsz;
  return gemm_slot(c, RECIPE_TEACHER, n, teacher_weight_of(c->a), xt, c->ws + c->w.zt, 1.0f,
                   0.0f);
}

/* The chunk's logits GEMM and, for the online teacher, its teacher's: first where the logits
 * GEMM's epilogue reads the teacher's logits (stats_tiles), else after. */
static kljit_status run_logits(exec_call *c, long long row0, int64_t n) {
  const kljit_plan *p = c->p;
  const char *x = (const char *)c->a->input + (size_t)row0 * (size_t)p->pb.hidden * c->in_sz;
  const int online = p->rec.gemm[RECIPE_TEACHER].used, first = online && p->rec.geom.stats_tiles;
  if (first) TRY(run_teacher(c, row0, n));
  TRY(gemm_slot(c, RECIPE_LOGITS, n, c->a->weight, x, c->ws + c->w.z, 1.0f, 0.0f));
  return online && !first ? run_teacher(c, row0, n) : KLJIT_SUCCESS;
}

static kljit_status run_convert(exec_call *c, size_t src_off, void *dst, long long n,
                                float scale, int out);

/* dX of one chunk into grad_input: one GEMM, or where the recipe's split pays for this chunk,
 * geom.dx_split GEMMs over slices of V summed in fp32 in the workspace, then converted (one
 * GEMM's fp32 accumulation over all of a large V rounds more than the sum of a few slices'
 * does: bench/RESULTS.md, "dX in slices"). */
static kljit_status run_dx(exec_call *c, long long row0, int64_t n) {
  const kljit_plan *p = c->p;
  const prob_geometry *geo = &p->rec.geom;
  void *g = c->ws + c->w.g;
  char *dx = (char *)c->a->grad_input + (size_t)row0 * (size_t)p->pb.hidden * c->in_sz;
  if (!recipe_dx_split_pays(&p->rec, n))
    return gemm_slot(c, RECIPE_DX, n, c->a->weight, g, dx, c->galpha, 0.0f);
  const int S = geo->dx_split;
  const size_t gsz = names_dtype_size(geo->grad);
  /* the generated dX sums the slices itself, in one launch (its K in slices of dx_slice, each
   * slice's fp32 sum added into the buffer: KSLICE) */
  if (p->jgemm[RECIPE_DX].k.fn)
    TRY(gemm_slot(c, RECIPE_DX, n, c->a->weight, g, c->ws + c->w.dxacc, c->galpha, 0.0f));
  for (int s = 0; s < S && !p->jgemm[RECIPE_DX].k.fn; s++) {
    const int64_t k0 = (int64_t)s * geo->dx_slice;
    const char *w = (const char *)c->a->weight + (size_t)k0 * (size_t)p->pb.hidden * c->in_sz;
    TRY(gemm_slot(c, s == S - 1 ? RECIPE_DX_LAST : RECIPE_DX_SLICE, n, w,
                  (const char *)g + (size_t)k0 * gsz, c->ws + c->w.dxacc, c->galpha,
                  s ? 1.0f : 0.0f));
  }
  return run_convert(c, c->w.dxacc, dx, (long long)(n * p->pb.hidden), 1.0f, 0);
}

/* dW of one chunk: into the fp32 workspace or grad_weight, started by the first chunk unless
 * the call accumulates into grad_weight. KLJIT_ACCUM_AUTO decides the buffer per call (c->dw_ws)
 * and has slots of its own for it (the recipe's RECIPE_DW32*). */
static kljit_status run_dw(exec_call *c, long long row0, int64_t n, int first) {
  const kljit_plan *p = c->p;
  const kljit_args *a = c->a;
  const int dw_ws = c->dw_ws;
  const int acc_out = (a->flags & KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT) != 0;
  void *dw = dw_ws ? (void *)(c->ws + c->w.dw) : a->grad_weight;
  const float beta = first && (dw_ws || !acc_out) ? 0.0f : 1.0f;
  const char *x = (const char *)a->input + (size_t)row0 * (size_t)p->pb.hidden * c->in_sz;
  const int auto32 = dw_ws && p->rec.geom.dw_auto;
  const recipe_slot s = beta == 0.0f ? (auto32 ? RECIPE_DW32 : RECIPE_DW)
                                     : (auto32 ? RECIPE_DW32_ACC : RECIPE_DW_ACC);
  return gemm_slot(c, s, n, x, c->ws + c->w.g, dw, c->galpha, beta);
}

/* The plan's GEMMs (exec_gemms). */
static kljit_status plan_gemms(exec_call *c, exec_gemm which, long long row0, int64_t n,
                               int first) {
  return which == EXEC_LOGITS ? run_logits(c, row0, n)
         : which == EXEC_DX   ? run_dx(c, row0, n)
                              : run_dw(c, row0, n, first);
}

/* No GEMMs (exec_gemms): the benchmark hook KLJIT_CONTEXT_DEBUG_SKIP_GEMMS
 * (kljit_experimental.h) times the row kernels alone. What a GEMM step would have written (the
 * split dX's fp32 sum and its conversion included) is left alone: the results are wrong. */
static kljit_status no_gemms(exec_call *c, exec_gemm which, long long row0, int64_t n,
                             int first) {
  (void)c, (void)which, (void)row0, (void)n, (void)first;
  return KLJIT_SUCCESS;
}

static kljit_status run_stats(exec_call *c, int64_t n) {
  const kljit_plan *p = c->p;
  return plan_launch(p, KSTEP_STATS, (unsigned)p->rec.geom.tune.split, (unsigned)n, &c->k,
                     c->stream);
}

/* dX, dW (and db) of one chunk from G. `first`: the chunk that starts dW/db. */
static kljit_status run_grads(exec_call *c, long long row0, int64_t n, int first) {
  const kljit_plan *p = c->p;
  const kljit_args *a = c->a;
  if (!(a->flags & KLJIT_EXEC_NO_GRAD_INPUT)) TRY(c->gemms(c, EXEC_DX, row0, n, first));
  if (a->flags & KLJIT_EXEC_NO_GRAD_WEIGHT) return KLJIT_SUCCESS;
  TRY(c->gemms(c, EXEC_DW, row0, n, first));
  if (p->pb.flags & KLJIT_FLAG_BIAS) {
    c->k.accumulate = !first;
    const int64_t t = plan_threads(p, KSTEP_COLSUM); /* a thread a column */
    TRY(plan_launch(p, KSTEP_COLSUM, (unsigned)((p->pb.vocab + t - 1) / t), 1, &c->k,
                    c->stream));
  }
  return KLJIT_SUCCESS;
}

/* dst (+)= scale * the fp32 workspace at src_off: dW or db (out: their dtype; accumulating as
 * the call's flags say), or dX (out = 0: the input dtype, written). */
static kljit_status run_convert(exec_call *c, size_t src_off, void *dst, long long n,
                                float scale, int out) {
  c->k.accumulate = out && (c->a->flags & KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT) != 0;
  c->k.out_dtype = out;
  c->k.src = c->ws + src_off, c->k.dst = dst, c->k.count = n, c->k.scale = scale;
  const long long t = plan_threads(c->p, KSTEP_CONVERT); /* an element a thread, 4096 blocks */
  const long long blocks = (n + t - 1) / t;
  return plan_launch(c->p, KSTEP_CONVERT, (unsigned)(blocks < 4096 ? blocks : 4096), 1, &c->k,
                     c->stream);
}

/* Split API: one record per chunk row from its SPLIT partials -> record row0 + r of
 * c->stats_out, a thread a row. */
static kljit_status run_merge(exec_call *c, int64_t n) {
  const int64_t t = plan_threads(c->p, KSTEP_MERGE);
  return plan_launch(c->p, KSTEP_MERGE, (unsigned)((n + t - 1) / t), 1, &c->k, c->stream);
}

/* Split API, kljit_shard_sums: this shard's part of each chunk row's S, one block per row, from
 * the gathered records (c->all) -> slot S of record row0 + r of c->stats_out. */
static kljit_status run_sums(exec_call *c, int64_t n) {
  return plan_launch(c->p, KSTEP_SUMS, 1, (unsigned)n, &c->k, c->stream);
}

static kljit_status run_finish_grads(exec_call *c) {
  const kljit_plan *p = c->p;
  const kljit_args *a = c->a;
  if (a->flags & KLJIT_EXEC_NO_GRAD_WEIGHT) return KLJIT_SUCCESS;
  if (c->dw_ws)
    TRY(run_convert(c, c->w.dw, a->grad_weight, (long long)(p->pb.vocab * p->pb.hidden), 1.0f,
                    1));
  if (p->pb.flags & KLJIT_FLAG_BIAS) /* db summed G as stored: undo its multiplier */
    TRY(run_convert(c, c->w.db, a->grad_bias, (long long)p->pb.vocab, c->galpha, 1));
  return KLJIT_SUCCESS;
}

static kljit_status run_finish_loss(exec_call *c) {
  return plan_launch(c->p, KSTEP_FINISH_LOSS, 1, 1, &c->k, c->stream);
}

static kljit_status run_mode(exec_call *c, kljit_mode mode) {
  const kljit_plan *p = c->p;
  const kljit_args *a = c->a;
  const int64_t R = prob_chunk_rows(&p->rec.geom, a->rows);
  c->gemms = p->ctx->opt.flags & KLJIT_CONTEXT_DEBUG_SKIP_GEMMS ? no_gemms : plan_gemms;
  /* (kljit_shard_sums runs between the two calls that check, and after the first passed) */
  const int sums = c->stats_out && c->all;
  if (mode != KLJIT_MODE_BACKWARD && (p->pb.flags & KLJIT_FLAG_CHECK_INPUTS) && !sums)
    TRY(exec_check_inputs(p, &c->k, a->rows, c->stream));
  if (mode != KLJIT_MODE_BACKWARD) TRY(run_setup(c));
  TRY(zero_tile_counter(c));
  const kiface_step row_step = mode == KLJIT_MODE_FUSED     ? KSTEP_FUSED
                               : mode == KLJIT_MODE_FORWARD ? KSTEP_FORWARD
                                                            : KSTEP_BACKWARD;
  for (long long row0 = 0; row0 < a->rows; row0 += R) {
    const int64_t n = a->rows - row0 < R ? a->rows - row0 : R;
    c->k.row0 = row0;
    c->k.chunk_rows = (int32_t)n;
    /* pass 2 merges nrec records of each row: the chunk's partials, or the shards' records */
    c->k.recs = c->all ? (const void *)(c->all + row0 * p->layout.part) : c->k.part;
    c->epi.row0 = row0;
    TRY(c->gemms(c, EXEC_LOGITS, row0, n, row0 == 0));
    /* pass 1, unless the logits GEMM's epilogue wrote its records (stats_tiles) */
    if (mode != KLJIT_MODE_BACKWARD && !p->rec.geom.tune.cluster && !c->all &&
        !p->rec.geom.stats_tiles)
      TRY(run_stats(c, n));
    if (c->stats_out) { /* kljit_shard_stats / _sums: the records are all they write */
      TRY(sums ? run_sums(c, n) : run_merge(c, n));
      continue;
    }
    TRY(plan_launch(p, row_step, (unsigned)p->rec.geom.p2_split, (unsigned)n, &c->k,
                    c->stream));
    if (mode != KLJIT_MODE_FORWARD) TRY(run_grads(c, row0, n, row0 == 0));
  }
  if (c->stats_out) return KLJIT_SUCCESS;
  if (mode != KLJIT_MODE_BACKWARD) TRY(run_finish_loss(c));
  if (mode != KLJIT_MODE_FORWARD) TRY(run_finish_grads(c));
  return KLJIT_SUCCESS;
}

/* fp16 G keeps small entries out of the subnormal range by being stored times a power of two
 * chosen from what the host knows: the reduction's nominal scale with every row kept (1, 1/N,
 * 1/(N V)), aiming at |G| <= 2^8 for |grad_output| <= 1. It depends on (reduction, N, V) only,
 * so forward and backward agree. Entries overflow only when fewer than about 1/256 of the rows
 * are kept and |grad_output| is large. bf16 and fp32 have fp32's exponent range: 1. */
static float grad_multiplier(const kljit_problem *pb, int64_t rows) {
  if (pb->input_dtype != KLJIT_FP16) return 1.0f;
  double c = 1.0;
  if (pb->reduction == KLJIT_REDUCTION_BATCHMEAN) c = 1.0 / (double)rows;
  if (pb->reduction == KLJIT_REDUCTION_MEAN)
    c = 1.0 / ((double)rows * (double)prob_vocab_total(pb)); /* the same on every shard */
  return (float)exp2(8.0 - rint(log2(c)));
}

/* The kernel arguments that stay the same for the whole call (exec_call.k, and the logits
 * GEMM's epilogue operands exec_call.epi); the chunk loop sets row0, chunk_rows and recs, the
 * helpers their own. */
static void exec_call_args(exec_call *c, int nrec, kljit_mode mode) {
  const kljit_plan *p = c->p;
  const kljit_args *a = c->a;
  kargs *k = &c->k;
  memset(k, 0, sizeof *k);
  k->z = c->ws + c->w.z;
  k->g = c->ws + c->w.g;
  k->part = c->ws + c->w.part;
  k->lossp = c->ws + c->w.lossp;
  k->lossh = p->rec.geom.hard_parts ? (void *)(c->ws + c->w.lossh) : NULL;
  k->row_weights = row_weights_of(a);
  /* kl_finish_loss runs in fused and forward calls only */
  k->row_loss = row_loss_of(a);
  k->loss_parts = loss_parts_of(a);
  k->db = c->ws + c->w.db;
  k->check_flag = c->ws + c->w.check;
  k->teacher = p->pb.teacher == KLJIT_TEACHER_DENSE_HIDDEN ? (const void *)(c->ws + c->w.zt)
                                                            : a->teacher;
  k->teacher_ids = a->teacher_ids;
  k->teacher_values = a->teacher_values;
  k->bias = a->bias;
  k->teacher_bias = teacher_bias_of(a);
  k->teacher_input = teacher_input_of(a);
  k->teacher_weight = teacher_weight_of(a);
  k->labels = a->labels;
  k->labels_is64 = c->labels_is64;
  k->ignore_index = c->ignore;
  k->hdr = c->hdr;
  k->divisor = divisor_of(a);
  k->rowstat = c->rowstat;
  k->grad_output = a->grad_output;
  k->per_row = p->pb.reduction == KLJIT_REDUCTION_NONE;
  k->loss = a->loss;
  k->stats_out = c->stats_out;
  k->rows = a->rows;
  k->temperature = (float)a->temperature;
  k->gmult = c->gmult;
  k->p2_split = p->rec.geom.p2_split;
  /* pass 2's records: the chunk's SPLIT partials of each row (or the logits GEMM's, one per
   * column tile: stats_tiles), or every shard's record */
  const int chunk_recs = p->rec.geom.stats_tiles ? p->rec.geom.stats_tiles : p->rec.geom.tune.split;
  k->nrec = c->all ? nrec : chunk_recs;
  k->srow = c->all ? 1 : chunk_recs;
  k->srec = c->all ? a->rows : 1;
  /* the logits GEMM's epilogue writes the records where pass 1 would (not in backward, whose
   * workspace has none) */
  if (p->rec.geom.stats_tiles) {
    c->epi.teacher = k->teacher;
    c->epi.part = mode != KLJIT_MODE_BACKWARD ? (float *)(c->ws + c->w.part) : NULL;
    /* E16: the fp16 tile-relative scores in the chunk buffer instead of the logits, in every
     * mode; backward's relative to the saved lse (recipe.c) */
    c->epi.e = p->rec.geom.e16 ? (void *)(c->ws + c->w.z) : NULL;
    c->epi.lde = p->rec.geom.ld;
    c->epi.rowstat = c->rowstat;
    c->epi.rsf = (int)p->layout.rowstat;
    c->epi.bias = a->bias;
    c->epi.labels = a->labels, c->epi.labels_is64 = c->labels_is64; /* the CE's (stats.hard) */
    c->epi.hdr = c->hdr; /* a run-time T's 1 / T (stats.tmode) */
    c->epi.tbias = k->teacher_bias; /* the online teacher's (stats.tbdt) */
    /* the sparse teacher's support, which the epilogue reads where stats.topk: its ids (and,
     * with E16, its values) */
    c->epi.ids = a->teacher_ids, c->epi.vals = a->teacher_values;
  }
}

/* stats_out: kljit_shard_stats; all (with nrec records per row): kljit_shard_finish; both:
 * kljit_shard_sums, which has nothing to do (and launches nothing) for the forward KL. */
static kljit_status execute_ex(const kljit_plan *p, void *stream, const kljit_args *a,
                               kljit_mode mode, const char *who, float *stats_out,
                               const float *all, int nrec) {
  kljit_status st = p ? ctx_enter(p->ctx) : KLJIT_SUCCESS;
  if (st != KLJIT_SUCCESS) return st;
  prob_workspace w;
  st = validate(p, a, mode, stats_out != NULL, who, &w);
  if (st == KLJIT_SUCCESS && stats_out) st = check_ptr(p, who, "stats", stats_out, 16);
  if (st == KLJIT_SUCCESS && all) st = check_ptr(p, who, "all", all, 16);
  if (st == KLJIT_SUCCESS && !stats_out && !all && prob_sharded(&p->pb))
    st = err_set(KLJIT_ERR_UNSUPPORTED,
                 "%s: the plan is one shard of a vocabulary-parallel head (vocab = %lld of "
                 "vocab_total = %lld, shards = %d): run it through kljit_shard_stats and "
                 "kljit_shard_finish, or kljit_fused_nccl", who, (long long)p->pb.vocab,
                 (long long)p->pb.vocab_total, (int)p->pb.shards);
  if (st == KLJIT_SUCCESS && (stats_out || all) && p->rec.geom.tune.cluster)
    st = err_set(KLJIT_ERR_UNSUPPORTED,
                 "%s: the plan uses the cluster row kernels (KLJIT_ROW_KERNEL=cluster), which "
                 "have no per-row records to exchange", who);
  if (st == KLJIT_SUCCESS && (stats_out || all) && p->rec.geom.stats_tiles)
    st = err_set(KLJIT_ERR_UNSUPPORTED,
                 "%s: the plan computes its row statistics in the logits GEMM's epilogue "
                 "(KLJIT_GEMM's logits:jit.stats or .e16), which serves unsharded calls only",
                 who);
  if (st == KLJIT_SUCCESS && !(stats_out && all && !p->rec.geom.rows.div)) {
    exec_call c;
    memset(&c, 0, sizeof c);
    c.p = p, c.a = a, c.stream = stream;
    c.ws = a->workspace;
    c.w = w;
    c.hdr = mode == KLJIT_MODE_FUSED ? (float *)(c.ws + c.w.hdr) : a->saved;
    c.rowstat = a->saved ? a->saved + p->layout.hdr : NULL;
    c.labels_is64 = p->pb.label_dtype == KLJIT_INT64;
    c.ignore = (long long)p->pb.ignore_index;
    c.in_sz = names_dtype_size(p->pb.input_dtype);
    c.dw_ws = prob_dw_in_workspace(&p->rec.geom, a->rows);
    c.gmult = grad_multiplier(&p->pb, a->rows);
    /* grad_scale goes into the GEMMs' alpha (fp32): G itself stays unscaled, so fp16 G keeps
     * the range gmult gave it however large the scale */
    c.galpha = (float)((mode != KLJIT_MODE_FORWARD ? args_grad_scale(a) : 1.0) / c.gmult);
    c.stats_out = stats_out, c.all = all;
    exec_call_args(&c, nrec, mode);
    if (!isnormal(c.galpha)) /* a grad_scale near fp32's ends over a large multiplier */
      st = err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: args->grad_scale = %g over the plan's gradient multiplier %g leaves "
                   "fp32's range", who, args_grad_scale(a), (double)c.gmult);
    else if ((st = run_mode(&c, mode)) != KLJIT_SUCCESS)
      err_prefix(st, "%s: ", who);
  }
  if (p) ctx_leave(p->ctx);
  return st;
}

static kljit_status execute(const kljit_plan *p, void *stream, const kljit_args *a,
                            kljit_mode mode, const char *who) {
  return execute_ex(p, stream, a, mode, who, NULL, NULL, 0);
}

kljit_status kljit_fused(const kljit_plan *plan, void *stream, const kljit_args *args) {
  err_clear();
  return execute(plan, stream, args, KLJIT_MODE_FUSED, "kljit_fused");
}

unsigned exec_scale_grid(int64_t count, unsigned threads, int sm_count) {
  const long long per_block = 8LL * threads; /* 8 elements a thread */
  long long blocks = (count + per_block - 1) / per_block;
  /* Eight resident 256-thread blocks per SM fill it for a grid-stride pass; more blocks add
   * nothing when scaling and cost waves of blocks that only read *s when the factor is 1 (the
   * usual case, paid by every fused backward). */
  const long long cap = 8LL * (sm_count > 0 ? sm_count : 132);
  if (blocks > cap) blocks = cap;
  return (unsigned)(blocks < 1 ? 1 : blocks);
}

static kljit_status run_scale(const kljit_plan *p, void *stream, void *ptr, long long n,
                              const float *s, int out) {
  kargs k;
  memset(&k, 0, sizeof k);
  k.data = ptr, k.count = n, k.factor = s, k.out_dtype = out;
  const unsigned blocks = exec_scale_grid(n, plan_threads(p, KSTEP_SCALE), p->ctx->sm_count);
  return plan_launch(p, KSTEP_SCALE, blocks, 1, &k, stream);
}

static kljit_status scale_grads(const kljit_plan *p, void *stream, const kljit_args *a,
                                const char *who) {
  const kljit_problem *pb = &p->pb;
  TRY(check_args_head(a, KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT | KLJIT_EXEC_NO_GRAD_INPUT |
                             KLJIT_EXEC_NO_GRAD_WEIGHT, who));
  if (a->flags & KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT: grad_weight holds earlier gradients, "
                   "which must not be scaled again", who);
  if (pb->reduction == KLJIT_REDUCTION_NONE)
    return err_set(KLJIT_ERR_UNSUPPORTED,
                   "%s: reduction NONE has no fused mode, so no gradients to scale afterwards", who);
  const int dx = !(a->flags & KLJIT_EXEC_NO_GRAD_INPUT), dw = !(a->flags & KLJIT_EXEC_NO_GRAD_WEIGHT);
  const int db = dw && (pb->flags & KLJIT_FLAG_BIAS);
  TRY(check_ptr(p, who, "grad_output", a->grad_output, 4));
  if (dx) TRY(check_ptr(p, who, "grad_input", a->grad_input, 16));
  if (dw) TRY(check_ptr(p, who, "grad_weight", a->grad_weight, 16));
  if (db) TRY(check_ptr(p, who, "grad_bias", a->grad_bias, names_dtype_size(pb->grad_weight_dtype)));
  if (dx) TRY(run_scale(p, stream, a->grad_input, (long long)(a->rows * pb->hidden), a->grad_output, 0));
  if (dw)
    TRY(run_scale(p, stream, a->grad_weight, (long long)(pb->vocab * pb->hidden), a->grad_output, 1));
  if (db) TRY(run_scale(p, stream, a->grad_bias, (long long)pb->vocab, a->grad_output, 1));
  return KLJIT_SUCCESS;
}

kljit_status kljit_scale_grads(const kljit_plan *plan, void *stream, const kljit_args *args) {
  err_clear();
  const char *who = "kljit_scale_grads";
  if (!plan) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: plan is NULL", who);
  if (!args) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: args is NULL", who);
  kljit_status st = ctx_enter(plan->ctx);
  if (st != KLJIT_SUCCESS) return st;
  st = scale_grads(plan, stream, args, who);
  ctx_leave(plan->ctx);
  return st;
}

kljit_status exec_validate_fused(const kljit_plan *p, const kljit_args *a, const char *who,
                                 prob_workspace *w) {
  kljit_status st = p ? ctx_enter(p->ctx) : KLJIT_SUCCESS;
  if (st != KLJIT_SUCCESS) return st;
  st = validate(p, a, KLJIT_MODE_FUSED, 0, who, w);
  if (p) ctx_leave(p->ctx);
  return st;
}

kljit_status kljit_plan_shard_stats_size(const kljit_plan *plan, int64_t rows, size_t *bytes) {
  err_clear();
  const char *who = "kljit_plan_shard_stats_size";
  if (!plan || !bytes)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who, plan ? "bytes" : "plan");
  if (rows < 1 || rows > INT32_MAX)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: rows = %lld, must be in [1, 2^31)", who,
                   (long long)rows);
  *bytes = (size_t)rows * (size_t)plan->layout.part * sizeof(float);
  return KLJIT_SUCCESS;
}

kljit_status kljit_shard_stats(const kljit_plan *plan, void *stream, const kljit_args *args,
                               float *stats) {
  err_clear();
  const char *who = "kljit_shard_stats";
  if (!plan) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: plan is NULL", who);
  if (!args) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: args is NULL", who);
  if (!stats) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: stats is NULL", who);
  return execute_ex(plan, stream, args, KLJIT_MODE_FUSED, who, stats, NULL, 0);
}

/* The checks kljit_shard_sums and kljit_shard_finish make of their gathered records. */
static kljit_status check_gathered(const kljit_plan *plan, const kljit_args *args,
                                   const float *all, int shards, const char *who) {
  if (!plan) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: plan is NULL", who);
  if (!args) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: args is NULL", who);
  if (!all) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: all is NULL", who);
  if (shards != plan->pb.shards)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: shards = %d, must equal the problem's shards (%d)", who, shards,
                   (int)plan->pb.shards);
  return KLJIT_SUCCESS;
}

kljit_status kljit_shard_finish(const kljit_plan *plan, void *stream, const kljit_args *args,
                                const float *all, int shards) {
  err_clear();
  const char *who = "kljit_shard_finish";
  TRY(check_gathered(plan, args, all, shards, who));
  return execute_ex(plan, stream, args, KLJIT_MODE_FUSED, who, NULL, all, shards);
}

kljit_status kljit_shard_sums(const kljit_plan *plan, void *stream, const kljit_args *args,
                              const float *all, int shards, float *stats) {
  err_clear();
  const char *who = "kljit_shard_sums";
  TRY(check_gathered(plan, args, all, shards, who));
  if (!stats) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: stats is NULL", who);
  return execute_ex(plan, stream, args, KLJIT_MODE_FUSED, who, stats, all, shards);
}

kljit_status kljit_plan_shard_rounds(const kljit_plan *plan, int *rounds) {
  err_clear();
  const char *who = "kljit_plan_shard_rounds";
  if (!plan || !rounds)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", who, plan ? "rounds" : "plan");
  *rounds = plan->rec.geom.rows.div ? 2 : 1;
  return KLJIT_SUCCESS;
}

kljit_status kljit_forward(const kljit_plan *plan, void *stream, const kljit_args *args) {
  err_clear();
  return execute(plan, stream, args, KLJIT_MODE_FORWARD, "kljit_forward");
}

kljit_status kljit_backward(const kljit_plan *plan, void *stream, const kljit_args *args) {
  err_clear();
  return execute(plan, stream, args, KLJIT_MODE_BACKWARD, "kljit_backward");
}

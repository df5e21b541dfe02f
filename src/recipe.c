/* SPDX-License-Identifier: Apache-2.0 */
/* recipe.c — what a plan builds, from problem, tuning, options and target (see recipe.h). */
#include "recipe.h"

#include <library_types.h>
#include <string.h>

#include "gemm_algo.h"
#include "spec_check.h"

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* ---- geometry and the two row-kernel modules ----------------------------------------------- */

/* The row kernels' spec for a geometry whose chunk buffer is decided (its strides and dtypes, the
 * statistics epilogue's tiles, E16's scores of `etile` columns a tile). */
static kljit_status rows_spec(const kljit_problem *pb, prob_geometry *g, int etile) {
  const prob_tuning *tune = &g->tune;
  const int hidden = pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN;
  /* the dense row kernels' TEACHER: the online teacher's logits are a logits teacher's */
  const kljit_teacher_form form = hidden ? KLJIT_TEACHER_DENSE_LOGITS : pb->teacher;
  kspec *r = &g->rows;
  r->family = KSPEC_DENSE_ROWS;
  r->v = pb->vocab, r->ld = g->ld;
  r->threads = tune->threads, r->split = tune->split;
  r->cluster = tune->cluster, r->nv = tune->nv, r->ldg = g->ldg;
  /* E16: the fp16 scores are G's size, so G overwrites them without INPLACE's barrier */
  r->inplace = !prob_native_logits(pb) && !tune->cluster && !g->e16;
  r->logit = g->logit, r->grad = g->grad;
  r->tdt = pb->teacher_dtype;
  r->bdt = pb->weight_dtype;
  r->out = KLJIT_FP32;
  r->teacher = names_teacher(form);
  r->reduction = names_reduction(pb->reduction);
  r->tmode = pb->temperature_mode;
  r->bias = (pb->flags & KLJIT_FLAG_BIAS) != 0;
  r->t2 = (pb->flags & KLJIT_FLAG_SCALE_T_SQUARED) != 0;
  r->tt_same = pb->teacher_temperature == 0;
  r->t = pb->temperature, r->tt = pb->teacher_temperature, r->eps = pb->eps;
  r->check = (pb->flags & KLJIT_FLAG_CHECK_INPUTS) != 0;
  r->vtot = prob_vocab_total(pb);
  r->offset = pb->vocab_offset;
  r->tld = prob_teacher_ld(pb);
  if (hidden) { /* the teacher GEMM's fp32 logits, chunk rows LD apart (exec.c) */
    r->tdt = KLJIT_FP32;
    r->tld = g->ld;
    r->tchunk = 1;
    /* its bias, in the teacher's dtype, is added as the row kernels load its logits */
    if (pb->flags & KLJIT_FLAG_TEACHER_BIAS) r->tbdt = pb->teacher_dtype;
    /* checked mode reads what its logits are computed from: input, head, bias */
    if (r->check) r->ht = pb->teacher_hidden, r->txdt = pb->teacher_dtype;
  }
  r->softcap = pb->softcap;
  r->tsoftcap = pb->teacher_softcap;
  r->hard = pb->hard_weight;
  r->soft1 = pb->soft_weight - 1.0;
  r->div = prob_divergence_rows(pb);
  r->sharded = prob_sharded(pb);
  r->beta = r->div && strcmp(r->div, "jsd") == 0 ? pb->beta : 0.0;
  r->alpha = r->div && strncmp(r->div, "skew_", 5) == 0 ? pb->skew_alpha : 0.0;
  r->roww = (pb->flags & KLJIT_FLAG_ROW_WEIGHTS) != 0;
  r->lsmooth = pb->label_smoothing;
  r->zloss = pb->z_loss;
  /* a record per column tile of the logits GEMM's epilogue (1002 a row at V = 128256 with the
   * default 128-column tile): pass 2 merges them with the block */
  r->merge_block = g->stats_tiles > 0;
  r->etile = g->e16 ? etile : 0; /* the rows read E16's scores: s = m_tile + x */
  /* the rows write the CE's loss partials apart (kl_finish_loss adds them up) */
  g->hard_parts = pb->hard_weight > 0.0;
  if (pb->teacher == KLJIT_TEACHER_SPARSE_TOPK) {
    /* one pass-2 block per row (it gathers the support), two-pass only */
    if (tune->cluster)
      return err_set(KLJIT_ERR_UNSUPPORTED, "the sparse teacher has no cluster row kernels");
    r->family = KSPEC_SPARSE_ROWS;
    r->cluster = 0, r->nv = 1;
    r->teacher = "sparse";
    r->topk = pb->topk;
    r->idt = pb->topk_id_dtype;
    r->values = names_topk_values(pb->topk_values);
    r->tail = names_tail(pb->tail);
  }
  kspec *h = &g->helpers;
  *h = *r;
  h->family = KSPEC_HELPERS;
  /* the helpers never see logits, the teacher or the loss's terms */
  h->tld = 0, h->softcap = h->tsoftcap = h->hard = h->soft1 = h->beta = h->alpha = 0.0;
  h->lsmooth = h->zloss = 0.0;
  h->roww = 0;
  h->div = NULL;
  h->tchunk = 0;
  h->tbdt = 0;
  h->ht = 0, h->txdt = 0;
  h->sharded = 0;
  h->check = 0;
  h->merge_block = 0, h->etile = 0;
  h->out = pb->grad_weight_dtype;
  return KLJIT_SUCCESS;
}

/* The geometry of a tuning (the one place it is derived), before the logits GEMM's epilogue
 * (logits_epilogue) and the row specs (rows_spec) it decides. */
static kljit_status geometry(const kljit_problem *pb, const prob_tuning *tune, prob_geometry *g) {
  memset(g, 0, sizeof *g);
  if (tune->chunk_rows < 1 || tune->threads < 64 || tune->threads > 1024 ||
      tune->threads % 32 || tune->split < 1 || tune->split > 64 ||
      (tune->cluster && tune->cluster != tune->split) || tune->nv < 1)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "tuning chunk_rows=%lld threads=%d split=%d is out of range",
                   (long long)tune->chunk_rows, tune->threads, tune->split);
  g->tune = *tune;
  g->ld = round_up(pb->vocab, 8);
  const int native = prob_native_logits(pb);
  g->grad = pb->input_dtype;
  g->logit = native ? g->grad : KLJIT_FP32;
  /* G overwrites the logits: same dtype, element by element; else 16-bit G over the fp32 row,
   * made safe by the cluster barrier or by the one-block-per-row pass 2 (INPLACE) */
  g->ldg = native ? g->ld : 2 * g->ld;
  /* the reverse KL and the JSD need a row total before G: one pass-2 block per row, unless
   * the cluster holds the row (it sums S over its blocks) */
  const int one_block = (!native && !tune->cluster) || pb->teacher == KLJIT_TEACHER_SPARSE_TOPK ||
                        (prob_divergence_rows(pb) && !tune->cluster);
  g->p2_split = one_block ? 1 : tune->split;
  g->dw_workspace = pb->grad_weight_dtype != KLJIT_FP32 &&
                    pb->grad_weight_accum == KLJIT_ACCUM_FP32;
  /* AUTO with a 16-bit dW: OUTPUT_DTYPE's geometry (and chunk cap), the fp32 buffer per call
   * (prob_dw_in_workspace, the slots RECIPE_DW32*); with an fp32 dW it is FP32's in-place case */
  g->dw_auto = pb->grad_weight_dtype != KLJIT_FP32 && pb->grad_weight_accum == KLJIT_ACCUM_AUTO;
  /* Only a 16-bit dW accumulated in place (4 V H bytes a chunk, the binding's lean-memory
   * setting) takes the chunk cap: with an fp32 accumulator each extra chunk's 8 V H bytes cost
   * more than the smaller chunk saves (bench/RESULTS.md, "the merged architecture"). The
   * online teacher's chunk holds its fp32 logits beside the student's: it keeps an eighth of the
   * rows (its cap before the dense one became 3/8: not measured since). */
  g->chunk_eighths = pb->grad_weight_dtype == KLJIT_FP32 || g->dw_workspace ? 0
                     : pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN          ? 1
                                                                          : 3;
  return KLJIT_SUCCESS;
}

/* dX as `forced` slices (the options', 1..64, then obeyed for every chunk), or for 0 the
 * planner's: 16-bit inputs with V >= 65536 take ceil(V / 32768) slices, others one GEMM, and
 * only chunks whose one GEMM has 128 x 256 tiles for at least half the SMs split (a shorter
 * chunk's GEMM leaves SMs idle, which cuBLASLt fills by splitting K itself; slices would idle
 * them again: bench/RESULTS.md, "dX in slices"). Fewer slices where V is too short for that
 * many 64-column multiples. */
static void dx_split(const kljit_problem *pb, int forced, int sm_count, prob_geometry *g) {
  const int narrow = pb->input_dtype != KLJIT_FP32;
  int s = forced > 0                     ? forced
          : narrow && pb->vocab >= 65536 ? (int)((pb->vocab + 32767) / 32768)
                                         : 1;
  int64_t slice = pb->vocab;
  for (; s > 1; s--) { /* slices of 64-column multiples (aligned operands), the last non-empty */
    slice = (pb->vocab + s - 1) / s;
    slice = (slice + 63) / 64 * 64;
    if ((int64_t)(s - 1) * slice < pb->vocab) break;
  }
  g->dx_split = s;
  g->dx_slice = s > 1 ? slice : pb->vocab;
  /* 2 ceil(n / 128) ceil(H / 256) >= SMs, for the least n */
  const int64_t sms = sm_count > 0 ? sm_count : 132, col_tiles = (pb->hidden + 255) / 256;
  const int64_t row_tiles = (sms + 2 * col_tiles - 1) / (2 * col_tiles);
  g->dx_rows = forced > 0 ? 1 : 128 * (row_tiles - 1) + 1;
}

/* ---- the GEMMs ------------------------------------------------------------------------------ */

static int cuda_type(kljit_dtype dt) {
  return dt == KLJIT_FP32 ? CUDA_R_32F : dt == KLJIT_FP16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* fp32 inputs compute in fp32 unless the problem allows TF32; 16-bit ones accumulate in fp32. */
static int compute_type(const kljit_problem *pb, kljit_dtype in) {
  return in == KLJIT_FP32 && !(pb->flags & KLJIT_FLAG_ALLOW_TF32) ? CUBLAS_COMPUTE_32F
         : in == KLJIT_FP32                                       ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                  : CUBLAS_COMPUTE_32F;
}

static void slot(recipe_gemm *g, gemm_kind op, const gemm_types *ty, int64_t v, int64_t h,
                 const prob_geometry *geom) {
  const gemm_shape sh = {v, h, geom->ld, geom->ldg};
  g->used = 1, g->op = op, g->types = *ty, g->shape = sh, g->rows = geom->tune.chunk_rows;
  g->engine = RECIPE_CUBLASLT;
}

/* The slots' operations: types, shapes, chunk rows. */
static void gemm_slots(const kljit_problem *pb, recipe *r) {
  const prob_geometry *g = &r->geom;
  const kljit_dtype in = pb->input_dtype;
  gemm_types ty;
  ty.in = cuda_type(in);
  /* E16's logits GEMM writes no C: the slot keeps the accumulator's type, as its variant's OUT */
  ty.logits = cuda_type(g->e16 ? KLJIT_FP32 : g->logit);
  ty.dx = cuda_type(in);
  ty.dw = g->dw_workspace ? CUDA_R_32F : cuda_type(pb->grad_weight_dtype);
  ty.compute = compute_type(pb, in);
  for (int k = GEMM_LOGITS; k <= GEMM_DW; k++)
    slot(&r->gemm[k], (gemm_kind)k, &ty, pb->vocab, pb->hidden, g);
  slot(&r->gemm[RECIPE_DW_ACC], GEMM_DW, &ty, pb->vocab, pb->hidden, g);
  if (g->dw_auto) { /* AUTO's long calls: dW into the fp32 buffer, first and later chunks */
    gemm_types t32 = ty;
    t32.dw = CUDA_R_32F;
    slot(&r->gemm[RECIPE_DW32], GEMM_DW, &t32, pb->vocab, pb->hidden, g);
    slot(&r->gemm[RECIPE_DW32_ACC], GEMM_DW, &t32, pb->vocab, pb->hidden, g);
  }
  if (g->dx_split > 1) { /* dX of a slice of V into the fp32 sum (exec.c); the last its own */
    gemm_types tx = ty;
    tx.dx = CUDA_R_32F;
    slot(&r->gemm[RECIPE_DX_SLICE], GEMM_DX, &tx, g->dx_slice, pb->hidden, g);
    slot(&r->gemm[RECIPE_DX_LAST], GEMM_DX, &tx, pb->vocab - (g->dx_split - 1) * g->dx_slice,
         pb->hidden, g);
  }
  if (pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN) {
    /* Zt[n, V] (ld LD, fp32) = Xt[n, Ht] Wt[:V]^T: the logits shape with the teacher's sizes */
    gemm_types tt = ty;
    tt.in = cuda_type(pb->teacher_dtype), tt.logits = CUDA_R_32F;
    tt.compute = compute_type(pb, pb->teacher_dtype);
    slot(&r->gemm[RECIPE_TEACHER], GEMM_LOGITS, &tt, pb->vocab, pb->teacher_hidden, g);
  }
}

/* The generated family's slot of each tuned recipe slot (gemm_sm90.h). */
static const struct {
  recipe_slot slot;
  jgemm_slot jslot;
} TUNED[] = {{RECIPE_LOGITS, JGEMM_LOGITS},     {RECIPE_DX, JGEMM_DX},
             {RECIPE_DW, JGEMM_DW_FIRST},       {RECIPE_DW_ACC, JGEMM_DW_ACC},
             {RECIPE_DW32, JGEMM_DW_FIRST},     {RECIPE_DW32_ACC, JGEMM_DW_ACC}};

/* The engines of the tuned slots (logits, dX, dW's two, AUTO's two): a generated variant where
 * jgemm_pick_slot takes one (the options' backends sel, else the tuning's choice, else the
 * arch's heuristic table), else cuBLASLt with the options' k-th algorithm or the tuning's (where
 * one was stored); the logits slot's pick was made first (logits_epilogue). The other slots run
 * cuBLASLt's heuristic. */
static void choose_engines(const kljit_problem *pb, const gemm_select sel[3], int arch,
                           const jgemm_pick *logits, recipe *r) {
  /* AUTO's fp32-buffer slots pick as FP32's accumulation would (a generated variant's output
   * dtype follows the geometry's dw_workspace) */
  prob_geometry g32 = r->geom;
  g32.dw_workspace = 1;
  for (size_t i = 0; i < sizeof TUNED / sizeof TUNED[0]; i++) {
    recipe_gemm *g = &r->gemm[TUNED[i].slot];
    if (!g->used) continue;
    const int buf = TUNED[i].slot == RECIPE_DW32 || TUNED[i].slot == RECIPE_DW32_ACC;
    jgemm_pick pick = *logits;
    if (TUNED[i].slot != RECIPE_LOGITS)
      jgemm_pick_slot(pb, buf ? &g32 : &r->geom, arch, sel, TUNED[i].jslot, &pick);
    g->tuned_algo = 1, g->lt_index = pick.lt_index, g->from = pick.from, g->why = pick.why;
    if (!pick.jit) continue;
    g->engine = RECIPE_GENERATED;
    g->variant = pick.v;
    g->spec = jgemm_spec(&g->variant);
    if (g->variant.tweaks & KSPEC_GEMM_DYNAMIC) r->geom.tile_counter = 1;
  }
  /* the generated dX of a split geometry writes the fp32 sum of its slices (KSLICE): every
   * chunk takes the split path, which converts it */
  if (r->geom.dx_split > 1 && r->gemm[RECIPE_DX].engine == RECIPE_GENERATED) r->geom.dx_rows = 1;
}

enum { RECIPE_EPILOGUE_TOPK_MAX = 128 }; /* the sparse support's ids the epilogue reads, a row */

/* Why the logits GEMM (generated where `jit`) cannot write the rows' pass-1 records for pb
 * (STATS of templates/gemm_sm90.cu.lua covers what those records hold without the row's
 * normalizer), or NULL where it can. With E16 the epilogue makes the scores itself, with the
 * bias and the logit cap. The sparse teacher's records are the student's statistics alone
 * where no column of the support is kept apart (the forward KL, tail none or renorm). */
static const char *stats_unfit(const kljit_problem *pb, const prob_geometry *g, int jit, int e16) {
  if (!jit) return "a generated logits GEMM only";
  /* TVD's gradient is a sign of q - p: E16's q, from fp16 x = s - m_tile (2^-11 |x| each),
   * flips it wherever p and q agree to that, and a flip moves a whole q_v (run 78, H100: the
   * online teacher, whose logits no test can move off the student's, dX 6.7e-3 where the fp32
   * logits give 2.1e-3) */
  if (e16 && pb->divergence == KLJIT_DIVERGENCE_TVD)
    return "no TVD under E16 (its gradient, a sign of q - p, flips where the fp16 scores' "
           "rounding reaches |q - p|): logits:jit.stats takes it";
  if (pb->teacher == KLJIT_TEACHER_SPARSE_TOPK) {
    if (e16 && (prob_divergence_rows(pb) || pb->tail == KLJIT_TAIL_BUCKET))
      return "the sparse teacher's forward KL with tail none or renorm only under E16 (the bucket "
             "tail and the other divergences take their support's terms from its fp32 logits: "
             "logits:jit.stats takes them)";
    /* the epilogue reads a row's K ids once per column tile (1002 at V = 128256), K x 4-8 x
     * V / BN bytes of L2 reads a row: 100 int32 ids, 3.3 GB at 8192 rows, against pass 1's 4.2
     * GB of fp32 logits it replaces; 1024 int64 ids would read 67 GB */
    const int reads_ids = e16 || prob_divergence_rows(pb) || pb->tail == KLJIT_TAIL_BUCKET;
    if (reads_ids && pb->topk > RECIPE_EPILOGUE_TOPK_MAX)
      return "the sparse teacher with at most 128 ids a row where the epilogue reads them (E16, "
             "the bucket tail, the divergences: once per column tile)";
    if (pb->hard_weight > 0.0 && pb->label_smoothing > 0.0)
      return "the sparse teacher's CE without label smoothing (its sum of z' has no slot in the "
             "epilogue's record)";
    if (!e16 && (pb->hard_weight > 0.0 || pb->softcap > 0.0 || (pb->flags & KLJIT_FLAG_BIAS) ||
                 pb->temperature_mode != KLJIT_TEMPERATURE_CONSTANT))
      return "the sparse teacher without a hard-label CE, softcap, bias or per-call temperature "
             "(E16 takes them)";
  } else if (pb->teacher != KLJIT_TEACHER_DENSE_PROBS &&
             pb->teacher != KLJIT_TEACHER_DENSE_LOGPROBS &&
             pb->teacher != KLJIT_TEACHER_DENSE_LOGITS &&
             pb->teacher != KLJIT_TEACHER_DENSE_HIDDEN) {
    return "a dense teacher's probabilities, log-probabilities or logits, the online teacher or "
           "the sparse teacher only";
  }
  if (pb->hard_weight > 0.0 && !e16) return "no hard-label CE (E16 takes one)";
  /* (label smoothing comes with the CE: E16's pass 2 sums z' from E, its z'_y from the records) */
  if (pb->softcap > 0.0 && !e16) return "no softcap (E16 takes one)";
  if ((pb->flags & KLJIT_FLAG_BIAS) && !e16) return "no bias (E16 takes one)";
  if (pb->temperature_mode != KLJIT_TEMPERATURE_CONSTANT && !e16)
    return "a constant temperature only (E16 takes a per-call one)";
  if (g->logit != KLJIT_FP32) return "fp32 chunk logits only (not native logits)";
  if (g->tune.cluster) return "the two-pass row kernels only (not the cluster variant)";
  if (prob_sharded(pb) || pb->shards > 1) return "an unsharded head only";
  return NULL;
}

/* Whether the heuristics chose the logits GEMM themselves for a GPU they know: a generated one
 * from the arch's table (no option, no tuning) on a GPU whose DRAM was measured (a context's;
 * not recipe_make's, nor precompile's first device class), which may then take an epilogue by
 * the rules below. */
static int heuristic_jit(const recipe_device *dev, const jgemm_pick *pick) {
  return pick->jit && pick->from == JGEMM_FROM_HEURISTIC && dev->dram_per_sm_cycle > 0.0;
}

/* Whether `.stats` (the statistics without E16) pays on `dev`, whose DRAM is known
 * (heuristic_jit): moving fewer than RECIPE_EPILOGUE_DRAM_PER_SM_CYCLE bytes an SM cycle, where
 * the rows' re-reads of the fp32 chunk cost more than the epilogue adds (recipe.h). */
static int dram_short(const recipe_device *dev) {
  return dev->dram_per_sm_cycle < RECIPE_EPILOGUE_DRAM_PER_SM_CYCLE;
}

/* The teachers whose E16 call was measured faster than the fp32 logits' and `.stats`': a dense
 * teacher read from memory (on an H100 and an H200: recipe.h) and the sparse top-K teacher (on
 * an H100, E16's own tile: 41.2-41.9 ms against `.stats`' 44.8 at 8192 x 4096 x 128256, K =
 * 100, run 129; on the earlier 128 x 128 tile it had lost, 46.5 against 43.6, run 88). The
 * online teacher keeps its fp32 logits beside E (run 77: `.stats` 0.446x / 0.495x Liger's JSD,
 * E16 0.465x / 0.497x). */
static int e16_by_default(const kljit_problem *pb) {
  return pb->teacher == KLJIT_TEACHER_DENSE_PROBS || pb->teacher == KLJIT_TEACHER_DENSE_LOGPROBS ||
         pb->teacher == KLJIT_TEACHER_DENSE_LOGITS || pb->teacher == KLJIT_TEACHER_SPARSE_TOPK;
}

/* KLJIT_FLAG_PRECISE_ACCUMULATION's logits GEMM, whatever shape the options, the tuning or the
 * heuristic chose: the tile that has the registers for a second accumulator (128 x 128,
 * cooperative: 64 of each tile's rows a warpgroup; the pingpong tile's warpgroup holds all 128)
 * with the accumulator promoted every 256 of K (flag r), in a cluster of 1, as run on a GPU
 * (bench/RESULTS.md runs 99-104: `gpu.promoted.*`, the dense suite under E16 + r). E16, STATS
 * and the layout stay the caller's. */
static void promoted_shape(jgemm_variant *v) {
  v->bn = 128, v->consumers = 2, v->stages = 6, v->raster = 'g', v->cluster = 1;
  v->schedule = 'c', v->epilogue = 'd', v->tweaks = KSPEC_GEMM_PROMOTE;
}

/* E16's logits GEMM where nothing named its shape (the heuristics' E16, or the options' without
 * a variant): RECIPE_E16_TILE's variant in place of the kind's default. */
static void e16_shape(jgemm_variant *v) {
  prob_gemm_choice c;
  memset(&c, 0, sizeof c);
  if (gemm_algo_jit_parse(RECIPE_E16_TILE, &c)) return; /* (unit_recipe parses it) */
  jgemm_variant_take(v, &c);
}

/* Flag t (MASS_WARPS) taken off v, and whether v had it. */
static int take_mass_warps(jgemm_variant *v) {
  const int had = v->tweaks & KSPEC_GEMM_MASS_WARPS;
  v->tweaks &= ~KSPEC_GEMM_MASS_WARPS;
  return had;
}

/* The logits GEMM first (its engine, as choose_engines would pick it), then what its epilogue
 * writes, which decides what the chunk buffer holds: the row specs, G's stride, the slots'
 * operations and the chunk follow from it. Where the options ask for the statistics epilogue
 * (KLJIT_GEMM's logits:jit.stats or .e16) or the slot's generated choice has E16 (flag e: the
 * options' or the tuning's) and stats_unfit has no objection, the variant gets STATS and the
 * geometry stats_tiles (records per row: pass 1 is in the GEMM); with E16, the rest below. Else
 * the rows' pass 1 stays, and r->stats_why says why. */
static void logits_epilogue(const kljit_problem *pb, const gemm_select sel[3],
                            const recipe_device *dev, int chunk_set, recipe *r, jgemm_pick *pick) {
  jgemm_pick_slot(pb, &r->geom, dev->arch, sel, JGEMM_LOGITS, pick);
  jgemm_variant *v = &pick->v;
  const int promote = pick->jit && (pb->flags & KLJIT_FLAG_PRECISE_ACCUMULATION);
  if (promote) promoted_shape(v);
  /* flag t (MASS_WARPS: the teacher's part of the records made by the producer's idle warps) is
   * kept below where it applies, a dense teacher's tile in the statistics (probabilities,
   * log-probabilities, logits, the online teacher's) on static tiles, and dropped elsewhere: one
   * variant named for every problem serves them all */
  int mass = take_mass_warps(v);
  int e16 = sel[GEMM_LOGITS].e16 || (pick->jit && v->stats.e16);
  v->stats.e16 = 0; /* set below where it is taken */
  prob_geometry *geo = &r->geom;
  if (!sel[GEMM_LOGITS].stats && !e16) {
    /* nothing asked: the heuristics' own choice, E16 for the teachers it was measured faster
     * for (e16_by_default), else `.stats` where the DRAM is short
     * (RECIPE_EPILOGUE_DRAM_PER_SM_CYCLE), each where in scope (out of scope: the fp32 logits
     * and the rows, with no stats_why: nothing was asked) */
    if (!heuristic_jit(dev, pick)) return;
    e16 = e16_by_default(pb) && !stats_unfit(pb, geo, 1, 1);
    if (!e16 && (!dram_short(dev) || stats_unfit(pb, geo, 1, 0))) return;
    r->epilogue_auto = e16 ? RECIPE_AUTO_E16 : RECIPE_AUTO_STATS;
  } else if ((r->stats_why = stats_unfit(pb, geo, pick->jit, e16)) != NULL) {
    return;
  }
  if (e16 && pick->default_shape && !promote) {
    e16_shape(v);
    mass = take_mass_warps(v); /* E16's own tile's */
  }
  /* the online teacher's logits are teacher logits: the teacher GEMM's fp32 chunk, rows the
   * chunk's, LD apart, which exec.c runs before this GEMM; its bias added as they are read */
  const int hidden = pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN;
  const int tlogits = hidden || pb->teacher == KLJIT_TEACHER_DENSE_LOGITS;
  geo->stats_tiles = (int)((pb->vocab + v->bn - 1) / v->bn);
  if (pb->teacher == KLJIT_TEACHER_SPARSE_TOPK) {
    /* the student's statistics alone; under E16 also the support's exact part of the loss,
     * from its ids and values (the rows' x is fp16: their gathered scores would not be exact) */
    v->stats.teacher = "sparse";
    const int apart = prob_divergence_rows(pb) || pb->tail == KLJIT_TAIL_BUCKET;
    if (e16 || apart) /* the support's columns, marked from its ids */
      v->stats.topk = (int)pb->topk, v->stats.idt = pb->topk_id_dtype;
    if (e16) {
      v->stats.vdt = pb->teacher_dtype, v->stats.values = names_topk_values(pb->topk_values);
    } else {
      /* the renormalized divergences keep the support's own (max, sum-exp) too */
      v->stats.own = prob_divergence_rows(pb) && pb->tail == KLJIT_TAIL_RENORM;
    }
  } else {
    v->stats.teacher = names_teacher(hidden ? KLJIT_TEACHER_DENSE_LOGITS : pb->teacher);
    v->stats.tdt = hidden ? KLJIT_FP32 : pb->teacher_dtype;
    v->stats.tld = hidden ? geo->ld : prob_teacher_ld(pb);
    v->stats.tchunk = hidden;
    v->stats.tbdt = hidden && (pb->flags & KLJIT_FLAG_TEACHER_BIAS) ? pb->teacher_dtype
                                                                     : (kljit_dtype)0;
    /* teacher logits: their temperature, 0 where it is T (the constant or the call's) */
    v->stats.tt = tlogits ? pb->teacher_temperature : 0.0;
    v->stats.tsoftcap = tlogits ? pb->teacher_softcap : 0.0;
    if (!(v->tweaks & KSPEC_GEMM_DYNAMIC)) v->tweaks |= mass;
  }
  /* a per-call T (E16 only) stays out of the source: the epilogue reads 1 / T from the header */
  v->stats.t = pb->temperature_mode == KLJIT_TEMPERATURE_RUNTIME ? 1.0 : pb->temperature;
  if (!e16) return;
  /* E16 (logits:jit.e16, or flag e): in every mode the GEMM writes the tile-relative scores in
   * fp16 instead of the fp32 logits, x = s - m_tile beside the records (fused, forward) or
   * x = s - lse from the saved statistics (backward); the rows read them (ETILE) and G
   * overwrites them, element by element: the chunk buffer holds 2 bytes an element, not 4, and
   * G's stride is theirs (the rows', the dX and dW GEMMs', kl_colsum's). */
  v->stats.e16 = 1;
  v->stats.bdt = (pb->flags & KLJIT_FLAG_BIAS) ? pb->weight_dtype : (kljit_dtype)0;
  v->stats.softcap = pb->softcap; /* the epilogue caps s; the rows take G's factor from it */
  v->stats.hard = pb->hard_weight > 0.0; /* the CE's records: lse(z') and z'_y, exact */
  v->stats.tmode = pb->temperature_mode;
  geo->e16 = 1;
  geo->logit = KLJIT_FP16; /* E's element: the workspace's size */
  geo->ldg = geo->ld;
  /* half the bytes a row: twice the tuning's rows in the same budget (unless the options set
   * the chunk), and a short call with a 16-bit dW in two chunks of half its rows (four eighths)
   * where the fp32 logits took three eighths. The slots' cuBLASLt operations are prepared for
   * that chunk (their rows: also the key under which the tuner, which times the plan's own
   * chunk, stores its cuBLASLt choices). */
  /* (not with the online teacher: its fp32 logits, 4 bytes an element, stay beside E's 2, so a
   * row takes 6 bytes an element where it took 8; its chunk stays the tuning's) */
  if (!chunk_set && !hidden && geo->tune.chunk_rows < 8192) /* a larger tuned chunk is kept */
    geo->tune.chunk_rows = geo->tune.chunk_rows > 4096 ? 8192 : 2 * geo->tune.chunk_rows;
  if (geo->chunk_eighths == 3) geo->chunk_eighths = 4;
}

/* ---- the recipe ----------------------------------------------------------------------------- */

int recipe_device_classes(int arch, recipe_device out[2]) {
  memset(out, 0, 2 * sizeof *out);
  out[0].arch = out[1].arch = arch;
  if (arch != 90) return 1; /* the generated logits GEMM is sm_90's */
  out[1].dram_per_sm_cycle = RECIPE_EPILOGUE_DRAM_PER_SM_CYCLE / 2; /* under the line */
  return 2;
}

kljit_status recipe_make(const kljit_problem *pb, const prob_tuning *tune,
                         const kljit_context_options *opt, int arch, int sm_count, recipe *out) {
  const recipe_device dev = {arch, sm_count, 0.0};
  return recipe_make_on(pb, tune, opt, &dev, out);
}

kljit_status recipe_make_on(const kljit_problem *pb, const prob_tuning *tune,
                            const kljit_context_options *opt, const recipe_device *dev,
                            recipe *out) {
  const int arch = dev->arch, sm_count = dev->sm_count;
  memset(out, 0, sizeof *out);
  gemm_select sel[3]; /* each GEMM's backend as the options say (KLJIT_GEMM) */
  kljit_status st = gemm_algo_select(opt, sel);
  if (st != KLJIT_SUCCESS) return st;
  if (opt->dx_split < 0 || opt->dx_split > 64)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "options->dx_split = %d, must be 0 (the planner's) or in [1, 64]",
                   (int)opt->dx_split);
  prob_tuning t = tune ? *tune : prob_estimate(pb, arch, opt);
  /* a stored cluster tuning (wisdom of the same shape) cannot serve a vocabulary shard, whose
   * row statistics are merged across ranks: the shard takes the two-pass heuristics */
  if (t.cluster && prob_sharded(pb)) {
    t = prob_estimate(pb, arch, opt);
    out->replaced = 1;
  }
  st = geometry(pb, &t, &out->geom);
  if (st != KLJIT_SUCCESS) return st;
  if (opt->chunk_rows > 0) out->geom.chunk_eighths = 0; /* the options' chunk is obeyed */
  dx_split(pb, opt->dx_split, sm_count, &out->geom);
  jgemm_pick logits;
  logits_epilogue(pb, sel, dev, opt->chunk_rows > 0, out, &logits);
  st = rows_spec(pb, &out->geom, logits.v.bn);
  if (st != KLJIT_SUCCESS) return st;
  /* The dense row kernels as two modules, compiled at once: a cold plan waits for the larger
   * part (about half the whole's compile), not for the whole (bench/RESULTS.md, run 42). */
  if (out->geom.rows.family == KSPEC_DENSE_ROWS) {
    out->rows_part[0] = out->rows_part[1] = out->geom.rows;
    out->rows_part[0].part = "fused";
    out->rows_part[1].part = "phased";
  }
  gemm_slots(pb, out);
  for (int s = 0; s < RECIPE_SLOTS; s++)
    if (out->gemm[s].used) out->gemm[s].lt_index = -1;
  choose_engines(pb, sel, arch, &logits, out);
  return KLJIT_SUCCESS;
}

int recipe_fixed_modules(const recipe *r) { return r->rows_part[0].family ? 3 : 2; }

int recipe_modules(const recipe *r, const kspec *out[RECIPE_MAX_MODULES]) {
  int n = 0;
  const int parts = recipe_fixed_modules(r) == 3;
  out[n++] = parts ? &r->rows_part[0] : &r->geom.rows;
  out[n++] = &r->geom.helpers;
  if (parts) out[n++] = &r->rows_part[1];
  for (int s = 0; s < RECIPE_SLOTS; s++)
    if (r->gemm[s].used && r->gemm[s].engine == RECIPE_GENERATED) out[n++] = &r->gemm[s].spec;
  return n;
}

kljit_status recipe_check(const recipe *r) {
  const kspec *m[RECIPE_MAX_MODULES];
  const int n = recipe_modules(r, m);
  kljit_status st = KLJIT_SUCCESS;
  /* the dense rows' two parts differ from geom.rows by PART alone, which the template takes
   * either way: the verdict on the whole spec is theirs (one check, not two; wisdom import
   * checks every entry) */
  for (int i = 0; i < n && st == KLJIT_SUCCESS; i++)
    if (m[i] != &r->rows_part[1]) st = kspec_check(m[i] == &r->rows_part[0] ? &r->geom.rows : m[i]);
  return st;
}

int recipe_dx_split_pays(const recipe *r, int64_t n) {
  return r->geom.dx_split > 1 && n >= r->geom.dx_rows;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* unit_recipe.c — what a plan builds, pinned without a GPU.
 *
 * For a few problems, archs and context options, the text of everything a plan builds (its
 * tuning, geometry, each module's spec, each GEMM's types and shape, the chunk of a call, the
 * workspace of a call, where the dX splits) is hashed and compared with the hash it had when
 * this test was written; a mismatch prints the text. A spec's parameters name its kernels and
 * (with the template's bytes) its cache key, so an equal hash is the same kernels from the same
 * cache entries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "gemm_algo.h"
#include "gemm_sm90.h"
#include "harness.h"
#include "kljit.h"
#include "layout.h"
#include "nvrtc_compile.h"
#include "recipe.h"

/* ---- the cases ---------------------------------------------------------------------------- */

enum { SMS = 132 };

typedef enum tuning_from { HEURISTIC, CLUSTER_TUNING, JIT_LOGITS, JIT_E16 } tuning_from;

typedef struct pin_case {
  const char *name;
  int arch;
  tuning_from from;
  kljit_row_kernel row_kernel;
  kljit_gemm gemm;
  int64_t chunk_rows;
  int dx_split;
  const char *pin;    /* 16 hex digits of the text's sha256 */
  const char *choice; /* KLJIT_GEMM's per-GEMM list (options.gemm_choice), or NULL */
} pin_case;

static kljit_problem base(int64_t hidden, int64_t vocab) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = hidden, pb.vocab = vocab;
  return pb;
}

static kljit_problem problem_of(const char *name) {
  kljit_problem pb = base(4096, 128256);
  if (!strncmp(name, "fp32", 4)) {
    pb = base(1024, 32000);
    pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = KLJIT_FP32;
  } else if (!strncmp(name, "bf16_dw", 7)) {
    pb = base(2048, 50257);
    pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_OUTPUT_DTYPE;
  } else if (!strncmp(name, "auto_dw", 7)) { /* KLJIT_ACCUM_AUTO: the fp32 buffer per call */
    pb = base(2048, 50257);
    pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_AUTO;
  } else if (!strncmp(name, "online", 6)) {
    pb = base(2048, 32000);
    pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = 1024;
    pb.divergence = KLJIT_DIVERGENCE_JSD, pb.beta = 0.5;
    pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_OUTPUT_DTYPE;
    pb.flags |= KLJIT_FLAG_TEACHER_BIAS;
  } else if (!strncmp(name, "sparse", 6)) {
    pb = base(4096, 151936);
    pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = 64, pb.topk_id_dtype = KLJIT_INT32;
    pb.tail = KLJIT_TAIL_BUCKET;
  } else if (!strncmp(name, "shard", 5)) {
    pb = base(4096, 64128);
    pb.vocab_total = 128256, pb.vocab_offset = 64128, pb.shards = 2, pb.hard_weight = 0.5;
  } else if (!strncmp(name, "reverse", 7)) {
    pb = base(2048, 32000);
    pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = KLJIT_FP16;
    pb.teacher = KLJIT_TEACHER_DENSE_LOGITS, pb.softcap = 30.0, pb.teacher_softcap = 50.0;
    pb.divergence = KLJIT_DIVERGENCE_REVERSE_KL, pb.flags |= KLJIT_FLAG_BIAS;
  } else if (!strncmp(name, "tlogits", 7)) { /* teacher logits at their own temperature */
    pb = base(2048, 32000);
    pb.teacher = KLJIT_TEACHER_DENSE_LOGITS, pb.teacher_temperature = 2.0;
    pb.divergence = KLJIT_DIVERGENCE_JSD, pb.beta = 0.5;
  } else if (!strncmp(name, "native", 6)) {
    pb = base(4096, 151936);
    pb.flags |= KLJIT_FLAG_NATIVE_LOGITS;
  } else if (!strncmp(name, "cap_ce", 6)) { /* a softcap and CE mixing with a z-loss */
    pb = base(2048, 32000);
    pb.softcap = 30.0, pb.hard_weight = 0.5, pb.soft_weight = 0.5, pb.z_loss = 1e-4;
    pb.temperature = 2.0, pb.flags |= KLJIT_FLAG_SCALE_T_SQUARED;
  } else if (!strncmp(name, "bias_auto", 9)) { /* a bias, and AUTO's short-call chunk */
    pb = base(2048, 32000);
    pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_AUTO;
    pb.flags |= KLJIT_FLAG_BIAS;
  }
  return pb;
}

#define TP KLJIT_ROW_KERNEL_TWO_PASS
#define CL KLJIT_ROW_KERNEL_CLUSTER
#define GD KLJIT_GEMM_DEFAULT
static const pin_case CASES[] = {
    {"dense_sm90", 90, HEURISTIC, TP, GD, 0, 0, "5fdd8971c7a09169", NULL},
    {"dense_sm80", 80, HEURISTIC, TP, GD, 0, 0, "cd76e13427680268", NULL},
    {"fp32_sm80", 80, HEURISTIC, TP, GD, 0, 0, "ea0d004f45cda819", NULL},
    {"fp32_sm90_cluster", 90, HEURISTIC, CL, GD, 0, 0, "41bc923c9add5b1c", NULL},
    {"bf16_dw_sm90", 90, HEURISTIC, TP, GD, 0, 0, "0e314fe7f9b3aee6", NULL},
    {"bf16_dw_sm90_chunk", 90, HEURISTIC, TP, GD, 1024, 0, "4e489baf47c26b93", NULL},
    {"online_sm90", 90, HEURISTIC, TP, GD, 0, 0, "c19e8f46502719a0", NULL},
    {"sparse_sm90", 90, HEURISTIC, TP, GD, 0, 0, "29b8c7f0555a70ab", NULL},
    {"shard_sm90_cluster_wisdom", 90, CLUSTER_TUNING, TP, GD, 0, 0, "f9a2ac50777ecde6", NULL},
    {"reverse_sm90_cluster", 90, HEURISTIC, CL, GD, 0, 0, "64f266b262f5a4bc", NULL},
    {"native_sm90_cluster", 90, HEURISTIC, CL, GD, 0, 0, "b1561a720fa4ebb7", NULL},
    {"dense_sm90_jit_split", 90, HEURISTIC, TP, KLJIT_GEMM_JIT, 0, 3, "161eb6f4cfce4b64", NULL},
    {"dense_sm90_jit_wisdom", 90, JIT_LOGITS, TP, GD, 0, 0, "d75cdc9c2e6c08d9", NULL},
    {"dense_sm90_jit_wisdom_cublas", 90, JIT_LOGITS, TP, KLJIT_GEMM_CUBLAS, 0, 0,
     "afd6343dc8362a5c", NULL},
    {"dense_sm80_jit_wisdom", 80, JIT_LOGITS, TP, GD, 0, 0, "8d214aa5f52e09dc", NULL},
    {"auto_dw_sm90", 90, HEURISTIC, TP, GD, 0, 0, "c6c410ca52990a3c", NULL},
    {"auto_dw_sm90_jit", 90, HEURISTIC, TP, KLJIT_GEMM_JIT, 0, 0, "f7b2fe286b36243f", NULL},
    /* the logits GEMM's statistics epilogue (issue 27, step 1) and E16 (step 2) */
    {"dense_sm90_stats", 90, HEURISTIC, TP, GD, 0, 0, "203ec3012bb78a83", "logits:jit.stats"},
    {"dense_sm90_e16", 90, HEURISTIC, TP, GD, 0, 0, "8ec03fe455284216", "logits:jit.e16"},
    {"dense_sm90_e16_chunk", 90, HEURISTIC, TP, KLJIT_GEMM_JIT, 1024, 0, "e1e133f1dcdd44e3",
     "logits:jit.e16"},
    /* every GEMM claiming its tiles from a counter: the workspace holds its pair (256 bytes) */
    {"dense_sm90_tile_counter", 90, HEURISTIC, TP, KLJIT_GEMM_JIT, 0, 0, "62ee26eb14036e1a",
     "logits:jit.128.2.6.g.1.pd,dx:jit.256.2.4.g.1.d,dw:jit.256.2.4.g.1.sd"},
    {"auto_dw_sm90_e16", 90, HEURISTIC, TP, KLJIT_GEMM_JIT, 0, 0, "15d09e31239f14a8",
     "logits:jit.e16"},
    {"bias_auto_sm90_e16", 90, HEURISTIC, TP, GD, 0, 0, "67f17d5a2e3e0097",
     "logits:jit.256.2.4.m.1.e16"},
    {"bias_auto_sm90_stats", 90, HEURISTIC, TP, GD, 0, 0, "49e21ffd4896e71d", "logits:jit.stats"},
    {"reverse_sm90_e16", 90, HEURISTIC, TP, GD, 0, 0, "9722efb5fea1505b", "logits:jit.e16"},
    {"tlogits_sm90_e16", 90, HEURISTIC, TP, GD, 0, 0, "79ade65b7c1fa6dc", "logits:jit.e16"},
    {"dense_sm90_jit_wisdom_e16", 90, JIT_E16, TP, GD, 0, 0, "5547d14cd4eae779", NULL},
    {"cap_ce_sm90_e16", 90, HEURISTIC, TP, GD, 0, 0, "c34ad8a35c4484bf", "logits:jit.e16"},
    {"cap_ce_sm90_stats", 90, HEURISTIC, TP, GD, 0, 0, "b57650622deed4de", "logits:jit.stats"},
    /* the promoted accumulator (flag r: the loss's precision), plain and under E16 */
    {"dense_sm90_promoted", 90, HEURISTIC, TP, GD, 0, 0, "42b608aa644ed679",
     "logits:jit.128.2.6.g.1.r"},
    {"dense_sm90_promoted_e16", 90, HEURISTIC, TP, GD, 0, 0, "ff0dbfa260496a69",
     "logits:jit.128.2.6.g.1.re"},
};
enum { N_CASES = sizeof CASES / sizeof CASES[0] };

static kljit_context_options options_of(const pin_case *c) {
  kljit_context_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.row_kernel = c->row_kernel, o.gemm = c->gemm;
  o.chunk_rows = c->chunk_rows, o.dx_split = c->dx_split;
  o.tune_rows = 8192, o.tune_budget_s = 30;
  o.gemm_choice = c->choice;
  return o;
}

/* The tuning a plan is given (after choosing): the heuristic's, a stored cluster tuning of the
 * same shape unsharded (wisdom's key does not name the shards), or the heuristic's with a
 * generated logits GEMM chosen by the tuner (with E16: flag e). */
static prob_tuning tuning_of(const pin_case *c, const kljit_problem *pb,
                             const kljit_context_options *o) {
  prob_tuning t = prob_estimate(pb, c->arch, o);
  if (c->from == CLUSTER_TUNING) {
    kljit_problem whole = *pb;
    whole.vocab = whole.vocab_total, whole.vocab_total = 0, whole.vocab_offset = 0;
    whole.shards = 1;
    prob_cluster_tuning(&whole, c->arch, &t);
  }
  if (c->from == JIT_LOGITS || c->from == JIT_E16) {
    prob_gemm_choice g;
    memset(&g, 0, sizeof g);
    g.used = 1, g.kind = GEMM_LOGITS, g.n = t.chunk_rows, g.beta_zero = 1, g.jit = 1;
    g.bn = 128, g.consumers = 2, g.stages = 6, g.raster = 'g', g.cluster = 2, g.schedule = 'p';
    g.e16 = c->from == JIT_E16;
    gemm_algo_add(&t, &g);
  }
  return t;
}

/* ---- the text of a plan ------------------------------------------------------------------- */

static void spec_text(const char *what, const kspec *k, strbuf *out) {
  render_param p[KSPEC_MAX_PARAMS];
  const size_t n = kspec_params(k, p);
  sb_printf(out, "module %s %s:", what, kspec_template(k));
  for (size_t i = 0; i < n; i++) {
    if (p[i].kind == RP_STR) sb_printf(out, " %s=%s", p[i].key, p[i].s);
    else if (p[i].kind == RP_NUM) sb_printf(out, " %s=%.17g", p[i].key, p[i].d);
    else sb_printf(out, " %s=%lld", p[i].key, (long long)p[i].i);
  }
  sb_printf(out, "\n");
}

static void gemm_text(const char *what, const gemm_types *t, const gemm_shape *s, int64_t rows,
                      strbuf *out) {
  sb_printf(out, "gemm %s in=%d logits=%d dx=%d dw=%d compute=%d v=%lld h=%lld ld=%lld ldg=%lld "
            "rows=%lld\n", what, t->in, t->logits, t->dx, t->dw, t->compute, (long long)s->v,
            (long long)s->h, (long long)s->ld, (long long)s->ldg, (long long)rows);
}

static void calls_text(const kljit_problem *pb, const prob_geometry *g, strbuf *out) {
  static const int64_t rows[] = {100, 1000, 2049, 8192, 1 << 20};
  kiface_layout lay; /* the records the problem's modules declare */
  if (layout_of_problem(pb, &g->tune, &lay) != KLJIT_SUCCESS) {
    sb_printf(out, "layout: %s\n", kljit_last_error());
    return;
  }
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    sb_printf(out, "call %lld: chunk %lld ws", (long long)rows[i],
              (long long)prob_chunk_rows(g, rows[i]));
    for (int m = KLJIT_MODE_FUSED; m <= KLJIT_MODE_BACKWARD; m++)
      sb_printf(out, " %zu", prob_workspace_layout(pb, g, &lay, (kljit_mode)m, rows[i]).total);
    sb_printf(out, "\n");
  }
}

/* ---- the recipe -------------------------------------------------------------------------- */

static const char *const SLOT_NAMES[RECIPE_SLOTS] = {
    "logits", "dx", "dw", "teacher", "dx_slice", "dx_last", "dw_acc", "dw32", "dw32_acc"};

/* The text of everything the recipe says. Its order (the teacher's GEMM last) is the order the
 * text had when plan.c derived the plan itself (this file's first version): the hashes are
 * those it printed then. */
static int plan_text(const pin_case *c, strbuf *out) {
  const kljit_problem pb = problem_of(c->name);
  TH_OK(prob_validate(&pb, c->name));
  const kljit_context_options o = options_of(c);
  const prob_tuning given = tuning_of(c, &pb, &o);
  recipe r;
  TH_OK(recipe_make(&pb, c->from == HEURISTIC ? NULL : &given, &o, c->arch, SMS, &r));
  const prob_geometry *g = &r.geom;
  const prob_tuning *t = &g->tune;
  sb_printf(out, "%s sm_%d\ntune chunk=%lld threads=%d split=%d cluster=%d nv=%d replaced=%d\n",
            c->name, c->arch, (long long)t->chunk_rows, t->threads, t->split, t->cluster, t->nv,
            r.replaced);
  sb_printf(out, "geom ld=%lld ldg=%lld logit=%d grad=%d p2=%d dwws=%d cap=%d/8 dx=%d/%lld\n",
            (long long)g->ld, (long long)g->ldg, (int)g->logit, (int)g->grad, g->p2_split,
            g->dw_workspace, g->chunk_eighths, g->dx_split, (long long)g->dx_slice);
  if (g->dw_auto) sb_printf(out, "dw auto\n"); /* (absent before KLJIT_ACCUM_AUTO) */
  /* (absent before the statistics epilogue: no case asked for it) */
  if (g->stats_tiles) sb_printf(out, "stats tiles=%d e16=%d\n", g->stats_tiles, g->e16);
  if (r.stats_why) sb_printf(out, "stats refused: %s\n", r.stats_why);
  const kspec *m[RECIPE_MAX_MODULES];
  const int n = recipe_modules(&r, m);
  const int fixed = recipe_fixed_modules(&r);
  TH_CHECK(n >= fixed && m[1] == &g->helpers);
  TH_CHECK(fixed == 2 ? m[0] == &g->rows : m[0] == &r.rows_part[0] && m[2] == &r.rows_part[1]);
  spec_text("rows", m[0], out);
  spec_text("helpers", m[1], out);
  if (fixed == 3) spec_text("rows_phased", m[2], out);
  int k = fixed;
  for (int sl = 0; sl < RECIPE_SLOTS; sl++) { /* the generated slots' modules, in slot order */
    if (r.gemm[sl].engine != RECIPE_GENERATED) continue;
    TH_CHECK(k < n && m[k++] == &r.gemm[sl].spec);
    char name[32];
    snprintf(name, sizeof name, "gemm_%s", SLOT_NAMES[sl]);
    spec_text(name, &r.gemm[sl].spec, out);
  }
  TH_CHECK(k == n);
  static const recipe_slot order[] = {RECIPE_LOGITS,  RECIPE_DX,      RECIPE_DW,
                                      RECIPE_DX_SLICE, RECIPE_DX_LAST, RECIPE_TEACHER,
                                      RECIPE_DW_ACC,  RECIPE_DW32,    RECIPE_DW32_ACC};
  for (int i = 0; i < RECIPE_SLOTS; i++) {
    const recipe_gemm *s = &r.gemm[order[i]];
    if (s->used) gemm_text(SLOT_NAMES[order[i]], &s->types, &s->shape, s->rows, out);
  }
  calls_text(&pb, g, out);
  sb_printf(out, "dx split at 64/256/512/2048 rows: %d%d%d%d\n", recipe_dx_split_pays(&r, 64),
            recipe_dx_split_pays(&r, 256), recipe_dx_split_pays(&r, 512),
            recipe_dx_split_pays(&r, 2048));
  return TH_PASS;
}

/* ---- the test ----------------------------------------------------------------------------- */

/* KLJIT_TEST_PRINT=1: every case's text and hash, for reviewing a deliberate change. */
static int a_plans_modules_gemms_and_workspace_are_as_pinned(void) {
  const int print = getenv("KLJIT_TEST_PRINT") != NULL;
  int bad = 0;
  for (int i = 0; i < N_CASES; i++) {
    strbuf text = {0};
    TH_CHECK(plan_text(&CASES[i], &text) == TH_PASS);
    char hex[65];
    sha256_hex(text.data, text.len, hex);
    hex[16] = '\0';
    const int same = !strcmp(hex, CASES[i].pin);
    if (!same || print)
      fprintf(stderr, "%s%s-> %s (pinned %s)\n\n", same ? "" : "CHANGED: ", text.data, hex,
              CASES[i].pin);
    bad += !same;
    sb_free(&text);
  }
  TH_CHECK(bad == 0);
  return TH_PASS;
}

/* Every GEMM of the chunk loop is a slot of the recipe with its own engine: the tuned four
 * (logits, dX, dW of the first chunk and of the accumulating ones; with KLJIT_ACCUM_AUTO the two
 * dW slots into the fp32 buffer as well) take the tuning's cuBLASLt algorithms and may take a
 * generated variant, the others cuBLASLt's heuristic; on sm_90 the logits GEMM is the generated
 * one by default (pingpong 128 x 128), and so is dW's accumulating one into a 16-bit dW
 * (cuBLASLt's adds an error of about a rounding of its own); a generated slot's module is among
 * the recipe's modules, and the options' KLJIT_GEMM_CUBLAS, an arch without the family or a
 * problem it cannot serve (fp32 inputs) keeps cuBLASLt. */
static int each_gemm_is_a_slot_with_its_engine(void) {
  for (int i = 0; i < N_CASES; i++) {
    const pin_case *c = &CASES[i];
    const kljit_problem pb = problem_of(c->name);
    const kljit_context_options o = options_of(c);
    const prob_tuning given = tuning_of(c, &pb, &o);
    recipe r;
    TH_OK(recipe_make(&pb, c->from == HEURISTIC ? NULL : &given, &o, c->arch, SMS, &r));
    /* KLJIT_GEMM=jit: the four tuned slots (logits, dX, dW's two); a tuning's generated logits
     * choice: that slot alone */
    const int family = c->arch == 90 && c->gemm != KLJIT_GEMM_CUBLAS && !jgemm_unfit(&pb, 90);
    const int all = family && c->gemm == KLJIT_GEMM_JIT;
    const int logits = family; /* sm_90's heuristic: the generated logits GEMM */
    /* and dW's accumulating chunks into a 16-bit dW (one rounding a chunk) */
    const int dw_acc = family && pb.grad_weight_dtype != KLJIT_FP32 && !r.geom.dw_workspace;
    const kspec *m[RECIPE_MAX_MODULES];
    const int auto32 = r.geom.dw_auto;
    TH_CHECK(recipe_modules(&r, m) ==
             recipe_fixed_modules(&r) + (all ? 4 + 2 * auto32 : logits + dw_acc));
    TH_OK(recipe_check(&r)); /* the templates accept every module, the generated GEMM's too */
    for (int s = 0; s < RECIPE_SLOTS; s++) {
      const recipe_gemm *g = &r.gemm[s];
      const int dw32 = s == RECIPE_DW32 || s == RECIPE_DW32_ACC;
      const int tuned = s <= RECIPE_DW || s == RECIPE_DW_ACC || (dw32 && auto32);
      const int used = tuned || (s == RECIPE_TEACHER && pb.teacher_hidden) ||
                       ((s == RECIPE_DX_SLICE || s == RECIPE_DX_LAST) && r.geom.dx_split > 1);
      TH_CHECK(g->used == used);
      if (!used) continue;
      TH_CHECK(g->tuned_algo == tuned);
      TH_CHECK(g->op == (s == RECIPE_TEACHER                          ? GEMM_LOGITS
                         : s == RECIPE_DX_SLICE || s == RECIPE_DX_LAST ? GEMM_DX
                         : s == RECIPE_DW_ACC || dw32                  ? GEMM_DW
                                                                       : (gemm_kind)s));
      const int gen = s == RECIPE_LOGITS  ? logits
                      : s == RECIPE_DW_ACC ? dw_acc || all
                                           : tuned && all;
      TH_CHECK(g->engine == (gen ? RECIPE_GENERATED : RECIPE_CUBLASLT));
      if (gen) TH_CHECK(g->spec.family == KSPEC_GEMM_SM90);
      if (dw32) TH_CHECK(g->types.dw == CUDA_R_32F && (!gen || g->variant.out == KLJIT_FP32));
      if (gen && s == RECIPE_LOGITS) TH_CHECK(m[recipe_fixed_modules(&r)] == &g->spec);
      if (gen && (c->from == JIT_LOGITS || c->from == JIT_E16)) /* the tuned variant */
        TH_CHECK(g->variant.bn == 128 && g->variant.schedule == 'p' && g->variant.cluster == 2);
      else if (gen && s == RECIPE_LOGITS && c->choice) /* the options' variant */
        TH_CHECK(g->from == JGEMM_FROM_OPTIONS);
      else if (gen && s == RECIPE_LOGITS) /* the default: pingpong 128 x 128 */
        TH_CHECK(g->variant.bn == 128 && g->variant.schedule == 'p' && g->variant.cluster == 1);
    }
  }
  return TH_PASS;
}

/* dW's accumulating chunks into a 16-bit dW take the generated GEMM on sm_90 by default (one
 * rounding of dW a chunk; cuBLASLt's adds about one more: bench/RESULTS.md runs 150-151), its
 * first chunk and dW into fp32 keep cuBLASLt, and a tuning's cuBLASLt dW algorithm, the options'
 * dw:cublas, sm_80 or fp32 inputs keep cuBLASLt for it too. */
static int a_16_bit_dw_accumulates_through_the_generated_gemm_on_sm90(void) {
  for (int k = 0; k < 7; k++) {
    kljit_problem pb = problem_of("bf16_dw"); /* bf16 dW accumulated in place */
    if (k == 1) pb.grad_weight_dtype = KLJIT_FP32, pb.grad_weight_accum = KLJIT_ACCUM_FP32;
    if (k == 2) pb.grad_weight_accum = KLJIT_ACCUM_FP32; /* into the fp32 buffer */
    if (k == 6) pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = KLJIT_FP32;
    if (k == 6) pb.grad_weight_dtype = KLJIT_FP32;
    const pin_case c = {"dw", k == 5 ? 80 : 90, HEURISTIC, TP, GD, 0, 0, "",
                        k == 4 ? "dw:cublas" : NULL};
    const kljit_context_options o = options_of(&c);
    prob_tuning t = prob_estimate(&pb, c.arch, &o);
    if (k == 3) { /* the tuner's cuBLASLt algorithm for dW */
      prob_gemm_choice lt;
      memset(&lt, 0, sizeof lt);
      lt.used = 1, lt.kind = GEMM_DW, lt.n = t.chunk_rows, lt.beta_zero = 0;
      TH_CHECK(gemm_algo_add(&t, &lt) == 0);
    }
    recipe r;
    TH_OK(recipe_make(&pb, &t, &o, c.arch, SMS, &r));
    const recipe_gemm *acc = &r.gemm[RECIPE_DW_ACC], *first = &r.gemm[RECIPE_DW];
    printf("case %d: dW's first chunk %s, the others %s\n", k,
           first->engine == RECIPE_GENERATED ? "generated" : "cuBLASLt",
           acc->engine == RECIPE_GENERATED ? "generated" : "cuBLASLt");
    TH_CHECK(first->engine == RECIPE_CUBLASLT);
    TH_CHECK((acc->engine == RECIPE_GENERATED) == (k == 0));
    if (k == 0)
      TH_CHECK(acc->from == JGEMM_FROM_HEURISTIC && acc->variant.beta == 1 &&
               acc->variant.out == KLJIT_BF16 && !strcmp(acc->variant.layout, "tn") &&
               acc->variant.epilogue == 's');
  }
  return TH_PASS;
}

/* ---- the statistics epilogue ------------------------------------------------------------- */

/* The recipe of pb on sm_<arch> under KLJIT_GEMM=<choice> (two-pass rows unless `rk`). */
static kljit_status stats_recipe(const kljit_problem *pb, int arch, const char *choice,
                                 kljit_row_kernel rk, recipe *r) {
  const pin_case c = {"stats", arch, HEURISTIC, rk, GD, 0, 0, "", NULL};
  kljit_context_options o = options_of(&c);
  o.gemm_choice = choice;
  return recipe_make(pb, NULL, &o, arch, SMS, r);
}

/* Each of the n KLJIT_GEMM texts is refused, the error naming the suffixes the logits item's
 * jit backends may take. */
static int choices_refused(const char *const *bad, size_t n) {
  for (size_t i = 0; i < n; i++) {
    recipe r;
    kljit_problem pb = base(2048, 32000);
    TH_STATUS(stats_recipe(&pb, 90, bad[i], TP, &r), KLJIT_ERR_INVALID_ARGUMENT);
    TH_CHECK(strstr(kljit_last_error(), "may end in .stats or .e16") != NULL);
  }
  return TH_PASS;
}

/* KLJIT_GEMM's logits:jit.stats: the generated logits GEMM writes the rows' pass-1 records
 * (its spec's STATS with the teacher's form, dtype, stride and T; the geometry's stats_tiles =
 * its column tiles, the records a row) exactly where the scope holds, the workspace's records
 * grow to one per (row, tile) in the modes that run pass 1; everywhere else the recipe is the
 * one without the option and says why. The option is refused on the other GEMMs. */
static int the_statistics_epilogue_is_taken_only_in_its_scope(void) {
  const char *const on = "all:jit,logits:jit.stats";
  /* in scope: probabilities in bf16; log-probabilities in fp32, padded, at T = 2; a tile of
   * 256 columns chosen by the options; the reverse KL and the JSD (pass 1's records do not
   * depend on the divergence); teacher logits at a temperature of their own, and at T's; the
   * online teacher's (fp32, the chunk's rows LD apart: TCHUNK), with its bias (TBDT) */
  for (int k = 0; k < 9; k++) {
    kljit_problem pb = base(4096, k == 1 ? 32001 : 128256);
    if (k == 3) pb.divergence = KLJIT_DIVERGENCE_REVERSE_KL;
    if (k == 4) pb.divergence = KLJIT_DIVERGENCE_JSD, pb.beta = 0.5;
    if (k >= 5) pb.teacher = KLJIT_TEACHER_DENSE_LOGITS, pb.temperature = 2.0;
    if (k == 5) pb.teacher_temperature = 3.0;
    if (k == 6) pb.teacher_softcap = 50.0; /* capped as pass 1 caps them */
    if (k >= 7) pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = 64;
    if (k == 8) pb.flags |= KLJIT_FLAG_TEACHER_BIAS, pb.teacher_temperature = 1.5;
    if (k == 1) {
      pb.teacher = KLJIT_TEACHER_DENSE_LOGPROBS, pb.teacher_dtype = KLJIT_FP32;
      pb.teacher_ld = 32064, pb.temperature = 2.0, pb.reduction = KLJIT_REDUCTION_NONE;
    }
    TH_OK(prob_validate(&pb, "stats"));
    recipe r, plain;
    TH_OK(stats_recipe(&pb, 90, k == 2 ? "all:jit,logits:jit.256.2.4.m.1.stats" : on, TP, &r));
    TH_OK(stats_recipe(&pb, 90, "all:jit", TP, &plain));
    const recipe_gemm *g = &r.gemm[RECIPE_LOGITS];
    TH_CHECK(g->engine == RECIPE_GENERATED && r.stats_why == NULL);
    TH_CHECK(g->spec.gemm_stats &&
             !strcmp(g->spec.gemm_stats, k == 1 ? "logprobs" : k >= 5 ? "logits" : "probs"));
    TH_CHECK(g->variant.stats.tt == (k == 5 ? 3.0 : k == 8 ? 1.5 : 0.0) &&
             g->spec.tt == g->variant.stats.tt);
    TH_CHECK(g->spec.tsoftcap == (k == 6 ? 50.0 : 0.0));
    const int online = k >= 7;
    TH_CHECK(g->spec.gemm_stats_tdt == (online ? KLJIT_FP32 : pb.teacher_dtype) &&
             g->spec.gemm_stats_t == pb.temperature);
    TH_CHECK(g->spec.gemm_stats_tld == (k == 1 ? 32064 : online ? r.geom.ld : pb.vocab));
    TH_CHECK(g->spec.tchunk == online && g->spec.tbdt == (k == 8 ? pb.teacher_dtype : 0));
    const int bn = k == 2 ? 256 : 128;
    TH_CHECK(g->variant.bn == bn && r.geom.stats_tiles == (pb.vocab + bn - 1) / bn);
    TH_OK(recipe_check(&r)); /* the template takes the variant */
    /* nothing else differs from the plan without the option but pass 2's merge of a row's
     * records: a warp's where the records are the GEMM's tiles */
    TH_CHECK(plain.geom.stats_tiles == 0 && plain.gemm[RECIPE_LOGITS].spec.gemm_stats == NULL);
    TH_CHECK(r.geom.rows.merge_block == 1 && plain.geom.rows.merge_block == 0);
    for (int part = 0; part < 2; part++)
      TH_CHECK(r.rows_part[part].merge_block == 1 && plain.rows_part[part].merge_block == 0);
    kspec want_rows = plain.geom.rows;
    want_rows.merge_block = 1;
    TH_CHECK(memcmp(&want_rows, &r.geom.rows, sizeof want_rows) == 0);
    kiface_layout lay;
    TH_OK(layout_of_problem(&pb, &r.geom.tune, &lay));
    for (int m = KLJIT_MODE_FUSED; m <= KLJIT_MODE_BACKWARD; m++) {
      const int64_t rows = 1000, chunk = prob_chunk_rows(&r.geom, rows);
      const prob_workspace w = prob_workspace_layout(&pb, &r.geom, &lay, (kljit_mode)m, rows);
      const prob_workspace w0 = prob_workspace_layout(&pb, &plain.geom, &lay, (kljit_mode)m, rows);
      const size_t part = w.z - w.part, part0 = w0.z - w0.part;
      const size_t want = (size_t)(chunk < rows ? chunk : rows) * (size_t)r.geom.stats_tiles *
                          (size_t)lay.part * sizeof(float);
      printf("  V=%lld mode %d: part %zu bytes (%zu without), total %zu (%zu)\n",
             (long long)pb.vocab, m, part, part0, w.total, w0.total);
      if (m == KLJIT_MODE_BACKWARD) {
        TH_CHECK(part == 0 && w.total == w0.total);
      } else {
        TH_CHECK(part >= want && part < want + 256 && w.total - w0.total == part - part0);
      }
    }
  }
  /* out of scope: each the recipe without the option, with the reason */
  for (int k = 0; k < 12; k++) {
    kljit_problem pb = base(2048, 32000);
    int arch = 90;
    kljit_row_kernel rk = TP;
    const char *choice = on;
    switch (k) {
      case 0: pb.flags |= KLJIT_FLAG_BIAS; break;
      case 1: pb.softcap = 30.0; break;
      case 2: pb.hard_weight = 0.5; break;
      case 3: /* a shard of the reverse KL: its S is summed across shards */
        pb.divergence = KLJIT_DIVERGENCE_REVERSE_KL;
        pb.vocab_total = 64000, pb.vocab_offset = 0, pb.shards = 2;
        break;
      case 4: pb.temperature_mode = KLJIT_TEMPERATURE_RUNTIME; break;
      case 5: pb.flags |= KLJIT_FLAG_NATIVE_LOGITS; break;
      case 6: rk = CL; break;
      case 7: /* the online teacher's shard */
        pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = 64;
        pb.vocab_total = 64000, pb.vocab_offset = 32000, pb.shards = 2;
        break;
      case 8: /* the sparse teacher's CE is E16's */
        pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = 64, pb.topk_id_dtype = KLJIT_INT32;
        pb.hard_weight = 0.5;
        break;
      case 9: pb.vocab_total = 64000, pb.vocab_offset = 32000, pb.shards = 2; break;
      case 10: arch = 80; break;
      default: choice = "all:jit"; break; /* not asked */
    }
    TH_OK(prob_validate(&pb, "stats"));
    recipe r;
    TH_OK(stats_recipe(&pb, arch, choice, rk, &r));
    printf("  case %d: %s\n", k, r.stats_why ? r.stats_why : "(not asked)");
    TH_CHECK(r.geom.stats_tiles == 0 && r.gemm[RECIPE_LOGITS].spec.gemm_stats == NULL &&
             r.gemm[RECIPE_LOGITS].variant.stats.teacher == NULL);
    TH_CHECK((r.stats_why != NULL) == (choice == on));
  }
  /* asked of a GEMM it is not for, or of cuBLASLt */
  static const char *const bad[] = {"dx:jit.stats", "all:jit.stats", "logits:cublas.stats",
                                    "logits:default.stats", "logits:.stats", "dw:jit.stats"};
  return choices_refused(bad, sizeof bad / sizeof bad[0]);
}

/* The rows module `k` renders with ETILE and compiles for sm_90a; it declares `has` and not
 * `lacks` (steps, KSTEP_COUNT: none). */
static int e16_rows_compile(const kspec *k, int bn, kiface_step has, kiface_step lacks) {
  strbuf src = {0}, man = {0}, cubin = {0}, log = {0};
  TH_OK(kspec_render_iface(k, &src, &man));
  kiface_manifest mf;
  TH_OK(kiface_parse(man.data, "rows", &mf));
  TH_CHECK(kiface_find(&mf, has) != NULL && kiface_find(&mf, KSTEP_STATS) == NULL);
  TH_CHECK(lacks == KSTEP_COUNT || kiface_find(&mf, lacks) == NULL);
  char tile[64];
  snprintf(tile, sizeof tile, "erec[(v / %d) * PART_FLOATS + PART_M]", bn);
  TH_CHECK(strstr(src.data, tile) != NULL);
  TH_OK(nvrtc_compile(src.data, "rows-e16", 90, &cubin, &log));
  printf("  %s part: %zu bytes of source, %zu of cubin\n", k->part ? k->part : "whole", src.len,
         cubin.len);
  TH_CHECK(cubin.len > 4096);
  sb_free(&src), sb_free(&man), sb_free(&cubin), sb_free(&log);
  return TH_PASS;
}

/* KLJIT_GEMM's logits:jit.e16 (issue 27, step 2): where the statistics epilogue is taken, the
 * logits GEMM's variant also gets E16 and every row module reads its fp16 scores (ETILE = the
 * GEMM's tile, LOGIT f16, no INPLACE, their and G's row stride ld): the chunk buffer holds 2 bytes an
 * element in every mode, the dX and dW GEMMs read G at that stride, the tuning's chunk doubles
 * (the same bytes) and a short call with a 16-bit dW takes half its rows a chunk; nothing else
 * differs from logits:jit.stats. The modules render without pass 1 (nor kl_dense_sums) and
 * compile for sm_90a. E16 also takes a bias and a logit cap, which its epilogue applies to the
 * scores (.stats alone takes neither). A tuning's logits choice with E16 (flag e) takes it the
 * same way. Out of that scope nothing of it is taken; asked of the other GEMMs it is refused. */
static int the_e16_epilogue_follows_the_statistics_epilogue(void) {
  for (int k = 0; k < 11; k++) {
    kljit_problem pb = base(4096, k == 1 ? 32001 : 128256);
    if (k == 1) {
      pb.teacher = KLJIT_TEACHER_DENSE_LOGPROBS, pb.teacher_dtype = KLJIT_FP32;
      pb.teacher_ld = 32064, pb.temperature = 2.0;
    }
    if (k == 2) {
      pb.divergence = KLJIT_DIVERGENCE_JSD, pb.beta = 0.5;
      pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_AUTO;
    }
    /* a bias: the E16 epilogue makes the scores with it (.stats alone does not take it: the
     * comparison below is with the plain recipe, records merged by block) */
    if (k == 3) pb.flags |= KLJIT_FLAG_BIAS, pb.weight_dtype = KLJIT_BF16;
    /* a logit cap: the epilogue caps the scores (SOFTCAP), the rows take G's factor from them */
    if (k == 4) pb.softcap = 30.0;
    /* CE mixing with a z-loss and label smoothing: the epilogue writes the CE's records
     * (lse(z') and z'_y) too */
    if (k == 5) pb.hard_weight = 0.5, pb.z_loss = 1e-4, pb.temperature = 2.0;
    if (k == 5) pb.label_smoothing = 0.1;
    /* a per-call T: the epilogue reads 1 / T from the plan header, as the rows do */
    if (k == 6) pb.temperature_mode = KLJIT_TEMPERATURE_RUNTIME;
    /* teacher logits (their (max, sum-exp) in the records): in fp32 at a temperature of their
     * own, the reverse KL; and at a per-call T, theirs too (the header's), the JSD */
    if (k >= 7) pb.teacher = KLJIT_TEACHER_DENSE_LOGITS;
    if (k == 7) pb.teacher_dtype = KLJIT_FP32, pb.teacher_temperature = 2.0;
    if (k == 7) pb.divergence = KLJIT_DIVERGENCE_REVERSE_KL;
    if (k == 8) pb.temperature_mode = KLJIT_TEMPERATURE_RUNTIME;
    if (k == 8) pb.divergence = KLJIT_DIVERGENCE_JSD, pb.beta = 0.5, pb.teacher_softcap = 30.0;
    /* the online teacher (its logits the teacher GEMM's fp32 chunk): the JSD with its bias in
     * bf16; the forward KL in fp16 at its own temperature, CE mixing besides */
    const int online = k >= 9;
    if (online) pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = 64;
    if (k == 9) pb.flags |= KLJIT_FLAG_TEACHER_BIAS, pb.divergence = KLJIT_DIVERGENCE_JSD;
    if (k == 9) pb.beta = 0.5;
    if (k == 10) {
      pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = KLJIT_FP16;
      pb.teacher_temperature = 2.0, pb.hard_weight = 0.3;
    }
    TH_OK(prob_validate(&pb, "e16"));
    recipe r, st;
    TH_OK(stats_recipe(&pb, 90, "all:jit,logits:jit.e16", TP, &r));
    TH_OK(stats_recipe(&pb, 90, "all:jit", TP, &st));
    const recipe_gemm *g = &r.gemm[RECIPE_LOGITS];
    const int bn = g->variant.bn;
    TH_CHECK(r.stats_why == NULL && r.geom.e16 == 1 && st.geom.e16 == 0);
    TH_CHECK(g->variant.stats.e16 == 1 && g->spec.gemm_e16 == 1 &&
             st.gemm[RECIPE_LOGITS].spec.gemm_e16 == 0);
    TH_CHECK(g->spec.gemm_stats_bdt == (k == 3 ? KLJIT_BF16 : (kljit_dtype)0));
    TH_CHECK(g->spec.softcap == pb.softcap && g->variant.stats.softcap == pb.softcap);
    TH_CHECK(g->spec.gemm_hard == (k == 5 || k == 10) && r.rows_part[0].hard == pb.hard_weight);
    TH_CHECK(g->spec.tmode == pb.temperature_mode &&
             g->spec.gemm_stats_t == (k == 6 || k == 8 ? 1.0 : pb.temperature));
    TH_CHECK(!strcmp(g->spec.gemm_stats, k >= 7 ? "logits" : k == 1 ? "logprobs" : "probs"));
    TH_CHECK(g->spec.tt == (k == 7 || k == 10 ? 2.0 : 0.0) &&
             g->spec.tsoftcap == pb.teacher_softcap);
    TH_CHECK(g->spec.tchunk == online && g->spec.tbdt == (k == 9 ? pb.teacher_dtype : 0));
    TH_CHECK(!online || (g->spec.gemm_stats_tdt == KLJIT_FP32 &&
                         g->spec.gemm_stats_tld == r.geom.ld && r.gemm[RECIPE_TEACHER].used));
    TH_CHECK(r.geom.stats_tiles == (pb.vocab + bn - 1) / bn && st.geom.stats_tiles == 0);
    TH_CHECK(r.geom.logit == KLJIT_FP16 && r.geom.ldg == r.geom.ld && r.geom.p2_split == 1);
    /* every reader of G takes E's stride: the rows, the dX and dW GEMMs (below), kl_colsum */
    TH_CHECK(r.geom.helpers.ldg == r.geom.ld && st.geom.helpers.ldg == 2 * st.geom.ld);
    /* the helpers' module is the plain one's but for LDG (they never see the logits) */
    kspec want_helpers = st.geom.helpers;
    want_helpers.ldg = r.geom.ld;
    kspec_key kw, kg;
    TH_CHECK(kspec_key_of(&want_helpers, &kw) == 0 && kspec_key_of(&r.geom.helpers, &kg) == 0);
    TH_CHECK(!strcmp(kw.text, kg.text) && strstr(kg.text, " LDG=") != NULL);
    /* twice the rows a chunk (E: 2 bytes an element where the logits took 4), but the online
     * teacher's (its fp32 logits stay: 6 bytes where it took 8) */
    const int64_t c0 = st.geom.tune.chunk_rows,
                  chunk = online || c0 >= 8192 ? c0 : c0 > 4096 ? 8192 : 2 * c0;
    TH_CHECK(r.geom.tune.chunk_rows == chunk);
    TH_CHECK(r.geom.chunk_eighths == (st.geom.chunk_eighths == 3 ? 4 : st.geom.chunk_eighths));
    TH_CHECK(k != 2 || r.geom.chunk_eighths == 4);
    const kspec *got[3] = {&r.geom.rows, &r.rows_part[0], &r.rows_part[1]};
    const kspec *was[3] = {&st.geom.rows, &st.rows_part[0], &st.rows_part[1]};
    for (int m = 0; m < 3; m++) {
      kspec want = *was[m];
      want.logit = KLJIT_FP16, want.ld = want.ldg = r.geom.ld, want.inplace = 0, want.etile = bn;
      want.merge_block = 1;
      TH_CHECK(memcmp(&want, got[m], sizeof want) == 0);
    }
    for (int sl = 0; sl < RECIPE_SLOTS; sl++) {
      TH_CHECK(r.gemm[sl].used == st.gemm[sl].used);
      if (!r.gemm[sl].used) continue;
      TH_CHECK(r.gemm[sl].shape.ldg == r.geom.ld && r.gemm[sl].rows == chunk);
      TH_CHECK(r.gemm[sl].shape.v == st.gemm[sl].shape.v && r.gemm[sl].shape.ld == r.geom.ld);
    }
    /* the chunk buffer: 2 bytes an element of the (longer) chunk in every mode */
    kiface_layout lay;
    TH_OK(layout_of_problem(&pb, &r.geom.tune, &lay));
    for (int m = KLJIT_MODE_FUSED; m <= KLJIT_MODE_BACKWARD; m++) {
      const int64_t rows = 20000, n = prob_chunk_rows(&r.geom, rows);
      const prob_workspace w = prob_workspace_layout(&pb, &r.geom, &lay, (kljit_mode)m, rows);
      TH_CHECK(w.g == w.z && w.zt - w.z == ((size_t)n * (size_t)r.geom.ld * 2 + 255) / 256 * 256);
    }
    if (e16_rows_compile(&r.rows_part[0], bn, KSTEP_FUSED, KSTEP_FORWARD) != TH_PASS ||
        e16_rows_compile(&r.rows_part[1], bn, KSTEP_BACKWARD, KSTEP_SUMS) != TH_PASS)
      return TH_FAIL;
    TH_OK(recipe_check(&r)); /* the whole module's spec is the template's too */
  }
  /* a tuning's logits choice with E16 (flag e, wisdom's) takes it without the options, in
   * its scope; outside (native 16-bit logits) its variant runs without it and the description
   * says why */
  for (int k = 0; k < 2; k++) {
    kljit_problem pb = base(2048, 32000);
    if (k) pb.flags |= KLJIT_FLAG_NATIVE_LOGITS;
    const pin_case c = {"tuned e16", 90, HEURISTIC, TP, GD, 0, 0, "", NULL};
    const kljit_context_options o = options_of(&c);
    prob_tuning t = prob_estimate(&pb, 90, &o);
    char text[96];
    snprintf(text, sizeof text, "logits:%lld:b0:jit:128.2.6.g.1.pe", (long long)t.chunk_rows);
    prob_gemm_choice pc;
    TH_CHECK(gemm_algo_parse(text, &pc) == 0 && pc.e16 == 1);
    TH_CHECK(gemm_algo_add(&t, &pc) == 0);
    recipe r;
    TH_OK(recipe_make(&pb, &t, &o, 90, SMS, &r));
    const recipe_gemm *g = &r.gemm[RECIPE_LOGITS];
    TH_CHECK(g->engine == RECIPE_GENERATED && g->from == JGEMM_FROM_TUNING);
    TH_CHECK(g->variant.schedule == 'p' && g->variant.bn == 128);
    TH_CHECK(r.geom.e16 == !k && g->spec.gemm_e16 == !k && g->variant.stats.e16 == !k);
    TH_CHECK((r.stats_why != NULL) == k && r.rows_part[0].etile == (k ? 0 : 128));
  }
  /* out of scope (a shard; the sparse teacher's bucket tail; sm_80; TVD, whose sign E16's
   * rounding flips, and which .stats still takes): neither */
  for (int k = 0; k < 4; k++) {
    kljit_problem pb = base(2048, 32000);
    if (k == 0) pb.vocab_total = 64000, pb.vocab_offset = 32000, pb.shards = 2;
    if (k == 1) pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = 64, pb.topk_id_dtype = KLJIT_INT32;
    if (k == 1) pb.tail = KLJIT_TAIL_BUCKET;
    if (k == 3) pb.divergence = KLJIT_DIVERGENCE_TVD;
    recipe r;
    TH_OK(stats_recipe(&pb, k == 2 ? 80 : 90, "all:jit,logits:jit.e16", TP, &r));
    TH_CHECK(r.stats_why != NULL && r.geom.e16 == 0 && r.rows_part[0].etile == 0 &&
             r.gemm[RECIPE_LOGITS].variant.stats.e16 == 0 && r.geom.logit == KLJIT_FP32);
    if (k == 3) {
      TH_CHECK(strstr(r.stats_why, "TVD") != NULL);
      TH_OK(stats_recipe(&pb, 90, "all:jit,logits:jit.stats", TP, &r));
      TH_CHECK(r.stats_why == NULL && r.geom.stats_tiles > 0 && r.geom.e16 == 0);
    }
  }
  static const char *const bad[] = {"dx:jit.e16", "all:jit.e16", "logits:cublas.e16",
                                    "logits:jit.e16.stats", "logits:.e16"};
  return choices_refused(bad, sizeof bad / sizeof bad[0]);
}

/* The sparse top-K teacher's forward KL with tail none or renorm (issue 27 coverage): under
 * logits:jit.stats the generated logits GEMM writes the sparse rows' pass-1 records (STATS
 * sparse: no teacher tile, so neither TDT nor TLD) and pass 2 merges them with the block (MERGE
 * block), nothing else of the rows changing. Under logits:jit.e16 (E16) the GEMM also reads the
 * support (TOPK, IDT, VDT, VALUES: the loss's exact cross term) and the rows read its fp16 scores
 * (ETILE, LOGIT f16, LDG = LD, no INPLACE), a bias, a softcap, a per-call T and the CE taken in
 * the epilogue. The bucket tail and the other divergences (their records keep the support's
 * sum-exp apart) take .stats too: the GEMM reads the support's ids (TOPK, IDT) and marks its
 * columns, the renormalized divergences keeping its own (max, sum-exp) (OWN). Both modules
 * declare the same record, and the rows compile for sm_90. Out of that scope (the bucket tail
 * and the divergences under E16; the CE's label smoothing; the CE, a softcap, a bias or a
 * per-call T without E16) the recipe is the plain one and says why. */
static int the_sparse_teachers_statistics_come_from_the_epilogue(void) {
  for (int k = 0; k < 7; k++) {
    const int e16 = k == 2 || k == 3;
    kljit_problem pb = base(4096, 128256);
    pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = 100, pb.topk_id_dtype = KLJIT_INT32;
    /* 4: the bucket tail; 5: the reverse KL renormalized (the support's own (max, sum-exp));
     * 6: the JSD over the bucket: the support's columns apart, from its ids */
    if (k == 4 || k == 6) pb.tail = KLJIT_TAIL_BUCKET;
    if (k == 5) pb.tail = KLJIT_TAIL_RENORM, pb.divergence = KLJIT_DIVERGENCE_REVERSE_KL;
    if (k == 6) pb.divergence = KLJIT_DIVERGENCE_JSD, pb.beta = 0.5;
    const int apart = k >= 4;
    if (k == 1 || k == 3) {
      pb.tail = KLJIT_TAIL_RENORM, pb.topk_values = KLJIT_TOPK_LOGPROBS;
      pb.teacher_dtype = KLJIT_FP32, pb.temperature = 2.0;
    }
    if (k == 3) pb.flags |= KLJIT_FLAG_BIAS, pb.softcap = 30.0, pb.topk_id_dtype = KLJIT_INT64;
    if (k == 3) pb.hard_weight = 0.5, pb.z_loss = 1e-4; /* the CE's records too */
    TH_OK(prob_validate(&pb, "stats"));
    recipe r, plain;
    TH_OK(stats_recipe(&pb, 90, e16 ? "logits:jit.e16" : "all:jit,logits:jit.stats", TP, &r));
    TH_OK(stats_recipe(&pb, 90, e16 ? "" : "all:jit", TP, &plain));
    const recipe_gemm *g = &r.gemm[RECIPE_LOGITS];
    TH_CHECK(g->engine == RECIPE_GENERATED && r.stats_why == NULL);
    TH_CHECK(g->spec.gemm_stats && !strcmp(g->spec.gemm_stats, "sparse") &&
             g->spec.gemm_stats_tld == 0 && g->spec.gemm_stats_t == pb.temperature);
    TH_CHECK(g->spec.gemm_e16 == e16 && r.geom.e16 == e16);
    TH_CHECK(g->spec.topk == (e16 || apart ? 100 : 0) && g->spec.gemm_stats_own == (k == 5));
    if (e16)
      TH_CHECK(g->spec.idt == pb.topk_id_dtype && g->spec.gemm_stats_tdt == pb.teacher_dtype &&
               !strcmp(g->spec.values, k == 3 ? "logprobs" : "probs") &&
               g->spec.softcap == pb.softcap && g->spec.gemm_stats_bdt == (k == 3 ? pb.weight_dtype : 0) &&
               g->spec.gemm_hard == (k == 3) && r.geom.rows.hard == pb.hard_weight);
    TH_CHECK(r.geom.stats_tiles == (pb.vocab + g->variant.bn - 1) / g->variant.bn);
    TH_CHECK(r.geom.rows.family == KSPEC_SPARSE_ROWS && r.geom.rows.merge_block == 1 &&
             plain.geom.rows.merge_block == 0 && plain.geom.stats_tiles == 0);
    TH_CHECK(r.geom.rows.etile == (e16 ? g->variant.bn : 0));
    if (e16) /* the fp16 scores: G over them, twice the rows a chunk */
      TH_CHECK(r.geom.rows.logit == KLJIT_FP16 && r.geom.rows.ldg == r.geom.ld &&
               !r.geom.rows.inplace && r.geom.tune.chunk_rows > plain.geom.tune.chunk_rows);
    kspec want_rows = plain.geom.rows;
    want_rows.merge_block = 1;
    if (!e16) TH_CHECK(memcmp(&want_rows, &r.geom.rows, sizeof want_rows) == 0);
    TH_OK(recipe_check(&r));
    strbuf gs = {0}, gm = {0}, rs = {0}, rm = {0}, cubin = {0}, log = {0};
    TH_OK(kspec_render_iface(&g->spec, &gs, &gm));
    TH_OK(kspec_render_iface(&r.geom.rows, &rs, &rm));
    kiface_manifest mg, mr;
    TH_OK(kiface_parse(gm.data, "gemm", &mg));
    TH_OK(kiface_parse(rm.data, "rows", &mr));
    const kiface_record *a = kiface_record_find(&mg, "part"), *b = kiface_record_find(&mr, "part");
    TH_CHECK(a && b && a->floats == b->floats && a->nslots == b->nslots);
    for (int i = 0; i < a->nslots; i++) TH_CHECK(!strcmp(a->slot[i], b->slot[i]));
    TH_CHECK(!strcmp(a->slot[5], e16 ? "ps" : "mo"));
    TH_CHECK((strstr(gs.data, "support_map(r0, c0, M, N, ids") != NULL) == (e16 || apart));
    TH_CHECK((strstr(gs.data, "v[PART_MO] = mo[h], v[PART_DNO] = dno[h];") != NULL) == (k == 5));
    TH_CHECK(strstr(rs.data, "acc_of(part + ") != NULL);
    TH_CHECK((strstr(rs.data, "l = block_sum<THREADS>(l, sh_f) - ps") != NULL) == e16);
    TH_CHECK(kiface_find(&mr, KSTEP_STATS) == NULL || !e16); /* E16: no pass 1 at all */
    TH_OK(nvrtc_compile(rs.data, "rows-sparse-merge", 90, &cubin, &log));
    printf("  case %d (%s): %d records a row, rows cubin %zu bytes\n", k, e16 ? "e16" : "stats",
           r.geom.stats_tiles, cubin.len);
    TH_CHECK(cubin.len > 4096);
    sb_free(&gs), sb_free(&gm), sb_free(&rs), sb_free(&rm), sb_free(&cubin), sb_free(&log);
  }
  for (int k = 0; k < 8; k++) {
    kljit_problem pb = base(2048, 32000);
    pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = 64, pb.topk_id_dtype = KLJIT_INT32;
    const char *choice = "all:jit,logits:jit.stats";
    switch (k) {
      case 0: pb.tail = KLJIT_TAIL_BUCKET, choice = "logits:jit.e16"; break;
      case 1:
        pb.tail = KLJIT_TAIL_RENORM, pb.divergence = KLJIT_DIVERGENCE_REVERSE_KL;
        choice = "logits:jit.e16";
        break;
      case 2: pb.hard_weight = 0.5; break;
      case 3: pb.softcap = 30.0; break;
      case 4: pb.temperature_mode = KLJIT_TEMPERATURE_RUNTIME; break;
      case 5: pb.hard_weight = 0.5, pb.label_smoothing = 0.1, choice = "logits:jit.e16"; break;
      /* more ids than the epilogue reads once per column tile: E16; the bucket tail */
      case 6: pb.topk = 129, choice = "logits:jit.e16"; break;
      default: pb.topk = 1024, pb.tail = KLJIT_TAIL_BUCKET; break;
    }
    TH_OK(prob_validate(&pb, "stats"));
    recipe r;
    TH_OK(stats_recipe(&pb, 90, choice, TP, &r));
    printf("  case %d: %s\n", k, r.stats_why ? r.stats_why : "(taken)");
    TH_CHECK(r.stats_why != NULL && r.geom.stats_tiles == 0 && !r.geom.rows.merge_block &&
             r.gemm[RECIPE_LOGITS].spec.gemm_stats == NULL);
    TH_CHECK(strstr(r.stats_why, k < 2    ? "only under E16"
                                 : k == 5 ? "label smoothing"
                                 : k >= 6 ? "at most 128 ids"
                                          : "E16 takes") != NULL);
  }
  return TH_PASS;
}

/* Without an option or a tuning that names the logits GEMM's epilogue, the heuristics take it
 * on sm_90: E16 for a dense teacher read from memory and the sparse one on any such GPU (its
 * chunk doubled, as the option's; on its own tile whatever W's size), `.stats` for the online
 * teacher, TVD and the sparse teacher's 129 ids and more (which E16 refuses) where the GPU's
 * DRAM moves fewer than
 * RECIPE_EPILOGUE_DRAM_PER_SM_CYCLE bytes an SM cycle (an H100: 12.8; not an H200, 18.8), the
 * fp32 logits and the rows where neither is in scope; nothing changes on a GPU whose DRAM is
 * unknown (recipe_make, precompile's first class), on sm_80, or where the options or the tuning
 * chose the logits GEMM. */
static int the_heuristics_take_e16_on_sm90_and_stats_where_dram_is_short(void) {
  const kljit_context_options init = KLJIT_CONTEXT_OPTIONS_INIT;
  const recipe_device h100 = {90, 132, 12.8}, h200 = {90, 132, 18.8}, unknown = {90, 132, 0.0},
                      a100 = {80, 108, 5.0};
  recipe d[2];
  recipe_device classes[2];
  TH_CHECK(recipe_device_classes(90, classes) == 2 && recipe_device_classes(80, classes) == 1);
  for (int k = 0; k < 10; k++) {
    kljit_problem pb = base(4096, 128256);
    const char *want = "e16"; /* on the H100 */
    if (k == 1) pb.teacher = KLJIT_TEACHER_DENSE_LOGPROBS;
    if (k == 2) pb.teacher = KLJIT_TEACHER_DENSE_LOGITS, pb.flags |= KLJIT_FLAG_BIAS;
    if (k == 3) pb.divergence = KLJIT_DIVERGENCE_TVD, want = "stats";
    if (k == 4) pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, want = "stats";
    if (k == 5 || k == 6 || k == 9) /* E16 reads at most 128 ids a row */
      pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = k == 5 ? 100 : 200,
      pb.topk_id_dtype = KLJIT_INT32, want = k == 5 ? "e16" : "stats";
    if (k == 9) /* with a bias: only E16 takes it, which cannot take 200 ids */
      pb.flags |= KLJIT_FLAG_BIAS, want = "rows";
    if (k == 7) pb.flags |= KLJIT_FLAG_NATIVE_LOGITS, want = "rows";
    if (k == 8) pb.vocab_total = 2 * pb.vocab, pb.vocab_offset = pb.vocab, want = "rows";
    if (pb.teacher == KLJIT_TEACHER_DENSE_HIDDEN) pb.teacher_hidden = 2048;
    TH_OK(prob_validate(&pb, "auto"));
    TH_OK(recipe_make_on(&pb, NULL, &init, &h100, &d[0]));
    const prob_geometry *g = &d[0].geom;
    const int e16 = !strcmp(want, "e16"), stats = e16 || !strcmp(want, "stats");
    TH_CHECK(g->e16 == e16 && (g->stats_tiles > 0) == stats &&
             d[0].epilogue_auto == (e16 ? RECIPE_AUTO_E16 : stats ? RECIPE_AUTO_STATS : 0));
    TH_CHECK(d[0].stats_why == NULL); /* not asked: no complaint where it does not fit */
    TH_CHECK(d[0].gemm[RECIPE_LOGITS].engine == RECIPE_GENERATED &&
             d[0].gemm[RECIPE_LOGITS].from == JGEMM_FROM_HEURISTIC);
    /* E16 on its own tile (RECIPE_E16_TILE: 64 x 256 pingpong, cluster 1); `.stats` on the
     * logits GEMM's default (128 x 128 pingpong) */
    const jgemm_variant *lv = &d[0].gemm[RECIPE_LOGITS].variant;
    TH_CHECK(lv->bn == (e16 ? 256 : 128) && lv->consumers == (e16 ? 1 : 2) &&
             lv->stages == (e16 ? 4 : 6) && lv->schedule == 'p' && lv->cluster == 1);
    if (e16) TH_CHECK(g->stats_tiles == (pb.vocab + 255) / 256);
    /* elsewhere: E16 on an H200 too, `.stats` only where the DRAM is short; the fp32 logits
     * and the rows where the DRAM is unknown and on sm_80 */
    const recipe_device *other[] = {&h200, &unknown, &a100};
    for (int o = 0; o < 3; o++) {
      TH_OK(recipe_make_on(&pb, NULL, &init, other[o], &d[1]));
      const int e = e16 && o == 0;
      TH_CHECK(d[1].geom.e16 == e && (d[1].geom.stats_tiles > 0) == e &&
               d[1].epilogue_auto == (e ? RECIPE_AUTO_E16 : 0));
    }
    TH_CHECK(recipe_make(&pb, NULL, &init, 90, 132, &d[1]) == KLJIT_SUCCESS &&
             !d[1].epilogue_auto); /* recipe_make: the DRAM unknown */
    /* E16 holds 2 bytes an element: twice the rows a chunk of the options' fp32 logits */
    kljit_context_options fp32 = init;
    fp32.gemm_choice = "logits:jit";
    TH_OK(recipe_make_on(&pb, NULL, &fp32, &h100, &d[1]));
    TH_CHECK(!d[1].geom.stats_tiles && !d[1].epilogue_auto &&
             g->tune.chunk_rows == (e16 ? 2 : 1) * d[1].geom.tune.chunk_rows);
    if (k != 0) continue;
    /* the options' logits GEMM, or a tuned one, is what runs, on any GPU */
    kljit_context_options jit = init;
    jit.gemm_choice = "logits:jit";
    TH_OK(recipe_make_on(&pb, NULL, &jit, &h100, &d[1]));
    TH_CHECK(!d[1].geom.stats_tiles && !d[1].epilogue_auto);
    jit.gemm_choice = "logits:cublas";
    TH_OK(recipe_make_on(&pb, NULL, &jit, &h100, &d[1]));
    TH_CHECK(!d[1].geom.stats_tiles && d[1].gemm[RECIPE_LOGITS].engine == RECIPE_CUBLASLT);
    jit.gemm_choice = "logits:jit.stats"; /* asked: `.stats`, not E16 */
    TH_OK(recipe_make_on(&pb, NULL, &jit, &h100, &d[1]));
    TH_CHECK(d[1].geom.stats_tiles && !d[1].geom.e16 && !d[1].epilogue_auto);
    const pin_case c = {"tuned", 90, JIT_LOGITS, TP, GD, 0, 0, "", NULL};
    const prob_tuning t = tuning_of(&c, &pb, &init);
    TH_OK(recipe_make_on(&pb, &t, &init, &h100, &d[1]));
    TH_CHECK(!d[1].geom.stats_tiles && !d[1].epilogue_auto &&
             d[1].gemm[RECIPE_LOGITS].from == JGEMM_FROM_TUNING);
    /* E16's tile whatever W's size (a 125 MiB and a 500 MiB one) */
    kljit_problem small = base(2048, 32000);
    for (int h = 0; h < 2; h++) {
      small.hidden = h ? 8192 : 2048;
      TH_OK(recipe_make_on(&small, NULL, &init, &h100, &d[1]));
      const jgemm_variant *sv = &d[1].gemm[RECIPE_LOGITS].variant;
      TH_CHECK(d[1].geom.e16 && d[1].epilogue_auto && sv->bn == 256 && sv->consumers == 1 &&
               sv->cluster == 1 && d[1].gemm[RECIPE_LOGITS].from == JGEMM_FROM_HEURISTIC);
    }
    /* the options' E16 without a variant takes E16's tile; with one, that one */
    kljit_context_options e16o = init;
    e16o.gemm_choice = "logits:jit.e16";
    TH_OK(recipe_make_on(&small, NULL, &e16o, &h100, &d[1]));
    TH_CHECK(d[1].geom.e16 && d[1].gemm[RECIPE_LOGITS].variant.bn == 256 &&
             d[1].gemm[RECIPE_LOGITS].variant.consumers == 1);
    e16o.gemm_choice = "logits:jit.128.2.6.g.2.pe";
    TH_OK(recipe_make_on(&small, NULL, &e16o, &h100, &d[1]));
    TH_CHECK(d[1].geom.e16 && d[1].gemm[RECIPE_LOGITS].variant.bn == 128 &&
             d[1].gemm[RECIPE_LOGITS].variant.cluster == 2);
    /* a context whose options keep the rows' default (KLJIT_GEMM=dx:cublas) still takes it */
    jit.gemm_choice = "dx:cublas";
    TH_OK(recipe_make_on(&pb, NULL, &jit, &h100, &d[1]));
    TH_CHECK(d[1].geom.e16 && d[1].epilogue_auto);
  }
  return TH_PASS;
}

/* Flag t (MASS_WARPS) named in the options' logits variant is kept where it applies (a dense
 * teacher's tile in the statistics, E16 or `.stats`: probabilities, log-probabilities, logits,
 * the online teacher's; static tiles) and dropped elsewhere (the sparse teacher, dynamic tiles,
 * the fp32 logits without statistics), so that one KLJIT_GEMM serves every problem; where kept,
 * the module's key names it. */
static int the_mass_warps_flag_is_kept_where_it_applies(void) {
  const kljit_context_options init = KLJIT_CONTEXT_OPTIONS_INIT;
  const recipe_device h100 = {90, 132, 12.8};
  for (int k = 0; k < 8; k++) {
    kljit_problem pb = base(4096, 128256);
    kljit_context_options o = init;
    o.gemm_choice = "logits:jit.256.1.4.g.1.pet";
    int want = 1;
    if (k == 1) pb.teacher = KLJIT_TEACHER_DENSE_LOGPROBS;
    if (k == 2) pb.teacher = KLJIT_TEACHER_DENSE_LOGITS;
    if (k == 3) pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = 2048;
    if (k == 4)
      pb.teacher = KLJIT_TEACHER_SPARSE_TOPK, pb.topk = 100, pb.topk_id_dtype = KLJIT_INT32,
      want = 0;
    if (k == 5) o.gemm_choice = "logits:jit.256.1.4.g.1.pedt", want = 0; /* dynamic tiles */
    if (k == 6) o.gemm_choice = "logits:jit.256.1.4.g.1.pt", want = 0;   /* fp32 logits */
    if (k == 7) o.gemm_choice = "logits:jit.256.1.4.g.1.pt.stats";       /* `.stats` */
    TH_OK(prob_validate(&pb, "mass"));
    recipe r;
    TH_OK(recipe_make_on(&pb, NULL, &o, &h100, &r));
    const recipe_gemm *g = &r.gemm[RECIPE_LOGITS];
    TH_CHECK(g->engine == RECIPE_GENERATED && (r.geom.stats_tiles > 0) == (k != 6) &&
             r.geom.e16 == (k != 6 && k != 7));
    TH_CHECK(((g->variant.tweaks & KSPEC_GEMM_MASS_WARPS) != 0) == want);
    kspec_key key;
    TH_CHECK(kspec_key_of(&g->spec, &key) == 0);
    TH_CHECK((strstr(key.text, " MASS_WARPS=") != NULL) == want);
  }
  return TH_PASS;
}

/* KLJIT_FLAG_PRECISE_ACCUMULATION: wherever the logits GEMM is generated (sm_90's E16 default on
 * an H100 and an H200, the options' fp32 logits, the tuning's variant) it becomes the promoted
 * 128 x 128 cooperative variant in a cluster of 1 (flag r), keeping what the epilogue writes
 * (E16 or the fp32 logits, the chunk that follows from it), in a module of its own; the other
 * GEMMs and the geometry are the unflagged plan's, but for E16's records a row, which follow
 * the tile. Where the logits GEMM is cuBLASLt's (sm_80, the options' cublas) the plan is the
 * unflagged one. */
static int the_precise_flag_promotes_the_generated_logits_gemm(void) {
  const kljit_context_options init = KLJIT_CONTEXT_OPTIONS_INIT;
  const recipe_device h100 = {90, 132, 12.8}, h200 = {90, 132, 18.8}, a100 = {80, 108, 5.0};
  const pin_case tc = {"tuned", 90, JIT_LOGITS, TP, GD, 0, 0, "", NULL};
  for (int k = 0; k < 6; k++) {
    kljit_problem pb = base(4096, 128256);
    kljit_context_options o = init;
    const recipe_device *dev = k == 1 ? &h200 : k == 4 ? &a100 : &h100;
    if (k == 2) o.gemm_choice = "logits:jit.256.2.4.m.1.s"; /* the options' shape */
    if (k == 5) o.gemm_choice = "logits:cublas";
    const prob_tuning t = tuning_of(&tc, &pb, &init);
    const prob_tuning *tuned = k == 3 ? &t : NULL;
    recipe plain, precise;
    TH_OK(recipe_make_on(&pb, tuned, &o, dev, &plain));
    pb.flags |= KLJIT_FLAG_PRECISE_ACCUMULATION;
    TH_OK(prob_validate(&pb, "precise"));
    TH_OK(recipe_make_on(&pb, tuned, &o, dev, &precise));
    const recipe_gemm *a = &plain.gemm[RECIPE_LOGITS], *b = &precise.gemm[RECIPE_LOGITS];
    const int gen = k != 4 && k != 5;
    TH_CHECK((b->engine == RECIPE_GENERATED) == gen && a->engine == b->engine);
    const int e16 = k == 0 || k == 1;
    TH_CHECK(precise.geom.e16 == plain.geom.e16 && precise.geom.e16 == e16 &&
             precise.geom.tune.chunk_rows == plain.geom.tune.chunk_rows);
    /* E16's records a row follow the tile: 64 x 256's unflagged, the promoted 128 x 128's */
    TH_CHECK(e16 ? plain.geom.stats_tiles == (pb.vocab + 255) / 256 &&
                          precise.geom.stats_tiles == (pb.vocab + 127) / 128
                    : precise.geom.stats_tiles == plain.geom.stats_tiles);
    for (int s = 0; s < RECIPE_SLOTS; s++)
      if (s != RECIPE_LOGITS)
        TH_CHECK(precise.gemm[s].engine == plain.gemm[s].engine &&
                 (precise.gemm[s].engine != RECIPE_GENERATED ||
                  !memcmp(&precise.gemm[s].variant, &plain.gemm[s].variant,
                          sizeof precise.gemm[s].variant)));
    if (!gen) {
      TH_CHECK(!memcmp(&a->variant, &b->variant, sizeof a->variant));
      continue;
    }
    const jgemm_variant *v = &b->variant;
    TH_CHECK(v->tweaks == KSPEC_GEMM_PROMOTE && v->schedule == 'c' && v->bn == 128 &&
             v->consumers == 2 && v->stages == 6 && v->cluster == 1 && v->epilogue == 'd');
    TH_CHECK(v->stats.e16 == a->variant.stats.e16 && !strcmp(v->layout, a->variant.layout));
    kspec_key ka, kb; /* a module of its own: PROMOTE among its parameters */
    TH_CHECK(kspec_key_of(&a->spec, &ka) == 0 && kspec_key_of(&b->spec, &kb) == 0);
    TH_CHECK(!(a->variant.tweaks & KSPEC_GEMM_PROMOTE) && strcmp(ka.text, kb.text) != 0 &&
             strstr(kb.text, " PROMOTE=") && !strstr(ka.text, " PROMOTE="));
    TH_CHECK(!e16 || a->variant.bn == 256); /* the E16 default: its own tile */
  }
  return TH_PASS;
}

static const th_case cases[] = {
    {"a_plans_modules_gemms_and_workspace_are_as_pinned",
     a_plans_modules_gemms_and_workspace_are_as_pinned},
    {"each_gemm_is_a_slot_with_its_engine", each_gemm_is_a_slot_with_its_engine},
    {"a_16_bit_dw_accumulates_through_the_generated_gemm_on_sm90",
     a_16_bit_dw_accumulates_through_the_generated_gemm_on_sm90},
    {"the_statistics_epilogue_is_taken_only_in_its_scope",
     the_statistics_epilogue_is_taken_only_in_its_scope},
    {"the_e16_epilogue_follows_the_statistics_epilogue",
     the_e16_epilogue_follows_the_statistics_epilogue},
    {"the_sparse_teachers_statistics_come_from_the_epilogue",
     the_sparse_teachers_statistics_come_from_the_epilogue},
    {"the_heuristics_take_e16_on_sm90_and_stats_where_dram_is_short",
     the_heuristics_take_e16_on_sm90_and_stats_where_dram_is_short},
    {"the_precise_flag_promotes_the_generated_logits_gemm",
     the_precise_flag_promotes_the_generated_logits_gemm},
    {"the_mass_warps_flag_is_kept_where_it_applies",
     the_mass_warps_flag_is_kept_where_it_applies},
};
TH_MAIN(cases)

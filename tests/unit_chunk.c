/* SPDX-License-Identifier: Apache-2.0 */
/* unit_chunk.c — a call's chunk and workspace without a GPU: with a 16-bit dW accumulated in
 * place, the chunk is the tuning's but at most 3/8 of the call's rows (an eighth with the
 * online teacher, whose fp32 logits share the chunk), rounded up to 256, so a short call's
 * workspace stays under the N x V x 2 bytes a chunked autograd loss (Liger's) holds for the
 * same call; an fp32 dW, long calls and a chunk size the context's options fix keep the
 * tuning's chunk. */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "kljit.h"
#include "kljit_experimental.h"
#include "layout.h"
#include "plan.h"
#include "recipe.h"

/* The geometry of pb's heuristic plan on an H200 (sm_90, 132 SMs), a context with the default
 * options but the chunk size `chunk_rows` (0: the planner's). */
static kljit_status geometry_of(const kljit_problem *pb, int64_t chunk_rows, prob_geometry *g) {
  kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  o.chunk_rows = chunk_rows;
  recipe r;
  const kljit_status st = recipe_make(pb, NULL, &o, 90, 132, &r);
  *g = r.geom;
  return st;
}

static kljit_problem dense(int64_t hidden, int64_t vocab) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = hidden, pb.vocab = vocab;
  return pb;
}

/* Liger's fused JSD with an online teacher (issue 19's bars): the JSD, teacher head [V, H]. */
static kljit_problem online(int64_t hidden, int64_t vocab) {
  kljit_problem pb = dense(hidden, vocab);
  pb.teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb.teacher_hidden = hidden;
  pb.divergence = KLJIT_DIVERGENCE_JSD, pb.beta = 0.5;
  return pb;
}

static int a_short_call_chunks_at_three_eighths_of_its_rows(void) {
  kljit_problem pb = dense(4096, 128256);
  pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_OUTPUT_DTYPE;
  prob_geometry g;
  TH_OK(geometry_of(&pb, 0, &g));
  const int64_t T = g.tune.chunk_rows;
  TH_CHECK(T >= 512);
  TH_CHECK(prob_chunk_rows(&g, 2048) == 768);
  TH_CHECK(prob_chunk_rows(&g, 2049) == 1024); /* ceil(3 x 2049 / 8) = 769, up to 1024 */
  TH_CHECK(prob_chunk_rows(&g, 4096) == (T < 1536 ? T : 1536));
  TH_CHECK(prob_chunk_rows(&g, 100) == 256);
  TH_CHECK(prob_chunk_rows(&g, 8192) == (T < 3072 ? T : 3072));
  TH_CHECK(prob_chunk_rows(&g, (int64_t)1 << 24) == T); /* long calls keep the tuning's */
  /* the context's options set chunk_rows (KLJIT_CHUNK_ROWS): obeyed */
  TH_OK(geometry_of(&pb, T, &g));
  TH_CHECK(g.chunk_eighths == 0 && prob_chunk_rows(&g, 2048) == T);
  /* an fp32 dW (the default) keeps the tuning's chunk: every extra chunk re-reads it */
  const kljit_problem f32 = dense(4096, 128256);
  TH_OK(geometry_of(&f32, 0, &g));
  TH_CHECK(g.tune.chunk_rows == T && prob_chunk_rows(&g, 2048) == T);
  return TH_PASS;
}

static int an_online_teachers_short_call_chunks_at_an_eighth_of_its_rows(void) {
  kljit_problem pb = online(2048, 32000);
  pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_OUTPUT_DTYPE;
  prob_geometry g;
  TH_OK(geometry_of(&pb, 0, &g));
  const int64_t T = g.tune.chunk_rows;
  TH_CHECK(T >= 2048);
  TH_CHECK(prob_chunk_rows(&g, 8192) == 1024);
  TH_CHECK(prob_chunk_rows(&g, 8193) == 1280); /* ceil(8193 / 8) = 1025, up to 1280 */
  TH_CHECK(prob_chunk_rows(&g, 1000) == 256);
  TH_CHECK(prob_chunk_rows(&g, (int64_t)1 << 24) == T);
  /* what a binding asks instead of restating the rule: the plan's answer (a plan with no
   * context behind it: the query reads its geometry only) */
  kljit_plan *p = calloc(1, sizeof *p);
  TH_CHECK(p != NULL);
  p->pb = pb, p->rec.geom = g;
  int64_t chunk = 7;
  TH_OK(kljit_plan_chunk_rows(p, 8193, &chunk));
  TH_CHECK(chunk == 1280);
  TH_OK(kljit_plan_chunk_rows(p, (int64_t)1 << 24, &chunk));
  TH_CHECK(chunk == T);
  chunk = 7;
  TH_STATUS(kljit_plan_chunk_rows(p, 0, &chunk), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "rows = 0") && chunk == 7);
  TH_STATUS(kljit_plan_chunk_rows(p, 10, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_STATUS(kljit_plan_chunk_rows(NULL, 10, &chunk), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "kljit_plan_chunk_rows: plan is NULL"));
  free(p);
  /* the dense teacher's chunk for the same call: 3/8 */
  kljit_problem d = dense(2048, 32000);
  d.grad_weight_dtype = KLJIT_BF16, d.grad_weight_accum = KLJIT_ACCUM_OUTPUT_DTYPE;
  TH_OK(geometry_of(&d, 0, &g));
  TH_CHECK(prob_chunk_rows(&g, 8192) == 3072);
  return TH_PASS;
}

/* Liger's five dense shapes: kljit's fused workspace (bf16, fp32 logits, dW in bf16) stays
 * below N x V x 2 bytes, what Liger keeps beyond the gradients (bench/RESULTS.md); with the
 * online teacher too (its logits in the workspace), at issue 19's two shapes and the rest. */
static int a_short_calls_workspace_stays_under_n_v_bf16_values(void) {
  const int64_t shapes[][3] = {{8192, 4096, 128256}, {4096, 4096, 128256},
                               {2048, 4096, 128256}, {8192, 2048, 32000}, {4096, 2048, 32000}};
  for (int i = 0; i < 10; i++) {
    const int64_t *s = shapes[i % 5];
    kljit_problem pb = i < 5 ? dense(s[1], s[2]) : online(s[1], s[2]);
    pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_OUTPUT_DTYPE;
    prob_geometry g;
    TH_OK(geometry_of(&pb, 0, &g));
    kiface_layout lay;
    TH_OK(layout_of_problem(&pb, NULL, &lay));
    const int64_t n = s[0];
    const size_t ws = prob_workspace_layout(&pb, &g, &lay, KLJIT_MODE_FUSED, n).total;
    const size_t liger = (size_t)n * (size_t)pb.vocab * 2;
    if (!(ws < liger))
      fprintf(stderr, "%lld x %lld x %lld%s: workspace %zu bytes, N V 2 = %zu\n", (long long)n,
              (long long)pb.hidden, (long long)pb.vocab, i < 5 ? "" : " online", ws, liger);
    TH_CHECK(ws < liger);
  }
  return TH_PASS;
}

/* The dX of a recipe made with the options' dx_split `forced` (0: the planner's) on an sm_90 of
 * `sms` SMs. */
static kljit_status split_of(const kljit_problem *pb, int forced, int sms, recipe *r) {
  kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  o.dx_split = forced;
  return recipe_make(pb, NULL, &o, 90, sms, r);
}

/* The split dX: 16-bit inputs with V >= 65536 take slices of at most 32768 columns (64-column
 * multiples, the last the rest), summed in fp32 in the workspace: a chunk's rows x H floats
 * with gradients, none in forward; the context's number wins, within what V allows, for every
 * chunk; the planner's split only chunks whose one GEMM fills half the SMs. */
static int a_long_vocabularys_dx_is_split_into_slices_summed_in_fp32(void) {
  kljit_problem pb = dense(4096, 128256);
  pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = KLJIT_BF16;
  recipe r;
  TH_OK(split_of(&pb, 0, 132, &r));
  const prob_geometry *g = &r.geom;
  TH_CHECK(g->dx_split == 4 && g->dx_slice == 32064);
  TH_CHECK(r.gemm[RECIPE_DX_SLICE].used && r.gemm[RECIPE_DX_SLICE].shape.v == 32064);
  TH_CHECK(r.gemm[RECIPE_DX_LAST].used && r.gemm[RECIPE_DX_LAST].shape.v == 128256 - 3 * 32064);
  /* 2 ceil(n / 128) ceil(4096 / 256) >= 132 SMs from n = 513 on; 78 SMs: from 257 */
  TH_CHECK(!recipe_dx_split_pays(&r, 512) && recipe_dx_split_pays(&r, 513));
  const int64_t R = prob_chunk_rows(g, 8192);
  kiface_layout lay;
  TH_OK(layout_of_problem(&pb, NULL, &lay));
  const prob_workspace w = prob_workspace_layout(&pb, g, &lay, KLJIT_MODE_FUSED, 8192);
  const size_t sum = (size_t)R * 4096 * 4; /* R x H floats */
  TH_CHECK(w.check - w.dxacc >= sum && w.check - w.dxacc < sum + 256);
  const prob_workspace f = prob_workspace_layout(&pb, g, &lay, KLJIT_MODE_FORWARD, 8192);
  TH_CHECK(f.check == f.dxacc); /* no gradients, no sum */
  TH_OK(split_of(&pb, 0, 78, &r));
  TH_CHECK(!recipe_dx_split_pays(&r, 256) && recipe_dx_split_pays(&r, 257));
  TH_OK(split_of(&pb, 1, 132, &r));
  TH_CHECK(g->dx_split == 1 && g->dx_slice == 128256 && !r.gemm[RECIPE_DX_SLICE].used);
  TH_CHECK(!recipe_dx_split_pays(&r, 8192));
  TH_OK(split_of(&pb, 3, 132, &r));
  TH_CHECK(g->dx_split == 3 && g->dx_slice == 42752 && 2 * 42752 < 128256);
  TH_CHECK(recipe_dx_split_pays(&r, 1)); /* the options' split: every chunk */
  pb.vocab = 100; /* 64-column slices: at most two */
  TH_OK(split_of(&pb, 8, 132, &r));
  TH_CHECK(g->dx_split == 2 && g->dx_slice == 64);
  pb.vocab = 32000; /* below 65536: one GEMM */
  TH_OK(split_of(&pb, 0, 132, &r));
  TH_CHECK(g->dx_split == 1);
  kljit_problem f32 = dense(4096, 128256); /* fp32 inputs: dX is fp32 already */
  f32.input_dtype = f32.weight_dtype = f32.teacher_dtype = KLJIT_FP32;
  TH_OK(split_of(&f32, 0, 132, &r));
  TH_CHECK(g->dx_split == 1);
  /* the options' split out of range is refused */
  TH_STATUS(split_of(&pb, 65, 132, &r), KLJIT_ERR_INVALID_ARGUMENT);
  return TH_PASS;
}

/* KLJIT_ACCUM_AUTO (the binding's default): a 16-bit dW stays in its dtype, with the chunk
 * capped as OUTPUT_DTYPE's, while a call has at most KLJIT_ACCUM_AUTO_MAX_CHUNKS chunks; a
 * longer call takes the fp32 buffer and the tuning's chunk; an fp32 dW is FP32's in place. The
 * workspace of the longest call covers every shorter one. */
static int auto_accumulation_takes_the_fp32_buffer_only_beyond_eight_chunks(void) {
  kljit_problem pb = dense(4096, 128256);
  pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_AUTO;
  prob_geometry g;
  TH_OK(geometry_of(&pb, 0, &g));
  const int64_t T = g.tune.chunk_rows;
  TH_CHECK(g.dw_auto && !g.dw_workspace && g.chunk_eighths == 3);
  TH_CHECK(prob_chunk_rows(&g, 2048) == 768 && !prob_dw_in_workspace(&g, 2048));
  TH_CHECK(!prob_dw_in_workspace(&g, 8 * T));      /* 8 chunks of T: in bf16 */
  TH_CHECK(prob_dw_in_workspace(&g, 8 * T + 1));   /* 9: fp32, the tuning's chunk */
  TH_CHECK(prob_chunk_rows(&g, 8 * T + 1) == T);
  kiface_layout lay;
  TH_OK(layout_of_problem(&pb, NULL, &lay));
  const size_t vh4 = (size_t)128256 * 4096 * 4;
  const prob_workspace s = prob_workspace_layout(&pb, &g, &lay, KLJIT_MODE_FUSED, 8 * T);
  const prob_workspace l = prob_workspace_layout(&pb, &g, &lay, KLJIT_MODE_FUSED, 8 * T + 1);
  TH_CHECK(s.db - s.dw == 0 && l.db - l.dw >= vh4);
  TH_CHECK(l.total >= s.total);
  /* the recipe has dW slots into the fp32 buffer beside the bf16 ones (first and later chunks) */
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  recipe r;
  TH_OK(recipe_make(&pb, NULL, &o, 90, 132, &r));
  TH_CHECK(r.gemm[RECIPE_DW32].used && r.gemm[RECIPE_DW32_ACC].used);
  TH_CHECK(r.gemm[RECIPE_DW32].types.dw == CUDA_R_32F && r.gemm[RECIPE_DW].types.dw != CUDA_R_32F);
  /* OUTPUT_DTYPE never takes the buffer, FP32 always does; an fp32 dW never needs one */
  pb.grad_weight_accum = KLJIT_ACCUM_OUTPUT_DTYPE;
  TH_OK(geometry_of(&pb, 0, &g));
  TH_CHECK(!prob_dw_in_workspace(&g, 64 * T));
  TH_OK(recipe_make(&pb, NULL, &o, 90, 132, &r));
  TH_CHECK(!r.gemm[RECIPE_DW32].used && !r.gemm[RECIPE_DW32_ACC].used);
  pb.grad_weight_accum = KLJIT_ACCUM_FP32;
  TH_OK(geometry_of(&pb, 0, &g));
  TH_CHECK(prob_dw_in_workspace(&g, 256) && prob_chunk_rows(&g, 2048) == T);
  kljit_problem f32 = dense(4096, 128256);
  f32.grad_weight_accum = KLJIT_ACCUM_AUTO;
  TH_OK(geometry_of(&f32, 0, &g));
  TH_CHECK(!g.dw_auto && !prob_dw_in_workspace(&g, 64 * T) &&
           prob_chunk_rows(&g, 2048) == g.tune.chunk_rows);
  /* the online teacher's AUTO: an eighth of the rows while in bf16 */
  kljit_problem on = online(2048, 32000);
  on.grad_weight_dtype = KLJIT_BF16, on.grad_weight_accum = KLJIT_ACCUM_AUTO;
  TH_OK(geometry_of(&on, 0, &g));
  TH_CHECK(prob_chunk_rows(&g, 8192) == 1024 && !prob_dw_in_workspace(&g, 8192));
  return TH_PASS;
}

static const th_case cases[] = {
    {"auto_accumulation_takes_the_fp32_buffer_only_beyond_eight_chunks",
     auto_accumulation_takes_the_fp32_buffer_only_beyond_eight_chunks},
    {"a_long_vocabularys_dx_is_split_into_slices_summed_in_fp32",
     a_long_vocabularys_dx_is_split_into_slices_summed_in_fp32},
    {"a_short_call_chunks_at_three_eighths_of_its_rows",
     a_short_call_chunks_at_three_eighths_of_its_rows},
    {"an_online_teachers_short_call_chunks_at_an_eighth_of_its_rows",
     an_online_teachers_short_call_chunks_at_an_eighth_of_its_rows},
    {"a_short_calls_workspace_stays_under_n_v_bf16_values",
     a_short_calls_workspace_stays_under_n_v_bf16_values},
};
TH_MAIN(cases)

/* SPDX-License-Identifier: Apache-2.0 */
/* unit_chunk.c — a call's chunk and workspace without a GPU: with a 16-bit dW accumulated in
 * place, the chunk is the tuning's but at most a quarter of the call's rows (an eighth with the
 * online teacher, whose fp32 logits share the chunk), rounded up to 256, so a short call's
 * workspace stays under the N x V x 2 bytes a chunked autograd loss (Liger's) holds for the
 * same call; an fp32 dW, long calls and a chunk size the context's options fix keep the
 * tuning's chunk. */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "kljit.h"
#include "problem.h"

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

static int a_short_call_chunks_at_a_quarter_of_its_rows(void) {
  kljit_problem pb = dense(4096, 128256);
  pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_OUTPUT_DTYPE;
  const prob_tuning t = prob_estimate(&pb, 132, 90);
  prob_geometry g;
  TH_OK(prob_geometry_make(&pb, &t, &g));
  const int64_t T = t.chunk_rows;
  TH_CHECK(T >= 512);
  TH_CHECK(prob_chunk_rows(&g, 2048) == 512);
  TH_CHECK(prob_chunk_rows(&g, 2049) == 768);  /* ceil(2049 / 4) = 513, up to 768 */
  TH_CHECK(prob_chunk_rows(&g, 100) == 256);
  TH_CHECK(prob_chunk_rows(&g, 8192) == (T < 2048 ? T : 2048));
  TH_CHECK(prob_chunk_rows(&g, (int64_t)1 << 24) == T); /* long calls keep the tuning's */
  g.chunk_cap = 0; /* the context's options set chunk_rows (KLJIT_CHUNK_ROWS): obeyed */
  TH_CHECK(prob_chunk_rows(&g, 2048) == T);
  /* an fp32 dW (the default) keeps the tuning's chunk: every extra chunk re-reads it */
  const kljit_problem f32 = dense(4096, 128256);
  TH_OK(prob_geometry_make(&f32, &t, &g));
  TH_CHECK(prob_chunk_rows(&g, 2048) == T);
  return TH_PASS;
}

static int an_online_teachers_short_call_chunks_at_an_eighth_of_its_rows(void) {
  kljit_problem pb = online(2048, 32000);
  pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_OUTPUT_DTYPE;
  const prob_tuning t = prob_estimate(&pb, 132, 90);
  prob_geometry g;
  TH_OK(prob_geometry_make(&pb, &t, &g));
  const int64_t T = t.chunk_rows;
  TH_CHECK(T >= 2048);
  TH_CHECK(prob_chunk_rows(&g, 8192) == 1024);
  TH_CHECK(prob_chunk_rows(&g, 8193) == 1280); /* ceil(8193 / 8) = 1025, up to 1280 */
  TH_CHECK(prob_chunk_rows(&g, 1000) == 256);
  TH_CHECK(prob_chunk_rows(&g, (int64_t)1 << 24) == T);
  /* the dense teacher's chunk for the same call: a quarter */
  kljit_problem d = dense(2048, 32000);
  d.grad_weight_dtype = KLJIT_BF16, d.grad_weight_accum = KLJIT_ACCUM_OUTPUT_DTYPE;
  const prob_tuning td = prob_estimate(&d, 132, 90);
  TH_OK(prob_geometry_make(&d, &td, &g));
  TH_CHECK(prob_chunk_rows(&g, 8192) == 2048);
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
    const prob_tuning t = prob_estimate(&pb, 132, 90);
    prob_geometry g;
    TH_OK(prob_geometry_make(&pb, &t, &g));
    const int64_t n = s[0];
    const size_t ws = prob_workspace_layout(&pb, &g, KLJIT_MODE_FUSED, n).total;
    const size_t liger = (size_t)n * (size_t)pb.vocab * 2;
    if (!(ws < liger))
      fprintf(stderr, "%lld x %lld x %lld%s: workspace %zu bytes, N V 2 = %zu\n", (long long)n,
              (long long)pb.hidden, (long long)pb.vocab, i < 5 ? "" : " online", ws, liger);
    TH_CHECK(ws < liger);
  }
  return TH_PASS;
}

/* The split dX: 16-bit inputs with V >= 65536 take slices of at most 32768 columns (64-column
 * multiples, the last the rest), summed in fp32 in the workspace: a chunk's rows x H floats
 * with gradients, none in forward; the context's number wins, within what V allows. */
static int a_long_vocabularys_dx_is_split_into_slices_summed_in_fp32(void) {
  kljit_problem pb = dense(4096, 128256);
  pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = KLJIT_BF16;
  const prob_tuning t = prob_estimate(&pb, 132, 90);
  prob_geometry g;
  TH_OK(prob_geometry_make(&pb, &t, &g));
  TH_CHECK(g.dx_split == 4 && g.dx_slice == 32064 && !g.dx_forced);
  const int64_t R = prob_chunk_rows(&g, 8192);
  const prob_workspace w = prob_workspace_layout(&pb, &g, KLJIT_MODE_FUSED, 8192);
  TH_CHECK(w.check - w.dxacc >= (size_t)R * 4096 * 4 && w.check - w.dxacc < (size_t)R * 4096 * 4 + 256);
  const prob_workspace f = prob_workspace_layout(&pb, &g, KLJIT_MODE_FORWARD, 8192);
  TH_CHECK(f.check == f.dxacc); /* no gradients, no sum */
  prob_dx_split(&pb, 1, &g);
  TH_CHECK(g.dx_split == 1 && g.dx_slice == 128256 && g.dx_forced);
  prob_dx_split(&pb, 3, &g);
  TH_CHECK(g.dx_split == 3 && g.dx_slice == 42752 && 2 * 42752 < 128256);
  pb.vocab = 100; /* 64-column slices: at most two */
  prob_dx_split(&pb, 8, &g);
  TH_CHECK(g.dx_split == 2 && g.dx_slice == 64);
  pb.vocab = 32000; /* below 65536: one GEMM */
  TH_OK(prob_geometry_make(&pb, &t, &g));
  TH_CHECK(g.dx_split == 1);
  kljit_problem f32 = dense(4096, 128256); /* fp32 inputs: dX is fp32 already */
  f32.input_dtype = f32.weight_dtype = f32.teacher_dtype = KLJIT_FP32;
  TH_OK(prob_geometry_make(&f32, &t, &g));
  TH_CHECK(g.dx_split == 1);
  return TH_PASS;
}

/* KLJIT_ACCUM_AUTO (the binding's default): a 16-bit dW stays in its dtype, with the chunk
 * capped as OUTPUT_DTYPE's, while a call has at most KLJIT_ACCUM_AUTO_MAX_CHUNKS chunks; a
 * longer call takes the fp32 buffer and the tuning's chunk; an fp32 dW is FP32's in place. The
 * workspace of the longest call covers every shorter one. */
static int auto_accumulation_takes_the_fp32_buffer_only_beyond_eight_chunks(void) {
  kljit_problem pb = dense(4096, 128256);
  pb.grad_weight_dtype = KLJIT_BF16, pb.grad_weight_accum = KLJIT_ACCUM_AUTO;
  const prob_tuning t = prob_estimate(&pb, 132, 90);
  prob_geometry g;
  TH_OK(prob_geometry_make(&pb, &t, &g));
  const int64_t T = t.chunk_rows;
  TH_CHECK(g.dw_auto && !g.dw_workspace && g.chunk_cap == 4);
  TH_CHECK(prob_chunk_rows(&g, 2048) == 512 && !prob_dw_in_workspace(&g, 2048));
  TH_CHECK(!prob_dw_in_workspace(&g, 8 * T));      /* 8 chunks of T: in bf16 */
  TH_CHECK(prob_dw_in_workspace(&g, 8 * T + 1));   /* 9: fp32, the tuning's chunk */
  TH_CHECK(prob_chunk_rows(&g, 8 * T + 1) == T);
  const size_t vh4 = (size_t)128256 * 4096 * 4;
  const prob_workspace s = prob_workspace_layout(&pb, &g, KLJIT_MODE_FUSED, 8 * T);
  const prob_workspace l = prob_workspace_layout(&pb, &g, KLJIT_MODE_FUSED, 8 * T + 1);
  TH_CHECK(s.db - s.dw == 0 && l.db - l.dw >= vh4);
  TH_CHECK(l.total >= s.total);
  /* OUTPUT_DTYPE never takes the buffer, FP32 always does; an fp32 dW never needs one */
  pb.grad_weight_accum = KLJIT_ACCUM_OUTPUT_DTYPE;
  TH_OK(prob_geometry_make(&pb, &t, &g));
  TH_CHECK(!prob_dw_in_workspace(&g, 64 * T));
  pb.grad_weight_accum = KLJIT_ACCUM_FP32;
  TH_OK(prob_geometry_make(&pb, &t, &g));
  TH_CHECK(prob_dw_in_workspace(&g, 256) && prob_chunk_rows(&g, 2048) == T);
  kljit_problem f32 = dense(4096, 128256);
  f32.grad_weight_accum = KLJIT_ACCUM_AUTO;
  TH_OK(prob_geometry_make(&f32, &t, &g));
  TH_CHECK(!g.dw_auto && !prob_dw_in_workspace(&g, 64 * T) && prob_chunk_rows(&g, 2048) == T);
  /* the online teacher's AUTO: an eighth of the rows while in bf16 */
  kljit_problem on = online(2048, 32000);
  on.grad_weight_dtype = KLJIT_BF16, on.grad_weight_accum = KLJIT_ACCUM_AUTO;
  const prob_tuning to = prob_estimate(&on, 132, 90);
  TH_OK(prob_geometry_make(&on, &to, &g));
  TH_CHECK(prob_chunk_rows(&g, 8192) == 1024 && !prob_dw_in_workspace(&g, 8192));
  return TH_PASS;
}

static const th_case cases[] = {
    {"auto_accumulation_takes_the_fp32_buffer_only_beyond_eight_chunks",
     auto_accumulation_takes_the_fp32_buffer_only_beyond_eight_chunks},
    {"a_long_vocabularys_dx_is_split_into_slices_summed_in_fp32",
     a_long_vocabularys_dx_is_split_into_slices_summed_in_fp32},
    {"a_short_call_chunks_at_a_quarter_of_its_rows",
     a_short_call_chunks_at_a_quarter_of_its_rows},
    {"an_online_teachers_short_call_chunks_at_an_eighth_of_its_rows",
     an_online_teachers_short_call_chunks_at_an_eighth_of_its_rows},
    {"a_short_calls_workspace_stays_under_n_v_bf16_values",
     a_short_calls_workspace_stays_under_n_v_bf16_values},
};
TH_MAIN(cases)

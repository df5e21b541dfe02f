/* SPDX-License-Identifier: Apache-2.0 */
/* gemm_sm90.c — the generated sm_90a GEMM family: variants, rendering, TMA descriptors, launch
 * (see gemm_sm90.h and templates/gemm_sm90.cu.lua). */
#include "gemm_sm90.h"

#include "gemm_algo.h"
#include "kiface.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

jgemm_variant jgemm_default(kljit_dtype in, kljit_dtype out, int beta) {
  jgemm_variant v = {"nt", in, out, beta, 256, 2, 4, 'm', 1, 'c', 'd', 0, 0, {0}, {0}};
  return v;
}

jgemm_variant jgemm_kind_default(int kind, kljit_dtype in, kljit_dtype out, int beta) {
  jgemm_variant v = jgemm_default(in, out, beta);
  /* logits: pingpong 128 x 128, 6 stages, raster g, the fastest generated logits GEMM in the
   * call (bench/RESULTS.md, runs 56-58 and 63-65) */
  if (kind == GEMM_LOGITS) {
    v.bn = 128, v.stages = 6, v.raster = 'g', v.schedule = 'p';
    return v;
  }
  /* dX (nn) and dW (tn): raster g, the fastest of the generated shapes for both (bench/RESULTS.md,
   * issue 16's nn and tn rows); dW accumulating through the staged epilogue (C read once per
   * tile, 16-byte runs) */
  v.layout = kind == GEMM_DX ? "nn" : "tn", v.raster = 'g';
  if (kind == GEMM_DW && beta) v.epilogue = 's';
  return v;
}

/* Which backend each GEMM slot takes without tuning or options, by architecture: the one
 * measured faster in the call on that card class (bench/RESULTS.md), or as fast and more
 * precise. sm_90: the generated logits GEMM (its kind's default variant) took 0.973-0.990x the
 * time of cuBLASLt's in the binding's call at the five dense shapes (run 65); the generated dX
 * was 4% slower than cuBLASLt's (run 39): it stays on cuBLASLt, as does dW's first chunk. dW's
 * accumulating chunks into a 16-bit dW (beta 1, no fp32 buffer) take the generated GEMM: one
 * rounding of dW a chunk, where cuBLASLt's adds an error of about one more (dW at 8192 x 4096 x
 * 128256 in two chunks 2.68e-3 against 2.96e-3, in eight 3.92e-3 against 4.29e-3; one rounding a
 * chunk, bench/dw_rounding_precision.py, 2.62e-3 and 3.85e-3; runs 150-151, an H100), and no
 * slower in the call (run 39; run 151: 0.97-1.03x at the five dense shapes). Into fp32 (the
 * workspace's buffer) dW keeps cuBLASLt. */
static const struct {
  int arch;
  gemm_backend slot[JGEMM_SLOTS]; /* by jgemm_slot: logits, dX, dW's first chunk, the others */
} HEURISTIC[] = {
    {90, {GEMM_BACKEND_JIT, GEMM_BACKEND_CUBLAS, GEMM_BACKEND_CUBLAS, GEMM_BACKEND_JIT}},
};

static gemm_backend heuristic_backend(int arch, jgemm_slot slot, kljit_dtype out) {
  if (slot == JGEMM_DW_ACC && out == KLJIT_FP32) return GEMM_BACKEND_CUBLAS;
  for (size_t i = 0; i < sizeof HEURISTIC / sizeof HEURISTIC[0]; i++)
    if (HEURISTIC[i].arch == arch) return HEURISTIC[i].slot[slot];
  return GEMM_BACKEND_CUBLAS;
}

const char *jgemm_unfit(const kljit_problem *pb, int arch) {
  if (arch != 90) return "the generated GEMMs need sm_90";
  if (pb->input_dtype == KLJIT_FP32) return "the generated GEMMs need 16-bit inputs";
  if (pb->hidden % 8) return "the generated GEMMs need H a multiple of 8 (TMA's 16-byte rows)";
  return NULL;
}

static const int SLOT_KIND[JGEMM_SLOTS] = {GEMM_LOGITS, GEMM_DX, GEMM_DW, GEMM_DW};

void jgemm_variant_take(jgemm_variant *v, const prob_gemm_choice *c) {
  v->bn = c->bn, v->consumers = c->consumers, v->stages = c->stages, v->raster = c->raster;
  v->cluster = c->cluster, v->schedule = c->schedule == 'p' ? 'p' : 'c';
  v->epilogue = c->epilogue == 's' ? 's' : 'd';
  v->tweaks = c->tweaks;
  v->stats.e16 = c->e16; /* the logits GEMM's E16, taken where recipe.c's scope holds */
}

/* A slot's output dtype: logits: the chunk's logits dtype; dX: the input dtype, or its fp32 sum
 * over slices of V (one launch, K in slices of dx_slice: exec.c converts it); dW: its
 * accumulator. */
static kljit_dtype slot_out(const kljit_problem *pb, const prob_geometry *g, jgemm_slot slot) {
  return slot == JGEMM_LOGITS ? g->logit
         : slot == JGEMM_DX   ? (g->dx_split > 1 ? KLJIT_FP32 : pb->input_dtype)
         : g->dw_workspace    ? KLJIT_FP32
                              : pb->grad_weight_dtype;
}

jgemm_variant jgemm_slot_variant(const kljit_problem *pb, const prob_geometry *g, jgemm_slot slot,
                                 const prob_gemm_choice *c) {
  const int kind = SLOT_KIND[slot], beta = slot == JGEMM_DW_ACC;
  const int sliced = slot == JGEMM_DX && g->dx_split > 1;
  jgemm_variant v = jgemm_kind_default(kind, pb->input_dtype, slot_out(pb, g, slot), beta);
  if (c) jgemm_variant_take(&v, c);
  if (sliced) v.kslice = (int)(g->dx_slice / 64); /* prob_dx_split: multiples of 64 columns */
  return v;
}

void jgemm_pick_slot(const kljit_problem *pb, const prob_geometry *g, int arch,
                     const gemm_select sel[3], jgemm_slot slot, jgemm_pick *out) {
  memset(out, 0, sizeof *out);
  out->lt_index = -1;
  const int kind = SLOT_KIND[slot];
  const gemm_select *s = &sel[kind];
  /* any version: the tuning's stale choices were dropped before planning (tune_choose) */
  const prob_gemm_choice *tuned = gemm_algo_jit(&g->tune, kind, slot != JGEMM_DW_ACC);
  gemm_backend b = s->backend;
  out->from = b != GEMM_BACKEND_DEFAULT ? JGEMM_FROM_OPTIONS
              : tuned                   ? JGEMM_FROM_TUNING
                                        : JGEMM_FROM_HEURISTIC;
  /* a tuned cuBLASLt dW algorithm keeps dW's accumulating chunks on cuBLASLt too (the tuner
   * timed it so, against the heuristic's generated one) */
  const int tuned_lt = slot == JGEMM_DW_ACC && gemm_algo_has_lt(&g->tune, kind);
  if (b == GEMM_BACKEND_DEFAULT)
    b = tuned      ? GEMM_BACKEND_JIT
        : tuned_lt ? GEMM_BACKEND_CUBLAS
                   : heuristic_backend(arch, slot, slot_out(pb, g, slot));
  if (b == GEMM_BACKEND_CUBLAS) {
    out->lt_index = s->backend == GEMM_BACKEND_CUBLAS ? s->lt_index : -1;
    return;
  }
  if ((out->why = jgemm_unfit(pb, arch)) != NULL) return; /* cuBLASLt, saying why */
  out->jit = 1;
  const prob_gemm_choice *c = s->backend == GEMM_BACKEND_JIT && s->variant ? &s->choice : tuned;
  out->v = jgemm_slot_variant(pb, g, slot, c);
  out->default_shape = c == NULL;
}

int jgemm_variants(jgemm_variant *out, int cap) {
  static const kljit_dtype ins[] = {KLJIT_BF16, KLJIT_FP16};
  static const kljit_dtype outs[] = {KLJIT_FP32, KLJIT_BF16, KLJIT_FP16};
  /* the default tile and the few shapes a tuner would try around it (192 x 192: three
   * multiplying warpgroups, cuBLASLt's tile for the logits GEMM's chunk shape) */
  static const int shapes[][4] = {{256, 2, 4, 1}, {256, 2, 3, 1}, {128, 2, 6, 1}, {192, 2, 4, 1},
                                  {256, 1, 5, 1}, {128, 1, 8, 1}, {256, 2, 4, 2}, {128, 2, 6, 2},
                                  {192, 3, 4, 2}};
  int n = 0;
  for (int i = 0; i < 2; i++)
    for (int o = 0; o < 3; o++)
      for (int beta = 0; beta < 2; beta++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
          for (int r = 0; r < 3 && n < cap; r++) {
            if ((s > 0 || r > 0) && (o > 0 || beta)) continue; /* shapes at fp32 output only */
            jgemm_variant v = {"nt", ins[i], outs[o], beta, shapes[s][0], shapes[s][1],
                               shapes[s][2], "mng"[r], shapes[s][3], 'c', 'd', 0, 0, {0}, {0}};
            out[n++] = v;
          }
  for (int i = 0; i < 2; i++) /* the nn layout (the dX shape): each dtype pair, two tiles */
    for (int o = 0; o < 2 && n + 1 < cap; o++) {
      jgemm_variant v = jgemm_default(ins[i], outs[o == 0 ? 0 : 1 + i], 0);
      v.layout = "nn";
      out[n++] = v;
      v.bn = 128, v.stages = 6, v.raster = 'g';
      out[n++] = v;
    }
  /* nn and tn in clusters of 2 (B boxes multicast), fp32 output, both schedules */
  for (int i = 0; i < 2; i++)
    for (int l = 0; l < 2 && n + 1 < cap; l++) {
      jgemm_variant v = jgemm_default(ins[i], KLJIT_FP32, l);
      v.layout = l ? "tn" : "nn", v.raster = 'g', v.cluster = 2;
      out[n++] = v;
      v.bn = 128, v.stages = 6, v.schedule = 'p';
      out[n++] = v;
    }
  /* the tn layout (dW = G^T X, accumulated over chunks): each dtype pair with beta into fp32
   * and into the input dtype, and the fp32 one written (the first chunk), both schedules */
  for (int i = 0; i < 2; i++)
    for (int o = 0; o < 3 && n + 1 < cap; o++) {
      jgemm_variant v = jgemm_default(ins[i], o == 1 ? ins[i] : KLJIT_FP32, o < 2);
      v.layout = "tn";
      out[n++] = v;
      v.bn = 128, v.stages = 6, v.raster = 'g', v.schedule = 'p';
      out[n++] = v;
    }
  /* the pingpong schedule: 128 x 128 and 64 x 256 tiles at fp32 output (each also in clusters
   * of 2), then each dtype pair's other output with beta, and the nn layout */
  static const int pp[][4] = {{128, 2, 6, 1}, {128, 2, 7, 1}, {256, 1, 5, 1},
                              {128, 2, 6, 2}, {256, 1, 5, 2}};
  enum { PP = sizeof pp / sizeof pp[0] };
  for (int i = 0; i < 2; i++)
    for (size_t s = 0; s < PP + 2 && n < cap; s++) {
      const size_t t = s < PP ? s : 0;
      jgemm_variant v = {"nt", ins[i], KLJIT_FP32, 0, pp[t][0], pp[t][1], pp[t][2], "gmggg"[t],
                         pp[t][3], 'p', 'd', 0, 0, {0}, {0}};
      if (s == PP) v.out = ins[i], v.beta = 1;
      if (s == PP + 1) v.layout = "nn";
      out[n++] = v;
    }
  /* the staged epilogue (bf16 inputs; f16 differs in the types alone, and the tn accumulation
   * into f16 covers its 16-bit path): the dW shape accumulating into fp32 and into bf16 (both
   * schedules), the logits and the dX shapes written */
  static const struct {
    const char *layout;
    int in_out, beta, bn, consumers, stages;
    char schedule;
  } staged[] = {{"tn", 0, 1, 256, 2, 4, 'c'}, {"tn", 1, 1, 256, 2, 4, 'c'},
                {"tn", 0, 1, 128, 2, 6, 'p'}, {"nt", 0, 0, 256, 2, 4, 'c'},
                {"nn", 1, 0, 256, 2, 4, 'c'}, {"tn", 2, 1, 256, 2, 4, 'c'}};
  for (size_t i = 0; i < sizeof staged / sizeof staged[0] && n < cap; i++) {
    const kljit_dtype in = staged[i].in_out == 2 ? KLJIT_FP16 : KLJIT_BF16;
    jgemm_variant v = {staged[i].layout, in, staged[i].in_out ? in : KLJIT_FP32, staged[i].beta,
                       staged[i].bn, staged[i].consumers, staged[i].stages, 'g', 1,
                       staged[i].schedule, 's', 0, 0, {0}, {0}};
    out[n++] = v;
  }
  /* the smaller choices (KSPEC_GEMM_*), each on the layout it is meant for: one stage arrival
   * per warp (cooperative and pingpong), streaming C with the staged epilogue, L2 policies */
  static const struct {
    const char *layout;
    int beta;
    char schedule, epilogue;
    int tweaks;
  } tw[] = {{"nt", 0, 'c', 'd', KSPEC_GEMM_ARRIVE_WARP},
            {"nn", 0, 'p', 'd', KSPEC_GEMM_ARRIVE_WARP | KSPEC_GEMM_L2_KEEP_B},
            {"nt", 0, 'c', 's', KSPEC_GEMM_STREAM_C | KSPEC_GEMM_L2_KEEP_A},
            {"tn", 1, 'c', 's', KSPEC_GEMM_ARRIVE_WARP | KSPEC_GEMM_STREAM_C |
                                KSPEC_GEMM_L2_KEEP_B}};
  for (size_t i = 0; i < sizeof tw / sizeof tw[0] && n < cap; i++) {
    jgemm_variant v = jgemm_default(KLJIT_BF16, tw[i].beta ? KLJIT_BF16 : KLJIT_FP32, tw[i].beta);
    v.layout = tw[i].layout, v.epilogue = tw[i].epilogue, v.tweaks = tw[i].tweaks;
    if (tw[i].schedule == 'p') v.bn = 128, v.stages = 6, v.raster = 'g', v.schedule = 'p';
    out[n++] = v;
  }
  /* K in slices (the dX over a long vocabulary in one launch): 3 k-blocks a slice, so that
   * the tests' K of a few hundred spans several; both epilogues, both schedules */
  for (int e = 0; e < 3 && n < cap; e++) {
    jgemm_variant v = jgemm_kind_default(GEMM_DX, KLJIT_BF16, KLJIT_FP32, 0);
    v.kslice = 3, v.epilogue = e == 1 ? 's' : 'd';
    if (e == 2) v.bn = 128, v.stages = 6, v.schedule = 'p', v.epilogue = 's';
    out[n++] = v;
  }
  /* tiles claimed from a counter (TILES dynamic): each GEMM's default variant as the plans take
   * it (the logits GEMM's pingpong 128 x 128, dX's cooperative 128 x 256, dW's accumulation
   * through the staged epilogue) and the other schedule of each, fp16 inputs for the second */
  for (int kind = GEMM_LOGITS; kind <= GEMM_DW && n + 1 < cap; kind++) {
    jgemm_variant v = jgemm_kind_default(kind, KLJIT_BF16, KLJIT_FP32, kind == GEMM_DW);
    v.tweaks = KSPEC_GEMM_DYNAMIC;
    out[n++] = v;
    v.in = KLJIT_FP16;
    if (v.schedule == 'p') v.bn = 256, v.stages = 4, v.schedule = 'c';
    else v.bn = 128, v.stages = 6, v.schedule = 'p';
    out[n++] = v;
  }
  /* ... and in clusters of 2 (rank 0 claiming for both CTAs): the logits GEMM's pingpong and
   * dX's cooperative default */
  for (int kind = GEMM_LOGITS; kind <= GEMM_DX && n < cap; kind++) {
    jgemm_variant v = jgemm_kind_default(kind, KLJIT_BF16, KLJIT_FP32, 0);
    v.cluster = 2, v.tweaks = KSPEC_GEMM_DYNAMIC;
    out[n++] = v;
  }
  return n;
}

int jgemm_gop_variants(jgemm_variant *out, int cap) {
  static const struct {
    const char *layout;
    kljit_dtype in, out;
    char schedule, epilogue;
    int stages, cluster, kslice, fw;
    kljit_dtype pdt;
    int regs; /* G formed in registers (GRS) */
  } g[] = {
      {"nn", KLJIT_BF16, KLJIT_BF16, 'c', 'd', 3, 1, 0, 128, KLJIT_BF16, 0},
      {"nn", KLJIT_FP16, KLJIT_FP32, 'p', 'd', 4, 1, 0, 256, KLJIT_FP16, 0},
      {"nn", KLJIT_BF16, KLJIT_BF16, 'c', 'd', 4, 1, 0, 64, (kljit_dtype)0, 0},
      {"nn", KLJIT_BF16, KLJIT_FP32, 'c', 's', 3, 1, 3, 128, KLJIT_BF16, 0},
      {"tn", KLJIT_BF16, KLJIT_FP32, 'c', 'd', 3, 1, 0, 256, KLJIT_BF16, 0},
      {"tn", KLJIT_BF16, KLJIT_FP32, 'p', 's', 4, 2, 0, 128, KLJIT_BF16, 0},
      {"tn", KLJIT_FP16, KLJIT_FP16, 'c', 'd', 4, 1, 0, 128, (kljit_dtype)0, 0},
      /* GRS: the cooperative schedule only */
      {"nn", KLJIT_BF16, KLJIT_FP32, 'c', 'd', 3, 1, 0, 128, KLJIT_BF16, 1},
      {"nn", KLJIT_FP16, KLJIT_FP16, 'c', 's', 4, 2, 0, 64, (kljit_dtype)0, 1},
      {"tn", KLJIT_BF16, KLJIT_FP32, 'c', 'd', 3, 1, 0, 256, KLJIT_BF16, 1},
      {"tn", KLJIT_BF16, KLJIT_BF16, 'c', 's', 3, 2, 0, 128, KLJIT_FP16, 1},
      {"tn", KLJIT_FP16, KLJIT_FP32, 'c', 'd', 4, 1, 0, 128, (kljit_dtype)0, 1}};
  int n = 0;
  for (size_t i = 0; i < sizeof g / sizeof g[0] && n < cap; i++) {
    jgemm_variant v = jgemm_kind_default(strcmp(g[i].layout, "nn") ? GEMM_DW : GEMM_DX, g[i].in,
                                         g[i].out, 0);
    v.schedule = g[i].schedule, v.epilogue = g[i].epilogue, v.stages = g[i].stages;
    v.cluster = g[i].cluster, v.kslice = g[i].kslice;
    if (g[i].schedule == 'p') v.bn = 128;
    v.gop.on = 1, v.gop.fw = g[i].fw, v.gop.pdt = g[i].pdt, v.gop.regs = g[i].regs;
    out[n++] = v;
  }
  /* tiles claimed from a counter (TILES dynamic): the first nn, and the pingpong tn in its
   * clusters of 2 */
  for (size_t i = 0; i < 6 && n < cap; i += 5) {
    jgemm_variant v = out[i];
    v.tweaks = KSPEC_GEMM_DYNAMIC;
    out[n++] = v;
  }
  return n;
}

void jgemm_describe(const jgemm_variant *v, char *out, size_t cap) {
  const int other = v->layout && strcmp(v->layout, "nt"); /* nn, tn named */
  char slice[16] = "";
  if (v->kslice > 0) snprintf(slice, sizeof slice, " k%d", v->kslice);
  const int t = v->tweaks;
  char stats[64] = "";
  /* the teacher's dtype after a dot ("sparse" reads no teacher: none) */
  const int tdot = v->stats.teacher && strcmp(v->stats.teacher, "sparse") != 0;
  if (v->stats.teacher)
    snprintf(stats, sizeof stats, " stats:%s%s%s%s%s%s%s%s%s%s", v->stats.teacher,
             v->stats.tchunk ? "(online)" : "", tdot ? "." : "",
             tdot ? names_dtype_tag(v->stats.tdt) : "",
             v->stats.e16 ? "+e16" : "",
             v->stats.e16 && v->stats.bdt ? "+bias" : "",
             v->stats.e16 && v->stats.softcap > 0.0 ? "+softcap" : "",
             v->stats.e16 && v->stats.hard ? "+ce" : "",
             v->stats.e16 && v->stats.expe ? "+exp" : "",
             v->stats.e16 && v->stats.tmode == KLJIT_TEMPERATURE_RUNTIME ? "+runtime_t"
             : !v->stats.e16 && v->stats.topk > 0 ? (v->stats.own ? "+ids+own" : "+ids")
                                                  : "");
  char gop[32] = "";
  if (v->gop.on)
    snprintf(gop, sizeof gop, " g%s%d%s%s", v->gop.regs ? "r" : "", v->gop.fw,
             v->gop.pdt ? "." : "", v->gop.pdt ? names_dtype_tag(v->gop.pdt) : "");
  snprintf(out, cap, "%s>%s b%d %dx%d s%d %c%s%s%s%s%s%s%s%s%s%s%s%s%s%s", names_dtype_tag(v->in),
           names_dtype_tag(v->out), v->beta, 64 * v->consumers,
           v->bn, v->stages, v->raster, v->cluster == 2 ? " c2" : "", other ? " " : "",
           other ? v->layout : "", v->schedule == 'p' ? " pp" : "",
           v->epilogue == 's' ? " es" : "", t & KSPEC_GEMM_ARRIVE_WARP ? " aw" : "",
           t & KSPEC_GEMM_STREAM_C ? " cs" : "",
           t & KSPEC_GEMM_L2_KEEP_A ? " l2a" : t & KSPEC_GEMM_L2_KEEP_B ? " l2b" : "",
           t & KSPEC_GEMM_PROMOTE ? " pr" : "", t & KSPEC_GEMM_DYNAMIC ? " dyn" : "",
           t & KSPEC_GEMM_MASS_WARPS ? " mw" : "", slice,
           stats, gop);
}

kspec jgemm_spec(const jgemm_variant *v) {
  kspec k;
  memset(&k, 0, sizeof k);
  k.family = KSPEC_GEMM_SM90;
  k.tdt = v->in, k.out = v->out, k.gemm_layout = v->layout;
  k.gemm_beta = v->beta != 0, k.gemm_bn = v->bn, k.gemm_consumers = v->consumers;
  k.gemm_stages = v->stages, k.gemm_raster = v->raster, k.gemm_cluster = v->cluster;
  k.gemm_schedule = v->schedule == 'p' ? 'p' : 0;
  k.gemm_epilogue = v->epilogue == 's' ? 's' : 0;
  k.gemm_kslice = v->kslice > 0 ? v->kslice : 0;
  k.gemm_tweaks = v->tweaks;
  k.gemm_stats = v->stats.teacher;
  k.gemm_stats_tdt = v->stats.tdt, k.gemm_stats_tld = v->stats.tld, k.gemm_stats_t = v->stats.t;
  k.tt = v->stats.teacher ? v->stats.tt : 0.0; /* TT (the rows' field, teacher logits' here) */
  k.tsoftcap = v->stats.teacher ? v->stats.tsoftcap : 0.0; /* TSOFTCAP (likewise) */
  k.tchunk = v->stats.teacher && v->stats.tchunk;           /* TCHUNK, TBDT (likewise) */
  k.tbdt = k.tchunk ? v->stats.tbdt : (kljit_dtype)0;
  k.gemm_e16 = v->stats.teacher && v->stats.e16;
  k.gemm_stats_bdt = k.gemm_e16 ? v->stats.bdt : (kljit_dtype)0;
  k.softcap = k.gemm_e16 ? v->stats.softcap : 0.0; /* SOFTCAP (the rows' field, E16's here) */
  k.gemm_hard = k.gemm_e16 && v->stats.hard;
  k.gemm_e16_exp = k.gemm_e16 && v->stats.expe;
  /* TMODE (the rows' field, E16's here): runtime reads 1 / T from the header */
  k.tmode = k.gemm_e16 ? v->stats.tmode : KLJIT_TEMPERATURE_CONSTANT;
  if (v->stats.teacher && v->stats.topk > 0) { /* the sparse teacher's support: TOPK, IDT */
    k.topk = v->stats.topk, k.idt = v->stats.idt;
    if (k.gemm_e16) { /* VDT, VALUES (tdt is the GEMM's IN: the values' dtype goes where a
                       * dense teacher's would) */
      k.gemm_stats_tdt = v->stats.vdt, k.values = v->stats.values;
    } else {
      k.gemm_stats_own = v->stats.own; /* OWN */
    }
  }
  if (v->gop.on) {
    k.gemm_gop = 1, k.gemm_gop_fw = v->gop.fw, k.gemm_gop_pdt = v->gop.pdt;
    k.gemm_gop_regs = v->gop.regs;
  }
  return k;
}

kljit_status jgemm_render(const jgemm_variant *v, strbuf *out) {
  const kspec k = jgemm_spec(v);
  return kspec_render(&k, out);
}

kljit_status jgemm_load(const drv_table *d, CUmodule mod, const char *manifest,
                        const char *module, jgemm_kernel *out) {
  memset(out, 0, sizeof *out);
  kiface_manifest m;
  kljit_status st = kiface_parse(manifest, module, &m);
  if (st != KLJIT_SUCCESS) return st;
  const kiface_kernel *k = kiface_find(&m, KSTEP_GEMM);
  if (!k) return err_set(KLJIT_ERR_TEMPLATE, "%s: the module declares no gemm kernel", module);
  out->sig = *k;
  st = drv_check(d, d->cuModuleGetFunction(&out->fn, mod, k->name), k->name);
  if (st == KLJIT_SUCCESS)
    st = drv_check(d,
                   d->cuFuncSetAttribute(out->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         (int)k->smem),
                   "cuFuncSetAttribute(max dynamic shared memory, GEMM)");
  return st;
}

int jgemm_grid_cap(const drv_table *d, const jgemm_kernel *k, int sm_count) {
  if (k->sig.cluster != 2) return sm_count;
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = (unsigned)(sm_count > 1 ? sm_count / 2 * 2 : 2), cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = k->sig.threads, cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = k->sig.smem;
  int clusters = 0; /* the kernel's __cluster_dims__(2, 1, 1) gives the cluster shape */
  if (d->cuOccupancyMaxActiveClusters(&clusters, k->fn, &cfg) != CUDA_SUCCESS || clusters < 1)
    return sm_count;
  return 2 * clusters < sm_count ? 2 * clusters : sm_count;
}

/* A row-major [rows, cols] operand of 16-bit elements, box {64, box_rows}, 128-byte swizzle
 * (K-major, wgmma_desc_k128, when cols is K; MN-major, wgmma_desc_mn128, when rows is K), zeros
 * out of bounds. */
static kljit_status tmap(const drv_table *d, CUtensorMap *map, const void *p, int64_t rows,
                         int64_t cols, int64_t ld, int box_rows, int f16) {
  const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
  const cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, elem[2] = {1, 1};
  return drv_check(d,
                   d->cuTensorMapEncodeTiled(map, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                      : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                             2, (void *)p, dims, strides, box, elem,
                                             CU_TENSOR_MAP_INTERLEAVE_NONE,
                                             CU_TENSOR_MAP_SWIZZLE_128B,
                                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                   "cuTensorMapEncodeTiled");
}

/* A's descriptor for a tensor of A's shape at p (row stride ld): nt, nn [M, K] in boxes of the
 * tile's rows; tn [K, M] in 64 x 64 boxes. GOP's P takes it too: boxed as A, each element lands
 * where A's does in a stage. */
static kljit_status tmap_a(const drv_table *d, CUtensorMap *map, const jgemm_variant *v, int tn,
                           const jgemm_args *a, const void *p, int64_t ld, int f16) {
  return tn ? tmap(d, map, p, a->k, a->m, ld, 64, f16)
            : tmap(d, map, p, a->m, a->k, ld, 64 * v->consumers, f16);
}

kljit_status jgemm_launch(const drv_table *d, const jgemm_kernel *kn, const jgemm_variant *v,
                          int sms, const jgemm_args *a, CUstream stream) {
  if (a->m < 1 || a->n < 1 || a->k < 1 || a->m > INT32_MAX || a->n > INT32_MAX ||
      a->k > INT32_MAX)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "generated GEMM: M=%lld N=%lld K=%lld",
                   (long long)a->m, (long long)a->n, (long long)a->k);
  /* nn, tn: B[K, N] row-major; tn: A[K, M] row-major too */
  const int tn = v->layout && !strcmp(v->layout, "tn");
  const int nn = tn || (v->layout && !strcmp(v->layout, "nn"));
  const int64_t acols = tn ? a->m : a->k; /* A's row (GOP: G's columns, V) */
  if (a->lda % 8 || a->ldb % 8 || a->lda < acols || a->ldb < (nn ? a->n : a->k) ||
      a->ldc < a->n || ((uintptr_t)a->a & 15) || ((uintptr_t)a->b & 15))
    return err_set(KLJIT_ERR_UNSUPPORTED,
                   "generated GEMM: lda=%lld ldb=%lld must be multiples of 8 covering their rows "
                   "and A, B 16-byte aligned (TMA)",
                   (long long)a->lda, (long long)a->ldb);
  if ((v->tweaks & KSPEC_GEMM_DYNAMIC) && (!a->sched || ((uintptr_t)a->sched & 7)))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "generated GEMM (tiles claimed from a counter): the counter pair is required, "
                   "8-byte aligned");
  const int f16 = v->in == KLJIT_FP16;
  kargs k; /* the kernel's arguments, by role (its manifest says which, in what order) */
  memset(&k, 0, sizeof k);
  /* GOP: A holds E' in fp16 whatever the inputs' dtype, the teacher's P (pdt) A's shape */
  const int gop = v->gop.on && nn, a16 = gop ? 1 : f16;
  /* each row of the factors holds one a column tile of G */
  const int64_t gtiles = gop ? (acols + v->gop.fw - 1) / v->gop.fw : 0;
  if (gop && (!a->gop.fac || a->gop.fld < gtiles || (v->gop.pdt && (!a->gop.p || !a->gop.g))))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "generated GEMM (G rebuilt from E'): its factors (fld %lld must be >= %lld, "
                   "one a column tile of %d) and, with the teacher's term, P and g are required",
                   (long long)a->gop.fld, (long long)gtiles, v->gop.fw);
  if (gop && v->gop.pdt &&
      (a->gop.ldp % 8 || a->gop.ldp < acols || ((uintptr_t)a->gop.p & 15)))
    return err_set(KLJIT_ERR_UNSUPPORTED,
                   "generated GEMM (G rebuilt from E'): ldp=%lld must be a multiple of 8 "
                   "covering P's rows and P 16-byte aligned (TMA)",
                   (long long)a->gop.ldp);
  kljit_status st = tmap_a(d, &k.map_a, v, tn, a, a->a, a->lda, a16);
  if (st == KLJIT_SUCCESS && gop && v->gop.pdt)
    st = tmap_a(d, &k.map_p, v, tn, a, a->gop.p, a->gop.ldp, v->gop.pdt == KLJIT_FP16);
  /* clusters: each CTA of a cluster loads 1/cl of the B tile (the manifest's cluster= is the
   * variant's, which the template compiled in) */
  const int cl = kn->sig.cluster > 1 ? (int)kn->sig.cluster : 1;
  if (st == KLJIT_SUCCESS)
    st = nn ? tmap(d, &k.map_b, a->b, a->k, a->n, a->ldb, 64, f16)
            : tmap(d, &k.map_b, a->b, a->n, a->k, a->ldb, v->bn / cl, f16);
  if (st != KLJIT_SUCCESS) return st;
  const int64_t bm = 64 * v->consumers;
  const int64_t groups = ((a->m + bm - 1) / bm + cl - 1) / cl; /* cluster tiles: cl row tiles */
  const int64_t tiles = groups * ((a->n + v->bn - 1) / v->bn), most = sms / cl;
  /* (a dynamic variant's claims run past the last tile by up to the grid: int too) */
  if (tiles * cl > INT32_MAX - (int64_t)sms)
    return err_set(KLJIT_ERR_UNSUPPORTED, "generated GEMM: too many tiles");
  const unsigned grid = (unsigned)(cl * (tiles < most ? tiles : most));
  k.gemm_c = a->c, k.gemm_m = (int32_t)a->m, k.gemm_n = (int32_t)a->n, k.gemm_k = (int32_t)a->k;
  k.ldc = a->ldc, k.alpha = a->alpha;
  k.teacher = a->epi.teacher, k.part = a->epi.part, k.row0 = a->epi.row0;
  k.gemm_e = a->epi.e, k.lde = a->epi.lde, k.rowstat = a->epi.rowstat, k.rsf = a->epi.rsf;
  k.bias = a->epi.bias;
  k.labels = a->epi.labels, k.labels_is64 = a->epi.labels_is64;
  k.hdr = a->epi.hdr;
  k.teacher_bias = a->epi.tbias;
  k.teacher_ids = a->epi.ids, k.teacher_values = a->epi.vals;
  k.gfac = a->gop.fac, k.fld = a->gop.fld, k.gpr = a->gop.g;
  k.gemm_sched = a->sched;
  void *params[KIFACE_MAX_ARGS];
  kiface_marshal(&kn->sig, &k, params);
  return drv_check(d,
                   d->cuLaunchKernel(kn->fn, grid, 1, 1, kn->sig.threads, 1, 1, kn->sig.smem,
                                     stream, params, NULL),
                   "cuLaunchKernel (generated GEMM)");
}

/* SPDX-License-Identifier: Apache-2.0 */
/* gemm_sm90.h — the generated sm_90a GEMM family (templates/gemm_sm90.cu.lua): its variants,
 * their source, and launching one with its TMA descriptors.
 *
 * Two layouts, in row-major terms:
 *   nt: C[M, N] (+)= alpha A[M, K] B[N, K]^T  (the logits GEMM: A = X chunk rows, B = W, C = Z)
 *   nn: C[M, N] (+)= alpha A[M, K] B[K, N]    (the dX GEMM: A = G, B = W, C = dX)
 *   tn: C[M, N] (+)= alpha A[K, M]^T B[K, N]  (the dW GEMM: A = G, B = X, C = dW)
 * Each GEMM of the chunk loop takes this family or cuBLASLt (jgemm_pick_slot, which the recipe
 * asks for each slot: recipe.c): the context's options (KLJIT_GEMM), else the tuning's choice
 * (wisdom), else the arch's heuristic table.
 */
#ifndef KLJIT_GEMM_SM90_H
#define KLJIT_GEMM_SM90_H

#include "driver.h"
#include "gemm.h"
#include "gemm_algo.h"
#include "kiface.h"
#include "problem.h"
#include "spec.h"

/* The logits GEMM's statistics epilogue (templates/gemm_sm90.cu.lua, STATS): the dense rows'
 * pass-1 records of each (row, column tile), written beside the logits. */
typedef struct jgemm_stats {
  const char *teacher; /* NULL: none; "probs" | "logprobs" | "logits": the dense teacher's form;
                        * "sparse": the sparse teacher's forward KL (no teacher read: tdt, tld
                        * unused; the sparse rows' records) */
  kljit_dtype tdt;     /* the teacher's dtype */
  int64_t tld;         /* the teacher's row stride (elements) */
  double t;            /* the constant temperature */
  double tt;           /* "logits": the teacher's temperature; 0: T's (t, or the header's) */
  double tsoftcap;     /* "logits": the teacher's logit cap c (t <- c tanh(t / c)); 0: none */
  int tchunk;          /* "logits": the online teacher's, the chunk's rows (C's row r: its r) */
  kljit_dtype tbdt;    /* tchunk: the online teacher's bias dtype (jgemm_epi.tbias); 0: none */
  int e16;             /* E16: the tile's fp16 scores x = s - m instead of C (jgemm_epi.e) */
  kljit_dtype bdt;     /* E16: the bias's dtype (jgemm_epi.bias added to z); 0: none */
  double softcap;      /* E16: the student's logit cap c (s = c tanh(z / c) / T); 0: none */
  int hard;            /* E16: the hard-label CE's records too (jgemm_epi.labels) */
  int expe;            /* E16, "sparse": E' = exp(x) in E instead of x (the G operand stage's) */
  kljit_temperature_mode tmode; /* E16: RUNTIME: 1 / T from the header (jgemm_epi.hdr), t 1 */
  /* "sparse": the support the epilogue reads (jgemm_epi.ids; with E16 .vals too, for the loss's
   * exact cross term; without, for the bucket tail's and the divergences' d_on apart) */
  int topk;             /* K, ids (and values) a row; 0: none read (tail none or renorm, no E16) */
  kljit_dtype idt;      /* the ids' dtype (INT32 | INT64) */
  kljit_dtype vdt;      /* E16: the values' dtype */
  const char *values;   /* E16: "probs" | "logprobs" */
  int own;              /* no E16: the support's own (max, sum-exp) too (renormalized divergences) */
} jgemm_stats;

typedef struct jgemm_variant {
  const char *layout; /* "nt": B[N, K] (logits); "nn": B[K, N] row-major (the dX shape); "tn":
                       * A[K, M] and B[K, N] row-major (dW = G^T X) */
  kljit_dtype in;   /* KLJIT_BF16 | KLJIT_FP16 */
  kljit_dtype out;  /* KLJIT_FP32 | KLJIT_BF16 | KLJIT_FP16 */
  int beta;         /* 0: C = alpha AB; 1: C += alpha AB */
  int bn;           /* tile columns: 64, 128, 192, 256 */
  int consumers;    /* multiplying warpgroups (tile rows 64 x consumers) */
  int stages;       /* shared-memory ring depth */
  char raster;      /* 'm' | 'n' | 'g': the tile order (templates/gemm_sm90.cu.lua) */
  int cluster;      /* 1 | 2: CTAs per cluster sharing (multicasting) the B tile */
  char schedule;    /* 0 or 'c': cooperative (one warpgroup per 64 rows of every tile); 'p':
                     * pingpong (two warpgroups on alternate tiles, each all of its tile's rows:
                     * one stores while the other multiplies; templates/gemm_sm90.cu.lua) */
  char epilogue;    /* 0 or 'd': direct (registers to C, pair by pair); 's': staged through
                     * shared memory, 16-byte runs of C (BETA: C loaded once per tile) */
  int kslice;       /* 0, or k-blocks (64 of K) per slice: K summed in slices whose fp32 sums
                     * are added into C (fp32 C: the dX over a long vocabulary, in one launch) */
  int tweaks;       /* KSPEC_GEMM_* bits (spec.h): one stage arrival per warp, streaming C,
                     * an L2 policy on the TMA loads */
  jgemm_stats stats; /* the nt layout into fp32: the statistics epilogue, or none */
  /* nn, tn (A = G): G rebuilt in the stage (templates/gemm_sm90.cu.lua, GOP) from E', the
   * logits GEMM's fp16 tile-relative exponentials, as f[r, v / fw] E' - g[r] P (jgemm_gop) */
  struct {
    int on;
    int fw;          /* the factors' column tile: a multiple of 64 */
    kljit_dtype pdt; /* the dense teacher's probabilities' dtype (BF16 | FP16); 0: none */
    int regs;        /* G formed in registers (GRS: wgmma's register A), not in the stage */
  } gop;
} jgemm_variant;

/* The heuristic's variant for a dtype pair (no tuning yet): 128 x 256 tiles, 4 stages, M-fastest
 * raster. */
jgemm_variant jgemm_default(kljit_dtype in, kljit_dtype out, int beta);

/* The default variant of the GEMM of kind `kind` (a gemm_kind: GEMM_LOGITS, the nt layout,
 * pingpong 128 x 128; GEMM_DX, nn; GEMM_DW, tn) for a dtype pair and beta. */
jgemm_variant jgemm_kind_default(int kind, kljit_dtype in, kljit_dtype out, int beta);

/* The GEMMs of a plan's chunk loop that the family may serve: logits; dX; dW of the first chunk
 * (beta 0: written, unless the call accumulates into grad_weight) and of the others (beta 1). */
typedef enum jgemm_slot {
  JGEMM_LOGITS = 0, JGEMM_DX = 1, JGEMM_DW_FIRST = 2, JGEMM_DW_ACC = 3, JGEMM_SLOTS = 4
} jgemm_slot;

/* Where a GEMM's backend came from (the plan's description says it). */
typedef enum jgemm_source {
  JGEMM_FROM_HEURISTIC = 0, /* the arch's table (gemm_sm90.c) */
  JGEMM_FROM_TUNING = 1,    /* a generated choice of the tuning (wisdom, the tuner) */
  JGEMM_FROM_OPTIONS = 2    /* the context's gemm / gemm_choice (KLJIT_GEMM) */
} jgemm_source;

/* One slot's GEMM. */
typedef struct jgemm_pick {
  int jit;          /* 1: the generated variant v; 0: cuBLASLt */
  jgemm_variant v;
  int lt_index;     /* cuBLASLt: -1, the tuning's algorithm (gemm_algo_find) or the heuristic's
                     * first; k: the k-th of cuBLASLt's heuristic list (options) */
  jgemm_source from;
  int default_shape; /* 1: v has its kind's default shape (neither options nor tuning named one) */
  const char *why;  /* cuBLASLt where a generated kernel was asked: the reason (jgemm_unfit) */
} jgemm_pick;

/* NULL when the family can serve the GEMMs of `pb` on sm_<arch>, else the reason it cannot:
 * sm_90, 16-bit inputs, H a multiple of 8. */
const char *jgemm_unfit(const kljit_problem *pb, int arch);

/* v with choice c's tile shape, schedule, epilogue, tweaks and E16 flag (its layout, dtypes and
 * beta kept). */
void jgemm_variant_take(jgemm_variant *v, const prob_gemm_choice *c);

/* The variant of a slot's GEMM with choice c's tile shape, schedule and epilogue (NULL: the
 * kind's default, jgemm_kind_default): the layout, dtypes, beta and K slices follow from the
 * problem and the geometry g (dX summed over g->dx_split slices of V in fp32 where > 1). */
jgemm_variant jgemm_slot_variant(const kljit_problem *pb, const prob_geometry *g, jgemm_slot slot,
                                 const prob_gemm_choice *c);

/* A slot's GEMM for a plan of `pb` with geometry g (its tuning, g->tune) on sm_<arch>, sel the
 * options' backends (gemm_algo_select): sel's backend for the slot's kind when not DEFAULT;
 * else the tuning's generated choice for it (gemm_algo_jit); else the arch's heuristic table.
 * A generated backend where jgemm_unfit says no runs cuBLASLt (why set). A tuned generated
 * choice is taken whatever cuBLASLt version it was measured against: the tuning reaching here
 * has had its stale choices dropped (tune_choose), and planning asks no library. */
void jgemm_pick_slot(const kljit_problem *pb, const prob_geometry *g, int arch,
                     const gemm_select sel[3], jgemm_slot slot, jgemm_pick *out);

/* Every variant the tests compile (dtypes x outputs x beta x the tile shapes the tuner may try);
 * returns the count (<= cap; JGEMM_VARIANTS_MAX holds them all, which the tests check). */
enum { JGEMM_VARIANTS_MAX = 160 };
int jgemm_variants(jgemm_variant *out, int cap);

/* The variants of G rebuilt in the stage (GOP) the tests compile and run: nn (dX) and tn (dW),
 * both schedules, with and without the teacher's term, fp32 and 16-bit outputs, K slices and
 * the staged epilogue, a cluster of 2; and G formed in registers (gop.regs) in the cooperative
 * schedule, likewise; returns the count (<= cap). */
int jgemm_gop_variants(jgemm_variant *out, int cap);

/* "bf16>f32 b0 128x256 s4 m" (" c2" appended for clusters of 2, " nn" or " tn" for those
 * layouts, " pp" for the pingpong schedule, " es" for the staged epilogue, " aw" one arrival
 * per warp, " cs" streaming C, " l2a" / " l2b" an L2 policy keeping A / B, " k<n>" for slices of
 * n k-blocks, " stats:<form>.<teacher dtype>" for the statistics epilogue, "+e16" after it for
 * E16, " g<fw>" or " g<fw>.<pdt>" for G rebuilt in the stage, " gr<fw>..." in registers) */
void jgemm_describe(const jgemm_variant *v, char *out, size_t cap);

/* The module spec of a variant (family KSPEC_GEMM_SM90: jit_build caches it like the others). */
kspec jgemm_spec(const jgemm_variant *v);

/* The variant's full source: banner, common prelude, PTX helpers, GEMM body. KLJIT_ERR_UNSUPPORTED
 * with the template's sentence for a variant it refuses. */
kljit_status jgemm_render(const jgemm_variant *v, strbuf *out);

/* The statistics epilogue's operands (a variant with stats): the dense teacher, whose rows
 * row0 + r go with C's row r; the records out, M x ceil(N / BN) of the rows' record part (NULL:
 * none computed, as in two-phase backward). */
typedef struct jgemm_epi {
  const void *teacher;
  float *part;
  int64_t row0;
  void *e;      /* stats.e16: where E goes (fp16, row stride lde) instead of C; NULL: C */
  int64_t lde;
  const float *rowstat; /* stats.e16 without part (two-phase backward): the saved row
                         * statistics whose first float is the row's lse, rsf floats a row */
  int rsf;
  const void *bias;     /* stats.bdt: the bias b[N] */
  const void *labels;   /* stats.hard: the call's labels (row0 + r), int64 where labels_is64 */
  int labels_is64;
  const float *hdr;     /* stats.tmode RUNTIME: the plan header (record hdr's inv_t) */
  const void *tbias;    /* stats.tbdt: the online teacher's bias bt[N] */
  const void *ids;      /* stats "sparse" with topk: the sparse teacher's ids (row0 + r) ... */
  const void *vals;     /* ... and, with E16, its values; topk a row */
} jgemm_epi;

/* The GOP variant's operands: a is E' (fp16, A's shape and stride lda) */
typedef struct jgemm_gop {
  const float *fac; /* f: fld floats a row of G (nn: A's rows; tn: A's K rows), one a column
                     * tile */
  int64_t fld;
  const void *p;    /* pdt: the teacher's probabilities, A's shape, row stride ldp (elements) */
  int64_t ldp;
  const float *g;   /* pdt: the teacher's term's scale, one a row of G */
} jgemm_gop;

/* Operands of one launch (device pointers; leading dimensions in elements). */
typedef struct jgemm_args {
  const void *a;  /* nt, nn: [M, K]; tn: [K, M]; row stride lda */
  const void *b;  /* nt: [N, K]; nn, tn: [K, N]; row stride ldb */
  void *c;        /* [M, N], row stride ldc */
  int64_t m, n, k, lda, ldb, ldc;
  float alpha;
  jgemm_epi epi;  /* v->stats: the statistics epilogue's operands */
  jgemm_gop gop;  /* v->gop.on: G's factors and the teacher's term */
  uint32_t *sched; /* KSPEC_GEMM_DYNAMIC: the tile counter pair, zero before the stream's first
                    * launch (each launch leaves it zero: templates/gemm_sm90.cu.lua, TILES) */
} jgemm_args;

/* A loaded GEMM kernel: its function and its interface (the manifest's gemm kernel: arguments,
 * block size, cluster, dynamic shared memory). */
typedef struct jgemm_kernel {
  CUfunction fn;
  kiface_kernel sig;
} jgemm_kernel;

/* The GEMM kernel of a loaded module `mod` by its manifest (rendered, or stored with its cubin
 * and checked by jit_build): parsed, its function found, its dynamic shared-memory limit raised
 * to what it declares. KLJIT_ERR_TEMPLATE when the manifest declares no gemm kernel. */
kljit_status jgemm_load(const drv_table *d, CUmodule mod, const char *manifest,
                        const char *module, jgemm_kernel *out);

/* Checks the TMA rules (lda, ldb multiples of 8; 16-byte aligned A and B), encodes the two
 * tensor maps and launches k (a kl_gemm of variant v, jgemm_load'ed) on `sms` persistent CTAs
 * at most (jgemm_grid_cap), its arguments marshalled and its block shaped by its manifest. */
kljit_status jgemm_launch(const drv_table *d, const jgemm_kernel *k, const jgemm_variant *v,
                          int sms, const jgemm_args *a, CUstream stream);

/* The `sms` to launch kernel k with (jgemm_launch's cap on its persistent grid): sm_count for
 * one CTA per cluster; for clusters of 2, twice the clusters that can be resident at once
 * (cuOccupancyMaxActiveClusters at the kernel's block and shared memory: a pair needs two free
 * SMs of one GPC, so fewer than sm_count / 2 pairs may fit, and a grid of more waits for a
 * second wave), sm_count where the query fails. */
int jgemm_grid_cap(const drv_table *d, const jgemm_kernel *k, int sm_count);

#endif

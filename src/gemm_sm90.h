/* SPDX-License-Identifier: Apache-2.0 */
/* gemm_sm90.h — the generated sm_90a GEMM family (templates/gemm_sm90.cu.lua): its variants,
 * their source, and launching one with its TMA descriptors.
 *
 * Two layouts, in row-major terms:
 *   nt: C[M, N] (+)= alpha A[M, K] B[N, K]^T  (the logits GEMM: A = X chunk rows, B = W, C = Z)
 *   nn: C[M, N] (+)= alpha A[M, K] B[K, N]    (the dX = G W shape; tested, not yet in the loop)
 *   tn: C[M, N] (+)= alpha A[K, M]^T B[K, N]  (the dW = G^T X shape; tested, not yet in the loop)
 * dX and dW of the chunk loop stay on cuBLASLt.
 * KLJIT_GEMM=jit (options.gemm), or a tuning that chose a variant, selects this family for the
 * logits GEMM on sm_90 (jgemm_choose, asked by the recipe for each GEMM: recipe.c).
 */
#ifndef KLJIT_GEMM_SM90_H
#define KLJIT_GEMM_SM90_H

#include "driver.h"
#include "gemm.h"
#include "kiface.h"
#include "problem.h"
#include "spec.h"

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
} jgemm_variant;

/* The heuristic's variant for a dtype pair (no tuning yet): 128 x 256 tiles, 4 stages, M-fastest
 * raster. */
jgemm_variant jgemm_default(kljit_dtype in, kljit_dtype out, int beta);

/* Does the generated logits GEMM serve `pb` on sm_<arch> with chunk logits of dtype `logit`
 * (prob_geometry.logit)? sm_90, 16-bit inputs, H a multiple of 8; *v is then its variant. */
int jgemm_applies(const kljit_problem *pb, int arch, kljit_dtype logit, jgemm_variant *v);

/* The generated variant a plan runs for its GEMM `kind` where the family applies: 1 with *v
 * set, 0 for cuBLASLt. Only the logits GEMM (output dtype `out`, the chunk logits') has one in
 * the chunk loop yet; dX and dW take 0. KLJIT_GEMM_CUBLAS: cuBLASLt; else a generated choice in
 * the tuning (wisdom, the tuner) is taken; else KLJIT_GEMM_JIT takes the default variant. The
 * recipe asks this for each GEMM (recipe.c). */
int jgemm_choose(const kljit_problem *pb, const prob_tuning *t, int arch, gemm_kind kind,
                 kljit_dtype out, kljit_gemm gemm, jgemm_variant *v);

/* Every variant the tests compile (dtypes x outputs x beta x the tile shapes the tuner may try);
 * returns the count (<= cap). */
int jgemm_variants(jgemm_variant *out, int cap);

/* "bf16>f32 b0 128x256 s4 m" (" c2" appended for clusters of 2, " nn" or " tn" for those
 * layouts, " pp" for the pingpong schedule) */
void jgemm_describe(const jgemm_variant *v, char *out, size_t cap);

/* The module spec of a variant (family KSPEC_GEMM_SM90: jit_build caches it like the others). */
kspec jgemm_spec(const jgemm_variant *v);

/* The variant's full source: banner, common prelude, PTX helpers, GEMM body. KLJIT_ERR_UNSUPPORTED
 * with the template's sentence for a variant it refuses. */
kljit_status jgemm_render(const jgemm_variant *v, strbuf *out);

/* Operands of one launch (device pointers; leading dimensions in elements). */
typedef struct jgemm_args {
  const void *a;  /* nt, nn: [M, K]; tn: [K, M]; row stride lda */
  const void *b;  /* nt: [N, K]; nn, tn: [K, N]; row stride ldb */
  void *c;        /* [M, N], row stride ldc */
  int64_t m, n, k, lda, ldb, ldc;
  float alpha;
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
 * at most, its arguments marshalled and its block shaped by its manifest. */
kljit_status jgemm_launch(const drv_table *d, const jgemm_kernel *k, const jgemm_variant *v,
                          int sms, const jgemm_args *a, CUstream stream);

#endif

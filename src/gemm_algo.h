/* SPDX-License-Identifier: Apache-2.0 */
/* gemm_algo.h — tuned cuBLASLt algorithms as plan tuning and as wisdom text (gemm_algo.c).
 *
 * A cublasLtMatmulAlgo_t is 8 opaque 64-bit words that only the cuBLASLt version which produced
 * them may interpret, so each stored choice carries cublasLtGetVersion() of the tuner, and a
 * plan takes it only when the running library reports the same version (otherwise the
 * heuristic's algorithm runs, as untuned). Wisdom text of one choice (docs/wisdom.md):
 *
 *   gemm=<logits|dx|dw>:<rows>:<b0|b1>:lt<version>:<8 x 16 hex digits>
 *   gemm=logits:<rows>:b0:jit:<BN>.<CONSUMERS>.<STAGES>.<RASTER>.<CLUSTER>[.p]   (generated;
 *                                                                       .p: pingpong)
 */
#ifndef KLJIT_GEMM_ALGO_H
#define KLJIT_GEMM_ALGO_H

#include <cublasLt.h>

#include "problem.h"

enum { GEMM_ALGO_TEXT_MAX = 192 };

/* The wisdom value of one choice (without "gemm="). */
void gemm_algo_text(const prob_gemm_choice *c, char out[GEMM_ALGO_TEXT_MAX]);

/* Parses a wisdom value into *c (used = 1). 0, or -1 when it is not a choice's text. */
int gemm_algo_parse(const char *text, prob_gemm_choice *c);

/* Adds a choice to a tuning, replacing one of the same GEMM; -1 when all slots hold others. */
int gemm_algo_add(prob_tuning *t, const prob_gemm_choice *c);

/* The tuning's generated-GEMM choice for GEMM `kind` (a gemm_kind), or NULL. */
const prob_gemm_choice *gemm_algo_generated(const prob_tuning *t, int kind);

/* The tuning's cuBLASLt algorithm for GEMM `kind` (a gemm_kind) on chunks of n rows, when one
 * was tuned with the running cuBLASLt version (dW: the accumulating chunks' choice before the
 * first chunk's): 1 with *algo set, else 0. *stale: the choices refused for their version. */
int gemm_algo_find(const prob_tuning *t, int kind, int64_t n, cublasLtMatmulAlgo_t *algo,
                   int *stale);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_case.h — one GPU test case of the loss against the fp64 CPU reference: draw inputs
 * (never zeros), poison the outputs, run kljit (fused, or forward + backward), compare loss,
 * per-row loss, dX, dW and db with ref_compute on the same rounded inputs, print one line.
 * Shared by the dense and sparse teacher tests (gpu_dense.c, gpu_sparse.c).
 *
 * Tolerances and their reasons:
 *   loss, per-row loss  1e-5 relative: fp32 logits and fp32 row arithmetic against fp64
 *                       (native bf16/fp16 logits: 2e-2, the logits themselves are rounded;
 *                       E16, where the plan's description says it took it: 3e-4, the rows take
 *                       each score back from fp16 x = s - m_tile, an error of up to 2^-11 |x|
 *                       that the row's loss terms carry (weighted by p or q); a row whose
 *                       divergence is small feels it most: on the H200 (run 72) up to 1.3e-4 a
 *                       row at V = 1000, 2.8e-5 for a sum over 37 rows, 1e-6 over 8192 rows)
 *   dX, dW, db          relative Frobenius 1e-5 for fp32 (fp32 GEMMs, fp32 G);
 *                       5e-3 for fp16/bf16: G is rounded to the input dtype for the tensor-core
 *                       GEMMs (2^-9 relative for bf16). 16-bit outputs are compared with the
 *                       reference rounded to their dtype: what the dtype cannot represent
 *                       (fp16 subnormals of a MEAN gradient over a large V) is not an error of
 *                       the computation; nor is the one subnormal step (2^-24) by which an fp16
 *                       output rounded once from fp32 may differ from the exact value rounded.
 */
#ifndef KLJIT_GPU_CASE_H
#define KLJIT_GPU_CASE_H

#include <stdint.h>

#include "kljit.h"

typedef struct gcase {
  kljit_teacher_form form;
  kljit_dtype dt, tdt;  /* input dtype; teacher (dense) or values (sparse) dtype */
  kljit_temperature_mode tmode;
  double T, TT;
  kljit_reduction red;
  int fused;        /* 1: kljit_fused; 0: forward + backward */
  int bias;
  int labels;       /* 0 none, 1 about a fifth ignored, 2 all ignored */
  int64_t n, h, v;
  double zstd;      /* standard deviation of the student logits z */
  uint32_t flags;   /* extra problem flags */
  kljit_dtype gw;   /* grad_weight dtype */
  int accumulate;   /* KLJIT_EXEC_ACCUMULATE_GRAD_WEIGHT on top of a prior dW */
  /* sparse top-K teacher */
  int k;
  kljit_dtype idt;          /* INT32 | INT64 */
  kljit_topk_values values;
  kljit_tail tail;
  int zero_mass_rows;       /* every 4th row has all-zero probabilities (M = 0) */
  int all_ids;              /* K = V: the ids are a permutation of the vocabulary */
  /* loss families (kljit.h): logit caps (0: none) and a padded dense teacher, whose rows are
   * tld >= V elements apart (0: V) with columns past V that would dominate if they were read */
  double softcap, teacher_softcap;
  int64_t tld;
  double hard_weight, soft_weight; /* CE mixing (gcase_base: 0 and 1, the plain divergence) */
  kljit_divergence divergence;      /* gcase_base: FORWARD_KL */
  double beta;                      /* JSD */
  /* the online teacher (form DENSE_HIDDEN): teacher_input [N, ht] and a head of tld rows (0: V;
   * only the first V are used), both in tdt, its logits of standard deviation about 2; with
   * teacher_bias, a bias of tld elements (standard deviation 1) in tdt too */
  int64_t ht;
  int teacher_bias;
  /* issue 29: the skew KLs' alpha (divergence SKEW_*), the CE's label smoothing and z-loss (with
   * hard_weight), row weights (KLJIT_FLAG_ROW_WEIGHTS: drawn in [0, 2], every 7th row 0), and
   * the optional outputs (row_loss and loss_parts requested and checked against the reference's
   * per-row loss and soft and hard parts, with the loss's tolerance). TVD cases with a dense
   * array teacher get it moved off p = q (ref_separate_ties): a 16-bit case of the online
   * teacher keeps its ties, which the 16-bit tolerance covers. */
  double skew_alpha;
  double label_smoothing, z_loss;
  int row_weights;
  int outputs;
  /* kljit_args.divisor (0: none, the kept rows): the reference is then scaled by kept / divisor;
   * grad_weight_accum (0: KLJIT_PROBLEM_INIT's) */
  double divisor;
  kljit_grad_weight_accum accum;
} gcase;

/* A dense-probs, bf16, batchmean, fused case of 37 x 64 x 1000 with labels. */
gcase gcase_base(void);

/* Runs the case and checks it against the tolerances above: TH_PASS, TH_FAIL or TH_SKIP. */
int gcase_check(const gcase *c);

/* Runs the case and returns kljit's scalar loss (or the sum of the per-row losses) in *loss,
 * without the reference: for comparing two kljit paths on the same seed. */
int gcase_loss(const gcase *c, uint64_t seed, double *loss);

#endif

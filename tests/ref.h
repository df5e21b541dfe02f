/* SPDX-License-Identifier: Apache-2.0 */
/* ref.h — the double-precision CPU reference: the oracle every GPU test compares against.
 *
 * It implements the contract of include/kljit.h (the math section, every teacher form, tail
 * mode, temperature, reduction, ignore_index, bias, T^2 scaling, divergence, CE mixing with
 * label smoothing and z-loss, row weights, softcapping, padded and online teachers) directly
 * and slowly: full logits in double, no chunking, no online softmax. Inputs are doubles (tests
 * convert their fp16/bf16 device values to double first, so both sides see the same numbers).
 */
#ifndef KLJIT_REF_H
#define KLJIT_REF_H

#include <stdint.h>

#include "kljit.h"

typedef struct ref_inputs {
  const kljit_problem *pb;  /* shapes, forms, options (dtypes are ignored: all double) */
  int64_t rows;             /* N */
  const double *x;          /* [N,H] */
  const double *w;          /* [V,H] */
  const double *b;          /* [V] or NULL */
  const int64_t *labels;    /* [N] or NULL */
  const double *teacher;    /* dense: [N,V] in the form pb->teacher says */
  const int64_t *ids;       /* sparse: [N,K] */
  const double *vals;       /* sparse: [N,K] probs or log-probs per pb->topk_values */
  /* DENSE_HIDDEN: the online teacher head, xt [N,Ht], wt [Vt,Ht], bt [Vt] (with
   * KLJIT_FLAG_TEACHER_BIAS, else NULL); Ht = pb->teacher_hidden, Vt = pb->teacher_vocab or V.
   * The dense forms' teacher rows lie pb->teacher_ld apart (0: Vt). */
  const double *teacher_x;
  const double *teacher_w;
  const double *teacher_b;
  double temperature;       /* used instead of pb->temperature when RUNTIME */
  /* Upstream gradient: for reductions other than NONE a scalar (grad_output[0]); for NONE a
   * per-row vector [N]. NULL means 1 (scalar) / all ones (NONE). */
  const double *grad_output;
  /* Rows per block (1..16); 0 picks it from V. The result does not depend on it (the tests
   * check that); it exists so that they can force block boundaries on small shapes. */
  int64_t block_rows;
  /* KLJIT_FLAG_ROW_WEIGHTS: w_i [N] multiplying row i's loss and gradient; NULL: all 1 (the
   * flag is not needed: the reference takes the weights it is given). */
  const double *row_weights;
} ref_inputs;

typedef struct ref_outputs {
  double loss;        /* reduced loss (SUM/BATCHMEAN/MEAN; for NONE the sum of row_loss) */
  double *row_loss;   /* [N] per-row loss l_i (kljit.h) before the reduction, or NULL */
  double *dx;         /* [N,H] or NULL */
  double *dw;         /* [V,H] or NULL (overwritten) */
  double *db;         /* [V] or NULL */
  double *dlogits;    /* [N,V] dL/dz, or NULL */
  int64_t rows_kept;
  /* the soft and hard parts of `loss`: c sum_i w_i ws t2 D_i and c sum_i w_i wh CE_i */
  double loss_soft, loss_hard;
} ref_outputs;

/* Returns 0 on success, nonzero (with a message on stderr) for a problem it cannot compute. */
int ref_compute(const ref_inputs *in, ref_outputs *out);

/* For GPU tests of KLJIT_DIVERGENCE_TVD, whose gradient jumps where p_v = q_v: an fp32 kernel
 * and this fp64 reference may take different sides of a column within rounding of the tie, and
 * one such column moves a gradient by more than the tests' tolerances. Moves the dense
 * teacher's values `teacher` (the form and layout in->pb and in->teacher describe; rounded to
 * `dtype`, as the device will hold them) until every kept row's columns with p > 0 have
 * |log p - log q| >= margin. The array forms only (not DENSE_HIDDEN). Returns the number of
 * columns still closer than that (0 on success), or -1 when the inputs are invalid. */
int64_t ref_separate_ties(const ref_inputs *in, double *teacher, kljit_dtype dtype,
                          double margin);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_methods.h — the four methods kljit-bench compares, each as setup / step / teardown
 * over the shared inputs of an mx_run. A step is one training step's loss: forward and
 * backward, loss in r->loss, dX in r->dx, dW in r->dw (batchmean, T = 1, no ignored rows).
 * Setup allocates everything the method needs and step allocates nothing, so the free-memory
 * samples taken after setup and after each step see the method's peak. */
#ifndef KLJIT_MATRIX_METHODS_H
#define KLJIT_MATRIX_METHODS_H

#include "matrix_run.h"

typedef struct mx_state {
  int64_t chunk;   /* rows per chunk the method runs (rows for dense_unfused) */
  void *z;         /* logits: [rows, ld] (unfused) or [chunk, ld] (chunked_forward), zdt */
  void *g;         /* unfused: G [rows, ld] dt */
  void *dense;     /* unfused with a sparse teacher: the teacher expanded, [rows, V] dt */
  void *q;         /* chunked_forward: softmax kept for backward, then G in place [rows, ld] */
  float *row_loss; /* [rows] */
  float *row_mass; /* [rows]: the teacher's mass per row (chunked_forward's backward) */
  double gscale;   /* G is stored times this power of two (see grad_scale) */
  kljit_context *ctx;
  kljit_plan *plan;
  kljit_args args;
} mx_state;

int mx_method_setup(mx_run *r, mx_state *s);
int mx_method_step(mx_run *r, mx_state *s);
void mx_method_teardown(mx_run *r, mx_state *s);

/* The GEMMs the method runs per step (its floor's shape). */
void mx_method_floor(const mx_run *r, const mx_state *s, mx_floor *f);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* bench_loss.h — what bench_loss's modes share (bench_loss.c: the shapes and the online
 * teacher; loss_gemms.c: each GEMM's backend switched per call). A developer's benchmark: a
 * failed call ends the run with its message. */
#ifndef KLJIT_BENCH_LOSS_H
#define KLJIT_BENCH_LOSS_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_time.h"
#include "kljit.h"

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)
#define KO(x)                                                                        \
  do {                                                                               \
    kljit_status s_ = (x);                                                           \
    if (s_ != KLJIT_SUCCESS) {                                                       \
      fprintf(stderr, "%s: %s\n", #x, kljit_last_error());                           \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

enum { BENCH_FLUSH_BYTES = 256 << 20 };

/* The options every mode reads (bench_loss.c's command line). */
typedef struct bench_opts {
  int repeats;      /* timed repeats (rounds, for the round-robin modes) */
  int warmup;
  double logit_std; /* the GEMM mode's and the online teacher's input scale */
  /* --gemms */
  int lt_algos;     /* cuBLASLt algorithms 0 .. lt_algos - 1 of its list, per GEMM */
  const char *jit[3]; /* the generated variants tried, per GEMM kind (comma-separated) */
  int all_jit;      /* also every GEMM generated at once (its default variants) */
} bench_opts;

/* A small problem with V = v and the bench's teacher on context ctx against the fp64 reference:
 * the relative errors of the loss, dX and dW. 0, or 1 when it could not run. */
int bench_validate(kljit_context *ctx, int64_t v, double *loss_err, double *dx_err,
                   double *dw_err);

/* --gemms: the fused call of N x H x V (bf16, dense teacher probabilities, fp32 dW) with each
 * GEMM's backend switched per call, round-robin (loss_gemms.c). header: print the CSV header. */
void bench_gemms(const bench_opts *o, int64_t n, int64_t h, int64_t v, int header);

/* The GPU's name and the driver's version, for the CSV rows. */
void bench_gpu(char *name, size_t cap, int *driver);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* plan.h — kljit_plan: an immutable, executable plan for one problem on one context.
 *
 * Invariants: after kljit_plan_create returns, nothing in the plan changes (its GEMM operations
 * are prepared, its kernels resolved and checked against their manifests), so executes may run
 * concurrently.
 */
#ifndef KLJIT_PLAN_H
#define KLJIT_PLAN_H

#include "context.h"
#include "gemm.h"
#include "gemm_sm90.h"
#include "kiface.h"
#include "problem.h"

/* Floats of the header kl_setup writes (workspace in fused mode, start of `saved` otherwise). */
enum { PLAN_HDR_FLOATS = 8 };

/* Floats of `saved` for `rows` rows: the header, then 4 row statistics a row
 * (templates/dense_rows.cu.lua), 8 with the CE's lse or the reverse KL's / JSD's row total. */
int64_t plan_saved_floats(const kljit_problem *pb, int64_t rows);

/* A loaded kernel and its interface (a kernel of iface_rows or iface_helpers). */
typedef struct plan_kernel {
  CUfunction fn;
  const kiface_kernel *sig;
} plan_kernel;

struct kljit_plan {
  kljit_context *ctx;
  kljit_problem pb;
  prob_geometry geom;
  gemm_op gemm[3];         /* by gemm_kind, prepared for the plan's chunk rows */
  gemm_op gemm_teacher;    /* the online teacher's logits GEMM (DENSE_HIDDEN), else zeroed */
  gemm_op gemm_dx_slice[2]; /* geom.dx_split > 1: dX of one slice of V (fp32 out), the last */
  gemm_op gemm_dw32;       /* geom.dw_auto: the dW GEMM into the fp32 buffer, for the calls
                            * that take it (prob_dw_in_workspace); else zeroed */
  ctx_module *mod_rows, *mod_helpers;
  kiface_manifest iface_rows, iface_helpers; /* the modules' manifests, as loaded */
  plan_kernel kernel[KSTEP_COUNT];           /* by step; sig NULL: the plan has none */
  /* the generated logits GEMM (gemm_sm90.h), or NULL: cuBLASLt's gemm[GEMM_LOGITS]. Launched
   * by jgemm_launch, not plan_launch: its TMA descriptors are by-value kernel parameters */
  ctx_module *mod_gemm;
  CUfunction gemm_fn;
  jgemm_variant gemm_logits;
  char *description;
};

/* A plan with a given tuning (kljit_plan_create after choosing it; the tuner for each
 * candidate). `origin` says where the tuning came from (the description's "tuning from" line);
 * t0 is when planning started (util_now). */
kljit_status plan_create_tuned(kljit_context *ctx, const kljit_problem *problem,
                               const prob_tuning *chosen, const char *origin, double t0,
                               kljit_plan **out);

/* cuLaunchKernel of the plan's kernel for `step` on `stream`, (gx, gy) blocks of `threads`, its
 * arguments taken from `args` by the roles of the kernel's manifest (src/kiface.h);
 * KLJIT_ERR_INTERNAL when the plan has no kernel for the step. */
kljit_status plan_launch(const kljit_plan *p, kiface_step step, unsigned gx, unsigned gy,
                         unsigned threads, const kargs *args, void *stream);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* nccl.c — NCCL at run time (see nccl.h) and kljit_fused_nccl: the sharded fused step with its
 * collectives, all on the caller's stream. kljit sets nothing in NCCL's environment (the user
 * sets NCCL_NVLS_ENABLE=0 where wanted).
 */
#include "nccl.h"

#include <dlfcn.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "exec.h"

kljit_status nccl_load_from(const char *library, nccl_table *out) {
  if (!library || !out)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "nccl_load_from: %s is NULL",
                   library ? "out" : "library");
  memset(out, 0, sizeof *out);
  void *lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    return err_set(KLJIT_ERR_UNSUPPORTED,
                   "NCCL is not available: dlopen(%s) failed (%s); install NCCL 2.x or use the "
                   "split API (kljit_shard_stats, kljit_shard_finish) with your own collectives",
                   library, why ? why : "unknown error");
  }
  static const struct {
    const char *sym;
    size_t off;
  } syms[] = {{"ncclAllGather", offsetof(nccl_table, AllGather)},
              {"ncclAllReduce", offsetof(nccl_table, AllReduce)},
              {"ncclCommCount", offsetof(nccl_table, CommCount)},
              {"ncclGetErrorString", offsetof(nccl_table, GetErrorString)}};
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *f = dlsym(lib, syms[i].sym);
    if (!f) {
      dlclose(lib);
      memset(out, 0, sizeof *out);
      return err_set(KLJIT_ERR_UNSUPPORTED, "NCCL library %s has no symbol %s (too old?)", library,
                     syms[i].sym);
    }
    memcpy((char *)out + syms[i].off, &f, sizeof f);
  }
  return KLJIT_SUCCESS; /* the library stays loaded for the life of the process */
}

static nccl_table table;
static kljit_status load_status;
static char load_error[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load_once(void) {
  load_status = nccl_load_from("libnccl.so.2", &table);
  if (load_status != KLJIT_SUCCESS)
    snprintf(load_error, sizeof load_error, "%s", kljit_last_error());
}

kljit_status nccl_load(const nccl_table **out) {
  pthread_once(&once, load_once);
  if (load_status != KLJIT_SUCCESS) return err_set(load_status, "%s", load_error);
  *out = &table;
  return KLJIT_SUCCESS;
}

static kljit_status nccl_check(const nccl_table *n, nccl_result r, const char *what) {
  if (r == 0) return KLJIT_SUCCESS;
  return err_set(KLJIT_ERR_NCCL, "kljit_fused_nccl: %s failed: NCCL error %d (%s)", what, r,
                 n->GetErrorString ? n->GetErrorString(r) : "?");
}

static int nccl_dtype(kljit_dtype dt) {
  return dt == KLJIT_FP32 ? NCCL_FLOAT32 : dt == KLJIT_FP16 ? NCCL_FLOAT16 : NCCL_BFLOAT16;
}

kljit_status nccl_agree_on_check(const nccl_table *n, const kljit_plan *plan, void *comm,
                                 void *stream, void *scratch, int bad, int *any_bad) {
  const drv_table *d = plan->ctx->drv;
  const CUstream s = (CUstream)stream;
  const CUdeviceptr flag = (CUdeviceptr)(uintptr_t)scratch;
  int32_t verdict = 0;
  const kljit_status entered = ctx_enter(plan->ctx);
  kljit_status st = entered;
  if (st == KLJIT_SUCCESS)
    st = drv_check(d, d->cuMemsetD32Async(flag, (unsigned)bad, 1, s), "cuMemsetD32Async");
  if (st == KLJIT_SUCCESS)
    st = nccl_check(n, n->AllReduce(scratch, scratch, 1, NCCL_INT32, NCCL_MAX, comm, stream),
                    "ncclAllReduce of the input check's verdict");
  if (st == KLJIT_SUCCESS)
    st = drv_check(d, d->cuMemcpyDtoHAsync(&verdict, flag, sizeof verdict, s),
                   "cuMemcpyDtoHAsync");
  if (st == KLJIT_SUCCESS) st = drv_check(d, d->cuStreamSynchronize(s), "cuStreamSynchronize");
  if (entered == KLJIT_SUCCESS) ctx_leave(plan->ctx);
  *any_bad = verdict != 0;
  return st;
}

kljit_status kljit_fused_nccl(const kljit_plan *plan, void *stream, const kljit_args *args,
                              void *comm) {
  err_clear();
  const char *who = "kljit_fused_nccl";
  if (!plan) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: plan is NULL", who);
  if (!args) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: args is NULL", who);
  if (!comm) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: nccl_comm is NULL", who);
  /* every check that can fail on one rank alone comes before the first collective */
  prob_workspace w;
  kljit_status st = exec_validate_fused(plan, args, who, &w);
  if (st != KLJIT_SUCCESS) return st;
  const nccl_table *n = NULL;
  if ((st = nccl_load(&n)) != KLJIT_SUCCESS) return err_prefix(st, "%s: ", who);
  int count = 0;
  if ((st = nccl_check(n, n->CommCount(comm, &count), "ncclCommCount"))) return st;
  const kljit_problem *pb = &plan->pb;
  if (count != pb->shards)
    return err_set(KLJIT_ERR_UNSUPPORTED,
                   "%s: the communicator has %d ranks, the problem has shards = %d", who, count,
                   (int)pb->shards);
  if (pb->shards == 1) return kljit_fused(plan, stream, args); /* nothing to exchange */
  /* this rank's records, then the gathered ones: `rows` records of the plan's record size */
  const size_t nrec = (size_t)args->rows * (size_t)plan->layout.part;
  float *local = (float *)((char *)args->workspace + w.stats);
  float *all = local + nrec;
  st = kljit_shard_stats(plan, stream, args, local);
  if (pb->flags & KLJIT_FLAG_CHECK_INPUTS) {
    /* a bad teacher slice fails on its rank alone: every rank learns of it and returns */
    if (st != KLJIT_SUCCESS && st != KLJIT_ERR_BAD_INPUT_DATA) return st;
    const int mine = st == KLJIT_ERR_BAD_INPUT_DATA;
    int any = 0;
    kljit_status ag = nccl_agree_on_check(n, plan, comm, stream, all, mine, &any);
    if (ag != KLJIT_SUCCESS) return ag;
    if (mine) return st; /* kljit_shard_stats' message names the row and the defect */
    if (any)
      return err_set(KLJIT_ERR_BAD_INPUT_DATA,
                     "%s: another rank's inputs failed KLJIT_FLAG_CHECK_INPUTS (that rank's "
                     "status names the row and the defect); nothing was written", who);
  } else if (st != KLJIT_SUCCESS) {
    return st;
  }
  if ((st = nccl_check(n, n->AllGather(local, all, nrec, NCCL_FLOAT32, comm, stream),
                       "ncclAllGather of the row statistics")))
    return st;
  int rounds = 1;
  if ((st = kljit_plan_shard_rounds(plan, &rounds))) return st;
  if (rounds == 2) { /* REVERSE_KL, JSD, TVD, skew KLs: this rank's part of S, then again */
    if ((st = kljit_shard_sums(plan, stream, args, all, pb->shards, local))) return st;
    if ((st = nccl_check(n, n->AllGather(local, all, nrec, NCCL_FLOAT32, comm, stream),
                         "ncclAllGather of the row totals")))
      return st;
  }
  if ((st = kljit_shard_finish(plan, stream, args, all, pb->shards))) return st;
  if ((st = nccl_check(
           n, n->AllReduce(args->loss, args->loss, 1, NCCL_FLOAT32, NCCL_SUM, comm, stream),
           "ncclAllReduce of the loss")))
    return st;
  /* the optional outputs (absent from a shorter struct): every rank wrote its parts */
  const int outs = args->struct_size >= offsetof(kljit_args, loss_parts) + sizeof(float *);
  if (outs && args->row_loss &&
      (st = nccl_check(n, n->AllReduce(args->row_loss, args->row_loss, (size_t)args->rows,
                                       NCCL_FLOAT32, NCCL_SUM, comm, stream),
                       "ncclAllReduce of the per-row losses")))
    return st;
  if (outs && args->loss_parts &&
      (st = nccl_check(n, n->AllReduce(args->loss_parts, args->loss_parts, 2, NCCL_FLOAT32,
                                       NCCL_SUM, comm, stream),
                       "ncclAllReduce of the loss's parts")))
    return st;
  if (!(args->flags & KLJIT_EXEC_NO_GRAD_INPUT))
    st = nccl_check(
        n,
        n->AllReduce(args->grad_input, args->grad_input, (size_t)args->rows * (size_t)pb->hidden,
                     nccl_dtype(pb->input_dtype), NCCL_SUM, comm, stream),
        "ncclAllReduce of dX");
  return st;
}

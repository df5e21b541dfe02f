/* exec.h — what the chunk loops (exec.c) share with checked mode (exec_check.c): the constants
 * of one call and the kernel launcher. */
#ifndef KLJIT_EXEC_H
#define KLJIT_EXEC_H

#include "plan.h"

/* One call's constants, shared by the loops. */
typedef struct exec_call {
  const kljit_plan *p;
  const kljit_args *a;
  void *stream;
  char *ws;
  prob_workspace w;
  float *hdr, *rowstat;
  int labels_is64;
  long long ignore;
  size_t in_sz;
  int skip_gemms;
  int sparse;          /* the plan's rows module is the sparse top-K one */
  float gmult, galpha; /* G is stored times gmult (fp16 range); the GEMMs undo it (galpha) */
  float *stats_out;    /* kljit_shard_stats: merged per-row records out, [rows][8] */
  const float *all;    /* kljit_shard_finish: the shards' records [nrec][rows][8] */
  kargs k;             /* every kernel argument of the call, by role (src/kiface.h) */
} exec_call;

/* Fills c->k from the rest of *c (set first): what stays the same for the whole call. */
void exec_call_args(exec_call *c, int nrec);

/* The argument checks of kljit_fused (kljit_fused_nccl runs them before any collective). */
kljit_status exec_validate_fused(const kljit_plan *p, const kljit_args *a, const char *who);

/* cuLaunchKernel of the plan's kernel for `step` on `stream`, (gx, gy) blocks of `threads`, its
 * arguments taken from `args` by the roles of the kernel's manifest. */
kljit_status exec_launch(const kljit_plan *p, kiface_step step, unsigned gx, unsigned gy,
                         unsigned threads, const kargs *args, void *stream);

/* Checked mode: runs the plan's check kernel over every kept row of the call, waits for it and
 * returns KLJIT_ERR_BAD_INPUT_DATA naming the first bad row and what is wrong with it. Runs
 * before anything is written. */
kljit_status exec_check_inputs(const exec_call *c);

#endif

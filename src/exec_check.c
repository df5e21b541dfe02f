/* SPDX-License-Identifier: Apache-2.0 */
/* exec_check.c — checked mode (KLJIT_FLAG_CHECK_INPUTS): validate the teacher (and the row
 * weights) on the device before a call writes anything.
 *
 * The rows module's check kernel runs one block per row and folds every bad row into one 64-bit
 * word, (row << 8) | kind, by atomicMin: the report names the smallest bad row, whatever the
 * block order. The verdict is read back through the caller's stream, which is the one place a
 * kljit call waits for the GPU (documented with the flag).
 */
#include <stdint.h>

#include "exec_check.h"

/* Kinds written by kl_dense_check / kl_sparse_check (templates); 5 is a row's weight; 6-8 are
 * the online teacher's, whose index is a token row (6) or a vocabulary row of its head (7, 8). */
static const char *kind_text(unsigned kind) {
  switch (kind) {
  case 1: return "an id outside [0, vocab)";
  case 2: return "a duplicate id";
  case 3: case 6: case 7: case 8: return "a NaN or infinite value";
  case 4: return "a negative probability";
  case 5: return "a negative, NaN or infinite weight";
  }
  return "an unknown defect";
}

static const char *kind_tensor(const kljit_plan *p, unsigned kind) {
  switch (kind) {
  case 5: return "row_weights row";
  case 6: return "teacher_input row";
  case 7: return "teacher_weight row";
  case 8: return "teacher_bias element";
  }
  return p->pb.teacher == KLJIT_TEACHER_SPARSE_TOPK ? "teacher_ids/teacher_values row"
                                                    : "teacher row";
}

kljit_status exec_check_inputs(const kljit_plan *p, const kargs *k, int64_t rows, void *stream) {
  const drv_table *d = p->ctx->drv;
  CUdeviceptr flag = (CUdeviceptr)(uintptr_t)k->check_flag;
  CUstream s = (CUstream)stream;
  kljit_status st = drv_check(d, d->cuMemsetD32Async(flag, 0xFFFFFFFFu, 2, s), "cuMemsetD32Async");
  if (st != KLJIT_SUCCESS) return st;
  /* one block per row; the online teacher's check also walks its head's V rows */
  int64_t grid = rows;
  if (p->pb.teacher == KLJIT_TEACHER_DENSE_HIDDEN && p->pb.vocab > grid) grid = p->pb.vocab;
  st = plan_launch(p, KSTEP_CHECK, (unsigned)grid, 1, k, stream);
  uint64_t verdict = 0;
  if (st == KLJIT_SUCCESS)
    st = drv_check(d, d->cuMemcpyDtoHAsync(&verdict, flag, sizeof verdict, s),
                   "cuMemcpyDtoHAsync");
  if (st == KLJIT_SUCCESS) st = drv_check(d, d->cuStreamSynchronize(s), "cuStreamSynchronize");
  if (st != KLJIT_SUCCESS) return st;
  if (verdict == UINT64_MAX) return KLJIT_SUCCESS;
  const unsigned long long row = (unsigned long long)(verdict >> 8);
  const unsigned kind = (unsigned)(verdict & 0xFF);
  return err_set(KLJIT_ERR_BAD_INPUT_DATA, "checked mode: %s %llu has %s (nothing was written)",
                 kind_tensor(p, kind), row, kind_text(kind));
}

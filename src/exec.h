/* SPDX-License-Identifier: Apache-2.0 */
/* exec.h — what the execute paths offer the NCCL driver (nccl.c): the argument checks; and
 * kljit_scale (scale.c) the grid of the scale kernel. */
#ifndef KLJIT_EXEC_H
#define KLJIT_EXEC_H

#include "plan.h"

/* The argument checks of kljit_fused (kljit_fused_nccl runs them before any collective), and
 * the call's workspace layout into *w. */
kljit_status exec_validate_fused(const kljit_plan *p, const kljit_args *a, const char *who,
                                 prob_workspace *w);

/* The grid of kl_scale (helpers.cu.lua) over `count` elements with blocks of `threads` (its
 * manifest's): 8 elements a thread, at most 8 blocks an SM (sm_count 0: 132), at least 1. */
unsigned exec_scale_grid(int64_t count, unsigned threads, int sm_count);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* exec.h — what the execute paths offer the NCCL driver (nccl.c): the argument checks. */
#ifndef KLJIT_EXEC_H
#define KLJIT_EXEC_H

#include "plan.h"

/* The argument checks of kljit_fused (kljit_fused_nccl runs them before any collective), and
 * the call's workspace layout into *w. */
kljit_status exec_validate_fused(const kljit_plan *p, const kljit_args *a, const char *who,
                                 prob_workspace *w);

#endif

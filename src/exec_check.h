/* SPDX-License-Identifier: Apache-2.0 */
/* exec_check.h — checked mode (KLJIT_FLAG_CHECK_INPUTS): the teacher validated on the device
 * before a call writes anything. Below the chunk loops (exec.c), which call it first. */
#ifndef KLJIT_EXEC_CHECK_H
#define KLJIT_EXEC_CHECK_H

#include "plan.h"

/* Runs the plan's check kernel over the `rows` rows of the call (arguments from `k`: the
 * teacher, labels and the verdict word check_flag, in the workspace), waits for it and returns
 * KLJIT_ERR_BAD_INPUT_DATA naming the first bad row and what is wrong with it. */
kljit_status exec_check_inputs(const kljit_plan *p, const kargs *k, int64_t rows, void *stream);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* layout.h — a problem's records without a plan (see layout.c); kljit_problem_layout. */
#ifndef KLJIT_LAYOUT_H
#define KLJIT_LAYOUT_H

#include "problem.h"

/* The records' layout (kiface_layout: their floats) that the modules of a plan of the
 * validated problem `pb` with tuning `t` (NULL: the heuristics' on sm_80, without the
 * environment) declare. Renders (through the memo); no GPU, no compile. */
kljit_status layout_of_problem(const kljit_problem *pb, const prob_tuning *t,
                               kiface_layout *out);

#endif

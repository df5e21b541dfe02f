/* SPDX-License-Identifier: Apache-2.0 */
/* tune_measure.h — timing tuning candidates on the GPU: the planner's layer above building
 * (it builds a plan per candidate through plan_create_tuned and runs it).
 */
#ifndef KLJIT_TUNE_MEASURE_H
#define KLJIT_TUNE_MEASURE_H

#include "plan.h"
#include "tune.h"

/* Times the candidates on ctx's GPU and fills *winner (identity, tuning, rigor, rows, ms). `cb`
 * may be NULL. */
kljit_status tune_measure(kljit_context *ctx, const kljit_problem *pb, int64_t rows,
                          kljit_plan_rigor rigor, kljit_tune_callback cb, void *user,
                          wisdom_entry *winner);

#endif

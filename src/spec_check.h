/* SPDX-License-Identifier: Apache-2.0 */
/* spec_check.h — whether the templates accept a spec, asked of the templates themselves.
 *
 * The wisdom parser, the tuner's candidates and kljit_plan_check accept a tuning only when the
 * family template's own checks (its reject() prologue) accept the spec it leads to: one rule
 * set, in the template, with no copy of it in C. The verdicts of accepted specs are memoized
 * per process (spec_memo.h: a wisdom file repeats the same few specs across GPUs and token
 * buckets), and a spec rendered in this process is known accepted.
 */
#ifndef KLJIT_SPEC_CHECK_H
#define KLJIT_SPEC_CHECK_H

#include "spec.h"

/* KLJIT_SUCCESS when the spec's template accepts it, else its rejection (KLJIT_ERR_UNSUPPORTED
 * with the template's sentence) or a render failure. Thread-safe. */
kljit_status kspec_check(const kspec *k);

#endif

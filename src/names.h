/* SPDX-License-Identifier: Apache-2.0 */
/* names.h — the one table of names for each public enum (messages, plan descriptions, the
 * templates' parameter values, wisdom keys). */
#ifndef KLJIT_NAMES_H
#define KLJIT_NAMES_H

#include <stddef.h>

#include "kljit.h"

const char *names_dtype(kljit_dtype dt);      /* "FP32", "BF16", ... ("unknown") */
const char *names_dtype_tag(kljit_dtype dt);  /* "f32" | "f16" | "bf16" | "i32" | "i64" */
size_t names_dtype_size(kljit_dtype dt);      /* bytes of one element, 0 if unknown */
const char *names_rigor(kljit_plan_rigor r);  /* "estimate", ..., "wisdom-only" */
const char *names_reduction(kljit_reduction r); /* "sum" | "batchmean" | "mean" | "none" */
const char *names_tail(kljit_tail t);         /* "none" | "renorm" | "bucket" */
const char *names_teacher(kljit_teacher_form f); /* "probs" | "logprobs" | "logits" | "topk" |
                                                  * "hidden" */
/* The reverse: the enum value a name stands for, 0 for none (out-of-range values name "?"). */
int names_find_rigor(const char *s);
int names_find_reduction(const char *s);
int names_find_tail(const char *s);
int names_find_teacher(const char *s);
const char *names_topk_values(kljit_topk_values v); /* "probs" | "logprobs" */
const char *names_tmode(kljit_temperature_mode m);  /* "const" | "runtime" */
/* "forward" | "reverse" | "jsd" | "tvd" | "skew-forward" | "skew-reverse" ("?"), and back (0
 * for none): the SHAPE grammar's and wisdom's div= values */
const char *names_divergence(kljit_divergence d);
int names_find_divergence(const char *s);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* wisdom.h — wisdom: the tuned choices of plans, keyed by GPU, kljit version, problem and token
 * bucket; its text format (docs/wisdom.md) and the process-wide store.
 *
 * Invariants:
 *  - An entry is identified by (gpu, arch, sms, problem, bucket); the store and every set
 *    wisdom_parse returns hold at most one entry per identity, in identity order. Merging
 *    keeps the higher rigor, then the lower time per token, then the entry already there.
 *  - Every entry in a set has passed prob_validate (its problem) and its tuning makes a recipe
 *    as given whose modules the templates accept (recipe_make, recipe_check): wisdom can make
 *    a plan slow, never make it index out of range.
 *  - A text is accepted or rejected whole: a bad header (foreign, other format, other kljit
 *    version) or any bad line leaves the store as it was.
 *  - The store is guarded by one mutex; the system and user files are read into it once per
 *    process, on the first use of wisdom (kljit_wisdom_forget ends that too).
 */
#ifndef KLJIT_WISDOM_H
#define KLJIT_WISDOM_H

#include "problem.h"

enum { WISDOM_FORMAT = 1, WISDOM_GPU_MAX = 128, WISDOM_PROBLEM_MAX = 320, WISDOM_EXTRA_MAX = 320 };

typedef struct wisdom_entry {
  char gpu[WISDOM_GPU_MAX];         /* GPU model, as cuDeviceGetName gives it */
  int arch;                         /* sm_<arch> of that GPU */
  int sms;                          /* its multiprocessor count */
  char problem[WISDOM_PROBLEM_MAX]; /* wisdom_problem_key */
  int64_t bucket;                   /* a power of two: serves bucket/2 < tokens <= bucket */
  prob_tuning tune;
  kljit_plan_rigor rigor;       /* ESTIMATE (hand-written), MEASURE or EXHAUSTIVE */
  int64_t rows;                 /* tokens the time was measured at */
  double ms;                    /* median time of one call at `rows` tokens */
  char extra[WISDOM_EXTRA_MAX]; /* wisdom_problem_extra of the problem that was tuned */
} wisdom_entry;

typedef struct wisdom_set {
  wisdom_entry *e;
  size_t n, cap;
} wisdom_set;

/* The canonical problem text of an entry ("V=128256 H=4096 in=bf16 teacher=probs tdt=bf16
 * tmode=const flags=-"): the fields that change the kernels or their speed. */
void wisdom_problem_key(const kljit_problem *pb, char out[WISDOM_PROBLEM_MAX]);

/* The rest of a problem that shapes its kernels but not their speed ("T=2 tt=0 eps=1e-20
 * reduction=batchmean t2=0 gw=f32 accum=fp32"): not part of an entry's identity, recorded so
 * that precompiling from wisdom compiles the very modules of the problem that was tuned. */
void wisdom_problem_extra(const kljit_problem *pb, char out[WISDOM_EXTRA_MAX]);

/* The token bucket of `rows` tokens: the smallest power of two >= rows (>= 1). */
int64_t wisdom_bucket(int64_t rows);

/* Parses a wisdom text into `out` (emptied first). KLJIT_ERR_WISDOM with "<origin>:<line>:
 * <why>" on any error, and then `out` is empty; *stale (may be NULL) is set to 1 when the text
 * is kljit wisdom of another format or kljit version (safe to overwrite), else 0. */
kljit_status wisdom_parse(const char *text, const char *origin, wisdom_set *out, int *stale);

/* The same, except that the entries stay in the text's order and may repeat an identity: for a
 * merge into the store, which orders and deduplicates the union once (wisdom_merge_set_take). */
kljit_status wisdom_parse_entries(const char *text, const char *origin, wisdom_set *out,
                                  int *stale);

/* Appends the text of `s` (header, then entries sorted by identity) to `out`. */
kljit_status wisdom_format(const wisdom_set *s, strbuf *out);

/* Merges one entry into a set (see the invariants). O(n): for many, wisdom_merge_set. */
kljit_status wisdom_merge(wisdom_set *s, const wisdom_entry *e);

/* Merges every entry of `from` into `into`, as wisdom_merge one by one would (entries already
 * in `into` win ties), in O((n + m) log(n + m)). */
kljit_status wisdom_merge_set(wisdom_set *into, const wisdom_set *from);
/* The same, but `from` is used up (emptied): its storage may become into's, which spares a
 * copy of the larger set. On failure either set may hold entries of both. */
kljit_status wisdom_merge_set_take(wisdom_set *into, wisdom_set *from);
void wisdom_set_free(wisdom_set *s);

/* Room for n entries in s (the parser fills them in place). */
kljit_status wisdom_set_reserve(wisdom_set *s, size_t n);

/* Leaves one entry per identity, in identity order: the one wisdom_merge calls in set order
 * would keep (the first of the best). */
kljit_status wisdom_normalize(wisdom_set *s);

/* The indices of s's entries in identity order (ties: set order), as *order (malloc'd). */
kljit_status wisdom_identity_order(const wisdom_set *s, size_t **order);

/* One entry line, without its newline (also used in messages). */
kljit_status wisdom_entry_text(const wisdom_entry *e, strbuf *out);

/* ---- the process-wide store ---------------------------------------------------------------- */

typedef enum wisdom_match {
  WISDOM_EXACT_BUCKET = 1,  /* only the entry of `bucket` */
  WISDOM_NEAREST_BUCKET = 2 /* the entry whose bucket is nearest `bucket` (ties: the larger) */
} wisdom_match;

/* The stored entry for a GPU and problem with rigor >= min_rigor, chosen by `match`; 1 when
 * found (*out filled), else 0. Reads the system and user files first if not yet done. */
int wisdom_lookup(const char *gpu, int arch, int sms, const char *problem, int64_t bucket,
                  wisdom_match match, kljit_plan_rigor min_rigor, wisdom_entry *out);

/* Merges a freshly tuned entry into the store and into the user wisdom file (unless that is
 * "none", or a file that is not kljit wisdom: then only logged under KLJIT_LOG=1). */
kljit_status wisdom_add(const wisdom_entry *e);

/* Where the system / user files are (docs/wisdom.md). "" when there is none. */
kljit_status wisdom_default_path(kljit_wisdom_file which, strbuf *out);

/* Reads a wisdom file into a set (no store involved). */
kljit_status wisdom_read_file(const char *path, wisdom_set *out, int *stale);

/* The problem an entry was tuned for (its key and extra fields; label fields as in
 * KLJIT_PROBLEM_INIT). KLJIT_ERR_WISDOM if they do not parse. */
kljit_status wisdom_entry_problem(const wisdom_entry *e, kljit_problem *pb);

#endif

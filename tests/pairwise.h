/* SPDX-License-Identifier: Apache-2.0 */
/* pairwise.h — a few items of a large test space that together hold every pair of feature
 * values the space holds (pairwise coverage), for compile tests that cannot afford every item
 * on each run. An item is a list of feature tokens (hashes of "name=value class"); the greedy
 * choice takes the item with the most pairs not yet covered until no item adds one. The
 * exhaustive runs stay (label slow); this is what the quick suite compiles. */
#ifndef KLJIT_TEST_PAIRWISE_H
#define KLJIT_TEST_PAIRWISE_H

#include <stdint.h>
#include <stdlib.h>

enum { PW_CAP = 1 << 18 };

/* FNV-1a of s, its NUL included (so that parts never run into each other), continuing h. */
static inline uint32_t pw_hash(uint32_t h, const char *s) {
  for (;; s++) {
    h = (h ^ (unsigned char)*s) * 16777619u;
    if (!*s) return h;
  }
}
#define PW_SEED 2166136261u

static inline uint64_t pw_pair(uint32_t a, uint32_t b) {
  const uint64_t k = a < b ? (uint64_t)a << 32 | b : (uint64_t)b << 32 | a;
  return k ? k : 1;
}

/* 1 when k is in the set (open addressing, 0 = empty); with add, puts it there (0: was new,
 * -1: the set is full). */
static inline int pw_find(uint64_t *set, size_t *n, uint64_t k, int add) {
  for (size_t i = (k * 0x9e3779b97f4a7c15u) >> 46;; i = (i + 1) % PW_CAP) {
    if (set[i] == k) return 1;
    if (set[i] == 0) {
      if (!add) return 0;
      if (2 * (*n + 1) > PW_CAP) return -1;
      set[i] = k, ++*n;
      return 0;
    }
  }
}

/* Items i in [0, n) with eligible(i, user) nonzero: token list tok(i) (count into *len). Sets
 * chosen[i] = 1 for the greedy pairwise cover; returns how many it chose, -1 out of memory. */
static inline int pw_choose(size_t n, int (*eligible)(size_t, void *),
                            const uint32_t *(*tok)(size_t, int *, void *), void *user,
                            unsigned char *chosen) {
  uint64_t *const set = calloc(PW_CAP, sizeof *set);
  int *const gain = malloc((n + 1) * sizeof *gain);
  size_t used = 0;
  int picked = set && gain ? 0 : -1;
  while (picked >= 0) {
    long best = -1;
    for (size_t i = 0; i < n; i++) {
      gain[i] = 0;
      if (chosen[i] || !eligible(i, user)) continue;
      int len = 0;
      const uint32_t *const t = tok(i, &len, user);
      for (int x = 0; x < len; x++)
        for (int y = x + 1; y < len; y++) gain[i] += !pw_find(set, &used, pw_pair(t[x], t[y]), 0);
      if (gain[i] > 0 && (best < 0 || gain[i] > gain[best])) best = (long)i;
    }
    if (best < 0) break;
    int len = 0;
    const uint32_t *const t = tok((size_t)best, &len, user);
    for (int x = 0; x < len && picked >= 0; x++)
      for (int y = x + 1; y < len && picked >= 0; y++)
        if (pw_find(set, &used, pw_pair(t[x], t[y]), 1) < 0) picked = -1;
    chosen[best] = 1;
    if (picked >= 0) picked++;
  }
  free(set), free(gain);
  return picked;
}

#endif

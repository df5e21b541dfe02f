/* SPDX-License-Identifier: Apache-2.0 */
/* wisdom_set.c — sets of wisdom entries: merging, and the identity order they are kept in.
 *
 * A set wisdom_parse returns, and the store, hold one entry per identity (gpu, arch, sms,
 * problem, bucket), sorted by identity; merging keeps, per identity, the entry sequential
 * wisdom_merge calls would (wisdom.h). A large import (60 000 entries, 1152 bytes each) sorts
 * and deduplicates by ranking each distinct string once and sorting small records of integers,
 * then moves each entry once, in place.
 */
#include <stdlib.h>
#include <string.h>

#include "wisdom.h"

static int same_identity(const wisdom_entry *a, const wisdom_entry *b) {
  return a->arch == b->arch && a->sms == b->sms && a->bucket == b->bucket &&
         !strcmp(a->gpu, b->gpu) && !strcmp(a->problem, b->problem);
}

/* a is better than b: higher rigor, then less time per token. */
static int better(const wisdom_entry *a, const wisdom_entry *b) {
  if (a->rigor != b->rigor) return a->rigor > b->rigor;
  return a->ms / (double)a->rows < b->ms / (double)b->rows;
}

kljit_status wisdom_set_reserve(wisdom_set *s, size_t n) {
  if (n > s->cap) {
    size_t cap = s->cap ? s->cap : 16;
    while (cap < n) cap *= 2;
    wisdom_entry *grown = realloc(s->e, cap * sizeof *grown);
    if (!grown) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
    s->e = grown, s->cap = cap;
  }
  return KLJIT_SUCCESS;
}

static kljit_status append(wisdom_set *s, const wisdom_entry *e, size_t count) {
  const kljit_status st = wisdom_set_reserve(s, s->n + count);
  if (st != KLJIT_SUCCESS) return st;
  if (count) memcpy(s->e + s->n, e, count * sizeof *e);
  s->n += count;
  return KLJIT_SUCCESS;
}

kljit_status wisdom_merge(wisdom_set *s, const wisdom_entry *e) {
  for (size_t i = 0; i < s->n; i++)
    if (same_identity(&s->e[i], e)) {
      if (better(e, &s->e[i])) s->e[i] = *e;
      return KLJIT_SUCCESS;
    }
  return append(s, e, 1);
}

/* ---- identity order ---------------------------------------------------------------------- */

/* Sets are sorted by identity: gpu (strcmp), arch, sms, problem (strcmp), bucket. A sort
 * compares each entry some log2(n) times, and comparing the strings every time, inside entries
 * of over a kilobyte far apart in memory, was most of importing a large file. So each distinct
 * string is ranked once (a hash set finds the distinct ones; only those are sorted) and the
 * entries are sorted as small records of integers. */

typedef struct ranked {
  uint32_t gpu, problem; /* ranks of the strings */
  int arch, sms;
  int64_t bucket;
  size_t pos;   /* index in the set's array */
  size_t order; /* place in the set's order: earlier wins ties, as in sequential merging */
} ranked;

static int ranked_cmp(const void *pa, const void *pb) {
  const ranked *a = pa, *b = pb;
  if (a->gpu != b->gpu) return a->gpu < b->gpu ? -1 : 1;
  if (a->arch != b->arch) return a->arch < b->arch ? -1 : 1;
  if (a->sms != b->sms) return a->sms < b->sms ? -1 : 1;
  if (a->problem != b->problem) return a->problem < b->problem ? -1 : 1;
  if (a->bucket != b->bucket) return a->bucket < b->bucket ? -1 : 1;
  return (a->order > b->order) - (a->order < b->order);
}

static int same_rank_identity(const ranked *a, const ranked *b) {
  return a->gpu == b->gpu && a->arch == b->arch && a->sms == b->sms && a->problem == b->problem &&
         a->bucket == b->bucket;
}

typedef struct distinct {
  uint64_t head[2]; /* the first 16 bytes, big-endian, NUL-padded: most comparisons end here */
  const char *s;    /* a copy, packed with the others: the rest compares without cache misses */
  uint64_t hash;
  uint32_t id; /* the order it was first seen in */
} distinct;

static int distinct_cmp(const void *pa, const void *pb) {
  const distinct *a = pa, *b = pb;
  for (int k = 0; k < 2; k++)
    if (a->head[k] != b->head[k]) return a->head[k] < b->head[k] ? -1 : 1;
  return strcmp(a->s, b->s); /* equal heads of distinct strings: both are longer than 16 */
}

/* A hash of s, 8 bytes a step, and its length. */
static uint64_t text_hash(const char *s, size_t *len) {
  const size_t n = strlen(s);
  uint64_t h = 14695981039346656037ull ^ n, w;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    memcpy(&w, s + i, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 32;
  }
  for (; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  *len = n;
  return h ^ (h >> 29);
}

/* rank[i] of each of the n strings str[i]: equal strings share a rank, and ranks order as
 * strcmp orders the strings. */
static kljit_status rank_strings(const char *const *str, size_t n, uint32_t *rank) {
  size_t slots = 16, bytes = 0;
  while (slots < 2 * n) slots *= 2;
  uint32_t *slot = calloc(slots, sizeof *slot); /* 1 + the id of the string hashed there */
  distinct *d = malloc((n ? n : 1) * sizeof *d);
  uint32_t *place = malloc((n ? n : 1) * sizeof *place);
  if (!slot || !d || !place || n >= UINT32_MAX) {
    free(slot), free(d), free(place);
    return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  uint32_t nd = 0;
  for (size_t i = 0; i < n; i++) {
    size_t len = 0;
    const uint64_t hash = text_hash(str[i], &len);
    size_t h = (size_t)hash & (slots - 1);
    while (slot[h] && (d[slot[h] - 1].hash != hash || strcmp(d[slot[h] - 1].s, str[i]) != 0))
      h = (h + 1) & (slots - 1);
    if (!slot[h]) {
      d[nd] = (distinct){.s = str[i], .hash = hash, .id = nd};
      slot[h] = ++nd;
      bytes += len + 1;
    }
    rank[i] = slot[h] - 1;
  }
  free(slot);
  char *packed = malloc(bytes ? bytes : 1);
  if (!packed) {
    free(d), free(place);
    return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  char *w = packed;
  for (uint32_t k = 0; k < nd; k++) {
    const size_t len = strlen(d[k].s);
    memcpy(w, d[k].s, len + 1);
    d[k].s = w, w += len + 1;
    for (size_t b = 0; b < 16; b++)
      d[k].head[b / 8] = d[k].head[b / 8] << 8 | (b < len ? (unsigned char)d[k].s[b] : 0);
  }
  qsort(d, nd, sizeof *d, distinct_cmp);
  for (uint32_t k = 0; k < nd; k++) place[d[k].id] = k;
  for (size_t i = 0; i < n; i++) rank[i] = place[rank[i]];
  free(packed), free(d), free(place);
  return KLJIT_SUCCESS;
}

/* The entries of s in identity order, as *out[0..s->n) (malloc'd). Ties in set order, which
 * starts at index `first` of the array and wraps around (wisdom_merge_set_take). */
static kljit_status identity_order(const wisdom_set *s, size_t first, ranked **out) {
  const size_t n = s->n;
  ranked *r = malloc((n ? n : 1) * sizeof *r);
  const char **str = malloc((n ? n : 1) * sizeof *str);
  uint32_t *rank = malloc((n ? n : 1) * sizeof *rank);
  kljit_status st =
      r && str && rank ? KLJIT_SUCCESS : err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  if (st == KLJIT_SUCCESS) {
    for (size_t i = 0; i < n; i++) str[i] = s->e[i].gpu;
    st = rank_strings(str, n, rank);
  }
  for (size_t i = 0; i < n && st == KLJIT_SUCCESS; i++) {
    const wisdom_entry *e = &s->e[i];
    r[i] = (ranked){.gpu = rank[i], .arch = e->arch, .sms = e->sms, .bucket = e->bucket, .pos = i,
                    .order = i >= first ? i - first : n - first + i};
    str[i] = e->problem;
  }
  if (st == KLJIT_SUCCESS) st = rank_strings(str, n, rank);
  if (st == KLJIT_SUCCESS) {
    for (size_t i = 0; i < n; i++) r[i].problem = rank[i];
    qsort(r, n, sizeof *r, ranked_cmp);
  }
  free(str), free(rank);
  if (st != KLJIT_SUCCESS) free(r), r = NULL;
  *out = r;
  return st;
}

/* Rearranges e so that e[k] becomes what e[src[k]] was (src: a permutation, used up), moving
 * each entry once along its cycle: no second array of the set's size (its fresh pages were a
 * large part of normalizing a big set). */
static void permute(wisdom_entry *e, size_t *src, size_t n) {
  for (size_t k = 0; k < n; k++) {
    if (src[k] == k) continue;
    const wisdom_entry first = e[k];
    size_t j = k;
    while (src[j] != k) {
      const size_t from = src[j];
      e[j] = e[from];
      src[j] = j;
      j = from;
    }
    e[j] = first;
    src[j] = j;
  }
}

/* Leaves one entry per identity, in identity order: the one sequential wisdom_merge calls in
 * set order (from index `first`, see identity_order) would keep, the first of the best, in
 * O(n log n) instead of merging one by one in O(n^2). */
static kljit_status normalize(wisdom_set *s, size_t first) {
  if (s->n < 2) return KLJIT_SUCCESS;
  const size_t n = s->n;
  ranked *r = NULL;
  kljit_status st = identity_order(s, first, &r);
  size_t *src = st == KLJIT_SUCCESS ? malloc(n * sizeof *src) : NULL;
  unsigned char *kept = src ? calloc(n, 1) : NULL;
  if (st == KLJIT_SUCCESS && !kept) st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  if (st == KLJIT_SUCCESS) {
    /* src: the kept entries in identity order, then the dropped ones */
    size_t m = 0;
    for (size_t i = 0; i < n;) {
      size_t best = r[i].pos, j = i + 1;
      for (; j < n && same_rank_identity(&r[j], &r[i]); j++)
        if (better(&s->e[r[j].pos], &s->e[best])) best = r[j].pos;
      src[m++] = best, kept[best] = 1;
      i = j;
    }
    for (size_t i = 0, k = m; i < n; i++)
      if (!kept[i]) src[k++] = i;
    permute(s->e, src, n);
    s->n = m;
  }
  free(r), free(src), free(kept);
  return st;
}

kljit_status wisdom_normalize(wisdom_set *s) {
  return normalize(s, 0);
}

kljit_status wisdom_identity_order(const wisdom_set *s, size_t **order) {
  ranked *r = NULL;
  kljit_status st = identity_order(s, 0, &r);
  *order = st == KLJIT_SUCCESS ? malloc((s->n ? s->n : 1) * sizeof **order) : NULL;
  if (st == KLJIT_SUCCESS && !*order) st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  for (size_t i = 0; i < s->n && st == KLJIT_SUCCESS; i++) (*order)[i] = r[i].pos;
  free(r);
  return st;
}

kljit_status wisdom_merge_set(wisdom_set *into, const wisdom_set *from) {
  const kljit_status st = append(into, from->e, from->n);
  return st != KLJIT_SUCCESS ? st : normalize(into, 0);
}

kljit_status wisdom_merge_set_take(wisdom_set *into, wisdom_set *from) {
  if (from->n <= into->n) {
    const kljit_status st = wisdom_merge_set(into, from);
    wisdom_set_free(from);
    return st;
  }
  /* The larger array takes the smaller one's entries (a copy of the larger, in fresh pages, was
   * a large part of importing a big file): into's entries come after from's there, but first
   * in set order, so they still win ties. */
  const size_t first = from->n;
  const kljit_status st = append(from, into->e, into->n);
  if (st != KLJIT_SUCCESS) return st;
  wisdom_set_free(into);
  *into = *from;
  memset(from, 0, sizeof *from);
  return normalize(into, first);
}

void wisdom_set_free(wisdom_set *s) {
  free(s->e);
  memset(s, 0, sizeof *s);
}

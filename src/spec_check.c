/* SPDX-License-Identifier: Apache-2.0 */
/* spec_check.c — kspec_check: the family template's verdict on a spec, memoized.
 *
 * The memo holds a canonical binary key of the parameters (template, then each parameter's
 * name, kind and exact value; built without printf, which dominated a large import) of every
 * spec the templates accepted, in an open-addressing hash set under one mutex. Rejections are not
 * kept: a text with a rejected entry is refused whole, so each is asked once. When the set
 * reaches MEMO_MAX keys (which bounds its memory, ~20 MB, whatever the input; a 60 000-entry
 * file has ~54 000 distinct specs) it keeps those found again since it last did so, up to half
 * of it, and forgets the rest: a large wisdom file has tens of thousands of specs seen once
 * (one per V) and a few that most of its entries share (the helpers'), which emptying the
 * whole set had the templates check again after each flush.
 */
#include "spec_check.h"
#include "validator.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { MEMO_MAX = 1 << 16, MEMO_SLOTS = 2 * MEMO_MAX };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct key {
  unsigned char b[1024];
  size_t n;
} key;

static void put(key *k, const void *p, size_t n) {
  if (k->n + n <= sizeof k->b) memcpy(k->b + k->n, p, n);
  k->n += n; /* past the buffer: the key is not memoized (make_key fails) */
}

/* Every parameter's value in full: strings with their NUL, numbers as their bytes. */
static int make_key(const kspec *k, const render_param *params, size_t n, key *out) {
  out->n = 0;
  const char *t = kspec_template(k);
  put(out, t, strlen(t) + 1);
  for (size_t i = 0; i < n; i++) {
    const render_param *p = &params[i];
    put(out, p->key, strlen(p->key) + 1);
    const unsigned char kind = (unsigned char)p->kind;
    put(out, &kind, 1);
    if (p->kind == RP_STR)
      put(out, p->s, strlen(p->s) + 1);
    else if (p->kind == RP_NUM)
      put(out, &p->d, sizeof p->d);
    else
      put(out, &p->i, sizeof p->i);
  }
  return out->n <= sizeof out->b ? 0 : -1;
}

typedef struct memo_key {
  size_t n;
  unsigned char b[]; /* n bytes */
} memo_key;

typedef struct slot {
  uint64_t hash; /* of key: a probe past another key costs no visit to its bytes */
  memo_key *key; /* NULL: empty */
  int found;     /* looked up again since the last eviction */
} slot;

static slot *slots; /* MEMO_SLOTS */
static size_t used;

/* 8 bytes a step (the keys are a few hundred bytes; byte-wise FNV showed in profiles). */
static uint64_t key_hash(const key *k) {
  uint64_t h = 1469598103934665603ull ^ k->n;
  size_t i = 0;
  for (; i + 8 <= k->n; i += 8) {
    uint64_t w;
    memcpy(&w, k->b + i, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  for (; i < k->n; i++) h = (h ^ k->b[i]) * 1099511628211ull;
  return h ^ (h >> 32);
}

static int same(const memo_key *m, const key *k) {
  return m->n == k->n && memcmp(m->b, k->b, k->n) == 0;
}

/* The slot of k (hash h), or the empty slot where it would go (lock held, slots allocated). */
static size_t find(const key *k, uint64_t h) {
  size_t i = (size_t)(h % MEMO_SLOTS);
  while (slots[i].key && !(slots[i].hash == h && same(slots[i].key, k))) i = (i + 1) % MEMO_SLOTS;
  return i;
}

static int known(const key *k, uint64_t h) {
  pthread_mutex_lock(&lock);
  slot *s = slots ? &slots[find(k, h)] : NULL;
  const int hit = s && s->key;
  if (hit) s->found = 1;
  pthread_mutex_unlock(&lock);
  return hit;
}

/* The set is full (lock held): keeps up to MEMO_MAX / 2 keys found again since the last time,
 * in a fresh table, and frees the others (all of them if no table can be had). */
static void evict(void) {
  slot *kept = calloc(MEMO_SLOTS, sizeof *kept);
  size_t n = 0;
  for (size_t i = 0; i < MEMO_SLOTS; i++) {
    slot *s = &slots[i];
    if (!s->key) continue;
    if (kept && s->found && n < MEMO_MAX / 2) {
      size_t j = (size_t)(s->hash % MEMO_SLOTS);
      while (kept[j].key) j = (j + 1) % MEMO_SLOTS;
      kept[j] = (slot){.hash = s->hash, .key = s->key};
      n++;
    } else {
      free(s->key);
    }
  }
  free(slots);
  slots = kept, used = n;
}

static void remember(const key *k, uint64_t h) {
  pthread_mutex_lock(&lock);
  if (slots && used >= MEMO_MAX) evict();
  if (!slots) slots = calloc(MEMO_SLOTS, sizeof *slots);
  if (slots) {
    slot *s = &slots[find(k, h)];
    if (!s->key && (s->key = malloc(sizeof(memo_key) + k->n))) {
      s->hash = h, s->key->n = k->n;
      memcpy(s->key->b, k->b, k->n);
      used++;
    }
  }
  pthread_mutex_unlock(&lock); /* a memo that cannot grow only costs a later re-check */
}

kljit_status kspec_check(const kspec *k) {
  render_param params[KSPEC_MAX_PARAMS];
  const size_t n = kspec_params(k, params);
  key mk;
  const int memo = make_key(k, params, n, &mk) == 0;
  const uint64_t h = memo ? key_hash(&mk) : 0;
  if (memo && known(&mk, h)) return KLJIT_SUCCESS;
  const kljit_status st = validator_check(kspec_template(k), params, n);
  if (st == KLJIT_SUCCESS && memo) remember(&mk, h);
  return st;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* spec_memo.c — the templates' verdicts and renders by canonical spec key, an open-addressing
 * hash set under one mutex (the invariants are in spec_memo.h). */
#include "spec_memo.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MEMO_SLOTS = 2 * SPEC_MEMO_MAX };

typedef struct render_data {
  char digest[65], name[64];
  char manifest[]; /* NUL-terminated */
} render_data;

typedef struct entry {
  render_data *render; /* NULL: checked, never rendered */
  size_t n;
  char key[]; /* n bytes of kspec_key text */
} entry;

typedef struct slot {
  uint64_t hash; /* of the key: a probe past another key costs no visit to its bytes */
  entry *e;      /* NULL: empty */
  int found;     /* looked up again since the last eviction */
} slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slot *slots; /* MEMO_SLOTS, allocated on first use */
static size_t used;

int spec_memo_enabled(void) { return template_dir() == NULL; }

/* 8 bytes a step (keys are a few hundred bytes; byte-wise FNV showed in profiles). */
static uint64_t key_hash(const kspec_key *k) {
  uint64_t h = 1469598103934665603ull ^ k->len;
  size_t i = 0;
  for (; i + 8 <= k->len; i += 8) {
    uint64_t w;
    memcpy(&w, k->text + i, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  for (; i < k->len; i++) h = (h ^ (unsigned char)k->text[i]) * 1099511628211ull;
  return h ^ (h >> 32);
}

/* The slot of k (hash h), or the empty slot where it would go (lock held, slots allocated). */
static size_t find(const kspec_key *k, uint64_t h) {
  size_t i = (size_t)(h % MEMO_SLOTS);
  while (slots[i].e && !(slots[i].hash == h && slots[i].e->n == k->len &&
                         memcmp(slots[i].e->key, k->text, k->len) == 0))
    i = (i + 1) % MEMO_SLOTS;
  return i;
}

/* The entry of k, marked found, or NULL (lock held). */
static entry *lookup(const kspec_key *k) {
  if (!slots) return NULL;
  slot *s = &slots[find(k, key_hash(k))];
  if (s->e) s->found = 1;
  return s->e;
}

static void entry_free(entry *e) {
  free(e->render);
  free(e);
}

/* Moves the old slot s into the fresh table `kept` unless `limit` entries are there already. */
static int keep(slot *kept, size_t *n, slot *s, size_t limit) {
  if (!s->e || *n >= limit) return 0;
  size_t j = (size_t)(s->hash % MEMO_SLOTS);
  while (kept[j].e) j = (j + 1) % MEMO_SLOTS;
  kept[j] = (slot){.hash = s->hash, .e = s->e};
  s->e = NULL;
  ++*n;
  return 1;
}

/* The set is full (lock held): keeps up to SPEC_MEMO_MAX / 2 entries, those with a render
 * first, then those found again (invariant 3), in a fresh table; frees the others (all of them
 * if no table can be had). */
static void evict(void) {
  slot *kept = calloc(MEMO_SLOTS, sizeof *kept);
  size_t n = 0;
  for (size_t i = 0; kept && i < MEMO_SLOTS; i++)
    if (slots[i].e && slots[i].e->render) keep(kept, &n, &slots[i], SPEC_MEMO_MAX / 2);
  for (size_t i = 0; kept && i < MEMO_SLOTS; i++)
    if (slots[i].found) keep(kept, &n, &slots[i], SPEC_MEMO_MAX / 2);
  for (size_t i = 0; i < MEMO_SLOTS; i++)
    if (slots[i].e) entry_free(slots[i].e);
  free(slots);
  slots = kept, used = n;
}

/* The entry of k, made when missing, or NULL when it cannot be (lock held). */
static entry *insert(const kspec_key *k) {
  if (slots && used >= SPEC_MEMO_MAX) evict();
  if (!slots) slots = calloc(MEMO_SLOTS, sizeof *slots);
  if (!slots) return NULL;
  const uint64_t h = key_hash(k);
  slot *s = &slots[find(k, h)];
  if (!s->e && (s->e = malloc(sizeof(entry) + k->len))) {
    s->hash = h;
    s->e->render = NULL, s->e->n = k->len;
    memcpy(s->e->key, k->text, k->len);
    used++;
  }
  return s->e;
}

int spec_memo_accepted(const kspec_key *k) {
  pthread_mutex_lock(&lock);
  const int hit = lookup(k) != NULL;
  pthread_mutex_unlock(&lock);
  return hit;
}

void spec_memo_accept(const kspec_key *k) {
  pthread_mutex_lock(&lock);
  insert(k);
  pthread_mutex_unlock(&lock);
}

int spec_memo_rendered(const kspec_key *k, char digest[65], char name[64], strbuf *manifest) {
  pthread_mutex_lock(&lock);
  const entry *e = lookup(k);
  const render_data *r = e ? e->render : NULL;
  int hit = r && sb_append(manifest, r->manifest, strlen(r->manifest)) == KLJIT_SUCCESS;
  if (hit) {
    memcpy(digest, r->digest, sizeof r->digest);
    memcpy(name, r->name, sizeof r->name);
  }
  pthread_mutex_unlock(&lock);
  return hit;
}

void spec_memo_put_render(const kspec_key *k, const char *digest, const char *name,
                          const char *manifest) {
  const size_t mlen = strlen(manifest);
  render_data *r = malloc(sizeof *r + mlen + 1);
  if (!r) return;
  snprintf(r->digest, sizeof r->digest, "%s", digest);
  snprintf(r->name, sizeof r->name, "%s", name);
  memcpy(r->manifest, manifest, mlen + 1);
  pthread_mutex_lock(&lock);
  entry *e = insert(k);
  if (e && !e->render) e->render = r, r = NULL;
  pthread_mutex_unlock(&lock);
  free(r); /* not kept: no entry, or another thread's render is there already */
}

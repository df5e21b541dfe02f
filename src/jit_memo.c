/* SPDX-License-Identifier: Apache-2.0 */
/* jit_memo.c — spec → cache key memo (see jit_memo.h for why it is exact). */
#include "jit_memo.h"
#include "env.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MEMO_BUCKETS = 256, MEMO_MAX_ENTRIES = 8192 };

typedef struct memo_entry {
  char *spec_text, *key_text, *manifest;
  char name[64], key_hash[65];
  struct memo_entry *next;
} memo_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static memo_entry *buckets[MEMO_BUCKETS];
static size_t entries;

int jit_memo_enabled(void) {
  const char *dir = env_text(ENV_TEMPLATE_DIR);
  return !(dir && *dir);
}

static int cmp_param(const void *a, const void *b) {
  return strcmp((*(const render_param *const *)a)->key, (*(const render_param *const *)b)->key);
}

kljit_status jit_memo_spec_text(const kspec *k, int arch, strbuf *out) {
  render_param params[KSPEC_MAX_PARAMS];
  const render_param *sorted[KSPEC_MAX_PARAMS];
  const size_t n = kspec_params(k, params);
  for (size_t i = 0; i < n; i++) sorted[i] = &params[i];
  qsort(sorted, n, sizeof sorted[0], cmp_param);
  kljit_status st = sb_printf(out, "%s sm_%d", kspec_template(k), arch);
  for (size_t i = 0; i < n && st == KLJIT_SUCCESS; i++) {
    const render_param *p = sorted[i];
    switch (p->kind) {
      case RP_INT:
        st = sb_printf(out, " %s=i%lld", p->key, (long long)p->i);
        break;
      case RP_BOOL:
        st = sb_printf(out, " %s=b%d", p->key, p->i != 0);
        break;
      case RP_NUM:
        st = sb_printf(out, " %s=n%a", p->key, p->d);
        break;     /* exact bits */
      case RP_STR: /* length-prefixed: no value can run into the next parameter */
        st = sb_printf(out, " %s=s%zu:%s", p->key, p->s ? strlen(p->s) : 0, p->s ? p->s : "");
        break;
    }
  }
  return st;
}

static unsigned hash_text(const char *s) { /* FNV-1a */
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h % MEMO_BUCKETS;
}

int jit_memo_get(const char *spec_text, strbuf *key_text, strbuf *manifest, char name[64],
                 char key_hash[65]) {
  int found = 0;
  pthread_mutex_lock(&lock);
  for (const memo_entry *e = buckets[hash_text(spec_text)]; e; e = e->next)
    if (!strcmp(e->spec_text, spec_text)) {
      found = sb_append(key_text, e->key_text, strlen(e->key_text)) == KLJIT_SUCCESS &&
              sb_append(manifest, e->manifest, strlen(e->manifest)) == KLJIT_SUCCESS;
      memcpy(name, e->name, sizeof e->name);
      memcpy(key_hash, e->key_hash, sizeof e->key_hash);
      break;
    }
  pthread_mutex_unlock(&lock);
  return found;
}

void jit_memo_put(const char *spec_text, const char *key_text, const char *manifest,
                  const char *name, const char *key_hash) {
  const unsigned b = hash_text(spec_text);
  pthread_mutex_lock(&lock);
  int present = 0;
  for (const memo_entry *e = buckets[b]; e && !present; e = e->next)
    present = !strcmp(e->spec_text, spec_text);
  memo_entry *e = present || entries >= MEMO_MAX_ENTRIES ? NULL : calloc(1, sizeof *e);
  if (e && (e->spec_text = strdup(spec_text)) && (e->key_text = strdup(key_text)) &&
      (e->manifest = strdup(manifest))) {
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->key_hash, sizeof e->key_hash, "%s", key_hash);
    e->next = buckets[b];
    buckets[b] = e;
    entries++;
  } else if (e) {
    free(e->spec_text);
    free(e->key_text);
    free(e);
  }
  pthread_mutex_unlock(&lock);
}

/* ---- compiles in flight ------------------------------------------------------------------ */

enum { FLIGHT_MAX = 256 };
static pthread_cond_t landed = PTHREAD_COND_INITIALIZER;
static char flights[FLIGHT_MAX][65]; /* key hashes being compiled; "" for a free slot */

int jit_memo_claim(const char *key_hash) {
  pthread_mutex_lock(&lock);
  int waited = 0;
  for (;;) {
    int busy = 0, slot = -1;
    for (int i = 0; i < FLIGHT_MAX; i++) {
      if (!strcmp(flights[i], key_hash)) busy = 1;
      if (!flights[i][0] && slot < 0) slot = i;
    }
    if (!busy && (waited || slot >= 0)) {
      if (!waited) snprintf(flights[slot], sizeof flights[0], "%s", key_hash);
      pthread_mutex_unlock(&lock);
      return !waited; /* claimed, or landed: look it up again */
    }
    if (!busy) { /* every slot taken: compile without a claim rather than wait for a slot */
      pthread_mutex_unlock(&lock);
      return -1;
    }
    pthread_cond_wait(&landed, &lock);
    waited = 1;
  }
}

void jit_memo_release(const char *key_hash) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < FLIGHT_MAX; i++)
    if (!strcmp(flights[i], key_hash)) flights[i][0] = '\0';
  pthread_cond_broadcast(&landed);
  pthread_mutex_unlock(&lock);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* jit.c — the compile pipeline of one kernel module, shared by plans and precompile. */
#include "jit.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>

#include "env.h"
#include "kiface.h"
#include "nvrtc_compile.h"
#include "spec_memo.h"

/* The cache key text of a source whose SHA-256 is `hex`. */
static kljit_status key_text(const char *hex, int arch, strbuf *key) {
  char storage[NVRTC_MAX_OPTIONS][64];
  const char *opts[NVRTC_MAX_OPTIONS];
  const int n = nvrtc_options(arch, storage, opts);
  kljit_status st =
      sb_printf(key,
                "kljit-cache-key %d\nkljit %s\nsource-sha256 %s\n%s\narch sm_%d\n"
                "options",
                JIT_CACHE_FORMAT, KLJIT_VERSION_STRING, hex, nvrtc_version_string(),
                arch & ~NVRTC_ARCH_SPECIFIC);
  for (int i = 0; i < n && st == KLJIT_SUCCESS; i++) st = sb_printf(key, " %s", opts[i]);
  if (st == KLJIT_SUCCESS) st = sb_append(key, "\n", 1);
  return st;
}

kljit_status jit_key_text(const char *source, int arch, strbuf *key) {
  char hex[65];
  sha256_hex(source, strlen(source), hex);
  return key_text(hex, arch, key);
}

/* A manifest line's metadata name: "record" for a record's line (stored without its first
 * word), "kernel" for a kernel's (stored whole). */
static const char RECORD_LINE[] = "record ";

kljit_status jit_meta_manifest(const char *meta, strbuf *manifest) {
  kljit_status st = KLJIT_SUCCESS;
  for (const char *l = meta ? meta : ""; *l && st == KLJIT_SUCCESS;) {
    const char *nl = strchr(l, '\n');
    const size_t n = nl ? (size_t)(nl - l) : strlen(l);
    const int kernel = n > 7 && strncmp(l, "kernel=", 7) == 0;
    const int record = n > 7 && strncmp(l, "record=", 7) == 0;
    if (record) st = sb_append(manifest, RECORD_LINE, sizeof RECORD_LINE - 1);
    if ((kernel || record) && st == KLJIT_SUCCESS) st = sb_append(manifest, l + 7, n - 7);
    if ((kernel || record) && st == KLJIT_SUCCESS) st = sb_append(manifest, "\n", 1);
    l += n + (nl != NULL);
  }
  return st;
}

kljit_status jit_manifest(const kspec *k, strbuf *manifest) {
  /* the render memo jit_build fills (spec_memo.h): a manifest is the same for every arch */
  kspec_key sk;
  const int memo = spec_memo_enabled() && kspec_key_of(k, &sk) == 0;
  char digest[65], name[64];
  if (memo && spec_memo_rendered(&sk, digest, name, manifest)) return KLJIT_SUCCESS;
  strbuf src = {0};
  sb_free(manifest);
  kljit_status st = kspec_render_iface(k, &src, manifest);
  if (st == KLJIT_SUCCESS && memo) {
    sha256_hex(src.data, strlen(src.data), digest); /* as jit_key_text hashes it */
    kspec_name(k, src.data, name);
    spec_memo_put_render(&sk, digest, name, manifest->data ? manifest->data : "");
  }
  sb_free(&src);
  return st;
}

kljit_status jit_layout(const kspec *const *specs, int n, kiface_layout *out) {
  enum { MAX_MODULES = 4 };
  if (n < 1 || n > MAX_MODULES)
    return err_set(KLJIT_ERR_INTERNAL, "jit_layout: %d modules", n);
  strbuf text[MAX_MODULES] = {{0}};
  kiface_manifest *m = calloc((size_t)n, sizeof *m);
  const kiface_manifest *mp[MAX_MODULES];
  const char *names[MAX_MODULES];
  kljit_status st = m ? KLJIT_SUCCESS : err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  for (int i = 0; i < n && st == KLJIT_SUCCESS; i++) {
    names[i] = kspec_template(specs[i]), mp[i] = &m[i];
    st = jit_manifest(specs[i], &text[i]);
    if (st == KLJIT_SUCCESS) st = kiface_parse(text[i].data, names[i], &m[i]);
  }
  if (st == KLJIT_SUCCESS) st = kiface_layout_of(mp, names, n, out);
  for (int i = 0; i < n; i++) sb_free(&text[i]);
  free(m);
  return st;
}

/* A cache hit is used only when the manifest stored with it is the one this build's template
 * declares: the plan marshals its arguments by that manifest, and a launch with the wrong
 * arguments is silent memory corruption, not an error. */
static kljit_status check_cached_manifest(const jit_bin *b, const cache_entry *e) {
  strbuf stored = {0};
  kljit_status st = jit_meta_manifest(e->meta, &stored);
  if (st == KLJIT_SUCCESS)
    st = kiface_compare(b->manifest.data, stored.data ? stored.data : "", b->name);
  if (st != KLJIT_SUCCESS) err_prefix(st, "cache entry %s.kjc: ", b->key_hash);
  sb_free(&stored);
  return st;
}

/* ---- compiles in flight -------------------------------------------------------------------
 * One compile of a module at a time in this process. Threads that miss the cache on the same
 * key (precompile's jobs share modules; plans of one problem on several threads) would each
 * compile it; the first claims the key, the others wait until it is stored and then find it in
 * the cache. */

enum { FLIGHT_MAX = 256 };
static pthread_mutex_t flight_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t landed = PTHREAD_COND_INITIALIZER;
static char flights[FLIGHT_MAX][65]; /* key hashes being compiled; "" for a free slot */

/* 1: claimed (compile and store, then flight_release); 0: another thread compiled it meanwhile
 * (look the cache up again); -1: too many compiles in flight to track (compile unclaimed). */
static int flight_claim(const char *key_hash) {
  pthread_mutex_lock(&flight_lock);
  int waited = 0;
  for (;;) {
    int busy = 0, slot = -1;
    for (int i = 0; i < FLIGHT_MAX; i++) {
      if (!strcmp(flights[i], key_hash)) busy = 1;
      if (!flights[i][0] && slot < 0) slot = i;
    }
    if (!busy && (waited || slot >= 0)) {
      if (!waited) snprintf(flights[slot], sizeof flights[0], "%s", key_hash);
      pthread_mutex_unlock(&flight_lock);
      return !waited; /* claimed, or landed: look it up again */
    }
    if (!busy) { /* every slot taken: compile without a claim rather than wait for a slot */
      pthread_mutex_unlock(&flight_lock);
      return -1;
    }
    pthread_cond_wait(&landed, &flight_lock);
    waited = 1;
  }
}

static void flight_release(const char *key_hash) {
  pthread_mutex_lock(&flight_lock);
  for (int i = 0; i < FLIGHT_MAX; i++)
    if (!strcmp(flights[i], key_hash)) flights[i][0] = '\0';
  pthread_cond_broadcast(&landed);
  pthread_mutex_unlock(&flight_lock);
}

kljit_status jit_build(const kspec *k, int arch, const cache_config *cfg, jit_bin *out) {
  memset(out, 0, sizeof *out);
  double t0 = util_now();
  int claimed = 0;
  strbuf src = {0}, key = {0};
  kljit_status st = KLJIT_SUCCESS;
  /* a spec rendered before in this process needs no render until a compile does (the source
   * is a pure function of the spec: spec_memo.h); the arch comes in with the key */
  kspec_key sk;
  const int memo = spec_memo_enabled() && kspec_key_of(k, &sk) == 0;
  char digest[65];
  if (!(memo && spec_memo_rendered(&sk, digest, out->name, &out->manifest))) {
    sb_free(&out->manifest);
    st = kspec_render_iface(k, &src, &out->manifest);
    if (st == KLJIT_SUCCESS) {
      sha256_hex(src.data, strlen(src.data), digest); /* as jit_key_text hashes it */
      kspec_name(k, src.data, out->name);
      if (memo)
        spec_memo_put_render(&sk, digest, out->name,
                             out->manifest.data ? out->manifest.data : "");
    }
  }
  if (st == KLJIT_SUCCESS) st = key_text(digest, kspec_target(k, arch), &key);
  if (st == KLJIT_SUCCESS) sha256_hex(key.data, key.len, out->key_hash);
  out->render_ms = 1e3 * (util_now() - t0);
  if (st != KLJIT_SUCCESS) goto done;

  t0 = util_now();
  cache_entry e = {0};
  cache_result res = CACHE_MISS;
  /* a miss claims the compile (flight_claim): a thread that finds another compiling the same
   * module waits for it and looks the cache up again */
  const int storable = !cfg->disabled && cfg->rw_dir;
  for (int claim = 0; claim == 0;) {
    st = cache_lookup(cfg, key.data, &e, &res);
    if (st != KLJIT_SUCCESS) goto done;
    if (res != CACHE_MISS || !storable) break;
    claim = flight_claim(out->key_hash);
    claimed = claim == 1;
  }
  if (res != CACHE_MISS) {
    st = check_cached_manifest(out, &e);
    if (st == KLJIT_SUCCESS)
      st = sb_append(&out->cubin, (const char *)e.payload, e.payload_len);
    out->source = res;
    cache_entry_free(&e);
    out->cache_ms = 1e3 * (util_now() - t0);
    goto done;
  }
  if (!src.data && (st = kspec_render(k, &src)) != KLJIT_SUCCESS) goto done; /* memo'd key */
  t0 = util_now();
  st = nvrtc_compile(src.data, out->name, kspec_target(k, arch), &out->cubin, NULL);
  out->compile_ms = 1e3 * (util_now() - t0);
  if (st != KLJIT_SUCCESS) goto done;
  strbuf meta = {0};
  st = sb_printf(&meta, "name=%s\ntemplate=%s\narch=sm_%d\ncompile_ms=%.1f\n", out->name,
                 kspec_template(k), arch, out->compile_ms);
  /* the manifest: kernel=<line> a kernel, record=<line less "record "> a record
   * (docs/cache-format.md) */
  for (const char *l = out->manifest.data; l && *l && st == KLJIT_SUCCESS;) {
    const char *nl = strchr(l, '\n');
    const int n = (int)(nl ? nl - l : (ptrdiff_t)strlen(l));
    const int rec = strncmp(l, RECORD_LINE, sizeof RECORD_LINE - 1) == 0;
    const int skip = rec ? (int)sizeof RECORD_LINE - 1 : 0;
    st = sb_printf(&meta, "%s=%.*s\n", rec ? "record" : "kernel", n - skip, l + skip);
    l += n + (nl != NULL);
  }
  if (st == KLJIT_SUCCESS) {
    /* The cubin is in hand: a cache that cannot take it (full disk, read-only or unsafe
     * directory) costs the next process a compile, not this plan its kernels. */
    t0 = util_now();
    out->store_status = cache_store(cfg, key.data, meta.data, out->cubin.data, out->cubin.len);
    if (out->store_status != KLJIT_SUCCESS) {
      snprintf(out->store_error, sizeof out->store_error, "%s", kljit_last_error());
      util_log("not cached: %s", out->store_error);
      err_clear(); /* the build succeeded: its caller's last error stays "" */
    }
    out->cache_ms = 1e3 * (util_now() - t0);
  }
  sb_free(&meta);
done:
  if (claimed) flight_release(out->key_hash);
  sb_free(&src);
  sb_free(&key);
  if (st != KLJIT_SUCCESS) jit_bin_free(out);
  return st;
}

/* The arguments both precompiles check first (jit.h). */
kljit_status jit_precompile_check(const char *who, int arch, const char *cache_dir,
                                  uint32_t flags) {
  if (flags & ~(uint32_t)(KLJIT_PRECOMPILE_DRY_RUN | KLJIT_PRECOMPILE_SHARED))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: flags = 0x%x has unknown bits", who,
                   (unsigned)flags);
  char arch_text[16];
  snprintf(arch_text, sizeof arch_text, "%d", arch);
  if (!nvrtc_parse_arch(arch_text))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "%s: arch = %d, must be a real architecture of sm_80 or newer (80, 86, 89, "
                   "90, ...)",
                   who, arch);
  if (cache_dir && !*cache_dir)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: cache_dir is empty", who);
  /* what a precompile reads of the environment (the cache's and the log's variables; it plans
   * with the default options, whatever the options' variables say): a value it does not take
   * is refused here, not read as the default */
  char why[512];
  if (env_cache_bad(why, sizeof why))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: the environment's %s", who, why);
  return KLJIT_SUCCESS;
}

/* One module of a precompile into r (name, cache file, compiled, compile_ms): built, or with
 * dry_run only rendered and looked up (r->compiled = 1 when it is missing). */
kljit_status jit_precompile_module(const kspec *k, int arch, const cache_config *cfg, int dry_run,
                                   kljit_module_report *r) {
  if (!dry_run) {
    jit_bin bin;
    kljit_status st = jit_build(k, arch, cfg, &bin);
    if (st != KLJIT_SUCCESS) return st;
    r->compiled = bin.source == CACHE_MISS;
    r->compile_ms = bin.compile_ms;
    snprintf(r->name, sizeof r->name, "%s", bin.name);
    snprintf(r->file, sizeof r->file, "%s.kjc", bin.key_hash);
    jit_bin_free(&bin);
    /* a shared cache's entry stored earlier by a private run (0600) must be readable too */
    if (cfg->shared && bin.source == CACHE_HIT && bin.store_status == KLJIT_SUCCESS)
      bin.store_status = cache_share_entry(cfg->rw_dir, r->file);
    if (bin.store_status != KLJIT_SUCCESS && bin.source == CACHE_HIT)
      snprintf(bin.store_error, sizeof bin.store_error, "%s", kljit_last_error());
    if (bin.store_status != KLJIT_SUCCESS)
      return err_set(KLJIT_ERR_CACHE, "sm_%d module %s not stored as %s/%s: %s", arch, r->name,
                     cfg->rw_dir ? cfg->rw_dir : "(no cache)", r->file, bin.store_error);
    return KLJIT_SUCCESS;
  }
  strbuf src = {0}, key = {0};
  kljit_status st = kspec_render(k, &src);
  if (st == KLJIT_SUCCESS) st = jit_key_text(src.data, kspec_target(k, arch), &key);
  if (st == KLJIT_SUCCESS) {
    kspec_name(k, src.data, r->name);
    cache_file_name(key.data, r->file);
    cache_entry e = {0};
    cache_result res = CACHE_MISS;
    st = cache_lookup(cfg, key.data, &e, &res);
    if (st == KLJIT_SUCCESS) r->compiled = res == CACHE_MISS;
    cache_entry_free(&e);
  }
  sb_free(&src);
  sb_free(&key);
  return st;
}

kljit_status jit_precompile_all(const kspec *specs, size_t n, int arch, const cache_config *cfg,
                                uint32_t flags, kljit_module_callback done, void *user) {
  strbuf failed = {0};
  size_t n_failed = 0;
  cache_config dest = *cfg; /* the same directories; shared as the flags say */
  dest.shared = (flags & KLJIT_PRECOMPILE_SHARED) != 0;
  /* a destination that exists must be one readers accept, checked once before anything is
   * compiled (not once per module after all of them are) */
  struct stat st_dir;
  kljit_status st = dest.rw_dir && stat(dest.rw_dir, &st_dir) == 0 ? cache_dir_status(dest.rw_dir)
                                                                   : KLJIT_SUCCESS;
  for (size_t i = 0; i < n && st == KLJIT_SUCCESS; i++) {
    kljit_module_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r, r.arch = arch, r.index = (int)i, r.count = (int)n;
    st = jit_precompile_module(&specs[i], arch, &dest, (flags & KLJIT_PRECOMPILE_DRY_RUN) != 0,
                               &r);
    if (st == KLJIT_ERR_CACHE && r.name[0]) { /* built, not stored: name it, go on */
      st = sb_printf(&failed, "%s%s", n_failed++ ? "; " : "", kljit_last_error());
      continue;
    }
    if (st == KLJIT_SUCCESS && done) done(&r, user);
  }
  if (st == KLJIT_SUCCESS && n_failed)
    st = err_set(KLJIT_ERR_CACHE, "%zu of %zu module(s) not stored: %s", n_failed, n,
                 failed.data);
  sb_free(&failed);
  return st;
}

kljit_status jit_precompile_config(const char *cache_dir, cache_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  if (cache_dir) {
    if (!(cfg->rw_dir = strdup(cache_dir)))
      return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
    return KLJIT_SUCCESS;
  }
  kljit_status st = cache_config_from_env(cfg);
  if (st != KLJIT_SUCCESS) return st;
  if (cfg->disabled || !cfg->rw_dir) {
    cache_config_free(cfg);
    return err_set(KLJIT_ERR_CACHE,
                   "no writable kernel cache (KLJIT_CACHE_DISABLE is set, or neither "
                   "KLJIT_CACHE_DIR, XDG_CACHE_HOME nor HOME is): pass cache_dir");
  }
  for (size_t i = 0; i < cfg->n_ro; i++) free(cfg->ro_dirs[i]);
  cfg->n_ro = 0;
  return KLJIT_SUCCESS;
}

void jit_bin_free(jit_bin *b) {
  sb_free(&b->cubin);
  sb_free(&b->manifest);
}

/* ---- several modules at once ---------------------------------------------------------- */

typedef struct build_job {
  const kspec *spec;
  int arch;
  const cache_config *cfg;
  jit_bin *out;
  kljit_status st;
  char error[1024]; /* the worker's last error (thread-local there) */
} build_job;

static void *build_worker(void *arg) {
  build_job *j = arg;
  j->st = jit_build(j->spec, j->arch, j->cfg, j->out);
  if (j->st != KLJIT_SUCCESS) snprintf(j->error, sizeof j->error, "%s", kljit_last_error());
  return NULL;
}

kljit_status jit_build_many(const kspec *const *specs, int n, int arch, const cache_config *cfg,
                            jit_bin *out) {
  enum { MAX_MODULES = 16 };
  if (n < 1 || n > MAX_MODULES)
    return err_set(KLJIT_ERR_INTERNAL, "jit_build_many: %d modules", n);
  build_job job[MAX_MODULES];
  pthread_t tid[MAX_MODULES];
  int started[MAX_MODULES] = {0};
  for (int i = 0; i < n; i++) {
    memset(&job[i], 0, sizeof job[i]);
    memset(&out[i], 0, sizeof out[i]);
    job[i].spec = specs[i], job[i].arch = arch, job[i].cfg = cfg, job[i].out = &out[i];
  }
  /* module 0 on this thread, the others on their own (a thread that cannot start builds its
   * module here afterwards): NVRTC, the renderer and the cache are thread-safe, and a module
   * two threads miss at once is compiled once (flight_claim) */
  for (int i = 1; i < n; i++) started[i] = pthread_create(&tid[i], NULL, build_worker, &job[i]) == 0;
  build_worker(&job[0]);
  for (int i = 1; i < n; i++) {
    if (started[i]) pthread_join(tid[i], NULL);
    else build_worker(&job[i]);
  }
  int bad = -1;
  for (int i = 0; i < n && bad < 0; i++)
    if (job[i].st != KLJIT_SUCCESS) bad = i;
  if (bad < 0) {
    err_clear();
    return KLJIT_SUCCESS;
  }
  for (int i = 0; i < n; i++) jit_bin_free(&out[i]);
  return err_set(job[bad].st, "%s", job[bad].error);
}

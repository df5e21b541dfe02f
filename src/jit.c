/* SPDX-License-Identifier: Apache-2.0 */
/* jit.c — the compile pipeline of one kernel module, shared by plans and precompile. */
#include "jit.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "env.h"
#include "jit_memo.h"
#include "kiface.h"
#include "nvrtc_compile.h"

kljit_status jit_key_text(const char *source, int arch, strbuf *key) {
  char hex[65];
  sha256_hex(source, strlen(source), hex);
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

kljit_status jit_meta_manifest(const char *meta, strbuf *manifest) {
  kljit_status st = KLJIT_SUCCESS;
  for (const char *l = meta ? meta : ""; *l && st == KLJIT_SUCCESS;) {
    const char *nl = strchr(l, '\n');
    const size_t n = nl ? (size_t)(nl - l) : strlen(l);
    if (n > 7 && strncmp(l, "kernel=", 7) == 0) {
      st = sb_append(manifest, l + 7, n - 7);
      if (st == KLJIT_SUCCESS) st = sb_append(manifest, "\n", 1);
    }
    l += n + (nl != NULL);
  }
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

kljit_status jit_build(const kspec *k, int arch, const cache_config *cfg, jit_bin *out) {
  memset(out, 0, sizeof *out);
  double t0 = util_now();
  int claimed = 0;
  strbuf src = {0}, key = {0}, spec = {0};
  kljit_status st = KLJIT_SUCCESS;
  /* a key computed before in this process needs no render until a compile does (jit_memo.h) */
  const int memo = jit_memo_enabled() && jit_memo_spec_text(k, arch, &spec) == KLJIT_SUCCESS;
  const int known =
      memo && jit_memo_get(spec.data, &key, &out->manifest, out->name, out->key_hash);
  if (!known) {
    sb_free(&key);
    sb_free(&out->manifest);
    st = kspec_render_iface(k, &src, &out->manifest);
    if (st == KLJIT_SUCCESS) st = jit_key_text(src.data, kspec_target(k, arch), &key);
    if (st == KLJIT_SUCCESS) {
      kspec_name(k, src.data, out->name);
      sha256_hex(key.data, key.len, out->key_hash);
      if (memo)
        jit_memo_put(spec.data, key.data, out->manifest.data ? out->manifest.data : "",
                     out->name, out->key_hash);
    }
  }
  out->render_ms = 1e3 * (util_now() - t0);
  if (st != KLJIT_SUCCESS) goto done;

  t0 = util_now();
  cache_entry e = {0};
  cache_result res = CACHE_MISS;
  /* a miss claims the compile (jit_memo_claim): a thread that finds another compiling the same
   * module waits for it and looks the cache up again */
  const int storable = !cfg->disabled && cfg->rw_dir;
  for (int claim = 0; claim == 0;) {
    st = cache_lookup(cfg, key.data, &e, &res);
    if (st != KLJIT_SUCCESS) goto done;
    if (res != CACHE_MISS || !storable) break;
    claim = jit_memo_claim(out->key_hash);
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
  /* the manifest, one kernel=<line> each (docs/cache-format.md) */
  for (const char *l = out->manifest.data; l && *l && st == KLJIT_SUCCESS;) {
    const char *nl = strchr(l, '\n');
    const int n = (int)(nl ? nl - l : (ptrdiff_t)strlen(l));
    st = sb_printf(&meta, "kernel=%.*s\n", n, l);
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
  if (claimed) jit_memo_release(out->key_hash);
  sb_free(&src);
  sb_free(&key);
  sb_free(&spec);
  if (st != KLJIT_SUCCESS) jit_bin_free(out);
  return st;
}

/* One module of a precompile into r (name, cache file, compiled, compile_ms): built, or with
 * dry_run only rendered and looked up (r->compiled = 1 when it is missing). */
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
  /* the environment steers what is compiled (row kernel, chunk, GEMM, dX split): a value it
   * does not take is refused here, not read as the default */
  char why[512];
  if (env_context_bad(why, sizeof why))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: the environment's %s", who, why);
  return KLJIT_SUCCESS;
}

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

/* SPDX-License-Identifier: Apache-2.0 */
/* jit.h — spec → cubin: render, key, cache lookup, NVRTC on a miss, cache store. No GPU. */
#ifndef KLJIT_JIT_H
#define KLJIT_JIT_H

#include "cache.h"
#include "kiface.h"
#include "spec.h"

/* 2: entries carry the kernel manifest (kernel= metadata lines, docs/cache-format.md); 3: with
 * each kernel's launch geometry and the records (record= lines). */
enum { JIT_CACHE_FORMAT = 3 };

typedef struct jit_bin {
  strbuf cubin;
  strbuf manifest;        /* the module's kernel interface (src/kiface.h), checked on a hit */
  char name[64];          /* kspec_name */
  char key_hash[65];      /* sha256 of the key text = cache file name stem */
  cache_result source;    /* CACHE_MISS: compiled now */
  double render_ms, compile_ms, cache_ms;
  /* Compiled now but not stored (full disk, read-only or unsafe directory): a plan still has
   * its kernels; precompile, whose whole purpose is the store, fails with store_error. */
  kljit_status store_status;
  char store_error[1024];
} jit_bin;

/* Builds the cubin of spec `k` for sm_<arch>, through the cache described by `cfg` (which
 * may be disabled). */
kljit_status jit_build(const kspec *k, int arch, const cache_config *cfg, jit_bin *out);
void jit_bin_free(jit_bin *b);

/* jit_build of n specs (at most 16) into out[0..n), concurrently: one thread per module beyond
 * the first (a plan's cold start waits for its slowest compile, not the sum). On a failure every
 * out[] is freed and the first failing module's status and message (in spec order) are
 * returned. */
kljit_status jit_build_many(const kspec *const *specs, int n, int arch, const cache_config *cfg,
                            jit_bin *out);

/* The manifest stored in a cache entry's metadata (its kernel= and record= lines, in order),
 * appended to `manifest`. */
kljit_status jit_meta_manifest(const char *meta, strbuf *manifest);

/* The kernel manifest of module `k` without compiling it (what jit_build checks and a plan
 * loads), appended to `manifest`: remembered in this process (jit_memo.h), else rendered. */
kljit_status jit_manifest(const kspec *k, strbuf *manifest);

/* The layout of the records the modules `specs` (a plan's: the rows, the helpers, ...; at most
 * 4) declare: kiface_layout_of over their manifests (jit_manifest). No compile, no GPU. */
kljit_status jit_layout(const kspec *const *specs, int n, kiface_layout *out);

/* The cache key text of a rendered source for an arch (format in docs/cache-format.md). */
kljit_status jit_key_text(const char *source, int arch, strbuf *key);

/* The arguments kljit_precompile and kljit_precompile_wisdom share: flags (DRY_RUN only), a real
 * architecture of sm_80 or newer, and a cache_dir that is NULL or not empty. */
kljit_status jit_precompile_check(const char *who, int arch, const char *cache_dir,
                                  uint32_t flags);

/* One module of kljit_precompile / kljit_precompile_wisdom: compiled (or found) into the cache,
 * or with dry_run only rendered and looked up; fills r's name, file, compiled and compile_ms. */
kljit_status jit_precompile_module(const kspec *k, int arch, const cache_config *cfg, int dry_run,
                                   kljit_module_report *r);

/* Every module of `specs` through jit_precompile_module into cfg's writable directory, calling
 * `done` for each one built or found. A module that could not be stored does not stop the
 * others: all of them are then named, with their path and reason, in one KLJIT_ERR_CACHE. */
kljit_status jit_precompile_all(const kspec *specs, size_t n, int arch, const cache_config *cfg,
                                uint32_t flags, kljit_module_callback done, void *user);

/* The writable directory of a precompile: cache_dir, else the environment's (its read-only
 * KLJIT_CACHE_PATH directories dropped: an entry found there is not in the destination). */
kljit_status jit_precompile_config(const char *cache_dir, cache_config *cfg);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* jit_memo.h — an in-process memo of the JIT pipeline's first step: spec → cache key text.
 *
 * Rendering a module (Lua) costs about a millisecond, and a plan on a warm cache needs the
 * source only to compute its cache key. A rendered source is a pure function of the template
 * texts and the spec's parameters (template.c, invariant 4), and the embedded templates cannot
 * change while the process runs, so the key of a spec, once computed, is remembered by the
 * spec's canonical parameter text (+ arch). With KLJIT_TEMPLATE_DIR set (templates read from
 * disk, editable at any time) the memo is bypassed. Only keys (and the kernel manifest that
 * comes with the source) are remembered, never cubins:
 * every build still looks its key up in the cache (and sees a corrupted or removed entry).
 * It also tracks the compiles in flight, so that one process compiles one module once.
 */
#ifndef KLJIT_JIT_MEMO_H
#define KLJIT_JIT_MEMO_H

#include "spec.h"

/* 1 when the memo may be used now (KLJIT_TEMPLATE_DIR unset). */
int jit_memo_enabled(void);

/* The canonical text of (spec, arch): template name, sm_<arch>, every parameter sorted by name,
 * unambiguous. */
kljit_status jit_memo_spec_text(const kspec *k, int arch, strbuf *out);

/* Looks `spec_text` up: 1 and key text and kernel manifest (appended), name and key hash
 * filled, or 0. */
int jit_memo_get(const char *spec_text, strbuf *key_text, strbuf *manifest, char name[64],
                 char key_hash[65]);

/* Remembers a spec's key and manifest (silently a no-op when out of memory or past its cap). */
void jit_memo_put(const char *spec_text, const char *key_text, const char *manifest,
                  const char *name, const char *key_hash);

/* One compile of a module at a time in this process. Threads that miss the cache on the same
 * key (precompile's jobs share modules; plans of one problem on several threads) would each
 * compile it; the first claims the key, the others wait until it is stored and then find it in
 * the cache. Returns 1: claimed (compile and store, then jit_memo_release); 0: another thread
 * compiled it meanwhile (look the cache up again); -1: too many compiles in flight to track
 * (compile without a claim). */
int jit_memo_claim(const char *key_hash);
void jit_memo_release(const char *key_hash);

#endif

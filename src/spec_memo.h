/* SPDX-License-Identifier: Apache-2.0 */
/* spec_memo.h — what this process learned from the templates about a spec, by its canonical key.
 *
 * Two questions about a spec cost a Lua run each and are pure functions of the template texts
 * and the spec's parameters (render.h, invariant 2): does its template accept it (kspec_check:
 * the wisdom parser asks it of every entry, the tuner of every candidate), and what are its
 * source's digest and kernel manifest (jit_build: a plan on a warm cache needs only the key, and
 * rendering is about a millisecond a module; warm-cache kljit_plan_create <= 5 ms). One memo
 * answers both, keyed by kspec_key_of (no arch: a spec's source does not depend on it; the
 * cache key adds the arch to the digest).
 *
 * Invariants:
 *  1. An entry exists only for a spec its template accepted (checked, or rendered: a render is
 *     an acceptance); rejections are not kept, a text with one is refused whole. An entry may
 *     also hold the render's digest, name and manifest, never a cubin: every build still looks
 *     its key up in the cache (and sees a corrupted or removed entry).
 *  2. Used only while the embedded templates are (spec_memo_enabled): with KLJIT_TEMPLATE_DIR
 *     set the templates may change at any time, and nothing about them is remembered.
 *  3. Bounded: at SPEC_MEMO_MAX entries (a 60 000-entry wisdom file has ~54 000 distinct specs)
 *     it keeps up to half, those holding a render first, then those found again since it last
 *     did so, and forgets the rest: a large wisdom file has tens of thousands of specs seen once
 *     (one per V) and a few most of its entries share (the helpers'), which forgetting
 *     everything would have the templates check again after each eviction.
 *  4. One mutex guards it; an entry that cannot be allocated is not kept (a memo that cannot
 *     grow only costs a later Lua run).
 */
#ifndef KLJIT_SPEC_MEMO_H
#define KLJIT_SPEC_MEMO_H

#include "spec.h"

enum { SPEC_MEMO_MAX = 1 << 16 };

/* 1 when the memo may be used now (invariant 2). */
int spec_memo_enabled(void);

/* 1 when the spec's template is known to accept it. */
int spec_memo_accepted(const kspec_key *k);

/* Remembers that the spec's template accepts it. */
void spec_memo_accept(const kspec_key *k);

/* 1, with the source's SHA-256 (hex), the module's name and its manifest (appended), when the
 * spec was rendered in this process; else 0 and nothing written. */
int spec_memo_rendered(const kspec_key *k, char digest[65], char name[64], strbuf *manifest);

/* Remembers a spec's render (and so its acceptance). */
void spec_memo_put_render(const kspec_key *k, const char *digest, const char *name,
                          const char *manifest);

#endif

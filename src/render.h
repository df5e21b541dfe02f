/* SPDX-License-Identifier: Apache-2.0 */
/* render.h — rendering a kernel template with parameters into CUDA C++ source and a manifest.
 *
 * A template (syntax: docs/templates.md; compiled by template.h) runs in a sandbox (sandbox.h)
 * whose globals hold the builtins: P (the read-only parameter table), emit(s), reject(sentence),
 * f32(x), f64(x), include(name) (runs templates/<name> in the same sandbox once per render and
 * returns its value), manifest_add(line) (a line of the kernel manifest, kept apart from the
 * source). Invariants:
 *  1. Every render gets a fresh sandbox: nothing survives between renders.
 *  2. Output is a pure function of (chunkname, text, parameters): the banner sorts parameters,
 *     pairs(P) walks keys in sorted order, the sandbox reads no clock, randomness or file, and
 *     the whole render runs under the "C" locale so that number formatting never depends on the
 *     host application's setlocale(). Same spec -> same bytes -> same cache key.
 *  3. On any failure `out` (and `manifest`) are left exactly as the caller passed them.
 */
#ifndef KLJIT_RENDER_H
#define KLJIT_RENDER_H

#include <stddef.h>
#include <stdint.h>

#include "sandbox.h"
#include "template.h"
#include "util.h"

typedef enum render_kind { RP_INT = 1, RP_NUM = 2, RP_STR = 3, RP_BOOL = 4 } render_kind;

/* One template parameter; P[key] in the template. */
typedef struct render_param {
  const char *key;
  render_kind kind;
  int64_t i;      /* RP_INT, RP_BOOL (0/1) */
  double d;       /* RP_NUM */
  const char *s;  /* RP_STR */
} render_param;

/* Renders template `name` (template_text: embedded, or under KLJIT_TEMPLATE_DIR) with `params`
 * into `out` (appended; caller frees). The output begins with a banner comment naming the
 * template and every parameter (sorted by key). Errors: KLJIT_ERR_UNSUPPORTED when the template
 * reject()s the parameters (message is the template's sentence), KLJIT_ERR_TEMPLATE for any
 * other failure, with "templates/<name>:<line>: ..." in the message. */
kljit_status render_template(const char *name, const render_param *params, size_t nparams,
                             strbuf *out);

/* Same, and the manifest_add() lines (each ended by '\n') appended to `manifest` (the kernel
 * interface of the module: templates/iface.cu.lua, src/kiface.h). */
kljit_status render_template_iface(const char *name, const render_param *params,
                                   size_t nparams, strbuf *out, strbuf *manifest);

/* The template's verdict on `params` without rendering, in a fresh sandbox: its prologue (every
 * reject() comes before its first text line, docs/templates.md) runs up to the first output.
 * KLJIT_SUCCESS, or the error render_template would give for a rejection. validator.h asks the
 * embedded templates the same faster. */
kljit_status render_prologue(const char *name, const render_param *params, size_t nparams);

/* Same as render_template, for a template given as text (tests; `chunkname` is used in error
 * messages). include() there reads the embedded templates. */
kljit_status render_text(const char *chunkname, const char *text, size_t len,
                         const render_param *params, size_t nparams, strbuf *out);

/* ---- one run's state, and what the kept validator (validator.c) runs a check with ---------- */

typedef struct render_ctx {
  sandbox sb;          /* the limits; sb.host is this struct, sb.chunkname "templates/<name>" */
  const strbuf *chunk; /* the compiled Lua source */
  const render_param *const *sorted;
  size_t nparams;
  strbuf *out;       /* NULL once rendering has finished (finalizers run in lua_close) */
  strbuf *manifest;  /* manifest_add() lines, or NULL when the caller wants none */
  const char *dir;   /* KLJIT_TEMPLATE_DIR for include(), or NULL: the embedded copies */
  int depth;         /* include() nesting, to turn a cycle into an error */
  size_t out_base;   /* out->len when rendering started */
  size_t manifest_bytes; /* appended to manifest by this render */
  int out_fatal;     /* the output limit was hit */
  template_part part; /* TEMPLATE_PROLOGUE: stop at the first output, the end of the checks */
  int validated;      /* ... and it was reached (a halt, so pcall cannot catch it) */
  char *reject_msg;   /* the sentence of the first reject(), malloc'd */
  kljit_status host_status; /* host malloc failure outside Lua's allocator */
} render_ctx;

/* Checks the parameters (keys, kinds, strings, no key twice) and sorts pointers to them by key
 * into sorted[nparams]. KLJIT_ERR_INVALID_ARGUMENT naming the parameter. */
kljit_status render_params(const char *chunkname, const render_param *params, size_t nparams,
                           const render_param **sorted);

/* Opens a sandbox with the renderer's builtins (under lua_pcall). */
void render_open(struct lua_State *L);

/* The function a compiled chunk takes (template.h, invariant 3): emits a text line. */
int render_text_out(struct lua_State *L);

/* Pushes the _ENV of one check in a kept state: the state's one environment table, emptied of
 * what the last check assigned, the globals readable through it, P holding ctx's parameters;
 * the files earlier checks include()d run in it too (under lua_pcall). */
void render_check_env(struct lua_State *L, const render_ctx *ctx);

/* The status of a run that ended with pcall `status` and error text `msg` (sets the last
 * error); a validation that reached its first output is a success. */
kljit_status render_outcome(const render_ctx *ctx, int status, const char *msg);

#endif

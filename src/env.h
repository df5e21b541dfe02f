/* SPDX-License-Identifier: Apache-2.0 */
/* env.h — the environment, read in one place (the one file of src/ that calls getenv).
 *
 * What the environment steers is documented once, in the table of env.c (the README and
 * kljit.h's kljit_context_options repeat it for users). It steers two kinds of things:
 *  - a context's options: env_context_defaults() fills a kljit_context_options from it, which
 *    kljit_context_create reads once (without caller options) and keeps; plans and executes
 *    read the context's options, never the environment, and planning without a context
 *    (precompile, kljit_plan_check) takes KLJIT_CONTEXT_OPTIONS_INIT, not these;
 *  - process-wide settings with no context to hang on (logging, template and dump
 *    directories, wisdom files, the cache of context-free calls such as kljit_precompile):
 *    read through env_text() when they are used.
 */
#ifndef KLJIT_ENV_H
#define KLJIT_ENV_H

#include <stddef.h>

#include "kljit_experimental.h"

typedef enum env_var {
  ENV_CACHE_DIR, ENV_CACHE_PATH, ENV_CACHE_DISABLE, ENV_XDG_CACHE_HOME, ENV_XDG_STATE_HOME, ENV_HOME,
  ENV_ROW_KERNEL, ENV_CHUNK_ROWS, ENV_TUNE_ROWS, ENV_TUNE_BUDGET_S, ENV_DEBUG_SKIP_GEMMS,
  ENV_TEMPLATE_DIR, ENV_DUMP_DIR, ENV_LOG, ENV_WISDOM, ENV_SYSTEM_WISDOM, ENV_GEMM, ENV_DX_SPLIT,
  ENV_CACHE_TRUSTED_OWNERS, ENV_COUNT
} env_var;

/* The variable's value now, or NULL when unset. */
const char *env_text(env_var v);

/* The variable's name ("KLJIT_CACHE_DIR"). */
const char *env_name(env_var v);

/* 1 when `v` is set to a value kljit does not take, with "NAME=value: want ..." in why. */
int env_bad(env_var v, char *why, size_t cap);

/* 1 with env_bad's sentence for the first variable a context's options or the logging knob
 * read that has a value env_bad refuses (callers refuse it: KLJIT_ERR_INVALID_ARGUMENT). */
int env_context_bad(char *why, size_t cap);

/* Same for the variables the context-free entry points read (KLJIT_CACHE_DISABLE, KLJIT_LOG):
 * they plan with KLJIT_CONTEXT_OPTIONS_INIT and read no option's variable. */
int env_cache_bad(char *why, size_t cap);

/* fn(name, value, known) for every KLJIT_* variable of the environment (known: one this table
 * holds). */
void env_each_kljit(void (*fn)(const char *name, const char *value, int known, void *user),
                    void *user);

/* A context's options as the environment sets them (kljit_context_options_default):
 * KLJIT_CONTEXT_OPTIONS_INIT and the variables that are set. String members point into the
 * environment: copy them before it may change. */
void env_context_defaults(kljit_context_options *o);

#endif

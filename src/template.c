/* SPDX-License-Identifier: Apache-2.0 */
/* template.c — compiles a kernel template into one Lua chunk and runs it in a sandbox.
 *
 * Invariants (docs/templates.md is the author's view of the same rules):
 *
 *  1. One template line becomes exactly one line of the generated chunk: a `%` line is copied
 *     (minus the `%`), a text line becomes `__kl_out("lit", (expr), "lit\n")`. Nothing else
 *     adds a newline (the chunk's prologue sits at the start of line 1), so every Lua message,
 *     syntax or runtime, names the template's own line: "templates/<name>:<line>: ...".
 *  2. Arguments of __kl_out alternate literal, value, literal, ..., literal (a literal may be
 *     ""), so an error on argument i can say which `{{ }}` of the line was at fault.
 *  3. Every render gets a fresh lua_State with our allocator: nothing survives between renders,
 *     memory is capped (RENDER_MEM_CAP), instructions are counted (RENDER_INSN_LIMIT).
 *     Hitting a limit, reject() and output overflow are "fatal": they are remembered in the
 *     render_ctx, and the sandbox's pcall/xpcall re-raise instead of swallowing them, so a
 *     template cannot catch its way past a limit.
 *  4. Output is a pure function of (chunkname, text, parameters): the banner sorts parameters,
 *     pairs(P) walks keys in sorted order, the libraries that read clocks, randomness or files
 *     are absent, and the whole render runs under the "C" locale so that number formatting
 *     never depends on the host application's setlocale().
 *  5. On any failure `out` is left exactly as the caller passed it.
 *
 * All Lua API calls that can raise run inside one lua_pcall (sandbox_main): an error outside
 * protected mode would call Lua's panic handler, which aborts the process.
 */
#include "template.h"
#include "env.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <lauxlib.h>
#include <locale.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Kernel sources are tens of KB and templates run in milliseconds; these limits are far above
 * any real template and exist to turn a runaway loop or allocation into an error message. */
enum { RENDER_MEM_CAP = 64 << 20, RENDER_OUT_CAP = 64 << 20, HOOK_EVERY = 10000 };
#define RENDER_INSN_LIMIT 50000000LL
/* CPU seconds one render (or one validation) may take. Instructions alone do not bound time:
 * one instruction can be a library call that loops in C (a backtracking string.find, a
 * table.move over 2^63 slots), and Lua runs __gc finalizers and error handlers with hooks off.
 * So the clock is read in the count hook, in the allocator and on entry to every library
 * function, each C loop is bounded by its input (guard_args), and finalizers and message
 * handlers cannot be installed. A real template renders in milliseconds. */
#define RENDER_CPU_LIMIT_S 1.0
#define RENDER_CPU_LIMIT_TEXT "1 s"
/* The most a single pattern-matching or table library call may do, in elementary steps. */
#define GUARD_STEP_LIMIT 1e8

typedef struct render_ctx {
  const char *chunkname; /* "templates/<name>" */
  const strbuf *chunk;   /* the compiled Lua source */
  const render_param *const *sorted;
  size_t nparams;
  strbuf *out;     /* NULL once rendering has finished (finalizers run in lua_close) */
  strbuf *manifest; /* manifest_add() lines, or NULL when the caller wants none */
  const char *dir;  /* KLJIT_TEMPLATE_DIR for include(), or NULL: the embedded copies */
  int depth;        /* include() nesting, to turn a cycle into an error */
  size_t out_base; /* out->len when rendering started */
  size_t manifest_bytes; /* appended to manifest by this render */
  size_t mem_used;
  long long insns;
  int mem_fatal;   /* the allocator refused an allocation past RENDER_MEM_CAP */
  int insn_fatal;  /* the instruction limit was hit */
  int time_fatal;  /* RENDER_CPU_LIMIT_S was exceeded */
  double cpu_start;  /* thread CPU time when the render started */
  double wall_start; /* and the monotonic clock then */
  unsigned allocs;  /* allocations since the clock was last read */
  int out_fatal;   /* the output limit was hit */
  int validate_only; /* render_validate: stop at the first output, the end of the checks */
  int validated;     /* ... and it was reached (a fatal condition, so pcall cannot catch it) */
  char *reject_msg;        /* the sentence of the first reject(), malloc'd */
  kljit_status host_status; /* host malloc failure outside Lua's allocator */
  char fatal_msg[512];     /* "file:line: instruction limit exceeded ..." */
} render_ctx;

static render_ctx *ctx_of(lua_State *L) {
  void *ud = NULL;
  lua_getallocf(L, &ud);
  return ud;
}

static int ctx_fatal(const render_ctx *ctx) {
  return ctx->mem_fatal || ctx->insn_fatal || ctx->time_fatal || ctx->out_fatal ||
         ctx->reject_msg || ctx->validated || ctx->host_status != KLJIT_SUCCESS;
}

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Sets time_fatal once the render has used its CPU budget; nonzero when it has. A thread's CPU
 * time never runs ahead of the wall clock, so the CPU clock (a system call) is read only once
 * the monotonic one (vDSO, nanoseconds) says the budget could be spent: checks stay cheap. */
static int out_of_time(render_ctx *ctx) {
  if (!ctx->time_fatal && clock_s(CLOCK_MONOTONIC) - ctx->wall_start > RENDER_CPU_LIMIT_S &&
      clock_s(CLOCK_THREAD_CPUTIME_ID) - ctx->cpu_start > RENDER_CPU_LIMIT_S)
    ctx->time_fatal = 1;
  return ctx->time_fatal;
}

/* ---- limits ------------------------------------------------------------------------------- */

/* Lua's allocator contract: when ptr is NULL, osize is a type tag, not a size; a shrink must
 * never fail. Once the cap is hit every later growth is refused too, so the emergency GC's
 * retry cannot turn the failure into a heisenbug that depends on collection timing. */
static void *sandbox_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  render_ctx *ctx = ud;
  const size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    free(ptr);
    ctx->mem_used -= old;
    return NULL;
  }
  if (nsize > old && (ctx->mem_fatal || ctx->mem_used - old + nsize > RENDER_MEM_CAP)) {
    ctx->mem_fatal = 1;
    return NULL;
  }
  /* a heavy library call allocates: the clock every 64 allocations or at any large one */
  if (nsize > old && (ctx->time_fatal || ((++ctx->allocs & 63) == 0 || nsize >= (1 << 20)))) {
    if (out_of_time(ctx)) return NULL; /* reported as the time limit (sandbox_outcome) */
  }
  void *p = realloc(ptr, nsize);
  if (!p) return NULL; /* a real host OOM: Lua reports "not enough memory" */
  ctx->mem_used = ctx->mem_used - old + nsize;
  return p;
}

/* Records the first fatal message with the Lua position at `level` and raises it. */
static int raise_fatal(lua_State *L, render_ctx *ctx, int level, const char *what) {
  if (!ctx->fatal_msg[0]) {
    luaL_where(L, level);
    snprintf(ctx->fatal_msg, sizeof ctx->fatal_msg, "%s%s", lua_tostring(L, -1), what);
    lua_pop(L, 1);
  }
  lua_pushstring(L, ctx->fatal_msg);
  return lua_error(L);
}

static void count_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  render_ctx *ctx = ctx_of(L);
  ctx->insns += HOOK_EVERY;
  if (out_of_time(ctx))
    raise_fatal(L, ctx, 0, "time limit exceeded (" RENDER_CPU_LIMIT_TEXT " of CPU)");
  if (ctx->insns < RENDER_INSN_LIMIT && !ctx->insn_fatal) return;
  ctx->insn_fatal = 1;
  char what[96];
  snprintf(what, sizeof what, "instruction limit exceeded (%lld Lua instructions)",
           RENDER_INSN_LIMIT);
  /* In a hook no new call frame exists: level 0 is the interrupted Lua function. */
  raise_fatal(L, ctx, 0, what);
}

/* ---- value formatting --------------------------------------------------------------------- */

/* Formats a finite float/double so that strtof/strtod give back the same bits: FLT_DECIMAL_DIG
 * (DBL_DECIMAL_DIG) significant digits in %e form always round-trip, and %e never depends on
 * the magnitude the way %g does. Zero is special-cased for readability ("0.0f", "-0.0f"). */
static void format_real(char *buf, size_t cap, double v, int digits, const char *suffix) {
  if (v == 0.0)
    snprintf(buf, cap, "%s0.0%s", signbit(v) ? "-" : "", suffix);
  else
    snprintf(buf, cap, "%.*e%s", digits - 1, v, suffix);
}

typedef enum real_type { REAL_F32, REAL_F64 } real_type;

static int builtin_real(lua_State *L, real_type type) {
  const char *fn = type == REAL_F32 ? "f32" : "f64";
  if (lua_type(L, 1) != LUA_TNUMBER)
    return luaL_error(L, "%s() expects a number, got %s", fn, luaL_typename(L, 1));
  /* An integer argument converts straight to the target type (one rounding, not two). */
  const int is_int = lua_isinteger(L, 1);
  const lua_Integer iv = is_int ? lua_tointeger(L, 1) : 0;
  const double d = is_int ? (double)iv : (double)lua_tonumber(L, 1);
  if (!isfinite(d))
    return luaL_error(L, "%s(%f): NaN and infinity have no C literal", fn, (lua_Number)d);
  char buf[64];
  if (type == REAL_F32) {
    const float f = is_int ? (float)iv : (float)d;
    if (isinf(f)) return luaL_error(L, "f32(%f): out of float range", (lua_Number)d);
    format_real(buf, sizeof buf, (double)f, FLT_DECIMAL_DIG, "f");
  } else {
    format_real(buf, sizeof buf, d, DBL_DECIMAL_DIG, "");
  }
  lua_pushstring(L, buf);
  return 1;
}

static int builtin_f32(lua_State *L) { return builtin_real(L, REAL_F32); }
static int builtin_f64(lua_State *L) { return builtin_real(L, REAL_F64); }

typedef enum value_site { SITE_TEXT_LINE, SITE_EMIT } value_site;

/* Appends every argument to the output with the strict {{ }} rules: strings as-is, integers
 * in decimal, booleans as true/false; floats are refused because a bare float has no type in
 * C (the author must say f32 or f64), nil usually means a misspelled P.NAME. */

static int append_values(lua_State *L, value_site site) {
  render_ctx *ctx = ctx_of(L);
  if (!ctx->out) return luaL_error(L, "emit() called after rendering finished");
  if (ctx->validate_only) { /* every reject() precedes the first output (docs/templates.md) */
    ctx->validated = 1;
    lua_pushliteral(L, "validated");
    return lua_error(L);
  }
  const int n = lua_gettop(L);
  for (int i = 1; i <= n; i++) {
    char num[32];
    const char *s = NULL;
    size_t len = 0;
    const int t = lua_type(L, i);
    if (t == LUA_TSTRING) {
      s = lua_tolstring(L, i, &len);
    } else if (t == LUA_TNUMBER && lua_isinteger(L, i)) {
      len = (size_t)snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, i));
      s = num;
    } else if (t == LUA_TBOOLEAN) {
      s = lua_toboolean(L, i) ? "true" : "false";
      len = strlen(s);
    } else {
      const char *what = site == SITE_TEXT_LINE ? "{{ }}" : "emit()";
      const char *hint = t == LUA_TNUMBER ? ": write f32(x) or f64(x) to choose the literal's type"
                                          : "";
      /* Text-line arguments alternate literal/value (invariant 2): value k is argument 2k. */
      const int nsubs = (n - 1) / 2;
      if (t == LUA_TNUMBER)
        lua_pushfstring(L, "a float (%f)", lua_tonumber(L, i));
      else
        lua_pushfstring(L, "%s", luaL_typename(L, i));
      if (site == SITE_TEXT_LINE && nsubs > 1)
        return luaL_error(L, "%s value %d of %d on this line is %s%s", what, i / 2, nsubs,
                          lua_tostring(L, -1), hint);
      return luaL_error(L, "%s value is %s%s", what, lua_tostring(L, -1), hint);
    }
    if (ctx->out->len - ctx->out_base + ctx->manifest_bytes + len > RENDER_OUT_CAP) {
      ctx->out_fatal = 1;
      return raise_fatal(L, ctx, 1, "output limit exceeded (64 MiB of rendered text)");
    }
    kljit_status st = sb_append(ctx->out, s, len);
    if (st != KLJIT_SUCCESS) {
      ctx->host_status = st;
      return luaL_error(L, "out of host memory");
    }
  }
  return 0;
}

static int builtin_emit(lua_State *L) { return append_values(L, SITE_EMIT); }
static int text_out(lua_State *L) { return append_values(L, SITE_TEXT_LINE); }

static int builtin_reject(lua_State *L) {
  render_ctx *ctx = ctx_of(L);
  const char *sentence = luaL_checkstring(L, 1);
  if (!ctx->reject_msg) {
    ctx->reject_msg = strdup(sentence);
    if (!ctx->reject_msg) ctx->host_status = KLJIT_ERR_OUT_OF_MEMORY;
  }
  lua_pushstring(L, ctx->reject_msg ? ctx->reject_msg : sentence);
  return lua_error(L);
}

/* manifest_add(line): one line of the kernel manifest (templates/iface.cu.lua writes them). The
 * renderer keeps them apart from the source, for the caller to store with the cubin. */
static int builtin_manifest_add(lua_State *L) {
  render_ctx *ctx = ctx_of(L);
  size_t len = 0;
  const char *line = luaL_checklstring(L, 1, &len);
  if (memchr(line, '\n', len) || strlen(line) != len)
    return luaL_error(L, "manifest_add: a manifest line holds no newline or NUL");
  if (!ctx->manifest) return 0;
  /* the manifest is rendered text too: it counts against the output cap with the source */
  ctx->manifest_bytes += len + 1;
  if (ctx->out->len - ctx->out_base + ctx->manifest_bytes > RENDER_OUT_CAP) {
    ctx->out_fatal = 1;
    return raise_fatal(L, ctx, 1, "output limit exceeded (64 MiB of rendered text and manifest)");
  }
  kljit_status st = sb_append(ctx->manifest, line, len);
  if (st == KLJIT_SUCCESS) st = sb_append(ctx->manifest, "\n", 1);
  if (st != KLJIT_SUCCESS) {
    ctx->host_status = st;
    return luaL_error(L, "out of host memory");
  }
  return 0;
}

typedef enum render_mode { RENDER_FULL, RENDER_VALIDATE } render_mode;
static kljit_status compile_template(const char *chunkname, const char *text, size_t len,
                                     render_mode mode, strbuf *lua);
static kljit_status read_template_file(const char *dir, const char *name, strbuf *text);

/* The text of template `name`: from ctx->dir when set, else the embedded copy (a Lua string
 * on the stack, so that an error raised later frees nothing by hand). */
static int push_template_text(lua_State *L, const render_ctx *ctx, const char *name) {
  if (ctx->dir) {
    strbuf text = {0};
    if (read_template_file(ctx->dir, name, &text) != KLJIT_SUCCESS) {
      sb_free(&text);
      return luaL_error(L, "include(\"%s\"): %s", name, kljit_last_error());
    }
    lua_pushlstring(L, text.data ? text.data : "", text.len);
    sb_free(&text);
    return 1;
  }
  const template_file *t = template_files;
  while (t->name && strcmp(t->name, name) != 0) t++;
  if (!t->name) return luaL_error(L, "include(\"%s\"): no such template", name);
  lua_pushlstring(L, t->text, t->len);
  return 1;
}

/* Pushes the registry's table `key`, made empty on first use. */
static void registry_table(lua_State *L, const char *key) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_newtable(L);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, key);
}

/* include(name): runs templates/<name> in the same sandbox (same P, same builtins), its text
 * lines emitted where the include stands, and returns what that chunk returns. A file is run
 * once per render (a kept validation sandbox keeps it across checks: validator_call): a second
 * include returns the first one's value, so fragments may include
 * what they need without duplicating definitions in the output. */
static int builtin_include(lua_State *L) {
  render_ctx *ctx = ctx_of(L);
  const char *name = luaL_checkstring(L, 1);
  if (!*name || strchr(name, '/'))
    return luaL_error(L, "include(\"%s\"): a template file name, without a directory", name);
  lua_settop(L, 1);
  registry_table(L, "kljit.included");
  const int done = 2;
  if (lua_getfield(L, done, name) != LUA_TNIL) {
    if (lua_type(L, -1) == LUA_TLIGHTUSERDATA) /* the marker of a file still running */
      return luaL_error(L, "include(\"%s\"): the file includes itself (an include cycle)",
                        name);
    return 1;
  }
  lua_pop(L, 1);
  if (ctx->depth >= 16) return luaL_error(L, "include(\"%s\"): nested too deeply", name);
  lua_pushlightuserdata(L, ctx);
  lua_setfield(L, done, name);
  /* The loaded chunk of each file, kept in the state: a kept validation sandbox (tens of
   * thousands of checks for one wisdom file) parses an included file once, not per check. */
  registry_table(L, "kljit.chunks");
  const int chunks = 3;
  if (lua_getfield(L, chunks, name) != LUA_TFUNCTION) {
    lua_pop(L, 1);
    push_template_text(L, ctx, name);         /* 4 */
    lua_pushfstring(L, "templates/%s", name); /* 5 */
    size_t len = 0;
    const char *text = lua_tolstring(L, 4, &len);
    strbuf chunk = {0};
    kljit_status st = compile_template(lua_tostring(L, 5), text, len, RENDER_FULL, &chunk);
    if (st != KLJIT_SUCCESS) {
      sb_free(&chunk);
      return luaL_error(L, "%s", kljit_last_error());
    }
    lua_pushfstring(L, "@%s", lua_tostring(L, 5));
    const int lst = luaL_loadbufferx(L, chunk.data, chunk.len, lua_tostring(L, -1), "t");
    sb_free(&chunk);
    if (lst != LUA_OK) return lua_error(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, chunks, name);
  }
  if (lua_getfield(L, LUA_REGISTRYINDEX, "kljit.env") == LUA_TTABLE) {
    if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1); /* the including render's _ENV */
  } else {
    lua_pop(L, 1);
  }
  lua_pushcfunction(L, text_out);
  ctx->depth++;
  lua_call(L, 1, 1);
  ctx->depth--;
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, done, name);
  return 1;
}

/* ---- the sandboxed base library ----------------------------------------------------------- */

/* load() restricted to text: the original load (upvalue 1) is called with mode "t" whatever
 * the caller asked for; a missing env stays missing so the chunk gets the sandbox globals. */
static int sandbox_load(lua_State *L) {
  lua_settop(L, lua_gettop(L) < 4 ? 3 : 4);
  lua_pushliteral(L, "t");
  lua_replace(L, 3);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* Mirrors lbaselib's finishpcall, except that fatal conditions (invariant 3) are re-raised. */
static int finish_pcall(lua_State *L, int status, int extra) {
  if (status != LUA_OK) {
    if (ctx_fatal(ctx_of(L))) return lua_error(L);
    lua_pushboolean(L, 0);
    lua_pushvalue(L, -2);
    return 2;
  }
  return lua_gettop(L) - extra;
}

static int sandbox_pcall(lua_State *L) {
  luaL_checkany(L, 1);
  lua_pushboolean(L, 1);
  lua_insert(L, 1);
  return finish_pcall(L, lua_pcall(L, lua_gettop(L) - 2, LUA_MULTRET, 0), 0);
}

/* xpcall(f, msgh, ...): Lua runs a message handler with hooks off when the error comes from a
 * hook (the instruction or time limit), where `while true do end` would never stop. So f runs
 * under a plain pcall and msgh is called afterwards, as an ordinary (hooked) function, with
 * the error: the same results, minus a traceback taken at the point of the error. */
static int sandbox_xpcall(lua_State *L) {
  const int n = lua_gettop(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 1);
  lua_rotate(L, 3, 1); /* f, msgh, f, args... */
  const int status = lua_pcall(L, n - 2, LUA_MULTRET, 0);
  if (status == LUA_OK) {
    lua_pushboolean(L, 1);
    lua_replace(L, 1); /* true, msgh, results... -> drop msgh */
    lua_remove(L, 2);
    return lua_gettop(L);
  }
  if (ctx_fatal(ctx_of(L))) return lua_error(L);
  lua_pushvalue(L, 2);
  lua_insert(L, -2); /* msgh, err */
  const int hstatus = lua_pcall(L, 1, 1, 0);
  if (hstatus != LUA_OK && ctx_fatal(ctx_of(L))) return lua_error(L);
  lua_pushboolean(L, 0);
  lua_insert(L, -2);
  return 2;
}

/* setmetatable with a __gc field would make a finalizer, which Lua runs with hooks off (and in
 * lua_close, after the outcome is decided): refused. Without the field at this call the table
 * is never marked for finalization, so adding __gc later does nothing. Upvalue 1: the original. */
static int sandbox_setmetatable(lua_State *L) {
  if (lua_type(L, 2) == LUA_TTABLE && lua_getfield(L, 2, "__gc") != LUA_TNIL)
    return luaL_error(L,
                      "setmetatable: __gc metamethods (finalizers) are not allowed in templates");
  lua_settop(L, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, 2, 1);
  return 1;
}

/* ---- guarded library calls --------------------------------------------------------------- */

typedef enum guard_kind { G_CLOCK, G_FIND, G_MATCH, G_GSUB, G_MOVE, G_SORT } guard_kind;

/* Elementary steps a Lua pattern match over n bytes may take, bounded from above: every start
 * position (unless anchored) times n per repetition item, times the pattern length. */
static double pattern_steps(size_t n, const char *p, size_t m, int plain) {
  const double len = (double)n + 1;
  if (plain) return len * (double)(m + 1);
  int reps = 0, special = 0;
  for (size_t i = 0; i < m; i++) {
    const char c = p[i];
    if (c == '%' && i + 1 < m) {
      const char d = p[++i];
      if (d == 'b' || d == 'f' || (d >= '0' && d <= '9')) reps++, special = 1;
      continue;
    }
    if (c == '*' || c == '+' || c == '-' || c == '?') reps++;
    if (strchr("^$*+?.([-", c)) special = 1;
  }
  if (!special) return len * (double)(m + 1); /* a literal: as plain */
  double steps = (double)(m + 1) * (m && p[0] == '^' ? 1.0 : len);
  for (int r = 0; r < reps && steps <= GUARD_STEP_LIMIT; r++) steps *= len;
  return steps;
}

/* Refuses a call whose C loop could run past the limits (raises), else returns. */
static void guard_args(lua_State *L, guard_kind kind) {
  double steps = 0;
  const char *what = "";
  switch (kind) {
    case G_CLOCK:
      return;
    case G_FIND:
    case G_MATCH:
    case G_GSUB: {
      if (lua_type(L, 1) != LUA_TSTRING && lua_type(L, 1) != LUA_TNUMBER) return;
      if (lua_type(L, 2) != LUA_TSTRING && lua_type(L, 2) != LUA_TNUMBER) return;
      size_t n = 0, m = 0;
      lua_tolstring(L, 1, &n); /* a number argument becomes its string, as the callee would */
      const char *p = lua_tolstring(L, 2, &m);
      const int plain = kind == G_FIND && lua_toboolean(L, 4);
      steps = pattern_steps(n, p, m, plain);
      what = "string pattern too costly for the template sandbox (subject and pattern length, "
             "repetitions)";
      break;
    }
    case G_MOVE: {
      const lua_Integer f = luaL_optinteger(L, 2, 1), e = luaL_optinteger(L, 3, 0);
      steps = e >= f ? 10 * ((double)e - (double)f + 1) : 0; /* a get and a set each */
      what = "table.move of too many elements for the template sandbox";
      break;
    }
    case G_SORT:
      if (lua_type(L, 1) != LUA_TTABLE) return;
      steps = (double)lua_rawlen(L, 1);
      steps *= steps > 1 ? 10 * log2(steps) : 1; /* compares and swaps of Lua values */
      what = "table.sort of too many elements for the template sandbox";
      break;
  }
  if (steps > GUARD_STEP_LIMIT) {
    char msg[256]; /* lua_pushfstring knows no %e */
    snprintf(msg, sizeof msg, "%s (over %.0e steps)", what, GUARD_STEP_LIMIT);
    luaL_error(L, "%s", msg);
  }
}

/* Upvalues: 1 the library function, 2 its guard_kind. The clock first: many short but heavy
 * calls under the instruction budget end here too. */
static int guarded_call(lua_State *L) {
  render_ctx *ctx = ctx_of(L);
  if (out_of_time(ctx))
    return raise_fatal(L, ctx, 1, "time limit exceeded (" RENDER_CPU_LIMIT_TEXT " of CPU)");
  guard_args(L, (guard_kind)lua_tointeger(L, lua_upvalueindex(2)));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* Wraps every C function of the table on top in guarded_call. */
static void guard_table(lua_State *L, const char *const *names, const guard_kind *kinds) {
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    /* error() stays itself: its level argument counts call frames, a wrapper would be one */
    if (lua_iscfunction(L, -1) && lua_type(L, -2) == LUA_TSTRING &&
        strcmp(lua_tostring(L, -2), "error") != 0) {
      guard_kind kind = G_CLOCK;
      for (int i = 0; names && names[i]; i++)
        if (!strcmp(lua_tostring(L, -2), names[i])) kind = kinds[i];
      lua_pushinteger(L, kind);
      lua_pushcclosure(L, guarded_call, 2);
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, -4); /* same key, so lua_next goes on */
    } else {
      lua_pop(L, 1);
    }
  }
}

/* string.rep of an empty string with a huge count loops in C, where the instruction hook
 * never fires; everything else goes to the original (upvalue 1). */
static int sandbox_rep(lua_State *L) {
  size_t l = 0, lsep = 0;
  luaL_checklstring(L, 1, &l);
  const lua_Integer n = luaL_checkinteger(L, 2);
  luaL_optlstring(L, 3, "", &lsep);
  if (n > 0 && l + lsep == 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* ---- P: the read-only parameter table ----------------------------------------------------- */

static int p_newindex(lua_State *L) {
  return luaL_error(L, "P is read-only (assignment to P.%s)",
                    lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : luaL_typename(L, 2));
}

/* Upvalues: 1 sorted key array, 2 key -> position, 3 key -> value. Hash order differs between
 * lua_States (Lua seeds string hashes per state), so pairs(P) must not use next(). */
static int p_next(lua_State *L) {
  lua_Integer i = 0;
  if (!lua_isnil(L, 2)) {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(2));
    i = lua_tointeger(L, -1);
    if (i == 0) return luaL_error(L, "invalid key to pairs(P)");
  }
  if (lua_rawgeti(L, lua_upvalueindex(1), i + 1) == LUA_TNIL) return 1;
  lua_pushvalue(L, -1);
  lua_rawget(L, lua_upvalueindex(3));
  return 2;
}

/* Upvalue 1: key -> value. The sorted key order is built here, on demand, from the render's
 * sorted parameters: most renders (and every validation) never walk P, and building it for
 * each of them was a large part of checking a big wisdom file. */
static int p_pairs(lua_State *L) {
  const render_ctx *ctx = ctx_of(L);
  lua_createtable(L, (int)ctx->nparams, 0); /* keys */
  lua_createtable(L, 0, (int)ctx->nparams); /* positions */
  for (size_t k = 0; k < ctx->nparams; k++) {
    lua_pushstring(L, ctx->sorted[k]->key);
    lua_rawseti(L, -3, (lua_Integer)k + 1);
    lua_pushinteger(L, (lua_Integer)k + 1);
    lua_setfield(L, -2, ctx->sorted[k]->key);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushcclosure(L, p_next, 3);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

static void push_param_value(lua_State *L, const render_param *p) {
  switch (p->kind) {
    case RP_INT: lua_pushinteger(L, (lua_Integer)p->i); break;
    case RP_NUM: lua_pushnumber(L, (lua_Number)p->d); break;
    case RP_STR: lua_pushstring(L, p->s); break;
    case RP_BOOL: lua_pushboolean(L, p->i != 0); break;
  }
}

/* A userdata, not a table: rawset() and next() cannot reach around the metatable, and
 * __metatable hides the metatable from getmetatable/setmetatable. */
static void push_params(lua_State *L, const render_ctx *ctx) {
  lua_newuserdatauv(L, 0, 0);
  lua_createtable(L, 0, 4); /* metatable */
  lua_createtable(L, 0, (int)ctx->nparams); /* values */
  for (size_t k = 0; k < ctx->nparams; k++) {
    push_param_value(L, ctx->sorted[k]);
    lua_setfield(L, -2, ctx->sorted[k]->key);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "__index"); /* metatable.__index = values */
  lua_pushcclosure(L, p_pairs, 1);
  lua_setfield(L, -2, "__pairs");
  lua_pushcfunction(L, p_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_pushliteral(L, "P is read-only");
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
}

/* Replaces field `name` of the table on top with a closure over its current value. */
static void wrap_field(lua_State *L, const char *name, lua_CFunction fn) {
  lua_getfield(L, -1, name);
  lua_pushcclosure(L, fn, 1);
  lua_setfield(L, -2, name);
}

static void remove_fields(lua_State *L, const char *const *names) {
  for (; *names; names++) {
    lua_pushnil(L);
    lua_setfield(L, -2, *names);
  }
}

/* The sandbox's globals: the libraries (trimmed and wrapped) and the builtins; no P yet. */
static void sandbox_open(lua_State *L) {
  static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},
                                  {LUA_STRLIBNAME, luaopen_string},
                                  {LUA_TABLIBNAME, luaopen_table},
                                  {LUA_MATHLIBNAME, luaopen_math}};
  for (size_t k = 0; k < sizeof libs / sizeof libs[0]; k++) {
    luaL_requiref(L, libs[k].name, libs[k].func, 1);
    lua_pop(L, 1);
  }
  /* Files, the collector's knobs (nondeterministic timing), printing, warnings: none of them
   * belongs in a code generator. require/package/io/os/debug were never opened. */
  static const char *const base_gone[] = {"dofile", "loadfile", "collectgarbage", "print",
                                          "warn", "require", NULL};
  static const char *const string_gone[] = {"dump", NULL};
  static const char *const math_gone[] = {"random", "randomseed", NULL};
  lua_pushglobaltable(L);
  remove_fields(L, base_gone);
  wrap_field(L, "load", sandbox_load);
  lua_pushcfunction(L, sandbox_pcall);
  lua_setfield(L, -2, "pcall");
  lua_pushcfunction(L, sandbox_xpcall);
  lua_setfield(L, -2, "xpcall");
  lua_getfield(L, -1, LUA_STRLIBNAME);
  remove_fields(L, string_gone);
  wrap_field(L, "rep", sandbox_rep);
  lua_pop(L, 1);
  lua_getfield(L, -1, LUA_MATHLIBNAME);
  remove_fields(L, math_gone);
  lua_pop(L, 1);
  wrap_field(L, "setmetatable", sandbox_setmetatable);
  static const char *const string_fns[] = {"find", "match", "gmatch", "gsub", NULL};
  static const guard_kind string_kinds[] = {G_FIND, G_MATCH, G_MATCH, G_GSUB};
  static const char *const table_fns[] = {"move", "sort", NULL};
  static const guard_kind table_kinds[] = {G_MOVE, G_SORT};
  guard_table(L, NULL, NULL); /* the base functions: the clock */
  lua_getfield(L, -1, LUA_STRLIBNAME);
  guard_table(L, string_fns, string_kinds);
  lua_pop(L, 1);
  lua_getfield(L, -1, LUA_TABLIBNAME);
  guard_table(L, table_fns, table_kinds);
  lua_pop(L, 1);
  lua_getfield(L, -1, LUA_MATHLIBNAME);
  guard_table(L, NULL, NULL);
  lua_pop(L, 1);
  static const luaL_Reg builtins[] = {{"emit", builtin_emit},
                                      {"reject", builtin_reject},
                                      {"include", builtin_include},
                                      {"manifest_add", builtin_manifest_add},
                                      {"f32", builtin_f32},
                                      {"f64", builtin_f64},
                                      {NULL, NULL}};
  luaL_setfuncs(L, builtins, 0);
  lua_pop(L, 1);
}

static int sandbox_main(lua_State *L) {
  render_ctx *ctx = lua_touserdata(L, 1);
  sandbox_open(L);
  lua_pushglobaltable(L);
  push_params(L, ctx);
  lua_setfield(L, -2, "P");
  lua_setfield(L, LUA_REGISTRYINDEX, "kljit.env"); /* include()'d files run in it too */

  /* '@' makes Lua print the chunkname as a file name ("templates/x.cu.lua:3: ..."). */
  lua_pushfstring(L, "@%s", ctx->chunkname);
  if (luaL_loadbufferx(L, ctx->chunk->data, ctx->chunk->len, lua_tostring(L, -1), "t") !=
      LUA_OK)
    return lua_error(L);
  lua_pushcfunction(L, text_out);
  lua_call(L, 1, 0);
  return 0;
}

/* ---- compiling the template into a chunk -------------------------------------------------- */

/* A Lua string literal that holds exactly the given bytes on one source line: control bytes
 * as three-digit \ddd (so a following digit cannot extend the escape), tab kept as is. */
static kljit_status append_quoted(strbuf *lua, const char *s, size_t n) {
  kljit_status st = sb_append(lua, "\"", 1);
  for (size_t k = 0; k < n && st == KLJIT_SUCCESS; k++) {
    const unsigned char c = (unsigned char)s[k];
    if (c == '"' || c == '\\') {
      const char esc[2] = {'\\', (char)c};
      st = sb_append(lua, esc, 2);
    } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
      st = sb_printf(lua, "\\%03u", (unsigned)c);
    } else {
      st = sb_append(lua, (const char *)&c, 1);
    }
  }
  return st != KLJIT_SUCCESS ? st : sb_append(lua, "\"", 1);
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* One text line (without its '\n') -> `__kl_out(lit, (expr), lit, ..., lit)`. */
static kljit_status compile_text_line(const char *chunkname, int lineno, const char *line,
                                      size_t n, int has_newline, strbuf *lua) {
  kljit_status st = sb_append(lua, "__kl_out(", 9);
  size_t pos = 0;
  for (;;) {
    const char *open = NULL;
    for (size_t k = pos; k + 1 < n; k++)
      if (line[k] == '{' && line[k + 1] == '{') {
        open = line + k;
        break;
      }
    if (!open) break;
    const size_t o = (size_t)(open - line);
    size_t c = o + 2;
    while (c + 1 < n && !(line[c] == '}' && line[c + 1] == '}')) c++;
    if (c + 1 >= n)
      return err_set(KLJIT_ERR_TEMPLATE, "%s:%d: '{{' without a closing '}}' on the same line",
                     chunkname, lineno);
    size_t b = o + 2, e = c;
    while (b < e && is_blank(line[b])) b++;
    while (e > b && is_blank(line[e - 1])) e--;
    if (b == e) return err_set(KLJIT_ERR_TEMPLATE, "%s:%d: empty '{{ }}'", chunkname, lineno);
    if (st == KLJIT_SUCCESS) st = append_quoted(lua, line + pos, o - pos);
    if (st == KLJIT_SUCCESS) st = sb_append(lua, ", (", 3);
    if (st == KLJIT_SUCCESS) st = sb_append(lua, line + b, e - b);
    if (st == KLJIT_SUCCESS) st = sb_append(lua, "), ", 3);
    pos = c + 2;
  }
  strbuf tail = {0};
  if (st == KLJIT_SUCCESS) st = sb_append(&tail, line + pos, n - pos);
  if (st == KLJIT_SUCCESS && has_newline) st = sb_append(&tail, "\n", 1);
  if (st == KLJIT_SUCCESS) st = append_quoted(lua, tail.data ? tail.data : "", tail.len);
  sb_free(&tail);
  return st != KLJIT_SUCCESS ? st : sb_append(lua, ")", 1);
}

/* RENDER_VALIDATE compiles the prologue only: the `%` lines before the first text line, where
 * every reject() is (docs/templates.md); Lua then parses tens of lines, not the whole file. */
static kljit_status compile_template(const char *chunkname, const char *text, size_t len,
                                     render_mode mode, strbuf *lua) {
  /* The prologue shares line 1 with the template's first line (invariant 1). */
  kljit_status st = sb_printf(lua, "local __kl_out = ...; ");
  int lineno = 1;
  for (size_t start = 0; start < len && st == KLJIT_SUCCESS; lineno++) {
    const char *nl = memchr(text + start, '\n', len - start);
    const size_t end = nl ? (size_t)(nl - text) : len;
    const char *line = text + start;
    size_t n = end - start, p = 0;
    while (p < n && is_blank(line[p])) p++;
    if (p < n && line[p] == '%') {
      /* A '\r' is a line break to Lua's lexer; keeping it would shift every later line. */
      if (n > p + 1 && line[n - 1] == '\r') n--;
      st = sb_append(lua, line + p + 1, n - p - 1);
    } else if (mode == RENDER_VALIDATE) {
      break;
    } else {
      st = compile_text_line(chunkname, lineno, line, n, nl != NULL, lua);
    }
    if (st == KLJIT_SUCCESS) st = sb_append(lua, "\n", 1);
    start = end + 1;
  }
  return st;
}

/* ---- banner and parameters ---------------------------------------------------------------- */

/* A control character in a banner value would end the // comment and inject source text. */
static int has_control(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) return 1;
  return 0;
}

/* The orders this thread last sorted parameter lists into, by the keys' addresses: the specs of
 * one family pass the same key literals in the same order, and sorting them afresh for each of
 * the ~50 000 checks of a large wisdom import was a tenth of it. An order found here is only a
 * guess, used once it is verified. */
enum { ORDER_SLOTS = 4, ORDER_MAX = 64 };
typedef struct param_order {
  size_t n;
  const char *key[ORDER_MAX];
  unsigned char at[ORDER_MAX]; /* sorted[k] = &params[at[k]] */
} param_order;
static _Thread_local param_order orders[ORDER_SLOTS];
static _Thread_local unsigned orders_next;

/* Sorts &params[0..n) by key into sorted. 1 when the keys are known to be strictly ascending
 * (so none repeats), else 0 (sorted, a repeat not looked for). */
static int sort_params(const render_param *params, size_t n, const render_param **sorted) {
  for (int c = 0; c < ORDER_SLOTS && n <= ORDER_MAX; c++) {
    const param_order *o = &orders[c];
    size_t k = 0;
    while (o->n == n && k < n && o->key[k] == params[k].key) k++;
    if (o->n != n || k < n) continue;
    for (k = 0; k < n; k++) sorted[k] = &params[o->at[k]];
    for (k = 1; k < n && strcmp(sorted[k - 1]->key, sorted[k]->key) < 0; k++) continue;
    if (k >= n) return 1; /* else the same addresses now hold other keys */
  }
  for (size_t k = 0; k < n; k++) sorted[k] = &params[k];
  for (size_t k = 1; k < n; k++) { /* insertion sort: a few dozen parameters */
    const render_param *p = sorted[k];
    size_t j = k;
    for (; j > 0 && strcmp(sorted[j - 1]->key, p->key) > 0; j--) sorted[j] = sorted[j - 1];
    sorted[j] = p;
  }
  if (n <= ORDER_MAX) {
    param_order *o = &orders[orders_next++ % ORDER_SLOTS];
    o->n = n;
    for (size_t k = 0; k < n; k++)
      o->key[k] = params[k].key, o->at[k] = (unsigned char)(sorted[k] - params);
  }
  return 0;
}

static kljit_status check_params(const char *chunkname, const render_param *params,
                                 size_t nparams, const render_param **sorted) {
  for (size_t k = 0; k < nparams; k++) {
    const render_param *p = &params[k];
    if (!p->key || !*p->key || has_control(p->key))
      return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                     "%s: parameter %zu has a NULL, empty or unprintable key", chunkname, k);
    if (p->kind != RP_INT && p->kind != RP_NUM && p->kind != RP_STR && p->kind != RP_BOOL)
      return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: parameter %s has kind %d", chunkname,
                     p->key, (int)p->kind);
    if (p->kind == RP_STR && (!p->s || has_control(p->s)))
      return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                     "%s: string parameter %s is NULL or holds a control character", chunkname,
                     p->key);
  }
  if (sort_params(params, nparams, sorted)) return KLJIT_SUCCESS; /* strictly ascending */
  for (size_t k = 1; k < nparams; k++)
    if (strcmp(sorted[k - 1]->key, sorted[k]->key) == 0)
      return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: parameter %s is given twice", chunkname,
                     sorted[k]->key);
  return KLJIT_SUCCESS;
}

static kljit_status write_banner(const char *chunkname, const render_param *const *sorted,
                                 size_t nparams, strbuf *out) {
  kljit_status st = sb_printf(out, "// Generated by kljit %s from %s\n// parameters:",
                              KLJIT_VERSION_STRING, chunkname);
  for (size_t k = 0; k < nparams && st == KLJIT_SUCCESS; k++) {
    const render_param *p = sorted[k];
    const char *sep = k ? ", " : " ";
    switch (p->kind) {
      case RP_INT: st = sb_printf(out, "%s%s=%lld", sep, p->key, (long long)p->i); break;
      case RP_NUM: st = sb_printf(out, "%s%s=%.17g", sep, p->key, p->d); break;
      case RP_STR: st = sb_printf(out, "%s%s=%s", sep, p->key, p->s); break;
      case RP_BOOL: st = sb_printf(out, "%s%s=%s", sep, p->key, p->i ? "true" : "false"); break;
    }
  }
  if (st == KLJIT_SUCCESS && nparams == 0) st = sb_append(out, " (none)", 7);
  return st != KLJIT_SUCCESS ? st : sb_append(out, "\n", 1);
}

/* ---- running ------------------------------------------------------------------------------ */

/* Decides the outcome from the pcall status and the fatal flags (invariant 3). */
static kljit_status sandbox_outcome(const render_ctx *ctx, int status, const char *msg) {
  if (status == LUA_OK && !ctx_fatal(ctx)) return KLJIT_SUCCESS;
  if (ctx->validated && !ctx->reject_msg && !ctx->mem_fatal && !ctx->insn_fatal &&
      !ctx->time_fatal && ctx->host_status == KLJIT_SUCCESS)
    return KLJIT_SUCCESS;
  const char *name = ctx->chunkname;
  if (ctx->host_status != KLJIT_SUCCESS)
    return err_set(ctx->host_status, "%s: out of host memory while rendering", name);
  if (ctx->reject_msg) return err_set(KLJIT_ERR_UNSUPPORTED, "%s: %s", name, ctx->reject_msg);
  if (ctx->time_fatal && ctx->fatal_msg[0]) /* with the position where it was seen */
    return err_set(KLJIT_ERR_TEMPLATE, "%s", ctx->fatal_msg);
  if (ctx->time_fatal) /* seen by the allocator */
    return err_set(KLJIT_ERR_TEMPLATE, "%s: time limit exceeded (" RENDER_CPU_LIMIT_TEXT
                   " of CPU)", name);
  if (ctx->insn_fatal || ctx->out_fatal) return err_set(KLJIT_ERR_TEMPLATE, "%s", ctx->fatal_msg);
  if (ctx->mem_fatal)
    return err_set(KLJIT_ERR_TEMPLATE, "%s: memory limit exceeded (%d MiB)", name,
                   RENDER_MEM_CAP >> 20);
  if (status == LUA_ERRMEM)
    return err_set(KLJIT_ERR_OUT_OF_MEMORY, "%s: out of host memory while rendering", name);
  /* Lua positions start with the chunkname; error("x", 0) and friends get it added. */
  const size_t nlen = strlen(name);
  if (strncmp(msg, name, nlen) == 0 && msg[nlen] == ':')
    return err_set(KLJIT_ERR_TEMPLATE, "%s", msg);
  return err_set(KLJIT_ERR_TEMPLATE, "%s: %s", name, msg);
}

static kljit_status run_sandbox(render_ctx *ctx) {
  lua_State *L = lua_newstate(sandbox_alloc, ctx);
  if (!L) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "%s: cannot create a Lua state", ctx->chunkname);
  lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_EVERY);
  lua_pushcfunction(L, sandbox_main);
  lua_pushlightuserdata(L, ctx);
  const int status = lua_pcall(L, 1, 0, 0);
  /* Converting a non-string error object could raise outside protected mode: only copy. */
  char msg[2048] = "";
  if (status != LUA_OK) {
    if (lua_type(L, -1) == LUA_TSTRING)
      snprintf(msg, sizeof msg, "%s", lua_tostring(L, -1));
    else
      snprintf(msg, sizeof msg, "(error object is a %s value)", luaL_typename(L, -1));
  }
  /* Decided before lua_close: __gc finalizers run there, at no point the template controls,
   * and must not change the outcome; emit() refuses once out is NULL. */
  const kljit_status st = sandbox_outcome(ctx, status, msg);
  ctx->out = NULL;
  lua_close(L);
  return st;
}

static kljit_status render_run(const char *chunkname, const char *text, size_t len,
                               const render_param *params, size_t nparams, const char *dir,
                               strbuf *out, strbuf *manifest, render_mode mode) {
  if (!chunkname || !out || (!text && len) || (!params && nparams))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "render_text: chunkname, out, text (when len > 0) and params (when "
                   "nparams > 0) must not be NULL");
  const render_param **sorted = calloc(nparams ? nparams : 1, sizeof *sorted);
  if (!sorted) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "%s: out of host memory", chunkname);
  strbuf lua = {0};
  const size_t base = out->len, mbase = manifest ? manifest->len : 0;
  kljit_status st = check_params(chunkname, params, nparams, sorted);
  if (st == KLJIT_SUCCESS) st = compile_template(chunkname, text ? text : "", len, mode, &lua);

  /* Lua's tostring/string.format and our %.17g follow LC_NUMERIC; a host application that
   * called setlocale() must not change the bytes (a "0,5" would also break the CUDA source). */
  locale_t c_locale = (locale_t)0, old_locale = (locale_t)0;
  if (st == KLJIT_SUCCESS) {
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (c_locale == (locale_t)0)
      st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "%s: newlocale(\"C\") failed", chunkname);
    else
      old_locale = uselocale(c_locale);
  }
  if (st == KLJIT_SUCCESS) st = write_banner(chunkname, sorted, nparams, out);
  if (st == KLJIT_SUCCESS) {
    render_ctx ctx = {.chunkname = chunkname, .chunk = &lua, .sorted = sorted,
                      .nparams = nparams, .out = out, .out_base = out->len,
                      .manifest = manifest, .dir = dir, .validate_only = mode == RENDER_VALIDATE,
                      .cpu_start = clock_s(CLOCK_THREAD_CPUTIME_ID),
                      .wall_start = clock_s(CLOCK_MONOTONIC)};
    st = run_sandbox(&ctx);
    free(ctx.reject_msg);
  }
  if (c_locale != (locale_t)0) {
    uselocale(old_locale);
    freelocale(c_locale);
  }
  sb_free(&lua);
  free(sorted);
  if (st != KLJIT_SUCCESS && out->data) {
    out->len = base;
    out->data[base] = '\0';
  }
  if (st != KLJIT_SUCCESS && manifest && manifest->data) {
    manifest->len = mbase;
    manifest->data[mbase] = '\0';
  }
  return st;
}

kljit_status render_text(const char *chunkname, const char *text, size_t len,
                         const render_param *params, size_t nparams, strbuf *out) {
  return render_run(chunkname, text, len, params, nparams, NULL, out, NULL, RENDER_FULL);
}

/* Development mode: KLJIT_TEMPLATE_DIR=<dir> renders <dir>/<name> instead of the embedded copy,
 * so a template can be edited without rebuilding the library. Only a regular file below
 * TEMPLATE_FILE_MAX is read, and the open never blocks: a FIFO, a device (/dev/zero) or a
 * symbolic link to one is an error at once, not a hang or gigabytes read. */
enum { TEMPLATE_FILE_MAX = 4 << 20 };
static kljit_status read_template_file(const char *dir, const char *name, strbuf *text) {
  strbuf path = {0};
  kljit_status st = sb_printf(&path, "%s/%s", dir, name);
  if (st != KLJIT_SUCCESS) return st;
  const int fd = open(path.data, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat sb;
  if (fd < 0)
    st = err_set(KLJIT_ERR_TEMPLATE, "KLJIT_TEMPLATE_DIR: cannot open %s: %s", path.data,
                 strerror(errno));
  else if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    st = err_set(KLJIT_ERR_TEMPLATE, "KLJIT_TEMPLATE_DIR: %s is not a regular file", path.data);
  else if (sb.st_size > TEMPLATE_FILE_MAX)
    st = err_set(KLJIT_ERR_TEMPLATE, "KLJIT_TEMPLATE_DIR: %s is over %d MiB", path.data,
                 TEMPLATE_FILE_MAX >> 20);
  char buf[65536];
  for (ssize_t n = 1; st == KLJIT_SUCCESS && n > 0;) {
    n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) n = 1;
    else if (n < 0)
      st = err_set(KLJIT_ERR_TEMPLATE, "KLJIT_TEMPLATE_DIR: cannot read %s: %s", path.data,
                   strerror(errno));
    else if (text->len + (size_t)n > TEMPLATE_FILE_MAX)
      st = err_set(KLJIT_ERR_TEMPLATE, "KLJIT_TEMPLATE_DIR: %s is over %d MiB", path.data,
                   TEMPLATE_FILE_MAX >> 20);
    else if (n > 0)
      st = sb_append(text, buf, (size_t)n);
  }
  if (fd >= 0) close(fd);
  if (st == KLJIT_SUCCESS) st = sb_append(text, "", 0); /* an empty file is an empty text */
  if (st == KLJIT_SUCCESS) util_log("template %s read from %s", name, path.data);
  sb_free(&path);
  return st;
}

static kljit_status render_named(const char *name, const render_param *params, size_t nparams,
                                 strbuf *out, strbuf *manifest, render_mode mode) {
  if (!name || !*name || strchr(name, '/'))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "render_template: name must be a file name in templates/ (got %s%s%s)",
                   name ? "'" : "", name ? name : "NULL", name ? "'" : "");
  strbuf chunkname = {0};
  kljit_status st = sb_printf(&chunkname, "templates/%s", name);
  if (st != KLJIT_SUCCESS) return st;
  const char *dir = env_text(ENV_TEMPLATE_DIR);
  if (dir && *dir) {
    strbuf text = {0};
    st = read_template_file(dir, name, &text);
    if (st == KLJIT_SUCCESS)
      st = render_run(chunkname.data, text.data, text.len, params, nparams, dir, out, manifest,
                      mode);
    sb_free(&text);
    sb_free(&chunkname);
    return st;
  }
  const template_file *t = template_files;
  while (t->name && strcmp(t->name, name) != 0) t++;
  if (t->name) {
    st = render_run(chunkname.data, t->text, t->len, params, nparams, NULL, out, manifest, mode);
  } else {
    strbuf known = {0};
    for (const template_file *k = template_files; k->name && st == KLJIT_SUCCESS; k++)
      st = sb_printf(&known, "%s%s", k == template_files ? "" : ", ", k->name);
    if (st == KLJIT_SUCCESS)
      st = err_set(KLJIT_ERR_INVALID_ARGUMENT, "render_template: unknown template '%s' "
                   "(embedded: %s)", name, known.data ? known.data : "none");
    sb_free(&known);
  }
  sb_free(&chunkname);
  return st;
}

kljit_status render_template(const char *name, const render_param *params, size_t nparams,
                             strbuf *out) {
  return render_named(name, params, nparams, out, NULL, RENDER_FULL);
}

kljit_status render_template_iface(const char *name, const render_param *params,
                                   size_t nparams, strbuf *out, strbuf *manifest) {
  return render_named(name, params, nparams, out, manifest, RENDER_FULL);
}

/* ---- validation with a kept sandbox ---------------------------------------------------------
 *
 * A wisdom file can hold tens of thousands of distinct specs, and a fresh lua_State per check
 * costs ~40 us, most of a 60 000-entry import's budget. So render_validate keeps one sandbox per
 * embedded template, its prologue chunk loaded once, and runs it per check under a fresh _ENV
 * (P plus read access to the sandbox globals): assignments never reach the next check. This is
 * for the templates built into the library only (our code); KLJIT_TEMPLATE_DIR and render_text
 * keep a fresh state each time (invariant 3). A check that hits a limit drops its sandbox. */

enum { MAX_VALIDATORS = 8 };
typedef struct validator {
  const template_file *t;
  lua_State *L;
  render_ctx ctx;
  strbuf chunk, chunkname;
} validator;
static pthread_mutex_t validators_lock = PTHREAD_MUTEX_INITIALIZER;
static validator validators[MAX_VALIDATORS];
static locale_t validate_locale;

static int validator_setup(lua_State *L) {
  const validator *v = lua_touserdata(L, 1);
  sandbox_open(L);
  lua_pushfstring(L, "@%s", v->chunkname.data);
  if (luaL_loadbufferx(L, v->chunk.data, v->chunk.len, lua_tostring(L, -1), "t") != LUA_OK)
    return lua_error(L);
  lua_setfield(L, LUA_REGISTRYINDEX, "kljit.prologue");
  return 0;
}

/* The P of a kept validator's check. Building one (a table of some 20 fields, each key interned)
 * was a sixth of a check, and the specs of a family all have the same keys: so the last check's
 * P stays in the registry with the list of its keys, and a check with the same keys only
 * replaces its values. No template can tell: P is read-only, its value table unreachable
 * (__metatable), and the values are all replaced before the check runs. */
static void push_kept_params(lua_State *L, const render_ctx *ctx) {
  char keys[1024]; /* the sorted keys, each with its NUL */
  size_t n = 0;
  for (size_t k = 0; k < ctx->nparams && n <= sizeof keys; k++) {
    const size_t len = strlen(ctx->sorted[k]->key) + 1;
    if (n + len <= sizeof keys) memcpy(keys + n, ctx->sorted[k]->key, len);
    n += len;
  }
  size_t old_n = 0;
  const int kept = lua_getfield(L, LUA_REGISTRYINDEX, "kljit.P.keys") == LUA_TSTRING;
  const char *old = kept ? lua_tolstring(L, -1, &old_n) : NULL;
  const int same = kept && n <= sizeof keys && old_n == n && memcmp(old, keys, n) == 0;
  lua_pop(L, 1);
  if (same) {
    lua_getfield(L, LUA_REGISTRYINDEX, "kljit.P.values");
    lua_getfield(L, LUA_REGISTRYINDEX, "kljit.P.names"); /* the interned keys, in order */
    for (size_t k = 0; k < ctx->nparams; k++) {
      lua_rawgeti(L, -1, (lua_Integer)k + 1);
      push_param_value(L, ctx->sorted[k]);
      lua_rawset(L, -4);
    }
    lua_pop(L, 2);
    lua_getfield(L, LUA_REGISTRYINDEX, "kljit.P");
    return;
  }
  push_params(L, ctx);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, "kljit.P");
  lua_getmetatable(L, -1);
  lua_getfield(L, -1, "__index");
  lua_setfield(L, LUA_REGISTRYINDEX, "kljit.P.values");
  lua_pop(L, 1);
  lua_createtable(L, (int)ctx->nparams, 0);
  for (size_t k = 0; k < ctx->nparams; k++) {
    lua_pushstring(L, ctx->sorted[k]->key);
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  lua_setfield(L, LUA_REGISTRYINDEX, "kljit.P.names");
  if (n <= sizeof keys)
    lua_pushlstring(L, keys, n);
  else
    lua_pushnil(L); /* too many to compare: built afresh each time */
  lua_setfield(L, LUA_REGISTRYINDEX, "kljit.P.keys");
}

static int validator_call(lua_State *L) {
  render_ctx *ctx = lua_touserdata(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, "kljit.prologue");
  lua_createtable(L, 0, 1); /* the check's own _ENV */
  push_kept_params(L, ctx);
  lua_setfield(L, -2, "P");
  lua_createtable(L, 0, 1);
  lua_pushglobaltable(L);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, "kljit.env"); /* include()'d files run in it too */
  /* The files the prologue includes (params.cu.lua, iface.cu.lua) read P only inside the
   * functions they return, so their values are kept from check to check; pointing the _ENV
   * they share with those functions at this check's environment gives them this P. */
  if (lua_getfield(L, LUA_REGISTRYINDEX, "kljit.chunks") == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      lua_pushvalue(L, -4); /* the check's _ENV */
      if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  /* a check ends at its first output, which may lie inside an include (common.cu.lua's text):
   * that file's "still running" marker must not read as a cycle in the next check */
  if (lua_getfield(L, LUA_REGISTRYINDEX, "kljit.included") == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      const int running = lua_type(L, -1) == LUA_TLIGHTUSERDATA;
      lua_pop(L, 1);
      if (running) { /* clearing a field during lua_next is allowed */
        lua_pushvalue(L, -1);
        lua_pushnil(L);
        lua_rawset(L, -4);
      }
    }
  }
  lua_pop(L, 1);
  if (!lua_setupvalue(L, -2, 1)) return luaL_error(L, "the prologue has no _ENV");
  lua_pushcfunction(L, text_out);
  lua_call(L, 1, 0);
  return 0;
}

static void validator_drop(validator *v) {
  if (v->L) lua_close(v->L);
  v->L = NULL;
  sb_free(&v->chunk);
  sb_free(&v->chunkname);
  free(v->ctx.reject_msg);
  memset(&v->ctx, 0, sizeof v->ctx);
}

/* The kept sandbox of embedded template t, made on first use (validators_lock held). */
static kljit_status validator_get(const template_file *t, validator **out) {
  validator *v = NULL;
  for (int i = 0; i < MAX_VALIDATORS && !v; i++)
    if (validators[i].t == t || !validators[i].t) v = &validators[i];
  if (!v) return err_set(KLJIT_ERR_INTERNAL, "render_validate: too many templates");
  v->t = t;
  *out = v;
  if (v->L) return KLJIT_SUCCESS;
  kljit_status st = sb_printf(&v->chunkname, "templates/%s", t->name);
  if (st == KLJIT_SUCCESS)
    st = compile_template(v->chunkname.data, t->text, t->len, RENDER_VALIDATE, &v->chunk);
  if (st == KLJIT_SUCCESS && !validate_locale &&
      !(validate_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0)))
    st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "render_validate: newlocale(\"C\") failed");
  if (st == KLJIT_SUCCESS) {
    v->ctx.chunkname = v->chunkname.data;
    /* the setup's own budget starts now: from zero, a thread that had used a second of CPU
     * before its first validation ran out of time at once, and its allocator refused the
     * state's memory ("not enough memory": no wisdom could be imported, no plan checked) */
    v->ctx.wall_start = clock_s(CLOCK_MONOTONIC);
    v->ctx.cpu_start = clock_s(CLOCK_THREAD_CPUTIME_ID);
    v->L = lua_newstate(sandbox_alloc, &v->ctx);
    if (!v->L) st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "%s: cannot create a Lua state", t->name);
  }
  if (st == KLJIT_SUCCESS) {
    lua_pushcfunction(v->L, validator_setup);
    lua_pushlightuserdata(v->L, v);
    if (lua_pcall(v->L, 1, 0, 0) != LUA_OK)
      st = err_set(KLJIT_ERR_TEMPLATE, "%s: %s", v->chunkname.data,
                   lua_type(v->L, -1) == LUA_TSTRING ? lua_tostring(v->L, -1) : "setup failed");
  }
  if (st != KLJIT_SUCCESS) {
    validator_drop(v);
    v->t = t;
  }
  return st;
}

/* The thread CPU time a validation starts from. That clock is a system call (the monotonic one
 * is not) and a kept validator runs tens of thousands of checks a second, so the reading is
 * reused for 10 ms of wall time: a check's CPU time then counts up to 10 ms that came before
 * it, so its budget can end that much early, never late. Per thread, as the clock is; a forked
 * child's thread starts a clock of its own, so the child forgets the reading. */
static _Thread_local double cpu_read_at = -1, cpu_read;
static pthread_once_t cpu_fork_once = PTHREAD_ONCE_INIT;

static void cpu_reading_forget(void) { cpu_read_at = -1; }
static void cpu_fork_install(void) { pthread_atfork(NULL, NULL, cpu_reading_forget); }

static double validation_cpu_start(double wall_now) {
  pthread_once(&cpu_fork_once, cpu_fork_install);
  if (cpu_read_at < 0 || wall_now - cpu_read_at > 0.01) {
    cpu_read = clock_s(CLOCK_THREAD_CPUTIME_ID);
    cpu_read_at = wall_now;
  }
  return cpu_read;
}

static kljit_status validate_kept(const template_file *t, const render_param *params,
                                  size_t nparams) {
  const render_param *sorted[64];
  if (nparams > sizeof sorted / sizeof sorted[0])
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "render_validate: %zu parameters", nparams);
  pthread_mutex_lock(&validators_lock);
  validator *v = NULL;
  kljit_status st = validator_get(t, &v);
  if (st == KLJIT_SUCCESS) st = check_params(v->chunkname.data, params, nparams, sorted);
  if (st == KLJIT_SUCCESS) {
    render_ctx *c = &v->ctx;
    free(c->reject_msg);
    strbuf scratch = {0};
    const size_t mem = c->mem_used;
    const double wall = clock_s(CLOCK_MONOTONIC);
    memset(c, 0, sizeof *c);
    *c = (render_ctx){.chunkname = v->chunkname.data, .chunk = &v->chunk, .sorted = sorted,
                      .nparams = nparams, .out = &scratch, .mem_used = mem,
                      .validate_only = 1, .cpu_start = validation_cpu_start(wall),
                      .wall_start = wall};
    const locale_t old = uselocale(validate_locale);
    lua_pushcfunction(v->L, validator_call);
    lua_pushlightuserdata(v->L, c);
    const int status = lua_pcall(v->L, 1, 0, 0);
    char msg[2048] = "";
    if (status != LUA_OK)
      snprintf(msg, sizeof msg, "%s",
               lua_type(v->L, -1) == LUA_TSTRING ? lua_tostring(v->L, -1) : "(error object)");
    st = sandbox_outcome(c, status, msg);
    lua_settop(v->L, 0);
    uselocale(old);
    sb_free(&scratch);
    if (c->mem_fatal || c->insn_fatal || c->time_fatal || c->out_fatal || c->host_status ||
        status == LUA_ERRMEM) {
      validator_drop(v);
      v->t = t;
    }
  }
  pthread_mutex_unlock(&validators_lock);
  return st;
}

kljit_status render_validate(const char *name, const render_param *params, size_t nparams) {
  const char *dir = env_text(ENV_TEMPLATE_DIR);
  const template_file *t = template_files;
  while (t->name && name && strcmp(t->name, name) != 0) t++;
  if ((dir && *dir) || !name || !t->name) { /* a fresh sandbox, or render_named's error */
    strbuf scratch = {0};
    const kljit_status st = render_named(name, params, nparams, &scratch, NULL, RENDER_VALIDATE);
    sb_free(&scratch);
    return st;
  }
  return validate_kept(t, params, nparams);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* render.c — a template and its parameters into source: the builtins, P, the banner, include()
 * and running in a fresh sandbox (the invariants are in render.h). */
#include "render.h"

#include <float.h>
#include <lauxlib.h>
#include <locale.h>
#include <lua.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RENDER_OUT_CAP = 64 << 20 };

static render_ctx *ctx_of(lua_State *L) { return sandbox_of(L)->host; }

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
  if (ctx->part == TEMPLATE_PROLOGUE) { /* every reject() precedes the first output */
    ctx->validated = ctx->sb.halted = 1;
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
      /* Text-line arguments alternate literal/value (template.h, invariant 2): value k is
       * argument 2k. */
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
      ctx->out_fatal = ctx->sb.halted = 1;
      return sandbox_raise(L, 1, "output limit exceeded (64 MiB of rendered text)");
    }
    kljit_status st = sb_append(ctx->out, s, len);
    if (st != KLJIT_SUCCESS) {
      ctx->host_status = st, ctx->sb.halted = 1;
      return luaL_error(L, "out of host memory");
    }
  }
  return 0;
}

static int builtin_emit(lua_State *L) { return append_values(L, SITE_EMIT); }
int render_text_out(lua_State *L) { return append_values(L, SITE_TEXT_LINE); }

/* end_of_checks(): nothing in a render; a validation's prologue ends at its line
 * (template_compile), so every reject() must come before it (docs/templates.md). */
static int builtin_end_of_checks(lua_State *L) {
  (void)L;
  return 0;
}

static int builtin_reject(lua_State *L) {
  render_ctx *ctx = ctx_of(L);
  const char *sentence = luaL_checkstring(L, 1);
  if (!ctx->reject_msg) {
    ctx->reject_msg = strdup(sentence);
    if (!ctx->reject_msg) ctx->host_status = KLJIT_ERR_OUT_OF_MEMORY;
  }
  ctx->sb.halted = 1;
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
    ctx->out_fatal = ctx->sb.halted = 1;
    return sandbox_raise(L, 1, "output limit exceeded (64 MiB of rendered text and manifest)");
  }
  kljit_status st = sb_append(ctx->manifest, line, len);
  if (st == KLJIT_SUCCESS) st = sb_append(ctx->manifest, "\n", 1);
  if (st != KLJIT_SUCCESS) {
    ctx->host_status = st, ctx->sb.halted = 1;
    return luaL_error(L, "out of host memory");
  }
  return 0;
}


/* The text of template `name`: from ctx->dir when set, else the embedded copy (a Lua string
 * on the stack, so that an error raised later frees nothing by hand). */
static int push_template_text(lua_State *L, const render_ctx *ctx, const char *name) {
  if (ctx->dir) {
    strbuf text = {0};
    if (template_read_file(ctx->dir, name, &text) != KLJIT_SUCCESS) {
      sb_free(&text);
      return luaL_error(L, "include(\"%s\"): %s", name, kljit_last_error());
    }
    lua_pushlstring(L, text.data ? text.data : "", text.len);
    sb_free(&text);
    return 1;
  }
  const template_file *t = template_embedded(name);
  if (!t) return luaL_error(L, "include(\"%s\"): no such template", name);
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
 * once per render (a kept validation sandbox keeps it across checks: render_check_env): a
 * second include returns the first one's value, so fragments may include what they need
 * without duplicating definitions in the output. */
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
    kljit_status st = template_compile(lua_tostring(L, 5), text, len, TEMPLATE_WHOLE, &chunk);
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
  lua_pushcfunction(L, render_text_out);
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

/* Pushes P's value table (key -> value) and, above it, the metatable both forms of P share:
 * new keys refused (__newindex), pairs() in key order (__pairs, over the values), itself hidden
 * from getmetatable/setmetatable (__metatable). */
static void push_values_and_meta(lua_State *L, const render_ctx *ctx) {
  lua_createtable(L, 0, (int)ctx->nparams); /* values */
  for (size_t k = 0; k < ctx->nparams; k++) {
    push_param_value(L, ctx->sorted[k]);
    lua_setfield(L, -2, ctx->sorted[k]->key);
  }
  lua_createtable(L, 0, 4); /* metatable */
  lua_pushvalue(L, -2);
  lua_pushcclosure(L, p_pairs, 1);
  lua_setfield(L, -2, "__pairs");
  lua_pushcfunction(L, p_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_pushliteral(L, "P is read-only");
  lua_setfield(L, -2, "__metatable");
}

/* A render's P: a userdata, not a table, so rawset() and next() cannot reach around the
 * metatable, whose __index is the value table. */
static void push_params(lua_State *L, const render_ctx *ctx) {
  lua_newuserdatauv(L, 0, 0);
  push_values_and_meta(L, ctx);
  lua_insert(L, -2); /* userdata, metatable, values */
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
}

/* The P of a kept validator's check: its value table itself, not a render's read-only proxy
 * (push_params), whose every read goes through the proxy's metatable: reads of P were a tenth
 * of a check's instructions. The table's own metatable refuses new keys and keeps pairs() in
 * key order, as the proxy's does, and hides itself; a template assigning one of P's keys, which
 * a render refuses ("P is read-only"), is refused where it renders a module instead, and the
 * value it wrote lasts until the next check replaces them all (validator.h, invariant 6).
 * Building the table (some 20 fields, each key interned) was a sixth of a check, and the specs
 * of a family all have the same keys: so the last check's table stays in the registry with the
 * list of its keys, and a check with the same keys only replaces its values. The keys are
 * compared by address first (a family passes the same literals, kspec_params), by text only
 * where an address differs: comparing every key's text, and a metatable made for every _ENV,
 * were a sixth of the check's setup. */
static void push_kept_params(lua_State *L, const render_ctx *ctx) {
  const size_t n = ctx->nparams;
  int same = lua_getfield(L, LUA_REGISTRYINDEX, "kljit.P.names") == LUA_TTABLE &&
             lua_rawlen(L, -1) == n; /* the interned keys, in order */
  const char **addr = NULL;           /* the keys' addresses the last check passed */
  if (same) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, "kljit.P.addr") == LUA_TUSERDATA &&
        lua_rawlen(L, -1) == n * sizeof *addr)
      addr = lua_touserdata(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, "kljit.P.values");
    for (size_t k = 0; k < n && same; k++) {
      lua_rawgeti(L, -2, (lua_Integer)k + 1);
      const char *key = ctx->sorted[k]->key;
      same = (addr && addr[k] == key) || strcmp(lua_tostring(L, -1), key) == 0;
      if (same) {
        if (addr) addr[k] = key;
        push_param_value(L, ctx->sorted[k]);
        lua_rawset(L, -3);
      } else {
        lua_pop(L, 1); /* P is made afresh below: the values it had do not matter */
      }
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  if (same && addr) {
    lua_getfield(L, LUA_REGISTRYINDEX, "kljit.P.values");
    return;
  }
  if (!same) {
    push_values_and_meta(L, ctx);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "kljit.P.values");
    lua_createtable(L, (int)n, 0);
    for (size_t k = 0; k < n; k++) {
      lua_pushstring(L, ctx->sorted[k]->key);
      lua_rawseti(L, -2, (lua_Integer)k + 1);
    }
    lua_setfield(L, LUA_REGISTRYINDEX, "kljit.P.names");
  } else {
    lua_getfield(L, LUA_REGISTRYINDEX, "kljit.P.values");
  }
  addr = lua_newuserdatauv(L, n ? n * sizeof *addr : 1, 0);
  for (size_t k = 0; k < n; k++) addr[k] = ctx->sorted[k]->key;
  lua_setfield(L, LUA_REGISTRYINDEX, "kljit.P.addr");
}

/* ---- the builtins ------------------------------------------------------------------------- */

static const luaL_Reg BUILTINS[] = {{"emit", builtin_emit},
                                    {"reject", builtin_reject},
                                    {"end_of_checks", builtin_end_of_checks},
                                    {"include", builtin_include},
                                    {"manifest_add", builtin_manifest_add},
                                    {"f32", builtin_f32},
                                    {"f64", builtin_f64},
                                    {NULL, NULL}};

void render_open(lua_State *L) { sandbox_open(L, BUILTINS); }

void render_check_env(lua_State *L, const render_ctx *ctx) {
  /* The check's _ENV: one table kept with the state, emptied of what the last check assigned.
   * So the files the prologue includes (params.cu.lua, iface.cu.lua), which read P only inside
   * the functions they return and whose values are kept from check to check, share it from the
   * include that loaded them on: a fresh table per check, with every kept file's _ENV pointed
   * at it, was a tenth of a check's setup. Its metatable (globals through __index) is hidden
   * (__metatable), so no check can change what the next one reads. */
  if (lua_getfield(L, LUA_REGISTRYINDEX, "kljit.env") == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2)) { /* clearing a field during lua_next is allowed */
      lua_pop(L, 1);
      lua_pushvalue(L, -1);
      lua_pushnil(L);
      lua_rawset(L, -4);
    }
  } else {
    lua_pop(L, 1);
    lua_createtable(L, 0, 1);
    lua_createtable(L, 0, 2);
    lua_pushglobaltable(L);
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "the environment is the template's own");
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "kljit.env"); /* include()'d files run in it too */
  }
  push_kept_params(L, ctx);
  lua_setfield(L, -2, "P");
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

kljit_status render_params(const char *chunkname, const render_param *params, size_t nparams,
                           const render_param **sorted) {
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

kljit_status render_outcome(const render_ctx *ctx, int status, const char *msg) {
  const sandbox *sb = &ctx->sb;
  if (status == LUA_OK && !sandbox_fatal(sb)) return KLJIT_SUCCESS;
  if (ctx->validated && !ctx->reject_msg && !sb->mem_fatal && !sb->insn_fatal &&
      !sb->time_fatal && ctx->host_status == KLJIT_SUCCESS)
    return KLJIT_SUCCESS;
  if (ctx->host_status != KLJIT_SUCCESS)
    return err_set(ctx->host_status, "%s: out of host memory while rendering", sb->chunkname);
  if (ctx->reject_msg)
    return err_set(KLJIT_ERR_UNSUPPORTED, "%s: %s", sb->chunkname, ctx->reject_msg);
  return sandbox_outcome(sb, status, msg);
}

static int sandbox_main(lua_State *L) {
  render_ctx *ctx = lua_touserdata(L, 1);
  render_open(L);
  lua_pushglobaltable(L);
  push_params(L, ctx);
  lua_setfield(L, -2, "P");
  lua_setfield(L, LUA_REGISTRYINDEX, "kljit.env"); /* include()'d files run in it too */

  /* '@' makes Lua print the chunkname as a file name ("templates/x.cu.lua:3: ..."). */
  lua_pushfstring(L, "@%s", ctx->sb.chunkname);
  if (luaL_loadbufferx(L, ctx->chunk->data, ctx->chunk->len, lua_tostring(L, -1), "t") !=
      LUA_OK)
    return lua_error(L);
  lua_pushcfunction(L, render_text_out);
  lua_call(L, 1, 0);
  return 0;
}

static kljit_status run_sandbox(render_ctx *ctx) {
  lua_State *L = sandbox_new(&ctx->sb, SANDBOX_COUNT_INSTRUCTIONS);
  if (!L)
    return err_set(KLJIT_ERR_OUT_OF_MEMORY, "%s: cannot create a Lua state", ctx->sb.chunkname);
  lua_pushcfunction(L, sandbox_main);
  lua_pushlightuserdata(L, ctx);
  const int status = lua_pcall(L, 1, 0, 0);
  char msg[2048] = "";
  if (status != LUA_OK) sandbox_error_text(L, msg, sizeof msg);
  /* Decided before lua_close: __gc finalizers run there, at no point the template controls,
   * and must not change the outcome; emit() refuses once out is NULL. */
  const kljit_status st = render_outcome(ctx, status, msg);
  ctx->out = NULL;
  lua_close(L);
  return st;
}

static kljit_status render_run(const char *chunkname, const char *text, size_t len,
                               const render_param *params, size_t nparams, const char *dir,
                               strbuf *out, strbuf *manifest, template_part part) {
  if (!chunkname || !out || (!text && len) || (!params && nparams))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "render_text: chunkname, out, text (when len > 0) and params (when "
                   "nparams > 0) must not be NULL");
  const render_param **sorted = calloc(nparams ? nparams : 1, sizeof *sorted);
  if (!sorted) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "%s: out of host memory", chunkname);
  strbuf lua = {0};
  const size_t base = out->len, mbase = manifest ? manifest->len : 0;
  kljit_status st = render_params(chunkname, params, nparams, sorted);
  if (st == KLJIT_SUCCESS) st = template_compile(chunkname, text ? text : "", len, part, &lua);

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
    render_ctx ctx = {.sb = {.chunkname = chunkname}, .chunk = &lua, .sorted = sorted,
                      .nparams = nparams, .out = out, .out_base = out->len,
                      .manifest = manifest, .dir = dir, .part = part};
    ctx.sb.host = &ctx;
    sandbox_start(&ctx.sb, SANDBOX_CLOCK_NOW);
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
  return render_run(chunkname, text, len, params, nparams, NULL, out, NULL, TEMPLATE_WHOLE);
}

static kljit_status render_named(const char *name, const render_param *params, size_t nparams,
                                 strbuf *out, strbuf *manifest, template_part part) {
  const char *dir = NULL, *text = NULL;
  size_t len = 0;
  strbuf storage = {0}, chunkname = {0};
  kljit_status st = template_text(name, &dir, &storage, &text, &len);
  if (st == KLJIT_SUCCESS) st = sb_printf(&chunkname, "templates/%s", name);
  if (st == KLJIT_SUCCESS)
    st = render_run(chunkname.data, text, len, params, nparams, dir, out, manifest, part);
  sb_free(&storage);
  sb_free(&chunkname);
  return st;
}

kljit_status render_template(const char *name, const render_param *params, size_t nparams,
                             strbuf *out) {
  return render_named(name, params, nparams, out, NULL, TEMPLATE_WHOLE);
}

kljit_status render_template_iface(const char *name, const render_param *params,
                                   size_t nparams, strbuf *out, strbuf *manifest) {
  return render_named(name, params, nparams, out, manifest, TEMPLATE_WHOLE);
}

kljit_status render_prologue(const char *name, const render_param *params, size_t nparams) {
  strbuf scratch = {0};
  const kljit_status st = render_named(name, params, nparams, &scratch, NULL, TEMPLATE_PROLOGUE);
  sb_free(&scratch);
  return st;
}

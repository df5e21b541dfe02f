/* SPDX-License-Identifier: Apache-2.0 */
/* validator.c — the templates' verdict on parameters, from kept sandboxes (the invariants are
 * in validator.h). */
#include "validator.h"

#include <lauxlib.h>
#include <locale.h>
#include <lua.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_VALIDATORS = 8, MAX_PARAMS = 64 };

typedef struct validator {
  const template_file *t; /* NULL: a free slot */
  lua_State *L;           /* NULL: not made yet, or dropped (invariant 4) */
  render_ctx ctx;         /* its allocator's state: outlives every check */
  strbuf chunk, chunkname;
} validator;

static pthread_mutex_t validators_lock = PTHREAD_MUTEX_INITIALIZER;
static validator validators[MAX_VALIDATORS];
static locale_t validate_locale; /* "C": the render's number formatting (render.h, inv. 2) */

static int validator_setup(lua_State *L) {
  const validator *v = lua_touserdata(L, 1);
  render_open(L);
  lua_pushfstring(L, "@%s", v->chunkname.data);
  if (luaL_loadbufferx(L, v->chunk.data, v->chunk.len, lua_tostring(L, -1), "t") != LUA_OK)
    return lua_error(L);
  lua_setfield(L, LUA_REGISTRYINDEX, "kljit.prologue");
  return 0;
}

static int validator_call(lua_State *L) {
  const render_ctx *ctx = lua_touserdata(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, "kljit.prologue");
  render_check_env(L, ctx);
  if (!lua_setupvalue(L, -2, 1)) return luaL_error(L, "the prologue has no _ENV");
  lua_pushcfunction(L, render_text_out);
  lua_call(L, 1, 0);
  return 0;
}

/* Frees the sandbox and keeps the slot for template t. */
static void validator_drop(validator *v, const template_file *t) {
  if (v->L) lua_close(v->L);
  v->L = NULL;
  sb_free(&v->chunk);
  sb_free(&v->chunkname);
  free(v->ctx.reject_msg);
  memset(&v->ctx, 0, sizeof v->ctx);
  v->t = t;
}

/* The kept sandbox of embedded template t, made on first use (validators_lock held). */
static kljit_status validator_get(const template_file *t, validator **out) {
  validator *v = NULL;
  for (int i = 0; i < MAX_VALIDATORS && !v; i++)
    if (validators[i].t == t || !validators[i].t) v = &validators[i];
  if (!v) return err_set(KLJIT_ERR_INTERNAL, "validator_check: too many templates");
  v->t = t;
  *out = v;
  if (v->L) return KLJIT_SUCCESS;
  kljit_status st = sb_printf(&v->chunkname, "templates/%s", t->name);
  if (st == KLJIT_SUCCESS)
    st = template_compile(v->chunkname.data, t->text, t->len, TEMPLATE_PROLOGUE, &v->chunk);
  if (st == KLJIT_SUCCESS && !validate_locale &&
      !(validate_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0)))
    st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "validator_check: newlocale(\"C\") failed");
  if (st == KLJIT_SUCCESS) {
    v->ctx.sb.chunkname = v->chunkname.data;
    v->ctx.sb.host = &v->ctx;
    /* the setup's own budget starts now: from zero, a thread that had used a second of CPU
     * before its first validation ran out of time at once, and its allocator refused the
     * state's memory ("not enough memory": no wisdom could be imported, no plan checked) */
    sandbox_start(&v->ctx.sb, SANDBOX_CLOCK_NOW);
    v->L = sandbox_new(&v->ctx.sb, SANDBOX_COUNT_TIME_ONLY); /* invariant 4 */
    if (!v->L) st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "%s: cannot create a Lua state", t->name);
  }
  if (st == KLJIT_SUCCESS) {
    lua_pushcfunction(v->L, validator_setup);
    lua_pushlightuserdata(v->L, v);
    if (lua_pcall(v->L, 1, 0, 0) != LUA_OK)
      st = err_set(KLJIT_ERR_TEMPLATE, "%s: %s", v->chunkname.data,
                   lua_type(v->L, -1) == LUA_TSTRING ? lua_tostring(v->L, -1) : "setup failed");
  }
  if (st != KLJIT_SUCCESS) validator_drop(v, t);
  return st;
}

/* One check in v's kept sandbox (validators_lock held). */
static kljit_status check_kept(validator *v, const render_param *params, size_t nparams,
                               const render_param **sorted) {
  kljit_status st = render_params(v->chunkname.data, params, nparams, sorted);
  if (st != KLJIT_SUCCESS) return st;
  render_ctx *c = &v->ctx;
  free(c->reject_msg);
  strbuf scratch = {0}; /* never written: the check stops at the first output */
  const size_t mem = c->sb.mem_used; /* the state's memory, which the check starts from */
  *c = (render_ctx){.sb = {.chunkname = v->chunkname.data, .host = c, .mem_used = mem},
                    .chunk = &v->chunk, .sorted = sorted, .nparams = nparams, .out = &scratch,
                    .part = TEMPLATE_PROLOGUE};
  sandbox_start(&c->sb, SANDBOX_CLOCK_RECENT);
  const locale_t old = uselocale(validate_locale);
  lua_pushcfunction(v->L, validator_call);
  lua_pushlightuserdata(v->L, c);
  const int status = lua_pcall(v->L, 1, 0, 0);
  char msg[2048] = "";
  if (status != LUA_OK) sandbox_error_text(v->L, msg, sizeof msg);
  st = render_outcome(c, status, msg);
  lua_settop(v->L, 0);
  uselocale(old);
  sb_free(&scratch);
  const sandbox *sb = &c->sb;
  if (sb->mem_fatal || sb->insn_fatal || sb->time_fatal || c->out_fatal || c->host_status ||
      status == LUA_ERRMEM)
    validator_drop(v, v->t); /* invariant 4 */
  return st;
}

kljit_status validator_check(const char *name, const render_param *params, size_t nparams) {
  const template_file *t = name && !template_dir() ? template_embedded(name) : NULL;
  if (!t) return render_prologue(name, params, nparams); /* invariant 1 */
  const render_param *sorted[MAX_PARAMS];
  if (nparams > MAX_PARAMS)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "validator_check: %zu parameters", nparams);
  pthread_mutex_lock(&validators_lock);
  validator *v = NULL;
  kljit_status st = validator_get(t, &v);
  if (st == KLJIT_SUCCESS) st = check_kept(v, params, nparams, sorted);
  pthread_mutex_unlock(&validators_lock);
  return st;
}

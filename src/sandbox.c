/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.c — the Lua state a template runs in: limits, guarded library calls, trimmed
 * libraries (the invariants are in sandbox.h). */
#include "sandbox.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { HOOK_EVERY = 10000 };
/* The most a single pattern-matching or table library call may do, in elementary steps. */
#define GUARD_STEP_LIMIT 1e8

sandbox *sandbox_of(lua_State *L) {
  void *ud = NULL;
  lua_getallocf(L, &ud);
  return ud;
}

int sandbox_fatal(const sandbox *sb) {
  return sb->mem_fatal || sb->insn_fatal || sb->time_fatal || sb->halted;
}

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A thread's CPU time never runs ahead of the wall clock, so the CPU clock (a system call) is
 * read only once the monotonic one (vDSO, nanoseconds) says the budget could be spent: checks
 * stay cheap. */
int sandbox_out_of_time(sandbox *sb) {
  if (!sb->time_fatal && clock_s(CLOCK_MONOTONIC) - sb->wall_start > SANDBOX_CPU_LIMIT_S &&
      clock_s(CLOCK_THREAD_CPUTIME_ID) - sb->cpu_start > SANDBOX_CPU_LIMIT_S)
    sb->time_fatal = 1;
  return sb->time_fatal;
}

/* SANDBOX_CLOCK_RECENT's reading, per thread as the clock is; a forked child's thread starts a
 * clock of its own, so the child forgets the reading. */
static _Thread_local double cpu_read_at = -1, cpu_read;
static pthread_once_t cpu_fork_once = PTHREAD_ONCE_INIT;

static void cpu_reading_forget(void) { cpu_read_at = -1; }
static void cpu_fork_install(void) { pthread_atfork(NULL, NULL, cpu_reading_forget); }

void sandbox_start(sandbox *sb, sandbox_clock clock) {
  sb->wall_start = clock_s(CLOCK_MONOTONIC);
  if (clock == SANDBOX_CLOCK_NOW) {
    sb->cpu_start = clock_s(CLOCK_THREAD_CPUTIME_ID);
    return;
  }
  pthread_once(&cpu_fork_once, cpu_fork_install);
  if (cpu_read_at < 0 || sb->wall_start - cpu_read_at > 0.01) {
    cpu_read = clock_s(CLOCK_THREAD_CPUTIME_ID);
    cpu_read_at = sb->wall_start;
  }
  sb->cpu_start = cpu_read;
}

/* ---- limits ------------------------------------------------------------------------------- */

/* Lua's allocator contract: when ptr is NULL, osize is a type tag, not a size; a shrink must
 * never fail. Once the cap is hit every later growth is refused too, so the emergency GC's
 * retry cannot turn the failure into a heisenbug that depends on collection timing. */
static void *sandbox_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  sandbox *sb = ud;
  const size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    free(ptr);
    sb->mem_used -= old;
    return NULL;
  }
  if (nsize > old && (sb->mem_fatal || sb->mem_used - old + nsize > SANDBOX_MEM_CAP)) {
    sb->mem_fatal = 1;
    return NULL;
  }
  /* a heavy library call allocates: the clock every 64 allocations or at any large one */
  if (nsize > old && (sb->time_fatal || ((++sb->allocs & 63) == 0 || nsize >= (1 << 20)))) {
    if (sandbox_out_of_time(sb)) return NULL; /* reported as the time limit (sandbox_outcome) */
  }
  void *p = realloc(ptr, nsize);
  if (!p) return NULL; /* a real host OOM: Lua reports "not enough memory" */
  sb->mem_used = sb->mem_used - old + nsize;
  return p;
}

int sandbox_raise(lua_State *L, int level, const char *what) {
  sandbox *sb = sandbox_of(L);
  if (!sb->fatal_msg[0]) {
    luaL_where(L, level);
    snprintf(sb->fatal_msg, sizeof sb->fatal_msg, "%s%s", lua_tostring(L, -1), what);
    lua_pop(L, 1);
  }
  lua_pushstring(L, sb->fatal_msg);
  return lua_error(L);
}

static void count_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  sandbox *sb = sandbox_of(L);
  sb->insns += HOOK_EVERY;
  if (sandbox_out_of_time(sb))
    sandbox_raise(L, 0, "time limit exceeded (" SANDBOX_CPU_LIMIT_TEXT " of CPU)");
  if (sb->insns < SANDBOX_INSN_LIMIT && !sb->insn_fatal) return;
  sb->insn_fatal = 1;
  char what[96];
  snprintf(what, sizeof what, "instruction limit exceeded (%lld Lua instructions)",
           SANDBOX_INSN_LIMIT);
  /* In a hook no new call frame exists: level 0 is the interrupted Lua function. */
  sandbox_raise(L, 0, what);
}

lua_State *sandbox_new(sandbox *sb, sandbox_count count) {
  lua_State *L = lua_newstate(sandbox_alloc, sb);
  if (L && count == SANDBOX_COUNT_INSTRUCTIONS)
    lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_EVERY);
  return L;
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

/* Mirrors lbaselib's finishpcall, except that fatal conditions (invariant 2) are re-raised. */
static int finish_pcall(lua_State *L, int status, int extra) {
  if (status != LUA_OK) {
    if (sandbox_fatal(sandbox_of(L))) return lua_error(L);
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
  if (sandbox_fatal(sandbox_of(L))) return lua_error(L);
  lua_pushvalue(L, 2);
  lua_insert(L, -2); /* msgh, err */
  const int hstatus = lua_pcall(L, 1, 1, 0);
  if (hstatus != LUA_OK && sandbox_fatal(sandbox_of(L))) return lua_error(L);
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
  if (sandbox_out_of_time(sandbox_of(L)))
    return sandbox_raise(L, 1, "time limit exceeded (" SANDBOX_CPU_LIMIT_TEXT " of CPU)");
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

/* ---- opening the state -------------------------------------------------------------------- */

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

void sandbox_open(lua_State *L, const luaL_Reg *builtins) {
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
  luaL_setfuncs(L, builtins, 0);
  lua_pop(L, 1);
}

/* ---- the outcome -------------------------------------------------------------------------- */

void sandbox_error_text(lua_State *L, char *msg, size_t cap) {
  if (lua_type(L, -1) == LUA_TSTRING)
    snprintf(msg, cap, "%s", lua_tostring(L, -1));
  else
    snprintf(msg, cap, "(error object is a %s value)", luaL_typename(L, -1));
}

kljit_status sandbox_outcome(const sandbox *sb, int status, const char *msg) {
  if (status == LUA_OK && !sandbox_fatal(sb)) return KLJIT_SUCCESS;
  const char *name = sb->chunkname;
  if (sb->time_fatal && sb->fatal_msg[0]) /* with the position where it was seen */
    return err_set(KLJIT_ERR_TEMPLATE, "%s", sb->fatal_msg);
  if (sb->time_fatal) /* seen by the allocator */
    return err_set(KLJIT_ERR_TEMPLATE,
                   "%s: time limit exceeded (" SANDBOX_CPU_LIMIT_TEXT " of CPU)", name);
  if (sb->fatal_msg[0]) /* the instruction limit, or a host's limit (sandbox_raise) */
    return err_set(KLJIT_ERR_TEMPLATE, "%s", sb->fatal_msg);
  if (sb->mem_fatal)
    return err_set(KLJIT_ERR_TEMPLATE, "%s: memory limit exceeded (%d MiB)", name,
                   SANDBOX_MEM_CAP >> 20);
  if (status == LUA_ERRMEM)
    return err_set(KLJIT_ERR_OUT_OF_MEMORY, "%s: out of host memory while rendering", name);
  /* Lua positions start with the chunkname; error("x", 0) and friends get it added. */
  const size_t nlen = strlen(name);
  if (strncmp(msg, name, nlen) == 0 && msg[nlen] == ':')
    return err_set(KLJIT_ERR_TEMPLATE, "%s", msg);
  return err_set(KLJIT_ERR_TEMPLATE, "%s: %s", name, msg);
}

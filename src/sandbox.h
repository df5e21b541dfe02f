/* SPDX-License-Identifier: Apache-2.0 */
/* sandbox.h — the Lua state a template runs in: trimmed and guarded libraries, and limits.
 *
 * Invariants (docs/templates.md, "Sandbox", is the template author's view of the same rules):
 *
 *  1. One `sandbox` struct is the state of one run, and the userdata of its state's allocator
 *     (sandbox_of): memory is counted in the allocator and capped (SANDBOX_MEM_CAP),
 *     instructions in a count hook (SANDBOX_INSN_LIMIT; every state but the kept validator's,
 *     sandbox_count), and the CPU time (SANDBOX_CPU_LIMIT_S) is read in the hook, in the
 *     allocator and on entry to every library function.
 *  2. A fatal condition is remembered in the struct: a limit hit, or the host's halt (`halted`:
 *     reject(), the output limit, the end of a validation). The sandbox's pcall and xpcall
 *     re-raise it instead of catching it, so Lua code cannot catch its way past a limit; once
 *     the memory cap is hit every later growth is refused too.
 *  3. Nothing in the state reads a clock, randomness or a file; load() takes text only;
 *     finalizers and message handlers, which Lua runs with hooks off, cannot be installed;
 *     every library call that loops in C is bounded by its arguments before it runs.
 *  4. Every Lua API call that can raise runs under lua_pcall: a raise outside protected mode
 *     calls Lua's panic handler, which aborts the process.
 *
 * Templates are trusted code that ships with the library: the limits turn a runaway loop or
 * allocation into an error message with a line number, not a hang.
 */
#ifndef KLJIT_SANDBOX_H
#define KLJIT_SANDBOX_H

#include <stddef.h>

#include "util.h"

struct lua_State;
struct luaL_Reg;

/* Kernel sources are tens of KB and templates run in milliseconds: these limits are far above
 * any real template. CPU seconds bound what instructions alone do not: one instruction can be
 * a library call that loops in C (a backtracking string.find, a table.move over 2^63 slots). */
enum { SANDBOX_MEM_CAP = 64 << 20 };
#define SANDBOX_INSN_LIMIT 50000000LL
#define SANDBOX_CPU_LIMIT_S 1.0
#define SANDBOX_CPU_LIMIT_TEXT "1 s"

typedef struct sandbox {
  const char *chunkname; /* "templates/<name>", for messages */
  void *host;            /* the host's state of this run (the renderer's render_ctx) */
  size_t mem_used;
  long long insns;
  double cpu_start;  /* thread CPU time when the run started (sandbox_start) */
  double wall_start; /* and the monotonic clock then */
  unsigned allocs;   /* allocations since the clock was last read */
  int mem_fatal;     /* the allocator refused an allocation past SANDBOX_MEM_CAP */
  int insn_fatal;    /* the instruction limit was hit */
  int time_fatal;    /* SANDBOX_CPU_LIMIT_S was exceeded */
  int halted;        /* set by the host: the run must end, and no pcall may catch that */
  char fatal_msg[512]; /* "file:line: instruction limit exceeded ...", from sandbox_raise */
} sandbox;

/* How sandbox_start reads the thread's CPU clock (a system call; the monotonic one is not). */
typedef enum sandbox_clock {
  SANDBOX_CLOCK_NOW,   /* read it */
  SANDBOX_CLOCK_RECENT /* reuse this thread's reading of the last 10 ms: the budget may end up
                        * to 10 ms early, never late (a kept validator's thousands of checks) */
} sandbox_clock;

/* The budget of sb's run starts now. */
void sandbox_start(sandbox *sb, sandbox_clock clock);

/* Whether a state counts its instructions. A hooked state runs every instruction through Lua's
 * hook dispatch (about a tenth of a short prologue check): SANDBOX_COUNT_TIME_ONLY is for the
 * kept validator's sandboxes, which run only the embedded templates' prologues. */
typedef enum sandbox_count {
  SANDBOX_COUNT_INSTRUCTIONS, /* the count hook: SANDBOX_INSN_LIMIT, and the clock read in it */
  SANDBOX_COUNT_TIME_ONLY     /* the clock in the allocator and the library calls only */
} sandbox_count;

/* A new state whose allocator (and count hook) account to sb, or NULL (host out of memory). */
struct lua_State *sandbox_new(sandbox *sb, sandbox_count count);

/* The sandbox a state accounts to. */
sandbox *sandbox_of(struct lua_State *L);

/* Nonzero once the run must end (invariant 2). */
int sandbox_fatal(const sandbox *sb);

/* Nonzero once the run has used its CPU budget (then time_fatal is set). */
int sandbox_out_of_time(sandbox *sb);

/* Records "<position at level><what>" as the fatal message (the first one stays) and raises it.
 * For a limit the host enforces (the output cap): set `halted` first. */
int sandbox_raise(struct lua_State *L, int level, const char *what);

/* Opens the sandbox's globals in L (under lua_pcall): base, string, table and math, trimmed
 * and guarded (invariant 3), plus the host's builtins (ended by {NULL, NULL}). */
void sandbox_open(struct lua_State *L, const struct luaL_Reg *builtins);

/* The error of a failed lua_pcall (status != LUA_OK) into msg, without converting a non-string
 * error object (which could raise outside protected mode). */
void sandbox_error_text(struct lua_State *L, char *msg, size_t cap);

/* The status of a run that ended with pcall `status` and error text `msg`, for what the
 * sandbox knows (limits, Lua errors, host memory); the message starts with the chunkname.
 * The host decides its own conditions (its halts) before asking. */
kljit_status sandbox_outcome(const sandbox *sb, int status, const char *msg);

#endif

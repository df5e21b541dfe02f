/* SPDX-License-Identifier: Apache-2.0 */
/* validator.h — the templates' verdict on parameters, from sandboxes kept between checks.
 *
 * Why kept: the wisdom parser asks the templates about every entry (a 60 000-entry file has
 * ~54 000 distinct specs), and a fresh sandbox per check (a state, its libraries, the parse of
 * the files the prologue includes) made that import about fifty times slower than its 1 s bar
 * (bench/RESULTS.md, "The kept validator"). Without asking the templates, the parser would
 * accept tunings they refuse (unit.wisdom.every_entry_the_parser_accepts_renders).
 *
 * Invariants of the kept sandboxes (one per embedded template, made on first use):
 *  1. Only the templates built into the library are kept (our code, constant while the process
 *     runs). With KLJIT_TEMPLATE_DIR set, or for an unknown name, a check is render_prologue's
 *     fresh sandbox.
 *  2. A kept sandbox holds its template's prologue chunk (template.h, TEMPLATE_PROLOGUE) and the
 *     chunks it include()d. Each check runs under the sandbox's one _ENV, emptied of what the
 *     last check assigned before it starts (render_check_env: its P, the globals readable
 *     through it), so an assignment never reaches the next check; the included files' values
 *     are kept, and run in that _ENV (they read P only in the functions they return).
 *  3. A check's verdict is the one a full render would give for a rejection: the prologue runs
 *     up to its first output, or returns at an end_of_checks() line before it (template.h), and
 *     every reject() precedes both (unit.sandbox.every_reject_precedes_the_prologue_s_end).
 *  4. A check that hits a limit or runs out of host memory drops its sandbox: the next check
 *     makes a new one, so no half-built state is reused. Each check's CPU budget starts with it
 *     (SANDBOX_CLOCK_RECENT); the state counts no instructions (SANDBOX_COUNT_TIME_ONLY: the
 *     hook would cost every instruction of every check), so a prologue is bounded by the clock
 *     read in the allocator and the library calls, and by the memory cap.
 *  5. One mutex serializes the checks of every template (a Lua state is single-threaded); the
 *     states live until the process ends.
 *  6. The kept P (render_check_env) is the value table itself, not a render's read-only proxy:
 *     new keys are refused, but a template assigning one of P's keys is refused only where a
 *     module renders (unit.template.kept_validator_gives_the_verdict_of_a_fresh_sandbox compares
 *     the two), and every value is replaced before the next check. Its keys are matched to the
 *     last check's by address first: a key's text must not change while the process runs
 *     (kspec_params passes literals); a key at another address is compared by its text.
 */
#ifndef KLJIT_VALIDATOR_H
#define KLJIT_VALIDATOR_H

#include "render.h"

/* The verdict of template `name` on `params`: KLJIT_SUCCESS, or the error render_template would
 * give for a rejection (KLJIT_ERR_UNSUPPORTED with the template's sentence). Thread-safe. The
 * keys' texts live as long as the process (invariant 6). */
kljit_status validator_check(const char *name, const render_param *params, size_t nparams);

#endif

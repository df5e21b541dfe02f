/* SPDX-License-Identifier: Apache-2.0 */
/* nvrtc_compile.h — compile one rendered source for one real architecture into a cubin. */
#ifndef KLJIT_NVRTC_COMPILE_H
#define KLJIT_NVRTC_COMPILE_H

#include "util.h"

enum { NVRTC_MAX_OPTIONS = 8 };

/* OR'd into an arch: compile for the architecture-specific target (sm_90a: wgmma, setmaxnreg),
 * whose cubin runs on that architecture only. */
enum { NVRTC_ARCH_SPECIFIC = 1 << 16 };

/* The exact, ordered NVRTC options kljit uses for architecture sm_<arch> (e.g. 90). They are
 * part of every cache key. Returns the count; opts[i] point into `storage`. */
int nvrtc_options(int arch, char storage[NVRTC_MAX_OPTIONS][64], const char *opts[]);

/* "nvrtc <major>.<minor>" of the linked NVRTC. */
const char *nvrtc_version_string(void);

/* Compiles `source` (named `name` in diagnostics) for sm_<arch>. On success `cubin` holds the
 * image. On failure KLJIT_ERR_COMPILE with the NVRTC log in the message. The log of a
 * successful compile (warnings) goes to *log when log is not NULL. With KLJIT_DUMP_DIR set,
 * the source and the log are written there as <name>.cu and <name>.log. */
kljit_status nvrtc_compile(const char *source, const char *name, int arch, strbuf *cubin,
                           strbuf *log);

/* How hard NVRTC optimizes, and how far it goes. kljit's modules are always NVRTC_FULL;
 * NVRTC_FAST adds NVRTC's --Ofast-compile=max (parse, type-check, code generation and ptxas to
 * a real cubin, with less optimization: 2-3x faster), for tests that compile thousands of
 * variants. NVRTC_PTX, for tests too, stops before ptxas: it compiles for the virtual
 * architecture compute_<arch> (compute_90a with NVRTC_ARCH_SPECIFIC), kljit's other options
 * plus --Ofast-compile=max, and returns the PTX text (NUL-terminated, len without the NUL)
 * instead of a cubin; every C++ and template error still fails it, what only ptxas rejects
 * (inline PTX operands, shared-memory size) does not. No cache key holds these options. */
typedef enum nvrtc_effort { NVRTC_FULL = 0, NVRTC_FAST = 1, NVRTC_PTX = 2 } nvrtc_effort;

/* nvrtc_compile with an effort (nvrtc_compile is NVRTC_FULL); `image` gets the cubin, or the
 * PTX for NVRTC_PTX. */
kljit_status nvrtc_compile_effort(const char *source, const char *name, int arch,
                                  nvrtc_effort effort, strbuf *image, strbuf *log);

/* Parses "sm_90" / "90" / "sm_80" into 90 / 80; returns 0 when not a supported arch. */
int nvrtc_parse_arch(const char *text);

#endif

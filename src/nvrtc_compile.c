/* SPDX-License-Identifier: Apache-2.0 */
/* nvrtc_compile.c — NVRTC: rendered CUDA C++ -> cubin for a real architecture, no include path.
 *
 * Generated kernels include no headers at all (fp16/bf16 conversions are written out in the
 * templates), so compilation never depends on where the toolkit's headers live at run time.
 */
#include "nvrtc_compile.h"
#include "env.h"
#include "fs.h"

#include <errno.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int nvrtc_options(int arch, char storage[NVRTC_MAX_OPTIONS][64], const char *opts[]) {
  int n = 0;
  snprintf(storage[n], 64, "--gpu-architecture=sm_%d%s", arch & ~NVRTC_ARCH_SPECIFIC,
           arch & NVRTC_ARCH_SPECIFIC ? "a" : "");
  opts[n] = storage[n], n++;
  snprintf(storage[n], 64, "-std=c++17");
  opts[n] = storage[n], n++;
  snprintf(storage[n], 64, "--fmad=true");
  opts[n] = storage[n], n++;
  snprintf(storage[n], 64, "-lineinfo");
  opts[n] = storage[n], n++;
  return n;
}

const char *nvrtc_version_string(void) {
  static _Thread_local char buf[32];
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  snprintf(buf, sizeof buf, "nvrtc %d.%d", major, minor);
  return buf;
}

int nvrtc_parse_arch(const char *text) {
  if (!text) return 0;
  if (strncmp(text, "sm_", 3) == 0) text += 3;
  char *end = NULL;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0') return 0;
  /* Real architectures NVRTC 13 can target and kljit's kernels support (sm_80 and newer: the
   * bf16 conversions need it). */
  static const int known[] = {80, 86, 87, 89, 90, 100, 103, 120};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (known[i] == v) return (int)v;
  return 0;
}

/* A debugging aid, never the compile's failure: what cannot be written is logged. Published like
 * every file kljit writes (fs_write_atomic): a FIFO, device or link at the name is refused, not
 * written through (an fopen there blocked on a FIFO). */
static void dump(const char *name, const char *ext, const char *text) {
  const char *dir = env_text(ENV_DUMP_DIR);
  if (!dir || !*dir || !text) return;
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext) >= (int)sizeof path) return;
  if (fs_write_atomic(path, text, strlen(text), 0644, KLJIT_ERR_CACHE, "KLJIT_DUMP_DIR file") !=
      KLJIT_SUCCESS) {
    util_log("KLJIT_DUMP_DIR: %s", kljit_last_error());
    err_clear();
  }
}

static kljit_status get_log(nvrtcProgram prog, strbuf *log) {
  size_t n = 0;
  if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n <= 1) return KLJIT_SUCCESS;
  char *buf = malloc(n);
  if (!buf) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory for the NVRTC log");
  kljit_status st = KLJIT_SUCCESS;
  if (nvrtcGetProgramLog(prog, buf) == NVRTC_SUCCESS) st = sb_append(log, buf, strlen(buf));
  free(buf);
  return st;
}

/* What a compile made: the cubin, or the PTX text (whose size NVRTC gives with the terminating
 * NUL, which strbuf keeps outside len). */
typedef struct nvrtc_output {
  nvrtcResult (*size)(nvrtcProgram, size_t *);
  nvrtcResult (*get)(nvrtcProgram, char *);
  const char *size_name, *get_name, *what;
  int text;
} nvrtc_output;
static const nvrtc_output CUBIN = {nvrtcGetCUBINSize, nvrtcGetCUBIN, "nvrtcGetCUBINSize",
                                   "nvrtcGetCUBIN", "cubin", 0};
static const nvrtc_output PTX = {nvrtcGetPTXSize, nvrtcGetPTX, "nvrtcGetPTXSize", "nvrtcGetPTX",
                                 "PTX", 1};

static kljit_status get_output(nvrtcProgram prog, const char *name, const nvrtc_output *o,
                               strbuf *out) {
  size_t n = 0;
  nvrtcResult r = o->size(prog, &n);
  char *buf = r == NVRTC_SUCCESS ? malloc(n ? n : 1) : NULL; /* an empty output is not OOM */
  kljit_status st;
  if (r != NVRTC_SUCCESS)
    st = err_set(KLJIT_ERR_COMPILE, "%s(%s): %s", o->size_name, name, nvrtcGetErrorString(r));
  else if (!buf)
    st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory for %zu bytes of %s", n, o->what);
  else if ((r = o->get(prog, buf)) != NVRTC_SUCCESS)
    st = err_set(KLJIT_ERR_COMPILE, "%s(%s): %s", o->get_name, name, nvrtcGetErrorString(r));
  else
    st = sb_append(out, buf, o->text ? strnlen(buf, n) : n);
  free(buf);
  return st;
}

kljit_status nvrtc_compile(const char *source, const char *name, int arch, strbuf *cubin,
                           strbuf *log) {
  return nvrtc_compile_effort(source, name, arch, NVRTC_FULL, cubin, log);
}

kljit_status nvrtc_compile_effort(const char *source, const char *name, int arch,
                                  nvrtc_effort effort, strbuf *image, strbuf *log) {
  char storage[NVRTC_MAX_OPTIONS][64];
  const char *opts[NVRTC_MAX_OPTIONS];
  int nopts = nvrtc_options(arch, storage, opts);
  /* the virtual arch replaces the real one here, after the options kljit keys its cache by */
  if (effort == NVRTC_PTX)
    snprintf(storage[0], 64, "--gpu-architecture=compute_%d%s", arch & ~NVRTC_ARCH_SPECIFIC,
             arch & NVRTC_ARCH_SPECIFIC ? "a" : "");
  if (effort != NVRTC_FULL && nopts < NVRTC_MAX_OPTIONS) opts[nopts++] = "--Ofast-compile=max";
  dump(name, "cu", source);

  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS)
    return err_set(KLJIT_ERR_COMPILE, "nvrtcCreateProgram(%s): %s", name, nvrtcGetErrorString(r));
  r = nvrtcCompileProgram(prog, nopts, opts);
  strbuf lg = {0};
  kljit_status st = get_log(prog, &lg);
  dump(name, "log", lg.data ? lg.data : "");
  if (st == KLJIT_SUCCESS && r != NVRTC_SUCCESS) {
    st = err_set(KLJIT_ERR_COMPILE, "NVRTC failed to compile %s for %s: %s\n%s", name,
                 opts[0] + strlen("--gpu-architecture="), nvrtcGetErrorString(r),
                 lg.data ? lg.data : "(no log)");
  }
  if (st == KLJIT_SUCCESS)
    st = get_output(prog, name, effort == NVRTC_PTX ? &PTX : &CUBIN, image);
  if (st == KLJIT_SUCCESS && log && lg.data) st = sb_append(log, lg.data, lg.len);
  sb_free(&lg);
  nvrtcDestroyProgram(&prog);
  return st;
}

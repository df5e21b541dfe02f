/* SPDX-License-Identifier: Apache-2.0 */
/* cli_info.c — `kljit info`: versions, the GPUs if any, kernel cache and wisdom locations.
 * Needs no GPU and no driver: versions come from the library (the driver's through its own
 * dlopen), the GPU list from the CUDA runtime, which reports "no driver" as an error. */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static void usage(FILE *f) {
  fputs(
      "usage: kljit info\n"
      "Prints the kljit library, CUDA toolkit, NVRTC, Lua and CUDA driver versions, the GPUs\n"
      "(name, sm, SMs, memory, the DRAM's peak bytes an SM cycle: under 15, sm_90's plans\n"
      "move the row statistics into the logits GEMM) or that there is none, the kernel cache\n"
      "directories (read-only KLJIT_CACHE_PATH ones, then the writable one), each with\n"
      "whether this user's plans can use it and why not, where wisdom files are read, and the\n"
      "environment: every KLJIT_* variable that is set, with why kljit refuses its value (or\n"
      "does not read it).\n"
      "Needs no GPU; exit 2 when a variable has a value kljit refuses, 0 otherwise unless\n"
      "the library fails.\n",
      f);
}

static void print_cuda_version(const char *label, int v) {
  if (v > 0)
    printf("%-14s %d.%d\n", label, v / 1000, v % 1000 / 10);
  else
    printf("%-14s none\n", label);
}

static void print_gpus(int driver) {
  if (driver <= 0) {
    printf("%-14s none (no CUDA driver)\n", "GPU");
    return;
  }
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("%-14s none (%s)\n", "GPU", e != cudaSuccess ? cudaGetErrorString(e) : "no device");
    return;
  }
  for (int i = 0; i < n; i++) {
    struct cudaDeviceProp d;
    if (cudaGetDeviceProperties(&d, i) != cudaSuccess) continue;
    printf("GPU %-10d %s, sm_%d%d, %d SMs, %.1f GiB", i, d.name, d.major, d.minor,
           d.multiProcessorCount, d.totalGlobalMem / 1073741824.0);
    /* the DRAM's peak bytes per SM cycle, as the plans' heuristics read it (recipe.h) */
    int mem_khz = 0, bus_bits = 0, sm_khz = 0;
    cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i);
    cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, i);
    if (mem_khz > 0 && bus_bits > 0 && sm_khz > 0 && d.multiProcessorCount > 0)
      printf(", DRAM %.1f bytes an SM cycle", 2.0 * mem_khz * (bus_bits / 8.0) /
                                                  ((double)d.multiProcessorCount * sm_khz));
    printf("\n");
  }
}

/* Whether plans can use the directory as this user, and if not why: a read-only one they
 * cannot read is skipped (every node then compiles), one they refuse fails them. */
static void print_cache_dir(const char *dir, int writable, void *user) {
  ++*(int *)user;
  struct stat st;
  const char *const role = writable ? "writable" : "read-only";
  if (stat(dir, &st) != 0 && errno == ENOENT)
    printf("  %-12s %s (does not exist yet)\n", role, dir);
  else if (kljit_cache_dir_check(dir) == KLJIT_SUCCESS)
    printf("  %-12s %s (usable)\n", role, dir);
  else
    printf("  %-12s %s (NOT USABLE: %s)\n", role, dir, cli_last_error());
}

typedef struct env_seen {
  int bad, unknown;
  char names[64][64]; /* the variables printed, so the table below does not repeat them */
  int n;
} env_seen;

static void print_set_env(const char *name, const char *value, const char *problem, void *user) {
  env_seen *const s = user;
  printf("  %-26s %s%s%s\n", name, value, problem ? "   <- " : "", problem ? problem : "");
  if (problem && strstr(problem, "not a variable"))
    s->unknown++;
  else if (problem)
    s->bad++;
  if (s->n < 64) snprintf(s->names[s->n++], sizeof s->names[0], "%s", name);
}

/* Wisdom files, in the order they are read (include/kljit.h, wisdom section): the system file
 * (KLJIT_SYSTEM_WISDOM, default /etc/kljit/wisdom), then the user's (KLJIT_WISDOM, "none" for
 * no file, default <writable kernel cache>/wisdom). The library resolves them. */
static int print_wisdom(void) {
  static const struct {
    kljit_wisdom_file which;
    const char *label, *var;
  } files[] = {{KLJIT_WISDOM_SYSTEM, "system", "KLJIT_SYSTEM_WISDOM"},
               {KLJIT_WISDOM_USER, "user", "KLJIT_WISDOM"}};
  printf("wisdom\n");
  for (int i = 0; i < 2; i++) {
    char path[4096];
    const kljit_status st = kljit_wisdom_path(files[i].which, path, sizeof path);
    if (st != KLJIT_SUCCESS) return cli_fail("info", st);
    const char *const env = getenv(files[i].var);
    struct stat sb;
    printf("  %-12s %s (%s%s)\n", files[i].label, path[0] ? path : "none",
           env && *env ? files[i].var : "default",
           !path[0]               ? ""
           : stat(path, &sb) == 0 ? ", present"
                                  : ", absent");
  }
  return CLI_OK;
}

int cli_info(int argc, char **argv) {
  cli_parser p;
  cli_parser_init(&p, argc, argv);
  while (cli_next(&p)) cli_unknown(&p);
  if (cli_stopped(&p, usage)) return p.status;

  kljit_versions v = {.struct_size = sizeof v};
  kljit_status st = kljit_get_versions(&v);
  if (st != KLJIT_SUCCESS) return cli_fail("info", st);
  printf("%-14s %s (built from header %s)\n", "kljit", kljit_version(), KLJIT_VERSION_STRING);
  printf("%-14s %s\n", "license", "Apache-2.0 (LICENSE)");
  print_cuda_version("CUDA toolkit", v.cuda_toolkit);
  printf("%-14s %d.%d\n", "NVRTC", v.nvrtc_major, v.nvrtc_minor);
  printf("%-14s %s\n", "Lua", v.lua);
  if (v.driver > 0)
    print_cuda_version("CUDA driver", v.driver);
  else
    printf("%-14s none (no libcuda.so.1)\n", "CUDA driver");
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  print_cuda_version("CUDA runtime", rt);
  print_gpus(v.driver);

  printf("kernel cache\n");
  int n_dirs = 0;
  if ((st = kljit_cache_dirs(print_cache_dir, &n_dirs)) != KLJIT_SUCCESS)
    return cli_fail("info", st);
  if (!n_dirs)
    printf(
        "  none (KLJIT_CACHE_DISABLE=1, or no KLJIT_CACHE_DIR, XDG_CACHE_HOME or "
        "HOME): kernels are compiled in every process\n");
  if (print_wisdom() != CLI_OK) return CLI_FAIL;
  printf("environment\n");
  /* Every KLJIT_* variable that is set, each value checked as the library reads it; then the
   * rest of README.md's "Environment knobs" table (unit.cli checks) and the XDG directories
   * the defaults derive from, unset. */
  env_seen seen = {0};
  kljit_env_check(print_set_env, &seen);
  static const char *const vars[] = {
      "KLJIT_CACHE_DIR",     "KLJIT_CACHE_PATH",   "KLJIT_CACHE_DISABLE",
      "KLJIT_CACHE_TRUSTED_OWNERS",                "KLJIT_DUMP_DIR",
      "KLJIT_TEMPLATE_DIR",  "KLJIT_LOG",          "KLJIT_CHUNK_ROWS",
      "KLJIT_ROW_KERNEL",    "KLJIT_DEBUG_SKIP_GEMMS", "KLJIT_WISDOM",
      "KLJIT_SYSTEM_WISDOM", "KLJIT_TUNE_BUDGET_S", "KLJIT_TUNE_ROWS",   "KLJIT_GEMM",
      "KLJIT_DX_SPLIT",      "XDG_CACHE_HOME",     "XDG_STATE_HOME"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    int shown = 0;
    for (int k = 0; k < seen.n && !shown; k++) shown = !strcmp(seen.names[k], vars[i]);
    const char *const value = getenv(vars[i]);
    if (!shown) printf("  %-26s %s\n", vars[i], value ? value : "(unset)");
  }
  if (seen.bad) {
    fprintf(stderr,
            "kljit info: %d KLJIT_* variable(s) with a value kljit refuses (marked above): "
            "contexts and precompile fail on them\n",
            seen.bad);
    return CLI_USAGE;
  }
  return CLI_OK;
}

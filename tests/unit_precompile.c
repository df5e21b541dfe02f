/* SPDX-License-Identifier: Apache-2.0 */
/* unit_precompile.c — kljit_precompile fills a cache that later plans use without compiling.
 * Needs no GPU: a plan's modules are what prob_estimate + prob_geometry_make give for an arch,
 * and they are looked up through the cache configuration a context would read from the
 * environment. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "jit.h"
#include "kljit.h"
#include "problem.h"

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char path[4096];
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

static kljit_problem problem(void) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 256, pb.vocab = 50257;
  return pb;
}

static void count_compiled(const kljit_module_report *m, void *user) {
  if (m->compiled) ++*(int *)user;
}

/* Under KLJIT_GEMM=jit the sm_90 plan of a 16-bit problem also loads the generated GEMMs
 * (sm_90a: logits, dX, dW's first and accumulating chunks): precompile builds them there, and
 * only there; KLJIT_GEMM's list form reaches it too; a bad KLJIT_GEMM is refused. */
static int precompile_covers_the_generated_gemm_under_kljit_gemm_jit(void) {
  char dir[] = "/tmp/kljit-pre-gemm-XXXXXX";
  TH_CHECK(mkdtemp(dir) != NULL);
  const kljit_problem pb = problem();
  setenv("KLJIT_GEMM", "jit", 1);
  int compiled = 0;
  TH_OK(kljit_precompile(&pb, 80, dir, 0, count_compiled, &compiled));
  TH_CHECK(compiled == 2); /* rows, helpers: no sm_90a GEMM for sm_80 */
  compiled = 0;
  TH_OK(kljit_precompile(&pb, 90, dir, 0, count_compiled, &compiled));
  TH_CHECK(compiled == 6); /* rows, helpers, the four GEMMs */
  TH_CHECK(count_entries(dir) == 8);
  setenv("KLJIT_GEMM", "dx:jit.128.2.6.g.1.p,dw:cublas", 1);
  compiled = 0;
  TH_OK(kljit_precompile(&pb, 90, dir, 0, count_compiled, &compiled));
  TH_CHECK(compiled == 1); /* that dX variant; the rest cached or cuBLASLt */
  setenv("KLJIT_GEMM", "cublas", 1);
  compiled = 0;
  TH_OK(kljit_precompile(&pb, 90, dir, 0, count_compiled, &compiled));
  TH_CHECK(compiled == 0);
  setenv("KLJIT_GEMM", "magic", 1);
  TH_STATUS(kljit_precompile(&pb, 90, dir, 0, count_compiled, &compiled),
            KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "KLJIT_GEMM=magic") != NULL);
  unsetenv("KLJIT_GEMM");
  remove_dir(dir);
  return TH_PASS;
}

static int plans_use_precompiled_read_only_cache_and_compile_nothing(void) {
  char ro[] = "/tmp/kljit-pre-ro-XXXXXX", rw[] = "/tmp/kljit-pre-rw-XXXXXX";
  TH_CHECK(mkdtemp(ro) && mkdtemp(rw));
  const kljit_problem pb = problem();
  const int archs[] = {80, 90};
  for (int i = 0; i < 2; i++) {
    int compiled = 0;
    TH_OK(kljit_precompile(&pb, archs[i], ro, 0, count_compiled, &compiled));
    TH_CHECK(compiled == 2); /* the row module and the helpers module */
    compiled = 0;
    TH_OK(kljit_precompile(&pb, archs[i], ro, 0, count_compiled, &compiled));
    TH_CHECK(compiled == 0); /* second time: all cached */
  }
  TH_CHECK(count_entries(ro) == 4);
  chmod(ro, 0755); /* a shared cluster cache: readable, writable by its owner only */
  setenv("KLJIT_CACHE_PATH", ro, 1);
  setenv("KLJIT_CACHE_DIR", rw, 1);
  cache_config cfg;
  TH_OK(cache_config_from_env(&cfg));
  for (int i = 0; i < 2; i++) {
    const prob_tuning t = prob_estimate(&pb, 132, archs[i]);
    prob_geometry g;
    TH_OK(prob_geometry_make(&pb, &t, &g));
    const kspec *specs[] = {&g.rows, &g.helpers};
    for (int k = 0; k < 2; k++) {
      jit_bin bin;
      TH_OK(jit_build(specs[k], archs[i], &cfg, &bin));
      TH_CHECK(bin.source == CACHE_HIT_READONLY);
      TH_CHECK(bin.compile_ms == 0.0);
      jit_bin_free(&bin);
    }
  }
  cache_config_free(&cfg);
  TH_CHECK(count_entries(rw) == 0); /* nothing compiled, nothing written */
  unsetenv("KLJIT_CACHE_PATH");
  unsetenv("KLJIT_CACHE_DIR");
  remove_dir(ro);
  remove_dir(rw);
  return TH_PASS;
}

static int precompile_rejects_bad_arguments(void) {
  const kljit_problem pb = problem();
  int compiled = 0;
  TH_STATUS(kljit_precompile(NULL, 90, "/tmp", 0, count_compiled, &compiled),
            KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(compiled == 0);
  TH_STATUS(kljit_precompile(&pb, 75, "/tmp", 0, NULL, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "arch = 75") != NULL);
  TH_STATUS(kljit_precompile(&pb, 90, "", 0, NULL, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  kljit_problem bad = pb;
  bad.vocab = 1;
  TH_STATUS(kljit_precompile(&bad, 90, "/tmp", 0, NULL, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(strstr(kljit_last_error(), "vocab = 1") != NULL);
  return TH_PASS;
}

static const th_case cases[] = {
    {"plans_use_precompiled_read_only_cache_and_compile_nothing",
     plans_use_precompiled_read_only_cache_and_compile_nothing},
    {"precompile_rejects_bad_arguments", precompile_rejects_bad_arguments},
    {"precompile_covers_the_generated_gemm_under_kljit_gemm_jit",
     precompile_covers_the_generated_gemm_under_kljit_gemm_jit},
};
TH_MAIN(cases)

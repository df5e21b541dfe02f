/* SPDX-License-Identifier: Apache-2.0 */
/* unit_plan_warm.c — the CPU part of kljit_plan_create on a warm kernel cache (everything but
 * cuModuleLoadData): render or memo, key, cache lookup and validation, for every module of a
 * plan. No GPU. gpu_tune.c times the whole kljit_plan_create on a GPU.
 *
 * Two numbers: a fresh process (measured in a child: the memo is empty, so every module is
 * rendered once), and again in the same process (the memo of spec_memo.h skips rendering).
 * Also the memo's own rules: its key (kspec_key_of) is exact, and what it keeps when full.
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "jit.h"
#include "kljit.h"
#include "problem.h"
#include "recipe.h"
#include "spec_memo.h"

enum { REPEATS = 20 };

static kljit_problem problem(void) { /* the README's problem */
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 4096, pb.vocab = 128256, pb.temperature = 2.0;
  pb.flags = KLJIT_FLAG_SCALE_T_SQUARED;
  return pb;
}

/* The modules of the ESTIMATE plan for sm_90: the dense rows' two parts, the helpers and the
 * generated logits GEMM (sm_90's default). */
enum { MODULES = 4 };

/* Builds the modules of the ESTIMATE plan for sm_90 through the environment's cache; returns
 * the wall time in ms, or -1. `out` (may be NULL) receives their key hashes (recipe_modules'
 * order). */
static double build_plan_modules(char out[MODULES][65], int *misses) {
  const kljit_problem pb = problem();
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  recipe r;
  cache_config cfg;
  const double t0 = util_now();
  if (recipe_make(&pb, NULL, &o, 90, 132, &r) != KLJIT_SUCCESS || cache_config_from_env(&cfg))
    return -1;
  const kspec *specs[RECIPE_MAX_MODULES];
  if (recipe_modules(&r, specs) != MODULES) return -1;
  for (int k = 0; k < MODULES; k++) {
    jit_bin bin;
    if (jit_build(specs[k], 90, &cfg, &bin) != KLJIT_SUCCESS) {
      fprintf(stderr, "jit_build: %s\n", kljit_last_error());
      cache_config_free(&cfg);
      return -1;
    }
    if (out) memcpy(out[k], bin.key_hash, 65);
    if (misses) *misses += bin.source == CACHE_MISS;
    jit_bin_free(&bin);
  }
  const double ms = 1e3 * (util_now() - t0);
  cache_config_free(&cfg);
  return ms;
}

/* Run by the parent in a child process: prints the first build's time. */
static int fresh_process_lookup(void) {
  if (!getenv("KLJIT_PLAN_WARM_CHILD")) return TH_SKIP; /* only as the first case's child */
  int misses = 0;
  const double ms = build_plan_modules(NULL, &misses);
  printf("%.3f %d\n", ms, misses);
  return ms < 0 ? TH_FAIL : TH_PASS;
}

static int warm_in(const char *dir) {
  setenv("KLJIT_CACHE_DIR", dir, 1);
  unsetenv("KLJIT_CACHE_PATH");
  unsetenv("KLJIT_TEMPLATE_DIR");
  int misses = 0;
  const double cold = build_plan_modules(NULL, &misses); /* compiles: the cache is now warm */
  TH_CHECK(cold > 0 && misses == MODULES);
  /* a fresh process on the warm cache */
  char cmd[4200];
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  TH_CHECK(n > 0);
  self[n] = '\0';
  snprintf(cmd, sizeof cmd, "KLJIT_PLAN_WARM_CHILD=1 '%s' fresh_process_lookup", self);
  double fresh = 1e30;
  for (int i = 0; i < 3; i++) { /* best of three: a loaded CI machine */
    FILE *p = popen(cmd, "r");
    TH_CHECK(p);
    double ms = -1;
    int child_misses = -1;
    TH_CHECK(fscanf(p, "%lf %d", &ms, &child_misses) == 2);
    TH_CHECK(pclose(p) == 0 && child_misses == 0 && ms > 0);
    if (ms < fresh) fresh = ms;
  }
  /* the same process again: memo'd keys */
  double times[REPEATS];
  for (int i = 0; i < REPEATS; i++) {
    misses = 0;
    times[i] = build_plan_modules(NULL, &misses);
    TH_CHECK(times[i] > 0 && misses == 0);
  }
  for (int i = 1; i < REPEATS; i++) /* insertion sort for the median */
    for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
      const double x = times[j];
      times[j] = times[j - 1], times[j - 1] = x;
    }
  const double median = 0.5 * (times[REPEATS / 2 - 1] + times[REPEATS / 2]);
  printf(
      "CPU part of a warm kljit_plan_create (2 modules, V=128256, sm_90): cold compile "
      "%.0f ms; fresh process %.2f ms (render + lookup); same process %.2f ms median of %d "
      "(memo + lookup)\n",
      cold, fresh, median, REPEATS);
  if (th_perf_limits()) TH_CHECK(median <= 5.0);
  if (th_perf_limits()) TH_CHECK(fresh <= 50.0); /* loose: rendering is ~1 ms per module on a desktop CPU */
  return TH_PASS;
}
static int cpu_part_of_a_warm_plan_is_under_5ms(void) {
  return th_in_tmpdir("unit-plan-warm", warm_in);
}

/* Writes every embedded template into dir, helpers.cu.lua with one more line of output. */
static int write_templates(const char *dir) {
  for (const template_file *t = template_files; t->name; t++) {
    char path[PATH_MAX];
    th_path_in(path, dir, t->name);
    FILE *f = fopen(path, "wb");
    TH_CHECK(f);
    TH_CHECK(fwrite(t->text, 1, t->len, f) == t->len);
    if (!strcmp(t->name, "helpers.cu.lua")) fputs("// one more line\n", f);
    TH_CHECK(fclose(f) == 0);
  }
  return TH_PASS;
}

static int memo_in(const char *dir) {
  char cache[PATH_MAX], tpl[PATH_MAX];
  th_path_in(cache, dir, "cache");
  th_path_in(tpl, dir, "templates");
  TH_CHECK(mkdir(tpl, 0700) == 0);
  setenv("KLJIT_CACHE_DIR", cache, 1);
  unsetenv("KLJIT_TEMPLATE_DIR");
  char first[MODULES][65], again[MODULES][65], edited[MODULES][65];
  TH_CHECK(build_plan_modules(first, NULL) > 0);
  TH_CHECK(build_plan_modules(again, NULL) > 0); /* from the memo */
  for (int k = 0; k < MODULES; k++) TH_CHECK(!strcmp(first[k], again[k]));
  /* the memo'd key is the rendered one */
  const kljit_problem pb = problem();
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  recipe r;
  TH_OK(recipe_make(&pb, NULL, &o, 90, 132, &r));
  const kspec *specs[RECIPE_MAX_MODULES];
  TH_CHECK(recipe_modules(&r, specs) == MODULES);
  for (int k = 0; k < MODULES; k++) {
    strbuf src = {0}, key = {0};
    TH_OK(kspec_render(specs[k], &src));
    TH_OK(jit_key_text(src.data, kspec_target(specs[k], 90), &key)); /* the GEMM: sm_90a */
    char hex[65];
    sha256_hex(key.data, key.len, hex);
    TH_CHECK(!strcmp(hex, first[k]));
    sb_free(&src), sb_free(&key);
  }
  /* an edited template (development mode) changes the key, memo or not */
  if (write_templates(tpl) != TH_PASS) return TH_FAIL;
  setenv("KLJIT_TEMPLATE_DIR", tpl, 1);
  TH_CHECK(build_plan_modules(edited, NULL) > 0);
  TH_CHECK(!strcmp(edited[0], first[0]) && !strcmp(edited[2], first[2]) &&
           !strcmp(edited[3], first[3])); /* rows and the GEMM: the same */
  TH_CHECK(strcmp(edited[1], first[1]) != 0); /* helpers: edited */
  unsetenv("KLJIT_TEMPLATE_DIR");
  TH_CHECK(build_plan_modules(again, NULL) > 0);
  TH_CHECK(!strcmp(again[1], first[1]));
  return TH_PASS;
}
static int memo_gives_the_rendered_key_and_never_hides_a_template_edit(void) {
  return th_in_tmpdir("unit-plan-warm", memo_in);
}

/* ---- the canonical key and the memo ---------------------------------------------------- */

/* Equal keys exactly when equal sources: over variants of one spec, each changing one field
 * (some of which reach no parameter, or reach one with the same value), two specs share a key
 * if and only if they render the same bytes. */
static int spec_key_is_exact(void) {
  const kljit_problem pb = problem();
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  recipe r;
  TH_OK(recipe_make(&pb, NULL, &o, 90, 132, &r));
  const prob_geometry g = r.geom;
  enum { N = 12 };
  kspec v[N];
  for (int i = 0; i < N; i++) v[i] = g.rows;
  v[1].t = 0.7, v[2].t = nextafter(0.7, 1.0); /* T: every bit counts (the banner's %.17g) */
  v[3].v -= 1, v[3].vtot -= 1;          /* V */
  v[4].teacher = "logprobs";            /* a string */
  v[5].softcap = 30.0;                  /* an optional parameter */
  v[6].softcap = -1.0;                  /* no cap: the plain spec's parameters */
  v[7].tmode = KLJIT_TEMPERATURE_RUNTIME; /* T reaches the source as 1 */
  v[8] = v[7], v[8].t = 0.5;            /* ... whatever it is */
  v[9].reduction = "sum";               /* a field the row template does not take */
  v[10].hard = 0.25, v[10].t2 = 1;      /* two optional parameters at once */
  v[11] = g.helpers;                    /* another family */
  kspec_key key[N];
  strbuf src[N] = {{0}};
  for (int i = 0; i < N; i++) {
    TH_CHECK(kspec_key_of(&v[i], &key[i]) == 0 && key[i].len == strlen(key[i].text));
    TH_OK(kspec_render(&v[i], &src[i]));
  }
  int equal_pairs = 0;
  for (int i = 0; i < N; i++)
    for (int j = i + 1; j < N; j++) {
      const int same_key = !strcmp(key[i].text, key[j].text);
      const int same_src = !strcmp(src[i].data, src[j].data);
      if (same_key != same_src) {
        fprintf(stderr, "specs %d and %d: same key %d, same source %d\n%s\n%s\n", i, j, same_key,
                same_src, key[i].text, key[j].text);
        return TH_FAIL;
      }
      equal_pairs += same_key;
    }
  printf("%s\n%d of %d pairs share a key\n", key[10].text, equal_pairs, N * (N - 1) / 2);
  TH_CHECK(equal_pairs == 4); /* 0 = 6 = 9 (three pairs), 7 = 8 */
  for (int i = 0; i < N; i++) sb_free(&src[i]);
  return TH_PASS;
}

static kspec_key test_key(int i) {
  kspec_key k;
  k.len = (size_t)snprintf(k.text, sizeof k.text, "test.cu.lua N=i%d", i);
  return k;
}

/* Full, the memo keeps what is dear to recompute (a render: a plan on a warm cache) and what
 * was asked again (a wisdom file's shared specs), and forgets specs seen once. */
static int memo_keeps_renders_and_specs_found_again_when_full(void) {
  const kspec_key rendered = test_key(-1), once = test_key(-2), again = test_key(-3);
  spec_memo_put_render(&rendered, "d1", "n1", "m1\n");
  spec_memo_accept(&once);
  spec_memo_accept(&again);
  TH_CHECK(spec_memo_accepted(&rendered)); /* a render is an acceptance */
  TH_CHECK(spec_memo_accepted(&again));    /* found again */
  for (int i = 0; i < SPEC_MEMO_MAX + 10; i++) { /* past the bound: one eviction */
    const kspec_key k = test_key(i);
    spec_memo_accept(&k);
  }
  TH_CHECK(spec_memo_accepted(&again) && !spec_memo_accepted(&once));
  char digest[65], name[64];
  strbuf manifest = {0};
  TH_CHECK(spec_memo_rendered(&rendered, digest, name, &manifest));
  TH_CHECK(!strcmp(digest, "d1") && !strcmp(name, "n1") && !strcmp(manifest.data, "m1\n"));
  TH_CHECK(!spec_memo_rendered(&again, digest, name, &manifest) && manifest.len == 3);
  const kspec_key last = test_key(SPEC_MEMO_MAX + 9), first = test_key(0);
  TH_CHECK(spec_memo_accepted(&last) && !spec_memo_accepted(&first));
  sb_free(&manifest);
  return TH_PASS;
}

/* A cold plan builds its modules at once (jit_build_many): each is what jit_build alone gives
 * (the same key), a module asked twice is compiled once (the second thread waits for the first
 * and finds it in the cache), and a failure names the first failing module in order, freeing
 * the others. */
static int many_in(const char *dir) {
  setenv("KLJIT_CACHE_DIR", dir, 1);
  unsetenv("KLJIT_CACHE_PATH");
  unsetenv("KLJIT_TEMPLATE_DIR");
  const kljit_problem pb = problem();
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  recipe r;
  TH_OK(recipe_make(&pb, NULL, &o, 90, 132, &r));
  cache_config cfg;
  TH_OK(cache_config_from_env(&cfg));
  const kspec *specs[4] = {&r.geom.rows, &r.geom.helpers, &r.geom.rows, &r.geom.helpers};
  jit_bin bins[4];
  TH_OK(jit_build_many(specs, 4, 90, &cfg, bins));
  int misses = 0;
  for (int i = 0; i < 4; i++) {
    TH_CHECK(bins[i].cubin.len > 0 && !strcmp(bins[i].key_hash, bins[i % 2].key_hash));
    misses += bins[i].source == CACHE_MISS;
  }
  printf("4 builds of 2 modules at once: %d compiled\n", misses);
  TH_CHECK(misses == 2);
  for (int i = 0; i < 4; i++) jit_bin_free(&bins[i]);
  kspec bad = r.geom.rows;
  bad.threads = 100; /* refused by the template (not a multiple of 32) */
  const kspec *mixed[3] = {&r.geom.helpers, &bad, &r.geom.rows};
  TH_STATUS(jit_build_many(mixed, 3, 90, &cfg, bins), KLJIT_ERR_UNSUPPORTED);
  printf("%s\n", kljit_last_error());
  TH_CHECK(strstr(kljit_last_error(), "dense_rows") || strstr(kljit_last_error(), "THREADS"));
  for (int i = 0; i < 3; i++) TH_CHECK(bins[i].cubin.data == NULL && bins[i].cubin.len == 0);
  cache_config_free(&cfg);
  unsetenv("KLJIT_CACHE_DIR");
  return TH_PASS;
}
static int a_plans_modules_build_at_once_each_compiled_once(void) {
  return th_in_tmpdir("unit-plan-many", many_in);
}

static const th_case cases[] = {
    {"cpu_part_of_a_warm_plan_is_under_5ms", cpu_part_of_a_warm_plan_is_under_5ms},
    {"memo_gives_the_rendered_key_and_never_hides_a_template_edit",
     memo_gives_the_rendered_key_and_never_hides_a_template_edit},
    {"spec_key_is_exact", spec_key_is_exact},
    {"memo_keeps_renders_and_specs_found_again_when_full",
     memo_keeps_renders_and_specs_found_again_when_full},
    {"a_plans_modules_build_at_once_each_compiled_once",
     a_plans_modules_build_at_once_each_compiled_once},
    {"fresh_process_lookup", fresh_process_lookup}, /* the child of the first case */
};
TH_MAIN(cases)

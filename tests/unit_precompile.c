/* SPDX-License-Identifier: Apache-2.0 */
/* unit_precompile.c — kljit_precompile fills a cache that later plans use without compiling.
 * Needs no GPU: a plan's modules are what its recipe names for an arch (recipe.h), and they are
 * looked up through the cache configuration a context would read from the environment. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "jit.h"
#include "kljit.h"
#include "read_only_hits.h"
#include "recipe.h"

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

/* A precompile's reports, by module: the cache file of each (its key). */
typedef struct module_files {
  int n;
  char file[2 * RECIPE_MAX_MODULES][80];
} module_files;

static void collect(const kljit_module_report *m, void *user) {
  module_files *f = user;
  if (f->n < 2 * RECIPE_MAX_MODULES) snprintf(f->file[f->n++], sizeof f->file[0], "%s", m->file);
}

/* The cache file names (<sha256 of the key>.kjc) of a recipe's modules for sm_<arch>. */
static int recipe_files(const recipe *r, int arch, module_files *out) {
  const kspec *m[RECIPE_MAX_MODULES];
  out->n = recipe_modules(r, m);
  for (int i = 0; i < out->n; i++) {
    strbuf src = {0}, key = {0};
    TH_OK(kspec_render(m[i], &src));
    TH_OK(jit_key_text(src.data, kspec_target(m[i], arch), &key)); /* the GEMM: sm_90a */
    char hex[65];
    sha256_hex(key.data, key.len, hex);
    snprintf(out->file[i], sizeof out->file[0], "%s.kjc", hex);
    sb_free(&src), sb_free(&key);
  }
  return TH_PASS;
}

/* The files of the plans on sm_90's two device classes (recipe_device_classes: the DRAM
 * unknown, then one under RECIPE_EPILOGUE_DRAM_PER_SM_CYCLE), the second's new ones appended:
 * what a precompile lists. Fails unless the second plan differs (E16 for this dense teacher). */
static int sm90_class_files(const kljit_problem *pb, const kljit_context_options *o,
                            module_files *out) {
  recipe_device dev[2];
  TH_CHECK(recipe_device_classes(90, dev) == 2);
  TH_CHECK(dev[0].dram_per_sm_cycle == 0.0 &&
           dev[1].dram_per_sm_cycle < RECIPE_EPILOGUE_DRAM_PER_SM_CYCLE);
  module_files f[2];
  recipe r[2];
  for (int c = 0; c < 2; c++) {
    TH_OK(recipe_make_on(pb, NULL, o, &dev[c], &r[c]));
    if (recipe_files(&r[c], 90, &f[c]) != TH_PASS) return TH_FAIL;
  }
  TH_CHECK(!r[0].geom.e16 && r[1].geom.e16 && r[1].epilogue_auto);
  *out = f[0];
  for (int i = 0; i < f[1].n; i++) {
    int seen = 0;
    for (int j = 0; j < f[0].n; j++) seen |= !strcmp(f[1].file[i], f[0].file[j]);
    if (!seen) snprintf(out->file[out->n++], sizeof out->file[0], "%s", f[1].file[i]);
  }
  return TH_PASS;
}

static int same_files(const module_files *a, const module_files *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->file[i], b->file[i])) return 0;
  return 1;
}

/* Writes the embedded templates into dir, with dense_rows refusing the cluster variant and
 * the generated GEMM refusing all but the logits GEMM (nt), which sm_90's default plan takes (a
 * plan that needs the cluster rows or a generated dX or dW fails its check). */
static int write_refusing_templates(const char *dir) {
  for (const template_file *t = template_files; t->name; t++) {
    char path[PATH_MAX];
    th_path_in(path, dir, t->name);
    FILE *f = fopen(path, "wb");
    TH_CHECK(f);
    const char *at = NULL, *line = NULL;
    if (!strcmp(t->name, "dense_rows.cu.lua")) {
      at = strstr(t->text, "%if P.TEACHER ~=");
      line = "%if P.CLUSTER ~= 0 then reject(\"no cluster rows in this test\") end\n";
    } else if (!strcmp(t->name, "gemm_sm90.cu.lua")) {
      at = strstr(t->text, "%if not one_of(P.LAYOUT");
      line = "%if P.LAYOUT ~= \"nt\" then reject(\"no generated dX or dW in this test\") end\n";
    }
    const size_t head = at ? (size_t)(at - t->text) : t->len;
    TH_CHECK(fwrite(t->text, 1, head, f) == head);
    if (at) fputs(line, f);
    TH_CHECK(fwrite(t->text + head, 1, t->len - head, f) == t->len - head);
    TH_CHECK(fclose(f) == 0);
  }
  return TH_PASS;
}

/* kljit_precompile and kljit_plan_check plan what a context of the default options
 * (KLJIT_CONTEXT_OPTIONS_INIT) plans, whatever KLJIT_ROW_KERNEL and KLJIT_GEMM say: those
 * steer contexts (kljit_context_options_default), which then plan the cluster rows and the
 * generated logits GEMM for this problem on sm_90; a context-free call does not. */
static int plan_check_and_precompile_ignore_the_environments_options_in(const char *dir) {
  const kljit_problem pb = problem(); /* bf16, V = 50257 fits a cluster, H a multiple of 8 */
  const kljit_context_options init = KLJIT_CONTEXT_OPTIONS_INIT;
  unsetenv("KLJIT_ROW_KERNEL"), unsetenv("KLJIT_GEMM");
  recipe r;
  module_files want, got;
  TH_OK(recipe_make(&pb, NULL, &init, 90, 0, &r));
  if (recipe_files(&r, 90, &want) != TH_PASS) return TH_FAIL;
  TH_CHECK(want.n == 4); /* the dense rows' two parts, the helpers, the logits GEMM */
  /* a precompile lists both device classes' plans: the E16 plan's four modules too */
  if (sm90_class_files(&pb, &init, &want) != TH_PASS) return TH_FAIL;
  TH_CHECK(want.n == 8);
  memset(&got, 0, sizeof got);
  TH_OK(kljit_precompile(&pb, 90, dir, KLJIT_PRECOMPILE_DRY_RUN, collect, &got));
  TH_CHECK(same_files(&want, &got));
  setenv("KLJIT_ROW_KERNEL", "cluster", 1), setenv("KLJIT_GEMM", "jit", 1);
  /* what a context would take from this environment plans other modules... */
  kljit_context_options env;
  TH_OK(kljit_context_options_default(&env));
  TH_CHECK(env.row_kernel == KLJIT_ROW_KERNEL_CLUSTER && env.gemm == KLJIT_GEMM_JIT);
  recipe re;
  module_files envs;
  TH_OK(recipe_make(&pb, NULL, &env, 90, 0, &re));
  if (recipe_files(&re, 90, &envs) != TH_PASS) return TH_FAIL;
  TH_CHECK(envs.n == 7 && re.geom.rows.cluster > 0 && !same_files(&want, &envs));
  /* ...but the context-free entry points do not take it */
  memset(&got, 0, sizeof got);
  TH_OK(kljit_precompile(&pb, 90, dir, KLJIT_PRECOMPILE_DRY_RUN, collect, &got));
  TH_CHECK(same_files(&want, &got));
  setenv("KLJIT_GEMM", "magic", 1); /* not even read */
  memset(&got, 0, sizeof got);
  TH_OK(kljit_precompile(&pb, 90, dir, KLJIT_PRECOMPILE_DRY_RUN, collect, &got));
  TH_CHECK(same_files(&want, &got));
  setenv("KLJIT_GEMM", "jit", 1);
  /* kljit_plan_check asks the templates about the same modules: with templates that refuse the
   * cluster rows and the generated dX and dW GEMMs, the context's plan fails its check and
   * kljit_plan_check still passes */
  char tpl[PATH_MAX];
  th_path_in(tpl, dir, "templates");
  TH_CHECK(mkdir(tpl, 0700) == 0);
  if (write_refusing_templates(tpl) != TH_PASS) return TH_FAIL;
  setenv("KLJIT_TEMPLATE_DIR", tpl, 1);
  const kljit_status refused = recipe_check(&re);
  const kljit_status checked = kljit_plan_check(&pb);
  unsetenv("KLJIT_TEMPLATE_DIR"), unsetenv("KLJIT_ROW_KERNEL"), unsetenv("KLJIT_GEMM");
  TH_CHECK(refused == KLJIT_ERR_UNSUPPORTED);
  TH_OK(checked);
  return TH_PASS;
}
static int plan_check_and_precompile_plan_the_default_options_whatever_the_environment_says(void) {
  return th_in_tmpdir("unit-precompile",
                      plan_check_and_precompile_ignore_the_environments_options_in);
}

static int plans_use_precompiled_read_only_cache_and_compile_nothing(void) {
  char ro[] = "/tmp/kljit-pre-ro-XXXXXX", rw[] = "/tmp/kljit-pre-rw-XXXXXX";
  TH_CHECK(mkdtemp(ro) && mkdtemp(rw));
  const kljit_problem pb = problem();
  const int archs[] = {80, 90};
  for (int i = 0; i < 2; i++) {
    int compiled = 0;
    TH_OK(kljit_precompile(&pb, archs[i], ro, 0, count_compiled, &compiled));
    /* the row modules (two parts) and the helpers module; sm_90: the logits GEMM too, and the
     * same four of the E16 plan a GPU with less DRAM bandwidth takes (recipe_device_classes) */
    TH_CHECK(compiled == (archs[i] == 90 ? 8 : 3));
    compiled = 0;
    TH_OK(kljit_precompile(&pb, archs[i], ro, 0, count_compiled, &compiled));
    TH_CHECK(compiled == 0); /* second time: all cached */
  }
  TH_CHECK(count_entries(ro) == 11);
  chmod(ro, 0755); /* a shared cluster cache: readable, writable by its owner only */
  setenv("KLJIT_CACHE_PATH", ro, 1);
  setenv("KLJIT_CACHE_DIR", rw, 1);
  TH_CHECK(th_plan_modules_hit_read_only(&pb, archs, 2, 132) == TH_PASS);
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
    {"plan_check_and_precompile_plan_the_default_options_whatever_the_environment_says",
     plan_check_and_precompile_plan_the_default_options_whatever_the_environment_says},
};
TH_MAIN(cases)

/* SPDX-License-Identifier: Apache-2.0 */
/* unit_shared.c — the cluster cache as two users of one machine use it (README, "A cluster
 * cache"): an operator precompiles with --shared, a job's user reads it through
 * KLJIT_CACHE_PATH and trusts the operator through KLJIT_CACHE_TRUSTED_OWNERS. Each side runs
 * in a forked child under its own uid (setgid, setuid): the cases need root and skip (77)
 * without it. Unusable directories (group-writable, unreadable, private entries) are refused
 * or reported, never skipped in silence. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "cli_run.h"
#include "harness.h"
#include "read_only_hits.h"

enum { OPERATOR = 54321, READER = 54322 }; /* uids (and gids) no account of the machine has */

typedef struct paths {
  char base[PATH_MAX], srv[PATH_MAX], shared[PATH_MAX], op_cache[PATH_MAX], rd_cache[PATH_MAX];
} paths;

static paths P;

/* Runs fn in a child with the uid and gid `id` and no supplementary groups; its exit code. */
static int as_user(int id, int (*fn)(void)) {
  fflush(stdout), fflush(stderr);
  const pid_t kid = fork();
  if (kid < 0) return TH_FAIL;
  if (kid == 0) {
    if (setgroups(0, NULL) != 0 || setgid((gid_t)id) != 0 || setuid((uid_t)id) != 0) _exit(98);
    _exit(fn());
  }
  int status = 0;
  if (waitpid(kid, &status, 0) != kid || !WIFEXITED(status)) return TH_FAIL;
  return WEXITSTATUS(status);
}

static int mode_of(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

/* A directory owned by `id`, mode 0755. */
static int make_dir(const char *path, int id) {
  return mkdir(path, 0755) == 0 && chmod(path, 0755) == 0 && chown(path, (uid_t)id, (gid_t)id) == 0;
}

/* The layout of the README's recipe under `base` (0755): srv/ belongs to the operator, who
 * creates srv/kljit-cache; each user has a private writable cache. */
static int layout(const char *base) {
  snprintf(P.base, sizeof P.base, "%s", base);
  snprintf(P.srv, sizeof P.srv, "%s/srv", base);
  snprintf(P.shared, sizeof P.shared, "%s/srv/kljit-cache", base);
  snprintf(P.op_cache, sizeof P.op_cache, "%s/op-cache", base);
  snprintf(P.rd_cache, sizeof P.rd_cache, "%s/rd-cache", base);
  return chmod(base, 0755) == 0 && make_dir(P.srv, OPERATOR) && make_dir(P.op_cache, OPERATOR) &&
         make_dir(P.rd_cache, READER);
}

/* ---- the operator ---------------------------------------------------------------------- */

static int operator_precompiles(void) {
  setenv("KLJIT_CACHE_DIR", P.op_cache, 1);
  TH_CHECK(cli("precompile --shared --arch sm_80,sm_90 --jobs 2 " SMALL " --cache-dir '%s'",
               P.shared) == 0);
  TH_CHECK(cli("cache verify --cache-dir '%s'", P.shared) == 0);
  return TH_PASS;
}

/* The same without --shared: entries 0600, which the reader cannot open. */
static int operator_precompiles_privately(void) {
  setenv("KLJIT_CACHE_DIR", P.op_cache, 1);
  TH_CHECK(cli("precompile --arch sm_80 " SMALL " --cache-dir '%s'", P.shared) == 0);
  return TH_PASS;
}

/* ---- the reader ------------------------------------------------------------------------ */

static void reader_env(const char *trusted) {
  setenv("KLJIT_CACHE_DIR", P.rd_cache, 1);
  setenv("KLJIT_CACHE_PATH", P.shared, 1);
  if (trusted)
    setenv("KLJIT_CACHE_TRUSTED_OWNERS", trusted, 1);
  else
    unsetenv("KLJIT_CACHE_TRUSTED_OWNERS");
}

/* Without naming the operator, the reader refuses the operator's cache, and says so. */
static int reader_refuses_untrusted(void) {
  reader_env(NULL);
  TH_CHECK(cli("cache verify") == 4);
  TH_CHECK(strstr(out, "REFUSED") && strstr(out, "owned by uid 54321") &&
           strstr(out, "KLJIT_CACHE_TRUSTED_OWNERS"));
  TH_CHECK(cli("info") == 0 && strstr(out, "NOT USABLE") && strstr(out, P.shared));
  return TH_PASS;
}

/* Naming the operator: verify passes, info says usable, and plans load every module of the
 * problem from the shared cache, compiling (and writing) nothing. */
static int reader_uses_trusted(void) {
  reader_env("54321");
  TH_CHECK(cli("cache verify") == 0);
  TH_CHECK(cli("info") == 0 && strstr(out, "(usable)"));
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.vocab = 1000, pb.hidden = 64;
  const int archs[] = {80, 90};
  TH_CHECK(th_plan_modules_hit_read_only(&pb, archs, 2, 0) == TH_PASS);
  TH_CHECK(count_kjc(P.rd_cache) == 0);
  return TH_PASS;
}

/* Entries the reader cannot open (a private precompile) are named, not skipped. */
static int reader_reports_unreadable_entries(void) {
  reader_env("54321");
  TH_CHECK(cli("cache verify") == 4);
  TH_CHECK(strstr(out, "UNREADABLE") && strstr(out, "Permission denied"));
  return TH_PASS;
}

/* A KLJIT_CACHE_PATH directory the reader cannot read at all. */
static int reader_reports_unreadable_directory(void) {
  reader_env("54321");
  TH_CHECK(cli("info") == 0 && strstr(out, "NOT USABLE") && strstr(out, "Permission denied"));
  TH_CHECK(cli("cache verify") == 4);
  TH_CHECK(strstr(out, "UNREADABLE") && strstr(out, P.shared) &&
           strstr(out, "plans of this user skip it"));
  return TH_PASS;
}

static int recipe_in(const char *base) {
  TH_CHECK(layout(base));
  TH_CHECK(as_user(OPERATOR, operator_precompiles) == TH_PASS);
  /* sm_80: 3; sm_90: 4 with the GEMM, twice (its two device classes' plans) */
  TH_CHECK(mode_of(P.shared) == 0755 && count_kjc(P.shared) == 11);
  char manifest[PATH_MAX];
  th_path_in(manifest, P.shared, "manifest.txt");
  TH_CHECK(mode_of(manifest) == 0644);
  DIR *const d = opendir(P.shared);
  TH_CHECK(d != NULL);
  for (struct dirent *e; (e = readdir(d));)
    if (cache_name_classify(e->d_name) == CACHE_NAME_ENTRY) {
      char path[PATH_MAX];
      th_path_in(path, P.shared, e->d_name);
      if (mode_of(path) != 0644) fprintf(stderr, "%s: mode %o\n", path, mode_of(path));
      TH_CHECK(mode_of(path) == 0644);
    }
  closedir(d);
  TH_CHECK(as_user(READER, reader_refuses_untrusted) == TH_PASS);
  TH_CHECK(as_user(READER, reader_uses_trusted) == TH_PASS);
  return TH_PASS;
}
static int the_operator_recipe_works_for_a_second_user(void) {
  if (geteuid() != 0) return fprintf(stderr, "needs root (two users): skipped\n"), TH_SKIP;
  return th_in_tmpdir("shared-recipe", recipe_in);
}

static int unreadable_in(const char *base) {
  TH_CHECK(layout(base));
  /* a private precompile into the shared directory: entries 0600 */
  TH_CHECK(make_dir(P.shared, OPERATOR));
  TH_CHECK(as_user(OPERATOR, operator_precompiles_privately) == TH_PASS);
  TH_CHECK(as_user(READER, reader_reports_unreadable_entries) == TH_PASS);
  /* --shared again makes them readable (0644) */
  TH_CHECK(as_user(OPERATOR, operator_precompiles) == TH_PASS);
  TH_CHECK(as_user(READER, reader_uses_trusted) == TH_PASS);
  /* the directory closed to others */
  TH_CHECK(chmod(P.shared, 0700) == 0);
  TH_CHECK(as_user(READER, reader_reports_unreadable_directory) == TH_PASS);
  return TH_PASS;
}
static int unreadable_entries_and_directories_are_reported_not_skipped(void) {
  if (geteuid() != 0) return fprintf(stderr, "needs root (two users): skipped\n"), TH_SKIP;
  return th_in_tmpdir("shared-unreadable", unreadable_in);
}

/* A directory readers would refuse is refused by precompile before anything compiles, once
 * (it used to be found after every module had compiled, its reason printed per module). */
static int writable_in(const char *dir) {
  char shared[PATH_MAX];
  th_path_in(shared, dir, "cache");
  TH_CHECK(mkdir(shared, 0775) == 0 && chmod(shared, 0775) == 0);
  for (int with_shared = 0; with_shared < 2; with_shared++) {
    TH_CHECK(cli("precompile %s--arch sm_80,sm_90 " SMALL " --cache-dir '%s'",
                 with_shared ? "--shared " : "", shared) == 1);
    int times = 0;
    for (const char *p = out; (p = strstr(p, "writable by group or others")); p++) times++;
    TH_CHECK(times == 1 && !strstr(out, "compiled") && !strstr(out, "[1/"));
    TH_CHECK(count_kjc(shared) == 0 && !file_exists(shared, "manifest.txt"));
  }
  return TH_PASS;
}
static int precompile_refuses_a_group_writable_directory_before_compiling(void) {
  return th_in_tmpdir("shared-writable", writable_in);
}

static const th_case cases[] = {
    {"the_operator_recipe_works_for_a_second_user", the_operator_recipe_works_for_a_second_user},
    {"unreadable_entries_and_directories_are_reported_not_skipped",
     unreadable_entries_and_directories_are_reported_not_skipped},
    {"precompile_refuses_a_group_writable_directory_before_compiling",
     precompile_refuses_a_group_writable_directory_before_compiling},
};
TH_MAIN(cases)

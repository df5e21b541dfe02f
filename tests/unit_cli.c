/* SPDX-License-Identifier: Apache-2.0 */
/* unit_cli.c — the kljit command-line tool as a script sees it: exit codes, help, the
 * precompile manifest, cache verify / clear / stats / ls, info without a GPU. Needs no GPU.
 *
 * Each case runs the CLI (its path in KLJIT_CLI) through the shell and checks the exit code
 * and the output; files are checked with the library's own SHA-256 (the test links the static
 * library), independent of the CLI's code path. */
#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "cli_run.h"
#include "harness.h"
#include "kljit_experimental.h"
#include "wisdom.h"

/* The commands `kljit --help` lists (so a new command is covered without touching this). */
static int commands(char names[16][32]) {
  if (cli("--help") != 0) return 0;
  const char *p = strstr(out, "commands:\n");
  int n = 0;
  for (p = p ? strchr(p, '\n') + 1 : NULL; p && !strncmp(p, "  ", 2) && n < 16; n++) {
    sscanf(p, "%31s", names[n]);
    p = strchr(p, '\n');
    p = p ? p + 1 : NULL;
  }
  return n;
}

static int precompile_into(const char *dir, const char *extra) {
  return cli("precompile --arch sm_80,sm_90 " SMALL " --cache-dir '%s' %s", dir, extra);
}

/* ---- help and usage ------------------------------------------------------------------------ */

static int every_command_has_help_that_exits_0(void) {
  char names[16][32];
  const int n = commands(names);
  TH_CHECK(n >= 5);
  TH_CHECK(strstr(out, "exit codes:") && strstr(out, "4  cache verify"));
  TH_CHECK(cli("help") == 0 && strstr(out, "usage: kljit <command>"));
  for (int i = 0; i < n; i++) {
    char want[64];
    snprintf(want, sizeof want, "usage: kljit %.31s", names[i]);
    TH_CHECK(cli("%s --help", names[i]) == 0 && strstr(out, want));
    TH_CHECK(cli("%s -h", names[i]) == 0 && strstr(out, want));
    TH_CHECK(cli("help %s", names[i]) == 0 && strstr(out, want));
  }
  return TH_PASS;
}

static int unknown_commands_and_options_exit_2(void) {
  char names[16][32];
  const int n = commands(names);
  TH_CHECK(n >= 5);
  TH_CHECK(cli("%s", "") == 2 && strstr(out, "usage:"));
  TH_CHECK(cli("frobnicate") == 2 && strstr(out, "unknown command 'frobnicate'"));
  TH_CHECK(cli("help frobnicate") == 2);
  for (int i = 0; i < n; i++)
    TH_CHECK(cli("%s --no-such-option", names[i]) == 2 && strstr(out, "--no-such-option"));
  TH_CHECK(cli("precompile --vocab") == 2 && strstr(out, "needs a value"));
  TH_CHECK(cli("precompile --vocab 12x") == 2);
  TH_CHECK(cli("precompile --dtype fp8") == 2 && strstr(out, "fp32, fp16 or bf16"));
  TH_CHECK(cli("precompile --arch sm_,90") == 2);
  TH_CHECK(cli("precompile --jobs 0") == 2);
  TH_CHECK(cli("demo --rows 0") == 2);
  TH_CHECK(cli("cache") == 2);
  TH_CHECK(cli("cache frob") == 2 && strstr(out, "unknown subcommand"));
  TH_CHECK(cli("cache ls extra") == 2);
  TH_CHECK(cli("version extra") == 2);
  return TH_PASS;
}

/* ---- precompile ---------------------------------------------------------------------------- */

static int manifest_matches_files_in(const char *dir) {
  TH_CHECK(precompile_into(dir, "") == 0);
  TH_CHECK(strstr(out, "[11/11]") && strstr(out, "compiled")); /* sm_80: 3, sm_90: 8 (the GEMM;
                                                                  * both device classes) */
  TH_CHECK(strstr(out, "manifest:"));
  char path[PATH_MAX];
  th_path_in(path, dir, "manifest.txt");
  FILE *const f = fopen(path, "r");
  TH_CHECK(f != NULL);
  char line[512];
  int lines = 0, archs[2] = {0, 0};
  TH_CHECK(fgets(line, sizeof line, f) && !strcmp(line, "# kljit cache manifest 1\n"));
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    char file[128], arch[32], sha[128], name[128];
    unsigned long long size;
    TH_CHECK(sscanf(line, "%127s %31s %127s %llu %127s", file, arch, sha, &size, name) == 5);
    TH_CHECK(cache_name_classify(file) == CACHE_NAME_ENTRY);
    archs[0] += !strcmp(arch, "sm_80"), archs[1] += !strcmp(arch, "sm_90");
    char fpath[PATH_MAX];
    th_path_in(fpath, dir, file);
    FILE *const e = fopen(fpath, "rb");
    TH_CHECK(e != NULL);
    static unsigned char buf[1 << 24];
    const size_t got = fread(buf, 1, sizeof buf, e);
    fclose(e);
    char hex[65];
    sha256_hex(buf, got, hex);
    TH_CHECK(got == size);
    TH_CHECK(!strcmp(hex, sha));
    lines++;
  }
  fclose(f);
  TH_CHECK(lines == 11 && count_kjc(dir) == 11);
  TH_CHECK(archs[0] == 3 && archs[1] == 8);
  /* a second run compiles nothing and says so */
  TH_CHECK(precompile_into(dir, "") == 0 && strstr(out, "0 module(s) compiled now, 3 already"));
  return TH_PASS;
}
static int precompile_writes_a_manifest_whose_checksums_match_the_files(void) {
  return th_in_tmpdir("cli-manifest", manifest_matches_files_in);
}

/* The entry names (hashes of the key texts) in manifest order, one per line. */
static int manifest_files(const char *dir, char *list, size_t cap) {
  char path[PATH_MAX], line[512];
  th_path_in(path, dir, "manifest.txt");
  FILE *const f = fopen(path, "r");
  if (!f) return -1;
  list[0] = '\0';
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    char file[128], arch[32];
    if (sscanf(line, "%127s %31s", file, arch) != 2) break;
    snprintf(list + strlen(list), cap - strlen(list), "%s %s\n", file, arch);
  }
  fclose(f);
  return 0;
}

static int jobs_in(const char *dir) {
  char one[PATH_MAX], two[PATH_MAX];
  th_path_in(one, dir, "jobs1");
  th_path_in(two, dir, "jobs2");
  /* three archs x one problem = three jobs (fourteen modules: sm_90's GEMM too, and the E16
   * plan's four of its other device class), two at a time */
  TH_CHECK(cli("precompile --arch sm_80,sm_86,sm_90 " SMALL " --cache-dir '%s' --jobs 1", one) ==
           0);
  TH_CHECK(cli("precompile --arch sm_80,sm_86,sm_90 " SMALL " --cache-dir '%s' --jobs 2", two) ==
           0);
  TH_CHECK(strstr(out, "[14/14]"));
  static char a[8192], b[8192];
  TH_CHECK(manifest_files(one, a, sizeof a) == 0 && manifest_files(two, b, sizeof b) == 0);
  TH_CHECK(count_kjc(one) == 14 && count_kjc(two) == 14);
  TH_CHECK(strcmp(a, b) == 0);
  TH_CHECK(cli("cache verify --cache-dir '%s' --cache-dir '%s'", one, two) == 0);
  return TH_PASS;
}
static int precompile_jobs_2_gives_the_same_entries_as_jobs_1(void) {
  return th_in_tmpdir("cli-jobs", jobs_in);
}

/* How many "cache: stored <path>" log lines name each file of dir: one per compile. */
static int stored_at_most_once(const char *dir, int *files) {
  DIR *const d = opendir(dir);
  if (!d) return 0;
  int ok = 1;
  *files = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (cache_name_classify(e->d_name) != CACHE_NAME_ENTRY) continue;
    ++*files;
    int stores = 0;
    const size_t back = strlen("stored ") + strlen(dir) + 1; /* "stored <dir>/<file>" */
    for (const char *p = out; (p = strstr(p, e->d_name)); p++)
      stores += (size_t)(p - out) >= back && !strncmp(p - back, "stored ", 7);
    if (stores != 1) fprintf(stderr, "%s stored %d times\n", e->d_name, stores), ok = 0;
  }
  closedir(d);
  return ok;
}

/* --jobs N ran jobs that share modules (the same problem given twice, problems that differ in
 * their rows only) at once: each missed the cache and compiled the shared module (10, 11 and 12
 * compiles in three identical runs), and the counts said "1 already cached" of an empty
 * directory. One process now compiles one module once (the others wait for it), and each
 * module is counted and shown once. Three runs into empty directories must agree. */
static int jobs_once_in(const char *dir) {
  for (int run = 0; run < 3; run++) {
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/run%d", dir, run);
    TH_CHECK(cli("precompile --jobs 4 --arch sm_80 " SMALL " " SMALL " " SMALL ",T=2 " SMALL
                 ",reduction=sum --cache-dir '%s'",
                 sub) == 0);
    int files = 0;
    TH_CHECK(stored_at_most_once(sub, &files));
    char want[128];
    snprintf(want, sizeof want, "sm_80: %d module(s) compiled now, 0 already cached", files);
    TH_CHECK(strstr(out, want) != NULL);
    snprintf(want, sizeof want, "[%d/%d]", files, files);
    TH_CHECK(strstr(out, want) != NULL);
    snprintf(want, sizeof want, "[%d/%d]", files + 1, files);
    TH_CHECK(strstr(out, want) == NULL);
  }
  return TH_PASS;
}
static int precompile_jobs_compile_each_module_once_and_count_it_once(void) {
  setenv("KLJIT_LOG", "1", 1);
  return th_in_tmpdir("cli-jobs-once", jobs_once_in);
}

static int dry_run_in(const char *dir) {
  char sub[PATH_MAX];
  th_path_in(sub, dir, "cache");
  TH_CHECK(precompile_into(sub, "--dry-run") == 0);
  TH_CHECK(strstr(out, "3 module(s) to compile") && strstr(out, "to compile"));
  TH_CHECK(!file_exists(dir, "cache")); /* nothing written, not even the directory */
  return TH_PASS;
}
static int precompile_dry_run_writes_nothing(void) {
  return th_in_tmpdir("cli-dry", dry_run_in);
}

/* The entry files the SMALL problem's modules get on arch, from a dry run of the library. */
typedef struct file_list {
  char name[8][80];
  int n;
} file_list;
static void collect_file(const kljit_module_report *m, void *user) {
  file_list *const l = user;
  if (l->n < 8) snprintf(l->name[l->n++], sizeof l->name[0], "%s", m->file);
}
static int small_files(int arch, const char *dir, file_list *l) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.vocab = 1000, pb.hidden = 64;
  return kljit_precompile(&pb, arch, dir, KLJIT_PRECOMPILE_DRY_RUN, collect_file, l);
}

/* After a failed precompile: no manifest, and no entry named in stderr exists as a file. */
static int nothing_vouched_for(const char *dir, const file_list *l) {
  TH_CHECK(!file_exists(dir, "manifest.txt"));
  for (int i = 0; i < l->n; i++) {
    char path[PATH_MAX];
    struct stat st;
    th_path_in(path, dir, l->name[i]);
    TH_CHECK(strstr(out, path) != NULL); /* each failure is named with its path */
    TH_CHECK(lstat(path, &st) != 0 || !S_ISREG(st.st_mode));
  }
  return TH_PASS;
}

static int entry_is_a_directory_in(const char *dir) {
  file_list l = {0};
  TH_OK(small_files(80, dir, &l));
  TH_CHECK(l.n == 3);
  for (int i = 0; i < l.n; i++) {
    char path[PATH_MAX];
    th_path_in(path, dir, l.name[i]);
    TH_CHECK(mkdir(path, 0700) == 0);
  }
  TH_CHECK(cli("precompile --arch sm_80 " SMALL " --cache-dir '%s'", dir) == 1);
  TH_CHECK(strstr(out, "3 of 3 module(s) not stored") && strstr(out, "it is a directory"));
  TH_CHECK(!strstr(out, "compiled now")); /* no success summary */
  TH_CHECK(nothing_vouched_for(dir, &l) == TH_PASS);
  /* the API says the same: KLJIT_ERR_CACHE, and with --wisdom's path too (same builder) */
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.vocab = 1000, pb.hidden = 64;
  TH_STATUS(kljit_precompile(&pb, 80, dir, 0, NULL, NULL), KLJIT_ERR_CACHE);
  TH_CHECK(strstr(kljit_last_error(), l.name[0]) && strstr(kljit_last_error(), l.name[1]) &&
           strstr(kljit_last_error(), l.name[2]));
  /* cache verify agrees that these are not entries */
  TH_CHECK(cli("cache verify --cache-dir '%s'", dir) == 4);
  return TH_PASS;
}
static int precompile_that_cannot_store_an_entry_exits_1_naming_it(void) {
  return th_in_tmpdir("cli-isdir", entry_is_a_directory_in);
}

/* A 64 KiB tmpfs (full after one module) and a read-only bind mount; needs CAP_SYS_ADMIN
 * (CI runs as root), else skipped. */
static int full_and_read_only_in(const char *dir) {
  char full[PATH_MAX], ro[PATH_MAX], cmd[4 * PATH_MAX];
  th_path_in(full, dir, "full");
  th_path_in(ro, dir, "ro");
  TH_CHECK(mkdir(full, 0700) == 0 && mkdir(ro, 0700) == 0);
  snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=64k,mode=0700 kljit-test '%s' 2>/dev/null",
           full);
  if (system(cmd) != 0) {
    fprintf(stderr, "cannot mount a tmpfs here (not root?): skipped\n");
    return TH_SKIP;
  }
  snprintf(cmd, sizeof cmd,
           "mount --bind '%s' '%s' && mount -o remount,ro,bind '%s' 2>/dev/null", ro, ro, ro);
  const int ro_mounted = system(cmd) == 0;
  int r = TH_PASS;
  file_list l = {0};
  if (small_files(90, full, &l) != KLJIT_SUCCESS || l.n != 8) r = TH_FAIL; /* with the GEMM */
  /* full: the first module may fit, the rest does not; whatever is missing is named */
  if (r == TH_PASS && cli("precompile --arch sm_90 " SMALL " --cache-dir '%s'", full) != 1)
    r = TH_FAIL;
  if (r == TH_PASS && !strstr(out, "No space left on device")) r = TH_FAIL;
  if (r == TH_PASS && file_exists(full, "manifest.txt")) r = TH_FAIL;
  if (r == TH_PASS && cli("cache verify --cache-dir '%s'", full) != 0) r = TH_FAIL;
  if (r == TH_PASS && ro_mounted) {
    file_list lr = {0};
    if (small_files(80, ro, &lr) != KLJIT_SUCCESS) r = TH_FAIL;
    if (r == TH_PASS &&
        cli("precompile --arch sm_80 " SMALL " --cache-dir '%s' --no-manifest", ro) != 1)
      r = TH_FAIL;
    if (r == TH_PASS && !strstr(out, "Read-only file system")) r = TH_FAIL;
    if (r == TH_PASS && nothing_vouched_for(ro, &lr) != TH_PASS) r = TH_FAIL;
  }
  snprintf(cmd, sizeof cmd, "umount '%s'; umount '%s' 2>/dev/null", full, ro);
  if (system(cmd) != 0 && ro_mounted) fprintf(stderr, "umount failed\n");
  return r;
}
static int precompile_into_a_full_or_read_only_filesystem_exits_1(void) {
  return th_in_tmpdir("cli-full", full_and_read_only_in);
}

/* ---- cache --------------------------------------------------------------------------------- */

/* The name of the first entry in dir, in name order. */
static int first_entry(const char *dir, char name[80]) {
  DIR *const d = opendir(dir);
  if (!d) return -1;
  name[0] = '\0';
  for (struct dirent *e; (e = readdir(d));)
    if (cache_name_classify(e->d_name) == CACHE_NAME_ENTRY &&
        (!name[0] || strcmp(e->d_name, name) < 0))
      snprintf(name, 80, "%.68s", e->d_name);
  closedir(d);
  return name[0] ? 0 : -1;
}

static int verify_in(const char *dir) {
  TH_CHECK(precompile_into(dir, "") == 0);
  TH_CHECK(cli("cache verify --cache-dir '%s'", dir) == 0);
  TH_CHECK(strstr(out, "11 entries, 0 problem(s)"));
  char name[80], path[PATH_MAX];
  TH_CHECK(first_entry(dir, name) == 0);
  th_path_in(path, dir, name);
  FILE *const f = fopen(path, "r+b"); /* flip one byte in the middle of the cubin */
  TH_CHECK(f != NULL);
  struct stat st;
  TH_CHECK(stat(path, &st) == 0);
  TH_CHECK(fseek(f, st.st_size / 2, SEEK_SET) == 0);
  const int c = fgetc(f);
  TH_CHECK(fseek(f, st.st_size / 2, SEEK_SET) == 0 && fputc(c ^ 0x40, f) != EOF);
  TH_CHECK(fclose(f) == 0);
  TH_CHECK(cli("cache verify --cache-dir '%s'", dir) == 4);
  char want[160];
  snprintf(want, sizeof want, "CORRUPT %s/%s: checksum mismatch", dir, name);
  TH_CHECK(strstr(out, want));
  TH_CHECK(strstr(out, "11 entries, 1 problem(s)"));
  TH_CHECK(cli("cache ls --cache-dir '%s'", dir) == 0 && strstr(out, "INVALID"));
  /* the default directories: KLJIT_CACHE_PATH ones are verified too */
  char cmd[PATH_MAX + 64];
  snprintf(cmd, sizeof cmd, "KLJIT_CACHE_PATH='%s' '%s' cache verify", dir, getenv("KLJIT_CLI"));
  const int status = system(cmd);
  TH_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 4);
  return TH_PASS;
}
static int cache_verify_finds_a_flipped_byte_and_exits_4(void) {
  return th_in_tmpdir("cli-verify", verify_in);
}

static int clear_in(const char *dir) {
  TH_CHECK(precompile_into(dir, "") == 0);
  const char *const temp =
      ".0000000000000000000000000000000000000000000000000000000000000000.kjc.host.1.00ff.tmp";
  TH_CHECK(write_file(dir, "notes.txt", "mine\n") == 0);
  TH_CHECK(write_file(dir, "abc.kjc", "not an entry name\n") == 0);
  TH_CHECK(write_file(dir, temp, "half") == 0);
  TH_CHECK(cli("cache clear --cache-dir '%s'", dir) == 0);
  TH_CHECK(strstr(out, "removed 12 files"));
  TH_CHECK(strstr(out, "manifest.txt"));
  TH_CHECK(count_kjc(dir) == 0);
  TH_CHECK(file_exists(dir, "notes.txt") && file_exists(dir, "abc.kjc"));
  TH_CHECK(!file_exists(dir, temp) && !file_exists(dir, "manifest.txt"));
  TH_CHECK(cli("cache clear --cache-dir '%s'", dir) == 0 && strstr(out, "removed 0 files"));
  TH_CHECK(cli("cache stats --cache-dir '%s'", dir) == 0 && strstr(out, ": 0 entries"));
  return TH_PASS;
}
static int cache_clear_removes_entries_and_leaves_foreign_files(void) {
  return th_in_tmpdir("cli-clear", clear_in);
}

static int stats_in(const char *dir) {
  TH_CHECK(precompile_into(dir, "") == 0);
  TH_CHECK(cli("cache stats --cache-dir '%s'", dir) == 0);
  TH_CHECK(strstr(out, ": 11 entries") && strstr(out, "0 invalid"));
  TH_CHECK(strstr(out, "sm_80        3 entries") && strstr(out, "sm_90        8 entries"));
  TH_CHECK(cli("cache ls --cache-dir '%s'", dir) == 0);
  TH_CHECK(strstr(out, "# 11 entries") && strstr(out, "sm_80") && strstr(out, "sm_90"));
  TH_CHECK(strstr(out, "dense_rows") && strstr(out, "helpers"));
  /* a named directory that is not there is an error; a default one is just reported */
  TH_CHECK(cli("cache stats --cache-dir '%s/none'", dir) == 1);
  return TH_PASS;
}
static int cache_stats_and_ls_count_the_entries(void) {
  return th_in_tmpdir("cli-stats", stats_in);
}

/* ---- info ---------------------------------------------------------------------------------- */

static int info_runs_without_a_gpu_and_says_so(void) {
  TH_CHECK(cli("info") == 0);
  TH_CHECK(strstr(out, "NVRTC") && strstr(out, "Lua 5.4") && strstr(out, "CUDA toolkit"));
  TH_CHECK(strstr(out, "kernel cache") && strstr(out, "wisdom"));
  kljit_context *ctx = NULL;
  const kljit_status st = kljit_context_create(&ctx, 0, NULL);
  kljit_context_destroy(ctx);
  if (st == KLJIT_SUCCESS) return TH_PASS; /* a GPU machine: "GPU 0 ..." instead */
  TH_CHECK(strstr(out, "GPU            none"));
  return TH_PASS;
}

/* `kljit info` printed a typo'd knob as set and exited 0; the library then used the default.
 * It names each value kljit refuses, and each KLJIT_ name it does not read, and exits 2. */
static int info_names_every_bad_kljit_variable(void) {
  TH_CHECK(cli("info") == 0);
  setenv("KLJIT_ROW_KERNEL", "clustr", 1), setenv("KLJIT_GEMM", "jti", 1);
  setenv("KLJIT_CHUNKROWS", "4096", 1);
  const int rc = cli("info");
  unsetenv("KLJIT_ROW_KERNEL"), unsetenv("KLJIT_GEMM"), unsetenv("KLJIT_CHUNKROWS");
  TH_CHECK(rc == 2);
  TH_CHECK(strstr(out, "KLJIT_ROW_KERNEL=clustr: want two_pass (the default) or cluster"));
  TH_CHECK(strstr(out, "KLJIT_GEMM=jti: want jit, cublas or a list"));
  TH_CHECK(strstr(out, "KLJIT_CHUNKROWS") && strstr(out, "not a variable"));
  TH_CHECK(strstr(out, "2 KLJIT_* variable(s) with a value kljit refuses"));
  return TH_PASS;
}

/* ---- the library functions behind the CLI -------------------------------------------------- */

typedef struct thread_job {
  kljit_problem pb;
  int arch;
  const char *dir;
  kljit_status st;
  int reports, last_count;
} thread_job;

static void count_report(const kljit_module_report *m, void *user) {
  thread_job *const j = user;
  if (m->index == j->reports && m->arch == j->arch &&
      cache_name_classify(m->file) == CACHE_NAME_ENTRY)
    j->reports++;
  j->last_count = m->count;
}

/* Counts the modules a run compiled (a dry run: would compile); starts from -1 = "none seen". */
static void count_compiled(const kljit_module_report *m, void *user) {
  int *const n = user;
  if (*n < 0) *n = 0;
  *n += m->compiled;
}

static void *thread_main(void *arg) {
  thread_job *const j = arg;
  j->st = kljit_precompile(&j->pb, j->arch, j->dir, 0, count_report, j);
  return NULL;
}

static int list_names(const kljit_cache_entry_info *e, void *user) {
  char *const list = user;
  if (e->status == KLJIT_SUCCESS)
    snprintf(list + strlen(list), 8192 - strlen(list), "%s\n", e->file);
  return 0;
}

static int threads_in(const char *dir) {
  char par[PATH_MAX], ser[PATH_MAX];
  th_path_in(par, dir, "threads");
  th_path_in(ser, dir, "serial");
  thread_job jobs[4];
  const int archs[4] = {80, 90, 80, 90};
  for (int i = 0; i < 4; i++) {
    const kljit_problem init = KLJIT_PROBLEM_INIT;
    jobs[i] = (thread_job){init, archs[i], par, KLJIT_SUCCESS, 0, 0};
    jobs[i].pb.hidden = 64;
    jobs[i].pb.vocab = i < 2 ? 1000 : 1001; /* two problems x two archs */
  }
  pthread_t t[4];
  for (int i = 0; i < 4; i++) TH_CHECK(pthread_create(&t[i], NULL, thread_main, &jobs[i]) == 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) {
    TH_OK(jobs[i].st);
    TH_CHECK(jobs[i].reports == jobs[i].last_count && jobs[i].reports >= 2);
    thread_job s = jobs[i];
    s.dir = ser, s.reports = 0;
    thread_main(&s);
    TH_OK(s.st);
  }
  static char a[8192], b[8192];
  a[0] = b[0] = '\0';
  TH_OK(kljit_cache_list(par, list_names, a));
  TH_OK(kljit_cache_list(ser, list_names, b));
  /* sm_80: 3 + 2 (the second problem's rows); sm_90: 4 + 4, and as many for its other device
   * class (E16) */
  TH_CHECK(strcmp(a, b) == 0 && count_kjc(par) == 21);
  /* a dry run over the filled directory finds everything cached */
  int to_compile = -1;
  TH_OK(kljit_precompile(&jobs[3].pb, 90, par, KLJIT_PRECOMPILE_DRY_RUN, count_compiled,
                            &to_compile));
  TH_CHECK(to_compile == 0);
  TH_OK(kljit_precompile(&jobs[3].pb, 86, par, KLJIT_PRECOMPILE_DRY_RUN, count_compiled,
                            &to_compile));
  TH_CHECK(to_compile == 3 && count_kjc(par) == 21);
  return TH_PASS;
}
static int precompile_v2_from_threads_matches_a_serial_run(void) {
  return th_in_tmpdir("cli-threads", threads_in);
}

static int stop_after_one(const kljit_cache_entry_info *e, void *user) {
  (void)e;
  ++*(int *)user;
  return 1;
}

static int api_in(const char *dir) {
  kljit_versions v = {0};
  TH_STATUS(kljit_get_versions(&v), KLJIT_ERR_INVALID_ARGUMENT); /* struct_size unset */
  v.struct_size = sizeof v;
  TH_OK(kljit_get_versions(&v));
  TH_CHECK(v.library == kljit_version_number() && v.nvrtc_major >= 11 && v.cuda_toolkit >= 11000);
  TH_CHECK(!strncmp(v.lua, "Lua 5.4", 7));
  TH_CHECK(precompile_into(dir, "--no-manifest") == 0 && !file_exists(dir, "manifest.txt"));
  int seen = 0;
  TH_OK(kljit_cache_list(dir, stop_after_one, &seen));
  TH_CHECK(seen == 1);
  char missing[PATH_MAX];
  th_path_in(missing, dir, "missing");
  TH_STATUS(kljit_cache_list(missing, stop_after_one, &seen), KLJIT_ERR_CACHE);
  TH_STATUS(kljit_cache_list(NULL, stop_after_one, &seen), KLJIT_ERR_INVALID_ARGUMENT);
  TH_CHECK(chmod(dir, 0777) == 0); /* a directory others may write is refused, not listed */
  TH_STATUS(kljit_cache_list(dir, stop_after_one, &seen), KLJIT_ERR_CACHE);
  TH_CHECK(strstr(kljit_last_error(), "writable by group or others"));
  TH_STATUS(kljit_cache_clear(dir, NULL, NULL), KLJIT_ERR_CACHE);
  TH_CHECK(count_kjc(dir) == 11);
  TH_CHECK(chmod(dir, 0700) == 0);
  TH_OK(kljit_cache_clear(dir, NULL, NULL));
  TH_CHECK(count_kjc(dir) == 0);
  const kljit_problem pb = {0};
  TH_STATUS(kljit_precompile(&pb, 90, dir, 0, NULL, NULL), KLJIT_ERR_INVALID_ARGUMENT);
  return TH_PASS;
}
static int tooling_functions_check_their_arguments_and_permissions(void) {
  return th_in_tmpdir("cli-api", api_in);
}

/* ---- one problem grammar, exit codes (issue 18) --------------------------------------------- */

/* Two dense shapes and a sparse one, for two architectures, in one call: one manifest listing
 * every entry of the directory, which `cache verify` accepts. */
static int three_shapes_in(const char *dir) {
  char cache[PATH_MAX];
  th_path_in(cache, dir, "cluster");
  TH_CHECK(cli("precompile --arch sm_80,sm_90 --jobs 2 --cache-dir '%s' V=1000,H=64 "
               "V=2048,H=32,fp16,logits V=4096,H=64,topk=8,tail=bucket,ids=i64",
               cache) == 0);
  TH_CHECK(strstr(out, "sm_80: ") && strstr(out, "sm_90: "));
  TH_CHECK(strstr(out, "sparse_rows") && strstr(out, "dense_rows"));
  const int entries = count_kjc(cache);
  char want[64];
  snprintf(want, sizeof want, "(%d entries)", entries);
  TH_CHECK(entries >= 6 && strstr(out, want)); /* at least rows + helpers per arch */
  char manifest[PATH_MAX], line[512];
  th_path_in(manifest, cache, "manifest.txt");
  FILE *f = fopen(manifest, "r");
  TH_CHECK(f);
  int lines = 0, archs[2] = {0, 0};
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    lines++;
    archs[0] += strstr(line, " sm_80 ") != NULL, archs[1] += strstr(line, " sm_90 ") != NULL;
  }
  fclose(f);
  TH_CHECK(lines == entries && archs[0] > 0 && archs[1] > 0 && archs[0] + archs[1] == lines);
  /* verify checks every manifest line's checksum against its file */
  TH_CHECK(cli("cache verify --cache-dir '%s'", cache) == 0);
  TH_CHECK(strstr(out, " 0 problem(s)"));
  /* the same again: everything is cached, one manifest still */
  TH_CHECK(cli("precompile --arch sm_80,sm_90 --cache-dir '%s' V=1000,H=64 "
               "V=2048,H=32,fp16,logits V=4096,H=64,topk=8,tail=bucket,ids=i64",
               cache) == 0);
  TH_CHECK(strstr(out, "0 module(s) compiled now") && count_kjc(cache) == entries);
  return TH_PASS;
}
static int precompile_takes_several_shapes_dense_and_sparse_into_one_manifest(void) {
  return th_in_tmpdir("cli-shapes", three_shapes_in);
}

/* Each value the CLI or the library refuses is a usage error (2), never a failure (1). */
static int usage_in(const char *dir) {
  char wisdom[PATH_MAX];
  th_path_in(wisdom, dir, "no-such-wisdom");
  static const struct {
    const char *args, *says;
  } bad[] = {
      {"precompile --dry-run V=100000000,H=64", "from 2 to 16777216"},
      {"precompile --dry-run V=1000,H=1000000000000", "from 1 to 1048576"},
      {"precompile --dry-run --vocab 100000000", "from 2 to 16777216"},
      {"precompile --dry-run --hidden 1000000000000", "from 1 to 1048576"},
      {"precompile --dry-run V=1000", "V= and H= are required"},
      {"precompile --dry-run V=1000,H=64,fp8", "unknown word 'fp8'"},
      {"precompile --dry-run V=1000,H=64,topk=2000", "from 1 to 1024"},
      {"precompile --dry-run V=100,H=64,topk=200", "topk"}, /* the library's refusal: K > V */
      {"precompile --dry-run V=1000,H=64,tail=most", "none, renorm or bucket"},
      {"precompile --dry-run --arch sm_75 V=1000,H=64", "arch = 75"},
      {"precompile --dry-run --arch sm_75", "arch = 75"},
      {"precompile --dry-run --file /no/such/shapes", "No such file"},
      {"demo V=100000000,H=64", "from 2 to 16777216"},
      {"demo --vocab 100000000", "from 2 to 16777216"},
      {"demo --arch sm_75 V=1000,H=64", "75"},
      {"demo V=1000,H=64,reduction=none", "reduction=none"},
      {"demo --reduction none", "reduction=none"},
      {"demo V=1000,H=64 V=2000,H=64", "one SHAPE at most"},
      {"tune --file /no/such/shapes", "No such file"},
      {"tune V=100000000,H=64", "from 2 to 16777216"},
      {"tune", "no shape"},
      {"precompile -- --dry-run", "unknown word '--dry-run'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const int rc = cli("%s", bad[i].args);
    TH_CHECK(rc == 2);
    if (!strstr(out, bad[i].says)) {
      fprintf(stderr, "FAIL: 'kljit %s' does not say '%s'\n", bad[i].args, bad[i].says);
      return TH_FAIL;
    }
  }
  TH_CHECK(cli("precompile --dry-run --wisdom '%s'", wisdom) == 2);
  TH_CHECK(strstr(out, "No such file"));
  /* a --file that is no regular file is refused by name, without blocking on a FIFO's open or
   * reading a device (both commands; 124 would be a hang) */
  char fifo[PATH_MAX];
  th_path_in(fifo, dir, "shapes.fifo");
  TH_CHECK(mkfifo(fifo, 0600) == 0);
  static const char *const cmds[] = {"precompile --dry-run", "tune"};
  for (int c = 0; c < 2; c++) {
    TH_CHECK(cli_within(20, "%s --file '%s'", cmds[c], fifo) == 2);
    TH_CHECK(strstr(out, "a FIFO or pipe, not a regular file"));
    TH_CHECK(cli_within(20, "%s --file /dev/zero", cmds[c]) == 2);
    TH_CHECK(strstr(out, "a device, not a regular file"));
    TH_CHECK(cli_within(20, "%s --file '%s'", cmds[c], dir) == 2);
    TH_CHECK(strstr(out, "a directory, not a regular file"));
  }
  return TH_PASS;
}
static int every_refused_value_is_a_usage_error_exit_2_with_the_real_range(void) {
  return th_in_tmpdir("cli-usage", usage_in);
}

static int operands_in(const char *dir) {
  /* "--" ends the options; sm_90a is sm_90; shapes after "--" are still shapes */
  TH_CHECK(cli("precompile --dry-run --arch sm_90a --cache-dir '%s' -- V=1000,H=64", dir) == 0);
  TH_CHECK(strstr(out, "sm_90: ") && strstr(out, "sm_90a is compiled as sm_90"));
  TH_CHECK(cli("precompile --dry-run --arch sm_80,sm_100a --cache-dir '%s' V=1000,H=64", dir) ==
           0);
  TH_CHECK(strstr(out, "sm_100: "));
  TH_CHECK(cli("version --") == 0);
  TH_CHECK(count_kjc(dir) == 0); /* dry runs */
  return TH_PASS;
}
static int double_dash_ends_options_and_sm_90a_is_accepted(void) {
  return th_in_tmpdir("cli-operands", operands_in);
}

/* The demo without a GPU says where the kernels went and what was cached; with the cache
 * disabled it still compiles (into a temporary directory it removes). */
static int demo_in(const char *dir) {
  kljit_context *ctx = NULL;
  const kljit_status st = kljit_context_create(&ctx, 0, NULL);
  kljit_context_destroy(ctx);
  if (st == KLJIT_SUCCESS) return TH_SKIP; /* a GPU machine runs the loss instead */
  char cache[PATH_MAX], tmp[PATH_MAX];
  th_path_in(cache, dir, "cache");
  th_path_in(tmp, dir, "tmp");
  TH_CHECK(mkdir(tmp, 0700) == 0);
  setenv("KLJIT_CACHE_DIR", cache, 1);
  TH_CHECK(cli("demo --arch sm_80 V=1000,H=64,topk=4") == 0);
  char want[PATH_MAX + 64];
  snprintf(want, sizeof want, "compiled now, 0 already cached -> %s", cache);
  TH_CHECK(strstr(out, want));
  TH_CHECK(cli("demo --arch sm_80 V=1000,H=64,topk=4") == 0);
  TH_CHECK(strstr(out, "0 module(s) compiled now, ") && !strstr(out, ", 0 already cached"));
  setenv("KLJIT_CACHE_DISABLE", "1", 1);
  setenv("TMPDIR", tmp, 1);
  const int rc = cli("demo --arch sm_80 V=1000,H=64");
  unsetenv("KLJIT_CACHE_DISABLE");
  unsetenv("TMPDIR");
  TH_CHECK(rc == 0 && strstr(out, "removed afterwards") && strstr(out, "compiled now"));
  DIR *d = opendir(tmp);
  TH_CHECK(d);
  int left = 0;
  for (struct dirent *e; (e = readdir(d));) left += e->d_name[0] != '.';
  closedir(d);
  TH_CHECK(left == 0);
  return TH_PASS;
}
static int demo_without_gpu_names_its_cache_and_falls_back_without_one(void) {
  const char *const keep = getenv("KLJIT_CACHE_DIR");
  char saved[PATH_MAX];
  snprintf(saved, sizeof saved, "%s", keep ? keep : "");
  const int r = th_in_tmpdir("cli-demo", demo_in);
  if (keep) setenv("KLJIT_CACHE_DIR", saved, 1);
  return r;
}

/* `kljit info` shows every knob of README.md's environment table. */
static int info_lists_every_environment_knob_of_the_readme(void) {
  const char *const src = getenv("KLJIT_SOURCE_DIR");
  TH_CHECK(src);
  char path[PATH_MAX], line[1024];
  snprintf(path, sizeof path, "%s/README.md", src);
  FILE *f = fopen(path, "r");
  TH_CHECK(f);
  TH_CHECK(cli("info") == 0);
  int knobs = 0, in_table = 0, missing = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "## Environment knobs", 20)) in_table = 1;
    else if (!strncmp(line, "## ", 3)) in_table = 0;
    char name[128];
    if (!in_table || sscanf(line, "| `%127[A-Z0-9_]", name) != 1) continue;
    knobs++;
    char want[160];
    snprintf(want, sizeof want, "  %s ", name);
    if (!strstr(out, want)) fprintf(stderr, "FAIL: kljit info does not list %s\n", name), missing++;
  }
  fclose(f);
  printf("%d knobs in README.md, %d missing from kljit info\n", knobs, missing);
  TH_CHECK(knobs >= 13 && missing == 0);
  TH_CHECK(strstr(out, "Apache-2.0"));
  return TH_PASS;
}

/* ---- the default user wisdom file (issue 18): $XDG_STATE_HOME, the old file still read ----- */

static wisdom_entry state_entry(void) {
  wisdom_entry e;
  memset(&e, 0, sizeof e);
  snprintf(e.gpu, sizeof e.gpu, "NVIDIA H200");
  e.arch = 90, e.sms = 132, e.bucket = 8192, e.rows = 8192, e.ms = 3;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 256, pb.vocab = 50257;
  wisdom_problem_key(&pb, e.problem);
  wisdom_problem_extra(&pb, e.extra);
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  e.tune = prob_estimate(&pb, 90, &o);
  e.rigor = KLJIT_PLAN_MEASURE;
  return e;
}

/* Runs fn in a child process (the store reads its default files once per process). */
static int in_child(int (*fn)(const char *), const char *dir) {
  fflush(NULL);
  const pid_t pid = fork();
  if (pid == 0) _exit(fn(dir));
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return TH_FAIL;
  return WEXITSTATUS(status);
}

static void home_env(const char *dir) {
  unsetenv("KLJIT_WISDOM"), unsetenv("KLJIT_CACHE_DIR"), unsetenv("XDG_STATE_HOME");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", dir, 1);
  setenv("KLJIT_SYSTEM_WISDOM", "/nonexistent/kljit-system-wisdom", 1);
}

static int write_old_file(const char *dir) {
  char old[PATH_MAX];
  th_path_in(old, dir, ".cache/kljit/wisdom");
  home_env(dir);
  setenv("KLJIT_WISDOM", old, 1); /* where 0.1.0 wrote it */
  const wisdom_entry e = state_entry();
  TH_OK(wisdom_add(&e));
  struct stat sb;
  TH_CHECK(stat(old, &sb) == 0);
  return TH_PASS;
}

static int read_defaults(const char *dir) {
  home_env(dir);
  char buf[PATH_MAX], want[PATH_MAX];
  TH_OK(kljit_wisdom_path(KLJIT_WISDOM_USER, buf, sizeof buf));
  th_path_in(want, dir, ".local/state/kljit/wisdom");
  TH_CHECK(strcmp(buf, want) == 0);
  const wisdom_entry e = state_entry();
  wisdom_entry got;
  TH_CHECK(wisdom_lookup(e.gpu, e.arch, e.sms, e.problem, e.bucket, WISDOM_EXACT_BUCKET,
                         KLJIT_PLAN_MEASURE, &got)); /* from the old file */
  TH_CHECK(got.ms == e.ms);
  /* new results go to the state file; the old one is left as it was */
  wisdom_entry faster = e;
  faster.ms = 1;
  TH_OK(wisdom_add(&faster));
  struct stat sb;
  TH_CHECK(stat(want, &sb) == 0);
  wisdom_set s;
  char old[PATH_MAX];
  th_path_in(old, dir, ".cache/kljit/wisdom");
  TH_OK(wisdom_read_file(old, &s, NULL));
  TH_CHECK(s.n == 1 && s.e[0].ms == 3);
  wisdom_set_free(&s);
  /* XDG_STATE_HOME, when absolute, is the base */
  th_path_in(want, dir, "state");
  setenv("XDG_STATE_HOME", want, 1);
  TH_OK(kljit_wisdom_path(KLJIT_WISDOM_USER, buf, sizeof buf));
  th_path_in(want, dir, "state/kljit/wisdom");
  TH_CHECK(strcmp(buf, want) == 0);
  return TH_PASS;
}

static int state_in(const char *dir) {
  TH_CHECK(in_child(write_old_file, dir) == TH_PASS);
  TH_CHECK(in_child(read_defaults, dir) == TH_PASS);
  return TH_PASS;
}
static int default_user_wisdom_is_under_xdg_state_home_and_the_old_file_is_read(void) {
  return th_in_tmpdir("cli-wisdom-state", state_in);
}

/* The loss-family options reach the plan: a softcapped, CE-mixed problem with a padded teacher,
 * the reverse KL and the online teacher (with its bias) each plan other row kernels than the
 * plain problem, JSD with beta = 0 (the forward KL) plans the plain problem's, and a value out
 * of range is a usage error (exit 2). */
static int precompile_takes_the_loss_family_options(void) {
  char dir[] = "/tmp/kljit-cli-fam-XXXXXX";
  TH_CHECK(mkdtemp(dir) != NULL);
  const int plain = precompile_into(dir, "--dry-run");
  char plain_out[256];
  const char *const plain_rows = strstr(out, "dense_rows-");
  snprintf(plain_out, sizeof plain_out, "%s", plain_rows ? plain_rows : "");
  const int fam = precompile_into(dir, "--dry-run --softcap 30 --hard-weight 0.5 --soft-weight "
                                       "0.5 --teacher-ld 1024");
  const char *const rows = strstr(out, "dense_rows-");
  const int differs = rows && strncmp(rows, plain_out, 23) != 0;
  const int rev = precompile_into(dir, "--dry-run --divergence reverse");
  const char *const rev_rows = strstr(out, "dense_rows-");
  const int rev_differs = rev_rows && strncmp(rev_rows, plain_out, 23) != 0;
  const int jsd0 = precompile_into(dir, "--dry-run --divergence jsd --beta 0");
  const char *const jsd0_rows = strstr(out, "dense_rows-");
  const int jsd0_same = jsd0_rows && strncmp(jsd0_rows, plain_out, 23) == 0;
  const int beta = precompile_into(dir, "--dry-run --divergence jsd --beta 1.5");
  /* the online teacher: its logits are the chunk's (TCHUNK), other row kernels again */
  const int on = precompile_into(dir, "--dry-run --teacher-hidden 2048 --teacher-bias");
  const char *const on_rows = strstr(out, "dense_rows-");
  const int on_differs = on_rows && strncmp(on_rows, plain_out, 23) != 0;
  const int on_bad = precompile_into(dir, "--dry-run --teacher-hidden 0");
  rmdir(dir);
  TH_CHECK(on == 0 && on_differs && on_bad == 2);
  TH_CHECK(plain == 0 && fam == 0 && differs);
  TH_CHECK(rev == 0 && rev_differs && jsd0 == 0 && jsd0_same);
  TH_CHECK(beta == 2);
  TH_CHECK(cli("precompile --help") == 0 && strstr(out, "--teacher-softcap"));
  return TH_PASS;
}

static const th_case cases[] = {
    {"precompile_takes_the_loss_family_options", precompile_takes_the_loss_family_options},
    {"every_command_has_help_that_exits_0", every_command_has_help_that_exits_0},
    {"unknown_commands_and_options_exit_2", unknown_commands_and_options_exit_2},
    {"precompile_writes_a_manifest_whose_checksums_match_the_files",
     precompile_writes_a_manifest_whose_checksums_match_the_files},
    {"precompile_jobs_compile_each_module_once_and_count_it_once",
     precompile_jobs_compile_each_module_once_and_count_it_once},
    {"precompile_jobs_2_gives_the_same_entries_as_jobs_1",
     precompile_jobs_2_gives_the_same_entries_as_jobs_1},
    {"precompile_dry_run_writes_nothing", precompile_dry_run_writes_nothing},
    {"cache_verify_finds_a_flipped_byte_and_exits_4",
     cache_verify_finds_a_flipped_byte_and_exits_4},
    {"cache_clear_removes_entries_and_leaves_foreign_files",
     cache_clear_removes_entries_and_leaves_foreign_files},
    {"cache_stats_and_ls_count_the_entries", cache_stats_and_ls_count_the_entries},
    {"info_runs_without_a_gpu_and_says_so", info_runs_without_a_gpu_and_says_so},
    {"info_names_every_bad_kljit_variable", info_names_every_bad_kljit_variable},
    {"precompile_v2_from_threads_matches_a_serial_run",
     precompile_v2_from_threads_matches_a_serial_run},
    {"precompile_that_cannot_store_an_entry_exits_1_naming_it",
     precompile_that_cannot_store_an_entry_exits_1_naming_it},
    {"precompile_into_a_full_or_read_only_filesystem_exits_1",
     precompile_into_a_full_or_read_only_filesystem_exits_1},
    {"tooling_functions_check_their_arguments_and_permissions",
     tooling_functions_check_their_arguments_and_permissions},
    {"precompile_takes_several_shapes_dense_and_sparse_into_one_manifest",
     precompile_takes_several_shapes_dense_and_sparse_into_one_manifest},
    {"every_refused_value_is_a_usage_error_exit_2_with_the_real_range",
     every_refused_value_is_a_usage_error_exit_2_with_the_real_range},
    {"double_dash_ends_options_and_sm_90a_is_accepted",
     double_dash_ends_options_and_sm_90a_is_accepted},
    {"demo_without_gpu_names_its_cache_and_falls_back_without_one",
     demo_without_gpu_names_its_cache_and_falls_back_without_one},
    {"info_lists_every_environment_knob_of_the_readme",
     info_lists_every_environment_knob_of_the_readme},
    {"default_user_wisdom_is_under_xdg_state_home_and_the_old_file_is_read",
     default_user_wisdom_is_under_xdg_state_home_and_the_old_file_is_read},
};
TH_MAIN(cases)

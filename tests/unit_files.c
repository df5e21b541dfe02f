/* SPDX-License-Identifier: Apache-2.0 */
/* unit_files.c — the files kljit publishes and reads, against what a hostile or unlucky file
 * system holds: a FIFO, a device, a symbolic link or a directory where a file is to be written,
 * a manifest that never ends, files that vanish or appear while a command works, long lines.
 * Each case is the regression test of a finding of a fault, fuzz and misuse run (issue 30). The
 * library is called directly where it publishes, the built CLI (KLJIT_CLI) where it does. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "cli_run.h"
#include "harness.h"
#include "kljit_experimental.h"
#include "nvrtc_compile.h"

static int is_kind(const char *path, mode_t kind) {
  struct stat st;
  return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == kind;
}

static int exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

static const char WISDOM_LINE[] =
    "kljit-wisdom 1 kljit=" KLJIT_VERSION_STRING "\n"
    "gpu=\"NVIDIA H200\" arch=sm_90 sms=132 kljit=" KLJIT_VERSION_STRING " V=32000 H=64 in=bf16 "
    "teacher=probs tdt=bf16 tmode=const flags=- bucket=8192 -> chunk_rows=1024 threads=128 "
    "split=4 cluster=0 nv=1 rigor=measure rows=8192 ms=1\n";

/* ---- publishing over what is not a regular file (finding 1) ------------------------------ */

/* Exporting wisdom renamed its file over whatever was at the path: as root, exporting to
 * /dev/null replaced the machine's /dev/null with a regular file (KLJIT_SUCCESS), and a FIFO or
 * a symbolic link went the same way, a "<path>.lock" left beside each. Now anything but a
 * regular file is refused before the lock is taken; the lock of a real export stays, on
 * purpose (kljit.h: removing it would race with a writer that has just opened it). */
static int export_in(const char *dir) {
  th_private_wisdom(dir);
  TH_OK(kljit_wisdom_import_string(WISDOM_LINE));
  char path[PATH_MAX], lock[PATH_MAX], target[PATH_MAX];
  th_path_in(path, dir, "out.wisdom");
  th_path_in(lock, dir, "out.wisdom.lock");
  th_path_in(target, dir, "target");
  TH_CHECK(write_file(dir, "target", "keep me\n") == 0);
  static const struct {
    const char *what;
    mode_t kind;
  } nodes[] = {{"FIFO", S_IFIFO}, {"symbolic link", S_IFLNK}, {"character device", S_IFCHR},
               {"directory", S_IFDIR}};
  for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
    int made = 0;
    switch (nodes[i].kind) {
      case S_IFIFO: made = mkfifo(path, 0600) == 0; break;
      case S_IFLNK: made = symlink(target, path) == 0; break;
      case S_IFCHR: made = mknod(path, S_IFCHR | 0600, makedev(1, 3)) == 0; break; /* root */
      case S_IFDIR: made = mkdir(path, 0700) == 0; break;
    }
    if (!made) {
      fprintf(stderr, "cannot make a %s here (%s): that part skipped\n", nodes[i].what,
              strerror(errno));
      continue;
    }
    TH_STATUS(kljit_wisdom_export_file(path), KLJIT_ERR_WISDOM);
    TH_CHECK(strstr(kljit_last_error(), nodes[i].what) && strstr(kljit_last_error(), path));
    TH_CHECK(is_kind(path, nodes[i].kind)); /* untouched */
    TH_CHECK(!exists(lock));
    TH_CHECK(nodes[i].kind == S_IFDIR ? rmdir(path) == 0 : unlink(path) == 0);
  }
  FILE *const t = fopen(target, "r");
  char line[64] = "";
  TH_CHECK(t && fgets(line, sizeof line, t) && !strcmp(line, "keep me\n"));
  fclose(t);
  /* a regular file (or none) is written, and its lock file stays */
  TH_OK(kljit_wisdom_export_file(path));
  TH_CHECK(is_kind(path, S_IFREG) && is_kind(lock, S_IFREG));
  TH_OK(kljit_wisdom_export_file(path));
  return TH_PASS;
}
static int wisdom_export_refuses_to_replace_a_fifo_a_device_or_a_symlink(void) {
  return th_in_tmpdir("files-export", export_in);
}

/* The same rule for the other files the library publishes: a cache entry and the sources and
 * logs of KLJIT_DUMP_DIR (whose fopen blocked on a FIFO). */
static int library_in(const char *dir) {
  char name[80], path[PATH_MAX];
  cache_file_name("a key text", name);
  th_path_in(path, dir, name);
  TH_CHECK(mkfifo(path, 0600) == 0);
  TH_STATUS(cache_store_in(dir, "a key text", "", "payload", 7), KLJIT_ERR_CACHE);
  TH_CHECK(strstr(kljit_last_error(), "FIFO") && is_kind(path, S_IFIFO));
  TH_CHECK(unlink(path) == 0 && symlink("/dev/null", path) == 0);
  TH_STATUS(cache_store_in(dir, "a key text", "", "payload", 7), KLJIT_ERR_CACHE);
  TH_CHECK(is_kind(path, S_IFLNK));
  TH_CHECK(unlink(path) == 0);
  TH_OK(cache_store_in(dir, "a key text", "", "payload", 7));
  TH_CHECK(is_kind(path, S_IFREG));
  /* a dump whose file is a FIFO is skipped (a debugging aid never fails a compile) */
  char dumps[PATH_MAX], cu[PATH_MAX];
  th_path_in(dumps, dir, "dumps");
  TH_CHECK(mkdir(dumps, 0700) == 0);
  th_path_in(cu, dumps, "tiny.cu");
  TH_CHECK(mkfifo(cu, 0600) == 0);
  setenv("KLJIT_DUMP_DIR", dumps, 1);
  alarm(120); /* the old fopen blocked here for good */
  strbuf cubin = {0};
  const kljit_status st =
      nvrtc_compile("extern \"C\" __global__ void tiny() {}\n", "tiny", 80, &cubin, NULL);
  alarm(0);
  unsetenv("KLJIT_DUMP_DIR");
  sb_free(&cubin);
  TH_OK(st);
  TH_CHECK(is_kind(cu, S_IFIFO));
  char log[PATH_MAX];
  th_path_in(log, dumps, "tiny.log");
  TH_CHECK(is_kind(log, S_IFREG)); /* the other dump was written */
  return TH_PASS;
}
static int cache_entries_and_dumps_never_replace_what_is_not_a_regular_file(void) {
  return th_in_tmpdir("files-library", library_in);
}

/* The CLI's manifest: a FIFO or a symbolic link at DIR/manifest.txt is refused (exit 1, named)
 * and left as it was. */
static int manifest_node_in(const char *dir) {
  char path[PATH_MAX], target[PATH_MAX];
  th_path_in(path, dir, "manifest.txt");
  th_path_in(target, dir, "elsewhere");
  TH_CHECK(write_file(dir, "elsewhere", "mine\n") == 0);
  TH_CHECK(mkfifo(path, 0600) == 0);
  TH_CHECK(cli_within(300, "precompile --arch sm_80 " SMALL " --cache-dir '%s'", dir) == 1);
  TH_CHECK(strstr(out, "manifest.txt") && strstr(out, "FIFO"));
  TH_CHECK(is_kind(path, S_IFIFO));
  TH_CHECK(unlink(path) == 0 && symlink(target, path) == 0);
  TH_CHECK(cli_within(300, "precompile --arch sm_80 " SMALL " --cache-dir '%s'", dir) == 1);
  TH_CHECK(strstr(out, "symbolic link") && is_kind(path, S_IFLNK));
  TH_CHECK(unlink(path) == 0);
  TH_CHECK(cli_within(300, "precompile --arch sm_80 " SMALL " --cache-dir '%s'", dir) == 0);
  TH_CHECK(is_kind(path, S_IFREG));
  return TH_PASS;
}
static int precompile_never_replaces_a_manifest_that_is_not_a_regular_file(void) {
  return th_in_tmpdir("files-manifest", manifest_node_in);
}

/* ---- reading manifests (finding 7) ------------------------------------------------------- */

/* `cache verify` and `cache clear` opened DIR/manifest.txt with fopen: a FIFO hung both, and
 * verify read a symbolic link to /dev/zero without end. The manifest is now opened without
 * blocking, checked to be a regular file and read up to a bound. */
static int verify_in(const char *dir) {
  char path[PATH_MAX];
  th_path_in(path, dir, "manifest.txt");
  TH_CHECK(mkfifo(path, 0600) == 0);
  TH_CHECK(cli_within(20, "cache verify --cache-dir '%s'", dir) == 4);
  TH_CHECK(strstr(out, "manifest.txt") && strstr(out, "not a regular file"));
  TH_CHECK(cli_within(20, "cache clear --cache-dir '%s'", dir) == 0);
  TH_CHECK(is_kind(path, S_IFIFO)); /* not precompile's manifest: not removed */
  TH_CHECK(unlink(path) == 0 && symlink("/dev/zero", path) == 0);
  TH_CHECK(cli_within(20, "cache verify --cache-dir '%s'", dir) == 4);
  TH_CHECK(strstr(out, "not a regular file"));
  TH_CHECK(cli_within(20, "cache clear --cache-dir '%s'", dir) == 0 && is_kind(path, S_IFLNK));
  /* a regular manifest of 1 GiB (sparse: no disk used) is over the bound, not read */
  TH_CHECK(unlink(path) == 0);
  const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  TH_CHECK(fd >= 0 && ftruncate(fd, (off_t)1 << 30) == 0 && close(fd) == 0);
  TH_CHECK(cli_within(20, "cache verify --cache-dir '%s'", dir) == 4);
  TH_CHECK(strstr(out, "larger than"));
  return TH_PASS;
}
static int cache_verify_and_clear_never_hang_on_a_fifo_or_endless_manifest(void) {
  return th_in_tmpdir("files-verify", verify_in);
}

/* ---- concurrent writers (findings 8 and 9) ----------------------------------------------- */

/* Concurrent precompiles into one directory each listed it and renamed their manifest over the
 * others': the last rename could come from a run that listed before another's entries existed
 * (255 of 256 entries listed, every run exiting 0). Listing and renaming now happen under an
 * fcntl lock on DIR/manifest.txt.lock (docs/cache-format.md). Here the test holds that lock, as
 * a concurrent precompile would while it lists, stores an entry meanwhile, and lets go: the
 * waiting precompile's manifest must list it. Without the lock the precompile (its modules
 * cached, a fraction of a second) published before the entry existed. */
static int concurrent_in(const char *dir) {
  TH_CHECK(cli("precompile --arch sm_80 " SMALL " --cache-dir '%s'", dir) == 0);
  char lock[PATH_MAX], log[PATH_MAX];
  th_path_in(lock, dir, "manifest.txt.lock");
  th_path_in(log, dir, "precompile.log");
  const int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  TH_CHECK(fd >= 0);
  struct flock fl;
  memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK, fl.l_whence = SEEK_SET;
  TH_CHECK(fcntl(fd, F_SETLKW, &fl) == 0);
  const pid_t kid = fork();
  TH_CHECK(kid >= 0);
  if (kid == 0) {
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd,
             "'%s' precompile --arch sm_80 " SMALL " --cache-dir '%s' > '%s' 2>&1",
             getenv("KLJIT_CLI"), dir, log);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  sleep(3); /* ten times what the cached run takes */
  TH_OK(cache_store_in(dir, "an entry stored while the manifest was being written", "", "x", 1));
  close(fd); /* releases the lock */
  int status = 0;
  TH_CHECK(waitpid(kid, &status, 0) == kid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char name[80], path[PATH_MAX];
  cache_file_name("an entry stored while the manifest was being written", name);
  th_path_in(path, dir, "manifest.txt");
  FILE *const m = fopen(path, "r");
  TH_CHECK(m != NULL);
  char line[512];
  int listed = 0, lines = 0;
  while (fgets(line, sizeof line, m))
    if (line[0] != '#') lines++, listed += strncmp(line, name, 68) == 0;
  fclose(m);
  TH_CHECK(listed == 1 && lines == 4); /* the plan's 3 modules and that entry */
  /* verify names entries a manifest does not list (without failing: a plan may add them) */
  TH_CHECK(write_file(dir, "manifest.txt", "# kljit cache manifest 1\n") == 0);
  TH_CHECK(cli("cache verify --cache-dir '%s'", dir) == 0);
  TH_CHECK(strstr(out, "4 valid entries not listed in manifest.txt"));
  return TH_PASS;
}
static int concurrent_precompiles_leave_a_manifest_of_every_entry(void) {
  return th_in_tmpdir("files-concurrent", concurrent_in);
}

static int vanish_others(const kljit_cache_entry_info *e, void *user) {
  int *const seen = user;
  if ((*seen)++ == 0) { /* the first removal: the other two go behind the listing's back */
    for (int i = 0; i < 3; i++) {
      char key[32], name[80], path[PATH_MAX];
      snprintf(key, sizeof key, "key %d", i);
      cache_file_name(key, name);
      if (strcmp(name, e->file) == 0) continue;
      th_path_in(path, e->dir, name);
      unlink(path);
    }
  }
  return 0;
}

/* `cache clear` (kljit_cache_clear) stopped with exit 1 at the first file that a concurrent
 * clear had removed between its listing and its unlink: a file already gone is not an error. */
static int vanish_in(const char *dir) {
  for (int i = 0; i < 3; i++) {
    char key[32];
    snprintf(key, sizeof key, "key %d", i);
    TH_OK(cache_store_in(dir, key, "", "payload", 7));
  }
  int seen = 0;
  TH_OK(kljit_cache_clear(dir, vanish_others, &seen));
  TH_CHECK(seen == 1 && count_kjc(dir) == 0);
  return TH_PASS;
}
static int cache_clear_goes_on_when_a_file_vanishes_meanwhile(void) {
  return th_in_tmpdir("files-vanish", vanish_in);
}

/* ---- --file and the job table (findings 10 and 6) ---------------------------------------- */

/* --file read lines in 1023-byte pieces: the tail of a long comment became a shape of its own
 * (and was compiled). Lines are read whole now; one past the bound is a usage error. */
static int long_lines_in(const char *dir) {
  char path[PATH_MAX];
  th_path_in(path, dir, "shapes.txt");
  FILE *f = fopen(path, "w");
  TH_CHECK(f != NULL);
  fprintf(f, SMALL "\n# a long comment ");
  for (int i = 0; i < 1006; i++) fputc('-', f);
  fprintf(f, " V=3000,H=64\n");
  TH_CHECK(fclose(f) == 0);
  TH_CHECK(cli("precompile --dry-run --arch sm_80 --file '%s' --cache-dir '%s/c'", path, dir) ==
           0);
  TH_CHECK(strstr(out, "sm_80: 3 module(s) to compile"));
  f = fopen(path, "w");
  TH_CHECK(f != NULL);
  fprintf(f, SMALL " # ");
  for (int i = 0; i < 70000; i++) fputc('x', f);
  fprintf(f, "\n");
  TH_CHECK(fclose(f) == 0);
  TH_CHECK(cli("precompile --dry-run --arch sm_80 --file '%s' --cache-dir '%s/c'", path, dir) ==
           2);
  TH_CHECK(strstr(out, "shapes.txt:1") && strstr(out, "longer than"));
  return TH_PASS;
}
static int shape_file_lines_are_read_whole(void) {
  return th_in_tmpdir("files-lines", long_lines_in);
}

/* 255 shapes, the old options' problem and a wisdom file on 16 architectures are 4112 jobs; the
 * job table held 4096 (UBSan: index out of bounds) before anything checked the architectures. */
static int many_jobs_in(const char *dir) {
  char shapes[PATH_MAX], wisdom[PATH_MAX];
  th_path_in(shapes, dir, "shapes.txt");
  th_path_in(wisdom, dir, "site.wisdom");
  FILE *const f = fopen(shapes, "w");
  TH_CHECK(f != NULL);
  for (int i = 0; i < 255; i++) fprintf(f, "V=%d,H=64\n", 1000 + i);
  TH_CHECK(fclose(f) == 0);
  TH_CHECK(write_file(dir, "site.wisdom", WISDOM_LINE) == 0);
  char archs[256] = "sm_80";
  for (int a = 81; a < 96; a++) snprintf(archs + strlen(archs), 16, ",sm_%d", a);
  const int rc = cli("precompile --dry-run --arch %s --file '%s' --wisdom '%s' --vocab 1000 "
                     "--hidden 64 --cache-dir '%s/c'",
                     archs, shapes, wisdom, dir);
  TH_CHECK(rc == 2 && strstr(out, "arch = 81"));
  return TH_PASS;
}
static int precompile_takes_255_shapes_and_16_archs_without_overflow(void) {
  return th_in_tmpdir("files-jobs", many_jobs_in);
}

static const th_case cases[] = {
    {"wisdom_export_refuses_to_replace_a_fifo_a_device_or_a_symlink",
     wisdom_export_refuses_to_replace_a_fifo_a_device_or_a_symlink},
    {"cache_entries_and_dumps_never_replace_what_is_not_a_regular_file",
     cache_entries_and_dumps_never_replace_what_is_not_a_regular_file},
    {"precompile_never_replaces_a_manifest_that_is_not_a_regular_file",
     precompile_never_replaces_a_manifest_that_is_not_a_regular_file},
    {"cache_verify_and_clear_never_hang_on_a_fifo_or_endless_manifest",
     cache_verify_and_clear_never_hang_on_a_fifo_or_endless_manifest},
    {"concurrent_precompiles_leave_a_manifest_of_every_entry",
     concurrent_precompiles_leave_a_manifest_of_every_entry},
    {"cache_clear_goes_on_when_a_file_vanishes_meanwhile",
     cache_clear_goes_on_when_a_file_vanishes_meanwhile},
    {"shape_file_lines_are_read_whole", shape_file_lines_are_read_whole},
    {"precompile_takes_255_shapes_and_16_archs_without_overflow",
     precompile_takes_255_shapes_and_16_archs_without_overflow},
};
TH_MAIN(cases)

/* SPDX-License-Identifier: Apache-2.0 */
/* unit_jit.c — the compile pipeline of one module (src/jit.c): spec → render → key → cache
 * lookup → NVRTC on a miss → cache store, against real templates and real NVRTC. Needs no GPU.
 * Every case that touches the file system runs in its own mkdtemp directory and passes an
 * explicit cache_config, so the user's cache and the environment's KLJIT_CACHE_* never matter;
 * the directory is removed afterwards whatever the outcome. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "jit.h"
#include "nvrtc_compile.h"
#include "recipe.h"

/* ---- helpers ---------------------------------------------------------------------------- */


/* A writable cache in `rw` alone (rw NULL: disabled). */
static cache_config cache_in(char *rw) {
  cache_config c = {NULL, 0, rw, rw == NULL, 0};
  return c;
}

/* Counts the entries of `dir`: published ones (*.kjc), temp files (.*.tmp), anything else. */
typedef struct dir_count {
  int kjc, tmp, other;
} dir_count;
static dir_count count_dir(const char *dir) {
  dir_count c = {0, 0, 0};
  DIR *const d = opendir(dir);
  if (!d) return c;
  for (struct dirent *e; (e = readdir(d));) {
    const size_t n = strlen(e->d_name);
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (n > 4 && strcmp(e->d_name + n - 4, ".kjc") == 0) c.kjc++;
    else if (n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) c.tmp++;
    else c.other++;
  }
  closedir(d);
  return c;
}

static int read_whole(const char *path, strbuf *out) {
  FILE *const f = fopen(path, "rb");
  if (!f) return 0;
  char buf[65536];
  size_t n;
  int ok = 1;
  while (ok && (n = fread(buf, 1, sizeof buf, f)) > 0) ok = sb_append(out, buf, n) == 0;
  fclose(f);
  return ok;
}

static int is_cubin(const strbuf *b) {
  return b->len > 4 && memcmp(b->data, "\177ELF", 4) == 0;
}

static const char *result_name(cache_result r) {
  return r == CACHE_MISS ? "CACHE_MISS" : r == CACHE_HIT ? "CACHE_HIT" : "CACHE_HIT_READONLY";
}

#define TH_RESULT(bin, want)                                                               \
  do {                                                                                     \
    if ((bin).source != (want)) {                                                          \
      fprintf(stderr, "%s:%d: %s came from %s, want %s\n", __FILE__, __LINE__, (bin).name, \
              result_name((bin).source), result_name(want));                               \
      return TH_FAIL;                                                                      \
    }                                                                                      \
  } while (0)

/* The two modules of a small problem as a heuristic plan for sm_<arch> gets them with the
 * default options (the two-pass dense rows, which any arch compiles). `variant` picks one of a
 * few distinct problems. */
static int specs_for_arch(int variant, int arch, kspec *rows, kspec *helpers) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 64;
  pb.vocab = 32000;
  pb.teacher = variant & 1 ? KLJIT_TEACHER_DENSE_LOGITS : KLJIT_TEACHER_DENSE_PROBS;
  pb.reduction = variant & 2 ? KLJIT_REDUCTION_MEAN : KLJIT_REDUCTION_BATCHMEAN;
  const kljit_context_options o = KLJIT_CONTEXT_OPTIONS_INIT;
  recipe r;
  TH_OK(prob_validate(&pb, "unit_jit"));
  TH_OK(recipe_make(&pb, NULL, &o, arch, 0, &r));
  if (rows) *rows = r.geom.rows;
  if (helpers) *helpers = r.geom.helpers;
  return TH_PASS;
}

static int specs_for(int variant, kspec *rows, kspec *helpers) {
  return specs_for_arch(variant, 80, rows, helpers);
}

/* The cache file jit_build uses for spec `k` on sm_<arch>, in `dir`. */
static int entry_path(const kspec *k, int arch, const char *dir, char out[PATH_MAX]) {
  strbuf src = {0}, key = {0};
  TH_OK(kspec_render(k, &src));
  TH_OK(jit_key_text(src.data, arch, &key));
  char name[80];
  cache_file_name(key.data, name);
  th_path_in(out, dir, name);
  sb_free(&src);
  sb_free(&key);
  return TH_PASS;
}

/* ---- cases ------------------------------------------------------------------------------ */

static int second_build_is_a_cache_hit_in(const char *dir) {
  kspec h;
  if (specs_for(0, NULL, &h) != TH_PASS) return TH_FAIL;
  char rw[PATH_MAX];
  th_path_in(rw, dir, "cache"); /* not there yet: the store creates it */
  const cache_config cfg = cache_in(rw);
  jit_bin a, b;
  TH_OK(jit_build(&h, 80, &cfg, &a));
  printf("first:  %s, render %.2f ms, compile %.1f ms, store %.2f ms\n", result_name(a.source),
         a.render_ms, a.compile_ms, a.cache_ms);
  TH_RESULT(a, CACHE_MISS);
  TH_CHECK(a.compile_ms > 0 && is_cubin(&a.cubin));
  TH_OK(jit_build(&h, 80, &cfg, &b));
  printf("second: %s, render %.2f ms, lookup %.2f ms\n", result_name(b.source), b.render_ms,
         b.cache_ms);
  TH_RESULT(b, CACHE_HIT);
  TH_CHECK(b.compile_ms == 0);
  TH_CHECK(b.cubin.len == a.cubin.len && memcmp(a.cubin.data, b.cubin.data, a.cubin.len) == 0);
  TH_CHECK(strcmp(a.key_hash, b.key_hash) == 0 && strcmp(a.name, b.name) == 0);
  TH_CHECK(count_dir(rw).kjc == 1);
  jit_bin_free(&a);
  jit_bin_free(&b);
  return TH_PASS;
}
static int second_build_is_a_cache_hit(void) {
  return th_in_tmpdir("unit-jit", second_build_is_a_cache_hit_in);
}

/* The value of the key line "<field> <value>" (the first one), or NULL. */
static const char *key_field(const char *key, const char *field, char *out, size_t cap) {
  const size_t n = strlen(field);
  for (const char *line = key; *line;) {
    const char *const nl = strchr(line, '\n');
    const size_t len = nl ? (size_t)(nl - line) : strlen(line);
    if (len > n && strncmp(line, field, n) == 0 && line[n] == ' ') {
      snprintf(out, cap, "%.*s", (int)(len - n - 1), line + n + 1);
      return out;
    }
    if (!nl) break;
    line = nl + 1;
  }
  return NULL;
}

/* Checks that `key` names this kljit, this NVRTC, `source`, sm_<arch> and its options. */
static int key_names_everything(const char *key, const char *source, int arch) {
  char v[512], want[512];
  TH_CHECK(key_field(key, "kljit", v, sizeof v) && strcmp(v, KLJIT_VERSION_STRING) == 0);
  TH_CHECK(strcmp(v, kljit_version()) == 0);
  /* nvrtc_version_string() is the whole line, "nvrtc <major>.<minor>" */
  const char *const nv = nvrtc_version_string();
  TH_CHECK(key_field(key, "nvrtc", v, sizeof v));
  TH_CHECK(strncmp(nv, "nvrtc ", 6) == 0 && strcmp(v, nv + 6) == 0);
  TH_CHECK(key_field(key, "arch", v, sizeof v));
  snprintf(want, sizeof want, "sm_%d", arch);
  TH_CHECK(strcmp(v, want) == 0);
  char storage[NVRTC_MAX_OPTIONS][64];
  const char *opts[NVRTC_MAX_OPTIONS];
  const int n = nvrtc_options(arch, storage, opts);
  want[0] = '\0';
  for (int i = 0; i < n; i++)
    snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", i ? " " : "", opts[i]);
  TH_CHECK(key_field(key, "options", v, sizeof v) && strcmp(v, want) == 0);
  snprintf(want, sizeof want, "--gpu-architecture=sm_%d", arch);
  TH_CHECK(strstr(v, want) != NULL);
  char hex[65];
  sha256_hex(source, strlen(source), hex);
  TH_CHECK(strstr(key, hex) != NULL); /* the source enters by its digest */
  return TH_PASS;
}

static int key_changes_with_arch_options_and_source(void) {
  kspec h0, h1;
  if (specs_for(0, NULL, &h0) != TH_PASS || specs_for(2, NULL, &h1) != TH_PASS) return TH_FAIL;
  strbuf s0 = {0}, s1 = {0}, k80 = {0}, k90 = {0}, k80b = {0}, k1 = {0};
  TH_OK(kspec_render(&h0, &s0));
  TH_OK(kspec_render(&h1, &s1));
  TH_CHECK(strcmp(s0.data, s1.data) != 0); /* a different reduction: a different source */
  TH_OK(jit_key_text(s0.data, 80, &k80));
  TH_OK(jit_key_text(s0.data, 90, &k90));
  TH_OK(jit_key_text(s0.data, 80, &k80b));
  TH_OK(jit_key_text(s1.data, 80, &k1));
  printf("key text (sm_80):\n%s", k80.data);
  TH_CHECK(strcmp(k80.data, k80b.data) == 0); /* a function of its inputs alone */
  TH_CHECK(strcmp(k80.data, k90.data) != 0);
  TH_CHECK(strcmp(k80.data, k1.data) != 0);
  if (key_names_everything(k80.data, s0.data, 80) != TH_PASS ||
      key_names_everything(k90.data, s0.data, 90) != TH_PASS ||
      key_names_everything(k1.data, s1.data, 80) != TH_PASS)
    return TH_FAIL;
  char o80[512], o90[512];
  TH_CHECK(key_field(k80.data, "options", o80, sizeof o80));
  TH_CHECK(key_field(k90.data, "options", o90, sizeof o90));
  TH_CHECK(strcmp(o80, o90) != 0);
  char n80[80], n90[80], n1[80];
  cache_file_name(k80.data, n80);
  cache_file_name(k90.data, n90);
  cache_file_name(k1.data, n1);
  TH_CHECK(strcmp(n80, n90) != 0 && strcmp(n80, n1) != 0 && strcmp(n90, n1) != 0);
  sb_free(&s0), sb_free(&s1), sb_free(&k80), sb_free(&k90), sb_free(&k80b), sb_free(&k1);
  return TH_PASS;
}

static int corrupt_entry_is_recompiled_and_rewritten_in(const char *dir) {
  kspec h;
  if (specs_for(0, NULL, &h) != TH_PASS) return TH_FAIL;
  char rw[PATH_MAX], path[PATH_MAX];
  snprintf(rw, sizeof rw, "%s", dir);
  const cache_config cfg = cache_in(rw);
  jit_bin a, b;
  TH_OK(jit_build(&h, 80, &cfg, &a));
  TH_RESULT(a, CACHE_MISS);
  if (entry_path(&h, 80, dir, path) != TH_PASS) return TH_FAIL;
  cache_entry e = {0};
  TH_OK(cache_read_file(path, &e));
  cache_entry_free(&e);
  /* flip one bit in the middle of the file (inside the cubin) */
  const int fd = open(path, O_RDWR);
  TH_CHECK(fd >= 0);
  struct stat st;
  TH_CHECK(fstat(fd, &st) == 0 && st.st_size > 2);
  const off_t at = st.st_size / 2;
  unsigned char byte;
  TH_CHECK(pread(fd, &byte, 1, at) == 1);
  byte ^= 0x10;
  TH_CHECK(pwrite(fd, &byte, 1, at) == 1);
  close(fd);
  TH_CHECK(cache_read_file(path, &e) != KLJIT_SUCCESS); /* the damage is visible */
  cache_entry_free(&e);
  TH_OK(jit_build(&h, 80, &cfg, &b));
  printf("after a flipped bit: %s, compile %.1f ms\n", result_name(b.source), b.compile_ms);
  TH_RESULT(b, CACHE_MISS);
  TH_CHECK(b.compile_ms > 0 && is_cubin(&b.cubin));
  TH_OK(cache_read_file(path, &e));
  TH_CHECK(e.payload_len == b.cubin.len && memcmp(e.payload, b.cubin.data, e.payload_len) == 0);
  cache_entry_free(&e);
  const dir_count c = count_dir(dir);
  TH_CHECK(c.kjc == 1 && c.tmp == 0 && c.other == 0);
  jit_bin_free(&a);
  jit_bin_free(&b);
  return TH_PASS;
}
static int corrupt_entry_is_recompiled_and_rewritten(void) {
  return th_in_tmpdir("unit-jit", corrupt_entry_is_recompiled_and_rewritten_in);
}

static int readonly_cache_path_serves_and_is_never_written_in(const char *dir) {
  kspec h;
  if (specs_for(0, NULL, &h) != TH_PASS) return TH_FAIL;
  char a_dir[PATH_MAX], b_dir[PATH_MAX], path[PATH_MAX];
  th_path_in(a_dir, dir, "system");
  th_path_in(b_dir, dir, "user");
  TH_CHECK(mkdir(b_dir, 0700) == 0);
  /* precompile into A, as a system-wide cache would be filled */
  const cache_config fill = cache_in(a_dir);
  jit_bin a, b;
  TH_OK(jit_build(&h, 80, &fill, &a));
  TH_RESULT(a, CACHE_MISS);
  if (entry_path(&h, 80, a_dir, path) != TH_PASS) return TH_FAIL;
  struct stat before, after;
  TH_CHECK(stat(path, &before) == 0);
  /* then serve from A read-only, with an empty writable B */
  char *ro[] = {a_dir};
  const cache_config use = {ro, 1, b_dir, 0, 0};
  TH_OK(jit_build(&h, 80, &use, &b));
  printf("with the entry in a read-only directory: %s, lookup %.2f ms\n", result_name(b.source),
         b.cache_ms);
  TH_RESULT(b, CACHE_HIT_READONLY);
  TH_CHECK(b.cubin.len == a.cubin.len && memcmp(a.cubin.data, b.cubin.data, a.cubin.len) == 0);
  const dir_count cb = count_dir(b_dir), ca = count_dir(a_dir);
  TH_CHECK(cb.kjc == 0 && cb.tmp == 0 && cb.other == 0);
  TH_CHECK(ca.kjc == 1 && ca.tmp == 0 && ca.other == 0);
  TH_CHECK(stat(path, &after) == 0 && after.st_ino == before.st_ino &&
           after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
           after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
  /* a spec A lacks is compiled and stored in B, never in A */
  kspec h2;
  if (specs_for(2, NULL, &h2) != TH_PASS) return TH_FAIL;
  jit_bin c;
  TH_OK(jit_build(&h2, 80, &use, &c));
  TH_RESULT(c, CACHE_MISS);
  TH_CHECK(count_dir(a_dir).kjc == 1 && count_dir(b_dir).kjc == 1);
  jit_bin_free(&a), jit_bin_free(&b), jit_bin_free(&c);
  return TH_PASS;
}
static int readonly_cache_path_serves_and_is_never_written(void) {
  return th_in_tmpdir("unit-jit", readonly_cache_path_serves_and_is_never_written_in);
}

static int disabled_cache_compiles_in_memory_in(const char *dir) {
  kspec h;
  if (specs_for(0, NULL, &h) != TH_PASS) return TH_FAIL;
  char rw[PATH_MAX];
  snprintf(rw, sizeof rw, "%s", dir);
  /* a directory is named but the cache is off: it must stay untouched */
  const cache_config cfg = {NULL, 0, rw, 1, 0};
  for (int i = 0; i < 2; i++) {
    jit_bin b;
    TH_OK(jit_build(&h, 80, &cfg, &b));
    TH_RESULT(b, CACHE_MISS);
    TH_CHECK(b.compile_ms > 0 && is_cubin(&b.cubin));
    jit_bin_free(&b);
  }
  const dir_count c = count_dir(dir);
  TH_CHECK(c.kjc == 0 && c.tmp == 0 && c.other == 0);
  return TH_PASS;
}
static int disabled_cache_compiles_in_memory(void) {
  return th_in_tmpdir("unit-jit", disabled_cache_compiles_in_memory_in);
}

enum { CHILDREN = 16, DISTINCT = 4 };

/* Build i of the race: 4 distinct (spec, arch) pairs, each built by 4 processes. */
static int race_spec(int i, kspec *k, int *arch) {
  kspec rows, h0, h2;
  if (specs_for(0, &rows, &h0) != TH_PASS || specs_for(2, NULL, &h2) != TH_PASS) return TH_FAIL;
  const kspec *const pick[DISTINCT] = {&h0, &h0, &h2, &rows};
  static const int archs[DISTINCT] = {80, 90, 80, 80};
  *k = *pick[i % DISTINCT];
  *arch = archs[i % DISTINCT];
  return TH_PASS;
}

static int sixteen_processes_build_same_and_different_specs_into_one_cache_in(const char *dir) {
  char rw[PATH_MAX];
  th_path_in(rw, dir, "cache");
  int gate[2];
  TH_CHECK(pipe(gate) == 0);
  fflush(NULL);
  pid_t pids[CHILDREN];
  for (int i = 0; i < CHILDREN; i++) {
    pids[i] = fork();
    TH_CHECK(pids[i] >= 0);
    if (pids[i] == 0) {
      close(gate[1]);
      char c;
      while (read(gate[0], &c, 1) < 0 && errno == EINTR) {} /* EOF: all started, go */
      kspec k;
      int arch;
      const cache_config cfg = cache_in(rw);
      jit_bin b;
      int code = race_spec(i, &k, &arch) == TH_PASS ? 0 : 2;
      kljit_status st = code ? KLJIT_SUCCESS : jit_build(&k, arch, &cfg, &b);
      if (!code && st != KLJIT_SUCCESS) {
        fprintf(stderr, "child %d: jit_build -> %s: %s\n", i, kljit_status_string(st),
                kljit_last_error());
        code = 1;
      } else if (!code) {
        code = is_cubin(&b.cubin) ? 0 : 3;
        jit_bin_free(&b);
      }
      fflush(NULL);
      _exit(code);
    }
  }
  close(gate[0]);
  close(gate[1]); /* releases every child at once */
  int failed = 0;
  for (int i = 0; i < CHILDREN; i++) {
    int ws = 0;
    while (waitpid(pids[i], &ws, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
      fprintf(stderr, "child %d failed (wait status 0x%x)\n", i, ws);
      failed++;
    }
  }
  TH_CHECK(failed == 0);
  const dir_count c = count_dir(rw);
  printf("after %d racing builds: %d entries, %d temp files, %d other files\n", CHILDREN, c.kjc,
         c.tmp, c.other);
  TH_CHECK(c.kjc == DISTINCT && c.tmp == 0 && c.other == 0);
  /* every entry validates, and each spec now comes from the cache with the stored bytes */
  const cache_config cfg = cache_in(rw);
  for (int i = 0; i < DISTINCT; i++) {
    kspec k;
    int arch;
    char path[PATH_MAX];
    if (race_spec(i, &k, &arch) != TH_PASS || entry_path(&k, arch, rw, path) != TH_PASS)
      return TH_FAIL;
    cache_entry e = {0};
    TH_OK(cache_read_file(path, &e));
    jit_bin b;
    TH_OK(jit_build(&k, arch, &cfg, &b));
    TH_RESULT(b, CACHE_HIT);
    TH_CHECK(e.payload_len == b.cubin.len && memcmp(e.payload, b.cubin.data, e.payload_len) == 0);
    cache_entry_free(&e);
    jit_bin_free(&b);
  }
  return TH_PASS;
}
static int sixteen_processes_build_same_and_different_specs_into_one_cache(void) {
  return th_in_tmpdir("unit-jit",
                      sixteen_processes_build_same_and_different_specs_into_one_cache_in);
}

static int dump_dir_receives_source_and_log_in(const char *dir) {
  kspec h;
  if (specs_for(0, NULL, &h) != TH_PASS) return TH_FAIL;
  char dump[PATH_MAX], cu[PATH_MAX], lg[PATH_MAX];
  th_path_in(dump, dir, "dump"); /* not there yet: the dump creates it */
  const char *const old = getenv("KLJIT_DUMP_DIR");
  char saved[PATH_MAX] = "";
  if (old) snprintf(saved, sizeof saved, "%s", old);
  setenv("KLJIT_DUMP_DIR", dump, 1);
  const cache_config off = cache_in(NULL);
  jit_bin b;
  const kljit_status st = jit_build(&h, 80, &off, &b);
  if (old) setenv("KLJIT_DUMP_DIR", saved, 1);
  else unsetenv("KLJIT_DUMP_DIR");
  TH_OK(st);
  char name[80];
  snprintf(name, sizeof name, "%s.cu", b.name);
  th_path_in(cu, dump, name);
  snprintf(name, sizeof name, "%s.log", b.name);
  th_path_in(lg, dump, name);
  strbuf src = {0}, got = {0};
  TH_OK(kspec_render(&h, &src));
  TH_CHECK(read_whole(cu, &got));
  TH_CHECK(got.len == src.len && memcmp(got.data, src.data, src.len) == 0);
  struct stat ls;
  TH_CHECK(stat(lg, &ls) == 0 && S_ISREG(ls.st_mode));
  printf("dumped %s.cu (%zu bytes) and %s.log (%lld bytes)\n", b.name, got.len, b.name,
         (long long)ls.st_size);
  sb_free(&src), sb_free(&got);
  jit_bin_free(&b);
  return TH_PASS;
}
static int dump_dir_receives_source_and_log(void) {
  return th_in_tmpdir("unit-jit", dump_dir_receives_source_and_log_in);
}

static int nvrtc_error_is_reported_with_log(void) {
  static const char BROKEN[] =
      "extern \"C\" __global__ void kl_broken(float* out) {\n"
      "  out[threadIdx.x] = kl_no_such_function(threadIdx.x);\n"
      "}\n";
  strbuf cubin = {0};
  const kljit_status st = nvrtc_compile(BROKEN, "kl_broken", 80, &cubin, NULL);
  const char *const msg = kljit_last_error();
  printf("%s: %s\n", kljit_status_string(st), msg);
  TH_CHECK(st == KLJIT_ERR_COMPILE);
  TH_CHECK(strstr(msg, "error") != NULL);
  TH_CHECK(strstr(msg, "kl_no_such_function") != NULL); /* the log itself, not just a status */
  TH_CHECK(strstr(msg, "sm_80") != NULL);
  TH_CHECK(cubin.len == 0);
  sb_free(&cubin);
  return TH_PASS;
}

static int cold_compile_and_warm_lookup_times_in(const char *dir) {
  kspec rows, h, rows90;
  if (specs_for(1, &rows, &h) != TH_PASS || specs_for_arch(1, 90, &rows90, NULL) != TH_PASS)
    return TH_FAIL;
  char rw[PATH_MAX];
  snprintf(rw, sizeof rw, "%s", dir);
  const cache_config cfg = cache_in(rw);
  /* each module for each arch a plan may build it for (the cluster variant: sm_90 only) */
  const struct {
    int arch;
    const kspec *k;
    const char *what;
  } mods[] = {{80, &rows, "dense_rows two-pass"}, {80, &h, "helpers"},
              {90, &rows, "dense_rows two-pass"}, {90, &rows90, "dense_rows as planned"},
              {90, &h, "helpers"}};
  double cold_all = 0, warm_all = 0;
  for (size_t m = 0; m < sizeof mods / sizeof mods[0]; m++) {
    if (m == 3 && !rows90.cluster) continue; /* the same module as the one before */
    jit_bin b;
    double t0 = util_now();
    TH_OK(jit_build(mods[m].k, mods[m].arch, &cfg, &b));
    const double cold = 1e3 * (util_now() - t0);
    TH_RESULT(b, CACHE_MISS);
    const double compile = b.compile_ms;
    jit_bin_free(&b);
    /* warm: the whole jit_build (render, key, lookup, validation), best of 5 */
    double warm = 1e30, lookup = 0;
    for (int rep = 0; rep < 5; rep++) {
      t0 = util_now();
      TH_OK(jit_build(mods[m].k, mods[m].arch, &cfg, &b));
      const double ms = 1e3 * (util_now() - t0);
      TH_RESULT(b, CACHE_HIT);
      if (ms < warm) warm = ms, lookup = b.cache_ms;
      jit_bin_free(&b);
    }
    printf("sm_%d %-22s cold %7.1f ms (NVRTC %7.1f)   warm %6.2f ms (lookup %5.2f)  %5.0fx\n",
           mods[m].arch, m == 3 ? "dense_rows cluster" : mods[m].what, cold, compile, warm,
           lookup, cold / warm);
    if (th_perf_limits()) TH_CHECK(warm * 10 <= cold);
    cold_all += cold, warm_all += warm;
  }
  printf("all modules: cold %.1f ms, warm %.2f ms\n", cold_all, warm_all);
  if (th_perf_limits()) TH_CHECK(warm_all * 10 <= cold_all);
  return TH_PASS;
}
static int cold_compile_and_warm_lookup_times(void) {
  return th_in_tmpdir("unit-jit", cold_compile_and_warm_lookup_times_in);
}

static const th_case cases[] = {
    {"second_build_is_a_cache_hit", second_build_is_a_cache_hit},
    {"key_changes_with_arch_options_and_source", key_changes_with_arch_options_and_source},
    {"corrupt_entry_is_recompiled_and_rewritten", corrupt_entry_is_recompiled_and_rewritten},
    {"readonly_cache_path_serves_and_is_never_written",
     readonly_cache_path_serves_and_is_never_written},
    {"disabled_cache_compiles_in_memory", disabled_cache_compiles_in_memory},
    {"sixteen_processes_build_same_and_different_specs_into_one_cache",
     sixteen_processes_build_same_and_different_specs_into_one_cache},
    {"dump_dir_receives_source_and_log", dump_dir_receives_source_and_log},
    {"nvrtc_error_is_reported_with_log", nvrtc_error_is_reported_with_log},
    {"cold_compile_and_warm_lookup_times", cold_compile_and_warm_lookup_times},
};

TH_MAIN(cases)

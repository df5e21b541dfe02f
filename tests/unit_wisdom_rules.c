/* SPDX-License-Identifier: Apache-2.0 */
/* unit_wisdom_rules.c — the wisdom text as a contract: it round-trips (parse -> format -> parse
 * is a fixed point), the parser accepts exactly the tunings the templates render, a 60 000-entry
 * file imports in under a second (the perf registration asserts it), merging sets is merging
 * their entries one by one, and concurrent writers of one file lose no entry. No GPU.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "kljit.h"
#include "recipe.h"
#include "spec.h"
#include "wisdom.h"
#include "wisdom_gen.h"

/* The options of a context that no environment steers. */
static const kljit_context_options OPT = KLJIT_CONTEXT_OPTIONS_INIT;

static const char H[] = "kljit-wisdom 1 kljit=" KLJIT_VERSION_STRING "\n";

/* Parses the header plus one line; KLJIT_SUCCESS or the parser's status. */
static kljit_status parse_line(const char *line, wisdom_set *out) {
  static char text[8192];
  snprintf(text, sizeof text, "%s%s\n", H, line);
  return wisdom_parse(text, "<gen>", out, NULL);
}

static char *format_set(const wisdom_set *s) {
  strbuf b = {0};
  if (wisdom_format(s, &b) != KLJIT_SUCCESS) {
    sb_free(&b);
    return NULL;
  }
  return b.data;
}

/* A dense entry line: H=64 bf16 probs, 1024-row chunks of 128 threads, measured at 8192. */
static void dense_entry(char *line, size_t cap, const char *gpu, const char *arch_sms, int v,
                        const char *split_cluster, const char *ms) {
  snprintf(line, cap,
           "gpu=%s %s kljit=%s V=%d H=64 in=bf16 teacher=probs tdt=bf16 tmode=const flags=- "
           "bucket=8192 -> chunk_rows=1024 threads=128 %s nv=1 rigor=measure rows=8192 ms=%s",
           gpu, arch_sms, KLJIT_VERSION_STRING, v, split_cluster, ms);
}

/* ---- round trip --------------------------------------------------------------------------- */

/* format(parse(t)) = u must parse, and format(parse(u)) must be u byte for byte. */
static int fixed_point(const char *text) {
  wisdom_set a, b;
  TH_OK(wisdom_parse(text, "<text>", &a, NULL));
  char *u = format_set(&a);
  TH_CHECK(u != NULL);
  if (wisdom_parse(u, "<formatted>", &b, NULL) != KLJIT_SUCCESS) {
    printf("formatted text does not parse back: %s\n%s", kljit_last_error(), u);
    return TH_FAIL;
  }
  char *v = format_set(&b);
  TH_CHECK(v != NULL);
  if (strcmp(u, v) != 0) {
    printf("not a fixed point:\n%s---\n%s", u, v);
    return TH_FAIL;
  }
  TH_CHECK(a.n == b.n);
  for (size_t i = 0; i < a.n; i++) /* the very values, not only their text */
    TH_CHECK(!strcmp(a.e[i].gpu, b.e[i].gpu) && a.e[i].ms == b.e[i].ms);
  free(u), free(v);
  wisdom_set_free(&a), wisdom_set_free(&b);
  return TH_PASS;
}

static int wisdom_text_round_trips_as_a_fixed_point(void) {
  /* the fuzzer's find: an unquoted quote was accepted, then exported as gpu="A"B" */
  char line[2048];
  wisdom_set s;
  dense_entry(line, sizeof line, "A\"B", "arch=sm_90 sms=132", 32000, "split=4 cluster=0", "1");
  TH_STATUS(parse_line(line, &s), KLJIT_ERR_WISDOM);
  TH_CHECK(strstr(kljit_last_error(), "unquoted value"));
  /* quoted, with escapes: kept exactly, and written back escaped */
  dense_entry(line, sizeof line, "\"A\\\"B \\\\ C\"", "arch=sm_90 sms=132", 32000,
              "split=4 cluster=0", "0.000123456789");
  TH_OK(parse_line(line, &s));
  TH_CHECK(s.n == 1 && !strcmp(s.e[0].gpu, "A\"B \\ C"));
  char *u = format_set(&s);
  TH_CHECK(u && strstr(u, "gpu=\"A\\\"B \\\\ C\"") && strstr(u, "ms=0.000123456789"));
  free(u);
  wisdom_set_free(&s);

  /* the property, over generated lines: each alone, then all accepted ones as one text */
  uint64_t seed = 14;
  strbuf all = {0};
  TH_OK(sb_append(&all, H, strlen(H)));
  int accepted = 0, refused = 0;
  for (int i = 0; i < 4000; i++) {
    wg_entry(&seed, 0, line, sizeof line);
    if (parse_line(line, &s) != KLJIT_SUCCESS) {
      refused++;
      continue;
    }
    wisdom_set_free(&s);
    accepted++;
    char one[8192];
    snprintf(one, sizeof one, "%s%s\n", H, line);
    if (fixed_point(one) != TH_PASS) {
      printf("line: %s\n", line);
      return TH_FAIL;
    }
    TH_OK(sb_printf(&all, "%s\n", line));
  }
  printf("%d generated lines accepted, %d refused\n", accepted, refused);
  TH_CHECK(accepted > 300 && refused > 300); /* the generator reaches both sides */
  const int r = fixed_point(all.data);
  sb_free(&all);
  return r;
}

/* ---- one rule set ------------------------------------------------------------------------- */

/* Every entry the parser accepts renders: both modules of its tuned plan, on its arch. */
static int every_entry_the_parser_accepts_renders(void) {
  uint64_t seed = 1414;
  char line[2048];
  int accepted = 0, by_template = 0;
  for (int i = 0; i < 3000; i++) {
    wg_entry(&seed, 0, line, sizeof line);
    wisdom_set s;
    if (parse_line(line, &s) != KLJIT_SUCCESS) {
      by_template += strstr(kljit_last_error(), "templates/") != NULL;
      continue;
    }
    accepted++;
    kljit_problem pb;
    TH_OK(wisdom_entry_problem(&s.e[0], &pb));
    recipe r;
    TH_OK(recipe_make(&pb, &s.e[0].tune, &OPT, s.e[0].arch, s.e[0].sms, &r));
    const kspec *specs[RECIPE_MAX_MODULES];
    const int count = recipe_modules(&r, specs);
    for (int k = 0; k < count; k++) {
      strbuf src = {0};
      if (kspec_render(specs[k], &src) != KLJIT_SUCCESS) {
        printf("accepted but does not render: %s\n  %s\n", line, kljit_last_error());
        return TH_FAIL;
      }
      sb_free(&src);
    }
    wisdom_set_free(&s);
  }
  printf("%d accepted entries rendered; %d refused by a template's own rule\n", accepted,
         by_template);
  TH_CHECK(accepted > 200 && by_template > 0);
  /* the two template rules, refused at parse time with the template's sentence */
  dense_entry(line, sizeof line, "\"G\"", "arch=sm_80 sms=108", 17, "split=64 cluster=0", "1");
  wisdom_set s;
  TH_STATUS(parse_line(line, &s), KLJIT_ERR_WISDOM);
  TH_CHECK(strstr(kljit_last_error(), "SPLIT too large for V"));
  dense_entry(line, sizeof line, "\"G\"", "arch=sm_90 sms=132", 128256, "split=2 cluster=2", "1");
  TH_STATUS(parse_line(line, &s), KLJIT_ERR_WISDOM);
  TH_CHECK(strstr(kljit_last_error(), "does not fit in the cluster's registers"));
  return TH_PASS;
}

/* The templates' checks run in a kept sandbox with a CPU budget. Its setup once counted the
 * thread's CPU time from zero: a thread that had computed for a second before its first check
 * (a long-running process) could then validate nothing, and every wisdom text was refused as
 * "not enough memory". CTest runs this case in a fresh process, so the check below is the
 * thread's first. */
static int a_thread_that_computed_for_a_second_still_imports_wisdom(void) {
  struct timespec t;
  volatile double sink = 0;
  do {
    for (int i = 0; i < 100000; i++) sink += i;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  } while ((double)t.tv_sec + 1e-9 * (double)t.tv_nsec < 1.1);
  char line[2048];
  dense_entry(line, sizeof line, "\"G\"", "arch=sm_90 sms=132", 32000, "split=4 cluster=0", "1");
  wisdom_set s;
  if (parse_line(line, &s) != KLJIT_SUCCESS) {
    printf("after %.1f s of CPU (%.0f): %s\n", (double)t.tv_sec + 1e-9 * (double)t.tv_nsec,
           sink, kljit_last_error());
    return TH_FAIL;
  }
  TH_CHECK(s.n == 1);
  wisdom_set_free(&s);
  return TH_PASS;
}

/* ---- merging ------------------------------------------------------------------------------ */

/* An entry of a small identity space (2 GPUs x 3 problems x 4 buckets) with a tuning that tells
 * entries apart and rigors and times that tie often. */
static wisdom_entry tie_entry(uint64_t *seed, int serial) {
  wisdom_entry e;
  memset(&e, 0, sizeof e);
  snprintf(e.gpu, sizeof e.gpu, "%s", wg_below(seed, 2) ? "NVIDIA H200" : "NVIDIA H100");
  e.arch = 90, e.sms = 132;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.vocab = 32000 + 8 * wg_below(seed, 3), pb.hidden = 64;
  wisdom_problem_key(&pb, e.problem);
  wisdom_problem_extra(&pb, e.extra);
  e.bucket = (int64_t)1 << (10 + wg_below(seed, 4));
  e.tune = prob_estimate(&pb, 90, &OPT);
  e.tune.chunk_rows = 1 + serial; /* which entry won shows in the text */
  e.rigor = wg_below(seed, 2) ? KLJIT_PLAN_MEASURE : KLJIT_PLAN_EXHAUSTIVE;
  e.rows = 8192, e.ms = 1 + wg_below(seed, 2);
  return e;
}

/* Merging a set into another is merging its entries one by one, the receiving set's entries
 * winning ties, whichever set is larger and whether or not the merge may take the other's
 * storage (the import does: wisdom_merge_set_take). */
static int merging_sets_is_merging_their_entries_one_by_one(void) {
  uint64_t seed = 1414;
  const size_t sizes[][2] = {{0, 5}, {5, 0}, {3, 40}, {40, 3}, {24, 24}, {1, 200}, {200, 1}};
  for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
    wisdom_set into = {0}, from = {0}, seq = {0}, copy = {0}, took = {0}, taken = {0};
    wisdom_set took_raw = {0}, raw = {0}; /* raw: from as parsed, repeats and all */
    int serial = 0;
    for (size_t i = 0; i < sizes[c][0]; i++) { /* the receiving set: one entry per identity */
      const wisdom_entry e = tie_entry(&seed, serial++);
      TH_OK(wisdom_merge(&into, &e));
    }
    for (size_t i = 0; i < sizes[c][1]; i++) { /* the other one may repeat identities */
      const wisdom_entry e = tie_entry(&seed, serial++);
      wisdom_entry *grown = realloc(from.e, (from.n + 1) * sizeof *grown);
      TH_CHECK(grown != NULL);
      from.e = grown, from.e[from.n++] = e, from.cap = from.n;
    }
    for (size_t i = 0; i < into.n; i++) TH_OK(wisdom_merge(&seq, &into.e[i]));
    for (size_t i = 0; i < from.n; i++) TH_OK(wisdom_merge(&seq, &from.e[i]));
    TH_OK(wisdom_merge_set(&copy, &into));
    TH_OK(wisdom_merge_set(&copy, &from));
    TH_OK(wisdom_merge_set(&took, &into));
    TH_OK(wisdom_merge_set(&taken, &from));
    TH_OK(wisdom_merge_set_take(&took, &taken));
    TH_CHECK(taken.n == 0 && taken.e == NULL);
    TH_OK(wisdom_merge_set(&took_raw, &into));
    if (from.n) {
      raw.e = malloc(from.n * sizeof *raw.e);
      TH_CHECK(raw.e != NULL);
      memcpy(raw.e, from.e, from.n * sizeof *raw.e);
      raw.n = raw.cap = from.n;
    }
    TH_OK(wisdom_merge_set_take(&took_raw, &raw));
    char *want = format_set(&seq), *a = format_set(&copy), *b = format_set(&took);
    char *d = format_set(&took_raw);
    TH_CHECK(want && a && b && d);
    if (strcmp(want, a) != 0 || strcmp(want, b) != 0 || strcmp(want, d) != 0) {
      printf("sizes %zu, %zu: one by one\n%s---\nmerge_set\n%s---\nmerge_set_take\n%s---\n"
             "merge_set_take of the entries as they came\n%s",
             sizes[c][0], sizes[c][1], want, a, b, d);
      return TH_FAIL;
    }
    free(want), free(a), free(b), free(d);
    wisdom_set_free(&into), wisdom_set_free(&from), wisdom_set_free(&seq);
    wisdom_set_free(&copy), wisdom_set_free(&took), wisdom_set_free(&took_raw);
  }
  return TH_PASS;
}

/* ---- scale -------------------------------------------------------------------------------- */

/* User + system CPU seconds of this process (getrusage): CPU time, not wall time, as the machine
 * running the suite may be shared. */
static double cpu_seconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/* CPU seconds of importing n generated entries (from `seed`) into the process's store, first
 * pointed at a private directory dir/<name>; *identities: the entries the store then holds. */
static int import_n(const char *dir, const char *name, int n, uint64_t seed, double *cpu,
                    int *identities) {
  char sub[PATH_MAX];
  snprintf(sub, sizeof sub, "%s/%s", dir, name);
  TH_CHECK(mkdir(sub, 0700) == 0);
  th_private_wisdom(sub);
  strbuf text = {0};
  TH_OK(sb_append(&text, H, strlen(H)));
  char line[2048];
  for (int i = 0; i < n; i++) {
    wg_entry(&seed, 1, line, sizeof line);
    TH_OK(sb_printf(&text, "%s\n", line));
  }
  const double t0 = cpu_seconds();
  TH_OK(kljit_wisdom_import_string(text.data));
  *cpu = cpu_seconds() - t0;
  char *out = NULL;
  TH_OK(kljit_wisdom_export_string(&out));
  *identities = 0;
  for (const char *p = out; (p = strstr(p, "\ngpu=")); p++) ++*identities;
  printf("%s: %d entries (%.1f MiB) imported in %.3f s CPU; the store holds %d\n", name, n,
         (double)text.len / (1 << 20), *cpu, *identities);
  kljit_free(out);
  sb_free(&text);
  return TH_PASS;
}

/* What one trial measured, from the child that ran it. */
typedef struct import_trial {
  double small, large;
  int ids_small, ids_large, ok;
} import_trial;

/* One trial in a child process, as a process that imports a wisdom file finds itself: a store,
 * a templates' memo and a heap that no earlier trial warmed (the second of three imports in one
 * process took 0.76 s where the first took 0.93). The parent has imported nothing. */
static int import_trial_in_child(const char *dir, int t, import_trial *out) {
  int fd[2];
  TH_CHECK(pipe(fd) == 0);
  fflush(stdout);
  const pid_t pid = fork();
  TH_CHECK(pid >= 0);
  if (pid == 0) {
    close(fd[0]);
    import_trial r = {0};
    char small[32], large[32];
    snprintf(small, sizeof small, "small-%d", t);
    snprintf(large, sizeof large, "large-%d", t);
    r.ok = import_n(dir, small, 6000, 6000, &r.small, &r.ids_small) == TH_PASS &&
           import_n(dir, large, 60000, 60000, &r.large, &r.ids_large) == TH_PASS;
    fflush(stdout);
    const int wrote = write(fd[1], &r, sizeof r) == (ssize_t)sizeof r;
    _exit(wrote && r.ok ? 0 : 1);
  }
  close(fd[1]);
  const int got = read(fd[0], out, sizeof *out) == (ssize_t)sizeof *out;
  close(fd[0]);
  int status = 0;
  TH_CHECK(waitpid(pid, &status, 0) == pid);
  TH_CHECK(got && WIFEXITED(status) && WEXITSTATUS(status) == 0 && out->ok);
  return TH_PASS;
}

/* Issue 14's bar: 60 000 entries (12.8 MiB, each checked by the templates) imported in under
 * 1 s of CPU, the import alone, into a store that holds 6000. Asserted in the perf
 * registration (run alone; the suite's other tests would share the 2 cores), printed in the
 * unit one. Asserted in both: the import scales as n log n (the first one was quadratic, 82 s
 * for 60 000), 10x the entries in at most 20x the time. Three trials, each in a process of its
 * own, judged by their median, as every benchmark of the project is: a single import on a
 * shared 2-core CI machine once took 1.10 s where the same build took 0.82-0.91 s on another.
 * The two texts come from different seeds, so the large one's specs are not already known to
 * the templates' memo (spec_memo.c): every one of its ~54 000 distinct specs runs the
 * templates' checks. */
enum { TRIALS = 3 };
static int import_in(const char *dir) {
  double small[TRIALS], large[TRIALS];
  for (int t = 0; t < TRIALS; t++) {
    import_trial r;
    TH_CHECK(import_trial_in_child(dir, t, &r) == TH_PASS);
    TH_CHECK(r.ids_small == 6000);
    TH_CHECK(r.ids_large > r.ids_small + 50000); /* few identities repeat: the merge ran at scale */
    small[t] = r.small, large[t] = r.large;
  }
  qsort(small, TRIALS, sizeof small[0], th_cmp_double);
  qsort(large, TRIALS, sizeof large[0], th_cmp_double);
  const double s = small[TRIALS / 2], l = large[TRIALS / 2];
  printf("medians of %d trials: 60000 vs 6000 entries: %.1fx the CPU time (n log n: about "
         "12.6x); the 1 s bar: %.3f s (trials %.3f, %.3f, %.3f), %s\n",
         TRIALS, l / s, l, large[0], large[1], large[2], l < 1.0 ? "met" : "NOT met");
  TH_CHECK(l < 20.0 * s);
  if (th_perf_limits()) TH_CHECK(l < 1.0);
  return TH_PASS;
}
static int import_of_sixty_thousand_entries_scales_as_n_log_n_and_takes_under_a_second(void) {
  return th_in_tmpdir("wisdom-60k", import_in);
}

/* ---- concurrent writers ------------------------------------------------------------------- */

static int writers_in(const char *dir) {
  th_private_wisdom(dir);
  char user[PATH_MAX];
  th_path_in(user, dir, "user-wisdom");
  for (int round = 0; round < 5; round++) {
    unlink(user);
    int go[2];
    TH_CHECK(pipe(go) == 0);
    pid_t kids[16];
    for (int w = 0; w < 16; w++) {
      if ((kids[w] = fork()) == 0) {
        close(go[1]);
        char c;
        if (read(go[0], &c, 1) < 0) _exit(2); /* all start together, at the close below */
        wisdom_entry e;
        memset(&e, 0, sizeof e);
        snprintf(e.gpu, sizeof e.gpu, "writer %d", w);
        e.arch = 90, e.sms = 132, e.bucket = 8192, e.rigor = KLJIT_PLAN_MEASURE;
        e.rows = 8192, e.ms = 1;
        kljit_problem pb = KLJIT_PROBLEM_INIT;
        pb.vocab = 32000, pb.hidden = 64;
        wisdom_problem_key(&pb, e.problem);
        wisdom_problem_extra(&pb, e.extra);
        e.tune = prob_estimate(&pb, 90, &OPT);
        _exit(wisdom_add(&e) == KLJIT_SUCCESS ? 0 : 1);
      }
      TH_CHECK(kids[w] > 0);
    }
    close(go[0]);
    close(go[1]);
    for (int w = 0; w < 16; w++) {
      int status = 0;
      TH_CHECK(waitpid(kids[w], &status, 0) == kids[w]);
      TH_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    wisdom_set s;
    TH_OK(wisdom_read_file(user, &s, NULL));
    printf("round %d: %zu of 16 entries kept\n", round + 1, s.n);
    TH_CHECK(s.n == 16);
    wisdom_set_free(&s);
  }
  return TH_PASS;
}
static int sixteen_concurrent_writers_keep_every_entry(void) {
  return th_in_tmpdir("wisdom-writers", writers_in);
}

static const th_case cases[] = {
    {"wisdom_text_round_trips_as_a_fixed_point", wisdom_text_round_trips_as_a_fixed_point},
    {"every_entry_the_parser_accepts_renders", every_entry_the_parser_accepts_renders},
    {"import_of_sixty_thousand_entries_scales_as_n_log_n_and_takes_under_a_second",
     import_of_sixty_thousand_entries_scales_as_n_log_n_and_takes_under_a_second},
    {"sixteen_concurrent_writers_keep_every_entry", sixteen_concurrent_writers_keep_every_entry},
    {"merging_sets_is_merging_their_entries_one_by_one",
     merging_sets_is_merging_their_entries_one_by_one},
    {"a_thread_that_computed_for_a_second_still_imports_wisdom",
     a_thread_that_computed_for_a_second_still_imports_wisdom},
};
TH_MAIN(cases)

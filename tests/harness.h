/* SPDX-License-Identifier: Apache-2.0 */
/* harness.h — the in-house test harness: one executable per area, one CTest test per case.
 *
 * A test executable lists its cases in a table `cases[]` and ends with TH_MAIN(cases); CTest
 * runs `exe case_name` for each case (kljit_test_cases in tests/CMakeLists.txt registers them
 * from that table). A case returns TH_PASS, TH_FAIL or TH_SKIP (77, CTest's skip code: GPU
 * cases return it without a device).
 */
#ifndef KLJIT_TEST_HARNESS_H
#define KLJIT_TEST_HARNESS_H

#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TH_PASS = 0, TH_FAIL = 1, TH_SKIP = 77 };

typedef int (*th_fn)(void);
typedef struct th_case {
  const char *name;
  th_fn fn;
} th_case;

#define TH_CHECK(cond)                                                            \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);    \
      return TH_FAIL;                                                             \
    }                                                                             \
  } while (0)

/* Checks a kljit call's status and prints the last error on failure. */
#define TH_OK(call)                                                                \
  do {                                                                             \
    kljit_status th_st_ = (call);                                                  \
    if (th_st_ != KLJIT_SUCCESS) {                                                 \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,          \
              kljit_status_string(th_st_), kljit_last_error());                    \
      return TH_FAIL;                                                              \
    }                                                                              \
  } while (0)

/* Expects a specific status. */
#define TH_STATUS(call, want)                                                      \
  do {                                                                             \
    kljit_status th_st_ = (call);                                                  \
    if (th_st_ != (want)) {                                                        \
      fprintf(stderr, "%s:%d: %s -> %s (want %s): %s\n", __FILE__, __LINE__, #call, \
              kljit_status_string(th_st_), kljit_status_string(want),              \
              kljit_last_error());                                                 \
      return TH_FAIL;                                                              \
    }                                                                              \
  } while (0)

/* |got - want| <= atol + rtol * |want|, printing both on failure. */
#define TH_NEAR(got, want, atol, rtol)                                                 \
  do {                                                                                 \
    double th_g_ = (double)(got), th_w_ = (double)(want);                              \
    if (!(fabs(th_g_ - th_w_) <= (atol) + (rtol)*fabs(th_w_))) {                       \
      fprintf(stderr, "%s:%d: %s = %.17g, want %s = %.17g (atol %g, rtol %g)\n",       \
              __FILE__, __LINE__, #got, th_g_, #want, th_w_, (double)(atol),           \
              (double)(rtol));                                                         \
      return TH_FAIL;                                                                  \
    }                                                                                  \
  } while (0)

/* A case that runs inside a directory of its own. */
typedef int (*th_dir_case)(const char *dir);

static inline int th_rm_entry(const char *path, const struct stat *st, int flag,
                              struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* qsort's comparator for doubles, ascending (the medians of timed repeats). */
static inline int th_cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Whether wall-clock limits apply: only in the `perf` registration of a case (CTest label perf,
 * run alone: KLJIT_TEST_PERF=1), never in `unit`, where a loaded machine must not fail it. */
static inline int th_perf_limits(void) {
  const char *const e = getenv("KLJIT_TEST_PERF");
  return e && strcmp(e, "1") == 0;
}

/* Runs fn in a fresh private directory $TMPDIR/kljit-<tag>-XXXXXX (default /tmp) and removes
 * it afterwards, pass or fail. */
static inline int th_in_tmpdir(const char *tag, th_dir_case fn) {
  const char *const base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/kljit-%s-XXXXXX", base, tag);
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return TH_FAIL;
  }
  const int r = fn(dir);
  if (nftw(dir, th_rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) perror("cleanup");
  return r;
}

static inline void th_path_in(char out[PATH_MAX], const char *dir, const char *name) {
  if (snprintf(out, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX) fprintf(stderr, "path too long\n");
}

/* Private wisdom files for this process in dir (system-wisdom, user-wisdom): set before any
 * wisdom call, so tests neither read nor write the user's. */
static inline void th_private_wisdom(const char *dir) {
  char sys[PATH_MAX], user[PATH_MAX];
  th_path_in(sys, dir, "system-wisdom");
  th_path_in(user, dir, "user-wisdom");
  setenv("KLJIT_SYSTEM_WISDOM", sys, 1);
  setenv("KLJIT_WISDOM", user, 1);
}

static inline int th_main(int argc, char **argv, const th_case *cases, size_t n) {
  if (argc < 2) {
    int worst = TH_PASS;
    for (size_t i = 0; i < n; i++) {
      int r = cases[i].fn();
      printf("%-60s %s\n", cases[i].name, r == TH_PASS ? "ok" : r == TH_SKIP ? "skip" : "FAIL");
      if (r == TH_FAIL) worst = TH_FAIL;
    }
    return worst;
  }
  for (size_t i = 0; i < n; i++)
    if (strcmp(argv[1], cases[i].name) == 0) return cases[i].fn();
  fprintf(stderr, "no test case named '%s'\n", argv[1]);
  return TH_FAIL;
}

#define TH_MAIN(table)                                                  \
  int main(int argc, char **argv) {                                     \
    return th_main(argc, argv, table, sizeof table / sizeof table[0]); \
  }

#endif

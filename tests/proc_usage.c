/* SPDX-License-Identifier: Apache-2.0 */
/* proc_usage.c — runs a command and fails if it exceeds a memory or time bar.
 *
 *   proc_usage --max-rss-mb M [--max-ms T --runs R] -- COMMAND [ARGS...]
 *
 * Runs COMMAND R times (default 1); each must exit 0. The maximum resident set size is the
 * child's own (wait4's rusage, not this process's); the time is the fastest of the R runs' wall
 * clocks, so one run slowed by a busy machine does not fail the bar. Prints both. Exit 0 when
 * within the bars, 1 otherwise. Used for `kljit version` (issue 18: it used to load cuBLASLt,
 * 0.6 s and 240 MB, for printing a string). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  double max_rss_mb = -1, max_ms = -1;
  int runs = 1, i = 1;
  for (; i < argc && strcmp(argv[i], "--"); i++) {
    if (!strcmp(argv[i], "--max-rss-mb") && i + 1 < argc)
      max_rss_mb = atof(argv[++i]);
    else if (!strcmp(argv[i], "--max-ms") && i + 1 < argc)
      max_ms = atof(argv[++i]);
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
      runs = atoi(argv[++i]);
    else
      break;
  }
  if (i + 1 >= argc || strcmp(argv[i], "--") || runs < 1) {
    fprintf(stderr,
            "usage: proc_usage [--max-rss-mb M] [--max-ms T] [--runs R] -- COMMAND [ARGS...]\n");
    return 2;
  }
  char **const cmd = argv + i + 1;
  double best_ms = 1e300, rss_mb = 0;
  for (int r = 0; r < runs; r++) {
    const double t0 = now_ms();
    const pid_t pid = fork();
    if (pid < 0) return perror("fork"), 1;
    if (pid == 0) {
      if (!freopen("/dev/null", "w", stdout)) _exit(126);
      execvp(cmd[0], cmd);
      perror(cmd[0]);
      _exit(127);
    }
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) return perror("wait4"), 1;
    const double ms = now_ms() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "%s exited with status %d\n", cmd[0],
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      return 1;
    }
    best_ms = ms < best_ms ? ms : best_ms;
    const double mb = ru.ru_maxrss / 1024.0; /* ru_maxrss is in KiB on Linux */
    rss_mb = mb > rss_mb ? mb : rss_mb;
  }
  printf("%s: max RSS %.1f MB (bar %g), fastest of %d runs %.1f ms (bar %g)\n", cmd[0], rss_mb,
         max_rss_mb, runs, best_ms, max_ms);
  int ok = 1;
  if (max_rss_mb >= 0 && rss_mb > max_rss_mb) {
    fprintf(stderr, "FAIL: max RSS %.1f MB is over %g MB\n", rss_mb, max_rss_mb);
    ok = 0;
  }
  if (max_ms >= 0 && best_ms > max_ms) {
    fprintf(stderr, "FAIL: %.1f ms is over %g ms\n", best_ms, max_ms);
    ok = 0;
  }
  return ok ? 0 : 1;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_spawn.c — a child process with its output captured and a side channel on fd 3. */
#include "matrix_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

typedef struct grow {
  char *p;
  size_t n, cap;
} grow;

static int grow_add(grow *g, const char *s, size_t n) {
  if (g->n + n + 1 > g->cap) {
    size_t cap = g->cap ? g->cap : 4096;
    while (cap < g->n + n + 1) cap *= 2;
    char *p = realloc(g->p, cap);
    if (!p) return 1;
    g->p = p, g->cap = cap;
  }
  memcpy(g->p + g->n, s, n);
  g->n += n;
  g->p[g->n] = 0;
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A pipe whose ends are close-on-exec and numbered above the descriptors the child gets, so
 * that dup2 onto 1, 2 and 3 never meets one of them. */
static int high_pipe(int fds[2]) {
  int p[2];
  if (pipe(p)) return 1;
  for (int i = 0; i < 2; i++) {
    fds[i] = fcntl(p[i], F_DUPFD_CLOEXEC, 10);
    close(p[i]);
    if (fds[i] < 0) return 1;
  }
  return 0;
}

/* Copies the complete lines of out[from..] to echo, and remembers the last non-empty one. */
static size_t echo_lines(mx_child *c, const grow *out, size_t from, int final, FILE *echo,
                         const char *prefix) {
  while (from < out->n) {
    const char *start = out->p + from;
    const char *nl = memchr(start, '\n', out->n - from);
    if (!nl && !final) break;
    const size_t len = nl ? (size_t)(nl - start) : out->n - from;
    if (echo) fprintf(echo, "%s%.*s\n", prefix ? prefix : "", (int)len, start);
    size_t l = len;
    while (l && (start[l - 1] == '\r' || start[l - 1] == ' ')) l--;
    if (l) {
      if (l >= sizeof c->last_line) l = sizeof c->last_line - 1;
      memcpy(c->last_line, start, l);
      c->last_line[l] = 0;
    }
    from += len + (nl ? 1 : 0);
  }
  if (echo) fflush(echo);
  return from;
}

int mx_spawn(char *const argv[], char *const envp[], double timeout_s, FILE *echo,
             const char *prefix, mx_child *c) {
  memset(c, 0, sizeof *c);
  int out[2] = {-1, -1}, res[2] = {-1, -1};
  if (high_pipe(out) || high_pipe(res)) {
    snprintf(c->last_line, sizeof c->last_line, "pipe: %s", strerror(errno));
    return 1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  posix_spawn_file_actions_adddup2(&fa, res[1], MX_RESULT_FD);
  pid_t pid;
  const int err = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp ? envp : environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(res[1]);
  if (err) {
    snprintf(c->last_line, sizeof c->last_line, "cannot start %s: %s", argv[0], strerror(err));
    close(out[0]);
    close(res[0]);
    return 1;
  }

  grow o = {0}, r = {0};
  size_t echoed = 0;
  /* after the timeout's SIGKILL, 10 s more for the pipes to close (a grandchild could hold
   * them open); then stop reading */
  double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
  struct pollfd pf[2] = {{out[0], POLLIN, 0}, {res[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds) {
    int wait_ms = -1;
    if (deadline > 0) {
      const double left = deadline - now_s();
      wait_ms = left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
    }
    const int n = poll(pf, 2, wait_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (n == 0) {
      if (c->timed_out) break;
      c->timed_out = 1;
      kill(pid, SIGKILL);
      deadline = now_s() + 10;
      continue;
    }
    for (int i = 0; i < 2; i++) {
      if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[8192];
      const ssize_t got = read(pf[i].fd, buf, sizeof buf);
      if (got > 0) {
        if (grow_add(i == 0 ? &o : &r, buf, (size_t)got)) continue;
        if (i == 0) echoed = echo_lines(c, &o, echoed, 0, echo, prefix);
      } else if (got == 0 || errno != EINTR) {
        close(pf[i].fd);
        pf[i].fd = -1;
        open_fds--;
      }
    }
  }
  for (int i = 0; i < 2; i++)
    if (pf[i].fd >= 0) close(pf[i].fd);
  echo_lines(c, &o, echoed, 1, echo, prefix);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  c->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  c->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  c->output = o.p ? o.p : calloc(1, 1);
  c->result = r.p ? r.p : calloc(1, 1);
  return 0;
}

void mx_child_free(mx_child *c) {
  free(c->output);
  free(c->result);
  c->output = c->result = NULL;
}

const char *mx_child_ending(const mx_child *c, double timeout_s, char *buf, size_t size) {
  if (c->timed_out)
    snprintf(buf, size, "timed out after %g s (killed)", timeout_s);
  else if (c->signal)
    snprintf(buf, size, "killed by signal %d (%s)", c->signal, strsignal(c->signal));
  else
    snprintf(buf, size, "exited with status %d", c->exit_code);
  return buf;
}

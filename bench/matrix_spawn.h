/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_spawn.h — runs a child process (posix_spawn) and collects what it says: its exit,
 * its stdout and stderr together, and a side channel on its file descriptor 3 (where
 * `kljit-bench --one --result-fd 3` writes its record). Used by the matrix runner and by the
 * tests of the command line. */
#ifndef KLJIT_MATRIX_SPAWN_H
#define KLJIT_MATRIX_SPAWN_H

#include <stdio.h>

/* The file descriptor the child finds the side channel on. */
enum { MX_RESULT_FD = 3 };

typedef struct mx_child {
  int exit_code;       /* the exit status, or -1 when killed by a signal */
  int signal;          /* the signal that ended it, or 0 */
  int timed_out;       /* killed (SIGKILL) after the timeout */
  char *output;        /* stdout and stderr, interleaved as written; NUL-terminated */
  char *result;        /* what it wrote to fd 3; NUL-terminated */
  char last_line[512]; /* the last non-empty line of output */
} mx_child;

/* Runs argv (argv[0] is the program's path) with environment envp (NULL: this process's),
 * waits at most timeout_s seconds (<= 0: no limit), and fills c. When `echo` is not NULL,
 * each line of the child's output is copied there as it arrives, after `prefix`.
 * Returns 0, or 1 when the child could not be started (message in c->last_line). */
int mx_spawn(char *const argv[], char *const envp[], double timeout_s, FILE *echo,
             const char *prefix, mx_child *c);

void mx_child_free(mx_child *c);

/* A one-line description of how the child ended ("exited with status 3", "killed by signal
 * 9 (Killed)", "timed out after 600 s"), into buf. */
const char *mx_child_ending(const mx_child *c, double timeout_s, char *buf, size_t size);

#endif

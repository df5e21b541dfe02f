/* cli.h — what the kljit commands share: exit codes, the command table, option parsing.
 *
 * Each command lives in tools/cli_<name>.c and exports `int cli_<name>(int argc, char **argv)`
 * with argv[0] the command's name and its options after it. It handles --help itself (usage on
 * stdout, exit 0) and returns one of the exit codes below. tools/cli_main.c dispatches through
 * the table of commands; adding one is a declaration here and a line there.
 *
 * The CLI uses only the public header (plus the CUDA runtime for the demo's buffers).
 */
#ifndef KLJIT_CLI_H
#define KLJIT_CLI_H

#include <stdio.h>

#include "kljit_experimental.h" /* the CLI uses the tooling entry points */

/* Exit codes scripts may rely on (documented in `kljit --help` and README.md). */
enum {
  CLI_OK = 0,     /* success                                                      */
  CLI_FAIL = 1,   /* a kljit or CUDA failure; the message is on stderr             */
  CLI_USAGE = 2,  /* bad command line: unknown command or option, bad value        */
  CLI_NO_GPU = 3, /* the command needs a GPU and there is none (not `demo`)        */
  CLI_CORRUPT = 4 /* `cache verify` found invalid entries                          */
};

typedef int (*cli_fn)(int argc, char **argv);

typedef struct cli_command {
  const char *name;
  const char *summary; /* one line, shown by `kljit --help` */
  cli_fn run;
} cli_command;

int cli_demo(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_precompile(int argc, char **argv);
int cli_cache(int argc, char **argv);
int cli_version(int argc, char **argv);
int cli_tune(int argc, char **argv);

/* ---- option parsing ------------------------------------------------------------------------
 * A command walks its arguments with a parser; each matcher looks at the current argument and,
 * on a match, consumes it (and its value: "--name V" or "--name=V") and returns 1:
 *
 *   cli_parser p;
 *   cli_parser_init(&p, argc, argv);
 *   while (cli_next(&p)) {
 *     if (cli_string(&p, "--cache-dir", &o.cache_dir)) continue;
 *     if (cli_problem_option(&p, &o.problem)) continue;
 *     cli_unknown(&p);
 *   }
 *   if (cli_stopped(&p, usage)) return p.status;
 *
 * A bad value prints "kljit <cmd>: ..." on stderr and stops the walk with status CLI_USAGE.
 * --help / -h stop it too; cli_stopped then prints the usage on stdout with status CLI_OK. */
typedef struct cli_parser {
  int argc;
  char **argv;
  int i; /* the argument being looked at */
  const char *cmd;
  int status; /* CLI_OK, or CLI_USAGE after a bad argument */
  int help;   /* --help or -h was given */
} cli_parser;

void cli_parser_init(cli_parser *p, int argc, char **argv);
/* 1 while an argument is left and nothing stopped the walk. */
int cli_next(cli_parser *p);
/* Ends a walk: 1 when the command must return p->status now (help printed, or an error). */
int cli_stopped(cli_parser *p, void (*usage)(FILE *));

int cli_flag(cli_parser *p, const char *name);
int cli_string(cli_parser *p, const char *name, const char **out);
int cli_int(cli_parser *p, const char *name, long long lo, long long hi, long long *out);
int cli_double(cli_parser *p, const char *name, double lo, double hi, double *out);
typedef struct cli_choice {
  const char *name;
  int value;
} cli_choice;
/* choices ends with {NULL, 0}. */
int cli_enum(cli_parser *p, const char *name, const cli_choice *choices, int *out);
/* An argument that is not an option (subcommands, operands). */
int cli_positional(cli_parser *p, const char **out);
/* Reports the current argument as unknown and stops the walk. Returns 0. */
int cli_unknown(cli_parser *p);
/* Reports a usage error for this command and stops the walk. Returns CLI_USAGE. */
int cli_usage_error(cli_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the problem options shared by demo and precompile ------------------------------------ */

/* The README's problem: H 4096, V 128256, bf16, dense teacher probabilities. */
void cli_problem_defaults(kljit_problem *pb);
/* Matches one of the options listed in CLI_PROBLEM_HELP. */
int cli_problem_option(cli_parser *p, kljit_problem *pb);
extern const char CLI_PROBLEM_HELP[];

/* "sm_80,sm_90" or "80,90" into archs[]; returns the count, or 0 after printing why not. */
int cli_parse_archs(cli_parser *p, const char *text, int *archs, int cap);

/* Prints "kljit: <what>: <status>\n  <last error>" and returns CLI_FAIL. */
int cli_fail(const char *what, kljit_status st);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
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
 * --help / -h stop it too; cli_stopped then prints the usage on stdout with status CLI_OK.
 * "--" ends the options: every later argument is an operand (cli_positional), even "-x". */
typedef struct cli_parser {
  int argc;
  char **argv;
  int i; /* the argument being looked at */
  const char *cmd;
  int status; /* CLI_OK, or CLI_USAGE after a bad argument */
  int help;   /* --help or -h was given */
  int operands_only; /* after "--" */
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
/* v among choices: 1 with *out set; else 0 with "a, b or c" (the names) in list. */
int cli_choose(const char *v, const cli_choice *choices, int *out, char *list, size_t cap);
/* sum, batchmean, mean, none: the --reduction option and the reduction= word. */
extern const cli_choice CLI_REDUCTIONS[];
/* An argument that is not an option (subcommands, operands). */
int cli_positional(cli_parser *p, const char **out);
/* Reports the current argument as unknown and stops the walk. Returns 0. */
int cli_unknown(cli_parser *p);
/* Reports a usage error for this command and stops the walk. Returns CLI_USAGE. */
int cli_usage_error(cli_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- problems: the shape grammar of every command (tools/cli_shape.c) ---------------------- */

enum { CLI_SHAPE_TEXT = 512, CLI_WORDS_MAX = 48 };

typedef struct cli_shape {
  kljit_problem pb;
  long long rows; /* N=, 0 when not given */
  char text[CLI_SHAPE_TEXT]; /* as written */
} cli_shape;

/* SHAPE words that come from options (the old problem and loss-family options): each with the
 * option it came from ("--divergence jsd"), which messages name. */
typedef struct cli_words {
  int n;
  char word[CLI_WORDS_MAX][80];   /* "div=jsd" */
  char shown[CLI_WORDS_MAX][96];  /* "--divergence jsd" */
  char option[CLI_WORDS_MAX][32]; /* "--divergence" (an option given twice is an error) */
} cli_words;

/* The words of a SHAPE, for --help. */
extern const char CLI_SHAPE_HELP[];
/* Parses one SHAPE, then the words of `extra` (may be NULL: the options' words, applied to
 * every shape), into s and checks it with kljit_plan_check. A bad word or value, two words for
 * one aspect of the problem (repeated or contradictory), a word missing its partner (beta=
 * without div=jsd, div=jsd without beta=, tail= without topk=, ...), or a problem the library
 * refuses is a usage error naming `where` (may be NULL or "file:line: ") and the word; returns
 * 1 when s is good. An empty text with extra words is the old options' problem. */
int cli_shape_parse(cli_parser *p, const char *text, const cli_words *extra, const char *where,
                    cli_shape *s);
/* Appends the shapes of a file (one per line, '#' comments) to shapes[*n], at most cap in all,
 * each with the words of `extra`. A missing file is a usage error. Returns 1 when every line
 * was good. */
int cli_shape_file(cli_parser *p, const char *path, const cli_words *extra, cli_shape *shapes,
                   int *n, int cap);
/* The canonical SHAPE of a problem (the words of its non-default fields, N= when rows > 0):
 * cli_shape_parse of it gives the same problem back. */
void cli_shape_format(const kljit_problem *pb, long long rows, char *out, size_t cap);
/* "problem: <SHAPE>" and then every field of pb as name=value (kljit demo). */
void cli_problem_print(FILE *f, const kljit_problem *pb, long long rows);

/* The README's problem: what demo and precompile do without one (messages name it so). */
#define CLI_DEFAULT_SHAPE "V=128256,H=4096,bf16,dense"
/* The old spellings of the shape words (--hidden H --vocab V --dtype ...), still accepted by
 * demo and precompile with a note on stderr pointing at the SHAPE form: each becomes its word
 * in `w`. They describe one problem, the README's (V=128256,H=4096) where V or H is not given:
 * cli_problem_words completes it. */
int cli_problem_option(cli_parser *p, cli_words *w);
void cli_problem_words(cli_words *w);

/* The loss-family options (--divergence, --beta, --hard-weight, --soft-weight, --softcap,
 * --teacher-softcap, --teacher-ld, --teacher-hidden, --teacher-bias), each its SHAPE word
 * (div=, beta=, hard=, soft=, cap=, tcap=, tv=, hidden=, tbias) in `w`: applied to every
 * problem of the command line (each SHAPE, or the old options' problem), where a word of the
 * SHAPE setting the same aspect is a contradiction. */
int cli_loss_option(cli_parser *p, cli_words *w);
/* Appends the words of `from` to `to` (the old options' problem takes the loss words too). */
void cli_words_append(cli_words *to, const cli_words *from);
extern const char CLI_PROBLEM_HELP[];

/* kljit_last_error() without the function names the library puts in front ("kljit_precompile:
 * "): a command's message carries one prefix, its own. */
const char *cli_last_error(void);

/* A status of the library about values from the command line: INVALID_ARGUMENT and UNSUPPORTED
 * are the user's values refused (usage error, exit 2, the library's sentence); anything else
 * is a failure (exit 1). */
int cli_refused(cli_parser *p, const char *what, kljit_status st);

/* "sm_80,sm_90" or "80,90" into archs[]; returns the count, or 0 after printing why not.
 * "sm_90a" (and the other arch-specific "a"/"f" targets) means sm_90: kljit's kernels use no
 * arch-specific instructions, so the sm_90 cubin is the one every sm_90 GPU loads. */
int cli_parse_archs(cli_parser *p, const char *text, int *archs, int cap);

/* The directory a command writes kernels to: `given` (--cache-dir) if not NULL, else the
 * writable cache of the environment, else "" (KLJIT_CACHE_DISABLE=1, or no directory). */
kljit_status cli_cache_dir(const char *given, char dir[4096]);

/* Prints "kljit: <what>: <status>\n  <last error>" and returns CLI_FAIL. */
int cli_fail(const char *what, kljit_status st);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* cli_main.c — the kljit command-line tool: the table of commands and the dispatch. */
#include <string.h>

#include "cli.h"

/* One line per command, in the order `kljit --help` lists them. A new command is a file
 * tools/cli_<name>.c exporting `int cli_<name>(int argc, char **argv)`, its declaration in
 * cli.h and one line here (e.g. {"tune", "...", cli_tune}). */
static const cli_command COMMANDS[] = {
    {"demo", "compute the loss on the README's problem (without a GPU: compile its kernels)",
     cli_demo},
    {"info", "versions, the GPU, kernel cache and wisdom locations", cli_info},
    {"precompile", "compile the kernels of problems for a list of GPU architectures (no GPU)",
     cli_precompile},
    {"cache", "list, verify, clear or count the entries of a kernel cache", cli_cache},
    {"tune", "time configurations of shapes on the GPU and write their wisdom", cli_tune},
    {"version", "print the library version", cli_version},
};
enum { N_COMMANDS = sizeof COMMANDS / sizeof COMMANDS[0] };

static void usage(FILE *f) {
  fputs(
      "usage: kljit <command> [options]     kljit <command> --help for its options\n"
      "       kljit help <command>\n\ncommands:\n",
      f);
  for (int i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-11s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
  fputs(
      "\nexit codes:\n"
      "  0  success\n"
      "  1  a kljit or CUDA failure (the message is on stderr)\n"
      "  2  usage error: unknown command or option, bad value (one the library refuses too)\n"
      "  3  the command needs a GPU and there is none (demo instead compiles and exits 0)\n"
      "  4  cache verify found corrupt entries\n",
      f);
}

static const cli_command *find(const char *name) {
  for (int i = 0; i < N_COMMANDS; i++)
    if (!strcmp(name, COMMANDS[i].name)) return &COMMANDS[i];
  return NULL;
}

static int unknown(const char *name) {
  fprintf(stderr, "kljit: unknown command '%s' (kljit --help lists them)\n", name);
  return CLI_USAGE;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  const char *const name = argv[1];
  if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
    usage(stdout);
    return CLI_OK;
  }
  if (!strcmp(name, "--version")) return cli_version(1, argv + 1);
  if (!strcmp(name, "help")) {
    if (argc == 2) {
      usage(stdout);
      return CLI_OK;
    }
    const cli_command *const c = find(argv[2]);
    if (!c) return unknown(argv[2]);
    char help[] = "--help";
    char *help_argv[] = {argv[2], help, NULL};
    return c->run(2, help_argv);
  }
  const cli_command *const c = find(name);
  if (!c) return unknown(name);
  return c->run(argc - 1, argv + 1);
}

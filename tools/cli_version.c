/* SPDX-License-Identifier: Apache-2.0 */
/* cli_version.c — `kljit version`: the version of the library actually loaded. */
#include "cli.h"

static void usage(FILE *f) {
  fputs(
      "usage: kljit version\n"
      "Prints the version of the loaded kljit library (e.g. 0.1.0). `kljit info` has more.\n",
      f);
}

int cli_version(int argc, char **argv) {
  cli_parser p;
  cli_parser_init(&p, argc, argv);
  while (cli_next(&p)) cli_unknown(&p);
  if (cli_stopped(&p, usage)) return p.status;
  printf("%s\n", kljit_version());
  return CLI_OK;
}

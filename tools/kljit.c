/* kljit.c — the kljit command-line tool (placeholder until the CLI lands). */
#include <stdio.h>

#include "kljit.h"

int main(void) {
  printf("kljit %s\n", kljit_version());
  return 0;
}

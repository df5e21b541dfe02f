/* SPDX-License-Identifier: Apache-2.0 */
/* consumer.c — what a user of an installed kljit writes: include <kljit.h>, link, call.
 * Exits 0 only if the loaded library's version is the one the header names and a valid
 * problem passes kljit_plan_check (which needs no GPU). */
#include <kljit.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  printf("kljit %s (header %s)\n", kljit_version(), KLJIT_VERSION_STRING);
  if (strcmp(kljit_version(), KLJIT_VERSION_STRING) != 0 ||
      kljit_version_number() != KLJIT_VERSION_NUMBER) {
    fprintf(stderr, "version mismatch: library %s (%u), header %s (%d)\n", kljit_version(),
            kljit_version_number(), KLJIT_VERSION_STRING, KLJIT_VERSION_NUMBER);
    return 1;
  }
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = 4096;
  pb.vocab = 151936;
  const kljit_status st = kljit_plan_check(&pb);
  if (st != KLJIT_SUCCESS) {
    fprintf(stderr, "kljit_plan_check: %s: %s\n", kljit_status_string(st), kljit_last_error());
    return 1;
  }
  printf("kljit_plan_check: %s\n", kljit_status_string(st));
  return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_wisdom.c — libFuzzer harness: the wisdom parser and formatter, with the round-trip
 * oracle. Any text the parser accepts must format to a text that parses back to the same set,
 * whose format is the same bytes (parse -> format -> parse is a fixed point); a violation aborts,
 * which libFuzzer reports as a crash with the input saved. Build and run: tests/fuzz/README. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wisdom.h"

static char *format_or_die(const wisdom_set *s) {
  strbuf b = {0};
  if (wisdom_format(s, &b) != KLJIT_SUCCESS) {
    fprintf(stderr, "oracle: wisdom_format failed: %s\n", kljit_last_error());
    abort();
  }
  return b.data;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0'; /* the parser reads C strings; an embedded NUL ends the text */
  wisdom_set a;
  if (wisdom_parse(text, "<fuzz>", &a, NULL) == KLJIT_SUCCESS) {
    char *u = format_or_die(&a);
    wisdom_set b;
    if (wisdom_parse(u, "<formatted>", &b, NULL) != KLJIT_SUCCESS) {
      fprintf(stderr, "oracle: formatted text does not parse: %s\n%s", kljit_last_error(), u);
      abort();
    }
    char *v = format_or_die(&b);
    if (strcmp(u, v) != 0 || a.n != b.n) {
      fprintf(stderr, "oracle: not a fixed point\n%s---\n%s", u, v);
      abort();
    }
    free(u), free(v);
    wisdom_set_free(&b);
    wisdom_set_free(&a);
  }
  free(text);
  return 0;
}

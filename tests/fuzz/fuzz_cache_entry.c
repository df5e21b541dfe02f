/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_cache_entry.c — libFuzzer harness: the kernel cache entry reader. Each input is written
 * to a file (in $TMPDIR, default /tmp) and read back with cache_read_file and
 * cache_entry_inspect, the two paths every lookup and `kljit cache verify` take. Whatever the
 * bytes, they must not crash; an accepted entry must hold what its lengths say.
 * Build and run: tests/fuzz/README. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"

static char dir[4096], path[4200];

static void cleanup(void) {
  unlink(path);
  rmdir(dir);
}
static const char name[] = "0000000000000000000000000000000000000000000000000000000000000000.kjc";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(dir, sizeof dir, "%s/kljit-fuzz-cache-XXXXXX", base);
  if (!mkdtemp(dir)) abort();
  snprintf(path, sizeof path, "%s/%s", dir, name);
  atexit(cleanup);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  if (fclose(f) != 0) abort();
  cache_entry e;
  if (cache_read_file(path, &e) == KLJIT_SUCCESS) {
    if (!e.key_text || !e.meta || (e.payload_len && !e.payload)) abort();
    cache_entry_free(&e);
  }
  cache_inspection in;
  if (cache_entry_inspect(dir, name, &in) == KLJIT_SUCCESS) cache_inspection_free(&in);
  return 0;
}

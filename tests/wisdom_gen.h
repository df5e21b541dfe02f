/* SPDX-License-Identifier: Apache-2.0 */
/* wisdom_gen.h — random wisdom entry lines for property tests and fuzz seeds (tests only).
 *
 * Lines are built from pools that mix valid values with the edges that broke the parser before
 * (quotes and backslashes in the GPU name, quoted values of any field, tunings the templates
 * refuse), so a few thousand of them cover both what parses and what must not. Deterministic
 * for a seed: a failure reproduces.
 */
#ifndef KLJIT_WISDOM_GEN_H
#define KLJIT_WISDOM_GEN_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kljit.h"

static inline uint64_t wg_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static inline int wg_below(uint64_t *s, int n) {
  return (int)(wg_next(s) % (uint64_t)n);
}
#define WG_PICK(s, arr) (arr)[wg_below(s, (int)(sizeof(arr) / sizeof((arr)[0])))]

/* Appends ` name=value` to line (cap bytes), quoting the value now and then as input may. */
static inline void wg_field(uint64_t *s, char *line, size_t cap, const char *name,
                            const char *value) {
  const size_t n = strlen(line);
  if (wg_below(s, 8) == 0)
    snprintf(line + n, cap - n, " %s=\"%s\"", name, value);
  else
    snprintf(line + n, cap - n, " %s=%s", name, value);
}

/* One entry line (no newline) of the kljit version this build is. `realistic` keeps to
 * problems and tunings a tuner would produce (for the import timing); else anything goes. */
static inline void wg_entry(uint64_t *s, int realistic, char *line, size_t cap) {
  static const char *const gpus_quoted[] = {"\"NVIDIA H200\"",
                                            "\"NVIDIA A100-SXM4-80GB\"",
                                            "\"A\\\"B\"",
                                            "\"back\\\\slash\"",
                                            "\"  spaced  out \"",
                                            "\"\xc3\xbcnicode GPU\"",
                                            "\"x\"",
                                            "\"NVIDIA GeForce RTX 4090\""};
  static const char *const gpus_bad[] = {"A\"B", "\"unterminated", "\"bad\\escape\"", "\"\"",
                                         "plain"};
  static const char *const vs[] = {"2",      "3",      "100",      "1000", "32000", "50257",
                                   "128256", "151936", "16777216", "17",   "4097"};
  static const char *const hs[] = {"1", "64", "256", "4096", "8192"};
  static const char *const dts[] = {"f32", "f16", "bf16"};
  static const char *const teachers[] = {"probs", "logprobs", "logits", "topk"};
  static const char *const threads[] = {"32", "64", "96", "128", "256", "512", "1024", "100"};
  static const char *const splits[] = {"1", "2", "4", "8", "16", "32", "64", "3"};
  static const char *const clusters[] = {"0", "0", "0", "2", "4", "8", "16", "3"};
  static const char *const nvs[] = {"1", "2", "4", "8", "32"};
  static const char *const chunks[] = {"256", "1024", "2048", "4096", "8192", "1", "65536"};
  static const char *const ts[] = {"1", "2", "0.5", "1e-18", "1e+18", "3.25", "1e-19"};
  char buf[64];
  line[0] = '\0';
  const int bad_gpu = !realistic && wg_below(s, 16) == 0;
  snprintf(line, cap, "gpu=%s", bad_gpu ? WG_PICK(s, gpus_bad) : WG_PICK(s, gpus_quoted));
  wg_field(s, line, cap, "arch", wg_below(s, 2) ? "sm_90" : "sm_80");
  snprintf(buf, sizeof buf, "%d", realistic ? 108 + 24 * wg_below(s, 2) : 1 + wg_below(s, 200));
  wg_field(s, line, cap, "sms", buf);
  wg_field(s, line, cap, "kljit", KLJIT_VERSION_STRING);
  if (realistic)
    snprintf(buf, sizeof buf, "%d", 1000 * (2 + wg_below(s, 200)) + 8 * wg_below(s, 4));
  wg_field(s, line, cap, "V", realistic ? buf : WG_PICK(s, vs));
  wg_field(s, line, cap, "H", WG_PICK(s, hs));
  wg_field(s, line, cap, "in", WG_PICK(s, dts));
  const char *const teacher = realistic ? "probs" : WG_PICK(s, teachers);
  wg_field(s, line, cap, "teacher", teacher);
  wg_field(s, line, cap, "tdt", WG_PICK(s, dts));
  if (!strcmp(teacher, "topk")) {
    snprintf(buf, sizeof buf, "%d", 1 + wg_below(s, 1024));
    wg_field(s, line, cap, "k", buf);
    wg_field(s, line, cap, "ids", wg_below(s, 2) ? "i32" : "i64");
    wg_field(s, line, cap, "values", wg_below(s, 2) ? "probs" : "logprobs");
    static const char *const tails[] = {"none", "renorm", "bucket"};
    wg_field(s, line, cap, "tail", WG_PICK(s, tails));
  }
  wg_field(s, line, cap, "tmode", wg_below(s, 4) ? "const" : "runtime");
  static const char *const flags[] = {"-", "bias", "native_logits", "bias,check", "tf32"};
  wg_field(s, line, cap, "flags", realistic ? "-" : WG_PICK(s, flags));
  snprintf(buf, sizeof buf, "%lld", 1ll << wg_below(s, realistic ? 16 : 41));
  wg_field(s, line, cap, "bucket", buf);
  snprintf(line + strlen(line), cap - strlen(line), " ->");
  wg_field(s, line, cap, "chunk_rows", WG_PICK(s, chunks));
  const char *const split = realistic ? splits[wg_below(s, 4)] : WG_PICK(s, splits);
  wg_field(s, line, cap, "threads", realistic ? threads[3 + wg_below(s, 3)] : WG_PICK(s, threads));
  wg_field(s, line, cap, "split", split);
  wg_field(s, line, cap, "cluster",
           realistic        ? "0"
           : wg_below(s, 3) ? WG_PICK(s, clusters)
                            : split);
  wg_field(s, line, cap, "nv", realistic ? "1" : WG_PICK(s, nvs));
  static const char *const rigors[] = {"estimate", "measure", "exhaustive"};
  wg_field(s, line, cap, "rigor", WG_PICK(s, rigors));
  snprintf(buf, sizeof buf, "%d", 1 + wg_below(s, 100000));
  wg_field(s, line, cap, "rows", buf);
  snprintf(buf, sizeof buf, "%.*g", 1 + wg_below(s, 17), (double)wg_next(s) / 1e15);
  wg_field(s, line, cap, "ms", buf);
  if (!realistic && wg_below(s, 2)) {
    wg_field(s, line, cap, "T", WG_PICK(s, ts));
    wg_field(s, line, cap, "tt", wg_below(s, 2) ? "0" : WG_PICK(s, ts));
    wg_field(s, line, cap, "eps", wg_below(s, 2) ? "1e-20" : "1e-30");
  }
}

#endif

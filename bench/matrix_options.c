/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_options.c — kljit-bench's option parsing, usage text and experiment list. */
#include "matrix_options.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *const method_names[MX_METHOD_COUNT] = {"dense_unfused", "chunked_forward",
                                                          "kljit_fused", "kljit_two_phase"};

const char *mx_method_name(mx_method m) {
  return m >= 0 && m < MX_METHOD_COUNT ? method_names[m] : "?";
}

int mx_method_is_chunked(mx_method m) {
  return m != MX_DENSE_UNFUSED;
}

const char *mx_dtype_name(kljit_dtype dt) {
  return dt == KLJIT_FP32 ? "fp32" : dt == KLJIT_FP16 ? "fp16" : dt == KLJIT_BF16 ? "bf16" : "?";
}

const char *mx_chunk_text(int64_t chunk, char *buf, size_t size) {
  if (chunk == MX_CHUNK_AUTO) return "auto";
  if (chunk == MX_CHUNK_NONE) return "none";
  snprintf(buf, size, "%lld", (long long)chunk);
  return buf;
}

void mx_usage(FILE *f) {
  fputs(
      "usage: kljit-bench [options]\n"
      "\n"
      "Times fused linear + KL-divergence losses, forward and backward, over a matrix of\n"
      "methods x sequence lengths x chunk sizes. Each experiment runs in its own process, so an\n"
      "out-of-memory or a kernel failure is recorded as FAILED with its error and the matrix\n"
      "goes on. Prints a progress line per experiment on stderr and a markdown table on stdout.\n"
      "\n"
      "Methods (--methods, comma-separated, or 'all'):\n"
      "  dense_unfused    full N x V logits: cuBLAS GEMM, softmax/loss/gradient kernels, dX and\n"
      "                   dW GEMMs (a sparse teacher is expanded to dense); runs once per length\n"
      "  chunked_forward  logits chunk by chunk in forward, the full N x V softmax kept for\n"
      "                   backward (the CompactifAI baseline); chunk 'auto' = 4096 rows\n"
      "  kljit_fused      kljit_fused: loss, dX, dW in one call\n"
      "  kljit_two_phase  kljit_forward + kljit_backward (recomputes the logits)\n"
      "\n"
      "Options (defaults in brackets):\n"
      "  --sequence-lengths L,...  tokens per sequence [1024,2048,4096,8192,16384,32768,65536]\n"
      "  --batch-size B            sequences per step; rows N = B x length [1]\n"
      "  --chunk-sizes C,...       rows per chunk, or 'auto' (the method's default) [auto];\n"
      "                            kljit methods get it through KLJIT_CHUNK_ROWS\n"
      "  --hidden H                hidden size [4096]\n"
      "  --vocab V                 vocabulary size [128256]\n"
      "  --dtype bf16|fp16|fp32    inputs, weight, teacher and dX [bf16]\n"
      "  --teacher dense|sparse    dense teacher probabilities, or top-K ids and\n"
      "                            probabilities [sparse]\n"
      "  --topk K                  K of the sparse teacher, 1..1024 [100]\n"
      "  --logits fp32|native      dtype of the logits GEMM's output [fp32]\n"
      "  --methods M,...           methods to run [all]\n"
      "  --iterations N            timed iterations; the median is reported [10]\n"
      "  --warmup N                untimed iterations before them [2]\n"
      "  --tp N                    tensor-parallel ranks; only 1 is supported [1]\n"
      "  --timeout S               seconds before an experiment is killed [600]\n"
      "  --csv PATH                also write the results as CSV, a row per experiment\n"
      "  --dry-run                 print the experiments and exit (needs no GPU)\n"
      "  --help                    this text\n"
      "\n"
      "Columns: method, sequence_length, chunk_size, peak_vram_gib (device memory the method\n"
      "took beyond the shared inputs and outputs), iteration_ms (median fwd+bwd),\n"
      "tflops_per_gpu (6 N H V / time), ratio_to_floor (time / the same GEMMs alone, measured\n"
      "in the same process), loss_rel_vs_unfused, status (OK or FAILED), error.\n"
      "Exit status: 0 when the matrix ran (FAILED rows included), 2 for a usage error.\n",
      f);
}

/* ---- parsing ------------------------------------------------------------------------------ */

static int fail(char *err, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, size, fmt, ap);
  va_end(ap);
  return 2;
}

/* A decimal integer in [lo, hi], the whole string. */
static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (!s || !*s) return 1;
  errno = 0;
  char *end;
  const long long v = strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return 1;
  *out = v;
  return 0;
}

static int parse_list(const char *opt, const char *s, int allow_auto, int64_t lo, int64_t hi,
                      int64_t *out, int *n, char *err, size_t size) {
  *n = 0;
  const char *p = s;
  for (;;) {
    const char *comma = strchr(p, ',');
    const size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char item[32];
    if (len == 0 || len >= sizeof item)
      return fail(err, size, "%s: bad list '%s' (want comma-separated values)", opt, s);
    memcpy(item, p, len);
    item[len] = 0;
    if (*n == MX_MAX_LIST) return fail(err, size, "%s: more than %d values", opt, MX_MAX_LIST);
    if (allow_auto && !strcmp(item, "auto")) {
      out[(*n)++] = MX_CHUNK_AUTO;
    } else if (parse_int(item, lo, hi, &out[*n])) {
      return fail(err, size, "%s: '%s' is not %san integer in [%lld, %lld]", opt, item,
                  allow_auto ? "'auto' or " : "", (long long)lo, (long long)hi);
    } else {
      (*n)++;
    }
    if (!comma) return 0;
    p = comma + 1;
  }
}

static int parse_methods(const char *s, unsigned *out, char *err, size_t size) {
  *out = 0;
  if (!strcmp(s, "all")) {
    *out = (1u << MX_METHOD_COUNT) - 1;
    return 0;
  }
  const char *p = s;
  for (;;) {
    const char *comma = strchr(p, ',');
    const size_t len = comma ? (size_t)(comma - p) : strlen(p);
    int found = -1;
    for (int m = 0; m < MX_METHOD_COUNT; m++)
      if (strlen(method_names[m]) == len && !strncmp(p, method_names[m], len)) found = m;
    if (found < 0)
      return fail(err, size,
                  "--methods: unknown method '%.*s' (want all or a list of dense_unfused, "
                  "chunked_forward, kljit_fused, kljit_two_phase)",
                  (int)len, p);
    *out |= 1u << found;
    if (!comma) return 0;
    p = comma + 1;
  }
}

static void set_defaults(mx_options *o) {
  memset(o, 0, sizeof *o);
  o->action = MX_ACTION_RUN;
  for (int i = 0; i < 7; i++) o->seq[i] = (int64_t)1024 << i;
  o->n_seq = 7;
  o->chunk[0] = MX_CHUNK_AUTO;
  o->n_chunk = 1;
  o->methods = (1u << MX_METHOD_COUNT) - 1;
  o->tp = 1;
  o->iterations = 10;
  o->warmup = 2;
  o->batch = 1;
  o->topk = 100;
  o->hidden = 4096;
  o->vocab = 128256;
  o->dtype = KLJIT_BF16;
  o->teacher = MX_TEACHER_SPARSE;
  o->logits = MX_LOGITS_FP32;
  o->csv = NULL;
  o->timeout_s = 600;
  o->result_fd = -1;
}

/* The options that take a value. */
static const char *const valued[] = {
    "--sequence-lengths", "--chunk-sizes", "--tp",      "--iterations", "--warmup",
    "--batch-size",       "--topk",        "--hidden",  "--vocab",      "--dtype",
    "--teacher",          "--logits",      "--methods", "--csv",        "--timeout",
    "--result-fd"};

static int takes_value(const char *name) {
  for (size_t i = 0; i < sizeof valued / sizeof valued[0]; i++)
    if (!strcmp(name, valued[i])) return 1;
  return 0;
}

static int apply(mx_options *o, const char *name, const char *val, char *err, size_t size) {
  int64_t v;
  if (!strcmp(name, "--sequence-lengths"))
    return parse_list(name, val, 0, 1, INT32_MAX, o->seq, &o->n_seq, err, size);
  if (!strcmp(name, "--chunk-sizes"))
    return parse_list(name, val, 1, 1, INT32_MAX, o->chunk, &o->n_chunk, err, size);
  if (!strcmp(name, "--methods")) return parse_methods(val, &o->methods, err, size);
  if (!strcmp(name, "--csv")) {
    if (!*val) return fail(err, size, "--csv: empty path");
    o->csv = val;
    return 0;
  }
  if (!strcmp(name, "--dtype")) {
    o->dtype = !strcmp(val, "bf16")   ? KLJIT_BF16
               : !strcmp(val, "fp16") ? KLJIT_FP16
               : !strcmp(val, "fp32") ? KLJIT_FP32
                                      : (kljit_dtype)0;
    return o->dtype ? 0 : fail(err, size, "--dtype: '%s' (want bf16, fp16 or fp32)", val);
  }
  if (!strcmp(name, "--teacher")) {
    o->teacher = !strcmp(val, "dense")    ? MX_TEACHER_DENSE
                 : !strcmp(val, "sparse") ? MX_TEACHER_SPARSE
                                          : (mx_teacher)0;
    return o->teacher ? 0 : fail(err, size, "--teacher: '%s' (want dense or sparse)", val);
  }
  if (!strcmp(name, "--logits")) {
    o->logits = !strcmp(val, "fp32")     ? MX_LOGITS_FP32
                : !strcmp(val, "native") ? MX_LOGITS_NATIVE
                                         : (mx_logits)0;
    return o->logits ? 0 : fail(err, size, "--logits: '%s' (want fp32 or native)", val);
  }
  if (!strcmp(name, "--timeout")) {
    char *end;
    errno = 0;
    const double t = strtod(val, &end);
    if (errno || *end || !*val || !(t > 0 && t <= 86400))
      return fail(err, size, "--timeout: '%s' is not a number of seconds in (0, 86400]", val);
    o->timeout_s = t;
    return 0;
  }
  /* integers: name, low, high, destination */
  struct {
    const char *name;
    int64_t lo, hi;
  } const ints[] = {{"--tp", 1, 1024},       {"--iterations", 1, 10000},
                    {"--warmup", 0, 1000},   {"--batch-size", 1, 1 << 20},
                    {"--topk", 1, 1024},     {"--hidden", 1, 1 << 20},
                    {"--vocab", 2, 1 << 24}, {"--result-fd", 0, 1 << 20}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    if (strcmp(name, ints[i].name)) continue;
    if (parse_int(val, ints[i].lo, ints[i].hi, &v))
      return fail(err, size, "%s: '%s' is not an integer in [%lld, %lld]", name, val,
                  (long long)ints[i].lo, (long long)ints[i].hi);
    if (!strcmp(name, "--tp")) o->tp = (int)v;
    if (!strcmp(name, "--iterations")) o->iterations = (int)v;
    if (!strcmp(name, "--warmup")) o->warmup = (int)v;
    if (!strcmp(name, "--batch-size")) o->batch = v;
    if (!strcmp(name, "--topk")) o->topk = (int)v;
    if (!strcmp(name, "--hidden")) o->hidden = v;
    if (!strcmp(name, "--vocab")) o->vocab = v;
    if (!strcmp(name, "--result-fd")) o->result_fd = (int)v;
    return 0;
  }
  return fail(err, size, "internal: option %s has no handler", name);
}

/* Checks that span several options. */
static int check(const mx_options *o, char *err, size_t size) {
  if (o->tp != 1)
    return fail(err, size,
                "--tp %d: tensor parallelism is not supported yet; only --tp 1 runs (the "
                "vocabulary-parallel path is future work)",
                o->tp);
  if (!o->methods) return fail(err, size, "--methods: no method selected");
  for (int i = 0; i < o->n_seq; i++)
    if (o->seq[i] * o->batch > INT32_MAX)
      return fail(err, size, "--batch-size %lld x sequence length %lld is over 2^31 - 1 rows",
                  (long long)o->batch, (long long)o->seq[i]);
  if (o->teacher == MX_TEACHER_SPARSE && o->topk > o->vocab)
    return fail(err, size, "--topk %d is larger than --vocab %lld", o->topk, (long long)o->vocab);
  if (o->hidden > INT32_MAX / 2 || o->hidden * o->vocab > ((int64_t)1 << 40))
    return fail(err, size, "--hidden %lld x --vocab %lld is too large", (long long)o->hidden,
                (long long)o->vocab);
  if (o->action == MX_ACTION_ONE && mx_experiments(o, NULL, 0) != 1)
    return fail(err, size, "--one: the options must span exactly one experiment");
  return 0;
}

int mx_parse(int argc, char *const argv[], mx_options *o, char *err, size_t err_size) {
  set_defaults(o);
  err[0] = 0;
  int help = 0, dry = 0, one = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      help = 1;
      continue;
    }
    if (!strcmp(arg, "--dry-run")) {
      dry = 1;
      continue;
    }
    if (!strcmp(arg, "--one")) {
      one = 1;
      continue;
    }
    char name[64];
    const char *val = NULL;
    const char *eq = strchr(arg, '=');
    const size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (strncmp(arg, "--", 2) || len >= sizeof name)
      return fail(err, err_size, "unexpected argument '%s'", arg);
    memcpy(name, arg, len);
    name[len] = 0;
    if (!takes_value(name)) return fail(err, err_size, "unknown option '%s'", name);
    if (eq) {
      val = eq + 1;
    } else if (i + 1 < argc) {
      val = argv[++i];
    } else {
      return fail(err, err_size, "option '%s' needs a value", name);
    }
    const int r = apply(o, name, val, err, err_size);
    if (r) return r;
  }
  if (help) {
    o->action = MX_ACTION_HELP;
    return 0;
  }
  o->action = one ? MX_ACTION_ONE : dry ? MX_ACTION_DRY_RUN : MX_ACTION_RUN;
  return check(o, err, err_size);
}

int mx_experiments(const mx_options *o, mx_experiment *out, int max) {
  int n = 0;
  for (int s = 0; s < o->n_seq; s++)
    for (int m = 0; m < MX_METHOD_COUNT; m++) {
      if (!(o->methods & (1u << m))) continue;
      const int chunks = mx_method_is_chunked((mx_method)m) ? o->n_chunk : 1;
      for (int c = 0; c < chunks; c++, n++) {
        if (!out || n >= max) continue;
        out[n].method = (mx_method)m;
        out[n].seq = o->seq[s];
        out[n].chunk = mx_method_is_chunked((mx_method)m) ? o->chunk[c] : MX_CHUNK_NONE;
      }
    }
  return n;
}

/* Appends a copy of s to store and returns it. */
static char *keep(char *store, size_t size, size_t *used, const char *s) {
  const size_t len = strlen(s) + 1;
  if (*used + len > size) return (char *)"";
  char *p = store + *used;
  memcpy(p, s, len);
  *used += len;
  return p;
}

void mx_child_argv(const mx_options *o, const mx_experiment *e, const char *exe, int result_fd,
                   char *store, size_t store_size, char *argv[]) {
  size_t used = 0;
  int n = 0;
  char num[64];
#define ARG(s) (argv[n++] = keep(store, store_size, &used, (s)))
#define NUM(fmt, v) (snprintf(num, sizeof num, fmt, v), ARG(num))
  ARG(exe);
  ARG("--one");
  ARG("--result-fd");
  NUM("%d", result_fd);
  ARG("--methods");
  ARG(mx_method_name(e->method));
  ARG("--sequence-lengths");
  NUM("%lld", (long long)e->seq);
  ARG("--chunk-sizes");
  ARG(e->chunk > 0 ? (snprintf(num, sizeof num, "%lld", (long long)e->chunk), num) : "auto");
  ARG("--batch-size");
  NUM("%lld", (long long)o->batch);
  ARG("--hidden");
  NUM("%lld", (long long)o->hidden);
  ARG("--vocab");
  NUM("%lld", (long long)o->vocab);
  ARG("--dtype");
  ARG(mx_dtype_name(o->dtype));
  ARG("--teacher");
  ARG(o->teacher == MX_TEACHER_DENSE ? "dense" : "sparse");
  ARG("--topk");
  NUM("%d", o->topk);
  ARG("--logits");
  ARG(o->logits == MX_LOGITS_NATIVE ? "native" : "fp32");
  ARG("--iterations");
  NUM("%d", o->iterations);
  ARG("--warmup");
  NUM("%d", o->warmup);
  ARG("--tp");
  NUM("%d", o->tp);
#undef NUM
#undef ARG
  argv[n] = NULL;
}

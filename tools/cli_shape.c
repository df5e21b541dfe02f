/* SPDX-License-Identifier: Apache-2.0 */
/* cli_shape.c — the problem grammar every command takes: "V=128256,H=4096,bf16,dense,N=8192".
 *
 * One shape is one comma-separated argument (or one line of a --file); its words are listed in
 * CLI_SHAPE_HELP and docs/wisdom.md. Values are checked against the ranges the library
 * enforces, and the finished problem against kljit_plan_check itself, so every value the
 * library would refuse is a usage error (exit 2) with the library's sentence, before any
 * command does work.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char CLI_SHAPE_HELP[] =
    "SHAPE: comma-separated words, e.g. V=128256,H=4096,bf16,dense,N=8192 (docs/wisdom.md)\n"
    "  V=<vocab> H=<hidden>           required; V in [2, 16777216], H in [1, 1048576]\n"
    "  N=<tokens>                     tokens per call, in [1, 2147483647]\n"
    "  fp32|fp16|bf16                 inputs, weight and teacher dtype (default bf16)\n"
    "  tdt=fp32|fp16|bf16             teacher dtype alone (top-K values: fp32 unless given)\n"
    "  dense|probs|logprobs|logits    dense teacher form (dense = probs, the default)\n"
    "  topk=K [values=probs|logprobs] [tail=none|renorm|bucket] [ids=i32|i64]\n"
    "                                 sparse top-K teacher, K in [1, min(V, 1024)]\n"
    "  T=<t> tt=<t> runtime t2        temperature, teacher temperature, T per call, T^2\n"
    "  reduction=sum|batchmean|mean|none\n"
    "  bias native tf32 check         problem flags\n"
    "  gw=fp32|fp16|bf16 accum=fp32|out|auto  dW dtype and accumulation\n";

static const cli_choice TOPK_VALUES[] = {
    {"probs", KLJIT_TOPK_PROBS}, {"logprobs", KLJIT_TOPK_LOGPROBS}, {NULL, 0}};
static const cli_choice TAILS[] = {{"none", KLJIT_TAIL_NONE},
                                   {"renorm", KLJIT_TAIL_RENORM},
                                   {"bucket", KLJIT_TAIL_BUCKET},
                                   {NULL, 0}};
static const cli_choice ID_DTYPES[] = {{"i32", KLJIT_INT32}, {"i64", KLJIT_INT64}, {NULL, 0}};
static const cli_choice ACCUMS[] = {
    {"fp32", KLJIT_ACCUM_FP32}, {"out", KLJIT_ACCUM_OUTPUT_DTYPE}, {"auto", KLJIT_ACCUM_AUTO},
    {NULL, 0}};

static int dtype_of(const char *v, kljit_dtype *out) {
  *out = !strcmp(v, "fp32") || !strcmp(v, "f32")   ? KLJIT_FP32
         : !strcmp(v, "fp16") || !strcmp(v, "f16") ? KLJIT_FP16
         : !strcmp(v, "bf16")                      ? KLJIT_BF16
                                                   : (kljit_dtype)0;
  return *out != 0;
}

static int integer(const char *v, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  const long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno || x < lo || x > hi) return 0;
  *out = x;
  return 1;
}

static int number(const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  const double x = strtod(v, &end);
  if (end == v || *end || errno || !isfinite(x) || x < lo || x > hi) return 0;
  *out = x;
  return 1;
}

/* One word without '='. 1 ok, 0 unknown. */
static int flag_word(kljit_problem *pb, const char *w) {
  kljit_dtype dt;
  if (dtype_of(w, &dt))
    pb->input_dtype = pb->weight_dtype = pb->teacher_dtype = dt;
  else if (!strcmp(w, "dense") || !strcmp(w, "probs"))
    pb->teacher = KLJIT_TEACHER_DENSE_PROBS;
  else if (!strcmp(w, "logprobs"))
    pb->teacher = KLJIT_TEACHER_DENSE_LOGPROBS;
  else if (!strcmp(w, "logits"))
    pb->teacher = KLJIT_TEACHER_DENSE_LOGITS;
  else if (!strcmp(w, "runtime"))
    pb->temperature_mode = KLJIT_TEMPERATURE_RUNTIME;
  else if (!strcmp(w, "t2"))
    pb->flags |= KLJIT_FLAG_SCALE_T_SQUARED;
  else if (!strcmp(w, "bias"))
    pb->flags |= KLJIT_FLAG_BIAS;
  else if (!strcmp(w, "native"))
    pb->flags |= KLJIT_FLAG_NATIVE_LOGITS;
  else if (!strcmp(w, "tf32"))
    pb->flags |= KLJIT_FLAG_ALLOW_TF32;
  else if (!strcmp(w, "check"))
    pb->flags |= KLJIT_FLAG_CHECK_INPUTS;
  else
    return 0;
  return 1;
}

/* One "key=value" word. 1 ok, 0 bad (why filled with the accepted values). */
static int field_word(cli_shape *s, const char *key, const char *v, char *why, size_t cap) {
  kljit_problem *const pb = &s->pb;
  long long n = 0;
  int e = 0;
  char list[128];
  const char *want = NULL;
  if (!strcmp(key, "V")) {
    if (integer(v, 2, KLJIT_MAX_VOCAB, &n)) pb->vocab = n;
    else want = "an integer from 2 to 16777216";
  } else if (!strcmp(key, "H")) {
    if (integer(v, 1, KLJIT_MAX_HIDDEN, &n)) pb->hidden = n;
    else want = "an integer from 1 to 1048576";
  } else if (!strcmp(key, "N")) {
    if (integer(v, 1, 2147483647LL, &n)) s->rows = n;
    else want = "an integer from 1 to 2147483647";
  } else if (!strcmp(key, "tdt")) {
    if (!dtype_of(v, &pb->teacher_dtype)) want = "fp32, fp16 or bf16";
    s->teacher_dtype_given = 1;
  } else if (!strcmp(key, "gw")) {
    if (!dtype_of(v, &pb->grad_weight_dtype)) want = "fp32, fp16 or bf16";
  } else if (!strcmp(key, "T")) {
    if (!number(v, 1e-6, 1e6, &pb->temperature)) want = "a number from 1e-06 to 1e+06";
  } else if (!strcmp(key, "tt")) {
    if (!number(v, 0, 1e6, &pb->teacher_temperature)) want = "a number from 0 to 1e+06";
  } else if (!strcmp(key, "topk")) {
    if (integer(v, 1, KLJIT_MAX_TOPK, &n))
      pb->teacher = KLJIT_TEACHER_SPARSE_TOPK, pb->topk = (int32_t)n;
    else
      want = "an integer from 1 to 1024 (and at most V)";
  } else if (!strcmp(key, "values")) {
    if (!cli_choose(v, TOPK_VALUES, &e, list, sizeof list)) want = list;
    pb->topk_values = (kljit_topk_values)e;
  } else if (!strcmp(key, "tail")) {
    if (!cli_choose(v, TAILS, &e, list, sizeof list)) want = list;
    pb->tail = (kljit_tail)e;
  } else if (!strcmp(key, "ids")) {
    if (!cli_choose(v, ID_DTYPES, &e, list, sizeof list)) want = list;
    pb->topk_id_dtype = (kljit_dtype)e;
  } else if (!strcmp(key, "reduction")) {
    if (!cli_choose(v, CLI_REDUCTIONS, &e, list, sizeof list)) want = list;
    pb->reduction = (kljit_reduction)e;
  } else if (!strcmp(key, "accum")) {
    if (!cli_choose(v, ACCUMS, &e, list, sizeof list)) want = list;
    pb->grad_weight_accum = (kljit_grad_weight_accum)e;
  } else {
    snprintf(why, cap, "unknown field '%s'", key);
    return 0;
  }
  if (want) snprintf(why, cap, "%s=%s: want %s", key, v, want);
  return want == NULL;
}

int cli_shape_parse(cli_parser *p, const char *text, const char *where, cli_shape *s) {
  memset(s, 0, sizeof *s);
  const kljit_problem init = KLJIT_PROBLEM_INIT;
  s->pb = init;
  char why[512] = "";
  char copy[CLI_SHAPE_TEXT];
  if (snprintf(copy, sizeof copy, "%s", text) >= (int)sizeof copy) {
    snprintf(why, sizeof why, "longer than %d characters", CLI_SHAPE_TEXT - 1);
  } else {
    snprintf(s->text, sizeof s->text, "%s", text);
    for (char *save = NULL, *w = strtok_r(copy, ",", &save); w && !why[0];
         w = strtok_r(NULL, ",", &save)) {
      char *const eq = strchr(w, '=');
      if (!eq) {
        if (!flag_word(&s->pb, w)) snprintf(why, sizeof why, "unknown word '%s'", w);
        continue;
      }
      *eq = '\0';
      field_word(s, w, eq + 1, why, sizeof why);
    }
  }
  if (!why[0] && (!s->pb.vocab || !s->pb.hidden))
    snprintf(why, sizeof why, "V= and H= are required");
  if (!why[0]) {
    if (s->pb.teacher == KLJIT_TEACHER_SPARSE_TOPK && s->pb.teacher_dtype == KLJIT_BF16 &&
        !s->teacher_dtype_given)
      s->pb.teacher_dtype = KLJIT_FP32; /* top-K values usually come in fp32 */
    if (kljit_plan_check(&s->pb) != KLJIT_SUCCESS)
      snprintf(why, sizeof why, "%s", kljit_last_error());
  }
  if (why[0]) {
    cli_usage_error(p, "%sshape '%s': %s", where ? where : "", text, why);
    return 0;
  }
  return 1;
}

int cli_shape_file(cli_parser *p, const char *path, cli_shape *shapes, int *n, int cap) {
  FILE *f = fopen(path, "r");
  if (!f) return cli_usage_error(p, "--file %s: %s", path, strerror(errno)), 0;
  char line[1024], where[600];
  int lineno = 0, ok = 1;
  while (ok && fgets(line, sizeof line, f)) {
    lineno++;
    line[strcspn(line, "#\r\n")] = '\0';
    char *s = line;
    while (*s == ' ' || *s == '\t') s++;
    for (char *e = s + strlen(s); e > s && (e[-1] == ' ' || e[-1] == '\t');) *--e = '\0';
    if (!*s) continue;
    if (*n == cap) {
      cli_usage_error(p, "--file %s: more than %d shapes", path, cap);
      ok = 0;
      break;
    }
    snprintf(where, sizeof where, "%.500s:%d: ", path, lineno);
    ok = cli_shape_parse(p, s, where, &shapes[*n]);
    if (ok) ++*n;
  }
  fclose(f);
  return ok;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* cli_args.c — option parsing shared by the kljit commands, and the problem options. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_parser_init(cli_parser *p, int argc, char **argv) {
  memset(p, 0, sizeof *p);
  p->argc = argc, p->argv = argv, p->i = 1;
  p->cmd = argc > 0 ? argv[0] : "?";
}

int cli_next(cli_parser *p) {
  if (p->status != CLI_OK || p->help || p->i >= p->argc) return 0;
  if (p->operands_only) return 1;
  if (!strcmp(p->argv[p->i], "--")) {
    p->operands_only = 1;
    p->i++;
    return p->i < p->argc;
  }
  const char *const a = p->argv[p->i];
  if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
    p->help = 1;
    return 0;
  }
  return 1;
}

int cli_stopped(cli_parser *p, void (*usage)(FILE *)) {
  if (p->status != CLI_OK) return 1;
  if (!p->help) return 0;
  usage(stdout);
  return 1;
}

int cli_usage_error(cli_parser *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kljit %s: ", p->cmd);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(kljit %s --help lists the options)\n", p->cmd);
  va_end(ap);
  p->status = CLI_USAGE;
  return CLI_USAGE;
}

int cli_unknown(cli_parser *p) {
  const char *const a = p->argv[p->i];
  if (a[0] == '-' && !p->operands_only)
    cli_usage_error(p, "unknown option %s", a);
  else
    cli_usage_error(p, "unexpected argument '%s'", a);
  return 0;
}

/* Matches "--name" or "--name=VALUE". *inline_value is the text after '=' or NULL. */
static int match(const cli_parser *p, const char *name, const char **inline_value) {
  if (p->operands_only) return 0;
  const char *const a = p->argv[p->i];
  const size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return 0;
  if (a[n] == '\0') {
    *inline_value = NULL;
    return 1;
  }
  if (a[n] == '=') {
    *inline_value = a + n + 1;
    return 1;
  }
  return 0;
}

/* The value of a matched option (consumed with it), or NULL after reporting it missing. */
static const char *take_value(cli_parser *p, const char *name, const char *inline_value) {
  p->i++;
  if (inline_value) return inline_value;
  if (p->i >= p->argc) {
    cli_usage_error(p, "option %s needs a value", name);
    return NULL;
  }
  return p->argv[p->i++];
}

int cli_flag(cli_parser *p, const char *name) {
  const char *v;
  if (!match(p, name, &v)) return 0;
  if (v) {
    cli_usage_error(p, "option %s takes no value", name);
    return 1;
  }
  p->i++;
  return 1;
}

int cli_string(cli_parser *p, const char *name, const char **out) {
  const char *v;
  if (!match(p, name, &v)) return 0;
  if ((v = take_value(p, name, v))) {
    if (!*v)
      cli_usage_error(p, "option %s needs a non-empty value", name);
    else
      *out = v;
  }
  return 1;
}

int cli_int(cli_parser *p, const char *name, long long lo, long long hi, long long *out) {
  const char *v;
  if (!match(p, name, &v)) return 0;
  if (!(v = take_value(p, name, v))) return 1;
  char *end;
  errno = 0;
  const long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno || x < lo || x > hi)
    cli_usage_error(p, "%s %s: want an integer from %lld to %lld", name, v, lo, hi);
  else
    *out = x;
  return 1;
}

int cli_double(cli_parser *p, const char *name, double lo, double hi, double *out) {
  const char *v;
  if (!match(p, name, &v)) return 0;
  if (!(v = take_value(p, name, v))) return 1;
  char *end;
  const double x = strtod(v, &end);
  if (end == v || *end || !isfinite(x) || x < lo || x > hi)
    cli_usage_error(p, "%s %s: want a number from %g to %g", name, v, lo, hi);
  else
    *out = x;
  return 1;
}

int cli_choose(const char *v, const cli_choice *choices, int *out, char *list, size_t cap) {
  for (const cli_choice *c = choices; c->name; c++) {
    if (!strcmp(v, c->name)) {
      *out = c->value;
      return 1;
    }
  }
  list[0] = '\0';
  for (const cli_choice *c = choices; c->name; c++) {
    if (c != choices) strncat(list, c[1].name ? ", " : " or ", cap - strlen(list) - 1);
    strncat(list, c->name, cap - strlen(list) - 1);
  }
  return 0;
}

int cli_enum(cli_parser *p, const char *name, const cli_choice *choices, int *out) {
  const char *v;
  if (!match(p, name, &v)) return 0;
  if (!(v = take_value(p, name, v))) return 1;
  char list[256];
  if (!cli_choose(v, choices, out, list, sizeof list))
    cli_usage_error(p, "%s %s: want %s", name, v, list);
  return 1;
}

int cli_positional(cli_parser *p, const char **out) {
  const char *const a = p->argv[p->i];
  if (a[0] == '-' && a[1] != '\0' && !p->operands_only) return 0;
  *out = a;
  p->i++;
  return 1;
}

const char *cli_last_error(void) {
  const char *e = kljit_last_error();
  /* "kljit_precompile: " and the like: the command already says who it is */
  for (;;) {
    size_t n = strncmp(e, "kljit_", 6) == 0 ? 6 : 0;
    while (n && ((e[n] >= 'a' && e[n] <= 'z') || (e[n] >= '0' && e[n] <= '9') || e[n] == '_')) n++;
    if (!n || strncmp(e + n, ": ", 2) != 0) return e;
    e += n + 2;
  }
}

int cli_refused(cli_parser *p, const char *what, kljit_status st) {
  if (st == KLJIT_ERR_INVALID_ARGUMENT || st == KLJIT_ERR_UNSUPPORTED)
    return cli_usage_error(p, "%s: %s", what, cli_last_error());
  return cli_fail(what, st);
}

static void keep_writable(const char *dir, int writable, void *user) {
  if (writable) snprintf(user, 4096, "%s", dir);
}

kljit_status cli_cache_dir(const char *given, char dir[4096]) {
  dir[0] = '\0';
  if (given) {
    snprintf(dir, 4096, "%s", given);
    return KLJIT_SUCCESS;
  }
  return kljit_cache_dirs(keep_writable, dir);
}

int cli_fail(const char *what, kljit_status st) {
  fprintf(stderr, "kljit: %s: %s\n  %s\n", what, kljit_status_string(st), cli_last_error());
  return CLI_FAIL;
}

/* ---- problem options ---------------------------------------------------------------------- */

const char CLI_PROBLEM_HELP[] =
    "old problem options (still accepted; write a SHAPE instead):\n"
    "  --hidden H --vocab V --dtype D --teacher probs|logprobs|logits --temperature T\n"
    "  --runtime-temperature --t-squared --reduction R --bias --native-logits\n"
    "loss-family options (with a SHAPE or the old options):\n"
    "  --divergence forward|reverse|jsd     (default forward: KL(p || q)); --beta B for jsd\n"
    "  --hard-weight W --soft-weight W      loss = W_hard CE(labels) + W_soft divergence\n"
    "  --softcap C --teacher-softcap C      logit caps z -> C tanh(z / C) (default none)\n"
    "  --teacher-ld N                       a padded teacher: N >= V columns a row\n"
    "  --teacher-hidden HT [--teacher-bias] the online teacher: its logits x_t W_t^T (+ b_t)\n"
    "                                       per chunk, x_t [N, HT] (teacher dtype = inputs')\n";

void cli_problem_defaults(kljit_problem *pb) {
  const kljit_problem init = KLJIT_PROBLEM_INIT;
  *pb = init;
  pb->hidden = 4096, pb->vocab = 128256;
}

static const cli_choice DTYPES[] = {
    {"fp32", KLJIT_FP32}, {"fp16", KLJIT_FP16}, {"bf16", KLJIT_BF16}, {NULL, 0}};
static const cli_choice TEACHERS[] = {{"probs", KLJIT_TEACHER_DENSE_PROBS},
                                      {"logprobs", KLJIT_TEACHER_DENSE_LOGPROBS},
                                      {"logits", KLJIT_TEACHER_DENSE_LOGITS},
                                      {NULL, 0}};
static const cli_choice DIVERGENCES[] = {{"forward", KLJIT_DIVERGENCE_FORWARD_KL},
                                         {"reverse", KLJIT_DIVERGENCE_REVERSE_KL},
                                         {"jsd", KLJIT_DIVERGENCE_JSD},
                                         {NULL, 0}};
const cli_choice CLI_REDUCTIONS[] = {{"sum", KLJIT_REDUCTION_SUM},
                                     {"batchmean", KLJIT_REDUCTION_BATCHMEAN},
                                     {"mean", KLJIT_REDUCTION_MEAN},
                                     {"none", KLJIT_REDUCTION_NONE},
                                     {NULL, 0}};

/* The SHAPE word each old option stands for, for the note. */
static void old_spelling(cli_parser *p, const char *option, const char *word) {
  static int said;
  if (said++) return;
  fprintf(stderr, "kljit %s: note: %s is the old spelling of the SHAPE word %s (kljit %s --help)\n",
          p->cmd, option, word, p->cmd);
}

int cli_problem_option(cli_parser *p, kljit_problem *pb) {
  long long n = 0;
  int e;
  const char *const a = p->argv[p->i];
  if (!p->operands_only && !strncmp(a, "--", 2)) {
    static const char *const words[][2] = {{"--hidden", "H="},
                                           {"--vocab", "V="},
                                           {"--dtype", "fp32|fp16|bf16"},
                                           {"--teacher", "probs|logprobs|logits"},
                                           {"--reduction", "reduction="},
                                           {"--temperature", "T="},
                                           {"--runtime-temperature", "runtime"},
                                           {"--t-squared", "t2"},
                                           {"--bias", "bias"},
                                           {"--native-logits", "native"}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
      const size_t len = strlen(words[i][0]);
      if (!strncmp(a, words[i][0], len) && (a[len] == '\0' || a[len] == '='))
        old_spelling(p, words[i][0], words[i][1]);
    }
  }
  if (cli_int(p, "--hidden", 1, KLJIT_MAX_HIDDEN, &n)) {
    pb->hidden = n;
  } else if (cli_int(p, "--vocab", 2, KLJIT_MAX_VOCAB, &n)) {
    pb->vocab = n;
  } else if (cli_enum(p, "--dtype", DTYPES, &e)) {
    if (p->status == CLI_OK)
      pb->input_dtype = pb->weight_dtype = pb->teacher_dtype = (kljit_dtype)e;
  } else if (cli_enum(p, "--teacher", TEACHERS, &e)) {
    if (p->status == CLI_OK) pb->teacher = (kljit_teacher_form)e;
  } else if (cli_enum(p, "--reduction", CLI_REDUCTIONS, &e)) {
    if (p->status == CLI_OK) pb->reduction = (kljit_reduction)e;
  } else if (cli_double(p, "--temperature", 1e-6, 1e6, &pb->temperature)) {
  } else if (cli_flag(p, "--runtime-temperature")) {
    pb->temperature_mode = KLJIT_TEMPERATURE_RUNTIME;
  } else if (cli_flag(p, "--t-squared")) {
    pb->flags |= KLJIT_FLAG_SCALE_T_SQUARED;
  } else if (cli_flag(p, "--bias")) {
    pb->flags |= KLJIT_FLAG_BIAS;
  } else if (cli_flag(p, "--native-logits")) {
    pb->flags |= KLJIT_FLAG_NATIVE_LOGITS;
  } else {
    return 0;
  }
  return 1;
}

void cli_loss_defaults(cli_loss *l) {
  memset(l, 0, sizeof *l);
  l->divergence = KLJIT_DIVERGENCE_FORWARD_KL;
  l->soft_weight = 1.0;
}

int cli_loss_option(cli_parser *p, cli_loss *l) {
  long long n = 0;
  int e;
  if (cli_enum(p, "--divergence", DIVERGENCES, &e)) {
    if (p->status == CLI_OK) l->divergence = (kljit_divergence)e;
  } else if (cli_double(p, "--beta", 0.0, 1.0, &l->beta)) {
  } else if (cli_double(p, "--hard-weight", 0.0, 1e6, &l->hard_weight)) {
  } else if (cli_double(p, "--soft-weight", 0.0, 1e6, &l->soft_weight)) {
  } else if (cli_double(p, "--softcap", 1e-6, 1e6, &l->softcap)) {
  } else if (cli_double(p, "--teacher-softcap", 1e-6, 1e6, &l->teacher_softcap)) {
  } else if (cli_int(p, "--teacher-ld", 2, INT64_MAX, &n)) {
    l->teacher_ld = n;
  } else if (cli_int(p, "--teacher-hidden", 1, KLJIT_MAX_HIDDEN, &n)) {
    l->teacher_hidden = n;
  } else if (cli_flag(p, "--teacher-bias")) {
    l->teacher_bias = 1;
  } else {
    return 0;
  }
  return 1;
}

void cli_loss_apply(const cli_loss *l, kljit_problem *pb) {
  pb->divergence = l->divergence, pb->beta = l->beta;
  pb->hard_weight = l->hard_weight, pb->soft_weight = l->soft_weight;
  pb->softcap = l->softcap, pb->teacher_softcap = l->teacher_softcap;
  if (l->teacher_hidden) {
    /* the online teacher's head rows: a padded head is teacher_vocab rows, no stride */
    pb->teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb->teacher_hidden = l->teacher_hidden;
    if (l->teacher_ld) pb->teacher_vocab = l->teacher_ld;
  } else if (l->teacher_ld) {
    pb->teacher_vocab = pb->teacher_ld = l->teacher_ld;
  }
  if (l->teacher_bias) pb->flags |= KLJIT_FLAG_TEACHER_BIAS;
}

int cli_parse_archs(cli_parser *p, const char *text, int *archs, int cap) {
  int n = 0;
  for (const char *s = text; *s;) {
    const size_t len = strcspn(s, ",");
    const char *digits = !strncmp(s, "sm_", 3) ? s + 3 : s;
    char *end;
    const long a = strtol(digits, &end, 10);
    /* sm_90a / sm_100f: the same cubin (see cli.h) */
    if (end == s + len - 1 && end > digits && (*end == 'a' || *end == 'f')) {
      fprintf(stderr,
              "kljit %s: note: %.*s is compiled as sm_%ld: kljit's kernels use no "
              "arch-specific instructions, and every sm_%ld GPU loads that cubin\n",
              p->cmd, (int)len, s, a, a);
      end++;
    }
    if (len == 0 || end != s + len || digits == end || a < 1 || a > 1000) {
      cli_usage_error(p, "--arch %s: want a comma-separated list like sm_80,sm_90", text);
      return 0;
    }
    int dup = 0;
    for (int k = 0; k < n; k++) dup |= archs[k] == (int)a;
    if (!dup) {
      if (n == cap) {
        cli_usage_error(p, "--arch %s: at most %d architectures", text, cap);
        return 0;
      }
      archs[n++] = (int)a;
    }
    s += len;
    if (*s == ',') s++;
  }
  if (n == 0) cli_usage_error(p, "--arch is empty");
  return n;
}

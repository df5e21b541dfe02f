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
    "old problem options (still accepted; each is a SHAPE word, which is the way to write it):\n"
    "  --hidden H --vocab V --dtype D --teacher probs|logprobs|logits --temperature T\n"
    "  --runtime-temperature --t-squared --reduction R --bias --native-logits\n"
    "loss-family options (with a SHAPE or the old options; the SHAPE word in brackets):\n"
    "  --divergence forward|reverse|jsd  [div=]  jsd needs --beta B [beta=] in [0, 1]\n"
    "  --hard-weight W --soft-weight W   [hard= soft=] loss = W_hard CE + W_soft divergence\n"
    "  --softcap C --teacher-softcap C   [cap= tcap=] logit caps z -> C tanh(z / C)\n"
    "  --teacher-ld N                    [tv=] a padded teacher: N >= V columns a row\n"
    "  --teacher-hidden HT [--teacher-bias]  [hidden= tbias] the online teacher: its logits\n"
    "                                    x_t W_t^T (+ b_t) per chunk, x_t [N, HT]\n"
    "a word set both by an option and by a SHAPE is a contradiction (exit 2)\n";

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

static const char *name_of(const cli_choice *c, int v) {
  for (; c->name; c++)
    if (c->value == v) return c->name;
  return "?";
}

/* The SHAPE word each old problem option stands for, for the note (said once a process). */
static void old_spelling(cli_parser *p, const char *option, const char *word) {
  static int said;
  if (said++) return;
  fprintf(stderr, "kljit %s: note: %s is the old spelling of the SHAPE word %s (kljit %s --help)\n",
          p->cmd, option, word, p->cmd);
}

/* The name of the option the parser looks at ("--hidden" of "--hidden=4096"). */
static void option_name(const cli_parser *p, char out[32]) {
  const char *const a = p->argv[p->i];
  snprintf(out, 32, "%.*s", (int)strcspn(a, "="), a);
}

/* Records the word of a matched option; 0 (usage error) when that option was given before. */
static int add_word(cli_parser *p, cli_words *w, const char *option, const char *shown,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int add_word(cli_parser *p, cli_words *w, const char *option, const char *shown,
                    const char *fmt, ...) {
  if (p->status != CLI_OK) return 0;
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->option[i], option))
      return cli_usage_error(p, "%s is given twice ('%s' and '%s'): give each option once",
                             option, w->shown[i], shown), 0;
  if (w->n == CLI_WORDS_MAX) return cli_usage_error(p, "too many problem options"), 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->word[w->n], sizeof w->word[0], fmt, ap);
  va_end(ap);
  snprintf(w->shown[w->n], sizeof w->shown[0], "%s", shown);
  snprintf(w->option[w->n], sizeof w->option[0], "%s", option);
  w->n++;
  return 1;
}

/* The option and its value as given, after a matcher consumed them ("--hidden 4096"). */
static void shown_since(const cli_parser *p, int first, char out[96]) {
  out[0] = '\0';
  for (int i = first; i < p->i && i < p->argc; i++) {
    strncat(out, i > first ? " " : "", 95 - strlen(out));
    strncat(out, p->argv[i], 95 - strlen(out));
  }
}

int cli_problem_option(cli_parser *p, cli_words *w) {
  long long n = 0;
  int e = 0;
  double x = 0;
  const char *const a = p->argv[p->i];
  if (p->operands_only || strncmp(a, "--", 2) != 0) return 0;
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
  char opt[32], shown[96];
  option_name(p, opt);
  const int first = p->i;
  int matched = 1;
  if (cli_int(p, "--hidden", 1, KLJIT_MAX_HIDDEN, &n)) {
    shown_since(p, first, shown);
    add_word(p, w, opt, shown, "H=%lld", n);
  } else if (cli_int(p, "--vocab", 2, KLJIT_MAX_VOCAB, &n)) {
    shown_since(p, first, shown);
    add_word(p, w, opt, shown, "V=%lld", n);
  } else if (cli_enum(p, "--dtype", DTYPES, &e)) {
    shown_since(p, first, shown);
    add_word(p, w, opt, shown, "%s", name_of(DTYPES, e));
  } else if (cli_enum(p, "--teacher", TEACHERS, &e)) {
    shown_since(p, first, shown);
    add_word(p, w, opt, shown, "%s", name_of(TEACHERS, e));
  } else if (cli_enum(p, "--reduction", CLI_REDUCTIONS, &e)) {
    shown_since(p, first, shown);
    add_word(p, w, opt, shown, "reduction=%s", name_of(CLI_REDUCTIONS, e));
  } else if (cli_double(p, "--temperature", 1e-6, 1e6, &x)) {
    shown_since(p, first, shown);
    add_word(p, w, opt, shown, "T=%.17g", x);
  } else if (cli_flag(p, "--runtime-temperature")) {
    add_word(p, w, opt, opt, "runtime");
  } else if (cli_flag(p, "--t-squared")) {
    add_word(p, w, opt, opt, "t2");
  } else if (cli_flag(p, "--bias")) {
    add_word(p, w, opt, opt, "bias");
  } else if (cli_flag(p, "--native-logits")) {
    add_word(p, w, opt, opt, "native");
  } else {
    matched = 0;
  }
  return matched;
}

void cli_problem_words(cli_words *w) {
  int v = 0, h = 0;
  for (int i = 0; i < w->n; i++) v |= w->word[i][0] == 'V', h |= w->word[i][0] == 'H';
  /* the README's problem where the options do not say */
  if (!v && w->n < CLI_WORDS_MAX) {
    snprintf(w->word[w->n], sizeof w->word[0], "V=128256");
    snprintf(w->shown[w->n], sizeof w->shown[0], "V=128256 (the default)");
    snprintf(w->option[w->n++], sizeof w->option[0], "V=");
  }
  if (!h && w->n < CLI_WORDS_MAX) {
    snprintf(w->word[w->n], sizeof w->word[0], "H=4096");
    snprintf(w->shown[w->n], sizeof w->shown[0], "H=4096 (the default)");
    snprintf(w->option[w->n++], sizeof w->option[0], "H=");
  }
}

void cli_words_append(cli_words *to, const cli_words *from) {
  for (int i = 0; i < from->n && to->n < CLI_WORDS_MAX; i++, to->n++) {
    memcpy(to->word[to->n], from->word[i], sizeof to->word[0]);
    memcpy(to->shown[to->n], from->shown[i], sizeof to->shown[0]);
    memcpy(to->option[to->n], from->option[i], sizeof to->option[0]);
  }
}

int cli_loss_option(cli_parser *p, cli_words *w) {
  long long n = 0;
  int e = 0;
  double x = 0;
  const char *const a = p->argv[p->i];
  if (p->operands_only || strncmp(a, "--", 2) != 0) return 0;
  char opt[32], shown[96];
  option_name(p, opt);
  const int first = p->i;
  /* each option's SHAPE word: the grammar checks what goes together (cli_shape.c) */
  static const struct {
    const char *option, *key;
    double lo, hi;
  } REALS[] = {{"--beta", "beta", 0.0, 1.0},         {"--hard-weight", "hard", 0.0, 1e6},
               {"--soft-weight", "soft", 0.0, 1e6},  {"--softcap", "cap", 1e-6, 1e6},
               {"--teacher-softcap", "tcap", 1e-6, 1e6}};
  for (size_t i = 0; i < sizeof REALS / sizeof REALS[0]; i++)
    if (cli_double(p, REALS[i].option, REALS[i].lo, REALS[i].hi, &x)) {
      shown_since(p, first, shown);
      add_word(p, w, opt, shown, "%s=%.17g", REALS[i].key, x);
      return 1;
    }
  if (cli_enum(p, "--divergence", DIVERGENCES, &e)) {
    shown_since(p, first, shown);
    add_word(p, w, opt, shown, "div=%s", name_of(DIVERGENCES, e));
  } else if (cli_int(p, "--teacher-ld", 2, KLJIT_MAX_VOCAB, &n)) {
    /* the teacher's columns (a dense array's stride, the online teacher's head rows) */
    shown_since(p, first, shown);
    add_word(p, w, opt, shown, "tv=%lld", n);
  } else if (cli_int(p, "--teacher-hidden", 1, KLJIT_MAX_HIDDEN, &n)) {
    shown_since(p, first, shown);
    add_word(p, w, opt, shown, "hidden=%lld", n);
  } else if (cli_flag(p, "--teacher-bias")) {
    add_word(p, w, opt, opt, "tbias");
  } else {
    return 0;
  }
  return 1;
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

/* SPDX-License-Identifier: Apache-2.0 */
/* cli_shape.c — the problem grammar every command takes: "V=128256,H=4096,bf16,dense,N=8192".
 *
 * One shape is one comma-separated argument (or one line of a --file); its words are listed in
 * CLI_SHAPE_HELP and docs/wisdom.md, and together they carry the whole kljit_problem (the loss
 * family included). Every word sets one aspect of the problem (a "slot"): a slot set twice is an
 * error naming both words ("'probs' and 'topk=8' contradict"), never last-one-wins. A word that
 * only means something with another (a divergence's parameter, a top-K tail, the online
 * teacher's bias) is an error without it, and a divergence that takes a parameter is an error
 * without that parameter. Values are checked against the ranges the library enforces, and the
 * finished problem against kljit_plan_check itself, so every value the library would refuse is a
 * usage error (exit 2) with the library's sentence, before any command does work.
 *
 * The old problem options (--hidden, --divergence, ...) become words too (cli_args.c): they go
 * through the same rules, named by the option in messages.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

const char CLI_SHAPE_HELP[] =
    "SHAPE: comma-separated words, e.g. V=128256,H=4096,bf16,dense,N=8192 (docs/wisdom.md);\n"
    "each aspect at most once (two words for one are an error)\n"
    "  V=<vocab> H=<hidden>           required; V in [2, 16777216], H in [1, 1048576]\n"
    "  N=<tokens>                     tokens per call, in [1, 2147483647]\n"
    "  fp32|fp16|bf16                 inputs, weight and teacher dtype (default bf16)\n"
    "  tdt=fp32|fp16|bf16             teacher dtype alone (top-K values: fp32 unless given)\n"
    "  dense|probs|logprobs|logits    dense teacher form (dense = probs, the default)\n"
    "  topk=K [values=probs|logprobs] [tail=none|renorm|bucket] [ids=i32|i64]\n"
    "                                 sparse top-K teacher, K in [1, min(V, 1024)]\n"
    "  hidden=HT [tbias]              the online teacher: logits x_t W_t^T (+ b_t), Ht = HT\n"
    "  tv=VT tld=LD                   padded teacher: VT >= V columns (online: head rows),\n"
    "                                 rows LD >= VT apart (dense arrays only)\n"
    "  div=forward|reverse|jsd|tvd|skew-forward|skew-reverse\n"
    "                                 divergence (default forward); jsd needs beta=B in [0, 1],\n"
    "                                 the skew KLs alpha=A in [0, 1)\n"
    "  hard=W soft=W                  loss = W_hard CE(labels) + W_soft divergence (0 and 1)\n"
    "  ls=L zloss=Z                   the CE's label smoothing L in [0, 1], z-loss (need hard=)\n"
    "  cap=C tcap=C                   logit softcaps z -> C tanh(z / C) (tcap: teacher logits)\n"
    "  T=<t> tt=<t> runtime t2        temperature, teacher temperature, T per call, T^2\n"
    "  reduction=sum|batchmean|mean|none  labels=i32|i64 ignore=<id> eps=<e>\n"
    "  bias native tf32 check roww precise\n"
    "                                 problem flags (roww: per-row weights; precise: the\n"
    "                                 logits GEMM's promoted accumulation)\n"
    "  gw=fp32|fp16|bf16 accum=fp32|out|auto  dW dtype and accumulation\n"
    "  vtot=V voff=O shards=S         one shard of a vocabulary-parallel head (experimental)\n";

/* ---- slots: the aspects of a problem, each set by one word at most ------------------------- */

typedef enum slot {
  SL_V, SL_H, SL_N, SL_DTYPE, SL_TDT, SL_TEACHER, SL_VALUES, SL_TAIL, SL_IDS, SL_TBIAS, SL_TV,
  SL_TLD, SL_DIV, SL_BETA, SL_ALPHA, SL_HARD, SL_SOFT, SL_LS, SL_ZLOSS, SL_CAP, SL_TCAP, SL_T,
  SL_TT, SL_TMODE, SL_T2, SL_REDUCTION, SL_LABELS, SL_IGNORE, SL_EPS, SL_BIAS, SL_NATIVE, SL_TF32,
  SL_CHECK, SL_ROWW, SL_PRECISE, SL_GW, SL_ACCUM, SL_VTOT, SL_VOFF, SL_SHARDS, SL_COUNT
} slot;

static const char *const SLOT_WHAT[SL_COUNT] = {
    "the vocabulary size", "the hidden size", "the token count", "the dtype",
    "the teacher dtype", "the teacher form", "the top-K values' kind", "the top-K tail",
    "the top-K ids' dtype", "the online teacher's bias", "the teacher's columns",
    "the teacher's row stride", "the divergence", "the JSD's beta", "the skew KLs' alpha",
    "the CE's weight", "the divergence's weight", "the CE's label smoothing", "the CE's z-loss",
    "the student softcap", "the teacher softcap", "the temperature", "the teacher temperature",
    "the temperature mode", "T^2 scaling", "the reduction", "the labels' dtype",
    "the ignore index", "eps", "the bias flag", "native logits", "TF32", "checked mode",
    "row weights", "precise accumulation", "the dW dtype", "the dW accumulation",
    "the global vocabulary", "the shard's offset", "the shard count"};

/* The problem flags a word sets, in the order a shape is written (tbias is written beside the
 * online teacher's hidden=). */
static const struct {
  const char *word;
  slot sl;
  uint32_t flag;
} FLAG_WORDS[] = {{"t2", SL_T2, KLJIT_FLAG_SCALE_T_SQUARED},
                  {"bias", SL_BIAS, KLJIT_FLAG_BIAS},
                  {"native", SL_NATIVE, KLJIT_FLAG_NATIVE_LOGITS},
                  {"tf32", SL_TF32, KLJIT_FLAG_ALLOW_TF32},
                  {"check", SL_CHECK, KLJIT_FLAG_CHECK_INPUTS},
                  {"tbias", SL_TBIAS, KLJIT_FLAG_TEACHER_BIAS},
                  {"roww", SL_ROWW, KLJIT_FLAG_ROW_WEIGHTS},
                  {"precise", SL_PRECISE, KLJIT_FLAG_PRECISE_ACCUMULATION}};
#define N_FLAG_WORDS (sizeof FLAG_WORDS / sizeof FLAG_WORDS[0])

/* The divergences and the slot of the parameter each takes (SL_COUNT: none). */
static const struct {
  const char *name;
  kljit_divergence value;
  slot param;
} DIVS[] = {{"forward", KLJIT_DIVERGENCE_FORWARD_KL, SL_COUNT},
            {"reverse", KLJIT_DIVERGENCE_REVERSE_KL, SL_COUNT},
            {"jsd", KLJIT_DIVERGENCE_JSD, SL_BETA},
            {"tvd", KLJIT_DIVERGENCE_TVD, SL_COUNT},
            {"skew-forward", KLJIT_DIVERGENCE_SKEW_FORWARD_KL, SL_ALPHA},
            {"skew-reverse", KLJIT_DIVERGENCE_SKEW_REVERSE_KL, SL_ALPHA}};
enum { N_DIVS = sizeof DIVS / sizeof DIVS[0] };

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

/* One parse: the problem so far, the word that set each slot (as written, or the option it
 * came from), and the first error. */
typedef struct shape_state {
  cli_shape *s;
  char by[SL_COUNT][96];
  char why[512];
} shape_state;

static int fail(shape_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(shape_state *st, const char *fmt, ...) {
  if (!st->why[0]) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->why, sizeof st->why, fmt, ap);
    va_end(ap);
  }
  return 0;
}

/* Marks `sl` as set by `shown`: 0 (and why) when another word set it already. */
static int claim(shape_state *st, slot sl, const char *shown) {
  if (st->by[sl][0])
    return !strcmp(st->by[sl], shown)
               ? fail(st, "'%s' is given twice", shown)
               : fail(st, "'%s' and '%s' contradict: both set %s", st->by[sl], shown,
                      SLOT_WHAT[sl]);
  snprintf(st->by[sl], sizeof st->by[sl], "%s", shown);
  return 1;
}

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

/* One word without '='. 1 ok, 0 unknown or refused (why set when refused). */
static int flag_word(shape_state *st, const char *w, const char *shown) {
  kljit_problem *const pb = &st->s->pb;
  kljit_dtype dt;
  for (size_t i = 0; i < N_FLAG_WORDS; i++)
    if (!strcmp(w, FLAG_WORDS[i].word)) {
      pb->flags |= FLAG_WORDS[i].flag;
      return claim(st, FLAG_WORDS[i].sl, shown);
    }
  if (dtype_of(w, &dt)) {
    pb->input_dtype = pb->weight_dtype = dt;
    if (!st->by[SL_TDT][0]) pb->teacher_dtype = dt;
    return claim(st, SL_DTYPE, shown);
  }
  const kljit_teacher_form form = !strcmp(w, "dense") || !strcmp(w, "probs")
                                      ? KLJIT_TEACHER_DENSE_PROBS
                                  : !strcmp(w, "logprobs") ? KLJIT_TEACHER_DENSE_LOGPROBS
                                  : !strcmp(w, "logits")   ? KLJIT_TEACHER_DENSE_LOGITS
                                                           : (kljit_teacher_form)0;
  if (form) {
    pb->teacher = form;
    return claim(st, SL_TEACHER, shown);
  }
  if (!strcmp(w, "runtime")) {
    pb->temperature_mode = KLJIT_TEMPERATURE_RUNTIME;
    return claim(st, SL_TMODE, shown);
  }
  return 0;
}

/* A choice among `choices` into *out (an enum of the problem). */
static int choose(shape_state *st, const char *key, const char *v, const cli_choice *choices,
                  int *out) {
  char list[160];
  int e = 0;
  if (!cli_choose(v, choices, &e, list, sizeof list))
    return fail(st, "%s=%s: want %s", key, v, list);
  *out = e;
  return 1;
}

/* One "key=value" word. 1 ok, 0 bad (why set). */
static int field_word(shape_state *st, const char *key, const char *v, const char *shown) {
  kljit_problem *const pb = &st->s->pb;
  long long n = 0;
  int e = 0;
  const char *want = NULL;
  slot sl = SL_COUNT;
  if (!strcmp(key, "V")) {
    sl = SL_V;
    if (integer(v, 2, KLJIT_MAX_VOCAB, &n)) pb->vocab = n;
    else want = "an integer from 2 to 16777216";
  } else if (!strcmp(key, "H")) {
    sl = SL_H;
    if (integer(v, 1, KLJIT_MAX_HIDDEN, &n)) pb->hidden = n;
    else want = "an integer from 1 to 1048576";
  } else if (!strcmp(key, "N")) {
    sl = SL_N;
    if (integer(v, 1, 2147483647LL, &n)) st->s->rows = n;
    else want = "an integer from 1 to 2147483647";
  } else if (!strcmp(key, "tdt") || !strcmp(key, "gw")) {
    const int teacher = key[0] == 't';
    sl = teacher ? SL_TDT : SL_GW;
    if (!dtype_of(v, teacher ? &pb->teacher_dtype : &pb->grad_weight_dtype))
      want = "fp32, fp16 or bf16";
  } else if (!strcmp(key, "T") || !strcmp(key, "tt")) {
    const int teacher = key[0] == 't';
    sl = teacher ? SL_TT : SL_T;
    if (!number(v, teacher ? 0 : 1e-6, 1e6, teacher ? &pb->teacher_temperature : &pb->temperature))
      want = teacher ? "a number from 0 to 1e+06" : "a number from 1e-06 to 1e+06";
  } else if (!strcmp(key, "topk")) {
    sl = SL_TEACHER;
    if (integer(v, 1, KLJIT_MAX_TOPK, &n))
      pb->teacher = KLJIT_TEACHER_SPARSE_TOPK, pb->topk = (int32_t)n;
    else
      want = "an integer from 1 to 1024 (and at most V)";
  } else if (!strcmp(key, "hidden")) {
    sl = SL_TEACHER;
    if (integer(v, 1, KLJIT_MAX_HIDDEN, &n))
      pb->teacher = KLJIT_TEACHER_DENSE_HIDDEN, pb->teacher_hidden = n;
    else
      want = "an integer from 1 to 1048576 (the online teacher's hidden size)";
  } else if (!strcmp(key, "tv") || !strcmp(key, "tld")) {
    const int ld = key[1] == 'l';
    sl = ld ? SL_TLD : SL_TV;
    if (integer(v, 2, ld ? 2LL * KLJIT_MAX_VOCAB : KLJIT_MAX_VOCAB, &n))
      *(ld ? &pb->teacher_ld : &pb->teacher_vocab) = n;
    else
      want = ld ? "an integer from 2 to 33554432" : "an integer from 2 to 16777216";
  } else if (!strcmp(key, "div")) {
    sl = SL_DIV;
    int i = 0;
    while (i < N_DIVS && strcmp(v, DIVS[i].name)) i++;
    if (i < N_DIVS) pb->divergence = DIVS[i].value;
    else want = "forward, reverse, jsd, tvd, skew-forward or skew-reverse";
  } else if (!strcmp(key, "beta")) {
    sl = SL_BETA;
    if (!number(v, 0, 1, &pb->beta)) want = "a number from 0 to 1";
  } else if (!strcmp(key, "alpha")) {
    sl = SL_ALPHA;
    if (!number(v, 0, 1, &pb->skew_alpha) || pb->skew_alpha >= 1)
      want = "a number in [0, 1)";
  } else if (!strcmp(key, "ls") || !strcmp(key, "zloss")) {
    sl = key[0] == 'l' ? SL_LS : SL_ZLOSS;
    if (!number(v, 0, sl == SL_LS ? 1 : 1e6, sl == SL_LS ? &pb->label_smoothing : &pb->z_loss))
      want = sl == SL_LS ? "a number from 0 to 1" : "a number from 0 to 1e+06";
  } else if (!strcmp(key, "hard") || !strcmp(key, "soft")) {
    sl = key[0] == 'h' ? SL_HARD : SL_SOFT;
    if (!number(v, 0, 1e6, sl == SL_HARD ? &pb->hard_weight : &pb->soft_weight))
      want = "a number from 0 to 1e+06";
  } else if (!strcmp(key, "cap") || !strcmp(key, "tcap")) {
    sl = key[0] == 't' ? SL_TCAP : SL_CAP;
    if (!number(v, 1e-6, 1e6, sl == SL_TCAP ? &pb->teacher_softcap : &pb->softcap))
      want = "a number from 1e-06 to 1e+06";
  } else if (!strcmp(key, "ignore")) {
    sl = SL_IGNORE;
    if (integer(v, INT64_MIN, INT64_MAX, &n)) pb->ignore_index = n;
    else want = "an integer";
  } else if (!strcmp(key, "eps")) {
    sl = SL_EPS;
    if (!number(v, 1e-30, 1e-3, &pb->eps) || pb->eps >= 1e-3) want = "a number in [1e-30, 1e-3)";
  } else if (!strcmp(key, "vtot") || !strcmp(key, "voff") || !strcmp(key, "shards")) {
    sl = key[0] == 's' ? SL_SHARDS : key[1] == 't' ? SL_VTOT : SL_VOFF;
    const long long lo = sl == SL_VOFF ? 0 : sl == SL_SHARDS ? 1 : 2;
    const long long hi = sl == SL_SHARDS ? 1024 : KLJIT_MAX_VOCAB;
    if (!integer(v, lo, hi, &n))
      want = sl == SL_SHARDS ? "an integer from 1 to 1024"
             : sl == SL_VOFF ? "an integer from 0 to 16777216"
                             : "an integer from 2 to 16777216";
    else if (sl == SL_SHARDS)
      pb->shards = (int32_t)n;
    else
      *(sl == SL_VTOT ? &pb->vocab_total : &pb->vocab_offset) = n;
  } else {
    const struct {
      const char *key;
      slot sl;
      const cli_choice *choices;
    } ENUMS[] = {{"values", SL_VALUES, TOPK_VALUES}, {"tail", SL_TAIL, TAILS},
                 {"ids", SL_IDS, ID_DTYPES},         {"labels", SL_LABELS, ID_DTYPES},
                 {"reduction", SL_REDUCTION, CLI_REDUCTIONS}, {"accum", SL_ACCUM, ACCUMS}};
    for (size_t i = 0; i < sizeof ENUMS / sizeof ENUMS[0] && sl == SL_COUNT; i++) {
      if (strcmp(key, ENUMS[i].key) != 0) continue;
      sl = ENUMS[i].sl;
      if (!choose(st, key, v, ENUMS[i].choices, &e)) return 0;
      switch (sl) {
        case SL_VALUES: pb->topk_values = (kljit_topk_values)e; break;
        case SL_TAIL: pb->tail = (kljit_tail)e; break;
        case SL_IDS: pb->topk_id_dtype = (kljit_dtype)e; break;
        case SL_LABELS: pb->label_dtype = (kljit_dtype)e; break;
        case SL_REDUCTION: pb->reduction = (kljit_reduction)e; break;
        default: pb->grad_weight_accum = (kljit_grad_weight_accum)e; break;
      }
    }
    if (sl == SL_COUNT) return fail(st, "unknown field '%s'", key);
  }
  if (want) return fail(st, "%s=%s: want %s", key, v, want);
  return claim(st, sl, shown);
}

/* One word of a shape (mutable: '=' is cut); `shown` names it in messages. */
static int one_word(shape_state *st, char *w, const char *shown) {
  char *const eq = strchr(w, '=');
  if (!eq) return flag_word(st, w, shown) || fail(st, "unknown word '%s'", shown);
  *eq = '\0';
  return field_word(st, w, eq + 1, shown);
}

/* The words that only mean something with another. */
static int check_pairs(shape_state *st) {
  const kljit_problem *const pb = &st->s->pb;
  const int topk = pb->teacher == KLJIT_TEACHER_SPARSE_TOPK;
  const int online = pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN;
  const int logits = online || pb->teacher == KLJIT_TEACHER_DENSE_LOGITS;
  static const slot TOPK_ONLY[] = {SL_VALUES, SL_TAIL, SL_IDS};
  for (size_t i = 0; i < 3; i++)
    if (st->by[TOPK_ONLY[i]][0] && !topk)
      return fail(st, "'%s' is for the top-K teacher: add topk=K", st->by[TOPK_ONLY[i]]);
  if (st->by[SL_TBIAS][0] && !online)
    return fail(st, "'%s' is the online teacher's bias: add hidden=HT", st->by[SL_TBIAS]);
  if (st->by[SL_TT][0] && !logits)
    return fail(st, "'%s' is a logits teacher's temperature: add logits or hidden=HT",
                st->by[SL_TT]);
  if (st->by[SL_TCAP][0] && !logits)
    return fail(st, "'%s' caps a logits teacher: add logits or hidden=HT", st->by[SL_TCAP]);
  if (st->by[SL_TV][0] && topk)
    return fail(st, "'%s' pads a dense teacher's rows; the top-K teacher's ids index V",
                st->by[SL_TV]);
  for (slot sl = SL_LS; sl <= SL_ZLOSS; sl++)
    if (st->by[sl][0] && !st->by[SL_HARD][0])
      return fail(st, "'%s' is a term of the hard-label CE: add hard=W", st->by[sl]);
  if (st->by[SL_TLD][0] && (topk || online))
    return fail(st, "'%s' is a dense teacher array's row stride; the %s has none", st->by[SL_TLD],
                topk ? "top-K teacher" : "online teacher (tv=VT sets its head's rows)");
  /* a divergence's parameter needs that divergence, and the divergence its parameter */
  int d = 0;
  while (d < N_DIVS && DIVS[d].value != pb->divergence) d++;
  for (int i = 0; i < N_DIVS; i++) {
    const slot param = DIVS[i].param;
    if (param == SL_COUNT || !st->by[param][0] || (d < N_DIVS && DIVS[d].param == param))
      continue;
    if (param == SL_ALPHA)
      return fail(st, "'%s' is the parameter of the skew KLs: add div=skew-forward or "
                  "div=skew-reverse", st->by[param]);
    return fail(st, "'%s' is the parameter of div=%s: add div=%s", st->by[param], DIVS[i].name,
                DIVS[i].name);
  }
  if (d < N_DIVS && DIVS[d].param != SL_COUNT && !st->by[DIVS[d].param][0])
    return fail(st, "'%s' needs its parameter: add %s", st->by[SL_DIV],
                DIVS[d].param == SL_BETA ? "beta=B (B in [0, 1])" : "alpha=A (A in [0, 1))");
  return 1;
}

int cli_shape_parse(cli_parser *p, const char *text, const cli_words *extra, const char *where,
                    cli_shape *s) {
  memset(s, 0, sizeof *s);
  const kljit_problem init = KLJIT_PROBLEM_INIT;
  s->pb = init;
  static shape_state st; /* 3.5 KiB; the CLI parses on one thread */
  memset(&st, 0, sizeof st);
  st.s = s;
  char copy[CLI_SHAPE_TEXT];
  if (snprintf(copy, sizeof copy, "%s", text) >= (int)sizeof copy) {
    fail(&st, "longer than %d characters", CLI_SHAPE_TEXT - 1);
  } else {
    snprintf(s->text, sizeof s->text, "%s", text);
    for (char *save = NULL, *w = strtok_r(copy, ",", &save); w && !st.why[0];
         w = strtok_r(NULL, ",", &save)) {
      char shown[96];
      snprintf(shown, sizeof shown, "%s", w);
      one_word(&st, w, shown);
    }
  }
  for (int i = 0; extra && i < extra->n && !st.why[0]; i++) {
    char w[sizeof extra->word[0]];
    snprintf(w, sizeof w, "%s", extra->word[i]);
    one_word(&st, w, extra->shown[i]);
  }
  if (!st.why[0] && (!s->pb.vocab || !s->pb.hidden)) fail(&st, "V= and H= are required");
  if (!st.why[0]) check_pairs(&st);
  if (!st.why[0]) {
    if (s->pb.teacher == KLJIT_TEACHER_SPARSE_TOPK && !st.by[SL_TDT][0])
      s->pb.teacher_dtype = KLJIT_FP32; /* top-K values usually come in fp32 */
    if (kljit_plan_check(&s->pb) != KLJIT_SUCCESS) fail(&st, "%s", cli_last_error());
  }
  if (st.why[0]) {
    const char *const sep = text[0] && extra && extra->n ? " with " : "";
    char opts[512] = "";
    for (int i = 0; extra && i < extra->n; i++) {
      strncat(opts, i ? " " : "", sizeof opts - strlen(opts) - 1);
      strncat(opts, extra->shown[i], sizeof opts - strlen(opts) - 1);
    }
    if (text[0])
      cli_usage_error(p, "%sshape '%s'%s%s: %s", where ? where : "", text, sep, sep[0] ? opts : "",
                      st.why);
    else
      cli_usage_error(p, "%sproblem: %s", where ? where : "", st.why);
    return 0;
  }
  return 1;
}

/* The longest line --file reads: far past any shape and comment, short of reading a whole
 * stray file as one line. */
enum { SHAPE_LINE_MAX = 65536 };

/* F opened for reading, or NULL after the usage error: a regular file only. The open never
 * blocks (a FIFO without a writer hung fopen) and a device, a directory or a pipe is refused by
 * name (a link to /dev/zero never ended, /dev/urandom read as shapes of random bytes). */
static FILE *open_shape_file(cli_parser *p, const char *path) {
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return cli_usage_error(p, "--file %s: %s", path, strerror(errno)), NULL;
  struct stat st;
  const char *what = NULL;
  if (fstat(fd, &st) != 0)
    what = strerror(errno);
  else if (S_ISFIFO(st.st_mode))
    what = "a FIFO or pipe, not a regular file";
  else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
    what = "a device, not a regular file";
  else if (S_ISDIR(st.st_mode))
    what = "a directory, not a regular file";
  else if (!S_ISREG(st.st_mode))
    what = "not a regular file";
  if (!what) {
    FILE *f = fdopen(fd, "r");
    if (f) return f;
    what = strerror(errno);
  }
  close(fd);
  cli_usage_error(p, "--file %s: %s", path, what);
  return NULL;
}

int cli_shape_file(cli_parser *p, const char *path, const cli_words *extra, cli_shape *shapes,
                   int *n, int cap) {
  FILE *f = open_shape_file(p, path);
  if (!f) return 0;
  char *line = NULL, where[600];
  size_t line_cap = 0;
  int lineno = 0, ok = 1;
  ssize_t len;
  /* getline: each line whole (fgets into a fixed buffer split long ones, and the tail of a long
   * comment was read as a shape) */
  while (ok && (len = getline(&line, &line_cap, f)) >= 0) {
    lineno++;
    if (len > SHAPE_LINE_MAX) {
      cli_usage_error(p, "--file %.500s:%d: the line is longer than %d bytes", path, lineno,
                      SHAPE_LINE_MAX);
      ok = 0;
      break;
    }
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
    ok = cli_shape_parse(p, s, extra, where, &shapes[*n]);
    if (ok) ++*n;
  }
  free(line);
  fclose(f);
  return ok;
}

/* ---- the canonical text of a problem ------------------------------------------------------- */

/* The shortest %g form that reads back as the same double, without an exponent where the
 * number is written as plainly ("30", not "3e+01"). */
static void shortest(double x, char *out, size_t cap) {
  const int plain = fabs(x) >= 1e-4 && fabs(x) < 1e15;
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(out, cap, "%.*g", digits, x);
    if (strtod(out, NULL) == x && (!plain || !strchr(out, 'e'))) return;
  }
  snprintf(out, cap, "%.17g", x);
}

static const char *dtype_word(kljit_dtype dt) {
  return dt == KLJIT_FP32 ? "fp32" : dt == KLJIT_FP16 ? "fp16" : "bf16";
}

static const char *choice_name(const cli_choice *c, int v) {
  for (; c->name; c++)
    if (c->value == v) return c->name;
  return "?";
}

typedef struct text_out {
  char *p;
  size_t cap, n;
} text_out;

static void word(text_out *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void word(text_out *t, const char *fmt, ...) {
  if (t->n + 2 >= t->cap) return;
  if (t->n) t->p[t->n++] = ',';
  va_list ap;
  va_start(ap, fmt);
  const int w = vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
  va_end(ap);
  t->n = w < 0 ? t->n : t->n + (size_t)w < t->cap ? t->n + (size_t)w : t->cap - 1;
}

static void real_word(text_out *t, const char *key, double x) {
  char v[32];
  shortest(x, v, sizeof v);
  word(t, "%s=%s", key, v);
}

void cli_shape_format(const kljit_problem *pb, long long rows, char *out, size_t cap) {
  const kljit_problem d = KLJIT_PROBLEM_INIT;
  text_out t = {out, cap, 0};
  out[0] = '\0';
  word(&t, "V=%lld", (long long)pb->vocab);
  word(&t, "H=%lld", (long long)pb->hidden);
  if (rows) word(&t, "N=%lld", rows);
  if (pb->input_dtype != d.input_dtype) word(&t, "%s", dtype_word(pb->input_dtype));
  const int topk = pb->teacher == KLJIT_TEACHER_SPARSE_TOPK;
  const kljit_dtype implied = topk ? KLJIT_FP32 : pb->input_dtype;
  if (pb->teacher_dtype != implied) word(&t, "tdt=%s", dtype_word(pb->teacher_dtype));
  switch (pb->teacher) {
    case KLJIT_TEACHER_DENSE_LOGPROBS: word(&t, "logprobs"); break;
    case KLJIT_TEACHER_DENSE_LOGITS: word(&t, "logits"); break;
    case KLJIT_TEACHER_DENSE_HIDDEN: word(&t, "hidden=%lld", (long long)pb->teacher_hidden); break;
    case KLJIT_TEACHER_SPARSE_TOPK:
      word(&t, "topk=%d", (int)pb->topk);
      if (pb->topk_values != d.topk_values)
        word(&t, "values=%s", choice_name(TOPK_VALUES, pb->topk_values));
      if (pb->tail != d.tail) word(&t, "tail=%s", choice_name(TAILS, pb->tail));
      if (pb->topk_id_dtype != d.topk_id_dtype)
        word(&t, "ids=%s", choice_name(ID_DTYPES, pb->topk_id_dtype));
      break;
    default: break;
  }
  if (pb->flags & KLJIT_FLAG_TEACHER_BIAS) word(&t, "tbias");
  if (pb->teacher_vocab) word(&t, "tv=%lld", (long long)pb->teacher_vocab);
  if (pb->teacher_ld) word(&t, "tld=%lld", (long long)pb->teacher_ld);
  if (pb->divergence != d.divergence)
    for (int i = 0; i < N_DIVS; i++)
      if (DIVS[i].value == pb->divergence) word(&t, "div=%s", DIVS[i].name);
  if (pb->divergence == KLJIT_DIVERGENCE_JSD) real_word(&t, "beta", pb->beta);
  if (pb->divergence == KLJIT_DIVERGENCE_SKEW_FORWARD_KL ||
      pb->divergence == KLJIT_DIVERGENCE_SKEW_REVERSE_KL)
    real_word(&t, "alpha", pb->skew_alpha);
  if (pb->hard_weight != d.hard_weight) real_word(&t, "hard", pb->hard_weight);
  if (pb->label_smoothing != d.label_smoothing) real_word(&t, "ls", pb->label_smoothing);
  if (pb->z_loss != d.z_loss) real_word(&t, "zloss", pb->z_loss);
  if (pb->soft_weight != d.soft_weight) real_word(&t, "soft", pb->soft_weight);
  if (pb->softcap != d.softcap) real_word(&t, "cap", pb->softcap);
  if (pb->teacher_softcap != d.teacher_softcap) real_word(&t, "tcap", pb->teacher_softcap);
  if (pb->temperature != d.temperature) real_word(&t, "T", pb->temperature);
  if (pb->teacher_temperature != d.teacher_temperature)
    real_word(&t, "tt", pb->teacher_temperature);
  if (pb->temperature_mode == KLJIT_TEMPERATURE_RUNTIME) word(&t, "runtime");
  if (pb->reduction != d.reduction)
    word(&t, "reduction=%s", choice_name(CLI_REDUCTIONS, pb->reduction));
  if (pb->label_dtype != d.label_dtype)
    word(&t, "labels=%s", choice_name(ID_DTYPES, pb->label_dtype));
  if (pb->ignore_index != d.ignore_index) word(&t, "ignore=%lld", (long long)pb->ignore_index);
  if (pb->eps != d.eps) real_word(&t, "eps", pb->eps);
  for (size_t i = 0; i < N_FLAG_WORDS; i++)
    if (pb->flags & FLAG_WORDS[i].flag && FLAG_WORDS[i].flag != KLJIT_FLAG_TEACHER_BIAS)
      word(&t, "%s", FLAG_WORDS[i].word);
  if (pb->grad_weight_dtype != d.grad_weight_dtype)
    word(&t, "gw=%s", dtype_word(pb->grad_weight_dtype));
  if (pb->grad_weight_accum != d.grad_weight_accum)
    word(&t, "accum=%s", choice_name(ACCUMS, pb->grad_weight_accum));
  if (pb->vocab_total) word(&t, "vtot=%lld", (long long)pb->vocab_total);
  if (pb->vocab_offset) word(&t, "voff=%lld", (long long)pb->vocab_offset);
  if (pb->shards != d.shards) word(&t, "shards=%d", (int)pb->shards);
}

/* ---- every field, for `kljit demo` --------------------------------------------------------- */

static const char *dtype_name(kljit_dtype dt) {
  static const char *const NAMES[] = {"?", "FP32", "FP16", "BF16", "INT32", "INT64"};
  return dt >= KLJIT_FP32 && dt <= KLJIT_INT64 ? NAMES[dt] : "?";
}

static const char *teacher_name(kljit_teacher_form t) {
  static const char *const NAMES[] = {"?", "DENSE_PROBS", "DENSE_LOGPROBS", "DENSE_LOGITS",
                                      "SPARSE_TOPK", "DENSE_HIDDEN"};
  return t >= KLJIT_TEACHER_DENSE_PROBS && t <= KLJIT_TEACHER_DENSE_HIDDEN ? NAMES[t] : "?";
}

/* Appends "name=value" to a line of f, wrapping before 100 columns. */
static void field(FILE *f, int *col, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void field(FILE *f, int *col, const char *name, const char *fmt, ...) {
  char v[64], text[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, sizeof v, fmt, ap);
  va_end(ap);
  const int n = snprintf(text, sizeof text, "%s=%s", name, v);
  if (*col > 2 && *col + 1 + n > 99) fputc('\n', f), *col = 0;
  *col += fprintf(f, "%s%s", *col ? " " : "  ", text);
}

void cli_problem_print(FILE *f, const kljit_problem *pb, long long rows) {
  char shape[CLI_SHAPE_TEXT], t[32], tt[32], eps[32], beta[32], hw[32], sw[32], cap[32],
      tcap[32], alpha[32], ls[32], zl[32];
  cli_shape_format(pb, rows, shape, sizeof shape);
  fprintf(f, "problem: %s\n", shape);
  shortest(pb->temperature, t, sizeof t), shortest(pb->teacher_temperature, tt, sizeof tt);
  shortest(pb->eps, eps, sizeof eps), shortest(pb->beta, beta, sizeof beta);
  shortest(pb->hard_weight, hw, sizeof hw), shortest(pb->soft_weight, sw, sizeof sw);
  shortest(pb->softcap, cap, sizeof cap), shortest(pb->teacher_softcap, tcap, sizeof tcap);
  shortest(pb->skew_alpha, alpha, sizeof alpha), shortest(pb->label_smoothing, ls, sizeof ls);
  shortest(pb->z_loss, zl, sizeof zl);
  int col = 0;
  field(f, &col, "hidden", "%lld", (long long)pb->hidden);
  field(f, &col, "vocab", "%lld", (long long)pb->vocab);
  field(f, &col, "input_dtype", "%s", dtype_name(pb->input_dtype));
  field(f, &col, "weight_dtype", "%s", dtype_name(pb->weight_dtype));
  field(f, &col, "teacher_dtype", "%s", dtype_name(pb->teacher_dtype));
  field(f, &col, "teacher", "%s", teacher_name(pb->teacher));
  field(f, &col, "topk", "%d", (int)pb->topk);
  field(f, &col, "topk_id_dtype", "%s", dtype_name(pb->topk_id_dtype));
  field(f, &col, "topk_values", "%s", choice_name(TOPK_VALUES, pb->topk_values));
  field(f, &col, "tail", "%s", choice_name(TAILS, pb->tail));
  field(f, &col, "temperature_mode", "%s",
        pb->temperature_mode == KLJIT_TEMPERATURE_RUNTIME ? "RUNTIME" : "CONSTANT");
  field(f, &col, "temperature", "%s", t);
  field(f, &col, "teacher_temperature", "%s", tt);
  field(f, &col, "reduction", "%s", choice_name(CLI_REDUCTIONS, pb->reduction));
  field(f, &col, "label_dtype", "%s", dtype_name(pb->label_dtype));
  field(f, &col, "ignore_index", "%lld", (long long)pb->ignore_index);
  field(f, &col, "eps", "%s", eps);
  field(f, &col, "grad_weight_dtype", "%s", dtype_name(pb->grad_weight_dtype));
  field(f, &col, "grad_weight_accum", "%s", choice_name(ACCUMS, pb->grad_weight_accum));
  field(f, &col, "flags", "0x%x", (unsigned)pb->flags);
  field(f, &col, "vocab_total", "%lld", (long long)pb->vocab_total);
  field(f, &col, "vocab_offset", "%lld", (long long)pb->vocab_offset);
  field(f, &col, "shards", "%d", (int)pb->shards);
  const char *div = "?";
  for (int i = 0; i < N_DIVS; i++)
    if (DIVS[i].value == pb->divergence) div = DIVS[i].name;
  field(f, &col, "divergence", "%s", div);
  field(f, &col, "beta", "%s", beta);
  field(f, &col, "hard_weight", "%s", hw);
  field(f, &col, "soft_weight", "%s", sw);
  field(f, &col, "softcap", "%s", cap);
  field(f, &col, "teacher_softcap", "%s", tcap);
  field(f, &col, "teacher_vocab", "%lld", (long long)pb->teacher_vocab);
  field(f, &col, "teacher_ld", "%lld", (long long)pb->teacher_ld);
  field(f, &col, "teacher_hidden", "%lld", (long long)pb->teacher_hidden);
  field(f, &col, "skew_alpha", "%s", alpha);
  field(f, &col, "label_smoothing", "%s", ls);
  field(f, &col, "z_loss", "%s", zl);
  fputc('\n', f);
}

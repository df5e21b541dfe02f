/* SPDX-License-Identifier: Apache-2.0 */
/* wisdom.c — the wisdom text format: problem keys, entry lines, whole texts (sets and merging:
 * wisdom_set.c).
 *
 * A text is a header line, then one entry per line (docs/wisdom.md):
 *
 *   kljit-wisdom 1 kljit=0.1.0
 *   gpu="NVIDIA H200" arch=sm_90 sms=132 kljit=0.1.0 V=128256 H=4096 in=bf16 teacher=probs
 *     tdt=bf16 tmode=const flags=- bucket=8192 -> chunk_rows=4096 threads=256 split=8 cluster=0
 *     nv=1 rigor=measure rows=8192 ms=10.1234           (one line in the file)
 *
 * then, after the problem's extra fields, up to four optional gemm=... fields: the tuned
 * cuBLASLt algorithms (gemm_algo.h).
 *
 * Blank lines and lines starting with '#' are ignored. Fields are name=value separated by
 * single spaces, in any order on input, in the order above on output; only gpu's value is
 * written quoted (GPU names hold spaces), with '"' and '\\' escaped by a backslash; any value
 * may be quoted on input, and an unquoted one holds no quote, backslash or control character,
 * so that parse(format(parse(text))) is the set parse(text).
 * Parsing is strict: an unknown, repeated or
 * missing field, a value out of range, or a tuning whose recipe cannot be made as given
 * (recipe_make) or whose modules the templates refuse (recipe_check) rejects the whole text, so
 * what reaches the store can always be planned and rendered.
 */
#include "wisdom.h"

#include "gemm_algo.h"
#include "gemm_sm90.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe.h"

static const char HEADER_WORD[] = "kljit-wisdom";

/* ---- problem keys ------------------------------------------------------------------------ */

static const struct {
  uint32_t bit;
  const char *name;
} FLAGS[] = {{KLJIT_FLAG_BIAS, "bias"},          {KLJIT_FLAG_NATIVE_LOGITS, "native_logits"},
             {KLJIT_FLAG_ALLOW_TF32, "tf32"},     {KLJIT_FLAG_CHECK_INPUTS, "check"},
             {KLJIT_FLAG_TEACHER_BIAS, "tbias"}, {KLJIT_FLAG_ROW_WEIGHTS, "roww"},
             {KLJIT_FLAG_PRECISE_ACCUMULATION, "precise"}};
enum { N_FLAGS = sizeof FLAGS / sizeof FLAGS[0] };


/* A bounded text builder: what snprintf would write, without parsing a format for each field
 * (every entry of a large file gets its key built while the file is imported). */
typedef struct cursor {
  char *p;
  size_t n, cap; /* cap counts the NUL */
} cursor;

static void put(cursor *t, const char *s) {
  while (*s && t->n + 1 < t->cap) t->p[t->n++] = *s++;
  t->p[t->n] = '\0';
}

static void put_int(cursor *t, long long x) {
  char digits[24];
  size_t i = sizeof digits;
  digits[--i] = '\0';
  unsigned long long u = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
  do digits[--i] = (char)('0' + u % 10);
  while ((u /= 10) != 0);
  if (x < 0) digits[--i] = '-';
  put(t, digits + i);
}

void wisdom_problem_key(const kljit_problem *pb, char out[WISDOM_PROBLEM_MAX]) {
  const int t =
      pb->teacher >= KLJIT_TEACHER_DENSE_PROBS && pb->teacher <= KLJIT_TEACHER_DENSE_HIDDEN;
  cursor k = {out, 0, WISDOM_PROBLEM_MAX};
  put(&k, "V="), put_int(&k, (long long)pb->vocab);
  put(&k, " H="), put_int(&k, (long long)pb->hidden);
  put(&k, " in="), put(&k, names_dtype_tag(pb->input_dtype));
  put(&k, " teacher="), put(&k, t ? names_teacher(pb->teacher) : "?");
  put(&k, " tdt="), put(&k, names_dtype_tag(pb->teacher_dtype));
  if (pb->teacher == KLJIT_TEACHER_SPARSE_TOPK) {
    put(&k, " k="), put_int(&k, pb->topk);
    put(&k, " ids="), put(&k, names_dtype_tag(pb->topk_id_dtype));
    put(&k, " values="), put(&k, names_topk_values(pb->topk_values));
    put(&k, " tail="), put(&k, names_tail(pb->tail));
  }
  /* the online teacher's GEMM costs by its Ht; a divergence other than the forward KL changes
   * the row passes (their count, one pass-2 block a row): both are the entry's identity, and
   * absent from the keys of the problems that had wisdom before them */
  if (pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN)
    put(&k, " ht="), put_int(&k, (long long)pb->teacher_hidden);
  if (!prob_is_forward_kl(pb)) put(&k, " div="), put(&k, names_divergence(pb->divergence));
  put(&k, " tmode="), put(&k, names_tmode(pb->temperature_mode));
  put(&k, " flags=");
  int any = 0;
  for (int i = 0; i < N_FLAGS; i++)
    if (pb->flags & FLAGS[i].bit) put(&k, any++ ? "," : ""), put(&k, FLAGS[i].name);
  if (!any) put(&k, "-");
}

/* The shortest %g form that reads back as the same double ("2", "1e-20"), without an exponent
 * where the number reads as plainly ("30", not "3e+01"). */
static void shortest(double x, char *out, size_t cap) {
  const int plain = fabs(x) >= 1e-4 && fabs(x) < 1e15;
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(out, cap, "%.*g", digits, x);
    if (strtod(out, NULL) == x && (!plain || !strchr(out, 'e'))) return;
  }
}

void wisdom_problem_extra(const kljit_problem *pb, char out[WISDOM_EXTRA_MAX]) {
  char t[32], tt[32], eps[32];
  shortest(pb->temperature, t, sizeof t);
  shortest(pb->teacher_temperature, tt, sizeof tt);
  shortest(pb->eps, eps, sizeof eps);
  int n = snprintf(out, WISDOM_EXTRA_MAX, "T=%s tt=%s eps=%s reduction=%s t2=%d gw=%s accum=%s",
                   t, tt, eps, names_reduction(pb->reduction),
                   (pb->flags & KLJIT_FLAG_SCALE_T_SQUARED) != 0,
                   names_dtype_tag(pb->grad_weight_dtype),
                   pb->grad_weight_accum == KLJIT_ACCUM_OUTPUT_DTYPE ? "out"
                   : pb->grad_weight_accum == KLJIT_ACCUM_AUTO      ? "auto"
                                                                     : "fp32");
  /* the loss family's values, each only where it differs from KLJIT_PROBLEM_INIT's (so the
   * extra text of a plain problem is what it was) */
  const kljit_problem d = KLJIT_PROBLEM_INIT;
  const struct {
    const char *name;
    double value, init;
  } REALS[] = {{"beta", pb->beta, d.beta},         {"hw", pb->hard_weight, d.hard_weight},
               {"sw", pb->soft_weight, d.soft_weight}, {"cap", pb->softcap, d.softcap},
               {"tcap", pb->teacher_softcap, d.teacher_softcap},
               {"alpha", pb->skew_alpha, d.skew_alpha},
               {"ls", pb->label_smoothing, d.label_smoothing}, {"zl", pb->z_loss, d.z_loss}};
  for (size_t i = 0; i < sizeof REALS / sizeof REALS[0]; i++) {
    if (REALS[i].value == REALS[i].init || n < 0 || n >= WISDOM_EXTRA_MAX) continue;
    char v[32];
    shortest(REALS[i].value, v, sizeof v);
    n += snprintf(out + n, WISDOM_EXTRA_MAX - (size_t)n, " %s=%s", REALS[i].name, v);
  }
  if (pb->teacher_vocab && n >= 0 && n < WISDOM_EXTRA_MAX)
    n += snprintf(out + n, WISDOM_EXTRA_MAX - (size_t)n, " tv=%lld", (long long)pb->teacher_vocab);
  if (pb->teacher_ld && n >= 0 && n < WISDOM_EXTRA_MAX)
    snprintf(out + n, WISDOM_EXTRA_MAX - (size_t)n, " tld=%lld", (long long)pb->teacher_ld);
}

int64_t wisdom_bucket(int64_t rows) {
  int64_t b = 1;
  while (b < rows && b < ((int64_t)1 << 62)) b *= 2;
  return b;
}

/* ---- tokens ------------------------------------------------------------------------------ */

enum { MAX_TOKENS = 64 };

typedef struct token {
  const char *name, *value; /* NUL-terminated, inside the tokenized copy */
} token;

/* Splits a mutable line into name=value tokens and the "->" marker (name "->", value "").
 * 0, or -1 with a sentence in why. */
static int tokenize(char *s, token *tok, int *n, char *why, size_t cap) {
  *n = 0;
  while (*s) {
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) break;
    if (*n == MAX_TOKENS) return snprintf(why, cap, "more than %d fields", MAX_TOKENS), -1;
    token *t = &tok[(*n)++];
    if (s[0] == '-' && s[1] == '>' && (s[2] == ' ' || s[2] == '\t' || !s[2])) {
      t->name = "->", t->value = "";
      s += 2;
      if (*s) *s++ = '\0';
      continue;
    }
    t->name = s;
    while (*s && *s != '=' && *s != ' ' && *s != '\t') s++;
    if (*s != '=') return snprintf(why, cap, "'%.40s' is not name=value", t->name), -1;
    *s++ = '\0';
    if (*s == '"') {
      /* quoted: \" and \\ are the only escapes (wisdom_format writes them), unescaped in place */
      char *w = ++s;
      t->value = s;
      while (*s && *s != '"') {
        if (*s == '\\') {
          if (s[1] != '"' && s[1] != '\\')
            return snprintf(why, cap, "%s: a backslash must escape '\"' or '\\'", t->name), -1;
          s++;
        }
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
          return snprintf(why, cap, "%s: a control character in its value", t->name), -1;
        *w++ = *s++;
      }
      if (!*s) return snprintf(why, cap, "%s: no closing quote", t->name), -1;
      *w = '\0';
      s++;
      if (*s && *s != ' ' && *s != '\t')
        return snprintf(why, cap, "%s: text after the closing quote", t->name), -1;
    } else {
      /* unquoted: a quote or backslash inside could not be written back the same way */
      t->value = s;
      while (*s && *s != ' ' && *s != '\t') {
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20 || *s == 0x7f)
          return snprintf(why, cap, "%s: a quote, backslash or control character in an "
                          "unquoted value (quote it)", t->name), -1;
        s++;
      }
    }
    if (*s) *s++ = '\0';
  }
  return 0;
}

/* A decimal integer in [lo, hi] (|lo|, |hi| < 2^62): digits after an optional '-', no leading
 * zero. By hand, not strtoll: a large import reads some ten numbers a line. */
static int parse_int(const char *v, long long lo, long long hi, long long *out) {
  if (!*v || (*v == '0' && v[1])) return -1;
  const int neg = *v == '-';
  const char *p = v + neg;
  if (!*p) return -1;
  unsigned long long u = 0;
  for (; *p; p++) {
    if (*p < '0' || *p > '9' || u > (1ull << 62) / 10) return -1; /* past 2^62: out of range */
    u = 10 * u + (unsigned long long)(*p - '0');
  }
  if (u > (1ull << 62)) return -1;
  const long long x = neg ? -(long long)u : (long long)u;
  if (x < lo || x > hi) return -1;
  *out = x;
  return 0;
}


static kljit_dtype float_dtype(const char *v) {
  return !strcmp(v, "f32")    ? KLJIT_FP32
         : !strcmp(v, "f16")  ? KLJIT_FP16
         : !strcmp(v, "bf16") ? KLJIT_BF16
                              : (kljit_dtype)0;
}

/* Problem fields: those of the key (SPARSE ones only with teacher=topk, ht only with
 * teacher=hidden, div optional: the forward KL), then the extra ones (optional on input,
 * KLJIT_PROBLEM_INIT's values when absent). */
enum {
  PF_V, PF_H, PF_IN, PF_TEACHER, PF_TDT, PF_K, PF_IDS, PF_VALUES, PF_TAIL, PF_HT, PF_DIV,
  PF_TMODE, PF_FLAGS, /* the key's, then the extra ones: */
  PF_T, PF_TT, PF_EPS, PF_RED, PF_T2, PF_GW, PF_ACCUM, PF_BETA, PF_HW, PF_SW, PF_CAP, PF_TCAP,
  PF_ALPHA, PF_LS, PF_ZL, PF_TV, PF_TLD, PF_COUNT
};
static const char *const PROBLEM_FIELDS[PF_COUNT] = {
    "V",  "H",         "in",   "teacher", "tdt",   "k",    "ids", "values", "tail",
    "ht", "div",       "tmode", "flags",  "T",     "tt",   "eps", "reduction", "t2",
    "gw", "accum",     "beta", "hw",      "sw",    "cap",  "tcap", "alpha", "ls",
    "zl", "tv",        "tld"};
static int sparse_field(int f) {
  return f >= PF_K && f <= PF_TAIL;
}
static int extra_field(int f) {
  return f >= PF_T;
}

static int parse_real(const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  const double x = strtod(v, &end);
  if (!*v || *end || errno || !(x >= lo && x <= hi)) return -1;
  *out = x;
  return 0;
}

static int field_code(const char *name);

/* Applies one problem field (f: its field_code) of the key (extra = 0) or extra (1) side.
 * 1 applied, 0 not such a field, -1 bad value or repeated (why set). */
static int problem_field(kljit_problem *pb, const token *t, int f, int extra, uint64_t *seen,
                         char *why, size_t cap) {
  if (f < 0 || f >= PF_COUNT || extra_field(f) != extra) return 0;
  if (*seen & (uint64_t)1 << f) return snprintf(why, cap, "field %s given twice", t->name), -1;
  *seen |= (uint64_t)1 << f;
  const char *v = t->value;
  long long x = 0;
  int ok = 1;
  switch (f) {
    case PF_T:
      ok = !parse_real(v, KLJIT_TEMPERATURE_MIN, KLJIT_TEMPERATURE_MAX, &pb->temperature);
      break;
    case PF_TT:
      ok = !parse_real(v, 0, KLJIT_TEMPERATURE_MAX, &pb->teacher_temperature);
      break;
    case PF_EPS:
      ok = !parse_real(v, 1e-30, 1e-3, &pb->eps);
      break;
    case PF_RED:
      ok = (pb->reduction = (kljit_reduction)names_find_reduction(v)) != 0;
      break;
    case PF_T2:
      ok = !strcmp(v, "0") || !strcmp(v, "1");
      if (v[0] == '1') pb->flags |= KLJIT_FLAG_SCALE_T_SQUARED;
      break;
    case PF_GW:
      ok = (pb->grad_weight_dtype = float_dtype(v)) != 0;
      break;
    case PF_ACCUM:
      pb->grad_weight_accum = !strcmp(v, "out")    ? KLJIT_ACCUM_OUTPUT_DTYPE
                              : !strcmp(v, "auto") ? KLJIT_ACCUM_AUTO
                                                   : KLJIT_ACCUM_FP32;
      ok = !strcmp(v, "out") || !strcmp(v, "auto") || !strcmp(v, "fp32");
      break;
    case PF_V:
      ok = !parse_int(v, 2, 1 << 24, &x), pb->vocab = x;
      break;
    case PF_H:
      ok = !parse_int(v, 1, 1 << 20, &x), pb->hidden = x;
      break;
    case PF_IN:
      ok = (pb->input_dtype = pb->weight_dtype = float_dtype(v)) != 0;
      break;
    case PF_TEACHER:
      pb->teacher = (kljit_teacher_form)names_find_teacher(v);
      ok = pb->teacher != 0;
      break;
    case PF_HT:
      ok = !parse_int(v, 1, 1 << 20, &x), pb->teacher_hidden = x;
      break;
    case PF_DIV:
      pb->divergence = (kljit_divergence)names_find_divergence(v);
      ok = pb->divergence != 0;
      break;
    case PF_BETA: /* the loss family's reals, in enum order */
    case PF_HW:
    case PF_SW:
    case PF_CAP:
    case PF_TCAP:
    case PF_ALPHA:
    case PF_LS:
    case PF_ZL: {
      double *const to[] = {&pb->beta,    &pb->hard_weight,     &pb->soft_weight,
                            &pb->softcap, &pb->teacher_softcap, &pb->skew_alpha,
                            &pb->label_smoothing, &pb->z_loss};
      const int fraction = f == PF_BETA || f == PF_ALPHA || f == PF_LS; /* in [0, 1] */
      ok = !parse_real(v, 0, fraction ? 1 : 1e300, to[f - PF_BETA]);
      break;
    }
    case PF_TV:
      ok = !parse_int(v, 2, 1 << 24, &x), pb->teacher_vocab = x;
      break;
    case PF_TLD:
      ok = !parse_int(v, 2, 1 << 25, &x), pb->teacher_ld = x;
      break;
    case PF_TDT:
      ok = (pb->teacher_dtype = float_dtype(v)) != 0;
      break;
    case PF_K:
      ok = !parse_int(v, 1, 1024, &x), pb->topk = (int32_t)x;
      break;
    case PF_IDS:
      pb->topk_id_dtype = !strcmp(v, "i32") ? KLJIT_INT32 : KLJIT_INT64;
      ok = !strcmp(v, "i32") || !strcmp(v, "i64");
      break;
    case PF_VALUES:
      pb->topk_values = !strcmp(v, "logprobs") ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
      ok = !strcmp(v, "probs") || !strcmp(v, "logprobs");
      break;
    case PF_TAIL:
      ok = (pb->tail = (kljit_tail)names_find_tail(v)) != 0;
      break;
    case PF_TMODE:
      pb->temperature_mode =
          !strcmp(v, "runtime") ? KLJIT_TEMPERATURE_RUNTIME : KLJIT_TEMPERATURE_CONSTANT;
      ok = !strcmp(v, "const") || !strcmp(v, "runtime");
      break;
    case PF_FLAGS:
      pb->flags &= KLJIT_FLAG_SCALE_T_SQUARED; /* t2 is an extra field */
      if (strcmp(v, "-") != 0) {
        for (const char *p = v; ok && *p;) {
          const size_t len = strcspn(p, ",");
          int i = 0;
          while (i < N_FLAGS && !(strlen(FLAGS[i].name) == len && !strncmp(p, FLAGS[i].name, len)))
            i++;
          ok = len > 0 && i < N_FLAGS && !(pb->flags & FLAGS[i < N_FLAGS ? i : 0].bit);
          if (ok) pb->flags |= FLAGS[i].bit;
          p += len;
          if (*p == ',' && !*++p) ok = 0;
        }
      }
      break;
  }
  if (!ok) return snprintf(why, cap, "bad value %s=%s", t->name, v), -1;
  return 1;
}

/* Checks that every field the teacher form needs is there (and no sparse or online one
 * without it), then that the problem is valid. */
static int problem_complete(kljit_problem *pb, uint64_t seen, char *why, size_t cap) {
  const int sparse = pb->teacher == KLJIT_TEACHER_SPARSE_TOPK;
  const int hidden = pb->teacher == KLJIT_TEACHER_DENSE_HIDDEN;
  for (int f = 0; f < PF_COUNT && !extra_field(f); f++) {
    if (f == PF_DIV) continue; /* optional: the forward KL */
    const int want = sparse_field(f) ? sparse : f == PF_HT ? hidden : 1;
    const int have = (seen >> f) & 1;
    if (want != have)
      return snprintf(why, cap, "field %s %s", PROBLEM_FIELDS[f],
                      !have                ? "is missing"
                      : sparse_field(f)    ? "is only for teacher=topk"
                                           : "is only for teacher=hidden"),
             -1;
  }
  if (prob_validate(pb, "wisdom") != KLJIT_SUCCESS)
    return snprintf(why, cap, "%s", kljit_last_error()), -1;
  /* one spelling per entry: the forward KL (JSD with beta = 0 too) has no div= */
  if ((seen >> PF_DIV) & 1 && prob_is_forward_kl(pb))
    return snprintf(why, cap, "field div=%s names the forward KL%s: leave div out",
                    names_divergence(pb->divergence),
                    pb->divergence == KLJIT_DIVERGENCE_JSD ? " (beta = 0)" : ""),
           -1;
  return 0;
}

kljit_status wisdom_entry_problem(const wisdom_entry *e, kljit_problem *pb) {
  const kljit_problem init = KLJIT_PROBLEM_INIT;
  *pb = init;
  const char *const sides[2] = {e->problem, e->extra};
  char why[256] = "";
  int r = 0;
  uint64_t seen = 0;
  for (int side = 0; side < 2 && r == 0; side++) {
    char *copy = strdup(sides[side]);
    if (!copy) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
    token tok[MAX_TOKENS];
    int n = 0;
    r = tokenize(copy, tok, &n, why, sizeof why);
    for (int i = 0; i < n && r == 0; i++) {
      const int code = field_code(tok[i].name);
      if (problem_field(pb, &tok[i], code, side, &seen, why, sizeof why) != 1) {
        if (!*why) snprintf(why, sizeof why, "unknown field %s", tok[i].name);
        r = -1;
      }
    }
    free(copy);
  }
  if (r == 0) r = problem_complete(pb, seen, why, sizeof why);
  if (r)
    return err_set(KLJIT_ERR_WISDOM, "wisdom problem '%s' '%s': %s", e->problem, e->extra, why);
  return KLJIT_SUCCESS;
}

/* ---- entry lines ------------------------------------------------------------------------- */

kljit_status wisdom_entry_text(const wisdom_entry *e, strbuf *out) {
  const int r = e->rigor >= KLJIT_PLAN_ESTIMATE && e->rigor <= KLJIT_PLAN_EXHAUSTIVE ? e->rigor : 0;
  /* gpu is the one free-text field: quoted, with '"' and '\\' escaped (tokenize undoes it) */
  char gpu[2 * WISDOM_GPU_MAX], ms[32];
  size_t n = 0;
  for (const char *c = e->gpu; *c && n + 2 < sizeof gpu; c++) {
    if (*c == '"' || *c == '\\') gpu[n++] = '\\';
    gpu[n++] = *c;
  }
  gpu[n] = '\0';
  shortest(e->ms, ms, sizeof ms); /* exact: parse(format(x)) keeps the very time */
  kljit_status st = sb_printf(out,
                   "gpu=\"%s\" arch=sm_%d sms=%d kljit=%s %s bucket=%lld -> chunk_rows=%lld "
                   "threads=%d split=%d cluster=%d nv=%d rigor=%s rows=%lld ms=%s %s",
                   gpu, e->arch, e->sms, KLJIT_VERSION_STRING, e->problem, (long long)e->bucket,
                   (long long)e->tune.chunk_rows, e->tune.threads, e->tune.split, e->tune.cluster,
                   e->tune.nv, r ? names_rigor(e->rigor) : "?", (long long)e->rows, ms, e->extra);
  for (int i = 0; st == KLJIT_SUCCESS && i < PROB_GEMM_CHOICES; i++)
    if (e->tune.gemm[i].used) {
      char text[GEMM_ALGO_TEXT_MAX];
      gemm_algo_text(&e->tune.gemm[i], text);
      st = sb_printf(out, " gemm=%s", text);
    }
  return st;
}

/* Entry fields that are not problem fields; KEY ones go before "->", the others after. */
enum {
  EF_GPU,
  EF_ARCH,
  EF_SMS,
  EF_KLJIT,
  EF_BUCKET,
  EF_CHUNK,
  EF_THREADS,
  EF_SPLIT,
  EF_CLUSTER,
  EF_NV,
  EF_RIGOR,
  EF_ROWS,
  EF_MS,
  EF_COUNT
};
static const char *const ENTRY_FIELDS[EF_COUNT] = {
    "gpu",   "arch",    "sms", "kljit", "bucket", "chunk_rows", "threads",
    "split", "cluster", "nv",  "rigor", "rows",   "ms"};
static int key_field(int f) {
  return f <= EF_BUCKET;
}

/* Field codes: PF_* for problem fields, FIELD_ENTRY + EF_* for the others; every token of every
 * line is looked up, so by hash (FIELD_SLOTS, filled once) rather than by a strcmp chain. */
enum { FIELD_ENTRY = 64, FIELD_SLOTS = 128 };
_Static_assert((int)PF_COUNT <= (int)FIELD_ENTRY && FIELD_ENTRY + (int)EF_COUNT < FIELD_SLOTS,
               "the field codes of both tables fit the slots");
static signed char field_slots[FIELD_SLOTS]; /* 1 + the code of the name hashed there; 0: none */
static pthread_once_t fields_once = PTHREAD_ONCE_INIT;

static const char *field_name(int code) {
  return code < FIELD_ENTRY ? PROBLEM_FIELDS[code] : ENTRY_FIELDS[code - FIELD_ENTRY];
}

/* Field names differ in their length, first or last byte often enough for a slot to hold one
 * name or two: a cheap hash for the ~2 million lookups of a large import. */
static size_t field_hash(const char *name) {
  const size_t len = strlen(name);
  return (len * 13 + (unsigned char)name[0] * 7 + (len ? (unsigned char)name[len - 1] : 0)) %
         FIELD_SLOTS;
}

static void fields_init(void) {
  for (int code = 0; code < FIELD_ENTRY + EF_COUNT; code++) {
    if (code == PF_COUNT) code = FIELD_ENTRY;
    size_t i = field_hash(field_name(code));
    while (field_slots[i]) i = (i + 1) % FIELD_SLOTS;
    field_slots[i] = (signed char)(code + 1);
  }
}

/* The field code of a token name, or -1 when it names no field. */
static int field_code(const char *name) {
  pthread_once(&fields_once, fields_init);
  for (size_t i = field_hash(name); field_slots[i]; i = (i + 1) % FIELD_SLOTS)
    if (strcmp(field_name(field_slots[i] - 1), name) == 0) return field_slots[i] - 1;
  return -1;
}

static int entry_field(wisdom_entry *e, const token *t, int code, int after_arrow, unsigned *seen,
                       char *why, size_t cap) {
  const int f = code >= FIELD_ENTRY ? code - FIELD_ENTRY : -1;
  if (f < 0) return snprintf(why, cap, "unknown field %s (on this side of '->')", t->name), -1;
  if (*seen & 1u << f) return snprintf(why, cap, "field %s given twice", t->name), -1;
  if (key_field(f) == after_arrow)
    return snprintf(why, cap, "field %s belongs %s '->'", t->name,
                    key_field(f) ? "before" : "after"),
           -1;
  *seen |= 1u << f;
  const char *v = t->value;
  long long x = 0;
  int ok = 1;
  switch (f) {
    case EF_GPU:
      x = (long long)strlen(v);
      ok = x > 0 && x < WISDOM_GPU_MAX;
      if (ok) memcpy(e->gpu, v, (size_t)x + 1);
      break;
    case EF_ARCH:
      ok = !strncmp(v, "sm_", 3) && !parse_int(v + 3, 10, 9999, &x), e->arch = (int)x;
      break;
    case EF_SMS:
      ok = !parse_int(v, 1, 1 << 20, &x), e->sms = (int)x;
      break;
    case EF_KLJIT:
      if (strcmp(v, KLJIT_VERSION_STRING) != 0)
        return snprintf(why, cap, "entry of kljit %s in a kljit %s file", v, KLJIT_VERSION_STRING),
               -1;
      break;
    case EF_BUCKET:
      ok = !parse_int(v, 1, (long long)1 << 40, &x) && (x & (x - 1)) == 0, e->bucket = x;
      break;
    case EF_CHUNK:
      ok = !parse_int(v, 1, 1 << 24, &x), e->tune.chunk_rows = x;
      break;
    case EF_THREADS:
      ok = !parse_int(v, 32, 1024, &x), e->tune.threads = (int)x;
      break;
    case EF_SPLIT:
      ok = !parse_int(v, 1, 64, &x), e->tune.split = (int)x;
      break;
    case EF_CLUSTER:
      ok = !parse_int(v, 0, 64, &x), e->tune.cluster = (int)x;
      break;
    case EF_NV:
      ok = !parse_int(v, 1, 64, &x), e->tune.nv = (int)x;
      break;
    case EF_RIGOR:
      e->rigor = (kljit_plan_rigor)names_find_rigor(v); /* wisdom-only is no stored rigor */
      ok = e->rigor >= KLJIT_PLAN_ESTIMATE && e->rigor <= KLJIT_PLAN_EXHAUSTIVE;
      break;
    case EF_ROWS:
      ok = !parse_int(v, 1, (long long)1 << 40, &x), e->rows = x;
      break;
    case EF_MS: {
      char *end;
      e->ms = strtod(v, &end);
      ok = *v && !*end && isfinite(e->ms) && e->ms >= 0;
      break;
    }
  }
  if (!ok) return snprintf(why, cap, "bad value %s=%s", t->name, v), -1;
  return 0;
}

/* The extra text of the last entry parsed and the fields it was made from: the entries of a
 * file mostly share them, and each of its numbers costs shortest() a printf or more. */
typedef struct extra_fields {
  double t, tt, eps, beta, hw, sw, cap, tcap, alpha, ls, zl;
  int64_t tv, tld;
  kljit_reduction reduction;
  uint32_t t2;
  kljit_dtype gw;
  kljit_grad_weight_accum accum;
} extra_fields;
typedef struct extra_memo {
  int valid;
  extra_fields f;
  char text[WISDOM_EXTRA_MAX];
} extra_memo;

static void memo_extra(const kljit_problem *pb, extra_memo *m, char out[WISDOM_EXTRA_MAX]) {
  extra_fields f;
  memset(&f, 0, sizeof f); /* compared bytewise, padding included */
  f.t = pb->temperature, f.tt = pb->teacher_temperature, f.eps = pb->eps, f.beta = pb->beta;
  f.hw = pb->hard_weight, f.sw = pb->soft_weight, f.cap = pb->softcap;
  f.alpha = pb->skew_alpha, f.ls = pb->label_smoothing, f.zl = pb->z_loss;
  f.tcap = pb->teacher_softcap, f.tv = pb->teacher_vocab, f.tld = pb->teacher_ld;
  f.reduction = pb->reduction, f.t2 = pb->flags & KLJIT_FLAG_SCALE_T_SQUARED;
  f.gw = pb->grad_weight_dtype, f.accum = pb->grad_weight_accum;
  /* the numbers compared bit for bit: -0 and 0 print differently */
  if (!m->valid || memcmp(&m->f, &f, sizeof f) != 0) {
    wisdom_problem_extra(pb, m->text);
    m->valid = 1, m->f = f;
  }
  memcpy(out, m->text, WISDOM_EXTRA_MAX);
}

/* One entry line (mutable copy). 0, or -1 with why. */
static int parse_entry(char *line, wisdom_entry *e, extra_memo *memo, char *why, size_t cap) {
  memset(e, 0, sizeof *e);
  token tok[MAX_TOKENS];
  int n = 0;
  if (tokenize(line, tok, &n, why, cap)) return -1;
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  uint64_t pseen = 0;
  unsigned eseen = 0;
  int arrows = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(tok[i].name, "->")) {
      if (arrows++) return snprintf(why, cap, "two '->'"), -1;
      continue;
    }
    if (!strcmp(tok[i].name, "gemm")) { /* optional, one per tuned GEMM (gemm_algo.h) */
      prob_gemm_choice c;
      if (!arrows || gemm_algo_parse(tok[i].value, &c))
        return snprintf(why, cap, "bad value gemm=%.60s", tok[i].value), -1;
      if (gemm_algo_add(&e->tune, &c)) return snprintf(why, cap, "too many gemm fields"), -1;
      continue;
    }
    const int code = field_code(tok[i].name);
    const int r = problem_field(&pb, &tok[i], code, arrows, &pseen, why, cap);
    if (r < 0) return -1;
    if (r == 0 && entry_field(e, &tok[i], code, arrows, &eseen, why, cap)) return -1;
  }
  if (!arrows) return snprintf(why, cap, "no '->' between the key and the choice"), -1;
  for (int f = 0; f < EF_COUNT; f++)
    if (!(eseen & 1u << f)) return snprintf(why, cap, "field %s is missing", ENTRY_FIELDS[f]), -1;
  if (problem_complete(&pb, pseen, why, cap)) return -1;
  wisdom_problem_key(&pb, e->problem);
  memo_extra(&pb, memo, e->extra);
  /* what a context of the default options on that GPU would build of it, as given */
  const kljit_context_options opt = KLJIT_CONTEXT_OPTIONS_INIT;
  recipe r;
  if (recipe_make(&pb, &e->tune, &opt, e->arch, e->sms, &r) != KLJIT_SUCCESS ||
      recipe_check(&r))
    return snprintf(why, cap, "unusable choice: %s", kljit_last_error()), -1;
  if (r.replaced)
    return snprintf(why, cap, "unusable choice: a sharded problem (vocab_total = %lld, shards = "
                    "%d) has no cluster row kernels: its row statistics are merged across ranks",
                    (long long)pb.vocab_total, (int)pb.shards), -1;
  /* cluster rows exist on sm_90 only (the recipe's modules, generated GEMMs included, were
   * checked by their templates above) */
  if (e->tune.cluster > 0 && e->arch < 90)
    return snprintf(why, cap, "unusable choice: cluster=%d on sm_%d (the cluster row kernels "
                    "need sm_90 or newer)", e->tune.cluster, e->arch), -1;
  return 0;
}

/* ---- formatting sets ---------------------------------------------------------------------- */

kljit_status wisdom_format(const wisdom_set *s, strbuf *out) {
  size_t *order = NULL;
  kljit_status st = wisdom_identity_order(s, &order);
  if (st == KLJIT_SUCCESS)
    st = sb_printf(out,
                   "%s %d kljit=%s\n"
                   "# GPU, problem and token bucket -> the chosen configuration, the "
                   "rigor that chose it, its time (docs/wisdom.md)\n",
                   HEADER_WORD, WISDOM_FORMAT, KLJIT_VERSION_STRING);
  for (size_t i = 0; i < s->n && st == KLJIT_SUCCESS; i++) {
    st = wisdom_entry_text(&s->e[order[i]], out);
    if (st == KLJIT_SUCCESS) st = sb_append(out, "\n", 1);
  }
  free(order);
  return st;
}

/* ---- whole texts ------------------------------------------------------------------------- */

/* The header "kljit-wisdom <format> kljit=<version>". 0 ok, -1 foreign, -2 stale. */
static int parse_header(char *line, char *why, size_t cap) {
  token tok[MAX_TOKENS];
  int n = 0;
  const char *want =
      "'"
      "kljit-wisdom 1 kljit=" KLJIT_VERSION_STRING "'";
  if (strncmp(line, HEADER_WORD, sizeof HEADER_WORD - 1) != 0 ||
      (line[sizeof HEADER_WORD - 1] != ' ' && line[sizeof HEADER_WORD - 1] != '\0'))
    return snprintf(why, cap, "not a kljit wisdom file (its first line must be %s)", want), -1;
  char *rest = line + sizeof HEADER_WORD - 1;
  char *fmt = strtok_r(rest, " \t", &rest);
  long long f = 0;
  if (!fmt || parse_int(fmt, 0, 1 << 30, &f))
    return snprintf(why, cap, "malformed wisdom header (want %s)", want), -1;
  if (f != WISDOM_FORMAT)
    return snprintf(why, cap,
                    "wisdom format %lld; this kljit (%s) reads format %d: re-tune "
                    "(kljit tune) to replace it",
                    f, KLJIT_VERSION_STRING, WISDOM_FORMAT),
           -2;
  if (tokenize(rest, tok, &n, why, cap) || n != 1 || strcmp(tok[0].name, "kljit") != 0)
    return snprintf(why, cap, "malformed wisdom header (want %s)", want), -1;
  if (strcmp(tok[0].value, KLJIT_VERSION_STRING) != 0)
    return snprintf(why, cap,
                    "stale wisdom: written by kljit %s, this is kljit %s (choices do "
                    "not carry across versions: re-tune with kljit tune)",
                    tok[0].value, KLJIT_VERSION_STRING),
           -2;
  return 0;
}

kljit_status wisdom_parse_entries(const char *text, const char *origin, wisdom_set *out,
                                  int *stale) {
  memset(out, 0, sizeof *out);
  if (stale) *stale = 0;
  if (!text) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "%s: wisdom text is NULL", origin);
  char why[600] = "";
  int lineno = 0, header = 0, bad = 0;
  kljit_status st = KLJIT_SUCCESS;
  char *line = NULL; /* the mutable copy of each line, grown as needed */
  size_t line_cap = 0;
  extra_memo memo = {0};
  for (const char *p = text; *p && !bad && st == KLJIT_SUCCESS;) {
    lineno++;
    size_t len = strcspn(p, "\n");
    const char *next = p[len] ? p + len + 1 : p + len;
    if (len && p[len - 1] == '\r') len--;
    size_t lead = 0;
    while (lead < len && (p[lead] == ' ' || p[lead] == '\t')) lead++;
    if (lead == len || p[lead] == '#') {
      p = next;
      continue;
    }
    if (len + 1 > line_cap) {
      char *grown = realloc(line, len + 1);
      if (!grown) {
        st = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
        break;
      }
      line = grown, line_cap = len + 1;
    }
    memcpy(line, p, len);
    line[len] = '\0';
    if (!header) {
      header = 1;
      const int h = parse_header(line, why, sizeof why);
      if (h == -2 && stale) *stale = 1;
      bad = h != 0;
    } else if ((st = wisdom_set_reserve(out, out->n + 1)) == KLJIT_SUCCESS) {
      /* parsed in place; duplicates are dropped by normalize, below */
      bad = parse_entry(line, &out->e[out->n], &memo, why, sizeof why) != 0;
      out->n += !bad;
    }
    p = next;
  }
  free(line);
  if (st == KLJIT_SUCCESS && !bad && !header) {
    bad = 1, lineno = 1;
    snprintf(why, sizeof why, "not a kljit wisdom file (empty: no 'kljit-wisdom' header)");
  }
  if (bad) st = err_set(KLJIT_ERR_WISDOM, "%s:%d: %s (nothing imported)", origin, lineno, why);
  if (st != KLJIT_SUCCESS) wisdom_set_free(out);
  return st;
}

kljit_status wisdom_parse(const char *text, const char *origin, wisdom_set *out, int *stale) {
  kljit_status st = wisdom_parse_entries(text, origin, out, stale);
  if (st == KLJIT_SUCCESS) st = wisdom_normalize(out);
  if (st != KLJIT_SUCCESS) wisdom_set_free(out);
  return st;
}

/* cli_tune.c — `kljit tune`: tunes a list of shapes on the GPU and writes their wisdom.
 *
 * Shapes come from the command line and/or a file, one per argument or line, in the compact
 * grammar of docs/wisdom.md ("V=128256,H=4096,bf16,dense,N=8192"). Each is tuned with
 * kljit_tune (which also merges the winner into the user wisdom file); with --wisdom PATH the
 * results are merged into PATH as well: PATH's entries are read first, then PATH is rewritten
 * with them and the new ones. Progress goes to stderr (a bar on a terminal, a line per
 * candidate otherwise), one result line per shape to stdout.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

enum { MAX_SHAPES = 256, SHAPE_TEXT = 256 };

typedef struct shape {
  kljit_problem pb;
  long long rows; /* 0: KLJIT_TUNE_ROWS */
  char text[SHAPE_TEXT];
} shape;

typedef struct tune_opts {
  shape shapes[MAX_SHAPES];
  int n;
  const char *file, *wisdom;
  int rigor;
  double budget;
  long long device;
  int quiet;
} tune_opts;

static void usage(FILE *f) {
  fputs(
      "usage: kljit tune [SHAPE ...] [--file F] [--wisdom PATH] [--rigor measure|exhaustive]\n"
      "                  [--budget SECONDS] [--device N] [--quiet]\n"
      "Times candidate configurations of each shape on the GPU (the heuristic choice first)\n"
      "and stores the fastest as wisdom: in the user wisdom file (kljit info shows where;\n"
      "KLJIT_WISDOM=none: nowhere) and, with --wisdom, merged into PATH. Plans made with\n"
      "KLJIT_PLAN_ESTIMATE or KLJIT_PLAN_WISDOM_ONLY then use it; `kljit precompile --wisdom\n"
      "PATH` compiles its kernels for a cluster cache. Needs a GPU (exit 3 without one).\n\n"
      "SHAPE: comma-separated, e.g. V=128256,H=4096,bf16,dense,N=8192 (docs/wisdom.md)\n"
      "  V=<vocab> H=<hidden>           required\n"
      "  N=<tokens>                     tokens per call to tune for (default KLJIT_TUNE_ROWS,\n"
      "                                 8192); the wisdom serves its power-of-two bucket\n"
      "  fp32|fp16|bf16                 inputs, weight and teacher dtype (default bf16)\n"
      "  tdt=fp32|fp16|bf16             teacher dtype alone\n"
      "  dense|probs|logprobs|logits    dense teacher form (dense = probs, the default)\n"
      "  topk=K [values=probs|logprobs] [tail=none|renorm|bucket] [ids=i32|i64]\n"
      "                                 sparse top-K teacher\n"
      "  T=<t> tt=<t> runtime t2        temperature, teacher temperature, T per call, T^2\n"
      "  reduction=sum|batchmean|mean|none\n"
      "  bias native tf32 check         problem flags\n"
      "  gw=fp32|fp16|bf16 accum=fp32|out  dW dtype and accumulation\n\n"
      "options:\n"
      "  --file F        shapes from F, one per line ('#' starts a comment)\n"
      "  --wisdom PATH   also merge the results into the wisdom file PATH\n"
      "  --rigor R       measure (default) or exhaustive (more candidates)\n"
      "  --budget S      seconds per shape (default KLJIT_TUNE_BUDGET_S, 30)\n"
      "  --device N      GPU to tune on (default 0)\n"
      "  --quiet         no progress on stderr\n",
      f);
}

/* ---- the shape grammar ----------------------------------------------------------------- */

static int dtype_of(const char *v, kljit_dtype *out) {
  *out = !strcmp(v, "fp32") || !strcmp(v, "f32")   ? KLJIT_FP32
         : !strcmp(v, "fp16") || !strcmp(v, "f16") ? KLJIT_FP16
         : !strcmp(v, "bf16")                      ? KLJIT_BF16
                                                   : (kljit_dtype)0;
  return *out != 0;
}

static int number(const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  const double x = strtod(v, &end);
  if (end == v || *end || errno || !isfinite(x) || x < lo || x > hi) return 0;
  *out = x;
  return 1;
}

/* One token of a shape. 1 ok, 0 bad (why filled). */
static int shape_token(shape *s, const char *tok, char *why, size_t cap) {
  kljit_problem *pb = &s->pb;
  const char *eq = strchr(tok, '=');
  const char *v = eq ? eq + 1 : "";
  const size_t klen = eq ? (size_t)(eq - tok) : strlen(tok);
  char key[32];
  snprintf(key, sizeof key, "%.*s", (int)(klen < 31 ? klen : 31), tok);
  double x = 0;
  kljit_dtype dt;
  if (!eq) {
    if (dtype_of(key, &dt))
      pb->input_dtype = pb->weight_dtype = pb->teacher_dtype = dt;
    else if (!strcmp(key, "dense") || !strcmp(key, "probs"))
      pb->teacher = KLJIT_TEACHER_DENSE_PROBS;
    else if (!strcmp(key, "logprobs"))
      pb->teacher = KLJIT_TEACHER_DENSE_LOGPROBS;
    else if (!strcmp(key, "logits"))
      pb->teacher = KLJIT_TEACHER_DENSE_LOGITS;
    else if (!strcmp(key, "runtime"))
      pb->temperature_mode = KLJIT_TEMPERATURE_RUNTIME;
    else if (!strcmp(key, "t2"))
      pb->flags |= KLJIT_FLAG_SCALE_T_SQUARED;
    else if (!strcmp(key, "bias"))
      pb->flags |= KLJIT_FLAG_BIAS;
    else if (!strcmp(key, "native"))
      pb->flags |= KLJIT_FLAG_NATIVE_LOGITS;
    else if (!strcmp(key, "tf32"))
      pb->flags |= KLJIT_FLAG_ALLOW_TF32;
    else if (!strcmp(key, "check"))
      pb->flags |= KLJIT_FLAG_CHECK_INPUTS;
    else
      return snprintf(why, cap, "unknown word '%s'", tok), 0;
    return 1;
  }
  int ok = 1;
  if (!strcmp(key, "V"))
    ok = number(v, 2, 1 << 24, &x), pb->vocab = (int64_t)x;
  else if (!strcmp(key, "H"))
    ok = number(v, 1, 1 << 20, &x), pb->hidden = (int64_t)x;
  else if (!strcmp(key, "N"))
    ok = number(v, 1, 2147483647.0, &x), s->rows = (long long)x;
  else if (!strcmp(key, "tdt"))
    ok = dtype_of(v, &pb->teacher_dtype);
  else if (!strcmp(key, "gw"))
    ok = dtype_of(v, &pb->grad_weight_dtype);
  else if (!strcmp(key, "T"))
    ok = number(v, 1e-6, 1e6, &pb->temperature);
  else if (!strcmp(key, "tt"))
    ok = number(v, 0, 1e6, &pb->teacher_temperature);
  else if (!strcmp(key, "topk")) {
    ok = number(v, 1, 1024, &x);
    pb->teacher = KLJIT_TEACHER_SPARSE_TOPK, pb->topk = (int32_t)x;
  } else if (!strcmp(key, "values")) {
    ok = !strcmp(v, "probs") || !strcmp(v, "logprobs");
    pb->topk_values = !strcmp(v, "logprobs") ? KLJIT_TOPK_LOGPROBS : KLJIT_TOPK_PROBS;
  } else if (!strcmp(key, "tail")) {
    pb->tail = !strcmp(v, "none")     ? KLJIT_TAIL_NONE
               : !strcmp(v, "renorm") ? KLJIT_TAIL_RENORM
               : !strcmp(v, "bucket") ? KLJIT_TAIL_BUCKET
                                      : (kljit_tail)0;
    ok = pb->tail != 0;
  } else if (!strcmp(key, "ids")) {
    ok = !strcmp(v, "i32") || !strcmp(v, "i64");
    pb->topk_id_dtype = !strcmp(v, "i32") ? KLJIT_INT32 : KLJIT_INT64;
  } else if (!strcmp(key, "reduction")) {
    pb->reduction = !strcmp(v, "sum")         ? KLJIT_REDUCTION_SUM
                    : !strcmp(v, "batchmean") ? KLJIT_REDUCTION_BATCHMEAN
                    : !strcmp(v, "mean")      ? KLJIT_REDUCTION_MEAN
                    : !strcmp(v, "none")      ? KLJIT_REDUCTION_NONE
                                              : (kljit_reduction)0;
    ok = pb->reduction != 0;
  } else if (!strcmp(key, "accum")) {
    ok = !strcmp(v, "fp32") || !strcmp(v, "out");
    pb->grad_weight_accum = !strcmp(v, "out") ? KLJIT_ACCUM_OUTPUT_DTYPE : KLJIT_ACCUM_FP32;
  } else {
    return snprintf(why, cap, "unknown field '%s'", key), 0;
  }
  if (!ok) return snprintf(why, cap, "bad value '%s'", tok), 0;
  return 1;
}

/* Parses "V=...,H=...,..." into s. 1 ok, 0 bad (why filled). */
static int parse_shape(const char *text, shape *s, char *why, size_t cap) {
  memset(s, 0, sizeof *s);
  const kljit_problem init = KLJIT_PROBLEM_INIT;
  s->pb = init, s->rows = 0;
  snprintf(s->text, sizeof s->text, "%s", text);
  char copy[SHAPE_TEXT];
  if (snprintf(copy, sizeof copy, "%s", text) >= (int)sizeof copy)
    return snprintf(why, cap, "longer than %d characters", SHAPE_TEXT - 1), 0;
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    if (!shape_token(s, tok, why, cap)) return 0;
  if (!s->pb.vocab || !s->pb.hidden) return snprintf(why, cap, "V= and H= are required"), 0;
  if (s->pb.teacher == KLJIT_TEACHER_SPARSE_TOPK && s->pb.teacher_dtype == KLJIT_BF16 &&
      !strstr(text, "tdt="))
    s->pb.teacher_dtype = KLJIT_FP32; /* top-K values usually come in fp32 */
  if (kljit_plan_check(&s->pb) != KLJIT_SUCCESS)
    return snprintf(why, cap, "%s", kljit_last_error()), 0;
  return 1;
}

static int add_shape(cli_parser *p, tune_opts *o, const char *text, const char *where) {
  char why[512];
  if (o->n == MAX_SHAPES) return cli_usage_error(p, "more than %d shapes", MAX_SHAPES), 0;
  if (!parse_shape(text, &o->shapes[o->n], why, sizeof why))
    return cli_usage_error(p, "%sshape '%s': %s", where, text, why), 0;
  o->n++;
  return 1;
}

static int read_shapes(cli_parser *p, tune_opts *o) {
  FILE *f = fopen(o->file, "r");
  if (!f) return cli_usage_error(p, "--file %s: %s", o->file, strerror(errno)), 0;
  char line[1024], where[600];
  int n = 0, ok = 1;
  while (ok && fgets(line, sizeof line, f)) {
    n++;
    line[strcspn(line, "#\r\n")] = '\0';
    char *s = line;
    while (*s == ' ' || *s == '\t') s++;
    for (char *e = s + strlen(s); e > s && (e[-1] == ' ' || e[-1] == '\t');) *--e = '\0';
    if (!*s) continue;
    snprintf(where, sizeof where, "%.500s:%d: ", o->file, n);
    ok = add_shape(p, o, s, where);
  }
  fclose(f);
  return ok;
}

/* ---- progress ------------------------------------------------------------------------- */

typedef struct progress {
  int tty, quiet;
  kljit_tune_progress last;
  char best[128];
} progress;

static void on_progress(const kljit_tune_progress *pr, void *user) {
  progress *s = user;
  if (pr->event == KLJIT_TUNE_FINISHED) {
    s->last = *pr;
    snprintf(s->best, sizeof s->best, "%s", pr->best);
    if (s->tty && !s->quiet) fputs("\r\033[K", stderr);
    return;
  }
  if (s->quiet) return;
  if (s->tty) {
    enum { WIDTH = 20 };
    const double frac =
        pr->count ? (double)(pr->index - 1 + (pr->event == KLJIT_TUNE_TIMED)) / pr->count : 0;
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++) bar[i] = i < (int)(frac * WIDTH + 0.5) ? '#' : '.';
    bar[WIDTH] = '\0';
    fprintf(stderr, "\r\033[K[%s] %d/%d %4.0fs  now: %s", bar, pr->index, pr->count, pr->elapsed_s,
            pr->candidate);
    if (pr->best[0]) fprintf(stderr, "  best: %.3f ms (%s)", pr->best_ms, pr->best);
    fflush(stderr);
  } else if (pr->event == KLJIT_TUNE_TIMED) {
    fprintf(stderr, "  [%d/%d] %-46s ", pr->index, pr->count, pr->candidate);
    if (pr->candidate_ms < 0)
      fprintf(stderr, "   skipped");
    else
      fprintf(stderr, "%9.3f ms", pr->candidate_ms);
    fprintf(stderr, "   best %.3f ms  (%.0f s)\n", pr->best_ms, pr->elapsed_s);
  }
}

/* ---- the command ---------------------------------------------------------------------- */

static int run(tune_opts *o) {
  char budget[32];
  if (o->budget > 0) {
    snprintf(budget, sizeof budget, "%g", o->budget);
    setenv("KLJIT_TUNE_BUDGET_S", budget, 1);
  }
  kljit_context *ctx = NULL;
  kljit_status st = kljit_context_create(&ctx, (int)o->device, NULL);
  if (st == KLJIT_ERR_NO_DEVICE) {
    fprintf(stderr, "kljit tune: no GPU here (%s); tuning needs one\n", kljit_last_error());
    return CLI_NO_GPU;
  }
  if (st != KLJIT_SUCCESS) return cli_fail("tune", st);
  /* --wisdom PATH: the store becomes PATH's entries, then this run's */
  if (o->wisdom) {
    kljit_wisdom_forget();
    if (access(o->wisdom, F_OK) == 0 && (st = kljit_wisdom_import_file(o->wisdom))) {
      kljit_context_destroy(ctx);
      return cli_fail("tune: --wisdom", st);
    }
  }
  progress pg;
  memset(&pg, 0, sizeof pg);
  pg.tty = isatty(2), pg.quiet = o->quiet;
  int rc = CLI_OK;
  for (int i = 0; i < o->n && rc == CLI_OK; i++) {
    const shape *s = &o->shapes[i];
    if (!o->quiet) fprintf(stderr, "tuning %s\n", s->text);
    memset(&pg.last, 0, sizeof pg.last);
    st = kljit_tune(ctx, &s->pb, s->rows, (kljit_plan_rigor)o->rigor, on_progress, &pg);
    if (st != KLJIT_SUCCESS) {
      if (pg.tty && !o->quiet) fputs("\n", stderr);
      rc = cli_fail("tune", st);
      break;
    }
    const kljit_tune_progress *r = &pg.last;
    printf(
        "%s: heuristic %.3f ms, best %.3f ms (%s), %.2fx, %d candidates, %lld tokens, "
        "%.1f s\n",
        s->text, r->heuristic_ms, r->best_ms, pg.best,
        r->best_ms > 0 ? r->heuristic_ms / r->best_ms : 0.0, r->index, (long long)r->rows,
        r->elapsed_s);
    fflush(stdout);
  }
  if (rc == CLI_OK && o->wisdom) {
    st = kljit_wisdom_export_file(o->wisdom);
    if (st != KLJIT_SUCCESS)
      rc = cli_fail("tune: --wisdom", st);
    else
      printf("wisdom: %s\n", o->wisdom);
  }
  kljit_context_destroy(ctx);
  return rc;
}

int cli_tune(int argc, char **argv) {
  static tune_opts o; /* large; one per process */
  memset(&o, 0, sizeof o);
  o.rigor = KLJIT_PLAN_MEASURE;
  static const cli_choice RIGORS[] = {
      {"measure", KLJIT_PLAN_MEASURE}, {"exhaustive", KLJIT_PLAN_EXHAUSTIVE}, {NULL, 0}};
  cli_parser p;
  cli_parser_init(&p, argc, argv);
  while (cli_next(&p)) {
    const char *text;
    if (cli_string(&p, "--file", &o.file)) continue;
    if (cli_string(&p, "--wisdom", &o.wisdom)) continue;
    if (cli_enum(&p, "--rigor", RIGORS, &o.rigor)) continue;
    if (cli_double(&p, "--budget", 1, 86400, &o.budget)) continue;
    if (cli_int(&p, "--device", 0, 1024, &o.device)) continue;
    if (cli_flag(&p, "--quiet")) {
      o.quiet = 1;
      continue;
    }
    if (cli_positional(&p, &text)) {
      add_shape(&p, &o, text, "");
      continue;
    }
    cli_unknown(&p);
  }
  if (cli_stopped(&p, usage)) return p.status;
  if (o.file && !read_shapes(&p, &o)) return p.status;
  if (o.n == 0) return cli_usage_error(&p, "no shape to tune (give SHAPE arguments or --file)");
  return run(&o);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* cli_tune.c — `kljit tune`: tunes a list of shapes on the GPU and writes their wisdom.
 *
 * Shapes come from the command line and/or a file, one per argument or line, in the grammar
 * every command shares (tools/cli_shape.c: "V=128256,H=4096,bf16,dense,N=8192"). Each is tuned with
 * kljit_tune (which also merges the winner into the user wisdom file); with --wisdom PATH the
 * results are merged into PATH as well: PATH's entries are read first, and at the end this run's
 * store is merged into PATH under its lock (kljit_wisdom_merge_file), keeping what other tuners
 * of PATH merged meanwhile. Progress goes to stderr (a bar on a terminal, a line per
 * candidate otherwise), one result line per shape to stdout.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

enum { MAX_SHAPES = 256 };

typedef struct tune_opts {
  cli_shape shapes[MAX_SHAPES];
  int n;
  const char *file, *wisdom;
  int rigor;
  double budget;
  long long device;
  int quiet;
} tune_opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: kljit tune [--file F] [--wisdom PATH] [--rigor measure|exhaustive]\n"
          "                  [--budget SECONDS] [--device N] [--quiet] [--] SHAPE ...\n"
          "Times candidate configurations of each shape on the GPU (the heuristic choice first)\n"
          "and stores the fastest as wisdom: in the user wisdom file (kljit info shows where;\n"
          "KLJIT_WISDOM=none: nowhere) and, with --wisdom, merged into PATH. Plans made with\n"
          "KLJIT_PLAN_ESTIMATE or KLJIT_PLAN_WISDOM_ONLY then use it; `kljit precompile --wisdom\n"
          "PATH` compiles its kernels for a cluster cache. Needs a GPU (exit 3 without one).\n"
          "N= is the token count to tune for (default KLJIT_TUNE_ROWS, 8192); the wisdom serves\n"
          "its power-of-two bucket.\n\n"
          "%s\n"
          "options:\n"
          "  --file F        shapes from the regular file F, one per line ('#' starts a comment)\n"
          "  --wisdom PATH   also merge the results into the wisdom file PATH\n"
          "  --rigor R       measure (default) or exhaustive (more candidates)\n"
          "  --budget S      seconds per shape (default KLJIT_TUNE_BUDGET_S, 30)\n"
          "  --device N      GPU to tune on (default 0)\n"
          "  --quiet         no progress on stderr\n",
          CLI_SHAPE_HELP);
}

static int add_shape(cli_parser *p, tune_opts *o, const char *text) {
  if (o->n == MAX_SHAPES) return cli_usage_error(p, "more than %d shapes", MAX_SHAPES), 0;
  if (!cli_shape_parse(p, text, NULL, NULL, &o->shapes[o->n])) return 0;
  o->n++;
  return 1;
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
    fprintf(stderr, "kljit tune: no GPU here (%s); tuning needs one\n", cli_last_error());
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
    const cli_shape *s = &o->shapes[i];
    if (!o->quiet) fprintf(stderr, "tuning %s\n", s->text);
    memset(&pg.last, 0, sizeof pg.last);
    st = kljit_tune(ctx, &s->pb, s->rows, (kljit_plan_rigor)o->rigor, on_progress, &pg);
    if (st != KLJIT_SUCCESS) {
      if (pg.tty && !o->quiet) fputs("\n", stderr);
      char what[CLI_SHAPE_TEXT + 8];
      snprintf(what, sizeof what, "tune %s", s->text);
      rc = cli_fail(what, st);
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
  if (rc == CLI_OK && o->wisdom) { /* merged under F's lock: concurrent tuners keep theirs */
    st = kljit_wisdom_merge_file(o->wisdom);
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
      add_shape(&p, &o, text);
      continue;
    }
    cli_unknown(&p);
  }
  if (cli_stopped(&p, usage)) return p.status;
  if (o.file && !cli_shape_file(&p, o.file, NULL, o.shapes, &o.n, MAX_SHAPES)) return p.status;
  if (o.n == 0) return cli_usage_error(&p, "no shape to tune (give SHAPE arguments or --file)");
  return run(&o);
}

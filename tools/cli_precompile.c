/* SPDX-License-Identifier: Apache-2.0 */
/* cli_precompile.c — `kljit precompile`: the kernels of a list of problems for a list of GPU
 * architectures into a cache directory, with NVRTC only (no GPU), then a manifest of it.
 *
 * Work is one job per (problem, arch); --jobs N runs N of them at a time on threads
 * (kljit_precompile is thread-safe across problems and archs). Progress goes to stderr, one
 * line per module as it finishes; the summary to stdout. The manifest (docs/cache-format.md)
 * lists every valid entry of the directory afterwards, so successive runs into one directory
 * leave one manifest of all of them.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

enum { MAX_ARCHS = 16, MAX_JOBS = 256 };

typedef struct precompile_opts {
  cli_shape shapes[MAX_JOBS]; /* the SHAPEs, then the old-style options' problem */
  int n_shapes;
  cli_words legacy;     /* the old problem options' words */
  cli_words loss;       /* the loss-family options' words, for every problem */
  int archs[MAX_ARCHS], n_archs;
  const char *arch;
  const char *cache_dir; /* NULL: the writable cache from the environment */
  const char *wisdom;    /* --wisdom F: the plans of a wisdom file too */
  const char *file;      /* --file F: shapes, one per line */
  long long jobs;
  int dry_run, no_manifest;
} precompile_opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: kljit precompile [--arch sm_80,sm_90] [--cache-dir DIR] [--jobs N]\n"
          "                        [--file F] [--wisdom F] [--dry-run] [--no-manifest]\n"
          "                        [--] [SHAPE ...]\n"
          "Renders and compiles (NVRTC, no GPU needed) every kernel module plans for the given\n"
          "problems use on each architecture, into the kernel cache DIR; plans elsewhere load\n"
          "them when DIR is in their KLJIT_CACHE_PATH. Progress goes to stderr, one line per\n"
          "module. Then writes DIR/manifest.txt: every entry of DIR with its arch, SHA-256 and\n"
          "size (format: docs/cache-format.md), one manifest for all the problems and archs.\n"
          "Without a SHAPE, --file or --wisdom: the README's problem, V=128256,H=4096,bf16.\n\n"
          "%s\n"
          "options:\n"
          "  --arch LIST       architectures, comma-separated (default sm_80,sm_90); sm_90a is\n"
          "                    sm_90 (the kernels use no arch-specific instructions)\n"
          "  --cache-dir DIR   destination, created 0700 if missing (default: the user cache,\n"
          "                    see kljit info)\n"
          "  --jobs N          compile N (problem, arch) pairs at a time (default 1)\n"
          "  --file F          more SHAPEs from F, one per line ('#' starts a comment)\n"
          "  --wisdom F        every plan the wisdom file F leads to (its tuned choices for\n"
          "                    GPUs of each arch, the heuristic ones for others; docs/wisdom.md)\n"
          "  --dry-run         say which modules would be compiled; write nothing\n"
          "  --no-manifest     do not write DIR/manifest.txt\n"
          "%s",
          CLI_SHAPE_HELP, CLI_PROBLEM_HELP);
}

/* ---- jobs ---------------------------------------------------------------------------------- */

typedef struct job {
  const kljit_problem *pb;
  int arch;
  const char *wisdom; /* not NULL: the plans of this wisdom file (pb unused) */
} job;

typedef struct run_state {
  const precompile_opts *o;
  job jobs[MAX_JOBS * MAX_ARCHS];
  int n_jobs;
  pthread_mutex_t lock; /* guards everything below and stderr's progress lines */
  int next;             /* next job to take */
  int done, total;      /* modules finished / expected (from the dry run) */
  int compiled[MAX_ARCHS], cached[MAX_ARCHS];
  int failed;          /* jobs that failed; each one's message went to stderr */
  char (*files)[80];   /* the entry of every module reported, checked against the manifest */
  int n_files, cap_files;
} run_state;

static int arch_slot(const precompile_opts *o, int arch) {
  for (int i = 0; i < o->n_archs; i++)
    if (o->archs[i] == arch) return i;
  return 0;
}

static void on_module(const kljit_module_report *m, void *user) {
  run_state *const s = user;
  pthread_mutex_lock(&s->lock);
  const int slot = arch_slot(s->o, m->arch);
  if (m->compiled)
    s->compiled[slot]++;
  else
    s->cached[slot]++;
  s->done++;
  if (!s->o->dry_run && s->n_files == s->cap_files) {
    const int cap = s->cap_files ? 2 * s->cap_files : 64;
    char(*grown)[80] = realloc(s->files, (size_t)cap * sizeof *grown);
    if (grown) s->files = grown, s->cap_files = cap;
  }
  if (!s->o->dry_run && s->n_files < s->cap_files)
    snprintf(s->files[s->n_files++], sizeof s->files[0], "%s", m->file);
  const char *const what = !m->compiled ? "cached" : s->o->dry_run ? "to compile" : "compiled";
  fprintf(stderr, "[%d/%d] sm_%d %s %s", s->done, s->total, m->arch, m->name, what);
  if (m->compiled && !s->o->dry_run) fprintf(stderr, " (%.0f ms)", m->compile_ms);
  fputc('\n', stderr);
  pthread_mutex_unlock(&s->lock);
}

static void on_probe(const kljit_module_report *m, void *user) {
  (void)m;
  ++*(int *)user;
}

/* One job through the library. A job of another kind (a wisdom file's modules, say) is a field
 * in `job` and a branch here; the probe pass and the workers both come through here. */
static kljit_status run_job(const job *j, const char *dir, uint32_t flags,
                            kljit_module_callback done, void *user) {
  if (j->wisdom) return kljit_precompile_wisdom(j->wisdom, j->arch, dir, flags, done, user);
  return kljit_precompile(j->pb, j->arch, dir, flags, done, user);
}

static void *worker(void *arg) {
  run_state *const s = arg;
  const uint32_t flags = s->o->dry_run ? KLJIT_PRECOMPILE_DRY_RUN : 0;
  for (;;) {
    /* Every job runs even after one failed: an operator filling a cluster cache needs every
     * module that is not in it named, not just the first. */
    pthread_mutex_lock(&s->lock);
    const int i = s->next++;
    pthread_mutex_unlock(&s->lock);
    if (i >= s->n_jobs) return NULL;
    const job *const j = &s->jobs[i];
    const kljit_status st = run_job(j, s->o->cache_dir, flags, on_module, s);
    if (st != KLJIT_SUCCESS) {
      pthread_mutex_lock(&s->lock);
      s->failed++;
      fprintf(stderr, "kljit: precompile: %s\n  %s\n", kljit_status_string(st), kljit_last_error());
      pthread_mutex_unlock(&s->lock);
    }
  }
}

/* ---- manifest ------------------------------------------------------------------------------ */

typedef struct manifest_writer {
  FILE *f;
  int entries, skipped;
  char (*listed)[80]; /* the files written into the manifest */
  int cap;
} manifest_writer;

static int manifest_line(const kljit_cache_entry_info *e, void *user) {
  manifest_writer *const w = user;
  if (e->status != KLJIT_SUCCESS) { /* a damaged entry is not vouched for */
    w->skipped++;
    return 0;
  }
  if (w->entries == w->cap) {
    const int cap = w->cap ? 2 * w->cap : 64;
    char(*grown)[80] = realloc(w->listed, (size_t)cap * sizeof *grown);
    if (!grown) return 1; /* stops the listing: the manifest is then not written */
    w->listed = grown, w->cap = cap;
  }
  snprintf(w->listed[w->entries], sizeof w->listed[0], "%s", e->file);
  fprintf(w->f, "%s sm_%d %s %llu %s\n", e->file, e->arch, e->sha256, (unsigned long long)e->size,
          e->name[0] ? e->name : "-");
  w->entries++;
  return 0;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(a, b);
}

/* 0 when every module this run reported is listed in the manifest (valid and present when
 * the directory was listed), else names each missing one on stderr and returns their count. */
static int missing_from_manifest(const char *dir, const run_state *s, manifest_writer *w) {
  qsort(w->listed, (size_t)w->entries, sizeof w->listed[0], name_cmp);
  int missing = 0;
  for (int i = 0; i < s->n_files; i++)
    if (!w->entries || !bsearch(s->files[i], w->listed, (size_t)w->entries, sizeof w->listed[0],
                                name_cmp)) {
      fprintf(stderr,
              "kljit: precompile: %s/%s was stored by this run but is gone or invalid before "
              "the manifest was written (a concurrent kljit cache clear?)\n",
              dir, s->files[i]);
      missing++;
    }
  return missing;
}

/* 0 when every file the manifest lists is still a regular file (a listing races with a
 * concurrent clear: a manifest must not vouch for an entry that is not there). */
static int listed_but_gone(const char *dir, const manifest_writer *w) {
  int gone = 0;
  for (int i = 0; i < w->entries; i++) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, w->listed[i]);
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
      fprintf(stderr, "kljit: precompile: %s vanished while the manifest was written\n", path);
      gone++;
    }
  }
  return gone;
}

/* The directory's fsync after a rename, so the new name survives a power loss (as the library's
 * own publication does); 0 or -1 with errno. */
static int sync_dir(const char *dir) {
  const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  const int rc = fsync(fd);
  const int e = errno;
  close(fd);
  errno = e;
  return rc;
}

/* Writes dir/manifest.txt through a temp file, fsync and a rename (then the directory's fsync),
 * so a reader never sees half; fails (and leaves no manifest of this run) when a module this run
 * reported is not in it, or when an entry it lists disappears meanwhile. */
static int write_manifest(const char *dir, const run_state *s) {
  char tmp[4096], path[4096];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  snprintf(tmp, sizeof tmp, "%s/.manifest.txt.%ld.tmp", dir, (long)getpid());
  manifest_writer w = {fopen(tmp, "w"), 0, 0, NULL, 0};
  if (!w.f) {
    fprintf(stderr, "kljit: cannot write %s: %s\n", tmp, strerror(errno));
    return CLI_FAIL;
  }
  fprintf(w.f, "# kljit cache manifest 1\n# file arch sha256 bytes module\n");
  const kljit_status st = kljit_cache_list(dir, manifest_line, &w);
  const int io_error = ferror(w.f) || fflush(w.f) != 0 || fsync(fileno(w.f)) != 0;
  const int close_error = fclose(w.f);
  int rc = CLI_OK;
  if (st != KLJIT_SUCCESS) {
    rc = cli_fail("manifest", st);
  } else if (io_error || close_error) {
    fprintf(stderr, "kljit: cannot write %s: %s\n", tmp, strerror(errno));
    rc = CLI_FAIL;
  } else if (missing_from_manifest(dir, s, &w)) {
    rc = CLI_FAIL;
  } else if (rename(tmp, path) != 0) {
    fprintf(stderr, "kljit: cannot write %s: %s\n", path, strerror(errno));
    rc = CLI_FAIL;
  } else if (listed_but_gone(dir, &w)) {
    unlink(path);
    fprintf(stderr, "kljit: precompile: removed %s: it listed entries that are gone\n", path);
    rc = CLI_FAIL;
  } else if (sync_dir(dir) != 0) {
    fprintf(stderr, "kljit: cannot fsync the directory %s of %s: %s\n", dir, path,
            strerror(errno));
    rc = CLI_FAIL;
  }
  free(w.listed);
  if (rc != CLI_OK) {
    unlink(tmp);
    return rc;
  }
  printf("manifest: %s (%d entries", path, w.entries);
  if (w.skipped) printf("; %d invalid entries left out, see kljit cache verify", w.skipped);
  printf(")\n");
  return CLI_OK;
}

/* ---- the command --------------------------------------------------------------------------- */

static int run(cli_parser *p, precompile_opts *o) {
  char dir[4096];
  const kljit_status found = cli_cache_dir(o->cache_dir, dir);
  if (found != KLJIT_SUCCESS) return cli_fail("precompile", found);
  if (!dir[0]) {
    fprintf(stderr,
            "kljit precompile: no writable kernel cache (KLJIT_CACHE_DISABLE=1, or "
            "no KLJIT_CACHE_DIR, XDG_CACHE_HOME or HOME): pass --cache-dir\n");
    return CLI_FAIL;
  }
  o->cache_dir = dir;
  static run_state s; /* large; one per process */
  memset(&s, 0, sizeof s);
  s.o = o;
  for (int q = 0; q < o->n_shapes; q++)
    for (int a = 0; a < o->n_archs; a++)
      s.jobs[s.n_jobs++] = (job){&o->shapes[q].pb, o->archs[a], NULL};
  for (int a = 0; o->wisdom && a < o->n_archs; a++)
    s.jobs[s.n_jobs++] = (job){NULL, o->archs[a], o->wisdom};
  /* A dry run of every job first: it renders (milliseconds) and gives the total for the
   * progress lines; a bad problem or arch fails here, before any compile. */
  for (int i = 0; i < s.n_jobs; i++) {
    const kljit_status st =
        run_job(&s.jobs[i], o->cache_dir, KLJIT_PRECOMPILE_DRY_RUN, on_probe, &s.total);
    if (st != KLJIT_SUCCESS) {
      char what[32];
      snprintf(what, sizeof what, "sm_%d", s.jobs[i].arch);
      return cli_refused(p, what, st);
    }
  }
  pthread_mutex_init(&s.lock, NULL);
  const int n_threads = (int)(o->jobs < s.n_jobs ? o->jobs : s.n_jobs);
  pthread_t threads[64];
  int started = 0;
  for (; started < n_threads - 1; started++)
    if (pthread_create(&threads[started], NULL, worker, &s) != 0) break;
  worker(&s); /* the main thread is one of the workers */
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
  pthread_mutex_destroy(&s.lock);
  int rc = CLI_OK;
  if (s.failed) {
    fprintf(stderr, "kljit: precompile: %d of %d job(s) failed (see above); no manifest written\n",
            s.failed, s.n_jobs);
    rc = CLI_FAIL;
  } else {
    for (int a = 0; a < o->n_archs; a++)
      printf("sm_%d: %d module(s) %s, %d already cached -> %s\n", o->archs[a], s.compiled[a],
             o->dry_run ? "to compile" : "compiled now", s.cached[a], o->cache_dir);
    if (!o->dry_run && !o->no_manifest) rc = write_manifest(o->cache_dir, &s);
  }
  free(s.files);
  return rc;
}

int cli_precompile(int argc, char **argv) {
  static precompile_opts o; /* large; one per process */
  memset(&o, 0, sizeof o);
  o.arch = "sm_80,sm_90", o.jobs = 1;
  cli_parser p;
  cli_parser_init(&p, argc, argv);
  const char *texts[MAX_JOBS];
  int n_texts = 0;
  while (cli_next(&p)) {
    const char *text;
    if (cli_string(&p, "--arch", &o.arch)) continue;
    if (cli_string(&p, "--cache-dir", &o.cache_dir)) continue;
    if (cli_int(&p, "--jobs", 1, 64, &o.jobs)) continue;
    if (cli_flag(&p, "--dry-run")) {
      o.dry_run = 1;
      continue;
    }
    if (cli_flag(&p, "--no-manifest")) {
      o.no_manifest = 1;
      continue;
    }
    if (cli_string(&p, "--wisdom", &o.wisdom)) continue;
    if (cli_string(&p, "--file", &o.file)) continue;
    if (cli_loss_option(&p, &o.loss)) continue;
    if (cli_problem_option(&p, &o.legacy)) continue;
    if (cli_positional(&p, &text)) {
      if (n_texts == MAX_JOBS - 1)
        cli_usage_error(&p, "more than %d shapes", MAX_JOBS - 1);
      else
        texts[n_texts++] = text;
      continue;
    }
    cli_unknown(&p);
  }
  if (cli_stopped(&p, usage)) return p.status;
  /* every SHAPE with the loss-family options' words (a word of both is a contradiction) */
  for (int i = 0; i < n_texts; i++)
    if (!cli_shape_parse(&p, texts[i], &o.loss, NULL, &o.shapes[o.n_shapes++])) return p.status;
  if (o.file && !cli_shape_file(&p, o.file, &o.loss, o.shapes, &o.n_shapes, MAX_JOBS - 1))
    return p.status;
  if (o.wisdom && access(o.wisdom, R_OK) != 0)
    return cli_usage_error(&p, "--wisdom %s: %s", o.wisdom, strerror(errno));
  /* the old options' problem, or the README's when nothing else names one */
  if (o.legacy.n || (!o.n_shapes && !o.wisdom)) {
    cli_problem_words(&o.legacy);
    cli_words_append(&o.legacy, &o.loss);
    if (!cli_shape_parse(&p, "", &o.legacy, NULL, &o.shapes[o.n_shapes++])) return p.status;
  }
  if (!(o.n_archs = cli_parse_archs(&p, o.arch, o.archs, MAX_ARCHS))) return p.status;
  return run(&p, &o);
}

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

enum { MAX_ARCHS = 16, MAX_JOBS = 256 }; /* MAX_JOBS: problems (shapes + the options') */

typedef struct precompile_opts {
  cli_shape shapes[MAX_JOBS];   /* the SHAPEs, then the old-style options' problem */
  const char *labels[MAX_JOBS]; /* each problem's SHAPE as written, for messages */
  int n_shapes;
  cli_words legacy;     /* the old problem options' words */
  cli_words loss;       /* the loss-family options' words, for every problem */
  int archs[MAX_ARCHS], n_archs;
  const char *arch;
  const char *cache_dir; /* NULL: the writable cache from the environment */
  const char *wisdom;    /* --wisdom F: the plans of a wisdom file too */
  const char *file;      /* --file F: shapes, one per line */
  long long jobs;
  int dry_run, no_manifest, shared;
} precompile_opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: kljit precompile [--arch sm_80,sm_90] [--cache-dir DIR] [--jobs N]\n"
          "                        [--file F] [--wisdom F] [--shared] [--dry-run]\n"
          "                        [--no-manifest]\n"
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
          "  --file F          more SHAPEs from the regular file F, one per line ('#' starts a\n"
          "                    comment)\n"
          "  --wisdom F        every plan the wisdom file F leads to (its tuned choices for\n"
          "                    GPUs of each arch, the heuristic ones for others; docs/wisdom.md)\n"
          "  --shared          a cache other users read (a cluster cache): directory 0755,\n"
          "                    entries and manifest 0644 (earlier private entries made\n"
          "                    readable). Refused, before any compile, when DIR is writable by\n"
          "                    group or others or owned by another user; readers trust it when\n"
          "                    it is root's or an owner their KLJIT_CACHE_TRUSTED_OWNERS names\n"
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
  const char *what;   /* the SHAPE as written, or what stands for it, for messages */
} job;

/* One module (cache entry) of the run. Jobs share modules (the helpers of problems that differ
 * only in their rows, a wisdom file's plans and the same problems given as shapes): each is
 * counted and shown once, as compiled when it was missing at the dry run, whichever job then
 * builds it (the library builds one module once per process: concurrent builders of the same
 * one wait for the first). */
typedef struct module {
  char file[80];
  int arch;
  int missing;  /* not in the cache at the dry run */
  int reported; /* a job has built or found it */
} module;

typedef struct run_state {
  const precompile_opts *o;
  job *jobs; /* every (problem, arch) pair, then the wisdom file's arch jobs */
  int n_jobs;
  pthread_mutex_t lock; /* guards everything below and stderr's progress lines */
  int next;             /* next job to take */
  int done;             /* distinct modules reported */
  module *modules;      /* the distinct modules of the dry run */
  int n_modules, cap_modules;
  int failed;           /* jobs that failed; each one's message went to stderr */
} run_state;

static module *find_module(run_state *s, const char *file) {
  for (int i = 0; i < s->n_modules; i++)
    if (!strcmp(s->modules[i].file, file)) return &s->modules[i];
  return NULL;
}

/* Adds a module of the dry run (once); NULL when out of memory. */
static module *add_module(run_state *s, const kljit_module_report *m) {
  module *found = find_module(s, m->file);
  if (found) return found;
  if (s->n_modules == s->cap_modules) {
    const int cap = s->cap_modules ? 2 * s->cap_modules : 64;
    module *const grown = realloc(s->modules, (size_t)cap * sizeof *grown);
    if (!grown) return NULL;
    s->modules = grown, s->cap_modules = cap;
  }
  module *const d = &s->modules[s->n_modules++];
  memset(d, 0, sizeof *d);
  snprintf(d->file, sizeof d->file, "%s", m->file);
  d->arch = m->arch, d->missing = m->compiled;
  return d;
}

static void on_probe(const kljit_module_report *m, void *user) {
  run_state *const s = user;
  if (!add_module(s, m)) s->failed++;
}

static void on_module(const kljit_module_report *m, void *user) {
  run_state *const s = user;
  pthread_mutex_lock(&s->lock);
  module *d = find_module(s, m->file);
  if (!d) d = add_module(s, m); /* not in the dry run: stored by someone else meanwhile */
  if (d && !d->reported) {
    d->reported = 1;
    s->done++;
    const char *const what =
        s->o->dry_run ? (d->missing ? "to compile" : "cached") : d->missing ? "compiled" : "cached";
    fprintf(stderr, "[%d/%d] sm_%d %s %s", s->done, s->n_modules, m->arch, m->name, what);
    if (m->compiled && !s->o->dry_run) fprintf(stderr, " (%.0f ms)", m->compile_ms);
    fputc('\n', stderr);
  }
  pthread_mutex_unlock(&s->lock);
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
  const uint32_t flags = (s->o->dry_run ? KLJIT_PRECOMPILE_DRY_RUN : 0) |
                         (s->o->shared ? KLJIT_PRECOMPILE_SHARED : 0);
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
      fprintf(stderr, "kljit precompile: %s on sm_%d: %s: %s\n", j->what, j->arch,
              kljit_status_string(st), cli_last_error());
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
  for (int i = 0; i < s->n_modules; i++)
    if (s->modules[i].reported &&
        (!w->entries || !bsearch(s->modules[i].file, w->listed, (size_t)w->entries,
                                 sizeof w->listed[0], name_cmp))) {
      fprintf(stderr,
              "kljit precompile: %s/%s was stored by this run but is gone or invalid before "
              "the manifest was written (a concurrent kljit cache clear?)\n",
              dir, s->modules[i].file);
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

/* What kljit publishes replaces only a regular file (as the library's own publication): a FIFO,
 * device, link or directory at DIR/manifest.txt is refused and left as it is. 1 when `path` is
 * absent or a regular file, else 0 after saying why. */
static int manifest_replaceable(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return 1;
    fprintf(stderr, "kljit precompile: cannot stat %s: %s\n", path, strerror(errno));
    return 0;
  }
  if (S_ISREG(st.st_mode)) return 1;
  fprintf(stderr, "kljit precompile: refusing to replace %s: it is %s, not a regular file\n", path,
          S_ISLNK(st.st_mode)    ? "a symbolic link"
          : S_ISDIR(st.st_mode)  ? "a directory"
          : S_ISFIFO(st.st_mode) ? "a FIFO"
                                 : "a device or socket");
  return 0;
}

/* The manifest's lock (docs/cache-format.md): an fcntl write lock on DIR/manifest.txt.lock, held
 * from the listing to the rename. Concurrent precompiles into one directory used to list it and
 * rename their manifests over each other's: the last rename could come from a run that listed
 * before another's entries existed. Under the lock the last one to list sees every entry stored
 * before it. The lock file stays (as wisdom's): removing it would race with a waiting writer.
 * The fd, or -1 after saying why. */
static int lock_manifest(const char *dir, unsigned mode) {
  char path[4200];
  snprintf(path, sizeof path, "%s/manifest.txt.lock", dir);
  const int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, (mode_t)mode);
  struct stat st;
  struct flock fl;
  memset(&fl, 0, sizeof fl);
  fl.l_type = F_WRLCK, fl.l_whence = SEEK_SET;
  int rc = -1;
  if (fd >= 0 && fstat(fd, &st) == 0 && !S_ISREG(st.st_mode))
    errno = EINVAL;
  else if (fd >= 0)
    do rc = fcntl(fd, F_SETLKW, &fl);
    while (rc != 0 && errno == EINTR);
  if (rc == 0) return fd;
  fprintf(stderr, "kljit precompile: cannot lock %s: %s\n", path, strerror(errno));
  if (fd >= 0) close(fd);
  return -1;
}

/* Writes dir/manifest.txt through a temp file, fsync and a rename (then the directory's fsync),
 * so a reader never sees half, under the manifest's lock; fails (and leaves no manifest of this
 * run) when a module this run reported is not in it, when an entry it lists disappears
 * meanwhile, or when manifest.txt is not a regular file. */
static int write_manifest(const char *dir, const run_state *s, unsigned mode) {
  char tmp[4096], path[4096];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  snprintf(tmp, sizeof tmp, "%s/.manifest.txt.%ld.tmp", dir, (long)getpid());
  if (!manifest_replaceable(path)) return CLI_FAIL;
  const int lock = lock_manifest(dir, mode);
  if (lock < 0) return CLI_FAIL;
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  manifest_writer w = {fd >= 0 ? fdopen(fd, "w") : NULL, 0, 0, NULL, 0};
  if (!w.f) {
    fprintf(stderr, "kljit: cannot write %s: %s\n", tmp, strerror(errno));
    if (fd >= 0) close(fd), unlink(tmp);
    close(lock);
    return CLI_FAIL;
  }
  fprintf(w.f, "# kljit cache manifest 1\n# file arch sha256 bytes module\n");
  const kljit_status st = kljit_cache_list(dir, manifest_line, &w);
  const int io_error = ferror(w.f) || fflush(w.f) != 0 || fchmod(fileno(w.f), (mode_t)mode) != 0 ||
                       fsync(fileno(w.f)) != 0;
  const int close_error = fclose(w.f);
  int rc = CLI_OK;
  if (st != KLJIT_SUCCESS) {
    rc = cli_fail("manifest", st);
  } else if (io_error || close_error) {
    fprintf(stderr, "kljit: cannot write %s: %s\n", tmp, strerror(errno));
    rc = CLI_FAIL;
  } else if (missing_from_manifest(dir, s, &w)) {
    rc = CLI_FAIL;
  } else if (!manifest_replaceable(path)) { /* again: something may have been put there */
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
  close(lock);
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
  /* A destination readers would refuse (another owner, writable by group or others) or that
   * cannot be read is refused once, now, not once per module after every compile. */
  struct stat dir_st;
  if (stat(dir, &dir_st) == 0 && kljit_cache_dir_check(dir) != KLJIT_SUCCESS) {
    fprintf(stderr, "kljit precompile: %s\n", cli_last_error());
    return CLI_FAIL;
  }
  static run_state s; /* one per process */
  memset(&s, 0, sizeof s);
  s.o = o;
  s.jobs = calloc((size_t)(o->n_shapes + 1) * (size_t)o->n_archs, sizeof *s.jobs);
  if (!s.jobs) return fprintf(stderr, "kljit precompile: out of memory\n"), CLI_FAIL;
  for (int q = 0; q < o->n_shapes; q++)
    for (int a = 0; a < o->n_archs; a++)
      s.jobs[s.n_jobs++] = (job){&o->shapes[q].pb, o->archs[a], NULL, o->labels[q]};
  for (int a = 0; o->wisdom && a < o->n_archs; a++)
    s.jobs[s.n_jobs++] = (job){NULL, o->archs[a], o->wisdom, o->wisdom};
  int rc = CLI_OK;
  /* A dry run of every job first: it renders (milliseconds), lists the distinct modules for the
   * progress lines and the counts; a bad problem or arch fails here, before any compile. */
  for (int i = 0; i < s.n_jobs && rc == CLI_OK; i++) {
    const kljit_status st =
        run_job(&s.jobs[i], o->cache_dir, KLJIT_PRECOMPILE_DRY_RUN, on_probe, &s);
    if (st != KLJIT_SUCCESS) {
      char what[4200];
      snprintf(what, sizeof what, "%s on sm_%d", s.jobs[i].what, s.jobs[i].arch);
      rc = cli_refused(p, what, st);
    } else if (s.failed) {
      rc = CLI_FAIL, fprintf(stderr, "kljit precompile: out of memory\n");
    }
  }
  if (rc == CLI_OK) {
    pthread_mutex_init(&s.lock, NULL);
    const int n_threads = (int)(o->jobs < s.n_jobs ? o->jobs : s.n_jobs);
    pthread_t threads[64];
    int started = 0;
    for (; started < n_threads - 1; started++)
      if (pthread_create(&threads[started], NULL, worker, &s) != 0) break;
    worker(&s); /* the main thread is one of the workers */
    for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
    pthread_mutex_destroy(&s.lock);
  }
  if (rc == CLI_OK && s.failed) {
    fprintf(stderr,
            "kljit precompile: %d of %d job(s) failed (see above); no manifest written\n",
            s.failed, s.n_jobs);
    rc = CLI_FAIL;
  } else if (rc == CLI_OK) {
    for (int a = 0; a < o->n_archs; a++) {
      int compiled = 0, cached = 0;
      for (int i = 0; i < s.n_modules; i++)
        if (s.modules[i].arch == o->archs[a]) compiled += s.modules[i].missing,
                                                cached += !s.modules[i].missing;
      printf("sm_%d: %d module(s) %s, %d already cached -> %s\n", o->archs[a], compiled,
             o->dry_run ? "to compile" : "compiled now", cached, o->cache_dir);
    }
    if (!o->dry_run && !o->no_manifest)
      rc = write_manifest(o->cache_dir, &s, o->shared ? 0644 : 0600);
  }
  free(s.modules);
  free(s.jobs);
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
    if (cli_flag(&p, "--shared")) {
      o.shared = 1;
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
  for (int i = 0; i < o.n_shapes; i++) o.labels[i] = o.shapes[i].text;
  /* the old options' problem, or the README's when nothing else names one */
  if (o.legacy.n || (!o.n_shapes && !o.wisdom)) {
    o.labels[o.n_shapes] = o.legacy.n ? "the problem of the options" : CLI_DEFAULT_SHAPE;
    cli_problem_words(&o.legacy);
    cli_words_append(&o.legacy, &o.loss);
    if (!cli_shape_parse(&p, "", &o.legacy, NULL, &o.shapes[o.n_shapes++])) return p.status;
  }
  if (!(o.n_archs = cli_parse_archs(&p, o.arch, o.archs, MAX_ARCHS))) return p.status;
  return run(&p, &o);
}

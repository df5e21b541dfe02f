/* SPDX-License-Identifier: Apache-2.0 */
/* cli_cache.c — `kljit cache ls | verify | clear | stats`: the entries of kernel caches.
 *
 * Directories: --cache-dir DIR (repeatable), else those the library would use (kljit info):
 * the read-only KLJIT_CACHE_PATH ones and the writable one for ls, verify and stats; only the
 * writable one for clear, which never touches a read-only cache unless it is named. A default
 * directory that does not exist yet is reported and skipped; a named one is an error.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

enum { MAX_DIRS = 32, MAX_ARCH_ROWS = 32 };

typedef enum subcommand { SUB_LS, SUB_VERIFY, SUB_CLEAR, SUB_STATS } subcommand;

typedef struct cache_dir {
  char path[4096];
  int writable; /* 1 writable, 0 read-only (KLJIT_CACHE_PATH), -1 named on the command line */
} cache_dir;

typedef struct cache_opts {
  cache_dir dirs[MAX_DIRS];
  int n_dirs, named;
} cache_opts;

static void usage(FILE *f) {
  fputs(
      "usage: kljit cache ls|verify|clear|stats [--cache-dir DIR]...\n"
      "  ls      every entry: file, size, arch, modification time, kernel family and module\n"
      "  verify  read and validate every entry (magic, version, lengths, checksum, name, owner\n"
      "          and mode) and check DIR/manifest.txt if present. Lists each bad entry as\n"
      "          CORRUPT (content), REFUSED (owner, mode, symlink) or UNREADABLE (by this\n"
      "          user) <path>: <reason>, the directory itself too; exit code 4 when there is\n"
      "          any, 0 when all is well\n"
      "  clear   delete the entries (and leftover temp files) of the writable cache; files\n"
      "          with other names are never touched. Prints what it removed\n"
      "  stats   entries, bytes and invalid entries, per directory and per arch\n\n"
      "options:\n"
      "  --cache-dir DIR   work on DIR (repeatable) instead of the caches kljit would use:\n"
      "                    KLJIT_CACHE_PATH's read-only directories and the writable one\n"
      "                    (clear: the writable one only; see kljit info)\n",
      f);
}

/* ---- directories --------------------------------------------------------------------------- */

static void add_dir(const char *dir, int writable, void *user) {
  cache_opts *const o = user;
  if (o->n_dirs == MAX_DIRS) return;
  snprintf(o->dirs[o->n_dirs].path, sizeof o->dirs[0].path, "%s", dir);
  o->dirs[o->n_dirs++].writable = writable;
}

static const char *dir_role(const cache_dir *d) {
  return d->writable == 1 ? "writable" : d->writable == 0 ? "read-only, KLJIT_CACHE_PATH" : "named";
}

/* 1 when the directory is there to be read; otherwise says why and sets *rc for a named one. */
static int dir_present(const cache_dir *d, int *rc) {
  struct stat st;
  const int r = stat(d->path, &st);
  if (r == 0 && S_ISDIR(st.st_mode)) return 1;
  const char *const why = r == 0 ? "not a directory" : strerror(errno);
  if (d->writable == -1) {
    fprintf(stderr, "kljit cache: %s: %s\n", d->path, why);
    *rc = CLI_FAIL;
  } else {
    printf("%s (%s): %s\n", d->path, dir_role(d),
           r != 0 && errno == ENOENT ? "does not exist yet" : why);
  }
  return 0;
}

/* ---- ls ------------------------------------------------------------------------------------ */

static void format_time(int64_t t, char out[32]) {
  const time_t tt = (time_t)t;
  struct tm tm;
  if (!localtime_r(&tt, &tm) || !strftime(out, 32, "%Y-%m-%d %H:%M:%S", &tm))
    snprintf(out, 32, "%lld", (long long)t);
}

static int ls_entry(const kljit_cache_entry_info *e, void *user) {
  int *const n = user;
  char when[32], arch[16] = "?";
  format_time(e->mtime, when);
  if (e->arch) snprintf(arch, sizeof arch, "sm_%d", e->arch);
  printf("%s %10llu %-6s %s %-18s %s%s\n", e->file, (unsigned long long)e->size, arch, when,
         e->family[0] ? e->family : "-", e->name[0] ? e->name : "-",
         e->status == KLJIT_SUCCESS ? "" : "  INVALID (kljit cache verify says why)");
  ++*n;
  return 0;
}

/* ---- verify -------------------------------------------------------------------------------- */

typedef struct verify_state {
  int entries, bad;
  /* what the manifest is checked against */
  struct seen {
    char file[80], sha256[65];
    unsigned long long size;
  } * seen;
  int n_seen, cap_seen;
} verify_state;

static int verify_entry(const kljit_cache_entry_info *e, void *user) {
  verify_state *const v = user;
  v->entries++;
  if (e->status != KLJIT_SUCCESS) {
    v->bad++;
    /* the library's sentence names the path already: keep only the reason after it */
    const char *why = strstr(e->problem, e->file);
    why = why && !strncmp(why + strlen(e->file), ": ", 2) ? why + strlen(e->file) + 2 : e->problem;
    /* permissions, not content: refused (owner, mode, link) or not readable by this user */
    const char *const verdict = !strncmp(e->problem, "refusing", 8) ? "REFUSED"
                                : strstr(e->problem, "Permission denied") ? "UNREADABLE"
                                                                          : "CORRUPT";
    printf("%s %s/%s: %s\n", verdict, e->dir, e->file, why);
  }
  if (v->n_seen == v->cap_seen) {
    v->cap_seen = v->cap_seen ? 2 * v->cap_seen : 64;
    struct seen *const grown = realloc(v->seen, v->cap_seen * sizeof *grown);
    if (!grown) return 1;
    v->seen = grown;
  }
  struct seen *const s = &v->seen[v->n_seen++];
  snprintf(s->file, sizeof s->file, "%s", e->file);
  snprintf(s->sha256, sizeof s->sha256, "%s", e->status == KLJIT_SUCCESS ? e->sha256 : "");
  s->size = e->size;
  return 0;
}

/* DIR/manifest.txt whole into a NUL-terminated buffer (free it), or NULL with the reason in why:
 * absent (why ""), not a regular file (a FIFO hung fopen, a link to /dev/zero never ended), or
 * larger than any manifest precompile writes. The open never blocks or follows a link. */
enum { MANIFEST_MAX = 64 << 20 };
static char *read_manifest(const char *path, char *why, size_t cap) {
  why[0] = '\0';
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ELOOP)
      snprintf(why, cap, "a symbolic link, not a regular file");
    else if (errno != ENOENT)
      snprintf(why, cap, "cannot open: %s", strerror(errno));
    return NULL;
  }
  struct stat st;
  char *text = NULL;
  if (fstat(fd, &st) != 0)
    snprintf(why, cap, "cannot stat: %s", strerror(errno));
  else if (!S_ISREG(st.st_mode))
    snprintf(why, cap, "not a regular file");
  else if (st.st_size > MANIFEST_MAX)
    snprintf(why, cap, "%lld bytes, larger than any manifest (%d MiB)", (long long)st.st_size,
             MANIFEST_MAX >> 20);
  else if (!(text = malloc((size_t)st.st_size + 1)))
    snprintf(why, cap, "out of memory");
  if (text) {
    size_t got = 0;
    for (ssize_t n = 1; n > 0 && got < (size_t)st.st_size;) {
      n = read(fd, text + got, (size_t)st.st_size - got);
      if (n < 0 && errno == EINTR) n = 1;
      else if (n > 0) got += (size_t)n;
    }
    text[got] = '\0';
  }
  close(fd);
  return text;
}

/* Checks dir/manifest.txt (written by kljit precompile), when there is one, against the
 * entries just validated: every line's file must be there, valid, with that hash and size.
 * Valid entries it does not list are counted too (compiled after it was written: not a
 * problem, but what a cluster cache's operator wants to know). */
static void verify_manifest(const char *dir, verify_state *v) {
  char path[4200], why[160];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  char *const text = read_manifest(path, why, sizeof why);
  if (!text) {
    if (why[0]) {
      printf("CORRUPT %s: %s\n", path, why);
      v->bad++;
    }
    return;
  }
  int lines = 0, bad = 0, listed_valid = 0;
  for (char *line = text, *next; *line; line = next) {
    next = line + strcspn(line, "\n");
    if (*next) *next++ = '\0';
    if (line[0] == '#' || line[0] == '\0') continue;
    char file[128], arch[32], sha[128], name[128];
    unsigned long long size;
    lines++;
    if (sscanf(line, "%127s %31s %127s %llu %127s", file, arch, sha, &size, name) != 5) {
      printf("CORRUPT %s: malformed line %d\n", path, lines);
      bad++;
      continue;
    }
    const struct seen *s = NULL;
    for (int i = 0; i < v->n_seen && !s; i++)
      if (!strcmp(v->seen[i].file, file)) s = &v->seen[i];
    const char *why_bad = !s                       ? "listed in manifest.txt but missing"
                          : !s->sha256[0]          ? NULL /* reported above already */
                          : strcmp(s->sha256, sha) ? "SHA-256 differs from manifest.txt"
                          : s->size != size        ? "size differs from manifest.txt"
                                                   : NULL;
    if (why_bad) {
      printf("CORRUPT %s/%s: %s\n", dir, file, why_bad);
      bad++;
    } else if (s && s->sha256[0]) {
      listed_valid++;
    }
  }
  free(text);
  int valid = 0;
  for (int i = 0; i < v->n_seen; i++) valid += v->seen[i].sha256[0] != '\0';
  printf("%s: %d manifest lines checked, %d problem(s)\n", path, lines, bad);
  if (valid > listed_valid)
    printf("%s: %d valid entries not listed in manifest.txt (stored after it was written; "
           "kljit precompile lists them)\n",
           path, valid - listed_valid);
  v->bad += bad;
}

/* ---- stats --------------------------------------------------------------------------------- */

typedef struct stats {
  int entries, bad;
  unsigned long long bytes;
  struct arch_row {
    int arch, entries;
    unsigned long long bytes;
  } rows[MAX_ARCH_ROWS];
  int n_rows;
} stats;

static int stats_entry(const kljit_cache_entry_info *e, void *user) {
  stats *const s = user;
  s->entries++, s->bytes += e->size;
  if (e->status != KLJIT_SUCCESS) {
    s->bad++;
    return 0;
  }
  int r = 0;
  while (r < s->n_rows && s->rows[r].arch != e->arch) r++;
  if (r == s->n_rows) {
    if (r == MAX_ARCH_ROWS) return 0;
    s->rows[s->n_rows++] = (struct arch_row){e->arch, 0, 0};
  }
  s->rows[r].entries++, s->rows[r].bytes += e->size;
  return 0;
}

static void stats_print(const char *label, const stats *s) {
  printf("%s: %d entries, %llu bytes (%.1f MiB), %d invalid\n", label, s->entries, s->bytes,
         s->bytes / 1048576.0, s->bad);
  for (int r = 0; r < s->n_rows; r++)
    printf("  sm_%-4d %6d entries %12llu bytes\n", s->rows[r].arch, s->rows[r].entries,
           s->rows[r].bytes);
}

static void stats_add(stats *total, const stats *s) {
  total->entries += s->entries, total->bytes += s->bytes, total->bad += s->bad;
  for (int r = 0; r < s->n_rows; r++) {
    int t = 0;
    while (t < total->n_rows && total->rows[t].arch != s->rows[r].arch) t++;
    if (t == total->n_rows) {
      if (t == MAX_ARCH_ROWS) continue;
      total->rows[total->n_rows++] = (struct arch_row){s->rows[r].arch, 0, 0};
    }
    total->rows[t].entries += s->rows[r].entries, total->rows[t].bytes += s->rows[r].bytes;
  }
}

/* ---- clear --------------------------------------------------------------------------------- */

typedef struct clear_state {
  int files;
  unsigned long long bytes;
} clear_state;

static int clear_entry(const kljit_cache_entry_info *e, void *user) {
  clear_state *const c = user;
  char arch[16] = "";
  if (e->arch) snprintf(arch, sizeof arch, " sm_%d", e->arch);
  printf("removed %s/%s (%llu bytes%s%s%s)\n", e->dir, e->file, (unsigned long long)e->size, arch,
         e->name[0] ? " " : "", e->name);
  c->files++, c->bytes += e->size;
  return 0;
}

/* manifest.txt describes the entries just removed: it goes too, but only when it is a regular
 * file whose first line says precompile wrote it. */
static void clear_manifest(const char *dir) {
  char path[4200], why[160];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  char *const text = read_manifest(path, why, sizeof why);
  const int ours = text && !strncmp(text, "# kljit cache manifest 1\n", 25);
  free(text);
  if (ours && remove(path) == 0) printf("removed %s\n", path);
}

/* ---- the command --------------------------------------------------------------------------- */

static int run_dir(subcommand sub, const cache_dir *d, stats *total, int *bad) {
  kljit_status st = KLJIT_SUCCESS;
  switch (sub) {
    case SUB_LS: {
      int n = 0;
      printf("# %s (%s)\n", d->path, dir_role(d));
      st = kljit_cache_list(d->path, ls_entry, &n);
      if (!st) printf("# %d entries\n", n);
      break;
    }
    case SUB_VERIFY: {
      verify_state v = {0};
      /* a directory plans would skip (unreadable) or refuse is this user's problem to know */
      if (kljit_cache_dir_check(d->path) != KLJIT_SUCCESS) {
        const char *const why = cli_last_error();
        const int refused = strstr(why, "refusing") != NULL;
        printf("%s %s (%s): %s%s\n", refused ? "REFUSED" : "UNREADABLE", d->path, dir_role(d),
               why,
               d->writable != 0 ? ""
               : refused        ? " (plans of this user fail on it)"
                                : " (plans of this user skip it and compile what it holds)");
        *bad += 1;
        break;
      }
      st = kljit_cache_list(d->path, verify_entry, &v);
      if (!st) {
        verify_manifest(d->path, &v);
        printf("%s (%s): %d entries, %d problem(s)\n", d->path, dir_role(d), v.entries, v.bad);
        *bad += v.bad;
      }
      free(v.seen);
      break;
    }
    case SUB_STATS: {
      stats s = {0};
      st = kljit_cache_list(d->path, stats_entry, &s);
      if (!st) {
        char label[4200];
        snprintf(label, sizeof label, "%s (%s)", d->path, dir_role(d));
        stats_print(label, &s);
        stats_add(total, &s);
      }
      break;
    }
    case SUB_CLEAR: {
      clear_state c = {0};
      st = kljit_cache_clear(d->path, clear_entry, &c);
      if (!st) {
        clear_manifest(d->path);
        printf("%s: removed %d files, %llu bytes\n", d->path, c.files, c.bytes);
      }
      break;
    }
  }
  return st ? cli_fail("cache", st) : CLI_OK;
}

int cli_cache(int argc, char **argv) {
  static const cli_choice SUBS[] = {{"ls", SUB_LS},
                                    {"verify", SUB_VERIFY},
                                    {"clear", SUB_CLEAR},
                                    {"stats", SUB_STATS},
                                    {NULL, 0}};
  static cache_opts o;
  memset(&o, 0, sizeof o);
  int sub = -1;
  cli_parser p;
  cli_parser_init(&p, argc, argv);
  while (cli_next(&p)) {
    const char *v;
    if (cli_string(&p, "--cache-dir", &v)) {
      if (p.status == CLI_OK && o.n_dirs == MAX_DIRS)
        cli_usage_error(&p, "at most %d --cache-dir options", MAX_DIRS);
      else if (p.status == CLI_OK)
        add_dir(v, -1, &o), o.named = 1;
      continue;
    }
    if (sub < 0 && cli_positional(&p, &v)) {
      for (const cli_choice *c = SUBS; c->name; c++)
        if (!strcmp(v, c->name)) sub = c->value;
      if (sub < 0)
        cli_usage_error(&p, "unknown subcommand '%s': want ls, verify, clear or stats", v);
      continue;
    }
    cli_unknown(&p);
  }
  if (cli_stopped(&p, usage)) return p.status;
  if (sub < 0) return cli_usage_error(&p, "which one: ls, verify, clear or stats?");
  if (!o.named) {
    const kljit_status st = kljit_cache_dirs(add_dir, &o);
    if (st != KLJIT_SUCCESS) return cli_fail("cache", st);
    if (sub == SUB_CLEAR) { /* the writable directory only */
      int w = 0;
      for (int i = 0; i < o.n_dirs; i++)
        if (o.dirs[i].writable) o.dirs[w++] = o.dirs[i];
      o.n_dirs = w;
    }
    if (o.n_dirs == 0) {
      printf(
          "no kernel cache is configured (KLJIT_CACHE_DISABLE=1, or no KLJIT_CACHE_DIR, "
          "XDG_CACHE_HOME or HOME)\n");
      return CLI_OK;
    }
  }
  int rc = CLI_OK, bad = 0;
  stats total = {0};
  for (int i = 0; i < o.n_dirs; i++) {
    if (!dir_present(&o.dirs[i], &rc)) continue;
    const int r = run_dir((subcommand)sub, &o.dirs[i], &total, &bad);
    if (r != CLI_OK) rc = r;
  }
  if (sub == SUB_STATS && o.n_dirs > 1) stats_print("total", &total);
  if (rc != CLI_OK) return rc;
  return sub == SUB_VERIFY && bad ? CLI_CORRUPT : CLI_OK;
}

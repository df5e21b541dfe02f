/* SPDX-License-Identifier: Apache-2.0 */
/* wisdom_store.c — the process-wide wisdom store, its default files, and the public wisdom API.
 *
 * `store` holds every entry this process knows (see wisdom.h for the invariants). The system
 * file, then the user file, are merged into it on the first use of wisdom; kljit_wisdom_forget
 * empties it for good. Tuned entries are also merged into the user file (and, on request, the
 * store into any file: kljit_wisdom_merge_file): read-merge-write under an advisory lock (fcntl
 * on "<file>.lock"), so concurrent writers lose nothing, published with rename(2) and a
 * directory fsync, so a reader never sees half a file and needs no lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wisdom.h"
#include "env.h"
#include "fs.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;      /* store, defaults_done */
static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER; /* the user file */
static wisdom_set store;
static int defaults_done;

enum { WISDOM_FILE_MAX = 16 << 20 };

/* The user file is durable data, not a cache: XDG puts it under $XDG_STATE_HOME, so clearing
 * ~/.cache keeps what tuning learned. An explicit KLJIT_CACHE_DIR keeps its file beside the
 * cache (a private setup: tests, containers, a cluster job's scratch). */
kljit_status wisdom_default_path(kljit_wisdom_file which, strbuf *out) {
  if (which == KLJIT_WISDOM_SYSTEM) {
    const char *e = env_text(ENV_SYSTEM_WISDOM);
    return sb_printf(out, "%s", e ? e : "/etc/kljit/wisdom");
  }
  const char *e = env_text(ENV_WISDOM);
  if (e) return sb_printf(out, "%s", strcmp(e, "none") == 0 ? "" : e);
  const char *dir = env_text(ENV_CACHE_DIR), *xdg = env_text(ENV_XDG_STATE_HOME);
  const char *home = env_text(ENV_HOME);
  if (dir && *dir) return sb_printf(out, "%s/wisdom", dir);
  if (xdg && xdg[0] == '/') return sb_printf(out, "%s/kljit/wisdom", xdg);
  if (home && *home) return sb_printf(out, "%s/.local/state/kljit/wisdom", home);
  return sb_printf(out, "%s", "");
}

/* Where kljit 0.1.0 kept the default user file, beside the kernel cache; still read (after the
 * user file) so existing users keep their tunings, never written. "" when the user file is not
 * the default one. */
static kljit_status legacy_user_path(strbuf *out) {
  const char *dir = env_text(ENV_CACHE_DIR);
  if (env_text(ENV_WISDOM) || (dir && *dir)) return sb_printf(out, "%s", "");
  strbuf cache = {0};
  kljit_status st = fs_default_cache_dir(NULL, &cache);
  if (st == KLJIT_SUCCESS)
    st = sb_printf(out, "%s%s", cache.data ? cache.data : "", cache.data ? "/wisdom" : "");
  sb_free(&cache);
  return st;
}

/* Reads a whole (small) file: fs_read_regular, at most WISDOM_FILE_MAX bytes, KLJIT_ERR_WISDOM
 * naming the path; *missing set on ENOENT. A text holding NUL bytes is not a wisdom file. */
static kljit_status read_text(const char *path, strbuf *text, int *missing) {
  kljit_status st =
      fs_read_regular(path, WISDOM_FILE_MAX, text, KLJIT_ERR_WISDOM, "wisdom file", missing);
  if (st == KLJIT_SUCCESS && strlen(text->data) != text->len)
    st = err_set(KLJIT_ERR_WISDOM, "%s: not a kljit wisdom file (it holds NUL bytes)", path);
  return st;
}

kljit_status wisdom_read_file(const char *path, wisdom_set *out, int *stale) {
  memset(out, 0, sizeof *out);
  if (stale) *stale = 0;
  strbuf text = {0};
  kljit_status st = read_text(path, &text, NULL);
  if (st == KLJIT_SUCCESS) st = wisdom_parse(text.data, path, out, stale);
  sb_free(&text);
  return st;
}

enum { LEGACY_USER_FILE = -1 };

/* The advisory lock of wisdom file `path`: an fcntl write lock on "<path>.lock" (fcntl, unlike
 * flock, also holds over NFS), so that read-merge-write cycles of processes sharing the file
 * run one at a time and none loses another's entry. The fd, or -1 with the error set. The lock
 * file stays, deliberately: removing it after use would race with a process that has just
 * opened it (and would then lock a name no one else sees), and an fcntl lock needs a file
 * opened for writing, so neither the wisdom file (replaced by rename) nor its directory can
 * carry it. Callers check the wisdom file itself first (fs_check_replaceable_path): a path that
 * will be refused gets no lock file. */
static int lock_wisdom_file(const char *path) {
  strbuf lp = {0};
  if (sb_printf(&lp, "%s.lock", path) != KLJIT_SUCCESS) return -1;
  const int fd = open(lp.data, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  int rc = -1;
  if (fd >= 0) {
    struct stat sb;
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK, fl.l_whence = SEEK_SET; /* l_len 0: the whole file */
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
      errno = EINVAL;
    } else {
      do rc = fcntl(fd, F_SETLKW, &fl);
      while (rc != 0 && errno == EINTR);
    }
  }
  if (rc != 0) {
    err_set(KLJIT_ERR_WISDOM, "cannot lock %s: %s", lp.data, strerror(errno));
    if (fd >= 0) close(fd);
    sb_free(&lp);
    return -1;
  }
  sb_free(&lp);
  return fd;
}

static void unlock_wisdom_file(int fd) {
  if (fd >= 0) close(fd); /* closing releases the fcntl lock */
}

/* Merges a default file into the store (lock held); a missing one is silently absent, a bad
 * one is skipped and logged: the defaults never make a plan fail. */
static void load_default_locked(int which) {
  strbuf path = {0};
  const kljit_status found = which == LEGACY_USER_FILE
                                 ? legacy_user_path(&path)
                                 : wisdom_default_path((kljit_wisdom_file)which, &path);
  if (found != KLJIT_SUCCESS || !path.data || !*path.data) {
    sb_free(&path);
    return;
  }
  strbuf text = {0};
  int missing = 0;
  wisdom_set s;
  memset(&s, 0, sizeof s);
  kljit_status st = read_text(path.data, &text, &missing);
  if (st == KLJIT_SUCCESS) st = wisdom_parse_entries(text.data, path.data, &s, NULL);
  const size_t n = s.n;
  if (st == KLJIT_SUCCESS) st = wisdom_merge_set_take(&store, &s);
  if (st == KLJIT_SUCCESS)
    util_log("wisdom: %zu entries from %s", n, path.data);
  else if (!missing)
    util_log("wisdom: skipping %s: %s", path.data, kljit_last_error());
  err_clear();
  wisdom_set_free(&s);
  sb_free(&text);
  sb_free(&path);
}

static void ensure_defaults_locked(void) {
  if (defaults_done) return;
  defaults_done = 1;
  load_default_locked(KLJIT_WISDOM_SYSTEM); /* searched first: wins ties */
  load_default_locked(KLJIT_WISDOM_USER);
  load_default_locked(LEGACY_USER_FILE);
}

int wisdom_lookup(const char *gpu, int arch, int sms, const char *problem, int64_t bucket,
                  wisdom_match match, kljit_plan_rigor min_rigor, wisdom_entry *out) {
  pthread_mutex_lock(&lock);
  ensure_defaults_locked();
  const wisdom_entry *best = NULL;
  int64_t best_dist = 0;
  for (size_t i = 0; i < store.n; i++) {
    const wisdom_entry *e = &store.e[i];
    if (e->arch != arch || e->sms != sms || e->rigor < min_rigor || strcmp(e->gpu, gpu) != 0 ||
        strcmp(e->problem, problem) != 0)
      continue;
    if (match == WISDOM_EXACT_BUCKET && e->bucket != bucket) continue;
    /* distance in octaves; buckets are powers of two */
    int64_t lo = e->bucket < bucket ? e->bucket : bucket, hi = e->bucket ^ bucket ^ lo, d = 0;
    while (lo < hi) lo *= 2, d++;
    if (!best || d < best_dist || (d == best_dist && e->bucket > best->bucket))
      best = e, best_dist = d;
  }
  if (best) *out = *best;
  pthread_mutex_unlock(&lock);
  return best != NULL;
}

/* Creates the directory of `path` (0700, as the kernel cache's), so its lock file can be made
 * beside it; a failure shows as the lock's, which save_to_user_file logs. */
static void make_parent_dir(const char *path) {
  strbuf dir = {0};
  const char *slash = strrchr(path, '/');
  if (slash && slash != path && sb_append(&dir, path, (size_t)(slash - path)) == KLJIT_SUCCESS &&
      fs_mkdir_p(dir.data, KLJIT_ERR_WISDOM, "wisdom directory", NULL) != KLJIT_SUCCESS)
    err_clear();
  sb_free(&dir);
}

/* Read-merge-write of the wisdom file `path` under its lock: `add` merged into what the file
 * holds (by the merge rules), published atomically. A missing file is started; a stale one too
 * when `restart_stale` (the user file: tuning must not stop at an old file), else refused. */
static kljit_status merge_into_file(const char *path, const wisdom_set *add, int restart_stale) {
  strbuf text = {0};
  wisdom_set s;
  memset(&s, 0, sizeof s);
  int missing = 0, stale = 0;
  /* before the lock: a refused path gets no "<path>.lock" beside it */
  kljit_status st = fs_check_replaceable_path(path, KLJIT_ERR_WISDOM, "wisdom file");
  const int lock_fd = st == KLJIT_SUCCESS ? lock_wisdom_file(path) : -1;
  if (st == KLJIT_SUCCESS && lock_fd < 0) st = KLJIT_ERR_WISDOM;
  if (st == KLJIT_SUCCESS) st = read_text(path, &text, &missing);
  if (st == KLJIT_SUCCESS) st = wisdom_parse(text.data, path, &s, &stale);
  if (st != KLJIT_SUCCESS && lock_fd >= 0 && (missing || (stale && restart_stale))) {
    if (stale) util_log("wisdom: replacing %s: %s", path, kljit_last_error());
    st = KLJIT_SUCCESS; /* start it afresh */
  }
  sb_free(&text);
  if (st == KLJIT_SUCCESS) st = wisdom_merge_set(&s, add);
  if (st == KLJIT_SUCCESS) st = wisdom_format(&s, &text);
  if (st == KLJIT_SUCCESS)
    st = fs_write_atomic(path, text.data, text.len, 0644, KLJIT_ERR_WISDOM, "wisdom file");
  unlock_wisdom_file(lock_fd);
  wisdom_set_free(&s);
  sb_free(&text);
  return st;
}

/* Merges one entry into the user file. Never fails the caller: problems are logged. */
static void save_to_user_file(const wisdom_entry *e) {
  strbuf path = {0};
  if (wisdom_default_path(KLJIT_WISDOM_USER, &path) != KLJIT_SUCCESS || !path.data || !*path.data) {
    sb_free(&path);
    return;
  }
  wisdom_set one;
  memset(&one, 0, sizeof one);
  pthread_mutex_lock(&file_lock); /* threads of this process; the fcntl lock: processes */
  make_parent_dir(path.data);
  kljit_status st = wisdom_merge(&one, e);
  if (st == KLJIT_SUCCESS) st = merge_into_file(path.data, &one, 1);
  if (st != KLJIT_SUCCESS)
    util_log("wisdom: not saved to %s: %s", path.data, kljit_last_error());
  else
    util_log("wisdom: saved to %s", path.data);
  pthread_mutex_unlock(&file_lock);
  err_clear();
  wisdom_set_free(&one);
  sb_free(&path);
}

kljit_status wisdom_add(const wisdom_entry *e) {
  wisdom_entry clean = *e;
  for (char *c = clean.gpu; *c; c++) /* the format quotes the name: no quotes, no controls */
    if (*c == '"' || (unsigned char)*c < 0x20 || *c == 0x7f) *c = '_';
  pthread_mutex_lock(&lock);
  ensure_defaults_locked();
  const kljit_status st = wisdom_merge(&store, &clean);
  pthread_mutex_unlock(&lock);
  if (st == KLJIT_SUCCESS) save_to_user_file(&clean);
  return st;
}

/* ---- public API -------------------------------------------------------------------------- */

/* Merges parsed entries (wisdom_parse_entries) into the store; s is used up. */
static kljit_status import_set(wisdom_set *s) {
  kljit_status st = KLJIT_SUCCESS;
  pthread_mutex_lock(&lock);
  ensure_defaults_locked();
  st = wisdom_merge_set_take(&store, s);
  pthread_mutex_unlock(&lock);
  return st;
}

kljit_status kljit_wisdom_import_file(const char *path) {
  err_clear();
  if (!path || !*path)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_wisdom_import_file: path is %s",
                   path ? "empty" : "NULL");
  wisdom_set s;
  memset(&s, 0, sizeof s);
  strbuf text = {0};
  kljit_status st = read_text(path, &text, NULL);
  if (st == KLJIT_SUCCESS) st = wisdom_parse_entries(text.data, path, &s, NULL);
  if (st == KLJIT_SUCCESS) st = import_set(&s);
  wisdom_set_free(&s);
  sb_free(&text);
  if (st == KLJIT_SUCCESS) err_clear();
  return st;
}

kljit_status kljit_wisdom_import_string(const char *text) {
  err_clear();
  if (!text) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_wisdom_import_string: text is NULL");
  wisdom_set s;
  kljit_status st = wisdom_parse_entries(text, "<string>", &s, NULL);
  if (st == KLJIT_SUCCESS) st = import_set(&s);
  wisdom_set_free(&s);
  if (st == KLJIT_SUCCESS) err_clear();
  return st;
}

static kljit_status export_text(strbuf *text) {
  pthread_mutex_lock(&lock);
  ensure_defaults_locked();
  const kljit_status st = wisdom_format(&store, text);
  pthread_mutex_unlock(&lock);
  return st;
}

kljit_status kljit_wisdom_export_file(const char *path) {
  err_clear();
  if (!path || !*path)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_wisdom_export_file: path is %s",
                   path ? "empty" : "NULL");
  strbuf text = {0};
  kljit_status st = export_text(&text);
  /* before the lock: a refused path gets no "<path>.lock" beside it */
  if (st == KLJIT_SUCCESS) st = fs_check_replaceable_path(path, KLJIT_ERR_WISDOM, "wisdom file");
  const int lock_fd = st == KLJIT_SUCCESS ? lock_wisdom_file(path) : -1;
  if (st == KLJIT_SUCCESS && lock_fd < 0) st = KLJIT_ERR_WISDOM;
  if (st == KLJIT_SUCCESS)
    st = fs_write_atomic(path, text.data, text.len, 0644, KLJIT_ERR_WISDOM, "wisdom file");
  unlock_wisdom_file(lock_fd);
  sb_free(&text);
  if (st == KLJIT_SUCCESS) err_clear();
  return st;
}

kljit_status kljit_wisdom_merge_file(const char *path) {
  err_clear();
  if (!path || !*path)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_wisdom_merge_file: path is %s",
                   path ? "empty" : "NULL");
  wisdom_set add;
  memset(&add, 0, sizeof add);
  pthread_mutex_lock(&lock);
  ensure_defaults_locked();
  kljit_status st = wisdom_merge_set(&add, &store);
  pthread_mutex_unlock(&lock);
  pthread_mutex_lock(&file_lock);
  if (st == KLJIT_SUCCESS) st = merge_into_file(path, &add, 0);
  pthread_mutex_unlock(&file_lock);
  wisdom_set_free(&add);
  if (st == KLJIT_SUCCESS) err_clear();
  return st;
}

kljit_status kljit_wisdom_export_string(char **out) {
  err_clear();
  if (!out) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_wisdom_export_string: text is NULL");
  *out = NULL;
  strbuf text = {0};
  const kljit_status st = export_text(&text);
  if (st != KLJIT_SUCCESS) {
    sb_free(&text);
    return st;
  }
  *out = text.data; /* malloc'd by sb_append: kljit_free releases it */
  err_clear();
  return KLJIT_SUCCESS;
}

void kljit_free(void *ptr) {
  free(ptr);
}

void kljit_wisdom_forget(void) {
  pthread_mutex_lock(&lock);
  wisdom_set_free(&store);
  defaults_done = 1;
  pthread_mutex_unlock(&lock);
}

kljit_status kljit_wisdom_path(kljit_wisdom_file which, char *buf, size_t cap) {
  err_clear();
  if (which != KLJIT_WISDOM_SYSTEM && which != KLJIT_WISDOM_USER)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_wisdom_path: which = %d", (int)which);
  if (!buf || !cap)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_wisdom_path: buf is NULL or cap is 0");
  strbuf path = {0};
  kljit_status st = wisdom_default_path(which, &path);
  const char *p = path.data ? path.data : "";
  if (st == KLJIT_SUCCESS && strlen(p) + 1 > cap)
    st = err_set(KLJIT_ERR_INVALID_ARGUMENT,
                 "kljit_wisdom_path: the path needs %zu bytes, cap "
                 "is %zu",
                 strlen(p) + 1, cap);
  if (st == KLJIT_SUCCESS) memcpy(buf, p, strlen(p) + 1);
  sb_free(&path);
  if (st == KLJIT_SUCCESS) err_clear();
  return st;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* cache.c — the on-disk cubin cache: entry format, atomic publish, validated and
 * permission-checked lookup. The byte layout is specified in docs/cache-format.md.
 *
 * Invariants
 * ----------
 * 1. A file named <sha256hex(K)>.kjc in a cache directory is either a complete entry whose key
 *    text is exactly K, or it is treated as absent. Writers never modify a published file:
 *    they write a private temp file in the same directory, fsync it and rename(2) it over the
 *    final name, so a reader opening that name gets the old inode or the new one, each
 *    complete. The directory is fsynced after the rename so the name survives a power loss.
 *
 * 2. Readers trust no byte of the content. Each length field is compared with the bytes that
 *    actually remain before it is used, the layout must account for fstat's size exactly, and
 *    the SHA-256 over header and payload must match before anything is returned. Any failure
 *    is a miss, logged with its reason, never an error: the caller recompiles and its store
 *    replaces the bad file. So a truncated write from a crashed foreign tool, a full disk,
 *    bit rot, an entry from another format version or a file renamed to the wrong key all
 *    cost one recompilation and nothing else.
 *
 * 3. Trust comes from the file system, not from the content. A cubin runs with the process's
 *    GPU memory, and a checksum proves nothing against someone who can write the file. An
 *    entry is loaded only when its directory and the file itself are owned by the effective
 *    uid, by root or by an owner KLJIT_CACHE_TRUSTED_OWNERS names (the operator account of a
 *    cluster cache), and are writable by neither group nor others. The checks are fstat on the
 *    very descriptors that are then read: the directory is opened once and entries are opened
 *    relative to it with openat(O_NOFOLLOW), so what was checked is what is read. A violation
 *    is an error (KLJIT_ERR_CACHE), not a miss: quietly recompiling would hide a tampered or
 *    misconfigured cache from the user who has to fix it.
 *
 * 4. Read-only directories (cfg->ro_dirs) are never written, not even to replace a corrupt
 *    entry. Only cfg->rw_dir, or the explicit directory given to cache_store_in, is.
 *
 * 5. Concurrent writers, of the same key or not, in one process or many hosts sharing a file
 *    system, need no lock: each writes its own temp file (host, pid and 64 random bits in the
 *    name, created O_EXCL) and the last rename wins with a complete file. Temp names start
 *    with '.' and end in ".tmp", so nothing looking for "*.kjc" mistakes one for an entry, and
 *    a failed store unlinks its own. Only a crash between create and rename leaves one behind.
 *
 * 6. No state lives between calls but the parsed KLJIT_CACHE_TRUSTED_OWNERS (memoized per
 *    value, under a lock): every function may run in several threads and processes at once.
 *
 * 7. A shared cache (cache_config.shared: kljit precompile --shared) is written for other
 *    users to read: its directories are created (or widened to) 0755, its entries 0644; never
 *    anything writable by another user, which readers would refuse (invariant 3).
 */
#include "cache.h"
#include "env.h"
#include "fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
  FORMAT_VERSION = 1,
  MAGIC_LEN = 8,
  CHECKSUM_LEN = 32,
  /* Every byte that is not key text, metadata or payload. */
  FIXED_LEN = MAGIC_LEN + 4 + 4 + 4 + 8 + CHECKSUM_LEN,
  WHY_CAP = 256,
  /* Key text and metadata are a few KiB at most; a larger length field means a broken file,
   * and refusing it early keeps a corrupt length from driving a huge allocation. */
  MAX_TEXT = 1 << 20,
};
static const unsigned char MAGIC[MAGIC_LEN] = {'K', 'L', 'J', 'I', 'T', 'C', 'B', '\0'};
/* Cubins are KiB to a few MiB; anything past 1 GiB is not an entry we wrote. */
static const uint64_t MAX_FILE = (uint64_t)1 << 30;

/* ---- encoding ------------------------------------------------------------------------- */

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* The checksum covers the header (everything before the checksum field) and the payload, so
 * every byte of the file except the checksum itself is protected. */
static void entry_checksum(const void *head, size_t head_len, const void *payload,
                           size_t payload_len, uint8_t out[CHECKSUM_LEN]) {
  sha256_ctx c;
  sha256_init(&c);
  sha256_update(&c, head, head_len);
  sha256_update(&c, payload, payload_len);
  sha256_final(&c, out);
}

/* Serializes magic .. payload length (the bytes before the checksum) into sb. */
static kljit_status build_header(strbuf *sb, const char *key, uint32_t key_len, const char *meta,
                                 uint32_t meta_len, uint64_t payload_len) {
  unsigned char fixed[MAGIC_LEN + 8], u32[4], u64[8];
  memcpy(fixed, MAGIC, MAGIC_LEN);
  put_u32(fixed + MAGIC_LEN, FORMAT_VERSION);
  put_u32(fixed + MAGIC_LEN + 4, key_len);
  kljit_status st = sb_append(sb, (const char *)fixed, sizeof fixed);
  if (!st) st = sb_append(sb, key, key_len);
  put_u32(u32, meta_len);
  if (!st) st = sb_append(sb, (const char *)u32, sizeof u32);
  if (!st) st = sb_append(sb, meta, meta_len);
  put_u64(u64, payload_len);
  if (!st) st = sb_append(sb, (const char *)u64, sizeof u64);
  return st;
}

/* Views into a validated file image. */
typedef struct entry_view {
  const char *key, *meta;
  uint32_t key_len, meta_len;
  const unsigned char *payload;
  size_t payload_len;
} entry_view;

/* Checks a whole file image. Returns 1 and fills *v when it is a well-formed entry; otherwise
 * returns 0 with the reason in why. Every read is preceded by a check that its bytes exist. */
static int parse_entry(const unsigned char *b, size_t n, entry_view *v, char why[WHY_CAP]) {
  if (n < MAGIC_LEN + 8) {
    snprintf(why, WHY_CAP, "%zu bytes, shorter than the fixed header", n);
    return 0;
  }
  if (memcmp(b, MAGIC, MAGIC_LEN) != 0) {
    snprintf(why, WHY_CAP, "bad magic, not a kljit cache entry");
    return 0;
  }
  const uint32_t version = get_u32(b + MAGIC_LEN);
  if (version != FORMAT_VERSION) {
    snprintf(why, WHY_CAP, "format version %u, this kljit reads %d", version, FORMAT_VERSION);
    return 0;
  }
  size_t off = MAGIC_LEN + 4;
  for (int field = 0; field < 2; field++) { /* key text, then metadata */
    const char *const label = field == 0 ? "key text" : "metadata";
    if (n - off < 4) {
      snprintf(why, WHY_CAP, "truncated before the %s length", label);
      return 0;
    }
    const uint32_t len = get_u32(b + off);
    off += 4;
    if (len > n - off || len > MAX_TEXT) {
      snprintf(why, WHY_CAP, "%s length %u exceeds the %zu bytes left", label, len, n - off);
      return 0;
    }
    if (memchr(b + off, '\0', len) != NULL) {
      snprintf(why, WHY_CAP, "%s contains a NUL byte", label);
      return 0;
    }
    if (field == 0) {
      v->key = (const char *)(b + off);
      v->key_len = len;
    } else {
      v->meta = (const char *)(b + off);
      v->meta_len = len;
    }
    off += len;
  }
  if (n - off < 8 + CHECKSUM_LEN) {
    snprintf(why, WHY_CAP, "truncated before the payload length and checksum");
    return 0;
  }
  const uint64_t payload_len = get_u64(b + off);
  const size_t head_len = off + 8;
  const unsigned char *const sum = b + head_len;
  off = head_len + CHECKSUM_LEN;
  if (payload_len != n - off) {
    snprintf(why, WHY_CAP, "payload length %llu but %zu bytes follow the checksum",
             (unsigned long long)payload_len, n - off);
    return 0;
  }
  uint8_t want[CHECKSUM_LEN];
  entry_checksum(b, head_len, b + off, n - off, want);
  if (memcmp(want, sum, CHECKSUM_LEN) != 0) {
    snprintf(why, WHY_CAP, "checksum mismatch");
    return 0;
  }
  v->payload = b + off;
  v->payload_len = n - off;
  return 1;
}

/* ---- file system helpers --------------------------------------------------------------- */

static kljit_status join_path(char out[PATH_MAX], const char *dir, const char *name) {
  const int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
  if (n < 0 || n >= PATH_MAX)
    return err_set(KLJIT_ERR_CACHE, "cache path too long: %s/%s", dir, name);
  return KLJIT_SUCCESS;
}

/* ---- trust (invariant 3) ------------------------------------------------------------------ */

kljit_status cache_trusted_owners(const char *text, uid_t *uids, int cap, int *n) {
  *n = 0;
  for (const char *p = text ? text : ""; *p;) {
    const size_t len = strcspn(p, ", \t");
    if (len) {
      char word[128];
      if (len >= sizeof word)
        return err_set(KLJIT_ERR_INVALID_ARGUMENT, "KLJIT_CACHE_TRUSTED_OWNERS: '%.40s...' is "
                       "no user name", p);
      memcpy(word, p, len), word[len] = '\0';
      char *end;
      errno = 0;
      const unsigned long v = strtoul(word, &end, 10);
      uid_t uid;
      if (word[0] >= '0' && word[0] <= '9' && !*end && !errno && v < (uid_t)-1) {
        uid = (uid_t)v;
      } else {
        struct passwd pw, *found = NULL;
        char buf[4096];
        if (getpwnam_r(word, &pw, buf, sizeof buf, &found) != 0 || !found)
          return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                         "KLJIT_CACHE_TRUSTED_OWNERS: '%s' is neither a user of this machine "
                         "nor a uid", word);
        uid = found->pw_uid;
      }
      if (*n == cap)
        return err_set(KLJIT_ERR_INVALID_ARGUMENT, "KLJIT_CACHE_TRUSTED_OWNERS: more than %d "
                       "owners", cap);
      uids[(*n)++] = uid;
    }
    p += len;
    if (*p) p++;
  }
  return KLJIT_SUCCESS;
}

/* KLJIT_CACHE_TRUSTED_OWNERS, parsed once per value (user names resolve through NSS). */
enum { TRUSTED_MAX = 64 };
static pthread_mutex_t trust_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  int valid;
  char text[1024];
  uid_t uid[TRUSTED_MAX];
  int n;
  char bad[256]; /* why the value did not parse ("": it did) */
} trust;

/* Whether the variable names `owner`; *bad gets why the variable is unusable (or ""). */
static int trusted_owner(uid_t owner, char *bad, size_t cap) {
  bad[0] = '\0';
  const char *const text = env_text(ENV_CACHE_TRUSTED_OWNERS);
  if (!text || !*text) return 0;
  pthread_mutex_lock(&trust_lock);
  if (!trust.valid || strncmp(trust.text, text, sizeof trust.text) != 0) {
    trust.valid = 1, trust.bad[0] = '\0';
    snprintf(trust.text, sizeof trust.text, "%s", text);
    if (strlen(text) >= sizeof trust.text) {
      trust.n = 0;
      snprintf(trust.bad, sizeof trust.bad, "KLJIT_CACHE_TRUSTED_OWNERS is too long");
    } else if (cache_trusted_owners(text, trust.uid, TRUSTED_MAX, &trust.n) != KLJIT_SUCCESS) {
      trust.n = 0;
      snprintf(trust.bad, sizeof trust.bad, "%s", kljit_last_error());
    }
  }
  int found = 0;
  for (int i = 0; i < trust.n && !found; i++) found = trust.uid[i] == owner;
  snprintf(bad, cap, "%s", trust.bad);
  pthread_mutex_unlock(&trust_lock);
  return found;
}

/* The trust rule of invariant 3, applied to an fstat of an open descriptor. */
static kljit_status check_trusted(const struct stat *st, const char *what, const char *path) {
  const uid_t me = geteuid();
  char bad[256];
  if (st->st_uid != me && st->st_uid != 0 && !trusted_owner(st->st_uid, bad, sizeof bad)) {
    struct passwd pw, *found = NULL;
    char buf[4096];
    getpwuid_r(st->st_uid, &pw, buf, sizeof buf, &found);
    return err_set(KLJIT_ERR_CACHE,
                   "refusing cache %s %s: owned by uid %u%s%s%s, not by the current user (uid "
                   "%u), root or an owner named in KLJIT_CACHE_TRUSTED_OWNERS%s%s",
                   what, path, (unsigned)st->st_uid, found ? " (" : "", found ? found->pw_name : "",
                   found ? ")" : "", (unsigned)me, bad[0] ? ": " : "", bad);
  }
  if (st->st_mode & (S_IWGRP | S_IWOTH))
    return err_set(KLJIT_ERR_CACHE, "refusing cache %s %s: writable by group or others (mode %04o)",
                   what, path, (unsigned)(st->st_mode & 07777));
  return KLJIT_SUCCESS;
}

kljit_status cache_dir_status(const char *dir) {
  const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return err_set(KLJIT_ERR_CACHE, "cannot read cache directory %s as uid %u: %s", dir,
                   (unsigned)geteuid(), strerror(errno));
  struct stat st;
  kljit_status s =
      fstat(fd, &st) != 0
          ? err_set(KLJIT_ERR_CACHE, "cannot stat cache directory %s: %s", dir, strerror(errno))
          : check_trusted(&st, "directory", dir);
  if (s == KLJIT_SUCCESS && faccessat(fd, ".", X_OK, AT_EACCESS) != 0)
    s = err_set(KLJIT_ERR_CACHE, "cannot open the entries of cache directory %s as uid %u: %s",
                dir, (unsigned)geteuid(), strerror(errno));
  close(fd);
  return s;
}

/* Opens a directory to search. A directory that cannot be opened (missing, not a directory,
 * no permission) holds no entries for us: *out = -1 and success. One that opens but fails
 * the trust rule is an error. */
static kljit_status dir_open_for_lookup(const char *dir, int *out) {
  *out = -1;
  const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) util_log("cache: skipping directory %s: %s", dir, strerror(errno));
    return KLJIT_SUCCESS;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return err_set(KLJIT_ERR_CACHE, "cannot stat cache directory %s: %s", dir, strerror(e));
  }
  const kljit_status s = check_trusted(&st, "directory", dir);
  if (s) {
    close(fd);
    return s;
  }
  *out = fd;
  return KLJIT_SUCCESS;
}

/* Opens the writable directory, creating it if missing (0755 when shared, else 0700), and applies
 * the trust rule to it; a shared one of ours that others cannot read is widened to r-x. */
static kljit_status dir_make(const char *dir, int shared, int *out) {
  *out = -1;
  int cur = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* the usual case: it exists */
  if (cur < 0 && errno != ENOENT)
    return err_set(KLJIT_ERR_CACHE, "cannot open cache directory %s: %s", dir, strerror(errno));
  if (cur < 0) {
    const kljit_status s =
        fs_mkdir_p_mode(dir, shared ? 0755 : 0700, KLJIT_ERR_CACHE, "cache directory", &cur);
    if (s) return s;
  }
  struct stat st;
  if (fstat(cur, &st) != 0) {
    const int e = errno;
    close(cur);
    return err_set(KLJIT_ERR_CACHE, "cannot stat cache directory %s: %s", dir, strerror(e));
  }
  kljit_status s = check_trusted(&st, "directory", dir);
  if (!s && shared && st.st_uid == geteuid() && (st.st_mode & 0055) != 0055 &&
      fchmod(cur, (st.st_mode & 07777) | 0055) != 0)
    s = err_set(KLJIT_ERR_CACHE, "cannot make the shared cache directory %s readable: %s", dir,
                strerror(errno));
  if (s) {
    close(cur);
    return s;
  }
  *out = cur;
  return KLJIT_SUCCESS;
}

static char *dup_n(const char *s, size_t n) {
  char *const d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

/* Copies a validated view out of the file image (which is freed right after). */
static kljit_status entry_copy(const entry_view *v, cache_entry *out) {
  out->key_text = dup_n(v->key, v->key_len);
  out->meta = dup_n(v->meta, v->meta_len);
  out->payload = malloc(v->payload_len ? v->payload_len : 1);
  out->payload_len = v->payload_len;
  if (!out->key_text || !out->meta || !out->payload) {
    cache_entry_free(out);
    return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory (%zu-byte entry)",
                   v->payload_len);
  }
  memcpy(out->payload, v->payload, v->payload_len);
  return KLJIT_SUCCESS;
}

/* Checks what an opened entry is and who can write it (errors), then reads and validates its
 * content (problems go to why, with success). want_key NULL skips the key comparison. */
static kljit_status entry_read_fd(int fd, const char *path, const char *want_key,
                                  cache_entry *out, char why[WHY_CAP]) {
  why[0] = '\0';
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(why, WHY_CAP, "fstat failed: %s", strerror(errno));
    return KLJIT_SUCCESS;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(why, WHY_CAP, "not a regular file");
    return KLJIT_SUCCESS;
  }
  const kljit_status s = check_trusted(&st, "entry", path);
  if (s) return s;
  if (st.st_size < 0 || (uint64_t)st.st_size > MAX_FILE) {
    snprintf(why, WHY_CAP, "%lld bytes, larger than any entry", (long long)st.st_size);
    return KLJIT_SUCCESS;
  }
  const size_t size = (size_t)st.st_size;
  unsigned char *const buf = malloc(size ? size : 1);
  if (!buf) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory (%zu bytes)", size);
  const ssize_t got = fs_read_full(fd, buf, size);
  unsigned char extra;
  entry_view v = {0};
  kljit_status copied = KLJIT_SUCCESS;
  if (got < 0) {
    snprintf(why, WHY_CAP, "read failed: %s", strerror(errno));
  } else if ((size_t)got != size || fs_read_full(fd, &extra, 1) != 0) {
    snprintf(why, WHY_CAP, "changed size while being read"); /* not one of our publishes */
  } else if (parse_entry(buf, size, &v, why)) {
    if (want_key && (strlen(want_key) != v.key_len || memcmp(want_key, v.key, v.key_len) != 0))
      snprintf(why, WHY_CAP, "key text differs from the one requested (renamed file?)");
    else
      copied = entry_copy(&v, out);
  }
  free(buf);
  return copied;
}

/* Looks one directory up. *found = 1 with *out filled on a valid entry. */
static kljit_status search_dir(const char *dir, const char *name, const char *key_text,
                               cache_entry *out, int *found) {
  *found = 0;
  char path[PATH_MAX];
  kljit_status s = join_path(path, dir, name);
  if (s) return s;
  int dfd;
  s = dir_open_for_lookup(dir, &dfd);
  if (s || dfd < 0) return s;
  /* O_NONBLOCK: a FIFO planted under an entry's name must not hang the open. */
  const int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  const int open_errno = errno;
  close(dfd);
  if (fd < 0) {
    if (open_errno == ELOOP)
      return err_set(KLJIT_ERR_CACHE, "refusing cache entry %s: it is a symbolic link", path);
    if (open_errno != ENOENT)
      util_log("cache: miss on %s: cannot open: %s", path, strerror(open_errno));
    return KLJIT_SUCCESS;
  }
  char why[WHY_CAP];
  s = entry_read_fd(fd, path, key_text, out, why);
  close(fd);
  if (s) return s;
  if (why[0]) {
    util_log("cache: miss on %s: %s", path, why);
    return KLJIT_SUCCESS;
  }
  *found = 1;
  return KLJIT_SUCCESS;
}

/* ---- public (internal) API ------------------------------------------------------------- */

void cache_file_name(const char *key_text, char name[80]) {
  sha256_hex(key_text, strlen(key_text), name);
  memcpy(name + 64, ".kjc", 5);
}

void cache_entry_free(cache_entry *e) {
  if (!e) return;
  free(e->key_text);
  free(e->meta);
  free(e->payload);
  memset(e, 0, sizeof *e);
}

kljit_status cache_lookup(const cache_config *cfg, const char *key_text, cache_entry *out,
                          cache_result *res) {
  if (!cfg || !key_text || !out || !res)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "cache_lookup: NULL argument");
  memset(out, 0, sizeof *out);
  *res = CACHE_MISS;
  if (cfg->disabled) return KLJIT_SUCCESS;
  char name[80];
  cache_file_name(key_text, name);
  for (size_t i = 0; i <= cfg->n_ro; i++) {
    const char *const dir = i < cfg->n_ro ? cfg->ro_dirs[i] : cfg->rw_dir;
    if (!dir) continue;
    int found;
    const kljit_status s = search_dir(dir, name, key_text, out, &found);
    if (s) return s;
    if (found) {
      *res = i < cfg->n_ro ? CACHE_HIT_READONLY : CACHE_HIT;
      return KLJIT_SUCCESS;
    }
  }
  return KLJIT_SUCCESS;
}

static kljit_status store_in(const char *dir, int shared, const char *key_text, const char *meta,
                             const void *payload, size_t payload_len);

kljit_status cache_store(const cache_config *cfg, const char *key_text, const char *meta,
                         const void *payload, size_t payload_len) {
  if (!cfg) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "cache_store: cfg is NULL");
  if (cfg->disabled || !cfg->rw_dir) return KLJIT_SUCCESS;
  return store_in(cfg->rw_dir, cfg->shared, key_text, meta, payload, payload_len);
}

kljit_status cache_store_in(const char *dir, const char *key_text, const char *meta,
                            const void *payload, size_t payload_len) {
  return store_in(dir, 0, key_text, meta, payload, payload_len);
}

static kljit_status store_in(const char *dir, int shared, const char *key_text, const char *meta,
                             const void *payload, size_t payload_len) {
  if (!dir || !key_text || (!payload && payload_len))
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "cache_store: NULL argument");
  if (!meta) meta = "";
  const size_t key_len = strlen(key_text), meta_len = strlen(meta);
  /* Refuse what a reader would reject, rather than publish a file that is always a miss. */
  if (key_len > MAX_TEXT || meta_len > MAX_TEXT || payload_len > MAX_FILE ||
      FIXED_LEN + key_len + meta_len + payload_len > MAX_FILE)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "cache_store: entry too large (key %zu, metadata %zu, payload %zu bytes)",
                   key_len, meta_len, payload_len);
  if (!payload) payload = ""; /* an empty payload: keep pointer arithmetic defined */

  strbuf head = {0};
  kljit_status s = build_header(&head, key_text, (uint32_t)key_len, meta, (uint32_t)meta_len,
                                payload_len);
  if (s) {
    sb_free(&head);
    return s;
  }
  uint8_t sum[CHECKSUM_LEN];
  entry_checksum(head.data, head.len, payload, payload_len, sum);

  int dfd = -1;
  char name[80], path[PATH_MAX];
  cache_file_name(key_text, name);
  s = join_path(path, dir, name);
  if (!s) s = dir_make(dir, shared, &dfd);
  const fs_part parts[] = {{head.data, head.len}, {sum, sizeof sum}, {payload, payload_len}};
  if (!s)
    s = fs_publish_at(dfd, dir, name, parts, 3, shared ? 0644 : 0600, KLJIT_ERR_CACHE,
                      "cache entry");
  if (!s) util_log("cache: stored %s (%zu bytes)", path, payload_len);
  if (dfd >= 0) close(dfd);
  sb_free(&head);
  return s;
}

kljit_status cache_share_entry(const char *dir, const char *name) {
  const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return err_set(KLJIT_ERR_CACHE, "cannot open cache directory %s: %s", dir, strerror(errno));
  struct stat st;
  kljit_status s = KLJIT_SUCCESS;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
      st.st_uid == geteuid() && (st.st_mode & 0044) != 0044 &&
      fchmodat(dfd, name, (st.st_mode & 07777) | 0044, 0) != 0)
    s = err_set(KLJIT_ERR_CACHE, "cannot make cache entry %s/%s readable: %s", dir, name,
                strerror(errno));
  close(dfd);
  return s;
}

kljit_status cache_read_file(const char *path, cache_entry *out) {
  if (!path || !out) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "cache_read_file: NULL argument");
  memset(out, 0, sizeof *out);
  const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP)
      return err_set(KLJIT_ERR_CACHE, "refusing cache entry %s: it is a symbolic link", path);
    return err_set(KLJIT_ERR_CACHE, "cannot open cache entry %s: %s", path, strerror(errno));
  }
  char why[WHY_CAP];
  const kljit_status s = entry_read_fd(fd, path, NULL, out, why);
  close(fd);
  if (s) return s;
  if (why[0]) return err_set(KLJIT_ERR_CACHE, "invalid cache entry %s: %s", path, why);
  /* The standalone stand-in for lookup's key comparison: the name must be the key's hash. */
  const char *const slash = strrchr(path, '/');
  const char *const base = slash ? slash + 1 : path;
  char name[80];
  cache_file_name(out->key_text, name);
  if (strcmp(base, name) != 0) {
    cache_entry_free(out);
    return err_set(KLJIT_ERR_CACHE,
                   "invalid cache entry %s: its name is not the SHA-256 of its key text "
                   "(expected %s)",
                   path, name);
  }
  return KLJIT_SUCCESS;
}

/* ---- configuration --------------------------------------------------------------------- */

static kljit_status config_add_ro(cache_config *cfg, const char *dir, size_t len) {
  char **const dirs = realloc(cfg->ro_dirs, (cfg->n_ro + 1) * sizeof *dirs);
  if (!dirs) return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  cfg->ro_dirs = dirs;
  if (!(dirs[cfg->n_ro] = dup_n(dir, len)))
    return err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
  cfg->n_ro++;
  return KLJIT_SUCCESS;
}

kljit_status cache_config_make(const char *dir, const char *path, int disabled,
                               cache_config *cfg) {
  if (!cfg) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "cache_config_make: cfg is NULL");
  memset(cfg, 0, sizeof *cfg);
  if (disabled) {
    cfg->disabled = 1;
    return KLJIT_SUCCESS;
  }
  kljit_status s = KLJIT_SUCCESS;
  const char *p = path;
  while (p && *p && !s) {
    const size_t len = strcspn(p, ":");
    if (len) s = config_add_ro(cfg, p, len); /* "a::b" and a trailing ':' add nothing */
    p += len;
    if (*p == ':') p++;
  }
  if (s) {
    cache_config_free(cfg);
    return s;
  }
  strbuf rw = {0};
  s = fs_default_cache_dir(dir, &rw);
  if (!s && !rw.data)
    util_log("cache: no KLJIT_CACHE_DIR, XDG_CACHE_HOME or HOME; compiled kernels are not kept");
  if (s) {
    sb_free(&rw);
    cache_config_free(cfg);
    return s;
  }
  cfg->rw_dir = rw.data; /* NULL when nothing was printed */
  return KLJIT_SUCCESS;
}

kljit_status cache_config_from_env(cache_config *cfg) {
  kljit_context_options o;
  env_context_defaults(&o);
  return cache_config_make(o.cache_dir, o.cache_path, (o.flags & KLJIT_CONTEXT_CACHE_DISABLE) != 0,
                           cfg);
}

void cache_config_free(cache_config *cfg) {
  if (!cfg) return;
  for (size_t i = 0; i < cfg->n_ro; i++) free(cfg->ro_dirs[i]);
  free(cfg->ro_dirs);
  free(cfg->rw_dir);
  memset(cfg, 0, sizeof *cfg);
}

/* ---- inspection ------------------------------------------------------------------------ */

static int is_hex64(const char *s) {
  for (int i = 0; i < 64; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

cache_name_kind cache_name_classify(const char *n) {
  const size_t len = strlen(n);
  if (len == 68 && is_hex64(n) && strcmp(n + 64, ".kjc") == 0) return CACHE_NAME_ENTRY;
  /* temp_create's ".<entry name>.<host>.<pid>.<random>.tmp" */
  if (len > 1 + 68 + 1 + 4 && n[0] == '.' && is_hex64(n + 1) && strncmp(n + 65, ".kjc.", 5) == 0 &&
      strcmp(n + len - 4, ".tmp") == 0)
    return CACHE_NAME_TEMP;
  return CACHE_NAME_OTHER;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

kljit_status cache_dir_iterate(const char *dir, unsigned kinds, cache_dir_fn fn, void *user) {
  if (!dir || !fn) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "cache_dir_iterate: NULL argument");
  const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return err_set(KLJIT_ERR_CACHE, "cannot open cache directory %s: %s", dir, strerror(errno));
  struct stat st;
  kljit_status s =
      fstat(fd, &st) == 0
          ? check_trusted(&st, "directory", dir)
          : err_set(KLJIT_ERR_CACHE, "cannot stat cache directory %s: %s", dir, strerror(errno));
  DIR *const d = s ? NULL : fdopendir(fd);
  if (!d) {
    if (!s)
      s = err_set(KLJIT_ERR_CACHE, "cannot read cache directory %s: %s", dir, strerror(errno));
    close(fd);
    return s;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *e; !s && (e = readdir(d));) {
    if (!(kinds & 1u << cache_name_classify(e->d_name))) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **const grown = realloc(names, cap * sizeof *names);
      if (!grown) {
        s = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
        break;
      }
      names = grown;
    }
    if (!(names[n] = strdup(e->d_name)))
      s = err_set(KLJIT_ERR_OUT_OF_MEMORY, "out of host memory");
    else
      n++;
  }
  closedir(d); /* closes fd */
  if (!s && n) qsort(names, n, sizeof *names, name_cmp);
  int stop = 0;
  for (size_t i = 0; i < n && !s && !stop; i++)
    s = fn(dir, names[i], cache_name_classify(names[i]), user, &stop);
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return s;
}

/* SHA-256 of what an open file holds from its start. */
static int file_sha256(int fd, char hex[65]) {
  if (lseek(fd, 0, SEEK_SET) != 0) return -1;
  sha256_ctx c;
  sha256_init(&c);
  unsigned char buf[1 << 16];
  for (;;) {
    const ssize_t got = fs_read_full(fd, buf, sizeof buf);
    if (got < 0) return -1;
    sha256_update(&c, buf, (size_t)got);
    if ((size_t)got < sizeof buf) break;
  }
  uint8_t d[32];
  sha256_final(&c, d);
  util_hex(d, sizeof d, hex);
  return 0;
}

kljit_status cache_entry_inspect(const char *dir, const char *name, cache_inspection *out) {
  memset(out, 0, sizeof *out);
  char path[PATH_MAX];
  kljit_status s = join_path(path, dir, name);
  struct stat st = {0};
  if (!s && lstat(path, &st) != 0)
    s = err_set(KLJIT_ERR_CACHE, "cannot stat %s: %s", path, strerror(errno));
  if (!s) {
    out->size = (uint64_t)st.st_size;
    out->mtime = (int64_t)st.st_mtime;
    if (S_ISLNK(st.st_mode))
      s = err_set(KLJIT_ERR_CACHE, "refusing cache entry %s: it is a symbolic link", path);
    else if (!S_ISREG(st.st_mode))
      s = err_set(KLJIT_ERR_CACHE, "invalid cache entry %s: not a regular file", path);
  }
  if (!s) s = cache_read_file(path, &out->entry);
  if (s == KLJIT_ERR_OUT_OF_MEMORY) return s;
  out->status = s;
  if (s) snprintf(out->problem, sizeof out->problem, "%s", kljit_last_error());
  if (S_ISREG(st.st_mode)) {
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      if (file_sha256(fd, out->sha256) != 0) out->sha256[0] = '\0';
      close(fd);
    }
  }
  err_clear();
  return KLJIT_SUCCESS;
}

void cache_inspection_free(cache_inspection *in) {
  if (in) cache_entry_free(&in->entry);
}

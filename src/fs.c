/* SPDX-License-Identifier: Apache-2.0 */
/* fs.c — the file-system helpers every writer shares: mkdir -p, full reads and writes, atomic
 * publication (a private temp file renamed over the name, the directory fsynced) for every
 * writer (kernel cache entries, wisdom files), the default cache directory. */
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "env.h"

kljit_status fs_mkdir_p(const char *dir, kljit_status status, const char *what, int *out) {
  return fs_mkdir_p_mode(dir, 0700, status, what, out);
}

/* mkdir -p. Missing components are created 0700 and then fchmod'ed to `mode`, so the umask
 * neither widens nor narrows them; they are reopened with O_NOFOLLOW, so a component swapped for
 * a symlink between mkdir and open is caught. Existing components are followed as they are,
 * symlinks included (users keep ~/.cache on other disks). Returns the final directory open
 * (*out), or closes it when out is NULL. */
kljit_status fs_mkdir_p_mode(const char *dir, unsigned mode, kljit_status status,
                             const char *what, int *out) {
  const size_t n = strlen(dir);
  if (n == 0 || n >= PATH_MAX)
    return err_set(status, "bad %s name '%s'", what, dir);
  char buf[PATH_MAX];
  memcpy(buf, dir, n + 1);
  int cur = open(buf[0] == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cur < 0) return err_set(status, "cannot open %s: %s", dir, strerror(errno));
  char *p = buf;
  for (;;) {
    while (*p == '/') p++;
    if (*p == '\0') break;
    char *const end = strchr(p, '/');
    if (end) *end = '\0'; /* buf is now the path up to this component, for messages */
    int created = 0, mkdir_errno = 0;
    if (mkdirat(cur, p, 0700) == 0)
      created = 1;
    else if (errno != EEXIST)
      mkdir_errno = errno; /* may still exist (EACCES/EROFS can precede EEXIST): try it */
    const int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (created ? O_NOFOLLOW : 0);
    const int next = openat(cur, p, flags);
    const int open_errno = errno;
    close(cur);
    if (next < 0)
      return err_set(status, "cannot create %s %s: %s", what, buf,
                     strerror(mkdir_errno ? mkdir_errno : open_errno));
    if (created && fchmod(next, (mode_t)mode) != 0) {
      const int e = errno;
      close(next);
      return err_set(status, "cannot chmod %s %s: %s", what, buf, strerror(e));
    }
    cur = next;
    if (!end) break;
    *end = '/';
    p = end + 1;
  }
  if (out)
    *out = cur;
  else
    close(cur);
  return KLJIT_SUCCESS;
}

/* Reads up to n bytes; returns the count (short only at end of file) or -1 with errno. */
ssize_t fs_read_full(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

kljit_status fs_read_regular(const char *path, size_t max, strbuf *text, kljit_status status,
                             const char *what, int *missing) {
  if (missing) *missing = 0;
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (missing) *missing = errno == ENOENT;
    return err_set(status, "cannot open %s %s: %s", what, path, strerror(errno));
  }
  struct stat sb;
  kljit_status st = KLJIT_SUCCESS;
  if (fstat(fd, &sb) != 0)
    st = err_set(status, "cannot stat %s %s: %s", what, path, strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    st = err_set(status, "%s %s is not a regular file", what, path);
  else if ((unsigned long long)sb.st_size > max)
    st = err_set(status, "%s %s is over %zu MiB", what, path, max >> 20);
  if (st == KLJIT_SUCCESS) st = sb_append(text, "", 0); /* an empty file is an empty text */
  char buf[65536];
  for (ssize_t n = 1; st == KLJIT_SUCCESS && n > 0;) {
    n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) n = 1;
    else if (n < 0)
      st = err_set(status, "cannot read %s %s: %s", what, path, strerror(errno));
    else if (text->len + (size_t)n > max) /* grew since the fstat */
      st = err_set(status, "%s %s is over %zu MiB", what, path, max >> 20);
    else if (n > 0)
      st = sb_append(text, buf, (size_t)n);
  }
  close(fd);
  return st;
}

int fs_write_full(int fd, const void *buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = write(fd, (const char *)buf + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    done += (size_t)w;
  }
  return 0;
}

/* 64 bits for a temp name. Only uniqueness matters (O_EXCL guarantees it, retrying on a
 * clash), so a clock-based fallback is good enough where getrandom and urandom both fail. */
static uint64_t random_u64(void) {
  uint64_t r;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    const ssize_t got = fs_read_full(fd, &r, sizeof r);
    close(fd);
    if (got == (ssize_t)sizeof r) return r;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  r = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 40;
  return r * 0x9e3779b97f4a7c15u;
}

/* Creates ".<name>.<host>.<pid>.<random>.tmp" in dfd, 0600 whatever the umask. On failure tmp
 * is empty, so the caller's cleanup cannot unlink a name another writer owns. */
static kljit_status temp_create(int dfd, const char *dir, const char *name, char tmp[NAME_MAX],
                                kljit_status status, int *out) {
  char host[65] = "";
  if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "unknown");
  for (char *h = host; *h; h++) /* keep the name one plain path component */
    if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') || (*h >= '0' && *h <= '9') ||
          *h == '-'))
      *h = '_';
  for (int attempt = 0; attempt < 16; attempt++) {
    snprintf(tmp, NAME_MAX, ".%s.%s.%ld.%016llx.tmp", name, host, (long)getpid(),
             (unsigned long long)random_u64());
    const int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      const int e = errno;
      tmp[0] = '\0';
      return err_set(status, "cannot create a temp file in %s: %s", dir, strerror(e));
    }
    if (fchmod(fd, 0600) != 0) {
      const int e = errno;
      close(fd);
      unlinkat(dfd, tmp, 0);
      tmp[0] = '\0';
      return err_set(status, "cannot chmod a temp file in %s: %s", dir, strerror(e));
    }
    *out = fd;
    return KLJIT_SUCCESS;
  }
  tmp[0] = '\0';
  return err_set(status, "cannot create a unique temp file in %s", dir);
}

static const char *file_kind(mode_t m) {
  return S_ISLNK(m)   ? "a symbolic link"
         : S_ISDIR(m) ? "a directory"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

kljit_status fs_check_replaceable(int dfd, const char *dir, const char *name, kljit_status status,
                                  const char *what) {
  struct stat sb;
  if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return KLJIT_SUCCESS;
    return err_set(status, "cannot stat %s %s/%s: %s", what, dir, name, strerror(errno));
  }
  if (!S_ISREG(sb.st_mode))
    return err_set(status, "refusing to replace %s/%s with a %s: it is %s, not a regular file",
                   dir, name, what, file_kind(sb.st_mode));
  return KLJIT_SUCCESS;
}

/* The directory part of `path` into dir ("." or "/" for none) and its last component. */
static kljit_status split_path(const char *path, char dir[PATH_MAX], const char **base,
                               kljit_status status, const char *what) {
  const char *slash = strrchr(path, '/');
  const int n = !slash ? snprintf(dir, PATH_MAX, ".")
                : slash == path ? snprintf(dir, PATH_MAX, "/")
                                : snprintf(dir, PATH_MAX, "%.*s", (int)(slash - path), path);
  if (n < 0 || n >= PATH_MAX) return err_set(status, "%s path %s is too long", what, path);
  *base = slash ? slash + 1 : path;
  return KLJIT_SUCCESS;
}

kljit_status fs_check_replaceable_path(const char *path, kljit_status status, const char *what) {
  char dir[PATH_MAX];
  const char *base = NULL;
  kljit_status st = split_path(path, dir, &base, status, what);
  if (st != KLJIT_SUCCESS) return st;
  const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return KLJIT_SUCCESS; /* nothing there to replace; the write says why it fails */
  st = fs_check_replaceable(dfd, dir, base, status, what);
  close(dfd);
  return st;
}

kljit_status fs_publish_at(int dfd, const char *dir, const char *name, const fs_part *parts,
                           int nparts, unsigned mode, kljit_status status, const char *what) {
  if (strlen(name) > NAME_MAX - 64 || strchr(name, '/'))
    return err_set(status, "bad %s name '%s'", what, name);
  kljit_status st = fs_check_replaceable(dfd, dir, name, status, what);
  if (st != KLJIT_SUCCESS) return st;
  char tmp[NAME_MAX] = "";
  int fd = -1;
  st = temp_create(dfd, dir, name, tmp, status, &fd);
  if (st != KLJIT_SUCCESS) return st;
  int ok = 1;
  for (int i = 0; ok && i < nparts; i++) ok = fs_write_full(fd, parts[i].data, parts[i].len) == 0;
  ok = ok && (mode == 0600 || fchmod(fd, (mode_t)mode) == 0) && fsync(fd) == 0;
  const int err = errno;
  /* close can report a deferred write error (NFS); the rename publishes whole or nothing, the
   * directory's fsync makes the new name survive a power loss */
  const int closed = close(fd) == 0;
  if (!ok || !closed) {
    st = err_set(status, "cannot write %s %s/%s: %s", what, dir, tmp, strerror(ok ? errno : err));
  } else if ((st = fs_check_replaceable(dfd, dir, name, status, what)) != KLJIT_SUCCESS) {
    /* checked again just before the rename: something may have been put there meanwhile */
  } else if (renameat(dfd, tmp, dfd, name) != 0) {
    st = err_set(status, "cannot publish %s %s/%s: %s", what, dir, name, strerror(errno));
  } else {
    tmp[0] = '\0'; /* renamed: nothing left to clean up */
    if (fsync(dfd) != 0)
      st = err_set(status, "cannot fsync the directory %s of %s %s: %s", dir, what, name,
                   strerror(errno));
  }
  if (tmp[0]) unlinkat(dfd, tmp, 0);
  return st;
}

kljit_status fs_write_atomic(const char *path, const void *data, size_t len, unsigned mode,
                            kljit_status status, const char *what) {
  char dir[PATH_MAX];
  const char *base = NULL;
  kljit_status st = split_path(path, dir, &base, status, what);
  if (st != KLJIT_SUCCESS) return st;
  int dfd = -1;
  st = fs_mkdir_p(dir, status, "directory", &dfd);
  if (st != KLJIT_SUCCESS) return st;
  const fs_part part = {data, len};
  st = fs_publish_at(dfd, dir, base, &part, 1, mode, status, what);
  close(dfd);
  return st;
}

kljit_status fs_default_cache_dir(const char *dir, strbuf *out) {
  const char *const xdg = env_text(ENV_XDG_CACHE_HOME);
  const char *const home = env_text(ENV_HOME);
  if (dir && *dir) return sb_printf(out, "%s", dir);
  if (xdg && xdg[0] == '/') /* the XDG spec says relative values are to be ignored */
    return sb_printf(out, "%s/kljit", xdg);
  if (home && *home) return sb_printf(out, "%s/.cache/kljit", home);
  return KLJIT_SUCCESS;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* fs.h — file-system helpers, one of each: mkdir -p, full reads and writes, an atomic write that
 * fsyncs the directory, the default cache directory (the kernel cache, wisdom, dumps use them). */
#ifndef KLJIT_FS_H
#define KLJIT_FS_H

#include <stdint.h>
#include <sys/types.h>

#include "util.h"

/* mkdir -p `dir` (missing components 0700, checked against a symlink swap); *out receives the
 * directory open (O_DIRECTORY), or it is closed when out is NULL. Failures: `status` with a
 * sentence naming `what` ("cache directory") and the path. */
kljit_status fs_mkdir_p(const char *dir, kljit_status status, const char *what, int *out);
/* The same with the missing components made `mode` (0755: a cache other users read). */
kljit_status fs_mkdir_p_mode(const char *dir, unsigned mode, kljit_status status,
                             const char *what, int *out);

/* Reads up to n bytes (short only at end of file) or -1 with errno; writes all n or -1. */
ssize_t fs_read_full(int fd, void *buf, size_t n);
int fs_write_full(int fd, const void *buf, size_t n);

/* Appends the whole of `path` to `text` (NUL-terminated) when it is a regular file of at most
 * `max` bytes. The open never blocks: a FIFO, a device (/dev/zero) or a directory put where the
 * file belongs, or a link to one, is refused at once, not read forever. Failures: `status` with
 * a sentence naming `what` ("wisdom file") and the path; *missing (may be NULL) set when the
 * file does not exist. */
kljit_status fs_read_regular(const char *path, size_t max, strbuf *text, kljit_status status,
                             const char *what, int *missing);

/* One piece of what fs_publish_at writes. */
typedef struct fs_part {
  const void *data;
  size_t len;
} fs_part;

/* Whether `name` in the open directory `dfd` may be replaced by a published file: absent, or a
 * regular file. Anything else (a symbolic link, a FIFO, a device, a directory, a socket) is
 * refused with `status` naming it: a publication must never turn /dev/null or a link into a
 * regular file, nor write through a link into a file someone else chose. */
kljit_status fs_check_replaceable(int dfd, const char *dir, const char *name, kljit_status status,
                                  const char *what);
/* The same for a path (its directory need not exist). */
kljit_status fs_check_replaceable_path(const char *path, kljit_status status, const char *what);

/* Publishes `name` in the open directory `dfd` (`dir` names it in messages) whole or not at
 * all: a temp file ".<name>.<host>.<pid>.<64 random bits>.tmp" created beside it (O_EXCL,
 * O_NOFOLLOW, 0600), the parts written in order, chmod'ed to `mode`, fsynced and closed, renamed
 * over `name` (refused, before and again just before the rename, when `name` is anything but
 * a regular file: fs_check_replaceable), then the directory fsynced. Concurrent writers need
 * no lock: the last rename wins with a complete file; a failure unlinks its own temp file. `status` and `what` ("cache entry")
 * make the messages. */
kljit_status fs_publish_at(int dfd, const char *dir, const char *name, const fs_part *parts,
                           int nparts, unsigned mode, kljit_status status, const char *what);

/* fs_publish_at for a path: its directory created if missing (fs_mkdir_p). */
kljit_status fs_write_atomic(const char *path, const void *data, size_t len, unsigned mode,
                             kljit_status status, const char *what);

/* The writable cache directory: `dir` when set, else $XDG_CACHE_HOME/kljit (absolute only),
 * else $HOME/.cache/kljit; appends nothing when there is none. */
kljit_status fs_default_cache_dir(const char *dir, strbuf *out);

#endif

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

/* Reads up to n bytes (short only at end of file) or -1 with errno; writes all n or -1. */
ssize_t fs_read_full(int fd, void *buf, size_t n);
int fs_write_full(int fd, const void *buf, size_t n);

/* Replaces `path` whole or not at all: its directory created if missing, a temp file beside it
 * written, chmod'ed to `mode` and fsynced, renamed over `path`, then the directory fsynced. */
kljit_status fs_write_atomic(const char *path, const void *data, size_t len, unsigned mode,
                             kljit_status status, const char *what);

/* The writable cache directory: `dir` when set, else $XDG_CACHE_HOME/kljit (absolute only),
 * else $HOME/.cache/kljit; appends nothing when there is none. */
kljit_status fs_default_cache_dir(const char *dir, strbuf *out);

#endif

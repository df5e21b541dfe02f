/* SPDX-License-Identifier: Apache-2.0 */
/* cache.h — the on-disk cubin cache (format: docs/cache-format.md).
 *
 * One file per entry, named by the SHA-256 (hex) of its key text. Read-only directories
 * (KLJIT_CACHE_PATH=dir1:dir2) are searched before the writable one (KLJIT_CACHE_DIR, else
 * $XDG_CACHE_HOME/kljit, else ~/.cache/kljit, created 0700); KLJIT_CACHE_DISABLE=1 turns the
 * cache off. What is read must be owned by root, the user or an owner KLJIT_CACHE_TRUSTED_OWNERS
 * names, and be writable by no one else. Entries are published atomically (temp file named
 * with host, pid and a random part; fsync; rename) and fully validated on read.
 */
#ifndef KLJIT_CACHE_H
#define KLJIT_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

typedef struct cache_config {
  char **ro_dirs;   /* searched first, never written */
  size_t n_ro;
  char *rw_dir;     /* NULL when disabled */
  int disabled;
  int shared;       /* rw_dir is read by other users: 0755 directories, 0644 entries */
} cache_config;

/* The cache of a writable `dir` (NULL: $XDG_CACHE_HOME/kljit, else ~/.cache/kljit) and the
 * read-only directories of `path` (':'-separated, may be NULL); or none when `disabled`. Does
 * not create anything yet. */
kljit_status cache_config_make(const char *dir, const char *path, int disabled,
                               cache_config *cfg);
/* The same from the environment's defaults (KLJIT_CACHE_PATH, KLJIT_CACHE_DIR,
 * KLJIT_CACHE_DISABLE: env.c), for what runs without a context (precompile, tooling). */
kljit_status cache_config_from_env(cache_config *cfg);
void cache_config_free(cache_config *cfg);

typedef struct cache_entry {
  char *key_text;
  char *meta;              /* "name=value\n" lines (kernels, registers, compile_ms, ...) */
  unsigned char *payload;  /* the cubin */
  size_t payload_len;
} cache_entry;
void cache_entry_free(cache_entry *e);

typedef enum cache_result {
  CACHE_MISS = 0,
  CACHE_HIT_READONLY = 1,  /* found in a KLJIT_CACHE_PATH directory */
  CACHE_HIT = 2            /* found in the writable directory */
} cache_result;

/* Looks `key_text` up. A missing, truncated, bit-flipped, foreign-version or wrong-key file is
 * a miss (*res = CACHE_MISS, KLJIT_SUCCESS). An entry or directory writable by group/others
 * or owned by another user is refused: KLJIT_ERR_CACHE with a sentence naming the path. */
kljit_status cache_lookup(const cache_config *cfg, const char *key_text, cache_entry *out,
                          cache_result *res);

/* Publishes an entry into cfg->rw_dir (created 0700 if missing). No-op when disabled. */
kljit_status cache_store(const cache_config *cfg, const char *key_text, const char *meta,
                         const void *payload, size_t payload_len);

/* Publishes into an explicit directory (precompile). */
kljit_status cache_store_in(const char *dir, const char *key_text, const char *meta,
                            const void *payload, size_t payload_len);

/* Makes an entry of ours in `dir` readable by everyone (0644), for a shared cache whose entry
 * an earlier, private precompile stored 0600. Nothing to do for others' entries. */
kljit_status cache_share_entry(const char *dir, const char *name);

/* Whether lookups can use `dir`: it opens (exists, readable by this user), its entries can be
 * opened, and it passes the trust rule (owner, mode). KLJIT_SUCCESS, or KLJIT_ERR_CACHE with
 * the reason. */
kljit_status cache_dir_status(const char *dir);

/* The uids a KLJIT_CACHE_TRUSTED_OWNERS value names (user names or uids, separated by commas
 * or blanks), at most cap: KLJIT_ERR_INVALID_ARGUMENT naming a word that is neither. */
kljit_status cache_trusted_owners(const char *text, uid_t *uids, int cap, int *n);

/* Reads and fully validates one entry file (cache verify/ls). On success fills *out. */
kljit_status cache_read_file(const char *path, cache_entry *out);

/* The file name (64 hex chars + ".kjc") of an entry with this key text. */
void cache_file_name(const char *key_text, char name[80]);

/* ---- inspection (kljit cache ls / verify / clear / stats, through src/tooling.c) ---------- */

typedef enum cache_name_kind {
  CACHE_NAME_OTHER = 0, /* not kljit's: never listed, never deleted */
  CACHE_NAME_ENTRY = 1, /* <64 lowercase hex>.kjc */
  CACHE_NAME_TEMP = 2   /* .<64 hex>.kjc.<anything>.tmp, a crashed writer's leftover */
} cache_name_kind;
cache_name_kind cache_name_classify(const char *file_name);

/* Calls fn for each file of `dir` whose name is of a kind in `kinds` (bits 1 << kind), in
 * name order. The directory must pass the permission rule (KLJIT_ERR_CACHE otherwise, as
 * for a missing one). The names are collected first, so fn may delete them. A nonzero return
 * from fn stops the walk (with KLJIT_SUCCESS); a failing status from fn is returned. */
typedef kljit_status (*cache_dir_fn)(const char *dir, const char *name, cache_name_kind kind,
                                     void *user, int *stop);
kljit_status cache_dir_iterate(const char *dir, unsigned kinds, cache_dir_fn fn, void *user);

/* What one file of a cache directory is. status/problem say whether a lookup would load it
 * (cache_read_file's checks, plus: not a symbolic link, a regular file); entry is filled when
 * it would. sha256 is the hash of the file's bytes ("" if unreadable). */
typedef struct cache_inspection {
  uint64_t size;
  int64_t mtime;
  kljit_status status;
  char problem[512];
  cache_entry entry;
  char sha256[65];
} cache_inspection;
/* Fails only when memory runs out; every problem with the file goes into *out. */
kljit_status cache_entry_inspect(const char *dir, const char *name, cache_inspection *out);
void cache_inspection_free(cache_inspection *in);

/* SHA-256 (FIPS 180-4). One-shot, and incremental for data that is not contiguous (the entry
 * checksum covers the header and the payload, which live in different buffers). */
void sha256(const void *data, size_t len, uint8_t digest[32]);
void sha256_hex(const void *data, size_t len, char hex[65]);

typedef struct sha256_ctx {
  uint32_t state[8];
  uint64_t total;      /* bytes hashed so far */
  uint8_t block[64];   /* the partial block not yet compressed */
  size_t used;         /* bytes in block */
} sha256_ctx;
void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t len);
void sha256_final(sha256_ctx *c, uint8_t digest[32]);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* tooling.c — the public functions behind `kljit info` and `kljit cache`: versions, cache
 * directories, and listing, validating and clearing cache entries (src/cache.c does the work). */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <lua.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "env.h"

kljit_status kljit_get_versions(kljit_versions *out) {
  err_clear();
  if (!out) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_get_versions: out is NULL");
  if (out->struct_size < sizeof *out)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT,
                   "kljit_get_versions: struct_size = %zu, want sizeof(kljit_versions) = %zu",
                   out->struct_size, sizeof *out);
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->library = kljit_version_number();
  out->cuda_toolkit = CUDA_VERSION;
  nvrtcVersion(&out->nvrtc_major, &out->nvrtc_minor);
  snprintf(out->lua, sizeof out->lua, "%s", LUA_RELEASE);
  /* cuDriverGetVersion needs no cuInit, so it answers on a machine with a driver and no GPU.
   * A handle of its own: the plan path's driver table (src/driver.c) insists on cuInit. */
  void *const lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib) {
    CUresult (*get)(int *) = (CUresult(*)(int *))dlsym(lib, "cuDriverGetVersion");
    if (!get || get(&out->driver) != CUDA_SUCCESS) out->driver = 0;
    dlclose(lib);
  }
  return KLJIT_SUCCESS;
}

kljit_status kljit_cache_dirs(kljit_cache_dir_visitor visit, void *user) {
  err_clear();
  if (!visit) return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_cache_dirs: visit is NULL");
  cache_config cfg;
  const kljit_status st = cache_config_from_env(&cfg);
  if (st) return st;
  for (size_t i = 0; i < cfg.n_ro; i++) visit(cfg.ro_dirs[i], 0, user);
  if (cfg.rw_dir) visit(cfg.rw_dir, 1, user);
  cache_config_free(&cfg);
  return KLJIT_SUCCESS;
}

kljit_status kljit_cache_dir_check(const char *dir) {
  err_clear();
  if (!dir || !*dir)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_cache_dir_check: dir is NULL or empty");
  return cache_dir_status(dir);
}

typedef struct env_walk {
  kljit_env_visitor visit;
  void *user;
  kljit_status st;
  char first[600];
} env_walk;

static void check_one(const char *name, const char *value, int known, void *user) {
  env_walk *const w = user;
  char why[600] = "";
  if (!known) {
    snprintf(why, sizeof why, "not a variable the kljit library reads (misspelled?)");
  } else if (!strcmp(name, "KLJIT_CACHE_TRUSTED_OWNERS")) {
    uid_t uids[64];
    int n = 0;
    if (cache_trusted_owners(value, uids, 64, &n) != KLJIT_SUCCESS)
      snprintf(why, sizeof why, "%s", kljit_last_error());
  } else {
    for (int v = 0; v < ENV_COUNT; v++)
      if (!strcmp(env_name((env_var)v), name)) env_bad((env_var)v, why, sizeof why);
  }
  if (known && why[0] && w->st == KLJIT_SUCCESS) {
    w->st = KLJIT_ERR_INVALID_ARGUMENT;
    snprintf(w->first, sizeof w->first, "%s", why);
  }
  if (w->visit) w->visit(name, value, why[0] ? why : NULL, w->user);
}

kljit_status kljit_env_check(kljit_env_visitor visit, void *user) {
  err_clear();
  env_walk w = {visit, user, KLJIT_SUCCESS, ""};
  env_each_kljit(check_one, &w);
  if (w.st != KLJIT_SUCCESS) return err_set(w.st, "%s", w.first);
  err_clear();
  return KLJIT_SUCCESS;
}

/* The value of `key` in "name=value\n" metadata, into out ("" when absent). */
static void meta_get(const char *meta, const char *key, char *out, size_t cap) {
  out[0] = '\0';
  const size_t n = strlen(key);
  for (const char *line = meta; line && *line;) {
    const char *const end = strchr(line, '\n');
    const size_t len = end ? (size_t)(end - line) : strlen(line);
    if (len > n && !strncmp(line, key, n) && line[n] == '=') {
      snprintf(out, cap, "%.*s", (int)(len - n - 1), line + n + 1);
      return;
    }
    line = end ? end + 1 : NULL;
  }
}

/* What a visitor sees of one inspected file; strings point into `in` and the buffers. */
typedef struct info_buffers {
  char name[128], family[128], arch[32];
} info_buffers;

static void info_fill(const char *dir, const char *file, const cache_inspection *in,
                      info_buffers *b, kljit_cache_entry_info *info) {
  memset(info, 0, sizeof *info);
  const char *const meta = in->entry.meta ? in->entry.meta : "";
  meta_get(meta, "name", b->name, sizeof b->name);
  meta_get(meta, "template", b->family, sizeof b->family);
  meta_get(meta, "arch", b->arch, sizeof b->arch);
  info->struct_size = sizeof *info;
  info->dir = dir, info->file = file;
  info->size = in->size, info->mtime = in->mtime;
  info->status = in->status, info->problem = in->problem;
  info->arch = atoi(strncmp(b->arch, "sm_", 3) == 0 ? b->arch + 3 : b->arch);
  info->name = b->name, info->family = b->family, info->meta = meta;
  memcpy(info->sha256, in->sha256, sizeof info->sha256);
}

typedef struct walk {
  kljit_cache_visitor visit;
  void *user;
} walk;

static kljit_status list_one(const char *dir, const char *name, cache_name_kind kind, void *user,
                             int *stop) {
  (void)kind;
  const walk *const w = user;
  cache_inspection in;
  const kljit_status st = cache_entry_inspect(dir, name, &in);
  if (st) return st;
  info_buffers b;
  kljit_cache_entry_info info;
  info_fill(dir, name, &in, &b, &info);
  *stop = w->visit(&info, w->user);
  cache_inspection_free(&in);
  return KLJIT_SUCCESS;
}

kljit_status kljit_cache_list(const char *dir, kljit_cache_visitor visit, void *user) {
  err_clear();
  if (!dir || !*dir || !visit)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_cache_list: %s is NULL or empty",
                   !dir || !*dir ? "dir" : "visit");
  walk w = {visit, user};
  return cache_dir_iterate(dir, 1u << CACHE_NAME_ENTRY, list_one, &w);
}

static kljit_status clear_one(const char *dir, const char *name, cache_name_kind kind, void *user,
                              int *stop) {
  const walk *const w = user;
  cache_inspection in;
  memset(&in, 0, sizeof in);
  kljit_status st = KLJIT_SUCCESS;
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
    return err_set(KLJIT_ERR_CACHE, "cache path too long: %s/%s", dir, name);
  /* A file removed since the listing (a concurrent clear, a writer's own cleanup) is what clear
   * wants: skipped, not an error. */
  struct stat sb;
  if (lstat(path, &sb) != 0 && errno == ENOENT) return KLJIT_SUCCESS;
  /* A temp file is half an entry: nothing to show but its size. */
  if (kind == CACHE_NAME_ENTRY && (st = cache_entry_inspect(dir, name, &in))) return st;
  if (kind == CACHE_NAME_TEMP)
    in.size = (uint64_t)sb.st_size, in.mtime = (int64_t)sb.st_mtime;
  int gone = 0;
  if (unlink(path) != 0) {
    if (errno == ENOENT)
      gone = 1;
    else
      st = err_set(KLJIT_ERR_CACHE, "cannot remove %s: %s", path, strerror(errno));
  }
  if (!st && !gone && w->visit) {
    info_buffers b;
    kljit_cache_entry_info info;
    info_fill(dir, name, &in, &b, &info);
    *stop = w->visit(&info, w->user);
  }
  cache_inspection_free(&in);
  return st;
}

kljit_status kljit_cache_clear(const char *dir, kljit_cache_visitor removed, void *user) {
  err_clear();
  if (!dir || !*dir)
    return err_set(KLJIT_ERR_INVALID_ARGUMENT, "kljit_cache_clear: dir is NULL or empty");
  walk w = {removed, user};
  return cache_dir_iterate(dir, 1u << CACHE_NAME_ENTRY | 1u << CACHE_NAME_TEMP, clear_one, &w);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* unit_cache.c — the on-disk cubin cache (src/cache.c, src/sha256.c): SHA-256 against the
 * FIPS vectors, hits and misses, every kind of damaged file, concurrent writers, the
 * permission rules, the search order and the environment. Each case that touches the file
 * system runs in its own mkdtemp directory, removed afterwards whatever the outcome. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache.h"
#include "harness.h"

/* harness.h names statuses through kljit_status_string, defined with the public API. This weak
 * stand-in lets the test also link standalone against cache.c, sha256.c and util.c; where the
 * library's definition is linked in, that one wins. */
__attribute__((weak)) const char *kljit_status_string(kljit_status status) {
  return status == KLJIT_SUCCESS ? "KLJIT_SUCCESS" : status == KLJIT_ERR_CACHE ? "KLJIT_ERR_CACHE"
                                                                               : "KLJIT_ERR_*";
}

/* ---- helpers ---------------------------------------------------------------------------- */


static void entry_path(char out[PATH_MAX], const char *dir, const char *key) {
  char name[80];
  cache_file_name(key, name);
  th_path_in(out, dir, name);
}

/* A key text shaped like the real one (docs/cache-format.md); each field can be varied alone. */
static void make_key(char out[512], const char *kljit, const char *src, const char *nvrtc,
                     const char *arch, const char *opts) {
  snprintf(out, 512, "kljit-cache 1\nkljit %s\nsource %s\nnvrtc %s\narch %s\noptions %s\n",
           kljit, src, nvrtc, arch, opts);
}
static const char *const SRC_HASH =
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
static const char *const OPTS = "--gpu-architecture=sm_90 -default-device -std=c++17";
static const char *const META = "kernels=kljit_row\nregisters=64\n";
static void std_key(char out[512]) { make_key(out, "0.1.0", SRC_HASH, "12.4", "sm_90", OPTS); }

/* Deterministic bytes that depend on the key, so a mixed-up entry shows. */
static void fill_payload(unsigned char *p, size_t n, const char *key) {
  uint8_t seed[32];
  sha256(key, strlen(key), seed);
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed[i % 32] ^ (i * 131u >> 3));
}

static int read_whole(const char *path, unsigned char **buf, size_t *len) {
  FILE *const f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *buf = malloc(n > 0 ? (size_t)n : 1);
  *len = (size_t)n;
  const size_t got = fread(*buf, 1, *len, f);
  fclose(f);
  return got == *len ? 0 : -1;
}

/* Replaces path with exactly these bytes, mode 0600, owned by us: only the content is bad. */
static int write_whole(const char *path, const void *buf, size_t len) {
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return -1;
  const int ok = fchmod(fd, 0600) == 0 && write(fd, buf, len) == (ssize_t)len;
  return close(fd) == 0 && ok ? 0 : -1;
}

static int exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

static unsigned mode_of(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0xffffu;
}

/* Whether dir holds exactly n entries, each valid on its own, and nothing else (no temp
 * file, nothing invalid). */
static int holds_only(const char *dir, int n) {
  int valid = 0, other = 0;
  DIR *const d = opendir(dir);
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[PATH_MAX];
    th_path_in(path, dir, e->d_name);
    cache_entry ent;
    if (cache_read_file(path, &ent) == KLJIT_SUCCESS && !strcmp(e->d_name + 64, ".kjc"))
      valid++;
    else
      other++;
    cache_entry_free(&ent);
  }
  closedir(d);
  if (valid != n || other) fprintf(stderr, "%s: %d entries, %d other files\n", dir, valid, other);
  return valid == n && other == 0;
}

static int looked_up(const cache_config *cfg, const char *key, cache_result want) {
  cache_entry e;
  cache_result r;
  const kljit_status s = cache_lookup(cfg, key, &e, &r);
  cache_entry_free(&e);
  if (s != KLJIT_SUCCESS) fprintf(stderr, "cache_lookup: %s\n", kljit_last_error());
  return s == KLJIT_SUCCESS && r == want;
}

/* Stores key with a 300-byte payload derived from it. */
static kljit_status store_key(const char *dir, const char *key) {
  unsigned char p[300];
  fill_payload(p, sizeof p, key);
  return cache_store_in(dir, key, META, p, sizeof p);
}

/* ---- cases ------------------------------------------------------------------------------ */

static int sha256_matches_fips_vectors(void) {
  /* FIPS 180-2 appendix B and the NIST example values. */
  static const struct {
    const char *msg;
    const char *hex;
  } v[] = {
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
       "lmnopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
  };
  char hex[65];
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    sha256_hex(v[i].msg, strlen(v[i].msg), hex);
    if (strcmp(hex, v[i].hex) != 0) fprintf(stderr, "'%s' -> %s\n", v[i].msg, hex);
    TH_CHECK(strcmp(hex, v[i].hex) == 0);
  }
  enum { MILLION = 1000000 };
  char *const a = malloc(MILLION);
  TH_CHECK(a != NULL);
  memset(a, 'a', MILLION);
  sha256_hex(a, MILLION, hex);
  const int one_shot_ok =
      !strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  /* The same million bytes in uneven pieces cross every block-boundary case of update. */
  static const size_t pieces[] = {1, 63, 64, 65, 55, 56, 57, 1000, 4096, 127};
  sha256_ctx c;
  sha256_init(&c);
  for (size_t i = 0, done = 0; done < MILLION; i++) {
    const size_t p = pieces[i % (sizeof pieces / sizeof pieces[0])];
    const size_t n = p < MILLION - done ? p : MILLION - done;
    sha256_update(&c, a + done, n);
    done += n;
  }
  uint8_t d[32], want[32];
  sha256_final(&c, d);
  sha256(a, MILLION, want);
  free(a);
  TH_CHECK(one_shot_ok && memcmp(d, want, 32) == 0);

  char name[80];
  cache_file_name("abc", name);
  TH_CHECK(strcmp(name, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.kjc") ==
           0);
  return TH_PASS;
}

static int hit_after_miss_in(const char *dir) {
  char rw[PATH_MAX], parent[PATH_MAX], key[512], path[PATH_MAX];
  snprintf(parent, sizeof parent, "%s/a/b", dir);
  snprintf(rw, sizeof rw, "%s/a/b/kljit", dir);
  std_key(key);
  const cache_config cfg = {.rw_dir = rw};
  TH_CHECK(looked_up(&cfg, key, CACHE_MISS));
  TH_CHECK(!exists(parent)); /* a lookup creates nothing */

  unsigned char payload[5000];
  fill_payload(payload, sizeof payload, key);
  const char *const meta = "kernels=kljit_fwd,kljit_bwd\nregisters=96\ncompile_ms=412\n";
  /* An umask that would strip the owner's write bit: modes must come from fchmod, not it. */
  const mode_t old = umask(0277);
  const kljit_status s = cache_store(&cfg, key, meta, payload, sizeof payload);
  umask(old);
  TH_OK(s);

  cache_entry e;
  cache_result r;
  TH_OK(cache_lookup(&cfg, key, &e, &r));
  const int same = r == CACHE_HIT && e.payload_len == sizeof payload &&
                   memcmp(e.payload, payload, sizeof payload) == 0 && !strcmp(e.meta, meta) &&
                   !strcmp(e.key_text, key);
  cache_entry_free(&e);
  TH_CHECK(same);

  snprintf(path, sizeof path, "%s/a", dir);
  TH_CHECK(mode_of(path) == 0700);
  TH_CHECK(mode_of(parent) == 0700);
  TH_CHECK(mode_of(rw) == 0700);
  entry_path(path, rw, key);
  TH_CHECK(mode_of(path) == 0600);

  TH_CHECK(holds_only(rw, 1));
  return TH_PASS;
}

static int key_change_is_a_miss_in(const char *dir) {
  char keys[6][512];
  make_key(keys[0], "0.1.0", SRC_HASH, "12.4", "sm_90", OPTS);
  make_key(keys[1], "0.1.0", SRC_HASH, "12.4", "sm_80", OPTS);                  /* arch */
  make_key(keys[2], "0.1.0", SRC_HASH, "12.4", "sm_90", "-lineinfo");           /* options */
  make_key(keys[3], "0.1.0", SRC_HASH, "12.6", "sm_90", OPTS);                  /* nvrtc */
  make_key(keys[4], "0.1.0", "0" /* another rendered source */, "12.4", "sm_90", OPTS);
  make_key(keys[5], "0.2.0", SRC_HASH, "12.4", "sm_90", OPTS);                  /* kljit */
  const int n = 6;
  const cache_config cfg = {.rw_dir = (char *)dir};

  TH_OK(store_key(dir, keys[0]));
  for (int i = 1; i < n; i++) TH_CHECK(looked_up(&cfg, keys[i], CACHE_MISS));
  char names[6][80];
  for (int i = 0; i < n; i++) {
    cache_file_name(keys[i], names[i]);
    for (int j = 0; j < i; j++) TH_CHECK(strcmp(names[i], names[j]) != 0);
  }
  for (int i = 1; i < n; i++) TH_OK(store_key(dir, keys[i]));
  for (int i = 0; i < n; i++) {
    cache_entry e;
    cache_result r;
    TH_OK(cache_lookup(&cfg, keys[i], &e, &r));
    unsigned char want[300];
    fill_payload(want, sizeof want, keys[i]);
    const int ok = r == CACHE_HIT && e.payload_len == 300 && !memcmp(e.payload, want, 300);
    cache_entry_free(&e);
    TH_CHECK(ok);
  }
  TH_CHECK(holds_only(dir, n));
  return TH_PASS;
}

/* The standard key stored in a directory, its file image and the offsets of its fields as
 * docs/cache-format.md gives them. */
typedef struct fixture {
  char key[512], path[PATH_MAX];
  cache_config cfg;
  unsigned char *img;
  size_t len, key_at, meta_len_at, plen_at, sum_at, payload_at;
} fixture;

static int fixture_make(fixture *f, const char *dir) {
  std_key(f->key);
  f->cfg = (cache_config){.rw_dir = (char *)dir};
  f->img = NULL;
  f->len = 0;
  if (store_key(dir, f->key) != KLJIT_SUCCESS) return -1;
  entry_path(f->path, dir, f->key);
  const size_t k = strlen(f->key), m = strlen(META);
  f->key_at = 16;
  f->meta_len_at = 16 + k;
  f->plen_at = 20 + k + m;
  f->sum_at = 28 + k + m;
  f->payload_at = 60 + k + m;
  return read_whole(f->path, &f->img, &f->len);
}

/* Recomputes the checksum of a (modified) image, so that only the check under test fails. */
static void reseal(const fixture *f, unsigned char *buf, size_t len) {
  sha256_ctx c;
  sha256_init(&c);
  sha256_update(&c, buf, f->sum_at);
  sha256_update(&c, buf + f->payload_at, len - f->payload_at);
  sha256_final(&c, buf + f->sum_at);
}

/* Writes bytes over the entry file; it must be a clean miss in lookup and an error in read. */
static int is_clean_miss(const cache_config *cfg, const char *key, const char *path,
                         const unsigned char *bytes, size_t len) {
  if (write_whole(path, bytes, len) != 0) return 0;
  cache_entry e;
  if (cache_read_file(path, &e) != KLJIT_ERR_CACHE) {
    cache_entry_free(&e);
    fprintf(stderr, "cache_read_file accepted a damaged file (%zu bytes)\n", len);
    return 0;
  }
  return looked_up(cfg, key, CACHE_MISS);
}

static int truncated_entry_is_a_miss_in(const char *dir) {
  fixture f;
  const int made = fixture_make(&f, dir) == 0;
  int bad = !made;
  for (size_t n = 0; n < f.len && !bad; n++) /* every possible truncation */
    if (!is_clean_miss(&f.cfg, f.key, f.path, f.img, n)) {
      fprintf(stderr, "truncation to %zu of %zu bytes was not a miss\n", n, f.len);
      bad = 1;
    }
  const int restored = made && write_whole(f.path, f.img, f.len) == 0 &&
                       looked_up(&f.cfg, f.key, CACHE_HIT);
  /* The converse: bytes beyond the stated payload length, with a checksum recomputed over all
   * of them, must fail the length check on its own. */
  unsigned char *const longer = malloc(f.len + 5);
  int longer_missed = 0;
  if (made && longer) {
    memcpy(longer, f.img, f.len);
    memcpy(longer + f.len, "extra", 5);
    reseal(&f, longer, f.len + 5);
    longer_missed = is_clean_miss(&f.cfg, f.key, f.path, longer, f.len + 5);
  }
  free(longer);
  free(f.img);
  TH_CHECK(!bad && restored && longer_missed);
  return TH_PASS;
}

static int bit_flipped_entry_is_a_miss_in(const char *dir) {
  fixture f;
  const int made = fixture_make(&f, dir) == 0;
  const unsigned char *const b = f.img;
  const size_t k = strlen(f.key), m = strlen(META);
  /* Checking the documented layout first, so the positions below mean what they say. */
  const int layout = made && f.len == f.payload_at + 300 && !memcmp(b, "KLJITCB\0", 8) &&
                     !memcmp(b + 8, "\1\0\0\0", 4) && b[12] == k && !memcmp(b + 16, f.key, k) &&
                     b[f.meta_len_at] == m && !memcmp(b + f.meta_len_at + 4, META, m) &&
                     !memcmp(b + f.plen_at, "\x2c\x01\0\0\0\0\0\0", 8);
  const size_t at[] = {0, 7, 8, 11, 12, 15, f.key_at, f.key_at + k / 2, f.meta_len_at - 1,
                       f.meta_len_at, f.meta_len_at + 4, f.plen_at - 1, f.plen_at,
                       f.plen_at + 7, f.sum_at, f.sum_at + 31, f.payload_at,
                       f.payload_at + 150, f.len - 1};
  int bad = !layout;
  for (size_t i = 0; i < sizeof at / sizeof at[0] && !bad; i++)
    for (int bit = 0; bit < 8 && !bad; bit += 7) {
      f.img[at[i]] ^= (unsigned char)(1u << bit);
      if (!is_clean_miss(&f.cfg, f.key, f.path, f.img, f.len)) {
        fprintf(stderr, "flip of bit %d at byte %zu was not a miss\n", bit, at[i]);
        bad = 1;
      }
      f.img[at[i]] ^= (unsigned char)(1u << bit);
    }
  /* A foreign format version and a foreign magic are misses even with a valid checksum. */
  for (int field = 0; field < 2 && !bad; field++) {
    f.img[field == 0 ? 8 : 0] ^= 2;
    reseal(&f, f.img, f.len);
    bad = !is_clean_miss(&f.cfg, f.key, f.path, f.img, f.len);
    f.img[field == 0 ? 8 : 0] ^= 2;
  }
  free(f.img);
  TH_CHECK(layout);
  TH_CHECK(!bad);
  return TH_PASS;
}

static int wrong_key_entry_is_a_miss_in(const char *dir) {
  char a[512], b[512], pa[PATH_MAX], pb[PATH_MAX];
  make_key(a, "0.1.0", SRC_HASH, "12.4", "sm_90", OPTS);
  make_key(b, "0.1.0", SRC_HASH, "12.4", "sm_100", OPTS);
  TH_OK(store_key(dir, a));
  entry_path(pa, dir, a);
  entry_path(pb, dir, b);
  TH_CHECK(rename(pa, pb) == 0); /* a valid file under another key's name */
  const cache_config cfg = {.rw_dir = (char *)dir};
  TH_CHECK(looked_up(&cfg, b, CACHE_MISS));
  TH_CHECK(looked_up(&cfg, a, CACHE_MISS));
  cache_entry e;
  TH_STATUS(cache_read_file(pb, &e), KLJIT_ERR_CACHE);
  TH_CHECK(strstr(kljit_last_error(), "SHA-256") != NULL);
  TH_CHECK(strstr(kljit_last_error(), pb) != NULL);
  return TH_PASS;
}

static int zero_length_entry_is_a_miss_in(const char *dir) {
  char key[512], path[PATH_MAX];
  std_key(key);
  entry_path(path, dir, key);
  const cache_config cfg = {.rw_dir = (char *)dir};
  TH_CHECK(is_clean_miss(&cfg, key, path, (const unsigned char *)"", 0));
  return TH_PASS;
}

static int corrupt_entry_is_replaced_by_store_in(const char *dir) {
  char key[512], path[PATH_MAX];
  std_key(key);
  entry_path(path, dir, key);
  unsigned char junk[1000];
  fill_payload(junk, sizeof junk, "junk");
  const cache_config cfg = {.rw_dir = (char *)dir};
  TH_CHECK(is_clean_miss(&cfg, key, path, junk, sizeof junk));
  TH_OK(store_key(dir, key)); /* what the caller does after recompiling */
  TH_CHECK(looked_up(&cfg, key, CACHE_HIT));
  TH_CHECK(holds_only(dir, 1));
  return TH_PASS;
}

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static int random_corruptions_never_crash_in(const char *dir) {
  fixture f;
  TH_CHECK(fixture_make(&f, dir) == 0);
  const unsigned char *const img = f.img;
  const size_t len = f.len, len_fields[] = {8, 12, f.meta_len_at, f.plen_at};
  unsigned char *const mut = malloc(len + 64);
  TH_CHECK(mut != NULL);
  uint64_t rng = 0x9e3779b97f4a7c15u; /* fixed seed: a failure reproduces */
  int bad = 0, hits = 0;
  for (int iter = 0; iter < 400 && !bad; iter++) {
    memcpy(mut, img, len);
    size_t n = len;
    switch (xorshift(&rng) % 5) {
      case 0: /* truncate */
        n = xorshift(&rng) % len;
        break;
      case 1: /* flip 1..8 random bits */
        for (uint64_t flips = 1 + xorshift(&rng) % 8; flips > 0; flips--) {
          const uint64_t r = xorshift(&rng);
          mut[r % len] ^= (unsigned char)(1u << (r >> 32) % 8);
        }
        break;
      case 2: { /* a length field set to an extreme or random value */
        static const uint32_t extremes[] = {0, 1, 0x7fffffffu, 0xffffffffu, 0x80000000u};
        const uint64_t r = xorshift(&rng);
        const uint32_t v = r & 1 ? extremes[(r >> 8) % 5] : (uint32_t)(r >> 16);
        const size_t at = len_fields[(r >> 40) % 4];
        for (int b = 0; b < 4; b++) mut[at + (size_t)b] = (unsigned char)(v >> 8 * b);
        break;
      }
      case 3: /* junk appended */
        n = len + 1 + xorshift(&rng) % 63;
        for (size_t i = len; i < n; i++) mut[i] = (unsigned char)xorshift(&rng);
        break;
      default: { /* a random span overwritten */
        const size_t at = xorshift(&rng) % len, span = 1 + xorshift(&rng) % 32;
        for (size_t i = at; i < at + span && i < len; i++) mut[i] = (unsigned char)xorshift(&rng);
      }
    }
    const int unchanged = n == len && memcmp(mut, img, len) == 0;
    if (write_whole(f.path, mut, n) != 0) bad = 1;
    cache_entry e;
    cache_result r;
    const kljit_status s = cache_lookup(&f.cfg, f.key, &e, &r);
    cache_entry_free(&e);
    /* Only a mutation that changed nothing may hit; anything else is a miss, never an error. */
    if (s != KLJIT_SUCCESS || r != (unchanged ? CACHE_HIT : CACHE_MISS)) {
      fprintf(stderr, "iteration %d: status %d result %d (unchanged %d): %s\n", iter, (int)s,
              (int)r, unchanged, kljit_last_error());
      bad = 1;
    }
    hits += unchanged;
  }
  free(mut);
  free(f.img);
  TH_CHECK(!bad);
  TH_CHECK(hits < 40); /* the mutations really mutate */
  return TH_PASS;
}

enum { RACERS = 16, RACE_ROUNDS = 24, DISTINCT_PER_RACER = 3 };

/* One racer: store and immediately look up, RACE_ROUNDS times. Returns the exit code. */
static int racer(const char *rw, int id) {
  const cache_config cfg = {.rw_dir = (char *)rw};
  unsigned char payload[20000];
  for (int round = 0; round < RACE_ROUNDS; round++) {
    char key[512], variant[64];
    /* Racers 0-7 all write one key; 8-15 each cycle through keys of their own. */
    snprintf(variant, sizeof variant, "racer%d-%d", id, round % DISTINCT_PER_RACER);
    make_key(key, "0.1.0", id < RACERS / 2 ? SRC_HASH : variant, "12.4", "sm_90", OPTS);
    fill_payload(payload, sizeof payload, key);
    if (cache_store(&cfg, key, "registers=32\n", payload, sizeof payload) != KLJIT_SUCCESS) {
      fprintf(stderr, "racer %d: store: %s\n", id, kljit_last_error());
      return 1;
    }
    cache_entry e;
    cache_result r;
    if (cache_lookup(&cfg, key, &e, &r) != KLJIT_SUCCESS || r != CACHE_HIT) {
      fprintf(stderr, "racer %d: lookup after store: %d %s\n", id, (int)r, kljit_last_error());
      return 1;
    }
    const int same = e.payload_len == sizeof payload && !memcmp(e.payload, payload, sizeof payload);
    cache_entry_free(&e);
    if (!same) return 1;
  }
  return 0;
}

static int sixteen_processes_race_same_and_different_keys_in(const char *dir) {
  char rw[PATH_MAX];
  th_path_in(rw, dir, "race"); /* absent: the racers also race to create it */
  fflush(NULL);
  pid_t pids[RACERS];
  for (int i = 0; i < RACERS; i++) {
    pids[i] = fork();
    TH_CHECK(pids[i] >= 0);
    if (pids[i] == 0) _exit(racer(rw, i));
  }
  int failed = 0;
  for (int i = 0; i < RACERS; i++) {
    int status = 0;
    if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) || WEXITSTATUS(status))
      failed++;
  }
  TH_CHECK(failed == 0);

  TH_CHECK(holds_only(rw, 1 + RACERS / 2 * DISTINCT_PER_RACER));
  return TH_PASS;
}

/* Expects lookup to refuse, with a message naming `path` and containing `reason`. */
static int refused(const cache_config *cfg, const char *key, const char *path,
                   const char *reason) {
  cache_entry e;
  cache_result r;
  const kljit_status s = cache_lookup(cfg, key, &e, &r);
  cache_entry_free(&e);
  const char *const msg = kljit_last_error();
  if (s == KLJIT_ERR_CACHE && r == CACHE_MISS && strstr(msg, path) && strstr(msg, reason))
    return 1;
  fprintf(stderr, "wanted a refusal naming %s (%s); got status %d: %s\n", path, reason, (int)s,
          msg);
  return 0;
}

static int group_writable_entry_is_refused_in(const char *dir) {
  char key[512], path[PATH_MAX];
  std_key(key);
  TH_OK(store_key(dir, key));
  entry_path(path, dir, key);
  const cache_config cfg = {.rw_dir = (char *)dir};
  TH_CHECK(chmod(path, 0664) == 0);
  TH_CHECK(refused(&cfg, key, path, "writable by group or others (mode 0664)"));
  cache_entry e;
  TH_STATUS(cache_read_file(path, &e), KLJIT_ERR_CACHE);
  TH_CHECK(strstr(kljit_last_error(), path) != NULL);
  TH_CHECK(chmod(path, 0602) == 0);
  TH_CHECK(refused(&cfg, key, path, "mode 0602"));
  TH_CHECK(chmod(path, 0600) == 0);
  TH_CHECK(looked_up(&cfg, key, CACHE_HIT));
  return TH_PASS;
}

static int world_writable_dir_is_refused_in(const char *dir) {
  char key[512], rw[PATH_MAX], ro[PATH_MAX];
  std_key(key);
  th_path_in(rw, dir, "rw");
  th_path_in(ro, dir, "ro");
  TH_OK(store_key(rw, key));
  TH_OK(store_key(ro, key));
  char *ro_dirs[] = {ro};
  const cache_config with_ro = {.ro_dirs = ro_dirs, .n_ro = 1, .rw_dir = rw};
  const cache_config rw_only = {.rw_dir = rw};

  TH_CHECK(chmod(rw, 0777) == 0);
  TH_CHECK(refused(&rw_only, key, rw, "refusing cache directory"));
  TH_CHECK(refused(&rw_only, key, rw, "mode 0777"));
  TH_STATUS(store_key(rw, "another key"), KLJIT_ERR_CACHE);
  TH_CHECK(strstr(kljit_last_error(), rw) != NULL);
  TH_CHECK(chmod(rw, 0770) == 0); /* group-writable is as bad */
  TH_CHECK(refused(&rw_only, key, rw, "mode 0770"));
  TH_STATUS(cache_store(&rw_only, "another key", "", "x", 1), KLJIT_ERR_CACHE);
  TH_CHECK(holds_only(rw, 1));
  TH_CHECK(chmod(rw, 0700) == 0);
  TH_CHECK(looked_up(&rw_only, key, CACHE_HIT));

  TH_CHECK(chmod(ro, 0757) == 0); /* a read-only directory is held to the same rule */
  TH_CHECK(refused(&with_ro, key, ro, "mode 0757"));
  TH_CHECK(chmod(ro, 0755) == 0);
  TH_CHECK(looked_up(&with_ro, key, CACHE_HIT_READONLY));
  return TH_PASS;
}

static int symlinked_entry_is_refused_in(const char *dir) {
  char key[512], path[PATH_MAX], real[PATH_MAX];
  std_key(key);
  TH_OK(store_key(dir, key));
  entry_path(path, dir, key);
  th_path_in(real, dir, "elsewhere");
  TH_CHECK(rename(path, real) == 0);
  TH_CHECK(symlink(real, path) == 0);
  const cache_config cfg = {.rw_dir = (char *)dir};
  TH_CHECK(refused(&cfg, key, path, "symbolic link"));
  cache_entry e;
  TH_STATUS(cache_read_file(path, &e), KLJIT_ERR_CACHE);
  /* a store replaces nothing but a regular file (fs_check_replaceable): the link stays, and so
   * does its target; once the link is gone, the entry is stored again */
  TH_STATUS(store_key(dir, key), KLJIT_ERR_CACHE);
  TH_CHECK(strstr(kljit_last_error(), "symbolic link"));
  struct stat st;
  TH_CHECK(lstat(path, &st) == 0 && S_ISLNK(st.st_mode));
  TH_CHECK(unlink(path) == 0);
  TH_OK(store_key(dir, key));
  TH_CHECK(looked_up(&cfg, key, CACHE_HIT));
  return TH_PASS;
}

static int foreign_owner_entry_is_refused_in(const char *dir) {
  if (geteuid() != 0) return TH_SKIP; /* only root can hand a file to another user */
  char key[512], path[PATH_MAX], rw[PATH_MAX];
  std_key(key);
  th_path_in(rw, dir, "rw");
  TH_OK(store_key(rw, key));
  entry_path(path, rw, key);
  const cache_config cfg = {.rw_dir = rw};
  TH_CHECK(chown(path, 65534, 65534) == 0);
  TH_CHECK(refused(&cfg, key, path, "owned by uid 65534"));
  TH_CHECK(chown(path, 0, 0) == 0 && chown(rw, 65534, 65534) == 0);
  TH_CHECK(refused(&cfg, key, rw, "owned by uid 65534"));
  return TH_PASS;
}

/* Everything observable about a directory's contents, as text. */
static int snapshot(const char *dir, strbuf *out) {
  struct stat st;
  if (stat(dir, &st) != 0) return -1;
  sb_printf(out, "%s %lld.%09ld %llu\n", dir, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
            (unsigned long long)st.st_ino);
  struct dirent **names;
  const int n = scandir(dir, &names, NULL, alphasort);
  if (n < 0) return -1;
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX], hex[65] = "-";
    th_path_in(path, dir, names[i]->d_name);
    unsigned char *buf = NULL;
    size_t len = 0;
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && read_whole(path, &buf, &len) == 0)
      sha256_hex(buf, len, hex);
    free(buf);
    sb_printf(out, "%s %lld.%09ld %lld %s\n", names[i]->d_name, (long long)st.st_mtim.tv_sec,
              st.st_mtim.tv_nsec, (long long)st.st_size, hex);
    free(names[i]);
  }
  free(names);
  return 0;
}

static int readonly_path_is_searched_first_and_never_written_in(const char *dir) {
  char ro1[PATH_MAX], ro2[PATH_MAX], rw[PATH_MAX], k[512], c[512], fresh[512], path[PATH_MAX];
  th_path_in(ro1, dir, "ro1");
  th_path_in(ro2, dir, "ro2");
  th_path_in(rw, dir, "rw");
  TH_CHECK(mkdir(ro1, 0755) == 0 && chmod(ro1, 0755) == 0);
  make_key(k, "0.1.0", SRC_HASH, "12.4", "sm_90", OPTS);
  make_key(c, "0.1.0", SRC_HASH, "12.4", "sm_80", OPTS);
  make_key(fresh, "0.1.0", SRC_HASH, "12.4", "sm_75", OPTS);
  TH_OK(cache_store_in(ro2, k, "from=ro2\n", "ro", 2));
  TH_OK(cache_store_in(rw, k, "from=rw\n", "rw", 2));
  TH_CHECK(chmod(ro2, 0755) == 0);
  entry_path(path, ro1, c);
  TH_CHECK(write_whole(path, "corrupt", 7) == 0); /* a damaged entry in a read-only dir */

  strbuf before = {0}, after = {0};
  TH_CHECK(snapshot(ro1, &before) == 0 && snapshot(ro2, &before) == 0);
  char *ro_dirs[] = {ro1, ro2};
  const cache_config cfg = {.ro_dirs = ro_dirs, .n_ro = 2, .rw_dir = rw};

  cache_entry e;
  cache_result r;
  TH_OK(cache_lookup(&cfg, k, &e, &r));
  const int from_ro = r == CACHE_HIT_READONLY && e.payload_len == 2 && !memcmp(e.payload, "ro", 2);
  cache_entry_free(&e);
  TH_CHECK(from_ro);

  TH_CHECK(looked_up(&cfg, c, CACHE_MISS)); /* the corrupt ro entry is passed over */
  TH_OK(cache_store(&cfg, c, "", "c", 1));   /* and the store lands in rw, not over it */
  TH_CHECK(looked_up(&cfg, c, CACHE_HIT));
  TH_CHECK(looked_up(&cfg, fresh, CACHE_MISS));
  TH_OK(cache_store(&cfg, fresh, "", "f", 1));
  TH_CHECK(looked_up(&cfg, fresh, CACHE_HIT));

  TH_CHECK(snapshot(ro1, &after) == 0 && snapshot(ro2, &after) == 0);
  const int untouched = before.len == after.len && !memcmp(before.data, after.data, before.len);
  if (!untouched) fprintf(stderr, "before:\n%s\nafter:\n%s", before.data, after.data);
  sb_free(&before);
  sb_free(&after);
  TH_CHECK(untouched);
  TH_CHECK(holds_only(rw, 3));
  return TH_PASS;
}

/* The variables cache_config_from_env reads, saved so a case leaves the environment as found. */
static const char *const ENV_NAMES[] = {"KLJIT_CACHE_PATH", "KLJIT_CACHE_DIR", "XDG_CACHE_HOME",
                                        "HOME", "KLJIT_CACHE_DISABLE"};
enum { N_ENV = sizeof ENV_NAMES / sizeof ENV_NAMES[0] };

static void env_save(char *saved[N_ENV]) {
  for (int i = 0; i < N_ENV; i++) {
    const char *const v = getenv(ENV_NAMES[i]);
    saved[i] = v ? strdup(v) : NULL;
    unsetenv(ENV_NAMES[i]);
  }
}

static void env_restore(char *saved[N_ENV]) {
  for (int i = 0; i < N_ENV; i++) {
    if (saved[i])
      setenv(ENV_NAMES[i], saved[i], 1);
    else
      unsetenv(ENV_NAMES[i]);
    free(saved[i]);
  }
}

static int disabled_cache_never_touches_disk_in(const char *dir) {
  char key[512], ro[PATH_MAX], never[PATH_MAX];
  std_key(key);
  th_path_in(ro, dir, "ro");
  th_path_in(never, dir, "never");
  TH_OK(store_key(ro, key));
  char *ro_dirs[] = {ro};
  const cache_config cfg = {.ro_dirs = ro_dirs, .n_ro = 1, .rw_dir = never, .disabled = 1};
  TH_CHECK(looked_up(&cfg, key, CACHE_MISS)); /* not even the read-only entry */
  TH_OK(cache_store(&cfg, key, "", "x", 1));
  TH_CHECK(!exists(never)); /* KLJIT_CACHE_DISABLE=1 sets .disabled: config_reads_environment */
  return TH_PASS;
}

/* Sets the five variables (NULL = unset), reads the config and compares it with the wants. */
static int config_is(const char *path, const char *dir, const char *xdg, const char *home,
                     const char *disable, const char *want_rw, const char *want_ro) {
  const char *const vals[N_ENV] = {path, dir, xdg, home, disable};
  for (int i = 0; i < N_ENV; i++)
    if (vals[i])
      setenv(ENV_NAMES[i], vals[i], 1);
    else
      unsetenv(ENV_NAMES[i]);
  cache_config cfg;
  if (cache_config_from_env(&cfg) != KLJIT_SUCCESS) return 0;
  strbuf ro = {0};
  for (size_t i = 0; i < cfg.n_ro; i++) sb_printf(&ro, "%s%s", i ? "|" : "", cfg.ro_dirs[i]);
  const char *const got_ro = ro.data ? ro.data : "";
  const int ok = (want_rw ? cfg.rw_dir && !strcmp(cfg.rw_dir, want_rw) : !cfg.rw_dir) &&
                 !strcmp(got_ro, want_ro) && cfg.disabled == (disable && !strcmp(disable, "1"));
  if (!ok)
    fprintf(stderr, "config: rw '%s' ro '%s' disabled %d; wanted rw '%s' ro '%s'\n",
            cfg.rw_dir ? cfg.rw_dir : "(null)", got_ro, cfg.disabled,
            want_rw ? want_rw : "(null)", want_ro);
  sb_free(&ro);
  cache_config_free(&cfg);
  return ok;
}

static int config_reads_environment_in(const char *dir) {
  char home[PATH_MAX], want[PATH_MAX + 16];
  th_path_in(home, dir, "home"); /* does not exist: reading the config must not create it */
  snprintf(want, sizeof want, "%s/.cache/kljit", home);
  char *saved[N_ENV];
  env_save(saved);
  int ok = 1;
  ok &= config_is(NULL, "/c/dir", "/xdg", home, NULL, "/c/dir", "");
  ok &= config_is(NULL, NULL, "/xdg", home, NULL, "/xdg/kljit", "");
  ok &= config_is(NULL, NULL, NULL, home, NULL, want, "");
  ok &= config_is(NULL, "", "", home, "0", want, "");      /* empty values count as unset */
  ok &= config_is(NULL, NULL, "relative", home, NULL, want, ""); /* XDG wants absolute */
  ok &= config_is("/sys1:/sys2::/sys3:", NULL, NULL, home, NULL, want, "/sys1|/sys2|/sys3");
  ok &= config_is("/only", "/c", NULL, NULL, NULL, "/c", "/only");
  ok &= config_is("/only", NULL, NULL, NULL, NULL, NULL, "/only"); /* nowhere to write */
  ok &= config_is("/sys1", "/c", NULL, home, "1", NULL, "");
  env_restore(saved);
  TH_CHECK(ok);
  TH_CHECK(!exists(home));
  return TH_PASS;
}

static int failed_store_leaves_no_temp_file_in(const char *dir) {
  char rw[PATH_MAX], file[PATH_MAX];
  th_path_in(rw, dir, "rw");
  fflush(NULL);
  /* A child with a 4 KiB file size limit: the write of the temp file fails part way. */
  const pid_t pid = fork();
  TH_CHECK(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    const struct rlimit lim = {4096, 4096};
    static unsigned char big[100000];
    const int ok = setrlimit(RLIMIT_FSIZE, &lim) == 0 &&
                   cache_store_in(rw, "key", "", big, sizeof big) == KLJIT_ERR_CACHE;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  TH_CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  TH_CHECK(holds_only(rw, 0));

  th_path_in(file, dir, "a-file"); /* a "directory" that is a regular file */
  TH_CHECK(write_whole(file, "x", 1) == 0);
  TH_STATUS(store_key(file, "key"), KLJIT_ERR_CACHE);
  TH_CHECK(strstr(kljit_last_error(), file) != NULL);
  return TH_PASS;
}

/* ---- table ------------------------------------------------------------------------------ */

#define IN_TMPDIR(name) \
  static int name(void) { return th_in_tmpdir("unit-cache", name##_in); }
IN_TMPDIR(hit_after_miss)
IN_TMPDIR(key_change_is_a_miss)
IN_TMPDIR(truncated_entry_is_a_miss)
IN_TMPDIR(bit_flipped_entry_is_a_miss)
IN_TMPDIR(wrong_key_entry_is_a_miss)
IN_TMPDIR(zero_length_entry_is_a_miss)
IN_TMPDIR(corrupt_entry_is_replaced_by_store)
IN_TMPDIR(random_corruptions_never_crash)
IN_TMPDIR(sixteen_processes_race_same_and_different_keys)
IN_TMPDIR(group_writable_entry_is_refused)
IN_TMPDIR(world_writable_dir_is_refused)
IN_TMPDIR(symlinked_entry_is_refused)
IN_TMPDIR(foreign_owner_entry_is_refused)
IN_TMPDIR(readonly_path_is_searched_first_and_never_written)
IN_TMPDIR(disabled_cache_never_touches_disk)
IN_TMPDIR(config_reads_environment)
IN_TMPDIR(failed_store_leaves_no_temp_file)

#define CASE(name) {#name, name}
static const th_case cases[] = {
    CASE(sha256_matches_fips_vectors), CASE(hit_after_miss), CASE(key_change_is_a_miss),
    CASE(truncated_entry_is_a_miss), CASE(bit_flipped_entry_is_a_miss),
    CASE(wrong_key_entry_is_a_miss), CASE(zero_length_entry_is_a_miss),
    CASE(corrupt_entry_is_replaced_by_store), CASE(random_corruptions_never_crash),
    CASE(sixteen_processes_race_same_and_different_keys), CASE(group_writable_entry_is_refused),
    CASE(world_writable_dir_is_refused), CASE(symlinked_entry_is_refused),
    CASE(foreign_owner_entry_is_refused), CASE(readonly_path_is_searched_first_and_never_written),
    CASE(disabled_cache_never_touches_disk), CASE(config_reads_environment),
    CASE(failed_store_leaves_no_temp_file),
};

TH_MAIN(cases)

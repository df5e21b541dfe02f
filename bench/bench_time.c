/* SPDX-License-Identifier: Apache-2.0 */
/* bench_time.c — the benchmarks' timing loop and the NVML clock and power sampler (see
 * bench_time.h). */
#include "bench_time.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- NVML, the few entry points read (nvml.h is not in every toolkit: declared here) ------- */

typedef int nvml_ret;                 /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct nvml_device *nvml_dev; /* nvmlDevice_t */
enum { NVML_CLOCK_SM = 1 };           /* nvmlClockType_t */

typedef struct nvml_api {
  nvml_ret (*init)(void);                                           /* nvmlInit_v2 */
  nvml_ret (*shutdown)(void);                                       /* nvmlShutdown */
  nvml_ret (*by_bus_id)(const char *, nvml_dev *);                  /* ..._v2 */
  nvml_ret (*clock)(nvml_dev, int, unsigned *);                     /* nvmlDeviceGetClockInfo */
  nvml_ret (*power)(nvml_dev, unsigned *);                          /* nvmlDeviceGetPowerUsage */
} nvml_api;

typedef struct sample {
  double t;
  unsigned mhz, mw;
} sample;

static struct {
  void *lib;
  nvml_api f;
  nvml_dev dev;
  pthread_t thread;
  pthread_mutex_t lock;
  int running, stop;
  sample *s; /* in time order */
  size_t n, cap;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

double bt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *sampler(void *unused) {
  (void)unused;
  const struct timespec period = {0, BT_SAMPLE_MS * 1000000L};
  for (;;) {
    pthread_mutex_lock(&g.lock);
    const int stop = g.stop;
    pthread_mutex_unlock(&g.lock);
    if (stop) break;
    sample x = {bt_now(), 0, 0};
    if (g.f.clock(g.dev, NVML_CLOCK_SM, &x.mhz) == 0 && g.f.power(g.dev, &x.mw) == 0) {
      pthread_mutex_lock(&g.lock);
      if (g.n == g.cap) { /* a sample a period: 10 ms x 2^20 is hours */
        const size_t cap = g.cap ? 2 * g.cap : 4096;
        sample *s = realloc(g.s, cap * sizeof *s);
        if (s) g.s = s, g.cap = cap;
      }
      if (g.n < g.cap) g.s[g.n++] = x;
      pthread_mutex_unlock(&g.lock);
    }
    nanosleep(&period, NULL);
  }
  return NULL;
}

int bt_power_start(int device) {
  if (g.running) return 0;
  char bus[32];
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) {
    fprintf(stderr, "bench: no PCI bus id for device %d: clock and power not sampled\n", device);
    return 1;
  }
  g.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!g.lib) {
    fprintf(stderr, "bench: %s: clock and power not sampled\n", dlerror());
    return 1;
  }
  *(void **)&g.f.init = dlsym(g.lib, "nvmlInit_v2");
  *(void **)&g.f.shutdown = dlsym(g.lib, "nvmlShutdown");
  *(void **)&g.f.by_bus_id = dlsym(g.lib, "nvmlDeviceGetHandleByPciBusId_v2");
  *(void **)&g.f.clock = dlsym(g.lib, "nvmlDeviceGetClockInfo");
  *(void **)&g.f.power = dlsym(g.lib, "nvmlDeviceGetPowerUsage");
  nvml_ret r = -1;
  if (g.f.init && g.f.shutdown && g.f.by_bus_id && g.f.clock && g.f.power && !(r = g.f.init()))
    r = g.f.by_bus_id(bus, &g.dev);
  if (r || pthread_create(&g.thread, NULL, sampler, NULL)) {
    fprintf(stderr, "bench: NVML unusable (status %d): clock and power not sampled\n", r);
    if (g.f.shutdown && !r) g.f.shutdown();
    dlclose(g.lib), g.lib = NULL;
    return 1;
  }
  g.running = 1;
  return 0;
}

void bt_power_stop(void) {
  if (!g.running) return;
  pthread_mutex_lock(&g.lock);
  g.stop = 1;
  pthread_mutex_unlock(&g.lock);
  pthread_join(g.thread, NULL);
  g.f.shutdown();
  dlclose(g.lib);
  free(g.s);
  memset(&g.f, 0, sizeof g.f);
  g.lib = NULL, g.s = NULL, g.n = g.cap = 0, g.running = g.stop = 0;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The samples inside any of the windows [t0[i] - period, t1[i] + period]. */
static bt_power power_of(const double *t0, const double *t1, int windows) {
  bt_power p;
  memset(&p, 0, sizeof p);
  if (!g.running) return p;
  const double pad = BT_SAMPLE_MS * 1e-3;
  pthread_mutex_lock(&g.lock);
  double *mhz = malloc((g.n + 1) * sizeof *mhz), *w = malloc((g.n + 1) * sizeof *w);
  size_t k = 0;
  for (size_t i = 0; mhz && w && i < g.n; i++)
    for (int j = 0; j < windows; j++)
      if (g.s[i].t >= t0[j] - pad && g.s[i].t <= t1[j] + pad) {
        mhz[k] = g.s[i].mhz, w[k] = 1e-3 * g.s[i].mw, k++;
        break;
      }
  pthread_mutex_unlock(&g.lock);
  if (k) {
    qsort(mhz, k, sizeof *mhz, cmp_double);
    qsort(w, k, sizeof *w, cmp_double);
    p.n = (int)k, p.mhz_median = mhz[k / 2], p.mhz_min = mhz[0], p.mhz_max = mhz[k - 1];
    p.watts_median = w[k / 2], p.watts_max = w[k - 1];
  }
  free(mhz), free(w);
  return p;
}

void bt_power_text(const bt_power *p, char *out, size_t cap) {
  if (!p->n)
    snprintf(out, cap, "clock n/a");
  else
    snprintf(out, cap, "clock %.0f MHz (%.0f-%.0f), %.0f W median, %.0f max, %d samples",
             p->mhz_median, p->mhz_min, p->mhz_max, p->watts_median, p->watts_max, p->n);
}

/* ---- timing ------------------------------------------------------------------------------- */

static int cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 1;
  fprintf(stderr, "bench: %s: %s\n", what, cudaGetErrorString(e));
  return 0;
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* One flushed, event-timed step: 0 with *ms and the host window [*t0, *t1], 1 when the step or
 * a CUDA call failed (*step_failed says which). */
static int one_step(const bt_loop *l, bt_step_fn step, void *arg, cudaEvent_t a, cudaEvent_t b,
                    int index, float *ms, double *t0, double *t1, int *step_failed) {
  *step_failed = 0;
  if (!cuda_ok(cudaMemsetAsync(l->flush, index & 0xff, l->flush_bytes, l->stream), "L2 flush"))
    return 1;
  if (!cuda_ok(cudaEventRecord(a, l->stream), "cudaEventRecord")) return 1;
  *t0 = bt_now();
  if (step(arg)) return *step_failed = 1, 1;
  if (!cuda_ok(cudaEventRecord(b, l->stream), "cudaEventRecord") ||
      !cuda_ok(cudaEventSynchronize(b), "a timed step"))
    return *step_failed = 1, 1;
  *t1 = bt_now();
  return !cuda_ok(cudaEventElapsedTime(ms, a, b), "cudaEventElapsedTime");
}

static void summarize(const float *ms, const double *t0, const double *t1, int n, bt_result *r) {
  float s[BT_MAX_REPEATS];
  memcpy(s, ms, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_float);
  r->repeats = n;
  r->median_ms = n % 2 ? s[n / 2] : 0.5f * (s[n / 2 - 1] + s[n / 2]);
  r->min_ms = s[0], r->max_ms = s[n - 1];
  r->power = power_of(t0, t1, n);
}

int bt_time(const bt_loop *l, bt_step_fn step, void *arg, bt_result *out) {
  memset(out, 0, sizeof *out);
  const int n = l->repeats < BT_MAX_REPEATS ? l->repeats : BT_MAX_REPEATS;
  cudaEvent_t a = NULL, b = NULL;
  int rc = !cuda_ok(cudaEventCreate(&a), "cudaEventCreate") ||
           !cuda_ok(cudaEventCreate(&b), "cudaEventCreate") || n < 1;
  float ms[BT_MAX_REPEATS];
  double t0[BT_MAX_REPEATS], t1[BT_MAX_REPEATS];
  for (int i = 0; i < l->warmup + n && !rc; i++) {
    const int r = i - l->warmup;
    float t = 0;
    double w0 = 0, w1 = 0;
    int failed;
    rc = one_step(l, step, arg, a, b, i, &t, &w0, &w1, &failed);
    if (!rc && l->after) rc = l->after(l->after_arg, i);
    if (!rc && r >= 0) ms[r] = t, t0[r] = w0, t1[r] = w1;
  }
  if (!rc) summarize(ms, t0, t1, n, out);
  if (a) cudaEventDestroy(a);
  if (b) cudaEventDestroy(b);
  return rc;
}

int bt_round_robin(const bt_loop *l, bt_entry *e, int n) {
  const int reps = l->repeats < BT_MAX_REPEATS ? l->repeats : BT_MAX_REPEATS;
  cudaEvent_t a = NULL, b = NULL;
  if (!cuda_ok(cudaEventCreate(&a), "cudaEventCreate") ||
      !cuda_ok(cudaEventCreate(&b), "cudaEventCreate"))
    return 1;
  int rc = 0;
  for (int i = 0; i < n; i++) e[i].failed = 0, memset(&e[i].r, 0, sizeof e[i].r);
  /* warm-up: sustained load, every entry, back to back */
  for (int i = 0; i < n && !rc; i++)
    for (int w = 0; w < l->warmup && !e[i].failed && !rc; w++) {
      float t;
      double w0, w1;
      int failed;
      rc = one_step(l, e[i].step, e[i].arg, a, b, w, &t, &w0, &w1, &failed);
      if (rc && failed) {
        fprintf(stderr, "bench: %s failed in warm-up: left out\n", e[i].name);
        e[i].failed = 1, rc = cudaGetLastError() != cudaSuccess; /* a sticky error ends all */
      }
    }
  for (int r = 0; r < reps && !rc; r++)
    for (int k = 0; k < n && !rc; k++) {
      bt_entry *x = &e[r % 2 ? n - 1 - k : k];
      if (x->failed) continue;
      int failed;
      rc = one_step(l, x->step, x->arg, a, b, r, &x->ms[r], &x->t0[r], &x->t1[r], &failed);
      if (rc && failed) {
        fprintf(stderr, "bench: %s failed in round %d: left out\n", x->name, r);
        x->failed = 1, rc = cudaGetLastError() != cudaSuccess;
      }
    }
  for (int i = 0; i < n && !rc; i++)
    if (!e[i].failed) summarize(e[i].ms, e[i].t0, e[i].t1, reps, &e[i].r);
  cudaEventDestroy(a), cudaEventDestroy(b);
  return rc;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* bench_time.h — the one timing loop of the benchmarks (bench_loss, kljit-bench's children,
 * bench_gemm), and the GPU's SM clock and board power sampled beside it.
 *
 * What one timed step is: an L2 flush (a memset of a buffer larger than the L2, on the timed
 * stream), a CUDA event, the step, a CUDA event, a wait for it; its time is the events'. A
 * timing is warm-up steps, then repeats; the median counts, with the minimum and maximum beside
 * it. A comparison of several steps (bt_round_robin) times them alternately, one repeat of each
 * per round, the order reversed every other round, after a warm-up of all of them back to back:
 * every step sees the same clock history, and none is timed first after an idle GPU (an idle
 * GPU boosts its clock for the first hundreds of milliseconds of load; a GPU under sustained
 * tensor load may be held down by its power limit).
 *
 * The clock and power come from NVML (libnvidia-ml.so.1, loaded with dlopen; only
 * nvmlDeviceGetClockInfo and nvmlDeviceGetPowerUsage are called: nothing is set), sampled by a
 * thread every BT_SAMPLE_MS while bt_power_start's sampler runs; a timing reports the samples
 * that fell inside its steps (host time around each step, widened by one period). Without NVML
 * (no driver, a container without the library) the numbers are absent, never made up.
 */
#ifndef KLJIT_BENCH_TIME_H
#define KLJIT_BENCH_TIME_H

#include <cuda_runtime_api.h>
#include <stddef.h>

enum { BT_SAMPLE_MS = 10, BT_MAX_REPEATS = 256 };

/* Starts sampling device `device` (the CUDA runtime's ordinal; NVML's device is found by its
 * PCI bus id). 0, or 1 when NVML is unavailable (a message on stderr; timings still run). */
int bt_power_start(int device);
void bt_power_stop(void);

/* The samples of a set of host-time windows. n = 0: none (no NVML, or no sample fell there). */
typedef struct bt_power {
  int n;
  double mhz_median, mhz_min, mhz_max; /* SM clock */
  double watts_median, watts_max;      /* board power */
} bt_power;

/* Host monotonic time in seconds (the windows' clock). */
double bt_now(void);

/* One step of work, enqueued on the stream (a kljit call, a GEMM): 0, or 1 on failure. */
typedef int (*bt_step_fn)(void *arg);

/* Called after each synchronized step (warm-up ones included, index counting from 0): memory
 * sampling, a loss read back. 0, or 1 to stop the timing as failed. */
typedef int (*bt_after_fn)(void *arg, int index);

typedef struct bt_loop {
  int warmup, repeats;  /* repeats <= BT_MAX_REPEATS */
  void *flush;          /* the L2 flush buffer (device memory), flush_bytes long */
  size_t flush_bytes;
  cudaStream_t stream;
  bt_after_fn after;    /* may be NULL */
  void *after_arg;
} bt_loop;

typedef struct bt_result {
  float median_ms, min_ms, max_ms;
  int repeats;
  bt_power power;
} bt_result;

/* Times one step: warm-up, then the repeats. 0, or 1 (a message on stderr naming the call). */
int bt_time(const bt_loop *l, bt_step_fn step, void *arg, bt_result *out);

/* One contender of a round-robin comparison. */
typedef struct bt_entry {
  const char *name;
  bt_step_fn step;
  void *arg;
  int failed; /* set when its step failed: left out of the later rounds */
  bt_result r;
  /* the round-robin's own state */
  float ms[BT_MAX_REPEATS];
  double t0[BT_MAX_REPEATS], t1[BT_MAX_REPEATS];
} bt_entry;

/* l->warmup steps of each entry back to back (all of the first entry's, then the next's ...),
 * then l->repeats rounds: round r times every entry once, in order for even r and in reverse
 * for odd r. Each entry's result: the median of its rounds, and the samples of its steps. 0, or
 * 1 when a CUDA call outside the steps failed (an entry whose step fails is marked failed). */
int bt_round_robin(const bt_loop *l, bt_entry *e, int n);

/* "clock 1920 MHz (1530-1980), 603 W max" or "clock n/a" (for the tables on stderr). */
void bt_power_text(const bt_power *p, char *out, size_t cap);

#endif

/* kljit.c — the kljit command-line tool: demo, info, precompile.
 *
 * Exit codes: 0 success, 1 a kljit or CUDA failure (message on stderr), 2 bad usage.
 * Uses only the public header (and the CUDA runtime for the demo's buffers).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_util.h"
#include "kljit.h"

enum { EXIT_USAGE = 2 };

typedef struct opts {
  long long rows, hidden, vocab;
  int repeats;
  kljit_dtype dtype;
  kljit_teacher_form teacher;
  const char *arch;
  const char *cache_dir;
} opts;

static void usage(FILE *f) {
  fputs("usage: kljit <command> [options]\n"
        "commands:\n"
        "  demo        compute the fused loss on a default problem and print loss, time and\n"
        "              memory; without a GPU, compile its kernels for sm_80 and sm_90 instead\n"
        "  info        versions, GPU, kernel cache locations\n"
        "  precompile  compile a problem's kernels into a cache directory (no GPU needed)\n"
        "  version     print the library version\n"
        "options (demo, precompile):\n"
        "  --rows N --hidden H --vocab V   shape (default 4096 x 4096 x 128256)\n"
        "  --dtype fp32|fp16|bf16          inputs and teacher (default bf16)\n"
        "  --teacher probs|logprobs|logits dense teacher form (default probs)\n"
        "  --repeats R                     demo timing repeats (default 10)\n"
        "  --arch sm_80,sm_90              precompile targets (default sm_80,sm_90)\n"
        "  --cache-dir DIR                 precompile destination (default: the user cache)\n",
        f);
}

static int parse(int argc, char **argv, opts *o) {
  o->rows = 4096, o->hidden = 4096, o->vocab = 128256, o->repeats = 10;
  o->dtype = KLJIT_BF16, o->teacher = KLJIT_TEACHER_DENSE_PROBS;
  o->arch = "sm_80,sm_90", o->cache_dir = NULL;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      exit(0);
    }
    if (!v) {
      fprintf(stderr, "kljit: option %s needs a value\n", a);
      return 1;
    }
    i++;
    if (!strcmp(a, "--rows")) o->rows = atoll(v);
    else if (!strcmp(a, "--hidden")) o->hidden = atoll(v);
    else if (!strcmp(a, "--vocab")) o->vocab = atoll(v);
    else if (!strcmp(a, "--repeats")) o->repeats = atoi(v);
    else if (!strcmp(a, "--arch")) o->arch = v;
    else if (!strcmp(a, "--cache-dir")) o->cache_dir = v;
    else if (!strcmp(a, "--dtype")) {
      o->dtype = !strcmp(v, "fp32") ? KLJIT_FP32 : !strcmp(v, "fp16") ? KLJIT_FP16
                 : !strcmp(v, "bf16") ? KLJIT_BF16 : (kljit_dtype)0;
      if (!o->dtype) {
        fprintf(stderr, "kljit: --dtype %s: want fp32, fp16 or bf16\n", v);
        return 1;
      }
    } else if (!strcmp(a, "--teacher")) {
      o->teacher = !strcmp(v, "probs")      ? KLJIT_TEACHER_DENSE_PROBS
                   : !strcmp(v, "logprobs") ? KLJIT_TEACHER_DENSE_LOGPROBS
                   : !strcmp(v, "logits")   ? KLJIT_TEACHER_DENSE_LOGITS
                                            : (kljit_teacher_form)0;
      if (!o->teacher) {
        fprintf(stderr, "kljit: --teacher %s: want probs, logprobs or logits\n", v);
        return 1;
      }
    } else {
      fprintf(stderr, "kljit: unknown option %s\n", a);
      return 1;
    }
  }
  if (o->rows < 1 || o->repeats < 1) {
    fprintf(stderr, "kljit: --rows and --repeats must be >= 1\n");
    return 1;
  }
  return 0;
}

static kljit_problem problem_of(const opts *o) {
  kljit_problem pb = KLJIT_PROBLEM_INIT;
  pb.hidden = o->hidden, pb.vocab = o->vocab;
  pb.input_dtype = pb.weight_dtype = pb.teacher_dtype = o->dtype;
  pb.teacher = o->teacher;
  return pb;
}

static int fail(const char *what, kljit_status st) {
  fprintf(stderr, "kljit: %s: %s\n  %s\n", what, kljit_status_string(st), kljit_last_error());
  return 1;
}

/* Compiles the problem's kernels for every arch of a comma-separated list. */
static int precompile(const opts *o) {
  const kljit_problem pb = problem_of(o);
  char *list = strdup(o->arch);
  int rc = 0;
  for (char *tok = strtok(list, ","); tok && !rc; tok = strtok(NULL, ",")) {
    const int arch = atoi(strncmp(tok, "sm_", 3) == 0 ? tok + 3 : tok);
    int compiled = 0;
    const kljit_status st = kljit_precompile(&pb, arch, o->cache_dir, &compiled);
    if (st != KLJIT_SUCCESS) {
      rc = fail("precompile", st);
    } else {
      printf("sm_%d: %d module(s) compiled, %d already cached -> %s\n", arch, compiled,
             2 - compiled, o->cache_dir ? o->cache_dir : "the user kernel cache");
    }
  }
  free(list);
  return rc;
}

static int info(void) {
  printf("kljit %s (header %s)\n", kljit_version(), KLJIT_VERSION_STRING);
  int drv = 0, rt = 0, n = 0;
  cudaRuntimeGetVersion(&rt);
  printf("CUDA runtime %d.%d\n", rt / 1000, rt % 1000 / 10);
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv)
    printf("CUDA driver  %d.%d\n", drv / 1000, drv % 1000 / 10);
  else
    printf("CUDA driver  none\n");
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) {
    for (int i = 0; i < n; i++) {
      struct cudaDeviceProp p;
      cudaGetDeviceProperties(&p, i);
      printf("GPU %d        %s, sm_%d%d, %d SMs, %.1f GiB\n", i, p.name, p.major, p.minor,
             p.multiProcessorCount, p.totalGlobalMem / 1073741824.0);
    }
  } else {
    printf("GPU          none\n");
  }
  const char *vars[] = {"KLJIT_CACHE_DIR", "KLJIT_CACHE_PATH", "KLJIT_CACHE_DISABLE",
                        "XDG_CACHE_HOME"};
  for (int i = 0; i < 4; i++) {
    const char *v = getenv(vars[i]);
    printf("%-20s %s\n", vars[i], v ? v : "(unset)");
  }
  return 0;
}

static int demo_gpu(const opts *o, kljit_context *ctx) {
  const kljit_problem pb = problem_of(o);
  kljit_plan *plan;
  kljit_status st = kljit_plan_create(ctx, &pb, KLJIT_PLAN_ESTIMATE, &plan);
  if (st != KLJIT_SUCCESS) return fail("plan", st);
  fputs(kljit_plan_describe(plan), stdout);
  size_t ws = 0, es = o->dtype == KLJIT_FP32 ? 4 : 2;
  kljit_plan_workspace_size(plan, KLJIT_MODE_FUSED, o->rows, &ws);
  const size_t nx = (size_t)o->rows * o->hidden, nw = (size_t)o->vocab * o->hidden;
  const size_t nt = (size_t)o->rows * o->vocab;
  void *x, *w, *t, *dx, *dw, *wsp;
  float *loss;
  size_t free0, free1, total;
  cudaMemGetInfo(&free0, &total);
  if (cudaMalloc(&x, nx * es) || cudaMalloc(&w, nw * es) || cudaMalloc(&t, nt * es) ||
      cudaMalloc(&dx, nx * es) || cudaMalloc(&dw, nw * 4) || cudaMalloc((void **)&loss, 4) ||
      cudaMalloc(&wsp, ws)) {
    fprintf(stderr, "kljit: demo: cudaMalloc failed (%s)\n",
            cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  /* bf16 patterns; for fp32/fp16 inputs they are just random bits of the right magnitude */
  const double pv = 2.0 / (double)o->vocab;
  if (gpu_fill_bf16(x, nx * es / 2, -1, 1, 1) || gpu_fill_bf16(w, nw * es / 2, -0.05, 0.05, 2) ||
      gpu_fill_bf16(t, nt * es / 2, o->dtype == KLJIT_BF16 ? 0 : -1,
                    o->dtype == KLJIT_BF16 ? pv : 1, 3))
    return 1;
  cudaMemGetInfo(&free1, &total);
  kljit_args a = KLJIT_ARGS_INIT;
  a.rows = o->rows, a.input = x, a.weight = w, a.teacher = t, a.loss = loss;
  a.grad_input = dx, a.grad_weight = dw, a.workspace = wsp, a.workspace_size = ws;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  st = kljit_fused(plan, NULL, &a); /* warm-up */
  float best = 1e30f, sum = 0;
  for (int i = 0; i < o->repeats && st == KLJIT_SUCCESS; i++) {
    cudaEventRecord(e0, 0);
    st = kljit_fused(plan, NULL, &a);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    best = ms < best ? ms : best;
    sum += ms;
  }
  if (st != KLJIT_SUCCESS) return fail("fused", st);
  float host_loss = 0;
  cudaMemcpy(&host_loss, loss, 4, cudaMemcpyDeviceToHost);
  const double flops = 6.0 * o->rows * o->hidden * o->vocab;
  printf("fused linear + KL (batchmean), N=%lld H=%lld V=%lld: loss %.6f\n", o->rows, o->hidden,
         o->vocab, host_loss);
  printf("time: best %.3f ms, mean %.3f ms over %d runs (%.0f TFLOP/s of GEMM work)\n", best,
         sum / o->repeats, o->repeats, flops / (best * 1e-3) / 1e12);
  printf("memory: inputs+outputs %.2f GiB, workspace %.2f GiB; never a %lld x %lld logits "
         "tensor (%.2f GiB in fp32)\n",
         (double)(free0 - free1) / 1073741824.0, ws / 1073741824.0, o->rows, o->vocab,
         nt * 4.0 / 1073741824.0);
  cudaFree(x), cudaFree(w), cudaFree(t), cudaFree(dx), cudaFree(dw), cudaFree(loss), cudaFree(wsp);
  kljit_plan_destroy(plan);
  return 0;
}

static int demo(const opts *o) {
  kljit_context *ctx = NULL;
  const kljit_status st = kljit_context_create(&ctx, 0, NULL);
  if (st == KLJIT_SUCCESS) {
    const int rc = demo_gpu(o, ctx);
    kljit_context_destroy(ctx);
    return rc;
  }
  if (st != KLJIT_ERR_NO_DEVICE) return fail("context", st);
  printf("no GPU here (%s)\nso no loss is computed; compiling the problem's kernels with NVRTC "
         "instead:\n", kljit_last_error());
  const kljit_problem pb = problem_of(o);
  kljit_status chk = kljit_plan_check(&pb);
  if (chk != KLJIT_SUCCESS) return fail("plan_check", chk);
  printf("problem N=%lld H=%lld V=%lld is valid and supported\n", o->rows, o->hidden, o->vocab);
  return precompile(o);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  opts o;
  if (parse(argc, argv, &o)) return EXIT_USAGE;
  if (!strcmp(cmd, "version")) {
    printf("%s\n", kljit_version());
    return 0;
  }
  if (!strcmp(cmd, "info")) return info();
  if (!strcmp(cmd, "demo")) return demo(&o);
  if (!strcmp(cmd, "precompile")) return precompile(&o);
  fprintf(stderr, "kljit: unknown command '%s'\n", cmd);
  usage(stderr);
  return EXIT_USAGE;
}

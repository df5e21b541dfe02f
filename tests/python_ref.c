/* SPDX-License-Identifier: Apache-2.0 */
/* python_ref.c — runs the fp64 C reference (tests/ref.c) on a problem written by Python, so
 * python/tests/test_reference.py can check the PyTorch references of python/kljit/reference.py
 * against the oracle every GPU test uses.
 *
 * Usage: python_ref IN OUT. IN (native byte order, no padding between items):
 *   kljit_problem (its bytes, as ctypes lays them out: the layout test checks they agree),
 *   int64 rows, int32 has_bias, has_labels, has_grad_output, has_row_weights,
 *   double temperature,
 *   double x[N*H], w[V*H], b[V] (has_bias), int64 labels[N] (has_labels),
 *   dense: double teacher[N*V]; sparse: int64 ids[N*K], double vals[N*K],
 *   double grad_output[1, or N for REDUCTION_NONE] (has_grad_output),
 *   double row_weights[N] (has_row_weights).
 * OUT: double loss, int64 rows_kept, double row_loss[N], dx[N*H], dw[V*H], db[V] (has_bias),
 *   double loss_soft, loss_hard.
 * Exit 0 on success, 1 when the file is malformed or ref_compute refuses (message on stderr).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kljit.h"
#include "ref.h"

static int read_all(FILE *f, void *dst, size_t count, size_t size, const char *what) {
  if (count && fread(dst, size, count, f) != count) {
    fprintf(stderr, "python_ref: short read of %s\n", what);
    return 1;
  }
  return 0;
}

/* A zeroed array of count elements (at least one, so that a NULL means out of memory). */
static void *alloc(size_t count, size_t size) {
  return calloc(count ? count : 1, size);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: python_ref IN OUT\n");
    return 1;
  }
  FILE *in = fopen(argv[1], "rb");
  if (!in) {
    perror(argv[1]);
    return 1;
  }
  kljit_problem pb;
  int64_t rows = 0;
  int32_t has[4] = {0, 0, 0, 0};
  double temperature = 1.0;
  int rc = read_all(in, &pb, 1, sizeof pb, "kljit_problem") ||
           read_all(in, &rows, 1, sizeof rows, "rows") || read_all(in, has, 4, 4, "flags") ||
           read_all(in, &temperature, 1, sizeof temperature, "temperature");
  if (rc || rows < 1 || pb.hidden < 1 || pb.vocab < 1 || pb.topk < 0) {
    fprintf(stderr, "python_ref: bad header\n");
    fclose(in);
    return 1;
  }
  const size_t N = (size_t)rows, H = (size_t)pb.hidden, V = (size_t)pb.vocab;
  const int sparse = pb.teacher == KLJIT_TEACHER_SPARSE_TOPK;
  const size_t K = sparse ? (size_t)pb.topk : 0;
  const size_t ngo = pb.reduction == KLJIT_REDUCTION_NONE ? N : 1;
  double *x = alloc(N * H, 8), *w = alloc(V * H, 8), *b = has[0] ? alloc(V, 8) : NULL;
  int64_t *labels = has[1] ? alloc(N, 8) : NULL;
  double *teacher = sparse ? NULL : alloc(N * V, 8);
  int64_t *ids = sparse ? alloc(N * K, 8) : NULL;
  double *vals = sparse ? alloc(N * K, 8) : NULL;
  double *go = has[2] ? alloc(ngo, 8) : NULL;
  double *rw = has[3] ? alloc(N, 8) : NULL;
  rc = read_all(in, x, N * H, 8, "x") || read_all(in, w, V * H, 8, "w") ||
       (b && read_all(in, b, V, 8, "b")) || (labels && read_all(in, labels, N, 8, "labels")) ||
       (teacher && read_all(in, teacher, N * V, 8, "teacher")) ||
       (ids && read_all(in, ids, N * K, 8, "ids")) ||
       (vals && read_all(in, vals, N * K, 8, "vals")) ||
       (go && read_all(in, go, ngo, 8, "grad_output")) ||
       (rw && read_all(in, rw, N, 8, "row_weights"));
  fclose(in);

  ref_inputs ri;
  memset(&ri, 0, sizeof ri);
  ri.pb = &pb, ri.rows = rows, ri.x = x, ri.w = w, ri.b = b, ri.labels = labels;
  ri.teacher = teacher, ri.ids = ids, ri.vals = vals, ri.temperature = temperature;
  ri.grad_output = go, ri.row_weights = rw;
  ref_outputs ro;
  memset(&ro, 0, sizeof ro);
  ro.row_loss = alloc(N, 8), ro.dx = alloc(N * H, 8), ro.dw = alloc(V * H, 8);
  ro.db = b ? alloc(V, 8) : NULL;
  if (!rc) rc = ref_compute(&ri, &ro);
  if (!rc) {
    FILE *out = fopen(argv[2], "wb");
    if (!out) {
      perror(argv[2]);
      rc = 1;
    } else {
      fwrite(&ro.loss, 8, 1, out);
      fwrite(&ro.rows_kept, 8, 1, out);
      fwrite(ro.row_loss, 8, N, out);
      fwrite(ro.dx, 8, N * H, out);
      fwrite(ro.dw, 8, V * H, out);
      if (ro.db) fwrite(ro.db, 8, V, out);
      fwrite(&ro.loss_soft, 8, 1, out);
      fwrite(&ro.loss_hard, 8, 1, out);
      rc = fclose(out) != 0;
    }
  }
  free(x), free(w), free(b), free(labels), free(teacher), free(ids), free(vals), free(go), free(rw);
  free(ro.row_loss), free(ro.dx), free(ro.dw), free(ro.db);
  return rc;
}

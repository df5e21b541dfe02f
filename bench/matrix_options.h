/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_options.h — kljit-bench's command line: the options, their defaults and checks, and
 * the list of experiments (method x sequence length x chunk size) they span. Needs no GPU. */
#ifndef KLJIT_MATRIX_OPTIONS_H
#define KLJIT_MATRIX_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kljit.h"

/* The methods, in the order the matrix runs them for each sequence length (the unfused
 * baseline first, so the others can be compared with its loss as they finish). */
typedef enum mx_method {
  MX_DENSE_UNFUSED = 0,   /* full N x V logits, cuBLAS + simple kernels */
  MX_CHUNKED_FORWARD = 1, /* forward chunked, full N x V softmax kept for backward */
  MX_KLJIT_FUSED = 2,     /* kljit_fused */
  MX_KLJIT_TWO_PHASE = 3, /* kljit_forward + kljit_backward */
  MX_METHOD_COUNT = 4
} mx_method;

typedef enum mx_teacher { MX_TEACHER_DENSE = 1, MX_TEACHER_SPARSE = 2 } mx_teacher;

/* Dtype of the logits the GEMM writes: fp32 (kljit's default), or the input dtype. */
typedef enum mx_logits { MX_LOGITS_FP32 = 1, MX_LOGITS_NATIVE = 2 } mx_logits;

/* What the command line asks for. */
typedef enum mx_action {
  MX_ACTION_RUN = 0,     /* run the matrix, each experiment in a child process */
  MX_ACTION_HELP = 1,    /* --help */
  MX_ACTION_DRY_RUN = 2, /* --dry-run: print the experiments */
  MX_ACTION_ONE = 3      /* --one (hidden): run exactly one experiment in this process */
} mx_action;

enum { MX_MAX_LIST = 64 };

/* Chunk-size values besides a row count. */
enum { MX_CHUNK_AUTO = 0, MX_CHUNK_NONE = -1 };

typedef struct mx_options {
  mx_action action;
  int64_t seq[MX_MAX_LIST]; /* --sequence-lengths */
  int n_seq;
  int64_t chunk[MX_MAX_LIST]; /* --chunk-sizes; MX_CHUNK_AUTO = the method's default */
  int n_chunk;
  unsigned methods; /* bit (1u << mx_method) per selected method */
  int tp;
  int iterations, warmup;
  int64_t batch;
  int topk;
  int64_t hidden, vocab;
  kljit_dtype dtype;
  mx_teacher teacher;
  mx_logits logits;
  const char *csv; /* NULL: no CSV file */
  double timeout_s;
  int result_fd; /* --one: where the result record goes (-1: stdout) */
} mx_options;

typedef struct mx_experiment {
  mx_method method;
  int64_t seq;
  int64_t chunk; /* rows, MX_CHUNK_AUTO, or MX_CHUNK_NONE for unchunked methods */
} mx_experiment;

/* Parses argv (defaults first). Returns 0, or 2 with a one-line reason in err. */
int mx_parse(int argc, char *const argv[], mx_options *o, char *err, size_t err_size);

/* The --help text. */
void mx_usage(FILE *f);

/* Writes up to `max` experiments to out (out may be NULL) and returns how many the options
 * span: per sequence length, one per unchunked method and one per chunk size per chunked one. */
int mx_experiments(const mx_options *o, mx_experiment *out, int max);

const char *mx_method_name(mx_method m);
int mx_method_is_chunked(mx_method m);
const char *mx_dtype_name(kljit_dtype dt);

/* "auto", "none" or the row count, into buf. */
const char *mx_chunk_text(int64_t chunk, char *buf, size_t size);

/* The arguments of the child process that runs experiment e: `exe --one --result-fd FD` and
 * every option that shapes the problem. Strings live in `store` (at least 2048 bytes);
 * argv gets at most 40 entries and a NULL. */
void mx_child_argv(const mx_options *o, const mx_experiment *e, const char *exe, int result_fd,
                   char *store, size_t store_size, char *argv[]);

/* matrix_child.c: runs the one experiment of o (MX_ACTION_ONE) in this process and writes
 * its record to o->result_fd (or stdout). Returns 0 when it is OK, 1 when FAILED. */
int mx_child_main(const mx_options *o);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* matrix_record.h — one experiment's result: written by the child as `key=value` lines ending
 * with `end`, parsed by the parent, printed as a CSV row and a markdown table row. */
#ifndef KLJIT_MATRIX_RECORD_H
#define KLJIT_MATRIX_RECORD_H

#include <stdint.h>
#include <stdio.h>

#include "matrix_options.h"

typedef struct mx_record {
  int ok;           /* status OK (1) or FAILED (0) */
  char error[1024]; /* why it FAILED; one line */
  double peak_vram_gib;
  double iteration_ms; /* median of the timed iterations */
  double floor_ms;     /* the same GEMMs alone, median */
  double loss;         /* after the first iteration */
  double dx_norm, dw_norm;
  int64_t chunk_rows; /* rows per chunk the method actually ran (N when unchunked) */
  char gpu[128], driver[32], kljit_version[32];
  /* Filled by the parent from the dense_unfused row of the same length (NaN without one). */
  double loss_rel, grad_rel;
} mx_record;

/* Status FAILED, numbers NaN, strings empty. */
void mx_record_init(mx_record *rec);

/* Writes the record as key=value lines and a final "end" line. */
void mx_record_write(const mx_record *rec, FILE *f);

/* Parses what mx_record_write wrote. 0 when the final "end" line was seen. */
int mx_record_parse(const char *text, mx_record *rec);

/* Replaces newlines, tabs and other control characters with spaces, in place. */
void mx_one_line(char *s);

/* Compares rec with the dense_unfused record `base` of the same length (may be NULL). */
void mx_record_compare(mx_record *rec, const mx_record *base);

/* The CSV header, and a row for experiment e of the run with options o. */
void mx_csv_header(FILE *f);
void mx_csv_row(FILE *f, const mx_options *o, const mx_experiment *e, const mx_record *rec);

/* The markdown table's header and a row. */
void mx_table_header(FILE *f);
void mx_table_row(FILE *f, const mx_options *o, const mx_experiment *e, const mx_record *rec);

/* Derived columns. */
double mx_tflops(const mx_options *o, const mx_experiment *e, const mx_record *rec);
double mx_ratio_to_floor(const mx_record *rec);

#endif

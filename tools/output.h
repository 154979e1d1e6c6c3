/* What `clkit bench` prints: a table per op and dtype, CSV, JSON, and a gnuplot plot. */
#ifndef CLKIT_TOOL_OUTPUT_H
#define CLKIT_TOOL_OUTPUT_H

#include <stdio.h>

#include "measure.h"

typedef enum out_format { OUT_TABLE, OUT_CSV, OUT_JSON } out_format;

/* One problem, measured by each provider of its op (op_providers). */
typedef struct out_row {
    const op_def *op;
    clkit_dtype dtype, out_dtype;
    int transposed;
    char shape[48];
    uint64_t bytes;
    double flops;         /* per call; 0: a bandwidth op, rated in GB/s, else in TFLOP/s */
    double x;             /* the plot's x value; NaN: not plotted */
    measurement m[OP_MAX_PROVIDERS];  /* reps 0: that provider was not measured */
} out_row;

/* Every row measured, so JSON and the plot can come at the end. */
typedef struct out_report {
    out_format format;
    struct clkit_device_props dev;
    out_row *rows;
    size_t count, cap;
    const char *unit;  /* of the table being printed: GB/s, TFLOP/s or GFLOP/s */
    double scale;      /* from GB/s or TFLOP/s to that unit */
} out_report;

/* Starts the report on stdout (the CSV header). */
void out_begin(out_report *r, out_format format, const struct clkit_device_props *dev);
/* A row of p with nothing measured yet. */
out_row out_row_make(const op_problem *p);
/* Keeps the row; tables and CSV print it at once, so long runs show progress. */
clkit_status out_add(out_report *r, const out_row *row);
/* Prints what needs every row: the JSON document. */
clkit_status out_end(const out_report *r);
/* GB/s or TFLOP/s against size, one panel per op, a line per dtype and provider, into a PNG
   through gnuplot; a TOOL_EXIT_ status. */
int out_plot(const out_report *r, const char *png);
/* The same from a CSV file instead of measured rows: that of `clkit bench --csv`, or one that
   bench/torch_peer.py merged, whose columns <provider>_gbps and <provider>_tflops (with _p20
   and _p80) give a line each, the peers' beside clkit's. Rows of ops other than `op` (NULL:
   all) are left out. */
int out_plot_csv(const char *csv, const char *op, const char *png);
void out_free(out_report *r);

#endif

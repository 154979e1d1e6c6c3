/* The ops that `clkit check` verifies and `clkit bench` times, in one table: how one problem
   (an op on a dtype and a shape) lies in device buffers, the call, the CPU reference, the
   shapes each command runs and the bytes a call moves. */
#ifndef CLKIT_TOOL_OPS_H
#define CLKIT_TOOL_OPS_H

#include "clkit.h"

#define OP_DT(t) (1u << (t))
#define OP_MAX_SHAPES 128

typedef struct op_shape {
    int64_t rows, cols;  /* 1-D ops: rows = 1, cols = n; else (M, N), (H, W), ... */
    int transposed;      /* copy: the source is a transposed view of a (cols, rows) matrix */
    int target;          /* a shape of TARGETS.md: bench measures its first calls too */
} op_shape;

typedef struct op_def op_def;

/* One problem and its buffers: inputs first, then the output (t[op->nin]). */
typedef struct op_problem {
    const op_def *op;
    clkit_dtype dtype;
    op_shape shape;
    cl_mem buf[3];
    clkit_tensor t[3];
} op_problem;

struct op_def {
    const char *name;       /* as --op spells it */
    int nin;                /* inputs */
    int planes;             /* each input holds planes x rows x cols elements (rgb: 3) */
    int ndim;               /* 1: the tensors are (cols) unless transposed; 2: (rows, cols) */
    unsigned dtypes;        /* OP_DT bits: the dtypes checked and, when asked for, benched */
    double lo, hi;          /* input values of float dtypes (u8: all of 0..255) */
    double atol;            /* absolute tolerance besides ref_rtol(dtype) */
    const char *x_label;    /* what a plot's x axis counts */
    int x_is_cols;          /* 1: plot against cols (softmax N); 0: against rows x cols */
    const op_shape *checks; /* shapes `clkit check` runs; ends with a zero shape */
    /* Shapes `clkit bench` runs (quick: a few small ones) into out; NULL: not benched. */
    int (*bench_shapes)(int quick, op_shape *out);
    clkit_status (*call)(clkit_context *ctx, const op_problem *p);
    /* The output in double from the inputs, before rounding to the dtype. */
    void (*reference)(const op_problem *p, const double *const *in, double *want);
};

extern const op_def op_table[];
extern const int op_count;

const op_def *op_find(const char *name);
op_problem op_problem_make(const op_def *op, clkit_dtype dtype, op_shape shape);
int64_t op_numel(const op_problem *p, int slot);
/* Bytes one call moves: every input read once and the output written once. */
uint64_t op_bytes(const op_problem *p);
/* "4096", "4096x1024", "1024x1024.T" (a transposed source): the key CSV files join on. */
void op_shape_text(const op_problem *p, char *buf, size_t n);
/* The plot's x value of the problem. */
double op_plot_x(const op_problem *p);

/* Device buffers filled on the device with a fixed pattern: for timing, where values
   do not matter and uploads of gigabytes would. */
clkit_status op_alloc(clkit_context *ctx, op_problem *p);
void op_free(op_problem *p);
clkit_status op_call(clkit_context *ctx, const op_problem *p);

/* Runs the problem on random inputs and compares with the reference: *max_err is the largest
   |got - want|, *pass whether every element is within tolerance. */
clkit_status op_verify(clkit_context *ctx, op_problem *p, double *max_err, int *pass);

/* The detail of the last failure here: the clkit_last_error of a failed call, or the OpenCL
   call and code of a failed direct one. */
const char *op_error(void);
/* Records a failure of the tool's own and returns s. */
clkit_status op_fail(clkit_status s, const char *what);
/* Records a failed OpenCL call and returns the status it maps to. */
clkit_status op_cl_fail(cl_int err, const char *what);
/* Passes s through, recording clkit_last_error(ctx) when s is a failure. */
clkit_status op_status(clkit_context *ctx, clkit_status s);

#endif

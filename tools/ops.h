/* The ops that `clkit check` verifies and `clkit bench` times, in one table: how one problem
   (an op on a dtype and a shape) lies in device buffers, the call, the CPU reference, the
   shapes each command runs and the bytes a call moves. */
#ifndef CLKIT_TOOL_OPS_H
#define CLKIT_TOOL_OPS_H

#include "clkit.h"

#define OP_DT(t) (1u << (t))
#define OP_MAX_SHAPES 128
#define OP_MAX_PROVIDERS 4
#define OP_MAX_SLOTS 9  /* tensors of one call: inputs, the output, extras (attention_backward:
                           q, k, v, o, dout; dq; lse, dk, dv) */

/* op_shape.flags */
enum {
    OP_ACCUMULATE = 1,  /* out = act(alpha op + beta out): the output's old values are read
                           (matmul: alpha 1.5, beta -0.5, relu) */
    OP_OUT_IN = 2,      /* the output in the inputs' dtype, not the op's f32 (matmul) */
    OP_CAUSAL = 4,      /* attention: query i sees keys j <= i */
    OP_CAUSAL_BR = 8,   /* attention: query i sees keys j <= i + Lk - Lq (bottom-right) */
};

typedef struct op_shape {
    int64_t rows, cols;  /* 1-D ops: rows = 1, cols = n; else (M, N), (H, W), ...; attention:
                            L (queries and keys alike) and the head dim D */
    int transposed;      /* bit k: input k is stored transposed (copy: its source; matmul:
                            A as (K, M), B as (N, K)) */
    int target;          /* a shape of bench/TARGETS.md: bench measures its first calls too */
    int64_t depth;       /* matmul: K; attention: the heads H */
    int64_t batch;       /* matmul: the batch count, 0 or 1: no batch dimension; attention: B */
    int shared;          /* bit k: input k has no batch dimension, broadcast over the batch */
    int flags;           /* OP_ACCUMULATE, OP_OUT_IN, OP_CAUSAL, OP_CAUSAL_BR */
    int64_t kv_heads;    /* attention: the kv heads (grouped-query), 0: as many as H */
    int64_t queries;     /* attention: Lq, with L then the keys' Lk; 0: L */
    unsigned dtypes;     /* check: the op's dtypes this shape runs in (OP_DT bits); 0: all */
} op_shape;

typedef struct op_def op_def;

/* One problem and its buffers: inputs first, then the output (t[op->nin]), then the op's
   extra tensors (t[op->nin + 1] ...). */
typedef struct op_problem {
    const op_def *op;
    clkit_dtype dtype;      /* of the inputs */
    clkit_dtype out_dtype;  /* of the output */
    clkit_provider provider;  /* whose kernels the call asks for (matmul) */
    int allow_tf32;           /* matmul: f32 inputs may take the TF32 tensor cores */
    int exact_f32;            /* matmul: f32 inputs stay off the tensor cores (no 3xTF32) */
    op_shape shape;
    cl_mem buf[OP_MAX_SLOTS];
    clkit_tensor t[OP_MAX_SLOTS];
} op_problem;

/* One column of `clkit bench`: a way to run the op. */
typedef struct op_provider {
    const char *name;      /* "clkit", "heuristic", "clblast" */
    clkit_provider api;    /* what the call asks the library for */
    int fresh_cache;       /* runs in a context over an empty cache directory: no tuned entry
                              is found, so the call takes the heuristic default */
    int wall_clock;        /* timed by wall clock over back-to-back calls: its profiling
                              events cover only part of the work (CLBlast's cover its last
                              kernel) */
    int peer;              /* a failure leaves the column empty instead of failing the row */
    unsigned dtypes;       /* input dtypes it runs (OP_DT bits); 0: all */
} op_provider;

struct op_def {
    const char *name;       /* as --op spells it */
    const char *family;     /* --op FAMILY selects every op of it (layernorm: the forward and
                               layernorm_backward); NULL: none */
    int nin;                /* inputs */
    int nextra;             /* tensors the call takes after its output, which check does not
                               compare: written besides the output (mean, rstd, gradients) or
                               filled by prepare for the call to read */
    int planes;             /* each input holds planes x rows x cols elements (rgb: 3) */
    int ndim;               /* 1: the tensors are (cols) unless transposed; 2: (rows, cols);
                               3: rows x cols x depth [x batch], the dims of a matmul
                               (linear_cross_entropy: T x D x V); 4: B x H x L x D
                               (attention) */
    unsigned dtypes;        /* OP_DT bits: the dtypes checked and, when asked for, benched */
    int out_f32;            /* the output is f32 whatever the inputs (unless OP_OUT_IN) */
    int show_scratch;       /* bench tables show the scratch column (clkit_scratch_peak) */
    double lo, hi;          /* input values of float dtypes (u8: all of 0..255) */
    double atol;            /* absolute tolerance besides ref_rtol(dtype) */
    const char *x_label;    /* what a plot's x axis counts */
    int x_is_cols;          /* 1: plot against cols (softmax N); 0: against rows x cols */
    const op_shape *checks; /* shapes `clkit check` runs; ends with a zero shape */
    /* Shapes `clkit bench` runs (quick: a few small ones) into out; NULL: not benched. */
    int (*bench_shapes)(int quick, op_shape *out);
    /* The columns of `clkit bench`, the first one clkit's normal call; NULL: that one alone. */
    const op_provider *providers;
    int nproviders;
    clkit_status (*call)(clkit_context *ctx, const op_problem *p);
    /* The output in double from the inputs, before rounding to the dtype. want holds the
       output's old values when the op reads them (OP_ACCUMULATE). tol holds op->atol per
       element; an op with an error model of its own (matmul) adds to it. */
    void (*reference)(const op_problem *p, const double *const *in, double *want, double *tol);
    /* Dims of slot k: a leading count (planes, batch; 0: none), rows (0: a 1-D tensor) and
       cols. NULL: the elementwise ops' rule from planes, ndim and transposed. */
    void (*dims)(const op_problem *p, int slot, int64_t d[3]);
    /* The dtype of slot k; NULL: inputs in p->dtype, the output in p->out_dtype. */
    clkit_dtype (*slot_dtype)(const op_problem *p, int slot);
    /* The range of input slot k's random values where it is not [lo, hi) (targets: [0, V)).
       Inputs of an index dtype (i32, i64) get random values in bench too: a fill pattern
       would point out of bounds. NULL: [lo, hi) for all. */
    void (*range)(const op_problem *p, int slot, double *lo, double *hi);
    /* Runs once the inputs hold their values, before any call: fills the extras the call reads
       (layernorm_backward: mean and rstd, by a forward). NULL: nothing to fill. */
    clkit_status (*prepare)(clkit_context *ctx, const op_problem *p);
    /* Bytes one call moves as the op's tutorial counts them; NULL: every tensor of the call
       once. */
    uint64_t (*bytes)(const op_problem *p);
    /* Floating-point operations of one call; NULL: a bandwidth op, rated in GB/s. */
    double (*flops)(const op_problem *p);
    /* The plot's x value; NaN keeps the row off the plot. NULL: from x_is_cols. */
    double (*plot_x)(const op_problem *p);
    /* `clkit tune`: tunes the problem's shape and stores the winner; NULL: not tunable. */
    clkit_status (*tune)(clkit_context *ctx, const op_problem *p, const clkit_tune_options *t);
    /* The shapes of `clkit tune --standard`. */
    int (*tune_shapes)(op_shape *out);
};

extern const op_def op_table[];
extern const int op_count;

const op_def *op_find(const char *name);
/* Whether --op NAME selects op: its name or its family's. */
int op_selected(const op_def *op, const char *name);
/* The number of slots of p's op: inputs, the output, extras. */
int op_slots(const op_problem *p);
/* The problem of op on shape with inputs of dtype; the output dtype follows op->out_f32
   and OP_OUT_IN, the provider is AUTO. */
op_problem op_problem_make(const op_def *op, clkit_dtype dtype, op_shape shape);
int64_t op_numel(const op_problem *p, int slot);
clkit_dtype op_slot_dtype(const op_problem *p, int slot);
uint64_t op_slot_bytes(const op_problem *p, int slot);
/* Bytes one call moves: op->bytes, else every input read once and the output and extras
   written once. */
uint64_t op_bytes(const op_problem *p);
/* The op's bench columns (at least one) into *n. */
const op_provider *op_providers(const op_def *op, int *n);
/* "4096", "4096x1024", "1024x1024.T" (a transposed source), "512x512x512x16.nt.bshared"
   (matmul M x N x K x batch, layout, B broadcast), "32x4x1024x128.causal" (attention
   B x H x L x D): the key CSV files join on. */
void op_shape_text(const op_problem *p, char *buf, size_t n);
/* "f32", or "f16>f32" when the output's dtype differs from the inputs'. */
void op_dtype_text(const op_problem *p, char *buf, size_t n);
/* The largest dim a shape takes, and the largest product of its dims: element counts and
   byte sizes stay exact in int64_t and double. */
#define OP_MAX_DIM 2147483647LL
#define OP_MAX_PRODUCT (1LL << 53)
/* Reads a shape as op_shape_text writes it; 0 on success, -1 when malformed, -2 when the
   product of its dims exceeds OP_MAX_PRODUCT. */
int op_shape_parse(const op_def *op, const char *text, op_shape *out);
/* Appends the comma-separated shapes of list to out[*n] (up to OP_MAX_SHAPES in all); 0 on
   success, else -1 with why the first bad one is bad in why. */
int op_shape_list(const op_def *op, const char *list, op_shape *out, int *n, char *why,
                  size_t why_n);
/* The plot's x value of the problem; NaN: not plotted. */
double op_plot_x(const op_problem *p);
/* Why the problem cannot run on dev, or NULL: every buffer (extras too) within max_alloc, all
   of them and `scratch` bytes more within most of global memory. */
const char *op_too_big(const struct clkit_device_props *dev, const op_problem *p,
                       uint64_t scratch);

/* Device buffers filled on the device with a fixed pattern: for timing, where values
   do not matter and uploads of gigabytes would; random values for index inputs; then
   op->prepare. */
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

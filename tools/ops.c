/* The op table shared by `clkit check` and `clkit bench`. */
#include "ops.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "tool.h"

#define FLOATS (OP_DT(CLKIT_F32) | OP_DT(CLKIT_F16) | OP_DT(CLKIT_BF16))

/* The tutorial's dropout: p = 0.5; any fixed seed makes runs comparable. */
static const float dropout_p = 0.5f;
static const uint64_t dropout_seed = 0x5eed;
/* Not a divisor of the check shapes' rows, so the last group is a partial one. */
static const int swizzle_group = 3;
/* The layer norm tutorial's eps. */
static const float layernorm_eps = 1e-5f;
/* Error scales of f32 arithmetic relative to the sums of magnitudes behind a result, and of
   the row mean relative to the row's largest |x|, as tests/test_layernorm.c bounds them. */
#define LN_F32_ARITH 2e-5
#define LN_F32_MEAN 2e-6
/* The error scale of f32 attention relative to the largest output, as
   tests/test_attention.c bounds it. */
#define ATTN_F32_ARITH 3e-5

/* ---- errors ---- */

static char last_error[8192];

const char *op_error(void)
{
    return last_error;
}

clkit_status op_fail(clkit_status s, const char *what)
{
    snprintf(last_error, sizeof last_error, "%s: %s", clkit_status_string(s), what);
    return s;
}

clkit_status op_cl_fail(cl_int err, const char *what)
{
    int oom = err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
              err == CL_OUT_OF_HOST_MEMORY || err == CL_INVALID_BUFFER_SIZE;
    char msg[256];
    snprintf(msg, sizeof msg, "%s failed with OpenCL error %d", what, err);
    return op_fail(oom ? CLKIT_ERR_OUT_OF_MEMORY : CLKIT_ERR_OPENCL, msg);
}

clkit_status op_status(clkit_context *ctx, clkit_status s)
{
    if (s) snprintf(last_error, sizeof last_error, "%s", clkit_last_error(ctx));
    return s;
}

/* ---- calls and references, one pair per op ---- */

static clkit_status call_add(clkit_context *ctx, const op_problem *p)
{
    return clkit_add(ctx, &p->t[0], &p->t[1], &p->t[2]);
}

static void want_add(const op_problem *p, const double *const *in, double *want,
                     double *tol)
{
    (void)tol;
    for (int64_t i = 0; i < op_numel(p, 2); i++) want[i] = in[0][i] + in[1][i];
}

static clkit_status call_softmax(clkit_context *ctx, const op_problem *p)
{
    return clkit_softmax(ctx, &p->t[0], &p->t[1]);
}

static void want_softmax(const op_problem *p, const double *const *in, double *want,
                         double *tol)
{
    (void)tol;
    ref_softmax(in[0], want, p->shape.rows, p->shape.cols);
}

static clkit_status call_dropout(clkit_context *ctx, const op_problem *p)
{
    return clkit_dropout(ctx, &p->t[0], &p->t[1], dropout_p, dropout_seed);
}

static void want_dropout(const op_problem *p, const double *const *in, double *want,
                         double *tol)
{
    (void)tol;
    for (int64_t i = 0; i < op_numel(p, 1); i++)
        want[i] = ref_dropout_one(in[0][i], (uint64_t)i, dropout_p, dropout_seed);
}

static clkit_status call_copy(clkit_context *ctx, const op_problem *p)
{
    return clkit_copy(ctx, &p->t[0], &p->t[1]);
}

static void want_copy(const op_problem *p, const double *const *in, double *want,
                      double *tol)
{
    (void)tol;
    int64_t rows = p->shape.rows, cols = p->shape.cols;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            want[i * cols + j] = p->shape.transposed ? in[0][j * rows + i] : in[0][i * cols + j];
}

static clkit_status call_gray(clkit_context *ctx, const op_problem *p)
{
    return clkit_rgb_to_gray(ctx, &p->t[0], &p->t[1]);
}

static void want_gray(const op_problem *p, const double *const *in, double *want,
                      double *tol)
{
    (void)tol;
    ref_rgb_to_gray(in[0], want, p->shape.rows, p->shape.cols);
}

static clkit_status call_swizzle(clkit_context *ctx, const op_problem *p)
{
    return clkit_swizzle2d(ctx, &p->t[0], &p->t[1], swizzle_group);
}

static void want_swizzle(const op_problem *p, const double *const *in, double *want,
                         double *tol)
{
    (void)tol;
    int64_t rows = p->shape.rows, cols = p->shape.cols;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            int64_t ni, nj;
            ref_swizzle2d_index(i, j, rows, cols, swizzle_group, &ni, &nj);
            want[ni * cols + nj] = in[0][i * cols + j];
        }
}

/* matmul: C = act(alpha A @ B + beta C); OP_ACCUMULATE exercises every term of it. */
static clkit_matmul_options matmul_options(const op_problem *p)
{
    clkit_matmul_options o = clkit_matmul_defaults();
    o.provider = p->provider;
    o.allow_tf32 = p->allow_tf32;
    o.exact_f32 = p->exact_f32;
    if (p->shape.flags & OP_ACCUMULATE) {
        o.alpha = 1.5f;
        o.beta = -0.5f;
        o.activation = CLKIT_ACT_RELU;
    }
    return o;
}

static clkit_status call_matmul(clkit_context *ctx, const op_problem *p)
{
    clkit_matmul_options o = matmul_options(p);
    return clkit_matmul(ctx, &p->t[0], &p->t[1], &p->t[2], &o);
}

static clkit_status tune_matmul(clkit_context *ctx, const op_problem *p,
                                const clkit_tune_options *t)
{
    clkit_matmul_options o = matmul_options(p);
    return clkit_tune_matmul(ctx, &p->t[0], &p->t[1], &p->t[2], &o, t);
}

/* A (M, K), B (K, N), C (M, N), each with a batch dimension unless broadcast. */
static void dims_matmul(const op_problem *p, int slot, int64_t d[3])
{
    const op_shape *s = &p->shape;
    int shared = slot < p->op->nin && (s->shared >> slot & 1);
    d[0] = s->batch > 1 && !shared ? s->batch : 0;
    d[1] = slot == 1 ? s->depth : s->rows;
    d[2] = slot == 0 ? s->depth : s->cols;
}

static int64_t matmul_batch(const op_problem *p)
{
    return p->shape.batch > 1 ? p->shape.batch : 1;
}

static void slot_layout(const op_problem *p, int k, int64_t d[3], int64_t strides[3]);

/* The error bound of tests/test_matmul.c: f32 accumulation over K terms of a sum whose
   magnitude ref_matmul reports (inputs are exact in f32, products of f16 and bf16 too). */
static void want_matmul(const op_problem *p, const double *const *in, double *want,
                        double *tol)
{
    const op_shape *s = &p->shape;
    clkit_matmul_options o = matmul_options(p);
    ref_matrix m[3];
    int64_t d[3], n = matmul_batch(p) * s->rows * s->cols;
    for (int k = 0; k < 3; k++) {
        m[k].v = k < 2 ? (double *)in[k] : want;
        slot_layout(p, k, d, m[k].s);
    }
    /* ref_matmul writes the magnitude over tol, which holds op->atol. */
    double atol = p->op->atol;
    ref_matmul(&m[0], &m[1], &m[2], matmul_batch(p), s->rows, s->cols, s->depth, o.alpha,
               o.beta, (int)o.activation, o.leaky_slope, tol);
    for (int64_t i = 0; i < n; i++) tol[i] = atol + 4.0 * (double)(s->depth + 2) * 0x1p-23 * tol[i];
}

static double flops_matmul(const op_problem *p)
{
    const op_shape *s = &p->shape;
    return 2.0 * (double)s->rows * (double)s->cols * (double)s->depth * (double)matmul_batch(p);
}

/* The tutorial's plot: M = N = K; other rows stay off it. */
static double plot_x_matmul(const op_problem *p)
{
    const op_shape *s = &p->shape;
    int cube = s->rows == s->cols && s->cols == s->depth && matmul_batch(p) == 1;
    return cube ? (double)s->rows : NAN;
}

/* Layer norm. Each slot of the two ops holds an (M, N) matrix, an (N) vector of the affine
   part or its gradient, or an (M) f32 column of row statistics. */
enum { LN_MATRIX, LN_VECTOR, LN_STAT };
static const char ln_forward_slots[] = {LN_MATRIX, LN_VECTOR, LN_VECTOR,  /* x, weight, bias */
                                        LN_MATRIX,                        /* y */
                                        LN_STAT, LN_STAT};                /* mean, rstd */
static const char ln_backward_slots[] = {LN_MATRIX, LN_MATRIX, LN_VECTOR, /* dy, x, weight */
                                         LN_MATRIX,                       /* dx */
                                         LN_STAT, LN_STAT,                /* mean, rstd */
                                         LN_VECTOR, LN_VECTOR};           /* dweight, dbias */

static clkit_status call_layernorm_forward(clkit_context *ctx, const op_problem *p)
{
    const clkit_tensor *t = p->t;
    return clkit_layernorm_forward(ctx, &t[0], &t[1], &t[2], layernorm_eps, &t[3], &t[4], &t[5]);
}

static clkit_status call_layernorm_backward(clkit_context *ctx, const op_problem *p)
{
    const clkit_tensor *t = p->t;
    return clkit_layernorm_backward(ctx, &t[0], &t[1], &t[2], &t[4], &t[5], &t[3], &t[6], &t[7]);
}

/* The backward's mean and rstd, from a forward of its x; y goes to dx, which the backward
   then overwrites (bias does not change the statistics). */
static clkit_status prepare_layernorm_backward(clkit_context *ctx, const op_problem *p)
{
    const clkit_tensor *t = p->t;
    return clkit_layernorm_forward(ctx, &t[1], &t[2], NULL, layernorm_eps, &t[3], &t[4], &t[5]);
}

static int ln_slot(const op_problem *p, int slot)
{
    return p->op->call == call_layernorm_backward ? ln_backward_slots[slot]
                                                  : ln_forward_slots[slot];
}

static void dims_layernorm(const op_problem *p, int slot, int64_t d[3])
{
    int kind = ln_slot(p, slot);
    d[0] = 0;
    d[1] = kind == LN_MATRIX ? p->shape.rows : 0;
    d[2] = kind == LN_STAT ? p->shape.rows : p->shape.cols;
}

static clkit_dtype dtype_layernorm(const op_problem *p, int slot)
{
    return ln_slot(p, slot) == LN_STAT ? CLKIT_F32 : p->dtype;
}

/* The tutorial's GB/s count the (M, N) tensors alone: x and y, or dy, x and dx. */
static uint64_t bytes_layernorm(const op_problem *p)
{
    uint64_t n = 0;
    for (int k = 0; k < op_slots(p); k++)
        if (ln_slot(p, k) == LN_MATRIX) n += op_slot_bytes(p, k);
    return n;
}

/* Row by row, so that each row's statistics are at hand for its tolerance: one rounding to
   the dtype (compare adds it), f32 arithmetic on the normalised value and the affine part,
   and the mean's error scaled by rstd. */
static void want_layernorm_forward(const op_problem *p, const double *const *in, double *want,
                                   double *tol)
{
    int64_t n = p->shape.cols;
    const double *w = in[1], *b = in[2];
    for (int64_t r = 0; r < p->shape.rows; r++) {
        const double *x = in[0] + r * n;
        double mean, rstd, top = 0;
        ref_layernorm_forward(x, w, b, layernorm_eps, 1, n, want + r * n, &mean, &rstd);
        for (int64_t i = 0; i < n; i++) top = fmax(top, fabs(x[i]));
        for (int64_t i = 0; i < n; i++) {
            double xhat = (x[i] - mean) * rstd;
            tol[r * n + i] += LN_F32_ARITH * (fabs(xhat * w[i]) + fabs(b[i]) + 1e-3) +
                              LN_F32_MEAN * top * rstd * fabs(w[i]);
        }
    }
}

/* dx from the reference's statistics rounded to f32, where the device's come from its own
   forward: those differ by the forward's f32 error, which moves each of the three terms of dx
   by up to that much again, so the bound of tests/test_layernorm.c is taken four times. */
static void want_layernorm_backward(const op_problem *p, const double *const *in, double *want,
                                    double *tol)
{
    int64_t n = p->shape.cols;
    for (int64_t r = 0; r < p->shape.rows; r++) {
        const double *dy = in[0] + r * n, *x = in[1] + r * n;
        double mean, rstd;
        ref_layernorm_forward(x, NULL, NULL, layernorm_eps, 1, n, NULL, &mean, &rstd);
        mean = ref_quantize(CLKIT_F32, mean);
        rstd = ref_quantize(CLKIT_F32, rstd);
        /* The magnitudes land over tol, which holds op->atol. */
        double atol = p->op->atol;
        ref_layernorm_backward(dy, x, in[2], &mean, &rstd, 1, n, want + r * n, NULL, NULL,
                               tol + r * n, NULL, NULL);
        for (int64_t i = 0; i < n; i++) tol[r * n + i] = atol + 4 * LN_F32_ARITH * tol[r * n + i];
    }
}

/* Linear cross-entropy: x (T, D), weight (V, D), targets (T) i32, the mean loss (1) f32, and
   the gradients dx and dweight; no bias. The shape is T x D x V: rows, cols, depth. */
enum { LCE_X, LCE_WEIGHT, LCE_TARGETS, LCE_LOSS, LCE_DX, LCE_DWEIGHT };

static clkit_status call_lce(clkit_context *ctx, const op_problem *p)
{
    const clkit_tensor *t = p->t;
    clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
    return clkit_linear_cross_entropy(ctx, &t[LCE_X], &t[LCE_WEIGHT], NULL, &t[LCE_TARGETS], &o,
                                      &t[LCE_LOSS], &t[LCE_DX], &t[LCE_DWEIGHT], NULL);
}

static void dims_lce(const op_problem *p, int slot, int64_t d[3])
{
    const op_shape *s = &p->shape;
    int x = slot == LCE_X || slot == LCE_DX, w = slot == LCE_WEIGHT || slot == LCE_DWEIGHT;
    d[0] = 0;
    d[1] = x ? s->rows : w ? s->depth : 0;
    d[2] = x || w ? s->cols : slot == LCE_TARGETS ? s->rows : 1;
}

static clkit_dtype dtype_lce(const op_problem *p, int slot)
{
    return slot == LCE_TARGETS ? CLKIT_I32 : slot == LCE_LOSS ? p->out_dtype : p->dtype;
}

static void range_lce(const op_problem *p, int slot, double *lo, double *hi)
{
    *lo = slot == LCE_TARGETS ? 0 : p->op->lo;
    *hi = slot == LCE_TARGETS ? (double)p->shape.depth : p->op->hi;
}

/* The mean over tokens of each token's loss (reduction sum over one token), so that the
   targets need no int64 copy. */
static void want_lce(const op_problem *p, const double *const *in, double *want, double *tol)
{
    (void)tol;
    const op_shape *s = &p->shape;
    clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
    o.reduction = CLKIT_REDUCTION_SUM;
    double sum = 0;
    for (int64_t r = 0; r < s->rows; r++) {
        int64_t target = (int64_t)in[LCE_TARGETS][r];
        double loss;
        ref_linear_cross_entropy(in[LCE_X] + r * s->cols, in[LCE_WEIGHT], NULL, &target, 1,
                                 s->depth, s->cols, &o, &loss, NULL, NULL);
        sum += loss;
    }
    want[0] = sum / (double)s->rows;
}

/* bench/TARGETS.md: 2 T D V forward, three times that with the backward. */
static double flops_lce(const op_problem *p)
{
    const op_shape *s = &p->shape;
    return 6.0 * (double)s->rows * (double)s->cols * (double)s->depth;
}

/* Attention: q, o and their gradients are (B, H, Lq, D), k, v and theirs (B, Hkv, Lk, D),
   stored as (B H, L, D); lse is (B, H, Lq) f32, stored as (B H, Lq). L is Lq and Lk alike and
   Hkv is H unless the shape says otherwise (.qM, .kvN: decoding, grouped-query heads). The
   forward's slots, then the backward's after the same q, k, v and o. */
enum { ATT_Q, ATT_K, ATT_V, ATT_O, ATT_LSE };
enum { ATB_DOUT = ATT_O + 1, ATB_DQ, ATB_LSE, ATB_DK, ATB_DV };

static clkit_attention_options attention_options(const op_problem *p)
{
    clkit_attention_options o = clkit_attention_defaults();
    o.causal = p->shape.flags & OP_CAUSAL_BR ? CLKIT_CAUSAL_BOTTOM_RIGHT
               : p->shape.flags & OP_CAUSAL  ? CLKIT_CAUSAL_TOP_LEFT
                                             : CLKIT_CAUSAL_NONE;
    return o;
}

static int64_t attention_kv_heads(const op_shape *s) { return s->kv_heads ? s->kv_heads : s->depth; }
static int64_t attention_queries(const op_shape *s) { return s->queries ? s->queries : s->rows; }

static clkit_status call_attention_backward(clkit_context *ctx, const op_problem *p);

/* Whether slot k is k, v or one of their gradients: kv heads by Lk rows. */
static int attention_is_kv(const op_problem *p, int slot)
{
    int bwd = p->op->call == call_attention_backward;
    return slot == ATT_K || slot == ATT_V || (bwd && (slot == ATB_DK || slot == ATB_DV));
}

/* Slot k as the API takes it, 4-D (lse 3-D): its leading B H dim split in two. */
static clkit_tensor attention_view(const op_problem *p, int slot)
{
    const clkit_tensor *t = &p->t[slot];
    int64_t shape[4] = {p->shape.batch, attention_is_kv(p, slot) ? attention_kv_heads(&p->shape) : p->shape.depth};
    memcpy(shape + 2, t->shape + 1, (size_t)(t->ndim - 1) * sizeof *shape);
    return clkit_tensor_contiguous(t->buffer, t->dtype, t->ndim + 1, shape);
}

/* The forward of q, k and v into the slots o and lse; tuned first when tune is given. */
static clkit_status attention_forward(clkit_context *ctx, const op_problem *p, int o, int lse,
                                      const clkit_tune_options *tune)
{
    clkit_attention_options opt = attention_options(p);
    clkit_tensor q = attention_view(p, ATT_Q), k = attention_view(p, ATT_K);
    clkit_tensor v = attention_view(p, ATT_V), out = attention_view(p, o);
    clkit_tensor l = attention_view(p, lse);
    return tune ? clkit_tune_attention_forward(ctx, &q, &k, &v, &opt, &out, &l, tune)
                : clkit_attention_forward(ctx, &q, &k, &v, &opt, &out, &l);
}

static clkit_status call_attention_forward(clkit_context *ctx, const op_problem *p)
{
    return attention_forward(ctx, p, ATT_O, ATT_LSE, NULL);
}

static clkit_status tune_attention_forward(clkit_context *ctx, const op_problem *p,
                                           const clkit_tune_options *t)
{
    return attention_forward(ctx, p, ATT_O, ATT_LSE, t);
}

/* The backward's lse, from a forward of its q, k and v (whose o lands in dq, which the backward
   then overwrites). The backward reads the o input, not the forward's: delta = rowsum(dout o)
   comes from the o given, on the device and in the reference alike, and the reference knows
   the input's values, where the forward's o would differ from its own by roundings. */
static clkit_status prepare_attention_backward(clkit_context *ctx, const op_problem *p)
{
    return attention_forward(ctx, p, ATB_DQ, ATB_LSE, NULL);
}

static clkit_status attention_backward(clkit_context *ctx, const op_problem *p,
                                       const clkit_tune_options *tune)
{
    clkit_attention_options opt = attention_options(p);
    clkit_tensor t[ATB_DV + 1];
    for (int k = 0; k <= ATB_DV; k++) t[k] = attention_view(p, k);
    if (tune)
        return clkit_tune_attention_backward(ctx, &t[ATT_Q], &t[ATT_K], &t[ATT_V], &t[ATT_O],
                                             &t[ATB_DOUT], &t[ATB_LSE], &opt, &t[ATB_DQ],
                                             &t[ATB_DK], &t[ATB_DV], tune);
    return clkit_attention_backward(ctx, &t[ATT_Q], &t[ATT_K], &t[ATT_V], &t[ATT_O], &t[ATB_DOUT],
                                    &t[ATB_LSE], &opt, &t[ATB_DQ], &t[ATB_DK], &t[ATB_DV]);
}

static clkit_status call_attention_backward(clkit_context *ctx, const op_problem *p)
{
    return attention_backward(ctx, p, NULL);
}

static clkit_status tune_attention_backward(clkit_context *ctx, const op_problem *p,
                                            const clkit_tune_options *t)
{
    return attention_backward(ctx, p, t);
}

static int attention_is_lse(const op_problem *p, int slot)
{
    return slot == (p->op->call == call_attention_backward ? ATB_LSE : ATT_LSE);
}

/* The leading B H dim stays even where it is 1: attention_view splits it. */
static void dims_attention(const op_problem *p, int slot, int64_t d[3])
{
    const op_shape *s = &p->shape;
    int lse = attention_is_lse(p, slot), kv = attention_is_kv(p, slot);
    int64_t heads = s->batch * (kv ? attention_kv_heads(s) : s->depth);
    int64_t rows = kv ? s->rows : attention_queries(s);
    d[0] = lse ? 0 : heads;
    d[1] = lse ? heads : rows;
    d[2] = lse ? rows : s->cols;
}

static clkit_dtype dtype_attention(const op_problem *p, int slot)
{
    return attention_is_lse(p, slot) ? CLKIT_F32 : p->dtype;
}

static ref_attention_dims attention_ref_dims(const op_problem *p)
{
    const op_shape *s = &p->shape;
    ref_attention_dims a = {s->batch, s->depth, attention_kv_heads(s), attention_queries(s), s->rows,
                            s->cols, attention_options(p).causal, 1 / sqrt((double)s->cols)};
    return a;
}

/* The error of tests/test_attention.c, a fraction of the largest output: f32's (a sum of many
   terms rounds relative to its largest), and for 16-bit dtypes the rounding of P and dS to the
   storage dtype that the tensor and matrix cores do, as FlashAttention does. */
static void attention_tol(const op_problem *p, const double *want, int64_t n, double *tol)
{
    double top = 0, round = p->dtype == CLKIT_F16 ? 0x1p-11 : p->dtype == CLKIT_BF16 ? 0x1p-8 : 0;
    for (int64_t i = 0; i < n; i++) top = fmax(top, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) tol[i] += (ATTN_F32_ARITH + round) * top;
}

static void want_attention_forward(const op_problem *p, const double *const *in, double *want,
                                   double *tol)
{
    ref_attention_dims a = attention_ref_dims(p);
    ref_attention_forward(&a, in[ATT_Q], in[ATT_K], in[ATT_V], want, NULL);
    attention_tol(p, want, op_numel(p, ATT_O), tol);
}

/* dq; out of host memory for the dk and dv the reference writes too, want stays 0 and the
   check fails. */
static void want_attention_backward(const op_problem *p, const double *const *in, double *want,
                                    double *tol)
{
    ref_attention_dims a = attention_ref_dims(p);
    size_t bytes = (size_t)op_numel(p, ATT_K) * sizeof(double);
    double *dk = malloc(bytes), *dv = malloc(bytes);
    if (dk && dv) {
        ref_attention_backward(&a, in[ATT_Q], in[ATT_K], in[ATT_V], in[ATT_O], in[ATB_DOUT], want,
                               dk, dv);
        attention_tol(p, want, op_numel(p, ATB_DQ), tol);
    }
    free(dk);
    free(dv);
}

/* The tutorial's count: two products of 2 B H L^2 D, half of them under the causal mask; the
   backward 2.5 times that. */
static double flops_attention_forward(const op_problem *p)
{
    const op_shape *s = &p->shape;
    double f = 4.0 * (double)s->batch * (double)s->depth * (double)attention_queries(s) *
               (double)s->rows * (double)s->cols;
    return s->flags & OP_CAUSAL ? f / 2 : f;
}

static double flops_attention_backward(const op_problem *p)
{
    return 2.5 * flops_attention_forward(p);
}

/* The head configurations of bench/TARGETS.md, causal: the tutorial's f32 shape and the f16
   one, each with the L of its targets. */
static const struct {
    int64_t batch, heads, dim, target_len;
    clkit_dtype dtype;
} attention_configs[] = {{32, 4, 128, 1024, CLKIT_F32}, {8, 16, 64, 4096, CLKIT_F16}};

/* A curve against L. Two configurations make no curve: the rows of the one bench/TARGETS.md
   times in another dtype than the row's (bf16 counts as f16) stay off the plot. */
static double plot_x_attention(const op_problem *p)
{
    const op_shape *s = &p->shape;
    clkit_dtype t = p->dtype == CLKIT_BF16 ? CLKIT_F16 : p->dtype;
    for (size_t c = 0; c < sizeof attention_configs / sizeof *attention_configs; c++)
        if (attention_configs[c].dtype != t && s->batch == attention_configs[c].batch &&
            s->depth == attention_configs[c].heads && s->cols == attention_configs[c].dim)
            return NAN;
    return (double)s->rows;
}

/* Two shapes of different families make no curve. */
static double plot_x_none(const op_problem *p)
{
    (void)p;
    return NAN;
}

/* ---- shapes ---- */

/* Odd and power-of-two lengths: the tails and the vector paths of the kernels. */
static const op_shape stream_checks[] = {{.rows = 1, .cols = 4099},
                                         {.rows = 1, .cols = 1 << 20}, {0}};
static const op_shape copy_checks[] = {{.rows = 1, .cols = 4099}, {.rows = 1, .cols = 1 << 20},
                                       {.rows = 300, .cols = 257, .transposed = 1}, {0}};
static const op_shape gray_checks[] = {{.rows = 37, .cols = 51}, {.rows = 1066, .cols = 1600},
                                       {0}};
static const op_shape swizzle_checks[] = {{.rows = 37, .cols = 19}, {.rows = 256, .cols = 256},
                                          {0}};
/* Short rows, a row that fits on chip and one long enough for the online path on a GPU. */
static const op_shape softmax_checks[] = {{.rows = 37, .cols = 1000}, {.rows = 128, .cols = 4096},
                                          {.rows = 4, .cols = 50000}, {0}};

/* The vector tutorials' sizes, n = 2^12 .. 2^27; the targets are at 2^26. */
static int stream_shapes(int quick, op_shape *out)
{
    int n = 0;
    for (int e = 12; e <= (quick ? 20 : 27); e += quick ? 4 : 1)
        out[n++] = (op_shape){.rows = 1, .cols = (int64_t)1 << e, .target = e == 26};
    return n;
}

/* Dense copies, then transposing ones (torch: x.t().contiguous()). */
static int copy_shapes(int quick, op_shape *out)
{
    static const int64_t sides[] = {1024, 4096, 8192};
    int n = stream_shapes(quick, out);
    for (size_t i = 0; i < (quick ? 1 : sizeof sides / sizeof *sides); i++)
        out[n++] = (op_shape){.rows = sides[i], .cols = sides[i], .transposed = 1};
    return n;
}

/* The softmax tutorial's sweep, M = 4096 and N = 128 i for i = 2 .. 100, plus the target
   N = 32768; quick: a few N over fewer rows. */
static int softmax_shapes(int quick, op_shape *out)
{
    int n = 0;
    if (quick) {
        for (int64_t i = 2; i <= 32; i *= 4) out[n++] = (op_shape){.rows = 256, .cols = 128 * i};
        return n;
    }
    for (int64_t i = 2; i <= 100; i++) {
        int64_t cols = 128 * i;
        int target = cols == 256 || cols == 1024 || cols == 4096 || cols == 12672;
        out[n++] = (op_shape){.rows = 4096, .cols = cols, .target = target};
    }
    out[n++] = (op_shape){.rows = 4096, .cols = 32768, .target = 1};
    return n;
}

/* The practitioner's guide image, then 4K. */
static int gray_shapes(int quick, op_shape *out)
{
    out[0] = (op_shape){.rows = 1066, .cols = 1600, .target = 1};
    out[1] = (op_shape){.rows = 2160, .cols = 3840};
    return quick ? 1 : 2;
}

/* Squares of f32 (an image's size, and one well past L2); quick: the first. */
static int swizzle_shapes(int quick, op_shape *out)
{
    out[0] = (op_shape){.rows = 2048, .cols = 2048};
    out[1] = (op_shape){.rows = 8192, .cols = 8192};
    return quick ? 1 : 2;
}

/* A row that fits a work-group on chip and the target's N, whose rows a GPU may split. */
static const op_shape layernorm_checks[] = {{.rows = 37, .cols = 1000}, {.rows = 16, .cols = 8192},
                                            {0}};

/* The tutorial's sweep, M = 4096 and N = 512 i for i = 2 .. 31 (its range(2, 32)), the target
   at N = 8192; quick: a few N over fewer rows. */
static int layernorm_shapes(int quick, op_shape *out)
{
    static const int64_t quick_cols[] = {1024, 4096, 8192};
    int n = 0;
    if (quick) {
        for (size_t i = 0; i < sizeof quick_cols / sizeof *quick_cols; i++)
            out[n++] = (op_shape){.rows = 256, .cols = quick_cols[i]};
        return n;
    }
    for (int64_t i = 2; i < 32; i++)
        out[n++] = (op_shape){.rows = 4096, .cols = 512 * i, .target = i == 16};
    return n;
}

/* T x D x V: V within one chunk of logits, and an odd V over several on a GPU. */
static const op_shape lce_checks[] = {{.rows = 37, .cols = 64, .depth = 1000},
                                      {.rows = 16, .cols = 128, .depth = 5003}, {0}};

/* The two shapes of bench/TARGETS.md; quick: a small one. */
static int lce_shapes(int quick, op_shape *out)
{
    if (quick) {
        out[0] = (op_shape){.rows = 512, .cols = 128, .depth = 1000};
        return 1;
    }
    out[0] = (op_shape){.rows = 32768, .cols = 384, .depth = 32768, .target = 1};
    out[1] = (op_shape){.rows = 8192, .cols = 4096, .depth = 128256, .target = 1};
    return 2;
}

static op_shape attention_shape(int64_t batch, int64_t heads, int64_t len, int64_t dim)
{
    return (op_shape){.batch = batch, .depth = heads, .rows = len, .cols = dim,
                      .flags = OP_CAUSAL};
}

/* L off every block size, causal; not causal with B > 1 at another head dim; and decoding:
   three queries of four heads on two kv heads against 300 keys, bottom-right. */
static const op_shape attention_checks[] = {
    {.batch = 1, .depth = 2, .rows = 67, .cols = 32, .flags = OP_CAUSAL},
    {.batch = 2, .depth = 1, .rows = 40, .cols = 64},
    {.batch = 1, .depth = 4, .rows = 300, .cols = 32, .flags = OP_CAUSAL_BR, .kv_heads = 2, .queries = 3},
    {0}};

/* Both configurations, L = 512 i for i = 1 .. 16, whatever the dtype: the shapes do not know
   it. The targets' first calls at their L. Quick: one small shape. */
static int attention_shapes(int quick, op_shape *out)
{
    int n = 0;
    if (quick) {
        out[n++] = attention_shape(1, 2, 256, 64);
        return n;
    }
    for (size_t c = 0; c < sizeof attention_configs / sizeof *attention_configs; c++)
        for (int64_t len = 512; len <= 8192; len += 512) {
            out[n] = attention_shape(attention_configs[c].batch, attention_configs[c].heads, len,
                                     attention_configs[c].dim);
            out[n++].target = len == attention_configs[c].target_len;
        }
    return n;
}

/* `clkit tune --standard`: both configurations at L 1024 and 4096 (the lookup takes the
   nearest tuned L for the rest). */
static int attention_tune_shapes(op_shape *out)
{
    int n = 0;
    for (size_t c = 0; c < sizeof attention_configs / sizeof *attention_configs; c++)
        for (int64_t len = 1024; len <= 4096; len *= 4)
            out[n++] = attention_shape(attention_configs[c].batch, attention_configs[c].heads, len,
                                       attention_configs[c].dim);
    return n;
}

#define F32_ONLY OP_DT(CLKIT_F32)

/* Odd sizes for the edges of every tile, multiples of 32 for the vector loads; each layout,
   dtype path and the batch broadcast and epilogue once. */
static const op_shape matmul_checks[] = {
    {.rows = 67, .cols = 45, .depth = 37, .dtypes = F32_ONLY},
    {.rows = 128, .cols = 96, .depth = 64, .dtypes = F32_ONLY},
    {.rows = 67, .cols = 45, .depth = 37, .transposed = 1, .dtypes = F32_ONLY},
    {.rows = 128, .cols = 96, .depth = 64, .transposed = 2, .dtypes = F32_ONLY},
    {.rows = 67, .cols = 45, .depth = 37, .dtypes = OP_DT(CLKIT_F16)},
    {.rows = 128, .cols = 96, .depth = 64, .transposed = 3, .dtypes = OP_DT(CLKIT_F16)},
    {.rows = 128, .cols = 96, .depth = 64, .flags = OP_OUT_IN, .dtypes = OP_DT(CLKIT_BF16)},
    {.rows = 67, .cols = 45, .depth = 37, .batch = 3, .shared = 2, .dtypes = F32_ONLY},
    {.rows = 67, .cols = 45, .depth = 37, .flags = OP_ACCUMULATE, .dtypes = F32_ONLY},
    {0},
};

static op_shape matmul_shape(int64_t m, int64_t n, int64_t k, int64_t batch)
{
    return (op_shape){.rows = m, .cols = n, .depth = k, .batch = batch};
}

/* Skinny (M = 1, 8, 16: a batch of vectors through a layer) and batched products, the
   second with one B shared by the batch. */
static int matmul_odd_shapes(int quick, op_shape *out)
{
    static const int64_t skinny[] = {1, 8, 16};
    int64_t side = quick ? 1024 : 4096, cube = quick ? 256 : 512, batch = quick ? 4 : 16;
    int n = 0;
    for (size_t i = quick ? 1 : 0; i < (quick ? 2 : sizeof skinny / sizeof *skinny); i++)
        out[n++] = matmul_shape(skinny[i], side, side, 0);
    out[n++] = matmul_shape(cube, cube, cube, batch);
    out[n] = matmul_shape(cube, cube, cube, batch);
    out[n++].shared = 2;
    return n;
}

/* The tutorial's sweep M = N = K = 128 i for i = 2 .. 32 (its squares 256 .. 4096 among
   them), 8192, then the odd shapes; the targets at 4096. */
static int matmul_shapes(int quick, op_shape *out)
{
    int n = 0;
    for (int64_t i = 2; i <= (quick ? 4 : 32); i += quick ? 2 : 1) {
        out[n] = matmul_shape(128 * i, 128 * i, 128 * i, 0);
        out[n++].target = i == 32;
    }
    if (!quick) out[n++] = matmul_shape(8192, 8192, 8192, 0);
    return n + matmul_odd_shapes(quick, out + n);
}

/* `clkit tune --standard`: the squares 256 .. 8192, every 4th size of the sweep in between
   (the tuned-cache lookup takes the nearest shape for the rest), and the odd shapes. */
static int matmul_tune_shapes(op_shape *out)
{
    int n = 0;
    for (int64_t side = 256; side <= 8192; side += 128) {
        int64_t i = side / 128;
        if ((side & (side - 1)) == 0 || (i <= 32 && (i - 2) % 4 == 0))
            out[n++] = matmul_shape(side, side, side, 0);
    }
    /* One batched entry serves both bench rows: broadcasting does not change the tuned key. */
    return n + matmul_odd_shapes(0, out + n) - 1;
}

/* clkit's call as is (tuned), the same without a tuned entry, and CLBlast (f32 only; NVIDIA's
   OpenCL has no fp16 for it). */
static const op_provider matmul_providers[] = {
    {.name = "clkit"},
    {.name = "heuristic", .fresh_cache = 1},
    {.name = "clblast", .api = CLKIT_PROVIDER_CLBLAST, .wall_clock = 1, .peer = 1,
     .dtypes = OP_DT(CLKIT_F32)},
};

/* ---- the table ---- */

const op_def op_table[] = {
    {.name = "add", .nin = 2, .planes = 1, .ndim = 1, .dtypes = FLOATS, .lo = -4, .hi = 4,
     .x_label = "elements", .checks = stream_checks, .bench_shapes = stream_shapes,
     .call = call_add, .reference = want_add},
    {.name = "softmax", .nin = 1, .planes = 1, .ndim = 2, .dtypes = FLOATS, .lo = -8, .hi = 8,
     .atol = 1e-6, .x_label = "N (row length)", .x_is_cols = 1, .checks = softmax_checks,
     .bench_shapes = softmax_shapes, .call = call_softmax, .reference = want_softmax},
    {.name = "dropout", .nin = 1, .planes = 1, .ndim = 1, .dtypes = FLOATS, .lo = -4, .hi = 4,
     .x_label = "elements", .checks = stream_checks, .bench_shapes = stream_shapes,
     .call = call_dropout, .reference = want_dropout},
    {.name = "copy", .nin = 1, .planes = 1, .ndim = 1, .dtypes = FLOATS, .lo = -4, .hi = 4,
     .x_label = "elements", .checks = copy_checks, .bench_shapes = copy_shapes,
     .call = call_copy, .reference = want_copy},
    {.name = "grayscale", .nin = 1, .planes = 3, .ndim = 2,
     .dtypes = OP_DT(CLKIT_F32) | OP_DT(CLKIT_U8), .lo = 0, .hi = 1, .atol = 1e-6,
     .x_label = "pixels", .checks = gray_checks, .bench_shapes = gray_shapes,
     .call = call_gray, .reference = want_gray},
    {.name = "swizzle", .nin = 1, .planes = 1, .ndim = 2, .dtypes = OP_DT(CLKIT_F32), .lo = -4,
     .hi = 4, .x_label = "elements", .checks = swizzle_checks, .bench_shapes = swizzle_shapes,
     .call = call_swizzle, .reference = want_swizzle},
    {.name = "matmul", .nin = 2, .planes = 1, .ndim = 3, .dtypes = FLOATS, .out_f32 = 1, .lo = -1,
     .hi = 1, .x_label = "M = N = K", .checks = matmul_checks, .bench_shapes = matmul_shapes,
     .providers = matmul_providers,
     .nproviders = sizeof matmul_providers / sizeof *matmul_providers, .call = call_matmul,
     .reference = want_matmul, .dims = dims_matmul, .flops = flops_matmul,
     .plot_x = plot_x_matmul, .tune = tune_matmul, .tune_shapes = matmul_tune_shapes},
    {.name = "layernorm", .family = "layernorm", .nin = 3, .nextra = 2, .planes = 1, .ndim = 2,
     .dtypes = FLOATS, .lo = -2, .hi = 2, .x_label = "N (row length)", .x_is_cols = 1,
     .checks = layernorm_checks, .bench_shapes = layernorm_shapes,
     .call = call_layernorm_forward, .reference = want_layernorm_forward, .dims = dims_layernorm,
     .slot_dtype = dtype_layernorm, .bytes = bytes_layernorm},
    {.name = "layernorm_backward", .family = "layernorm", .nin = 3, .nextra = 4, .planes = 1,
     .ndim = 2, .dtypes = FLOATS, .lo = -2, .hi = 2, .x_label = "N (row length)", .x_is_cols = 1,
     .checks = layernorm_checks, .bench_shapes = layernorm_shapes,
     .call = call_layernorm_backward, .reference = want_layernorm_backward,
     .dims = dims_layernorm, .slot_dtype = dtype_layernorm,
     .prepare = prepare_layernorm_backward, .bytes = bytes_layernorm},
    {.name = "linear_cross_entropy", .nin = 3, .nextra = 2, .planes = 1, .ndim = 3,
     .dtypes = FLOATS, .out_f32 = 1, .show_scratch = 1, .lo = -1, .hi = 1, .atol = 1e-4,
     .checks = lce_checks, .bench_shapes = lce_shapes, .call = call_lce, .reference = want_lce,
     .dims = dims_lce, .slot_dtype = dtype_lce, .range = range_lce, .flops = flops_lce,
     .plot_x = plot_x_none},
    {.name = "attention", .family = "attention", .nin = 3, .nextra = 1, .planes = 1, .ndim = 4,
     .dtypes = FLOATS, .lo = -2, .hi = 2, .x_label = "L (sequence length)", .x_is_cols = 1,
     .checks = attention_checks, .bench_shapes = attention_shapes,
     .call = call_attention_forward, .reference = want_attention_forward,
     .dims = dims_attention, .slot_dtype = dtype_attention, .flops = flops_attention_forward,
     .plot_x = plot_x_attention, .tune = tune_attention_forward,
     .tune_shapes = attention_tune_shapes},
    {.name = "attention_backward", .family = "attention", .nin = 5, .nextra = 3, .planes = 1,
     .ndim = 4, .dtypes = FLOATS, .lo = -2, .hi = 2, .x_label = "L (sequence length)",
     .x_is_cols = 1, .checks = attention_checks, .bench_shapes = attention_shapes,
     .call = call_attention_backward, .reference = want_attention_backward,
     .dims = dims_attention, .slot_dtype = dtype_attention,
     .prepare = prepare_attention_backward, .flops = flops_attention_backward,
     .plot_x = plot_x_attention, .tune = tune_attention_backward,
     .tune_shapes = attention_tune_shapes},
};
const int op_count = sizeof op_table / sizeof *op_table;

const op_def *op_find(const char *name)
{
    for (int i = 0; i < op_count; i++)
        if (strcmp(op_table[i].name, name) == 0) return &op_table[i];
    return NULL;
}

int op_selected(const op_def *op, const char *name)
{
    return strcmp(op->name, name) == 0 || (op->family && strcmp(op->family, name) == 0);
}

/* ---- problems ---- */

op_problem op_problem_make(const op_def *op, clkit_dtype dtype, op_shape shape)
{
    op_problem p;
    memset(&p, 0, sizeof p);
    p.op = op;
    p.dtype = dtype;
    p.out_dtype = op->out_f32 && !(shape.flags & OP_OUT_IN) ? CLKIT_F32 : dtype;
    p.provider = CLKIT_PROVIDER_AUTO;
    p.shape = shape;
    return p;
}

/* The elementwise ops: inputs of `planes` planes; 2-D where the op or a transposed source
   needs rows. */
static void dims_default(const op_problem *p, int slot, int64_t d[3])
{
    const op_shape *s = &p->shape;
    d[0] = slot < p->op->nin && p->op->planes > 1 ? p->op->planes : 0;
    d[1] = p->op->ndim == 2 || s->transposed ? s->rows : 0;
    d[2] = s->cols;
}

/* Dims of slot k and the strides (leading, row, col) of its dense storage: row-major, or
   column-major for a transposed input; a leading stride of 0 where there is no such dim. */
static void slot_layout(const op_problem *p, int k, int64_t d[3], int64_t strides[3])
{
    (p->op->dims ? p->op->dims : dims_default)(p, k, d);
    int64_t rows = d[1] ? d[1] : 1;
    int transposed = k < p->op->nin && (p->shape.transposed >> k & 1);
    strides[0] = d[0] ? rows * d[2] : 0;
    strides[1] = transposed ? 1 : d[2];
    strides[2] = transposed ? rows : 1;
}

int op_slots(const op_problem *p)
{
    return p->op->nin + 1 + p->op->nextra;
}

int64_t op_numel(const op_problem *p, int slot)
{
    int64_t d[3], strides[3];
    slot_layout(p, slot, d, strides);
    return (d[0] ? d[0] : 1) * (d[1] ? d[1] : 1) * d[2];
}

clkit_dtype op_slot_dtype(const op_problem *p, int slot)
{
    if (p->op->slot_dtype) return p->op->slot_dtype(p, slot);
    return slot < p->op->nin ? p->dtype : p->out_dtype;
}

uint64_t op_slot_bytes(const op_problem *p, int slot)
{
    return (uint64_t)op_numel(p, slot) * clkit_dtype_size(op_slot_dtype(p, slot));
}

uint64_t op_bytes(const op_problem *p)
{
    if (p->op->bytes) return p->op->bytes(p);
    uint64_t n = 0;
    for (int k = 0; k < op_slots(p); k++) n += op_slot_bytes(p, k);
    return n;
}

const op_provider *op_providers(const op_def *op, int *n)
{
    static const op_provider only_clkit = {.name = "clkit"};
    *n = op->providers ? op->nproviders : 1;
    return op->providers ? op->providers : &only_clkit;
}

/* ".nt" (A as stored, B transposed) where an input is transposed, ".bshared" where B is
   broadcast, ".acc.relu" with the epilogue. */
static void matmul_suffix(const op_shape *s, char *buf, size_t n)
{
    static const char *const layouts[] = {"", ".tn", ".nt", ".tt"};
    snprintf(buf, n, "%s%s%s%s", layouts[s->transposed & 3], s->shared & 1 ? ".ashared" : "",
             s->shared & 2 ? ".bshared" : "", s->flags & OP_ACCUMULATE ? ".acc.relu" : "");
}

void op_shape_text(const op_problem *p, char *buf, size_t n)
{
    const op_shape *s = &p->shape;
    if (p->op->ndim == 3) {
        char suffix[32], batch[24] = "";
        matmul_suffix(s, suffix, sizeof suffix);
        if (s->batch > 1) snprintf(batch, sizeof batch, "x%lld", (long long)s->batch);
        snprintf(buf, n, "%lldx%lldx%lld%s%s", (long long)s->rows, (long long)s->cols,
                 (long long)s->depth, batch, suffix);
    } else if (p->op->ndim == 4) {
        char q[24] = "", kv[24] = "";
        if (s->queries) snprintf(q, sizeof q, ".q%lld", (long long)s->queries);
        if (s->kv_heads) snprintf(kv, sizeof kv, ".kv%lld", (long long)s->kv_heads);
        snprintf(buf, n, "%lldx%lldx%lldx%lld%s%s%s", (long long)s->batch, (long long)s->depth,
                 (long long)s->rows, (long long)s->cols, q, kv,
                 s->flags & OP_CAUSAL ? ".causal" : s->flags & OP_CAUSAL_BR ? ".br" : "");
    } else if (p->op->ndim == 1 && !s->transposed) {
        snprintf(buf, n, "%lld", (long long)s->cols);
    } else {
        snprintf(buf, n, "%lldx%lld%s", (long long)s->rows, (long long)s->cols,
                 s->transposed ? ".T" : "");
    }
}

void op_dtype_text(const op_problem *p, char *buf, size_t n)
{
    if (p->out_dtype == p->dtype)
        snprintf(buf, n, "%s", clkit_dtype_name(p->dtype));
    else
        snprintf(buf, n, "%s>%s", clkit_dtype_name(p->dtype), clkit_dtype_name(p->out_dtype));
}

/* The words op_shape_text writes after the dims, in its order: what each sets, and the ops
   that take it (ndim; 3: matmul alone, as the other (M, N, K) op has no layouts). */
static const struct {
    const char *word;
    int ndim, transposed, shared, flags;
} shape_words[] = {
    {".T", 1, 1, 0, 0},          {".tn", 3, 1, 0, 0},          {".nt", 3, 2, 0, 0},
    {".tt", 3, 3, 0, 0},         {".ashared", 3, 0, 1, 0},     {".bshared", 3, 0, 2, 0},
    {".acc.relu", 3, 0, 0, OP_ACCUMULATE}, {".causal", 4, 0, 0, OP_CAUSAL},
    {".br", 4, 0, 0, OP_CAUSAL_BR},
};

/* Attention's numbered words, before the others: ".qM" (Lq, with L the keys' Lk) then ".kvN"
   (kv heads, a divisor of H). Returns the text after them, or NULL when one is malformed. */
static const char *attention_counts(const char *rest, op_shape *s)
{
    static const char *const words[2] = {".q", ".kv"};
    int64_t *fields[2] = {&s->queries, &s->kv_heads};
    for (int w = 0; w < 2; w++) {
        size_t len = strlen(words[w]), digits = 0;
        if (strncmp(rest, words[w], len) != 0 || !isdigit((unsigned char)rest[len])) continue;
        while (isdigit((unsigned char)rest[len + digits])) digits++;
        char text[24];
        long long v;
        if (digits >= sizeof text || (rest[len + digits] && rest[len + digits] != '.')) return NULL;
        memcpy(text, rest + len, digits);
        text[digits] = 0;
        if (tool_parse_int(text, 1, OP_MAX_DIM, &v)) return NULL;
        *fields[w] = v;
        rest += len + digits;
    }
    return rest;
}

/* The dims before the first '.' of text into d (at most 4); their count, or -1 when one is not
   a whole number in 1 .. OP_MAX_DIM. *rest: what follows them. */
static int parse_dims(const char *text, int64_t d[4], const char **rest)
{
    int n = 0;
    for (const char *at = text;; at++) {
        size_t len = strcspn(at, "x.");
        char digits[24];
        long long v;
        if (n == 4 || len == 0 || len >= sizeof digits || !isdigit((unsigned char)*at)) return -1;
        memcpy(digits, at, len);
        digits[len] = 0;
        if (tool_parse_int(digits, 1, OP_MAX_DIM, &v)) return -1;
        d[n++] = v;
        at += len;
        if (*at != 'x') {
            *rest = at;
            return n;
        }
    }
}

/* The words after the dims into s, each at most once and in shape_words' order; -1 on any
   other text. */
static int parse_words(const op_def *op, const char *rest, op_shape *s)
{
    size_t next = 0;
    while (*rest) {
        size_t i = next, len = 0;
        for (; i < sizeof shape_words / sizeof *shape_words; i++) {
            len = strlen(shape_words[i].word);
            if (strncmp(rest, shape_words[i].word, len) == 0 && (!rest[len] || rest[len] == '.'))
                break;
        }
        if (i == sizeof shape_words / sizeof *shape_words || shape_words[i].ndim != op->ndim ||
            (op->ndim == 3 && op->call != call_matmul) ||
            (shape_words[i].transposed && s->transposed))
            return -1;
        s->transposed |= shape_words[i].transposed;
        s->shared |= shape_words[i].shared;
        s->flags |= shape_words[i].flags;
        rest += len;
        next = i + 1;
    }
    return 0;
}

int op_shape_parse(const op_def *op, const char *text, op_shape *out)
{
    int64_t d[4], product = 1;
    const char *rest;
    op_shape s;
    memset(&s, 0, sizeof s);
    int n = parse_dims(text, d, &rest);
    if (n >= 0 && op->ndim == 4) rest = attention_counts(rest, &s);
    if (n < 0 || !rest || parse_words(op, rest, &s)) return -1;
    if ((s.flags & OP_CAUSAL) && (s.flags & OP_CAUSAL_BR)) return -1;
    /* ndim numbers, two for a transposed 1-D op (a matrix); a matmul may add the batch. */
    int want = op->ndim == 1 ? 1 + (s.transposed != 0) : op->ndim;
    if (n != want && !(op->call == call_matmul && n == 4)) return -1;
    for (int i = 0; i < n; i++)
        if (__builtin_mul_overflow(product, d[i], &product) || product > OP_MAX_PRODUCT) return -2;
    if (op->ndim == 4) {
        if (s.kv_heads && d[1] % s.kv_heads) return -1;
        *out = attention_shape(d[0], d[1], d[2], d[3]);
        out->flags = s.flags, out->queries = s.queries, out->kv_heads = s.kv_heads;
        return 0;
    }
    s.rows = n > 1 ? d[0] : 1;
    s.cols = d[n > 1];
    if (n >= 3) s.depth = d[2];
    if (n == 4) s.batch = d[3];
    *out = s;
    return 0;
}

/* How op's shapes are spelled, for the message about one that is not. */
static const char *shape_grammar(const op_def *op)
{
    if (op->call == call_matmul) return "MxNxK[xBATCH][.tn|.nt|.tt][.ashared][.bshared][.acc.relu]";
    switch (op->ndim) {
    case 1: return "N, or ROWSxCOLS.T transposed";
    case 2: return "ROWSxCOLS";
    case 3: return "TxDxV";
    default: return "BxHxLxD[.qLq][.kvHkv][.causal|.br] (L: Lk when .q gives Lq; .br: bottom-right causal)";
    }
}

int op_shape_list(const op_def *op, const char *list, op_shape *out, int *n, char *why,
                  size_t why_n)
{
    for (const char *at = list;; at++) {
        size_t len = strcspn(at, ",");
        char text[64];
        int bad = len >= sizeof text ? -1 : 0;
        if (!bad) {
            memcpy(text, at, len);
            text[len] = 0;
            bad = *n == OP_MAX_SHAPES ? -3 : op_shape_parse(op, text, &out[*n]);
        }
        if (bad == -1)
            snprintf(why, why_n, "'%.*s' is not a shape of %s: %s, each dim a whole number from "
                     "1 to %lld", (int)len, at, op->name, shape_grammar(op), OP_MAX_DIM);
        else if (bad == -2)
            snprintf(why, why_n, "'%s' is too large: the product of its dims exceeds 2^53", text);
        else if (bad == -3)
            snprintf(why, why_n, "more than %d shapes", OP_MAX_SHAPES);
        if (bad) return -1;
        ++*n;
        at += len;
        if (!*at) return 0;
    }
}

double op_plot_x(const op_problem *p)
{
    if (p->op->plot_x) return p->op->plot_x(p);
    return p->op->x_is_cols ? (double)p->shape.cols : (double)p->shape.rows * (double)p->shape.cols;
}

const char *op_too_big(const struct clkit_device_props *dev, const op_problem *p,
                       uint64_t scratch)
{
    uint64_t total = scratch;
    for (int k = 0; k < op_slots(p); k++) {
        uint64_t bytes = op_slot_bytes(p, k);
        if (bytes > dev->max_alloc) return "a buffer exceeds the device's max_alloc";
        total += bytes;
    }
    return total > dev->global_mem / 10 * 9 ? "the buffers exceed the device's memory" : NULL;
}

/* Dense tensors over the buffers, in the layouts of slot_layout. */
static void set_views(op_problem *p)
{
    for (int k = 0; k < op_slots(p); k++) {
        int64_t d[3], strides[3], shape[3], view_strides[3];
        int nd = 0;
        slot_layout(p, k, d, strides);
        for (int i = 0; i < 3; i++) {
            if (!d[i]) continue;
            shape[nd] = d[i];
            view_strides[nd++] = strides[i];
        }
        p->t[k] = clkit_tensor_contiguous(p->buf[k], op_slot_dtype(p, k), nd, shape);
        memcpy(p->t[k].strides, view_strides, (size_t)nd * sizeof *view_strides);
    }
}

/* Random values of input slot k in its range, quantized to dtype t; NULL when out of memory. */
static double *random_values(const op_problem *p, int slot, clkit_dtype t)
{
    size_t n = (size_t)op_numel(p, slot);
    double *v = malloc(n * sizeof *v), lo = p->op->lo, hi = p->op->hi;
    if (p->op->range) p->op->range(p, slot, &lo, &hi);
    if (t == CLKIT_U8) lo = 0, hi = 256;
    if (v) ref_fill_random(v, n, t, lo, hi, 1 + (uint64_t)slot);
    return v;
}

static int is_index(clkit_dtype t)
{
    return t == CLKIT_I32 || t == CLKIT_I64;
}

/* Slot k's buffer: random values for an index input, else the fill pattern. */
static clkit_status alloc_slot(clkit_context *ctx, op_problem *p, int k)
{
    /* 0x3c in every byte is a finite normal value in each dtype: f32 and bf16 0.0115,
       f16 1.06, u8 60. */
    static const cl_uchar pattern = 0x3c;
    clkit_dtype t = op_slot_dtype(p, k);
    if (k < p->op->nin && is_index(t)) {
        double *v = random_values(p, k, t);
        p->buf[k] = v ? ref_upload(ctx, t, (size_t)op_numel(p, k), v) : NULL;
        free(v);
        return p->buf[k] ? CLKIT_OK : op_fail(CLKIT_ERR_OUT_OF_MEMORY, "indices for an input");
    }
    cl_context c;
    cl_command_queue q;
    clkit_context_cl(ctx, &c, &q, NULL);
    size_t bytes = (size_t)op_slot_bytes(p, k);
    cl_int err;
    p->buf[k] = clCreateBuffer(c, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (!p->buf[k]) return op_cl_fail(err, "clCreateBuffer");
    err = clEnqueueFillBuffer(q, p->buf[k], &pattern, 1, 0, bytes, 0, NULL, NULL);
    return err == CL_SUCCESS ? CLKIT_OK : op_cl_fail(err, "clEnqueueFillBuffer");
}

static clkit_status prepare(clkit_context *ctx, const op_problem *p)
{
    return p->op->prepare ? op_status(ctx, p->op->prepare(ctx, p)) : CLKIT_OK;
}

clkit_status op_alloc(clkit_context *ctx, op_problem *p)
{
    clkit_status s = CLKIT_OK;
    for (int k = 0; k < op_slots(p) && !s; k++) s = alloc_slot(ctx, p, k);
    if (s) return s;
    set_views(p);
    s = prepare(ctx, p);
    /* Drivers allocate on first use: waiting here makes a device out of memory show now. */
    return s ? s : op_status(ctx, clkit_finish(ctx));
}

void op_free(op_problem *p)
{
    for (int k = 0; k < OP_MAX_SLOTS; k++) {
        if (p->buf[k]) clReleaseMemObject(p->buf[k]);
        p->buf[k] = NULL;
    }
}

clkit_status op_call(clkit_context *ctx, const op_problem *p)
{
    return op_status(ctx, p->op->call(ctx, p));
}

/* ---- verification ---- */

/* Outputs as the op stores them; u8 rounds to nearest and saturates (ref_quantize truncates,
   which suits inputs only). */
static double store_as(clkit_dtype t, double v)
{
    if (t == CLKIT_U8) return v < 0 ? 0 : v > 255 ? 255 : floor(v + 0.5);
    return ref_quantize(t, v);
}

/* Host arrays of one verification: the inputs, the output (its old values, then what the
   device wrote), the reference and the tolerance of each output element. */
typedef struct verify_data {
    double *in[OP_MAX_SLOTS], *out, *want, *tol;
} verify_data;

static void compare(const op_problem *p, const verify_data *d, int64_t n, double *max_err,
                    int *pass)
{
    double rtol = ref_rtol(p->out_dtype);
    *max_err = 0;
    *pass = 1;
    for (int64_t i = 0; i < n; i++) {
        double got = d->out[i], want = d->want[i];
        double e = ref_close(got, want, 0, 0) ? 0 : fabs(got - want);
        if (isnan(e)) e = INFINITY;
        if (e > *max_err) *max_err = e;
        if (!ref_close(got, want, d->tol[i], rtol)) *pass = 0;
    }
}

/* Random inputs (and old output values where the op reads them), and the reference. */
static clkit_status verify_expect(const op_problem *p, verify_data *d)
{
    int nin = p->op->nin, reads_out = p->shape.flags & OP_ACCUMULATE;
    size_t n = (size_t)op_numel(p, nin);
    int ok = 1;
    for (int k = 0; k < nin; k++) ok &= (d->in[k] = random_values(p, k, op_slot_dtype(p, k))) != NULL;
    d->out = reads_out ? random_values(p, nin, p->out_dtype) : malloc(n * sizeof(double));
    d->want = malloc(n * sizeof(double));
    d->tol = malloc(n * sizeof(double));
    if (!ok || !d->out || !d->want || !d->tol)
        return op_fail(CLKIT_ERR_OUT_OF_MEMORY, "host arrays for the reference");
    /* u8: a rounding tie computed in float may land one step from the double reference. */
    double atol = p->out_dtype == CLKIT_U8 ? 1 : p->op->atol;
    for (size_t i = 0; i < n; i++) {
        d->want[i] = reads_out ? d->out[i] : 0;
        d->tol[i] = atol;
    }
    p->op->reference(p, (const double *const *)d->in, d->want, d->tol);
    for (size_t i = 0; i < n; i++) d->want[i] = store_as(p->out_dtype, d->want[i]);
    return CLKIT_OK;
}

static clkit_status verify_upload(clkit_context *ctx, op_problem *p, const verify_data *d)
{
    int nin = p->op->nin;
    for (int k = 0; k < op_slots(p); k++) {
        /* An output the op does not read, and each extra, starts as ref_upload's sentinel
           pattern, so unwritten elements show. */
        int reads_out = k == nin && (p->shape.flags & OP_ACCUMULATE);
        const double *vals = k < nin ? d->in[k] : reads_out ? d->out : NULL;
        p->buf[k] = ref_upload(ctx, op_slot_dtype(p, k), (size_t)op_numel(p, k), vals);
        if (!p->buf[k])
            return op_fail(CLKIT_ERR_OUT_OF_MEMORY, "ref_upload could not fill a buffer");
    }
    set_views(p);
    return CLKIT_OK;
}

clkit_status op_verify(clkit_context *ctx, op_problem *p, double *max_err, int *pass)
{
    verify_data d = {{NULL}, NULL, NULL, NULL};
    int nin = p->op->nin;
    int64_t n = op_numel(p, nin);
    clkit_status s = verify_expect(p, &d);
    if (!s) s = verify_upload(ctx, p, &d);
    if (!s) s = prepare(ctx, p);
    if (!s) s = op_call(ctx, p);
    if (!s && ref_download(ctx, p->buf[nin], p->out_dtype, (size_t)n, d.out))
        s = op_fail(CLKIT_ERR_OPENCL, "ref_download could not read the output");
    if (!s) compare(p, &d, n, max_err, pass);
    op_free(p);
    for (int k = 0; k < OP_MAX_SLOTS; k++) free(d.in[k]);
    free(d.out);
    free(d.want);
    free(d.tol);
    return s;
}

/* CPU references in double precision and host-side data helpers, shared by the test suites
   and `clkit check`. No test framework here: helpers report failure by return value. */
#ifndef CLKIT_REF_H
#define CLKIT_REF_H

#include <stddef.h>
#include <stdint.h>

#include "clkit.h"

/* ---- data (data.c) ---- */
/* The value a double becomes once stored as dtype (f16/bf16 round to nearest even). */
double ref_quantize(clkit_dtype dtype, double v);
/* Uniform values in [lo, hi), quantized to dtype; deterministic per seed. */
void ref_fill_random(double *v, size_t n, clkit_dtype dtype, double lo, double hi, uint64_t seed);
/* Relative tolerance that suits one rounding to dtype. */
double ref_rtol(clkit_dtype dtype);
/* |got - want| <= atol + rtol * |want|; NaN matches NaN, inf matches the same inf. */
int ref_close(double got, double want, double atol, double rtol);
/* Index of the first element not close, or -1. */
int64_t ref_first_mismatch(const double *got, const double *want, size_t n, double atol,
                           double rtol);
/* A device buffer of n elements of dtype holding vals (NULL: a sentinel pattern); NULL on error. */
cl_mem ref_upload(clkit_context *ctx, clkit_dtype dtype, size_t n, const double *vals);
/* Reads n elements from the start of buf into doubles; 0 on success. */
int ref_download(clkit_context *ctx, cl_mem buf, clkit_dtype dtype, size_t n, double *out);

/* ---- references, one file per op family ---- */
/* Philox4x32-10 (Salmon et al., Random123): counter ctr, key key -> out. */
void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* The dropout keep decision and output of clkit_dropout for element i (see cl/dropout.cl). */
double ref_dropout_one(double x, uint64_t i, double p, uint64_t seed);
void ref_softmax(const double *x, double *out, int64_t rows, int64_t n);
void ref_rgb_to_gray(const double *rgb, double *gray, int64_t h, int64_t w);
/* Triton's tl.swizzle2d for (i, j) in a size_i x size_j grid with groups of size_g rows. */
void ref_swizzle2d_index(int64_t i, int64_t j, int64_t size_i, int64_t size_j, int64_t size_g,
                         int64_t *new_i, int64_t *new_j);

/* A strided matrix view over host values: v points at element (0, 0, 0); s = strides of
   (batch, row, col), 0 broadcasting. */
typedef struct ref_matrix {
    double *v;
    int64_t s[3];
} ref_matrix;
/* C = act(alpha * A @ B + beta * C) in double (act: 0 none, 1 relu, 2 leaky relu); abs_sum
   (batch x m x n, may be NULL) receives |alpha| sum |a b| + |beta c| per output, the scale of
   its rounding error. */
void ref_matmul(const ref_matrix *a, const ref_matrix *b, ref_matrix *c, int64_t batch,
                int64_t m, int64_t n, int64_t k, double alpha, double beta, int act, double slope,
                double *abs_sum);

/* ---- attention (attention.c) ---- */
/* Dimensions of an attention problem: q (b, hq, lq, d), k and v (b, hkv, lk, d), all
   row-major; query head h reads kv head h / (hq / hkv). causal 1: query i sees keys j <= i;
   2: j <= i + lk - lq (bottom-right). */
typedef struct ref_attention_dims {
    int64_t b, hq, hkv, lq, lk, d;
    int causal;
    double scale;
} ref_attention_dims;
/* o = softmax(scale q k^T) v and lse (b, hq, lq; natural log, -inf for a row with no key);
   either output may be NULL. */
void ref_attention_forward(const ref_attention_dims *a, const double *q, const double *k,
                           const double *v, double *o, double *lse);
/* Gradients of sum(o * dout): dq like q, dk and dv like k (summed over the query heads that
   share a kv head). delta = rowsum(dout * o) is taken from the o given, as the backward of
   clkit_attention_forward takes it from the stored o. */
void ref_attention_backward(const ref_attention_dims *a, const double *q, const double *k,
                            const double *v, const double *o, const double *dout, double *dq,
                            double *dk, double *dv);
/* The same sums over absolute values, with |dout . v_j| + |dout . o| for dP - delta: what the
   f32 rounding of each gradient element scales with, even where the gradient itself is 0. */
void ref_attention_backward_scale(const ref_attention_dims *a, const double *q, const double *k,
                                  const double *v, const double *o, const double *dout,
                                  double *dq, double *dk, double *dv);

/* ---- layernorm (layernorm.c) ---- */
/* y = (x - mean) * rstd * w + b over each row of x (m, n), row-major, with the two-pass
   mean and variance (rstd = 1 / sqrt(var + eps)); w and b (n) may each be NULL (ones,
   zeros); y, mean and rstd (m) may each be NULL. */
void ref_layernorm_forward(const double *x, const double *w, const double *b, double eps,
                           int64_t m, int64_t n, double *y, double *mean, double *rstd);
/* Gradients of sum(y * dy) given the forward's mean and rstd (as stored, so that the device
   and the reference start from the same statistics): dx (m, n), dw and db (n); any may be
   NULL, w NULL means ones. The *_mag arrays (may be NULL) receive the sums of magnitudes
   behind each result, the scale of its rounding error. */
void ref_layernorm_backward(const double *dy, const double *x, const double *w,
                            const double *mean, const double *rstd, int64_t m, int64_t n,
                            double *dx, double *dw, double *db, double *dx_mag, double *dw_mag,
                            double *db_mag);

/* ---- cross-entropy (cross_entropy.c) ---- */
/* Losses of logits (t, v) as clkit_cross_entropy gives them: loss and zloss (may be NULL)
   receive t per-token values for reduction none, else one; dlogits (t x v, may be NULL) the
   gradient of the loss. Returns the count of tokens not ignored. */
int64_t ref_cross_entropy(const double *logits, const int64_t *targets, int64_t t, int64_t v,
                          const clkit_cross_entropy_options *o, double *loss, double *zloss,
                          double *dlogits);
/* Gradients of ref_linear_cross_entropy, each NULL when not wanted; the *_abs arrays (same
   shapes) receive the sum of |dlogits * operand| behind each output (db: of |dlogits|), the
   scale of its rounding error. */
typedef struct ref_lce_grads {
    double *dx, *dw, *db;
    double *dx_abs, *dw_abs, *db_abs;
} ref_lce_grads;
/* ref_cross_entropy of x (t, d) @ w (v, d)^T + b (v, may be NULL); g may be NULL. */
int64_t ref_linear_cross_entropy(const double *x, const double *w, const double *b,
                                 const int64_t *targets, int64_t t, int64_t v, int64_t d,
                                 const clkit_cross_entropy_options *o, double *loss,
                                 double *zloss, const ref_lce_grads *g);

#endif

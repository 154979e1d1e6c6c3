/* Attention in double precision, one score row at a time: the definition, not the blocked
   algorithm of cl/attention.cl, so the two share no mistakes. */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Row i of (head h of batch b): its q, and the k and v of the head it reads. */
typedef struct head_rows {
    const double *q, *k, *v;
} head_rows;

static head_rows rows_of(const ref_attention_dims *a, const double *q, const double *k,
                         const double *v, int64_t b, int64_t h, int64_t i)
{
    int64_t g = h / (a->hq / a->hkv);
    head_rows r;
    r.q = q + ((b * a->hq + h) * a->lq + i) * a->d;
    r.k = k + (b * a->hkv + g) * a->lk * a->d;
    r.v = v + (b * a->hkv + g) * a->lk * a->d;
    return r;
}

/* Keys query i sees: the first i + 1 (top-left), the first i + 1 + lk - lq (bottom-right),
   within 0 .. lk. */
static int64_t visible(const ref_attention_dims *a, int64_t i)
{
    int64_t n = a->causal == 1 ? i + 1 : a->causal == 2 ? i + 1 + a->lk - a->lq : a->lk;
    return n < 0 ? 0 : n < a->lk ? n : a->lk;
}

static double magnitude(double x, int absolute) { return absolute ? fabs(x) : x; }

static double dot(const double *x, const double *y, int64_t n, int absolute)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += magnitude(x[i] * y[i], absolute);
    return s;
}

/* p[j] = softmax over the visible keys of scale q k_j; returns the row's log-sum-exp. */
static double probabilities(const ref_attention_dims *a, const head_rows *r, int64_t n, double *p)
{
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++) {
        p[j] = a->scale * dot(r->q, r->k + j * a->d, a->d, 0);
        if (p[j] > mx) mx = p[j];
    }
    for (int64_t j = 0; j < n; j++) sum += exp(p[j] - mx);
    for (int64_t j = 0; j < n; j++) p[j] = exp(p[j] - mx) / sum;
    return n ? mx + log(sum) : -INFINITY;
}

void ref_attention_forward(const ref_attention_dims *a, const double *q, const double *k,
                           const double *v, double *o, double *lse)
{
    double *p = malloc((size_t)(a->lk ? a->lk : 1) * sizeof *p);
    if (!p) return;
    for (int64_t b = 0; b < a->b; b++)
        for (int64_t h = 0; h < a->hq; h++)
            for (int64_t i = 0; i < a->lq; i++) {
                head_rows r = rows_of(a, q, k, v, b, h, i);
                int64_t n = visible(a, i), row = (b * a->hq + h) * a->lq + i;
                double l = probabilities(a, &r, n, p);
                if (lse) lse[row] = l;
                if (!o) continue;
                for (int64_t c = 0; c < a->d; c++) {
                    double s = 0;
                    for (int64_t j = 0; j < n; j++) s += p[j] * r.v[j * a->d + c];
                    o[row * a->d + c] = s;
                }
            }
    free(p);
}

/* The backward's sums, or with `absolute` the same sums over absolute values and with
   |dout . v_j| + |dout . o| in place of dP - delta (the magnitudes that decide its rounding). */
static void backward(const ref_attention_dims *a, const double *q, const double *k,
                     const double *v, const double *o, const double *dout, int absolute,
                     double *dq, double *dk, double *dv)
{
    size_t kv_len = (size_t)(a->b * a->hkv * a->lk * a->d);
    memset(dk, 0, kv_len * sizeof *dk);
    memset(dv, 0, kv_len * sizeof *dv);
    double *p = malloc((size_t)(a->lk ? a->lk : 1) * sizeof *p);
    if (!p) return;
    for (int64_t b = 0; b < a->b; b++)
        for (int64_t h = 0; h < a->hq; h++)
            for (int64_t i = 0; i < a->lq; i++) {
                head_rows r = rows_of(a, q, k, v, b, h, i);
                int64_t n = visible(a, i), row = (b * a->hq + h) * a->lq + i, d = a->d;
                int64_t kv0 = (r.k - k); /* element offset of this kv head */
                const double *dor = dout + row * d;
                double delta = dot(dor, o + row * d, d, absolute), *dqr = dq + row * d;
                probabilities(a, &r, n, p);
                memset(dqr, 0, (size_t)d * sizeof *dqr);
                for (int64_t j = 0; j < n; j++) {
                    /* dS = P (dP - delta) with dP = dout . v_j */
                    double dp = dot(dor, r.v + j * d, d, absolute);
                    double ds = p[j] * (absolute ? dp + delta : dp - delta);
                    for (int64_t c = 0; c < d; c++) {
                        dqr[c] += a->scale * ds * magnitude(r.k[j * d + c], absolute);
                        dk[kv0 + j * d + c] += a->scale * ds * magnitude(r.q[c], absolute);
                        dv[kv0 + j * d + c] += p[j] * magnitude(dor[c], absolute);
                    }
                }
            }
    free(p);
}

void ref_attention_backward(const ref_attention_dims *a, const double *q, const double *k,
                            const double *v, const double *o, const double *dout, double *dq,
                            double *dk, double *dv)
{
    backward(a, q, k, v, o, dout, 0, dq, dk, dv);
}

void ref_attention_backward_scale(const ref_attention_dims *a, const double *q, const double *k,
                                  const double *v, const double *o, const double *dout,
                                  double *dq, double *dk, double *dv)
{
    backward(a, q, k, v, o, dout, 1, dq, dk, dv);
}

/* Known-answer tests of the vendor fast paths.

   A fast path that has never run on the hardware in hand must not be able to return wrong
   answers silently: a driver may build PTX it then runs wrongly, and a path verified only
   offline (AMD's, by assembly and emulation) has never met real hardware. So before a program
   of path P first serves op family F on a context, one small problem with a known answer runs
   through F's public op while F may take P, against a reference computed here in double
   precision. A wrong answer, or a call that fails, turns P off for F as a failed build does
   (paths.c), with a warning; F then plans again on the next path down. The verdict is kept
   in the binary cache beside the programs (program.c), keyed by the device, the driver,
   clkit's version and the kernel sources, so a device and driver take each test once.

   The problems are small but not trivial: edges that no tile divides, causal masks, several
   heads, values on a 1/64 grid (exact in f16) so the references need no rounding model. */
#include "internal.h"

#include <CL/cl_half.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUFFERS 48

/* One test's host arrays and device buffers, freed together. */
typedef struct kat {
    clkit_context *ctx;
    cl_mem dev[MAX_BUFFERS];
    double *host[MAX_BUFFERS];
    int ndev, nhost;
    clkit_status s;
} kat;

static double *host(kat *t, size_t n)
{
    double *v = calloc(n ? n : 1, sizeof *v);
    if (!v || t->nhost == MAX_BUFFERS) {
        free(v);
        if (!t->s) t->s = clkit_fail(t->ctx, CLKIT_ERR_OUT_OF_MEMORY, "known-answer test: no host memory");
        return NULL;
    }
    return t->host[t->nhost++] = v;
}

/* Values on a 1/64 grid in [-1, 1), from a multiplicative hash of the index: exact in f16. */
static double *inputs(kat *t, size_t n, unsigned seed)
{
    double *v = host(t, n);
    for (size_t i = 0; v && i < n; i++)
        v[i] = (double)((int)(((uint32_t)i * 2654435761u + seed * 40503u) >> 9) % 128 - 64) / 64.0;
    return v;
}

/* A contiguous tensor of `shape` in dtype dt (f32 or f16) on a new buffer holding v (NULL:
   zeros). */
static clkit_tensor tensor(kat *t, clkit_dtype dt, int ndim, const int64_t *shape, const double *v)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    size_t es = clkit_dtype_size(dt), bytes = (size_t)n * es;
    unsigned char *staged = calloc(bytes ? bytes : 1, 1);
    for (int64_t i = 0; staged && v && i < n; i++) {
        if (dt == CLKIT_F16) ((cl_half *)staged)[i] = cl_half_from_float((float)v[i], CL_HALF_RTE);
        else if (dt == CLKIT_I32) ((cl_int *)staged)[i] = (cl_int)v[i];
        else ((float *)staged)[i] = (float)v[i];
    }
    cl_int err = CL_OUT_OF_HOST_MEMORY;
    cl_mem m = staged && t->ndev < MAX_BUFFERS
                   ? clCreateBuffer(t->ctx->cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                    bytes ? bytes : 1, staged, &err)
                   : NULL;
    free(staged);
    if (m) t->dev[t->ndev++] = m;
    else if (!t->s) t->s = clkit_cl_fail(t->ctx, err, "known-answer test buffer");
    return clkit_tensor_contiguous(m, dt, ndim, shape);
}

static double *download(kat *t, const clkit_tensor *x)
{
    size_t n = (size_t)clkit_numel(x), bytes = n * clkit_dtype_size(x->dtype);
    double *v = host(t, n);
    unsigned char *raw = malloc(bytes ? bytes : 1);
    cl_int err = raw && v ? clEnqueueReadBuffer(t->ctx->queue, x->buffer, CL_TRUE, 0, bytes, raw, 0,
                                                NULL, NULL)
                          : CL_OUT_OF_HOST_MEMORY;
    for (size_t i = 0; err == CL_SUCCESS && i < n; i++)
        v[i] = x->dtype == CLKIT_F16 ? cl_half_to_float(((cl_half *)raw)[i]) : ((float *)raw)[i];
    free(raw);
    if (err != CL_SUCCESS && !t->s) t->s = clkit_cl_fail(t->ctx, err, "known-answer test read");
    return err == CL_SUCCESS ? v : NULL;
}

/* Whether got matches want within tol of want's largest magnitude (and is finite). */
static bool matches(kat *t, const char *what, const double *got, const double *want, size_t n, double tol)
{
    if (t->s || !got) return false;
    double scale = 0, worst = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, isfinite(got[i]) ? fabs(got[i] - want[i]) : INFINITY);
    if (worst <= tol * fmax(scale, 1e-30)) return true;
    clkit_log(CLKIT_LOG_WARN, "known-answer test: %s is off by %.3g (%.3g of its largest value %.3g)",
              what, worst, worst / fmax(scale, 1e-30), scale);
    return false;
}

static void kat_release(kat *t)
{
    for (int i = 0; i < t->ndev; i++) clReleaseMemObject(t->dev[i]);
    for (int i = 0; i < t->nhost; i++) free(t->host[i]);
}

/* ---- the problems ---- */

/* C (M x N, f32) = A B with f16 operands, on a tensor-core tile of the path's kind (the
   heuristic's choice for CLKIT_PATH_NONE). */
static bool matmul_answers(kat *t, clkit_path path)
{
    enum { M = 100, N = 72, K = 136 };
    const int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
    double *a = inputs(t, M * K, 1), *b = inputs(t, K * N, 2), *want = host(t, M * N);
    if (t->s) return false;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            for (int k = 0; k < K; k++) want[i * N + j] += a[i * K + k] * b[k * N + j];
    clkit_tensor ta = tensor(t, CLKIT_F16, 2, sa, a), tb = tensor(t, CLKIT_F16, 2, sb, b);
    clkit_tensor tc = tensor(t, CLKIT_F32, 2, sc, NULL);
    clkit_matmul_options o = clkit_matmul_defaults();
    if (path == CLKIT_PATH_NV_MMA)
        o.config = "KERNEL=4,BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=3,GROUP_M=2";
    else if (path == CLKIT_PATH_NV_WGMMA || path == CLKIT_PATH_NV_TMA)
        o.config = "KERNEL=4,WGMMA=1,BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,WARPS_M=4,WARPS_N=1,STAGES=3,GROUP_M=2";
    else if (path == CLKIT_PATH_AMD_MFMA || path == CLKIT_PATH_AMD_WMMA)
        o.config = "KERNEL=5,BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,WAVES_M=2,WAVES_N=2,GROUP_M=2";
    if (!t->s) t->s = clkit_matmul(t->ctx, &ta, &tb, &tc, &o);
    return matches(t, "matmul C", download(t, &tc), want, M * N, 1e-4);
}

/* The reference of one causal head: o, lse and, given dout, dq, dk and dv. */
typedef struct head_ref {
    const double *q, *k, *v, *dout;
    double *o, *lse, *dq, *dk, *dv;
} head_ref;

enum { AB = 1, AH = 2, AL = 80 };

static void attention_head(const head_ref *h, double scale, int dim)
{
    double p[AL], dp[AL];
    for (int i = 0; i < AL; i++) {
        double m = -INFINITY, sum = 0, delta = 0;
        for (int j = 0; j <= i; j++) {
            p[j] = 0;
            for (int d = 0; d < dim; d++) p[j] += h->q[i * dim + d] * h->k[j * dim + d];
            p[j] *= scale;
            m = fmax(m, p[j]);
        }
        for (int j = 0; j <= i; j++) sum += p[j] = exp(p[j] - m);
        h->lse[i] = m + log(sum);
        for (int j = 0; j <= i; j++) p[j] /= sum;
        for (int d = 0; d < dim; d++) {
            double o = 0;
            for (int j = 0; j <= i; j++) o += p[j] * h->v[j * dim + d];
            h->o[i * dim + d] = o;
            delta += o * h->dout[i * dim + d];
        }
        for (int j = 0; j <= i; j++) {
            dp[j] = 0;
            for (int d = 0; d < dim; d++) dp[j] += h->dout[i * dim + d] * h->v[j * dim + d];
            double ds = p[j] * (dp[j] - delta) * scale;
            for (int d = 0; d < dim; d++) {
                h->dq[i * dim + d] += ds * h->k[j * dim + d];
                h->dk[j * dim + d] += ds * h->q[i * dim + d];
                h->dv[j * dim + d] += p[j] * h->dout[i * dim + d];
            }
        }
    }
}

/* Causal f16 attention, forward then backward, B 1, H 2, L 80 (no tile divides it), head dim
   dim: 64, and 128, whose backward on Hopper passes dS through memory. */
static bool attention_answers(kat *t, int dim)
{
    const size_t n = (size_t)AB * AH * AL * dim, rows = (size_t)AB * AH * AL;
    const int64_t shape[4] = {AB, AH, AL, dim}, lshape[3] = {AB, AH, AL};
    double *q = inputs(t, n, 3), *k = inputs(t, n, 4), *v = inputs(t, n, 5), *dout = inputs(t, n, 6);
    double *o = host(t, n), *lse = host(t, rows), *dq = host(t, n), *dk = host(t, n), *dv = host(t, n);
    if (t->s) return false;
    const double scale = 1.0 / sqrt((double)dim);
    for (int h = 0; h < AB * AH; h++) {
        size_t at = (size_t)h * AL * dim;
        head_ref r = {q + at, k + at, v + at, dout + at, o + at, lse + (size_t)h * AL, dq + at, dk + at, dv + at};
        attention_head(&r, scale, dim);
    }
    clkit_tensor tq = tensor(t, CLKIT_F16, 4, shape, q), tk = tensor(t, CLKIT_F16, 4, shape, k);
    clkit_tensor tv = tensor(t, CLKIT_F16, 4, shape, v), tdo = tensor(t, CLKIT_F16, 4, shape, dout);
    clkit_tensor to = tensor(t, CLKIT_F16, 4, shape, NULL), tl = tensor(t, CLKIT_F32, 3, lshape, NULL);
    clkit_tensor tdq = tensor(t, CLKIT_F16, 4, shape, NULL), tdk = tensor(t, CLKIT_F16, 4, shape, NULL);
    clkit_tensor tdv = tensor(t, CLKIT_F16, 4, shape, NULL);
    clkit_attention_options opt = clkit_attention_defaults();
    opt.causal = 1;
    if (!t->s) t->s = clkit_attention_forward(t->ctx, &tq, &tk, &tv, &opt, &to, &tl);
    if (!t->s) t->s = clkit_attention_backward(t->ctx, &tq, &tk, &tv, &to, &tdo, &tl, &opt, &tdq, &tdk, &tdv);
    /* f16 outputs, and P and dS rounded to f16 on the way into the second products. */
    return matches(t, "attention o", download(t, &to), o, n, 2e-2) &&
           matches(t, "attention lse", download(t, &tl), lse, rows, 1e-3) &&
           matches(t, "attention dq", download(t, &tdq), dq, n, 3e-2) &&
           matches(t, "attention dk", download(t, &tdk), dk, n, 3e-2) &&
           matches(t, "attention dv", download(t, &tdv), dv, n, 3e-2);
}

enum { DH = 2, DL = 300, DD = 64 };

/* Decoding (flash-decoding's split keys): f16, one query in each of two heads that share a kv
   head, 300 keys, D 64, not causal. */
static bool decode_answers(kat *t)
{
    const int64_t qs[4] = {1, DH, 1, DD}, ks[4] = {1, 1, DL, DD}, ls[3] = {1, DH, 1};
    double *q = inputs(t, DH * DD, 7), *k = inputs(t, DL * DD, 8), *v = inputs(t, DL * DD, 9);
    double *o = host(t, DH * DD), *lse = host(t, DH), p[DL];
    if (t->s) return false;
    const double scale = 1.0 / sqrt((double)DD);
    for (int h = 0; h < DH; h++) {
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < DL; j++) {
            p[j] = 0;
            for (int d = 0; d < DD; d++) p[j] += q[h * DD + d] * k[j * DD + d] * scale;
            m = fmax(m, p[j]);
        }
        for (int j = 0; j < DL; j++) sum += p[j] = exp(p[j] - m);
        lse[h] = m + log(sum);
        for (int d = 0; d < DD; d++)
            for (int j = 0; j < DL; j++) o[h * DD + d] += p[j] / sum * v[j * DD + d];
    }
    clkit_tensor tq = tensor(t, CLKIT_F16, 4, qs, q), tk = tensor(t, CLKIT_F16, 4, ks, k);
    clkit_tensor tv = tensor(t, CLKIT_F16, 4, ks, v), to = tensor(t, CLKIT_F16, 4, qs, NULL);
    clkit_tensor tl = tensor(t, CLKIT_F32, 3, ls, NULL);
    clkit_attention_options opt = clkit_attention_defaults();
    if (!t->s) t->s = clkit_attention_forward(t->ctx, &tq, &tk, &tv, &opt, &to, &tl);
    return matches(t, "decoding o", download(t, &to), o, DH * DD, 1e-2) &&
           matches(t, "decoding lse", download(t, &tl), lse, DH, 1e-3);
}

enum { CT = 48, CD = 64, CV = 392 };

/* Summed loss of x W^T (f16, no bias) and its gradients dx and dW, as the reference. */
static void linear_ce(const double *x, const double *w, const double *y, double *loss, double *dx, double *dw)
{
    double z[CV];
    *loss = 0;
    for (int r = 0; r < CT; r++) {
        double m = -INFINITY, sum = 0;
        for (int c = 0; c < CV; c++) {
            z[c] = 0;
            for (int d = 0; d < CD; d++) z[c] += x[r * CD + d] * w[c * CD + d];
            m = fmax(m, z[c]);
        }
        for (int c = 0; c < CV; c++) sum += exp(z[c] - m);
        *loss += m + log(sum) - z[(int)y[r]];
        for (int c = 0; c < CV; c++) {
            double g = exp(z[c] - m) / sum - (c == (int)y[r]);
            for (int d = 0; d < CD; d++) {
                dx[r * CD + d] += g * w[c * CD + d];
                dw[c * CD + d] += g * x[r * CD + d];
            }
        }
    }
}

/* Fused linear + cross-entropy, f16, summed: T 48, D 64, V 392 (no tile divides V). */
static bool cross_entropy_answers(kat *t)
{
    const int64_t sx[2] = {CT, CD}, sw[2] = {CV, CD}, st[1] = {CT}, sl[1] = {1};
    double *x = inputs(t, CT * CD, 7), *w = inputs(t, CV * CD, 8), *y = host(t, CT);
    double *dx = host(t, CT * CD), *dw = host(t, CV * CD), loss;
    if (t->s) return false;
    for (int r = 0; r < CT; r++) y[r] = (r * 37) % CV;
    linear_ce(x, w, y, &loss, dx, dw);
    clkit_tensor tx = tensor(t, CLKIT_F16, 2, sx, x), tw = tensor(t, CLKIT_F16, 2, sw, w);
    clkit_tensor ty = tensor(t, CLKIT_I32, 1, st, y), tl = tensor(t, CLKIT_F32, 1, sl, NULL);
    clkit_tensor tdx = tensor(t, CLKIT_F16, 2, sx, NULL), tdw = tensor(t, CLKIT_F16, 2, sw, NULL);
    clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
    o.reduction = CLKIT_REDUCTION_SUM;
    if (!t->s) t->s = clkit_linear_cross_entropy(t->ctx, &tx, &tw, NULL, &ty, &o, &tl, &tdx, &tdw, NULL);
    return matches(t, "linear cross-entropy loss", download(t, &tl), &loss, 1, 1e-3) &&
           matches(t, "linear cross-entropy dx", download(t, &tdx), dx, CT * CD, 1e-2) &&
           matches(t, "linear cross-entropy dweight", download(t, &tdw), dw, CV * CD, 1e-2);
}

enum { RM = 5, RN = 300 };

/* Row softmax of a (5, 300) f32 matrix: rows that no team divides. */
static bool softmax_answers(kat *t)
{
    const int64_t shape[2] = {RM, RN};
    double *x = inputs(t, RM * RN, 9), *want = host(t, RM * RN);
    if (t->s) return false;
    for (int r = 0; r < RM; r++) {
        double m = -INFINITY, sum = 0;
        for (int c = 0; c < RN; c++) m = fmax(m, x[r * RN + c]);
        for (int c = 0; c < RN; c++) sum += exp(x[r * RN + c] - m);
        for (int c = 0; c < RN; c++) want[r * RN + c] = exp(x[r * RN + c] - m) / sum;
    }
    clkit_tensor tx = tensor(t, CLKIT_F32, 2, shape, x), ty = tensor(t, CLKIT_F32, 2, shape, NULL);
    if (!t->s) t->s = clkit_softmax(t->ctx, &tx, &ty);
    return matches(t, "softmax", download(t, &ty), want, RM * RN, 1e-5);
}

/* Layer norm forward of a (5, 300) f32 matrix with weight and bias. */
static bool layernorm_answers(kat *t)
{
    const int64_t shape[2] = {RM, RN}, line[1] = {RN};
    double *x = inputs(t, RM * RN, 10), *w = inputs(t, RN, 11), *b = inputs(t, RN, 12);
    double *want = host(t, RM * RN);
    if (t->s) return false;
    for (int r = 0; r < RM; r++) {
        double mean = 0, var = 0;
        for (int c = 0; c < RN; c++) mean += x[r * RN + c] / RN;
        for (int c = 0; c < RN; c++) var += (x[r * RN + c] - mean) * (x[r * RN + c] - mean) / RN;
        for (int c = 0; c < RN; c++)
            want[r * RN + c] = (x[r * RN + c] - mean) / sqrt(var + 1e-5) * w[c] + b[c];
    }
    clkit_tensor tx = tensor(t, CLKIT_F32, 2, shape, x), ty = tensor(t, CLKIT_F32, 2, shape, NULL);
    clkit_tensor tw = tensor(t, CLKIT_F32, 1, line, w), tb = tensor(t, CLKIT_F32, 1, line, b);
    if (!t->s) t->s = clkit_layernorm_forward(t->ctx, &tx, &tw, &tb, 1e-5f, &ty, NULL, NULL);
    return matches(t, "layer norm", download(t, &ty), want, RM * RN, 1e-5);
}

bool clkit_selftest_run(clkit_context *ctx, clkit_path path, clkit_family family)
{
    kat t = {.ctx = ctx};
    bool recording = ctx->recording; /* the test's kernels are not the caller's to time */
    ctx->recording = false;
    bool ok = family == CLKIT_FAMILY_MATMUL          ? matmul_answers(&t, path)
              : family == CLKIT_FAMILY_ATTENTION     ? attention_answers(&t, 64) && attention_answers(&t, 128) && decode_answers(&t)
              : family == CLKIT_FAMILY_CROSS_ENTROPY ? cross_entropy_answers(&t)
              : family == CLKIT_FAMILY_SOFTMAX       ? softmax_answers(&t)
                                                     : layernorm_answers(&t);
    if (t.s) clkit_log(CLKIT_LOG_WARN, "known-answer test could not run: %s", clkit_last_error(ctx));
    ctx->recording = recording;
    kat_release(&t);
    clkit_clear_error(ctx);
    return ok;
}

/* Causal self-attention forward and backward, f32: o = softmax(q k^T / sqrt(D) + mask) v with
   its log-sum-exp per row from clkit_attention_forward, then dq, dk and dv for a gradient dout
   of o from clkit_attention_backward, all checked against the CPU in double.
   Build: cc attention.c $(pkg-config --cflags --libs clkit) -lm */
#include <clkit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define B 1  /* batch */
#define H 2  /* heads */
#define L 64 /* sequence length */
#define D 32 /* head dimension: 16, 32, 64, 128 or 256 */
#define N (B * H * L * D)

enum { Q, K, V, DOUT, O, DQ, DK, DV, NT }; /* the (B, H, L, D) tensors: inputs, then outputs */
static const char *names[NT] = {"q", "k", "v", "dout", "o", "dq", "dk", "dv"};

static float uniform(unsigned *seed) /* in [-1, 1) */
{
    *seed = *seed * 1664525u + 1013904223u;
    return (float)(*seed >> 8) / (float)(1u << 23) - 1.0f;
}

/* o, dq, dk and dv of one (batch, head) slice in double, as the definition says: p = softmax
   of the scaled, masked scores; dv = p^T dout; dp = dout v^T; ds = p (dp - rowsum(p dp));
   dq = scale ds k; dk = scale ds^T q. */
static void reference(const float *q, const float *k, const float *v, const float *dout, double *o,
                      double *dq, double *dk, double *dv)
{
    double scale = 1 / sqrt(D), p[L], dp[L];
    for (int i = 0; i < L * D; i++) dk[i] = dv[i] = 0;
    for (int i = 0; i < L; i++) {
        double max = -INFINITY, sum = 0, dot = 0;
        for (int j = 0; j <= i; j++) { /* causal: query i sees keys 0..i */
            p[j] = 0;
            for (int d = 0; d < D; d++) p[j] += scale * q[i * D + d] * k[j * D + d];
            max = fmax(max, p[j]);
        }
        for (int j = 0; j <= i; j++) sum += p[j] = exp(p[j] - max);
        for (int d = 0; d < D; d++) o[i * D + d] = dq[i * D + d] = 0;
        for (int j = 0; j <= i; j++) {
            p[j] /= sum;
            dp[j] = 0;
            for (int d = 0; d < D; d++) {
                o[i * D + d] += p[j] * v[j * D + d];
                dv[j * D + d] += p[j] * dout[i * D + d];
                dp[j] += (double)dout[i * D + d] * v[j * D + d];
            }
            dot += p[j] * dp[j];
        }
        for (int j = 0; j <= i; j++)
            for (int d = 0; d < D; d++) {
                double ds = p[j] * (dp[j] - dot) * scale;
                dq[i * D + d] += ds * k[j * D + d];
                dk[j * D + d] += ds * q[i * D + d];
            }
    }
}

int main(void)
{
    clkit_context *ctx;
    clkit_status s = clkit_context_create(&ctx, NULL);
    if (s != CLKIT_OK) {
        fprintf(stderr, "no context: %s\n", clkit_status_string(s));
        return 1;
    }
    cl_context cl;
    cl_command_queue queue;
    clkit_context_cl(ctx, &cl, &queue, NULL);

    static float host[NT][N];
    unsigned seed = 3;
    for (int i = Q; i <= DOUT; i++)
        for (int j = 0; j < N; j++) host[i][j] = uniform(&seed);
    cl_mem buf[NT] = {0}, lse_buf = NULL;
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < NT && err == CL_SUCCESS; i++) {
        buf[i] = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof host[i], NULL, &err);
        if (buf[i] && i <= DOUT)
            err = clEnqueueWriteBuffer(queue, buf[i], CL_TRUE, 0, sizeof host[i], host[i], 0, NULL, NULL);
    }
    if (err == CL_SUCCESS) lse_buf = clCreateBuffer(cl, CL_MEM_READ_WRITE, B * H * L * sizeof(float), NULL, &err);

    int ok = 0;
    if (err != CL_SUCCESS) {
        fprintf(stderr, "buffers: OpenCL error %d\n", err);
        goto done;
    }
    int64_t shape[4] = {B, H, L, D};
    clkit_tensor t[NT];
    for (int i = 0; i < NT; i++) t[i] = clkit_tensor_contiguous(buf[i], CLKIT_F32, 4, shape);
    clkit_tensor lse = clkit_tensor_contiguous(lse_buf, CLKIT_F32, 3, shape);
    clkit_attention_options opt = clkit_attention_defaults(); /* scale 1 / sqrt(D) */
    opt.causal = 1;
    /* The backward takes the forward's o and lse; the in-order queue runs them in turn. */
    s = clkit_attention_forward(ctx, &t[Q], &t[K], &t[V], &opt, &t[O], &lse);
    if (s == CLKIT_OK)
        s = clkit_attention_backward(ctx, &t[Q], &t[K], &t[V], &t[O], &t[DOUT], &lse, &opt, &t[DQ], &t[DK],
                                     &t[DV]);
    if (s == CLKIT_OK) s = clkit_finish(ctx);
    if (s != CLKIT_OK) {
        fprintf(stderr, "attention: %s\n", clkit_last_error(ctx));
        goto done;
    }
    for (int i = O; i < NT && err == CL_SUCCESS; i++)
        err = clEnqueueReadBuffer(queue, buf[i], CL_TRUE, 0, sizeof host[i], host[i], 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "read: OpenCL error %d\n", err);
        goto done;
    }

    /* Each output's largest error against the largest magnitude of its reference. */
    static double want[NT][L * D];
    double err_max[NT] = {0}, mag[NT] = {0};
    for (int bh = 0; bh < B * H; bh++) {
        size_t at = (size_t)bh * L * D;
        reference(host[Q] + at, host[K] + at, host[V] + at, host[DOUT] + at, want[O], want[DQ], want[DK],
                  want[DV]);
        for (int i = O; i < NT; i++)
            for (int j = 0; j < L * D; j++) {
                err_max[i] = fmax(err_max[i], fabs(host[i][at + j] - want[i][j]));
                mag[i] = fmax(mag[i], fabs(want[i][j]));
            }
    }
    ok = 1;
    for (int i = O; i < NT; i++) {
        int good = err_max[i] <= 1e-4 * mag[i];
        printf("%-2s: largest error %.2g of its largest %.2g (%s)\n", names[i], err_max[i], mag[i],
               good ? "ok" : "FAIL");
        ok &= good;
    }

done:
    for (int i = 0; i < NT; i++)
        if (buf[i]) clReleaseMemObject(buf[i]);
    if (lse_buf) clReleaseMemObject(lse_buf);
    clkit_context_release(ctx);
    return !ok;
}

/* One training step of a linear classifier over V classes, logits = x W^T + b: the mean
   cross-entropy loss and its gradients dW and db from clkit_linear_cross_entropy (the T x V
   logits are never stored whole), a step of gradient descent W -= lr dW, b -= lr db on the
   host, and the loss again, which must have gone down. The first loss and dW are checked
   against the CPU.
   Build: cc linear_cross_entropy.c $(pkg-config --cflags --libs clkit) -lm */
#include <clkit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define T 64  /* tokens */
#define D 32  /* features */
#define V 200 /* classes */

static float uniform(unsigned *seed) /* in [-1, 1) */
{
    *seed = *seed * 1664525u + 1013904223u;
    return (float)(*seed >> 8) / (float)(1u << 23) - 1.0f;
}

/* Host and device copies of the step's tensors. */
typedef struct model {
    float x[T * D], w[V * D], b[V], dw[V * D], db[V], loss;
    int32_t y[T];
    cl_mem xb, wb, bb, yb, dwb, dbb, lossb;
} model;

static cl_int upload(clkit_context *ctx, cl_mem m, const void *host, size_t bytes)
{
    cl_command_queue queue;
    clkit_context_cl(ctx, NULL, &queue, NULL);
    return clEnqueueWriteBuffer(queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
}

static cl_int download(clkit_context *ctx, cl_mem m, void *host, size_t bytes)
{
    cl_command_queue queue;
    clkit_context_cl(ctx, NULL, &queue, NULL);
    return clEnqueueReadBuffer(queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
}

/* The loss of the current weights into m->loss, and with grads its gradients into m->dw and
   m->db (dx is not asked for: x is data here, no earlier layer learns from it). */
static int evaluate(clkit_context *ctx, model *m, int grads)
{
    int64_t xs[2] = {T, D}, ws[2] = {V, D}, vs[1] = {V}, ts[1] = {T}, one[1] = {1};
    clkit_tensor x = clkit_tensor_contiguous(m->xb, CLKIT_F32, 2, xs);
    clkit_tensor w = clkit_tensor_contiguous(m->wb, CLKIT_F32, 2, ws);
    clkit_tensor b = clkit_tensor_contiguous(m->bb, CLKIT_F32, 1, vs);
    clkit_tensor y = clkit_tensor_contiguous(m->yb, CLKIT_I32, 1, ts);
    clkit_tensor l = clkit_tensor_contiguous(m->lossb, CLKIT_F32, 1, one);
    clkit_tensor dw = clkit_tensor_contiguous(m->dwb, CLKIT_F32, 2, ws);
    clkit_tensor db = clkit_tensor_contiguous(m->dbb, CLKIT_F32, 1, vs);
    /* opt NULL: mean over the tokens, no ignored target, no smoothing */
    clkit_status s = clkit_linear_cross_entropy(ctx, &x, &w, &b, &y, NULL, &l, NULL, grads ? &dw : NULL,
                                                grads ? &db : NULL);
    if (s == CLKIT_OK) s = clkit_finish(ctx);
    if (s != CLKIT_OK) {
        fprintf(stderr, "linear cross-entropy: %s\n", clkit_last_error(ctx));
        return 1;
    }
    cl_int err = download(ctx, m->lossb, &m->loss, sizeof m->loss);
    if (grads && err == CL_SUCCESS) err = download(ctx, m->dwb, m->dw, sizeof m->dw);
    if (grads && err == CL_SUCCESS) err = download(ctx, m->dbb, m->db, sizeof m->db);
    if (err != CL_SUCCESS) fprintf(stderr, "read: OpenCL error %d\n", err);
    return err != CL_SUCCESS;
}

/* The loss and dW in double on the CPU; whether the device's are within f32 error of them. */
static int matches_cpu(const model *m)
{
    static double dw[V * D];
    double total = 0, p[V];
    for (int i = 0; i < V * D; i++) dw[i] = 0;
    for (int t = 0; t < T; t++) {
        double max = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) {
            p[v] = m->b[v];
            for (int d = 0; d < D; d++) p[v] += (double)m->x[t * D + d] * m->w[v * D + d];
            max = fmax(max, p[v]);
        }
        for (int v = 0; v < V; v++) sum += exp(p[v] - max);
        total += max + log(sum) - p[m->y[t]];
        for (int v = 0; v < V; v++) {
            double g = (exp(p[v] - max) / sum - (v == m->y[t])) / T; /* d loss / d logit */
            for (int d = 0; d < D; d++) dw[v * D + d] += g * m->x[t * D + d];
        }
    }
    double want = total / T, dw_err = 0, dw_max = 0;
    for (int i = 0; i < V * D; i++) {
        dw_err = fmax(dw_err, fabs(m->dw[i] - dw[i]));
        dw_max = fmax(dw_max, fabs(dw[i]));
    }
    int ok = fabs(m->loss - want) <= 1e-5 * want && dw_err <= 1e-4 * dw_max;
    printf("loss %.6f (CPU %.6f), dW largest error %.2g of its largest %.2g (%s)\n", m->loss, want,
           dw_err, dw_max, ok ? "ok" : "FAIL");
    return ok;
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
    clkit_context_cl(ctx, &cl, NULL, NULL);
    static model m;
    unsigned seed = 7;
    for (int i = 0; i < T * D; i++) m.x[i] = uniform(&seed);
    for (int i = 0; i < V * D; i++) m.w[i] = 0.1f * uniform(&seed);
    for (int v = 0; v < V; v++) m.b[v] = 0;
    for (int t = 0; t < T; t++) m.y[t] = (int32_t)(t * 37 % V);

    cl_int err = CL_SUCCESS;
    m.xb = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof m.x, NULL, &err);
    if (m.xb) m.wb = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof m.w, NULL, &err);
    if (m.wb) m.bb = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof m.b, NULL, &err);
    if (m.bb) m.yb = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof m.y, NULL, &err);
    if (m.yb) m.dwb = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof m.dw, NULL, &err);
    if (m.dwb) m.dbb = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof m.db, NULL, &err);
    if (m.dbb) m.lossb = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof m.loss, NULL, &err);
    if (m.lossb) err = upload(ctx, m.xb, m.x, sizeof m.x);
    if (err == CL_SUCCESS) err = upload(ctx, m.yb, m.y, sizeof m.y);
    if (err == CL_SUCCESS) err = upload(ctx, m.wb, m.w, sizeof m.w);
    if (err == CL_SUCCESS) err = upload(ctx, m.bb, m.b, sizeof m.b);

    int ok = 0;
    if (err != CL_SUCCESS) {
        fprintf(stderr, "buffers: OpenCL error %d\n", err);
    } else if (evaluate(ctx, &m, 1) == 0 && matches_cpu(&m)) {
        float before = m.loss, lr = 2.0f;
        for (int i = 0; i < V * D; i++) m.w[i] -= lr * m.dw[i];
        for (int v = 0; v < V; v++) m.b[v] -= lr * m.db[v];
        err = upload(ctx, m.wb, m.w, sizeof m.w);
        if (err == CL_SUCCESS) err = upload(ctx, m.bb, m.b, sizeof m.b);
        if (err != CL_SUCCESS) {
            fprintf(stderr, "write: OpenCL error %d\n", err);
        } else if (evaluate(ctx, &m, 0) == 0) {
            ok = m.loss < before;
            printf("after one step (lr %g): loss %.6f -> %.6f (%s)\n", lr, before, m.loss, ok ? "ok" : "FAIL");
        }
    }

    cl_mem all[] = {m.xb, m.wb, m.bb, m.yb, m.dwb, m.dbb, m.lossb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) clReleaseMemObject(all[i]);
    clkit_context_release(ctx);
    return !ok;
}

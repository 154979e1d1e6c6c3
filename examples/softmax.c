/* Row softmax of a 256 x 1000 f32 matrix on the default device ($CLKIT_DEVICE, else the first
   GPU, else the first device), checked against the CPU: the README's "Using the library".
   Build: cc softmax.c $(pkg-config --cflags --libs clkit) -lm */
#include <clkit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS 256
#define COLS 1000

int main(void)
{
    clkit_context *ctx;
    clkit_status s = clkit_context_create(&ctx, NULL);
    if (s != CLKIT_OK) { /* the reason is also logged on stderr */
        fprintf(stderr, "no context: %s\n", clkit_status_string(s));
        return 1;
    }
    cl_context cl;
    cl_command_queue queue;
    clkit_context_cl(ctx, &cl, &queue, NULL);

    size_t n = (size_t)ROWS * COLS, bytes = n * sizeof(float);
    float *x = malloc(bytes), *y = malloc(bytes);
    cl_int err = CL_OUT_OF_HOST_MEMORY;
    cl_mem xb = NULL, yb = NULL;
    int bad = 1;
    if (x && y && (xb = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err)) &&
        (yb = clCreateBuffer(cl, CL_MEM_READ_WRITE, bytes, NULL, &err))) {
        for (size_t i = 0; i < n; i++) x[i] = (float)(i * 7919 % 1000) / 100.0f;
        /* The context's queue is in order: ops enqueued after this write see its data. */
        err = clEnqueueWriteBuffer(queue, xb, CL_TRUE, 0, bytes, x, 0, NULL, NULL);
    }
    if (err != CL_SUCCESS) {
        fprintf(stderr, "buffers: OpenCL error %d\n", err);
        goto done;
    }

    int64_t shape[2] = {ROWS, COLS};
    clkit_tensor xt = clkit_tensor_contiguous(xb, CLKIT_F32, 2, shape);
    clkit_tensor yt = clkit_tensor_contiguous(yb, CLKIT_F32, 2, shape);
    s = clkit_softmax(ctx, &xt, &yt); /* enqueues and returns */
    if (s == CLKIT_OK) s = clkit_finish(ctx); /* waits, like a stream sync */
    if (s != CLKIT_OK) { /* clkit_last_error begins with the status: "bad or mismatched shape: ..." */
        fprintf(stderr, "softmax: %s\n", clkit_last_error(ctx));
        goto done;
    }
    if ((err = clEnqueueReadBuffer(queue, yb, CL_TRUE, 0, bytes, y, 0, NULL, NULL)) != CL_SUCCESS) {
        fprintf(stderr, "read: OpenCL error %d\n", err);
        goto done;
    }

    double worst = 0; /* relative error against the CPU, in double */
    for (size_t r = 0; r < ROWS; r++) {
        const float *xr = x + r * COLS;
        double max = xr[0], sum = 0;
        for (size_t c = 1; c < COLS; c++) max = fmax(max, xr[c]);
        for (size_t c = 0; c < COLS; c++) sum += exp(xr[c] - max);
        for (size_t c = 0; c < COLS; c++) {
            double want = exp(xr[c] - max) / sum;
            worst = fmax(worst, fabs(y[r * COLS + c] - want) / want);
        }
    }
    bad = !(worst < 2e-5); /* f32 exp and sums; the tests allow the same */
    printf("softmax %d x %d: largest relative error %.2g (%s)\n", ROWS, COLS, worst, bad ? "FAIL" : "ok");

done:
    if (xb) clReleaseMemObject(xb);
    if (yb) clReleaseMemObject(yb);
    free(x);
    free(y);
    clkit_context_release(ctx);
    return bad;
}

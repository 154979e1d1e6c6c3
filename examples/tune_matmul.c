/* Tuning from C: clkit_tune_matmul times candidate configurations of one matmul (here within a
   budget of a second, past which it starts no new candidate; without one it tries them all)
   and stores the fastest in the tuned-config cache, where later calls of that shape, layout
   and dtype find it. Then the tuned call runs and is checked against the CPU. Each candidate
   is built the first time it is tried: on a CPU (PoCL) that takes seconds, so a run that
   reaches candidates no earlier run built takes longer. `clkit tune` does this from the shell.
   Usage: tune_matmul [CACHE_DIR]   (default $CLKIT_CACHE_DIR, else ~/.cache/clkit)
   Build: cc tune_matmul.c $(pkg-config --cflags --libs clkit) -lm */
#include <clkit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define M 128
#define N 96
#define K 80

static float uniform(unsigned *seed) /* in [-1, 1) */
{
    *seed = *seed * 1664525u + 1013904223u;
    return (float)(*seed >> 8) / (float)(1u << 23) - 1.0f;
}

/* Called after each candidate: one line of progress, and the fastest config so far. */
static void progress(void *user, int done, int total, const char *config, double ms, double best_ms)
{
    char *best = user;
    if (ms >= 0 && ms <= best_ms) snprintf(best, 512, "%s", config);
    if (ms >= 0) printf("  [%d/%d] %.3f ms  %s\n", done, total, ms, config);
    else printf("  [%d/%d] cannot run here  %s\n", done, total, config);
}

int main(int argc, char **argv)
{
    clkit_options opt = {0};
    opt.cache_dir = argc > 1 ? argv[1] : NULL;
    clkit_context *ctx;
    clkit_status s = clkit_context_create(&ctx, &opt);
    if (s != CLKIT_OK) {
        fprintf(stderr, "no context: %s\n", clkit_status_string(s));
        return 1;
    }
    cl_context cl;
    cl_command_queue queue;
    clkit_context_cl(ctx, &cl, &queue, NULL);

    static float a[M * K], b[K * N], c[M * N];
    unsigned seed = 5;
    for (int i = 0; i < M * K; i++) a[i] = uniform(&seed);
    for (int i = 0; i < K * N; i++) b[i] = uniform(&seed);
    cl_int err = CL_SUCCESS;
    cl_mem ab = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof a, NULL, &err), bb = NULL, cb = NULL;
    if (ab) bb = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof b, NULL, &err);
    if (bb) cb = clCreateBuffer(cl, CL_MEM_READ_WRITE, sizeof c, NULL, &err);
    if (cb) err = clEnqueueWriteBuffer(queue, ab, CL_TRUE, 0, sizeof a, a, 0, NULL, NULL);
    if (err == CL_SUCCESS) err = clEnqueueWriteBuffer(queue, bb, CL_TRUE, 0, sizeof b, b, 0, NULL, NULL);
    int ok = 0;
    if (err != CL_SUCCESS) {
        fprintf(stderr, "buffers: OpenCL error %d\n", err);
        goto done;
    }

    int64_t as[2] = {M, K}, bs[2] = {K, N}, cs[2] = {M, N};
    clkit_tensor at = clkit_tensor_contiguous(ab, CLKIT_F32, 2, as);
    clkit_tensor bt = clkit_tensor_contiguous(bb, CLKIT_F32, 2, bs);
    clkit_tensor ct = clkit_tensor_contiguous(cb, CLKIT_F32, 2, cs);
    char best[512] = "";
    clkit_tune_options topt = {.budget_s = 1, .progress = progress, .user = best};
    printf("tuning matmul %d x %d x %d, f32, cache %s\n", M, N, K,
           *clkit_cache_dir(ctx) ? clkit_cache_dir(ctx) : "(none: not saved)");
    s = clkit_tune_matmul(ctx, &at, &bt, &ct, NULL, &topt); /* C is left alone */
    if (s == CLKIT_OK) {
        printf("stored: %s\n", best);
        s = clkit_matmul(ctx, &at, &bt, &ct, NULL); /* finds the entry just stored */
    }
    if (s == CLKIT_OK) s = clkit_finish(ctx);
    if (s != CLKIT_OK) {
        fprintf(stderr, "tune / matmul: %s\n", clkit_last_error(ctx));
        goto done;
    }
    if ((err = clEnqueueReadBuffer(queue, cb, CL_TRUE, 0, sizeof c, c, 0, NULL, NULL)) != CL_SUCCESS) {
        fprintf(stderr, "read: OpenCL error %d\n", err);
        goto done;
    }
    double worst = 0; /* error over the f32 accumulation bound, K * 2^-24 * sum |a b| */
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double want = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                want += (double)a[i * K + k] * b[k * N + j];
                mag += fabs((double)a[i * K + k] * b[k * N + j]);
            }
            worst = fmax(worst, fabs(c[i * N + j] - want) / (K * 0x1p-24 * mag + 1e-30));
        }
    ok = worst <= 1;
    printf("tuned matmul: largest error %.2f of the bound (%s)\n", worst, ok ? "ok" : "FAIL");

done:
    if (ab) clReleaseMemObject(ab);
    if (bb) clReleaseMemObject(bb);
    if (cb) clReleaseMemObject(cb);
    clkit_context_release(ctx);
    return !ok;
}

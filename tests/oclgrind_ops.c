/* Runs every op once per dtype on small ragged shapes (edges, strides, every kernel family and
   matmul kernel) for `oclgrind --check-api --data-races`, which reports out-of-bounds
   accesses, races and API misuse that results alone would not show. CI fails on any report.
   Exits nonzero if an op itself fails. */
#include <stdio.h>

#include "clkit.h"
#include "ref/ref.h"

static int failures;
static double values[8192];

static void expect_ok(clkit_context *ctx, clkit_status s, const char *what)
{
    if (s == CLKIT_OK) return;
    fprintf(stderr, "%s: %s\n", what, clkit_last_error(ctx));
    failures++;
}

#define RUN(call) expect_ok(ctx, (call), #call)

/* A contiguous tensor over a buffer of exactly its size, so that any access past the view is
   past the buffer, where oclgrind sees it. */
static clkit_tensor exact(clkit_context *ctx, clkit_dtype dt, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return clkit_tensor_contiguous(ref_upload(ctx, dt, (size_t)n, values), dt, ndim, shape);
}

static void release(int n, clkit_tensor *ts)
{
    for (int i = 0; i < n; i++) clReleaseMemObject(ts[i].buffer);
}

static void elementwise(clkit_context *ctx, clkit_dtype dt)
{
    int64_t n[1] = {1001}, n3[1] = {3001};
    clkit_tensor t[4] = {exact(ctx, dt, 1, n), exact(ctx, dt, 1, n), exact(ctx, dt, 1, n), exact(ctx, dt, 1, n3)};
    RUN(clkit_add(ctx, &t[0], &t[1], &t[2]));
    RUN(clkit_dropout(ctx, &t[0], &t[2], 0.3f, 7));
    clkit_tensor strided = t[3];
    strided.shape[0] = 1001, strided.strides[0] = 3;
    RUN(clkit_add(ctx, &strided, &t[1], &t[2]));
    RUN(clkit_dropout(ctx, &strided, &t[2], 0.3f, 7));
    release(4, t);
}

static void rows(clkit_context *ctx, clkit_dtype dt)
{
    static const int64_t shapes[][2] = {{7, 301}, {1, 5000}, {33, 45}};
    for (int i = 0; i < 3; i++) {
        clkit_tensor t[2] = {exact(ctx, dt, 2, shapes[i]), exact(ctx, dt, 2, shapes[i])};
        RUN(clkit_softmax(ctx, &t[0], &t[1]));
        RUN(clkit_swizzle2d(ctx, &t[0], &t[1], 4));
        clkit_tensor transposed = t[1];
        transposed.strides[0] = 1, transposed.strides[1] = shapes[i][0];
        RUN(clkit_copy(ctx, &t[0], &transposed));
        release(2, t);
    }
}

static void matmuls(clkit_context *ctx, clkit_dtype dt)
{
    static const char *configs[] = {
        "KERNEL=0,TILE=8", "KERNEL=1,TILE=8",
        "KERNEL=2,BLOCK_M=32,BLOCK_N=32,BLOCK_K=8,THREAD_M=4,THREAD_N=4,GROUP_M=2",
        "KERNEL=3,SK_COLS=8,SK_K=8,SK_M=4",
    };
    int64_t sa[2] = {37, 29}, sb[2] = {29, 41}, sc[2] = {37, 41};
    clkit_tensor t[3] = {exact(ctx, dt, 2, sa), exact(ctx, dt, 2, sb), exact(ctx, CLKIT_F32, 2, sc)};
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        clkit_matmul_options o = clkit_matmul_defaults();
        o.config = configs[i];
        o.beta = 0.5f;
        RUN(clkit_matmul(ctx, &t[0], &t[1], &t[2], &o));
    }
    release(3, t);
}

static void grayscale(clkit_context *ctx)
{
    int64_t rgb_shape[3] = {3, 17, 23}, gray_shape[2] = {17, 23};
    for (int u8 = 0; u8 < 2; u8++) {
        clkit_dtype dt = u8 ? CLKIT_U8 : CLKIT_F32;
        clkit_tensor t[2] = {exact(ctx, dt, 3, rgb_shape), exact(ctx, dt, 2, gray_shape)};
        RUN(clkit_rgb_to_gray(ctx, &t[0], &t[1]));
        release(2, t);
    }
}

int main(void)
{
    clkit_context *ctx;
    if (clkit_context_create(&ctx, NULL) != CLKIT_OK) return 1;
    ref_fill_random(values, sizeof values / sizeof *values, CLKIT_F32, 0, 2, 1);
    for (int d = CLKIT_F32; d <= CLKIT_BF16; d++) {
        elementwise(ctx, (clkit_dtype)d);
        rows(ctx, (clkit_dtype)d);
        matmuls(ctx, (clkit_dtype)d);
    }
    grayscale(ctx);
    RUN(clkit_finish(ctx));
    clkit_context_release(ctx);
    printf("oclgrind_ops: %d failed\n", failures);
    return failures != 0;
}

/* clkit_add against a double-precision reference: every length class, strided and offset
   views, every float dtype, in place; and every kind of bad input. */
#include "util.h"

#include <string.h>

static const clkit_dtype float_dtypes[] = {CLKIT_F32, CLKIT_F16, CLKIT_BF16};

static void check_dense(clkit_context *ctx, clkit_dtype dt, size_t n)
{
    double *x = malloc((n + 1) * sizeof *x), *y = malloc((n + 1) * sizeof *y);
    double *want = malloc((n + 1) * sizeof *want), *got = malloc((n + 1) * sizeof *got);
    tu_fill_random(x, n, dt, -4, 4, 1 + n);
    tu_fill_random(y, n, dt, -4, 4, 2 + n);
    for (size_t i = 0; i < n; i++) want[i] = tu_quantize(dt, x[i] + y[i]);
    int64_t shape[1] = {(int64_t)n};
    cl_mem bx = tu_buffer(ctx, dt, n, x), by = tu_buffer(ctx, dt, n, y), bo = tu_buffer(ctx, dt, n, NULL);
    clkit_tensor tx = clkit_tensor_contiguous(bx, dt, 1, shape), ty = clkit_tensor_contiguous(by, dt, 1, shape),
                 to = clkit_tensor_contiguous(bo, dt, 1, shape);
    TU_CHECK(clkit_add(ctx, &tx, &ty, &to));
    tu_read(ctx, bo, dt, n, got);
    tu_assert_close(got, want, n, 0, tu_rtol(dt) * 0.01, "add dense");
    clReleaseMemObject(bx);
    clReleaseMemObject(by);
    clReleaseMemObject(bo);
    free(x), free(y), free(want), free(got);
}

START_TEST(lengths)
{
    clkit_context *ctx = tu_ctx();
    static const size_t ns[] = {1, 2, 3, 4, 5, 7, 31, 127, 255, 256, 257, 1000, 4099, 65537, 1 << 20};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) check_dense(ctx, float_dtypes[d], ns[i]);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(zero_length_is_noop)
{
    clkit_context *ctx = tu_ctx();
    cl_mem b = tu_buffer(ctx, CLKIT_F32, 4, NULL);
    int64_t shape[1] = {0};
    clkit_tensor t = clkit_tensor_contiguous(b, CLKIT_F32, 1, shape);
    TU_CHECK(clkit_add(ctx, &t, &t, &t));
    TU_CHECK(clkit_finish(ctx));
    clReleaseMemObject(b);
    clkit_context_release(ctx);
}
END_TEST

/* x: a 3-D view with a padded row and an element offset; y: transposed; out: reversed strides
   through a negative stride. Exercises the strided kernel and view bounds. */
START_TEST(strided_views)
{
    clkit_context *ctx = tu_ctx();
    for (size_t d = 0; d < 3; d++) {
        clkit_dtype dt = float_dtypes[d];
        const int64_t A = 3, B = 5, C = 7, total = 4 * 8 * 9 + 16;
        double *xs = malloc(total * sizeof *xs), *ys = malloc(total * sizeof *ys);
        double *got = malloc(total * sizeof *got);
        tu_fill_random(xs, total, dt, -2, 2, 10 + d);
        tu_fill_random(ys, total, dt, -2, 2, 20 + d);
        cl_mem bx = tu_buffer(ctx, dt, total, xs), by = tu_buffer(ctx, dt, total, ys),
               bo = tu_buffer(ctx, dt, total, NULL);
        int64_t shape[3] = {A, B, C};
        int64_t xst[3] = {8 * 9, 9, 1}, yst[3] = {1, A, A * B}, ost[3] = {-B * C, C, 1};
        size_t xoff = 3, ooff = (size_t)((A - 1) * B * C) + 2;
        clkit_tensor tx = tu_view(bx, dt, 3, shape, xst, xoff), ty = tu_view(by, dt, 3, shape, yst, 0),
                     to = tu_view(bo, dt, 3, shape, ost, ooff);
        TU_CHECK(clkit_add(ctx, &tx, &ty, &to));
        tu_read(ctx, bo, dt, total, got);
        for (int64_t a = 0; a < A; a++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t c = 0; c < C; c++) {
                    double want = tu_quantize(dt, xs[xoff + a * xst[0] + b * xst[1] + c] +
                                                      ys[a + b * yst[1] + c * yst[2]]);
                    double g = got[(int64_t)ooff + a * ost[0] + b * ost[1] + c];
                    ck_assert_msg(tu_close(g, want, 0, 1e-6), "%s [%lld,%lld,%lld] %g != %g",
                                  clkit_dtype_name(dt), (long long)a, (long long)b, (long long)c, g, want);
                }
        clReleaseMemObject(bx);
        clReleaseMemObject(by);
        clReleaseMemObject(bo);
        free(xs), free(ys), free(got);
    }
    clkit_context_release(ctx);
}
END_TEST

START_TEST(in_place)
{
    clkit_context *ctx = tu_ctx();
    const size_t n = 1001;
    double x[1001], y[1001], got[1001];
    tu_fill_random(x, n, CLKIT_F32, -1, 1, 5);
    tu_fill_random(y, n, CLKIT_F32, -1, 1, 6);
    int64_t shape[1] = {(int64_t)n};
    cl_mem bx = tu_buffer(ctx, CLKIT_F32, n, x), by = tu_buffer(ctx, CLKIT_F32, n, y);
    clkit_tensor tx = clkit_tensor_contiguous(bx, CLKIT_F32, 1, shape), ty = clkit_tensor_contiguous(by, CLKIT_F32, 1, shape);
    TU_CHECK(clkit_add(ctx, &tx, &ty, &tx));
    tu_read(ctx, bx, CLKIT_F32, n, got);
    for (size_t i = 0; i < n; i++) ck_assert(tu_close(got[i], (float)(x[i] + y[i]), 0, 1e-7));
    clReleaseMemObject(bx);
    clReleaseMemObject(by);
    clkit_context_release(ctx);
}
END_TEST

/* A sub-buffer is a window on its parent: views through the two handles may share bytes, and
   the overlap rules see through them (exact in place allowed, any other overlap refused). */
START_TEST(overlap_through_sub_buffer)
{
    clkit_context *ctx = tu_ctx();
    cl_device_id dev;
    TU_CHECK(clkit_context_cl(ctx, NULL, NULL, &dev));
    cl_uint bits = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL);
    size_t align = bits >= 32 ? bits / 8 : 4, n = align / 4; /* floats in one alignment step */
    double *v = malloc(4 * n * sizeof *v), *got = malloc(4 * n * sizeof *got);
    for (size_t i = 0; i < 4 * n; i++) v[i] = (double)i;
    cl_mem parent = tu_buffer(ctx, CLKIT_F32, 4 * n, v);
    cl_buffer_region region = {align, 2 * align};
    cl_int err;
    cl_mem sub = clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
    ck_assert_msg(sub != NULL, "clCreateSubBuffer: %d", err);
    int64_t shape[1] = {(int64_t)n}, unit[1] = {1};
    clkit_tensor x = tu_view(sub, CLKIT_F32, 1, shape, unit, 0);
    clkit_tensor shifted = tu_view(parent, CLKIT_F32, 1, shape, unit, n + 1);
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_add(ctx, &x, &x, &shifted));
    tu_assert_unchanged(ctx, parent, CLKIT_F32, 4 * n, v);
    clkit_tensor same = tu_view(parent, CLKIT_F32, 1, shape, unit, n);
    TU_CHECK(clkit_add(ctx, &x, &x, &same));
    tu_read(ctx, parent, CLKIT_F32, 4 * n, got);
    for (size_t i = 0; i < 4 * n; i++)
        ck_assert_msg(got[i] == (i >= n && i < 2 * n ? 2 * v[i] : v[i]), "element %zu is %g", i, got[i]);
    clReleaseMemObject(sub), clReleaseMemObject(parent);
    free(v), free(got);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(bad_input)
{
    tu_guard guard = tu_guard_begin();
    clkit_context *ctx = guard.ctx;
    cl_mem b = guard.in, c = guard.out;
    int64_t s16[1] = {16}, s8[1] = {8}, s65[1] = {65}, sneg[1] = {-1};
    clkit_tensor x = clkit_tensor_contiguous(b, CLKIT_F32, 1, s16), out = clkit_tensor_contiguous(c, CLKIT_F32, 1, s16);
    ck_assert_int_eq(clkit_add(NULL, &x, &x, &out), CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_add(ctx, NULL, &x, &out));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_add(ctx, &x, &x, NULL));
    clkit_tensor t = x;
    t.buffer = NULL;
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_add(ctx, &t, &x, &out));
    t = x;
    t.dtype = CLKIT_U8;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_add(ctx, &t, &t, &t));
    t = x;
    t.dtype = (clkit_dtype)99;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_add(ctx, &t, &x, &out));
    t = out;
    t.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_add(ctx, &x, &x, &t));
    t = x;
    t.ndim = 0;
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_add(ctx, &t, &x, &out));
    t.ndim = 5;
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_add(ctx, &t, &x, &out));
    t = clkit_tensor_contiguous(b, CLKIT_F32, 1, sneg);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_add(ctx, &t, &t, &t));
    t = clkit_tensor_contiguous(b, CLKIT_F32, 1, s8);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_add(ctx, &t, &x, &out));
    t = clkit_tensor_contiguous(b, CLKIT_F32, 1, s65);
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_add(ctx, &t, &t, &t));
    t = x;
    t.offset = 49 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_add(ctx, &t, &x, &out));
    t.offset = 2;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_add(ctx, &t, &x, &out));
    t = x;
    t.strides[0] = 5;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_add(ctx, &t, &x, &out));
    t = x;
    t.strides[0] = -1;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_add(ctx, &t, &x, &out));
    t = out;
    t.strides[0] = 0;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_add(ctx, &x, &x, &t));
    int64_t huge[2] = {INT64_MAX / 2, 4};
    t = clkit_tensor_contiguous(b, CLKIT_F32, 2, huge);
    TU_EXPECT(CLKIT_ERR_OVERFLOW, clkit_add(ctx, &t, &t, &t));
    t = x;
    t.strides[0] = INT64_MAX / 4;
    TU_EXPECT(CLKIT_ERR_OVERFLOW, clkit_add(ctx, &t, &x, &out));
    /* out partly overlapping x: only the exact same view may be written in place */
    clkit_tensor shifted = x;
    shifted.offset = 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_add(ctx, &x, &x, &shifted));
    tu_guard_end(&guard);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("add");
    TCase *tc = tu_tcase("add");
    tcase_add_test(tc, lengths);
    tcase_add_test(tc, zero_length_is_noop);
    tcase_add_test(tc, strided_views);
    tcase_add_test(tc, in_place);
    tcase_add_test(tc, overlap_through_sub_buffer);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

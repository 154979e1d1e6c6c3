/* clkit_swizzle2d: the reference against Triton's documented example and as a permutation;
   the device against the reference for several (M, N, group), every element size, strided
   views; and every kind of bad input. */
#include "util.h"

#include <stdio.h>
#include <string.h>

static const clkit_dtype all_dtypes[] = {CLKIT_F32, CLKIT_F16, CLKIT_BF16,
                                         CLKIT_U8,  CLKIT_I32, CLKIT_I64};

static const int64_t cases[][3] = {{4, 4, 2}, {1, 1, 1}, {1, 7, 3}, {7, 1, 2}, {5, 3, 1},
                                   {9, 13, 4}, {13, 9, 9}, {6, 10, 100}, {64, 33, 8},
                                   {100, 257, 7}, {300, 200, 64}};
#define NCASES (sizeof cases / sizeof *cases)

/* The example in tl.swizzle2d's docstring: a 4 x 4 grid with groups of 2 rows. */
START_TEST(reference_example)
{
    static const int64_t want[4][4] = {{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}};
    int64_t got[4][4];
    for (int64_t i = 0; i < 4; i++)
        for (int64_t j = 0; j < 4; j++) {
            int64_t ni, nj;
            ref_swizzle2d_index(i, j, 4, 4, 2, &ni, &nj);
            got[ni][nj] = i * 4 + j;
        }
    ck_assert(memcmp(got, want, sizeof got) == 0);
}
END_TEST

START_TEST(reference_is_permutation)
{
    for (size_t c = 0; c < NCASES; c++) {
        int64_t m = cases[c][0], n = cases[c][1], g = cases[c][2];
        char *hit = calloc((size_t)(m * n), 1);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int64_t ni, nj;
                ref_swizzle2d_index(i, j, m, n, g, &ni, &nj);
                ck_assert_msg(ni >= 0 && ni < m && nj >= 0 && nj < n && !hit[ni * n + nj],
                              "(%lld, %lld) in %lldx%lld/%lld goes to (%lld, %lld) twice or outside",
                              (long long)i, (long long)j, (long long)m, (long long)n, (long long)g,
                              (long long)ni, (long long)nj);
                hit[ni * n + nj] = 1;
            }
        free(hit);
    }
}
END_TEST

/* x (view xs, offset xo) swizzled into out (os, oo); every element of out's buffer checked:
   the view against the reference, the rest still the sentinel. */
static void check_swizzle(clkit_context *ctx, clkit_dtype dt, int64_t m, int64_t n, int g,
                          const int64_t xs[2], size_t xo, const int64_t os[2], size_t oo,
                          size_t size)
{
    double *x = malloc(size * sizeof *x), *want = malloc(size * sizeof *want);
    double *got = malloc(size * sizeof *got);
    tu_fill_random(x, size, dt, dt == CLKIT_U8 ? 0 : -1000, dt == CLKIT_U8 ? 256 : 1000,
                   (uint64_t)(m * n + g));
    cl_mem bx = tu_buffer(ctx, dt, size, x), bo = tu_buffer(ctx, dt, size, NULL);
    tu_read(ctx, bo, dt, size, want);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            int64_t ni, nj;
            ref_swizzle2d_index(i, j, m, n, g, &ni, &nj);
            want[(int64_t)oo + ni * os[0] + nj * os[1]] = x[(int64_t)xo + i * xs[0] + j * xs[1]];
        }
    int64_t shape[2] = {m, n};
    clkit_tensor tx = tu_view(bx, dt, 2, shape, xs, xo), to = tu_view(bo, dt, 2, shape, os, oo);
    TU_CHECK(clkit_swizzle2d(ctx, &tx, &to, g));
    tu_read(ctx, bo, dt, size, got);
    char what[96];
    snprintf(what, sizeof what, "swizzle %s %lldx%lld group %d", clkit_dtype_name(dt), (long long)m,
             (long long)n, g);
    tu_assert_close(got, want, size, 0, 0, what);
    clReleaseMemObject(bx);
    clReleaseMemObject(bo);
    free(x), free(want), free(got);
}

START_TEST(matches_reference)
{
    clkit_context *ctx = tu_ctx();
    for (size_t c = 0; c < NCASES; c++)
        for (size_t d = 0; d < 6; d++) {
            int64_t m = cases[c][0], n = cases[c][1];
            const int64_t rm[2] = {n, 1};
            check_swizzle(ctx, all_dtypes[d], m, n, (int)cases[c][2], rm, 0, rm, 0, (size_t)(m * n));
        }
    clkit_context_release(ctx);
}
END_TEST

/* x column-major with an offset, out with padded rows and reversed columns. */
START_TEST(strided_views)
{
    clkit_context *ctx = tu_ctx();
    const int64_t m = 37, n = 29, pad = 3;
    const int64_t xs[2] = {1, m}, os[2] = {n + pad, -1};
    const size_t size = (size_t)(m * (n + pad) + 8);
    for (size_t d = 0; d < 6; d++) {
        check_swizzle(ctx, all_dtypes[d], m, n, 5, xs, 8, os, (size_t)(n - 1), size);
        check_swizzle(ctx, all_dtypes[d], m, n, 64, os, (size_t)(n - 1), xs, 3, size);
    }
    clkit_context_release(ctx);
}
END_TEST

START_TEST(zero_size_is_noop)
{
    clkit_context *ctx = tu_ctx();
    cl_mem b = tu_buffer(ctx, CLKIT_I32, 4, NULL), c = tu_buffer(ctx, CLKIT_I32, 4, NULL);
    int64_t shape[2] = {0, 5};
    clkit_tensor x = clkit_tensor_contiguous(b, CLKIT_I32, 2, shape);
    clkit_tensor out = clkit_tensor_contiguous(c, CLKIT_I32, 2, shape);
    TU_CHECK(clkit_swizzle2d(ctx, &x, &out, 4));
    TU_CHECK(clkit_finish(ctx));
    clReleaseMemObject(b);
    clReleaseMemObject(c);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(bad_input)
{
    tu_guard guard = tu_guard_begin();
    clkit_context *ctx = guard.ctx;
    cl_mem b = guard.in, c = guard.out;
    int64_t s44[2] = {4, 4}, s45[2] = {4, 5}, s16[1] = {16}, s3[3] = {1, 4, 4}, neg[2] = {-4, 4};
    clkit_tensor x = clkit_tensor_contiguous(b, CLKIT_F32, 2, s44);
    clkit_tensor out = clkit_tensor_contiguous(c, CLKIT_F32, 2, s44);
    ck_assert_int_eq(clkit_swizzle2d(NULL, &x, &out, 2), CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_swizzle2d(ctx, NULL, &out, 2));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_swizzle2d(ctx, &x, NULL, 2));
    clkit_tensor t = out;
    t.buffer = NULL;
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_swizzle2d(ctx, &x, &t, 2));
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_swizzle2d(ctx, &x, &out, 0));
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_swizzle2d(ctx, &x, &out, -3));
    t = out;
    t.dtype = CLKIT_I32;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_swizzle2d(ctx, &x, &t, 2));
    t.dtype = (clkit_dtype)99;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_swizzle2d(ctx, &x, &t, 2));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 1, s16);
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_swizzle2d(ctx, &x, &t, 2));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 3, s3);
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_swizzle2d(ctx, &x, &t, 2));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 2, s45);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_swizzle2d(ctx, &x, &t, 2));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 2, neg);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_swizzle2d(ctx, &t, &t, 2));
    t = out;
    t.offset = 49 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_swizzle2d(ctx, &x, &t, 2));
    t.offset = 3;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_swizzle2d(ctx, &x, &t, 2));
    t = out;
    t.strides[1] = -1;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_swizzle2d(ctx, &x, &t, 2));
    t = out;
    t.strides[0] = INT64_MAX / 2;
    TU_EXPECT(CLKIT_ERR_OVERFLOW, clkit_swizzle2d(ctx, &x, &t, 2));
    t = out;
    t.strides[0] = 1;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_swizzle2d(ctx, &x, &t, 2));
    /* no overlap at all, not even the same view */
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_swizzle2d(ctx, &out, &out, 2));
    t = out;
    t.offset = 12 * 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_swizzle2d(ctx, &out, &t, 2));
    tu_guard_end(&guard);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("swizzle");
    TCase *tc = tu_tcase("swizzle");
    tcase_add_test(tc, reference_example);
    tcase_add_test(tc, reference_is_permutation);
    tcase_add_test(tc, matches_reference);
    tcase_add_test(tc, strided_views);
    tcase_add_test(tc, zero_size_is_noop);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* clkit_rgb_to_gray against the double reference: odd sizes, planar, interleaved, padded,
   reversed and offset layouts of both images, u8 and f32; and every kind of bad input. */
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Strides (plane, row, column) of the rgb view and (row, column) of gray, their element
   offsets, and the buffer sizes they need, for an h x w image. */
typedef struct layout {
    const char *name;
    int64_t rgb[3], gray[2];
    size_t rgb_off, gray_off, rgb_size, gray_size;
} layout;

static layout planar(int64_t h, int64_t w)
{
    return (layout){"planar", {h * w, w, 1}, {w, 1}, 0, 0, (size_t)(3 * h * w), (size_t)(h * w)};
}

/* (H, W, 3) interleaved pixels into a column-major gray image */
static layout interleaved(int64_t h, int64_t w)
{
    return (layout){"interleaved", {1, 3 * w, 3}, {1, h}, 0, 0, (size_t)(3 * h * w),
                    (size_t)(h * w)};
}

/* padded rows, planes in reverse order, gray upside down, both offset */
static layout padded_reversed(int64_t h, int64_t w)
{
    int64_t row = w + 3, plane = h * row + 5;
    return (layout){"padded+reversed", {-plane, row, 1}, {-(w + 1), 1},
                    (size_t)(2 * plane + 2), (size_t)((h - 1) * (w + 1) + 4),
                    (size_t)(3 * plane + 2), (size_t)(h * (w + 1) + 4)};
}

/* u8: the nearest integer, or either neighbour where the exact value is within 1e-3 of a
   tie (f32 arithmetic may land on either side). */
static int gray_ok(clkit_dtype dt, double got, double want)
{
    if (dt == CLKIT_F32) return tu_close(got, want, 1e-4, 1e-6);
    double f = floor(want);
    if (fabs(want - f - 0.5) < 1e-3) return got == f || got == f + 1;
    return got == floor(want + 0.5);
}

static void check_gray(clkit_context *ctx, clkit_dtype dt, int64_t h, int64_t w, const layout *l)
{
    size_t n = (size_t)(h * w);
    double *planes = malloc(3 * n * sizeof *planes), *want = malloc(n * sizeof *want);
    double *rgb = malloc(l->rgb_size * sizeof *rgb), *got = malloc(l->gray_size * sizeof *got);
    double *before = malloc(l->gray_size * sizeof *before);
    tu_fill_random(rgb, l->rgb_size, dt, 0, 256, (uint64_t)(h * 1000 + w));
    for (int64_t c = 0; c < 3; c++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++)
                planes[(c * h + y) * w + x] =
                    rgb[(int64_t)l->rgb_off + c * l->rgb[0] + y * l->rgb[1] + x * l->rgb[2]];
    ref_rgb_to_gray(planes, want, h, w);
    cl_mem bi = tu_buffer(ctx, dt, l->rgb_size, rgb), bo = tu_buffer(ctx, dt, l->gray_size, NULL);
    tu_read(ctx, bo, dt, l->gray_size, before);
    int64_t s3[3] = {3, h, w}, s2[2] = {h, w};
    clkit_tensor ti = tu_view(bi, dt, 3, s3, l->rgb, l->rgb_off);
    clkit_tensor to = tu_view(bo, dt, 2, s2, l->gray, l->gray_off);
    TU_CHECK(clkit_rgb_to_gray(ctx, &ti, &to));
    tu_read(ctx, bo, dt, l->gray_size, got);
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            size_t at = (size_t)((int64_t)l->gray_off + y * l->gray[0] + x * l->gray[1]);
            ck_assert_msg(gray_ok(dt, got[at], want[y * w + x]),
                          "%s %s %lldx%lld [%lld,%lld]: %.9g, expected %.9g",
                          clkit_dtype_name(dt), l->name, (long long)h, (long long)w,
                          (long long)y, (long long)x, got[at], want[y * w + x]);
            before[at] = got[at];
        }
    ck_assert_msg(memcmp(before, got, l->gray_size * sizeof *got) == 0,
                  "%s %s %lldx%lld: wrote outside the gray view", clkit_dtype_name(dt), l->name,
                  (long long)h, (long long)w);
    clReleaseMemObject(bi);
    clReleaseMemObject(bo);
    free(planes), free(want), free(rgb), free(got), free(before);
}

static const int64_t sizes[][2] = {{1, 1}, {1, 9}, {5, 1}, {2, 3}, {7, 13}, {31, 33},
                                   {64, 64}, {17, 257}, {1066, 1600}};

START_TEST(planar_sizes)
{
    clkit_context *ctx = tu_ctx();
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        layout l = planar(sizes[i][0], sizes[i][1]);
        check_gray(ctx, CLKIT_U8, sizes[i][0], sizes[i][1], &l);
        check_gray(ctx, CLKIT_F32, sizes[i][0], sizes[i][1], &l);
    }
    clkit_context_release(ctx);
}
END_TEST

START_TEST(strided_layouts)
{
    clkit_context *ctx = tu_ctx();
    for (size_t i = 0; i + 1 < sizeof sizes / sizeof *sizes; i++)
        for (int d = 0; d < 2; d++) {
            clkit_dtype dt = d ? CLKIT_F32 : CLKIT_U8;
            layout a = interleaved(sizes[i][0], sizes[i][1]);
            layout b = padded_reversed(sizes[i][0], sizes[i][1]);
            check_gray(ctx, dt, sizes[i][0], sizes[i][1], &a);
            check_gray(ctx, dt, sizes[i][0], sizes[i][1], &b);
        }
    layout b = padded_reversed(333, 517);
    check_gray(ctx, CLKIT_U8, 333, 517, &b);
    clkit_context_release(ctx);
}
END_TEST

/* Saturated channels: white stays 255 (the weights sum to 0.9999), black 0. */
START_TEST(extremes)
{
    clkit_context *ctx = tu_ctx();
    double rgb[6] = {255, 0, 255, 0, 255, 0}, got[2];
    cl_mem bi = tu_buffer(ctx, CLKIT_U8, 6, rgb), bo = tu_buffer(ctx, CLKIT_U8, 2, NULL);
    int64_t s3[3] = {3, 1, 2}, s2[2] = {1, 2};
    clkit_tensor ti = clkit_tensor_contiguous(bi, CLKIT_U8, 3, s3);
    clkit_tensor to = clkit_tensor_contiguous(bo, CLKIT_U8, 2, s2);
    TU_CHECK(clkit_rgb_to_gray(ctx, &ti, &to));
    tu_read(ctx, bo, CLKIT_U8, 2, got);
    ck_assert(got[0] == 255 && got[1] == 0);
    clReleaseMemObject(bi);
    clReleaseMemObject(bo);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(zero_size_is_noop)
{
    clkit_context *ctx = tu_ctx();
    cl_mem b = tu_buffer(ctx, CLKIT_U8, 4, NULL);
    int64_t s3[3] = {3, 0, 5}, s2[2] = {0, 5};
    clkit_tensor ti = clkit_tensor_contiguous(b, CLKIT_U8, 3, s3);
    clkit_tensor to = clkit_tensor_contiguous(b, CLKIT_U8, 2, s2);
    TU_CHECK(clkit_rgb_to_gray(ctx, &ti, &to));
    TU_CHECK(clkit_finish(ctx));
    clReleaseMemObject(b);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(bad_input)
{
    tu_guard guard = tu_guard_begin();
    clkit_context *ctx = guard.ctx;
    cl_mem b = guard.in, c = guard.out;
    int64_t s3[3] = {3, 4, 4}, s2[2] = {4, 4};
    clkit_tensor rgb = clkit_tensor_contiguous(b, CLKIT_F32, 3, s3);
    clkit_tensor gray = clkit_tensor_contiguous(c, CLKIT_F32, 2, s2);
    ck_assert_int_eq(clkit_rgb_to_gray(NULL, &rgb, &gray), CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_rgb_to_gray(ctx, NULL, &gray));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_rgb_to_gray(ctx, &rgb, NULL));
    clkit_tensor t = gray;
    t.buffer = NULL;
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_rgb_to_gray(ctx, &rgb, &t));
    /* dtypes: u8 or f32 only, and the same for both */
    static const clkit_dtype others[] = {CLKIT_F16, CLKIT_BF16, CLKIT_I32, CLKIT_I64, (clkit_dtype)99};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        clkit_tensor r = rgb, g = gray;
        r.dtype = g.dtype = others[i];
        TU_EXPECT(CLKIT_ERR_DTYPE, clkit_rgb_to_gray(ctx, &r, &g));
    }
    t = gray;
    t.dtype = CLKIT_U8;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_rgb_to_gray(ctx, &rgb, &t));
    /* shapes: rgb must be (3, H, W) for gray (H, W) */
    int64_t bad3[][3] = {{4, 4, 4}, {1, 4, 4}, {3, 5, 4}, {3, 4, 3}};
    for (size_t i = 0; i < 4; i++) {
        clkit_tensor r = clkit_tensor_contiguous(b, CLKIT_F32, 3, bad3[i]);
        TU_EXPECT(CLKIT_ERR_SHAPE, clkit_rgb_to_gray(ctx, &r, &gray));
    }
    int64_t s23[2] = {4, 3}, neg[3] = {3, -1, 4};
    t = clkit_tensor_contiguous(c, CLKIT_F32, 2, s23);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_rgb_to_gray(ctx, &rgb, &t));
    t = clkit_tensor_contiguous(b, CLKIT_F32, 3, neg);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_rgb_to_gray(ctx, &t, &gray));
    /* ndim */
    t = clkit_tensor_contiguous(c, CLKIT_F32, 3, s3);
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_rgb_to_gray(ctx, &rgb, &t));
    t = clkit_tensor_contiguous(b, CLKIT_F32, 2, s2);
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_rgb_to_gray(ctx, &t, &gray));
    /* bounds, alignment, overflow */
    t = rgb;
    t.offset = 20 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_rgb_to_gray(ctx, &t, &gray));
    t = gray;
    t.offset = 49 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_rgb_to_gray(ctx, &rgb, &t));
    t.offset = 1;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_rgb_to_gray(ctx, &rgb, &t));
    t = gray;
    t.strides[0] = -4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_rgb_to_gray(ctx, &rgb, &t));
    t = rgb;
    t.strides[0] = INT64_MAX / 2;
    TU_EXPECT(CLKIT_ERR_OVERFLOW, clkit_rgb_to_gray(ctx, &t, &gray));
    /* gray writing a pixel twice, or over the image it reads */
    t = gray;
    t.strides[0] = 2;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_rgb_to_gray(ctx, &rgb, &t));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 3, s3);
    clkit_tensor g = gray;
    g.offset = 40 * 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_rgb_to_gray(ctx, &t, &g));
    tu_guard_end(&guard);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grayscale");
    TCase *tc = tu_tcase("grayscale");
    tcase_add_test(tc, planar_sizes);
    tcase_add_test(tc, strided_layouts);
    tcase_add_test(tc, extremes);
    tcase_add_test(tc, zero_size_is_noop);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* clkit_dropout: the CPU Philox against Random123's known answers, then the device exactly
   against the CPU stream for every length class, dtype, p, strided and offset views and in
   place (exactness also proves the result does not depend on the launch); the kept fraction;
   and every kind of bad input. */
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const clkit_dtype float_dtypes[] = {CLKIT_F32, CLKIT_F16, CLKIT_BF16};
static const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f, 1.0f};

START_TEST(philox_known_answers)
{
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu},
                                       {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int t = 0; t < 3; t++) {
        uint32_t got[4];
        ref_philox4x32_10(ctr[t], key[t], got);
        for (int i = 0; i < 4; i++)
            ck_assert_msg(got[i] == want[t][i], "vector %d word %d: %08x, expected %08x", t, i,
                          got[i], want[t][i]);
    }
}
END_TEST

/* The reference's index mapping: element i draws word i % 4 of the call for counter i / 4,
   whose high word carries bits 32.. of i / 4. */
START_TEST(reference_stream)
{
    const uint64_t seed = 0x0123456789abcdefull, i = (5ull << 34) + 4 * 7 + 2;
    const uint32_t ctr[4] = {7, 5, 0, 0}, key[2] = {0x89abcdefu, 0x01234567u};
    uint32_t r[4];
    ref_philox4x32_10(ctr, key, r);
    double u = (r[2] >> 8) * 0x1p-24;
    float scale = 1.0f / (1.0f - (float)u), kept = 3.0f * scale;
    ck_assert(ref_dropout_one(3.0, i, u, seed) == kept);
    ck_assert(ref_dropout_one(3.0, i, nextafter(u, 1.0), seed) == 0.0);
    ck_assert(ref_dropout_one(-2.5, i, 0.0, seed) == -2.5);
    ck_assert(ref_dropout_one(-2.5, i, 1.0, seed) == 0.0);
}
END_TEST

/* Runs dropout over x (view tx) into out (view to) and checks every element of the view
   exactly against the reference; elements outside it must keep the sentinel. */
static void check_views(clkit_context *ctx, clkit_dtype dt, const clkit_tensor *tx,
                        const double *xs, const clkit_tensor *to, size_t out_size, float p,
                        uint64_t seed)
{
    double *want = malloc(out_size * sizeof *want), *got = malloc(out_size * sizeof *got);
    tu_read(ctx, to->buffer, dt, out_size, want);
    int64_t n = 1;
    for (int d = 0; d < tx->ndim; d++) n *= tx->shape[d];
    for (int64_t i = 0; i < n; i++) {
        int64_t xo = (int64_t)(tx->offset / clkit_dtype_size(dt));
        int64_t oo = (int64_t)(to->offset / clkit_dtype_size(dt));
        for (int64_t d = tx->ndim - 1, r = i; d >= 0; r /= tx->shape[d], d--) {
            xo += r % tx->shape[d] * tx->strides[d];
            oo += r % tx->shape[d] * to->strides[d];
        }
        want[oo] = tu_quantize(dt, ref_dropout_one(xs[xo], (uint64_t)i, p, seed));
    }
    TU_CHECK(clkit_dropout(ctx, tx, to, p, seed));
    tu_read(ctx, to->buffer, dt, out_size, got);
    char what[96];
    snprintf(what, sizeof what, "dropout %s n=%lld p=%g", clkit_dtype_name(dt), (long long)n,
             (double)p);
    tu_assert_close(got, want, out_size, 0, 0, what);
    free(want), free(got);
}

START_TEST(lengths)
{
    clkit_context *ctx = tu_ctx();
    static const size_t ns[] = {1, 3, 4, 5, 1023, (1 << 20) + 3};
    for (size_t d = 0; d < 3; d++)
        for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
            clkit_dtype dt = float_dtypes[d];
            size_t n = ns[k];
            double *x = malloc(n * sizeof *x);
            tu_fill_random(x, n, dt, -4, 4, n + d);
            int64_t shape[1] = {(int64_t)n};
            cl_mem bx = tu_buffer(ctx, dt, n, x), bo = tu_buffer(ctx, dt, n, NULL);
            clkit_tensor tx = clkit_tensor_contiguous(bx, dt, 1, shape);
            clkit_tensor to = clkit_tensor_contiguous(bo, dt, 1, shape);
            for (size_t j = 0; j < sizeof ps / sizeof *ps; j++)
                check_views(ctx, dt, &tx, x, &to, n, ps[j], j & 1 ? 0xfedcba9876543210ull : 42 + j);
            clReleaseMemObject(bx);
            clReleaseMemObject(bo);
            free(x);
        }
    clkit_context_release(ctx);
}
END_TEST

/* x: 3-D with padded rows and an offset; out: transposed through a negative stride. */
START_TEST(strided_views)
{
    clkit_context *ctx = tu_ctx();
    const int64_t A = 3, B = 7, C = 11, total = A * (B + 1) * (C + 2) + 5;
    int64_t shape[3] = {A, B, C};
    int64_t xst[3] = {(B + 1) * (C + 2), C + 2, 1}, ost[3] = {1, -A * C, A};
    for (size_t d = 0; d < 3; d++) {
        clkit_dtype dt = float_dtypes[d];
        double *x = malloc(total * sizeof *x);
        tu_fill_random(x, total, dt, -2, 2, 77 + d);
        cl_mem bx = tu_buffer(ctx, dt, total, x), bo = tu_buffer(ctx, dt, total, NULL);
        clkit_tensor tx = tu_view(bx, dt, 3, shape, xst, 5);
        clkit_tensor to = tu_view(bo, dt, 3, shape, ost, (size_t)(A * C * (B - 1)) + 1);
        for (size_t j = 0; j < sizeof ps / sizeof *ps; j++)
            check_views(ctx, dt, &tx, x, &to, total, ps[j], 1000 + j);
        /* 4-D, every dim size > 1, the innermost strided */
        int64_t s4[4] = {2, 3, 4, 5}, st4[4] = {2 * 60, 2 * 20, 2 * 5, 2};
        clkit_tensor x4 = tu_view(bx, dt, 4, s4, st4, 1), o4 = tu_view(bo, dt, 4, s4, st4, 0);
        check_views(ctx, dt, &x4, x, &o4, total, 0.3f, 99);
        clReleaseMemObject(bx);
        clReleaseMemObject(bo);
        free(x);
    }
    clkit_context_release(ctx);
}
END_TEST

START_TEST(in_place)
{
    clkit_context *ctx = tu_ctx();
    const size_t n = 1001;
    double x[1001], want[1001], got[1001];
    tu_fill_random(x, n, CLKIT_BF16, -1, 1, 5);
    int64_t shape[2] = {7, 143}, strides[2] = {1, 7};
    cl_mem b = tu_buffer(ctx, CLKIT_BF16, n, x);
    clkit_tensor dense = clkit_tensor_contiguous(b, CLKIT_BF16, 1, (int64_t[]){(int64_t)n});
    TU_CHECK(clkit_dropout(ctx, &dense, &dense, 0.25f, 7));
    clkit_tensor cols = tu_view(b, CLKIT_BF16, 2, shape, strides, 0);
    TU_CHECK(clkit_dropout(ctx, &cols, &cols, 0.5f, 8));
    tu_read(ctx, b, CLKIT_BF16, n, got);
    for (size_t i = 0; i < n; i++) {
        double once = tu_quantize(CLKIT_BF16, ref_dropout_one(x[i], i, 0.25, 7));
        size_t row = i % 7, col = i / 7; /* element i of the column-major view is (row, col) */
        want[i] = tu_quantize(CLKIT_BF16, ref_dropout_one(once, row * 143 + col, 0.5, 8));
    }
    tu_assert_close(got, want, n, 0, 0, "in place");
    clReleaseMemObject(b);
    clkit_context_release(ctx);
}
END_TEST

/* The kept fraction is 1 - p within 5 standard deviations, kept values are x / (1 - p), and
   seeds give different masks. */
START_TEST(statistics)
{
    clkit_context *ctx = tu_ctx();
    const size_t n = 1 << 20;
    double *ones = malloc(n * sizeof *ones), *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0;
    int64_t shape[1] = {(int64_t)n};
    cl_mem bx = tu_buffer(ctx, CLKIT_F32, n, ones), bo = tu_buffer(ctx, CLKIT_F32, n, NULL);
    clkit_tensor tx = clkit_tensor_contiguous(bx, CLKIT_F32, 1, shape);
    clkit_tensor to = clkit_tensor_contiguous(bo, CLKIT_F32, 1, shape);
    for (size_t j = 1; j < 4; j++) {
        double p = ps[j];
        TU_CHECK(clkit_dropout(ctx, &tx, &to, ps[j], 1));
        tu_read(ctx, bo, CLKIT_F32, n, a);
        TU_CHECK(clkit_dropout(ctx, &tx, &to, ps[j], 2));
        tu_read(ctx, bo, CLKIT_F32, n, b);
        size_t kept = 0, differ = 0;
        float scale = 1.0f / (1.0f - ps[j]);
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(a[i] == 0.0 || a[i] == scale, "element %zu is %g", i, a[i]);
            kept += a[i] != 0.0;
            differ += (a[i] != 0.0) != (b[i] != 0.0);
        }
        double sigma = sqrt(n * p * (1 - p));
        ck_assert_msg(fabs((double)kept - n * (1 - p)) < 5 * sigma, "p=%g: kept %zu of %zu", p,
                      kept, n);
        /* two independent masks disagree with probability 2p(1-p) */
        ck_assert_msg(fabs((double)differ - n * 2 * p * (1 - p)) < 5 * sqrt(n * 0.25),
                      "p=%g: seeds 1 and 2 differ at %zu of %zu", p, differ, n);
    }
    clReleaseMemObject(bx);
    clReleaseMemObject(bo);
    free(ones), free(a), free(b);
    clkit_context_release(ctx);
}
END_TEST

/* p = 1 zeroes even inf and NaN (no inf * 0); p = 0 passes every value through. */
START_TEST(extremes)
{
    clkit_context *ctx = tu_ctx();
    double x[6] = {INFINITY, -INFINITY, NAN, (float)3e38, -0.0, 1.5}, got[6];
    int64_t shape[1] = {6};
    cl_mem bx = tu_buffer(ctx, CLKIT_F32, 6, x), bo = tu_buffer(ctx, CLKIT_F32, 6, NULL);
    clkit_tensor tx = clkit_tensor_contiguous(bx, CLKIT_F32, 1, shape);
    clkit_tensor to = clkit_tensor_contiguous(bo, CLKIT_F32, 1, shape);
    TU_CHECK(clkit_dropout(ctx, &tx, &to, 1.0f, 3));
    tu_read(ctx, bo, CLKIT_F32, 6, got);
    for (int i = 0; i < 6; i++) ck_assert_msg(got[i] == 0.0, "p=1: element %d is %g", i, got[i]);
    TU_CHECK(clkit_dropout(ctx, &tx, &to, 0.0f, 3));
    tu_read(ctx, bo, CLKIT_F32, 6, got);
    tu_assert_close(got, x, 6, 0, 0, "p=0");
    ck_assert(signbit(got[4]));
    clReleaseMemObject(bx);
    clReleaseMemObject(bo);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(zero_length_is_noop)
{
    clkit_context *ctx = tu_ctx();
    cl_mem b = tu_buffer(ctx, CLKIT_F16, 4, NULL);
    int64_t shape[2] = {3, 0};
    clkit_tensor t = clkit_tensor_contiguous(b, CLKIT_F16, 2, shape);
    TU_CHECK(clkit_dropout(ctx, &t, &t, 0.5f, 1));
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
    int64_t s16[1] = {16}, s8[1] = {8}, s65[1] = {65}, sneg[1] = {-1}, s44[2] = {4, 4};
    clkit_tensor x = clkit_tensor_contiguous(b, CLKIT_F32, 1, s16);
    clkit_tensor out = clkit_tensor_contiguous(c, CLKIT_F32, 1, s16);
    ck_assert_int_eq(clkit_dropout(NULL, &x, &out, 0.5f, 1), CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_dropout(ctx, NULL, &out, 0.5f, 1));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_dropout(ctx, &x, NULL, 0.5f, 1));
    clkit_tensor t = out;
    t.buffer = NULL;
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    static const float bad_p[] = {-0.0001f, 1.0001f, -INFINITY, INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad_p / sizeof *bad_p; i++)
        TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_dropout(ctx, &x, &out, bad_p[i], 1));
    t = out;
    t.dtype = CLKIT_U8;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_dropout(ctx, &t, &t, 0.5f, 1));
    t = out;
    t.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    t.dtype = CLKIT_I32;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    t = out;
    t.ndim = 0;
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    t.ndim = 5;
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 1, sneg);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_dropout(ctx, &t, &t, 0.5f, 1));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 1, s8);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 2, s44);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 1, s65);
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_dropout(ctx, &t, &t, 0.5f, 1));
    t = out;
    t.offset = 49 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    t.offset = 2;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    t = out;
    t.strides[0] = -1;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    t = out;
    t.strides[0] = 0;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    int64_t huge[2] = {INT64_MAX / 2, 4};
    t = clkit_tensor_contiguous(c, CLKIT_F32, 2, huge);
    TU_EXPECT(CLKIT_ERR_OVERFLOW, clkit_dropout(ctx, &t, &t, 0.5f, 1));
    t = out;
    t.strides[0] = INT64_MAX / 4;
    TU_EXPECT(CLKIT_ERR_OVERFLOW, clkit_dropout(ctx, &x, &t, 0.5f, 1));
    /* in place only as the exact same view */
    clkit_tensor shifted = out;
    shifted.offset = 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_dropout(ctx, &out, &shifted, 0.5f, 1));
    t = out;
    t.offset = 15 * 4;
    t.strides[0] = -1;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_dropout(ctx, &out, &t, 0.5f, 1));
    tu_guard_end(&guard);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dropout");
    TCase *tc = tu_tcase("dropout");
    tcase_add_test(tc, philox_known_answers);
    tcase_add_test(tc, reference_stream);
    tcase_add_test(tc, lengths);
    tcase_add_test(tc, strided_views);
    tcase_add_test(tc, in_place);
    tcase_add_test(tc, statistics);
    tcase_add_test(tc, extremes);
    tcase_add_test(tc, zero_length_is_noop);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

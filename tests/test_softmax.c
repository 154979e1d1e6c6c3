/* clkit_softmax against a double-precision reference: row lengths from 1 to 2^20 (registers
   and online paths), every float dtype, padded and offset rows, non-unit column strides, in
   place, non-finite and huge inputs; and every kind of bad input. */
#include "util.h"

#include <float.h>
#include <math.h>
#include <string.h>

static const clkit_dtype float_dtypes[] = {CLKIT_F32, CLKIT_F16, CLKIT_BF16};

/* Outputs lie in [0, 1]: rtol covers one rounding to the dtype and the f32 arithmetic; atol
   covers f16's subnormal spacing (2^-24) for the tiny outputs of long rows. */
static double atol_for(clkit_dtype dt) { return dt == CLKIT_F16 ? 6e-8 : 1e-9; }

/* Runs softmax of x (m x n values, row-major) from layout vx into layout vo and checks every
   element against the reference; elements of the output buffer outside the view must keep
   their sentinel. */
static void check(clkit_context *ctx, clkit_dtype dt, int64_t m, int64_t n, const double *x,
                  const tu_layout *vx, const tu_layout *vo, const char *what)
{
    double *xs = malloc(vx->total * sizeof *xs), *got = malloc(vo->total * sizeof *got);
    double *sentinel = malloc(vo->total * sizeof *sentinel);
    double *want = malloc((size_t)(m * n) * sizeof *want), *q = malloc((size_t)(m * n) * sizeof *q);
    ck_assert(xs && got && sentinel && want && q);
    for (size_t i = 0; i < vx->total; i++) xs[i] = 0.5;
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < n; c++) {
            q[r * n + c] = tu_quantize(dt, x[r * n + c]);
            xs[tu_at(vx, r, c)] = q[r * n + c];
        }
    ref_softmax(q, want, m, n);
    cl_mem bx = tu_buffer(ctx, dt, vx->total, xs), bo = tu_buffer(ctx, dt, vo->total, NULL);
    tu_read(ctx, bo, dt, vo->total, sentinel);
    int64_t shape[2] = {m, n}, xst[2] = {vx->rs, vx->cs}, ost[2] = {vo->rs, vo->cs};
    clkit_tensor tx = tu_view(bx, dt, 2, shape, xst, vx->offset);
    clkit_tensor to = tu_view(bo, dt, 2, shape, ost, vo->offset);
    TU_CHECK(clkit_softmax(ctx, &tx, &to));
    tu_read(ctx, bo, dt, vo->total, got);
    /* One assertion per call: Check reports every assertion to its parent process. */
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < n; c++) {
            size_t i = tu_at(vo, r, c);
            double g = got[i], w = want[r * n + c];
            if (!tu_close(g, w, atol_for(dt), tu_rtol(dt)))
                ck_abort_msg("%s %s %lldx%lld: [%lld, %lld] is %.9g, expected %.9g", what,
                             clkit_dtype_name(dt), (long long)m, (long long)n, (long long)r,
                             (long long)c, g, w);
            sentinel[i] = g;
        }
    ck_assert_msg(memcmp(sentinel, got, vo->total * sizeof *got) == 0,
                  "%s %s %lldx%lld: wrote outside the output view", what, clkit_dtype_name(dt),
                  (long long)m, (long long)n);
    clReleaseMemObject(bx);
    clReleaseMemObject(bo);
    free(xs), free(got), free(sentinel), free(want), free(q);
}

static void check_random(clkit_context *ctx, clkit_dtype dt, int64_t m, int64_t n,
                         const tu_layout *vx, const tu_layout *vo, const char *what)
{
    double *x = malloc((size_t)(m * n) * sizeof *x);
    ck_assert(x);
    tu_fill_random(x, (size_t)(m * n), dt, -8, 8, (uint64_t)(m * 7919 + n));
    check(ctx, dt, m, n, x, vx, vo, what);
    free(x);
}

/* Every length class: below, at and above the warp, the vector width and the register
   capacity of a team; primes; the tutorial's 12672; the online path. Long rows get few rows. */
START_TEST(row_lengths)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {1, 2, 3, 5, 17, 31, 32, 33, 127, 128, 255, 256, 257, 1000,
                                 1023, 1024, 1025, 4096, 4099, 7919, 12672, 32768, 65537, 1 << 20};
    static const int64_t ms[] = {1, 3, 7, 64, 129};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            int64_t n = ns[i], m = n >= 32768 ? 2 + (n == 32768) : ms[(i + d) % 5];
            tu_layout v = tu_dense(m, n);
            check_random(ctx, float_dtypes[d], m, n, &v, &v, "contiguous");
        }
    clkit_context_release(ctx);
}
END_TEST

/* More rows than the persistent grid has groups, of lengths that pack several rows per group. */
START_TEST(many_rows)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {3, 40, 300};
    for (size_t i = 0; i < 3; i++) {
        tu_layout v = tu_dense(1000, ns[i]);
        check_random(ctx, CLKIT_F32, 1000, ns[i], &v, &v, "many rows");
    }
    clkit_context_release(ctx);
}
END_TEST

/* Padded rows at an element offset, so rows start off vector alignment (and differently in x
   and out); a row stride that keeps alignment but pads; a negative row stride. */
START_TEST(padded_rows)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {5, 33, 1000, 4099, 40000};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            int64_t n = ns[i], m = n > 10000 ? 2 : 7;
            tu_layout vx = {n + 3, 1, 5, 0}, vo = {n + 11, 1, 1, 0};
            vx.total = vx.offset + (size_t)(m * vx.rs) + 2;
            vo.total = vo.offset + (size_t)(m * vo.rs);
            check_random(ctx, float_dtypes[d], m, n, &vx, &vo, "padded");
            tu_layout va = {n + 8 - n % 8, 1, 8, 0};
            va.total = va.offset + (size_t)(m * va.rs);
            check_random(ctx, float_dtypes[d], m, n, &va, &va, "aligned padded");
            tu_layout vr = {-(n + 1), 1, (size_t)((m - 1) * (n + 1)) + 1, 0};
            vr.total = vr.offset + (size_t)n + 1;
            check_random(ctx, float_dtypes[d], m, n, &vr, &vx, "negative row stride");
        }
    clkit_context_release(ctx);
}
END_TEST

/* Columns that are not adjacent: x transposed in memory, out every other element. */
START_TEST(column_stride)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {1, 7, 300, 2000, 40000};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            int64_t n = ns[i], m = n > 10000 ? 2 : 5;
            tu_layout vt = {1, m, 0, (size_t)(m * n)}, vo = {2 * n, 2, 1, (size_t)(2 * m * n + 1)};
            check_random(ctx, float_dtypes[d], m, n, &vt, &vo, "column stride");
        }
    clkit_context_release(ctx);
}
END_TEST

START_TEST(in_place)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {7, 1000, 50000};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < 3; i++) {
            clkit_dtype dt = float_dtypes[d];
            int64_t n = ns[i], m = n > 10000 ? 2 : 9;
            size_t count = (size_t)(m * n);
            double *x = malloc(count * sizeof *x), *want = malloc(count * sizeof *want);
            double *got = malloc(count * sizeof *got);
            tu_fill_random(x, count, dt, -5, 5, 40 + i);
            ref_softmax(x, want, m, n);
            int64_t shape[2] = {m, n};
            cl_mem b = tu_buffer(ctx, dt, count, x);
            clkit_tensor t = clkit_tensor_contiguous(b, dt, 2, shape);
            TU_CHECK(clkit_softmax(ctx, &t, &t));
            tu_read(ctx, b, dt, count, got);
            tu_assert_close(got, want, count, atol_for(dt), tu_rtol(dt), "in place");
            clReleaseMemObject(b);
            free(x), free(want), free(got);
        }
    clkit_context_release(ctx);
}
END_TEST

/* Rows of special values between ordinary rows, on both the register and the online paths:
   all -inf (NaN, as PyTorch), one +inf (NaN), -inf mixed in (those give 0; a leading run of
   -inf longer than an online step must not poison the running sums), huge magnitudes (finite,
   exact), the largest floats. */
static void special_rows(clkit_context *ctx, clkit_dtype dt, int64_t n)
{
    const int64_t m = 8;
    double big = dt == CLKIT_F16 ? 60000.0 : dt == CLKIT_F32 ? 1e30 : 1e38;
    double top = dt == CLKIT_F16 ? 65504.0 : dt == CLKIT_F32 ? FLT_MAX : 3.3895313892515355e38;
    double *x = malloc((size_t)(m * n) * sizeof *x);
    tu_fill_random(x, (size_t)(m * n), dt, -3, 3, 77 + (uint64_t)n);
    for (int64_t c = 0; c < n; c++) {
        x[1 * n + c] = -INFINITY;
        if (c % 3 == 0 || c < 3 * n / 5) x[3 * n + c] = -INFINITY;
        x[4 * n + c] = c % 2 ? big : -big;
        x[6 * n + c] = c % 2 ? -top : top;
    }
    x[2 * n + n / 2] = INFINITY;
    x[5 * n + n - 1] = big;
    x[5 * n] = -big;
    x[7 * n + n / 3] = -INFINITY;
    tu_layout v = tu_dense(m, n);
    check(ctx, dt, m, n, x, &v, &v, "special values");
    free(x);
}

START_TEST(special_values)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {1, 2, 45, 1000, 70001};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            special_rows(ctx, float_dtypes[d], ns[i]);
    clkit_context_release(ctx);
}
END_TEST

/* No rows: nothing to do, whatever N (0 too). Rows of no elements have no softmax: refused,
   nothing written. */
START_TEST(empty_rows)
{
    clkit_context *ctx = tu_ctx();
    cl_mem b = tu_buffer(ctx, CLKIT_F32, 4, NULL), c = tu_buffer(ctx, CLKIT_F32, 4, NULL);
    double before[4];
    tu_read(ctx, c, CLKIT_F32, 4, before);
    int64_t s0[2] = {0, 5}, s00[2] = {0, 0}, s1[2] = {5, 0};
    clkit_tensor t = clkit_tensor_contiguous(b, CLKIT_F32, 2, s0);
    TU_CHECK(clkit_softmax(ctx, &t, &t));
    t = clkit_tensor_contiguous(b, CLKIT_F32, 2, s00);
    TU_CHECK(clkit_softmax(ctx, &t, &t));
    t = clkit_tensor_contiguous(b, CLKIT_F32, 2, s1);
    clkit_tensor o = clkit_tensor_contiguous(c, CLKIT_F32, 2, s1);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_softmax(ctx, &t, &o));
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_softmax(ctx, &o, &o));
    tu_assert_unchanged(ctx, c, CLKIT_F32, 4, before);
    clReleaseMemObject(b), clReleaseMemObject(c);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(bad_input)
{
    tu_guard guard = tu_guard_begin();
    clkit_context *ctx = guard.ctx;
    cl_mem b = guard.in, c = guard.out;
    int64_t s44[2] = {4, 4}, s48[2] = {4, 8}, s17[2] = {17, 4}, s16[1] = {16}, s3[3] = {2, 2, 4};
    clkit_tensor x = clkit_tensor_contiguous(b, CLKIT_F32, 2, s44);
    clkit_tensor out = clkit_tensor_contiguous(c, CLKIT_F32, 2, s44);
    ck_assert_int_eq(clkit_softmax(NULL, &x, &out), CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_softmax(ctx, NULL, &out));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_softmax(ctx, &x, NULL));
    clkit_tensor t = out;
    t.buffer = NULL;
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_softmax(ctx, &x, &t));
    t = x;
    t.dtype = CLKIT_I32;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_softmax(ctx, &t, &t));
    t = out;
    t.dtype = CLKIT_BF16;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_softmax(ctx, &x, &t));
    t = clkit_tensor_contiguous(b, CLKIT_F32, 1, s16);
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_softmax(ctx, &t, &out));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 3, s3);
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_softmax(ctx, &x, &t));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 2, s48);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_softmax(ctx, &x, &t));
    t = x;
    t.shape[1] = -1;
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_softmax(ctx, &t, &out));
    t = clkit_tensor_contiguous(b, CLKIT_F32, 2, s17);
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_softmax(ctx, &t, &t));
    t = x;
    t.offset = 49 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_softmax(ctx, &t, &out));
    t = out;
    t.strides[0] = 21;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_softmax(ctx, &x, &t));
    t = out;
    t.strides[0] = 2;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_softmax(ctx, &x, &t));
    /* out may be x itself, never a shifted or re-strided view of it */
    clkit_tensor shifted = x;
    shifted.offset = 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_softmax(ctx, &x, &shifted));
    clkit_tensor transposed = x;
    transposed.strides[0] = 1;
    transposed.strides[1] = 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_softmax(ctx, &x, &transposed));
    tu_guard_end(&guard);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("softmax");
    TCase *tc = tu_tcase("softmax");
    tcase_add_test(tc, row_lengths);
    tcase_add_test(tc, many_rows);
    tcase_add_test(tc, padded_rows);
    tcase_add_test(tc, column_stride);
    tcase_add_test(tc, in_place);
    tcase_add_test(tc, special_values);
    tcase_add_test(tc, empty_rows);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

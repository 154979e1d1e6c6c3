/* clkit_copy between layouts: dense runs of every dtype, conversions among float dtypes,
   transposes (2-D and batched), permutations, negative and gapped strides, offsets; which
   kernel a layout takes; raw bits kept; and every kind of bad input. */
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const clkit_dtype all_dtypes[] = {CLKIT_F32, CLKIT_F16, CLKIT_BF16,
                                         CLKIT_U8,  CLKIT_I32, CLKIT_I64};
static const clkit_dtype float_dtypes[] = {CLKIT_F32, CLKIT_F16, CLKIT_BF16};

/* A view of `shape` in a buffer of `size` elements: dims laid out in the order perm
   (outermost first), the innermost `inner` elements apart, each dim padded by `pad`
   elements, the dims in the bit mask `flip` walked backwards, `base` elements in. */
typedef struct layout {
    int ndim;
    int64_t shape[4], strides[4];
    size_t offset, size;
} layout;

static layout make_layout(int ndim, const int64_t *shape, const int *perm, int64_t inner,
                          int64_t pad, unsigned flip, size_t base)
{
    layout l = {.ndim = ndim, .offset = base};
    int64_t stride = inner;
    for (int k = ndim - 1; k >= 0; k--) {
        l.strides[perm[k]] = stride;
        stride *= shape[perm[k]] + pad;
    }
    for (int d = 0; d < ndim; d++) {
        l.shape[d] = shape[d];
        if (flip >> d & 1) {
            l.offset += (size_t)((shape[d] - 1) * l.strides[d]);
            l.strides[d] = -l.strides[d];
        }
    }
    l.size = base + (size_t)stride;
    return l;
}

static const int row_major[4] = {0, 1, 2, 3};

static layout dense(int ndim, const int64_t *shape)
{
    return make_layout(ndim, shape, row_major, 1, 0, 0, 0);
}

/* Element offset of the i-th element (row-major order) of l. */
static int64_t position(const layout *l, int64_t i)
{
    int64_t pos = (int64_t)l->offset;
    for (int d = l->ndim - 1; d >= 0; d--) {
        pos += i % l->shape[d] * l->strides[d];
        i /= l->shape[d];
    }
    return pos;
}

static void fill(double *v, size_t n, clkit_dtype dt, uint64_t seed)
{
    switch (dt) {
    case CLKIT_U8: tu_fill_random(v, n, dt, 0, 256, seed); break;
    case CLKIT_I32: tu_fill_random(v, n, dt, -2e9, 2e9, seed); break;
    case CLKIT_I64: tu_fill_random(v, n, dt, -0x1p52, 0x1p52, seed); break;
    default: tu_fill_random(v, n, dt, -1000, 1000, seed); break;
    }
}

static int64_t numel(const layout *l)
{
    int64_t n = 1;
    for (int d = 0; d < l->ndim; d++) n *= l->shape[d];
    return n;
}

/* Copies a random x in layout lx into an out buffer in layout lo holding a sentinel; every
   element of the view must be x's, converted, and every other element the sentinel. */
static void check_copy(clkit_context *ctx, clkit_dtype xt, const layout *lx, clkit_dtype ot,
                       const layout *lo, const char *what)
{
    double *xs = malloc(lx->size * sizeof *xs), *want = malloc(lo->size * sizeof *want);
    double *got = malloc(lo->size * sizeof *got);
    fill(xs, lx->size, xt, lx->size * 31 + lo->size);
    cl_mem bx = tu_buffer(ctx, xt, lx->size, xs), bo = tu_buffer(ctx, ot, lo->size, NULL);
    tu_read(ctx, bo, ot, lo->size, want);
    clkit_tensor tx = tu_view(bx, xt, lx->ndim, lx->shape, lx->strides, lx->offset);
    clkit_tensor to = tu_view(bo, ot, lo->ndim, lo->shape, lo->strides, lo->offset);
    TU_CHECK(clkit_copy(ctx, &tx, &to));
    tu_read(ctx, bo, ot, lo->size, got);
    for (int64_t i = 0; i < numel(lx); i++)
        want[position(lo, i)] = tu_quantize(ot, xs[position(lx, i)]);
    char msg[160];
    snprintf(msg, sizeof msg, "%s %s -> %s", what, clkit_dtype_name(xt), clkit_dtype_name(ot));
    tu_assert_close(got, want, lo->size, 0, 0, msg);
    clReleaseMemObject(bx);
    clReleaseMemObject(bo);
    free(xs), free(want), free(got);
}

START_TEST(dense_lengths)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {1, 2, 3, 4, 5, 7, 31, 257, 4099, 65537, 1 << 20};
    for (size_t d = 0; d < 6; d++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            layout l = dense(1, &ns[i]);
            check_copy(ctx, all_dtypes[d], &l, all_dtypes[d], &l, "dense");
        }
    clkit_context_release(ctx);
}
END_TEST

START_TEST(conversions)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {1, 5, 1003, 65537};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++)
            for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
                layout l = dense(1, &ns[i]);
                check_copy(ctx, float_dtypes[a], &l, float_dtypes[b], &l, "convert");
            }
    clkit_context_release(ctx);
}
END_TEST

/* Ties, overflow to infinity, subnormals, signed zero, NaN: each format's rounding edges. */
START_TEST(conversion_edges)
{
    clkit_context *ctx = tu_ctx();
    static const double edge[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 65504.0, 65520.0, 1e6,
                                  -1e6, 3e38, 0x1p-24, 0x1.8p-24, 0x1p-25, 0x1p-14, 0x1.002p0,
                                  0x1.006p0, 0x1.01p0, 0x1.03p0, 0x1.0100001p0, 1e-40, -7.5};
    const size_t n = sizeof edge / sizeof *edge;
    int64_t shape[1] = {(int64_t)n};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++) {
            clkit_dtype xt = float_dtypes[a], ot = float_dtypes[b];
            double xs[sizeof edge / sizeof *edge], want[sizeof xs / sizeof *xs];
            double got[sizeof xs / sizeof *xs];
            for (size_t i = 0; i < n; i++) {
                xs[i] = tu_quantize(xt, edge[i]);
                want[i] = tu_quantize(ot, xs[i]);
            }
            cl_mem bx = tu_buffer(ctx, xt, n, xs), bo = tu_buffer(ctx, ot, n, NULL);
            clkit_tensor tx = clkit_tensor_contiguous(bx, xt, 1, shape);
            clkit_tensor to = clkit_tensor_contiguous(bo, ot, 1, shape);
            TU_CHECK(clkit_copy(ctx, &tx, &to));
            tu_read(ctx, bo, ot, n, got);
            for (size_t i = 0; i < n; i++)
                ck_assert_msg(tu_close(got[i], want[i], 0, 0) &&
                                  (isnan(want[i]) || signbit(got[i]) == signbit(want[i])),
                              "%s -> %s: %a became %a, expected %a", clkit_dtype_name(xt),
                              clkit_dtype_name(ot), xs[i], got[i], want[i]);
            clReleaseMemObject(bx);
            clReleaseMemObject(bo);
        }
    clkit_context_release(ctx);
}
END_TEST

/* (M, N) row-major into column-major and back, sizes around the tile edge; padded rows and
   offsets keep the unit strides where they are. */
START_TEST(transpose_2d)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t sizes[][2] = {{2, 3}, {31, 33}, {32, 32}, {33, 1}, {64, 96}, {100, 7},
                                       {3, 257}, {63, 65}, {257, 129}, {513, 300}};
    static const int cm[2] = {1, 0};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (size_t d = 0; d < 6; d++) {
            clkit_dtype dt = all_dtypes[d];
            layout rm = make_layout(2, sizes[s], row_major, 1, (int64_t)s % 3, 0, s);
            layout col = make_layout(2, sizes[s], cm, 1, (int64_t)d % 2, 0, 7);
            check_copy(ctx, dt, &rm, dt, &col, "rows -> columns");
            check_copy(ctx, dt, &col, dt, &rm, "columns -> rows");
        }
    int64_t shape[2] = {97, 45};
    layout rm = dense(2, shape), col = make_layout(2, shape, cm, 1, 0, 0, 0);
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++)
            check_copy(ctx, float_dtypes[a], &rm, float_dtypes[b], &col, "convert + transpose");
    clkit_context_release(ctx);
}
END_TEST

/* Batched transposes and other permutations of 3-D and 4-D views. */
START_TEST(permutations)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t s3[3] = {3, 37, 70}, s4[4] = {2, 5, 33, 9};
    static const int p3[][3] = {{0, 2, 1}, {2, 1, 0}, {1, 0, 2}, {2, 0, 1}};
    static const int p4[][4] = {{0, 1, 3, 2}, {3, 2, 1, 0}, {2, 0, 3, 1}, {1, 3, 0, 2}};
    static const clkit_dtype dts[] = {CLKIT_F32, CLKIT_U8, CLKIT_I64};
    for (size_t d = 0; d < 3; d++)
        for (size_t p = 0; p < 4; p++) {
            layout x3 = dense(3, s3), o3 = make_layout(3, s3, p3[p], 1, 0, 0, 5);
            check_copy(ctx, dts[d], &x3, dts[d], &o3, "3-D permute");
            check_copy(ctx, dts[d], &o3, dts[d], &x3, "3-D permute back");
            layout x4 = make_layout(4, s4, p4[(p + 1) % 4], 1, 1, 0, 3);
            layout o4 = make_layout(4, s4, p4[p], 1, 0, 0, 0);
            check_copy(ctx, dts[d], &x4, dts[d], &o4, "4-D permute");
        }
    layout x3 = dense(3, s3), o3 = make_layout(3, s3, p3[0], 1, 0, 0, 0);
    check_copy(ctx, CLKIT_BF16, &x3, CLKIT_F16, &o3, "convert + batched transpose");
    clkit_context_release(ctx);
}
END_TEST

/* Negative strides, gaps in the innermost dim, padding: the strided kernel. */
START_TEST(strided_views)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t s2[2] = {19, 23}, s4[4] = {3, 4, 5, 6};
    for (size_t d = 0; d < 6; d++) {
        clkit_dtype dt = all_dtypes[d];
        layout a = make_layout(2, s2, row_major, 1, 0, 2, 4);
        layout b = make_layout(2, s2, row_major, 2, 1, 1, 0);
        check_copy(ctx, dt, &a, dt, &b, "flipped -> gapped");
        layout c = make_layout(4, s4, row_major, 1, 2, 5, 1), e = dense(4, s4);
        check_copy(ctx, dt, &c, dt, &e, "padded + flipped 4-D -> dense");
        check_copy(ctx, dt, &e, dt, &c, "dense -> padded + flipped 4-D");
    }
    layout a = make_layout(2, s2, row_major, 3, 0, 3, 2), b = dense(2, s2);
    check_copy(ctx, CLKIT_F16, &a, CLKIT_BF16, &b, "convert strided");
    clkit_context_release(ctx);
}
END_TEST

/* Rows with the unit stride on both sides but different padding, offsets or directions
   elsewhere (copy_rows from 64 elements a row; the strided path below): row lengths around
   the lanes a work-group takes, batches, rows walked backwards, conversions. */
START_TEST(padded_rows)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t cols[] = {63, 64, 100, 257, 1030};
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) {
        int64_t s2[2] = {37, cols[i]}, s3[3] = {3, 5, cols[i]};
        layout a = make_layout(2, s2, row_major, 1, 5, 0, 3), b = dense(2, s2);
        layout c = make_layout(2, s2, row_major, 1, 2, 1, 0), d = make_layout(3, s3, row_major, 1, 7, 3, 1);
        layout e = dense(3, s3);
        for (size_t t = 0; t < 6; t++) {
            clkit_dtype dt = all_dtypes[t];
            check_copy(ctx, dt, &a, dt, &b, "padded rows -> dense");
            check_copy(ctx, dt, &b, dt, &c, "dense -> padded rows walked backwards");
            check_copy(ctx, dt, &d, dt, &e, "padded 3-D, outer dims backwards -> dense");
        }
        check_copy(ctx, CLKIT_F16, &a, CLKIT_F32, &c, "convert padded rows");
        check_copy(ctx, CLKIT_F32, &d, CLKIT_BF16, &e, "convert padded 3-D");
    }
    clkit_context_release(ctx);
}
END_TEST

/* Which kernel a layout takes, seen through the build log: only layouts whose unit strides
   differ use the tile kernel; dense ones the vector kernel. */
static int builds_of(const layout *lx, const layout *lo, const char *needle)
{
    char path[] = "/tmp/clkit_copy_buildsXXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    tu_setenv("CLKIT_BUILD_LOG", path);
    clkit_context *ctx = tu_ctx();
    check_copy(ctx, CLKIT_F32, lx, CLKIT_F32, lo, "dispatch");
    clkit_context_release(ctx);
    tu_unsetenv("CLKIT_BUILD_LOG");
    FILE *f = fopen(path, "r");
    char line[512];
    int hits = 0;
    while (f && fgets(line, sizeof line, f)) hits += strstr(line, needle) != NULL;
    if (f) fclose(f);
    unlink(path);
    return hits;
}

START_TEST(dispatch)
{
    int64_t shape[3] = {4, 40, 50};
    static const int cm[3] = {0, 2, 1};
    layout rm = dense(3, shape), bt = make_layout(3, shape, cm, 1, 0, 0, 0);
    layout padded = make_layout(3, shape, row_major, 1, 3, 0, 0);
    layout flipped = make_layout(3, shape, row_major, 1, 0, 4, 0);
    ck_assert_int_ge(builds_of(&rm, &bt, "TILE="), 1);
    ck_assert_int_eq(builds_of(&rm, &padded, "TILE="), 0);
    ck_assert_int_eq(builds_of(&rm, &flipped, "TILE="), 0);
}
END_TEST

/* Same dtype moves bits: NaN payloads, signalling NaNs and -0 come out as they went in. */
START_TEST(raw_bits)
{
    clkit_context *ctx = tu_ctx();
    static const uint32_t bits[] = {0x7fc01234u, 0x7f800001u, 0xffbfffffu, 0x80000000u, 0x00000001u};
    const size_t n = sizeof bits / sizeof *bits;
    cl_context c;
    cl_command_queue q;
    clkit_context_cl(ctx, &c, &q, NULL);
    cl_int err;
    cl_mem bx = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof bits,
                               (void *)bits, &err);
    cl_mem bo = tu_buffer(ctx, CLKIT_F32, n, NULL);
    int64_t shape[1] = {(int64_t)n};
    clkit_tensor tx = clkit_tensor_contiguous(bx, CLKIT_F32, 1, shape);
    clkit_tensor to = clkit_tensor_contiguous(bo, CLKIT_F32, 1, shape);
    TU_CHECK(clkit_copy(ctx, &tx, &to));
    uint32_t got[sizeof bits / sizeof *bits];
    ck_assert_int_eq(clEnqueueReadBuffer(q, bo, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL),
                     CL_SUCCESS);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == bits[i], "%08x became %08x", bits[i], got[i]);
    clReleaseMemObject(bx);
    clReleaseMemObject(bo);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(noops)
{
    clkit_context *ctx = tu_ctx();
    double vals[8] = {1, 2, 3, 4, 5, 6, 7, 8}, got[8];
    cl_mem b = tu_buffer(ctx, CLKIT_F32, 8, vals);
    int64_t s8[1] = {8}, s0[2] = {0, 3};
    clkit_tensor t = clkit_tensor_contiguous(b, CLKIT_F32, 1, s8);
    TU_CHECK(clkit_copy(ctx, &t, &t));
    t = clkit_tensor_contiguous(b, CLKIT_F32, 2, s0);
    clkit_tensor o = clkit_tensor_contiguous(b, CLKIT_F16, 2, s0);
    TU_CHECK(clkit_copy(ctx, &t, &o));
    tu_read(ctx, b, CLKIT_F32, 8, got);
    ck_assert(memcmp(vals, got, sizeof got) == 0);
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
    ck_assert_int_eq(clkit_copy(NULL, &x, &out), CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_copy(ctx, NULL, &out));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_copy(ctx, &x, NULL));
    clkit_tensor t = out;
    t.buffer = NULL;
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_copy(ctx, &x, &t));
    t = out;
    t.dtype = (clkit_dtype)99;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_copy(ctx, &x, &t));
    /* conversions only among float dtypes */
    t = out;
    t.dtype = CLKIT_I32;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_copy(ctx, &x, &t));
    clkit_tensor u = x;
    u.dtype = CLKIT_U8;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_copy(ctx, &u, &out));
    t.dtype = CLKIT_I64;
    u.dtype = CLKIT_I32;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_copy(ctx, &u, &t));
    t = out;
    t.ndim = 0;
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_copy(ctx, &x, &t));
    t.ndim = 5;
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_copy(ctx, &x, &t));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 1, sneg);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_copy(ctx, &t, &t));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 1, s8);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_copy(ctx, &x, &t));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 2, s44);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_copy(ctx, &x, &t));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 1, s65);
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_copy(ctx, &t, &t));
    t = out;
    t.offset = 49 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_copy(ctx, &x, &t));
    t.offset = 2;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_copy(ctx, &x, &t));
    t = out;
    t.strides[0] = -1;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_copy(ctx, &x, &t));
    t = out;
    t.strides[0] = 0;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_copy(ctx, &x, &t));
    t = clkit_tensor_contiguous(c, CLKIT_F32, 2, s44);
    t.strides[0] = 2;
    u = clkit_tensor_contiguous(b, CLKIT_F32, 2, s44);
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_copy(ctx, &u, &t));
    int64_t huge[2] = {INT64_MAX / 2, 4};
    t = clkit_tensor_contiguous(c, CLKIT_F32, 2, huge);
    TU_EXPECT(CLKIT_ERR_OVERFLOW, clkit_copy(ctx, &t, &t));
    t = out;
    t.strides[0] = INT64_MAX / 4;
    TU_EXPECT(CLKIT_ERR_OVERFLOW, clkit_copy(ctx, &x, &t));
    /* out overlapping x: shifted, reversed, or the same bytes under another dtype */
    clkit_tensor shifted = out;
    shifted.offset = 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_copy(ctx, &out, &shifted));
    t = out;
    t.offset = 15 * 4;
    t.strides[0] = -1;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_copy(ctx, &out, &t));
    t = out;
    t.dtype = CLKIT_F16;
    u = out;
    u.dtype = CLKIT_BF16;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_copy(ctx, &t, &u));
    tu_guard_end(&guard);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("copy");
    TCase *tc = tu_tcase("copy");
    tcase_add_test(tc, dense_lengths);
    tcase_add_test(tc, conversions);
    tcase_add_test(tc, conversion_edges);
    tcase_add_test(tc, transpose_2d);
    tcase_add_test(tc, permutations);
    tcase_add_test(tc, strided_views);
    tcase_add_test(tc, padded_rows);
    tcase_add_test(tc, dispatch);
    tcase_add_test(tc, raw_bits);
    tcase_add_test(tc, noops);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

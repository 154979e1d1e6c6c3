/* clkit_matmul against a double-precision reference: shapes from 1x1x1 to a few hundred,
   primes, K = 1, skinny, transposed and padded views, alpha/beta, activations, batches with
   broadcast, every dtype combination, every kernel configuration the tuner may choose, CLBlast
   as a second opinion; and bad input. */
#define _GNU_SOURCE
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

/* The providers this libclkit has: CLBLAST only where it was built with CLBlast (meson
   -Dclblast); without, that provider is UNSUPPORTED (clblast_provider). */
#define LAST_PROVIDER (CLKIT_HAVE_CLBLAST ? CLKIT_PROVIDER_CLBLAST : CLKIT_PROVIDER_CLKIT)

typedef struct operand {
    cl_mem buf;
    double *host; /* the whole buffer's values */
    size_t len;
    clkit_tensor t;
    ref_matrix r;
} operand;

/* A (batch x) rows x cols view: layout 'n' row-major, 't' column-major; rows padded by pad,
   or with pad < 0 to the next multiple of 8 plus 8 (every stride 16-byte aligned for 16-bit
   dtypes, as the tensor-core kernel needs); batch 0 makes a 2-D tensor. The buffer starts
   with `lead` unused elements (an offset). */
static operand make(clkit_context *ctx, clkit_dtype dt, int64_t batch, int64_t rows, int64_t cols,
                    char layout, int64_t pad, size_t lead, uint64_t seed)
{
    operand o;
    int64_t inner = layout == 'n' ? cols : rows;
    int64_t ld = pad < 0 ? (inner + 7) / 8 * 8 + 8 : inner + pad, mat = ld * (layout == 'n' ? rows : cols);
    int64_t nb = batch ? batch : 1;
    o.len = lead + (size_t)(mat * nb);
    o.host = malloc(o.len * sizeof *o.host);
    ref_fill_random(o.host, o.len, dt, -1, 1, seed);
    o.buf = tu_buffer(ctx, dt, o.len, o.host);
    int64_t shape[3] = {nb, rows, cols}, strides[3] = {mat, layout == 'n' ? ld : 1, layout == 'n' ? 1 : ld};
    int d = batch ? 0 : 1;
    o.t = tu_view(o.buf, dt, 3 - d, shape + d, strides + d, lead);
    o.r.v = o.host + lead;
    o.r.s[0] = batch ? mat : 0;
    o.r.s[1] = strides[1];
    o.r.s[2] = strides[2];
    return o;
}

static void drop(operand *o)
{
    clReleaseMemObject(o->buf);
    free(o->host);
}

typedef struct run {
    clkit_dtype in, out;
    int64_t batch, m, n, k;
    char la, lb, lc;
    int a_bcast, b_bcast;
    int aligned; /* A and B strides and offsets multiples of 8 elements */
    double in_rtol; /* relative rounding of each input on its way to the multiply (TF32) */
    clkit_matmul_options opt;
} run;

/* Runs r on the device and compares every element of C's buffer: inside the view against the
   reference, outside it unchanged. Returns the largest error inside C relative to the sum of
   the absolute products (which rounded inputs scale). */
static double check_run(clkit_context *ctx, const run *r, const char *what)
{
    int64_t bt = r->batch;
    operand a = make(ctx, r->in, r->a_bcast ? 0 : bt, r->m, r->k, r->la, r->aligned ? -1 : 3,
                     r->aligned ? 8 : 5, 11 + (uint64_t)r->m);
    operand b = make(ctx, r->in, r->b_bcast ? 0 : bt, r->k, r->n, r->lb, r->aligned ? -1 : 1, 0,
                     23 + (uint64_t)r->n);
    operand c = make(ctx, r->out, bt, r->m, r->n, r->lc, 2, 7, 37 + (uint64_t)r->k);
    if (bt == 0) bt = 1;
    double *want = malloc(c.len * sizeof *want), *got = malloc(c.len * sizeof *got);
    double *mag = malloc((size_t)(bt * r->m * r->n) * sizeof *mag);
    memcpy(want, c.host, c.len * sizeof *want);
    ref_matrix wc = c.r;
    wc.v = want + (c.r.v - c.host);
    ref_matmul(&a.r, &b.r, &wc, bt, r->m, r->n, r->k, r->opt.alpha, r->opt.beta,
               (int)r->opt.activation, r->opt.leaky_slope, mag);
    TU_CHECK(clkit_matmul(ctx, &a.t, &b.t, &c.t, &r->opt));
    tu_read(ctx, c.buf, r->out, c.len, got);
    double eps = 0x1p-23; /* f32 accumulation whatever the input dtype */
    /* f32 operands that may take the tensor cores run there as 3xTF32 by default, which
       loses up to 2^-19 of each product: 2^-20 an input in the bound below. */
    double in_rtol = r->in_rtol;
    if (r->in == CLKIT_F32 && tu_fast_path(ctx, "matmul", CLKIT_FAST_PATH_NV_MMA) && !r->opt.allow_tf32 && !r->opt.exact_f32)
        in_rtol = 0x1p-20;
    double out_rtol = r->out == CLKIT_F32 ? 0 : r->out == CLKIT_F16 ? 0x1p-10 : 0x1p-7;
    double worst = 0;
    for (size_t i = 0; i < c.len; i++) {
        ptrdiff_t e = (double *)&want[i] - wc.v;
        int64_t z = c.r.s[0] ? e / c.r.s[0] : 0, rem = e - z * c.r.s[0];
        int64_t row = r->lc == 'n' ? rem / c.r.s[1] : rem % c.r.s[2];
        int64_t col = r->lc == 'n' ? rem % c.r.s[1] : rem / c.r.s[2];
        int inside = e >= 0 && z < bt && row < r->m && col < r->n;
        double abs_sum = inside ? mag[(z * r->m + row) * r->n + col] : 0;
        double tol = inside ? ((4.0 * (double)(r->k + 2) * eps + 2.0 * in_rtol) * abs_sum +
                               out_rtol * fabs(want[i]) + 1e-30)
                            : 0;
        if (inside && abs_sum > 0 && fabs(got[i] - want[i]) / abs_sum > worst)
            worst = fabs(got[i] - want[i]) / abs_sum;
        if (!tu_close(got[i], want[i], tol, 0))
            ck_abort_msg("%s: %s element %zu (batch %lld, %lld, %lld) is %.9g, expected %.9g", what,
                         inside ? "C" : "outside C", i, (long long)z, (long long)row, (long long)col,
                         got[i], want[i]);
    }
    free(want), free(got), free(mag);
    drop(&a), drop(&b), drop(&c);
    return worst;
}

static run basic(int64_t m, int64_t n, int64_t k)
{
    run r;
    memset(&r, 0, sizeof r);
    r.in = r.out = CLKIT_F32;
    r.m = m, r.n = n, r.k = k;
    r.la = r.lb = r.lc = 'n';
    r.opt = clkit_matmul_defaults();
    return r;
}

static const int64_t shapes[][3] = {
    {1, 1, 1}, {2, 3, 5}, {7, 13, 11}, {17, 33, 65}, {64, 64, 64}, {100, 37, 129},
    {1, 64, 300}, {8, 70, 33}, {300, 1, 17}, {33, 47, 1}, {131, 129, 67}, {16, 256, 64},
};
#define NSHAPES (sizeof shapes / sizeof *shapes)

START_TEST(shapes_and_layouts)
{
    clkit_context *ctx = tu_ctx();
    static const char layouts[][2] = {{'n', 'n'}, {'t', 'n'}, {'n', 't'}, {'t', 't'}};
    for (size_t i = 0; i < NSHAPES; i++)
        for (size_t l = 0; l < 4; l++) {
            run r = basic(shapes[i][0], shapes[i][1], shapes[i][2]);
            r.la = layouts[l][0], r.lb = layouts[l][1];
            r.lc = (i + l) % 3 == 0 ? 't' : 'n';
            char what[96];
            snprintf(what, sizeof what, "%lldx%lldx%lld %c%c->%c", (long long)r.m, (long long)r.n,
                     (long long)r.k, r.la, r.lb, r.lc);
            check_run(ctx, &r, what);
        }
    clkit_context_release(ctx);
}
END_TEST

START_TEST(dtypes)
{
    clkit_context *ctx = tu_ctx();
    static const clkit_dtype combos[][2] = {{CLKIT_F16, CLKIT_F32}, {CLKIT_F16, CLKIT_F16},
                                            {CLKIT_BF16, CLKIT_BF16}, {CLKIT_BF16, CLKIT_F32},
                                            {CLKIT_F16, CLKIT_BF16}};
    for (size_t d = 0; d < 5; d++)
        for (size_t i = 2; i < NSHAPES; i += 3) {
            run r = basic(shapes[i][0], shapes[i][1], shapes[i][2]);
            r.in = combos[d][0], r.out = combos[d][1];
            r.la = i % 2 ? 't' : 'n';
            check_run(ctx, &r, clkit_dtype_name(r.in));
        }
    clkit_context_release(ctx);
}
END_TEST

START_TEST(alpha_beta_activation)
{
    clkit_context *ctx = tu_ctx();
    for (int act = 0; act < 3; act++)
        for (int ab = 0; ab < 3; ab++) {
            run r = basic(37, 53, 29);
            r.opt.alpha = ab == 1 ? 0.5f : ab == 2 ? -1.5f : 1.0f;
            r.opt.beta = ab == 1 ? 2.0f : ab == 2 ? -0.25f : 0.0f;
            r.opt.activation = (clkit_activation)act;
            r.opt.leaky_slope = 0.1f;
            check_run(ctx, &r, "alpha/beta/activation");
        }
    clkit_context_release(ctx);
}
END_TEST

/* beta = 0 never reads C: NaN in C must not leak into the result. */
/* beta = 0 never reads C, on every provider and kernel: NaN in C stays out of the result. */
START_TEST(beta_zero_ignores_nan)
{
    clkit_context *ctx = tu_ctx();
    static const char *configs[] = {
        NULL, "KERNEL=0,TILE=16", "KERNEL=1,TILE=8",
        "KERNEL=2,BLOCK_M=16,BLOCK_N=32,BLOCK_K=16,THREAD_M=2,THREAD_N=2,GROUP_M=8",
        "KERNEL=3,SK_COLS=8,SK_K=32,SK_M=1",
    };
    double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1}, c[4] = {NAN, NAN, NAN, NAN}, got[4];
    cl_mem ba = tu_buffer(ctx, CLKIT_F32, 6, a), bb = tu_buffer(ctx, CLKIT_F32, 6, b);
    int64_t sa[2] = {2, 3}, sb[2] = {3, 2}, sc[2] = {2, 2};
    clkit_tensor ta = clkit_tensor_contiguous(ba, CLKIT_F32, 2, sa), tb = clkit_tensor_contiguous(bb, CLKIT_F32, 2, sb);
    for (int p = CLKIT_PROVIDER_AUTO; p <= LAST_PROVIDER; p++)
        for (size_t i = 0; i < (p == CLKIT_PROVIDER_CLKIT ? sizeof configs / sizeof *configs : 1); i++) {
            cl_mem bc = tu_buffer(ctx, CLKIT_F32, 4, c);
            clkit_tensor tc = clkit_tensor_contiguous(bc, CLKIT_F32, 2, sc);
            clkit_matmul_options o = clkit_matmul_defaults();
            o.provider = (clkit_provider)p, o.config = configs[i];
            TU_CHECK(clkit_matmul(ctx, &ta, &tb, &tc, &o));
            tu_read(ctx, bc, CLKIT_F32, 4, got);
            double want[4] = {4, 5, 10, 11};
            tu_assert_close(got, want, 4, 0, 0, configs[i] ? configs[i] : "beta 0 with NaN in C");
            clReleaseMemObject(bc);
        }
    clReleaseMemObject(ba), clReleaseMemObject(bb);
    clkit_context_release(ctx);
}
END_TEST

/* K = 0: C = act(beta * C) on every provider; beta 0 gives zeros even over NaN. */
START_TEST(empty_k)
{
    clkit_context *ctx = tu_ctx();
    double c[4] = {NAN, -1, 2, -3}, got[4];
    cl_mem ba = tu_buffer(ctx, CLKIT_F32, 4, NULL);
    int64_t sa[2] = {2, 0}, sb[2] = {0, 2}, sc[2] = {2, 2};
    clkit_tensor ta = clkit_tensor_contiguous(ba, CLKIT_F32, 2, sa), tb = clkit_tensor_contiguous(ba, CLKIT_F32, 2, sb);
    for (int p = CLKIT_PROVIDER_AUTO; p <= LAST_PROVIDER; p++)
        for (int beta = 0; beta <= 2; beta += 2) {
            cl_mem bc = tu_buffer(ctx, CLKIT_F32, 4, c);
            clkit_tensor tc = clkit_tensor_contiguous(bc, CLKIT_F32, 2, sc);
            clkit_matmul_options o = clkit_matmul_defaults();
            o.provider = (clkit_provider)p, o.beta = (float)beta;
            o.activation = beta ? CLKIT_ACT_NONE : CLKIT_ACT_RELU;
            if (p == CLKIT_PROVIDER_CLBLAST) o.activation = CLKIT_ACT_NONE;
            TU_CHECK(clkit_matmul(ctx, &ta, &tb, &tc, &o));
            tu_read(ctx, bc, CLKIT_F32, 4, got);
            double zero[4] = {0, 0, 0, 0}, twice[4] = {NAN, -2, 4, -6};
            if (beta) {
                ck_assert_msg(isnan(got[0]), "K = 0, beta 2: NaN in C must stay NaN");
                tu_assert_close(got + 1, twice + 1, 3, 0, 0, "K = 0, beta 2");
            } else {
                tu_assert_close(got, zero, 4, 0, 0, "K = 0, beta 0");
            }
            clReleaseMemObject(bc);
        }
    clReleaseMemObject(ba);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(batched_and_broadcast)
{
    clkit_context *ctx = tu_ctx();
    for (int variant = 0; variant < 4; variant++) {
        run r = basic(45, 38, 27);
        r.batch = 3;
        r.a_bcast = variant == 1;
        r.b_bcast = variant == 2;
        r.la = variant == 3 ? 't' : 'n';
        r.opt.beta = variant == 3 ? 1.0f : 0.0f;
        check_run(ctx, &r, "batched");
    }
    clkit_context_release(ctx);
}
END_TEST

/* Every configuration the tuner may pick must be right, on an aligned shape (vector loads)
   and a ragged one with transposed A (masked, scalar loads). */
START_TEST(every_config)
{
    clkit_context *ctx = tu_ctx();
    static const char *configs[] = {
        "KERNEL=0,TILE=16", "KERNEL=1,TILE=16", "KERNEL=1,TILE=8",
        "KERNEL=2,BLOCK_M=128,BLOCK_N=128,BLOCK_K=16,THREAD_M=8,THREAD_N=8,GROUP_M=8",
        "KERNEL=2,BLOCK_M=128,BLOCK_N=128,BLOCK_K=8,THREAD_M=8,THREAD_N=8,GROUP_M=1",
        "KERNEL=2,BLOCK_M=128,BLOCK_N=128,BLOCK_K=16,THREAD_M=8,THREAD_N=16,GROUP_M=8",
        "KERNEL=2,BLOCK_M=128,BLOCK_N=64,BLOCK_K=16,THREAD_M=8,THREAD_N=4,GROUP_M=4",
        "KERNEL=2,BLOCK_M=64,BLOCK_N=128,BLOCK_K=8,THREAD_M=4,THREAD_N=8,GROUP_M=8",
        "KERNEL=2,BLOCK_M=64,BLOCK_N=64,BLOCK_K=16,THREAD_M=4,THREAD_N=4,GROUP_M=8",
        "KERNEL=2,BLOCK_M=64,BLOCK_N=64,BLOCK_K=8,THREAD_M=4,THREAD_N=4,GROUP_M=2",
        "KERNEL=2,BLOCK_M=32,BLOCK_N=64,BLOCK_K=16,THREAD_M=4,THREAD_N=4,GROUP_M=8",
        "KERNEL=2,BLOCK_M=32,BLOCK_N=32,BLOCK_K=8,THREAD_M=4,THREAD_N=4,GROUP_M=8",
        "KERNEL=2,BLOCK_M=16,BLOCK_N=128,BLOCK_K=16,THREAD_M=2,THREAD_N=8,GROUP_M=8",
        "KERNEL=2,BLOCK_M=16,BLOCK_N=32,BLOCK_K=16,THREAD_M=2,THREAD_N=2,GROUP_M=8",
        "KERNEL=2,BLOCK_M=8,BLOCK_N=64,BLOCK_K=16,THREAD_M=1,THREAD_N=4,GROUP_M=8",
        "KERNEL=3,SK_COLS=8,SK_K=32,SK_M=1", "KERNEL=3,SK_COLS=8,SK_K=16,SK_M=16",
        "KERNEL=3,SK_COLS=2,SK_K=128,SK_M=1",
        "KERNEL=3,SK_COLS=16,SK_K=8,SK_M=4",
    };
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        run aligned = basic(128, 192, 64), ragged = basic(67, 45, 37);
        aligned.opt.config = ragged.opt.config = configs[i];
        ragged.la = 't';
        ragged.lb = 't';
        check_run(ctx, &aligned, configs[i]);
        check_run(ctx, &ragged, configs[i]);
        aligned.in = CLKIT_BF16;
        check_run(ctx, &aligned, configs[i]);
        run skinny = basic(3, 130, 77);
        skinny.opt.config = configs[i];
        skinny.batch = 2;
        skinny.a_bcast = 1;
        check_run(ctx, &skinny, configs[i]);
    }
    clkit_context_release(ctx);
}
END_TEST

/* A forced config this device cannot run is refused, on aligned f16 operands. */
static void expect_refused(clkit_context *ctx, const char *config)
{
    clkit_matmul_options o = clkit_matmul_defaults();
    o.config = config;
    operand a = make(ctx, CLKIT_F16, 0, 64, 64, 'n', 0, 0, 1), c = make(ctx, CLKIT_F32, 0, 64, 64, 'n', 0, 0, 2);
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_matmul(ctx, &a.t, &a.t, &c.t, &o));
    drop(&a), drop(&c);
}

/* Each tensor-core config in each operand layout, on four shapes and dtype pairs in turn. */
static void check_tile_configs(clkit_context *ctx, const char *const *configs, size_t n,
                               const int64_t (*shapes4)[3])
{
    static const char layouts[][2] = {{'n', 'n'}, {'n', 't'}, {'t', 'n'}, {'t', 't'}};
    static const clkit_dtype combos[][2] = {{CLKIT_F16, CLKIT_F32}, {CLKIT_BF16, CLKIT_BF16},
                                            {CLKIT_F16, CLKIT_F16}, {CLKIT_BF16, CLKIT_F32}};
    for (size_t i = 0; i < n; i++)
        for (size_t l = 0; l < 4; l++) {
            const int64_t *sh = shapes4[(i + l) % 4];
            run r = basic(sh[0], sh[1], sh[2]);
            r.aligned = 1, r.opt.config = configs[i];
            r.in = combos[(i + l) % 4][0], r.out = combos[(i + l) % 4][1];
            r.la = layouts[l][0], r.lb = layouts[l][1], r.lc = l == 3 ? 't' : 'n';
            char what[160];
            snprintf(what, sizeof what, "%s %lldx%lldx%lld %c%c %s", configs[i], (long long)r.m,
                     (long long)r.n, (long long)r.k, r.la, r.lb, clkit_dtype_name(r.in));
            check_run(ctx, &r, what);
        }
}

/* The tensor-core kernel (NVIDIA sm_80 and later): every tile the tuner may pick, in each
   operand layout, f16 and bf16 inputs into f32, f16 and bf16 outputs; one 16 x 8 x 16
   fragment (the mma lane layouts against the CPU); edges that cut 16-byte chunks in K, M
   and N; batches with broadcast; alpha, beta and activations; and the default choice on
   aligned operands. Where the device has no tensor cores (or CLKIT_TENSOR_CORES=0), a forced
   tensor-core config is refused. */
START_TEST(tensor_cores)
{
    clkit_context *ctx = tu_ctx();
    static const char *configs[] = {
        "KERNEL=4,BLOCK_M=128,BLOCK_N=256,BLOCK_K=32,WARPS_M=2,WARPS_N=4,STAGES=2,GROUP_M=8",
        "KERNEL=4,BLOCK_M=256,BLOCK_N=128,BLOCK_K=32,WARPS_M=4,WARPS_N=2,STAGES=2,GROUP_M=8",
        "KERNEL=4,BLOCK_M=128,BLOCK_N=128,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=3,GROUP_M=8",
        "KERNEL=4,BLOCK_M=128,BLOCK_N=128,BLOCK_K=32,WARPS_M=2,WARPS_N=4,STAGES=3,GROUP_M=1",
        "KERNEL=4,BLOCK_M=128,BLOCK_N=256,BLOCK_K=16,WARPS_M=2,WARPS_N=4,STAGES=4,GROUP_M=8",
        "KERNEL=4,BLOCK_M=256,BLOCK_N=128,BLOCK_K=16,WARPS_M=4,WARPS_N=2,STAGES=4,GROUP_M=8",
        "KERNEL=4,BLOCK_M=128,BLOCK_N=128,BLOCK_K=16,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_M=8",
        "KERNEL=4,BLOCK_M=128,BLOCK_N=128,BLOCK_K=16,WARPS_M=2,WARPS_N=4,STAGES=4,GROUP_M=8",
        "KERNEL=4,BLOCK_M=128,BLOCK_N=64,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_M=4",
        "KERNEL=4,BLOCK_M=64,BLOCK_N=128,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_M=8",
        "KERNEL=4,BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,WARPS_M=2,WARPS_N=2,STAGES=3,GROUP_M=8",
        "KERNEL=4,BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_M=2",
        "KERNEL=4,BLOCK_M=32,BLOCK_N=64,BLOCK_K=32,WARPS_M=1,WARPS_N=2,STAGES=4,GROUP_M=8",
    };
    static const int64_t tc_shapes[][3] = {{16, 8, 16}, {200, 136, 72}, {61, 45, 37}, {257, 130, 300}};
    if (!tu_fast_path(ctx, "matmul", CLKIT_FAST_PATH_NV_MMA)) {
        expect_refused(ctx, configs[2]);
        clkit_context_release(ctx);
        return;
    }
    check_tile_configs(ctx, configs, sizeof configs / sizeof *configs, tc_shapes);
    for (int variant = 0; variant < 4; variant++) {
        run r = basic(96, 72, 40);
        r.in = CLKIT_F16, r.aligned = 1, r.batch = 3;
        r.a_bcast = variant == 1, r.b_bcast = variant == 2;
        r.opt.alpha = variant == 3 ? -0.5f : 1.0f, r.opt.beta = variant == 3 ? 0.75f : 0.0f;
        r.opt.activation = (clkit_activation)(variant % 3);
        r.opt.leaky_slope = 0.1f;
        check_run(ctx, &r, "tensor cores: default choice, batched");
    }
    clkit_context_release(ctx);
}
END_TEST

/* Hopper's wgmma (NVIDIA sm_90, built through sm_90a PTX): every wgmma tile the tuner may
   pick in each operand layout and 16-bit dtype pair, on shapes whose K walks the ring more
   than once and whose edges cut chunks and tiles; batches with either operand broadcast in
   each layout pair (the TMA's third coordinate); the default choice on aligned operands; grids
   of more tiles than a wave.
   Operands load by the TMA where the context has it, else (or CLKIT_NV_TMA=0) by cp.async:
   the GPU runs this suite both ways. Elsewhere (or CLKIT_WGMMA=0) a forced wgmma config is
   refused. */
START_TEST(wgmma)
{
    clkit_context *ctx = tu_ctx();
    static const char *configs[] = {
        "KERNEL=4,WGMMA=1,BLOCK_M=128,BLOCK_N=256,BLOCK_K=64,WARPS_M=8,WARPS_N=1,STAGES=4,GROUP_M=8",
        "KERNEL=4,WGMMA=1,BLOCK_M=256,BLOCK_N=128,BLOCK_K=64,WARPS_M=16,WARPS_N=1,STAGES=4,GROUP_M=8",
        "KERNEL=4,WGMMA=1,BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,WARPS_M=8,WARPS_N=1,STAGES=6,GROUP_M=1",
        "KERNEL=4,WGMMA=1,BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,WARPS_M=8,WARPS_N=1,STAGES=4,GROUP_M=8",
        "KERNEL=4,WGMMA=1,BLOCK_M=64,BLOCK_N=256,BLOCK_K=64,WARPS_M=4,WARPS_N=1,STAGES=4,GROUP_M=8",
        "KERNEL=4,WGMMA=1,BLOCK_M=64,BLOCK_N=128,BLOCK_K=64,WARPS_M=4,WARPS_N=1,STAGES=4,GROUP_M=4",
        "KERNEL=4,WGMMA=1,BLOCK_M=128,BLOCK_N=64,BLOCK_K=64,WARPS_M=8,WARPS_N=1,STAGES=4,GROUP_M=8",
        "KERNEL=4,WGMMA=1,BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,WARPS_M=4,WARPS_N=1,STAGES=3,GROUP_M=2",
        "KERNEL=4,WGMMA=1,BLOCK_M=128,BLOCK_N=64,BLOCK_K=64,WARPS_M=8,WARPS_N=1,STAGES=6,GROUP_M=8",
        "KERNEL=4,WGMMA=1,BLOCK_M=128,BLOCK_N=64,BLOCK_K=64,WARPS_M=8,WARPS_N=1,STAGES=6,GROUP_M=8,cp_async=1",
        "KERNEL=4,WGMMA=1,BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,WARPS_M=4,WARPS_N=1,STAGES=6,GROUP_M=8",
        "KERNEL=4,WGMMA=1,BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,WARPS_M=4,WARPS_N=1,STAGES=6,GROUP_M=8,cp_async=1",
        "KERNEL=4,WGMMA=1,BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,WARPS_M=4,WARPS_N=1,STAGES=12,GROUP_M=8,cp_async=1",
        "KERNEL=4,WGMMA=1,BLOCK_M=128,BLOCK_N=64,BLOCK_K=64,WARPS_M=8,WARPS_N=1,STAGES=9,GROUP_M=8",
        "KERNEL=4,WGMMA=1,BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,WARPS_M=8,WARPS_N=1,STAGES=7,GROUP_M=8",
    };
    static const int64_t wg_shapes[][3] = {{64, 64, 64}, {200, 264, 328}, {61, 45, 37}, {257, 130, 700}};
    if (!tu_fast_path(ctx, "matmul", CLKIT_FAST_PATH_NV_WGMMA)) {
        expect_refused(ctx, configs[3]);
        clkit_context_release(ctx);
        return;
    }
    check_tile_configs(ctx, configs, sizeof configs / sizeof *configs, wg_shapes);
    for (int variant = 0; variant < 6; variant++) {
        run b = basic(200, 264, 328);
        b.in = CLKIT_F16, b.aligned = 1, b.batch = 3, b.opt.config = configs[variant % 2];
        b.a_bcast = variant % 3 == 1, b.b_bcast = variant % 3 == 2;
        b.la = variant < 3 ? 'n' : 't', b.lb = variant < 3 ? 't' : 'n';
        check_run(ctx, &b, "wgmma: batched, broadcast");
    }
    run r = basic(520, 1000, 264);
    r.in = CLKIT_BF16, r.aligned = 1, r.opt.beta = 0.5f, r.opt.activation = CLKIT_ACT_RELU;
    check_run(ctx, &r, "wgmma: default choice");
    /* More tiles than work-groups run at once (the TMA's persistent work-groups walk several),
       K of one slice and of a ragged few, in the widest and the smallest tile. */
    for (int i = 0; i < 4; i++) {
        run w = basic(2100, 4200, i % 2 ? 200 : 64);
        w.in = CLKIT_F16, w.aligned = 1, w.opt.beta = 0.5f, w.opt.config = configs[i < 2 ? 0 : 7];
        check_run(ctx, &w, "wgmma: more tiles than a wave");
    }
    /* About one wave on an H100 or H200 (wave_pick): 128 x 64 with K of 16 slices (6 stages,
       loaded by cp.async) and of 20 (the TMA, its ring deepened to 9), 64 x 64 with K of 16
       (6 stages) and of 32 (12), 128 x 128 with 7; half a wave of 64 x 64 on 12 stages split
       in two, at M 48 and M 20 (deep_split). */
    static const int64_t waves[][3] = {{256, 4096, 1024}, {256, 4096, 1280}, {128, 4096, 1024}, {128, 4096, 2048},
                                       {512, 4096, 1280}, {48, 4096, 4096},  {20, 4096, 4096}};
    for (size_t i = 0; i < sizeof waves / sizeof *waves; i++) {
        run v = basic(waves[i][0], waves[i][1], waves[i][2]);
        v.in = i % 2 ? CLKIT_BF16 : CLKIT_F16, v.aligned = 1, v.opt.beta = 0.5f;
        check_run(ctx, &v, "wgmma: a wave of tiles, deep rings");
    }
    clkit_context_release(ctx);
}
END_TEST

/* f32 operands on the tensor cores. With them: every TF32 tile the tuner may pick in each
   operand layout, edges that cut 4-element chunks, batches with broadcast, alpha, beta and
   activations, and the default choice, under allow_tf32 within the TF32 rounding bound
   (2^-11 an input) and measurably off exact f32 (the path ran: f32 accumulation alone stays
   near 2^-24), and by default as 3xTF32 within its bound (2^-20 an input) and far inside
   TF32's; exact_f32 and unaligned operands exact, a forced tensor-core config refused under
   exact_f32, and exact_f32 with allow_tf32 refused. Without tensor cores both options change
   nothing: exact f32. */
START_TEST(tf32)
{
    clkit_context *ctx = tu_ctx();
    static const char *configs[] = {
        "KERNEL=4,BLOCK_M=128,BLOCK_N=128,BLOCK_K=16,WARPS_M=2,WARPS_N=4,STAGES=3,GROUP_M=8",
        "KERNEL=4,BLOCK_M=128,BLOCK_N=256,BLOCK_K=8,WARPS_M=2,WARPS_N=4,STAGES=4,GROUP_M=8",
        "KERNEL=4,BLOCK_M=256,BLOCK_N=128,BLOCK_K=8,WARPS_M=4,WARPS_N=2,STAGES=4,GROUP_M=4",
        "KERNEL=4,BLOCK_M=128,BLOCK_N=128,BLOCK_K=8,WARPS_M=2,WARPS_N=4,STAGES=6,GROUP_M=1",
        "KERNEL=4,BLOCK_M=128,BLOCK_N=64,BLOCK_K=16,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_M=8",
        "KERNEL=4,BLOCK_M=64,BLOCK_N=128,BLOCK_K=16,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_M=8",
        "KERNEL=4,BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=3,GROUP_M=2",
        "KERNEL=4,BLOCK_M=64,BLOCK_N=64,BLOCK_K=16,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_M=8",
        "KERNEL=4,BLOCK_M=32,BLOCK_N=64,BLOCK_K=16,WARPS_M=1,WARPS_N=2,STAGES=4,GROUP_M=8",
    };
    static const char layouts[][2] = {{'n', 'n'}, {'n', 't'}, {'t', 'n'}, {'t', 't'}};
    static const int64_t tf_shapes[][3] = {{16, 8, 8}, {200, 136, 72}, {61, 45, 37}, {257, 130, 300}};
    int tc = tu_fast_path(ctx, "matmul", CLKIT_FAST_PATH_NV_MMA);
    for (size_t i = 0; i < (tc ? sizeof configs / sizeof *configs : 0); i++)
        for (size_t l = 0; l < 4; l++) {
            const int64_t *sh = tf_shapes[(i + l) % 4];
            run r = basic(sh[0], sh[1], sh[2]);
            r.aligned = 1, r.opt.config = configs[i], r.opt.allow_tf32 = 1, r.in_rtol = 0x1p-11;
            r.la = layouts[l][0], r.lb = layouts[l][1], r.lc = l == 3 ? 't' : 'n';
            char what[160];
            snprintf(what, sizeof what, "tf32 %s %lldx%lldx%lld %c%c", configs[i], (long long)r.m,
                     (long long)r.n, (long long)r.k, r.la, r.lb);
            ck_assert_msg(check_run(ctx, &r, what) > 0x1p-20, "%s: exact f32, not TF32", what);
            r.opt.allow_tf32 = 0, r.in_rtol = 0;
            snprintf(what, sizeof what, "3xtf32 %s %lldx%lldx%lld %c%c", configs[i], (long long)r.m,
                     (long long)r.n, (long long)r.k, r.la, r.lb);
            ck_assert_msg(check_run(ctx, &r, what) < 0x1p-16, "%s: TF32's error, not 3xTF32's", what);
        }
    for (int variant = 0; variant < 4; variant++) {
        run r = basic(96, 72, 40);
        r.aligned = 1, r.batch = 3, r.opt.allow_tf32 = 1, r.in_rtol = tc ? 0x1p-11 : 0;
        r.a_bcast = variant == 1, r.b_bcast = variant == 2;
        r.opt.alpha = variant == 3 ? -0.5f : 1.0f, r.opt.beta = variant == 3 ? 0.75f : 0.0f;
        r.opt.activation = (clkit_activation)(variant % 3);
        r.opt.leaky_slope = 0.1f;
        double err = check_run(ctx, &r, "tf32: default choice, batched");
        if (tc) ck_assert_msg(err > 0x1p-20, "tf32 default choice: exact f32, not TF32");
        r.opt.allow_tf32 = 0, r.in_rtol = 0;
        ck_assert_msg(check_run(ctx, &r, "3xtf32: default choice, batched") < 0x1p-16,
                      "3xtf32 default choice: TF32's error");
    }
    run exact = basic(96, 72, 40), ragged = basic(96, 72, 40);
    exact.aligned = 1, exact.opt.exact_f32 = 1;
    ragged.opt.allow_tf32 = 1; /* strides of odd element counts: no 16-byte chunks */
    check_run(ctx, &exact, "exact_f32: exact f32");
    check_run(ctx, &ragged, "tf32 on unaligned operands: exact f32");
    exact.opt.config = configs[0];
    operand a = make(ctx, CLKIT_F32, 0, 64, 64, 'n', 0, 0, 1), c = make(ctx, CLKIT_F32, 0, 64, 64, 'n', 0, 0, 2);
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_matmul(ctx, &a.t, &a.t, &c.t, &exact.opt));
    exact.opt.config = NULL, exact.opt.allow_tf32 = 1;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_matmul(ctx, &a.t, &a.t, &c.t, &exact.opt));
    drop(&a), drop(&c);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(clblast_provider)
{
    clkit_context *ctx = tu_ctx();
    if (!CLKIT_HAVE_CLBLAST) {
        operand a = make(ctx, CLKIT_F32, 0, 8, 8, 'n', 0, 0, 1), c = make(ctx, CLKIT_F32, 0, 8, 8, 'n', 0, 0, 2);
        clkit_matmul_options o = clkit_matmul_defaults();
        o.provider = CLKIT_PROVIDER_CLBLAST;
        TU_EXPECT(CLKIT_ERR_UNSUPPORTED, clkit_matmul(ctx, &a.t, &a.t, &c.t, &o));
        drop(&a), drop(&c);
        clkit_context_release(ctx);
        return;
    }
    run r = basic(70, 50, 40);
    r.opt.provider = CLKIT_PROVIDER_CLBLAST;
    r.opt.alpha = 0.75f, r.opt.beta = 0.5f;
    check_run(ctx, &r, "CLBlast nn");
    r.la = 't', r.lc = 't';
    check_run(ctx, &r, "CLBlast tn->t");
    r.batch = 2;
    r.b_bcast = 1;
    check_run(ctx, &r, "CLBlast batched");
    r = basic(8, 8, 8);
    r.opt.provider = CLKIT_PROVIDER_CLBLAST;
    r.opt.activation = CLKIT_ACT_RELU;
    operand a = make(ctx, CLKIT_F32, 0, 8, 8, 'n', 0, 0, 1), c = make(ctx, CLKIT_F32, 0, 8, 8, 'n', 0, 0, 2);
    TU_EXPECT(CLKIT_ERR_UNSUPPORTED, clkit_matmul(ctx, &a.t, &a.t, &c.t, &r.opt));
    drop(&a), drop(&c);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(bad_input)
{
    clkit_context *ctx = tu_ctx();
    operand a = make(ctx, CLKIT_F32, 0, 8, 6, 'n', 0, 0, 1), b = make(ctx, CLKIT_F32, 0, 6, 4, 'n', 0, 0, 2);
    operand c = make(ctx, CLKIT_F32, 0, 8, 4, 'n', 0, 0, 3), h = make(ctx, CLKIT_F16, 0, 6, 4, 'n', 0, 0, 4);
    double before[32];
    tu_read(ctx, c.buf, CLKIT_F32, 32, before);
    ck_assert_int_eq(clkit_matmul(NULL, &a.t, &b.t, &c.t, NULL), CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_matmul(ctx, NULL, &b.t, &c.t, NULL));
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_matmul(ctx, &a.t, &a.t, &c.t, NULL));      /* K mismatch */
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_matmul(ctx, &b.t, &b.t, &c.t, NULL));
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_matmul(ctx, &a.t, &h.t, &c.t, NULL));      /* f32 @ f16 */
    clkit_tensor t = c.t;
    t.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_matmul(ctx, &a.t, &b.t, &t, NULL));        /* f32 -> f16 */
    t = a.t;
    t.dtype = CLKIT_I32;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_matmul(ctx, &t, &b.t, &c.t, NULL));
    t = a.t;
    t.ndim = 1;
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_matmul(ctx, &t, &b.t, &c.t, NULL));
    clkit_tensor overlap = c.t;
    overlap.buffer = a.buf;                                                        /* C over A */
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_matmul(ctx, &a.t, &b.t, &overlap, NULL));
    overlap.buffer = b.buf;
    overlap.shape[0] = 6, overlap.shape[1] = 4;
    clkit_tensor a6 = a.t;
    a6.shape[0] = 6;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_matmul(ctx, &a6, &b.t, &overlap, NULL));
    t = c.t;
    t.strides[0] = 0;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_matmul(ctx, &a.t, &b.t, &t, NULL));
    t = c.t;
    t.shape[0] = 7;
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_matmul(ctx, &a.t, &b.t, &t, NULL));
    clkit_matmul_options o = clkit_matmul_defaults();
    o.alpha = NAN;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_matmul(ctx, &a.t, &b.t, &c.t, &o));
    o = clkit_matmul_defaults();
    o.activation = (clkit_activation)7;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_matmul(ctx, &a.t, &b.t, &c.t, &o));
    o = clkit_matmul_defaults();
    o.config = "KERNEL=2,BLOCK_M=3";
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_matmul(ctx, &a.t, &b.t, &c.t, &o));
    o.config = "garbage";
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_matmul(ctx, &a.t, &b.t, &c.t, &o));
    int64_t bshape[3] = {2, 8, 6}, bstr[3] = {48, 6, 1};
    clkit_tensor a3 = tu_view(a.buf, CLKIT_F32, 3, bshape, bstr, 0);
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_matmul(ctx, &a3, &b.t, &c.t, NULL));
    bstr[0] = 0;
    a3 = tu_view(a.buf, CLKIT_F32, 3, bshape, bstr, 0);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_matmul(ctx, &a3, &b.t, &c.t, NULL));       /* batch into 2-D C */
    tu_assert_unchanged(ctx, c.buf, CLKIT_F32, 32, before);
    drop(&a), drop(&b), drop(&c), drop(&h);
    clkit_context_release(ctx);
}
END_TEST

/* An f32 operand of rows x cols with strides {rs, cs} (any sign, zero too) in a buffer with
   rows x cols spare elements past those it reaches: room enough that a provider misreading
   the strides reads wrong values instead of failing a size check. */
static operand make_strided(clkit_context *ctx, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                            uint64_t seed)
{
    int64_t lo = (rs < 0 ? rs * (rows - 1) : 0) + (cs < 0 ? cs * (cols - 1) : 0);
    int64_t hi = (rs > 0 ? rs * (rows - 1) : 0) + (cs > 0 ? cs * (cols - 1) : 0);
    operand o;
    o.len = (size_t)(hi - lo + 1 + rows * cols);
    o.host = malloc(o.len * sizeof *o.host);
    ref_fill_random(o.host, o.len, CLKIT_F32, -1, 1, seed);
    o.buf = tu_buffer(ctx, CLKIT_F32, o.len, o.host);
    int64_t shape[2] = {rows, cols}, strides[2] = {rs, cs};
    o.t = tu_view(o.buf, CLKIT_F32, 2, shape, strides, (size_t)-lo);
    o.r.v = o.host - lo;
    o.r.s[0] = 0, o.r.s[1] = rs, o.r.s[2] = cs;
    return o;
}

/* C (m x n, contiguous, beta 0.5) = A @ B with A and B of the given strides, on provider p
   (and config, NULL for the chosen one). */
static void check_strided_config(clkit_context *ctx, clkit_provider p, const char *config,
                                 const int64_t *as, const int64_t *bs, int64_t m, int64_t n, int64_t k)
{
    operand a = make_strided(ctx, m, k, as[0], as[1], 3), b = make_strided(ctx, k, n, bs[0], bs[1], 5);
    operand c = make_strided(ctx, m, n, n, 1, 7);
    double *want = malloc(c.len * sizeof *want), *got = malloc(c.len * sizeof *got);
    double *mag = malloc(c.len * sizeof *mag);
    memcpy(want, c.host, c.len * sizeof *want);
    ref_matrix wc = c.r;
    wc.v = want;
    ref_matmul(&a.r, &b.r, &wc, 1, m, n, k, 1.0, 0.5, 0, 0, mag);
    clkit_matmul_options o = clkit_matmul_defaults();
    o.provider = p, o.beta = 0.5f, o.exact_f32 = 1, o.config = config;
    TU_CHECK(clkit_matmul(ctx, &a.t, &b.t, &c.t, &o));
    tu_read(ctx, c.buf, CLKIT_F32, c.len, got);
    for (size_t i = 0; i < c.len; i++) /* past the m x n view: unchanged */
        ck_assert_msg(tu_close(got[i], want[i], i < (size_t)(m * n) ? 4.0 * (double)(k + 2) * 0x1p-23 * mag[i] + 1e-30 : 0, 0),
                      "provider %d, A strides {%lld, %lld}, B strides {%lld, %lld}: C[%zu] is %.9g, "
                      "expected %.9g", (int)p, (long long)as[0], (long long)as[1], (long long)bs[0],
                      (long long)bs[1], i, got[i], want[i]);
    free(want), free(got), free(mag);
    drop(&a), drop(&b), drop(&c);
}

static void check_strided(clkit_context *ctx, clkit_provider p, const int64_t *as, const int64_t *bs,
                          int64_t m, int64_t n, int64_t k)
{
    check_strided_config(ctx, p, NULL, as, bs, m, n, k);
}

/* Zero (broadcast), negative and padded strides on every provider: CLBlast serves only the
   layouts it can express, and clkit's kernels the rest. */
static const int64_t odd_strides[][2][2] = {
    {{64, 0}, {64, 1}},  {{64, 1}, {64, 0}},  {{0, 1}, {64, 1}},  {{64, -1}, {64, 1}},
    {{-64, 1}, {1, 64}}, {{64, 1}, {-64, 1}}, {{1, 0}, {0, 1}},   {{69, 1}, {1, 70}},
    {{1, 67}, {-1, 64}}, {{32, 1}, {64, 1}},  {{64, 1}, {1, 32}},
};

static void check_odd_strides(clkit_context *ctx, clkit_provider p)
{
    for (size_t i = 0; i < sizeof odd_strides / sizeof *odd_strides; i++)
        check_strided(ctx, p, odd_strides[i][0], odd_strides[i][1], 64, 64, 64);
}

START_TEST(odd_strides_every_provider)
{
    clkit_context *ctx = tu_ctx();
    check_odd_strides(ctx, CLKIT_PROVIDER_AUTO);
    check_odd_strides(ctx, CLKIT_PROVIDER_CLKIT);
    if (CLKIT_HAVE_CLBLAST) check_odd_strides(ctx, CLKIT_PROVIDER_CLBLAST);
    clkit_context_release(ctx);
}
END_TEST

/* A tuned CLBlast entry, measured on contiguous operands, must not serve zero, negative or
   overlapping strides of the same shape. */
START_TEST(tuned_clblast_entry_keeps_to_its_layout)
{
    char dir[] = "/tmp/clkit-blas-XXXXXX", path[64];
    ck_assert(mkdtemp(dir) != NULL);
    tu_setenv("CLKIT_CACHE_DIR", dir);
    clkit_context *ctx = tu_ctx();
    operand a = make_strided(ctx, 64, 64, 64, 1, 1), c = make_strided(ctx, 64, 64, 64, 1, 2);
    clkit_matmul_options o = clkit_matmul_defaults();
    o.exact_f32 = 1;
    TU_CHECK(clkit_tune_matmul(ctx, &a.t, &a.t, &c.t, &o, NULL));
    drop(&a), drop(&c);
    snprintf(path, sizeof path, "%s/tuned.json", dir);
    json_object *root = json_object_from_file(path), *entries;
    ck_assert(root && json_object_object_get_ex(root, "entries", &entries));
    for (size_t i = 0; i < json_object_array_length(entries); i++)
        json_object_object_add(json_object_array_get_idx(entries, i), "config",
                               json_object_new_string("provider=1"));
    ck_assert(json_object_to_file(path, root) == 0);
    json_object_put(root);
    check_strided(ctx, CLKIT_PROVIDER_AUTO, odd_strides[0][1], odd_strides[0][1], 64, 64, 64);
    check_odd_strides(ctx, CLKIT_PROVIDER_AUTO);
    clkit_context_release(ctx);
}
END_TEST

/* The skinny kernel (KERNEL=3) at its boundaries, forced with several K splits: M around one
   and four row blocks of 16, N and K multiples of nothing, B N-major ('n', the vector loads
   along N: 16-byte aligned or not) and K-major ('t', nn.Linear's weight), transposed A,
   batches with a broadcast operand, alpha, beta and activations across the splits, every
   dtype. */
static const char *const skinny_configs[] = {
    "KERNEL=3,SK_COLS=16,SK_K=16,SK_M=16,SK_LOADS=4,splits=3",
    "KERNEL=3,SK_COLS=8,SK_K=32,SK_M=1,SK_LOADS=8,splits=5",
    "KERNEL=3,SK_COLS=4,SK_K=64,SK_M=2,SK_LOADS=8,splits=4",
    "KERNEL=3,SK_COLS=16,SK_K=8,SK_M=8,SK_LOADS=2",
    "KERNEL=3,SK_COLS=8,SK_K=16,SK_M=4,SK_LOADS=8,splits=1",
    "KERNEL=3,SK_COLS=4,SK_K=128,SK_M=1,SK_LOADS=8,splits=1",
    "KERNEL=3,SK_COLS=4,SK_K=64,SK_M=16,SK_LOADS=8,splits=2",
};
#define NSKINNY (sizeof skinny_configs / sizeof *skinny_configs)

START_TEST(skinny_boundaries)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t rows[] = {1, 2, 15, 16, 17, 63, 64, 65};
    static const clkit_dtype combos[][2] = {{CLKIT_F32, CLKIT_F32}, {CLKIT_F16, CLKIT_F32},
                                            {CLKIT_BF16, CLKIT_BF16}, {CLKIT_F16, CLKIT_F16}};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        for (int lb = 0; lb < 2; lb++) {
            size_t v = 2 * i + (size_t)lb;
            run r = basic(rows[i], 1000, 777);
            r.opt.config = skinny_configs[v % NSKINNY];
            r.lb = lb ? 't' : 'n';
            r.la = v % 3 == 1 ? 't' : 'n';
            r.in = combos[v % 4][0], r.out = combos[v % 4][1];
            r.aligned = (int)(v / 4 % 2);
            r.batch = v % 5 == 2 ? 3 : 0;
            r.a_bcast = v % 10 == 2, r.b_bcast = v % 10 == 7;
            r.opt.alpha = v % 2 ? -0.75f : 1.0f;
            r.opt.beta = v % 3 ? 0.5f : 0.0f;
            r.opt.activation = (clkit_activation)(v % 3);
            r.opt.leaky_slope = 0.1f;
            char what[160];
            snprintf(what, sizeof what, "%s M %lld %c%c %s%s", r.opt.config, (long long)r.m, r.la, r.lb,
                     clkit_dtype_name(r.in), r.aligned ? " aligned" : "");
            check_run(ctx, &r, what);
        }
    /* N and K one past a multiple of 4096 and 8: the last column group and k chunk ragged. */
    for (int lb = 0; lb < 2; lb++)
        for (int i = 0; i < 2; i++) {
            run r = basic(i ? 16 : 1, 4099, 4097);
            r.opt.config = skinny_configs[i];
            r.lb = lb ? 't' : 'n';
            r.in = lb ? CLKIT_BF16 : CLKIT_F16;
            r.opt.beta = 1.0f;
            check_run(ctx, &r, r.opt.config);
        }
    clkit_context_release(ctx);
}
END_TEST

/* B with neither stride 1 (the skinny kernel's element-wise loads) and with negative and
   zero strides, split or not. */
START_TEST(skinny_strides)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t strides[][2][2] = {
        {{300, 1}, {3, 700}}, {{1, 40}, {-700, 2}}, {{300, 1}, {0, 1}}, {{300, 1}, {1, 0}},
    };
    for (size_t i = 0; i < sizeof strides / sizeof *strides; i++)
        for (size_t c = 0; c < 2; c++)
            check_strided_config(ctx, CLKIT_PROVIDER_CLKIT, skinny_configs[c], strides[i][0], strides[i][1],
                                 5, 333, 300);
    clkit_context_release(ctx);
}
END_TEST

/* The same split-K product of f16 operands (M x K, K x 1000) twice gives the same bits (the
   splits are summed in a fixed order, whichever finishes last), B laid out as lb. */
static void check_same_bits(clkit_context *ctx, const char *config, int64_t m, int64_t k, char lb)
{
    operand a = make(ctx, CLKIT_F16, 0, m, k, 'n', 0, 0, 1);
    operand b = make(ctx, CLKIT_F16, 0, k, 1000, lb, 0, 0, 2);
    operand c = make(ctx, CLKIT_F32, 0, m, 1000, 'n', 0, 0, 3);
    clkit_matmul_options o = clkit_matmul_defaults();
    o.config = config;
    double *first = malloc(c.len * sizeof *first), *second = malloc(c.len * sizeof *second);
    TU_CHECK(clkit_matmul(ctx, &a.t, &b.t, &c.t, &o));
    tu_read(ctx, c.buf, CLKIT_F32, c.len, first);
    TU_CHECK(clkit_matmul(ctx, &a.t, &b.t, &c.t, &o));
    tu_read(ctx, c.buf, CLKIT_F32, c.len, second);
    ck_assert_msg(memcmp(first, second, c.len * sizeof *first) == 0,
                  "split-K results differ between two runs (%s, B %c)", config ? config : "default", lb);
    free(first), free(second);
    drop(&a), drop(&b), drop(&c);
}

START_TEST(skinny_deterministic)
{
    clkit_context *ctx = tu_ctx();
    for (int lb = 0; lb < 2; lb++) check_same_bits(ctx, skinny_configs[1], 4, 4097, lb ? 't' : 'n');
    clkit_context_release(ctx);
}
END_TEST

/* The context's split counters grow past their first 1024 (a batch of 80 x 16 column blocks)
   and serve a small call again after: each call's last split is still the one that sums. */
START_TEST(split_counters_grow)
{
    clkit_context *ctx = tu_ctx();
    for (int i = 0; i < 3; i++) {
        run r = basic(1, 1000, 777);
        r.opt.config = skinny_configs[1];
        r.batch = i == 1 ? 80 : 2;
        r.opt.beta = 0.5f;
        check_run(ctx, &r, i == 1 ? "split counters: 1280 blocks" : "split counters: 32 blocks");
    }
    clkit_context_release(ctx);
}
END_TEST

/* Tensor-core tiles with K split over work-groups (NVIDIA): mma.sync and wgmma tiles forced
   with splits whose last is ragged or shorter than a slice, in each operand layout and
   16-bit dtype pair; batches with a broadcast operand, alpha, beta and activations across the
   splits; 3xTF32 f32; a short grid's automatic split; the same bits twice. Where the tiles
   cannot run, a forced one is refused. */
static const char *const split_mma[] = {
    "KERNEL=4,BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_M=2,splits=4",
    "KERNEL=4,BLOCK_M=128,BLOCK_N=128,BLOCK_K=32,WARPS_M=2,WARPS_N=2,STAGES=3,GROUP_M=8,splits=2",
};
static const char *const split_wgmma[] = {
    "KERNEL=4,WGMMA=1,BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,WARPS_M=4,WARPS_N=1,STAGES=3,GROUP_M=2,splits=3",
    "KERNEL=4,WGMMA=1,BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,WARPS_M=8,WARPS_N=1,STAGES=4,GROUP_M=8,splits=5",
    "KERNEL=4,WGMMA=1,BLOCK_M=64,BLOCK_N=256,BLOCK_K=64,WARPS_M=4,WARPS_N=1,STAGES=4,GROUP_M=8,splits=2",
    "KERNEL=4,WGMMA=1,BLOCK_M=64,BLOCK_N=64,BLOCK_K=64,WARPS_M=4,WARPS_N=1,STAGES=6,GROUP_M=8,splits=4",
};

static void check_split_tiles(clkit_context *ctx, const char *const *configs, size_t n)
{
    static const int64_t split_shapes[][3] = {{61, 200, 1000}, {130, 72, 777}, {16, 520, 300}, {257, 130, 300}};
    check_tile_configs(ctx, configs, n, split_shapes);
    for (size_t i = 0; i < n; i++) {
        run r = basic(100, 264, 1100);
        r.in = CLKIT_F16, r.aligned = 1, r.batch = 3, r.opt.config = configs[i];
        r.a_bcast = i % 2 == 0, r.b_bcast = i % 2 == 1;
        r.opt.alpha = -0.5f, r.opt.beta = 0.75f, r.opt.leaky_slope = 0.1f;
        r.opt.activation = (clkit_activation)(1 + i % 2);
        check_run(ctx, &r, configs[i]);
        check_same_bits(ctx, configs[i], 70, 4096, i % 2 ? 't' : 'n');
    }
}

START_TEST(tile_split)
{
    clkit_context *ctx = tu_ctx();
    if (!tu_fast_path(ctx, "matmul", CLKIT_FAST_PATH_NV_MMA)) {
        expect_refused(ctx, split_mma[0]);
        clkit_context_release(ctx);
        return;
    }
    check_split_tiles(ctx, split_mma, sizeof split_mma / sizeof *split_mma);
    if (tu_fast_path(ctx, "matmul", CLKIT_FAST_PATH_NV_WGMMA))
        check_split_tiles(ctx, split_wgmma, sizeof split_wgmma / sizeof *split_wgmma);
    else
        expect_refused(ctx, split_wgmma[0]);
    run f = basic(61, 200, 1000);
    f.aligned = 1, f.opt.beta = 0.5f;
    f.opt.config = "KERNEL=4,BLOCK_M=64,BLOCK_N=64,BLOCK_K=16,WARPS_M=2,WARPS_N=2,STAGES=4,GROUP_M=8,splits=3";
    ck_assert_msg(check_run(ctx, &f, f.opt.config) < 0x1p-16, "3xtf32 split: TF32's error");
    /* A grid of a few tiles and a long K: the heuristic's own split. */
    for (int i = 0; i < 2; i++) {
        run d = basic(i ? 16 : 128, 512, 8192);
        d.in = i ? CLKIT_BF16 : CLKIT_F16, d.aligned = 1, d.lb = 't';
        check_run(ctx, &d, "split-K: default choice");
    }
    clkit_context_release(ctx);
}
END_TEST

/* With CLKIT_AUTOTUNE=1 a cache miss tunes on the call's own shape: candidates write a
   scratch copy, so C gets exactly one alpha A B + beta C, and the winner is stored. */
START_TEST(autotune_on_first_use)
{
    char dir[] = "/tmp/clkit-autotune-XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    tu_setenv("CLKIT_CACHE_DIR", dir);
    tu_setenv("CLKIT_AUTOTUNE", "1");
    clkit_context *ctx = tu_ctx();
    run r = basic(24, 20, 12);
    r.opt.beta = 1.0f;
    r.lb = 't';
    check_run(ctx, &r, "autotuned call");
    tu_unsetenv("CLKIT_AUTOTUNE");
    char path[128];
    snprintf(path, sizeof path, "%s/tuned.json", dir);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no tuned entry was stored");
    fclose(f);
    operand a = make(ctx, CLKIT_F32, 0, 8, 8, 'n', 0, 0, 1), c = make(ctx, CLKIT_F32, 0, 8, 8, 'n', 0, 0, 2);
    clkit_matmul_options o = clkit_matmul_defaults();
    o.provider = CLKIT_PROVIDER_CLBLAST;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_tune_matmul(ctx, &a.t, &a.t, &c.t, &o, NULL));
    /* A budget below 0 or NaN is refused before any candidate runs, not taken for "no limit". */
    o = clkit_matmul_defaults();
    clkit_tune_options bad[2] = {{.budget_s = -1}, {.budget_s = NAN}};
    for (int i = 0; i < 2; i++) {
        TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_tune_matmul(ctx, &a.t, &a.t, &c.t, &o, &bad[i]));
        ck_assert_msg(strstr(clkit_last_error(ctx), "budget_s"), "%s", clkit_last_error(ctx));
    }
    drop(&a), drop(&c);
    clkit_context_release(ctx);
}
END_TEST

/* 16-bit operands the tensor cores cannot read in place (leading dimensions and offsets off
   16 bytes, every layout, a broadcast batch, beta with relu, f16 C): on NVIDIA copied into
   aligned scratch and multiplied there (the scratch peak shows the copies), elsewhere by the
   portable kernels; the same result within the dtype's bound either way. */
START_TEST(staged_operands)
{
    clkit_context *ctx = tu_ctx();
    static const char layouts[][2] = {{'n', 'n'}, {'t', 'n'}, {'n', 't'}, {'t', 't'}};
    static const int64_t sizes[][3] = {{200, 264, 1030}, {201, 130, 515}, {96, 520, 257}, {130, 72, 999}};
    for (size_t l = 0; l < 4; l++) {
        run r = basic(sizes[l][0], sizes[l][1], sizes[l][2]);
        r.in = l % 2 ? CLKIT_BF16 : CLKIT_F16, r.out = l == 2 ? CLKIT_F16 : CLKIT_F32;
        r.la = layouts[l][0], r.lb = layouts[l][1];
        r.batch = l == 3 ? 3 : 0, r.a_bcast = l == 3;
        r.opt.beta = l == 1 ? 0.5f : 0.0f;
        r.opt.activation = l == 1 ? CLKIT_ACT_RELU : CLKIT_ACT_NONE;
        check_run(ctx, &r, "staged operands");
    }
    run big = basic(1024, 1030, 1030);
    big.in = CLKIT_F16;
    clkit_scratch_peak(ctx, 1);
    check_run(ctx, &big, "staged operands 1024 x 1030 x 1030");
    uint64_t copies = (1024 + 1030) * 1030 * 2, peak = clkit_scratch_peak(ctx, 0);
    if (tu_fast_path(ctx, "matmul", CLKIT_FAST_PATH_NV_MMA))
        ck_assert_msg(peak >= copies, "scratch peak %llu: the operands were not staged", (unsigned long long)peak);
    clkit_context_release(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("matmul");
    TCase *tc = tu_tcase("matmul");
    tcase_add_test(tc, shapes_and_layouts);
    tcase_add_test(tc, dtypes);
    tcase_add_test(tc, alpha_beta_activation);
    tcase_add_test(tc, beta_zero_ignores_nan);
    tcase_add_test(tc, empty_k);
    tcase_add_test(tc, batched_and_broadcast);
    tcase_add_test(tc, every_config);
    tcase_add_test(tc, tensor_cores);
    tcase_add_test(tc, wgmma);
    tcase_add_test(tc, tf32);
    tcase_add_test(tc, clblast_provider);
    tcase_add_test(tc, odd_strides_every_provider);
    tcase_add_test(tc, tuned_clblast_entry_keeps_to_its_layout);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, autotune_on_first_use);
    tcase_add_test(tc, skinny_boundaries);
    tcase_add_test(tc, skinny_strides);
    tcase_add_test(tc, skinny_deterministic);
    tcase_add_test(tc, split_counters_grow);
    tcase_add_test(tc, tile_split);
    tcase_add_test(tc, staged_operands);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

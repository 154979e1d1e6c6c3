/* clkit_cross_entropy and clkit_linear_cross_entropy against double-precision references
   computed from the same quantized inputs: every option and their combinations, the three
   reductions, ignored tokens (custom ignore_index, all ignored), T and V from 1, padded,
   offset and transposed logits, strided targets of both index dtypes, in-place gradients,
   large and infinite logits, several vocabulary chunks (CLKIT_LCE_CHUNK) or token chunks
   (CLKIT_LCE_TOKENS, on the tensor cores) with a ragged last one, each gradient of the
   linear op alone, bitwise reruns and bounded scratch; the references' gradients against
   finite differences; and bad input, which must leave every output untouched. */
#define _GNU_SOURCE
#include "util.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const clkit_dtype float_dtypes[] = {CLKIT_F32, CLKIT_F16, CLKIT_BF16};
#define FILL 7.0 /* what buffers hold outside the views under test */

/* ---- layouts ---- */

static tu_layout row_major(int64_t rows, int64_t cols, int64_t pad, size_t off)
{
    tu_layout l = {cols + pad, 1, off, off + (size_t)(rows * (cols + pad))};
    return l;
}

static tu_layout col_major(int64_t rows, int64_t cols, size_t off)
{
    tu_layout l = {1, rows, off, off + (size_t)(rows * cols)};
    return l;
}

/* A vector of n elements with a stride, as a 1 x n matrix. */
static tu_layout strided(int64_t n, int64_t stride, size_t off)
{
    tu_layout l = {0, stride, off, off + (size_t)((n - 1) * stride + 1)};
    return l;
}

/* A device buffer holding vals (rows x cols, row-major) in layout l and FILL elsewhere; *t
   views it (1-D when rows is 0: a vector of cols). */
static cl_mem put(clkit_context *ctx, clkit_dtype dt, const tu_layout *l, int64_t rows,
                  int64_t cols, const double *vals, clkit_tensor *t)
{
    double *buf = malloc(l->total * sizeof *buf);
    ck_assert(buf);
    for (size_t i = 0; i < l->total; i++) buf[i] = FILL;
    for (int64_t r = 0; r < (rows ? rows : 1); r++)
        for (int64_t c = 0; c < cols; c++) buf[tu_at(l, r, c)] = vals ? vals[r * cols + c] : FILL;
    cl_mem m = tu_buffer(ctx, dt, l->total, buf);
    free(buf);
    int64_t shape[2] = {rows, cols}, strides[2] = {l->rs, l->cs};
    *t = rows ? tu_view(m, dt, 2, shape, strides, l->offset) : tu_view(m, dt, 1, shape + 1, strides + 1, l->offset);
    return m;
}

/* Reads the view back into out (row-major) and asserts the rest of the buffer still holds FILL. */
static void get(clkit_context *ctx, cl_mem m, clkit_dtype dt, const tu_layout *l, int64_t rows,
                int64_t cols, double *out, const char *what)
{
    double *buf = malloc(l->total * sizeof *buf);
    char *in_view = calloc(l->total, 1);
    ck_assert(buf && in_view);
    tu_read(ctx, m, dt, l->total, buf);
    for (int64_t r = 0; r < (rows ? rows : 1); r++)
        for (int64_t c = 0; c < cols; c++) {
            out[r * cols + c] = buf[tu_at(l, r, c)];
            in_view[tu_at(l, r, c)] = 1;
        }
    for (size_t i = 0; i < l->total; i++)
        if (!in_view[i] && buf[i] != FILL)
            ck_abort_msg("%s: element %zu outside the view was written (%g)", what, i, buf[i]);
    free(buf);
    free(in_view);
}

static double max_abs_finite(const double *v, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i]) && fabs(v[i]) > m) m = fabs(v[i]);
    return m;
}

static void random_targets(int64_t *y, int64_t t, int64_t v, int ignore_every, int64_t ignore,
                           uint64_t seed)
{
    double *u = malloc((size_t)t * sizeof *u);
    ck_assert(u);
    tu_fill_random(u, (size_t)t, CLKIT_F32, 0, 1, seed);
    for (int64_t i = 0; i < t; i++) {
        y[i] = (int64_t)(u[i] * (double)v);
        if (y[i] >= v) y[i] = v - 1;
        if (ignore_every && i % ignore_every == ignore_every - 1) y[i] = ignore;
    }
    free(u);
}

static const char *reduction_name(clkit_reduction r)
{
    return r == CLKIT_REDUCTION_MEAN ? "mean" : r == CLKIT_REDUCTION_SUM ? "sum" : "none";
}

/* ---- clkit_cross_entropy ---- */

typedef struct ce_case {
    clkit_dtype dt, tdt; /* logits, targets */
    int64_t t, v;
    clkit_cross_entropy_options o;
    bool zloss, grad, in_place;
    tu_layout lx, ld;               /* logits and dlogits */
    int64_t y_stride, l_stride; /* targets; loss and z_loss */
} ce_case;

static ce_case ce_basic(clkit_dtype dt, int64_t t, int64_t v)
{
    ce_case c = {.dt = dt, .tdt = CLKIT_I64, .t = t, .v = v, .o = clkit_cross_entropy_defaults(),
                 .zloss = true, .grad = true, .y_stride = 1, .l_stride = 1};
    c.lx = c.ld = row_major(t, v, 0, 0);
    return c;
}

static void ce_describe(const ce_case *c, const char *what, char *buf, size_t n)
{
    snprintf(buf, n, "%s %s %lldx%lld %s eps %g cap %g zs %g ignore %lld", what,
             clkit_dtype_name(c->dt), (long long)c->t, (long long)c->v,
             reduction_name(c->o.reduction), (double)c->o.label_smoothing, (double)c->o.softcap,
             (double)c->o.z_loss_scale, (long long)c->o.ignore_index);
}

/* Runs the case on logits x (t x v, quantized to the dtype here) and targets y, and checks
   the loss, z-loss and gradient against ref_cross_entropy; gradients of 16-bit logits within
   one rounding, f32 results within the error of f32 arithmetic on logits as large as x's. */
static void ce_check(clkit_context *ctx, const ce_case *c, const double *x, const int64_t *y,
                     const char *what)
{
    char name[256];
    ce_describe(c, what, name, sizeof name);
    size_t tv = (size_t)(c->t * c->v);
    bool none = c->o.reduction == CLKIT_REDUCTION_NONE;
    int64_t nl = none ? c->t : 1;
    double *q = malloc(tv * sizeof *q), *g_want = malloc(tv * sizeof *g_want);
    double *g_got = malloc(tv * sizeof *g_got), *l_want = malloc((size_t)nl * sizeof(double));
    double *z_want = malloc((size_t)nl * sizeof(double)), *l_got = malloc((size_t)nl * sizeof(double));
    double *z_got = malloc((size_t)nl * sizeof(double)), *yd = malloc((size_t)c->t * sizeof(double));
    ck_assert(q && g_want && g_got && l_want && z_want && l_got && z_got && yd);
    for (size_t i = 0; i < tv; i++) q[i] = tu_quantize(c->dt, x[i]);
    for (int64_t i = 0; i < c->t; i++) yd[i] = (double)y[i];
    int64_t count = ref_cross_entropy(q, y, c->t, c->v, &c->o, l_want, z_want, g_want);

    clkit_tensor tx, ty, tl, tz, td;
    tu_layout ly = strided(c->t, c->y_stride, 1), ll = strided(nl, c->l_stride, 2);
    cl_mem bx = put(ctx, c->dt, &c->lx, c->t, c->v, q, &tx);
    cl_mem by = put(ctx, c->tdt, &ly, 0, c->t, yd, &ty);
    cl_mem bl = put(ctx, CLKIT_F32, &ll, 0, nl, NULL, &tl);
    cl_mem bz = put(ctx, CLKIT_F32, &ll, 0, nl, NULL, &tz);
    cl_mem bd = c->grad && !c->in_place ? put(ctx, c->dt, &c->ld, c->t, c->v, NULL, &td) : NULL;
    if (c->in_place) td = tx;
    clkit_cross_entropy_options o = c->o;
    o.z_loss = c->zloss ? &tz : NULL;
    TU_CHECK(clkit_cross_entropy(ctx, &tx, &ty, &o, &tl, c->grad ? &td : NULL));

    double scale = o.reduction == CLKIT_REDUCTION_MEAN ? (count ? 1.0 / (double)count : 0) : 1;
    double zs = o.z_loss_scale, l_sum_atol = 0;
    get(ctx, bl, CLKIT_F32, &ll, 0, nl, l_got, name);
    get(ctx, bz, CLKIT_F32, &ll, 0, nl, z_got, name);
    if (c->grad)
        get(ctx, c->in_place ? bx : bd, c->dt, c->in_place ? &c->lx : &c->ld, c->t, c->v, g_got, name);
    for (int64_t r = 0; r < c->t; r++) {
        /* f32 rounding of values the size of the row's log-sum-exp */
        double big = max_abs_finite(q + r * c->v, (size_t)c->v);
        if (o.softcap > 0 && big > o.softcap) big = o.softcap;
        double mag = big + log((double)c->v) + 1, l_atol = 4e-6 * mag * (1 + zs * mag);
        l_sum_atol += l_atol;
        if (none) {
            tu_assert_close(l_got + r, l_want + r, 1, l_atol, 2e-5, name);
            if (c->zloss) tu_assert_close(z_got + r, z_want + r, 1, l_atol, 2e-5, name);
        }
        double g_atol = scale * 4e-7 * mag * (1 + 2 * zs * mag) + (c->dt == CLKIT_F16 ? 6e-8 : 0);
        if (c->grad)
            tu_assert_close(g_got + r * c->v, g_want + r * c->v, (size_t)c->v, g_atol,
                            c->dt == CLKIT_F32 ? 2e-5 : tu_rtol(c->dt), name);
    }
    if (!none) {
        tu_assert_close(l_got, l_want, 1, l_sum_atol * scale, 2e-5, name);
        if (c->zloss) tu_assert_close(z_got, z_want, 1, l_sum_atol * scale, 2e-5, name);
    }
    clReleaseMemObject(bx), clReleaseMemObject(by), clReleaseMemObject(bl), clReleaseMemObject(bz);
    if (bd) clReleaseMemObject(bd);
    free(q), free(g_want), free(g_got), free(l_want), free(z_want), free(l_got), free(z_got), free(yd);
}

/* Random logits in [-lo, hi) and random targets, every ignore_every-th ignored. */
static void ce_random(clkit_context *ctx, const ce_case *c, double lo, double hi,
                      int ignore_every, const char *what)
{
    size_t tv = (size_t)(c->t * c->v);
    double *x = malloc(tv * sizeof *x);
    int64_t *y = malloc((size_t)c->t * sizeof *y);
    ck_assert(x && y);
    tu_fill_random(x, tv, c->dt, lo, hi, (uint64_t)(c->t * 131 + c->v));
    random_targets(y, c->t, c->v, ignore_every, c->o.ignore_index, (uint64_t)c->v * 7 + 3);
    ce_check(ctx, c, x, y, what);
    free(x), free(y);
}

/* Every combination of reduction, label smoothing, soft-cap and z-loss, with a quarter of the
   tokens ignored, in each dtype. */
START_TEST(option_combinations)
{
    clkit_context *ctx = tu_ctx();
    static const clkit_reduction reductions[] = {CLKIT_REDUCTION_MEAN, CLKIT_REDUCTION_SUM,
                                                 CLKIT_REDUCTION_NONE};
    for (size_t d = 0; d < 3; d++)
        for (int r = 0; r < 3; r++)
            for (int combo = 0; combo < 8; combo++) {
                ce_case c = ce_basic(float_dtypes[d], 13, 301);
                c.o.reduction = reductions[r];
                c.o.label_smoothing = combo & 1 ? 0.1f : 0.0f;
                c.o.softcap = combo & 2 ? 5.0f : 0.0f;
                c.o.z_loss_scale = combo & 4 ? 0.01f : 0.0f;
                ce_random(ctx, &c, -8, 8, 4, "options");
            }
    clkit_context_release(ctx);
}
END_TEST

/* T and V from 1; V below, at and past a step of the work-group, primes, rows of 70000+
   (many steps), more rows than the persistent grid holds. */
START_TEST(shapes)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t tv[][2] = {{1, 1}, {1, 5}, {4, 1}, {3, 2}, {7, 17}, {5, 64}, {9, 129},
                                    {6, 1000}, {3, 4099}, {2, 70001}, {300, 40}};
    for (size_t i = 0; i < sizeof tv / sizeof *tv; i++)
        for (size_t d = 0; d < 3; d++) {
            if (tv[i][1] > 10000 && d == 1) continue;
            ce_case c = ce_basic(float_dtypes[d], tv[i][0], tv[i][1]);
            c.o.label_smoothing = 0.05f;
            c.o.z_loss_scale = 1e-3f;
            c.o.reduction = i % 2 ? CLKIT_REDUCTION_MEAN : CLKIT_REDUCTION_NONE;
            ce_random(ctx, &c, -6, 6, i % 3 ? 5 : 0, "shape");
        }
    clkit_context_release(ctx);
}
END_TEST

/* The mean over no tokens is 0 (not NaN), as are the sum, the z-loss and every gradient. */
START_TEST(all_ignored)
{
    clkit_context *ctx = tu_ctx();
    for (int r = 0; r < 3; r++)
        for (size_t d = 0; d < 3; d++) {
            ce_case c = ce_basic(float_dtypes[d], 6, 50);
            c.o.reduction = (clkit_reduction)r;
            c.o.z_loss_scale = 0.1f;
            c.o.label_smoothing = 0.2f;
            ce_random(ctx, &c, -3, 3, 1, "all ignored");
        }
    clkit_context_release(ctx);
}
END_TEST

/* A FILL-holding buffer of n elements and a view of it. */
static cl_mem filled(clkit_context *ctx, clkit_dtype dt, size_t n)
{
    double *v = malloc(n * sizeof *v);
    ck_assert(v);
    for (size_t i = 0; i < n; i++) v[i] = FILL;
    cl_mem m = tu_buffer(ctx, dt, n, v);
    free(v);
    return m;
}

/* Asserts that no element of the n-element buffer was written. */
static void untouched(clkit_context *ctx, cl_mem m, clkit_dtype dt, size_t n, const char *what)
{
    get(ctx, m, dt, &(tu_layout){0, 1, 0, n}, 1, 0, NULL, what);
}

/* What an empty batch's cross_entropy and linear_cross_entropy cases share: the (0) targets,
   the losses and z-losses (one element into sentinel-filled buffers, so that a write shows),
   and options for reduction r with a z-loss. Set up in place: o points at z. */
typedef struct no_tokens {
    cl_mem by, bl, bz;
    clkit_tensor y, l, z;
    clkit_cross_entropy_options o;
    char name[64];
} no_tokens;

static void no_tokens_begin(clkit_context *ctx, no_tokens *t, int r, clkit_dtype dt, const char *what)
{
    bool none = r == CLKIT_REDUCTION_NONE;
    int64_t zero = 0, one = 1;
    t->by = filled(ctx, CLKIT_I64, 2);
    t->bl = filled(ctx, CLKIT_F32, 2), t->bz = filled(ctx, CLKIT_F32, 2);
    t->y = tu_view(t->by, CLKIT_I64, 1, &zero, &one, 1);
    t->l = tu_view(t->bl, CLKIT_F32, 1, none ? &zero : &one, &one, 1);
    t->z = tu_view(t->bz, CLKIT_F32, 1, none ? &zero : &one, &one, 1);
    t->o = clkit_cross_entropy_defaults();
    t->o.reduction = (clkit_reduction)r;
    t->o.z_loss = &t->z;
    t->o.z_loss_scale = 0.1f;
    snprintf(t->name, sizeof t->name, "%s %s %s", what, clkit_dtype_name(dt), reduction_name(t->o.reduction));
}

/* The loss and the z-loss: untouched without a reduction, else 0 (a mean over no tokens as
   when every token is ignored); then the buffers go. */
static void no_tokens_end(clkit_context *ctx, no_tokens *t)
{
    bool none = t->o.reduction == CLKIT_REDUCTION_NONE;
    tu_layout ll = strided(1, 1, 1);
    for (int k = 0; k < 2; k++) {
        double loss = FILL;
        if (none) untouched(ctx, k ? t->bz : t->bl, CLKIT_F32, 2, t->name);
        else get(ctx, k ? t->bz : t->bl, CLKIT_F32, &ll, 0, 1, &loss, t->name);
        ck_assert_msg(none || loss == 0.0, "%s: the %s is %g, expected 0", t->name, k ? "z-loss" : "loss", loss);
    }
    clReleaseMemObject(t->by), clReleaseMemObject(t->bl), clReleaseMemObject(t->bz);
}

/* No tokens (T = 0) is an empty batch, not an error: nothing is written per token (losses,
   dlogits), and the mean and the sum are 0, the mean as when every token is ignored, their
   z-losses too. V = 0 stays refused (bad_input). */
START_TEST(zero_tokens)
{
    clkit_context *ctx = tu_ctx();
    for (int r = 0; r < 3; r++)
        for (size_t d = 0; d < 3; d++) {
            clkit_dtype dt = float_dtypes[d];
            int64_t v = 5;
            cl_mem bx = filled(ctx, dt, 8), bd = filled(ctx, dt, 8);
            no_tokens t;
            no_tokens_begin(ctx, &t, r, dt, "no tokens");
            clkit_tensor x = tu_view(bx, dt, 2, (int64_t[]){0, v}, (int64_t[]){v, 1}, 1);
            clkit_tensor dl = tu_view(bd, dt, 2, (int64_t[]){0, v}, (int64_t[]){v, 1}, 2);
            t.o.label_smoothing = 0.1f;
            TU_CHECK(clkit_cross_entropy(ctx, &x, &t.y, &t.o, &t.l, &dl));
            TU_CHECK(clkit_cross_entropy(ctx, &x, &t.y, &t.o, &t.l, NULL));
            no_tokens_end(ctx, &t);
            untouched(ctx, bd, dt, 8, t.name);
            untouched(ctx, bx, dt, 8, t.name);
            clReleaseMemObject(bx), clReleaseMemObject(bd);
        }
    clkit_context_release(ctx);
}
END_TEST

/* ignore_index inside [0, V) (that class is skipped, not checked) and -1; i32 targets too. */
START_TEST(custom_ignore_index)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ignores[] = {3, -1};
    for (size_t i = 0; i < 2; i++)
        for (int tdt = 0; tdt < 2; tdt++) {
            ce_case c = ce_basic(CLKIT_F32, 40, 7);
            c.tdt = tdt ? CLKIT_I32 : CLKIT_I64;
            c.o.ignore_index = ignores[i];
            c.o.reduction = CLKIT_REDUCTION_MEAN;
            ce_random(ctx, &c, -4, 4, 3, "custom ignore_index");
        }
    clkit_context_release(ctx);
}
END_TEST

/* dlogits == logits: contiguous, padded at an offset (vector path), and transposed. */
START_TEST(in_place)
{
    clkit_context *ctx = tu_ctx();
    for (size_t d = 0; d < 3; d++)
        for (int l = 0; l < 3; l++) {
            ce_case c = ce_basic(float_dtypes[d], 9, 515);
            c.in_place = true;
            c.o.softcap = 10.0f;
            c.o.label_smoothing = 0.1f;
            if (l == 1) c.lx = row_major(9, 515, 5, 3);
            if (l == 2) c.lx = col_major(9, 515, 1);
            ce_random(ctx, &c, -12, 12, 4, "in place");
        }
    clkit_context_release(ctx);
}
END_TEST

/* Logits padded and offset, dlogits in another alignment phase (scalar path) or transposed,
   logits transposed; targets of both index dtypes with a stride; per-token losses strided. */
START_TEST(strided_views)
{
    clkit_context *ctx = tu_ctx();
    for (size_t d = 0; d < 3; d++)
        for (int l = 0; l < 4; l++) {
            int64_t t = 11, v = 203;
            ce_case c = ce_basic(float_dtypes[d], t, v);
            c.tdt = l % 2 ? CLKIT_I32 : CLKIT_I64;
            c.y_stride = 3;
            c.l_stride = 2;
            c.o.reduction = l < 2 ? CLKIT_REDUCTION_NONE : CLKIT_REDUCTION_SUM;
            c.lx = row_major(t, v, 9, 5);
            c.ld = row_major(t, v, 2, l == 1 ? 4 : 1);
            if (l == 2) c.ld = col_major(t, v, 2);
            if (l == 3) c.lx = col_major(t, v, 0);
            ce_random(ctx, &c, -5, 5, 3, "strided");
        }
    clkit_context_release(ctx);
}
END_TEST

/* Logits near each dtype's limit (finite results), -inf entries (softmax 0, and an inf loss
   where label smoothing averages them), and a row of all -inf (NaN loss and gradient, inf
   z-loss, as documented). */
START_TEST(large_and_infinite)
{
    clkit_context *ctx = tu_ctx();
    for (size_t d = 0; d < 3; d++) {
        clkit_dtype dt = float_dtypes[d];
        int64_t t = 5, v = 300;
        double big = dt == CLKIT_F16 ? 60000.0 : dt == CLKIT_F32 ? 1e30 : 1e38;
        double *x = malloc((size_t)(t * v) * sizeof *x);
        int64_t y[5] = {0, 299, 17, 3, 150};
        tu_fill_random(x, (size_t)(t * v), dt, -3, 3, 5);
        for (int64_t j = 0; j < v; j++) {
            x[0 * v + j] = j % 2 ? big : -big;
            if (j % 3 == 0 && j != 17) x[2 * v + j] = -INFINITY;
            x[4 * v + j] = -INFINITY;
        }
        x[1 * v + 5] = big;
        for (int eps = 0; eps < 2; eps++) {
            ce_case c = ce_basic(dt, t, v);
            c.o.reduction = CLKIT_REDUCTION_NONE;
            c.o.label_smoothing = eps ? 0.1f : 0.0f;
            ce_check(ctx, &c, x, y, "large and infinite");
            c.o.reduction = CLKIT_REDUCTION_SUM;
            c.o.softcap = 30.0f; /* caps every logit: all finite again */
            c.o.z_loss_scale = 1e-4f;
            ce_check(ctx, &c, x, y, "large and infinite, capped");
        }
        free(x);
    }
    clkit_context_release(ctx);
}
END_TEST

/* Reruns give bitwise-equal losses and gradients. */
START_TEST(deterministic)
{
    clkit_context *ctx = tu_ctx();
    int64_t t = 64, v = 3001, shape[2] = {t, v}, one = 1;
    double *x = malloc((size_t)(t * v) * sizeof *x), yd[64];
    double *g1 = malloc((size_t)(t * v) * sizeof *g1), *g2 = malloc((size_t)(t * v) * sizeof *g2);
    int64_t y[64];
    tu_fill_random(x, (size_t)(t * v), CLKIT_F32, -10, 10, 99);
    random_targets(y, t, v, 0, -100, 4);
    for (int i = 0; i < 64; i++) yd[i] = (double)y[i];
    cl_mem bx = tu_buffer(ctx, CLKIT_F32, (size_t)(t * v), x), by = tu_buffer(ctx, CLKIT_I64, 64, yd);
    cl_mem bl = tu_buffer(ctx, CLKIT_F32, 1, NULL), bd = tu_buffer(ctx, CLKIT_F32, (size_t)(t * v), NULL);
    clkit_tensor tx = clkit_tensor_contiguous(bx, CLKIT_F32, 2, shape);
    clkit_tensor ty = clkit_tensor_contiguous(by, CLKIT_I64, 1, &t);
    clkit_tensor tl = clkit_tensor_contiguous(bl, CLKIT_F32, 1, &one);
    clkit_tensor td = clkit_tensor_contiguous(bd, CLKIT_F32, 2, shape);
    double l1, l2;
    TU_CHECK(clkit_cross_entropy(ctx, &tx, &ty, NULL, &tl, &td));
    tu_read(ctx, bl, CLKIT_F32, 1, &l1);
    tu_read(ctx, bd, CLKIT_F32, (size_t)(t * v), g1);
    TU_CHECK(clkit_cross_entropy(ctx, &tx, &ty, NULL, &tl, &td));
    tu_read(ctx, bl, CLKIT_F32, 1, &l2);
    tu_read(ctx, bd, CLKIT_F32, (size_t)(t * v), g2);
    ck_assert_msg(l1 == l2 && memcmp(g1, g2, (size_t)(t * v) * sizeof *g1) == 0,
                  "reruns differ: %.9g vs %.9g", l1, l2);
    clReleaseMemObject(bx), clReleaseMemObject(by), clReleaseMemObject(bl), clReleaseMemObject(bd);
    free(x), free(g1), free(g2);
    clkit_context_release(ctx);
}
END_TEST

/* ---- finite differences: the references' gradients, then the device against them ---- */

static double ce_total(const double *z, const int64_t *y, int64_t t, int64_t v,
                       const clkit_cross_entropy_options *o)
{
    double loss[8], sum = 0;
    ref_cross_entropy(z, y, t, v, o, loss, NULL, NULL);
    for (int64_t i = 0; i < (o->reduction == CLKIT_REDUCTION_NONE ? t : 1); i++) sum += loss[i];
    return sum;
}

/* Central differences of the loss with respect to each of n inputs p[i]. */
static void central_differences(double *p, size_t n, double *out,
                                double (*loss)(const void *), const void *arg)
{
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double keep = p[i];
        p[i] = keep + h;
        double up = loss(arg);
        p[i] = keep - h;
        double down = loss(arg);
        p[i] = keep;
        out[i] = (up - down) / (2 * h);
    }
}

typedef struct ce_fd {
    double *z;
    const int64_t *y;
    int64_t t, v;
    const clkit_cross_entropy_options *o;
} ce_fd;

static double ce_fd_loss(const void *arg)
{
    const ce_fd *f = arg;
    return ce_total(f->z, f->y, f->t, f->v, f->o);
}

START_TEST(finite_differences)
{
    clkit_context *ctx = tu_ctx();
    enum { T = 3, V = 5 };
    int64_t y[T] = {4, -100, 0};
    for (int r = 0; r < 3; r++)
        for (int combo = 0; combo < 8; combo++) {
            ce_case c = ce_basic(CLKIT_F32, T, V);
            c.o.reduction = (clkit_reduction)r;
            c.o.label_smoothing = combo & 1 ? 0.3f : 0.0f;
            c.o.softcap = combo & 2 ? 2.0f : 0.0f;
            c.o.z_loss_scale = combo & 4 ? 0.2f : 0.0f;
            double z[T * V], g[T * V], fd[T * V], loss[T];
            tu_fill_random(z, T * V, CLKIT_F32, -3, 3, 11 + (uint64_t)combo);
            ref_cross_entropy(z, y, T, V, &c.o, loss, NULL, g);
            ce_fd f = {z, y, T, V, &c.o};
            central_differences(z, T * V, fd, ce_fd_loss, &f);
            char name[256];
            ce_describe(&c, "reference vs finite differences", name, sizeof name);
            tu_assert_close(g, fd, T * V, 1e-7, 1e-6, name);
            ce_check(ctx, &c, z, y, "device vs reference, tiny");
        }
    clkit_context_release(ctx);
}
END_TEST

/* ---- bad input ---- */

/* Out-of-range targets fail, name the token, and write nothing (the guard's buffer holds the
   loss and gradient). */
START_TEST(bad_targets)
{
    tu_guard guard = tu_guard_begin();
    clkit_context *ctx = guard.ctx;
    int64_t s48[2] = {4, 8}, s4 = 4, s1 = 1;
    clkit_tensor x = clkit_tensor_contiguous(guard.in, CLKIT_F32, 2, s48);
    clkit_tensor d = clkit_tensor_contiguous(guard.out, CLKIT_F32, 2, s48);
    clkit_tensor l = tu_view(guard.out, CLKIT_F32, 1, &s1, &s1, 40);
    clkit_tensor ln = tu_view(guard.out, CLKIT_F32, 1, &s4, &s1, 44);
    static const double bad[][4] = {{0, 1, -5, 2}, {0, 8, 1, 2}, {-100, 1, 2, 8589934593.0},
                                    {3, 2, 1, 2147483648.0}};
    static const char *names[] = {"targets[2]", "targets[1]", "targets[3]", "targets[3]"};
    for (int i = 0; i < 4; i++)
        for (int tdt = 0; tdt < 2; tdt++) {
            if (tdt == 1 && i >= 2) continue; /* values beyond i32 */
            clkit_dtype dt = tdt ? CLKIT_I32 : CLKIT_I64;
            cl_mem by = tu_buffer(ctx, dt, 4, bad[i]);
            clkit_tensor y = clkit_tensor_contiguous(by, dt, 1, &s4);
            TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_cross_entropy(ctx, &x, &y, NULL, &l, &d));
            ck_assert_msg(strstr(clkit_last_error(ctx), names[i]), "message '%s' lacks %s",
                          clkit_last_error(ctx), names[i]);
            clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
            o.reduction = CLKIT_REDUCTION_NONE;
            TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_cross_entropy(ctx, &x, &y, &o, &ln, NULL));
            clReleaseMemObject(by);
        }
    tu_guard_end(&guard);
}
END_TEST

START_TEST(bad_options)
{
    tu_guard guard = tu_guard_begin();
    clkit_context *ctx = guard.ctx;
    int64_t s48[2] = {4, 8}, s4 = 4, s1 = 1;
    double yv[4] = {0, 1, 2, 3};
    cl_mem by = tu_buffer(ctx, CLKIT_I32, 4, yv);
    clkit_tensor x = clkit_tensor_contiguous(guard.in, CLKIT_F32, 2, s48);
    clkit_tensor y = clkit_tensor_contiguous(by, CLKIT_I32, 1, &s4);
    clkit_tensor l = tu_view(guard.out, CLKIT_F32, 1, &s1, &s1, 40);
    const float bad_eps[] = {-0.1f, 1.5f, NAN}, bad_cap[] = {-1.0f, INFINITY, NAN},
                bad_zs[] = {-1e-4f, INFINITY, NAN};
    for (int i = 0; i < 3; i++) {
        clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
        o.label_smoothing = bad_eps[i];
        TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_cross_entropy(ctx, &x, &y, &o, &l, NULL));
        o = clkit_cross_entropy_defaults();
        o.softcap = bad_cap[i];
        TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_cross_entropy(ctx, &x, &y, &o, &l, NULL));
        o = clkit_cross_entropy_defaults();
        o.z_loss_scale = bad_zs[i];
        TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_cross_entropy(ctx, &x, &y, &o, &l, NULL));
    }
    clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
    o.reduction = (clkit_reduction)3;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_cross_entropy(ctx, &x, &y, &o, &l, NULL));
    clReleaseMemObject(by);
    tu_guard_end(&guard);
}
END_TEST

START_TEST(bad_input)
{
    tu_guard guard = tu_guard_begin();
    clkit_context *ctx = guard.ctx;
    int64_t s48[2] = {4, 8}, s47[2] = {4, 7}, s08[2] = {0, 8}, s40[2] = {4, 0}, s4 = 4, s5 = 5;
    int64_t s1 = 1, s2 = 2, s3[3] = {1, 4, 8}, s0 = 0;
    double yv[8] = {0, 1, 2, 3, 0, 1, 2, 3};
    cl_mem by = tu_buffer(ctx, CLKIT_I32, 8, yv);
    clkit_tensor x = clkit_tensor_contiguous(guard.in, CLKIT_F32, 2, s48);
    clkit_tensor y = clkit_tensor_contiguous(by, CLKIT_I32, 1, &s4);
    clkit_tensor d = clkit_tensor_contiguous(guard.out, CLKIT_F32, 2, s48);
    clkit_tensor l = tu_view(guard.out, CLKIT_F32, 1, &s1, &s1, 40);
    clkit_tensor ln = tu_view(guard.out, CLKIT_F32, 1, &s4, &s1, 44);
    clkit_tensor zl = tu_view(guard.out, CLKIT_F32, 1, &s1, &s1, 41);
    clkit_cross_entropy_options none = clkit_cross_entropy_defaults(), oz = none;
    none.reduction = CLKIT_REDUCTION_NONE;
    ck_assert_int_eq(clkit_cross_entropy(NULL, &x, &y, NULL, &l, &d), CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_cross_entropy(ctx, NULL, &y, NULL, &l, &d));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_cross_entropy(ctx, &x, NULL, NULL, &l, &d));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_cross_entropy(ctx, &x, &y, NULL, NULL, &d));
    clkit_tensor t = x;
    t.buffer = NULL;
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_cross_entropy(ctx, &t, &y, NULL, &l, &d));
    /* dtypes */
    t = x, t.dtype = CLKIT_I32;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_cross_entropy(ctx, &t, &y, NULL, &l, &d));
    t = y, t.dtype = CLKIT_F32;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_cross_entropy(ctx, &x, &t, NULL, &l, &d));
    t = l, t.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_cross_entropy(ctx, &x, &y, NULL, &t, &d));
    t = d, t.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_cross_entropy(ctx, &x, &y, NULL, &l, &t));
    t = zl, t.dtype = CLKIT_I32;
    oz.z_loss = &t;
    TU_EXPECT(CLKIT_ERR_DTYPE, clkit_cross_entropy(ctx, &x, &y, &oz, &l, &d));
    /* ndim */
    t = clkit_tensor_contiguous(guard.in, CLKIT_F32, 1, &s4);
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_cross_entropy(ctx, &t, &y, NULL, &l, &d));
    t = clkit_tensor_contiguous(guard.in, CLKIT_F32, 3, s3);
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_cross_entropy(ctx, &t, &y, NULL, &l, &d));
    t = clkit_tensor_contiguous(by, CLKIT_I32, 2, (int64_t[]){4, 1});
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_cross_entropy(ctx, &x, &t, NULL, &l, &d));
    t = tu_view(guard.out, CLKIT_F32, 2, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 40);
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_cross_entropy(ctx, &x, &y, NULL, &t, &d));
    /* shapes */
    t = clkit_tensor_contiguous(by, CLKIT_I32, 1, &s5);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_cross_entropy(ctx, &x, &t, NULL, &l, &d));
    t = tu_view(guard.out, CLKIT_F32, 1, &s2, &s1, 40);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_cross_entropy(ctx, &x, &y, NULL, &t, &d));
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_cross_entropy(ctx, &x, &y, &none, &l, &d));
    t = clkit_tensor_contiguous(guard.out, CLKIT_F32, 2, s47);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_cross_entropy(ctx, &x, &y, NULL, &l, &t));
    oz = none, oz.z_loss = &zl;
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_cross_entropy(ctx, &x, &y, &oz, &ln, &d));
    t = clkit_tensor_contiguous(guard.in, CLKIT_F32, 2, s08);
    clkit_tensor y0 = clkit_tensor_contiguous(by, CLKIT_I32, 1, &s0);
    /* no tokens is valid (zero_tokens), but reduction none then takes a loss of none */
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_cross_entropy(ctx, &t, &y0, &none, &l, NULL));
    t = clkit_tensor_contiguous(guard.in, CLKIT_F32, 2, s40);
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_cross_entropy(ctx, &t, &y, NULL, &l, NULL));
    t = x, t.shape[1] = -3;
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_cross_entropy(ctx, &t, &y, NULL, &l, &d));
    /* bounds and strides */
    t = x, t.offset = 40 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_cross_entropy(ctx, &t, &y, NULL, &l, &d));
    t = y, t.strides[0] = 3;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_cross_entropy(ctx, &x, &t, NULL, &l, &d));
    t = ln, t.strides[0] = 7;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, clkit_cross_entropy(ctx, &x, &y, &none, &t, &d));
    t = ln, t.strides[0] = 0;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_cross_entropy(ctx, &x, &y, &none, &t, &d));
    t = d, t.strides[0] = 4;
    TU_EXPECT(CLKIT_ERR_STRIDE, clkit_cross_entropy(ctx, &x, &y, NULL, &l, &t));
    /* overlaps: dlogits may be logits exactly, nothing else may share bytes */
    t = x, t.offset = 4;
    t.shape[0] = 3;
    clkit_tensor x3 = x;
    x3.shape[0] = 3;
    clkit_tensor y3 = clkit_tensor_contiguous(by, CLKIT_I32, 1, (int64_t[]){3});
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_cross_entropy(ctx, &x3, &y3, NULL, &l, &t));
    clkit_tensor sq = x, sqt;
    sq.shape[1] = 4;
    sqt = sq, sqt.strides[0] = 1, sqt.strides[1] = 8;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_cross_entropy(ctx, &sq, &y, NULL, &l, &sqt));
    t = tu_view(guard.out, CLKIT_F32, 1, &s1, &s1, 3);
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_cross_entropy(ctx, &x, &y, NULL, &t, &d));
    t = tu_view(guard.in, CLKIT_F32, 1, &s1, &s1, 3);
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_cross_entropy(ctx, &x, &y, NULL, &t, &d));
    oz = clkit_cross_entropy_defaults(), oz.z_loss = &l;
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_cross_entropy(ctx, &x, &y, &oz, &l, &d));
    t = tu_view(by, CLKIT_F32, 1, &s1, &s1, 1);
    TU_EXPECT(CLKIT_ERR_OVERLAP, clkit_cross_entropy(ctx, &x, &y, NULL, &t, &d));
    clReleaseMemObject(by);
    tu_guard_end(&guard);
}
END_TEST

/* ---- clkit_linear_cross_entropy ---- */

typedef struct lce_case {
    clkit_dtype dt;
    int64_t t, d, v;
    clkit_cross_entropy_options o;
    bool bias, zloss, dx, dw, db;
    tu_layout lx, lw, ldx, ldw; /* x, weight, dx, dweight */
    int64_t b_stride, db_stride;
    const char *chunk;  /* CLKIT_LCE_CHUNK for the call; NULL: the default rule */
    const char *tokens; /* CLKIT_LCE_TOKENS likewise (token chunks on the tensor cores) */
} lce_case;

static lce_case lce_basic(clkit_dtype dt, int64_t t, int64_t d, int64_t v)
{
    lce_case c = {.dt = dt, .t = t, .d = d, .v = v, .o = clkit_cross_entropy_defaults(),
                  .bias = true, .zloss = true, .dx = true, .dw = true, .db = true,
                  .b_stride = 1, .db_stride = 1};
    c.lx = c.ldx = row_major(t, d, 0, 0);
    c.lw = c.ldw = row_major(v, d, 0, 0);
    return c;
}

/* One gradient against the reference: within what rounding the dlogits chunk to the storage
   dtype (and f32 arithmetic) can move a sum of `terms` terms |terms| mag, plus one rounding of
   the result. The chunk holds the summed loss's dlogits, so an f16 subnormal there is off by
   at most 2^-25 times the reduction's scale (1 / count for the mean, else 1), and the result
   by at most 2^-25 more. */
static void lce_compare(const double *got, const double *want, const double *mag, size_t n,
                        clkit_dtype dt, int64_t terms, double scale, const char *what,
                        const char *name)
{
    double rel = dt == CLKIT_F32 ? 1e-5 : 2 * tu_rtol(dt);
    double atol = dt == CLKIT_F16 ? 6e-8 * ((double)terms * scale + 1) : 1e-9;
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= atol + rel * (mag[i] + fabs(want[i]))))
            ck_abort_msg("%s: %s[%zu] is %.9g, expected %.9g (scale %.3g)", name, what, i, got[i],
                         want[i], mag[i]);
}

static void lce_check(clkit_context *ctx, const lce_case *c, const char *what)
{
    char name[320];
    snprintf(name, sizeof name, "%s %s T %lld D %lld V %lld chunk %s tokens %s %s eps %g cap %g zs %g%s%s%s%s",
             what, clkit_dtype_name(c->dt), (long long)c->t, (long long)c->d, (long long)c->v,
             c->chunk ? c->chunk : "default", c->tokens ? c->tokens : "default", reduction_name(c->o.reduction),
             (double)c->o.label_smoothing, (double)c->o.softcap, (double)c->o.z_loss_scale,
             c->bias ? " bias" : "", c->dx ? " dx" : "", c->dw ? " dw" : "", c->db ? " db" : "");
    int64_t t = c->t, d = c->d, v = c->v, nl = c->o.reduction == CLKIT_REDUCTION_NONE ? t : 1;
    size_t td = (size_t)(t * d), vd = (size_t)(v * d);
    double *x = malloc(td * sizeof *x), *w = malloc(vd * sizeof *w), *b = malloc((size_t)v * sizeof *b);
    double *g = malloc((2 * td + 2 * vd + 2 * (size_t)v) * sizeof *g), *got = malloc((td + vd + (size_t)v) * sizeof *got);
    double *yd = malloc((size_t)t * sizeof *yd), l_want[64], z_want[64], l_got[64];
    int64_t *y = malloc((size_t)t * sizeof *y);
    ck_assert(x && w && b && g && got && yd && y && nl <= 64);
    tu_fill_random(x, td, c->dt, -1, 1, (uint64_t)(t + 3 * d));
    tu_fill_random(w, vd, c->dt, -3 / sqrt((double)d), 3 / sqrt((double)d), (uint64_t)(v + 5 * d));
    tu_fill_random(b, (size_t)v, c->dt, -1, 1, (uint64_t)v);
    random_targets(y, t, v, 5, c->o.ignore_index, (uint64_t)(t * v));
    for (int64_t i = 0; i < t; i++) yd[i] = (double)y[i];
    ref_lce_grads rg = {g, g + td, g + td + vd, g + td + vd + v, g + 2 * td + vd + v, g + 2 * td + 2 * vd + v};
    int64_t count = ref_linear_cross_entropy(x, w, c->bias ? b : NULL, y, t, v, d, &c->o, l_want, z_want, &rg);
    double scale = c->o.reduction == CLKIT_REDUCTION_MEAN ? (count ? 1.0 / (double)count : 0) : 1;

    clkit_tensor tx, tw, tb, ty, tl, tz, tdx, tdw, tdb;
    tu_layout lb = strided(v, c->b_stride, 1), ldb = strided(v, c->db_stride, 2);
    tu_layout ly = strided(t, 1, 0), ll = strided(nl, 1, 1);
    cl_mem bx = put(ctx, c->dt, &c->lx, t, d, x, &tx), bw = put(ctx, c->dt, &c->lw, v, d, w, &tw);
    cl_mem bb = put(ctx, c->dt, &lb, 0, v, b, &tb), by = put(ctx, CLKIT_I64, &ly, 0, t, yd, &ty);
    cl_mem bl = put(ctx, CLKIT_F32, &ll, 0, nl, NULL, &tl), bz = put(ctx, CLKIT_F32, &ll, 0, nl, NULL, &tz);
    cl_mem bdx = put(ctx, c->dt, &c->ldx, t, d, NULL, &tdx), bdw = put(ctx, c->dt, &c->ldw, v, d, NULL, &tdw);
    cl_mem bdb = put(ctx, c->dt, &ldb, 0, v, NULL, &tdb);
    clkit_cross_entropy_options o = c->o;
    o.z_loss = c->zloss ? &tz : NULL;
    if (c->chunk) tu_setenv("CLKIT_LCE_CHUNK", c->chunk);
    if (c->tokens) tu_setenv("CLKIT_LCE_TOKENS", c->tokens);
    clkit_status s = clkit_linear_cross_entropy(ctx, &tx, &tw, c->bias ? &tb : NULL, &ty, &o, &tl,
                                                c->dx ? &tdx : NULL, c->dw ? &tdw : NULL,
                                                c->db ? &tdb : NULL);
    tu_unsetenv("CLKIT_LCE_CHUNK");
    tu_unsetenv("CLKIT_LCE_TOKENS");
    ck_assert_msg(s == CLKIT_OK, "%s: %s: %s", name, clkit_status_string(s), clkit_last_error(ctx));

    get(ctx, bl, CLKIT_F32, &ll, 0, nl, l_got, name);
    tu_assert_close(l_got, l_want, (size_t)nl, 2e-5, 2e-5, name);
    get(ctx, bz, CLKIT_F32, &ll, 0, nl, l_got, name);
    if (c->zloss) tu_assert_close(l_got, z_want, (size_t)nl, 2e-6, 2e-5, name);
    /* Outputs not asked for keep FILL: get() checks the whole buffer then. */
    get(ctx, bdx, c->dt, c->dx ? &c->ldx : &(tu_layout){0, 1, 0, c->ldx.total}, c->dx ? t : 1,
        c->dx ? d : 0, got, name);
    if (c->dx) lce_compare(got, rg.dx, rg.dx_abs, td, c->dt, v, scale, "dx", name);
    get(ctx, bdw, c->dt, c->dw ? &c->ldw : &(tu_layout){0, 1, 0, c->ldw.total}, c->dw ? v : 1,
        c->dw ? d : 0, got, name);
    if (c->dw) lce_compare(got, rg.dw, rg.dw_abs, vd, c->dt, t, scale, "dweight", name);
    get(ctx, bdb, c->dt, c->db ? &ldb : &(tu_layout){0, 1, 0, ldb.total}, 0, c->db ? v : 0, got, name);
    if (c->db) lce_compare(got, rg.db, rg.db_abs, (size_t)v, c->dt, t, scale, "dbias", name);
    cl_mem all[] = {bx, bw, bb, by, bl, bz, bdx, bdw, bdb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) clReleaseMemObject(all[i]);
    free(x), free(w), free(b), free(g), free(got), free(yd), free(y);
}

/* Against the composition (reference matmul, then reference cross-entropy and its chain
   rule) in each dtype: one chunk and several with a ragged last one, with and without bias,
   under a few option sets. */
START_TEST(linear_vs_composition)
{
    clkit_context *ctx = tu_ctx();
    static const char *chunks[] = {NULL, "64"};
    for (size_t dt = 0; dt < 3; dt++)
        for (int ch = 0; ch < 2; ch++)
            for (int set = 0; set < 3; set++) {
                lce_case c = lce_basic(float_dtypes[dt], 9, 24, 200);
                c.chunk = chunks[ch];
                c.bias = set != 1;
                if (set == 1) {
                    c.o.reduction = CLKIT_REDUCTION_SUM;
                    c.o.label_smoothing = 0.1f;
                    c.o.softcap = 3.0f;
                    c.o.z_loss_scale = 0.01f;
                } else if (set == 2) {
                    c.o.reduction = CLKIT_REDUCTION_NONE;
                    c.o.ignore_index = 7;
                    c.o.z_loss_scale = 0.001f;
                    c.o.softcap = 8.0f;
                }
                lce_check(ctx, &c, "composition");
            }
    clkit_context_release(ctx);
}
END_TEST

/* Each gradient alone, none (forward only), dbias without a bias (the gradient at a zero bias). */
START_TEST(linear_gradient_subsets)
{
    clkit_context *ctx = tu_ctx();
    for (size_t dt = 0; dt < 3; dt += 2)
        for (int mask = 0; mask < 8; mask++) {
            lce_case c = lce_basic(float_dtypes[dt], 7, 16, 150);
            c.chunk = "48";
            c.dx = mask & 1, c.dw = mask & 2, c.db = mask & 4;
            c.bias = mask != 4;
            c.zloss = mask % 2;
            lce_check(ctx, &c, "subset");
        }
    clkit_context_release(ctx);
}
END_TEST

/* T and V of 1; chunks of 1 and 3 columns (unaligned scratch rows); V just past the default
   chunk multiple; a class ignored under each reduction. (D is a multiple of 4 throughout:
   other D only add matmul builds, and matmul's own suite covers them.) */
START_TEST(linear_edges)
{
    clkit_context *ctx = tu_ctx();
    lce_case c = lce_basic(CLKIT_F32, 1, 4, 1);
    lce_check(ctx, &c, "T = V = 1");
    c = lce_basic(CLKIT_F32, 1, 8, 5);
    c.chunk = "1";
    c.o.label_smoothing = 0.2f;
    lce_check(ctx, &c, "one column per chunk");
    c = lce_basic(CLKIT_BF16, 6, 4, 11);
    c.chunk = "3";
    c.o.softcap = 1.0f;
    lce_check(ctx, &c, "chunks of 3");
    c = lce_basic(CLKIT_F16, 5, 12, 131);
    lce_check(ctx, &c, "V past 128");
    c = lce_basic(CLKIT_F32, 4, 8, 20);
    c.o.ignore_index = 0;
    c.chunk = "8";
    for (int r = 0; r < 3; r++) {
        c.o.reduction = (clkit_reduction)r;
        c.bias = false;
        lce_check(ctx, &c, "a class ignored");
    }
    clkit_context_release(ctx);
}
END_TEST

/* x and weight transposed in memory, padded gradients at offsets, strided bias and dbias;
   f32 and bf16 (f16 takes the same paths). */
START_TEST(linear_strided)
{
    clkit_context *ctx = tu_ctx();
    for (size_t dt = 0; dt < 3; dt += 2) {
        lce_case c = lce_basic(float_dtypes[dt], 10, 12, 90);
        c.chunk = dt ? NULL : "40";
        c.lx = col_major(10, 12, 3);
        c.lw = col_major(90, 12, 1);
        c.ldx = row_major(10, 12, 4, 2);
        c.ldw = row_major(90, 12, 1, 5);
        c.b_stride = 2, c.db_stride = 3;
        c.o.label_smoothing = 0.05f;
        lce_check(ctx, &c, "strided");
    }
    clkit_context_release(ctx);
}
END_TEST

/* Enough tokens that a chunk's dweight GEMM is split over token slices (its tile grid is
   small) and lce_split_sum adds the slices, into a padded dweight, from a transposed x. */
START_TEST(linear_split_dweight)
{
    clkit_context *ctx = tu_ctx();
    for (size_t dt = 0; dt < 3; dt++) {
        lce_case c = lce_basic(float_dtypes[dt], 1024, 16, 40);
        c.chunk = "24";
        c.lx = col_major(1024, 16, 8);
        c.ldw = row_major(40, 16, 8, 3);
        lce_check(ctx, &c, "split dweight");
    }
    clkit_context_release(ctx);
}
END_TEST

/* Many column tiles a row and several chunks, ragged at both ends, with every option: on the
   tensor cores the fused epilogues' per-tile states and their merge; elsewhere the unfused
   chunks. */
START_TEST(linear_many_tiles)
{
    clkit_context *ctx = tu_ctx();
    static const char *chunks[] = {NULL, "256"};
    for (size_t dt = 1; dt < 3; dt++)
        for (int ch = 0; ch < 2; ch++) {
            lce_case c = lce_basic(float_dtypes[dt], 300, 40, 1100);
            c.chunk = chunks[ch];
            c.o.label_smoothing = ch ? 0.1f : 0.0f;
            c.o.softcap = ch ? 0.0f : 5.0f;
            c.o.z_loss_scale = 0.001f;
            c.o.ignore_index = 3;
            lce_check(ctx, &c, "many tiles");
        }
    clkit_context_release(ctx);
}
END_TEST

/* NVIDIA's TMA path: GEMMs of more tiles than work-groups run at once, so that each
   persistent work-group walks several and its copies of the next tile overlap the CE
   epilogues, with K = D of one slice and of a ragged few, by token chunks and by vocabulary
   chunks. Elsewhere linear_many_tiles covers these routes. */
START_TEST(linear_persistent_walk)
{
    clkit_context *ctx = tu_ctx();
    static const char *chunks[] = {NULL, "2304"};
    int tma = tu_fast_path(ctx, "cross_entropy", CLKIT_FAST_PATH_NV_TMA);
    for (int i = 0; i < 4 && tma; i++) {
        lce_case c = lce_basic(float_dtypes[1 + i % 2], 2100, (i + i / 2) % 2 ? 136 : 64, 4500);
        c.chunk = chunks[i / 2];
        c.o.softcap = i % 2 ? 5.0f : 0.0f;
        lce_check(ctx, &c, "persistent walk");
    }
    clkit_context_release(ctx);
}
END_TEST

/* Token chunks (on the tensor cores; elsewhere the vocabulary chunks serve the same calls):
   several with a ragged last under every option, each gradient alone, and a vocabulary wide
   enough that each chunk's dx GEMM is split over vocabulary slices. */
START_TEST(linear_token_chunks)
{
    clkit_context *ctx = tu_ctx();
    for (size_t dt = 1; dt < 3; dt++) {
        lce_case c = lce_basic(float_dtypes[dt], 300, 40, 1100);
        c.tokens = "128";
        c.o.label_smoothing = 0.1f;
        c.o.softcap = 5.0f;
        c.o.z_loss_scale = 0.001f;
        c.o.ignore_index = 3;
        lce_check(ctx, &c, "token chunks");
        for (int mask = 1; mask < 8; mask <<= 1) {
            c = lce_basic(float_dtypes[dt], 200, 16, 300);
            c.tokens = "64";
            c.dx = mask & 1, c.dw = mask & 2, c.db = mask & 4;
            c.bias = mask != 4;
            lce_check(ctx, &c, "token chunks, one gradient");
        }
        c = lce_basic(float_dtypes[dt], 260, 24, 8192);
        c.tokens = "256";
        lce_check(ctx, &c, "token chunks, split dx");
    }
    clkit_context_release(ctx);
}
END_TEST

/* dx, dweight and dbias (no bias) of the reduction r into g, one after the other. */
static void lce_grads(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *w,
                      const clkit_tensor *y, clkit_reduction r, double *g)
{
    clkit_dtype dt = x->dtype;
    int64_t v = w->shape[0], one = 1;
    size_t td = (size_t)(x->shape[0] * x->shape[1]), vd = (size_t)(v * w->shape[1]);
    cl_mem bl = tu_buffer(ctx, CLKIT_F32, 1, NULL), bdx = tu_buffer(ctx, dt, td, NULL);
    cl_mem bdw = tu_buffer(ctx, dt, vd, NULL), bdb = tu_buffer(ctx, dt, (size_t)v, NULL);
    clkit_tensor tl = clkit_tensor_contiguous(bl, CLKIT_F32, 1, &one);
    clkit_tensor tdx = clkit_tensor_contiguous(bdx, dt, 2, x->shape);
    clkit_tensor tdw = clkit_tensor_contiguous(bdw, dt, 2, w->shape);
    clkit_tensor tdb = clkit_tensor_contiguous(bdb, dt, 1, &v);
    clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
    o.reduction = r;
    TU_CHECK(clkit_linear_cross_entropy(ctx, x, w, NULL, y, &o, &tl, &tdx, &tdw, &tdb));
    tu_read(ctx, bdx, dt, td, g);
    tu_read(ctx, bdw, dt, vd, g + td);
    tu_read(ctx, bdb, dt, (size_t)v, g + td + vd);
    clReleaseMemObject(bl), clReleaseMemObject(bdx), clReleaseMemObject(bdw), clReleaseMemObject(bdb);
}

/* count * mean against sum: both come from the same f32 sums of the same 16-bit dlogits, so
   they differ by the two results' roundings (f16 subnormals: 2^-25 of the mean's, times
   count) and f32 arithmetic on a sum of |terms| mag. */
static void mean_vs_sum(const double *mean, const double *sum, const double *mag, size_t n,
                        clkit_dtype dt, int64_t count, const char *what, const char *name)
{
    double atol = dt == CLKIT_F16 ? 6e-8 * (double)count : 0;
    for (size_t i = 0; i < n; i++) {
        double got = mean[i] * (double)count;
        if (!(fabs(got - sum[i]) <= atol + tu_rtol(dt) * fabs(sum[i]) + 1e-6 * mag[i]))
            ck_abort_msg("%s: %s[%zu]: count x mean is %.9g, the sum %.9g (scale %.3g)", name, what, i,
                         got, sum[i], mag[i]);
    }
}

/* The mean's gradients are the sum's over the count of tokens not ignored, as accurate at any
   T (the 16-bit dlogits used to be stored after the 1 / T, where p / T of f16 sank into
   subnormals: 3 % off at T 8192). f16 and bf16, T 64, 2048 (every 7th token ignored; also in
   vocabulary chunks of 256, where the dx sums add up chunk by chunk) and 8192: count x mean
   against the sum, and both against the reference; logits about N(0, 1), as the probe that
   found it used. D 32 and V 1000 keep it to seconds on PoCL. */
START_TEST(linear_mean_vs_sum)
{
    clkit_context *ctx = tu_ctx();
    static const struct {
        int64_t t;
        int ignore_every;
        const char *chunk; /* CLKIT_LCE_CHUNK */
    } cases[] = {{64, 0, NULL}, {2048, 7, NULL}, {2048, 7, "256"}, {8192, 0, NULL}};
    const int64_t d = 32, v = 1000;
    for (size_t dt = 1; dt < 3; dt++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            clkit_dtype type = float_dtypes[dt];
            int64_t t = cases[i].t;
            size_t td = (size_t)(t * d), vd = (size_t)(v * d), n = td + vd + (size_t)v;
            double *x = malloc(td * sizeof *x), *w = malloc(vd * sizeof *w), *yd = malloc((size_t)t * sizeof *yd);
            double *want = malloc(2 * n * sizeof *want), *mean = malloc(n * sizeof *mean);
            double *sum = malloc(n * sizeof *sum), loss;
            int64_t *y = malloc((size_t)t * sizeof *y);
            ck_assert(x && w && yd && want && mean && sum && y);
            tu_fill_random(x, td, type, -1, 1, (uint64_t)t);
            tu_fill_random(w, vd, type, -3 / sqrt((double)d), 3 / sqrt((double)d), (uint64_t)t + 1);
            random_targets(y, t, v, cases[i].ignore_every, -100, (uint64_t)t + 2);
            for (int64_t k = 0; k < t; k++) yd[k] = (double)y[k];
            clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
            o.reduction = CLKIT_REDUCTION_SUM;
            ref_lce_grads rg = {want, want + td, want + td + vd, want + n, want + n + td, want + n + td + vd};
            int64_t count = ref_linear_cross_entropy(x, w, NULL, y, t, v, d, &o, &loss, NULL, &rg);

            int64_t xs[2] = {t, d}, ws[2] = {v, d};
            cl_mem bx = tu_buffer(ctx, type, td, x), bw = tu_buffer(ctx, type, vd, w);
            cl_mem by = tu_buffer(ctx, CLKIT_I64, (size_t)t, yd);
            clkit_tensor tx = clkit_tensor_contiguous(bx, type, 2, xs), tw = clkit_tensor_contiguous(bw, type, 2, ws);
            clkit_tensor ty = clkit_tensor_contiguous(by, CLKIT_I64, 1, &t);
            if (cases[i].chunk) tu_setenv("CLKIT_LCE_CHUNK", cases[i].chunk);
            lce_grads(ctx, &tx, &tw, &ty, CLKIT_REDUCTION_MEAN, mean);
            lce_grads(ctx, &tx, &tw, &ty, CLKIT_REDUCTION_SUM, sum);
            tu_unsetenv("CLKIT_LCE_CHUNK");

            char name[160];
            snprintf(name, sizeof name, "mean vs sum %s T %lld (%lld counted) D %lld V %lld chunk %s",
                     clkit_dtype_name(type), (long long)t, (long long)count, (long long)d, (long long)v,
                     cases[i].chunk ? cases[i].chunk : "default");
            static const char *what[] = {"dx", "dweight", "dbias"};
            size_t at[3] = {0, td, td + vd}, len[3] = {td, vd, (size_t)v};
            int64_t terms[3] = {v, t, t};
            for (int g = 0; g < 3; g++) {
                double *ref = want + at[g], *mag = want + n + at[g];
                lce_compare(sum + at[g], ref, mag, len[g], type, terms[g], 1, what[g], name);
                mean_vs_sum(mean + at[g], sum + at[g], mag, len[g], type, count, what[g], name);
                for (size_t k = 0; k < len[g]; k++) ref[k] /= (double)count, mag[k] /= (double)count;
                lce_compare(mean + at[g], ref, mag, len[g], type, terms[g], 1 / (double)count, what[g], name);
            }
            clReleaseMemObject(bx), clReleaseMemObject(bw), clReleaseMemObject(by);
            free(x), free(w), free(yd), free(want), free(mean), free(sum), free(y);
        }
    clkit_context_release(ctx);
}
END_TEST

/* No tokens: the losses as zero_tokens has them, dx (0 rows) untouched, dweight and dbias
   (sums over no tokens) zeros, in padded and strided views, with and without a bias. */
START_TEST(linear_zero_tokens)
{
    clkit_context *ctx = tu_ctx();
    for (int r = 0; r < 3; r++)
        for (size_t d = 0; d < 3; d++) {
            clkit_dtype dt = float_dtypes[d];
            int64_t v = 5, dd = 8;
            double w[40], got[40];
            tu_fill_random(w, 40, dt, -1, 1, 9);
            tu_layout lw = row_major(v, dd, 0, 0), ldw = row_major(v, dd, 3, 2), ldb = strided(v, 2, 1);
            clkit_tensor tw, tdw, tdb, tb;
            cl_mem bw = put(ctx, dt, &lw, v, dd, w, &tw), bdw = put(ctx, dt, &ldw, v, dd, NULL, &tdw);
            cl_mem bdb = put(ctx, dt, &ldb, 0, v, NULL, &tdb), bb = put(ctx, dt, &lw, 0, v, w, &tb);
            cl_mem bx = filled(ctx, dt, 8), bdx = filled(ctx, dt, 8);
            no_tokens t;
            no_tokens_begin(ctx, &t, r, dt, "linear, no tokens");
            clkit_tensor x = tu_view(bx, dt, 2, (int64_t[]){0, dd}, (int64_t[]){dd, 1}, 0);
            clkit_tensor dx = tu_view(bdx, dt, 2, (int64_t[]){0, dd}, (int64_t[]){1, 3}, 1);
            TU_CHECK(clkit_linear_cross_entropy(ctx, &x, &tw, d ? &tb : NULL, &t.y, &t.o, &t.l, &dx, &tdw, &tdb));
            no_tokens_end(ctx, &t);
            const char *name = t.name;
            untouched(ctx, bdx, dt, 8, name);
            get(ctx, bdw, dt, &ldw, v, dd, got, name);
            for (int i = 0; i < 40; i++) ck_assert_msg(got[i] == 0.0, "%s: dweight[%d] is %g", name, i, got[i]);
            get(ctx, bdb, dt, &ldb, 0, v, got, name);
            for (int i = 0; i < v; i++) ck_assert_msg(got[i] == 0.0, "%s: dbias[%d] is %g", name, i, got[i]);
            cl_mem all[] = {bw, bdw, bdb, bb, bx, bdx};
            for (size_t i = 0; i < 6; i++) clReleaseMemObject(all[i]);
        }
    clkit_context_release(ctx);
}
END_TEST

typedef struct lce_rerun {
    clkit_tensor x, w, y, loss, dx, dw;
    cl_mem bl, bdw;
    size_t n;         /* dweight's elements */
    double *dw1, *dw2; /* room for them */
} lce_rerun;

/* Two calls with $env set to value: their losses and dweights must be bitwise equal. */
static void rerun_equal(clkit_context *ctx, const lce_rerun *r, const char *env, const char *value)
{
    double l[2], *dw[2] = {r->dw1, r->dw2};
    tu_setenv(env, value);
    for (int i = 0; i < 2; i++) {
        TU_CHECK(clkit_linear_cross_entropy(ctx, &r->x, &r->w, NULL, &r->y, NULL, &r->loss, &r->dx, &r->dw, NULL));
        tu_read(ctx, r->bl, CLKIT_F32, 1, &l[i]);
        tu_read(ctx, r->bdw, CLKIT_BF16, r->n, dw[i]);
    }
    tu_unsetenv(env);
    ck_assert_msg(l[0] == l[1] && memcmp(r->dw1, r->dw2, r->n * sizeof *r->dw1) == 0,
                  "%s=%s: reruns differ", env, value);
}

/* Warnings that name one variable, counted through the log callback. */
typedef struct env_warnings {
    const char *name;
    int count;
} env_warnings;

static void count_env_warnings(void *user, clkit_log_level level, const char *message)
{
    env_warnings *w = user;
    if (level == CLKIT_LOG_WARN && strstr(message, w->name)) w->count++;
}

/* Chunked, the scratch stays far below the (T, V) logits; reruns are bitwise equal, on
   vocabulary chunks and (tensor cores) on token chunks, whether a call's scratch comes from
   the context's pool (stale contents) or is new. */
START_TEST(linear_memory_and_determinism)
{
    clkit_context *ctx = tu_ctx();
    int64_t t = 16, d = 8, v = 1000, one = 1, wshape[2] = {v, d}, xshape[2] = {t, d};
    double *x = malloc((size_t)(t * d) * sizeof *x), *w = malloc((size_t)(v * d) * sizeof *w);
    double *dw1 = malloc((size_t)(v * d) * sizeof *dw1), *dw2 = malloc((size_t)(v * d) * sizeof *dw2);
    double yd[16];
    int64_t y[16];
    tu_fill_random(x, (size_t)(t * d), CLKIT_BF16, -1, 1, 1);
    tu_fill_random(w, (size_t)(v * d), CLKIT_BF16, -1, 1, 2);
    random_targets(y, t, v, 0, -100, 3);
    for (int i = 0; i < 16; i++) yd[i] = (double)y[i];
    cl_mem bx = tu_buffer(ctx, CLKIT_BF16, (size_t)(t * d), x), bw = tu_buffer(ctx, CLKIT_BF16, (size_t)(v * d), w);
    cl_mem by = tu_buffer(ctx, CLKIT_I32, 16, yd), bl = tu_buffer(ctx, CLKIT_F32, 1, NULL);
    cl_mem bdx = tu_buffer(ctx, CLKIT_BF16, (size_t)(t * d), NULL), bdw = tu_buffer(ctx, CLKIT_BF16, (size_t)(v * d), NULL);
    clkit_tensor tx = clkit_tensor_contiguous(bx, CLKIT_BF16, 2, xshape);
    clkit_tensor tw = clkit_tensor_contiguous(bw, CLKIT_BF16, 2, wshape);
    clkit_tensor ty = clkit_tensor_contiguous(by, CLKIT_I32, 1, &t);
    clkit_tensor tl = clkit_tensor_contiguous(bl, CLKIT_F32, 1, &one);
    clkit_tensor tdx = clkit_tensor_contiguous(bdx, CLKIT_BF16, 2, xshape);
    clkit_tensor tdw = clkit_tensor_contiguous(bdw, CLKIT_BF16, 2, wshape);
    lce_rerun r = {tx, tw, ty, tl, tdx, tdw, bl, bdw, (size_t)(v * d), dw1, dw2};
    clkit_scratch_peak(ctx, 1);
    rerun_equal(ctx, &r, "CLKIT_LCE_CHUNK", "128");
    uint64_t peak = clkit_scratch_peak(ctx, 1);
    rerun_equal(ctx, &r, "CLKIT_LCE_TOKENS", "8"); /* on the tensor cores: two token chunks */
    clkit_context_trim(ctx); /* the pooled scratch freed, the next calls make their own */
    rerun_equal(ctx, &r, "CLKIT_LCE_CHUNK", "128");
    /* Unfused: chunk logits (f32) and gradient (bf16), state, targets, per-token losses, f32
       dx. On the tensor cores the logits stay in the GEMM's epilogue: a 256-column gradient
       chunk (the smallest a fused tile takes), at most 16 per-tile states (8 bytes) and a
       target logit a token instead. */
    int fused = tu_fast_path(ctx, "cross_entropy", CLKIT_FAST_PATH_NV_MMA);
    uint64_t base = (uint64_t)t * (16 + 4 + 4) + (uint64_t)(t * d) * 4;
    uint64_t want = base + (fused ? (uint64_t)t * 256 * 2 + (uint64_t)t * 4 : (uint64_t)t * 128 * 6);
    uint64_t slack = fused ? (uint64_t)t * 16 * 8 + 4096 : 4096;
    ck_assert_msg(peak >= want && peak < want + slack && peak < (uint64_t)(t * v) * 4,
                  "scratch peak %llu, expected about %llu", (unsigned long long)peak,
                  (unsigned long long)want);
    /* A chunk or token count that is not a whole positive number is ignored (with a warning):
       the call takes the default rule's scratch, not a chunk read from the number's prefix. */
    static const char *bad[][2] = {{"CLKIT_LCE_CHUNK", "12 columns"}, {"CLKIT_LCE_CHUNK", "-128"},
                                   {"CLKIT_LCE_TOKENS", "8x"}};
    uint64_t peaks[2];
    for (size_t i = 0; i < 3; i++) {
        env_warnings seen = {bad[i][0], 0};
        for (int set = 0; set < 2; set++) {
            if (set) tu_setenv(bad[i][0], bad[i][1]), clkit_set_log_callback(count_env_warnings, &seen);
            clkit_scratch_peak(ctx, 1);
            TU_CHECK(clkit_linear_cross_entropy(ctx, &tx, &tw, NULL, &ty, NULL, &tl, &tdx, &tdw, NULL));
            peaks[set] = clkit_scratch_peak(ctx, 1);
        }
        clkit_set_log_callback(NULL, NULL);
        tu_unsetenv(bad[i][0]);
        ck_assert_msg(peaks[1] == peaks[0], "%s=%s: scratch %llu, the default rule's %llu", bad[i][0],
                      bad[i][1], (unsigned long long)peaks[1], (unsigned long long)peaks[0]);
        /* One warning a call (CLKIT_LCE_TOKENS is read only where token chunks could serve). */
        ck_assert_msg(seen.count == 1 || (strcmp(bad[i][0], "CLKIT_LCE_TOKENS") == 0 && seen.count == 0),
                      "%s=%s: %d warnings in one call", bad[i][0], bad[i][1], seen.count);
    }
    cl_mem all[] = {bx, bw, by, bl, bdx, bdw};
    for (size_t i = 0; i < 6; i++) clReleaseMemObject(all[i]);
    free(x), free(w), free(dw1), free(dw2);
    clkit_context_release(ctx);
}
END_TEST

typedef struct lce_fd {
    double *x, *w, *b;
    const int64_t *y;
    const clkit_cross_entropy_options *o;
} lce_fd;

static double lce_fd_loss(const void *arg)
{
    const lce_fd *f = arg;
    double loss[3], sum = 0;
    ref_linear_cross_entropy(f->x, f->w, f->b, f->y, 3, 5, 4, f->o, loss, NULL, NULL);
    for (int i = 0; i < (f->o->reduction == CLKIT_REDUCTION_NONE ? 3 : 1); i++) sum += loss[i];
    return sum;
}

/* The linear reference's dx, dweight and dbias against central differences of its loss. */
START_TEST(linear_finite_differences)
{
    double x[12], w[20], b[5], loss[3], g[2 * (12 + 20 + 5)], fd[20];
    int64_t y[3] = {2, -100, 4};
    tu_fill_random(x, 12, CLKIT_F32, -1, 1, 1);
    tu_fill_random(w, 20, CLKIT_F32, -1, 1, 2);
    tu_fill_random(b, 5, CLKIT_F32, -1, 1, 3);
    for (int r = 0; r < 3; r++) {
        clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
        o.reduction = (clkit_reduction)r;
        o.label_smoothing = 0.2f;
        o.softcap = 1.5f;
        o.z_loss_scale = 0.1f;
        ref_lce_grads rg = {g, g + 12, g + 32, NULL, NULL, NULL};
        ref_linear_cross_entropy(x, w, b, y, 3, 5, 4, &o, loss, NULL, &rg);
        lce_fd f = {x, w, b, y, &o};
        central_differences(x, 12, fd, lce_fd_loss, &f);
        tu_assert_close(rg.dx, fd, 12, 1e-7, 1e-6, "dx vs finite differences");
        central_differences(w, 20, fd, lce_fd_loss, &f);
        tu_assert_close(rg.dw, fd, 20, 1e-7, 1e-6, "dweight vs finite differences");
        central_differences(b, 5, fd, lce_fd_loss, &f);
        tu_assert_close(rg.db, fd, 5, 1e-7, 1e-6, "dbias vs finite differences");
    }
}
END_TEST

START_TEST(linear_bad_input)
{
    tu_guard guard = tu_guard_begin();
    clkit_context *ctx = guard.ctx;
    int64_t sx[2] = {2, 4}, sw[2] = {3, 4}, s3 = 3, s2 = 2, s1 = 1;
    double yv[2] = {0, 2}, ybad[2] = {3, 0};
    cl_mem bx = tu_buffer(ctx, CLKIT_F32, 8, NULL), bw = tu_buffer(ctx, CLKIT_F32, 16, NULL);
    cl_mem by = tu_buffer(ctx, CLKIT_I64, 2, yv), byb = tu_buffer(ctx, CLKIT_I64, 2, ybad);
    clkit_tensor x = clkit_tensor_contiguous(bx, CLKIT_F32, 2, sx);
    clkit_tensor w = clkit_tensor_contiguous(bw, CLKIT_F32, 2, sw);
    clkit_tensor b = tu_view(bw, CLKIT_F32, 1, &s3, &s1, 12);
    clkit_tensor y = clkit_tensor_contiguous(by, CLKIT_I64, 1, &s2);
    clkit_tensor yb = clkit_tensor_contiguous(byb, CLKIT_I64, 1, &s2);
    clkit_tensor dx = tu_view(guard.out, CLKIT_F32, 2, sx, (int64_t[]){4, 1}, 0);
    clkit_tensor dw = tu_view(guard.out, CLKIT_F32, 2, sw, (int64_t[]){4, 1}, 8);
    clkit_tensor db = tu_view(guard.out, CLKIT_F32, 1, &s3, &s1, 20);
    clkit_tensor l = tu_view(guard.out, CLKIT_F32, 1, &s1, &s1, 24);
    clkit_tensor t;
#define LCE(xx, ww, bb, yy, oo, ll, dxx, dww, dbb)                                               \
    clkit_linear_cross_entropy(ctx, xx, ww, bb, yy, oo, ll, dxx, dww, dbb)
    ck_assert_int_eq(clkit_linear_cross_entropy(NULL, &x, &w, &b, &y, NULL, &l, &dx, &dw, &db),
                     CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, LCE(NULL, &w, &b, &y, NULL, &l, &dx, &dw, &db));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, LCE(&x, NULL, &b, &y, NULL, &l, &dx, &dw, &db));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, LCE(&x, &w, &b, NULL, NULL, &l, &dx, &dw, &db));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, LCE(&x, &w, &b, &y, NULL, NULL, &dx, &dw, &db));
    /* dtypes: one float dtype for x, weight, bias and the gradients */
    t = w, t.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, LCE(&x, &t, &b, &y, NULL, &l, &dx, &dw, &db));
    t = b, t.dtype = CLKIT_BF16;
    TU_EXPECT(CLKIT_ERR_DTYPE, LCE(&x, &w, &t, &y, NULL, &l, &dx, &dw, &db));
    t = dx, t.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, LCE(&x, &w, &b, &y, NULL, &l, &t, &dw, &db));
    t = x, t.dtype = CLKIT_I32;
    TU_EXPECT(CLKIT_ERR_DTYPE, LCE(&t, &w, &b, &y, NULL, &l, &dx, &dw, &db));
    t = y, t.dtype = CLKIT_F32;
    TU_EXPECT(CLKIT_ERR_DTYPE, LCE(&x, &w, &b, &t, NULL, &l, &dx, &dw, &db));
    /* ndim and shapes */
    t = b;
    TU_EXPECT(CLKIT_ERR_NDIM, LCE(&t, &w, &b, &y, NULL, &l, &dx, &dw, &db));
    TU_EXPECT(CLKIT_ERR_NDIM, LCE(&x, &w, &w, &y, NULL, &l, &dx, &dw, &db));
    t = clkit_tensor_contiguous(bw, CLKIT_F32, 2, (int64_t[]){3, 5});
    TU_EXPECT(CLKIT_ERR_SHAPE, LCE(&x, &t, &b, &y, NULL, &l, &dx, &dw, &db));
    t = b, t.shape[0] = 2;
    TU_EXPECT(CLKIT_ERR_SHAPE, LCE(&x, &w, &t, &y, NULL, &l, &dx, &dw, &db));
    TU_EXPECT(CLKIT_ERR_SHAPE, LCE(&x, &w, &b, &y, NULL, &l, &dx, &dw, &t));
    t = dx, t.shape[1] = 3;
    TU_EXPECT(CLKIT_ERR_SHAPE, LCE(&x, &w, &b, &y, NULL, &l, &t, &dw, &db));
    t = dw, t.shape[0] = 2;
    TU_EXPECT(CLKIT_ERR_SHAPE, LCE(&x, &w, &b, &y, NULL, &l, &dx, &t, &db));
    t = y, t.shape[0] = 1;
    TU_EXPECT(CLKIT_ERR_SHAPE, LCE(&x, &w, &b, &t, NULL, &l, &dx, &dw, &db));
    t = x, t.shape[1] = 0;
    clkit_tensor w0 = w;
    w0.shape[1] = 0;
    TU_EXPECT(CLKIT_ERR_SHAPE, LCE(&t, &w0, NULL, &y, NULL, &l, NULL, NULL, NULL));
    w0 = w, w0.shape[0] = 0; /* V = 0: a row of no logits has no softmax */
    TU_EXPECT(CLKIT_ERR_SHAPE, LCE(&x, &w0, NULL, &y, NULL, &l, NULL, NULL, NULL));
    /* bounds, strides, overlaps */
    t = w, t.offset = 8 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, LCE(&x, &t, &b, &y, NULL, &l, &dx, &dw, &db));
    t = dw, t.strides[0] = 1;
    TU_EXPECT(CLKIT_ERR_STRIDE, LCE(&x, &w, &b, &y, NULL, &l, &dx, &t, &db));
    t = tu_view(bx, CLKIT_F32, 2, sx, (int64_t[]){4, 1}, 0);
    TU_EXPECT(CLKIT_ERR_OVERLAP, LCE(&x, &w, &b, &y, NULL, &l, &t, &dw, &db));
    t = tu_view(bw, CLKIT_F32, 1, &s3, &s1, 13);
    TU_EXPECT(CLKIT_ERR_OVERLAP, LCE(&x, &w, &b, &y, NULL, &l, &dx, &dw, &t));
    t = tu_view(guard.out, CLKIT_F32, 1, &s3, &s1, 18);
    TU_EXPECT(CLKIT_ERR_OVERLAP, LCE(&x, &w, &b, &y, NULL, &l, &dx, &dw, &t));
    t = tu_view(guard.out, CLKIT_F32, 1, &s1, &s1, 5);
    TU_EXPECT(CLKIT_ERR_OVERLAP, LCE(&x, &w, &b, &y, NULL, &t, &dx, &dw, &db));
    clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
    o.label_smoothing = 2;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, LCE(&x, &w, &b, &y, &o, &l, &dx, &dw, &db));
    /* a target >= V: refused before anything is written */
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, LCE(&x, &w, &b, &yb, NULL, &l, &dx, &dw, &db));
    ck_assert(strstr(clkit_last_error(ctx), "targets[0] = 3"));
#undef LCE
    cl_mem all[] = {bx, bw, by, byb};
    for (size_t i = 0; i < 4; i++) clReleaseMemObject(all[i]);
    tu_guard_end(&guard);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cross_entropy");
    TCase *tc = tu_tcase("cross_entropy");
    tcase_add_test(tc, option_combinations);
    tcase_add_test(tc, shapes);
    tcase_add_test(tc, all_ignored);
    tcase_add_test(tc, zero_tokens);
    tcase_add_test(tc, custom_ignore_index);
    tcase_add_test(tc, in_place);
    tcase_add_test(tc, strided_views);
    tcase_add_test(tc, large_and_infinite);
    tcase_add_test(tc, deterministic);
    tcase_add_test(tc, finite_differences);
    tcase_add_test(tc, bad_targets);
    tcase_add_test(tc, bad_options);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, linear_vs_composition);
    tcase_add_test(tc, linear_gradient_subsets);
    tcase_add_test(tc, linear_edges);
    tcase_add_test(tc, linear_strided);
    tcase_add_test(tc, linear_split_dweight);
    tcase_add_test(tc, linear_many_tiles);
    tcase_add_test(tc, linear_token_chunks);
    tcase_add_test(tc, linear_mean_vs_sum);
    tcase_add_test(tc, linear_zero_tokens);
    tcase_add_test(tc, linear_persistent_walk);
    tcase_add_test(tc, linear_memory_and_determinism);
    tcase_add_test(tc, linear_finite_differences);
    tcase_add_test(tc, linear_bad_input);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

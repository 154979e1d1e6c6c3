/* clkit_layernorm_forward / _backward against double-precision references: row lengths from 1
   to past what a work-group holds on chip, every float dtype, padded, offset, strided and
   reversed rows, every optional operand present or NULL, in place, rows with a large mean,
   central differences, bitwise reruns; and every kind of bad input. */
#include "util.h"

#include <math.h>
#include <string.h>

static const clkit_dtype float_dtypes[] = {CLKIT_F32, CLKIT_F16, CLKIT_BF16};

/* Optional operands of a case. */
enum { HAS_W = 1, HAS_B = 2, HAS_MEAN = 4, HAS_RSTD = 8, HAS_DW = 16, HAS_DB = 32, ALL = 63 };

/* Error scales of f32 arithmetic, relative to the sums of magnitudes behind a result. */
#define F32_ARITH 2e-5
#define F32_MEAN 2e-6

typedef struct ln_case {
    clkit_dtype dt;
    int64_t m, n;
    tu_layout x, y, dy, dx, w, b, dw, db, mean, rstd; /* w..rstd: one row (r = 0) */
    unsigned has;
    int in_place; /* y is x and dx is dy */
    double x_lo, x_hi;
    const char *what;
} ln_case;

static ln_case make_case(clkit_dtype dt, int64_t m, int64_t n, const char *what)
{
    ln_case c;
    memset(&c, 0, sizeof c);
    c.dt = dt, c.m = m, c.n = n, c.what = what;
    c.x = c.y = c.dy = c.dx = tu_dense(m, n);
    c.w = c.b = c.dw = c.db = tu_dense(1, n);
    c.mean = c.rstd = tu_dense(1, m);
    c.has = ALL;
    c.x_lo = -4, c.x_hi = 6;
    return c;
}

/* Device data of one case and its values as the reference sees them (row-major, quantized). */
typedef struct ln_data {
    double *x, *w, *b, *dy, *mean, *rstd; /* mean, rstd: what the backward is given */
    cl_mem bx, by, bdy, bdx, bw, bb, bdw, bdb, bmean, brstd;
} ln_data;

static double *values(size_t n)
{
    double *v = calloc(n ? n : 1, sizeof *v);
    ck_assert(v != NULL);
    return v;
}

/* A buffer image of `l` holding vals (m x n, row-major) with `fill` elsewhere. */
static double *image(const tu_layout *l, int64_t m, int64_t n, const double *vals, double fill)
{
    double *img = values(l->total);
    for (size_t i = 0; i < l->total; i++) img[i] = fill;
    for (int64_t r = 0; vals && r < m; r++)
        for (int64_t c = 0; c < n; c++) img[tu_at(l, r, c)] = vals[r * n + c];
    return img;
}

static cl_mem upload(clkit_context *ctx, clkit_dtype dt, const tu_layout *l, int64_t m, int64_t n,
                     const double *vals)
{
    double *img = image(l, m, n, vals, 0.5);
    cl_mem b = tu_buffer(ctx, dt, l->total, vals ? img : NULL);
    free(img);
    return b;
}

static clkit_tensor view(cl_mem buf, clkit_dtype dt, const tu_layout *l, int64_t m, int64_t n)
{
    int64_t shape[2] = {m, n}, strides[2] = {l->rs, l->cs};
    return tu_view(buf, dt, 2, shape, strides, l->offset);
}

static clkit_tensor line(cl_mem buf, clkit_dtype dt, const tu_layout *l, int64_t n)
{
    int64_t shape[1] = {n}, strides[1] = {l->cs};
    return tu_view(buf, dt, 1, shape, strides, l->offset);
}

static double *random_values(size_t n, clkit_dtype dt, double lo, double hi, uint64_t seed)
{
    double *v = values(n);
    tu_fill_random(v, n, dt, lo, hi, seed);
    return v;
}

/* Reads the (m, n) view `l` of buf: the values into out (row-major), and asserts that every
   element outside the view still holds what `before` (the buffer image) had. */
static void read_view(clkit_context *ctx, cl_mem buf, clkit_dtype dt, const tu_layout *l, int64_t m,
                      int64_t n, const double *before, double *out, const char *name,
                      const ln_case *c)
{
    double *got = values(l->total), *outside = values(l->total);
    tu_read(ctx, buf, dt, l->total, got);
    memcpy(outside, before, l->total * sizeof *outside);
    for (int64_t r = 0; r < m; r++)
        for (int64_t k = 0; k < n; k++) {
            out[r * n + k] = got[tu_at(l, r, k)];
            outside[tu_at(l, r, k)] = got[tu_at(l, r, k)];
        }
    ck_assert_msg(memcmp(outside, got, l->total * sizeof *got) == 0,
                  "%s %s %lldx%lld: wrote outside %s", c->what, clkit_dtype_name(c->dt),
                  (long long)c->m, (long long)c->n, name);
    free(got), free(outside);
}

static void expect_close(const double *got, const double *want, const double *tol, size_t count,
                         const char *name, const ln_case *c)
{
    for (size_t i = 0; i < count; i++)
        if (!(fabs(got[i] - want[i]) <= tol[i]))
            ck_abort_msg("%s %s %lldx%lld: %s[%zu] is %.9g, expected %.9g (tolerance %.3g)",
                         c->what, clkit_dtype_name(c->dt), (long long)c->m, (long long)c->n, name,
                         i, got[i], want[i], tol[i]);
}

/* The snapshot of a whole buffer, to tell what a call wrote. */
static double *snapshot(clkit_context *ctx, cl_mem buf, clkit_dtype dt, size_t total)
{
    double *v = values(total);
    tu_read(ctx, buf, dt, total, v);
    return v;
}

/* Forward: y, mean and rstd against the reference. Leaves in d->mean and d->rstd the
   statistics the backward gets: the device's where it wrote them, else the reference's
   rounded to f32. */
static void run_forward(clkit_context *ctx, const ln_case *c, ln_data *d)
{
    const int64_t m = c->m, n = c->n;
    const size_t mn = (size_t)(m * n);
    d->x = random_values(mn, c->dt, c->x_lo, c->x_hi, (uint64_t)(m * 7919 + n));
    d->w = random_values((size_t)n, c->dt, 0.5, 1.5, (uint64_t)n + 1);
    d->b = random_values((size_t)n, c->dt, -1, 1, (uint64_t)n + 2);
    d->mean = values((size_t)m), d->rstd = values((size_t)m);
    double *want = values(mn), *got = values(mn), *tol = values(mn);
    double *got_s = values((size_t)m), *tol_s = values((size_t)m);
    const double *w = c->has & HAS_W ? d->w : NULL, *b = c->has & HAS_B ? d->b : NULL;
    ref_layernorm_forward(d->x, w, b, 1e-5, m, n, want, d->mean, d->rstd);

    d->bx = upload(ctx, c->dt, &c->x, m, n, d->x);
    d->by = c->in_place ? d->bx : upload(ctx, c->dt, &c->y, m, n, NULL);
    d->bw = upload(ctx, c->dt, &c->w, 1, n, d->w);
    d->bb = upload(ctx, c->dt, &c->b, 1, n, d->b);
    d->bmean = upload(ctx, CLKIT_F32, &c->mean, 1, m, NULL);
    d->brstd = upload(ctx, CLKIT_F32, &c->rstd, 1, m, NULL);
    double *y_before = snapshot(ctx, d->by, c->dt, c->y.total);
    double *mean_before = snapshot(ctx, d->bmean, CLKIT_F32, c->mean.total);
    double *rstd_before = snapshot(ctx, d->brstd, CLKIT_F32, c->rstd.total);

    clkit_tensor tx = view(d->bx, c->dt, &c->x, m, n), ty = view(d->by, c->dt, &c->y, m, n);
    clkit_tensor tw = line(d->bw, c->dt, &c->w, n), tb = line(d->bb, c->dt, &c->b, n);
    clkit_tensor tm = line(d->bmean, CLKIT_F32, &c->mean, m);
    clkit_tensor ts = line(d->brstd, CLKIT_F32, &c->rstd, m);
    TU_CHECK(clkit_layernorm_forward(ctx, &tx, c->has & HAS_W ? &tw : NULL,
                                     c->has & HAS_B ? &tb : NULL, 1e-5f, &ty,
                                     c->has & HAS_MEAN ? &tm : NULL,
                                     c->has & HAS_RSTD ? &ts : NULL));

    /* y: one rounding to the dtype, f32 arithmetic on the normalised value and the affine
       part, and the mean's own rounding error scaled by rstd. */
    for (int64_t r = 0; r < m; r++)
        for (int64_t k = 0; k < n; k++) {
            double xhat = (d->x[r * n + k] - d->mean[r]) * d->rstd[r], wk = w ? fabs(w[k]) : 1;
            tol[r * n + k] = tu_rtol(c->dt) * fabs(want[r * n + k]) +
                             F32_ARITH * (fabs(xhat) * wk + (b ? fabs(b[k]) : 0) + 1e-3) +
                             F32_MEAN * fabs(d->mean[r]) * d->rstd[r] * wk;
        }
    read_view(ctx, d->by, c->dt, &c->y, m, n, y_before, got, "y", c);
    expect_close(got, want, tol, mn, "y", c);
    if (c->has & HAS_MEAN) {
        read_view(ctx, d->bmean, CLKIT_F32, &c->mean, 1, m, mean_before, got_s, "mean", c);
        for (int64_t r = 0; r < m; r++) {
            double top = 0;
            for (int64_t k = 0; k < n; k++) top = fmax(top, fabs(d->x[r * n + k]));
            tol_s[r] = F32_MEAN * top;
        }
        expect_close(got_s, d->mean, tol_s, (size_t)m, "mean", c);
        memcpy(d->mean, got_s, (size_t)m * sizeof *got_s);
    } else {
        tu_assert_unchanged(ctx, d->bmean, CLKIT_F32, c->mean.total, mean_before);
        for (int64_t r = 0; r < m; r++) d->mean[r] = tu_quantize(CLKIT_F32, d->mean[r]);
    }
    if (c->has & HAS_RSTD) {
        read_view(ctx, d->brstd, CLKIT_F32, &c->rstd, 1, m, rstd_before, got_s, "rstd", c);
        for (int64_t r = 0; r < m; r++) tol_s[r] = F32_ARITH * d->rstd[r];
        expect_close(got_s, d->rstd, tol_s, (size_t)m, "rstd", c);
        memcpy(d->rstd, got_s, (size_t)m * sizeof *got_s);
    } else {
        tu_assert_unchanged(ctx, d->brstd, CLKIT_F32, c->rstd.total, rstd_before);
        for (int64_t r = 0; r < m; r++) d->rstd[r] = tu_quantize(CLKIT_F32, d->rstd[r]);
    }
    free(want), free(got), free(tol), free(got_s), free(tol_s);
    free(y_before), free(mean_before), free(rstd_before);
}

/* The backward's statistics come from buffers holding exactly d->mean and d->rstd. */
static void upload_stats(clkit_context *ctx, const ln_case *c, ln_data *d)
{
    clReleaseMemObject(d->bmean);
    clReleaseMemObject(d->brstd);
    d->bmean = upload(ctx, CLKIT_F32, &c->mean, 1, c->m, d->mean);
    d->brstd = upload(ctx, CLKIT_F32, &c->rstd, 1, c->m, d->rstd);
}

/* Runs the backward once; dx, dw and db (row-major values) receive what it wrote. */
static void backward_once(clkit_context *ctx, const ln_case *c, ln_data *d, double *dx,
                          double *dw, double *db)
{
    const int64_t m = c->m, n = c->n;
    d->bdy = upload(ctx, c->dt, &c->dy, m, n, d->dy);
    d->bdx = c->in_place ? d->bdy : upload(ctx, c->dt, &c->dx, m, n, NULL);
    d->bdw = upload(ctx, c->dt, &c->dw, 1, n, NULL);
    d->bdb = upload(ctx, c->dt, &c->db, 1, n, NULL);
    double *dx_before = snapshot(ctx, d->bdx, c->dt, c->dx.total);
    double *dw_before = snapshot(ctx, d->bdw, c->dt, c->dw.total);
    double *db_before = snapshot(ctx, d->bdb, c->dt, c->db.total);
    clkit_tensor tdy = view(d->bdy, c->dt, &c->dy, m, n), tx = view(d->bx, c->dt, &c->x, m, n);
    clkit_tensor tdx = view(d->bdx, c->dt, &c->dx, m, n), tw = line(d->bw, c->dt, &c->w, n);
    clkit_tensor tm = line(d->bmean, CLKIT_F32, &c->mean, m);
    clkit_tensor ts = line(d->brstd, CLKIT_F32, &c->rstd, m);
    clkit_tensor tdw = line(d->bdw, c->dt, &c->dw, n), tdb = line(d->bdb, c->dt, &c->db, n);
    TU_CHECK(clkit_layernorm_backward(ctx, &tdy, &tx, c->has & HAS_W ? &tw : NULL, &tm, &ts,
                                      &tdx, c->has & HAS_DW ? &tdw : NULL,
                                      c->has & HAS_DB ? &tdb : NULL));
    read_view(ctx, d->bdx, c->dt, &c->dx, m, n, dx_before, dx, "dx", c);
    if (c->has & HAS_DW) read_view(ctx, d->bdw, c->dt, &c->dw, 1, n, dw_before, dw, "dweight", c);
    else tu_assert_unchanged(ctx, d->bdw, c->dt, c->dw.total, dw_before);
    if (c->has & HAS_DB) read_view(ctx, d->bdb, c->dt, &c->db, 1, n, db_before, db, "dbias", c);
    else tu_assert_unchanged(ctx, d->bdb, c->dt, c->db.total, db_before);
    clReleaseMemObject(d->bdy);
    if (!c->in_place) clReleaseMemObject(d->bdx);
    clReleaseMemObject(d->bdw);
    clReleaseMemObject(d->bdb);
    free(dx_before), free(dw_before), free(db_before);
}

/* Tolerances: one rounding to the dtype plus f32 arithmetic on the magnitudes behind each. */
static void tolerances(clkit_dtype dt, const double *want, const double *mag, size_t count,
                       double *tol)
{
    for (size_t i = 0; i < count; i++)
        tol[i] = tu_rtol(dt) * fabs(want[i]) + F32_ARITH * mag[i] + 1e-30;
}

static void run_backward(clkit_context *ctx, const ln_case *c, ln_data *d)
{
    const int64_t m = c->m, n = c->n;
    const size_t mn = (size_t)(m * n);
    d->dy = random_values(mn, c->dt, -1, 1, (uint64_t)(m * 31 + n));
    double *dx = values(mn), *want_dx = values(mn), *dx_mag = values(mn), *tol = values(mn);
    double *dw = values((size_t)n), *want_dw = values((size_t)n), *dw_mag = values((size_t)n);
    double *db = values((size_t)n), *want_db = values((size_t)n), *db_mag = values((size_t)n);
    upload_stats(ctx, c, d);
    if (c->in_place) { /* the forward wrote y over x */
        clReleaseMemObject(d->bx);
        d->bx = d->by = upload(ctx, c->dt, &c->x, m, n, d->x);
    }
    ref_layernorm_backward(d->dy, d->x, c->has & HAS_W ? d->w : NULL, d->mean, d->rstd, m, n,
                           want_dx, want_dw, want_db, dx_mag, dw_mag, db_mag);
    backward_once(ctx, c, d, dx, dw, db);
    tolerances(c->dt, want_dx, dx_mag, mn, tol);
    expect_close(dx, want_dx, tol, mn, "dx", c);
    if (c->has & HAS_DW) {
        tolerances(c->dt, want_dw, dw_mag, (size_t)n, tol);
        expect_close(dw, want_dw, tol, (size_t)n, "dweight", c);
    }
    if (c->has & HAS_DB) {
        tolerances(c->dt, want_db, db_mag, (size_t)n, tol);
        expect_close(db, want_db, tol, (size_t)n, "dbias", c);
    }
    free(dx), free(dw), free(db), free(want_dx), free(want_dw), free(want_db);
    free(dx_mag), free(dw_mag), free(db_mag), free(tol);
}

static void release_data(const ln_case *c, ln_data *d)
{
    clReleaseMemObject(d->bx);
    if (!c->in_place) clReleaseMemObject(d->by);
    clReleaseMemObject(d->bw);
    clReleaseMemObject(d->bb);
    clReleaseMemObject(d->bmean);
    clReleaseMemObject(d->brstd);
    free(d->x), free(d->w), free(d->b), free(d->dy), free(d->mean), free(d->rstd);
}

/* Forward, then the backward from the forward's statistics. */
static void run_case(clkit_context *ctx, const ln_case *c)
{
    ln_data d;
    memset(&d, 0, sizeof d);
    run_forward(ctx, c, &d);
    run_backward(ctx, c, &d);
    release_data(c, &d);
}

/* Every length class: 1, primes, below and above the vector width, the largest row held on
   chip (PoCL: 256 positions) and rows that loop in one step or many (PoCL: 1024 positions a
   step). Long rows get few rows; M cycles through 1 and counts that leave the last block of
   rows part-empty. */
START_TEST(row_lengths)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {1, 2, 3, 5, 8, 17, 31, 64, 127, 255, 256, 257, 1000, 2048, 2049,
                                 4099, 70001};
    static const int64_t ms[] = {1, 3, 7, 64, 129};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            int64_t n = ns[i], m = n > 4000 ? 3 : ms[(i + d) % 5];
            ln_case c = make_case(float_dtypes[d], m, n, "contiguous");
            run_case(ctx, &c);
        }
    clkit_context_release(ctx);
}
END_TEST

/* Many more rows than the persistent grid has groups: every group's dw and db sums run over
   many rows, and the last block of rows is partly empty. */
START_TEST(many_rows)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ms[] = {1001, 700, 90};
    static const int64_t ns[] = {40, 300, 3001};
    for (size_t i = 0; i < 3; i++) {
        ln_case c = make_case(i == 1 ? CLKIT_BF16 : CLKIT_F32, ms[i], ns[i], "many rows");
        run_case(ctx, &c);
    }
    clkit_context_release(ctx);
}
END_TEST

/* Rows at an element offset, whose start is off vector alignment but the same in every row
   operand (vector loads with a phase); padded rows whose stride breaks alignment (scalar
   loads); x transposed in memory; a negative row stride. */
START_TEST(strided_rows)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {5, 33, 1000, 4099};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            int64_t n = ns[i], m = n > 2000 ? 3 : 6, pad = n + 16 - n % 8;
            ln_case c = make_case(float_dtypes[d], m, n, "phase");
            tu_layout phased = {pad, 1, 3, (size_t)(3 + m * pad)};
            c.x = c.y = c.dy = c.dx = phased;
            c.w.offset = c.b.offset = 3, c.w.total = c.b.total = (size_t)n + 3;
            run_case(ctx, &c);

            c.what = "padded";
            c.w = c.b = tu_dense(1, n);
            tu_layout lx = {n + 3, 1, 5, (size_t)(5 + m * (n + 3))};
            tu_layout ly = {n + 1, 1, 2, (size_t)(2 + m * (n + 1))};
            c.x = c.dx = lx, c.y = c.dy = ly;
            run_case(ctx, &c);

            c.what = "transposed";
            tu_layout lt = {1, m, 0, (size_t)(m * n)}, l2 = {2 * n, 2, 1, (size_t)(2 * m * n + 1)};
            c.x = c.dy = lt, c.y = c.dx = l2;
            run_case(ctx, &c);

            c.what = "negative row stride";
            tu_layout lr = {-(n + 2), 1, (size_t)((m - 1) * (n + 2)) + 1, (size_t)(m * (n + 2))};
            c.x = c.dx = lr, c.y = c.dy = tu_dense(m, n);
            run_case(ctx, &c);
        }
    clkit_context_release(ctx);
}
END_TEST

/* Every combination of weight, bias, mean and rstd present or NULL, with dweight and dbias
   likewise; weight and bias rows aligned, off the rows' phase, strided and reversed. */
START_TEST(optional_operands)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {40, 1500, 3000};
    for (unsigned has = 0; has < 16; has++)
        for (size_t d = 0; d < 3; d++) {
            int64_t n = ns[(has + d) % 3], m = 5;
            ln_case c = make_case(float_dtypes[d], m, n, "optional operands");
            c.has = has | ((has * 3 + d) & 3) << 4;
            switch ((has + d) % 4) {
            case 1: c.w.offset = 1, c.w.total = (size_t)n + 1; break;
            case 2:
                c.w.cs = 2, c.w.total = (size_t)(2 * n);
                c.b.cs = -1, c.b.offset = (size_t)n - 1;
                c.dw.cs = 3, c.dw.offset = 2, c.dw.total = (size_t)(3 * n + 2);
                break;
            case 3:
                c.mean.cs = 2, c.mean.total = (size_t)(2 * m);
                c.rstd.offset = 3, c.rstd.total = (size_t)m + 3;
                c.db.offset = 8, c.db.total = (size_t)n + 8;
                break;
            }
            run_case(ctx, &c);
        }
    clkit_context_release(ctx);
}
END_TEST

/* y written over x, dx over dy, on chip and looping. */
START_TEST(in_place)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {7, 1000, 5000};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < 3; i++) {
            ln_case c = make_case(float_dtypes[d], ns[i] > 2000 ? 3 : 9, ns[i], "in place");
            c.in_place = 1;
            run_case(ctx, &c);
        }
    clkit_context_release(ctx);
}
END_TEST

/* Rows of 1e4 +- 1 in f32. E[x^2] - E[x]^2 in f32 loses the variance entirely there (x^2 is
   about 1e8, where f32 steps by 8): the check below first shows that the tolerance would catch
   that, then runs the kernels on chip and looping. */
START_TEST(large_mean)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {200, 70001};
    for (size_t i = 0; i < 2; i++) {
        int64_t n = ns[i];
        double *x = random_values((size_t)n, CLKIT_F32, 1e4 - 1, 1e4 + 1, 5);
        float s = 0, s2 = 0;
        for (int64_t k = 0; k < n; k++) s += (float)x[k], s2 += (float)x[k] * (float)x[k];
        double mu, rs, naive_var = (double)(s2 / (float)n - (s / (float)n) * (s / (float)n));
        ref_layernorm_forward(x, NULL, NULL, 1e-5, 1, n, NULL, &mu, &rs);
        double naive_rs = 1 / sqrt(fmax(naive_var, 0) + 1e-5);
        ck_assert_msg(!(fabs(naive_rs - rs) <= F32_ARITH * rs + F32_MEAN * mu * rs),
                      "the naive variance (rstd %g against %g) would pass", naive_rs, rs);
        free(x);
        ln_case c = make_case(CLKIT_F32, 2, n, "large mean");
        c.x_lo = 1e4 - 1, c.x_hi = 1e4 + 1;
        run_case(ctx, &c);
    }
    clkit_context_release(ctx);
}
END_TEST

/* sum(y * g) as a function of x, w and b, in double. */
static double loss(const double *x, const double *w, const double *b, const double *g, int64_t m,
                   int64_t n)
{
    double *y = values((size_t)(m * n)), l = 0;
    ref_layernorm_forward(x, w, b, 1e-5, m, n, y, NULL, NULL);
    for (int64_t i = 0; i < m * n; i++) l += y[i] * g[i];
    free(y);
    return l;
}

/* Central difference of the loss along v[i]. */
static double central(double *v, size_t i, const double *x, const double *w, const double *b,
                      const double *g, int64_t m, int64_t n)
{
    const double h = 1e-5, keep = v[i];
    v[i] = keep + h;
    double up = loss(x, w, b, g, m, n);
    v[i] = keep - h;
    double down = loss(x, w, b, g, m, n);
    v[i] = keep;
    return (up - down) / (2 * h);
}

/* The analytic backward of the reference against central differences of its forward, then
   the device against the analytic backward, on tiny shapes. */
START_TEST(finite_differences)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t shapes[][2] = {{3, 5}, {2, 1}, {4, 13}};
    for (size_t s = 0; s < 3; s++) {
        const int64_t m = shapes[s][0], n = shapes[s][1];
        const size_t mn = (size_t)(m * n);
        ln_case c = make_case(CLKIT_F32, m, n, "finite differences");
        ln_data d;
        memset(&d, 0, sizeof d);
        run_forward(ctx, &c, &d);
        double *g = random_values(mn, CLKIT_F32, -1, 1, 99 + s);
        double *dx = values(mn), *dw = values((size_t)n), *db = values((size_t)n);
        double mean[4], rstd[4];
        ref_layernorm_forward(d.x, d.w, d.b, 1e-5, m, n, NULL, mean, rstd);
        ref_layernorm_backward(g, d.x, d.w, mean, rstd, m, n, dx, dw, db, NULL, NULL, NULL);
        for (size_t i = 0; i < mn; i++) {
            double fd = central(d.x, i, d.x, d.w, d.b, g, m, n);
            ck_assert_msg(fabs(fd - dx[i]) <= 1e-6 * (1 + fabs(dx[i])),
                          "%lldx%lld: dx[%zu] %.9g, central difference %.9g", (long long)m,
                          (long long)n, i, dx[i], fd);
        }
        for (size_t i = 0; i < (size_t)n; i++) {
            double fw = central(d.w, i, d.x, d.w, d.b, g, m, n);
            double fb = central(d.b, i, d.x, d.w, d.b, g, m, n);
            ck_assert_msg(fabs(fw - dw[i]) <= 1e-6 * (1 + fabs(dw[i])) &&
                              fabs(fb - db[i]) <= 1e-6 * (1 + fabs(db[i])),
                          "%lldx%lld: dw[%zu] %.9g (central %.9g), db %.9g (central %.9g)",
                          (long long)m, (long long)n, i, dw[i], fw, db[i], fb);
        }
        free(dx), free(dw), free(db), free(g);
        run_backward(ctx, &c, &d);
        release_data(&c, &d);
    }
    clkit_context_release(ctx);
}
END_TEST

/* Two backward runs over many rows give bitwise the same dx, dweight and dbias. */
START_TEST(deterministic)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t ns[] = {200, 3001};
    for (size_t i = 0; i < 2; i++) {
        const int64_t m = i ? 200 : 2000, n = ns[i];
        const size_t mn = (size_t)(m * n);
        ln_case c = make_case(i ? CLKIT_F32 : CLKIT_BF16, m, n, "deterministic");
        ln_data d;
        memset(&d, 0, sizeof d);
        run_forward(ctx, &c, &d);
        d.dy = random_values(mn, c.dt, -1, 1, 4242);
        upload_stats(ctx, &c, &d);
        double *runs[2][3];
        for (int r = 0; r < 2; r++) {
            runs[r][0] = values(mn), runs[r][1] = values((size_t)n), runs[r][2] = values((size_t)n);
            backward_once(ctx, &c, &d, runs[r][0], runs[r][1], runs[r][2]);
        }
        ck_assert_msg(memcmp(runs[0][0], runs[1][0], mn * sizeof(double)) == 0, "dx differs");
        ck_assert_msg(memcmp(runs[0][1], runs[1][1], (size_t)n * sizeof(double)) == 0,
                      "dweight differs");
        ck_assert_msg(memcmp(runs[0][2], runs[1][2], (size_t)n * sizeof(double)) == 0,
                      "dbias differs");
        for (int r = 0; r < 2; r++) free(runs[r][0]), free(runs[r][1]), free(runs[r][2]);
        release_data(&c, &d);
    }
    clkit_context_release(ctx);
}
END_TEST

/* weight NULL is a weight of ones: the backward's dx, and dweight (asked for without a
   weight: the gradient at a unit weight), are bitwise those of an explicit weight of ones,
   on chip and looping. */
START_TEST(unit_weight)
{
    clkit_context *ctx = tu_ctx();
    for (size_t i = 0; i < 3; i++) {
        const int64_t m = 7, n = i == 2 ? 1500 : 45;
        const size_t mn = (size_t)(m * n);
        ln_case c = make_case(float_dtypes[i], m, n, "unit weight");
        ln_data d;
        memset(&d, 0, sizeof d);
        run_forward(ctx, &c, &d);
        d.dy = random_values(mn, c.dt, -1, 1, 99);
        upload_stats(ctx, &c, &d);
        for (int64_t k = 0; k < n; k++) d.w[k] = 1;
        clReleaseMemObject(d.bw);
        d.bw = upload(ctx, c.dt, &c.w, 1, n, d.w);
        double *runs[2][3];
        for (int r = 0; r < 2; r++) {
            c.has = r ? ALL : ALL & ~HAS_W;
            runs[r][0] = values(mn), runs[r][1] = values((size_t)n), runs[r][2] = values((size_t)n);
            backward_once(ctx, &c, &d, runs[r][0], runs[r][1], runs[r][2]);
        }
        static const char *names[3] = {"dx", "dweight", "dbias"};
        for (int k = 0; k < 3; k++)
            ck_assert_msg(memcmp(runs[0][k], runs[1][k], (k ? (size_t)n : mn) * sizeof(double)) == 0,
                          "%s %s: %s without a weight differs from a weight of ones",
                          clkit_dtype_name(c.dt), n > 100 ? "looping" : "on chip", names[k]);
        for (int r = 0; r < 2; r++) free(runs[r][0]), free(runs[r][1]), free(runs[r][2]);
        release_data(&c, &d);
    }
    clkit_context_release(ctx);
}
END_TEST

/* M = 0: the forward writes nothing, the backward writes zero dweight and dbias. */
START_TEST(no_rows)
{
    clkit_context *ctx = tu_ctx();
    int64_t s0[2] = {0, 6}, s6[1] = {6}, sm[1] = {0};
    cl_mem b = tu_buffer(ctx, CLKIT_F32, 8, NULL), gw = tu_buffer(ctx, CLKIT_F32, 6, NULL);
    cl_mem gb = tu_buffer(ctx, CLKIT_F32, 6, NULL);
    double before[8], got[6];
    tu_read(ctx, b, CLKIT_F32, 8, before);
    clkit_tensor x = clkit_tensor_contiguous(b, CLKIT_F32, 2, s0);
    clkit_tensor w = clkit_tensor_contiguous(b, CLKIT_F32, 1, s6);
    clkit_tensor st = clkit_tensor_contiguous(b, CLKIT_F32, 1, sm);
    clkit_tensor dw = clkit_tensor_contiguous(gw, CLKIT_F32, 1, s6);
    clkit_tensor db = clkit_tensor_contiguous(gb, CLKIT_F32, 1, s6);
    TU_CHECK(clkit_layernorm_forward(ctx, &x, &w, &w, 1e-5f, &x, &st, &st));
    tu_assert_unchanged(ctx, b, CLKIT_F32, 8, before);
    TU_CHECK(clkit_layernorm_backward(ctx, &x, &x, &w, &st, &st, &x, &dw, &db));
    tu_read(ctx, gw, CLKIT_F32, 6, got);
    for (int i = 0; i < 6; i++) ck_assert_msg(got[i] == 0, "dweight[%d] = %g", i, got[i]);
    tu_read(ctx, gb, CLKIT_F32, 6, got);
    for (int i = 0; i < 6; i++) ck_assert_msg(got[i] == 0, "dbias[%d] = %g", i, got[i]);
    clReleaseMemObject(b), clReleaseMemObject(gw), clReleaseMemObject(gb);
    clkit_context_release(ctx);
}
END_TEST

/* Tensors of a rejected call: in the guard's input buffer x (4, 4) at 0, dy at 16, weight and
   bias (4) at 32 and 36, mean and rstd (4) at 40 and 44; every output in its output buffer: y
   or dx at 0, mean or dweight at 16, rstd or dbias at 20. */
typedef struct bad_set {
    clkit_tensor x, dy, w, b, mean, rstd, y, omean, orstd, dw, db;
} bad_set;

static bad_set bad_tensors(const tu_guard *g)
{
    int64_t s44[2] = {4, 4}, s4[1] = {4};
    bad_set t;
    t.x = t.dy = clkit_tensor_contiguous(g->in, CLKIT_F32, 2, s44);
    t.y = clkit_tensor_contiguous(g->out, CLKIT_F32, 2, s44);
    t.w = t.b = t.mean = t.rstd = t.omean = t.orstd = t.dw = t.db =
        clkit_tensor_contiguous(g->in, CLKIT_F32, 1, s4);
    t.dy.offset = 16 * 4, t.w.offset = 32 * 4, t.b.offset = 36 * 4;
    t.mean.offset = 40 * 4, t.rstd.offset = 44 * 4;
    t.omean.buffer = t.orstd.buffer = t.dw.buffer = t.db.buffer = g->out;
    t.omean.offset = t.dw.offset = 16 * 4, t.orstd.offset = t.db.offset = 20 * 4;
    return t;
}

static clkit_status fwd(clkit_context *ctx, const bad_set *t)
{
    return clkit_layernorm_forward(ctx, &t->x, &t->w, &t->b, 1e-5f, &t->y, &t->omean, &t->orstd);
}

static clkit_status bwd(clkit_context *ctx, const bad_set *t)
{
    return clkit_layernorm_backward(ctx, &t->dy, &t->x, &t->w, &t->mean, &t->rstd, &t->y, &t->dw,
                                    &t->db);
}

START_TEST(bad_forward)
{
    tu_guard guard = tu_guard_begin();
    clkit_context *ctx = guard.ctx;
    const bad_set ok = bad_tensors(&guard);
    bad_set t = ok;
    ck_assert_int_eq(fwd(NULL, &t), CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT,
              clkit_layernorm_forward(ctx, NULL, &t.w, &t.b, 1e-5f, &t.y, NULL, NULL));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT,
              clkit_layernorm_forward(ctx, &t.x, &t.w, &t.b, 1e-5f, NULL, NULL, NULL));
    t.w.buffer = NULL;
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, fwd(ctx, &t));
    t = ok, t.y.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, fwd(ctx, &t));
    t = ok, t.x.dtype = t.y.dtype = CLKIT_I32;
    TU_EXPECT(CLKIT_ERR_DTYPE, fwd(ctx, &t));
    t = ok, t.b.dtype = CLKIT_BF16;
    TU_EXPECT(CLKIT_ERR_DTYPE, fwd(ctx, &t));
    t = ok, t.omean.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, fwd(ctx, &t));
    t = ok, t.x.ndim = 1;
    TU_EXPECT(CLKIT_ERR_NDIM, fwd(ctx, &t));
    t = ok, t.w.ndim = 2, t.w.shape[1] = 1, t.w.strides[1] = 1;
    TU_EXPECT(CLKIT_ERR_NDIM, fwd(ctx, &t));
    t = ok, t.y.shape[1] = 3;
    TU_EXPECT(CLKIT_ERR_SHAPE, fwd(ctx, &t));
    t = ok, t.b.shape[0] = 3;
    TU_EXPECT(CLKIT_ERR_SHAPE, fwd(ctx, &t));
    t = ok, t.orstd.shape[0] = 5;
    TU_EXPECT(CLKIT_ERR_SHAPE, fwd(ctx, &t));
    t = ok, t.x.shape[1] = t.y.shape[1] = t.w.shape[0] = t.b.shape[0] = 0;
    TU_EXPECT(CLKIT_ERR_SHAPE, fwd(ctx, &t));
    t = ok, t.x.shape[0] = -1;
    TU_EXPECT(CLKIT_ERR_SHAPE, fwd(ctx, &t));
    static const float bad_eps[] = {0.0f, -1e-5f, INFINITY, NAN};
    t = ok;
    for (int i = 0; i < 4; i++)
        TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_layernorm_forward(ctx, &t.x, &t.w, &t.b, bad_eps[i],
                                                                   &t.y, &t.omean, &t.orstd));
    t = ok, t.y.offset = 50 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, fwd(ctx, &t));
    t = ok, t.w.strides[0] = 11;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, fwd(ctx, &t));
    t = ok, t.y.strides[0] = INT64_MAX / 2;
    TU_EXPECT(CLKIT_ERR_OVERFLOW, fwd(ctx, &t));
    t = ok, t.y.offset = 2;
    TU_EXPECT(CLKIT_ERR_STRIDE, fwd(ctx, &t));
    t = ok, t.orstd.strides[0] = 0;
    TU_EXPECT(CLKIT_ERR_STRIDE, fwd(ctx, &t));
    /* y may be x itself, never a shifted view of it; outputs meet no input nor each other */
    t = ok, t.y.buffer = guard.in, t.y.offset = 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, fwd(ctx, &t));
    t = ok, t.omean.buffer = guard.in, t.omean.offset = 32 * 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, fwd(ctx, &t));
    t = ok, t.orstd.offset = 14 * 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, fwd(ctx, &t));
    t = ok, t.orstd = t.omean;
    TU_EXPECT(CLKIT_ERR_OVERLAP, fwd(ctx, &t));
    t = ok, t.w.buffer = guard.out, t.w.offset = 8 * 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, fwd(ctx, &t));
    tu_guard_end(&guard);
}
END_TEST

START_TEST(bad_backward)
{
    tu_guard guard = tu_guard_begin();
    clkit_context *ctx = guard.ctx;
    const bad_set ok = bad_tensors(&guard);
    bad_set t = ok;
    ck_assert_int_eq(bwd(NULL, &t), CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_layernorm_backward(ctx, NULL, &t.x, &t.w, &t.mean,
                                                                &t.rstd, &t.y, &t.dw, &t.db));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_layernorm_backward(ctx, &t.dy, &t.x, &t.w, NULL,
                                                                &t.rstd, &t.y, &t.dw, &t.db));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_layernorm_backward(ctx, &t.dy, &t.x, &t.w, &t.mean,
                                                                NULL, &t.y, &t.dw, &t.db));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_layernorm_backward(ctx, &t.dy, &t.x, &t.w, &t.mean,
                                                                &t.rstd, NULL, &t.dw, &t.db));
    t = ok, t.dy.dtype = CLKIT_BF16;
    TU_EXPECT(CLKIT_ERR_DTYPE, bwd(ctx, &t));
    t = ok, t.dw.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, bwd(ctx, &t));
    t = ok, t.rstd.dtype = CLKIT_I32;
    TU_EXPECT(CLKIT_ERR_DTYPE, bwd(ctx, &t));
    t = ok, t.mean.ndim = 2, t.mean.shape[1] = 1, t.mean.strides[1] = 1;
    TU_EXPECT(CLKIT_ERR_NDIM, bwd(ctx, &t));
    t = ok, t.dy.shape[0] = 3;
    TU_EXPECT(CLKIT_ERR_SHAPE, bwd(ctx, &t));
    t = ok, t.db.shape[0] = 5;
    TU_EXPECT(CLKIT_ERR_SHAPE, bwd(ctx, &t));
    t = ok, t.mean.shape[0] = 3;
    TU_EXPECT(CLKIT_ERR_SHAPE, bwd(ctx, &t));
    t = ok, t.dw.offset = 62 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, bwd(ctx, &t));
    t = ok, t.dw.strides[0] = 0;
    TU_EXPECT(CLKIT_ERR_STRIDE, bwd(ctx, &t));
    /* dx may be dy itself (in place), never x, nor an input's neighbour */
    t = ok, t.y = t.x;
    TU_EXPECT(CLKIT_ERR_OVERLAP, bwd(ctx, &t));
    t = ok, t.db.buffer = guard.in, t.db.offset = 42 * 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, bwd(ctx, &t));
    t = ok, t.db.offset = 18 * 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, bwd(ctx, &t));
    t = ok, t.dw.offset = 12 * 4;
    TU_EXPECT(CLKIT_ERR_OVERLAP, bwd(ctx, &t));
    tu_guard_end(&guard);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("layernorm");
    TCase *tc = tu_tcase("layernorm");
    tcase_add_test(tc, row_lengths);
    tcase_add_test(tc, many_rows);
    tcase_add_test(tc, strided_rows);
    tcase_add_test(tc, optional_operands);
    tcase_add_test(tc, in_place);
    tcase_add_test(tc, large_mean);
    tcase_add_test(tc, finite_differences);
    tcase_add_test(tc, deterministic);
    tcase_add_test(tc, unit_weight);
    tcase_add_test(tc, no_rows);
    tcase_add_test(tc, bad_forward);
    tcase_add_test(tc, bad_backward);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* clkit_attention_forward / _backward against the double-precision reference of
   tests/ref/attention.c: causal and not; Lq != Lk both ways; lengths 1, 69 (the tutorial's
   masked case), 128 and off every block size; each head dim; grouped-query ratios 1, 2 and 8;
   each dtype; permuted, padded and strided views in and out; the scale option; tile
   configurations read from the tuned-config cache, and the tuner that fills it; empty shapes.
   Finite differences check the reference gradient itself, and bad input is rejected before
   anything is written.

   Fully masked rows cannot occur: causal masking is top-left aligned, so query i always sees
   key 0 whenever Lk >= 1. The only rows with no key are those of Lk = 0 (o = 0, lse = -inf).

   Builds dominate the run time on PoCL: the cases of one (dtype, head dim) share its two
   programs (forward, backward), and only f32 visits every head dim. */
#define _GNU_SOURCE
#include "tune.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- device tensors in several layouts ---- */

/* A view of `len` buffer elements; the values outside it are a sentinel that must survive. */
typedef struct dev {
    cl_mem buf;
    size_t len;
    clkit_tensor t;
} dev;

#define SENTINEL 7.5

/* Layouts of a (B, H, L, D) tensor, or (B, H, L) for lse: 'c' contiguous; 'p' with H and L
   swapped in memory ((B, L, H, D), as a fused QKV projection leaves them), rows padded and an
   element offset; 'h' the same with the padding and offset 8 elements (aligned for the tensor
   cores); 's' contiguous order with the last dimension strided by 2. */
/* Element offset in the buffer of the view's i-th element (row-major order). */
static size_t at(const dev *d, int64_t i)
{
    int64_t off = (int64_t)(d->t.offset / clkit_dtype_size(d->t.dtype));
    for (int k = d->t.ndim - 1; k >= 0; k--) {
        off += i % d->t.shape[k] * d->t.strides[k];
        i /= d->t.shape[k];
    }
    return (size_t)off;
}

static dev make_dev(clkit_context *ctx, clkit_dtype dt, int ndim, const int64_t *shape,
                    char layout, const double *vals)
{
    int perm[4] = {0, 1, 2, 3};
    if (layout == 'p' || layout == 'h') perm[1] = 2, perm[2] = 1;
    int64_t strides[4], run = layout == 's' ? 2 : 1, pad = layout == 'p' ? 3 : layout == 'h' ? 8 : 0;
    size_t lead = (size_t)pad + (layout == 'p' ? 2 : 0);
    for (int i = ndim - 1; i >= 0; i--) {
        strides[perm[i]] = run;
        run = run * (shape[perm[i]] ? shape[perm[i]] : 1) + (i == ndim - 1 ? pad : 0);
    }
    dev d;
    d.len = lead + (size_t)run;
    d.t = tu_view(NULL, dt, ndim, shape, strides, lead);
    double *mem = malloc(d.len * sizeof *mem);
    ck_assert(mem != NULL);
    for (size_t i = 0; i < d.len; i++) mem[i] = SENTINEL;
    int64_t n = vals ? clkit_numel(&d.t) : 0;
    for (int64_t i = 0; i < n; i++) mem[at(&d, i)] = vals[i];
    d.buf = d.t.buffer = tu_buffer(ctx, dt, d.len, mem);
    free(mem);
    return d;
}

/* The view's values in row-major order; asserts that nothing outside the view changed. */
static void read_view(clkit_context *ctx, const dev *d, double *out, const char *what)
{
    double *mem = malloc(d->len * sizeof *mem);
    ck_assert(mem != NULL);
    tu_read(ctx, d->buf, d->t.dtype, d->len, mem);
    int64_t n = clkit_numel(&d->t);
    for (int64_t i = 0; i < n; i++) {
        size_t o = at(d, i);
        out[i] = mem[o];
        mem[o] = SENTINEL;
    }
    for (size_t i = 0; i < d->len; i++)
        if (mem[i] != SENTINEL) ck_abort_msg("%s: wrote element %zu outside its view", what, i);
    free(mem);
}

static void drop(dev *d) { clReleaseMemObject(d->buf); }

/* ---- cases ---- */

typedef struct acase {
    clkit_dtype dt;
    int64_t b, hq, hkv, lq, lk, d;
    int causal;
    float scale;        /* 0: the default 1/sqrt(D) */
    char in, out;       /* layouts of the inputs and of the outputs */
    int no_lse;         /* forward only, lse NULL */
    int twice;          /* the forward again, bitwise the same (decoding's merge order) */
    double ramp;        /* > 0: scores that climb along the keys, by about this much (log2) */
    int no_backward;    /* o and lse only */
} acase;

static acase basic(clkit_dtype dt, int64_t d, int64_t lq, int64_t lk, int causal)
{
    acase c;
    memset(&c, 0, sizeof c);
    c.dt = dt, c.d = d, c.lq = lq, c.lk = lk, c.causal = causal;
    c.b = 1, c.hq = 2, c.hkv = 1, c.in = c.out = 'c';
    return c;
}

/* Errors allowed: the f32 arithmetic, a fraction of the largest reference value (a sum of many
   terms rounds relative to its largest), plus one rounding of each output to its dtype. The
   tensor-core kernels (rounded_p) also round P and dS to the storage dtype before the products
   that take them, as FlashAttention does: up to one rounding of the largest value more.
   Gradients also carry the cancellation in dS = P (dP - delta), whose two f32 sums run in
   different orders: up to scale_eps times their element of `scale`
   (ref_attention_backward_scale), which matters where the gradient itself is 0 (one key). */
static void expect_close(const double *got, const double *want, int64_t n, clkit_dtype dt,
                         int rounded_p, const double *scale, double scale_eps, const char *name,
                         const char *what)
{
    double mx = 0, frac = 3e-5;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(want[i])) mx = fmax(mx, fabs(want[i]));
    double round = dt == CLKIT_F16 ? 0x1p-11 : dt == CLKIT_BF16 ? 0x1p-8 : 0;
    double abs_err = (frac + (rounded_p ? round : 0)) * mx + 1e-30;
    for (int64_t i = 0; i < n; i++)
        if (!tu_close(got[i], want[i], abs_err + (scale ? scale_eps * scale[i] : 0), round + frac))
            ck_abort_msg("%s: %s[%lld] is %.9g, expected %.9g (largest %.3g)", what, name,
                         (long long)i, got[i], want[i], mx);
}

static void describe(const acase *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s B%lld Hq%lld Hkv%lld Lq%lld Lk%lld D%lld%s scale %g %c->%c",
             clkit_dtype_name(c->dt), (long long)c->b, (long long)c->hq, (long long)c->hkv,
             (long long)c->lq, (long long)c->lk, (long long)c->d,
             c->causal == CLKIT_CAUSAL_BOTTOM_RIGHT ? " causal bottom-right" : c->causal ? " causal" : "",
             (double)c->scale, c->in, c->out);
}

typedef struct host_data {
    double *q, *k, *v, *dout;
    int64_t nq, nk, nl;
} host_data;

/* q in [0.5, 1) and key j's row times g (j / Lk)^3, g such that the last key's scores lie
   about c->ramp (log2 units) above the first's: a row's max climbs by less than a unit a
   block over the first keys and by tens over the last ones, so that the forward both keeps
   and moves its running max (the wgmma forward keeps it within 8). */
static void ramp_scores(const acase *c, host_data *h)
{
    double scale = c->scale > 0 ? c->scale : 1 / sqrt((double)c->d);
    double g = c->ramp / (0.375 * (double)c->d * scale * 1.4426950408889634);
    for (int64_t i = 0; i < h->nq; i++) h->q[i] = ref_quantize(c->dt, 0.75 + h->q[i] / 8);
    for (int64_t i = 0; i < h->nk; i++) {
        double t = (double)(i / c->d % c->lk) / (double)c->lk;
        h->k[i] = ref_quantize(c->dt, g * t * t * t * fabs(h->k[i]) / 2);
    }
}

static host_data make_inputs(const acase *c)
{
    host_data h;
    h.nq = c->b * c->hq * c->lq * c->d, h.nk = c->b * c->hkv * c->lk * c->d;
    h.nl = c->b * c->hq * c->lq;
    size_t nq = (size_t)(h.nq ? h.nq : 1), nk = (size_t)(h.nk ? h.nk : 1);
    h.q = malloc(nq * sizeof(double)), h.dout = malloc(nq * sizeof(double));
    h.k = malloc(nk * sizeof(double)), h.v = malloc(nk * sizeof(double));
    ck_assert(h.q && h.k && h.v && h.dout);
    uint64_t seed = (uint64_t)(c->lq * 131 + c->lk * 7 + c->d + c->hkv);
    /* q and k in [-2, 2): scores spread over several units, so the softmax is far from flat. */
    tu_fill_random(h.q, (size_t)h.nq, c->dt, -2, 2, seed);
    tu_fill_random(h.k, (size_t)h.nk, c->dt, -2, 2, seed + 1);
    tu_fill_random(h.v, (size_t)h.nk, c->dt, -1, 1, seed + 2);
    tu_fill_random(h.dout, (size_t)h.nq, c->dt, -1, 1, seed + 3);
    if (c->ramp > 0) ramp_scores(c, &h);
    return h;
}

static void free_inputs(host_data *h) { free(h->q), free(h->k), free(h->v), free(h->dout); }

static ref_attention_dims dims_of(const acase *c)
{
    ref_attention_dims a = {c->b, c->hq, c->hkv, c->lq, c->lk, c->d, c->causal,
                            c->scale != 0 ? (double)c->scale : 1.0 / sqrt((double)c->d)};
    return a;
}

/* Runs the backward twice on the device and checks both against the reference, bitwise equal
   to each other (grouped-query sums in a fixed order). o and lse are the device's forward. */
static void check_backward(clkit_context *ctx, const acase *c, const host_data *h, const dev *q,
                           const dev *k, const dev *v, const dev *o, const dev *lse,
                           const double *o_host, int rounded_p, const char *what)
{
    int64_t qs[4] = {c->b, c->hq, c->lq, c->d}, ks[4] = {c->b, c->hkv, c->lk, c->d};
    dev dout = make_dev(ctx, c->dt, 4, qs, c->in, h->dout);
    dev dq = make_dev(ctx, c->dt, 4, qs, c->out, NULL), dk = make_dev(ctx, c->dt, 4, ks, c->out, NULL);
    dev dv = make_dev(ctx, c->dt, 4, ks, c->out, NULL);
    clkit_attention_options opt = {c->causal, c->scale};
    size_t nq = (size_t)(h->nq ? h->nq : 1), nk = (size_t)(h->nk ? h->nk : 1);
    double *want[3], *scale[3], *got[2][3];
    for (int i = 0; i < 3; i++) {
        size_t n = i == 0 ? nq : nk;
        want[i] = malloc(n * sizeof(double)), scale[i] = malloc(n * sizeof(double));
        got[0][i] = malloc(n * sizeof(double)), got[1][i] = malloc(n * sizeof(double));
        ck_assert(want[i] && scale[i] && got[0][i] && got[1][i]);
    }
    ref_attention_dims a = dims_of(c);
    ref_attention_backward(&a, h->q, h->k, h->v, o_host, h->dout, want[0], want[1], want[2]);
    ref_attention_backward_scale(&a, h->q, h->k, h->v, o_host, h->dout, scale[0], scale[1],
                                 scale[2]);
    /* A dot product of D f32 terms rounds by up to D units of 2^-24 of its absolute sum. */
    double scale_eps = (double)c->d * 0x1p-24;
    const dev *outs[3] = {&dq, &dk, &dv};
    static const char *names[3] = {"dq", "dk", "dv"};
    for (int run = 0; run < 2; run++) {
        TU_CHECK(clkit_attention_backward(ctx, &q->t, &k->t, &v->t, &o->t, &dout.t, &lse->t, &opt,
                                          &dq.t, &dk.t, &dv.t));
        for (int i = 0; i < 3; i++) read_view(ctx, outs[i], got[run][i], what);
    }
    for (int i = 0; i < 3; i++) {
        int64_t n = i == 0 ? h->nq : h->nk;
        expect_close(got[0][i], want[i], n, c->dt, rounded_p, scale[i], scale_eps, names[i],
                     what);
        ck_assert_msg(memcmp(got[0][i], got[1][i], (size_t)n * sizeof(double)) == 0,
                      "%s: %s differs between two runs", what, names[i]);
        free(want[i]), free(scale[i]), free(got[0][i]), free(got[1][i]);
    }
    drop(&dout), drop(&dq), drop(&dk), drop(&dv);
}

/* Whether attention may take the tensor-core or matrix-core kernels (the host decides by
   layout too). */
static int has_tensor_cores(clkit_context *ctx)
{
    return tu_fast_path(ctx, "attention", CLKIT_FAST_PATH_NV_MMA) ||
           tu_fast_path(ctx, "attention", CLKIT_FAST_PATH_AMD_MFMA);
}

/* Whether P and dS may be rounded to the storage dtype: f16/bf16 on the tensor cores (the
   wider tolerance then applies to every f16/bf16 case of such a device). f32 runs there as
   3xTF32, which keeps them f32. */
static int tensor_cores(clkit_context *ctx, clkit_dtype dt)
{
    return has_tensor_cores(ctx) && dt != CLKIT_F32;
}

/* Forward (and, unless no_lse, backward) of one case against the reference. */
static void check_case(clkit_context *ctx, const acase *c)
{
    int rounded_p = tensor_cores(ctx, c->dt);
    char what[160];
    describe(c, what, sizeof what);
    host_data h = make_inputs(c);
    int64_t qs[4] = {c->b, c->hq, c->lq, c->d}, ks[4] = {c->b, c->hkv, c->lk, c->d};
    dev q = make_dev(ctx, c->dt, 4, qs, c->in, h.q), k = make_dev(ctx, c->dt, 4, ks, c->in, h.k);
    dev v = make_dev(ctx, c->dt, 4, ks, c->in, h.v), o = make_dev(ctx, c->dt, 4, qs, c->out, NULL);
    dev lse = make_dev(ctx, CLKIT_F32, 3, qs, c->out, NULL);
    clkit_attention_options opt = {c->causal, c->scale};
    TU_CHECK(clkit_attention_forward(ctx, &q.t, &k.t, &v.t, &opt, &o.t, c->no_lse ? NULL : &lse.t));
    size_t nq = (size_t)(h.nq ? h.nq : 1), nl = (size_t)(h.nl ? h.nl : 1);
    double *o_got = malloc(nq * sizeof(double)), *o_want = malloc(nq * sizeof(double));
    double *l_got = malloc(nl * sizeof(double)), *l_want = malloc(nl * sizeof(double));
    ck_assert(o_got && o_want && l_got && l_want);
    ref_attention_dims a = dims_of(c);
    ref_attention_forward(&a, h.q, h.k, h.v, o_want, l_want);
    read_view(ctx, &o, o_got, what);
    expect_close(o_got, o_want, h.nq, c->dt, rounded_p, NULL, 0, "o", what);
    if (c->twice) {
        double *again = malloc(nq * sizeof(double));
        ck_assert(again != NULL);
        TU_CHECK(clkit_attention_forward(ctx, &q.t, &k.t, &v.t, &opt, &o.t, c->no_lse ? NULL : &lse.t));
        read_view(ctx, &o, again, what);
        ck_assert_msg(memcmp(o_got, again, (size_t)h.nq * sizeof(double)) == 0, "%s: o differs between two runs",
                      what);
        free(again);
    }
    if (!c->no_lse) {
        read_view(ctx, &lse, l_got, what);
        expect_close(l_got, l_want, h.nl, CLKIT_F32, 0, NULL, 0, "lse", what);
        if (!c->no_backward) check_backward(ctx, c, &h, &q, &k, &v, &o, &lse, o_got, rounded_p, what);
    }
    free(o_got), free(o_want), free(l_got), free(l_want);
    drop(&q), drop(&k), drop(&v), drop(&o), drop(&lse);
    free_inputs(&h);
}

/* ---- suites ---- */

static const int64_t head_dims[] = {16, 32, 64, 128, 256};

/* Every head dim in f32: the tutorial's Lq = Lk = 69, Lq < Lk and Lq > Lk with grouped
   queries, and (but for D = 256, kept short) 128 and a single position. */
START_TEST(each_head_dim)
{
    clkit_context *ctx = tu_ctx();
    for (size_t i = 0; i < sizeof head_dims / sizeof *head_dims; i++) {
        int64_t d = head_dims[i];
        acase c = basic(CLKIT_F32, d, 69, 69, 1);
        check_case(ctx, &c);
        c = basic(CLKIT_F32, d, 37, 100, 0);
        c.b = 2, c.hq = 1;
        check_case(ctx, &c);
        c = basic(CLKIT_F32, d, 100, 37, 1);
        c.hkv = 2;
        check_case(ctx, &c);
        if (d == 256) continue;
        c = basic(CLKIT_F32, d, 128, 128, 1);
        check_case(ctx, &c);
        c = basic(CLKIT_F32, d, 1, 1, 0);
        check_case(ctx, &c);
    }
    clkit_context_release(ctx);
}
END_TEST

/* Lengths at, below and above the block sizes of every tile configuration (powers of two from
   4 to 64), equal and unequal, causal and not. */
START_TEST(lengths)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t same[] = {1, 2, 17, 32, 33, 64, 65, 128, 129, 200};
    static const int64_t pairs[][2] = {{1, 200}, {200, 1}, {17, 129}, {129, 17},
                                       {64, 33}, {33, 64}, {69, 128}, {128, 69}};
    for (int causal = 0; causal < 2; causal++) {
        for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
            acase c = basic(CLKIT_F32, 32, same[i], same[i], causal);
            check_case(ctx, &c);
        }
        for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
            acase c = basic(CLKIT_F32, 32, pairs[i][0], pairs[i][1], causal);
            check_case(ctx, &c);
        }
    }
    clkit_context_release(ctx);
}
END_TEST

/* Grouped-query ratios 1, 2 and 8 (dk and dv sum over 1, 2 and 8 query heads). */
START_TEST(grouped_query)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t kv_heads[] = {8, 4, 1};
    for (int causal = 0; causal < 2; causal++)
        for (size_t i = 0; i < 3; i++) {
            acase c = basic(CLKIT_F32, 64, 45, 70, causal);
            c.b = 2, c.hq = 8, c.hkv = kv_heads[i];
            check_case(ctx, &c);
        }
    clkit_context_release(ctx);
}
END_TEST

/* f16 and bf16 storage (f32 arithmetic): one rounding of each output. */
START_TEST(dtypes)
{
    clkit_context *ctx = tu_ctx();
    static const clkit_dtype dts[] = {CLKIT_F16, CLKIT_BF16};
    for (size_t i = 0; i < 2; i++) {
        acase c = basic(dts[i], 64, 69, 69, 1);
        c.b = 2, c.hq = 4, c.hkv = 2;
        check_case(ctx, &c);
        c = basic(dts[i], 64, 33, 80, 0);
        check_case(ctx, &c);
        c = basic(dts[i], 64, 80, 33, 1);
        c.hkv = 2;
        check_case(ctx, &c);
        c = basic(dts[i], 64, 1, 1, 1);
        check_case(ctx, &c);
    }
    clkit_context_release(ctx);
}
END_TEST

/* The tensor-core kernels' shapes in f16, bf16 and f32 (3xTF32): every head dim they take
   (f32 at 128 falls back to the portable backward), lengths at and off their 16-, 32-, 64-,
   128- and 192-row blocks (Hopper's dQ holds 192 queries at D 128), grouped queries, aligned
   (B, L, H, D)-ordered inputs (the fast path), unaligned ones and a strided head dimension (the
   portable path on the same device). Devices without tensor cores run one case a dtype. */
START_TEST(tensor_core_shapes)
{
    clkit_context *ctx = tu_ctx();
    static const clkit_dtype dts[] = {CLKIT_F16, CLKIT_BF16, CLKIT_F32};
    static const int64_t dims[] = {16, 32, 64, 128};
    static const int64_t lens[][2] = {{130, 130}, {64, 65}, {17, 200}, {200, 17}, {400, 300}, {385, 385}};
    size_t nlens = sizeof lens / sizeof *lens;
    int full = has_tensor_cores(ctx);
    for (size_t i = 0; i < 3; i++) {
        for (size_t d = 0; d < (full ? 4 : 1); d++)
            for (size_t l = 0; l < (full ? nlens : 1); l++) {
                acase c = basic(dts[i], dims[d], lens[l][0], lens[l][1], (int)(l % 2));
                c.hq = 4, c.hkv = l < 2 ? 2 : 4;
                c.in = l == 3 ? 's' : l == 2 ? 'p' : 'h';
                c.out = l == 1 ? 'p' : 'c';
                check_case(ctx, &c);
            }
    }
    clkit_context_release(ctx);
}
END_TEST

/* Head dim 256 in f16 and bf16 (on Hopper the wgmma dK/dV kernel splits its columns over two
   work-groups, each recomputing the scores, and dQ keeps two accumulators): causal and not,
   Lq != Lk with bottom-right alignment, grouped queries, outputs aligned (staged through local
   memory there) and padded. */
START_TEST(wide_heads)
{
    clkit_context *ctx = tu_ctx();
    static const clkit_dtype dts[] = {CLKIT_F16, CLKIT_BF16};
    for (size_t i = 0; i < 2; i++) {
        acase c = basic(dts[i], 256, 130, 130, 1);
        c.hq = 4, c.hkv = 1;
        check_case(ctx, &c);
        c = basic(dts[i], 256, 70, 200, i ? CLKIT_CAUSAL_BOTTOM_RIGHT : 0);
        c.out = 'p';
        check_case(ctx, &c);
    }
    clkit_context_release(ctx);
}
END_TEST

/* Head dim 128 in 16 bits, whose backward on Hopper writes dS for dQ to read (the scratch
   held to CLKIT_ATTN_DS_MB): three batches with the cap at 1 MiB, which holds the tiles of 3,
   10 and 1 kv heads here (chunks that cross batches, a short last chunk, a chunk a head);
   grouped-query ratios 2, 1 and 4, both causal alignments, lengths no tile divides; then the
   same with the path off (cap 0). */
START_TEST(ds_chunks)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t lens[][3] = {{200, 300, CLKIT_CAUSAL_TOP_LEFT}, {130, 200, CLKIT_CAUSAL_NONE},
                                      {300, 200, CLKIT_CAUSAL_BOTTOM_RIGHT}};
    static const char *caps[] = {"1", "0"};
    int full = has_tensor_cores(ctx);
    for (size_t m = 0; m < (full ? 2 : 1); m++) {
        tu_setenv("CLKIT_ATTN_DS_MB", caps[m]);
        for (size_t i = 0; i < (full ? 3 : 1); i++) {
            acase c = basic(i % 2 ? CLKIT_BF16 : CLKIT_F16, 128, lens[i][0], lens[i][1], (int)lens[i][2]);
            c.b = 3, c.hq = 4, c.hkv = i == 0 ? 2 : i == 1 ? 4 : 1;
            check_case(ctx, &c);
        }
    }
    tu_unsetenv("CLKIT_ATTN_DS_MB");
    clkit_context_release(ctx);
}
END_TEST

/* The lines of the kernel builds logged through CLKIT_BUILD_LOG at path, NUL-terminated. */
static char *build_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no build log at %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* Whether a logged build of `file` has every option in opts. */
static int built_with(const char *lines, const char *file, const char *const *opts)
{
    for (const char *l = lines; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        size_t len = strcspn(l, "\n"), fl = strlen(file);
        if (len <= fl || strncmp(l, file, fl) != 0 || l[fl] != '\t') continue;
        int all = 1;
        for (const char *const *o = opts; *o && all; o++) {
            const char *hit = strstr(l, *o);
            all = hit && hit < l + len;
        }
        if (all) return 1;
    }
    return 0;
}

/* AMD's MFMA kernels (cl/amd/attention_matrix.cl), run by PoCL with CLKIT_AMD_EMULATE=gfx942:
   forward and backward on every dtype, head dims 32, 64 and 128 (f32 at 128: the forward only,
   as the backward's tiles exceed 64 KiB of local memory) and the f16 forward at 256, lengths
   off the 32-row slices and
   the blocks, Lq != Lk with causal, grouped queries, padded and strided views; the build log
   shows that the matrix-core kernels served (a fallback to the portable ones would pass the
   numbers). A device that is no CPU has no emulation: the test says so and checks nothing. */
START_TEST(amd_matrix_cores)
{
    char log[] = "/tmp/clkit-attn-amd-XXXXXX";
    int fd = mkstemp(log);
    ck_assert(fd >= 0);
    close(fd);
    /* Unoptimised PoCL builds take seconds where the emulated instructions' barriers made
       optimised ones take a minute; the answers are the same (and PoCL leaks: util.h). */
    int own_flags = getenv("POCL_EXTRA_BUILD_FLAGS") == NULL;
    if (own_flags) tu_setenv("POCL_EXTRA_BUILD_FLAGS", "-cl-opt-disable");
    tu_setenv("CLKIT_AMD_EMULATE", "gfx942");
    tu_setenv("CLKIT_BUILD_LOG", log);
    clkit_context *ctx = tu_ctx();
    struct clkit_device_props p;
    TU_CHECK(clkit_device_props(ctx, &p));
    if (!p.is_cpu) {
        fprintf(stderr, "test_attention: %s is no CPU device, where CLKIT_AMD_EMULATE applies: "
                "amd_matrix_cores skipped\n", p.name);
    } else {
        ck_assert_msg(tu_fast_path(ctx, "attention", CLKIT_FAST_PATH_AMD_MFMA), "no MFMA path on gfx942");
        static const clkit_dtype dts[] = {CLKIT_F16, CLKIT_BF16, CLKIT_F32};
        static const int64_t dims[] = {32, 64, 128}, lens[][2] = {{70, 70}, {33, 100}, {100, 33}};
        for (size_t i = 0; i < 3; i++)
            for (size_t d = 0; d < 3; d++) {
                size_t l = (i + d) % 3;
                acase c = basic(dts[i], dims[d], lens[l][0], lens[l][1], (int)((i + d) % 2));
                c.hq = 4, c.hkv = d == 1 ? 1 : 2;
                c.in = d == 2 ? 's' : l == 1 ? 'p' : 'c';
                tu_leaks_off();
                check_case(ctx, &c);
                tu_leaks_on();
            }
        acase wide = basic(CLKIT_F16, 256, 40, 40, 1);
        tu_leaks_off();
        check_case(ctx, &wide);
        tu_leaks_on();
        ck_assert_msg(tu_fast_path(ctx, "attention", CLKIT_FAST_PATH_AMD_MFMA),
                      "the MFMA path was turned off (build or known-answer failure)");
        const char *lines = build_lines(log);
        static const char *const fwd[] = {"-D ATTN_FWD", "-D MATRIX_MFMA32", "-D AMD_EMULATE", NULL};
        static const char *const bwd[] = {"-D ATTN_BWD", "-D MATRIX_MFMA32", "-D AMD_EMULATE", NULL};
        ck_assert_msg(built_with(lines, "amd/attention_matrix.cl", fwd), "no MFMA forward was built");
        ck_assert_msg(built_with(lines, "amd/attention_matrix.cl", bwd), "no MFMA backward was built");
    }
    clkit_context_release(ctx);
    tu_unsetenv("CLKIT_BUILD_LOG");
    tu_unsetenv("CLKIT_AMD_EMULATE");
    if (own_flags) tu_unsetenv("POCL_EXTRA_BUILD_FLAGS");
    remove(log);
}
END_TEST

/* (B, L, H, D)-ordered, padded and offset views; a strided head dimension; in any mix. */
START_TEST(layouts)
{
    clkit_context *ctx = tu_ctx();
    static const char mixes[][2] = {{'p', 'p'}, {'s', 'c'}, {'c', 's'}, {'p', 's'}};
    for (size_t i = 0; i < 4; i++) {
        acase c = basic(i == 3 ? CLKIT_BF16 : CLKIT_F32, i == 3 ? 64 : 32, 45, 38, (int)(i % 2));
        c.b = 2, c.hq = 4, c.hkv = 2;
        c.in = mixes[i][0], c.out = mixes[i][1];
        check_case(ctx, &c);
    }
    clkit_context_release(ctx);
}
END_TEST

/* Bottom-right causal: the last query sees every key. With Lq > Lk the first Lq - Lk queries
   see none (o = 0, lse = -inf, zero gradients); Lq = Lk is top-left's mask. */
START_TEST(bottom_right)
{
    clkit_context *ctx = tu_ctx();
    static const int64_t pairs[][2] = {{17, 129}, {129, 17}, {64, 64}, {1, 70}, {70, 1}, {33, 200}};
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        acase c = basic(i % 2 ? CLKIT_F32 : CLKIT_F16, i % 3 ? 32 : 64, pairs[i][0], pairs[i][1],
                        CLKIT_CAUSAL_BOTTOM_RIGHT);
        c.hq = 4, c.hkv = 2;
        check_case(ctx, &c);
    }
    clkit_context_release(ctx);
}
END_TEST

/* Scores that climb along the keys (ramp_scores): the forward's running max moves by tens of
   units a block near the end and by less than one near the start, in every 16-bit dtype at
   the head dims of the tensor-core forwards, causal and not; o and lse. (The gradients of
   such peaked rows carry K's large values through dS rounded to bf16: on an H200 they stray
   up to 1.3 % of their largest, past this suite's rounding model, with or without the
   forward's slack.) */
START_TEST(climbing_scores)
{
    clkit_context *ctx = tu_ctx();
    static const clkit_dtype dts[] = {CLKIT_F16, CLKIT_BF16};
    static const int64_t dims[] = {64, 128};
    for (size_t i = 0; i < 2; i++)
        for (size_t d = 0; d < 2; d++)
            for (int causal = 0; causal < 2; causal++) {
                acase c = basic(dts[i], dims[d], causal ? 700 : 130, 700, causal);
                c.ramp = 120, c.no_backward = 1;
                check_case(ctx, &c);
            }
    clkit_context_release(ctx);
}
END_TEST

/* Decoding (few queries, many keys: the keys split over work-groups, their partial softmaxes
   merged): one to 16 queries, grouped-query ratios 1, 4 and 8, every mask, views that are
   contiguous (aligned 16-byte loads; the tensor-core kernel's, on NVIDIA, where 16-bit: two
   blocks of 16 rows, head dims 64 to 256, key counts no block divides), padded (unaligned)
   and strided, and one query against 100 000 keys. */
START_TEST(decoding)
{
    clkit_context *ctx = tu_ctx();
    static const struct {
        clkit_dtype dt;
        int64_t b, hq, hkv, lq, lk, d;
        int causal;
        char in;
    } cases[] = {
        {CLKIT_F16, 2, 8, 2, 1, 300, 64, 0, 'c'},       {CLKIT_F32, 1, 4, 4, 3, 1000, 32, 2, 'c'},
        {CLKIT_BF16, 1, 8, 1, 2, 777, 128, 2, 'p'},     {CLKIT_F32, 1, 4, 1, 16, 513, 16, 1, 's'},
        {CLKIT_F16, 1, 2, 1, 5, 4099, 256, 2, 'c'},      {CLKIT_F32, 2, 2, 2, 1, 2048, 64, 0, 's'},
        {CLKIT_F16, 1, 8, 2, 1, 100000, 64, 2, 'c'},    {CLKIT_F16, 1, 16, 2, 4, 1500, 128, 2, 'p'},
        {CLKIT_BF16, 2, 4, 1, 1, 3000, 128, 0, 'c'},    {CLKIT_F32, 1, 2, 1, 2, 700, 256, 1, 'h'},
        {CLKIT_F16, 1, 16, 2, 4, 1500, 128, 2, 'c'},    {CLKIT_BF16, 1, 4, 1, 3, 1111, 256, 1, 'c'},
        {CLKIT_BF16, 2, 4, 4, 1, 999, 64, 2, 'c'},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        acase c = basic(cases[i].dt, cases[i].d, cases[i].lq, cases[i].lk, cases[i].causal);
        c.b = cases[i].b, c.hq = cases[i].hq, c.hkv = cases[i].hkv, c.in = cases[i].in;
        c.no_lse = i == 1;
        c.twice = 1;
        check_case(ctx, &c);
    }
    clkit_context_release(ctx);
}
END_TEST

/* An explicit scale, no lse, and NULL options (the defaults). */
START_TEST(options)
{
    clkit_context *ctx = tu_ctx();
    acase c = basic(CLKIT_F32, 32, 50, 70, 1);
    c.scale = 0.3f;
    check_case(ctx, &c);
    c = basic(CLKIT_F32, 32, 70, 50, 0);
    c.scale = 1.7f;
    check_case(ctx, &c);
    c.no_lse = 1;
    check_case(ctx, &c);
    /* NULL options: the defaults, not causal, scale 1/sqrt(D). */
    c = basic(CLKIT_F32, 32, 20, 30, 0);
    host_data h = make_inputs(&c);
    int64_t qs[4] = {1, 2, 20, 32}, ks[4] = {1, 1, 30, 32};
    dev q = make_dev(ctx, CLKIT_F32, 4, qs, 'c', h.q), k = make_dev(ctx, CLKIT_F32, 4, ks, 'c', h.k);
    dev v = make_dev(ctx, CLKIT_F32, 4, ks, 'c', h.v), o = make_dev(ctx, CLKIT_F32, 4, qs, 'c', NULL);
    double got[1280], want[1280];
    TU_CHECK(clkit_attention_forward(ctx, &q.t, &k.t, &v.t, NULL, &o.t, NULL));
    read_view(ctx, &o, got, "NULL options");
    ref_attention_dims a = dims_of(&c);
    ref_attention_forward(&a, h.q, h.k, h.v, want, NULL);
    expect_close(got, want, 1280, CLKIT_F32, 0, NULL, 0, "o", "NULL options");
    drop(&q), drop(&k), drop(&v), drop(&o);
    free_inputs(&h);
    clkit_context_release(ctx);
}
END_TEST

/* The tuned-config key of an f32 attention pass: layout "fwd" or "bwd", ".causal" when
   masked; shape Lq, Lk, D, B x Hq (host/ops/attention.c). */
static clkit_tune_key f32_key(const char *pass, int causal, int64_t lq, int64_t lk, int64_t d,
                              int64_t bh)
{
    clkit_tune_key key;
    memset(&key, 0, sizeof key);
    snprintf(key.op, sizeof key.op, "attention");
    snprintf(key.dtype, sizeof key.dtype, "f32");
    snprintf(key.layout, sizeof key.layout, "%s%s", pass, causal ? ".causal" : "");
    key.shape[0] = lq, key.shape[1] = lk, key.shape[2] = d, key.shape[3] = bh;
    key.nshape = 4;
    return key;
}

/* Stores cfg as the tuned entry of every attention layout for f32 at head dim 32. */
static void store_tiles(clkit_context *ctx, const char *cfg)
{
    clkit_config c;
    ck_assert_int_eq(clkit_config_parse(cfg, &c), 0);
    for (int i = 0; i < 4; i++) {
        clkit_tune_key key = f32_key(i < 2 ? "fwd" : "bwd", i % 2, 64, 64, 32, 4);
        ck_assert_int_eq(clkit_cache_store(ctx, &key, &c, 1.0), CLKIT_OK);
    }
}

/* Tiles read from the tuned-config cache: runs of 1 and 2 elements (scalar local reads), two
   runs of 4 columns per work-item, and an entry that is not legal, which gives way to the
   heuristic. The inputs' strided head dimension keeps them off the tensor cores. (Rows use the same index function as columns; a micro-tile of 8 rows builds too
   slowly on PoCL for this suite.) */
START_TEST(cached_tiles)
{
    char dir[] = "/tmp/clkit-attention-XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    tu_setenv("CLKIT_CACHE_DIR", dir);
    clkit_context *ctx = tu_ctx();
    static const char *configs[] = {
        "BLOCK_M=16,BLOCK_N=8,THREAD_M=1,THREAD_N=2,SLICE_D=8,SLICE_N=2",
        "BLOCK_M=8,BLOCK_N=32,THREAD_M=1,THREAD_N=8,SLICE_D=8,SLICE_N=4",
        "BLOCK_M=3,BLOCK_N=8,THREAD_M=1,THREAD_N=2,SLICE_D=8,SLICE_N=2",
    };
    for (size_t i = 0; i < 3; i++) {
        store_tiles(ctx, configs[i]);
        acase c = basic(CLKIT_F32, 32, 69, 45, 1);
        c.hq = 4, c.hkv = 2, c.in = 's';
        check_case(ctx, &c);
        c = basic(CLKIT_F32, 32, 45, 69, 0);
        c.in = 's';
        check_case(ctx, &c);
    }
    clkit_context_release(ctx);
}
END_TEST

/* Whether the cache holds an exact f32 entry for the pass (fwd/bwd, causal) of case c. */
static int tuned_entry(clkit_context *ctx, const acase *c, const char *pass)
{
    clkit_tune_key key = f32_key(pass, c->causal, c->lq, c->lk, c->d, c->b * c->hq);
    clkit_config cfg;
    return clkit_cache_lookup(ctx, &key, &cfg) == CLKIT_LOOKUP_EXACT;
}

/* The tuner: each pass stores its winner under its own key and the calls that follow (which
   take it) agree with the reference; CLKIT_AUTOTUNE=1 tunes both passes of a new shape on
   first use; bad input gets the call's own status and stores nothing. Strided head dimensions
   keep every case on the portable kernels, the only ones with tiles to tune. */
START_TEST(tuner)
{
    char dir[] = "/tmp/clkit-attention-tune-XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    tu_setenv("CLKIT_CACHE_DIR", dir);
    clkit_context *ctx = tu_ctx();
    acase c = basic(CLKIT_F32, 32, 69, 45, 1);
    c.in = 's';
    host_data h = make_inputs(&c);
    int64_t qs[4] = {c.b, c.hq, c.lq, c.d}, ks[4] = {c.b, c.hkv, c.lk, c.d};
    dev q = make_dev(ctx, c.dt, 4, qs, 's', h.q), k = make_dev(ctx, c.dt, 4, ks, 's', h.k);
    dev v = make_dev(ctx, c.dt, 4, ks, 's', h.v), o = make_dev(ctx, c.dt, 4, qs, 'c', NULL);
    dev lse = make_dev(ctx, CLKIT_F32, 3, qs, 'c', NULL), dout = make_dev(ctx, c.dt, 4, qs, 's', h.dout);
    dev dq = make_dev(ctx, c.dt, 4, qs, 'c', NULL), dk = make_dev(ctx, c.dt, 4, ks, 'c', NULL);
    dev dv = make_dev(ctx, c.dt, 4, ks, 'c', NULL);
    clkit_attention_options opt = {c.causal, c.scale};
    clkit_tune_options topt = {0};
    TU_CHECK(clkit_tune_attention_forward(ctx, &q.t, &k.t, &v.t, &opt, &o.t, &lse.t, &topt));
    ck_assert(tuned_entry(ctx, &c, "fwd") && !tuned_entry(ctx, &c, "bwd"));
    TU_CHECK(clkit_tune_attention_backward(ctx, &q.t, &k.t, &v.t, &o.t, &dout.t, &lse.t, &opt,
                                           &dq.t, &dk.t, &dv.t, &topt));
    ck_assert(tuned_entry(ctx, &c, "bwd"));
    check_case(ctx, &c);

    clkit_attention_options plain = {0, 0};
    lse.t.shape[2] = 68;
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_tune_attention_forward(ctx, &q.t, &k.t, &v.t, &plain, &o.t,
                                                            &lse.t, &topt));
    TU_EXPECT(CLKIT_ERR_SHAPE, clkit_tune_attention_backward(ctx, &q.t, &k.t, &v.t, &o.t, &dout.t,
                                                             &lse.t, &plain, &dq.t, &dk.t, &dv.t,
                                                             &topt));
    acase shifted = c;
    shifted.causal = 0;
    ck_assert(!tuned_entry(ctx, &shifted, "fwd") && !tuned_entry(ctx, &shifted, "bwd"));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_tune_attention_forward(NULL, &q.t, &k.t, &v.t, &opt,
                                                                    &o.t, NULL, &topt));

    tu_setenv("CLKIT_AUTOTUNE", "1");
    acase fresh = basic(CLKIT_F32, 32, 40, 40, 0);
    fresh.in = 's';
    check_case(ctx, &fresh);
    tu_unsetenv("CLKIT_AUTOTUNE");
    ck_assert(tuned_entry(ctx, &fresh, "fwd") && tuned_entry(ctx, &fresh, "bwd"));

    drop(&q), drop(&k), drop(&v), drop(&o), drop(&lse), drop(&dout), drop(&dq), drop(&dk), drop(&dv);
    free_inputs(&h);
    clkit_context_release(ctx);
}
END_TEST

/* No queries or batch: nothing to do. No keys: o = 0, lse = -inf and dq = 0; no queries in
   the backward, or no query heads for the kv heads: dk = dv = 0 (the fuzzer found Hq = 0
   dividing by a group of 0, writing garbage there and past dk and dv). */
START_TEST(empty)
{
    clkit_context *ctx = tu_ctx();
    acase c = basic(CLKIT_F32, 32, 0, 5, 1);
    check_case(ctx, &c);
    c = basic(CLKIT_F32, 32, 5, 5, 0);
    c.b = 0;
    check_case(ctx, &c);
    c = basic(CLKIT_F32, 32, 5, 0, 0);
    check_case(ctx, &c);
    c.causal = 1;
    check_case(ctx, &c);
    c = basic(CLKIT_F32, 32, 5, 6, 1);
    c.b = 2, c.hq = 0, c.hkv = 3, c.in = 'p', c.out = 'p';
    check_case(ctx, &c);
    clkit_context_release(ctx);
}
END_TEST

/* The reference gradient against central differences of sum(o * dout), in double. */
START_TEST(finite_differences)
{
    for (int causal = 0; causal < 2; causal++) {
        ref_attention_dims a = {1, 2, 1, 3, 4, 3, causal, 0.7};
        double q[18], k[12], v[12], dout[18], o[18], dq[18], dk[12], dv[12];
        tu_fill_random(q, 18, CLKIT_F32, -1, 1, 1);
        tu_fill_random(k, 12, CLKIT_F32, -1, 1, 2);
        tu_fill_random(v, 12, CLKIT_F32, -1, 1, 3);
        tu_fill_random(dout, 18, CLKIT_F32, -1, 1, 4);
        ref_attention_forward(&a, q, k, v, o, NULL);
        ref_attention_backward(&a, q, k, v, o, dout, dq, dk, dv);
        double *inputs[3] = {q, k, v}, *grads[3] = {dq, dk, dv};
        int sizes[3] = {18, 12, 12};
        for (int t = 0; t < 3; t++)
            for (int i = 0; i < sizes[t]; i++) {
                double keep = inputs[t][i], h = 1e-5, loss[2];
                for (int side = 0; side < 2; side++) {
                    inputs[t][i] = keep + (side ? -h : h);
                    ref_attention_forward(&a, q, k, v, o, NULL);
                    loss[side] = 0;
                    for (int j = 0; j < 18; j++) loss[side] += o[j] * dout[j];
                }
                inputs[t][i] = keep;
                double fd = (loss[0] - loss[1]) / (2 * h);
                ck_assert_msg(fabs(fd - grads[t][i]) <= 1e-8 + 1e-6 * fabs(fd),
                              "causal %d: gradient %d[%d] is %.12g, finite differences %.12g",
                              causal, t, i, grads[t][i], fd);
            }
    }
}
END_TEST

/* ---- bad input ---- */

typedef struct bad {
    clkit_tensor q, k, v, o, lse, dout, dq, dk, dv;
    cl_mem side; /* a second buffer for the outputs that are not the guard's */
} bad;

/* A valid forward over the guard's buffers: q, k, v, dout (1, 1, 4, 16) all over `in` (inputs
   may share memory), o and dq over `out`; lse, dk and dv over a side buffer. (The backward
   takes o over `in`: o is its input.) */
static bad valid_problem(tu_guard *g)
{
    bad b;
    int64_t s4[4] = {1, 1, 4, 16}, s3[3] = {1, 1, 4};
    b.side = tu_buffer(g->ctx, CLKIT_F32, 256, NULL);
    b.q = b.k = b.v = b.dout = clkit_tensor_contiguous(g->in, CLKIT_F32, 4, s4);
    b.o = b.dq = clkit_tensor_contiguous(g->out, CLKIT_F32, 4, s4);
    b.lse = clkit_tensor_contiguous(b.side, CLKIT_F32, 3, s3);
    b.dk = b.dv = clkit_tensor_contiguous(b.side, CLKIT_F32, 4, s4);
    b.dk.offset = 64 * 4, b.dv.offset = 128 * 4;
    return b;
}

#define FWD(b, opt) clkit_attention_forward(ctx, &(b).q, &(b).k, &(b).v, (opt), &(b).o, &(b).lse)
#define BWD(b, opt)                                                                              \
    clkit_attention_backward(ctx, &(b).q, &(b).k, &(b).v, &(b).o, &(b).dout, &(b).lse, (opt),     \
                             &(b).dq, &(b).dk, &(b).dv)

START_TEST(bad_forward)
{
    tu_guard g = tu_guard_begin();
    clkit_context *ctx = g.ctx;
    bad ok = valid_problem(&g), b;
    clkit_attention_options opt = clkit_attention_defaults();
    ck_assert_int_eq(clkit_attention_forward(NULL, &ok.q, &ok.k, &ok.v, NULL, &ok.o, NULL),
                     CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_attention_forward(ctx, NULL, &ok.k, &ok.v, NULL, &ok.o, NULL));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_attention_forward(ctx, &ok.q, &ok.k, &ok.v, NULL, NULL, NULL));
    b = ok, b.v.buffer = NULL;
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, FWD(b, NULL));
    b = ok, b.q.ndim = 3;
    TU_EXPECT(CLKIT_ERR_NDIM, FWD(b, NULL));
    b = ok, b.lse.ndim = 4;
    TU_EXPECT(CLKIT_ERR_NDIM, FWD(b, NULL));
    b = ok, b.k.shape[2] = 2, b.k.shape[3] = 32, b.v = b.k; /* D 32 against q's 16 */
    TU_EXPECT(CLKIT_ERR_SHAPE, FWD(b, NULL));
    int64_t b2[4] = {2, 1, 2, 16}, h3[4] = {1, 3, 1, 16}, h2[4] = {1, 2, 2, 16}, l3[3] = {1, 3, 1};
    b = ok, b.k = b.v = clkit_tensor_contiguous(g.in, CLKIT_F32, 4, b2); /* B 2 against 1 */
    TU_EXPECT(CLKIT_ERR_SHAPE, FWD(b, NULL));
    b = ok, b.v.shape[2] = 3;                               /* v unlike k */
    TU_EXPECT(CLKIT_ERR_SHAPE, FWD(b, NULL));
    b = ok, b.o.shape[2] = 3;
    TU_EXPECT(CLKIT_ERR_SHAPE, FWD(b, NULL));
    b = ok, b.lse.shape[2] = 5;
    TU_EXPECT(CLKIT_ERR_SHAPE, FWD(b, NULL));
    b = ok, b.q = clkit_tensor_contiguous(g.in, CLKIT_F32, 4, h3);  /* 3 query heads, 2 kv heads */
    b.o = clkit_tensor_contiguous(g.out, CLKIT_F32, 4, h3);
    b.lse = clkit_tensor_contiguous(ok.side, CLKIT_F32, 3, l3);
    b.k = b.v = clkit_tensor_contiguous(g.in, CLKIT_F32, 4, h2);
    TU_EXPECT(CLKIT_ERR_SHAPE, FWD(b, NULL));
    int64_t s24[4] = {1, 1, 2, 24};
    b = ok, b.q = b.k = b.v = clkit_tensor_contiguous(g.in, CLKIT_F32, 4, s24);
    b.o = clkit_tensor_contiguous(g.out, CLKIT_F32, 4, s24), b.lse.shape[2] = 2;
    TU_EXPECT(CLKIT_ERR_UNSUPPORTED, FWD(b, NULL));
    b = ok, b.k.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, FWD(b, NULL));
    b = ok, b.o.dtype = CLKIT_BF16;
    TU_EXPECT(CLKIT_ERR_DTYPE, FWD(b, NULL));
    b = ok, b.lse.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, FWD(b, NULL));
    b = ok, b.q.dtype = b.k.dtype = b.v.dtype = b.o.dtype = CLKIT_I32;
    TU_EXPECT(CLKIT_ERR_DTYPE, FWD(b, NULL));
    opt.scale = -1;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, FWD(ok, &opt));
    opt.scale = NAN;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, FWD(ok, &opt));
    opt.scale = INFINITY;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, FWD(ok, &opt));
    opt = clkit_attention_defaults(), opt.causal = 3;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, FWD(ok, &opt));
    opt.causal = -1;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, FWD(ok, &opt));
    b = ok, b.o.buffer = g.in;                              /* o over q */
    TU_EXPECT(CLKIT_ERR_OVERLAP, FWD(b, NULL));
    b = ok, b.lse.buffer = g.out;                           /* lse over o */
    TU_EXPECT(CLKIT_ERR_OVERLAP, FWD(b, NULL));
    b = ok, b.o.strides[2] = 0;
    TU_EXPECT(CLKIT_ERR_STRIDE, FWD(b, NULL));
    b = ok, b.o.offset = 8 * 4;
    TU_EXPECT(CLKIT_ERR_OUT_OF_BOUNDS, FWD(b, NULL));
    b = ok, b.q.strides[0] = INT64_MAX / 2, b.q.shape[0] = 4;
    TU_EXPECT(CLKIT_ERR_OVERFLOW, FWD(b, NULL));
    clReleaseMemObject(ok.side);
    tu_guard_end(&g);
}
END_TEST

START_TEST(bad_backward)
{
    tu_guard g = tu_guard_begin();
    clkit_context *ctx = g.ctx;
    bad ok = valid_problem(&g), b;
    ok.o = ok.q; /* an input: it may share memory with the other inputs */
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_attention_backward(ctx, &ok.q, &ok.k, &ok.v, &ok.o,
                                                                &ok.dout, NULL, NULL, &ok.dq,
                                                                &ok.dk, &ok.dv));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_attention_backward(ctx, &ok.q, &ok.k, &ok.v, &ok.o,
                                                                NULL, &ok.lse, NULL, &ok.dq,
                                                                &ok.dk, &ok.dv));
    b = ok, b.dout.shape[2] = 3;
    TU_EXPECT(CLKIT_ERR_SHAPE, BWD(b, NULL));
    b = ok, b.dk.shape[2] = 3;
    TU_EXPECT(CLKIT_ERR_SHAPE, BWD(b, NULL));
    b = ok, b.dq.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, BWD(b, NULL));
    b = ok, b.dout.dtype = CLKIT_BF16;
    TU_EXPECT(CLKIT_ERR_DTYPE, BWD(b, NULL));
    b = ok, b.dq.buffer = g.in;                             /* dq over q */
    TU_EXPECT(CLKIT_ERR_OVERLAP, BWD(b, NULL));
    b = ok, b.dk.offset = b.dv.offset;                      /* dk over dv */
    TU_EXPECT(CLKIT_ERR_OVERLAP, BWD(b, NULL));
    b = ok, b.dv.offset = 0;                                /* dv over lse */
    TU_EXPECT(CLKIT_ERR_OVERLAP, BWD(b, NULL));
    b = ok, b.lse.dtype = CLKIT_F16;
    TU_EXPECT(CLKIT_ERR_DTYPE, BWD(b, NULL));
    clkit_attention_options opt = {1, -0.5f};
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, BWD(ok, &opt));
    clReleaseMemObject(ok.side);
    tu_guard_end(&g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("attention");
    TCase *tc = tu_tcase("attention");
    tcase_add_test(tc, each_head_dim);
    tcase_add_test(tc, lengths);
    tcase_add_test(tc, grouped_query);
    tcase_add_test(tc, dtypes);
    tcase_add_test(tc, tensor_core_shapes);
    tcase_add_test(tc, wide_heads);
    tcase_add_test(tc, ds_chunks);
    tcase_add_test(tc, layouts);
    tcase_add_test(tc, options);
    tcase_add_test(tc, bottom_right);
    tcase_add_test(tc, climbing_scores);
    tcase_add_test(tc, decoding);
    tcase_add_test(tc, cached_tiles);
    tcase_add_test(tc, tuner);
    tcase_add_test(tc, empty);
    tcase_add_test(tc, finite_differences);
    tcase_add_test(tc, bad_forward);
    tcase_add_test(tc, bad_backward);
    tcase_add_test(tc, amd_matrix_cores);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

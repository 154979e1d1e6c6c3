/* clkit_cross_entropy and clkit_linear_cross_entropy, see cl/cross_entropy.cl.

   Both begin alike: ce_targets checks the targets on the device and counts the tokens that are
   not ignored, and the host waits for its answer, because no kernel may index logits with a
   target outside [0, V) and the mean divides by that count. Per-token losses go straight
   into loss for reduction none, else into scratch that ce_reduce sums in a fixed order.

   The linear op walks the vocabulary in chunks whose f32 logits come from clkit_matmul (so the
   tuned GEMMs serve it): a forward sweep folds each chunk into per-row running statistics,
   and a backward sweep, in reverse so that the last chunk's logits still in scratch are
   reused, recomputes each chunk, turns it into dloss/dz and feeds the weight and input GEMMs.
   Extra memory is O(T * chunk + T), plus an f32 (T, D) accumulator when dx is 16-bit.

   Fused (16-bit operands on NVIDIA's tensor cores) the chunk GEMMs end in matmul_mma's CE
   epilogues through clkit_matmul_epilogue_run: the forward keeps per-row, per-tile states
   (O(T * V / BLOCK_N)) that lce_merge folds, the backward writes dloss/dz straight from the
   accumulators; no f32 logits exist. The forward runs the first chunk (always full width)
   last and keeps its logits in the storage dtype, in the gradient scratch the backward needs
   anyway, so the backward starts with lce_zgrad on them instead of a GEMM. Operands the
   tensor cores refuse, or a program that does not build, send the call down the unfused
   route.

   Fused, a call that asks for gradients walks the tokens instead when a chunk of a thousand
   or more rows fits the budget with the f32 dweight accumulator (V x D x 4 bytes): each token
   chunk's GEMM keeps its logits in the storage dtype (the loss still from the f32
   accumulators), lce_zgrad turns them into dloss/dz in place, and the dx rows and the
   dweight accumulator take it from there. Three GEMMs of 2 T D V instead of four.

   On every route dloss/dz is that of the summed loss, and the mean's 1 / count (grad_scale)
   is applied in f32, as the alpha of the dx and dweight GEMMs and by lce_dbias: stored
   scaled, 16-bit gradients sank below f16's normal range as T grew.

   No tokens (T = 0) is a valid call that enqueues no row kernel: the losses reduce to 0 and
   dweight and dbias, sums over no tokens, are zeros. */
#include "../internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of chunk scratch, at most: small beside the extra memory of torch's linear +
   cross-entropy on the shapes of TARGETS.md, at a modest cost in time against a budget four
   times larger (measurements: docs/linear-cross-entropy.md#measurements-behind-the-code). */
#define LCE_BUDGET (64ull << 20)
#define LCE_COLS 128              /* default chunk widths are multiples of this */
#define FUSED_COLS 256            /* fused chunks: a multiple of every fused tile's BLOCK_N */
/* Fused, the chunk scratch (with the f32 dx or dweight sums and the per-tile states) may take
   half a byte a logit, T x V / 2, within [LCE_FUSED_MIN, LCE_FUSED_MAX]. An unfused call holds
   about ten bytes a logit (torch's f16 logits, their f32 copy and the f32 gradient), so this
   stays near 5 % of it. Wider chunks feed the GEMMs longer: vocabulary and token chunks alike
   ran faster the more scratch they were given (measurements:
   docs/linear-cross-entropy.md#measurements-behind-the-code). */
#define LCE_FUSED_MIN (224ull << 20)
#define LCE_FUSED_MAX (1ull << 30) /* a bound for huge calls, whose chunks are long GEMMs anyway */
#define DB_COLS 32                /* lce_dbias's work-group, as in the kernel */
#define DB_ROWS 8

clkit_cross_entropy_options clkit_cross_entropy_defaults(void)
{
    clkit_cross_entropy_options o = {.ignore_index = -100, .reduction = CLKIT_REDUCTION_MEAN};
    return o;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

static unsigned pow2_floor(size_t x)
{
    unsigned p = 1;
    while ((size_t)p * 2 <= x) p *= 2;
    return p;
}

static int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

static int64_t mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }

/* A counted device scratch buffer. */
typedef struct scratch {
    cl_mem buf;
    size_t bytes;
} scratch;

static clkit_status scratch_get(clkit_context *ctx, size_t bytes, scratch *s)
{
    s->bytes = bytes;
    return clkit_scratch_alloc(ctx, bytes, &s->buf);
}

static void scratch_put(clkit_context *ctx, scratch *s)
{
    clkit_scratch_release(ctx, s->buf, s->bytes);
    s->buf = NULL;
}

/* ---- validation shared by both ops ---- */

static clkit_status check_options(clkit_context *ctx, const clkit_cross_entropy_options *o)
{
    if (!(o->label_smoothing >= 0.0f && o->label_smoothing <= 1.0f))
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "label_smoothing = %g is outside [0, 1]",
                          (double)o->label_smoothing);
    if (!(o->softcap >= 0.0f) || isinf(o->softcap))
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "softcap = %g must be finite and >= 0",
                          (double)o->softcap);
    if (!(o->z_loss_scale >= 0.0f) || isinf(o->z_loss_scale))
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE,
                          "z_loss_scale = %g must be finite and >= 0", (double)o->z_loss_scale);
    if ((unsigned)o->reduction > CLKIT_REDUCTION_NONE)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "reduction %d is not mean, sum or none",
                          (int)o->reduction);
    return CLKIT_OK;
}

/* T may be 0 (min 0): no tokens is an empty batch. V and D may not: a row of no logits has
   no softmax. */
static clkit_status check_dims(clkit_context *ctx, const char *what, int64_t n, int64_t min)
{
    if (n < min) return clkit_fail(ctx, CLKIT_ERR_SHAPE, "%s is %lld; it must be at least %lld",
                                   what, (long long)n, (long long)min);
    if (n > INT32_MAX)
        return clkit_fail(ctx, CLKIT_ERR_OVERFLOW, "%s = %lld must be below 2^31", what,
                          (long long)n);
    return CLKIT_OK;
}

/* targets (t) i32 or i64; loss and z_loss f32, (1) for mean and sum, (t) for none. */
static clkit_status check_loss_args(clkit_context *ctx, const clkit_tensor *targets, int64_t t,
                                    const clkit_cross_entropy_options *o,
                                    const clkit_tensor *loss)
{
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, targets, "targets", 1, 1,
                                CLKIT_DT(CLKIT_I32) | CLKIT_DT(CLKIT_I64))) ||
        (s = clkit_check_tensor(ctx, loss, "loss", 1, 1, CLKIT_DT(CLKIT_F32))))
        return s;
    if (targets->shape[0] != t)
        return clkit_fail(ctx, CLKIT_ERR_SHAPE, "targets has %lld tokens, the logits %lld rows",
                          (long long)targets->shape[0], (long long)t);
    int64_t want = o->reduction == CLKIT_REDUCTION_NONE ? t : 1;
    if (loss->shape[0] != want)
        return clkit_fail(ctx, CLKIT_ERR_SHAPE, "loss has %lld elements; this reduction gives %lld",
                          (long long)loss->shape[0], (long long)want);
    if ((s = clkit_check_output(ctx, loss, "loss"))) return s;
    if (!o->z_loss) return CLKIT_OK;
    if ((s = clkit_check_tensor(ctx, o->z_loss, "z_loss", 1, 1, CLKIT_DT(CLKIT_F32))) ||
        (s = clkit_check_same_shape(ctx, o->z_loss, "z_loss", loss, "loss")))
        return s;
    return clkit_check_output(ctx, o->z_loss, "z_loss");
}

/* Every output (index >= first_out; NULL entries skipped) overlaps no other tensor, except
   that output alias_out may be exactly input alias_in (-1: none). */
static clkit_status check_overlaps(clkit_context *ctx, int n, const clkit_tensor *const *ts,
                                   const char *const *names, int first_out, int alias_out,
                                   int alias_in)
{
    for (int o = first_out; o < n; o++)
        for (int i = 0; i < n && ts[o]; i++) {
            if (i == o || !ts[i]) continue;
            clkit_status s = clkit_check_disjoint(ctx, ts[o], names[o], ts[i], names[i],
                                                  o == alias_out && i == alias_in);
            if (s) return s;
        }
    return CLKIT_OK;
}

/* ---- targets and per-token losses ---- */

/* What both ops share once validated: the checked targets and where losses go. */
typedef struct ce_common {
    clkit_cross_entropy_options o;
    int64_t t, v, count; /* count: tokens not ignored */
    scratch tgt;         /* dense i32 targets, -1 where ignored */
    scratch tok, ztok;   /* per-token losses and z-losses for mean and sum */
    cl_mem loss, zloss;  /* where the row kernels write them; zloss NULL: not wanted */
    cl_long l_off, l_stride, z_off, z_stride;
    float grad_scale; /* 1 / count for the mean (0 when no token counts), else 1 */
} ce_common;

static void set_grad_scale(ce_common *c)
{
    bool mean = c->o.reduction == CLKIT_REDUCTION_MEAN;
    c->grad_scale = mean ? (c->count ? 1.0f / (float)c->count : 0.0f) : 1.0f;
}

static void release_common(clkit_context *ctx, ce_common *c)
{
    scratch_put(ctx, &c->tgt);
    scratch_put(ctx, &c->tok);
    scratch_put(ctx, &c->ztok);
}

/* A kernel of cross_entropy.cl whose work-group (a power of two, the WG its source is built
   for) starts at wg and shrinks to fit the built kernel's limit. */
typedef struct wg_problem {
    const char *name;
    char options[96]; /* beside -D WG */
    size_t wg;
} wg_problem;

static clkit_status plan_wg(clkit_context *ctx, void *arg, size_t wg_limit, clkit_plan *plan)
{
    (void)ctx;
    wg_problem *p = arg;
    if (wg_limit && p->wg > wg_limit) p->wg = pow2_floor(wg_limit);
    plan->file = "cross_entropy.cl";
    snprintf(plan->name, sizeof plan->name, "%s", p->name);
    snprintf(plan->options, sizeof plan->options, "%s -D WG=%zu", p->options, p->wg);
    plan->family = CLKIT_FAMILY_CROSS_ENTROPY;
    plan->dims = 1;
    plan->local[0] = p->wg;
    return CLKIT_OK;
}

/* Builds kernel `name` at the largest work-group up to *wg that it runs; *wg becomes that. */
static clkit_status wg_kernel(clkit_context *ctx, const char *name, const char *options,
                              size_t *wg, cl_kernel *k)
{
    wg_problem p = {name, "", *wg};
    snprintf(p.options, sizeof p.options, "%s", options);
    clkit_plan plan;
    clkit_status s = clkit_plan_kernel(ctx, plan_wg, &p, &plan, k);
    *wg = p.wg;
    return s;
}

/* ce_targets and ce_reduce: one small program per target dtype and device. */
static clkit_status index_kernel(clkit_context *ctx, const char *name, bool i64, cl_kernel *k,
                                 size_t *wg)
{
    *wg = pow2_floor(clkit_stream_wg(&ctx->props, 0));
    return wg_kernel(ctx, name, i64 ? "-D TARGET_I64=1" : "-D TARGET_I64=0", wg, k);
}

static clkit_status bad_target(clkit_context *ctx, const ce_common *c, const cl_long *p)
{
    return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE,
                      "targets[%lld] = %lld is outside [0, %lld) and is not ignore_index (%lld)",
                      (long long)p[1], (long long)p[2], (long long)c->v,
                      (long long)c->o.ignore_index);
}

/* Runs ce_targets and waits for its per-group answers: the count and the first bad token. */
static clkit_status check_targets(clkit_context *ctx, const clkit_tensor *targets, ce_common *c)
{
    cl_kernel k;
    size_t wg;
    clkit_status s = index_kernel(ctx, "ce_targets", targets->dtype == CLKIT_I64, &k, &wg);
    if (s || (s = scratch_get(ctx, (size_t)c->t * sizeof(cl_int), &c->tgt))) return s;
    size_t groups = clkit_stream_groups(&ctx->props, (uint64_t)c->t, wg), global = groups * wg;
    scratch part;
    if ((s = scratch_get(ctx, groups * 3 * sizeof(cl_long), &part))) return s;
    cl_long *host = malloc(part.bytes);
    if (!host) s = clkit_fail(ctx, CLKIT_ERR_OUT_OF_MEMORY, "no host memory for %zu bytes", part.bytes);
    clkit_args a = clkit_args_of(k);
    clkit_arg_mem(&a, targets->buffer);
    clkit_arg_long(&a, (cl_long)(targets->offset / clkit_dtype_size(targets->dtype)));
    clkit_arg_long(&a, targets->strides[0]), clkit_arg_long(&a, c->t), clkit_arg_long(&a, c->v);
    clkit_arg_long(&a, c->o.ignore_index), clkit_arg_mem(&a, c->tgt.buf), clkit_arg_mem(&a, part.buf);
    if (!s) s = clkit_run(ctx, &a, 1, &global, &wg);
    if (!s) {
        cl_int err = clEnqueueReadBuffer(ctx->queue, part.buf, CL_TRUE, 0, part.bytes, host, 0,
                                         NULL, NULL);
        if (err != CL_SUCCESS) s = clkit_cl_fail(ctx, err, "clEnqueueReadBuffer (targets check)");
    }
    /* The first bad token overall is the least of the groups' first ones. */
    const cl_long *first_bad = NULL;
    for (size_t g = 0; !s && g < groups; g++) {
        const cl_long *p = host + 3 * g;
        c->count += p[0];
        if (p[1] >= 0 && (!first_bad || p[1] < first_bad[1])) first_bad = p;
    }
    if (!s && first_bad) s = bad_target(ctx, c, first_bad);
    free(host);
    scratch_put(ctx, &part);
    return s;
}

/* Validates targets and decides where per-token losses go. */
static clkit_status prepare_common(clkit_context *ctx, const clkit_tensor *targets,
                                   const clkit_tensor *loss, ce_common *c)
{
    clkit_status s = check_targets(ctx, targets, c);
    if (s) return s;
    set_grad_scale(c);
    const clkit_tensor *zl = c->o.z_loss;
    if (c->o.reduction == CLKIT_REDUCTION_NONE) {
        c->loss = loss->buffer;
        c->l_off = (cl_long)(loss->offset / sizeof(float));
        c->l_stride = loss->strides[0];
        if (zl) {
            c->zloss = zl->buffer;
            c->z_off = (cl_long)(zl->offset / sizeof(float));
            c->z_stride = zl->strides[0];
        }
        return CLKIT_OK;
    }
    size_t bytes = (size_t)c->t * sizeof(float);
    if ((s = scratch_get(ctx, bytes, &c->tok)) || (zl && (s = scratch_get(ctx, bytes, &c->ztok))))
        return s;
    c->loss = c->tok.buf;
    c->zloss = zl ? c->ztok.buf : NULL;
    c->l_stride = c->z_stride = 1;
    return CLKIT_OK;
}

/* Mean or sum of the per-token losses into loss (and z_loss); nothing for reduction none.
   With no tokens (c->t 0, no scratch) both are 0, the mean as when every token is ignored. */
static clkit_status reduce_tokens(clkit_context *ctx, const clkit_tensor *loss, const ce_common *c)
{
    if (c->o.reduction == CLKIT_REDUCTION_NONE) return CLKIT_OK;
    cl_kernel k;
    size_t wg;
    clkit_status s = index_kernel(ctx, "ce_reduce", false, &k, &wg);
    if (s) return s;
    const clkit_tensor *zl = c->o.z_loss;
    clkit_args a = clkit_args_of(k);
    clkit_arg_mem(&a, c->tok.buf), clkit_arg_mem(&a, c->ztok.buf), clkit_arg_long(&a, c->t);
    clkit_arg_float(&a, c->grad_scale);
    clkit_arg_mem(&a, loss->buffer), clkit_arg_long(&a, (cl_long)(loss->offset / sizeof(float)));
    clkit_arg_mem(&a, zl ? zl->buffer : NULL);
    clkit_arg_long(&a, zl ? (cl_long)(zl->offset / sizeof(float)) : 0);
    return clkit_run(ctx, &a, 1, &wg, &wg);
}

/* ---- row kernels ---- */

/* A work-group per row: `items` values per work-item per step, as many work-items as cover
   the row in about 4 steps (a warp at least, 1024 at most). CPUs (PoCL), where every plan is
   one more slow build: 8 work-items for short rows, 64 for others. */
static size_t rows_wg(const struct clkit_device_props *p, int64_t n, unsigned items)
{
    size_t max = pow2_floor(min_sz(p->max_work_group, 1024));
    if (!p->is_gpu) return min_sz((uint64_t)n <= 8ull * items ? 8 : 64, max);
    size_t wg = p->warp > 1 ? p->warp : 32;
    while (wg < max && (uint64_t)n > 4ull * wg * items) wg *= 2;
    return min_sz(wg, max);
}

static unsigned rows_chunks(const struct clkit_device_props *p) { return p->is_gpu ? 4 : 2; }

static void rows_options(clkit_context *ctx, clkit_dtype dtype, unsigned vec, char *buf, size_t size)
{
    snprintf(buf, size, "%s -D VEC=%u -D CHUNKS=%u", clkit_dtype_macro(dtype), vec, rows_chunks(&ctx->props));
}

/* A row kernel at the largest work-group up to *wg that it runs. */
static clkit_status rows_kernel(clkit_context *ctx, const char *name, clkit_dtype dtype,
                                unsigned vec, size_t *wg, cl_kernel *k)
{
    char opts[96];
    rows_options(ctx, dtype, vec, opts, sizeof opts);
    return wg_kernel(ctx, name, opts, wg, k);
}

/* Persistent grid: as many groups as the compute units hold, each looping over rows. */
static clkit_status launch_rows(clkit_context *ctx, const clkit_args *a, size_t wg, int64_t rows)
{
    uint64_t local_bytes, private_bytes;
    clkit_kernel_mem(ctx, a->k, &local_bytes, &private_bytes);
    unsigned occupancy = clkit_occupancy(&ctx->props, wg, local_bytes, 0);
    size_t global = clkit_persistent_groups(&ctx->props, occupancy, (uint64_t)rows) * wg;
    return clkit_run(ctx, a, 1, &global, &wg);
}

/* Where the row kernels put per-token losses and z-losses. */
static void arg_losses(clkit_args *a, const ce_common *c)
{
    clkit_arg_mem(a, c->loss), clkit_arg_long(a, c->l_off), clkit_arg_long(a, c->l_stride);
    clkit_arg_mem(a, c->zloss), clkit_arg_long(a, c->z_off), clkit_arg_long(a, c->z_stride);
}

/* Label smoothing, soft-capping and the z-loss scale, in the kernels' order. */
static void arg_loss_options(clkit_args *a, const ce_common *c)
{
    clkit_arg_float(a, c->o.label_smoothing), clkit_arg_float(a, c->o.softcap);
    clkit_arg_float(a, c->o.z_loss_scale);
}

/* ---- clkit_cross_entropy ---- */

/* A (T, V) view as ce_rows takes it: element offset and strides, those of extent-1 dims
   normalised so that they cannot stop the vector path. */
typedef struct rows_view {
    cl_long off, rs, cs;
} rows_view;

static rows_view make_rows_view(const clkit_tensor *t)
{
    rows_view r = {(cl_long)(t->offset / clkit_dtype_size(t->dtype)), t->strides[0],
                   t->strides[1]};
    if (t->shape[0] == 1) r.rs = 0;
    if (t->shape[1] == 1) r.cs = 1;
    return r;
}

/* 16-byte accesses need unit columns, and dlogits in the logits' alignment phase so that one
   position grid serves both. */
static unsigned rows_vec(const rows_view *x, const rows_view *d, clkit_dtype dtype)
{
    int64_t vec = 16 / (int64_t)clkit_dtype_size(dtype);
    if (x->cs != 1 || (d && d->cs != 1)) return 1;
    if (d && (mod(x->off - d->off, vec) || mod(x->rs - d->rs, vec))) return 1;
    return (unsigned)vec;
}

static clkit_status run_rows(clkit_context *ctx, const clkit_tensor *logits,
                             const clkit_tensor *dlogits, const ce_common *c)
{
    rows_view x = make_rows_view(logits), d = {0, 0, 1};
    if (dlogits) d = make_rows_view(dlogits);
    unsigned vec = rows_vec(&x, dlogits ? &d : NULL, logits->dtype);
    size_t wg = rows_wg(&ctx->props, c->v, vec * rows_chunks(&ctx->props));
    cl_kernel k;
    clkit_status s = rows_kernel(ctx, "ce_rows", logits->dtype, vec, &wg, &k);
    if (s) return s;
    clkit_args a = clkit_args_of(k);
    clkit_arg_mem(&a, logits->buffer), clkit_arg_long(&a, x.off), clkit_arg_long(&a, x.rs);
    clkit_arg_long(&a, x.cs), clkit_arg_mem(&a, c->tgt.buf), clkit_arg_long(&a, c->t);
    clkit_arg_long(&a, c->v), arg_loss_options(&a, c), clkit_arg_float(&a, c->grad_scale);
    arg_losses(&a, c);
    clkit_arg_mem(&a, dlogits ? dlogits->buffer : NULL), clkit_arg_long(&a, d.off);
    clkit_arg_long(&a, d.rs), clkit_arg_long(&a, d.cs);
    clkit_log(CLKIT_LOG_DEBUG, "cross_entropy %lldx%lld %s: wg %zu vec %u", (long long)c->t,
              (long long)c->v, clkit_dtype_name(logits->dtype), wg, vec);
    return launch_rows(ctx, &a, wg, c->t);
}

clkit_status clkit_cross_entropy(clkit_context *ctx, const clkit_tensor *logits,
                                 const clkit_tensor *targets,
                                 const clkit_cross_entropy_options *opt, const clkit_tensor *loss,
                                 const clkit_tensor *dlogits)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    ce_common c = {.o = opt ? *opt : clkit_cross_entropy_defaults()};
    clkit_status s;
    if ((s = check_options(ctx, &c.o)) ||
        (s = clkit_check_tensor(ctx, logits, "logits", 2, 2, CLKIT_DT_FLOAT)))
        return s;
    c.t = logits->shape[0], c.v = logits->shape[1];
    if ((s = check_dims(ctx, "T (logits rows)", c.t, 0)) ||
        (s = check_dims(ctx, "V (logits columns)", c.v, 1)) ||
        (s = check_loss_args(ctx, targets, c.t, &c.o, loss)))
        return s;
    if (dlogits) {
        if ((s = clkit_check_tensor(ctx, dlogits, "dlogits", 2, 2, CLKIT_DT_FLOAT)) ||
            (s = clkit_check_same_shape(ctx, dlogits, "dlogits", logits, "logits")) ||
            (s = clkit_check_output(ctx, dlogits, "dlogits")))
            return s;
        if (dlogits->dtype != logits->dtype)
            return clkit_fail(ctx, CLKIT_ERR_DTYPE, "dlogits (%s) must have the logits' dtype (%s)",
                              clkit_dtype_name(dlogits->dtype), clkit_dtype_name(logits->dtype));
    }
    const clkit_tensor *ts[] = {logits, targets, loss, c.o.z_loss, dlogits};
    const char *names[] = {"logits", "targets", "loss", "z_loss", "dlogits"};
    if ((s = check_overlaps(ctx, 5, ts, names, 2, 4, 0))) return s;
    if (c.t == 0) {
        set_grad_scale(&c);
        return reduce_tokens(ctx, loss, &c);
    }
    if (!(s = prepare_common(ctx, targets, loss, &c)) && !(s = run_rows(ctx, logits, dlogits, &c)))
        s = reduce_tokens(ctx, loss, &c);
    release_common(ctx, &c);
    return s;
}

/* ---- clkit_linear_cross_entropy ---- */

typedef struct lce {
    const clkit_tensor *x, *w, *bias, *dx, *dw, *db;
    ce_common c;
    int64_t d, chunk, nchunks; /* chunk: vocabulary columns per chunk */
    int64_t tokens;            /* rows per token chunk; 0: vocabulary chunks */
    int64_t ldz, lds;          /* row strides of the logits and gradient scratch */
    clkit_dtype dt;
    scratch state, z, s, acc; /* s: 16-bit gradient (f32 overwrites z); acc: f32 dx */
    scratch part;              /* f32 partial products of a split dweight or dx GEMM */
    scratch tgt, wacc, bacc;   /* token chunks: their targets, f32 dweight and dbias sums */
    int dw_splits;             /* token slices of the dweight GEMM (1: one GEMM) */
    int dx_splits;             /* token chunks: vocabulary slices of the dx GEMM */
    uint64_t budget;           /* fused: bytes of scratch, at most (lce_budget) */
    size_t wg, zwg;            /* zwg: lce_zgrad's */
    cl_kernel stats, grad, dbias, split_sum; /* fused, stats and grad are lce_merge and
                                                lce_zgrad */
    /* fused: the logits stay in matmul_mma's CE epilogues (tensor cores), in fused_tiles[tile] */
    int fused, tile, slots;    /* slots: column tiles of a row (V / BLOCK_N, rounded up) */
    const int *token_tile;     /* token_tiles' row for how this context loads tiles */
    bool token_tile_ok;        /* token_tile builds here (else fused_tiles[tile] serves) */
    const int *gemm;           /* the fused GEMMs' tile: fused_tiles[tile] or token_tile */
    scratch ms, sz, zt;        /* the epilogue's per-tile states and target logits */
} lce;

static void release_lce(clkit_context *ctx, lce *l)
{
    release_common(ctx, &l->c);
    scratch_put(ctx, &l->state);
    scratch_put(ctx, &l->z);
    scratch_put(ctx, &l->s);
    scratch_put(ctx, &l->acc);
    scratch_put(ctx, &l->part);
    scratch_put(ctx, &l->ms);
    scratch_put(ctx, &l->sz);
    scratch_put(ctx, &l->zt);
    scratch_put(ctx, &l->tgt);
    scratch_put(ctx, &l->wacc);
    scratch_put(ctx, &l->bacc);
}

/* Whether the call asks for any gradient (else the forward alone runs). */
static bool wants_grads(const lce *l) { return l->dx || l->dw || l->db; }

/* Waves of the logits GEMMs over the vocabulary in chunks of w columns: each chunk's grid of
   BLOCK_M x BLOCK_N tiles over T rows runs `resident` work-groups at a time. */
static int64_t chunk_waves(int64_t t, int64_t v, int64_t w, const int *tile, int64_t resident)
{
    int64_t rows = (t + tile[0] - 1) / tile[0], waves = 0;
    for (int64_t v0 = 0; v0 < v; v0 += w) {
        int64_t n = v - v0 < w ? v - v0 : w;
        waves += (rows * ((n + tile[1] - 1) / tile[1]) + resident - 1) / resident;
    }
    return waves;
}

/* Of the widths from w / 2 to w in steps of FUSED_COLS, the widest whose chunks' GEMMs take
   the fewest waves: a chunk's last wave may leave most compute units idle. Among widths with
   as few waves the widest wins, since narrower chunks cost more than their waves
   (measurements: docs/linear-cross-entropy.md#measurements-behind-the-code). */
static int64_t wave_width(int64_t t, int64_t v, int64_t w, const int *tile, int64_t resident)
{
    int64_t best = w, fewest = chunk_waves(t, v, w, tile, resident);
    for (int64_t c = w - FUSED_COLS; c >= w / 2 && c >= FUSED_COLS; c -= FUSED_COLS) {
        int64_t waves = chunk_waves(t, v, c, tile, resident);
        if (waves < fewest) best = c, fewest = waves;
    }
    return best;
}

/* Columns per chunk: `given` ($CLKIT_LCE_CHUNK; 0 when unset), else the most whose
   scratch (T x chunk f32 logits, plus the gradient in the storage dtype when it cannot
   overwrite them; fused: the gradient alone) fits min(budget, max_alloc / 2), a multiple of
   LCE_COLS (fused: FUSED_COLS, which the epilogue's slots need, also for a given count) and at
   least that; never more than V. Fused (tile: the GEMMs' BLOCK_M, BLOCK_N, `resident` at
   once), the default is wave_width's. */
static int64_t chunk_width(const struct clkit_device_props *p, int64_t t, int64_t v, int64_t given,
                           uint64_t bytes_per_logit, uint64_t budget, const int *tile, int64_t resident)
{
    int64_t cols = tile ? FUSED_COLS : LCE_COLS;
    int64_t w = given;
    if (!given) {
        if (p->max_alloc / 2 < budget) budget = p->max_alloc / 2;
        w = (int64_t)(budget / ((uint64_t)t * bytes_per_logit));
    }
    if (!given || tile) {
        w = w / cols * cols;
        if (w < cols) w = cols;
    }
    if (w >= v) return v;
    return tile && !given ? wave_width(t, v, w, tile, resident) : w;
}

static clkit_tensor matrix(cl_mem buf, clkit_dtype dt, int64_t offset_elems, int64_t rows,
                           int64_t cols, int64_t rs, int64_t cs)
{
    int64_t shape[2] = {rows, cols};
    clkit_tensor m = clkit_tensor_contiguous(buf, dt, 2, shape);
    m.offset = (size_t)offset_elems * clkit_dtype_size(dt);
    m.strides[0] = rs, m.strides[1] = cs;
    return m;
}

/* Rows [r0, r0 + n) of a 2-D tensor (vocabulary rows of W, token rows of x), transposed
   when asked. */
static clkit_tensor row_slice(const clkit_tensor *w, int64_t r0, int64_t n, bool transposed)
{
    int64_t off = (int64_t)(w->offset / clkit_dtype_size(w->dtype)) + r0 * w->strides[0];
    return transposed ? matrix(w->buffer, w->dtype, off, w->shape[1], n, w->strides[1], w->strides[0])
                      : matrix(w->buffer, w->dtype, off, n, w->shape[1], w->strides[0], w->strides[1]);
}

/* The chunk's logits x @ W[v0 : v0 + n]^T into z (the bias is added by the kernels). */
static clkit_status chunk_logits(clkit_context *ctx, const lce *l, int64_t v0, int64_t n)
{
    clkit_tensor wt = row_slice(l->w, v0, n, true);
    clkit_tensor z = matrix(l->z.buf, CLKIT_F32, 0, l->c.t, n, l->ldz, 1);
    return clkit_matmul(ctx, l->x, &wt, &z, NULL);
}

/* lce_zgrad: whole 16-byte vectors along the kept rows of logits (a token chunk's V, or a
   vocabulary chunk's). */
static clkit_status zgrad_kernel(clkit_context *ctx, lce *l)
{
    unsigned vec = 16 / (unsigned)clkit_dtype_size(l->dt);
    l->zwg = rows_wg(&ctx->props, l->tokens ? l->c.v : l->chunk, vec * rows_chunks(&ctx->props));
    return rows_kernel(ctx, "lce_zgrad", l->dt, vec, &l->zwg, &l->grad);
}

/* lce_stats and lce_grad at one work-group size (the smaller either can run), lce_zgrad
   fused, and lce_dbias from the same program. */
static clkit_status lce_kernels(clkit_context *ctx, lce *l)
{
    bool grads = wants_grads(l);
    clkit_status s;
    l->wg = rows_wg(&ctx->props, l->fused ? l->slots : l->chunk, 4 * rows_chunks(&ctx->props));
    for (;;) {
        size_t wg = l->wg;
        s = rows_kernel(ctx, l->fused ? "lce_merge" : "lce_stats", l->dt, 1, &wg, &l->stats);
        if (!s && grads && !l->fused) s = rows_kernel(ctx, "lce_grad", l->dt, 1, &wg, &l->grad);
        if (s || wg == l->wg) break;
        l->wg = wg;
    }
    if (!s && grads && l->fused) s = zgrad_kernel(ctx, l);
    char opts[128];
    rows_options(ctx, l->dt, 1, opts, sizeof opts);
    size_t used = strlen(opts);
    snprintf(opts + used, sizeof opts - used, " -D WG=%zu", l->wg);
    if (!s && (l->dw_splits > 1 || l->dx_splits > 1))
        s = clkit_get_kernel(ctx, "cross_entropy.cl", "lce_split_sum", opts, &l->split_sum);
    if (s || !l->db) return s;
    if ((s = clkit_get_kernel(ctx, "cross_entropy.cl", "lce_dbias", opts, &l->dbias))) return s;
    /* Checked here, before the op enqueues anything, rather than by clkit_run at its turn. */
    if (clkit_kernel_wg_limit(ctx, l->dbias) < DB_COLS * DB_ROWS)
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "lce_dbias: the kernel cannot run %d work-items",
                          DB_COLS * DB_ROWS);
    return CLKIT_OK;
}

/* The bias (buffer, offset, stride), NULL when there is none. */
static void arg_bias(clkit_args *a, const clkit_tensor *b)
{
    clkit_arg_mem(a, b ? b->buffer : NULL);
    clkit_arg_long(a, b ? (cl_long)(b->offset / clkit_dtype_size(b->dtype)) : 0);
    clkit_arg_long(a, b ? b->strides[0] : 0);
}

/* The arguments lce_stats and lce_grad open with: the chunk's logits (columns [v0, v0 + n)
   of the vocabulary), the bias, the targets and the loss options. */
static void arg_chunk(clkit_args *a, const lce *l, int64_t v0, int64_t n)
{
    clkit_arg_mem(a, l->z.buf), clkit_arg_long(a, l->ldz), clkit_arg_long(a, n);
    clkit_arg_long(a, v0), arg_bias(a, l->bias), clkit_arg_mem(a, l->c.tgt.buf);
    clkit_arg_long(a, l->c.t), clkit_arg_long(a, l->c.v), arg_loss_options(a, &l->c);
}

static clkit_status chunk_stats(clkit_context *ctx, const lce *l, int64_t v0, int64_t n,
                                int first, int last)
{
    const ce_common *c = &l->c;
    clkit_args a = clkit_args_of(l->stats);
    arg_chunk(&a, l, v0, n);
    clkit_arg_mem(&a, l->state.buf), clkit_arg_int(&a, first), clkit_arg_int(&a, last);
    arg_losses(&a, c);
    return launch_rows(ctx, &a, l->wg, c->t);
}

/* dloss/dz of the chunk (of the summed loss) into the gradient scratch (z itself for f32). */
static clkit_status chunk_grad(clkit_context *ctx, const lce *l, int64_t v0, int64_t n)
{
    clkit_args a = clkit_args_of(l->grad);
    arg_chunk(&a, l, v0, n);
    clkit_arg_mem(&a, l->state.buf), clkit_arg_mem(&a, l->s.buf ? l->s.buf : l->z.buf);
    clkit_arg_long(&a, l->lds);
    return launch_rows(ctx, &a, l->wg, l->c.t);
}

/* lce_zgrad on the first n columns of the logits kept in s. */
static clkit_status zgrad(clkit_context *ctx, const lce *l, const ce_common *c, int64_t n)
{
    clkit_args a = clkit_args_of(l->grad);
    clkit_arg_mem(&a, l->s.buf), clkit_arg_long(&a, l->lds), clkit_arg_long(&a, n);
    clkit_arg_long(&a, c->v), clkit_arg_mem(&a, c->tgt.buf), clkit_arg_long(&a, c->t);
    arg_loss_options(&a, c), clkit_arg_mem(&a, l->state.buf);
    return launch_rows(ctx, &a, l->zwg, c->t);
}

/* Column sums of n_rows rows of the gradient into dbias entries [v0, v0 + n), through the f32
   sums of the token chunks before (first: none) when there are several (last: the total,
   times grad_scale). */
static clkit_status chunk_dbias(clkit_context *ctx, const lce *l, cl_mem sbuf, int64_t n_rows,
                                int64_t v0, int64_t n, int first, int last)
{
    cl_long stride = l->db->strides[0];
    clkit_args a = clkit_args_of(l->dbias);
    clkit_arg_mem(&a, sbuf), clkit_arg_long(&a, l->lds), clkit_arg_long(&a, n_rows);
    clkit_arg_long(&a, n), clkit_arg_mem(&a, l->bacc.buf), clkit_arg_int(&a, first);
    clkit_arg_int(&a, last), clkit_arg_float(&a, l->c.grad_scale), clkit_arg_mem(&a, l->db->buffer);
    clkit_arg_long(&a, (cl_long)(l->db->offset / clkit_dtype_size(l->dt)) + v0 * stride);
    clkit_arg_long(&a, stride);
    size_t global[2] = {(size_t)round_up(n, DB_COLS), DB_ROWS}, local[2] = {DB_COLS, DB_ROWS};
    return clkit_run(ctx, &a, 2, global, local);
}

/* out (n x d, 16-bit or f32) = the sum of `splits` f32 (n x d) partial products in l->part. */
static clkit_status split_sum(clkit_context *ctx, const lce *l, int splits, const clkit_tensor *out)
{
    cl_long nn = out->shape[0], dd = out->shape[1];
    clkit_args a = clkit_args_of(l->split_sum);
    clkit_arg_mem(&a, l->part.buf), clkit_arg_long(&a, nn), clkit_arg_long(&a, dd);
    clkit_arg_int(&a, splits), clkit_arg_mem(&a, out->buffer);
    clkit_arg_long(&a, (cl_long)(out->offset / clkit_dtype_size(out->dtype)));
    clkit_arg_long(&a, out->strides[0]), clkit_arg_long(&a, out->strides[1]);
    size_t wg = clkit_stream_wg(&ctx->props, clkit_kernel_wg_limit(ctx, l->split_sum));
    size_t global = clkit_stream_groups(&ctx->props, (uint64_t)(nn * dd), wg) * wg;
    return clkit_run(ctx, &a, 1, &global, &wg);
}

/* out (n x d) = grad_scale a (n x k) b (k x d). Split in `splits` slices of k (which they
   divide), the slices' products land in l->part as one batched GEMM and lce_split_sum adds
   them. */
static clkit_status split_gemm(clkit_context *ctx, const lce *l, const clkit_tensor *a,
                               const clkit_tensor *b, const clkit_tensor *out, int splits)
{
    clkit_matmul_options mo = clkit_matmul_defaults();
    mo.alpha = l->c.grad_scale;
    if (splits == 1) return clkit_matmul(ctx, a, b, out, &mo);
    int64_t n = a->shape[0], slice = a->shape[1] / splits, d = b->shape[1];
    int64_t as[3] = {splits, n, slice}, bs[3] = {splits, slice, d}, ps[3] = {splits, n, d};
    clkit_tensor a3 = clkit_tensor_contiguous(a->buffer, a->dtype, 3, as);
    a3.offset = a->offset;
    a3.strides[0] = slice * a->strides[1], a3.strides[1] = a->strides[0], a3.strides[2] = a->strides[1];
    clkit_tensor b3 = clkit_tensor_contiguous(b->buffer, b->dtype, 3, bs);
    b3.offset = b->offset;
    b3.strides[0] = slice * b->strides[0], b3.strides[1] = b->strides[0], b3.strides[2] = b->strides[1];
    clkit_tensor p3 = clkit_tensor_contiguous(l->part.buf, CLKIT_F32, 3, ps);
    clkit_status s = clkit_matmul(ctx, &a3, &b3, &p3, &mo);
    return s ? s : split_sum(ctx, l, splits, out);
}

/* dweight rows [v0, v0 + n) = grad_scale g^T x over all tokens, in dw_splits token slices. */
static clkit_status chunk_dweight(clkit_context *ctx, const lce *l, cl_mem sbuf, int64_t v0, int64_t n)
{
    clkit_tensor dw = row_slice(l->dw, v0, n, false);
    clkit_tensor gt = matrix(sbuf, l->dt, 0, n, l->c.t, 1, l->lds);
    return split_gemm(ctx, l, &gt, l->x, &dw, l->dw_splits);
}

/* The chunk's share of every gradient from its dloss/dz g (in s, or z for f32), each scaled by
   grad_scale in f32: dweight rows and dbias entries [v0, v0 + n) written once (f32
   accumulation inside the GEMM and the column sums), dx accumulated in f32. */
static clkit_status chunk_consume(clkit_context *ctx, const lce *l, int64_t v0, int64_t n, bool first)
{
    clkit_status s;
    cl_mem sbuf = l->s.buf ? l->s.buf : l->z.buf;
    clkit_tensor g = matrix(sbuf, l->dt, 0, l->c.t, n, l->lds, 1);
    if (l->dw && (s = chunk_dweight(ctx, l, sbuf, v0, n))) return s;
    if (l->db && (s = chunk_dbias(ctx, l, sbuf, l->c.t, v0, n, 1, 1))) return s;
    if (!l->dx) return CLKIT_OK;
    clkit_tensor acc = l->acc.buf ? matrix(l->acc.buf, CLKIT_F32, 0, l->c.t, l->d, l->d, 1) : *l->dx;
    clkit_tensor w = row_slice(l->w, v0, n, false);
    clkit_matmul_options mo = clkit_matmul_defaults();
    mo.alpha = l->c.grad_scale;
    mo.beta = first ? 0.0f : 1.0f;
    return clkit_matmul(ctx, &g, &w, &acc, &mo);
}

/* ---- fused: the logits never leave the tensor cores' registers ---- */

/* Tensor-core tiles of the fused GEMMs (BLOCK_M, BLOCK_N, BLOCK_K, WARPS_M, WARPS_N, STAGES,
   as matmul's mma_shapes, then 1 for Hopper's wgmma), the first legal one taken: wgmma on
   sm_90, then mma.sync with sm_90's larger local memory, then rings within 48 KiB. Wide
   tiles halve the forward's per-tile states (T x V / BLOCK_N x 8 bytes of scratch); in the
   backward 128 x 256 also beat 128 x 128 on 8 warps on both shapes of TARGETS.md
   (measurements: docs/linear-cross-entropy.md#measurements-behind-the-code). */
static const int fused_tiles[][7] = {
    {128, 256, 64, 8, 1, 4, 1},  {128, 256, 32, 2, 4, 4, 0}, {128, 256, 32, 2, 4, 2, 0},
    {128, 128, 32, 2, 2, 3, 0}, {64, 64, 32, 2, 2, 4, 0},
};
#define NFUSED ((int)(sizeof fused_tiles / sizeof *fused_tiles))

/* The token chunks' logits GEMM on wgmma (where it builds; else fused_tiles' first): K = D is
   short there and the epilogue, which also stores the logits, weighs most. The best tile
   depends on how the tiles load: with the TMA 128 x 256 (4 stages) was the fastest timed, on
   cp.async 128 x 128 (3 stages) (measurements:
   docs/linear-cross-entropy.md#measurements-behind-the-code). */
static const int token_tiles[2][7] = {{128, 256, 64, 8, 1, 4, 1}, {128, 128, 64, 8, 1, 3, 1}};

static void fused_config(const int *t, char *buf, size_t n)
{
    snprintf(buf, n, "KERNEL=4,BLOCK_M=%d,BLOCK_N=%d,BLOCK_K=%d,WARPS_M=%d,WARPS_N=%d,STAGES=%d,GROUP_M=8%s",
             t[0], t[1], t[2], t[3], t[4], t[5], t[6] ? ",WGMMA=1" : "");
}

typedef struct fused_chunk {
    const lce *l;
    const ce_common *c; /* the call's, or a token slice's */
    int64_t v0;
} fused_chunk;

/* cl/nv/matmul_ce_epilogue.h's EPI_CE_DECL, after the operands. */
static void arg_epilogue(clkit_args *a, const void *user)
{
    const fused_chunk *fc = user;
    const lce *l = fc->l;
    const ce_common *c = fc->c;
    arg_bias(a, l->bias), clkit_arg_mem(a, c->tgt.buf), clkit_arg_long(a, fc->v0);
    clkit_arg_float(a, c->o.softcap), clkit_arg_mem(a, l->ms.buf), clkit_arg_mem(a, l->sz.buf);
    clkit_arg_mem(a, l->zt.buf), clkit_arg_long(a, l->slots), clkit_arg_mem(a, l->state.buf);
    clkit_arg_float(a, c->o.label_smoothing), clkit_arg_float(a, c->o.z_loss_scale);
    clkit_arg_long(a, c->v);
}

/* The chunk's product x W[v0 : v0 + n]^T (x: c->t rows) through matmul_mma with the CE
   epilogue epi: per-tile states ("STATS"; "STATS -D CE_STORE" also keeps the logits in s) or
   dloss/dz of the summed loss into s ("GRAD"). Bias and soft-capping are compiled in only
   when used. */
static clkit_status fused_gemm(clkit_context *ctx, const lce *l, const ce_common *c,
                               const clkit_tensor *x, const char *epi, int64_t v0, int64_t n)
{
    char define[80], config[160];
    snprintf(define, sizeof define, "-D EPI_CE_%s%s%s", epi, l->bias ? " -D CE_BIAS" : "",
             c->o.softcap > 0.0f ? " -D CE_CAP" : "");
    const fused_chunk fc = {l, c, v0};
    clkit_matmul_epilogue e = {define, arg_epilogue, &fc};
    clkit_tensor wt = row_slice(l->w, v0, n, true);
    clkit_tensor g = matrix(l->s.buf, l->dt, 0, c->t, n, l->lds, 1);
    fused_config(l->gemm, config, sizeof config);
    clkit_matmul_options mo = clkit_matmul_defaults();
    mo.config = config;
    return clkit_matmul_epilogue_run(ctx, x, &wt, &g, &mo, &e);
}

static clkit_status fused_merge(clkit_context *ctx, const lce *l, const ce_common *c)
{
    clkit_args a = clkit_args_of(l->stats);
    clkit_arg_mem(&a, l->ms.buf), clkit_arg_mem(&a, l->sz.buf), clkit_arg_mem(&a, l->zt.buf);
    clkit_arg_long(&a, l->slots), clkit_arg_mem(&a, c->tgt.buf), clkit_arg_long(&a, c->t);
    clkit_arg_long(&a, c->v), clkit_arg_float(&a, c->o.label_smoothing);
    clkit_arg_float(&a, c->o.z_loss_scale), clkit_arg_mem(&a, l->state.buf), arg_losses(&a, c);
    return launch_rows(ctx, &a, l->wg, c->t);
}

/* Slices of a GEMM's reduction (length k) for an (n x d) output whose 128 x 128 tile grid is
   small: doubled up to max while the grid gives fewer than `waves` work-groups a compute
   unit, k divides evenly, each slice keeps at least min_slice and the f32 partials stay
   within cap bytes. */
static int reduction_splits(const struct clkit_device_props *p, int64_t n, int64_t d, int64_t k,
                            int64_t min_slice, int max, unsigned waves, uint64_t cap)
{
    uint64_t tiles = (uint64_t)((n + 127) / 128) * (uint64_t)((d + 127) / 128);
    int splits = 1;
    while (splits < max && k % (2 * splits) == 0 && k / (2 * splits) >= min_slice &&
           tiles * (uint64_t)splits < (uint64_t)waves * p->compute_units &&
           (uint64_t)(2 * splits) * (uint64_t)n * (uint64_t)d * 4 <= cap)
        splits *= 2;
    return splits;
}

/* Token slices for the dweight GEMM of a vocabulary chunk: up to 16 of at least 512 tokens,
   for two work-groups a compute unit, the partials within a quarter of the scratch budget. */
static int dw_splits(const struct clkit_device_props *p, int64_t t, int64_t chunk, int64_t d)
{
    return reduction_splits(p, chunk, d, t, 512, 16, 2, LCE_BUDGET / 4);
}

/* The chunk at step k of the forward. The backward walks the steps in reverse, starting
   from the forward's last chunk, whose logits are still in scratch: unfused, the f32 logits
   of the last chunk; fused, chunk 0 (run last), kept in the gradient scratch. Keeping chunk 0
   saves a whole chunk's GEMM; its target test needs no column offset. */
static int64_t chunk_at(const lce *l, int64_t k) { return l->fused ? (k + 1) % l->nchunks : k; }

static int64_t chunk_cols(const lce *l, int64_t i)
{
    int64_t v0 = i * l->chunk;
    return l->c.v - v0 < l->chunk ? l->c.v - v0 : l->chunk;
}

/* Forward: the chunks' logits folded into per-row states; mean and sum reduced. */
static clkit_status lce_forward(clkit_context *ctx, lce *l, const clkit_tensor *loss)
{
    clkit_status s;
    bool keep = wants_grads(l);
    for (int64_t k = 0; k < l->nchunks; k++) {
        int64_t i = chunk_at(l, k), v0 = i * l->chunk, n = chunk_cols(l, i);
        if (l->fused)
            s = fused_gemm(ctx, l, &l->c, l->x, keep && i == 0 ? "STATS -D CE_STORE" : "STATS", v0, n);
        else if (!(s = chunk_logits(ctx, l, v0, n)))
            s = chunk_stats(ctx, l, v0, n, k == 0, k == l->nchunks - 1);
        if (s) return s;
    }
    if (l->fused && (s = fused_merge(ctx, l, &l->c))) return s;
    return reduce_tokens(ctx, loss, &l->c);
}

/* Backward: the forward's chunks in reverse, the first from the logits it kept. */
static clkit_status lce_backward(clkit_context *ctx, lce *l)
{
    clkit_status s;
    for (int64_t k = l->nchunks - 1; k >= 0; k--) {
        int64_t i = chunk_at(l, k), v0 = i * l->chunk, n = chunk_cols(l, i);
        bool kept = k == l->nchunks - 1;
        if (l->fused) s = kept ? zgrad(ctx, l, &l->c, n) : fused_gemm(ctx, l, &l->c, l->x, "GRAD", v0, n);
        else if (!(s = kept ? CLKIT_OK : chunk_logits(ctx, l, v0, n)))
            s = chunk_grad(ctx, l, v0, n);
        if (s || (s = chunk_consume(ctx, l, v0, n, kept))) return s;
    }
    if (!l->acc.buf) return CLKIT_OK;
    clkit_tensor acc = matrix(l->acc.buf, CLKIT_F32, 0, l->c.t, l->d, l->d, 1);
    return clkit_copy(ctx, &acc, l->dx);
}

/* ---- fused, by token chunks: the logits kept for the backward ---- */

#define TOKEN_MIN 1024 /* fewer rows a chunk: the vocabulary chunks instead (the dweight sums
                          would be read and written too often) */

/* Rows per token chunk, 0 where the vocabulary chunks serve: fused only, with gradients asked
   for; $CLKIT_LCE_TOKENS when set to a positive count (a `chunk` given by $CLKIT_LCE_CHUNK
   alone forces the vocabulary chunks); else the most rows whose logits, per-tile states and targets fit seven
   eighths of the fused budget beside the f32 dweight and dbias sums, a multiple of 128 and
   at least TOKEN_MIN (or all T), evened out over the chunks. The last eighth is for dx_splits'
   partials. */
static int64_t token_rows(const struct clkit_device_props *p, const lce *l, int64_t chunk)
{
    if (!l->fused || !wants_grads(l)) return 0;
    int64_t given = 0, t = l->c.t, v = l->c.v;
    if (clkit_env_int("CLKIT_LCE_TOKENS", 1, INT32_MAX, &given)) return given < t ? given : t;
    if (chunk) return 0;
    uint64_t fixed = (l->dw ? (uint64_t)v * (uint64_t)l->d * 4 : 0) + (l->db ? (uint64_t)v * 4 : 0);
    uint64_t budget = l->budget / 8 * 7, zrow = (uint64_t)round_up(v, 8) * clkit_dtype_size(l->dt);
    if (fixed >= budget) return 0;
    uint64_t per_row = zrow + (uint64_t)l->slots * (l->c.o.label_smoothing > 0.0f ? 12 : 8) + 16 + 4 + 4;
    uint64_t rows = (budget - fixed) / per_row;
    if (rows > p->max_alloc / zrow) rows = p->max_alloc / zrow;
    if (rows >= (uint64_t)t) return t;
    rows = rows / 128 * 128;
    if (rows < TOKEN_MIN) return 0;
    int64_t chunks = (t + (int64_t)rows - 1) / (int64_t)rows;
    return round_up((t + chunks - 1) / chunks, 128);
}

/* Vocabulary slices of a token chunk's dx GEMM (M = rows, N = D, K = V): up to 8 of at least
   2048 entries, for a wave, the partials within the budget's last eighth. */
static int dx_splits(const struct clkit_device_props *p, int64_t rows, int64_t d, int64_t v,
                     uint64_t budget)
{
    return reduction_splits(p, rows, d, v, 2048, 8, 1, budget / 8);
}

/* Per token chunk: the logits in the storage dtype (s), per-row states, per-tile states,
   target logits and targets; once: the f32 dweight and dbias sums and dx's split partials. */
static clkit_status token_scratch(clkit_context *ctx, lce *l)
{
    size_t rows = (size_t)l->tokens, slots = (size_t)l->slots, v = (size_t)l->c.v;
    l->lds = round_up(l->c.v, 8);
    l->dx_splits = l->dx ? dx_splits(&ctx->props, l->tokens, l->d, l->c.v, l->budget) : 1;
    clkit_status s;
    if ((s = scratch_get(ctx, rows * 4 * sizeof(float), &l->state)) ||
        (s = scratch_get(ctx, rows * (size_t)l->lds * clkit_dtype_size(l->dt), &l->s)) ||
        (s = scratch_get(ctx, rows * slots * 2 * sizeof(float), &l->ms)) ||
        (s = scratch_get(ctx, rows * sizeof(float), &l->zt)) ||
        (s = scratch_get(ctx, rows * sizeof(cl_int), &l->tgt)) ||
        (l->c.o.label_smoothing > 0.0f && (s = scratch_get(ctx, rows * slots * sizeof(float), &l->sz))) ||
        (l->dw && (s = scratch_get(ctx, v * (size_t)l->d * sizeof(float), &l->wacc))) ||
        (l->db && (s = scratch_get(ctx, v * sizeof(float), &l->bacc))))
        return s;
    if (l->dx_splits > 1)
        s = scratch_get(ctx, (size_t)l->dx_splits * rows * (size_t)l->d * sizeof(float), &l->part);
    return s;
}

static uint64_t lce_budget(int64_t t, int64_t v)
{
    uint64_t half = (uint64_t)t * (uint64_t)v / 2;
    return half < LCE_FUSED_MIN ? LCE_FUSED_MIN : half > LCE_FUSED_MAX ? LCE_FUSED_MAX : half;
}

/* Token chunks where token_rows allows. Else, fused, the chunk gradient in the storage dtype
   is all the chunk scratch (the forward's epilogue only needs its shape); the tile's per-row
   states take T x slots x 8 bytes (12 with label smoothing). */
static clkit_status lce_scratch(clkit_context *ctx, lce *l)
{
    size_t es = clkit_dtype_size(l->dt), t = (size_t)l->c.t;
    bool grads = wants_grads(l), s16 = l->fused || (grads && l->dt != CLKIT_F32);
    l->gemm = l->token_tile_ok ? l->token_tile : fused_tiles[l->tile];
    l->slots = (int)((l->c.v + l->gemm[1] - 1) / l->gemm[1]);
    l->budget = lce_budget(l->c.t, l->c.v);
    int64_t given = 0; /* read once a call: a bad value warns once */
    clkit_env_int("CLKIT_LCE_CHUNK", 1, INT32_MAX, &given);
    if ((l->tokens = token_rows(&ctx->props, l, given))) return token_scratch(ctx, l);
    l->gemm = fused_tiles[l->tile];
    l->slots = (int)((l->c.v + l->gemm[1] - 1) / l->gemm[1]);
    size_t slots = (size_t)l->slots;
    size_t acc = l->dx && l->dx->dtype != CLKIT_F32 ? t * (size_t)l->d * sizeof(float) : 0;
    size_t fixed = acc + t * slots * (l->c.o.label_smoothing > 0.0f ? 12 : 8);
    if (l->fused) {
        char config[160];
        fused_config(l->gemm, config, sizeof config);
        uint64_t budget = fixed + LCE_BUDGET < l->budget ? l->budget - fixed : LCE_BUDGET;
        l->chunk = chunk_width(&ctx->props, l->c.t, l->c.v, given, es, budget, l->gemm,
                               (int64_t)clkit_matmul_resident(ctx, l->dt, config));
    } else {
        l->chunk = chunk_width(&ctx->props, l->c.t, l->c.v, given, 4 + (s16 ? es : 0), LCE_BUDGET, NULL, 0);
    }
    l->nchunks = (l->c.v + l->chunk - 1) / l->chunk;
    l->ldz = round_up(l->chunk, 4);
    l->lds = s16 ? round_up(l->chunk, 8) : l->ldz;
    clkit_status s;
    if ((s = scratch_get(ctx, t * 4 * sizeof(float), &l->state)) ||
        (!l->fused && (s = scratch_get(ctx, t * (size_t)l->ldz * sizeof(float), &l->z))) ||
        (s16 && (s = scratch_get(ctx, t * (size_t)l->lds * es, &l->s))))
        return s;
    if (l->fused && ((s = scratch_get(ctx, t * slots * 2 * sizeof(float), &l->ms)) ||
                     (s = scratch_get(ctx, t * sizeof(float), &l->zt)) ||
                     (l->c.o.label_smoothing > 0.0f && (s = scratch_get(ctx, t * slots * sizeof(float), &l->sz)))))
        return s;
    if (acc) s = scratch_get(ctx, acc, &l->acc);
    l->dw_splits = l->dw ? dw_splits(&ctx->props, l->c.t, l->chunk, l->d) : 1;
    if (!s && l->dw_splits > 1)
        s = scratch_get(ctx, (size_t)l->dw_splits * (size_t)l->chunk * (size_t)l->d * sizeof(float), &l->part);
    return s;
}

/* The token chunk's rows [t0, t0 + rows): its targets (copied to l->tgt), losses and
   z-losses, as a ce_common of its own. */
static clkit_status token_slice(clkit_context *ctx, const lce *l, int64_t t0, int64_t rows,
                                ce_common *c)
{
    *c = l->c;
    c->t = rows, c->tgt = l->tgt;
    c->l_off += t0 * c->l_stride, c->z_off += t0 * c->z_stride;
    clkit_tensor from = clkit_tensor_contiguous(l->c.tgt.buf, CLKIT_I32, 1, &rows);
    clkit_tensor to = clkit_tensor_contiguous(l->tgt.buf, CLKIT_I32, 1, &rows);
    from.offset = (size_t)t0 * sizeof(cl_int);
    return clkit_copy(ctx, &from, &to);
}

/* dx rows [t0, t0 + rows) = grad_scale g W, in dx_splits vocabulary slices. */
static clkit_status token_dx(clkit_context *ctx, const lce *l, int64_t t0, int64_t rows)
{
    clkit_tensor dx = row_slice(l->dx, t0, rows, false);
    clkit_tensor g = matrix(l->s.buf, l->dt, 0, rows, l->c.v, l->lds, 1);
    return split_gemm(ctx, l, &g, l->w, &dx, l->dx_splits);
}

/* dweight's f32 sums += grad_scale g^T x[t0 : t0 + rows] (the first chunk starts them). */
static clkit_status token_dw(clkit_context *ctx, const lce *l, int64_t t0, int64_t rows)
{
    clkit_tensor gt = matrix(l->s.buf, l->dt, 0, l->c.v, rows, 1, l->lds);
    clkit_tensor xr = row_slice(l->x, t0, rows, false);
    clkit_tensor acc = matrix(l->wacc.buf, CLKIT_F32, 0, l->c.v, l->d, l->d, 1);
    clkit_matmul_options mo = clkit_matmul_defaults();
    mo.alpha = l->c.grad_scale;
    mo.beta = t0 ? 1.0f : 0.0f;
    return clkit_matmul(ctx, &gt, &xr, &acc, &mo);
}

/* Forward and backward a token chunk at a time: its logits kept (CE_STORE), merged into
   losses and lse, turned into dloss/dz in place, consumed by dx, dweight and dbias. */
static clkit_status lce_tokens(clkit_context *ctx, lce *l, const clkit_tensor *loss)
{
    clkit_status s;
    int64_t t = l->c.t, v = l->c.v;
    for (int64_t t0 = 0; t0 < t; t0 += l->tokens) {
        int64_t rows = t - t0 < l->tokens ? t - t0 : l->tokens;
        clkit_tensor xr = row_slice(l->x, t0, rows, false);
        ce_common c;
        if ((s = token_slice(ctx, l, t0, rows, &c)) ||
            (s = fused_gemm(ctx, l, &c, &xr, "STATS -D CE_STORE", 0, v)) ||
            (s = fused_merge(ctx, l, &c)) || (s = zgrad(ctx, l, &c, v)) ||
            (l->dx && (s = token_dx(ctx, l, t0, rows))) || (l->dw && (s = token_dw(ctx, l, t0, rows))) ||
            (l->db && (s = chunk_dbias(ctx, l, l->s.buf, rows, 0, v, t0 == 0, t0 + rows == t))))
            return s;
    }
    if ((s = reduce_tokens(ctx, loss, &l->c)) || !l->dw) return s;
    clkit_tensor acc = matrix(l->wacc.buf, CLKIT_F32, 0, v, l->d, l->d, 1);
    return clkit_copy(ctx, &acc, l->dw);
}

static clkit_status run_linear(clkit_context *ctx, lce *l, const clkit_tensor *targets,
                               const clkit_tensor *loss)
{
    clkit_status s;
    if ((s = prepare_common(ctx, targets, loss, &l->c)) || (s = lce_scratch(ctx, l)) ||
        (s = lce_kernels(ctx, l)))
        return s;
    if (l->tokens) {
        clkit_log(CLKIT_LOG_DEBUG, "linear_cross_entropy T %lld D %lld V %lld %s: token chunks of %lld, "
                  "dx in %d vocabulary slices", (long long)l->c.t, (long long)l->d, (long long)l->c.v,
                  clkit_dtype_name(l->dt), (long long)l->tokens, l->dx_splits);
        return lce_tokens(ctx, l, loss);
    }
    clkit_log(CLKIT_LOG_DEBUG, "linear_cross_entropy T %lld D %lld V %lld %s: %lld chunks of %lld, wg %zu, "
              "dweight in %d token slices, %s", (long long)l->c.t, (long long)l->d, (long long)l->c.v,
              clkit_dtype_name(l->dt), (long long)l->nchunks, (long long)l->chunk, l->wg, l->dw_splits,
              l->fused ? "fused" : "unfused");
    if ((s = lce_forward(ctx, l, loss)) || !wants_grads(l)) return s;
    return lce_backward(ctx, l);
}

static bool tile_legal(const clkit_context *ctx, clkit_dtype dt, const int *t)
{
    char config[160];
    fused_config(t, config, sizeof config);
    return clkit_matmul_tile_legal(ctx, dt, config);
}

/* The first fused tile legal here for 16-bit operands on the tensor cores; -1: none. */
static int fused_tile(const clkit_context *ctx, clkit_dtype dt)
{
    if (dt == CLKIT_F32) return -1;
    for (int i = 0; i < NFUSED; i++)
        if (tile_legal(ctx, dt, fused_tiles[i])) return i;
    return -1;
}

/* x (T, D), weight (V, D), bias and dbias (V), dx and dweight shaped like x and weight, all of
   one float dtype. */
static clkit_status check_linear(clkit_context *ctx, lce *l)
{
    clkit_status s;
    const char *names[] = {"x", "weight", "bias", "dx", "dweight", "dbias"};
    const clkit_tensor *ts[] = {l->x, l->w, l->bias, l->dx, l->dw, l->db};
    for (int i = 0; i < 6; i++) {
        if (!ts[i] && (i == 0 || i == 1))
            return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "%s is NULL", names[i]);
        if (!ts[i]) continue;
        int nd = i % 3 == 2 ? 1 : 2;
        if ((s = clkit_check_tensor(ctx, ts[i], names[i], nd, nd, CLKIT_DT_FLOAT))) return s;
        if (ts[i]->dtype != l->x->dtype)
            return clkit_fail(ctx, CLKIT_ERR_DTYPE, "%s is %s, x %s: they must share a dtype",
                              names[i], clkit_dtype_name(ts[i]->dtype),
                              clkit_dtype_name(l->x->dtype));
    }
    l->dt = l->x->dtype;
    l->c.t = l->x->shape[0], l->d = l->x->shape[1], l->c.v = l->w->shape[0];
    if ((s = check_dims(ctx, "T (x rows)", l->c.t, 0)) || (s = check_dims(ctx, "D", l->d, 1)) ||
        (s = check_dims(ctx, "V (weight rows)", l->c.v, 1)))
        return s;
    if (l->w->shape[1] != l->d)
        return clkit_fail(ctx, CLKIT_ERR_SHAPE, "weight is %lld x %lld but x has D = %lld",
                          (long long)l->c.v, (long long)l->w->shape[1], (long long)l->d);
    for (int i = 2; i < 6; i += 3)
        if (ts[i] && ts[i]->shape[0] != l->c.v)
            return clkit_fail(ctx, CLKIT_ERR_SHAPE, "%s has %lld elements, weight %lld rows",
                              names[i], (long long)ts[i]->shape[0], (long long)l->c.v);
    if ((l->dx && ((s = clkit_check_same_shape(ctx, l->dx, "dx", l->x, "x")) ||
                   (s = clkit_check_output(ctx, l->dx, "dx")))) ||
        (l->dw && ((s = clkit_check_same_shape(ctx, l->dw, "dweight", l->w, "weight")) ||
                   (s = clkit_check_output(ctx, l->dw, "dweight")))) ||
        (l->db && (s = clkit_check_output(ctx, l->db, "dbias"))))
        return s;
    return CLKIT_OK;
}

/* No tokens: the losses reduce to 0, dx is empty, and dweight = g^T x and dbias = 1^T g are
   sums over no tokens, which GEMMs with K = 0 write as zeros in any layout and dtype (the
   empty operands' views need no memory; x's buffer stands in). */
static clkit_status lce_no_tokens(clkit_context *ctx, lce *l, const clkit_tensor *loss)
{
    set_grad_scale(&l->c);
    clkit_status s = reduce_tokens(ctx, loss, &l->c);
    cl_mem stand_in = l->x->buffer;
    if (!s && l->dw) {
        clkit_tensor gt = matrix(stand_in, l->dt, 0, l->c.v, 0, 1, 1);
        s = clkit_matmul(ctx, &gt, l->x, l->dw, NULL);
    }
    if (!s && l->db) {
        clkit_tensor ones = matrix(stand_in, l->dt, 0, 1, 0, 1, 1), g = matrix(stand_in, l->dt, 0, 0, l->c.v, 1, 1);
        clkit_tensor db = matrix(l->db->buffer, l->dt, (int64_t)(l->db->offset / clkit_dtype_size(l->dt)),
                                 1, l->c.v, 1, l->db->strides[0]);
        s = clkit_matmul(ctx, &ones, &g, &db, NULL);
    }
    return s;
}

clkit_status clkit_linear_cross_entropy(clkit_context *ctx, const clkit_tensor *x,
                                        const clkit_tensor *weight, const clkit_tensor *bias,
                                        const clkit_tensor *targets,
                                        const clkit_cross_entropy_options *opt,
                                        const clkit_tensor *loss, const clkit_tensor *dx,
                                        const clkit_tensor *dweight, const clkit_tensor *dbias)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    lce l = {.x = x, .w = weight, .bias = bias, .dx = dx, .dw = dweight, .db = dbias};
    l.c.o = opt ? *opt : clkit_cross_entropy_defaults();
    clkit_status s;
    if ((s = check_options(ctx, &l.c.o)) || (s = check_linear(ctx, &l)) ||
        (s = check_loss_args(ctx, targets, l.c.t, &l.c.o, loss)))
        return s;
    const clkit_tensor *ts[] = {x, weight, bias, targets, loss, l.c.o.z_loss, dx, dweight, dbias};
    const char *names[] = {"x", "weight", "bias", "targets", "loss", "z_loss", "dx", "dweight", "dbias"};
    if ((s = check_overlaps(ctx, 9, ts, names, 4, -1, -1))) return s;
    if (l.c.t == 0) return lce_no_tokens(ctx, &l, loss);
    lce unfused = l; /* validated, nothing allocated yet */
    int tile = fused_tile(ctx, l.dt);
    l.fused = tile >= 0, l.tile = tile >= 0 ? tile : 0;
    l.token_tile = token_tiles[l.fused && clkit_matmul_tma(ctx, CLKIT_FAMILY_CROSS_ENTROPY) ? 0 : 1];
    l.token_tile_ok = l.fused && tile_legal(ctx, l.dt, l.token_tile);
    s = run_linear(ctx, &l, targets, loss);
    release_lce(ctx, &l);
    if (s != CLKIT_ERR_UNSUPPORTED || !l.fused) return s;
    /* Operands the tensor cores cannot take (alignment), or a program that does not build:
       the unfused route starts over and rewrites every output. */
    clkit_log(CLKIT_LOG_INFO, "linear_cross_entropy: not fused: %s", clkit_last_error(ctx));
    clkit_clear_error(ctx);
    s = run_linear(ctx, &unfused, targets, loss);
    release_lce(ctx, &unfused);
    return s;
}

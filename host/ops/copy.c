/* clkit_copy: out = x between any two layouts of one shape; float dtypes convert. */
#include "../internal.h"

#include <stdio.h>

static bool is_float(clkit_dtype t)
{
    return (CLKIT_DT_FLOAT & CLKIT_DT(t)) != 0;
}

/* One dtype: raw bits of its size. Two: the input dtype and the output format. */
static void dtype_options(const clkit_tensor *x, const clkit_tensor *out, char *buf, size_t n)
{
    static const char *out_name[] = {[CLKIT_F32] = "F32", [CLKIT_F16] = "F16",
                                     [CLKIT_BF16] = "BF16"};
    if (x->dtype == out->dtype)
        snprintf(buf, n, "-D ELEM_BYTES=%zu", clkit_dtype_size(x->dtype));
    else
        snprintf(buf, n, "%s -D OUT_DTYPE=%s", clkit_dtype_macro(x->dtype), out_name[out->dtype]);
}

/* True when x and out (merged views) have their unit strides on different dims: *xd and *od. */
static bool transposing(const clkit_view v[2], int ndim, int *xd, int *od)
{
    *xd = *od = -1;
    for (int i = CLKIT_MAX_DIMS - ndim; i < CLKIT_MAX_DIMS; i++) {
        if (v[0].strides.s[i] == 1 && *xd < 0) *xd = i;
        if (v[1].strides.s[i] == 1 && *od < 0) *od = i;
    }
    return *xd >= 0 && *od >= 0 && *xd != *od;
}

/* The dims in copy_transpose's order: the others (batch) first, then od, then xd. */
static void transpose_order(const clkit_view v[2], int xd, int od, clkit_view t[2])
{
    for (int k = 0; k < 2; k++) {
        int d = 0;
        for (int i = 0; i < CLKIT_MAX_DIMS; i++) {
            if (i == xd || i == od) continue;
            t[k].shape.s[d] = v[k].shape.s[i];
            t[k].strides.s[d++] = v[k].strides.s[i];
        }
        t[k].shape.s[2] = v[k].shape.s[od];
        t[k].strides.s[2] = v[k].strides.s[od];
        t[k].shape.s[3] = v[k].shape.s[xd];
        t[k].strides.s[3] = v[k].strides.s[xd];
        t[k].offset = v[k].offset;
    }
}

/* Edge of copy_transpose's tile: a tile row of the narrower dtype should fill a 128-byte
   line, as 32 f32 do; 64 is as far as 2-byte elements get, and u8 stays there too, since a
   128 x 128 tile would not fit in local memory on every device. */
static size_t tile_edge(const clkit_tensor *x, const clkit_tensor *out)
{
    size_t a = clkit_dtype_size(x->dtype), b = clkit_dtype_size(out->dtype);
    return (a < b ? a : b) <= 2 ? 64 : 32;
}

typedef struct transpose_problem {
    const char *dtype_opts;
    size_t tile;
    const clkit_view *t; /* the two views in transpose_order */
} transpose_problem;

/* copy_transpose with TILE_ROWS rows of `tile` work-items: the streaming work-group size to
   start with, halved until it fits the limit; a grid-stride grid over the tiles.
   CLKIT_ERR_UNSUPPORTED (no message) when not even one row fits (a device with fewer than
   `tile` work-items per group): the elementwise copy serves then. */
static clkit_status plan_transpose(clkit_context *ctx, void *arg, size_t wg_limit, clkit_plan *plan)
{
    const transpose_problem *p = arg;
    size_t tile = p->tile, limit = wg_limit ? wg_limit : ctx->props.max_work_group;
    size_t rows = clkit_stream_wg(&ctx->props, 0) / tile;
    if (!rows) rows = 1;
    while (rows > 1 && tile * rows > limit) rows /= 2;
    if (tile * rows > limit) return CLKIT_ERR_UNSUPPORTED;
    plan->file = "copy.cl";
    snprintf(plan->name, sizeof plan->name, "copy_transpose");
    snprintf(plan->options, sizeof plan->options, "%s -D TILE=%zu -D TILE_ROWS=%zu", p->dtype_opts, tile, rows);
    const cl_long *sh = p->t[0].shape.s;
    uint64_t tiles = (uint64_t)sh[0] * (uint64_t)sh[1] * (((uint64_t)sh[2] + tile - 1) / tile) *
                     (((uint64_t)sh[3] + tile - 1) / tile);
    plan->dims = 2;
    plan->local[0] = tile, plan->local[1] = rows;
    plan->global[0] = clkit_stream_groups(&ctx->props, tiles * tile * rows, tile * rows) * tile;
    plan->global[1] = rows;
    return CLKIT_OK;
}

/* The arguments copy_transpose and copy_rows share: x and out, each with its offset and
   strides in v, then the shape. */
static clkit_args view_args(cl_kernel k, const clkit_tensor *x, const clkit_tensor *out, const clkit_view v[2])
{
    clkit_args a = clkit_args_of(k);
    clkit_arg_mem(&a, x->buffer), clkit_arg_long(&a, v[0].offset), clkit_arg_long4(&a, v[0].strides);
    clkit_arg_mem(&a, out->buffer), clkit_arg_long(&a, v[1].offset), clkit_arg_long4(&a, v[1].strides);
    clkit_arg_long4(&a, v[0].shape);
    return a;
}

static clkit_status launch_transpose(clkit_context *ctx, const clkit_plan *plan, cl_kernel k,
                                     const clkit_tensor *x, const clkit_tensor *out,
                                     const clkit_view t[2])
{
    clkit_args a = view_args(k, x, out, t);
    return clkit_plan_run(ctx, plan, &a);
}

/* copy_rows serves rows of at least ROWS_MIN elements: shorter ones would leave most of a
   work-group's lanes idle, where the strided path keeps every lane on an element. */
#define ROWS_MIN 64

/* Whether x and out (merged views) both walk their last dim with the unit stride, in rows
   long enough for copy_rows, and are not both dense (the dense path's vector loads). */
static bool by_rows(const clkit_view v[2], int ndim)
{
    int last = CLKIT_MAX_DIMS - 1;
    return v[0].strides.s[last] == 1 && v[1].strides.s[last] == 1 && v[0].shape.s[last] >= ROWS_MIN &&
           !(clkit_view_is_dense(&v[0], ndim) && clkit_view_is_dense(&v[1], ndim));
}

/* copy_rows: work-groups of lanes along the rows (the streaming size, halved while a row
   fills less than half of it), a work-group a row where the rows fill a resident wave of
   them, else enough a row to fill it. 17 rows of 4100 f16 in 17 work-groups of 256 lanes
   made matmul's staged 17 x 4096 x 4100 on an H200 23 % slower than the strided copy; 4096
   rows of 4100 ran 14 % slower split four ways than a work-group a row (100 x 4100 x 4096's
   staged B: 78.4 against 69.0 us a product). */
static clkit_status launch_rows(clkit_context *ctx, const char *opts, const clkit_tensor *x,
                                const clkit_tensor *out, const clkit_view v[2])
{
    cl_kernel k;
    clkit_status s = clkit_get_kernel(ctx, "copy.cl", "copy_rows", opts, &k);
    if (s) return s;
    const cl_long *sh = v[0].shape.s;
    size_t lanes = clkit_stream_wg(&ctx->props, clkit_kernel_wg_limit(ctx, k));
    while (lanes > ctx->props.warp && (cl_long)lanes / 2 >= sh[CLKIT_MAX_DIMS - 1]) lanes /= 2;
    uint64_t rows = (uint64_t)sh[0] * (uint64_t)sh[1] * (uint64_t)sh[2];
    uint64_t spans = ((uint64_t)sh[CLKIT_MAX_DIMS - 1] + lanes - 1) / lanes;
    /* One resident wave of groups, no more than the rows' spans: rows that fill it keep one each. */
    size_t wave = clkit_persistent_groups(&ctx->props, clkit_occupancy(&ctx->props, lanes, 0, 0), rows * spans);
    uint64_t per_row = (wave + rows - 1) / rows;
    size_t global[2] = {lanes * (size_t)per_row, clkit_stream_groups(&ctx->props, rows * lanes, lanes)};
    size_t local[2] = {lanes, 1};
    clkit_args a = view_args(k, x, out, v);
    return clkit_run(ctx, &a, 2, global, local);
}

clkit_status clkit_copy(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, x, "x", 1, 4, CLKIT_DT_ANY)) ||
        (s = clkit_check_tensor(ctx, out, "out", 1, 4, CLKIT_DT_ANY)) ||
        (s = clkit_check_same_shape(ctx, x, "x", out, "out")))
        return s;
    if (x->dtype != out->dtype && !(is_float(x->dtype) && is_float(out->dtype)))
        return clkit_fail(ctx, CLKIT_ERR_DTYPE,
                          "copy converts only among f32, f16 and bf16, not %s to %s",
                          clkit_dtype_name(x->dtype), clkit_dtype_name(out->dtype));
    if ((s = clkit_check_output(ctx, out, "out")) ||
        (s = clkit_check_disjoint(ctx, out, "out", x, "x", true)))
        return s;
    /* Past the overlap check, a shared first element means out is exactly x: nothing to do. */
    if (clkit_numel(out) == 0 || (x->buffer == out->buffer && x->offset == out->offset))
        return CLKIT_OK;
    char opts[64];
    dtype_options(x, out, opts, sizeof opts);
    const clkit_tensor *ts[] = {x, out};
    clkit_view v[2];
    int ndim, xd, od;
    clkit_views(2, ts, v, &ndim);
    if (transposing(v, ndim, &xd, &od)) {
        clkit_view t[2];
        transpose_order(v, xd, od, t);
        transpose_problem tp = {opts, tile_edge(x, out), t};
        clkit_plan plan;
        cl_kernel k;
        s = clkit_plan_kernel(ctx, plan_transpose, &tp, &plan, &k);
        if (!s) return launch_transpose(ctx, &plan, k, x, out, t);
        if (s != CLKIT_ERR_UNSUPPORTED) return s;
        clkit_clear_error(ctx);
    }
    if (by_rows(v, ndim)) return launch_rows(ctx, opts, x, out, v);
    return clkit_launch_pointwise(ctx, "copy.cl", "copy", opts, 2, ts, NULL, NULL);
}

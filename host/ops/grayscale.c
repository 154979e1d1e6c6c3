/* clkit_rgb_to_gray: (3, H, W) -> (H, W), u8 or f32. */
#include "../internal.h"

#include <stdio.h>

static clkit_status check_args(clkit_context *ctx, const clkit_tensor *rgb,
                               const clkit_tensor *gray)
{
    const unsigned dtypes = CLKIT_DT(CLKIT_U8) | CLKIT_DT(CLKIT_F32);
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, rgb, "rgb", 3, 3, dtypes)) ||
        (s = clkit_check_tensor(ctx, gray, "gray", 2, 2, dtypes)))
        return s;
    if (rgb->dtype != gray->dtype)
        return clkit_fail(ctx, CLKIT_ERR_DTYPE, "rgb (%s) and gray (%s) must share a dtype",
                          clkit_dtype_name(rgb->dtype), clkit_dtype_name(gray->dtype));
    if (rgb->shape[0] != 3 || rgb->shape[1] != gray->shape[0] || rgb->shape[2] != gray->shape[1])
        return clkit_fail(ctx, CLKIT_ERR_SHAPE,
                          "rgb (%lld, %lld, %lld) must be (3, H, W) for gray (H, W) = (%lld, %lld)",
                          (long long)rgb->shape[0], (long long)rgb->shape[1],
                          (long long)rgb->shape[2], (long long)gray->shape[0],
                          (long long)gray->shape[1]);
    if ((s = clkit_check_output(ctx, gray, "gray")) ||
        (s = clkit_check_disjoint(ctx, gray, "gray", rgb, "rgb", false)))
        return s;
    return CLKIT_OK;
}

/* Bytes of each plane a work-item takes along a row: one 16-byte vector access. */
#define SPAN_BYTES 16

/* Whether every span starts SPAN_BYTES-aligned: buffers are (the base address alignment is
   at least 128 bytes), spans sit SPAN_BYTES apart along rows, so the offsets and the plane
   and row strides decide. */
static bool spans_aligned(const clkit_tensor *rgb, const clkit_tensor *gray)
{
    int64_t es = (int64_t)clkit_dtype_size(rgb->dtype);
    return rgb->offset % SPAN_BYTES == 0 && gray->offset % SPAN_BYTES == 0 &&
           rgb->strides[0] * es % SPAN_BYTES == 0 && rgb->strides[1] * es % SPAN_BYTES == 0 &&
           gray->strides[0] * es % SPAN_BYTES == 0;
}

/* Work-group: a warp's worth of lanes along a row, each taking `pixels` of it (fewer lanes
   when the row is narrow), the rest of the streaming group size down the rows. Grid: enough groups to cover the image, no more
   than the streaming heuristic's cap; the kernel loops over what is left. */
static void plan(const struct clkit_device_props *p, size_t wg, uint64_t h, uint64_t w,
                 unsigned pixels, size_t local[2], size_t global[2])
{
    uint64_t spans = (w + pixels - 1) / pixels;
    size_t lx = p->warp >= 8 ? p->warp : 16;
    while (lx > 1 && lx / 2 >= spans) lx /= 2;
    if (lx > wg) lx = wg;
    local[0] = lx;
    local[1] = wg / lx;
    uint64_t gx = (spans + lx - 1) / lx, gy = (h + local[1] - 1) / local[1];
    uint64_t cap = clkit_stream_groups(p, spans * h, lx * local[1]);
    if (gx > cap) gx = cap;
    if (gx * gy > cap) gy = cap / gx ? cap / gx : 1;
    global[0] = (size_t)gx * lx;
    global[1] = (size_t)gy * local[1];
}

clkit_status clkit_rgb_to_gray(clkit_context *ctx, const clkit_tensor *rgb,
                               const clkit_tensor *gray)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    clkit_status s = check_args(ctx, rgb, gray);
    if (s || clkit_numel(gray) == 0) return s;
    size_t es = clkit_dtype_size(rgb->dtype);
    unsigned pixels = (unsigned)(SPAN_BYTES / es);
    bool row_vec = rgb->strides[2] == 1 && gray->strides[1] == 1;
    const char *vec = !row_vec                     ? ""
                      : spans_aligned(rgb, gray) ? " -D ROW_VEC -D ALIGNED"
                                                 : " -D ROW_VEC";
    char opts[80];
    snprintf(opts, sizeof opts, "%s -D PIXELS=%u%s", clkit_dtype_macro(rgb->dtype), pixels, vec);
    cl_kernel k;
    if ((s = clkit_get_kernel(ctx, "grayscale.cl", "gray", opts, &k))) return s;
    cl_long rgb_off = (cl_long)(rgb->offset / es), gray_off = (cl_long)(gray->offset / es);
    cl_long h = gray->shape[0], w = gray->shape[1];
    clkit_args a = clkit_args_of(k);
    clkit_arg_mem(&a, rgb->buffer), clkit_arg_long(&a, rgb_off);
    for (int d = 0; d < 3; d++) clkit_arg_long(&a, rgb->strides[d]);
    clkit_arg_mem(&a, gray->buffer), clkit_arg_long(&a, gray_off);
    clkit_arg_long(&a, gray->strides[0]), clkit_arg_long(&a, gray->strides[1]);
    clkit_arg_long(&a, h), clkit_arg_long(&a, w);
    size_t local[2], global[2];
    plan(&ctx->props, clkit_stream_wg(&ctx->props, clkit_kernel_wg_limit(ctx, k)), (uint64_t)h,
         (uint64_t)w, pixels, local, global);
    return clkit_run(ctx, &a, 2, global, local);
}

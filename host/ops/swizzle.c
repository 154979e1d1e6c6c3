/* clkit_swizzle2d: the tl.swizzle2d demo, a permutation of an (M, N) matrix. */
#include "../internal.h"

#include <stdio.h>

clkit_status clkit_swizzle2d(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out,
                             int group_size)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, x, "x", 2, 2, CLKIT_DT_ANY)) ||
        (s = clkit_check_tensor(ctx, out, "out", 2, 2, CLKIT_DT_ANY)) ||
        (s = clkit_check_same_shape(ctx, x, "x", out, "out")))
        return s;
    if (x->dtype != out->dtype)
        return clkit_fail(ctx, CLKIT_ERR_DTYPE, "x (%s) and out (%s) must share a dtype",
                          clkit_dtype_name(x->dtype), clkit_dtype_name(out->dtype));
    if (group_size < 1)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "group_size = %d; it must be at least 1",
                          group_size);
    if ((s = clkit_check_output(ctx, out, "out")) ||
        (s = clkit_check_disjoint(ctx, out, "out", x, "x", false)))
        return s;
    cl_long m = x->shape[0], n = x->shape[1];
    if (m * n == 0) return CLKIT_OK;
    cl_long group = group_size < m ? group_size : m;
    char opts[32];
    snprintf(opts, sizeof opts, "-D ELEM_BYTES=%zu", clkit_dtype_size(x->dtype));
    cl_kernel k;
    if ((s = clkit_get_kernel(ctx, "swizzle.cl", "swizzle", opts, &k))) return s;
    size_t es = clkit_dtype_size(x->dtype);
    cl_long x_off = (cl_long)(x->offset / es), out_off = (cl_long)(out->offset / es);
    clkit_args a = clkit_args_of(k);
    clkit_arg_mem(&a, x->buffer), clkit_arg_long(&a, x_off);
    clkit_arg_long(&a, x->strides[0]), clkit_arg_long(&a, x->strides[1]);
    clkit_arg_mem(&a, out->buffer), clkit_arg_long(&a, out_off);
    clkit_arg_long(&a, out->strides[0]), clkit_arg_long(&a, out->strides[1]);
    clkit_arg_long(&a, m), clkit_arg_long(&a, n), clkit_arg_long(&a, group);
    size_t wg = clkit_stream_wg(&ctx->props, clkit_kernel_wg_limit(ctx, k));
    size_t global = clkit_stream_groups(&ctx->props, (uint64_t)(m * n), wg) * wg;
    return clkit_run(ctx, &a, 1, &global, &wg);
}

/* clkit_add: out = x + y over same-shaped views. */
#include "../internal.h"

clkit_status clkit_add(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *y,
                       const clkit_tensor *out)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, x, "x", 1, 4, CLKIT_DT_FLOAT)) ||
        (s = clkit_check_tensor(ctx, y, "y", 1, 4, CLKIT_DT_FLOAT)) ||
        (s = clkit_check_tensor(ctx, out, "out", 1, 4, CLKIT_DT_FLOAT)) ||
        (s = clkit_check_same_shape(ctx, x, "x", y, "y")) ||
        (s = clkit_check_same_shape(ctx, x, "x", out, "out")))
        return s;
    if (x->dtype != y->dtype || x->dtype != out->dtype)
        return clkit_fail(ctx, CLKIT_ERR_DTYPE, "x (%s), y (%s) and out (%s) must share a dtype",
                          clkit_dtype_name(x->dtype), clkit_dtype_name(y->dtype),
                          clkit_dtype_name(out->dtype));
    if ((s = clkit_check_output(ctx, out, "out")) ||
        (s = clkit_check_disjoint(ctx, out, "out", x, "x", true)) ||
        (s = clkit_check_disjoint(ctx, out, "out", y, "y", true)))
        return s;
    if (clkit_numel(out) == 0) return CLKIT_OK;
    const clkit_tensor *ts[] = {x, y, out};
    return clkit_launch_pointwise(ctx, "add.cl", "add", clkit_dtype_macro(x->dtype), 3, ts, NULL, NULL);
}

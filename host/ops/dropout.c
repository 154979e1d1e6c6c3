/* clkit_dropout: the mask comes from Philox4x32-10 over (seed, element index); see
   cl/dropout.cl for the exact stream. */
#include "../internal.h"

#include <math.h>

typedef struct dropout_params {
    float p;
    uint64_t seed;
} dropout_params;

static void dropout_args(clkit_args *a, const void *user)
{
    const dropout_params *dp = user;
    /* u >= p with u = k * 2^-24 for an integer k is k >= ceil(p * 2^24): exact, as p * 2^24
       is exact in f32. */
    clkit_arg_uint(a, (cl_uint)ceilf(dp->p * 0x1p24f));
    clkit_arg_float(a, dp->p < 1.0f ? 1.0f / (1.0f - dp->p) : 0.0f);
    clkit_arg_uint(a, (cl_uint)dp->seed);
    clkit_arg_uint(a, (cl_uint)(dp->seed >> 32));
}

clkit_status clkit_dropout(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out,
                           float p, uint64_t seed)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, x, "x", 1, 4, CLKIT_DT_FLOAT)) ||
        (s = clkit_check_tensor(ctx, out, "out", 1, 4, CLKIT_DT_FLOAT)) ||
        (s = clkit_check_same_shape(ctx, x, "x", out, "out")))
        return s;
    if (x->dtype != out->dtype)
        return clkit_fail(ctx, CLKIT_ERR_DTYPE, "x (%s) and out (%s) must share a dtype",
                          clkit_dtype_name(x->dtype), clkit_dtype_name(out->dtype));
    if (!(p >= 0.0f && p <= 1.0f))
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "p = %g is outside [0, 1]", (double)p);
    if ((s = clkit_check_output(ctx, out, "out")) ||
        (s = clkit_check_disjoint(ctx, out, "out", x, "x", true)))
        return s;
    if (clkit_numel(out) == 0) return CLKIT_OK;
    const clkit_tensor *ts[] = {x, out};
    const dropout_params dp = {p, seed};
    return clkit_launch_pointwise(ctx, "dropout.cl", "dropout", clkit_dtype_macro(x->dtype), 2, ts,
                                  dropout_args, &dp);
}

/* clkit_layernorm_forward / _backward: to be written. */
#include "../internal.h"

clkit_status clkit_layernorm_forward(clkit_context *ctx, const clkit_tensor *x,
                                     const clkit_tensor *weight, const clkit_tensor *bias,
                                     float eps, const clkit_tensor *y, const clkit_tensor *mean,
                                     const clkit_tensor *rstd)
{
    (void)x, (void)weight, (void)bias, (void)eps, (void)y, (void)mean, (void)rstd;
    return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "layernorm: not yet");
}

clkit_status clkit_layernorm_backward(clkit_context *ctx, const clkit_tensor *dy,
                                      const clkit_tensor *x, const clkit_tensor *weight,
                                      const clkit_tensor *mean, const clkit_tensor *rstd,
                                      const clkit_tensor *dx, const clkit_tensor *dweight,
                                      const clkit_tensor *dbias)
{
    (void)dy, (void)x, (void)weight, (void)mean, (void)rstd, (void)dx, (void)dweight, (void)dbias;
    return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "layernorm: not yet");
}

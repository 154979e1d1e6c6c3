/* clkit_cross_entropy / clkit_linear_cross_entropy: to be written. */
#include "../internal.h"

clkit_cross_entropy_options clkit_cross_entropy_defaults(void)
{
    clkit_cross_entropy_options o = {.ignore_index = -100, .reduction = CLKIT_REDUCTION_MEAN};
    return o;
}

clkit_status clkit_cross_entropy(clkit_context *ctx, const clkit_tensor *logits,
                                 const clkit_tensor *targets,
                                 const clkit_cross_entropy_options *opt, const clkit_tensor *loss,
                                 const clkit_tensor *dlogits)
{
    (void)logits, (void)targets, (void)opt, (void)loss, (void)dlogits;
    return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "cross_entropy: not yet");
}

clkit_status clkit_linear_cross_entropy(clkit_context *ctx, const clkit_tensor *x,
                                        const clkit_tensor *weight, const clkit_tensor *bias,
                                        const clkit_tensor *targets,
                                        const clkit_cross_entropy_options *opt,
                                        const clkit_tensor *loss, const clkit_tensor *dx,
                                        const clkit_tensor *dweight, const clkit_tensor *dbias)
{
    (void)x, (void)weight, (void)bias, (void)targets, (void)opt, (void)loss, (void)dx;
    (void)dweight, (void)dbias;
    return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "linear_cross_entropy: not yet");
}

/* clkit_attention_forward / _backward: to be written. */
#include "../internal.h"

clkit_attention_options clkit_attention_defaults(void)
{
    clkit_attention_options o = {0};
    return o;
}

clkit_status clkit_attention_forward(clkit_context *ctx, const clkit_tensor *q,
                                     const clkit_tensor *k, const clkit_tensor *v,
                                     const clkit_attention_options *opt, const clkit_tensor *o,
                                     const clkit_tensor *lse)
{
    (void)q, (void)k, (void)v, (void)opt, (void)o, (void)lse;
    return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "attention: not yet");
}

clkit_status clkit_attention_backward(clkit_context *ctx, const clkit_tensor *q,
                                      const clkit_tensor *k, const clkit_tensor *v,
                                      const clkit_tensor *o, const clkit_tensor *dout,
                                      const clkit_tensor *lse, const clkit_attention_options *opt,
                                      const clkit_tensor *dq, const clkit_tensor *dk,
                                      const clkit_tensor *dv)
{
    (void)q, (void)k, (void)v, (void)o, (void)dout, (void)lse, (void)opt, (void)dq, (void)dk;
    (void)dv;
    return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "attention: not yet");
}

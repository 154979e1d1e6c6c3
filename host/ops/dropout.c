#include "../internal.h"
clkit_status clkit_dropout(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out, float p, uint64_t seed)
{
    (void)x, (void)out, (void)p, (void)seed;
    return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "dropout: not yet");
}

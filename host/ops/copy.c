#include "../internal.h"
clkit_status clkit_copy(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out)
{
    (void)x, (void)out;
    return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "copy: not yet");
}

#include "../internal.h"
clkit_status clkit_swizzle2d(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out, int group_size)
{
    (void)x, (void)out, (void)group_size;
    return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "swizzle2d: not yet");
}

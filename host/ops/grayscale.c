#include "../internal.h"
clkit_status clkit_rgb_to_gray(clkit_context *ctx, const clkit_tensor *rgb, const clkit_tensor *gray)
{
    (void)rgb, (void)gray;
    return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "grayscale: not yet");
}

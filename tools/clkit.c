#include <stdio.h>
#include "clkit.h"
int main(void)
{
    clkit_context *ctx;
    clkit_status s = clkit_context_create(&ctx, NULL);
    if (s) { fprintf(stderr, "%s\n", clkit_status_string(s)); return 1; }
    struct clkit_device_props p;
    clkit_device_props(ctx, &p);
    printf("%s | %s | %s\n", p.platform, p.name, p.driver);
    clkit_context_release(ctx);
    return 0;
}

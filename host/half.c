/* Host-side f16 and bf16 conversions (include/clkit.h). f16 is Khronos' CL/cl_half.h, the
   routine the self-test and the tests' references used before these existed; bf16 rounds the
   f32's bits as cl/common.h does on the device, so host and device agree bit for bit. */
#include "clkit.h"

#include <string.h>

#include <CL/cl_half.h>

uint16_t clkit_f32_to_f16(float x) { return cl_half_from_float(x, CL_HALF_RTE); }

float clkit_f16_to_f32(uint16_t h) { return cl_half_to_float(h); }

uint16_t clkit_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    /* The rounding below would carry a NaN whose payload sits in the low half into infinity:
       keep its sign and top payload bits and set the quiet bit instead. */
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    /* Nearest, ties to even: add just under half a bf16 ulp, plus one when the kept part is
       odd. A carry into the exponent is the right result, up to infinity past the largest. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float clkit_bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

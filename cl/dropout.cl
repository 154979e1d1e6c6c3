/* Low-memory dropout, Triton tutorial 04: out = keep ? x / (1 - p) : 0.

   The keep mask is never stored: it is regenerated from (seed, element index) by a
   counter-based generator, so the forward pass writes no mask and a backward pass can
   recompute it from the seed. Traffic is x in and out out; a mask would add a third stream.

   The stream, exactly (tests/ref/dropout.c computes the same on the CPU):
     i       logical index of the element, row-major over the view's shape
     q       i / 4, a 64-bit integer
     r       Philox4x32-10(counter = {lo32(q), hi32(q), 0, 0},
                           key = {lo32(seed), hi32(seed)})[i % 4]
     u       (r >> 8) * 2^-24, uniform on [0, 1) with 24 bits
     keep    u >= p; kept values are multiplied by 1/(1 - p) rounded to f32, in f32.
   The result depends only on (seed, i, p, x): not on the work-group size, grid or device.
   The host passes p as threshold = ceil(p * 2^24), so that keep is (r >> 8) >= threshold in
   integers, and scale = 0 when p = 1 (nothing is kept; no infinity is ever formed).

   One Philox call gives the 4 numbers of elements 4q..4q+3: the dense path moves them with
   one vector load and store. Philox's rounds are two 32-bit mul_hi/mul_lo pairs and xors,
   cheap enough next to 8 bytes of traffic per element (f32) to stay bandwidth-bound. */
#include "common.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

inline uint4 philox4x32_10(ulong q, uint2 key)
{
    uint4 c = (uint4)((uint)q, (uint)(q >> 32), 0u, 0u);
#pragma unroll
    for (int round = 0; round < 10; round++) {
        uint hi0 = mul_hi(PHILOX_M0, c.x), lo0 = PHILOX_M0 * c.x;
        uint hi1 = mul_hi(PHILOX_M1, c.z), lo1 = PHILOX_M1 * c.z;
        c = (uint4)(hi1 ^ c.y ^ key.x, lo1, hi0 ^ c.w ^ key.y, lo0);
        key += (uint2)(PHILOX_W0, PHILOX_W1);
    }
    return c;
}

inline float4 drop4(float4 x, ulong q, uint threshold, float scale, uint2 key)
{
    uint4 r = philox4x32_10(q, key);
    return select((float4)(0.0f), x * scale, (r >> 8) >= (uint4)(threshold));
}

/* Elements 4q..min(4q + 4, n) - 1 one at a time: the strided path and the dense tail. */
inline void drop_quad(__global const elem_t *x, long x_off, long4 x_strides, __global elem_t *out,
                      long out_off, long4 out_strides, long4 shape, long n, long q,
                      uint threshold, float scale, uint2 key)
{
    /* Fixed trip counts: PoCL 3.1 (LLVM 15) miscompiled loops bounded by the element count
       here for bf16, in the dense kernel's tail. */
    long count = n - 4 * q;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int l = 0; l < 4; l++)
        if (l < count) v[l] = LOAD(x, x_off + strided_offset(4 * q + l, shape, x_strides));
    vstore4(drop4(vload4(0, v), (ulong)q, threshold, scale, key), 0, v);
    for (int l = 0; l < 4; l++)
        if (l < count) STORE(out, out_off + strided_offset(4 * q + l, shape, out_strides), v[l]);
}

__kernel void dropout_dense(__global const elem_t *x, long x_off, __global elem_t *out,
                            long out_off, long n, uint threshold, float scale, uint key_lo,
                            uint key_hi)
{
    uint2 key = (uint2)(key_lo, key_hi);
    long stride = get_global_size(0);
    long n4 = n / 4;
    for (long q = get_global_id(0); q < n4; q += stride) {
        float4 v = LOAD4(x + x_off, 4 * q);
        STORE4(out + out_off, 4 * q, drop4(v, (ulong)q, threshold, scale, key));
    }
    if (n % 4 && get_global_id(0) == 0) {
        long4 line = (long4)(1, 1, 1, n), unit = (long4)(0, 0, 0, 1);
        drop_quad(x, x_off, unit, out, out_off, unit, line, n, n4, threshold, scale, key);
    }
}

__kernel void dropout_strided(__global const elem_t *x, long x_off, long4 x_strides,
                              __global elem_t *out, long out_off, long4 out_strides, long4 shape,
                              long n, uint threshold, float scale, uint key_lo, uint key_hi)
{
    uint2 key = (uint2)(key_lo, key_hi);
    long stride = get_global_size(0);
    for (long q = get_global_id(0); q < (n + 3) / 4; q += stride)
        drop_quad(x, x_off, x_strides, out, out_off, out_strides, shape, n, q, threshold, scale,
                  key);
}

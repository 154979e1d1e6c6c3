/* Vector add, the first Triton tutorial: out = x + y.

   Bound by memory traffic: x and y are read once and out written once, the least an add can
   move, so what the kernel does is keep every access wide and coalesced. Each work-item
   strides over the tensor by the grid size, so a grid sized to fill the device (not to the
   data) covers any length. Dense views move 4 elements per load and store, which is what
   reaches peak bandwidth; other views index through their 4-D strides. Arithmetic in f32 for
   every storage dtype. */
#include "common.h"

__kernel void add_dense(__global const elem_t *x, long x_off, __global const elem_t *y, long y_off,
                        __global elem_t *out, long out_off, long n)
{
    x += x_off;
    y += y_off;
    out += out_off;
    long stride = get_global_size(0);
    long n4 = n / 4;
    for (long v = get_global_id(0); v < n4; v += stride)
        STORE4(out, 4 * v, LOAD4(x, 4 * v) + LOAD4(y, 4 * v));
    for (long i = 4 * n4 + get_global_id(0); i < n; i += stride)
        STORE(out, i, LOAD(x, i) + LOAD(y, i));
}

__kernel void add_strided(__global const elem_t *x, long x_off, long4 x_strides,
                          __global const elem_t *y, long y_off, long4 y_strides,
                          __global elem_t *out, long out_off, long4 out_strides, long4 shape, long n)
{
    long stride = get_global_size(0);
    for (long i = get_global_id(0); i < n; i += stride) {
        float v = LOAD(x, x_off + strided_offset(i, shape, x_strides)) +
                  LOAD(y, y_off + strided_offset(i, shape, y_strides));
        STORE(out, out_off + strided_offset(i, shape, out_strides), v);
    }
}

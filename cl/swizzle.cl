/* Triton's tl.swizzle2d as a standalone demo (the practitioner's guide):
   out[swizzle2d(i, j)] = x[i, j] for an (M, N) matrix, any dtype as raw bits.

   swizzle2d cuts the grid into bands of size_g rows (the last may be shorter) and lays each
   band's elements, taken in row-major order, out again in column-major order. Matmul
   program ids pass through it so that consecutive programs share a few rows of A and
   columns of B, which then stay in L2 (Triton tutorial 03); moving the elements of a matrix
   shows the pattern. Each work-item reads one element in row-major order (coalesced) and
   writes it where swizzle2d sends it. The host clamps size_g to M, which leaves the map as
   it is and keeps size_g * N within the element count. */
#include "common.h"

inline long2 swizzle2d(long i, long j, long size_i, long size_j, long size_g)
{
    long ij = i * size_j + j;
    long size_gj = size_g * size_j;
    long group_id = ij / size_gj;
    long off_i = group_id * size_g;
    size_g = min(size_i - off_i, size_g);
    ij = ij % size_gj;
    return (long2)(off_i + ij % size_g, ij / size_g);
}

__kernel void swizzle(__global const bits_t *x, long x_off, long x_row, long x_col,
                      __global bits_t *out, long out_off, long out_row, long out_col, long m,
                      long n, long group)
{
    long stride = get_global_size(0);
    for (long k = get_global_id(0); k < m * n; k += stride) {
        long i = k / n, j = k % n;
        long2 to = swizzle2d(i, j, m, n, group);
        out[out_off + to.x * out_row + to.y * out_col] = x[x_off + i * x_row + j * x_col];
    }
}

/* Copy between any two layouts of one shape: out = x, as raw bits within one dtype, or
   converted through f32 between float storage formats (rounding to nearest even).

   The host merges dims that are contiguous in both views, then picks one of three paths:
   - dense: both views are one run of memory; 4 elements per load and store.
   - transpose: x and out have their unit strides on different dims (a row-major matrix into
     a column-major one, or a batch of them). Walking either view in order makes the other
     side touch one element per memory sector, wasting 7/8 of its traffic for f32. A
     work-group instead stages a TILE x TILE block in local memory (TILE elements of the
     narrower dtype fill a line: 32 f32, 64 f16): it reads the block along x's unit stride
     and writes it along out's, so both sides of global memory coalesce. The tile has one
     column of padding, so that reading it transposed spreads the lanes over different
     banks.
   - rows: x and out both have the unit stride on the last dim but differ elsewhere (a matrix
     with padded or offset rows into a dense one, as matmul's staged operands): lanes walk a
     row in order, so both sides coalesce, and each row's offsets cost a few divisions where
     the strided path pays them for every element.
   - strided: anything else, one element per work-item through the 4-D strides. */
#include "common.h"

#if defined(ELEM_BYTES)
typedef bits_t in_t;
typedef bits_t out_t;
/* At least 32 bits per tile element: narrower ones would pack several lanes into one bank
   word when the tile is read transposed. */
#if ELEM_BYTES == 8
typedef ulong tile_t;
#else
typedef uint tile_t;
#endif
#define IN(p, i) ((p)[i])
#define IN4(p, i) vload4(0, (p) + (i))
#define OUT(p, i, v) ((p)[i] = (v))
#define OUT4(p, i, v) vstore4((v), 0, (p) + (i))
#else
/* Converting: the input format comes from DTYPE_*, the output's from OUT_DTYPE (F32, F16 or
   BF16), both through f32. */
typedef elem_t in_t;
typedef CLKIT_CAT(ty_, OUT_DTYPE) out_t;
typedef float tile_t;
#define IN LOAD
#define IN4 LOAD4
#define OUT(p, i, v) CLKIT_CAT(ST_, OUT_DTYPE)(p, i, v)
#define OUT4(p, i, v) CLKIT_CAT(ST4_, OUT_DTYPE)(p, i, v)
#endif

__kernel void copy_dense(__global const in_t *x, long x_off, __global out_t *out, long out_off,
                         long n)
{
    x += x_off;
    out += out_off;
    long stride = get_global_size(0);
    long n4 = n / 4;
    for (long v = get_global_id(0); v < n4; v += stride)
        OUT4(out, 4 * v, IN4(x, 4 * v));
    for (long i = 4 * n4 + get_global_id(0); i < n; i += stride)
        OUT(out, i, IN(x, i));
}

__kernel void copy_strided(__global const in_t *x, long x_off, long4 x_strides,
                           __global out_t *out, long out_off, long4 out_strides, long4 shape,
                           long n)
{
    long stride = get_global_size(0);
    for (long i = get_global_id(0); i < n; i += stride)
        OUT(out, out_off + strided_offset(i, shape, out_strides),
            IN(x, x_off + strided_offset(i, shape, x_strides)));
}

/* Rows along dimension 1 of the grid, each row's elements along dimension 0 (a row may span
   several work-groups, so that a few long rows still fill the device); row r starts where
   element r * s3 does. */
__kernel void copy_rows(__global const in_t *x, long x_off, long4 x_strides, __global out_t *out,
                        long out_off, long4 out_strides, long4 shape)
{
    long rows = shape.s0 * shape.s1 * shape.s2;
    for (long r = get_group_id(1); r < rows; r += get_num_groups(1)) {
        __global const in_t *xr = x + x_off + strided_offset(r * shape.s3, shape, x_strides);
        __global out_t *orow = out + out_off + strided_offset(r * shape.s3, shape, out_strides);
        for (long c = get_global_id(0); c < shape.s3; c += get_global_size(0))
            OUT(orow, c, IN(xr, c));
    }
}

#if defined(TILE)
/* Dims as the host orders them: s0 and s1 batch, s2 out's unit-stride dim (r), s3 x's (c).
   Each work-group loops over tiles, so the grid can be sized to the device, not the data. */
__kernel __attribute__((reqd_work_group_size(TILE, TILE_ROWS, 1)))
void copy_transpose(__global const in_t *x, long x_off, long4 x_strides, __global out_t *out,
                    long out_off, long4 out_strides, long4 shape)
{
    __local tile_t tile[TILE][TILE + 1];
    long tiles_c = (shape.s3 + TILE - 1) / TILE;
    long per_batch = (shape.s2 + TILE - 1) / TILE * tiles_c;
    long tiles = per_batch * shape.s0 * shape.s1;
    int lx = get_local_id(0), ly = get_local_id(1);
    for (long t = get_group_id(0); t < tiles; t += get_num_groups(0)) {
        long b = t / per_batch, bt = t % per_batch;
        long r0 = bt / tiles_c * TILE, c0 = bt % tiles_c * TILE;
        long b0 = b / shape.s1, b1 = b % shape.s1;
        long xb = x_off + b0 * x_strides.s0 + b1 * x_strides.s1;
        long ob = out_off + b0 * out_strides.s0 + b1 * out_strides.s1;
        long c = c0 + lx; /* lanes along x's unit stride */
        for (int k = ly; k < TILE; k += TILE_ROWS)
            if (r0 + k < shape.s2 && c < shape.s3)
                tile[k][lx] = IN(x, xb + (r0 + k) * x_strides.s2 + c * x_strides.s3);
        barrier(CLK_LOCAL_MEM_FENCE);
        long r = r0 + lx; /* lanes along out's unit stride */
        for (int k = ly; k < TILE; k += TILE_ROWS)
            if (r < shape.s2 && c0 + k < shape.s3)
                OUT(out, ob + r * out_strides.s2 + (c0 + k) * out_strides.s3, tile[lx][k]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
#endif

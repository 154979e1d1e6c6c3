/* Grayscale, the practitioner's-guide demo: gray = 0.2989 R + 0.5870 G + 0.1140 B over a
   (3, H, W) image, computed in f32; u8 rounds to nearest on store.

   A 2-D grid of 2-D work-groups covers the image. Each work-item takes 4 neighbouring pixels
   of a row, so the lanes of a warp read a row segment of every plane in whole memory
   sectors; with unit column strides (ROW_VEC) the 4 pixels move in one vector access per
   plane. Per pixel, 3 elements in and 1 out: the kernel is bound by memory traffic, and the
   gray image is written once instead of being built up plane by plane. The grid loops over
   both dims, so its size follows the device rather than the image. */
#include "common.h"

#define LUMA(r, g, b) (0.2989f * (r) + 0.5870f * (g) + 0.1140f * (b))

__kernel void gray(__global const elem_t *rgb, long rgb_off, long plane, long rgb_row,
                   long rgb_col, __global elem_t *gray, long gray_off, long gray_row,
                   long gray_col, long h, long w)
{
    for (long y = get_global_id(1); y < h; y += get_global_size(1))
        for (long x = 4 * get_global_id(0); x < w; x += 4 * get_global_size(0)) {
            long i = rgb_off + y * rgb_row + x * rgb_col;
            long o = gray_off + y * gray_row + x * gray_col;
#if defined(ROW_VEC)
            if (x + 4 <= w) {
                float4 r = LOAD4(rgb, i), g = LOAD4(rgb, i + plane), b = LOAD4(rgb, i + 2 * plane);
                STORE4(gray, o, LUMA(r, g, b));
                continue;
            }
#endif
            for (int l = 0; l < 4; l++) {
                long il = i + l * rgb_col;
                if (x + l < w)
                    STORE(gray, o + l * gray_col,
                          LUMA(LOAD(rgb, il), LOAD(rgb, il + plane), LOAD(rgb, il + 2 * plane)));
            }
        }
}

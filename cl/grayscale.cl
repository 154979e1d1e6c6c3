/* Grayscale, the practitioner's-guide demo: gray = 0.2989 R + 0.5870 G + 0.1140 B over a
   (3, H, W) image, computed in f32; u8 rounds to nearest on store.

   A 2-D grid of 2-D work-groups covers the image. Each work-item takes PIXELS neighbouring
   pixels of a row (16 bytes of each plane: 16 u8 or 4 f32), so the lanes of a warp read a
   row segment of every plane in whole memory lines; with unit column strides (ROW_VEC) those
   pixels move in one vector access per plane, a single 16-byte load where the host found
   every such access 16-byte aligned (ALIGNED: vload only promises element alignment, so
   compilers split it into narrower loads, one per byte for u8). Per pixel, 3 elements in and
   1 out: the kernel
   is bound by memory traffic, and the gray image is written once instead of being built up
   plane by plane. The grid loops over both dims, so its size follows the device rather than
   the image. */
#include "common.h"

#define LUMA(r, g, b) (0.2989f * (r) + 0.5870f * (g) + 0.1140f * (b))

/* A span: PIXELS elements, 16 bytes. */
#if PIXELS == 16
typedef uchar16 span_t;
#define VLOAD_SPAN vload16
#define VSTORE_SPAN vstore16
#else
typedef float4 span_t;
#define VLOAD_SPAN vload4
#define VSTORE_SPAN vstore4
#endif
#if defined(ALIGNED)
#define LOAD_SPAN(p) (*(__global const span_t *)(p))
#define STORE_SPAN(p, v) (*(__global span_t *)(p) = (v))
#else
#define LOAD_SPAN(p) VLOAD_SPAN(0, (p))
#define STORE_SPAN(p, v) VSTORE_SPAN((v), 0, (p))
#endif

/* One span from column i of rgb (planes `plane` apart) into gray at o, unit strides. */
#if PIXELS == 16
/* Computed in float4 quarters: float16 values do not suit every compiler's vector calling
   convention (PoCL on AVX2 warns about them). */
#define LUMA_U8X4(r, g, b) \
    convert_uchar4_sat_rte(LUMA(convert_float4(r), convert_float4(g), convert_float4(b)))

inline void gray_span(__global const uchar *rgb, long i, long plane, __global uchar *gray, long o)
{
    uchar16 r = LOAD_SPAN(rgb + i), g = LOAD_SPAN(rgb + i + plane);
    uchar16 b = LOAD_SPAN(rgb + i + 2 * plane);
    STORE_SPAN(gray + o,
               (uchar16)(LUMA_U8X4(r.s0123, g.s0123, b.s0123), LUMA_U8X4(r.s4567, g.s4567, b.s4567),
                         LUMA_U8X4(r.s89ab, g.s89ab, b.s89ab), LUMA_U8X4(r.scdef, g.scdef, b.scdef)));
}
#else
inline void gray_span(__global const float *rgb, long i, long plane, __global float *gray, long o)
{
    STORE_SPAN(gray + o, LUMA(LOAD_SPAN(rgb + i), LOAD_SPAN(rgb + i + plane),
                              LOAD_SPAN(rgb + i + 2 * plane)));
}
#endif

__kernel void gray(__global const elem_t *rgb, long rgb_off, long plane, long rgb_row,
                   long rgb_col, __global elem_t *gray, long gray_off, long gray_row,
                   long gray_col, long h, long w)
{
    for (long y = get_global_id(1); y < h; y += get_global_size(1))
        for (long x = PIXELS * get_global_id(0); x < w; x += PIXELS * get_global_size(0)) {
            long i = rgb_off + y * rgb_row + x * rgb_col;
            long o = gray_off + y * gray_row + x * gray_col;
#if defined(ROW_VEC)
            if (x + PIXELS <= w) {
                gray_span(rgb, i, plane, gray, o);
                continue;
            }
#endif
            for (int l = 0; l < PIXELS; l++) {
                long il = i + l * rgb_col;
                if (x + l < w)
                    STORE(gray, o + l * gray_col,
                          LUMA(LOAD(rgb, il), LOAD(rgb, il + plane), LOAD(rgb, il + 2 * plane)));
            }
        }
}

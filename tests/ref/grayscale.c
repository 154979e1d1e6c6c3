/* Grayscale with the luma weights of the Triton grayscale demo (BT.601, as MATLAB's rgb2gray
   rounds them). */
#include "ref.h"

void ref_rgb_to_gray(const double *rgb, double *gray, int64_t h, int64_t w)
{
    const int64_t plane = h * w;
    for (int64_t i = 0; i < plane; i++)
        gray[i] = 0.2989 * rgb[i] + 0.5870 * rgb[plane + i] + 0.1140 * rgb[2 * plane + i];
}

#include "ref.h"
void ref_rgb_to_gray(const double *rgb, double *gray, int64_t h, int64_t w) { (void)rgb, (void)gray, (void)h, (void)w; }

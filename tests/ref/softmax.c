/* Softmax reference in double precision, with PyTorch's answers for non-finite rows: a row
   whose max is -inf (all -inf) or +inf is NaN throughout, because exp(-inf - -inf) and
   exp(inf - inf) are. */
#include "ref.h"

#include <math.h>

void ref_softmax(const double *x, double *out, int64_t rows, int64_t n)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * n;
        double *o = out + r * n, mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < n; i++) mx = xr[i] > mx ? xr[i] : mx;
        for (int64_t i = 0; i < n; i++) sum += (o[i] = exp(xr[i] - mx));
        for (int64_t i = 0; i < n; i++) o[i] /= sum;
    }
}

/* Layer norm references in double precision: the forward with the two-pass variance, the
   backward of the Triton tutorial written out in full sums. */
#include "ref.h"

#include <math.h>

void ref_layernorm_forward(const double *x, const double *w, const double *b, double eps,
                           int64_t m, int64_t n, double *y, double *mean, double *rstd)
{
    for (int64_t r = 0; r < m; r++) {
        const double *xr = x + r * n;
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < n; i++) sum += xr[i];
        double mu = sum / (double)n;
        for (int64_t i = 0; i < n; i++) sq += (xr[i] - mu) * (xr[i] - mu);
        double rs = 1.0 / sqrt(sq / (double)n + eps);
        if (mean) mean[r] = mu;
        if (rstd) rstd[r] = rs;
        for (int64_t i = 0; y && i < n; i++)
            y[r * n + i] = (xr[i] - mu) * rs * (w ? w[i] : 1.0) + (b ? b[i] : 0.0);
    }
}

/* With xhat = (x - mean) rstd and wdy = w dy: dx = (wdy - (xhat c1 + c2)) rstd, where c1 and
   c2 are the row means of xhat wdy and of wdy; dw = sum over rows of dy xhat, db of dy. */
void ref_layernorm_backward(const double *dy, const double *x, const double *w,
                            const double *mean, const double *rstd, int64_t m, int64_t n,
                            double *dx, double *dw, double *db, double *dx_mag, double *dw_mag,
                            double *db_mag)
{
    for (int64_t i = 0; i < n; i++) {
        if (dw) dw[i] = 0;
        if (db) db[i] = 0;
        if (dw_mag) dw_mag[i] = 0;
        if (db_mag) db_mag[i] = 0;
    }
    for (int64_t r = 0; r < m; r++) {
        const double *xr = x + r * n, *gr = dy + r * n;
        double c1 = 0, c2 = 0, a1 = 0, a2 = 0;
        for (int64_t i = 0; i < n; i++) {
            double xhat = (xr[i] - mean[r]) * rstd[r], wdy = (w ? w[i] : 1.0) * gr[i];
            c1 += xhat * wdy;
            c2 += wdy;
            a1 += fabs(xhat * wdy);
            a2 += fabs(wdy);
            if (dw) dw[i] += gr[i] * xhat;
            if (db) db[i] += gr[i];
            if (dw_mag) dw_mag[i] += fabs(gr[i] * xhat);
            if (db_mag) db_mag[i] += fabs(gr[i]);
        }
        c1 /= (double)n, c2 /= (double)n, a1 /= (double)n, a2 /= (double)n;
        for (int64_t i = 0; i < n; i++) {
            double xhat = (xr[i] - mean[r]) * rstd[r], wdy = (w ? w[i] : 1.0) * gr[i];
            if (dx) dx[r * n + i] = (wdy - (xhat * c1 + c2)) * rstd[r];
            if (dx_mag) dx_mag[r * n + i] = (fabs(wdy) + fabs(xhat) * a1 + a2) * rstd[r];
        }
    }
}

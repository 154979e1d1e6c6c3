/* Cross-entropy references in double precision, as include/clkit.h defines the ops: soft-cap,
   label smoothing as PyTorch's, z-loss, ignored tokens, the three reductions (the mean is over
   tokens not ignored, 0 when there are none) and the gradients of the reduced loss. Rows whose
   logits are all -inf (lse -inf), or that hold +inf or NaN, have NaN losses and gradients as
   in PyTorch; the z-loss of an all -inf row is inf. */
#include "ref.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

static double capped(double z, double cap) { return cap > 0 ? cap * tanh(z / cap) : z; }

/* Loss and z-loss of one row; its gradient times scale into g (may be NULL). */
static void row(const double *z, int64_t y, int64_t v, const clkit_cross_entropy_options *o,
                double scale, double *loss, double *zloss, double *g)
{
    double eps = o->label_smoothing, zs = o->z_loss_scale, cap = o->softcap;
    double m = -INFINITY, s = 0, sz = 0;
    for (int64_t j = 0; j < v; j++) m = fmax(m, capped(z[j], cap));
    for (int64_t j = 0; j < v; j++) {
        double c = capped(z[j], cap);
        s += exp(c - m);
        sz += c;
    }
    double lse = m == -INFINITY ? -INFINITY : m + log(s);
    *zloss = zs > 0 ? zs * lse * lse : 0;
    *loss = lse - (1 - eps) * capped(z[y], cap) - (eps > 0 ? eps * sz / (double)v : 0) + *zloss;
    for (int64_t j = 0; g && j < v; j++) {
        double c = capped(z[j], cap), t = cap > 0 ? c / cap : 0;
        g[j] = scale * (exp(c - lse) * (1 + 2 * zs * lse) - (1 - eps) * (j == y) - eps / (double)v) *
               (1 - t * t);
    }
}

int64_t ref_cross_entropy(const double *logits, const int64_t *targets, int64_t t, int64_t v,
                          const clkit_cross_entropy_options *o, double *loss, double *zloss,
                          double *dlogits)
{
    int64_t count = 0;
    for (int64_t r = 0; r < t; r++) count += targets[r] != o->ignore_index;
    bool none = o->reduction == CLKIT_REDUCTION_NONE;
    double scale = o->reduction == CLKIT_REDUCTION_MEAN ? (count ? 1.0 / (double)count : 0) : 1;
    double sum = 0, zsum = 0;
    for (int64_t r = 0; r < t; r++) {
        double l = 0, zl = 0, *g = dlogits ? dlogits + r * v : NULL;
        if (targets[r] != o->ignore_index)
            row(logits + r * v, targets[r], v, o, scale, &l, &zl, g);
        else
            for (int64_t j = 0; g && j < v; j++) g[j] = 0;
        if (none) {
            loss[r] = l;
            if (zloss) zloss[r] = zl;
        }
        sum += l, zsum += zl;
    }
    if (!none) {
        loss[0] = sum * scale;
        if (zloss) zloss[0] = zsum * scale;
    }
    return count;
}

/* dx = dz w, dw = dz^T x, db = column sums of dz, and the same sums of |terms| (each output
   may be NULL). Token by token, so that every inner loop walks memory in order: with tokens
   innermost, T 8192, D 64, V 4000 took a minute. */
static void chain_rule(const double *x, const double *w, const double *dz, int64_t t, int64_t v,
                       int64_t d, const ref_lce_grads *g)
{
    double *sums[6] = {g->dx, g->dx_abs, g->dw, g->dw_abs, g->db, g->db_abs};
    int64_t sizes[6] = {t * d, t * d, v * d, v * d, v, v};
    for (int i = 0; i < 6; i++)
        for (int64_t k = 0; sums[i] && k < sizes[i]; k++) sums[i][k] = 0;
    for (int64_t r = 0; r < t; r++)
        for (int64_t j = 0; j < v; j++) {
            double gz = dz[r * v + j];
            const double *wj = w + j * d, *xr = x + r * d;
            for (int64_t k = 0; k < d; k++) {
                if (g->dx) g->dx[r * d + k] += gz * wj[k];
                if (g->dx_abs) g->dx_abs[r * d + k] += fabs(gz * wj[k]);
                if (g->dw) g->dw[j * d + k] += gz * xr[k];
                if (g->dw_abs) g->dw_abs[j * d + k] += fabs(gz * xr[k]);
            }
            if (g->db) g->db[j] += gz;
            if (g->db_abs) g->db_abs[j] += fabs(gz);
        }
}

int64_t ref_linear_cross_entropy(const double *x, const double *w, const double *b,
                                 const int64_t *targets, int64_t t, int64_t v, int64_t d,
                                 const clkit_cross_entropy_options *o, double *loss,
                                 double *zloss, const ref_lce_grads *g)
{
    double *z = calloc((size_t)(t * v), sizeof *z), *dz = malloc((size_t)(t * v) * sizeof *dz);
    if (!z || !dz) abort();
    for (int64_t r = 0; r < t; r++)
        for (int64_t j = 0; j < v; j++) {
            double acc = b ? b[j] : 0;
            for (int64_t k = 0; k < d; k++) acc += x[r * d + k] * w[j * d + k];
            z[r * v + j] = acc;
        }
    int64_t count = ref_cross_entropy(z, targets, t, v, o, loss, zloss, dz);
    if (g) chain_rule(x, w, dz, t, v, d, g);
    free(z);
    free(dz);
    return count;
}

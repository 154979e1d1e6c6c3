#include "ref.h"

#include <math.h>

void ref_matmul(const ref_matrix *a, const ref_matrix *b, ref_matrix *c, int64_t batch,
                int64_t m, int64_t n, int64_t k, double alpha, double beta, int act, double slope,
                double *abs_sum)
{
    for (int64_t z = 0; z < batch; z++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0, mag = 0;
                for (int64_t p = 0; p < k; p++) {
                    double x = a->v[z * a->s[0] + i * a->s[1] + p * a->s[2]];
                    double y = b->v[z * b->s[0] + p * b->s[1] + j * b->s[2]];
                    acc += x * y;
                    mag += fabs(x * y);
                }
                double *out = &c->v[z * c->s[0] + i * c->s[1] + j * c->s[2]];
                double old = beta != 0 ? beta * *out : 0, v = alpha * acc + old;
                if (act == 1) v = v > 0 ? v : 0;
                else if (act == 2) v = v >= 0 ? v : v * slope;
                *out = v;
                if (abs_sum) abs_sum[(z * m + i) * n + j] = fabs(alpha) * mag + fabs(old);
            }
}

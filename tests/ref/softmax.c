#include "ref.h"
void ref_softmax(const double *x, double *out, int64_t rows, int64_t n) { (void)x, (void)out, (void)rows, (void)n; }

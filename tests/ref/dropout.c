#include "ref.h"
void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) { (void)ctr, (void)key, (void)out; }
double ref_dropout_one(double x, uint64_t i, double p, uint64_t seed) { (void)i, (void)p, (void)seed; return x; }

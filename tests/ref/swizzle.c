/* Triton's tl.swizzle2d, line for line (python/triton/language/standard.py). */
#include "ref.h"

void ref_swizzle2d_index(int64_t i, int64_t j, int64_t size_i, int64_t size_j, int64_t size_g,
                         int64_t *new_i, int64_t *new_j)
{
    int64_t ij = i * size_j + j;
    int64_t size_gj = size_g * size_j;
    int64_t group_id = ij / size_gj;
    int64_t off_i = group_id * size_g;
    size_g = size_i - off_i < size_g ? size_i - off_i : size_g;
    ij = ij % size_gj;
    *new_i = off_i + ij % size_g;
    *new_j = ij / size_g;
}

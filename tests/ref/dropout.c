/* Philox4x32-10 and the dropout stream of cl/dropout.cl, written from the definitions
   (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; Random123). */
#include "ref.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k[2] = {key[0], key[1]};
    for (int round = 0; round < 10; round++) {
        if (round) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c[0], p1 = (uint64_t)PHILOX_M1 * c[2];
        uint32_t next[4] = {(uint32_t)(p1 >> 32) ^ c[1] ^ k[0], (uint32_t)p1,
                            (uint32_t)(p0 >> 32) ^ c[3] ^ k[1], (uint32_t)p0};
        for (int i = 0; i < 4; i++) c[i] = next[i];
    }
    for (int i = 0; i < 4; i++) out[i] = c[i];
}

double ref_dropout_one(double x, uint64_t i, double p, uint64_t seed)
{
    uint64_t q = i / 4;
    const uint32_t ctr[4] = {(uint32_t)q, (uint32_t)(q >> 32), 0, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t r[4];
    ref_philox4x32_10(ctr, key, r);
    double u = (double)(r[i % 4] >> 8) * 0x1p-24;
    if (u < p) return 0.0;
    /* The kernel scales in f32 by 1/(1 - p) rounded to f32. */
    float scale = 1.0f / (1.0f - (float)p);
    float y = (float)x * scale;
    return y;
}

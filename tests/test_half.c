/* The host conversions clkit_f32_to_f16 / _bf16 and back against values computed here another
   way, in double arithmetic from the formats' definitions: every 16-bit pattern back to f32;
   to 16 bits, every interval between neighbouring f16 / bf16 values at its ends, its midpoint
   (the tie) and the floats either side of both, every f32 exponent with the mantissas that
   decide rounding, and a few million random floats; and named edge cases as bits. */
#include "util.h"

#include <float.h>
#include <math.h>
#include <string.h>

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* A 16-bit float of `mant` mantissa bits, bias 2^(ebits-1) - 1, decoded from its definition. */
static double decode(uint16_t h, int ebits, int mant)
{
    int emax = (1 << ebits) - 1, bias = (1 << (ebits - 1)) - 1;
    int e = (h >> mant) & emax, m = h & ((1 << mant) - 1);
    double v = e == 0      ? ldexp(m, 1 - bias - mant)
               : e == emax ? (m ? NAN : INFINITY)
                           : ldexp(m + (1 << mant), e - bias - mant);
    return h >> 15 ? -v : v;
}

static double f16_value(uint16_t h) { return decode(h, 5, 10); }
static double bf16_value(uint16_t h) { return decode(h, 8, 7); }

/* x rounded to the nearest value with `mant` mantissa bits and exponents down to emin (below:
   subnormal steps of 2^(emin - mant)), ties to even (nearbyint in the default rounding mode),
   infinity where that reaches 2^(emax + 1). Every step is exact in double. */
static double round_to(double x, int mant, int emin, int emax)
{
    if (!isfinite(x) || x == 0) return x;
    int e;
    frexp(fabs(x), &e); /* |x| in [2^(e-1), 2^e) */
    int q = e - 1 - mant < emin - mant ? emin - mant : e - 1 - mant;
    double r = ldexp(nearbyint(ldexp(fabs(x), -q)), q);
    return copysign(r >= ldexp(1, emax + 1) ? INFINITY : r, x);
}

static double f16_round(double x) { return round_to(x, 10, -14, 15); }
static double bf16_round(double x) { return round_to(x, 7, -126, 127); }

/* Mismatches of one check, the first kept for the message: one assertion per check, since
   Check reports each assertion to its parent process. */
typedef struct tally {
    long n, bad;
    uint32_t first_in, first_got;
} tally;

static void count(tally *t, int ok, uint32_t in, uint32_t got)
{
    t->n++;
    if (!ok && t->bad++ == 0) t->first_in = in, t->first_got = got;
}

/* A NaN in, a NaN of its sign out, quiet (the top mantissa bit set). */
static int nan_ok(uint32_t in, uint16_t got, int mant)
{
    uint16_t exp = (uint16_t)(0x7fff & ~((1u << mant) - 1));
    return (got & exp) == exp && (got & (1u << (mant - 1))) && (got >> 15) == (in >> 31);
}

static void to_f16(tally *t, float x)
{
    uint16_t got = clkit_f32_to_f16(x);
    double want = f16_round(x), v = f16_value(got);
    count(t, isnan(x) ? nan_ok(bits_of(x), got, 10) : v == want && !signbit(v) == !signbit(want),
          bits_of(x), got);
}

static void to_bf16(tally *t, float x)
{
    uint16_t got = clkit_f32_to_bf16(x);
    double want = bf16_round(x), v = bf16_value(got);
    count(t, isnan(x) ? nan_ok(bits_of(x), got, 7) : v == want && !signbit(v) == !signbit(want),
          bits_of(x), got);
}

static void expect_clean(const tally *t, const char *what)
{
    ck_assert_msg(t->bad == 0, "%s: %ld of %ld wrong, first 0x%08x -> 0x%04x", what, t->bad, t->n,
                  (unsigned)t->first_in, (unsigned)t->first_got);
}

START_TEST(every_pattern_to_f32)
{
    tally f16 = {0}, bf16 = {0}, f16_back = {0}, bf16_back = {0};
    for (uint32_t h = 0; h <= 0xffff; h++) {
        double want = f16_value((uint16_t)h);
        float got = clkit_f16_to_f32((uint16_t)h);
        /* NaN: sign and payload carried over, made quiet; bf16's below are kept as they are. */
        int ok = isnan(want) ? bits_of(got) == ((h & 0x8000u) << 16 | 0x7fc00000u | (h & 0x3ffu) << 13)
                             : got == want && !signbit(got) == !signbit(want);
        count(&f16, ok, h, (uint16_t)(bits_of(got) >> 16));
        if (!isnan(want)) count(&f16_back, clkit_f32_to_f16(got) == h, h, clkit_f32_to_f16(got));

        want = bf16_value((uint16_t)h);
        got = clkit_bf16_to_f32((uint16_t)h);
        ok = isnan(want) ? bits_of(got) == h << 16 : got == want && !signbit(got) == !signbit(want);
        count(&bf16, ok, h, (uint16_t)(bits_of(got) >> 16));
        if (!isnan(want)) count(&bf16_back, clkit_f32_to_bf16(got) == h, h, clkit_f32_to_bf16(got));
    }
    expect_clean(&f16, "f16 -> f32");
    expect_clean(&bf16, "bf16 -> f32");
    expect_clean(&f16_back, "f16 -> f32 -> f16");
    expect_clean(&bf16_back, "bf16 -> f32 -> bf16");
}
END_TEST

/* Each interval [value(h), value(h + 1)] of non-negative finite h, and its mirror: the ends,
   the midpoint (exact in f32: one bit more than the 16-bit format has) and the floats either
   side of each. The last finite value's upper neighbour is 2^(emax + 1), where infinity begins. */
static void intervals(tally *t, void (*conv)(tally *, float), double (*value)(uint16_t),
                      uint16_t last_finite, double top)
{
    for (uint32_t h = 0; h <= last_finite; h++) {
        double lo = value((uint16_t)h), hi = h == last_finite ? top : value((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2);
        float xs[] = {(float)lo, nextafterf((float)lo, INFINITY), nextafterf(mid, 0), mid,
                      nextafterf(mid, INFINITY), nextafterf((float)hi, 0)};
        for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
            conv(t, xs[i]);
            conv(t, -xs[i]);
        }
    }
}

START_TEST(f16_every_interval)
{
    tally t = {0};
    intervals(&t, to_f16, f16_value, 0x7bff, 65536.0);
    expect_clean(&t, "f32 -> f16 at interval ends and midpoints");
}
END_TEST

START_TEST(bf16_every_interval)
{
    tally t = {0};
    intervals(&t, to_bf16, bf16_value, 0x7f7f, ldexp(1, 128));
    expect_clean(&t, "f32 -> bf16 at interval ends and midpoints");
}
END_TEST

/* Every sign and exponent of f32 (zeros, subnormals, infinities and NaNs included) with the
   mantissas at f16's and bf16's rounding positions (13 and 16 bits dropped: the bit below the
   kept part, the sticky bits, the kept lsb), then random floats. */
START_TEST(f32_exponents_and_random)
{
    static const uint32_t mants[] = {0, 1, 2, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x3001,
                                     0x7fff, 0x8000, 0x8001, 0xffff, 0x10000, 0x18000, 0x18001,
                                     0x200000, 0x3ff000, 0x400000, 0x401000, 0x7fe000, 0x7ff000,
                                     0x7f8000, 0x7fffff};
    tally f16 = {0}, bf16 = {0};
    for (uint32_t se = 0; se < 512; se++)
        for (size_t i = 0; i < sizeof mants / sizeof mants[0]; i++) {
            float x = from_bits(se << 23 | mants[i]);
            to_f16(&f16, x);
            to_bf16(&bf16, x);
        }
    uint64_t s = 12345;
    for (long i = 0; i < (1l << 22); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float x = from_bits((uint32_t)(s >> 32));
        to_f16(&f16, x);
        to_bf16(&bf16, x);
    }
    expect_clean(&f16, "f32 -> f16, exponents and random");
    expect_clean(&bf16, "f32 -> bf16, exponents and random");
}
END_TEST

/* Named cases as bits, from the formats' definitions. */
START_TEST(edge_cases)
{
    static const struct {
        uint32_t in;
        uint16_t f16, bf16;
    } cases[] = {
        {0x00000000, 0x0000, 0x0000}, /* +0 */
        {0x80000000, 0x8000, 0x8000}, /* -0 */
        {0x3f800000, 0x3c00, 0x3f80}, /* 1 */
        {0xc0000000, 0xc000, 0xc000}, /* -2 */
        {0x3dcccccd, 0x2e66, 0x3dcd}, /* 0.1f */
        {0x3f801000, 0x3c00, 0x3f80}, /* 1 + 2^-11: f16 tie, to even (down) */
        {0x3f803000, 0x3c02, 0x3f80}, /* 1 + 3 * 2^-11: f16 tie, to even (up) */
        {0x3f808000, 0x3c04, 0x3f80}, /* 1 + 2^-8: bf16 tie, to even (down) */
        {0x3f818000, 0x3c0c, 0x3f82}, /* 1 + 3 * 2^-8: bf16 tie, to even (up) */
        {0x477fe000, 0x7bff, 0x4780}, /* 65504, f16's largest */
        {0x477fefff, 0x7bff, 0x4780}, /* just below 65520 */
        {0x477ff000, 0x7c00, 0x4780}, /* 65520: f16 tie, to even = infinity */
        {0x38800000, 0x0400, 0x3880}, /* 2^-14, f16's smallest normal */
        {0x387fc000, 0x03ff, 0x3880}, /* f16's largest subnormal */
        {0x33800000, 0x0001, 0x3380}, /* 2^-24, f16's smallest subnormal */
        {0x33000000, 0x0000, 0x3300}, /* 2^-25: tie, to even = 0 */
        {0x33000001, 0x0001, 0x3300}, /* just above 2^-25 */
        {0xb3c00000, 0x8002, 0xb3c0}, /* -1.5 * 2^-24: tie, to even */
        {0x7f7fffff, 0x7c00, 0x7f80}, /* FLT_MAX: past bf16's largest by more than half */
        {0x7f7f7fff, 0x7c00, 0x7f7f}, /* just below bf16's tie to infinity */
        {0x7f7f8000, 0x7c00, 0x7f80}, /* bf16 tie at the top, to even = infinity */
        {0x00000001, 0x0000, 0x0000}, /* f32's smallest subnormal */
        {0x00008000, 0x0000, 0x0000}, /* bf16 tie at 0, to even */
        {0x00018000, 0x0000, 0x0002}, /* bf16 subnormal tie, to even (up) */
        {0x007fffff, 0x0000, 0x0080}, /* f32's largest subnormal rounds to bf16's smallest normal */
        {0x7f800000, 0x7c00, 0x7f80}, /* +inf */
        {0xff800000, 0xfc00, 0xff80}, /* -inf */
        {0x7fc00000, 0x7e00, 0x7fc0}, /* quiet NaN */
        {0x7f800001, 0x7e00, 0x7fc0}, /* signalling NaN whose payload both formats drop */
        {0xffa00000, 0xff00, 0xffe0}, /* negative signalling NaN: quiet, payload kept */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float x = from_bits(cases[i].in);
        uint16_t h = clkit_f32_to_f16(x), b = clkit_f32_to_bf16(x);
        ck_assert_msg(h == cases[i].f16 && b == cases[i].bf16,
                      "0x%08x: f16 0x%04x (want 0x%04x), bf16 0x%04x (want 0x%04x)",
                      (unsigned)cases[i].in, h, cases[i].f16, b, cases[i].bf16);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("half");
    TCase *tc = tu_tcase("half");
    tcase_add_test(tc, every_pattern_to_f32);
    tcase_add_test(tc, f16_every_interval);
    tcase_add_test(tc, bf16_every_interval);
    tcase_add_test(tc, f32_exponents_and_random);
    tcase_add_test(tc, edge_cases);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

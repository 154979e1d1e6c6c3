/* Launch heuristics with the property sets of real devices: the chosen launch never exceeds a
   device or kernel limit and is a whole number of warps/wavefronts. */
#include "devices.h"
#include "heuristics.h"
#include "util.h"

typedef struct clkit_device_props (*device_fn)(void);
static const device_fn devices[] = {dev_h100, dev_mi300x, dev_rdna3, dev_pocl};
#define NDEV (sizeof devices / sizeof *devices)
/* A kernel's own limit: AMD gives kernels without reqd_work_group_size 256. */
static const size_t kernel_limits[] = {0, 1024, 256, 128, 64, 1};

START_TEST(stream_work_group)
{
    for (size_t d = 0; d < NDEV; d++) {
        struct clkit_device_props p = devices[d]();
        for (size_t k = 0; k < sizeof kernel_limits / sizeof *kernel_limits; k++) {
            size_t lim = kernel_limits[k], wg = clkit_stream_wg(&p, lim);
            ck_assert_msg(wg >= 1 && wg <= p.max_work_group, "%s: wg %zu", p.name, wg);
            if (lim) ck_assert_msg(wg <= lim, "%s: wg %zu over kernel limit %zu", p.name, wg, lim);
            if (!lim || lim >= p.warp)
                ck_assert_msg(wg % p.warp == 0, "%s: wg %zu not whole warps of %u", p.name, wg, p.warp);
        }
    }
}
END_TEST

START_TEST(stream_groups)
{
    static const uint64_t items[] = {1, 7, 256, 1000, 1u << 20, 1ull << 27, 1ull << 40};
    for (size_t d = 0; d < NDEV; d++) {
        struct clkit_device_props p = devices[d]();
        size_t wg = clkit_stream_wg(&p, 0);
        for (size_t i = 0; i < sizeof items / sizeof *items; i++) {
            size_t g = clkit_stream_groups(&p, items[i], wg);
            ck_assert(g >= 1);
            ck_assert_msg((uint64_t)(g - 1) * wg < items[i], "%s: %zu groups for %llu items",
                          p.name, g, (unsigned long long)items[i]);
            if (items[i] >= (1ull << 27))
                ck_assert_msg(g >= p.compute_units, "%s: %zu groups leave CUs idle", p.name, g);
        }
    }
}
END_TEST

START_TEST(occupancy)
{
    for (size_t d = 0; d < NDEV; d++) {
        struct clkit_device_props p = devices[d]();
        unsigned tpc = clkit_threads_per_cu(&p);
        ck_assert(tpc >= 1);
        if (p.is_gpu) ck_assert_msg(tpc % p.warp == 0, "%s: %u threads per CU", p.name, tpc);
        for (size_t wg = 32; wg <= 1024; wg *= 2) {
            unsigned o = clkit_occupancy(&p, wg, 0, 0);
            ck_assert(o >= 1);
            if (p.is_gpu) ck_assert_msg(o * wg <= tpc || o == 1, "%s: occupancy %u x %zu", p.name, o, wg);
            /* More local memory or registers per group can only lower occupancy. */
            ck_assert(clkit_occupancy(&p, wg, p.local_mem, 0) <= o);
            ck_assert(clkit_occupancy(&p, wg, 0, 255) <= o);
        }
        ck_assert_uint_eq(clkit_persistent_groups(&p, 4, 3), 3);
        ck_assert_uint_eq(clkit_persistent_groups(&p, 2, 1u << 30), 2 * p.compute_units);
        ck_assert_uint_eq(clkit_persistent_groups(&p, 0, 0), 1);
    }
    struct clkit_device_props h = dev_h100();
    ck_assert_uint_eq(clkit_threads_per_cu(&h), 2048);
    ck_assert_uint_eq(clkit_occupancy(&h, 256, 0, 0), 8);
    ck_assert_uint_eq(clkit_occupancy(&h, 256, 0, 64), 4); /* 65536 regs / (256 x 64) */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("heuristics");
    TCase *tc = tu_tcase("heuristics");
    tcase_add_test(tc, stream_work_group);
    tcase_add_test(tc, stream_groups);
    tcase_add_test(tc, occupancy);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

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

/* A borrowed config starves the device only when it leaves compute units idle and the
   alternative has more groups: 1024^3 in 256 x 128 tiles (32 groups) against 128 x 128 (64). */
START_TEST(starving_grids)
{
    struct clkit_device_props h = dev_h100();
    ck_assert(clkit_grid_starves(&h, 32, 64));
    ck_assert(!clkit_grid_starves(&h, 32, 32));
    ck_assert(!clkit_grid_starves(&h, 32, 16));
    ck_assert(!clkit_grid_starves(&h, 132, 1024));
    ck_assert(!clkit_grid_starves(&h, 512, 1024));
}
END_TEST

/* Every row length from 1 to 2^22 and every kernel limit: the group fits the device and the
   kernel, holds whole warps when it can, and the plan covers the row. */
START_TEST(softmax_plans)
{
    static const int64_t spans[] = {1, 2, 3, 31, 32, 33, 128, 255, 256, 257, 1000, 1024, 1025,
                                    4096, 4099, 12672, 32768, 65537, 1 << 20, 1 << 22};
    static const unsigned vecs[] = {1, 4};
    for (size_t d = 0; d < NDEV; d++) {
        struct clkit_device_props p = devices[d]();
        for (size_t k = 0; k < sizeof kernel_limits / sizeof *kernel_limits; k++)
            for (size_t v = 0; v < 2; v++)
                for (size_t i = 0; i < sizeof spans / sizeof *spans; i++) {
                    size_t lim = kernel_limits[k];
                    clkit_softmax_plan pl = clkit_softmax_heuristic(&p, spans[i], vecs[v], lim);
                    size_t wg = (size_t)pl.team * pl.rows;
                    ck_assert_msg(pl.team >= 1 && pl.rows >= 1 && pl.items >= 1, "%s: empty plan", p.name);
                    ck_assert_msg((pl.team & (pl.team - 1)) == 0, "%s: team %u", p.name, pl.team);
                    ck_assert_msg(wg <= p.max_work_group, "%s: group %zu over the device", p.name, wg);
                    if (lim) ck_assert_msg(wg <= lim, "%s: group %zu over kernel limit %zu", p.name, wg, lim);
                    ck_assert_msg(pl.items % pl.vec == 0, "%s: items %u, vec %u", p.name, pl.items, pl.vec);
                    if (!pl.online)
                        ck_assert_msg((int64_t)pl.team * pl.items >= spans[i],
                                      "%s: %u x %u holds less than %lld", p.name, pl.team, pl.items,
                                      (long long)spans[i]);
                    if (p.is_gpu && (!lim || lim >= p.warp) && spans[i] >= 4096)
                        ck_assert_msg(wg % p.warp == 0, "%s: group %zu for n %lld is not whole warps",
                                      p.name, wg, (long long)spans[i]);
                }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("heuristics");
    TCase *tc = tu_tcase("heuristics");
    tcase_add_test(tc, stream_work_group);
    tcase_add_test(tc, stream_groups);
    tcase_add_test(tc, occupancy);
    tcase_add_test(tc, starving_grids);
    tcase_add_test(tc, softmax_plans);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

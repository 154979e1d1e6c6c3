/* Launch heuristics from device properties, the way the Triton softmax tutorial sizes its
   grid: resident work-groups per compute unit from the kernel's resource use, times the
   number of compute units. */
#include "heuristics.h"

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

static unsigned pow2_floor(size_t x)
{
    unsigned p = 1;
    while ((size_t)p * 2 <= x) p *= 2;
    return p;
}

static unsigned pow2_ceil(uint64_t x)
{
    unsigned p = 1;
    while (p < x && p < (1u << 30)) p *= 2;
    return p;
}

unsigned clkit_threads_per_cu(const struct clkit_device_props *p)
{
    if (p->nv_cc_major) {
        int cc = p->nv_cc_major * 10 + p->nv_cc_minor;
        if (cc == 75) return 1024;
        if (cc == 86 || cc == 87 || cc == 89 || cc == 120) return 1536;
        return 2048;
    }
    if (p->amd_gfx[0]) {
        /* gfx9/CDNA: 4 SIMDs x 8..10 waves of 64; RDNA reports WGPs: 4 SIMDs x 16 waves of 32. */
        unsigned simds = p->simd_per_cu ? p->simd_per_cu : 4;
        unsigned waves = p->warp == 64 ? 8 : 16;
        return simds * waves * p->warp;
    }
    if (p->is_gpu) return 1024;
    return (unsigned)min_sz(p->max_work_group, 1024);
}

unsigned clkit_occupancy(const struct clkit_device_props *p, size_t wg, uint64_t local_bytes,
                         unsigned regs_per_item)
{
    if (wg == 0) wg = 1;
    if (!p->is_gpu) return 1; /* a CPU core runs one work-group at a time */
    unsigned occ = clkit_threads_per_cu(p) / (unsigned)wg;
    if (local_bytes && p->local_mem) {
        /* Local memory per CU: NVIDIA and AMD give each CU about as much as one group's max
           (48 KiB window of 228 KiB on Hopper); count the group limit as a floor. */
        uint64_t per_cu = p->nv_cc_major >= 8 ? 4 * p->local_mem : p->local_mem;
        unsigned by_local = (unsigned)(per_cu / local_bytes);
        if (by_local < occ) occ = by_local;
    }
    if (regs_per_item && p->registers) {
        unsigned by_regs = p->registers / (unsigned)(wg * regs_per_item);
        if (by_regs < occ) occ = by_regs;
    }
    return occ ? occ : 1;
}

size_t clkit_stream_wg(const struct clkit_device_props *p, size_t kernel_limit)
{
    size_t limit = kernel_limit ? min_sz(kernel_limit, p->max_work_group) : p->max_work_group;
    size_t want = p->is_gpu ? 256 : min_sz(limit, 64);
    size_t wg = min_sz(want, limit);
    unsigned w = p->warp ? p->warp : 1;
    if (wg >= w) wg -= wg % w;
    return wg ? wg : 1;
}

size_t clkit_stream_groups(const struct clkit_device_props *p, uint64_t items, size_t wg)
{
    uint64_t need = (items + wg - 1) / wg;
    /* Enough groups for many waves per CU: the loop in the kernel covers the rest. */
    uint64_t cap = (uint64_t)p->compute_units * clkit_occupancy(p, wg, 0, 0) * (p->is_gpu ? 16 : 4);
    if (cap < 1) cap = 1;
    return (size_t)(need < cap ? (need ? need : 1) : cap);
}

size_t clkit_persistent_groups(const struct clkit_device_props *p, unsigned occupancy, uint64_t tasks)
{
    uint64_t g = (uint64_t)p->compute_units * (occupancy ? occupancy : 1);
    if (g > tasks) g = tasks;
    return g ? (size_t)g : 1;
}

/* Registers spent per held element, per the tutorial: BLOCK_SIZE elements over num_warps. */
#define SOFTMAX_MAX_ITEMS 32u

clkit_softmax_plan clkit_softmax_heuristic(const struct clkit_device_props *p, int64_t n)
{
    clkit_softmax_plan plan = {1, 1, 1, 0};
    unsigned warp = p->warp ? p->warp : 1;
    unsigned max_wg = pow2_floor(min_sz(p->max_work_group, 1024));
    uint64_t n_pow2 = pow2_ceil(n > 0 ? (uint64_t)n : 1);
    /* Team: the tutorial's num_warps ladder (4 warps below 2048, 8 below 4096, else 16),
       but a short row gets only as many lanes as it has elements in 4-wide chunks. */
    unsigned team = n_pow2 >= 4096 ? 16 * warp : n_pow2 >= 2048 ? 8 * warp : 4 * warp;
    if (!p->is_gpu) team = 16;
    while (team > 1 && (uint64_t)team * 4 > n_pow2) team /= 2;
    if (team > max_wg) team = max_wg;
    uint64_t items = (n_pow2 + team - 1) / team;
    if (items > SOFTMAX_MAX_ITEMS && p->is_gpu) {
        team = max_wg;
        items = (n_pow2 + team - 1) / team;
    }
    plan.team = team;
    plan.online = items > SOFTMAX_MAX_ITEMS;
    plan.items = plan.online ? 8 : (unsigned)items;
    /* Short rows: several rows per group so a group still has a few warps' worth of lanes. */
    unsigned want_wg = p->is_gpu ? 4 * warp : 16;
    unsigned rows = 1;
    while (!plan.online && team * rows * 2 <= want_wg && team * rows * 2 <= max_wg) rows *= 2;
    plan.rows = rows;
    return plan;
}

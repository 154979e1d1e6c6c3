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

int clkit_grid_starves(const struct clkit_device_props *p, uint64_t groups, uint64_t alternative)
{
    return groups < p->compute_units && alternative > groups;
}

/* Values a work-item holds per row (on chip) or per step (online). On GPUs NVIDIA's compiler
   gives a work-item about 3 registers per held value and cannot be told to use fewer
   (-cl-nv-maxrregcount is accepted and ignored), so occupancy falls as rows held on chip grow.
   Up to 2048 positions 8 values per lane held on chip were fastest, ahead of a warp per row
   with 32 each; longer rows ran fastest on the online path, 16 values per lane per step in two
   steps at most, whose second read hits L2 because only the rows in flight are reread
   (measurements: docs/layernorm-softmax.md#measurements-behind-the-code). */
#define SOFTMAX_GPU_ITEMS 8u
#define SOFTMAX_GPU_MAX_TEAM 256u
#define SOFTMAX_ONLINE_ITEMS 16u
#define SOFTMAX_ONLINE_STEPS 2u
/* With a runtime column stride every held value also costs its own pointer. */
#define SOFTMAX_ONLINE_ITEMS_STRIDED 4u
/* CPUs: no registers to fit. */
#define SOFTMAX_CPU_ITEMS 32u

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* GPUs: the fewest lanes (up to 8 warps) that hold the row in SOFTMAX_GPU_ITEMS values each;
   within one warp, where reductions are shuffles without barriers, a short row is spread
   until each lane makes at most two loads. Longer rows go online over the fewest lanes (256
   at least) that cover them in SOFTMAX_ONLINE_STEPS steps. */
static void gpu_plan(clkit_softmax_plan *plan, const struct clkit_device_props *p, uint64_t span,
                     unsigned max_team)
{
    unsigned warp = p->warp > 1 ? p->warp : 1, vec = plan->vec;
    uint64_t max_chunks = SOFTMAX_GPU_ITEMS > vec ? SOFTMAX_GPU_ITEMS / vec : 1;
    /* The team is sized by whole chunks, so that the masked start of an unaligned row costs
       its lanes one more chunk rather than doubling the team (N = 1023: 128 lanes, not 256). */
    uint64_t chunks = div_up(span, vec), whole = span >= vec ? span / vec : 1;
    unsigned held_team = (unsigned)min_sz(max_team, SOFTMAX_GPU_MAX_TEAM), team = 1;
    while (team < held_team &&
           (div_up(whole, team) > max_chunks || (team < warp && div_up(whole, team) > 2)))
        team *= 2;
    if (div_up(whole, team) <= max_chunks) {
        plan->team = team;
        plan->items = (unsigned)div_up(chunks, team) * vec;
        /* Short rows: several to a group, so a group still has the tutorial's 4 warps. */
        while (plan->team * plan->rows * 2 <= min_sz(4 * warp, max_team)) plan->rows *= 2;
        return;
    }
    plan->online = 1;
    plan->items = vec > 1 ? SOFTMAX_ONLINE_ITEMS : SOFTMAX_ONLINE_ITEMS_STRIDED;
    plan->team = held_team;
    while (plan->team < max_team &&
           div_up(span, (uint64_t)plan->team * plan->items) > SOFTMAX_ONLINE_STEPS)
        plan->team *= 2;
}

/* CPUs (PoCL): no register file to fit and no warps, while every distinct plan is one more
   slow LLVM build. Three shapes cover every length: short rows two to a group of 8-lane
   teams, medium rows over 64 lanes, longer rows online over 64 lanes (rereading a row from
   the CPU's caches costs little). */
static void cpu_plan(clkit_softmax_plan *plan, uint64_t span, unsigned max_team)
{
    uint64_t chunks = div_up(span, plan->vec), max_chunks = SOFTMAX_CPU_ITEMS / plan->vec;
    plan->team = max_team < 8 ? max_team : 8;
    plan->rows = max_team / plan->team < 2 ? 1 : 2;
    if (chunks > plan->team * max_chunks) {
        plan->team = max_team < 64 ? max_team : 64;
        plan->rows = 1;
    }
    plan->online = chunks > plan->team * max_chunks;
    plan->items = plan->online ? SOFTMAX_ONLINE_ITEMS : SOFTMAX_CPU_ITEMS;
}

clkit_softmax_plan clkit_softmax_heuristic(const struct clkit_device_props *p, int64_t span,
                                           unsigned vec, size_t wg_limit)
{
    clkit_softmax_plan plan = {1, 1, 1, 1, 0};
    size_t limit = wg_limit ? min_sz(wg_limit, p->max_work_group) : p->max_work_group;
    unsigned max_team = pow2_floor(min_sz(limit, 1024));
    plan.vec = vec == 4 || vec == 8 ? vec : 1;
    uint64_t positions = span > 0 ? (uint64_t)span : 1;
    if (p->is_gpu) gpu_plan(&plan, p, positions, max_team);
    else cpu_plan(&plan, positions, max_team);
    return plan;
}

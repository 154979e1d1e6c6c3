/* Launch heuristics: pure functions of device properties, unit-tested with the property
   sets of real devices (tests/test_heuristics.c). */
#ifndef CLKIT_HEURISTICS_H
#define CLKIT_HEURISTICS_H

#include "clkit.h"

/* Work-items one compute unit keeps resident (NVIDIA SM threads, AMD CU waves x width). */
unsigned clkit_threads_per_cu(const struct clkit_device_props *p);

/* Work-groups of `wg` work-items, using `local_bytes` local memory each and `regs_per_item`
   registers (0: unknown), that one compute unit holds at once; at least 1. */
unsigned clkit_occupancy(const struct clkit_device_props *p, size_t wg, uint64_t local_bytes,
                         unsigned regs_per_item);

/* Work-group size for a 1-D streaming kernel: a multiple of the warp width, within
   `kernel_limit` (the built kernel's CL_KERNEL_WORK_GROUP_SIZE; 0: the device limit). */
size_t clkit_stream_wg(const struct clkit_device_props *p, size_t kernel_limit);

/* Number of work-groups for a streaming kernel over `items` work-items of groups of `wg`:
   enough to fill the device several times over, never more than the work needs. */
size_t clkit_stream_groups(const struct clkit_device_props *p, uint64_t items, size_t wg);

/* Softmax: how a row is spread over a work-group. A row of `span` positions (its n elements,
   plus vec - 1 when rows start off vector alignment) is held by a team of work-items, each
   holding `items` values in registers, or streamed through them by the two-pass online path. */
typedef struct clkit_softmax_plan {
    unsigned team;    /* work-items that share one row (a power of two) */
    unsigned rows;    /* rows per work-group; team * rows = work-group size */
    unsigned items;   /* values each work-item holds (per step when online); a multiple of vec */
    unsigned vec;     /* elements per load: 1, or 16 bytes' worth for unit-stride rows */
    int online;       /* 1: two-pass online path */
} clkit_softmax_plan;

/* vec: elements per vector access (1 for strided rows); wg_limit: the built kernel's
   work-group limit, 0 for the device's. */
clkit_softmax_plan clkit_softmax_heuristic(const struct clkit_device_props *p, int64_t span,
                                           unsigned vec, size_t wg_limit);

/* Persistent grid: work-groups = compute units x occupancy, never more than the tasks. */
size_t clkit_persistent_groups(const struct clkit_device_props *p, unsigned occupancy, uint64_t tasks);

/* Whether a grid of `groups` work-groups leaves compute units idle where one of `alternative`
   groups would not: a tuned config borrowed from a larger shape whose tiles are too big for
   this one. */
int clkit_grid_starves(const struct clkit_device_props *p, uint64_t groups, uint64_t alternative);

#endif

/* Property sets of real devices, as their drivers report them, for heuristics tests. */
#ifndef CLKIT_TEST_DEVICES_H
#define CLKIT_TEST_DEVICES_H

#include <string.h>

#include "clkit.h"

static inline struct clkit_device_props dev_h100(void)
{
    struct clkit_device_props p;
    memset(&p, 0, sizeof p);
    strcpy(p.name, "NVIDIA H100 80GB HBM3");
    strcpy(p.vendor, "NVIDIA Corporation");
    p.is_gpu = 1;
    p.compute_units = 132;
    p.global_mem = 85ull << 30;
    p.max_alloc = 21ull << 30;
    p.local_mem = 48 << 10;
    p.local_mem_static = 226 << 10; /* static __local arrays on sm_90 */
    p.max_work_group = 1024;
    p.warp = 32;
    p.registers = 65536;
    p.nv_cc_major = 9;
    p.fp64 = 1;
    return p;
}

/* MI300X through ROCm: 304 CUs, wave64; CL_DEVICE_MAX_WORK_GROUP_SIZE says 256 (the
   preferred size) while 0x4031 says 1024; kernels without reqd_work_group_size get 256. */
static inline struct clkit_device_props dev_mi300x(void)
{
    struct clkit_device_props p;
    memset(&p, 0, sizeof p);
    strcpy(p.name, "gfx942:sramecc+:xnack-");
    strcpy(p.amd_gfx, "gfx942");
    p.is_gpu = 1;
    p.compute_units = 304;
    p.global_mem = 192ull << 30;
    p.max_alloc = 150ull << 30;
    p.local_mem = p.local_mem_static = 64 << 10;
    p.max_work_group = 1024;
    p.warp = 64;
    p.simd_per_cu = 4;
    p.fp16 = p.fp64 = 1;
    return p;
}

/* RX 7900 XTX (gfx1100), wave32, reporting 48 WGPs as compute units, 8 SIMDs per "CU". */
static inline struct clkit_device_props dev_rdna3(void)
{
    struct clkit_device_props p;
    memset(&p, 0, sizeof p);
    strcpy(p.name, "gfx1100");
    strcpy(p.amd_gfx, "gfx1100");
    p.is_gpu = 1;
    p.compute_units = 48;
    p.global_mem = 24ull << 30;
    p.max_alloc = 20ull << 30;
    p.local_mem = p.local_mem_static = 64 << 10;
    p.max_work_group = 1024;
    p.warp = 32;
    p.simd_per_cu = 8;
    p.fp16 = p.fp64 = 1;
    return p;
}

static inline struct clkit_device_props dev_pocl(void)
{
    struct clkit_device_props p;
    memset(&p, 0, sizeof p);
    strcpy(p.name, "pthread-haswell-AMD EPYC");
    p.is_cpu = 1;
    p.compute_units = 2;
    p.global_mem = 20ull << 30;
    p.max_alloc = 8ull << 30;
    p.local_mem = p.local_mem_static = 4 << 20;
    p.max_work_group = 4096;
    p.warp = 1;
    p.fp16 = p.fp64 = 1;
    return p;
}

#endif

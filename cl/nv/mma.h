/* NVIDIA tensor cores from OpenCL C: inline PTX for sm_80 and later.

   NVIDIA's OpenCL has no matrix extension and no fp16 arithmetic, but its compiler passes
   inline PTX through (see shared/gpu/NVIDIA-PTX.md), so the Ampere instructions that
   CUTLASS and Triton build on are reachable:
   - cp.async: 16-byte global -> local copies that bypass registers and run while the warp
     computes; commit groups let a kernel keep STAGES tiles in flight.
   - ldmatrix: one instruction loads a warp's mma fragments (four 8 x 8 b16 matrices) from
     local memory, transposing on the way when the operand's contiguous dimension is not the
     one the fragment wants.
   - mma.sync m16n8k16 (f16, bf16) and m16n8k8 (tf32) with f32 accumulators.
   The driver compiles for .target sm_90, not sm_90a; Hopper's wgmma (below) gets there
   through a second build of the program's PTX.

   Only the host sets CLKIT_NV_SM (from the device's compute capability): PoCL and AMD never
   see this file. A local pointer converted to uint is the 32-bit shared-window address the
   .shared operands take. */
#ifndef CLKIT_NV_MMA_H
#define CLKIT_NV_MMA_H

#if !defined(CLKIT_NV_SM) || CLKIT_NV_SM < 80
#error "nv/mma.h needs an NVIDIA device of compute capability 8.0 or later"
#endif

#include "nv/shuffle.h"

NV_INLINE uint nv_shared(__local const void *p) { return (uint)(size_t)p; }

/* Copies src_bytes (0 to 16) from src and zero-fills the rest of the 16 bytes at dst:
   masked edges cost no branch, and src is not read at all when src_bytes is 0. */
NV_INLINE void nv_cp_async16(__local void *dst, __global const void *src, uint src_bytes)
{
    __asm__ volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :: "r"(nv_shared(dst)), "l"(src), "r"(src_bytes) : "memory");
}

/* nv_cp_async16 for a stream read once from start to end: the L2 fetches the copy's whole
   128-byte line from DRAM at once (1 % faster for decoding's K and V on an H200; 256 bytes
   was 3 % slower). */
NV_INLINE void nv_cp_async16_stream(__local void *dst, __global const void *src, uint src_bytes)
{
    __asm__ volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;"
                     :: "r"(nv_shared(dst)), "l"(src), "r"(src_bytes) : "memory");
}

/* The same for one 4-byte word (any 4-byte-aligned source: per-row statistics). */
NV_INLINE void nv_cp_async4(__local void *dst, __global const void *src, uint src_bytes)
{
    __asm__ volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                     :: "r"(nv_shared(dst)), "l"(src), "r"(src_bytes) : "memory");
}

NV_INLINE void nv_cp_async_commit(void) { __asm__ volatile("cp.async.commit_group;" ::: "memory"); }

/* Waits until at most n committed groups are still in flight (n a literal). */
#define NV_CP_ASYNC_WAIT_(n) __asm__ volatile("cp.async.wait_group " #n ";" ::: "memory")
#define NV_CP_ASYNC_WAIT(n) NV_CP_ASYNC_WAIT_(n)

/* Orders the shared-memory accesses of a warp's lanes (after cp.async.wait_group: every lane
   then sees every lane's copies), for warps that work on their own. */
NV_INLINE void nv_syncwarp(void) { __asm__ volatile("bar.warp.sync -1;" ::: "memory"); }

/* Four 8 x 8 b16 matrices; lane l gives the row address of matrix l / 8, row l % 8. */
NV_INLINE void nv_ldmatrix_x4(uint *r, __local const void *row)
{
    __asm__ volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(nv_shared(row)) : "memory");
}

/* The same, each matrix transposed: for operands stored along the other dimension. */
NV_INLINE void nv_ldmatrix_x4_trans(uint *r, __local const void *row)
{
    __asm__ volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(nv_shared(row)) : "memory");
}

/* d += a (16 x 16, row) * b (16 x 8, col): a in four registers of two halves, b in two.
   Accumulator lane layout: d[0..1] row l / 4, columns 2 (l % 4) + {0, 1}; d[2..3] row + 8. */
NV_INLINE void nv_mma_f16(float *d, const uint *a, const uint *b)
{
    __asm__ volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

NV_INLINE void nv_mma_bf16(float *d, const uint *a, const uint *b)
{
    __asm__ volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* d += a (16 x 8, row) * b (8 x 8, col) in TF32: the registers of nv_mma_f16, one 32-bit value
   each: a = (row l / 4, k l % 4), (row + 8, k), (row, k + 4), (row + 8, k + 4); b = (k l % 4,
   col l / 4), (k + 4, col). */
NV_INLINE void nv_mma_tf32(float *d, const uint *a, const uint *b)
{
    __asm__ volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* An f32 (as its bits) rounded to the nearest TF32, ties away, as cuBLAS rounds under
   allow_tf32: mma.sync would otherwise truncate the 13 low mantissa bits, a biased error. */
NV_INLINE uint nv_tf32(uint x)
{
    uint r;
    __asm__("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(as_float(x)));
    return r;
}

/* f32 as 3xTF32 (CUTLASS's "fast f32"): each operand x splits into big, x with the 13
   mantissa bits TF32 lacks cleared, and small = x - big (exact in f32), and a b is taken as
   a_small b_big + a_big b_small + a_big b_big, the small terms first. The mma reads only the
   TF32 bits of small, so what is dropped (a_small b_small and small's low bits) is at most
   2^-19 of each product, about 2^-20 typically. Two plain instructions an element: rounding
   both parts with cvt.rna.tf32 instead (2^-22) makes the conversions the attention kernels'
   bottleneck (bench/journal/2026-11-25.md, "Attention f32: held rows in local memory, a
   cheaper split"). */
NV_INLINE void nv_tf32_split(uint *big, uint *small, const uint *x, int n)
{
    for (int i = 0; i < n; i++)
        big[i] = x[i] & 0xffffe000u, small[i] = as_uint(as_float(x[i]) - as_float(big[i]));
}

/* Two f32 values rounded into one register of an mma A fragment (lo the lower column):
   how attention feeds its probabilities, still in accumulators, to the second product. */
NV_INLINE uint nv_pack_f16x2(float lo, float hi)
{
    uint r;
    __asm__("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

NV_INLINE uint nv_pack_bf16x2(float lo, float hi)
{
    uint r;
    __asm__("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* 2^x by the special-function unit (relative error near 2^-22; -inf gives 0), as
   FlashAttention's softmax does: OpenCL's exp2 is a longer exact sequence. */
NV_INLINE float nv_exp2(float x)
{
    float r;
    __asm__("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

/* Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `chunks` chunks a row, XOR
   swizzled: the eight rows one ldmatrix reads at the same logical chunk land in eight
   different 16-byte bank groups, with no padding (padding would break cp.async alignment
   and waste the 48 KiB). Rows of fewer than 8 chunks share a 128-byte bank line with their
   neighbours, so the XOR pattern advances every 8 / chunks rows. */
NV_INLINE int nv_swizzle(int row, int chunk, int chunks)
{
    int span = chunks < 8 ? chunks : 8;
    return (row * chunks + (chunk ^ ((row / (8 / span)) % span))) * 16;
}


#if CLKIT_NV_SM >= 90
/* Hopper's warpgroup MMA (wgmma): four warps multiply a 64 x N tile whose operands the tensor
   cores read from local memory themselves, through 64-bit descriptors, while the warps go on
   issuing. PTX takes wgmma only for .target sm_90a, and NVIDIA's OpenCL compiles for sm_90,
   so these instructions are written as PTX comments marked "//@90a ": the source builds for
   sm_90 with them inert, then the host (host/program.c) strips the marks from the program's
   PTX, retargets it to sm_90a and builds that as the program's binary.
   tests/compile_nvptx.sh does the same offline. */
#define NV_90A(s) "//@90a " s "\n"

/* The kernel's register cap (a literal, a multiple of 8): marked "//@maxnreg N" in its body,
   made the PTX directive ".maxnreg N" on its entry by the same rebuild (the driver's
   -cl-nv-maxrregcount does not reach a program built from PTX). For a kernel a few registers
   past what lets two work-groups share a compute unit, where those few cost less spilled than
   the second work-group does. */
#define NV_MAXNREG_(n) __asm__ volatile("//@maxnreg " #n "\n")
#define NV_MAXNREG(n) NV_MAXNREG_(n)

/* Orders the warpgroup's register writes before the wgmma that follow (PTX requires it before
   a warpgroup's first wgmma and after any other write to their accumulators). */
NV_INLINE void nv_wgmma_fence(void) { __asm__ volatile(NV_90A("wgmma.fence.sync.aligned;") ::: "memory"); }
NV_INLINE void nv_wgmma_commit(void) { __asm__ volatile(NV_90A("wgmma.commit_group.sync.aligned;") ::: "memory"); }
/* Waits until at most n committed wgmma groups are in flight (n a literal). */
#define NV_WGMMA_WAIT_(n) __asm__ volatile(NV_90A("wgmma.wait_group.sync.aligned " #n ";") ::: "memory")
#define NV_WGMMA_WAIT(n) NV_WGMMA_WAIT_(n)

/* Makes this thread's generic-proxy writes to local memory (cp.async) visible to the async
   proxy through which wgmma reads its operands. */
NV_INLINE void nv_fence_proxy_async(void) { __asm__ volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

/* A compiler barrier on an accumulator: wgmma writes it asynchronously, and the compiler,
   which sees only the asm that issues the wgmma, must not read it before the wait. */
NV_INLINE void nv_pin(float *x) { __asm__ volatile("" : "+f"(*x) :: "memory"); }

/* Descriptor of an operand tile in local memory without swizzle (8 x 16-byte core matrices,
   each 128 contiguous bytes): the start address, and lead and stride the byte offsets between
   core matrices along the two dimensions (for an M- or N-major operand, lead steps along K and
   stride along M or N). */
NV_INLINE ulong nv_wgmma_desc_plain(__local const void *start, uint lead, uint stride)
{
    return (ulong)((nv_shared(start) & 0x3ffff) >> 4) | (ulong)(lead >> 4) << 16 | (ulong)(stride >> 4) << 32;
}

/* The same with the 128-byte swizzle (16-byte chunk c of row r of each 1024-byte group of
   eight 128-byte rows stored at chunk c ^ r, the layout nv_swizzle gives rows of 8 chunks):
   lead and stride the byte offsets between chunk groups along the leading and the strided
   dimension, swizzle mode 1. */
NV_INLINE ulong nv_wgmma_desc(__local const void *start, uint lead, uint stride)
{
    return nv_wgmma_desc_plain(start, lead, stride) | 1ul << 62;
}

/* Byte offset of 16-byte chunk `chunk` of row `row` in a tile laid out for that swizzle:
   panels of 8 chunks (128 bytes) a row, `rows` rows each, one after another. A K-major
   operand of 64 16-bit elements a row is one panel; wider rows and M- or N-major operands
   span several, which the descriptors step through. */
NV_INLINE int nv_wgmma_offset(int row, int chunk, int rows)
{
    return (chunk / 8) * rows * 128 + nv_swizzle(row, chunk % 8, 8);
}

/* Hopper's tensor memory accelerator (TMA): one thread copies a whole box of a tensor of up
   to four dimensions into local memory, written in the 128-byte swizzle wgmma reads, rows and
   columns past the tensor's edge zero-filled; an mbarrier counts the bytes landed. The box's
   geometry is a 128-byte tensor map. OpenCL reaches neither the CUDA driver's encoder nor a
   buffer's address on the host, so the device builds the map itself, as Triton's device-side
   descriptors do: zeroes in local memory, each field written by tensormap.replace, then the
   whole map stored in global memory, where the copy unit reads it. 16-bit elements, extents
   n0 (contiguous) to n3, strides of the outer dimensions in bytes (multiples of 16), boxes of
   64 x b1 x 1 x 1. `stage`: 128-byte aligned local memory. Arch-specific (NV_90A), as wgmma. */
#define NV_TMAP_SET(field, i, type) NV_90A("tensormap.replace.tile." field ".shared::cta.b1024." type " [%0], " i ";")
#define NV_TMAP_DIM(i, si, n, b, s) NV_TMAP_SET("global_dim", #i ", %" #n, "b32") \
    NV_TMAP_SET("box_dim", #i ", %" #b, "b32") NV_TMAP_SET("element_stride", #i ", 1", "b32") \
    NV_TMAP_SET("global_stride", #si ", %" #s, "b64")

NV_INLINE void nv_tmap_fill(__local ulong16 *stage, __global const void *base, int rank, uint n0, uint n1,
                            uint n2, uint n3, ulong s1, ulong s2, ulong s3, uint b1)
{
    *stage = (ulong16)(0);
    __asm__ volatile(NV_90A("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;")
                     NV_TMAP_SET("elemtype", "1", "b32")          /* u16 */
                     NV_TMAP_SET("interleave_layout", "0", "b32")
                     NV_TMAP_SET("swizzle_mode", "3", "b32")      /* 128 B */
                     NV_TMAP_SET("fill_mode", "0", "b32")         /* zeros */
                     NV_TMAP_SET("global_dim", "0, %2", "b32")
                     NV_TMAP_SET("box_dim", "0, 64", "b32")
                     NV_TMAP_SET("element_stride", "0, 1", "b32")
                     NV_TMAP_DIM(1, 0, 3, 7, 5)
                     NV_TMAP_DIM(2, 1, 4, 8, 6)
                     :: "r"(nv_shared(stage)), "l"(base), "r"(n0), "r"(n1), "r"(n2), "l"(s1), "l"(s2),
                        "r"(b1), "r"(1u) : "memory");
    if (rank == 4)
        __asm__ volatile(NV_TMAP_DIM(3, 2, 1, 2, 3) NV_TMAP_SET("rank", "3", "b32")
                         :: "r"(nv_shared(stage)), "r"(n3), "r"(1u), "l"(s3) : "memory");
    else
        __asm__ volatile(NV_TMAP_SET("rank", "2", "b32") :: "r"(nv_shared(stage)) : "memory");
}

/* The map in stage -> slot, released to the tensormap proxy: a later kernel of the queue
   acquires it (nv_tmap_acquire) before its first copy. */
NV_INLINE void nv_tmap_store(__global ulong16 *slot, __local const ulong16 *stage)
{
    #pragma unroll
    for (int i = 0; i < 8; i++) ((__global ulong2 *)slot)[i] = ((__local const ulong2 *)stage)[i];
    __asm__ volatile(NV_90A("fence.proxy.tensormap::generic.release.gpu;") ::: "memory");
}

NV_INLINE void nv_tmap_acquire(__global const ulong16 *slot)
{
    __asm__ volatile(NV_90A("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;") :: "l"(slot) : "memory");
}

/* A 3-D map built and published by the work-group that uses it. Every work-group of a call
   stores the same bytes to the same slot, so a map a work-group already reads never changes
   under it. */
NV_INLINE void nv_tmap_publish(__global ulong16 *slot, __local ulong16 *stage, __global const void *base,
                               uint nx, uint ny, uint nz, ulong sy, ulong sz, uint by)
{
    nv_tmap_fill(stage, base, 3, nx, ny, nz, 1, sy, sz, sz, by);
    nv_tmap_store(slot, stage);
    nv_tmap_acquire(slot);
}

NV_INLINE void nv_mbar_init(__local ulong *bar, uint arrivals)
{
    __asm__ volatile(NV_90A("mbarrier.init.shared::cta.b64 [%0], %1;")
                     :: "r"(nv_shared(bar)), "r"(arrivals) : "memory");
}

/* One arrival that also announces `bytes` more to land before the phase completes. */
NV_INLINE void nv_mbar_expect(__local ulong *bar, uint bytes)
{
    __asm__ volatile(NV_90A("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;")
                     :: "r"(nv_shared(bar)), "r"(bytes) : "memory");
}

/* Waits until the phase of the given parity (uses of the barrier, modulo 2) completes. */
NV_INLINE void nv_mbar_wait(__local ulong *bar, uint parity)
{
    uint done = 0;
    while (!done)
        __asm__ volatile("{\n.reg .pred p;\n"
                         NV_90A("mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;")
                         NV_90A("selp.u32 %0, 1, 0, p;") "}"
                         : "+r"(done) : "r"(nv_shared(bar)), "r"(parity) : "memory");
}

/* The box of `map` (3-D) whose first element is (x, y, z), x the contiguous dimension -> dst. */
NV_INLINE void nv_tma_load(__local void *dst, __global const ulong16 *map, int x, int y, int z,
                           __local ulong *bar)
{
    __asm__ volatile(NV_90A("cp.async.bulk.tensor.3d.shared::cluster.global.tile"
                            ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];")
                     :: "r"(nv_shared(dst)), "l"(map), "r"(x), "r"(y), "r"(z),
                        "r"(nv_shared(bar)) : "memory");
}

/* The same for a 4-D map, first element (x, y, z, w). */
NV_INLINE void nv_tma_load4(__local void *dst, __global const ulong16 *map, int x, int y, int z, int w,
                            __local ulong *bar)
{
    __asm__ volatile(NV_90A("cp.async.bulk.tensor.4d.shared::cluster.global.tile"
                            ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];")
                     :: "r"(nv_shared(dst)), "l"(map), "r"(x), "r"(y), "r"(z), "r"(w),
                        "r"(nv_shared(bar)) : "memory");
}

/* `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte aligned) from src to dst
   by the copy unit, without a tensor map; one of bar's transactions, as nv_tma_load. */
NV_INLINE void nv_bulk_load(__local void *dst, __global const void *src, uint bytes, __local ulong *bar)
{
    __asm__ volatile(NV_90A("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];")
                     :: "r"(nv_shared(dst)), "l"(src), "r"(bytes), "r"(nv_shared(bar)) : "memory");
}

/* d (64 x n f32: n / 2 a thread, laid out as n / 8 m16n8 accumulator fragments) += a * b, both
   operands from descriptors; TYPE the operands' PTX type pair (".f16.f16"), TA / TB "1" for an
   operand stored along M or N instead of K. */
#define NV_WG_D16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define NV_WG_D32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define NV_WG_D64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define NV_WG_D128 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define NV_F8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
    "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define NV_F32(d, i) NV_F8(d, i), NV_F8(d, i + 8), NV_F8(d, i + 16), NV_F8(d, i + 24)
#define NV_F64(d, i) NV_F32(d, i), NV_F32(d, i + 32)
#define NV_WGMMA_ASM(n, TYPE, TA, TB, regs, da, db)                                              \
    NV_90A("wgmma.mma_async.sync.aligned.m64n" #n "k16.f32" TYPE " " regs ", %" da ", %" db       \
           ", 1, 1, 1, " TA ", " TB ";")
#define NV_WGMMA_32(d, TYPE, TA, TB, a, b)                                                        \
    __asm__ volatile(NV_WGMMA_ASM(32, TYPE, TA, TB, NV_WG_D16, "16", "17") : NV_F8(d, 0), NV_F8(d, 8) : "l"(a), "l"(b))
#define NV_WGMMA_64(d, TYPE, TA, TB, a, b)                                                        \
    __asm__ volatile(NV_WGMMA_ASM(64, TYPE, TA, TB, NV_WG_D32, "32", "33") : NV_F32(d, 0) : "l"(a), "l"(b))
#define NV_WGMMA_128(d, TYPE, TA, TB, a, b)                                                       \
    __asm__ volatile(NV_WGMMA_ASM(128, TYPE, TA, TB, NV_WG_D64, "64", "65") : NV_F64(d, 0) : "l"(a), "l"(b))
#define NV_WGMMA_256(d, TYPE, TA, TB, a, b)                                                       \
    __asm__ volatile(NV_WGMMA_ASM(256, TYPE, TA, TB, NV_WG_D128, "128", "129")                  \
                     : NV_F64(d, 0), NV_F64(d, 64) : "l"(a), "l"(b))

/* The same with a from registers: a[0..3] are the warp's m16n8k16 A fragment of its 16 rows
   (attention's P, which so never leaves the registers), b from a descriptor. wgmma reads a
   asynchronously as it does the accumulators: a kernel keeps both untouched until the wait. */
#define NV_WGMMA_RS_ASM(n, TYPE, TB, regs, a0, a1, a2, a3, db)                                   \
    NV_90A("wgmma.mma_async.sync.aligned.m64n" #n "k16.f32" TYPE " " regs ", {%" a0 ", %" a1     \
           ", %" a2 ", %" a3 "}, %" db ", 1, 1, 1, " TB ";")
#define NV_WG_A(a) "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])
#define NV_WGMMA_RS_64(d, TYPE, TB, a, b)                                                         \
    __asm__ volatile(NV_WGMMA_RS_ASM(64, TYPE, TB, NV_WG_D32, "32", "33", "34", "35", "36")       \
                     : NV_F32(d, 0) : NV_WG_A(a), "l"(b))
#define NV_WGMMA_RS_128(d, TYPE, TB, a, b)                                                        \
    __asm__ volatile(NV_WGMMA_RS_ASM(128, TYPE, TB, NV_WG_D64, "64", "65", "66", "67", "68")      \
                     : NV_F64(d, 0) : NV_WG_A(a), "l"(b))
#define NV_WGMMA_RS_256(d, TYPE, TB, a, b)                                                        \
    __asm__ volatile(NV_WGMMA_RS_ASM(256, TYPE, TB, NV_WG_D128, "128", "129", "130", "131", "132") \
                     : NV_F64(d, 0), NV_F64(d, 64) : NV_WG_A(a), "l"(b))
#endif

#endif

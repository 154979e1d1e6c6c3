/* NVIDIA warp shuffles from OpenCL C: inline PTX for sm_70 and later.

   NVIDIA's OpenCL has no sub-group extension, but its compiler passes inline PTX through, so
   a lane can read a register of another lane of its warp (shfl.sync) instead of a round trip
   through local memory and a barrier. Reductions within a warp (softmax's and layer norm's
   teams, the four lanes that share a row of an mma accumulator) are butterflies of these.

   Only the host sets CLKIT_NV_SM (from the device's compute capability), and only for NVIDIA
   devices: PoCL and AMD, whose compilers reject this PTX, never see this file. A kernel
   includes it behind its own NVIDIA-only macro and keeps a local-memory path for the rest. */
#ifndef CLKIT_NV_SHUFFLE_H
#define CLKIT_NV_SHUFFLE_H

#if !defined(CLKIT_NV_SM) || CLKIT_NV_SM < 70
#error "nv/shuffle.h needs an NVIDIA device of compute capability 7.0 or later"
#endif

#define NV_INLINE inline __attribute__((always_inline))

/* v from the lane whose index differs by `mask` (all 32 lanes take part): a butterfly over
   masks 1, 2, 4, ... leaves every lane with the same reduction. */
NV_INLINE float nv_shfl_xor(float v, int mask)
{
    uint r;
    __asm__ volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                     : "=r"(r)
                     : "r"(as_uint(v)), "r"(mask));
    return as_float(r);
}

#endif

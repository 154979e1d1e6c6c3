/* GEMV probe: y[n] = sum_k x[k] B[k][n], B row-major (N contiguous), f16 (bits) or f32 (F32).
   LANES_N lanes x 16 bytes cover a column block; LANES_K lanes walk rows; each lane issues
   LOADS independent 16-byte loads a step; the grid's second dimension splits K in kc rows;
   the last split of a column block (ticket) adds the partials in split order. */
#ifdef F32
#define VEC 4
typedef float elem;
#else
#define VEC 8
typedef ushort elem;
#endif
#define WG (LANES_N * LANES_K)
#ifdef NV
#define FENCE() __asm__ volatile("fence.acq_rel.gpu;" ::: "memory")
#else
#define FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)
#endif
#define W (LANES_N * VEC)

#if CVT == 1
inline float h2f(uint h)
{
    float f;
    __asm__("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((ushort)h));
    return f;
}
#else
inline float h2f(uint h)
{
    return vload_half(0, (const half *)&h);
}
#endif

#if !defined(LD)
#define LD 0
#endif
#if LD == 1
inline uint4 ld16(const __global void *p)
{
    uint4 v;
    __asm__ volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
#elif LD == 2 || LD == 3
#if LD == 2
#define LDOP "ld.global.L1::no_allocate.L2::cache_hint.v4.u32"
#else
#define LDOP "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32"
#endif
inline ulong evict_first(void)
{
    ulong pol;
    __asm__("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}
inline uint4 ld16(const __global void *p)
{
    uint4 v;
    __asm__ volatile(LDOP " {%0,%1,%2,%3}, [%4], %5;" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(evict_first()));
    return v;
}
#else
#define ld16(p) (*(const __global uint4 *)(p))
#endif

inline void fma_chunk(uint4 v, float a, float *acc)
{
#ifdef F32
    acc[0] = fma(a, as_float(v.x), acc[0]);
    acc[1] = fma(a, as_float(v.y), acc[1]);
    acc[2] = fma(a, as_float(v.z), acc[2]);
    acc[3] = fma(a, as_float(v.w), acc[3]);
#elif CVT == 2
    /* bf16-style exact widening is not f16; probe only: treat as bf16 bits */
    acc[0] = fma(a, as_float(v.x << 16), acc[0]);
    acc[1] = fma(a, as_float(v.x & 0xffff0000u), acc[1]);
    acc[2] = fma(a, as_float(v.y << 16), acc[2]);
    acc[3] = fma(a, as_float(v.y & 0xffff0000u), acc[3]);
    acc[4] = fma(a, as_float(v.z << 16), acc[4]);
    acc[5] = fma(a, as_float(v.z & 0xffff0000u), acc[5]);
    acc[6] = fma(a, as_float(v.w << 16), acc[6]);
    acc[7] = fma(a, as_float(v.w & 0xffff0000u), acc[7]);
#else
    acc[0] = fma(a, h2f(v.x & 0xffff), acc[0]);
    acc[1] = fma(a, h2f(v.x >> 16), acc[1]);
    acc[2] = fma(a, h2f(v.y & 0xffff), acc[2]);
    acc[3] = fma(a, h2f(v.y >> 16), acc[3]);
    acc[4] = fma(a, h2f(v.z & 0xffff), acc[4]);
    acc[5] = fma(a, h2f(v.z >> 16), acc[5]);
    acc[6] = fma(a, h2f(v.w & 0xffff), acc[6]);
    acc[7] = fma(a, h2f(v.w >> 16), acc[7]);
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void gemv(
    __global const elem *B, __global const float *x, __global float *P, __global uint *tickets,
    __global float *y, int K, int N, int kc)
{
    __local float red[LANES_K * W];
    __local uint last;
    int tid = get_local_id(0), cn = tid % LANES_N, lk = tid / LANES_N;
#if defined(ORDER) && ORDER
    int cb = get_group_id(1), split = get_group_id(0), splits = get_num_groups(0);
#else
    int cb = get_group_id(0), split = get_group_id(1), splits = get_num_groups(1);
#endif
    int n0 = cb * W + cn * VEC;
    int kb = split * kc, ke = min(K, kb + kc);
    float acc[VEC];
    for (int j = 0; j < VEC; j++) acc[j] = 0.0f;
    const __global elem *b = B + n0;
    for (int k = kb + lk; k < ke; k += LANES_K * LOADS) {
        uint4 v[LOADS];
        float a[LOADS];
        #pragma unroll
        for (int u = 0; u < LOADS; u++) {
            int r = k + u * LANES_K;
            v[u] = r < ke ? ld16(b + (long)r * N) : (uint4)(0);
            a[u] = r < ke ? x[r] : 0.0f;
        }
        #pragma unroll
        for (int u = 0; u < LOADS; u++) fma_chunk(v[u], a[u], acc);
    }
    for (int j = 0; j < VEC; j++) red[lk * W + cn * VEC + j] = acc[j];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int c = tid; c < W; c += WG) {
        float s = 0.0f;
        for (int l = 0; l < LANES_K; l++) s += red[l * W + c];
        if (splits == 1) {
            y[cb * W + c] = s;
            continue;
        }
        P[(long)split * N + cb * W + c] = s;
    }
    if (splits == 1) return;
#if !defined(FENCE1)
    FENCE();
#endif
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (tid == 0) {
#if defined(FENCE1)
        FENCE();
#endif
        uint t = atomic_inc(tickets + cb);
        last = t == (uint)splits - 1;
        if (last) tickets[cb] = 0;
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (!last) return;
    FENCE();
    for (int c = tid; c < W; c += WG) {
        float s = 0.0f;
        int p = 0;
        for (; p + 8 <= splits; p += 8) {
            float t[8];
            #pragma unroll
            for (int u = 0; u < 8; u++) t[u] = P[(long)(p + u) * N + cb * W + c];
            #pragma unroll
            for (int u = 0; u < 8; u++) s += t[u];
        }
        for (; p < splits; p++) s += P[(long)p * N + cb * W + c];
        y[cb * W + c] = s;
    }
}

/* Reads a buffer and writes one value a work-group: leaves L2 holding clean lines. */
__kernel void clean(__global const uint4 *buf, __global uint *out, long n)
{
    uint4 s = 0;
    for (long i = get_global_id(0); i < n; i += get_global_size(0)) s ^= buf[i];
    if ((s.x ^ s.y ^ s.z ^ s.w) == 0x12345678u) out[0] = 1;
}

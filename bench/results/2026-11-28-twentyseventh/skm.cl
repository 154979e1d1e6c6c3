/* GEMV-like products on mma.sync with B fed from registers: C (M <= 16 rows) = A B, f16, B N-major.
   A warp takes 32 CB columns and steps of 16 k rows: each lane loads two 16-byte pieces (k rows
   lane/4 and 8 + lane/4, columns 8 (lane % 4) ..) a column block, movmatrix transposes each 8 x 8
   quarter into the B fragment of a permuted column order, and one m16n8k16 a quarter.
   Grid: (N / (32 CB), splits); WARPS warps split the work-group's k rows; ordered split reduction. */
inline uint trans(uint x)
{
    uint r;
    __asm__ volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(x));
    return r;
}
inline void mma(float *d, const uint *a, uint b0, uint b1)
{
    __asm__ volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
inline uint4 ldb(const __global ushort *p)
{
#ifdef EVICT
    uint4 v;
    ulong pol;
    __asm__("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    __asm__ volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(pol));
    return v;
#else
    return *(const __global uint4 *)p;
#endif
}
inline uint lda(const __global ushort *A, int row, int M, int K, int k)
{
    return row < M ? *(const __global uint *)(A + (long)row * K + k) : 0u;
}

__kernel __attribute__((reqd_work_group_size(WARPS * 32, 1, 1))) void skm(__global const ushort *A, __global const ushort *B,
    __global float *P, volatile __global uint *tickets, __global float *C, int M, int N, int K, int kc)
{
    __local float red[WARPS * 16 * 32 * CB];
    __local uint last;
    int lane = get_local_id(0) % 32, w = get_local_id(0) / 32, g = lane / 4, q = lane % 4;
    int n0 = get_group_id(0) * 32 * CB, split = get_group_id(1), splits = get_num_groups(1);
    int kb = split * kc, ke = min(K, kb + kc);
    float acc[CB][4][4];
    for (int c = 0; c < CB; c++)
        for (int x = 0; x < 4; x++) acc[c][x][0] = acc[c][x][1] = acc[c][x][2] = acc[c][x][3] = 0.0f;
    const __global ushort *Bl = B + (long)(lane / 4) * N + n0 + 8 * q;
    for (int k = kb + w * 16 * U; k < ke; k += WARPS * 16 * U) {
        uint4 b[U][2][CB];
        #pragma unroll
        for (int u = 0; u < U; u++)
            #pragma unroll
            for (int h = 0; h < 2; h++)
                #pragma unroll
                for (int c = 0; c < CB; c++) b[u][h][c] = ldb(Bl + (long)(k + u * 16 + h * 8) * N + c * 32);
        #pragma unroll
        for (int u = 0; u < U; u++) {
            int kk = k + u * 16 + 2 * q;
            uint a[4] = {lda(A, g, M, K, kk), lda(A, g + 8, M, K, kk), lda(A, g, M, K, kk + 8), lda(A, g + 8, M, K, kk + 8)};
            #pragma unroll
            for (int c = 0; c < CB; c++) {
                uint lo[4] = {b[u][0][c].x, b[u][0][c].y, b[u][0][c].z, b[u][0][c].w};
                uint hi[4] = {b[u][1][c].x, b[u][1][c].y, b[u][1][c].z, b[u][1][c].w};
                #pragma unroll
                for (int x = 0; x < 4; x++) mma(acc[c][x], a, trans(lo[x]), trans(hi[x]));
            }
        }
    }
    /* thread: rows g (e < 2) and g + 8, logical column 2q + e % 2 of quarter x = physical c 32 + 8 q + 2 x + e % 2 */
    for (int c = 0; c < CB; c++)
        for (int x = 0; x < 4; x++)
            for (int e = 0; e < 4; e++)
                red[(w * 16 + g + (e / 2) * 8) * 32 * CB + c * 32 + 8 * q + 2 * x + e % 2] = acc[c][x][e];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int o = get_local_id(0); o < 16 * 32 * CB; o += WARPS * 32) {
        int m = o / (32 * CB), n = n0 + o % (32 * CB);
        float s = 0.0f;
        for (int v = 0; v < WARPS; v++) s += red[v * 16 * 32 * CB + o];
        if (m < M) P[((long)split * M + m) * N + n] = s;
    }
    if (splits == 1) return;
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        uint t = atomic_inc(&tickets[get_group_id(0)]);
        last = t == (uint)splits - 1;
        if (last) tickets[get_group_id(0)] = 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!last) return;
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    for (int o = get_local_id(0); o < M * 32 * CB; o += WARPS * 32) {
        int m = o / (32 * CB), n = n0 + o % (32 * CB);
        float s = 0.0f;
        for (int v = 0; v < splits; v++) s += ((volatile __global float *)P)[((long)v * M + m) * N + n];
        C[(long)m * N + n] = s;
    }
}

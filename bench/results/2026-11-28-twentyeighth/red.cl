/* Bulk reductions into S (n16 * 16 bytes), REP times over: CH-byte pieces from local memory,
   one thread a work-group issuing, INFL groups in flight. Run by the twenty-seventh session's
   harness (../2026-11-28-twentyseventh/bwprobe.c): bwprobe red.cl MB "-D TYPE=u64 -D CH=16384
   -D INFL=1 -D REP=16 G=264" ... */
#ifndef TYPE
#define TYPE u64
#endif
#define S_(x) #x
#define STR(x) S_(x)
__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void bw(__global uint4 *S, long n16, __global uint *O)
{
    __local uint4 buf[2 * CH / 16];
    for (int i = get_local_id(0); i < 2 * CH / 16; i += 128) buf[i] = (uint4)(1, 0, 1, 0);
    __asm__ volatile("fence.proxy.async.shared::cta;" ::: "memory");
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        long per = n16 * 16 / CH;
        uint sb = (uint)(ulong)(__local uchar *)buf;
        for (long c = get_group_id(0); c < per * REP; c += get_num_groups(0)) {
            __global uchar *dst = (__global uchar *)S + (c % per) * CH;
            __asm__ volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add." STR(TYPE) " [%0], [%1], %2;"
                             :: "l"(dst), "r"(sb + (uint)(c & 1) * CH), "r"(CH) : "memory");
            __asm__ volatile("cp.async.bulk.commit_group;" ::: "memory");
            __asm__ volatile("cp.async.bulk.wait_group.read " STR(INFL) ";" ::: "memory");
        }
        __asm__ volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}

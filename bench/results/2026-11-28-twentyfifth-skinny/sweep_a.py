"""Skinny sweep: clkit configs (ctx.benchmark, flushed) against cuBLAS (do_bench), same process.
Also a float64 correctness check of every config timed."""
import sys, statistics
sys.path.insert(0, "python")
import numpy as np, clkit, torch, triton.testing
ctx = clkit.Context(profiling=True)
rng = np.random.default_rng(1)
K = N = 4096
def sk(c, l, m, ld, sp, splits=None):
    s = "KERNEL=3,SK_COLS=%d,SK_K=%d,SK_M=%d,SK_LOADS=%d,SK_SPREAD=%d" % (c, l, m, ld, sp)
    return s + (",splits=%d" % splits if splits is not None else "")
def rows(m):
    r = 1
    while r < m and r < 16: r *= 2
    return r
plan = {
 "f16": [1, 2, 4, 8, 16], "bf16": [1, 4], "f32": [1, 2, 4, 8, 16],
}
for dt, ms in plan.items():
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dt]
    for m in ms:
        a = rng.standard_normal((m, K)).astype(np.float32)
        b = rng.standard_normal((K, N)).astype(np.float32)
        ad = ctx.to_device(a, dt); bd = ctx.to_device(b, dt); c = ctx.empty((m, N), dt)
        aq = (clkit.from_bf16(ad.get()) if dt == "bf16" else ad.get()).astype(np.float64)
        bq = (clkit.from_bf16(bd.get()) if dt == "bf16" else bd.get()).astype(np.float64)
        ref = aq @ bq; scale = np.abs(aq) @ np.abs(bq)
        r = rows(m)
        cfgs = [None]
        for sp in (0, 1):
            cfgs += [sk(32, 8, r, 8, sp), sk(16, 16, r, 8, sp), sk(32, 8, r, 4, sp)]
        cfgs += [sk(32, 8, r, 8, 1, 8), sk(32, 8, r, 8, 1, 32), sk(16, 16, r, 8, 1, 8)]
        if dt == "f32":
            cfgs += [sk(8, 64, r, 8, 1, 1), sk(4, 64, r, 8, 1, 1), sk(8, 64, r, 4, 1, 1), sk(4, 128, r, 8, 1, 1),
                     sk(8, 32, r, 8, 1, 1), sk(8, 64, r, 8, 1, 2), sk(16, 32, r, 8, 1, 1)]
        ta = torch.from_numpy(a).to("cuda", tdt); tb = torch.from_numpy(b).to("cuda", tdt)
        q = triton.testing.do_bench(lambda: torch.matmul(ta, tb), quantiles=[0.5])
        q = q[0] if isinstance(q, (list, tuple)) else q
        print("%s M %d cuBLAS %.4f ms" % (dt, m, q), flush=True)
        for cf in cfgs:
            try:
                ctx.matmul(ad, bd, out=c, config=cf)
                got = c.get()
                got = (clkit.from_bf16(got) if dt == "bf16" else got).astype(np.float64)
                err = np.max(np.abs(got - ref) / (scale + 1e-30))
                t = ctx.benchmark(lambda _: ctx.matmul(ad, bd, out=c, config=cf)).median_ms
                t2 = ctx.benchmark(lambda _: ctx.matmul(ad, bd, out=c, config=cf)).median_ms
                tol = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}[dt]
                print("  %-62s %.4f %.4f ms  %.3f x cuBLAS  err %.1e %s" % (cf or "heuristic", t, t2, q / min(t, t2), err, "ok" if err < tol else "FAIL"), flush=True)
            except Exception as e:
                print("  %-62s ERROR %s" % (cf, e), flush=True)

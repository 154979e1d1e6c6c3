"""Skinny sweep 2: wide-K work-groups with spread rows, splits, other N / K; cuBLAS same process."""
import sys, os
sys.path.insert(0, "python")
import numpy as np, clkit, torch, triton.testing
ctx = clkit.Context(profiling=True)
rng = np.random.default_rng(1)
def sk(c, l, m, ld, sp, splits=None):
    s = "KERNEL=3,SK_COLS=%d,SK_K=%d,SK_M=%d,SK_LOADS=%d,SK_SPREAD=%d" % (c, l, m, ld, sp)
    return s + (",splits=%d" % splits if splits is not None else "")
def rows(m):
    r = 1
    while r < m and r < 16: r *= 2
    return r
which = sys.argv[1]
jobs = []
if which == "ab":
    for dt in ("f16", "f32"):
        jobs.append((dt, 1, 4096, 4096, [None, sk(32, 8, 1, 8, 0)]))
if which == "w16":
    for dt in ("f16", "bf16"):
        cf = []
        for s in (1, 2, 4): cf += [sk(8, 64, 1, 8, 1, s), sk(8, 128, 1, 8, 1, s), sk(4, 128, 1, 8, 1, s), sk(16, 64, 1, 8, 1, s), sk(8, 64, 1, 4, 1, s), sk(16, 32, 1, 8, 1, s)]
        cf += [sk(4, 64, 1, 8, 1, 4), sk(4, 64, 1, 8, 1, 8), sk(8, 32, 1, 8, 1, 4), sk(8, 128, 1, 4, 1, 2), sk(4, 256, 1, 8, 1, 2)]
        jobs.append((dt, 1, 4096, 4096, [None] + cf))
    for m in (2, 4):
        jobs.append(("f16", m, 4096, 4096, [None, sk(8, 64, rows(m), 8, 1, 2), sk(4, 128, rows(m), 8, 1, 2), sk(8, 128, rows(m), 8, 1, 1), sk(8, 64, rows(m), 4, 1, 2)]))
if which == "w32":
    for (m, k, n) in ((1, 4096, 1024), (1, 4096, 11008), (1, 11008, 4096), (1, 4096, 4096), (4, 4096, 4096), (8, 4096, 4096), (1, 1024, 4096), (2, 4096, 14336)):
        r = rows(m); cf = [None]
        for s in (None, 1, 2, 4, 8): cf += [sk(4, 128, r, 8, 1, s), sk(4, 64, r, 8, 1, s)]
        cf += [sk(2, 128, r, 8, 1, 1), sk(2, 256, r, 8, 1, 1), sk(4, 256, r, 8, 1, 1), sk(4, 128, r, 4, 1, 1), sk(8, 128, r, 8, 1, 1), sk(4, 128, r, 8, 0, 1)]
        jobs.append(("f32", m, k, n, cf))
for dt, m, k, n, cfgs in jobs:
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dt]
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ad = ctx.to_device(a, dt); bd = ctx.to_device(b, dt); c = ctx.empty((m, n), dt)
    aq = (clkit.from_bf16(ad.get()) if dt == "bf16" else ad.get()).astype(np.float64)
    bq = (clkit.from_bf16(bd.get()) if dt == "bf16" else bd.get()).astype(np.float64)
    ref = aq @ bq; scale = np.abs(aq) @ np.abs(bq)
    ta = torch.from_numpy(a).to("cuda", tdt); tb = torch.from_numpy(b).to("cuda", tdt)
    q = triton.testing.do_bench(lambda: torch.matmul(ta, tb), quantiles=[0.5])
    q = q[0] if isinstance(q, (list, tuple)) else q
    print("%s M %d K %d N %d cuBLAS %.4f ms" % (dt, m, k, n, q), flush=True)
    for cf in cfgs:
        try:
            ctx.matmul(ad, bd, out=c, config=cf)
            got = c.get()
            got = (clkit.from_bf16(got) if dt == "bf16" else got).astype(np.float64)
            err = np.max(np.abs(got - ref) / (scale + 1e-30))
            t = min(ctx.benchmark(lambda _: ctx.matmul(ad, bd, out=c, config=cf)).median_ms for _ in range(2))
            tol = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}[dt]
            print("  %-66s %.4f ms  %.3f x cuBLAS  err %.1e %s" % (cf or "heuristic", t, q / t, err, "ok" if err < tol else "FAIL"), flush=True)
        except Exception as e:
            print("  %-66s ERROR %s" % (cf, e), flush=True)

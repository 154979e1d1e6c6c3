"""Skinny sweep 3: narrow wide-K work-groups, rows adjacent (sp0) or spread (sp1), every dtype, M 1-16,
K-major B; cuBLAS (do_bench) in the same process."""
import sys
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
def narrow(m, extra=()):
    r = rows(m); cf = [None]
    for sp in (0, 1):
        cf += [sk(4, 128, r, 8, sp, 1), sk(4, 64, r, 8, sp, 1), sk(4, 128, r, 4, sp, 1), sk(4, 64, r, 4, sp, 1)]
    return cf + list(extra)
if which == "ab":
    jobs.append(("f16", 1, 4096, 4096, False, [sk(32, 8, 1, 8, 0), sk(32, 8, 1, 8, 0), sk(4, 128, 1, 8, 1, 1)]))
if which == "n16":
    for dt in ("f16", "bf16"):
        jobs.append((dt, 1, 4096, 4096, False, narrow(1, [sk(2, 256, 1, 8, 1, 1), sk(2, 256, 1, 8, 0, 1), sk(8, 64, 1, 8, 0, 1), sk(8, 128, 1, 4, 0, 1)])))
    for m in (2, 4, 8):
        jobs.append(("f16", m, 4096, 4096, False, narrow(m)))
    jobs.append(("f16", 1, 4096, 1024, False, [None, sk(4, 128, 1, 8, 0, 4), sk(4, 128, 1, 8, 1, 4), sk(4, 64, 1, 8, 0, 4), sk(4, 64, 1, 8, 1, 4), sk(4, 64, 1, 8, 1, 2)]))
    jobs.append(("f16", 1, 4096, 14336, False, [None, sk(4, 128, 1, 8, 0, 1), sk(4, 128, 1, 8, 1, 1), sk(4, 64, 1, 8, 0, 1), sk(4, 64, 1, 8, 1, 1)]))
if which == "n32":
    for m in (1, 2, 4, 8, 16):
        jobs.append(("f32", m, 4096, 4096, False, narrow(m)))
    jobs.append(("f32", 1, 4096, 1024, False, [None, sk(4, 64, 1, 8, 0, 4), sk(4, 64, 1, 8, 1, 4), sk(4, 128, 1, 4, 0, 4)]))
if which == "km":
    for dt in ("f16", "f32"):
        for m in (1, 4):
            r = rows(m); cf = [None]
            for shape in ((8, 16), (8, 32), (4, 64), (4, 128), (2, 128), (16, 16)):
                for s in (None, 1, 2, 4):
                    cf.append(sk(shape[0], shape[1], r, 8, 0, s))
            jobs.append((dt, m, 4096, 4096, True, cf))
for dt, m, k, n, kmajor, cfgs in jobs:
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dt]
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if kmajor else (k, n)).astype(np.float32)
    ad = ctx.to_device(a, dt); bd = ctx.to_device(b, dt); c = ctx.empty((m, n), dt)
    bt = bd.T if kmajor else bd
    aq = (clkit.from_bf16(ad.get()) if dt == "bf16" else ad.get()).astype(np.float64)
    bq = (clkit.from_bf16(bd.get()) if dt == "bf16" else bd.get()).astype(np.float64)
    if kmajor: bq = bq.T
    ref = aq @ bq; scale = np.abs(aq) @ np.abs(bq)
    ta = torch.from_numpy(a).to("cuda", tdt); tb = torch.from_numpy(b).to("cuda", tdt)
    tbt = tb.t() if kmajor else tb
    q = triton.testing.do_bench(lambda: torch.matmul(ta, tbt), quantiles=[0.5])
    q = q[0] if isinstance(q, (list, tuple)) else q
    print("%s M %d K %d N %d %s cuBLAS %.4f ms" % (dt, m, k, n, "kmajor" if kmajor else "nmajor", q), flush=True)
    for cf in cfgs:
        try:
            ctx.matmul(ad, bt, out=c, config=cf)
            got = c.get()
            got = (clkit.from_bf16(got) if dt == "bf16" else got).astype(np.float64)
            err = np.max(np.abs(got - ref) / (scale + 1e-30))
            t = min(ctx.benchmark(lambda _: ctx.matmul(ad, bt, out=c, config=cf)).median_ms for _ in range(2))
            tol = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}[dt]
            name = (cf or "heuristic").replace("KERNEL=3,SK_COLS=", "").replace(",SK_K=", "x").replace(",SK_LOADS=", " L").replace(",SK_SPREAD=", " sp").replace(",splits=", " s")
            print("  %-34s %.4f ms  %.3f x cuBLAS  %s" % (name, t, q / t, "ok" if err < tol else "FAIL err %.1e" % err), flush=True)
        except Exception as e:
            print("  %-34s ERROR %s" % (cf, e), flush=True)

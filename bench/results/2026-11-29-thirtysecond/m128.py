"""Split big wgmma tiles against the heuristic at M 96-256 x 4096 x 4096 and 1024^3 (f16)."""
import sys; sys.path.insert(0, "python"); sys.path.insert(0, ".gpu/scripts")
import numpy as np, clkit
from mmx import wg
def cfgs(m, n, k):
    c = [("heuristic", None)]
    for bm, bn, st, sp in [(64,64,12,1),(128,64,9,2),(128,64,6,2),(64,128,9,2),(128,128,7,2),(128,128,7,4),(128,64,9,3),(64,64,12,2),(128,256,4,4),(128,128,6,1),(128,64,9,1)]:
        for cp in (1, 0):
            c.append((f"{bm}x{bn}x{st} s{sp} {'cp' if cp else 'tma'}", wg(bm, bn, st, sp, cp)))
    return c
with clkit.Context(profiling=True) as ctx:
    for (m, n, k) in [(128,4096,4096),(96,4096,4096),(256,4096,4096),(1024,1024,1024),(128,4096,1024)]:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k)).astype(np.float16); b = rng.standard_normal((k, n)).astype(np.float16)
        ref = a.astype(np.float32) @ b.astype(np.float32)
        da, db = ctx.to_device(a), ctx.to_device(b)
        out = ctx.to_device(np.zeros((m, n), np.float32))
        for rep in range(2):
            for name, cfg in cfgs(m, n, k):
                try:
                    ctx.matmul(da, db, out=out, config=cfg); ctx.finish()
                    got = out.get()
                    err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
                    r = ctx.benchmark(lambda c: c.matmul(da, db, out=out, config=cfg))
                    print(f"{m}x{n}x{k} r{rep} {name:24s} {r.median_ms*1e3:8.2f} us  err {err:.1e}", flush=True)
                except Exception as e:
                    print(f"{m}x{n}x{k} r{rep} {name:24s} FAILED {str(e)[:120]}", flush=True)

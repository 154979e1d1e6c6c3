"""The heuristic (pair_pick) against wave_pick's old 64 x 64 tile: error and time."""
import sys; sys.path.insert(0, "python"); sys.path.insert(0, ".gpu/scripts")
import numpy as np, clkit
from mmx import wg
with clkit.Context(profiling=True) as ctx:
    for (bt, m, n, k, dt) in [(1,128,4096,4096,np.float16),(1,65,4096,4096,np.float16),(1,100,4096,4096,np.float16),(1,128,4096,2048,np.float16),
                              (1,128,4096,3000,np.float16),(2,128,2048,4096,np.float16),(1,128,4096,4096,"bf16"),(1,128,4000,4100,np.float16)]:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((bt, m, k)).astype(np.float32); b = rng.standard_normal((bt, k, n)).astype(np.float32)
        if bt == 1: a, b = a[0], b[0]
        da = ctx.to_device(a, dtype=dt); db = ctx.to_device(b, dtype=dt)
        ah = da.get().astype(np.float64) if dt != "bf16" else clkit.from_bf16(da.get()).astype(np.float64)
        bh = db.get().astype(np.float64) if dt != "bf16" else clkit.from_bf16(db.get()).astype(np.float64)
        ref = ah @ bh
        out = ctx.to_device(np.zeros(ref.shape, np.float32))
        for rep in range(2):
            for name, cfg in [("heuristic", None), ("64x64x12 s1 cp", wg(64, 64, 12, 1, 1)), ("128x64x9 s2", wg(128, 64, 9, 2, 0))]:
                try:
                    ctx.matmul(da, db, out=out, config=cfg); ctx.finish()
                    err = float(np.max(np.abs(out.get() - ref)) / np.max(np.abs(ref)))
                    r = ctx.benchmark(lambda c: c.matmul(da, db, out=out, config=cfg))
                    print(f"{bt}x{m}x{n}x{k} {dt if isinstance(dt, str) else dt.__name__} r{rep} {name:16s} {r.median_ms*1e3:8.2f} us  err {err:.1e}", flush=True)
                except Exception as e:
                    print(f"{bt}x{m}x{n}x{k} r{rep} {name:16s} FAILED {str(e)[:120]}", flush=True)

"""Staged misaligned f16 products: error against float64 and time, each call stamped."""
import sys, time; sys.path.insert(0, "python")
import numpy as np, clkit
t0 = time.time()
with clkit.Context(profiling=True) as ctx:
    for (m, n, k, lead) in [(200,264,1030,0),(201,130,515,5),(1024,1030,1030,0),(100,4100,4096,0),(128,4000,4100,3)]:
        rng = np.random.default_rng(0)
        a = rng.standard_normal(m * k + lead).astype(np.float16); b = rng.standard_normal((k, n)).astype(np.float16)
        ref = a[lead:].reshape(m, k).astype(np.float64) @ b.astype(np.float64)
        da, db = ctx.to_device(a), ctx.to_device(b)
        av = clkit.DeviceArray(ctx, da.mem, (m, k), np.float16, offset=lead * 2, base=da)
        out = ctx.to_device(np.zeros((m, n), np.float32))
        print(f"{time.time()-t0:6.1f}s {m}x{n}x{k} start", flush=True)
        ctx.matmul(av, db, out=out); ctx.finish()
        err = float(np.max(np.abs(out.get() - ref)) / np.max(np.abs(ref)))
        r = ctx.benchmark(lambda c: c.matmul(av, db, out=out))
        print(f"{time.time()-t0:6.1f}s {m}x{n}x{k} lead {lead}: {r.median_ms*1e3:8.2f} us err {err:.1e}", flush=True)

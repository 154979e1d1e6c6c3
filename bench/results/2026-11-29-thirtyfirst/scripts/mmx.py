"""Forced matmul configs through clkit's Python binding: median ms (flush, events), max rel error."""
import sys, numpy as np, clkit
base = "KERNEL=4,BLOCK_K=64,WARPS_N=1,GROUP_M=8,WGMMA=1"
def wg(bm, bn, st, splits=1, cp=1):
    s = f"{base},BLOCK_M={bm},BLOCK_N={bn},WARPS_M={bm//16},STAGES={st},splits={splits}"
    return s + (",cp_async=1" if cp else "")
def run(ctx, m, n, k, cfgs, dt=np.float16, flush=True, times=1):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(dt); b = rng.standard_normal((k, n)).astype(dt)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    da, db = ctx.to_device(a), ctx.to_device(b)
    out = ctx.to_device(np.zeros((m, n), np.float32))
    for name, cfg in cfgs:
        try:
            ctx.matmul(da, db, out=out, config=cfg); ctx.finish()
            got = out.get() if hasattr(out, "get") else ctx.from_device(out)
            err = float(np.max(np.abs(got - ref)) / (np.max(np.abs(ref)) + 1e-30))
            r = ctx.benchmark(lambda c: [c.matmul(da, db, out=out, config=cfg) for _ in range(times)], flush=flush)
            print(f"{m}x{n}x{k} {name:28s} {'' if flush else 'noflush'}{'' if times == 1 else 'x%d' % times} {r.median_ms*1e3:8.2f} us  err {err:.1e}", flush=True)
        except Exception as e:
            print(f"{m}x{n}x{k} {name:28s} {'' if flush else 'noflush'}{'' if times == 1 else 'x%d' % times} FAILED {str(e)[:150]}", flush=True)

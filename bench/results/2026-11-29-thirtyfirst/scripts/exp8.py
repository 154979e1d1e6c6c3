import sys; sys.path.insert(0, ".gpu/scripts"); sys.path.insert(0, "python")
import numpy as np, clkit
from mmx import wg
def timing(ctx, m, n, k, cfg, bm=64, bn=64, label=""):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float16); b = rng.standard_normal((k, n)).astype(np.float16)
    da, db = ctx.to_device(a), ctx.to_device(b); out = ctx.to_device(np.zeros((m, n), np.float32))
    c = cfg + ",X_TIMING=1"
    r = ctx.benchmark(lambda cx: cx.matmul(da, db, out=out, config=c))
    ctx.finish()
    got = out.get().view(np.uint32)
    rows = []
    for i in range(0, m, bm):
        for j in range(0, n, bn):
            rows.append(got[i, j:j+5].astype(np.int64))
    t = np.array(rows); base = t[:, 0].min()
    t = (t - base) % (1 << 32)
    d = np.diff(t, axis=1)
    print(f"{label} {m}x{n}x{k} span {r.median_ms*1e3:.2f} us; last WGs: start {t[:,0].min()}..{t[:,0].max()} ns, "
          f"mainloop mean {d[:,0].mean():.0f} max {d[:,0].max()}, partial {d[:,1].mean():.0f}/{d[:,1].max()}, "
          f"ticket {d[:,2].mean():.0f}/{d[:,2].max()}, finish {d[:,3].mean():.0f}/{d[:,3].max()}, end max {t[:,4].max()} ns", flush=True)
with clkit.Context(profiling=True) as ctx:
    timing(ctx, 64, 4096, 512, wg(64,64,6,2), label="sp2 s6")
    timing(ctx, 64, 128, 512, wg(64,64,6,2), label="sp2 s6")
    timing(ctx, 16, 4096, 4096, wg(64,64,12,2), label="sp2 s12")
    timing(ctx, 64, 4096, 4096, wg(64,64,12,2), label="sp2 s12")
    timing(ctx, 64, 4096, 512, wg(64,64,6,2) + ",X_FIN_NOLOAD=1,X_FIN_NOSTORE=1", label="noload nostore")

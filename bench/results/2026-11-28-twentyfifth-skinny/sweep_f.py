"""f32 (3xTF32) M 64-256 x 4096 x 4096: tile and split sweep against cuBLAS SGEMM (TF32 off)."""
import sys
sys.path.insert(0, "python")
import numpy as np, clkit, torch, triton.testing
torch.backends.cuda.matmul.allow_tf32 = False
ctx = clkit.Context(profiling=True)
rng = np.random.default_rng(1)
def mma(bm, bn, bk, wm, wn, st, s):
    return "KERNEL=4,BLOCK_M=%d,BLOCK_N=%d,BLOCK_K=%d,WARPS_M=%d,WARPS_N=%d,STAGES=%d,GROUP_M=8,splits=%d" % (bm, bn, bk, wm, wn, st, s)
K = N = 4096
for m in (128, 64, 256):
    cf = [None]
    for s in (2, 3, 4, 5, 6, 8):
        cf.append(mma(128, 128, 16, 2, 4, 3, s))
    for s in (3, 4, 6):
        cf += [mma(128, 128, 32, 2, 4, 4, s), mma(128, 128, 8, 2, 4, 6, s)]
    for s in (1, 2, 3):
        cf += [mma(128, 64, 16, 2, 2, 4, s), mma(64, 128, 16, 2, 2, 4, s), mma(64, 64, 32, 2, 2, 3, s), mma(64, 64, 16, 2, 2, 4, s)]
    for s in (4, 8):
        cf.append(mma(128, 256, 8, 2, 4, 4, s))
    a = rng.standard_normal((m, K)).astype(np.float32); b = rng.standard_normal((K, N)).astype(np.float32)
    ad = ctx.to_device(a, "f32"); bd = ctx.to_device(b, "f32"); c = ctx.empty((m, N), "f32")
    ref = a.astype(np.float64) @ b.astype(np.float64); scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    ta = torch.from_numpy(a).cuda(); tb = torch.from_numpy(b).cuda()
    q = triton.testing.do_bench(lambda: torch.matmul(ta, tb), quantiles=[0.5])
    q = q[0] if isinstance(q, (list, tuple)) else q
    print("f32 M %d cuBLAS %.4f ms" % (m, q), flush=True)
    for x in cf:
        try:
            ctx.matmul(ad, bd, out=c, config=x)
            err = np.max(np.abs(c.get().astype(np.float64) - ref) / (scale + 1e-30))
            t = min(ctx.benchmark(lambda _: ctx.matmul(ad, bd, out=c, config=x)).median_ms for _ in range(2))
            name = (x or "heuristic").replace("KERNEL=4,BLOCK_M=", "").replace(",BLOCK_N=", "x").replace(",BLOCK_K=", "x").replace(",WARPS_M=", " w").replace(",WARPS_N=", "x").replace(",STAGES=", " st").replace(",GROUP_M=8,splits=", " s")
            print("  %-28s %.4f ms  %.3f x cuBLAS  %s" % (name, t, q / t, "ok" if err < 1e-5 else "FAIL err %.1e" % err), flush=True)
        except Exception as e:
            print("  %-28s ERROR %s" % (x, e), flush=True)

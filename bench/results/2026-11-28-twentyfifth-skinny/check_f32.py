"""f32 heuristic at 17-65 rows (split tiles) against float64 NumPy, both B layouts, odd N and K."""
import sys
sys.path.insert(0, "python")
import numpy as np, clkit
ctx = clkit.Context()
rng = np.random.default_rng(7)
bad = n = 0
for m, k, nn in ((17, 4096, 4096), (33, 4097, 4095), (64, 4096, 1024), (64, 1024, 4096), (65, 2049, 3001), (48, 8192, 777), (64, 8192, 8192)):
    for kmajor in (False, True):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((nn, k) if kmajor else (k, nn)).astype(np.float32)
        bt = ctx.to_device(b, "f32")
        c = ctx.matmul(ctx.to_device(a, "f32"), bt.T if kmajor else bt).get().astype(np.float64)
        bq = (b.T if kmajor else b).astype(np.float64)
        err = np.max(np.abs(c - a.astype(np.float64) @ bq) / (np.abs(a).astype(np.float64) @ np.abs(bq) + 1e-30))
        n += 1; ok = err < 1e-5; bad += not ok
        print(m, k, nn, "kmajor" if kmajor else "nmajor", "err %.2e" % err, "ok" if ok else "FAIL", flush=True)
print("check_f32: %d passed, %d failed" % (n - bad, bad))

"""Skinny shapes on the GPU against float64 NumPy: M 1-17, odd N and K, both B layouts, f16 / bf16 / f32."""
import sys
sys.path.insert(0, "python")
import numpy as np, clkit
ctx = clkit.Context()
rng = np.random.default_rng(3)
bad = 0; n = 0
for dt in ("f16", "bf16", "f32"):
    for m, k, nn in ((1, 4096, 4096), (2, 4096, 4095), (3, 1000, 777), (4, 4097, 520), (5, 64, 8), (1, 7, 3), (16, 2048, 1024), (17, 300, 513), (1, 4096, 1024), (2, 4096, 14336), (8, 4096, 4096), (1, 11008, 4099), (16, 4096, 4096), (1, 300, 50000)):
        for kmajor in (False, True):
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((nn, k) if kmajor else (k, nn)).astype(np.float32)
            ad = ctx.to_device(a, dt); bd = ctx.to_device(b, dt)
            bt = bd.T if kmajor else bd
            c = ctx.matmul(ad, bt).get().astype(np.float64)
            aq = ad.get().astype(np.float64) if dt != "bf16" else clkit.from_bf16(ad.get()).astype(np.float64)
            bq = bd.get().astype(np.float64) if dt != "bf16" else clkit.from_bf16(bd.get()).astype(np.float64)
            ref = aq @ (bq.T if kmajor else bq)
            err = np.max(np.abs(c - ref) / (np.abs(aq) @ np.abs(bq.T if kmajor else bq) + 1e-30))
            n += 1
            ok = err < 1e-5
            bad += not ok
            print(dt, m, k, nn, "kmajor" if kmajor else "nmajor", "err %.2e" % err, "ok" if ok else "FAIL", flush=True)
print("check_skinny: %d passed, %d failed" % (n - bad, bad))

"""mode dump FILE: outputs of split-K shapes; mode time: default-config times."""
import sys; sys.path.insert(0, "python")
import numpy as np, clkit
mode = sys.argv[1]
SH = [(1,4096,4096),(2,4096,4096),(15,4096,4096),(16,4096,4096),(17,4096,1000),(33,4096,4096),(48,4096,4096),(63,4096,4096),
      (64,4096,4096),(65,4096,4096),(64,4096,512),(64,4096,1024),(64,4096,2048),(16,4100,3000),(64,1030,4096),(7,8192,4096)]
def inputs(m, n, k, dt, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
with clkit.Context(profiling=True) as ctx:
    if mode == "dump":
        res = {}
        for i, (m, n, k) in enumerate(SH):
            for dt in (np.float16, np.float32):
                a, b = inputs(m, n, k, dt, i)
                res[f"{m}x{n}x{k}{dt.__name__}"] = ctx.matmul(a, b)
                c0 = np.random.default_rng(99).standard_normal((m, n)).astype(np.float32)
                res[f"{m}x{n}x{k}{dt.__name__}beta"] = ctx.matmul(a, b, out=c0.copy(), beta=0.5, activation="relu")
                if dt == np.float16:
                    res[f"{m}x{n}x{k}f16out"] = ctx.matmul(a, b, out_dtype=np.float16)
                if len(sys.argv) > 3: continue
                ref = a.astype(np.float64) @ b.astype(np.float64)
                err = np.max(np.abs(res[f"{m}x{n}x{k}{dt.__name__}"] - ref)) / np.max(np.abs(ref))
                refb = np.maximum(0.5 * c0 + ref, 0)
                errb = np.max(np.abs(res[f"{m}x{n}x{k}{dt.__name__}beta"] - refb)) / np.max(np.abs(refb))
                print(f"check {m}x{n}x{k} {dt.__name__}: rel err {err:.1e}, beta/relu {errb:.1e}", "OK" if max(err, errb) < 1e-4 else "BAD", flush=True)
        np.savez(sys.argv[2], **res)
    else:
        tag = sys.argv[2]
        for (m, n, k, dt) in [(1,4096,4096,np.float16),(4,4096,4096,np.float16),(16,4096,4096,np.float16),(32,4096,4096,np.float16),
                              (48,4096,4096,np.float16),(64,4096,4096,np.float16),(64,4096,512,np.float16),(64,4096,1024,np.float16),
                              (64,4096,2048,np.float16),(16,4096,1024,np.float16),(64,4096,4096,np.float32),(32,4096,4096,np.float32),
                              (128,4096,4096,np.float32)]:
            if (m, dt) not in ((48, np.float16), (64, np.float16), (16, np.float16), (32, np.float32)) or k != 4096: continue
            a, b = inputs(m, n, k, dt, 0)
            da, db = ctx.to_device(a), ctx.to_device(b)
            out = ctx.to_device(np.zeros((m, n), np.float32))
            r = ctx.benchmark(lambda c: c.matmul(da, db, out=out))
            print(f"time {tag} {m}x{n}x{k} {dt.__name__} {r.median_ms*1e3:.2f} us", flush=True)

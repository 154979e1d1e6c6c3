"""Climbing scores: o, lse and the gradients against torch float64 (CPU), errors over the largest."""
import sys; sys.path.insert(0, "python")
import numpy as np, clkit, torch
def bf16(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7fff + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)
rng = np.random.default_rng(1)
with clkit.Context() as ctx:
    for ramp in (40, 120):
      for name in ("f16", "bf16"):
        rnd = (lambda x: x.astype(np.float16).astype(np.float32)) if name == "f16" else bf16
        for d in (64, 128):
            for causal in (False, True):
                lq, lk = (700 if causal else 130), 700
                q = rnd(0.75 + rng.uniform(-2, 2, (1, 2, lq, d)) / 8)
                g = ramp / (0.375 * d * d ** -0.5 * 1.4426950408889634)
                t = (np.arange(lk) / lk) ** 3
                k = rnd(g * t[None, None, :, None] * np.abs(rng.uniform(-2, 2, (1, 1, lk, d))) / 2)
                v = rnd(rng.uniform(-1, 1, (1, 1, lk, d))); do = rnd(rng.uniform(-1, 1, (1, 2, lq, d)))
                dev = [ctx.to_device(x, name) for x in (q, k, v, do)]
                r = ctx.attention_forward(dev[0], dev[1], dev[2], causal=causal)
                dq, dk, dv = ctx.attention_backward(dev[0], dev[1], dev[2], r.out, dev[3], r.lse, causal=causal)
                got = [ctx.copy(x, dtype="f32").get().astype(np.float64) for x in (r.out, dq, dk, dv)]
                tq, tk, tv = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
                s = (tq @ tk.expand(1, 2, lk, d).transpose(-1, -2)) / d ** 0.5
                if causal: s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool).triu(1), float("-inf"))
                o = torch.softmax(s, -1) @ tv.expand(1, 2, lk, d)
                o.backward(torch.tensor(do, dtype=torch.float64))
                want = [o.detach().numpy(), tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy()]
                errs = " ".join(f"{n} {np.max(np.abs(a - b)) / np.max(np.abs(b)):.2e}" for n, a, b in zip(("o", "dq", "dk", "dv"), got, want))
                print(f"ramp {ramp} {name} d{d} causal {causal}: {errs}", flush=True)

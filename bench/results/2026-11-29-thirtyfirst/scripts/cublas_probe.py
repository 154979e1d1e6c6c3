"""cuBLAS kernel names and device durations (torch profiler) for matmul shapes, f16/bf16 with f32 out."""
import sys, torch
from torch.profiler import profile, ProfilerActivity
shapes = [(64,4096,4096),(128,4096,4096),(256,4096,4096),(512,4096,4096),(1024,1024,1024),
          (768,768,768),(2048,2048,2048),(128,4096,1024),(128,4096,2048),(128,4096,8192),(16,4096,4096),(1,4096,4096)]
flush = torch.empty(256*1024*1024//4, dtype=torch.int32, device="cuda")
for dt in (torch.float16, torch.bfloat16, torch.float32):
    torch.backends.cuda.matmul.allow_tf32 = False
    for (m,n,k) in shapes:
        if dt == torch.float32 and m not in (1,16,128): continue
        a = torch.randn(m,k,device="cuda",dtype=dt); b = torch.randn(k,n,device="cuda",dtype=dt)
        f = (lambda: torch.mm(a,b,out_dtype=torch.float32)) if dt != torch.float32 else (lambda: torch.mm(a,b))
        for _ in range(3): f()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                flush.zero_(); f()
            torch.cuda.synchronize()
        ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "fill" not in e.name.lower() and "zero" not in e.name.lower()]
        names = {}
        for e in ev:
            names.setdefault(e.name, []).append(e.device_time_total if hasattr(e,'device_time_total') else e.cuda_time_total)
        for nm, ts in names.items():
            ts = sorted(ts)
            print(f"{str(dt)[6:]:8s} {m}x{n}x{k} n={len(ts)} med={ts[len(ts)//2]:.1f}us  {nm[:200]}")

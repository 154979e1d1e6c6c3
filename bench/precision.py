#!/usr/bin/env python3
"""Error of clkit's f32 paths against a float64 reference, beside PyTorch's on the same inputs.

The tensor-core f32 paths (3xTF32 matmul and attention on NVIDIA sm_80+) trade exact f32
products for speed; this measures what that costs against cuBLAS's SGEMM and torch's f32
attention. On the GPU machine, from the project root after `source .gpu/env.sh`:

    CLKIT_DEVICE=nvidia python3 bench/precision.py --matmul 1024 4096 --attention 1024 4096

It runs bench/precision (built beside the library) for each size: matmul C = A B of N x N
uniform [-1, 1) inputs through clkit's default path, exact_f32 and allow_tf32; causal attention
1 x 4 x L x 128 through the default path and with CLKIT_TENSOR_CORES=0 (portable). Errors:
relative Frobenius norm of the difference, and the largest |error| over the largest |value|.
The reference and the torch rows use torch (on the GPU when there is one); without torch the
reference is computed in plain Python (small sizes only) and the torch rows are left out.
"""
import argparse
import array
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "build", "bench", "precision")

try:
    import torch
except ImportError:
    torch = None


def run_tool(args, env=None):
    subprocess.run([TOOL, *args], check=True, env=env)


def load(path):
    """A file of raw f32: a flat CPU tensor with torch, else an array."""
    if torch is not None:
        return torch.from_file(path, size=os.path.getsize(path) // 4, dtype=torch.float32).clone()
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def errors(got, want):
    """(relative Frobenius, max |err| / max |want|) of a flat result against the reference."""
    if torch is not None:
        w = want.flatten()
        e = (got.flatten().to(w.device).double() - w).abs()
        return float(e.norm() / w.norm()), float(e.max() / w.abs().max())
    num = sum((g - w) ** 2 for g, w in zip(got, want))
    den = sum(w * w for w in want)
    worst = max(abs(g - w) for g, w in zip(got, want))
    return math.sqrt(num / den), worst / max(abs(w) for w in want)


def row(name, errs):
    print(f"  {name:>28}: relative Frobenius {errs[0]:.3e}   max |err| / max |value| {errs[1]:.3e}")


def device():
    return "cuda" if torch is not None and torch.cuda.is_available() else "cpu"


def matmul_ref(ab, n):
    if torch is not None:
        t = ab.to(device())
        a, b = t[: n * n].reshape(n, n), t[n * n:].reshape(n, n)
        return a, b, a.double() @ b.double()
    if n > 256:
        sys.exit("precision.py: without torch, matmul sizes up to 256")
    a, b = ab[: n * n], ab[n * n:]
    return None, None, [sum(a[i * n + k] * b[k * n + j] for k in range(n)) for i in range(n) for j in range(n)]


def matmul(n, tmp):
    run_tool(["matmul", str(n), tmp])
    a, b, ref = matmul_ref(load(os.path.join(tmp, "ab.bin")), n)
    print(f"matmul f32 {n}^3")
    for mode in ("default", "exact", "tf32"):
        row(f"clkit {mode}", errors(load(os.path.join(tmp, f"c_{mode}.bin")), ref))
    if a is not None:
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            row("torch " + ("TF32" if tf32 else "f32 (TF32 off)"), errors(a @ b, ref))
        torch.backends.cuda.matmul.allow_tf32 = False


def attention_ref(qkv, l):
    n = 4 * l * 128
    if torch is not None:
        t = qkv.to(device())
        q, k, v = (t[i * n:(i + 1) * n].reshape(1, 4, l, 128) for i in range(3))
        s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(128)
        s = s.masked_fill(torch.ones(l, l, dtype=torch.bool, device=t.device).triu(1), float("-inf"))
        return (q, k, v), torch.softmax(s, -1) @ v.double()
    if l > 64:
        sys.exit("precision.py: without torch, attention lengths up to 64")
    out = []
    for h in range(4):
        base = h * l * 128
        q, k, v = (qkv[i * n + base:i * n + base + l * 128] for i in range(3))
        for i in range(l):
            s = [sum(q[i * 128 + d] * k[j * 128 + d] for d in range(128)) / math.sqrt(128) for j in range(i + 1)]
            m = max(s)
            p = [math.exp(x - m) for x in s]
            z = sum(p)
            out += [sum(p[j] * v[j * 128 + d] for j in range(i + 1)) / z for d in range(128)]
    return None, out


def attention(l, tmp):
    outs = {}
    for tag, tc in (("clkit default", None), ("clkit portable", "0")):
        env = dict(os.environ)
        if tc is not None:
            env["CLKIT_TENSOR_CORES"] = tc
        run_tool(["attention", str(l), tmp], env)
        outs[tag] = load(os.path.join(tmp, "o.bin"))
    qkv, ref = attention_ref(load(os.path.join(tmp, "qkv.bin")), l)
    print(f"attention f32 causal 1x4x{l}x128")
    for tag, o in outs.items():
        row(tag, errors(o, ref))
    if qkv is not None:
        o = torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=True)
        row("torch scaled_dot_product", errors(o, ref))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--matmul", type=int, nargs="*", default=[], metavar="N")
    ap.add_argument("--attention", type=int, nargs="*", default=[], metavar="L")
    args = ap.parse_args()
    if not os.access(TOOL, os.X_OK):
        sys.exit(f"precision.py: {TOOL} not built (meson compile -C build)")
    print(f"reference: float64 by {'torch on ' + device() if torch is not None else 'plain Python'}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.matmul:
            matmul(n, tmp)
        for l in args.attention:
            attention(l, tmp)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch peers for `clkit bench`: eager PyTorch and torch.compile (Triton code) on the
shapes `clkit bench` runs, timed with triton.testing.do_bench, side by side with a clkit CSV.

On the GPU machine, from the project root (see ../shared/gpu/README.md):

    CLKIT_DEVICE=nvidia build/tools/clkit bench --csv > clkit.csv
    python3 bench/torch_peer.py --clkit clkit.csv --out merged.csv

GB/s count what the op must move: every input read once and the output written once
(dropout: x in and y out, although eager PyTorch also writes a mask). The softmax sweep is a
subset of clkit's N = 128 i so that a full run stays within minutes. A peer that fails (a
torch.compile error, memory) leaves its column empty; the error goes to stderr.

matmul is rated in TFLOP/s (2 M N K batch per call) against torch.matmul, which is cuBLAS:
f32 with TF32 off (SGEMM, as clkit computes), f16/bf16 inputs with f32 accumulation and, where
torch has out_dtype (2.8+), an f32 output as clkit writes; older torch writes the inputs'
dtype (noted on stderr). Its table puts clkit's three columns of the CSV (tuned, heuristic
default, CLBlast) beside cuBLAS, with the ratios clkit/cuBLAS and clkit/CLBlast.

layernorm and layernorm_backward follow the Triton tutorial: x = -2.3 + 0.5 randn, weight and
bias rand, all requiring grad, eps 1e-5; the forward is F.layer_norm (eager and compiled), the
backward y.backward(dy) on a graph built once, timed with grad_to_none=[x] (eager, and the
backward of the compiled forward). GB/s count x and y, or dy, x and dx, as clkit does;
`--op layernorm` runs both, as in clkit bench.

linear_cross_entropy is F.cross_entropy(x @ W.T, targets) and its backward (dx, dW) per step,
eager (column torch), and the same with the logits upcast to f32 before the loss, as language
models' heads do (column upcast; TARGETS.md's torch times and peaks are of this size). Both
are timed with grad_to_none=[x, W], in TFLOP/s (6 T D V per step) and ms. Beside clkit's
scratch peak (clkit_scratch_peak of one call) it shows torch's peak extra memory: the most
memory torch held during one step beyond what it held before it, inputs and weights, and the
gradients the step creates (clkit's caller holds those as dx and dweight).

attention and attention_backward are F.scaled_dot_product_attention on (B, H, L, D) tensors,
is_causal as the shape's ".causal" says, the default scale 1/sqrt(D), on whichever backend
torch dispatches to (TARGETS.md's f16 figures are FlashAttention-2's). q, k and v require
grad in both, so that the forward saves what its backward needs, as clkit's writes lse (the
tutorial does the same). attention times the forward alone; attention_backward times
o.backward(dout) alone, on a graph built once and retained, with grad_to_none=[q, k, v] so
that no repeat accumulates into the previous gradients. Both in TFLOP/s as the tutorial counts
them (4 B H L^2 D, halved when causal; the backward 2.5 times that) and ms; f32 with TF32 off
in cuBLAS and cuDNN, as clkit computes in f32.

Shapes with ".qLq" (L is then Lk) and ".kvHkv" run q (B, H, Lq, D) against k and v (B, Hkv,
Lk, D) with enable_gqa (decoding against a KV cache); ".br" is the bottom-right causal mask
(torch.nn.attention.bias.causal_lower_right).

For the targets of TARGETS.md:

    CLKIT_DEVICE=nvidia build/tools/clkit bench --op layernorm --csv > ln-f32.csv
    python3 bench/torch_peer.py --op layernorm --clkit ln-f32.csv --out ln-f32-merged.csv
    CLKIT_DEVICE=nvidia build/tools/clkit bench --op layernorm --dtype f16 --csv > ln-f16.csv
    python3 bench/torch_peer.py --op layernorm --dtype f16 --clkit ln-f16.csv --out ln-f16-merged.csv
    CLKIT_DEVICE=nvidia build/tools/clkit bench --op linear_cross_entropy --dtype f16 --csv > lce.csv
    python3 bench/torch_peer.py --op linear_cross_entropy --dtype f16 --clkit lce.csv --out lce-merged.csv
    CLKIT_DEVICE=nvidia build/tools/clkit bench --op attention --csv > att-f32.csv
    python3 bench/torch_peer.py --op attention --clkit att-f32.csv --out att-f32-merged.csv
    CLKIT_DEVICE=nvidia build/tools/clkit bench --op attention --dtype f16 --csv > att-f16.csv
    python3 bench/torch_peer.py --op attention --dtype f16 --clkit att-f16.csv --out att-f16-merged.csv
"""
import argparse
import csv
import sys

OPS = ("add", "softmax", "dropout", "copy", "grayscale", "matmul", "layernorm",
       "layernorm_backward", "linear_cross_entropy", "attention", "attention_backward")
# --op FAMILY runs each op of it, as `clkit bench --op` does.
FAMILIES = {"layernorm": ("layernorm", "layernorm_backward"),
            "attention": ("attention", "attention_backward")}
ELEMENT_SIZE = {"f32": 4, "f16": 2, "bf16": 2, "u8": 1}
TORCH_DTYPE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "u8": "uint8"}
SOFTMAX_TARGETS = (256, 1024, 4096, 12672, 32768)  # TARGETS.md
LAYERNORM_TARGET = 8192  # TARGETS.md: 4096 x 8192
LAYERNORM_EPS = 1e-5
# B, H, D of TARGETS.md's attention rows (the tutorial's f32 shape, then the f16 one), each
# over L = 512 i for i = 1 .. 16, causal, as clkit bench runs both in every dtype.
ATTENTION_CONFIGS = ((32, 4, 128), (8, 16, 64))
# The table of an op's rows (its columns and peers): GB/s for the bandwidth ops, TFLOP/s
# for matmul, time, TFLOP/s and memory for linear_cross_entropy, TFLOP/s and time for
# attention.
TABLE_OF = {"matmul": "matmul", "linear_cross_entropy": "lce", "attention": "attention",
            "attention_backward": "attention"}
# The providers of a `clkit bench` CSV (its provider column) and the peers run here.
CLKIT_COLUMNS = {"gbps": ("clkit",), "matmul": ("clkit", "heuristic", "clblast"),
                 "lce": ("clkit",), "attention": ("clkit",)}
PEERS = {"gbps": ("torch", "compile"), "matmul": ("torch",), "lce": ("torch", "upcast"),
         "attention": ("torch",)}


class Case:
    """One op on one dtype and shape; `shape` is spelled as clkit's CSV spells it. `work` is
    bytes moved (unit gbps) or floating-point operations (unit tflops) per call."""

    def __init__(self, op, dtype, shape, work, unit="gbps", dims=(), transposed=False):
        self.op, self.dtype, self.shape, self.work, self.unit = op, dtype, shape, work, unit
        self.dims, self.transposed = dims, transposed
        self.shared_b = shape.endswith(".bshared")
        self.causal = shape.endswith(".causal")

    @property
    def key(self):
        return (self.op, self.dtype, self.shape)

    @property
    def table(self):
        return TABLE_OF.get(self.op, "gbps")

    def rate(self, ms):
        return self.work / ms * (1e-6 if self.unit == "gbps" else 1e-9)


def make_case(op, dtype, dims, transposed=False):
    shape = "x".join(str(d) for d in dims) + (".T" if transposed else "")
    # grayscale: 3 planes in; layernorm_backward: dy and x (the tutorial counts no weights)
    inputs = {"add": 2, "grayscale": 3, "layernorm_backward": 2}.get(op, 1)
    numel = 1
    for d in dims:
        numel *= d
    return Case(op, dtype, shape, (inputs + 1) * numel * ELEMENT_SIZE[dtype], "gbps", dims,
                transposed)


def make_matmul(dtype, m, n, k, batch=1, shared_b=False):
    """M x N x K [x batch], B broadcast over the batch when shared_b: clkit's spelling."""
    shape = f"{m}x{n}x{k}" + (f"x{batch}" if batch > 1 else "") + (".bshared" if shared_b else "")
    return Case("matmul", dtype, shape, 2 * m * n * k * batch, "tflops", (m, n, k, batch))


def make_lce(dtype, t, d, v):
    """T x D x V, as clkit spells it; 2 T D V flops forward, three times that with the
    backward (TARGETS.md)."""
    return Case("linear_cross_entropy", dtype, f"{t}x{d}x{v}", 6 * t * d * v, "tflops",
                (t, d, v))


def make_attention(op, dtype, b, h, l, d, causal=True, lq=0, hkv=0, bottom_right=False):
    """B x H x L x D[.qLq][.kvHkv][.causal|.br] as clkit spells it (L is Lk where .q gives Lq;
    .br: bottom-right causal); the tutorial's FLOPs: 4 B H Lq Lk D, halved by the top-left
    causal mask, the backward 2.5 times the forward."""
    forward = 4 * b * h * (lq or l) * l * d // (2 if causal else 1)
    work = forward * 5 // 2 if op == "attention_backward" else forward
    mask = ".causal" if causal else ".br" if bottom_right else ""
    shape = f"{b}x{h}x{l}x{d}" + (f".q{lq}" if lq else "") + (f".kv{hkv}" if hkv else "") + mask
    case = Case(op, dtype, shape, work, "tflops", (b, h, l, d))
    case.lq, case.hkv, case.bottom_right = lq or l, hkv or h, bottom_right
    return case


def matmul_cases(dtype, quick):
    """The rows of `clkit bench --op matmul` (tools/ops.c: matmul_shapes)."""
    sides = [128 * i for i in ((2, 4) if quick else range(2, 33))] + ([] if quick else [8192])
    cases = [make_matmul(dtype, s, s, s) for s in sides]
    side, cube, batch = (1024, 256, 4) if quick else (4096, 512, 16)
    cases += [make_matmul(dtype, m, side, side) for m in ((8,) if quick else (1, 8, 16))]
    return cases + [make_matmul(dtype, cube, cube, cube, batch, shared) for shared in (0, 1)]


def cases(op, dtype, quick):
    """The shapes of `clkit bench` (tools/ops.c), softmax and layernorm thinned out."""
    stream = [1 << e for e in (range(12, 21, 4) if quick else range(12, 28))]
    if op in ("add", "dropout"):
        return [make_case(op, dtype, (n,)) for n in stream]
    if op == "copy":
        sides = (1024,) if quick else (1024, 4096, 8192)
        return [make_case(op, dtype, (n,)) for n in stream] + [
            make_case(op, dtype, (s, s), transposed=True) for s in sides]
    if op == "softmax":
        if quick:
            return [make_case(op, dtype, (256, 128 * i)) for i in (2, 8, 32)]
        ns = sorted(set(SOFTMAX_TARGETS) | {128 * i for i in range(2, 101, 8)})
        return [make_case(op, dtype, (4096, n)) for n in ns]
    if op == "matmul":
        return matmul_cases(dtype, quick)
    if op in ("layernorm", "layernorm_backward"):
        if quick:
            return [make_case(op, dtype, (256, n)) for n in (1024, 4096, 8192)]
        ns = sorted({512 * i for i in range(2, 32, 4)} | {LAYERNORM_TARGET})
        return [make_case(op, dtype, (4096, n)) for n in ns]
    if op == "linear_cross_entropy":
        shapes = [(512, 128, 1000)] if quick else [(32768, 384, 32768), (8192, 4096, 128256)]
        return [make_lce(dtype, *s) for s in shapes]
    if op in ("attention", "attention_backward"):
        shapes = [(1, 2, 256, 64)] if quick else [
            (b, h, 512 * i, d) for b, h, d in ATTENTION_CONFIGS for i in range(1, 17)]
        return [make_attention(op, dtype, *s) for s in shapes]
    # grayscale: the float dtype where the op has it (f32), and u8, as clkit bench.
    images = [(1066, 1600)] + ([] if quick else [(2160, 3840)])
    dtypes = (["f32"] if dtype == "f32" else []) + ["u8"]
    return [make_case(op, t, hw) for t in dtypes for hw in images]


def cases_of(op, dtype, text):
    """The cases of one shape spelled as clkit's CSV spells it (`clkit bench --shapes`):
    grayscale in u8 too, as clkit bench runs it."""
    body, *suffixes = text.split(".")
    dims = tuple(int(d) for d in body.split("x"))
    if op == "matmul":
        return [make_matmul(dtype, *dims, shared_b="bshared" in suffixes)]
    if op == "linear_cross_entropy":
        return [make_lce(dtype, *dims)]
    if op in ("attention", "attention_backward"):
        counts = {w[:2] if w.startswith("kv") else w[:1]: int(w.lstrip("qkv")) for w in suffixes
                  if w[:1] == "q" or w[:2] == "kv"}
        return [make_attention(op, dtype, *dims, causal="causal" in suffixes, lq=counts.get("q", 0),
                               hkv=counts.get("kv", 0), bottom_right="br" in suffixes)]
    if op == "grayscale":
        return [make_case(op, t, dims) for t in (["f32"] if dtype == "f32" else []) + ["u8"]]
    return [make_case(op, dtype, dims, transposed="T" in suffixes)]


# ---- clkit CSV ----

def number(text):
    return float(text) if text not in (None, "") else None


def read_clkit(path):
    """Rows of a `clkit bench --csv` file by (op, dtype, shape), each with the rates of its
    providers ({"clkit": (median, p20, p80), ...}), other fields of clkit's provider
    ({"clkit_scratch_mib": ...}), and the device named. CSVs from before the provider column
    hold clkit's GB/s alone, those from before scratch_mib no scratch."""
    rows, device = {}, ""
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            unit = "tflops" if r.get("n_flops") else "gbps"
            work = int(float(r["n_flops"] if unit == "tflops" else r["n_bytes"]))
            row = rows.setdefault((r["op"], r["dtype"], r["shape"]),
                                  {"unit": unit, "work": work, "rates": {}, "fields": {}})
            provider = r.get("provider") or "clkit"
            row["rates"][provider] = tuple(
                number(r.get(f"{unit}_{q}")) for q in ("median", "p20", "p80"))
            scratch = number(r.get("scratch_mib"))
            if provider == "clkit" and scratch is not None:
                row["fields"]["clkit_scratch_mib"] = scratch
            device = r["device"]
    return rows, device


# ---- peers ----

def matmul_function(case, torch):
    """torch.matmul, with an f32 output for f16/bf16 inputs where torch has out_dtype; a
    shared B folds the batch into M, as torch.matmul does itself."""
    if case.dtype == "f32":
        return torch.matmul, ""

    def mm(a, b):
        if a.dim() == 2:
            return torch.mm(a, b, out_dtype=torch.float32)
        if b.dim() == 2:
            flat = torch.mm(a.reshape(-1, a.shape[-1]), b, out_dtype=torch.float32)
            return flat.view(a.shape[0], a.shape[1], b.shape[1])
        return torch.bmm(a, b, out_dtype=torch.float32)
    return mm, "out_dtype"


def peer_function(case, torch):
    """The PyTorch expression of the op, as a function of its inputs."""
    F = torch.nn.functional
    if case.op in ("layernorm", "layernorm_backward"):
        return lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, LAYERNORM_EPS)
    if case.op == "linear_cross_entropy":
        return lambda x, w, targets: F.cross_entropy(x @ w.t(), targets)
    if case.op in ("attention", "attention_backward"):
        mask = None
        if case.bottom_right:
            from torch.nn.attention.bias import causal_lower_right
            mask = causal_lower_right(case.lq, case.dims[2])
        gqa = case.hkv != case.dims[1]
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=case.causal,
                                                              enable_gqa=gqa)
    if case.op == "add":
        return lambda x, y: x + y
    if case.op == "softmax":
        return lambda x: torch.softmax(x, -1)
    if case.op == "dropout":
        return lambda x: F.dropout(x, 0.5, training=True)
    if case.op == "copy":
        return (lambda x: x.t().contiguous()) if case.transposed else (lambda x: x.clone())
    if case.op == "matmul":
        return matmul_function(case, torch)[0]

    def gray(rgb):  # in float, then rounded for u8 as clkit_rgb_to_gray
        f = rgb.float()
        g = 0.2989 * f[0] + 0.5870 * f[1] + 0.1140 * f[2]
        return g.round().clamp(0, 255).to(torch.uint8) if rgb.dtype == torch.uint8 else g
    return gray


def peer_inputs(case, torch):
    dtype = getattr(torch, TORCH_DTYPE[case.dtype])

    def rand(*shape):
        if dtype == torch.uint8:
            return torch.randint(0, 256, shape, dtype=dtype, device="cuda")
        return torch.randn(shape, dtype=dtype, device="cuda")
    if case.op == "add":
        return (rand(*case.dims), rand(*case.dims))
    if case.op == "grayscale":
        return (rand(3, *case.dims),)
    if case.op == "matmul":
        m, n, k, batch = case.dims
        lead = (batch,) if batch > 1 else ()
        return (rand(*lead, m, k), rand(k, n) if case.shared_b else rand(*lead, k, n))
    if case.op in ("layernorm", "layernorm_backward"):  # the tutorial's values
        m, n = case.dims
        x = (-2.3 + 0.5 * rand(m, n)).requires_grad_()
        w = torch.rand(n, dtype=dtype, device="cuda", requires_grad=True)
        b = torch.rand(n, dtype=dtype, device="cuda", requires_grad=True)
        return (x, w, b) + ((0.1 * rand(m, n),) if case.op == "layernorm_backward" else ())
    if case.op == "linear_cross_entropy":
        t, d, v = case.dims
        weight = (rand(v, d) * d ** -0.5).requires_grad_()
        return (rand(t, d).requires_grad_(), weight,
                torch.randint(0, v, (t,), device="cuda"))
    if case.op in ("attention", "attention_backward"):
        b, h, lk, d = case.dims
        q = rand(b, h, case.lq, d).requires_grad_()
        k, v = (rand(b, case.hkv, lk, d).requires_grad_() for _ in range(2))
        return (q, k, v) + ((rand(b, h, case.lq, d),) if case.op == "attention_backward" else ())
    if case.transposed:  # the source is the (cols, rows) matrix, read transposed
        return (rand(case.dims[1], case.dims[0]),)
    return (rand(*case.dims),)


def step(case, fn, args):
    """What one timed repeat runs, and the tensors whose gradients do_bench drops before each
    (grad_to_none, as the tutorials): layernorm_backward and attention_backward the backward
    of a graph built here once, linear_cross_entropy a forward and backward, the others
    fn(*args)."""
    if case.op == "layernorm_backward":
        x, w, b, dy = args
        y = fn(x, w, b)
        return (lambda: y.backward(dy, retain_graph=True)), [x]
    if case.op == "attention_backward":
        q, k, v, dout = args
        o = fn(q, k, v)
        return (lambda: o.backward(dout, retain_graph=True)), [q, k, v]
    if case.op == "linear_cross_entropy":
        x, w, _ = args
        return (lambda: fn(*args).backward()), [x, w]
    return (lambda: fn(*args)), None


def time_peer(run, grads, case, torch, do_bench):
    """(rate median, p20, p80) of run() by do_bench; the first call compiles."""
    run()
    torch.cuda.synchronize()
    ms, ms_p20, ms_p80 = do_bench(run, grad_to_none=grads, quantiles=[0.5, 0.2, 0.8])
    return case.rate(ms), case.rate(ms_p80), case.rate(ms_p20)


def extra_memory_mib(run, grads, torch):
    """The most memory run() held beyond what was held before it: inputs, weights, and the
    gradients it creates for grads (their buffers are the caller's outputs in clkit)."""
    for t in grads:
        t.grad = None
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() + sum(t.numel() * t.element_size() for t in grads)
    torch.cuda.reset_peak_memory_stats()
    run()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - held) / 2**20


def first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def set_precision(torch, tf32):
    """cuBLAS and cuDNN as clkit computes: TF32 for f32 matmul only under --tf32 (as
    `clkit bench --tf32`), f32 accumulation for f16 and bf16. Each switch only where this
    torch has it."""
    cuda = torch.backends.cuda.matmul
    for name in ("allow_fp16_reduced_precision_reduction",
                 "allow_bf16_reduced_precision_reduction"):
        if hasattr(cuda, name):
            setattr(cuda, name, False)
    if hasattr(cuda, "allow_tf32"):
        cuda.allow_tf32 = tf32
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = False


class Peers:
    """Measures the peers; after one fails on an op and dtype, skips it there."""

    def __init__(self, tf32):
        import torch
        import triton.testing
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device for torch")
        self.torch, self.do_bench = torch, triton.testing.do_bench
        self.broken = set()
        self.plain_matmul = False  # torch.mm has no out_dtype here
        self.name = f"torch {torch.__version__} on {torch.cuda.get_device_name()}"
        set_precision(torch, tf32)
        torch.manual_seed(0)

    def runner(self, case, peer, fn, args):
        """What a peer times: fn itself, or its torch.compile. For matmul without out_dtype,
        plain torch.matmul (an output in the inputs' dtype)."""
        torch = self.torch
        if peer == "upcast":
            F = torch.nn.functional
            return lambda x, w, targets: F.cross_entropy((x @ w.t()).float(), targets)
        if peer == "compile":
            # A fresh compile per shape, specialised as clkit's programs are, and no cache
            # limit that would fall back to eager after 8 shapes.
            torch._dynamo.reset()
            return torch.compile(fn, dynamic=False)
        if case.op == "matmul" and matmul_function(case, torch)[1]:
            if self.plain_matmul:
                return torch.matmul
            try:
                fn(*args)
            except torch.cuda.OutOfMemoryError:
                raise
            except (TypeError, RuntimeError) as e:
                print(f"torch_peer: torch has no f32 output for f16/bf16 matmul "
                      f"({first_line(e)}); timing torch.matmul with an output in the "
                      f"inputs' dtype", file=sys.stderr)
                self.plain_matmul = True
                return torch.matmul
        return fn

    def measure_peer(self, case, peer, fn, args, fields):
        """The rates of one peer; linear_cross_entropy adds its extra memory to fields. The
        graph a step holds goes with this call's locals."""
        run, grads = step(case, self.runner(case, peer, fn, args), args)
        rates = time_peer(run, grads, case, self.torch, self.do_bench)
        if case.op == "linear_cross_entropy":
            fields[f"{peer}_extra_mib"] = extra_memory_mib(run, grads, self.torch)
        return rates

    def measure(self, case):
        """The peers' rates ({peer: (median, p20, p80)}) and other fields measured."""
        torch, rates, fields = self.torch, {}, {}
        fn = peer_function(case, torch)
        try:
            args = peer_inputs(case, torch)
        except torch.cuda.OutOfMemoryError as e:
            print(f"torch_peer: skipping {case.op} {case.dtype} {case.shape}: {first_line(e)}",
                  file=sys.stderr)
            return rates, fields
        for peer in PEERS[case.table]:
            if (case.op, case.dtype, peer) in self.broken:
                continue
            try:
                rates[peer] = self.measure_peer(case, peer, fn, args, fields)
            except Exception as e:  # noqa: BLE001 - any peer failure leaves a blank column
                print(f"torch_peer: {peer} failed on {case.op} {case.dtype} {case.shape}: "
                      f"{first_line(e)}; leaving its column empty for this op and dtype",
                      file=sys.stderr)
                self.broken.add((case.op, case.dtype, peer))
        del args
        torch.cuda.empty_cache()
        return rates, fields


# ---- report ----

def rate_columns(unit, tables):
    whos = dict.fromkeys(w for t in tables for w in CLKIT_COLUMNS[t] + PEERS[t])
    return [f"{who}_{unit}{q}" for who in whos for q in ("", "_p20", "_p80")]


# linear_cross_entropy's own: ms from the rates, memory, and the ratios TARGETS.md sets; the
# ms and clkit/torch serve attention too.
LCE_COLUMNS = ["clkit_ms", "torch_ms", "clkit_over_torch", "upcast_ms", "clkit_over_upcast",
               "clkit_scratch_mib", "torch_extra_mib", "clkit_scratch_over_torch_extra",
               "upcast_extra_mib"]
COLUMNS = (["op", "dtype", "shape", "n_bytes"] + rate_columns("gbps", ["gbps"])
           + ["clkit_over_best_peer"] + ["n_flops"] + rate_columns("tflops", ["matmul", "lce"])
           + ["clkit_over_cublas", "clkit_over_clblast"] + LCE_COLUMNS)


def ratio(a, b):
    return a / b if a is not None and b else None


def merge(case, clkit_row, measured, fields):
    u = case.unit
    row = {"op": case.op, "dtype": case.dtype, "shape": case.shape,
           ("n_bytes" if u == "gbps" else "n_flops"): case.work}
    rates = dict(clkit_row["rates"]) if clkit_row else {}
    rates.update(measured)
    for who, values in rates.items():
        for q, v in zip(("", "_p20", "_p80"), values):
            row[f"{who}_{u}{q}"] = v
    row.update(clkit_row["fields"] if clkit_row else {})
    row.update(fields)
    clkit = row.get(f"clkit_{u}")
    if case.table == "gbps":
        best = max((row.get(f"{p}_gbps") or 0 for p in PEERS["gbps"]), default=0)
        row["clkit_over_best_peer"] = ratio(clkit, best)
    elif case.table == "matmul":
        row["clkit_over_cublas"] = ratio(clkit, row.get("torch_tflops"))
        row["clkit_over_clblast"] = ratio(clkit, row.get("clblast_tflops"))
    else:
        row["clkit_over_torch"] = ratio(clkit, row.get("torch_tflops"))
        for who in CLKIT_COLUMNS[case.table] + PEERS[case.table]:
            row[f"{who}_ms"] = ratio(case.work * 1e-9, row.get(f"{who}_tflops"))
        if case.table == "lce":
            row["clkit_over_upcast"] = ratio(clkit, row.get("upcast_tflops"))
            row["clkit_scratch_over_torch_extra"] = ratio(row.get("clkit_scratch_mib"),
                                                          row.get("torch_extra_mib"))
    return row


def cell(value, width, digits=1):
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


# The columns of each table: (title, row key, digits), and what its title says.
TABLE = {
    "gbps": [("clkit GB/s", "clkit_gbps", 1), ("torch GB/s", "torch_gbps", 1),
             ("compile GB/s", "compile_gbps", 1), ("clkit/best peer", "clkit_over_best_peer", 2)],
    "matmul": [("clkit tuned", "clkit_tflops", 2), ("heuristic", "heuristic_tflops", 2),
               ("CLBlast", "clblast_tflops", 2), ("torch cuBLAS", "torch_tflops", 2),
               ("clkit/cuBLAS", "clkit_over_cublas", 2),
               ("clkit/CLBlast", "clkit_over_clblast", 2)],
    "lce": [("clkit ms", "clkit_ms", 2), ("torch ms", "torch_ms", 2),
            ("clkit TFLOP/s", "clkit_tflops", 2), ("torch TFLOP/s", "torch_tflops", 2),
            ("clkit/torch", "clkit_over_torch", 2), ("upcast ms", "upcast_ms", 2),
            ("clkit/upcast", "clkit_over_upcast", 2),
            ("clkit scratch MiB", "clkit_scratch_mib", 1),
            ("torch extra MiB", "torch_extra_mib", 1),
            ("scratch/extra", "clkit_scratch_over_torch_extra", 3),
            ("upcast extra MiB", "upcast_extra_mib", 1)],
    "attention": [("clkit TFLOP/s", "clkit_tflops", 2), ("torch TFLOP/s", "torch_tflops", 2),
                  ("clkit/torch", "clkit_over_torch", 2), ("clkit ms", "clkit_ms", 3),
                  ("torch ms", "torch_ms", 3)],
}
TABLE_TITLE = {"gbps": "GB/s (median)", "matmul": "TFLOP/s (median)",
               "lce": "forward + backward, ms and TFLOP/s (median); peak extra device memory",
               "attention": "TFLOP/s and ms (median); attention_backward: the backward alone"}


def print_tables(rows, title):
    print(title)
    groups = {}
    for r in rows:
        groups.setdefault((r["op"], r["dtype"]), []).append(r)
    for (op, dtype), group in groups.items():
        table = TABLE_OF.get(op, "gbps")
        columns = TABLE[table]
        print(f"\n{op} {dtype}: {TABLE_TITLE[table]}")
        print(f"{'shape':>24} " + " ".join(f"{t:>{max(len(t), 11)}}" for t, _, _ in columns))
        for r in group:
            print(f"{r['shape']:>24} " + " ".join(
                cell(r.get(key), max(len(t), 11), d) for t, key, d in columns))


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, restval="")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def parse_args(argv):
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--clkit", metavar="FILE.csv", help="a `clkit bench --csv` file to compare")
    a.add_argument("--out", metavar="FILE.csv", help="write the merged rows as CSV")
    a.add_argument("--op", choices=OPS + ("all",), default="all",
                   help="one op, or layernorm or attention for both of its ops")
    a.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f32")
    a.add_argument("--quick", action="store_true", help="the shapes of `clkit bench --quick`")
    a.add_argument("--shapes", metavar="LIST",
                   help="only these comma-separated shapes, as `clkit bench --shapes` takes them")
    a.add_argument("--tf32", action="store_true",
                   help="f32 matmul in TF32 on the tensor cores (torch's allow_tf32), to set "
                        "against `clkit bench --tf32`")
    a.add_argument("--no-peers", action="store_true",
                   help="run nothing: show the clkit CSV alone (no torch needed)")
    return a.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    clkit_rows, device = read_clkit(args.clkit) if args.clkit else ({}, "")
    if args.no_peers:
        todo = [Case(*key, row["work"], row["unit"]) for key, row in clkit_rows.items()]
        peers, peer_name = None, "no peers run"
    else:
        ops = OPS if args.op == "all" else FAMILIES.get(args.op, (args.op,))
        todo = [c for op in ops for text in args.shapes.split(",") for c in cases_of(op, args.dtype, text)] \
            if args.shapes else [c for op in ops for c in cases(op, args.dtype, args.quick)]
        try:
            peers = Peers(args.tf32)
        except Exception as e:  # noqa: BLE001 - no torch, triton or GPU: say which
            print(f"torch_peer: cannot run the peers: {first_line(e)}", file=sys.stderr)
            return 2
        peer_name = peers.name
    rows = []
    for case in todo:
        measured = peers.measure(case) if peers else ({}, {})
        rows.append(merge(case, clkit_rows.get(case.key), *measured))
    print_tables(rows, f"clkit: {device or 'no CSV given'}; peers: {peer_name}")
    if args.out:
        write_csv(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

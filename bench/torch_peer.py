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
"""
import argparse
import csv
import sys

OPS = ("add", "softmax", "dropout", "copy", "grayscale")
ELEMENT_SIZE = {"f32": 4, "f16": 2, "bf16": 2, "u8": 1}
TORCH_DTYPE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "u8": "uint8"}
SOFTMAX_TARGETS = (256, 1024, 4096, 12672, 32768)  # TARGETS.md
PEERS = ("torch", "compile")


class Case:
    """One op on one dtype and shape; `shape` is spelled as clkit's CSV spells it."""

    def __init__(self, op, dtype, shape, n_bytes, dims=(), transposed=False):
        self.op, self.dtype, self.shape, self.n_bytes = op, dtype, shape, n_bytes
        self.dims, self.transposed = dims, transposed

    @property
    def key(self):
        return (self.op, self.dtype, self.shape)


def make_case(op, dtype, dims, transposed=False):
    shape = "x".join(str(d) for d in dims) + (".T" if transposed else "")
    inputs = {"add": 2, "grayscale": 3}.get(op, 1)  # grayscale: 3 planes in
    numel = 1
    for d in dims:
        numel *= d
    return Case(op, dtype, shape, (inputs + 1) * numel * ELEMENT_SIZE[dtype], dims, transposed)


def cases(op, dtype, quick):
    """The shapes of `clkit bench` (tools/ops.c), softmax thinned out."""
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
    # grayscale: the float dtype where the op has it (f32), and u8, as clkit bench.
    images = [(1066, 1600)] + ([] if quick else [(2160, 3840)])
    dtypes = (["f32"] if dtype == "f32" else []) + ["u8"]
    return [make_case(op, t, hw) for t in dtypes for hw in images]


# ---- clkit CSV ----

def number(text):
    return float(text) if text not in (None, "") else None


def read_clkit(path):
    """Rows of a `clkit bench --csv` file by (op, dtype, shape), and the device named."""
    rows, device = {}, ""
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows[(r["op"], r["dtype"], r["shape"])] = {
                "n_bytes": int(r["n_bytes"]),
                "gbps": number(r["gbps_median"]),
                "gbps_p20": number(r["gbps_p20"]),
                "gbps_p80": number(r["gbps_p80"]),
            }
            device = r["device"]
    return rows, device


# ---- peers ----

def peer_function(case, torch):
    """The PyTorch expression of the op, as a function of its inputs."""
    F = torch.nn.functional
    if case.op == "add":
        return lambda x, y: x + y
    if case.op == "softmax":
        return lambda x: torch.softmax(x, -1)
    if case.op == "dropout":
        return lambda x: F.dropout(x, 0.5, training=True)
    if case.op == "copy":
        return (lambda x: x.t().contiguous()) if case.transposed else (lambda x: x.clone())

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
    if case.transposed:  # the source is the (cols, rows) matrix, read transposed
        return (rand(case.dims[1], case.dims[0]),)
    return (rand(*case.dims),)


def time_peer(fn, args, case, torch, do_bench):
    """(GB/s median, p20, p80) of fn(*args) by do_bench; the first call compiles."""
    fn(*args)
    torch.cuda.synchronize()
    ms, ms_p20, ms_p80 = do_bench(lambda: fn(*args), quantiles=[0.5, 0.2, 0.8])
    rate = lambda t: case.n_bytes / t * 1e-6  # noqa: E731
    return rate(ms), rate(ms_p80), rate(ms_p20)


def first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


class Peers:
    """Measures both peers; after torch.compile fails on an op and dtype, skips it there."""

    def __init__(self):
        import torch
        import triton.testing
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device for torch")
        self.torch, self.do_bench = torch, triton.testing.do_bench
        self.broken = set()
        self.name = f"torch {torch.__version__} on {torch.cuda.get_device_name()}"
        torch.manual_seed(0)

    def measure(self, case):
        torch, result = self.torch, {}
        fn = peer_function(case, torch)
        try:
            args = peer_inputs(case, torch)
        except torch.cuda.OutOfMemoryError as e:
            print(f"torch_peer: skipping {case.op} {case.dtype} {case.shape}: {first_line(e)}",
                  file=sys.stderr)
            return result
        for peer in PEERS:
            if (case.op, case.dtype, peer) in self.broken:
                continue
            try:
                if peer == "compile":
                    # A fresh compile per shape, specialised as clkit's programs are, and
                    # no cache limit that would fall back to eager after 8 shapes.
                    torch._dynamo.reset()
                    run = torch.compile(fn, dynamic=False)
                else:
                    run = fn
                result[peer] = time_peer(run, args, case, torch, self.do_bench)
            except Exception as e:  # noqa: BLE001 - any peer failure leaves a blank column
                print(f"torch_peer: {peer} failed on {case.op} {case.dtype} {case.shape}: "
                      f"{first_line(e)}; leaving its column empty for this op and dtype",
                      file=sys.stderr)
                self.broken.add((case.op, case.dtype, peer))
        del args
        torch.cuda.empty_cache()
        return result


# ---- report ----

COLUMNS = ["op", "dtype", "shape", "n_bytes"] + [
    f"{who}_{what}" for who in ("clkit",) + PEERS for what in ("gbps", "gbps_p20", "gbps_p80")
] + ["clkit_over_best_peer"]


def merge(case, clkit_row, measured):
    row = {"op": case.op, "dtype": case.dtype, "shape": case.shape, "n_bytes": case.n_bytes}
    if clkit_row:
        row.update(clkit_gbps=clkit_row["gbps"], clkit_gbps_p20=clkit_row["gbps_p20"],
                   clkit_gbps_p80=clkit_row["gbps_p80"])
    for peer, (median, p20, p80) in measured.items():
        row.update({f"{peer}_gbps": median, f"{peer}_gbps_p20": p20, f"{peer}_gbps_p80": p80})
    best = max((row.get(f"{p}_gbps") or 0 for p in PEERS), default=0)
    if row.get("clkit_gbps") and best:
        row["clkit_over_best_peer"] = row["clkit_gbps"] / best
    return row


def cell(value, width, digits=1):
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def print_tables(rows, title):
    print(title)
    groups = {}
    for r in rows:
        groups.setdefault((r["op"], r["dtype"]), []).append(r)
    for (op, dtype), group in groups.items():
        print(f"\n{op} {dtype}: GB/s (median)")
        print(f"{'shape':>14} {'clkit GB/s':>11} {'torch GB/s':>11} {'compile GB/s':>13} "
              f"{'clkit/best peer':>16}")
        for r in group:
            print(f"{r['shape']:>14} {cell(r.get('clkit_gbps'), 11)} "
                  f"{cell(r.get('torch_gbps'), 11)} {cell(r.get('compile_gbps'), 13)} "
                  f"{cell(r.get('clkit_over_best_peer'), 16, 2)}")


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
    a.add_argument("--op", choices=OPS + ("all",), default="all")
    a.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f32")
    a.add_argument("--quick", action="store_true", help="the shapes of `clkit bench --quick`")
    a.add_argument("--no-peers", action="store_true",
                   help="run nothing: show the clkit CSV alone (no torch needed)")
    return a.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    clkit_rows, device = read_clkit(args.clkit) if args.clkit else ({}, "")
    if args.no_peers:
        todo = [Case(*key, row["n_bytes"]) for key, row in clkit_rows.items()]
        peers, peer_name = None, "no peers run"
    else:
        ops = OPS if args.op == "all" else (args.op,)
        todo = [c for op in ops for c in cases(op, args.dtype, args.quick)]
        try:
            peers = Peers()
        except Exception as e:  # noqa: BLE001 - no torch, triton or GPU: say which
            print(f"torch_peer: cannot run the peers: {first_line(e)}", file=sys.stderr)
            return 2
        peer_name = peers.name
    rows = []
    for case in todo:
        measured = peers.measure(case) if peers else {}
        rows.append(merge(case, clkit_rows.get(case.key), measured))
    print_tables(rows, f"clkit: {device or 'no CSV given'}; peers: {peer_name}")
    if args.out:
        write_csv(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

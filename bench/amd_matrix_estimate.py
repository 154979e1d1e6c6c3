#!/usr/bin/env python3
"""Static estimate of the fraction of matrix peak the main loop of cl/amd/matmul_matrix.cl can
reach, per tile of host/ops/matmul.c's mfma_shapes / wmma_shapes and per AMD target: for one
work-group and one BLOCK_K slice, the cycles its waves' matrix instructions take on the compute
unit's SIMDs against the cycles its local-memory traffic (fragment reads, tile writes) and its
global traffic (the slice of A and B, from L2) take at the unit's bandwidths. The three overlap
at best, so the slowest bounds the loop. Prints the Markdown table of docs/amd-matrix-cores.md.
No AMD GPU was measured: the inputs are AMD's published figures (below) and
amd_matrix_instruction_calculator's cycle counts.
Usage: bench/amd_matrix_estimate.py [host/ops/matmul.c]"""
import re
import sys

# target: instruction tile m, k (16-bit, f32), cycles (16-bit, f32), SIMDs a CU, wave width,
# LDS bytes/clk a CU, L2 -> CU bytes/clk, CUs, GHz.
TARGETS = {
    "gfx90a (MI250X, one GCD)": ("mfma", 32, 8, 2, 64, 64, 4, 64, 128, 64, 110, 1.7),
    "gfx942 (MI300X)": ("mfma", 32, 8, 2, 32, 64, 4, 64, 128, 64, 304, 2.1),
    "gfx1100 (RX 7900 XTX)": ("wmma", 16, 16, None, 32, None, 2, 32, 128, 64, 96, 2.5),
}


def tables(path):
    src = open(path).read()
    out = {}
    for name in ("mfma", "wmma"):
        body = re.search(name + r"_shapes\[\]\[5\] = \{(.*?)\};", src, re.S).group(1)
        out[name] = [tuple(map(int, t)) for t in re.findall(r"\{(\d+), (\d+), (\d+), (\d+), (\d+)\}", body)]
    return out


def estimate(t, tile, elem):
    kind, im, ik16, ik32, c16, c32, simds, wave, lds, l2, cus, ghz = t
    bm, bn, bk, wm, wn = tile
    if elem == 4:
        bk //= 2
    ik, cyc = (ik16, c16) if elem == 2 else (ik32, c32)
    fm, fn = bm // wm // im, bn // wn // im
    waves = wm * wn
    matrix = waves * fm * fn * (bk // ik) * cyc / simds
    copies = wave // 16 if kind == "wmma" else 1  # WMMA reads each fragment into every 16-lane quarter
    lds_bytes = waves * (bm // wm + bn // wn) * bk * elem * copies + (bm + bn) * bk * elem
    glob = (bm + bn) * bk * elem
    cycles = {"matrix": matrix, "LDS": lds_bytes / lds, "L2": glob / l2}
    bound = max(cycles, key=cycles.get)
    return matrix, cycles["LDS"], cycles["L2"], bound, matrix / cycles[bound], 2 * bm * bn * bk / glob


def main():
    tabs = tables(sys.argv[1] if len(sys.argv) > 1 else "host/ops/matmul.c")
    print("| target | operands | tile (M x N x K, waves) | matrix | LDS | L2 | bound | of peak | flop/byte from L2 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, t in TARGETS.items():
        for elem, label in ((2, "f16/bf16"), (4, "f32")):
            if elem == 4 and t[3] is None:
                continue
            for tile in tabs[t[0]]:
                m, ld, g, bound, frac, inten = estimate(t, tile, elem)
                bk = tile[2] // (2 if elem == 4 else 1)
                print(f"| {name} | {label} | {tile[0]} x {tile[1]} x {bk}, {tile[3]} x {tile[4]} | {m:.0f} | "
                      f"{ld:.0f} | {g:.0f} | {bound} | {100 * frac:.0f} % | {inten:.0f} |")


if __name__ == "__main__":
    main()

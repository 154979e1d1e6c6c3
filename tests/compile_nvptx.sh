#!/usr/bin/env bash
# Assembles the NVIDIA tensor-core kernels offline, as the recipe of shared/gpu/NVIDIA-PTX.md
# does: clang-19 (OpenCL C with inline PTX -> PTX, libclc-19's builtins linked in), then
# ptxas for sm_80 and sm_90. Catches a broken fast path without a GPU: PTX syntax, operand
# constraints, registers and spills (printed per kernel build). The configurations are the
# tensor-core tiles of host/ops/matmul.c (its mma_shapes table) in both operand dtypes and
# every operand layout. Prints "nvptx-compile: N passed, M failed"; exits nonzero on any
# failure.
# Usage: tests/compile_nvptx.sh [CLANG=clang-19]
set -u
clang=${1:-clang-19}
root=$(cd "$(dirname "$0")/.." && pwd)
ptxas=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
libclc=/usr/lib/clc/nvptx64--nvidiacl.bc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
[ -x "$ptxas" ] || { echo "ptxas not found (CUDA toolkit)"; fail=1; }
[ -f "$libclc" ] || { echo "$libclc not found (Debian package libclc-19)"; fail=1; }

# "{128, 256, 32, 2, 4, 2}," rows between "mma_shapes[][6] = {" and "};"
shapes=$(awk '/mma_shapes\[\]\[6\] = \{/ {f = 1; next} f && /^};/ {exit} f' "$root/host/ops/matmul.c" |
  grep -o '{[0-9, ]*}' | tr -d '{} ')
[ -n "$shapes" ] || { echo "no mma_shapes table in host/ops/matmul.c"; fail=$((fail + 1)); }

# build NAME SM OPTIONS...: one clang + ptxas run, its resource line on success
build() {
  local name=$1 sm=$2
  shift 2
  if out=$("$clang" -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -O2 -Wno-linker-warnings \
        -Xclang -target-cpu -Xclang "sm_$sm" -Xclang -target-feature -Xclang +ptx80 \
        -Xclang -finclude-default-header -Xclang -mlink-builtin-bitcode -Xclang "$libclc" \
        -I "$root/cl" -D CLKIT_WARP=32 -D CLKIT_NV_SM="$sm" "$@" -S "$root/cl/matmul.cl" \
        -o "$tmp/k.ptx" 2>&1) &&
     out=$("$ptxas" -arch="sm_$sm" -v "$tmp/k.ptx" -o "$tmp/k.cubin" 2>&1); then
    pass=$((pass + 1))
    echo "sm_$sm $name: $(echo "$out" | grep -A3 "entry function 'matmul_mma'" |
      grep -o '[0-9]* bytes spill stores\|Used [0-9]* registers' | paste -sd ' ')"
  else
    fail=$((fail + 1))
    echo "FAIL sm_$sm $name $*"
    echo "$out" | head -20
  fi
}

for s in $shapes; do
  IFS=, read -r bm bn bk wm wn st <<<"$s"
  tile="-D KERNEL=4 -D BLOCK_M=$bm -D BLOCK_N=$bn -D BLOCK_K=$bk -D WARPS_M=$wm -D WARPS_N=$wn -D STAGES=$st -D GROUP_M=8"
  for sm in 80 90; do
    for layout in "1 0" "1 1" "0 0" "0 1"; do
      read -r ak bn_ <<<"$layout"
      # shellcheck disable=SC2086 # $tile is a list of flags
      build "${bm}x${bn}x${bk} w${wm}x${wn} s$st f16 A_KMAJOR=$ak B_NMAJOR=$bn_" "$sm" $tile \
        -D A_DTYPE=F16 -D B_DTYPE=F16 -D C_DTYPE=F32 -D A_KMAJOR="$ak" -D B_NMAJOR="$bn_"
    done
    # shellcheck disable=SC2086
    build "${bm}x${bn}x${bk} w${wm}x${wn} s$st bf16>bf16" "$sm" $tile -D A_DTYPE=BF16 \
      -D B_DTYPE=BF16 -D C_DTYPE=BF16 -D A_KMAJOR=1 -D B_NMAJOR=1 -D MMA_BF16
  done
done
echo "nvptx-compile: $pass passed, $fail failed"
[ "$fail" -eq 0 ]

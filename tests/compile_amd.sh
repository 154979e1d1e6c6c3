#!/usr/bin/env bash
# Compiles every kernel build the host made during a test run (recorded through
# CLKIT_BUILD_LOG as "file<TAB>options", file a path under cl/) for AMD targets with
# clang-19, adding the macros the host sets on those devices. Builds of another vendor's
# files (cl/nv/: inline PTX, built only for NVIDIA devices, checked by compile_nvptx.sh) are
# not AMD's and are left out, should the log come from such a device. Prints one line per
# failure and a summary line "amd-compile: N passed, M failed"; exits nonzero on any failure.
# Usage: tests/compile_amd.sh BUILD_LOG [CLANG=clang-19]
set -u
log=${1:?usage: compile_amd.sh BUILD_LOG [clang]}
clang=${2:-clang-19}
root=$(cd "$(dirname "$0")/.." && pwd)
# target  wave  extra flags (gfx1100 runs wave32 by default, wave64 when ROCm is told so)
targets=(
  "gfx90a 64"
  "gfx942 64"
  "gfx1030 32"
  "gfx1100 32"
  "gfx1100 64 -mwavefrontsize64"
)
# Plans only a GPU's host makes, which the PoCL runs behind the log never record: layer norm's
# forward with weight and bias in local memory (in 512-lane groups, which AMD's 64 KiB holds).
gpu_plans=$'layernorm.cl\t-D DTYPE_F32 -D TEAM=512 -D ROWS=1 -D ITEMS=8 -D VEC=4 -D LOOP=0 -D BACKWARD=0 -D WB_LOCAL
layernorm.cl\t-D DTYPE_BF16 -D TEAM=512 -D ROWS=1 -D ITEMS=8 -D VEC=8 -D LOOP=0 -D BACKWARD=0 -D WB_LOCAL'
pass=0 fail=0
while IFS=$'\t' read -r file opts; do
  case $file in nv/*) continue ;; esac
  for t in "${targets[@]}"; do
    read -r gfx wave extra <<<"$t"
    # shellcheck disable=SC2086 # options are a list of flags
    if out=$("$clang" -cl-std=CL1.2 -target amdgcn-amd-amdhsa -mcpu="$gfx" $extra -nogpulib \
          -Xclang -finclude-default-header -I "$root/cl" -D CLKIT_WARP="$wave" -D CLKIT_AMD=1 \
          $opts -c "$root/cl/$file" -o /dev/null 2>&1); then
      pass=$((pass + 1))
    else
      fail=$((fail + 1))
      echo "FAIL $gfx wave$wave $file $opts"
      echo "$out" | head -20
    fi
  done
done < <({ cat "$log"; echo "$gpu_plans"; } | sort -u)
echo "amd-compile: $pass passed, $fail failed"
[ "$fail" -eq 0 ]

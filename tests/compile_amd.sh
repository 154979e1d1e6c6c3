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
# One compile: prints "PASS" or "FAIL ..." with the first lines of clang's errors.
compile_one() {
  local file=$1 opts=$2 gfx=$3 wave=$4 extra=$5 out
  # shellcheck disable=SC2086 # options are a list of flags
  if out=$("$clang" -cl-std=CL1.2 -target amdgcn-amd-amdhsa -mcpu="$gfx" $extra -nogpulib \
        -Xclang -finclude-default-header -I "$root/cl" -D CLKIT_WARP="$wave" -D CLKIT_AMD=1 \
        $opts -c "$root/cl/$file" -o /dev/null 2>&1); then
    echo PASS
  else
    printf 'FAIL %s wave%s %s %s\n%s\n' "$gfx" "$wave" "$file" "$opts" "$(echo "$out" | head -20)"
  fi
}
export -f compile_one
export clang root
# Every (build, target) pair, one per line with fields split by the unit separator, compiled
# on every core (CI has two).
jobs() {
  while IFS=$'\t' read -r file opts; do
    case $file in nv/*) continue ;; esac
    # Emulation builds (AMD_EMULATE: software matrix instructions for PoCL) are the CPU's, not
    # AMD's; compile_amd_matrix.sh assembles the AMD matrix-core kernels themselves.
    case $opts in *AMD_EMULATE*) continue ;; esac
    for t in "${targets[@]}"; do
      read -r gfx wave extra <<<"$t"
      printf '%s\037%s\037%s\037%s\037%s\0' "$file" "$opts" "$gfx" "$wave" "${extra:-}"
    done
  done < <({ cat "$log"; echo "$gpu_plans"; } | sort -u)
}
results=$(jobs | xargs -0 -P "$(nproc)" -I{} bash -c 'IFS=$'"'"'\037'"'"' read -r f o g w e <<<"$1"; compile_one "$f" "$o" "$g" "$w" "$e"' _ {})
pass=$(grep -c '^PASS$' <<<"$results")
fail=$(grep -c '^FAIL ' <<<"$results")
grep -v '^PASS$' <<<"$results" | grep -v '^$'
echo "amd-compile: $pass passed, $fail failed"
[ "$fail" -eq 0 ]

#!/usr/bin/env bash
# Assembles the AMD matrix-core kernels (cl/amd/matmul_matrix.cl and cl/amd/attention_matrix.cl
# on cl/amd/matrix.h) offline with clang-19 for the targets the host sends it to, and reads the assembly back: no
# GPU needed. The configurations are the tiles of host/ops/matmul.c: each row of mfma_shapes
# for gfx90a and gfx942 (wave64) with f16, bf16 and f32 operands, each row of wmma_shapes for
# gfx1100 at wave32 and at wave64 (-mwavefrontsize64) with f16 and bf16; into f32 and into the
# operands' dtype (f32 operands give f32 only: check_dtypes); in each operand layout (A_KMAJOR
# 0/1 x B_NMAJOR 0/1) with 16-byte vector loads (VEC_A / VEC_B where build_options'
# operand_vec_of gives them, the strides aligned) and element-wise ones (VEC 1). Only the rows
# the host may build at that wave width are compiled: legal() below mirrors matrix_legal of
# host/ops/matmul.c (a device with 1024-lane work-groups and 64 KiB of local memory); keep the
# two in sync.
#
# libclc-19's amdgcn bitcode is linked in as the builtins (get_local_id, barrier, vload, ...),
# as ROCm links its device libraries: with -nogpulib alone they stay calls to undefined
# functions, and the call ABI's clobbers and dynamic stack make every register count and spill
# below meaningless (256 VGPRs and SGPR spills for tiles that need half).
#
# Each build must hold its instruction (v_mfma_f32_32x32x8{f16,bf16_1k} / 32x32x2f32 on gfx90a,
# v_mfma_f32_32x32x8_{f16,bf16} / 32x32x2_f32 on gfx942, v_wmma_f32_16x16x16_{f16,bf16} on
# gfx1100) exactly FRAGS_M x FRAGS_N x BLOCK_K / INSN_K times (the k loop fully unrolled), use
# no scratch (.private_segment_fixed_size 0) and spill no VGPR (.vgpr_spill_count 0, which
# also counts gfx90a's spills into AGPRs). SGPRs spilled into VGPR lanes (.sgpr_spill_count,
# with no scratch) are shown but pass unless AMD_MATRIX_STRICT=1: they cost lane moves, not
# memory.
#
# One line a build: arch VGPRs and AGPRs, the waves a SIMD those registers allow, and the
# compiler's occupancy. The waves follow LLVM's rule (llvm/lib/Target/AMDGPU/Utils/
# AMDGPUBaseInfo.cpp, LLVM 19: getNumWavesPerEUWithNumVGPRs from getTotalNumVGPRs,
# getVGPRAllocGranule, getMaxWavesPerEU):
#   gfx90a, gfx942 (one file of VGPRs and AGPRs): a wave holds its arch VGPRs rounded up to 4
#     plus its AGPRs (the metadata's .vgpr_count), in granules of 8 of 512 a lane:
#     waves = min(8, 512 / roundup(total, 8)).
#   gfx1100 (and gfx1101, with 1.5x the VGPRs of other gfx11): wave32 1536 VGPRs a lane in
#     granules of 24, wave64 768 in granules of 12: waves = min(16, 1536 / roundup(v, 24)) or
#     min(16, 768 / roundup(v, 12)).
# The compiler's "; Occupancy" is the least of those waves and the ones the work-group's local
# memory allows; it must not exceed the former (a check that the rule above is LLVM's).
#
# By default a subset that CI's two cores compile in about two minutes: for each target and
# legal tile, every layout in both load widths, the 16-bit dtype pairs (f16 -> f32, bf16 ->
# bf16, f16 -> f16, bf16 -> f32) taking turns over them (two layouts each, rotated from tile to
# tile), and for f32 operands the four layouts, vector and element-wise loads alternating.
# Register use follows the tile, the layout and the load width; the dtypes change the
# instruction and the epilogue's conversion. --all compiles every dtype pair in every layout
# (several times as many builds; run it after changing the tables, matrix_legal or the kernel).
# Attention (MFMA only): for gfx90a and gfx942, each dtype and head dim 32 to 256, the forward
# program and the backward's (dQ and dK/dV in one) on the tile host/ops/attention.c's
# matrix_pick takes (afits below mirrors matrix_fits: keep the two in sync); each must hold its
# instruction and use no scratch.
# Builds run in parallel (JOBS, default nproc).
# Prints "amd-matrix: N passed, M failed"; exits nonzero on any failure.
# Usage: tests/compile_amd_matrix.sh [--all] [CLANG=clang-19]
set -u
all=0
[ "${1:-}" = --all ] && { all=1; shift; }
clang=${1:-clang-19}
root=$(cd "$(dirname "$0")/.." && pwd)
libclc=/usr/lib/clc/amdgcn--amdhsa.bc
strict=${AMD_MATRIX_STRICT:-0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export clang root libclc strict tmp
pass=0 fail=0
[ -f "$libclc" ] || { echo "$libclc not found (Debian package libclc-19)"; fail=1; }

# table FILE NAME: the rows of the array NAME ("NAME[..] = {{1, 2}, ..};", over one line or
# more) in FILE, one a line (as in tests/compile_nvptx.sh)
table() {
  awk -v start="$2\\[" 'index($0, "};") && f {print; exit} $0 ~ start && /= \{/ {f = 1} f {print; if (index($0, "};")) exit}' "$1" |
    grep -o '{[0-9, ]*}' | tr -d '{} '
}

pow2() { local v; for v in "$@"; do [ "$v" -gt 0 ] && [ $((v & (v - 1))) = 0 ] || return 1; done; }

# legal BM BN BK WM WN INSN INSN_K WAVE ELEM WMMA: host/ops/matmul.c's matrix_legal (keep the
# two in sync) with max_work_group 1024, 64 KiB of local memory and no emulation; INSN the
# instruction's tile (matrix_insn: 32 MFMA, 16 WMMA), INSN_K its k (matrix_k), ELEM the
# operands' bytes, WMMA 1 for WMMA.
legal() {
  local bm=$1 bn=$2 bk=$3 wm=$4 wn=$5 insn=$6 ik=$7 wave=$8 elem=$9 wmma=${10}
  pow2 "$bm" "$bn" "$bk" "$wm" "$wn" && [ $((bk % ik)) = 0 ] && [ "$bk" -le 64 ] &&
    [ $((bm % (wm * insn))) = 0 ] && [ $((bn % (wn * insn))) = 0 ] || return 1
  local wg=$((wm * wn * wave)) fm=$((bm / wm / insn)) fn=$((bn / wn / insn)) pad=4 acc regs lds
  [ "$elem" = 4 ] && pad=1
  acc=$((fm * fn * insn * insn / wave)) regs=$((acc + wmma * (fm + fn) * 8))
  lds=$((2 * (bm + bn) * (bk + pad) * elem)) # matrix_local_bytes
  [ "$wg" -le 1024 ] && [ $(((bm * bk) % wg)) = 0 ] && [ $(((bn * bk) % wg)) = 0 ] &&
    [ "$acc" -le 64 ] && [ "$regs" -le 96 ] && [ "$lds" -le 65536 ]
}

# build LINE: one build, LINE = "ID<US>LABEL<US>GFX<US>WAVE<US>EXTRA<US>INSN<US>COUNT<US>FLAGS<US>FILE"
# (US the unit separator; EXTRA clang's target flags, INSN the mnemonic expected COUNT times,
# "+" for at least once; FILE under cl/); writes its line of results to $tmp/ID. A program of
# several kernels reports its largest counts.
build() {
  local id label gfx wave extra insn count flags file out s n why="" vgpr agpr total spill sspill
  local priv occ waves regs granule max note=""
  IFS=$'\037' read -r id label gfx wave extra insn count flags file <<<"$1"
  s=$tmp/$id.s
  # shellcheck disable=SC2086 # extra and flags are lists of flags
  if ! out=$("$clang" -cl-std=CL1.2 -target amdgcn-amd-amdhsa -mcpu="$gfx" $extra -nogpulib \
        -Xclang -finclude-default-header -Xclang -mlink-builtin-bitcode -Xclang "$libclc" \
        -Wno-linker-warnings -O3 -I "$root/cl" -D CLKIT_WARP="$wave" -D CLKIT_AMD=1 $flags \
        -S "$root/cl/$file" -o "$s" 2>&1); then
    printf 'FAIL %s wave%s %s: does not compile\n%s\n' "$gfx" "$wave" "$label" "$(echo "$out" | head -20)" >"$tmp/$id"
    return
  fi
  meta() { sed -n "s/^[[:space:]]*\\.$1:[[:space:]]*\\([0-9]*\\)\$/\\1/p" "$s" | sort -n | tail -1; }
  comment() { sed -n "s/^; $1: \\([0-9]*\\)\$/\\1/p" "$s" | sort -n | tail -1; }
  vgpr=$(comment NumVgprs) agpr=$(comment NumAgprs)
  occ=$(sed -n 's/^; Occupancy: \([0-9]*\)$/\1/p' "$s" | sort -n | head -1) # the heaviest kernel's
  total=$(meta vgpr_count) spill=$(meta vgpr_spill_count) sspill=$(meta sgpr_spill_count)
  priv=$(meta private_segment_fixed_size)
  n=$(grep -c "^[[:space:]]*${insn}[[:space:]]" "$s")
  rm -f "$s"
  if [ -z "$vgpr" ] || [ -z "$total" ] || [ -z "$priv" ] || [ -z "$occ" ] || [ -z "$spill" ] || [ -z "$sspill" ]; then
    echo "FAIL $gfx wave$wave $label: no register counts in the assembly" >"$tmp/$id"
    return
  fi
  case $gfx in
    gfx90a | gfx94*) regs=512 granule=8 max=8 ;;
    *) if [ "$wave" = 32 ]; then regs=1536 granule=24; else regs=768 granule=12; fi; max=16 ;;
  esac
  waves=$((regs / ((total + granule - 1) / granule * granule)))
  [ "$waves" -ge 1 ] || waves=1
  [ "$waves" -le "$max" ] || waves=$max
  if [ "$count" = + ]; then [ "$n" -gt 0 ] || why="$why, no $insn"
  elif [ "$n" != "$count" ]; then why="$why, $n $insn where $count were expected"; fi
  [ "$priv" = 0 ] || why="$why, $priv bytes of scratch"
  [ "$spill" = 0 ] || why="$why, $spill VGPRs spilled"
  if [ "$sspill" != 0 ]; then
    note=", $sspill SGPRs spilled to VGPR lanes"
    [ "$strict" != 1 ] || why="$why, $sspill SGPRs spilled (AMD_MATRIX_STRICT)"
  fi
  [ "$occ" -le "$waves" ] || why="$why, the compiler's occupancy $occ exceeds the $waves waves of the rule"
  if [ -n "$why" ]; then
    echo "FAIL $gfx wave$wave $label:${why#,} (VGPR $vgpr AGPR ${agpr:-0})" >"$tmp/$id"
  else
    echo "$gfx wave$wave $label: $n $insn, VGPR $vgpr AGPR ${agpr:-0}, $waves waves/SIMD (occupancy $occ)$note" >"$tmp/$id"
  fi
}
export -f build

# The builds, one a line of $jobs (build's LINE).
jobs=$tmp/jobs
: >"$jobs"
id=0
# target  wave  table  instruction family  target flags
targets=(
  "gfx90a 64 mfma_shapes MATRIX_MFMA32"
  "gfx942 64 mfma_shapes MATRIX_MFMA32"
  "gfx1100 32 wmma_shapes MATRIX_WMMA16"
  "gfx1100 64 wmma_shapes MATRIX_WMMA16 -mwavefrontsize64"
)
# A_KMAJOR B_NMAJOR vector-loads, ordered so that the subset's turns (i % 4 and i + 4) give
# each dtype pair one layout in both load widths
layouts=("1 0 1" "0 1 1" "1 1 1" "0 0 1" "1 0 0" "0 1 0" "1 1 0" "0 0 0")
pairs16=(F16:F32 BF16:BF16 F16:F16 BF16:F32)
for t in "${targets[@]}"; do
  read -r gfx wave tab family extra <<<"$t"
  tiles=$(table "$root/host/ops/matmul.c" "$tab")
  [ -n "$tiles" ] || { echo "no $tab table in host/ops/matmul.c"; fail=$((fail + 1)); continue; }
  if [ "$family" = MATRIX_MFMA32 ]; then insn=32 widths="2 4"; else insn=16 widths=2; fi
  ti=0
  for s in $tiles; do
    ti=$((ti + 1))
    for elem in $widths; do
      IFS=, read -r bm bn bk wm wn <<<"$s"
      if [ "$elem" = 4 ]; then bk=$((bk / 2)) vec=4 pairs=(F32:F32) # matrix_tile: BLOCK_K halves
      else vec=8 pairs=("${pairs16[@]}"); fi
      if [ "$family" = MATRIX_WMMA16 ]; then ik=16; elif [ "$elem" = 4 ]; then ik=2; else ik=8; fi
      name="${bm}x${bn}x${bk} w${wm}x${wn}"
      if ! legal "$bm" "$bn" "$bk" "$wm" "$wn" "$insn" "$ik" "$wave" "$elem" "$([ "$insn" = 16 ] && echo 1 || echo 0)"; then
        echo "skip $gfx wave$wave $name $([ "$elem" = 4 ] && echo f32 || echo 16-bit): not legal (matrix_legal)"
        continue
      fi
      wg=$((wm * wn * wave))
      count=$(((bm / wm / insn) * (bn / wn / insn) * (bk / ik)))
      for i in "${!layouts[@]}"; do
        read -r ak bnm v <<<"${layouts[$i]}"
        for p in "${!pairs[@]}"; do
          if [ "$all" = 0 ]; then # the subset (header)
            if [ "$elem" = 4 ]; then [ "$v" = $(((i % 4 + ti) % 2)) ] || continue
            else [ "$p" = $(((i + ti) % 4)) ] || continue; fi
          fi
          dt=${pairs[$p]%:*} out=${pairs[$p]#*:}
          lo=${dt,,}
          if [ "$family" = MATRIX_WMMA16 ]; then mn=v_wmma_f32_16x16x16_$lo
          elif [ "$gfx" = gfx90a ]; then
            mn=$([ "$dt" = F32 ] && echo v_mfma_f32_32x32x2f32 || echo "v_mfma_f32_32x32x8$lo$([ "$dt" = BF16 ] && echo _1k)")
          else mn=$([ "$dt" = F32 ] && echo v_mfma_f32_32x32x2_f32 || echo "v_mfma_f32_32x32x8_$lo"); fi
          va=1 vb=1
          if [ "$v" = 1 ]; then # operand_vec_of with aligned strides: the tile divides into vectors
            [ $((bm * bk / wg % vec)) = 0 ] && [ $(($([ "$ak" = 1 ] && echo "$bk" || echo "$bm") % vec)) = 0 ] && va=$vec
            [ $((bn * bk / wg % vec)) = 0 ] && [ $(($([ "$bnm" = 1 ] && echo "$bn" || echo "$bk") % vec)) = 0 ] && vb=$vec
          fi
          id=$((id + 1))
          printf '%05d\037%s\037%s\037%s\037%s\037%s\037%s\037%s\037%s\n' "$id" \
            "$name $lo>${out,,} A_KMAJOR=$ak B_NMAJOR=$bnm VEC $va/$vb" "$gfx" "$wave" \
            "${extra:-}" "$mn" "$count" "-D A_DTYPE=$dt -D B_DTYPE=$dt -D C_DTYPE=$out -D BLOCK_M=$bm \
-D BLOCK_N=$bn -D BLOCK_K=$bk -D WAVES_M=$wm -D WAVES_N=$wn -D GROUP_M=8 -D A_KMAJOR=$ak -D B_NMAJOR=$bnm \
-D VEC_A=$va -D VEC_B=$vb -D WAVE=$wave -D $family" amd/matmul_matrix.cl >>"$jobs"
        done
      done
    done
  done
done

# afits KIND D ES BN: host/ops/attention.c's matrix_fits (keep the two in sync): registers of
# held fragments, accumulators and scores within the bound, staged tiles within 64 KiB.
afits() {
  local kind=$1 d=$2 es=$3 bn=$4 held pad=4 rows trans dkdv
  held=$((d * es / 8)); [ "$es" = 4 ] && pad=1
  rows=$((bn * (d + pad) * es)) trans=$((d * (bn + pad) * es)) dkdv=$((2 * (rows + trans) + 8 * bn))
  case $kind in
    FWD) [ $((held + d / 2 + bn / 2)) -le 208 ] && [ $((rows + trans)) -le 65536 ] ;;
    DQ) [ $((2 * held + d / 2 + bn)) -le 256 ] && [ "$dkdv" -le 65536 ] ;;
    *) [ $((2 * held + d + bn)) -le 256 ] && [ "$dkdv" -le 65536 ] ;;
  esac
}
# The first tile of a list ("BM,BN,WAVES ...") that fits KIND, or nothing.
apick() {
  local kind=$1 d=$2 es=$3 t bm bn w
  for t in $4; do
    IFS=, read -r bm bn w <<<"$t"
    afits "$kind" "$d" "$es" "$bn" && { echo "$bm $bn $w"; return; }
  done
}
fwd_tiles=$(table "$root/host/ops/attention.c" matrix_fwd | cut -d, -f1-3)
bwd_tiles=$(table "$root/host/ops/attention.c" matrix_bwd | cut -d, -f1-3)
[ -n "$fwd_tiles" ] && [ -n "$bwd_tiles" ] || { echo "no matrix_fwd / matrix_bwd in host/ops/attention.c"; fail=$((fail + 1)); }
for gfx in gfx90a gfx942; do
  for dt in F16 BF16 F32; do
    es=2; [ "$dt" = F32 ] && es=4
    lo=${dt,,}
    if [ "$gfx" = gfx90a ]; then
      mn=$([ "$dt" = F32 ] && echo v_mfma_f32_32x32x2f32 || echo "v_mfma_f32_32x32x8$lo$([ "$dt" = BF16 ] && echo _1k)")
    else mn=$([ "$dt" = F32 ] && echo v_mfma_f32_32x32x2_f32 || echo "v_mfma_f32_32x32x8_$lo"); fi
    for d in 32 64 128 256; do
      for akind in FWD BWD; do
        if [ "$akind" = FWD ]; then tile=$(apick FWD "$d" "$es" "$fwd_tiles")
        else tile=$(apick DKDV "$d" "$es" "$bwd_tiles"); [ -n "$tile" ] || tile=$(apick DQ "$d" "$es" "$bwd_tiles"); fi
        if [ -z "$tile" ]; then
          echo "skip $gfx attention $akind $lo D$d: no tile fits (matrix_fits)"
          continue
        fi
        read -r bm bn w <<<"$tile"
        id=$((id + 1))
        printf '%05d\037%s\037%s\037%s\037%s\037%s\037%s\037%s\037%s\n' "$id" \
          "attention $akind $lo D$d ${bm}x${bn} w$w" "$gfx" 64 "" "$mn" + \
          "-D DTYPE_$dt -D ATTN_$akind -D HEAD_DIM=$d -D BLOCK_M=$bm -D BLOCK_N=$bn -D WARPS=$w -D WAVE=64 -D MATRIX_MFMA32" \
          amd/attention_matrix.cl >>"$jobs"
      done
    done
  done
done

# shellcheck disable=SC2016 # build's argument, expanded by that shell
tr '\n' '\0' <"$jobs" | xargs -0 -r -P "${JOBS:-$(nproc)}" -n 1 bash -c 'build "$1"' _
sgpr=0
while IFS=$'\037' read -r i label gfx wave _; do
  if [ ! -s "$tmp/$i" ]; then
    echo "FAIL $gfx wave$wave $label: no result"
    fail=$((fail + 1))
    continue
  fi
  cat "$tmp/$i"
  if grep -q '^FAIL' "$tmp/$i"; then fail=$((fail + 1)); else pass=$((pass + 1)); fi
  grep -q 'SGPRs spilled to VGPR lanes' "$tmp/$i" && sgpr=$((sgpr + 1))
done <"$jobs"
[ "$sgpr" = 0 ] || echo "note: $sgpr builds spill SGPRs into VGPR lanes (no scratch; AMD_MATRIX_STRICT=1 fails them)"
echo "amd-matrix: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
